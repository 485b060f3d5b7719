//! Stopping the copier: `Engine::close_all` resets every test connection, then unregisters.

use super::*;

const RA: TcpFlags = TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0);

fn from_port(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::new(client().ip(), port))
}

fn tuple(port: u16) -> FourTuple {
    FourTuple::new(from_port(port).unwrap(), target())
}

#[test]
fn close_all_resets_every_connection_then_unregisters() {
    let mut h = H::default();
    // 1001: established, "req" sent, acked up to 2 of its 3 bytes.
    h.syn(Seg {
        src: from_port(1001),
        ..SYN
    });
    h.cap(Seg {
        src: from_port(1001),
        ..data(0, 0, b"req")
    });
    let _ = h.out();
    h.rec_to(tuple(1001), SYN_ACK);
    let _ = h.out();
    h.rec_to(tuple(1001), resp(0, 2, 0));
    // 1002: our SYN sent, no SYN-ACK yet.
    h.syn(Seg {
        src: from_port(1002),
        ..SYN
    });
    let _ = h.out();
    // 1003: closed gracefully both ways, lingering.
    h.syn(Seg {
        src: from_port(1003),
        ..SYN
    });
    let _ = h.out();
    h.rec_to(tuple(1003), SYN_ACK);
    h.cap(Seg {
        src: from_port(1003),
        seq: CISN + 1,
        ack: OISN + 1,
        flags: TcpFlags(TcpFlags::FIN.0 | A.0),
        ..BASE
    });
    let _ = h.out();
    h.rec_to(
        tuple(1003),
        Seg {
            seq: TISN + 1,
            ack: CISN + 2,
            flags: TcpFlags(TcpFlags::FIN.0 | A.0),
            ..BASE
        },
    );
    let _ = h.out();
    assert_eq!(h.e.stats().sessions_completed, 1);
    // 1004: its Register not taken yet (nothing sent).
    h.syn(Seg {
        src: from_port(1004),
        ..SYN
    });
    // 1005: caught mid-stream, waiting to synchronise.
    h.cap(Seg {
        src: from_port(1005),
        ..data(50, 0, b"middle")
    });
    assert_eq!(h.e.session_count(), 5);

    h.at(10);
    h.e.close_all(h.now);
    // The RSTs come first; only the tuple that never sent anything is unregistered at once
    // (after its pending Register).
    let ctl = h.control();
    assert_eq!(
        ctl,
        vec![
            RegEvent::Register(tuple(1004)),
            RegEvent::Unregister(tuple(1004))
        ]
    );
    let out = h.packets();
    let mut v: Vec<(u16, TcpFlags, u32)> = out
        .iter()
        .map(|o| (o.tuple.client.port(), o.flags, o.seq))
        .collect();
    v.sort_by_key(|x| (x.0, x.2));
    assert_eq!(
        v,
        vec![
            (1001, RA, CISN + 3), // at what it acked
            (1001, RA, CISN + 4), // after all we sent
            (1002, TcpFlags::RST, CISN + 1),
            (1003, RA, CISN + 2),
        ]
    );
    let mut ctl = h.control();
    ctl.sort_by_key(|e| match e {
        RegEvent::Register(t) | RegEvent::Unregister(t) => t.client.port(),
    });
    assert_eq!(
        ctl,
        [1001, 1002, 1003]
            .map(|p| RegEvent::Unregister(tuple(p)))
            .to_vec()
    );
    let s = h.e.stats();
    assert_eq!(
        (
            s.sessions_failed.shutdown,
            s.sessions_completed,
            s.sessions_active
        ),
        (3, 1, 0),
        "1001, 1002, 1004"
    );
    assert_eq!(s.sessions_failed.total(), 3);
    assert_eq!(
        (
            h.e.session_count(),
            h.e.registered().count(),
            h.e.memory_used()
        ),
        (0, 0, 0)
    );
    assert_eq!(h.e.poll_timeout(), None);
    assert!(h.packets().is_empty());
}

#[test]
fn close_all_with_nothing_open_does_nothing() {
    let mut h = H::default();
    h.e.close_all(h.now);
    assert!(h.out().is_empty());
    assert!(h.control().is_empty());
    assert_eq!(h.e.stats().sessions_failed.total(), 0);
}

#[test]
fn close_all_resets_connections_still_lingering_after_our_reset() {
    let mut h = H::default();
    h.establish();
    h.cap(Seg {
        seq: CISN + 1,
        flags: TcpFlags::RST,
        ..BASE
    });
    let out = h.out();
    assert_eq!((out.len(), out[0].flags), (1, RA));
    h.e.close_all(h.now);
    let out = h.packets();
    assert_eq!(
        (out.len(), out[0].flags, out[0].seq),
        (1, RA, CISN + 1),
        "again, in case it was lost"
    );
    assert_eq!(h.control(), vec![RegEvent::Unregister(test_tuple())]);
    assert_eq!(
        h.e.stats().sessions_failed.shutdown,
        0,
        "that session had completed"
    );
}

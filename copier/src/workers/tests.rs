//! Tests of the workers and the records' way to them.

use super::*;
use common::wire::{TcpBuilder, TcpFlags};

fn t(c: u16) -> FourTuple {
    FourTuple::new(
        format!("198.19.0.1:{c}").parse().unwrap(),
        "198.18.2.2:80".parse().unwrap(),
    )
}

/// A record of the test server's answer on `tuple`.
fn record(tuple: FourTuple) -> Record {
    record_with(tuple, TcpFlags::ACK, b"HTTP/1.1 200 OK\r\n")
}

#[test]
fn routes_follow_each_workers_events() {
    let r = Routes::new();
    r.apply(0, &[RegEvent::Register(t(1)), RegEvent::Register(t(2))]);
    r.apply(1, &[RegEvent::Register(t(3))]);
    assert_eq!(
        (r.owner(&t(1)), r.owner(&t(2)), r.owner(&t(3))),
        (Some(0), Some(0), Some(1))
    );
    assert_eq!(r.owner(&t(4)), None);
    // A worker cannot remove another's route; its own goes.
    r.apply(1, &[RegEvent::Unregister(t(1))]);
    assert_eq!(r.owner(&t(1)), Some(0));
    r.apply(0, &[RegEvent::Unregister(t(1)), RegEvent::Register(t(5))]);
    assert_eq!((r.owner(&t(1)), r.owner(&t(5))), (None, Some(0)));
    assert_eq!(r.len(), 3);
    // Events of one batch apply in order.
    r.apply(1, &[RegEvent::Register(t(6)), RegEvent::Unregister(t(6))]);
    assert_eq!(r.owner(&t(6)), None);
    // After a panic a worker's routes go, the others' stay.
    let mut gone = r.remove_worker(0);
    gone.sort();
    assert_eq!(gone, vec![t(2), t(5)]);
    assert_eq!(r.owner(&t(3)), Some(1));
    assert_eq!(r.len(), 1);
}

#[test]
fn many_routes_over_every_shard() {
    let r = Routes::new();
    let evs: Vec<RegEvent> = (0..5000).map(|i| RegEvent::Register(t(i))).collect();
    r.apply(1, &evs[..2500]);
    r.apply(0, &evs[2500..]);
    assert_eq!(r.len(), 5000);
    for i in 0..5000u16 {
        assert_eq!(r.owner(&t(i)), Some(u16::from(i < 2500)));
    }
    let used = r
        .shards
        .iter()
        .filter(|s| !s.lock().unwrap().is_empty())
        .count();
    assert_eq!(used, SHARDS, "the hash spreads tuples over every shard");
}

#[test]
fn records_go_to_the_owner_and_the_rest_is_counted() {
    let r = Routes::new();
    r.apply(0, &[RegEvent::Register(t(1))]);
    r.apply(1, &[RegEvent::Register(t(2)), RegEvent::Register(t(3))]);
    let garbage = Record {
        orig_len: 3,
        headers: vec![0x45, 0, 0],
        payload: Vec::new(),
        stamp: 0,
    };
    let batch = vec![
        record(t(2)),
        record(t(1)),
        record(t(9)),
        garbage,
        record(t(3)),
        record(t(1)),
    ];
    let mut out = vec![Vec::new(), Vec::new()];
    let lost = route_records(&r, batch, &mut out);
    assert_eq!(
        lost,
        Unroutable {
            malformed: 1,
            unknown: 1
        }
    );
    let tuples = |v: &[Record]| v.iter().map(|x| x.tuple().unwrap()).collect::<Vec<_>>();
    assert_eq!(tuples(&out[0]), vec![t(1), t(1)]);
    assert_eq!(
        tuples(&out[1]),
        vec![t(2), t(3)],
        "order kept within a worker"
    );
    // A route naming a worker beyond the router's is not followed.
    r.apply(7, &[RegEvent::Register(t(4))]);
    let mut out = vec![Vec::new(), Vec::new()];
    assert_eq!(route_records(&r, vec![record(t(4))], &mut out).unknown, 1);
}

#[tokio::test]
async fn router_delivers_per_worker_and_wakes_only_them() {
    let routes = Arc::new(Routes::new());
    routes.apply(1, &[RegEvent::Register(t(2))]);
    let mut rxs = Vec::new();
    let mut inboxes = Vec::new();
    for _ in 0..2 {
        let (tx, rx) = mpsc::channel(4);
        rxs.push(rx);
        let wake = Wake::new().unwrap();
        // Eager: every record wakes at once (the lazy path has its own test).
        wake.set_eager(true);
        inboxes.push(Inbox {
            records: tx,
            wake: Arc::new(wake),
        });
    }
    let router = RecordRouter::new(inboxes.clone(), routes.clone());
    assert_eq!(router.workers(), 2);
    let at = Instant::now();
    router
        .deliver(at, vec![record(t(2)), record(t(5)), record(t(2))])
        .await
        .unwrap();
    assert!(
        matches!(rxs[1].try_recv().unwrap(), Inbound::Records { at: a, records: v } if v.len() == 2 && a == at)
    );
    assert!(rxs[0].try_recv().is_err(), "nothing for worker 0");
    // Bit 0: the eventfd; bit 1: the record timer.
    let ready =
        |i: usize| crate::sys::poll_readable(&inboxes[i].wake.fds(), Duration::ZERO).unwrap();
    assert_eq!((ready(0), ready(1)), (0, 1));
    router.wake_all();
    assert_eq!(ready(0), 1);
    // Verdicts go to the owner of their tuple; unowned ones are dropped; they wake the
    // engine at once even when it is not eager.
    for i in &inboxes {
        i.wake.set_eager(false);
        i.wake.taking();
    }
    router
        .deliver_verdicts(
            3,
            vec![
                (t(2), RegVerdict::Accepted),
                (t(5), RegVerdict::PortNotGuarded),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        rxs[1].try_recv().unwrap(),
        Inbound::Verdicts {
            from: 3,
            results: vec![(t(2), RegVerdict::Accepted)]
        }
    );
    assert!(rxs[0].try_recv().is_err(), "nothing for worker 0");
    assert_eq!((ready(0), ready(1)), (0, 1));

    // One worker: batches pass whole, unparsed.
    let (tx, mut rx) = mpsc::channel(1);
    let one = RecordRouter::new(
        vec![Inbox {
            records: tx,
            wake: Arc::new(Wake::new().unwrap()),
        }],
        Arc::new(Routes::new()),
    );
    let odd = Record {
        orig_len: 1,
        headers: vec![1],
        payload: Vec::new(),
        stamp: 0,
    };
    one.deliver(at, vec![odd.clone()]).await.unwrap();
    assert_eq!(
        rx.try_recv().unwrap(),
        Inbound::Records {
            at,
            records: vec![odd]
        }
    );
    drop(rx);
    assert_eq!(one.deliver(at, vec![]).await, Err(InboxClosed));
}

/// A record of `tuple` with TCP `flags` and `payload`.
fn record_with(tuple: FourTuple, flags: TcpFlags, payload: &[u8]) -> Record {
    let mut pkt = Vec::new();
    TcpBuilder {
        src: tuple.server.into(),
        dst: tuple.client.into(),
        seq: common::seq::SeqNum(1),
        ack: common::seq::SeqNum(2),
        flags,
        window: 100,
        options: &[],
        payload,
        ttl: 64,
        ident: 0,
    }
    .emit(&mut pkt);
    let (got, r) = Record::from_packet(&pkt, 0).unwrap();
    assert_eq!(got, tuple);
    r
}

#[test]
fn only_opening_closing_mid_write_and_broken_records_are_urgent() {
    let v6 = FourTuple::new(
        "[2001:db8::1]:4000".parse().unwrap(),
        "[2001:db8::2]:80".parse().unwrap(),
    );
    for tuple in [t(1), v6] {
        assert!(
            !record_with(tuple, TcpFlags::ACK, b"").urgent(),
            "a bare ACK waits"
        );
        assert!(
            !record_with(tuple, TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK").urgent(),
            "an answer waits"
        );
        assert!(
            record_with(tuple, TcpFlags::ACK, b"HTTP/1.1 200 OK").urgent(),
            "data without PSH: more of the write follows"
        );
        for f in [
            TcpFlags::SYN | TcpFlags::ACK,
            TcpFlags::FIN | TcpFlags::ACK,
            TcpFlags::RST,
            TcpFlags::RST | TcpFlags::ACK,
        ] {
            assert!(record_with(tuple, f, b"").urgent(), "{f:?} wakes at once");
            assert!(
                record_with(tuple, f, b"").opens_or_ends(),
                "{f:?} opens or ends"
            );
            assert!(
                !record_with(tuple, f, b"").urgent_for_flow(),
                "{f:?}: no answer's flow waits on it (an intercept may hold it for --open-wait)"
            );
        }
        assert!(
            record_with(tuple, TcpFlags::ACK, b"HTTP/1.1 200 OK").urgent_for_flow(),
            "data without PSH: the rest of the write may wait on it"
        );
        assert!(
            record_with(tuple, TcpFlags::FIN | TcpFlags::ACK, b"HTTP/1.1 200 OK").urgent_for_flow(),
            "a FIN in the middle of a write counts for its data too"
        );
        assert!(
            !record_with(tuple, TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK")
                .urgent_for_flow(),
            "the end of a small answer"
        );
        assert!(
            !record_with(tuple, TcpFlags::ACK, b"HTTP/1.1 200 OK").opens_or_ends(),
            "data opens and ends nothing"
        );
    }
    let cut = |n: usize| Record {
        orig_len: 40,
        headers: record_with(t(1), TcpFlags::ACK, b"").headers[..n].to_vec(),
        payload: Vec::new(),
        stamp: 0,
    };
    assert!(!cut(34).urgent(), "the flags byte is all it needs");
    let mid_write = Record {
        orig_len: 1500,
        ..cut(34)
    };
    assert!(
        mid_write.urgent() && mid_write.urgent_for_flow(),
        "the IP length says data follows the headers, and no PSH"
    );
    let big = vec![b'x'; common::proto::BULK_BYTES];
    assert!(
        !record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, &big).urgent(),
        "the end of a write of BULK_BYTES waits"
    );
    let bigger = vec![b'x'; common::proto::BULK_BYTES + 1];
    assert!(
        record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, &bigger).urgent(),
        "a larger one is part of a large answer"
    );
    assert!(
        !record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, &bigger).opens_or_ends()
            && record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, &bigger).urgent_for_flow(),
        "and opens or ends nothing: urgent for the flow"
    );
    assert!(
        cut(20).opens_or_ends(),
        "headers that do not parse count as such"
    );
    for n in [0, 1, 20, 33] {
        assert!(cut(n).urgent(), "{n} bytes: the engine counts it, at once");
        assert!(
            !cut(n).urgent_for_flow(),
            "{n} bytes: no flow to speak of (it counts as opening or ending)"
        );
    }
}

#[test]
fn a_turn_presses_only_for_records_urgent_for_what_they_carry() {
    let bigger = vec![b'x'; common::proto::BULK_BYTES + 1];
    let syn_ack = record_with(t(1), TcpFlags::SYN | TcpFlags::ACK, b"");
    let fin = record_with(t(1), TcpFlags::FIN | TcpFlags::ACK, b"");
    let answer = record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK");
    let mid_write = record_with(t(1), TcpFlags::ACK, b"HTTP/1.1 200 OK");
    let bulk = record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, &bigger);
    let mut seen = TurnSeen::default();
    for r in [&syn_ack, &fin, &answer] {
        seen.note(r);
    }
    assert_eq!(seen.records, 3);
    assert!(seen.urgent && seen.opens_or_ends, "a handshake and a close");
    assert!(
        !seen.pressing,
        "they may wait --open-wait: nothing but their own connection waits on them"
    );
    for r in [&mid_write, &bulk] {
        let mut seen = TurnSeen::default();
        seen.note(&answer);
        seen.note(r);
        assert!(seen.urgent && seen.pressing && !seen.opens_or_ends);
    }
}

#[test]
fn intercepts_may_hold_records_only_while_no_engine_is_eager() {
    let calm = Hold {
        record: 2000,
        open: 1000,
    };
    let h = InterceptHold::new(Duration::from_millis(2), Duration::from_millis(1));
    let mut rx = h.watch();
    assert_eq!(*rx.borrow(), calm, "calm at the start");
    h.engine_eager(true);
    assert!(rx.has_changed().unwrap());
    assert_eq!(
        *rx.borrow_and_update(),
        Hold::default(),
        "one eager engine: records go at once"
    );
    h.engine_eager(true);
    h.engine_eager(false);
    assert!(
        !rx.has_changed().unwrap(),
        "another engine still eager: no change to tell"
    );
    h.engine_eager(false);
    assert_eq!(*rx.borrow_and_update(), calm, "all calm again");
    assert_eq!(
        *InterceptHold::new(Duration::ZERO, Duration::from_millis(3))
            .watch()
            .borrow(),
        Hold::default(),
        "--record-wait 0: never, whatever --open-wait says"
    );
    assert_eq!(
        *InterceptHold::new(Duration::from_secs(1), Duration::from_secs(1))
            .watch()
            .borrow(),
        Hold {
            record: 20_000,
            open: 20_000
        },
        "capped at MAX_RECORD_WAIT"
    );
    assert_eq!(
        InterceptHold::new(Duration::from_millis(20), Duration::ZERO)
            .watch()
            .borrow()
            .open,
        0,
        "--open-wait 0: a connection's start and end go at once"
    );
}

#[test]
fn the_wake_decision() {
    assert!(
        !wake_now(false, false, 1),
        "a plain record waits for the engine's next turn"
    );
    assert!(!wake_now(false, false, PENDING_WAKE - 1));
    assert!(
        wake_now(false, false, PENDING_WAKE),
        "a full-ish inbox wakes it"
    );
    assert!(wake_now(false, true, 1), "SYN, FIN, RST wake it");
    assert!(
        wake_now(true, false, 1),
        "an eager engine wants every record"
    );
}

#[test]
fn records_released_units_by_themselves_makes_the_engine_eager_for_a_while() {
    let t0 = Instant::now();
    let mut e = Eagerness::default();
    let alone = TurnSeen {
        records: 2,
        held_units: 1,
        ..TurnSeen::default()
    };
    assert!(!e.eager(t0));
    // Not evidence: nothing held back was sent.
    assert!(
        !e.turn(
            t0,
            TurnSeen {
                held_units: 0,
                ..alone
            }
        ),
        "records that released nothing"
    );
    assert!(
        !e.turn(
            t0,
            TurnSeen {
                urgent: true,
                opens_or_ends: true,
                ..alone
            }
        ),
        "a SYN-ACK releases requests, and wakes anyway"
    );
    assert!(!e.turn(
        t0,
        TurnSeen {
            records: 0,
            ..alone
        }
    ));
    // Evidence: a session waits on the test server's answers.
    assert!(
        e.turn(
            t0,
            TurnSeen {
                urgent: true,
                ..alone
            }
        ),
        "records of a large answer released held units"
    );
    let mut e = Eagerness::default();
    assert!(e.turn(t0, alone));
    assert!(e.turn(t0 + EAGER_HOLD / 2, TurnSeen::default()), "holds");
    assert!(e.turn(t0 + EAGER_HOLD / 2, alone), "renewed");
    assert!(e.eager(t0 + EAGER_HOLD));
    assert!(!e.eager(t0 + EAGER_HOLD * 3 / 2), "and ends");
}

#[tokio::test]
async fn an_inbox_filling_with_small_batches_wakes_the_engine() {
    let (tx, _rx) = mpsc::channel(8);
    let wake = Arc::new(Wake::new().unwrap());
    let router = RecordRouter::new(
        vec![Inbox {
            records: tx,
            wake: wake.clone(),
        }],
        Arc::new(Routes::new()),
    );
    let answer = || record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, b"x");
    let at = Instant::now();
    for _ in 0..2 {
        router.deliver(at, vec![answer()]).await.unwrap();
    }
    assert_eq!(
        crate::sys::poll_readable(&wake.fds()[..1], Duration::ZERO).unwrap(),
        0,
        "2 of 8: waits"
    );
    router.deliver(at, vec![answer()]).await.unwrap();
    assert_eq!(
        crate::sys::poll_readable(&wake.fds()[..1], Duration::ZERO).unwrap(),
        1,
        "over a quarter full: now"
    );
}

#[tokio::test]
async fn with_no_record_wait_every_record_wakes_the_engine_at_once() {
    let (tx, _rx) = mpsc::channel(PENDING_WAKE + 8);
    let wake = Arc::new(Wake::with_delay(Duration::ZERO).unwrap());
    let router = RecordRouter::new(
        vec![Inbox {
            records: tx,
            wake: wake.clone(),
        }],
        Arc::new(Routes::new()),
    );
    let answer = || record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK");
    router
        .deliver(Instant::now(), vec![answer()])
        .await
        .unwrap();
    assert_eq!(
        crate::sys::poll_readable(&wake.fds(), Duration::ZERO).unwrap(),
        1,
        "the eventfd, not the timer"
    );
    wake.taking();
    router
        .deliver(Instant::now(), vec![answer()])
        .await
        .unwrap();
    assert_eq!(
        crate::sys::poll_readable(&wake.fds(), Duration::ZERO).unwrap(),
        1
    );
}

#[tokio::test]
async fn a_record_that_can_wait_arms_the_timer_once_and_the_engine_disarms_it() {
    let (tx, mut rx) = mpsc::channel(PENDING_WAKE + 8);
    let wake = Arc::new(Wake::new().unwrap());
    let router = RecordRouter::new(
        vec![Inbox {
            records: tx,
            wake: wake.clone(),
        }],
        Arc::new(Routes::new()),
    );
    let ready = |d: Duration| crate::sys::poll_readable(&wake.fds(), d).unwrap();
    let answer = || record_with(t(1), TcpFlags::ACK | TcpFlags::PSH, b"HTTP/1.1 200 OK");
    let at = Instant::now();
    router.deliver(at, vec![answer()]).await.unwrap();
    router.deliver(at, vec![answer()]).await.unwrap();
    assert_eq!(ready(Duration::ZERO), 0, "no wake-up at once");
    let t0 = Instant::now();
    assert_eq!(ready(Duration::from_secs(1)), 2, "the timer expires");
    let waited = t0.elapsed();
    assert!(
        waited <= RECORD_DELAY + Duration::from_millis(50),
        "{waited:?}"
    );
    // The engine's turn: takes the inbox, the timer no longer readable.
    wake.timer_fired();
    wake.taking();
    assert_eq!(ready(Duration::ZERO), 0);
    assert!(matches!(rx.try_recv(), Ok(Inbound::Records { .. })));
    assert!(matches!(rx.try_recv(), Ok(Inbound::Records { .. })));
    // Taken before it expired: disarmed, no late wake-up.
    router.deliver(at, vec![answer()]).await.unwrap();
    wake.taking();
    assert_eq!(ready(RECORD_DELAY * 3), 0, "disarmed by the engine's turn");
    // An urgent record wakes at once; so do many records that can wait.
    router
        .deliver(
            at,
            vec![
                answer(),
                record_with(t(1), TcpFlags::FIN | TcpFlags::ACK, b""),
            ],
        )
        .await
        .unwrap();
    assert_eq!(ready(Duration::ZERO) & 1, 1);
    wake.taking();
    router
        .deliver(at, (0..PENDING_WAKE).map(|_| answer()).collect())
        .await
        .unwrap();
    assert_eq!(
        ready(Duration::ZERO) & 1,
        1,
        "a full-ish inbox wakes at once"
    );
    wake.taking();
    // Eager: every record at once.
    wake.set_eager(true);
    router.deliver(at, vec![answer()]).await.unwrap();
    assert_eq!(ready(Duration::ZERO), 1);
}

#[test]
fn a_poke_is_taken_by_the_next_turn_and_only_a_poke_is_read() {
    let wake = Wake::new().unwrap();
    let readable = |w: &Wake| crate::sys::poll_readable(&w.fds()[..1], Duration::ZERO).unwrap();
    wake.taking();
    assert_eq!(readable(&wake), 0, "nothing poked: nothing to read");
    wake.notify();
    wake.notify();
    assert_eq!(readable(&wake), 1);
    wake.taking();
    assert_eq!(readable(&wake), 0, "both pokes taken by one turn");
    wake.notify();
    assert_eq!(readable(&wake), 1, "a poke after the turn wakes the next");
    wake.taking();
    assert_eq!(readable(&wake), 0);
}

#[test]
fn records_that_open_the_test_servers_window_for_waiting_bytes_make_the_engine_eager() {
    let t0 = Instant::now();
    let mut e = Eagerness::default();
    let acks = TurnSeen {
        records: 3,
        ..TurnSeen::default()
    };
    assert!(!e.turn(t0, acks), "ACKs that released nothing");
    let released = TurnSeen {
        window_releases: 1,
        ..acks
    };
    assert!(e.turn(t0, released), "an upload outran the window");
    let mut e = Eagerness::default();
    assert!(
        e.turn(
            t0,
            TurnSeen {
                opens_or_ends: true,
                urgent: true,
                ..released
            }
        ),
        "even in a turn where a connection opened or ended"
    );
    assert!(e.eager(t0 + EAGER_HOLD / 2));
    assert!(!e.eager(t0 + EAGER_HOLD * 3 / 2));
}

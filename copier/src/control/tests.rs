use std::collections::HashSet;

use super::registry::{BROADCAST_CAPACITY, TUPLES_PER_MESSAGE};
use super::*;
use crate::workers::{Inbound, Inbox, Routes, Wake};
use common::proto::{Record, RegVerdict};
use tokio::sync::mpsc;

fn t(c: u16) -> FourTuple {
    FourTuple::new(
        format!("198.18.0.1:{c}").parse().unwrap(),
        "198.18.1.2:80".parse().unwrap(),
    )
}

#[test]
fn messages_keep_order_and_group_runs() {
    let evs = [
        RegEvent::Register(t(1)),
        RegEvent::Register(t(2)),
        RegEvent::Unregister(t(1)),
        RegEvent::Register(t(3)),
    ];
    let mut out = Vec::new();
    messages_for(&evs, None, &mut out);
    assert_eq!(
        out,
        vec![
            Message::Register {
                tuples: vec![t(1), t(2)]
            },
            Message::Unregister { tuples: vec![t(1)] },
            Message::Register { tuples: vec![t(3)] },
        ]
    );
    let many: Vec<RegEvent> = (0..TUPLES_PER_MESSAGE as u16 + 5)
        .map(|i| RegEvent::Register(t(i)))
        .collect();
    out.clear();
    messages_for(&many, None, &mut out);
    assert_eq!(out.len(), 2);
}

fn links() -> (Links, mpsc::Receiver<Inbound>) {
    let (tx, rx) = mpsc::channel(4);
    let links = Links {
        registry: Arc::new(Registry::new()),
        records: RecordRouter::new(
            vec![Inbox {
                records: tx,
                wake: Arc::new(Wake::new().unwrap()),
            }],
            Arc::new(Routes::new()),
        ),
        connected: Arc::new(AtomicUsize::new(0)),
        desk: None,
        hold: Arc::new(crate::workers::InterceptHold::new(
            Duration::ZERO,
            Duration::ZERO,
        )),
        gens: Arc::new(LinkGens::new()),
    };
    (links, rx)
}

/// Read the next Register/Unregister, answering Pings on the way.
async fn next_reg<S: AsyncRead + AsyncWrite + Unpin>(est: &mut Established<S>) -> Message {
    loop {
        match est
            .reader
            .read_message()
            .await
            .unwrap()
            .expect("client closed")
        {
            Message::Ping { token } => est
                .writer
                .write_message(&Message::Pong { token, clock: 0 })
                .await
                .unwrap(),
            // After the snapshot (the link test checks where).
            Message::Synced => {}
            m @ (Message::Register { .. }
            | Message::Unregister { .. }
            | Message::RegisterPayload { .. }
            | Message::RecordWait { .. }
            | Message::OpenWait { .. }) => return m,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn link_registers_everything_forwards_changes_and_records() {
    use common::proto::io::{client_handshake, server_handshake};
    let (links, mut records) = links();
    links
        .registry
        .apply(&[RegEvent::Register(t(1)), RegEvent::Register(t(2))]);
    let mut cfg = ClientConfig::new(
        "fake:1".parse().unwrap(),
        Some(Arc::from(&b"s3cret"[..])),
        1,
    );
    cfg.ping_interval = Duration::from_millis(100);
    cfg.id = 7;
    let (a, b) = tokio::io::duplex(64 * 1024);
    let client = async {
        let est = client_handshake(a, Some(b"s3cret"), "copier test")
            .await
            .unwrap();
        serve(&cfg, &links, est).await
    };
    let fake = async {
        let mut est = server_handshake(b, Some(b"s3cret"), "fake intercept")
            .await
            .unwrap();
        let Message::Register { mut tuples } = next_reg(&mut est).await else {
            panic!("snapshot first")
        };
        tuples.sort();
        assert_eq!(
            tuples,
            vec![t(1), t(2)],
            "a (re)connected intercept learns every live session"
        );
        assert_eq!(
            est.reader.read_message().await.unwrap(),
            Some(Message::Synced),
            "then it is told the snapshot is complete (FEATURE_RESTART)"
        );
        for _ in 0..100 {
            if links.connected.load(Ordering::SeqCst) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(links.connected.load(Ordering::SeqCst), 1);

        links
            .registry
            .apply(&[RegEvent::Register(t(3)), RegEvent::Unregister(t(1))]);
        assert_eq!(
            next_reg(&mut est).await,
            Message::Register { tuples: vec![t(3)] }
        );
        assert_eq!(
            next_reg(&mut est).await,
            Message::Unregister { tuples: vec![t(1)] }
        );

        let rec = Record {
            orig_len: 40,
            headers: vec![0x45; 40],
            payload: Vec::new(),
            stamp: 0,
        };
        est.writer
            .write_message(&Message::Records {
                records: vec![rec.clone(), rec.clone()],
            })
            .await
            .unwrap();
        let sent_at = std::time::Instant::now();
        // The engines learned first that this link (generation 1 of intercept 7) is up.
        assert_eq!(
            records.recv().await.unwrap(),
            Inbound::Link {
                from: 7,
                gen: 1,
                event: LinkEvent::Up
            }
        );
        let Inbound::Records { at, records: got } = records.recv().await.unwrap() else {
            panic!("records expected")
        };
        assert_eq!(got, vec![rec.clone(), rec]);
        assert!(
            at >= sent_at && at <= std::time::Instant::now(),
            "stamped when read"
        );

        // The intercept's verdicts reach the engine, named by the link's id.
        let results = vec![
            (t(3), RegVerdict::Accepted),
            (t(2), RegVerdict::PortNotGuarded),
        ];
        est.writer
            .write_message(&Message::Registered {
                results: results.clone(),
            })
            .await
            .unwrap();
        assert_eq!(
            records.recv().await.unwrap(),
            Inbound::Verdicts { from: 7, results }
        );

        // Stay silent (no Pong) past three ping intervals: the client must give up on us.
        tokio::time::sleep(Duration::from_millis(600)).await;
        est
    };
    let (result, _est) = tokio::join!(client, fake);
    assert!(matches!(result, Err(LinkError::Silent(_))), "{result:?}");
    assert_eq!(
        links.connected.load(Ordering::SeqCst),
        0,
        "the link no longer counts as up"
    );
}

/// An intercept whose clock is 5 s ahead: the Pongs' clock gives the offset, and the stamps
/// of its records reach the engine on the copier's clock; before the first Pong they are
/// unknown (0).
#[tokio::test]
async fn record_stamps_reach_the_engine_on_the_copiers_clock() {
    use common::proto::io::{client_handshake, server_handshake};
    const AHEAD: u64 = 5_000_000_000;
    let (links, mut inbox) = links();
    let mut cfg = ClientConfig::new(
        "fake:1".parse().unwrap(),
        Some(Arc::from(&b"s3cret"[..])),
        1,
    );
    cfg.ping_interval = Duration::from_millis(200);
    let (a, b) = tokio::io::duplex(64 * 1024);
    let client = async {
        let est = client_handshake(a, Some(b"s3cret"), "copier test")
            .await
            .unwrap();
        serve(&cfg, &links, est).await
    };
    let fake = async {
        let mut est = server_handshake(b, Some(b"s3cret"), "fake intercept")
            .await
            .unwrap();
        let rec = |stamp| Record {
            orig_len: 40,
            headers: vec![0x45; 40],
            payload: Vec::new(),
            stamp,
        };
        let mut pongs = 0;
        let mut before = false;
        while pongs < 3 {
            match est.reader.read_message().await.unwrap().expect("open") {
                Message::Ping { token } => {
                    if !before {
                        // the first Ping is not answered yet: a stamp now is unknown
                        let r = vec![rec(crate::clock::wall_ns() + AHEAD)];
                        est.writer
                            .write_message(&Message::Records { records: r })
                            .await
                            .unwrap();
                        before = true;
                    }
                    let clock = crate::clock::wall_ns() + AHEAD;
                    est.writer
                        .write_message(&Message::Pong { token, clock })
                        .await
                        .unwrap();
                    pongs += 1;
                }
                Message::Register { .. } | Message::Synced => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        // the client reads in order: its third Pong is in before these records
        let ours = crate::clock::wall_ns();
        let r = vec![rec(ours + AHEAD), rec(0)];
        est.writer
            .write_message(&Message::Records { records: r })
            .await
            .unwrap();
        let mut got = Vec::new();
        while got.len() < 3 {
            if let Inbound::Records { records, .. } = inbox.recv().await.unwrap() {
                got.extend(records.into_iter().map(|r| r.stamp));
            }
        }
        assert_eq!(got[0], 0, "before the first Pong: unknown");
        assert!(
            got[1].abs_diff(ours) < 50_000_000,
            "{} vs {ours}: on our clock",
            got[1]
        );
        assert_eq!(got[2], 0, "an unstamped record stays so");
        est
    };
    tokio::select! {
        r = client => panic!("the client ended: {r:?}"),
        _ = fake => {}
    }
}

#[tokio::test]
async fn with_one_worker_the_engine_reads_the_link_and_ends_it_with_its_reason() {
    use crate::link::LinkDesk;
    use common::proto::io::{client_handshake, server_handshake};
    let (mut links, mut inbox) = links();
    let desk = Arc::new(LinkDesk::new());
    links.desk = Some(desk.clone());
    links.registry.apply(&[RegEvent::Register(t(1))]);
    let mut cfg = ClientConfig::new(
        "fake:1".parse().unwrap(),
        Some(Arc::from(&b"s3cret"[..])),
        1,
    );
    cfg.id = 4;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = async {
        let stream = TcpStream::connect(addr).await.unwrap();
        let est = client_handshake(stream, Some(b"s3cret"), "copier test")
            .await
            .unwrap();
        serve_direct(&cfg, &links, &desk, est).await
    };
    let fake = async {
        let (stream, _) = listener.accept().await.unwrap();
        let mut est = server_handshake(stream, Some(b"s3cret"), "fake intercept")
            .await
            .unwrap();
        assert_eq!(
            next_reg(&mut est).await,
            Message::Register { tuples: vec![t(1)] }
        );
        // The engine's side: the link it was handed.
        let mut engine_links = Vec::new();
        while engine_links.is_empty() {
            desk.take(&mut engine_links);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(links.connected.load(Ordering::SeqCst), 1);
        let rec = Record {
            orig_len: 40,
            headers: vec![0x45; 40],
            payload: Vec::new(),
            stamp: 0,
        };
        let results = vec![(t(1), RegVerdict::Accepted)];
        est.writer
            .write_message(&Message::Records {
                records: vec![rec.clone()],
            })
            .await
            .unwrap();
        est.writer
            .write_message(&Message::Registered {
                results: results.clone(),
            })
            .await
            .unwrap();
        let sent_at = std::time::Instant::now();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1024];
        while got.len() < 2 {
            engine_links[0].pump(&mut buf, |i| got.push(i)).unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let Inbound::Records { at, records } = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(records, &vec![rec]);
        assert!(*at >= sent_at, "stamped when the engine read it");
        assert_eq!(got[1], Inbound::Verdicts { from: 4, results });
        assert!(inbox.try_recv().is_err(), "nothing went through the inbox");
        // Registrations still go out from the client.
        links.registry.apply(&[RegEvent::Register(t(2))]);
        assert_eq!(
            next_reg(&mut est).await,
            Message::Register { tuples: vec![t(2)] }
        );
        // A frame of an unknown type: the engine ends the link, the client ends with its reason.
        est.writer.write_frames(&[0, 0, 0, 1, 0xee]).await.unwrap();
        let e = loop {
            match engine_links[0].pump(&mut buf, |_| panic!("no message")) {
                Err(e) => break e,
                Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        };
        engine_links.pop().unwrap().fail(e);
        est
    };
    let (result, _est) = tokio::join!(client, fake);
    assert!(
        matches!(result, Err(LinkError::Proto(ProtoError::UnknownType(0xee)))),
        "{result:?}"
    );
    assert_eq!(
        links.connected.load(Ordering::SeqCst),
        0,
        "the link no longer counts as up"
    );
}

#[test]
fn compared_sessions_ask_for_payload_the_others_do_not() {
    let evs: Vec<RegEvent> = (0..400).map(|i| RegEvent::Register(t(i))).collect();
    let ask = PayloadAsk { sample: 0.25 };
    let mut out = Vec::new();
    messages_for(&evs, Some(&ask), &mut out);
    let (mut plain, mut asked) = (Vec::new(), Vec::new());
    for m in out {
        match m {
            Message::Register { tuples } => plain.extend(tuples),
            Message::RegisterPayload { tuples } => asked.extend(tuples),
            other => panic!("{other:?}"),
        }
    }
    assert!(asked
        .iter()
        .all(|&(t, n)| ask.wants(&t) && n == PayloadAsk::BYTES));
    assert!(plain.iter().all(|t| !ask.wants(t)));
    assert_eq!(plain.len() + asked.len(), 400);
    assert!(
        (60..140).contains(&asked.len()),
        "about a quarter asks: {}",
        asked.len()
    );
    // The same rule as the comparison's tap.
    assert!(asked.iter().all(|(t, _)| crate::shadow::sampled_client(
        t.client.ip(),
        t.client.port(),
        0.25
    )));
    // Unregisters never carry a want.
    out = Vec::new();
    messages_for(
        &[RegEvent::Unregister(t(1))],
        Some(&PayloadAsk { sample: 1.0 }),
        &mut out,
    );
    assert_eq!(out, vec![Message::Unregister { tuples: vec![t(1)] }]);
}

/// The snapshot a link sends first, with `payload` asked, to a fake intercept announcing
/// `features`.
async fn first_registration(features: u32) -> Message {
    use common::proto::io::{client_handshake, handshake_with_features};
    use common::proto::Role;
    let (links, _records) = links();
    links.registry.apply(&[RegEvent::Register(t(1))]);
    let mut cfg = ClientConfig::new("fake:1".parse().unwrap(), None, 1);
    cfg.payload = Some(PayloadAsk { sample: 1.0 });
    let (a, b) = tokio::io::duplex(64 * 1024);
    let client = async {
        let est = client_handshake(a, None, "copier test").await.unwrap();
        let _ = serve(&cfg, &links, est).await;
    };
    let fake = async {
        let mut est = handshake_with_features(b, None, "intercept", Role::Intercept, features)
            .await
            .unwrap();
        next_reg(&mut est).await
    };
    tokio::select! {
        () = client => panic!("the link ended first"),
        m = fake => m,
    }
}

#[tokio::test]
async fn payload_is_asked_per_session_only_of_an_intercept_that_understands_it() {
    assert_eq!(
        first_registration(common::proto::FEATURE_PAYLOAD_REQUEST).await,
        Message::RegisterPayload {
            tuples: vec![(t(1), PayloadAsk::BYTES)]
        }
    );
    // An older intercept would refuse the unknown message: it gets a plain Register (and
    // sends payload on every session by itself, if it runs with --payload-bytes).
    assert_eq!(
        first_registration(0).await,
        Message::Register { tuples: vec![t(1)] }
    );
}

/// What a fake intercept announcing `features` reads from a link whose record hold is 2 ms
/// (1 ms for a connection opening or ending), while the engine turns eager and calm again and
/// then a session registers.
async fn holds_told(features: u32) -> Vec<Message> {
    use common::proto::io::{client_handshake, handshake_with_features};
    use common::proto::Role;
    let (mut links, _records) = links();
    links.hold = Arc::new(crate::workers::InterceptHold::new(
        Duration::from_millis(2),
        Duration::from_millis(1),
    ));
    let hold = links.hold.clone();
    let cfg = ClientConfig::new("fake:1".parse().unwrap(), None, 1);
    let (a, b) = tokio::io::duplex(64 * 1024);
    let client = async {
        let est = client_handshake(a, None, "copier test").await.unwrap();
        let _ = serve(&cfg, &links, est).await;
    };
    let fake = async {
        let mut est = handshake_with_features(b, None, "intercept", Role::Intercept, features)
            .await
            .unwrap();
        let mut got = Vec::new();
        // Each change is one message, or two to an intercept that takes OpenWait.
        let per = if features & common::proto::FEATURE_OPEN_WAIT != 0 {
            2
        } else {
            1
        };
        if features & common::proto::FEATURE_RECORD_WAIT != 0 {
            for _ in 0..per {
                got.push(next_reg(&mut est).await);
            }
            hold.engine_eager(true);
            for _ in 0..per {
                got.push(next_reg(&mut est).await);
            }
            hold.engine_eager(false);
            for _ in 0..per {
                got.push(next_reg(&mut est).await);
            }
        } else {
            hold.engine_eager(true);
            hold.engine_eager(false);
        }
        links.registry.apply(&[RegEvent::Register(t(1))]);
        got.push(next_reg(&mut est).await);
        got
    };
    tokio::select! {
        () = client => panic!("the link ended first"),
        m = fake => m,
    }
}

#[tokio::test]
async fn the_intercept_is_told_how_long_it_may_hold_records_if_it_understands() {
    let wait = |micros| Message::RecordWait { micros };
    let open = |micros| Message::OpenWait { micros };
    let reg = Message::Register { tuples: vec![t(1)] };
    assert_eq!(
        holds_told(common::proto::FEATURES).await,
        vec![
            wait(2000),
            open(1000),
            wait(0),
            open(0),
            wait(2000),
            open(1000),
            reg.clone()
        ]
    );
    // An intercept that holds records but predates OpenWait: never sent one.
    assert_eq!(
        holds_told(common::proto::FEATURE_RECORD_WAIT).await,
        vec![wait(2000), wait(0), wait(2000), reg.clone()]
    );
    // An older intercept would refuse the message: it is never sent one.
    assert_eq!(holds_told(0).await, vec![reg]);
}

#[tokio::test]
async fn a_link_that_fell_behind_resynchronises_by_difference() {
    use common::proto::io::{client_handshake, server_handshake};
    let (links, _records) = links();
    let cfg = ClientConfig::new("fake:1".parse().unwrap(), None, 1);
    // A pipe much smaller than the changes: the client's writer blocks and its broadcast
    // receiver lags behind.
    let (a, b) = tokio::io::duplex(1024);
    let client = async {
        let est = client_handshake(a, None, "copier test").await.unwrap();
        serve(&cfg, &links, est).await
    };
    let fake = async {
        let mut est = server_handshake(b, None, "fake intercept").await.unwrap();
        // Subscribed (empty snapshot sent) before the flood, so the flood must come through
        // the broadcast, overflow it, and be recovered from the registry.
        while links.connected.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let n = 3 * BROADCAST_CAPACITY as u16;
        // One change per apply: a batch each, three times what the broadcast holds.
        for i in 0..n {
            links.registry.apply(&[RegEvent::Register(t(i))]);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in (0..n).filter(|i| i % 2 == 0) {
            links.registry.apply(&[RegEvent::Unregister(t(i))]);
        }
        let want: HashSet<FourTuple> = (0..n).filter(|i| i % 2 == 1).map(t).collect();
        let mut have = HashSet::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while have != want {
            let m = tokio::time::timeout_at(deadline, next_reg(&mut est))
                .await
                .expect("never converged");
            match m {
                Message::Register { tuples } => have.extend(tuples),
                Message::Unregister { tuples } => tuples.iter().for_each(|x| {
                    have.remove(x);
                }),
                _ => unreachable!(),
            }
        }
        drop(est);
    };
    let (result, ()) = tokio::join!(client, fake);
    assert!(result.is_err());
}

#[test]
fn registry_snapshot_then_changes_exactly_once() {
    let r = Registry::new();
    r.apply(&[RegEvent::Register(t(1)), RegEvent::Register(t(2))]);
    let (snap, mut rx) = r.subscribe();
    assert_eq!(snap.len(), 2);
    r.apply(&[
        RegEvent::Register(t(2)),
        RegEvent::Unregister(t(1)),
        RegEvent::Unregister(t(9)),
    ]);
    assert_eq!(
        &rx.try_recv().unwrap()[..],
        &[RegEvent::Unregister(t(1))],
        "one batch, without the duplicate and the unknown tuple"
    );
    assert!(rx.try_recv().is_err(), "one batch per apply");
    r.apply(&[RegEvent::Register(t(2))]);
    assert!(rx.try_recv().is_err(), "nothing changed: nothing broadcast");
    r.clear();
    assert_eq!(&rx.try_recv().unwrap()[..], &[RegEvent::Unregister(t(2))]);
    assert!(r.is_empty());
}

#[tokio::test]
async fn the_link_connects_with_a_congestion_control_that_does_not_pace() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stream = connect_unpaced("localhost", port).await.unwrap();
    let ca = common::control_socket::congestion_of(socket2::SockRef::from(&stream)).unwrap();
    assert!(
        common::control_socket::CONTROL_CONGESTION.contains(&ca.as_str()),
        "the link's congestion control is {ca:?}"
    );
}

//! Control-connection tests over localhost TCP: registration, routing to the right copier,
//! release of held records, refusals, and that a bad peer does not disturb the others. Packets
//! enter through [`Shared::route`], exactly as the NFQUEUE worker feeds them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::proto::io::{client_handshake, Established};
use common::proto::{error_code, Message, ProtoError, Record};
use common::seq::SeqNum;
use common::wire::{TcpBuilder, TcpFlags};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{serve, ControlConfig};
use crate::allow::AllowList;
use crate::outlet::Shared;
use crate::router::{Router, RouterConfig};

const SECRET: &[u8] = b"lab-shared-secret";
const SERVER: &str = "198.18.2.2:80";

struct Harness {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(outlet_capacity: usize) -> Harness {
    start_with(ControlConfig::new(
        Some(SECRET.to_vec()),
        outlet_capacity,
        "intercept-test".into(),
    ))
    .await
}

async fn start_with(cfg: ControlConfig) -> Harness {
    start_capped(cfg, 0).await
}

/// [`start_with`] with `--payload-bytes payload`.
async fn start_capped(cfg: ControlConfig, payload: usize) -> Harness {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = Shared::new(
        Router::new(RouterConfig {
            allow: AllowList::new(vec!["198.18.2.1".parse().unwrap()]),
            hold_time: Duration::from_secs(2),
            hold_capacity: 100,
            ..RouterConfig::default()
        }),
        payload,
    );
    let cfg = Arc::new(cfg);
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(serve(listener, shared.clone(), cfg, rx));
    Harness {
        addr,
        shared,
        stop,
        task,
    }
}

type Conn = Established<TcpStream>;

async fn connect(h: &Harness) -> Conn {
    let s = TcpStream::connect(h.addr).await.unwrap();
    client_handshake(s, Some(SECRET), "copier-test")
        .await
        .unwrap()
}

/// Send messages, then a Ping, and wait for its Pong: the intercept has applied them all.
async fn send_synced(c: &mut Conn, msgs: &[Message], token: u64) -> Vec<Record> {
    let mut all = msgs.to_vec();
    all.push(Message::Ping { token });
    c.writer.write_messages(&all).await.unwrap();
    let mut records = Vec::new();
    loop {
        match next(c).await {
            Message::Pong { token: t, .. } if t == token => return records,
            Message::Records { records: r } => records.extend(r),
            Message::Registered { results } => {
                assert!(results.iter().all(|(_, v)| v.accepted()), "{results:?}")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

async fn next(c: &mut Conn) -> Message {
    tokio::time::timeout(Duration::from_secs(5), c.reader.read_message())
        .await
        .expect("a message within 5 s")
        .unwrap()
        .expect("connection open")
}

/// Read records until `n` have arrived.
async fn records(c: &mut Conn, n: usize) -> Vec<Record> {
    let mut out = Vec::new();
    while out.len() < n {
        match next(c).await {
            Message::Records { records } => out.extend(records),
            Message::Registered { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    out
}

fn tuple(client: &str) -> FourTuple {
    FourTuple::new(client.parse().unwrap(), SERVER.parse().unwrap())
}

fn response(client: &str, seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    TcpBuilder {
        src: SERVER.parse().unwrap(),
        dst: client.parse().unwrap(),
        seq: SeqNum(seq),
        ack: SeqNum(1),
        flags: TcpFlags::ACK,
        window: 100,
        options: &[],
        payload: b"response",
        ttl: 64,
        ident: 0,
    }
    .emit(&mut out);
    out
}

/// What the NFQUEUE worker does with one packet; returns the verdict (true = ACCEPT).
fn inject(h: &Harness, pkt: &[u8]) -> bool {
    let (accept, delivery) = h.shared.route(Instant::now(), pkt);
    if let Some(d) = delivery {
        d.push();
    }
    accept
}

/// The TCP sequence number of an IPv4 record without IP options.
fn seq_of(r: &Record) -> u32 {
    u32::from_be_bytes(r.headers[24..28].try_into().unwrap())
}

#[tokio::test]
async fn two_copiers_each_get_only_their_sessions() {
    let h = start(1000).await;
    let mut a = connect(&h).await;
    let mut b = connect(&h).await;
    let (ta, tb) = ("198.19.0.1:40000", "198.19.0.1:40001");
    send_synced(
        &mut a,
        &[Message::Register {
            tuples: vec![tuple(ta)],
        }],
        1,
    )
    .await;
    send_synced(
        &mut b,
        &[Message::Register {
            tuples: vec![tuple(tb)],
        }],
        1,
    )
    .await;
    for i in 0..20 {
        assert!(!inject(&h, &response(ta, 1000 + i)));
        assert!(!inject(&h, &response(tb, 2000 + i)));
    }
    let ra = records(&mut a, 20).await;
    let rb = records(&mut b, 20).await;
    assert!(ra.iter().all(|r| r.tuple().unwrap() == tuple(ta)));
    assert!(rb.iter().all(|r| r.tuple().unwrap() == tuple(tb)));
    let seqs: Vec<u32> = ra.iter().map(seq_of).collect();
    assert_eq!(
        seqs,
        (1000..1020).collect::<Vec<_>>(),
        "records keep their order"
    );
    // Nothing extra arrives for either.
    assert!(send_synced(&mut a, &[], 2).await.is_empty());
    assert!(send_synced(&mut b, &[], 2).await.is_empty());
    let _ = h.stop.send(true);
    h.task.await.unwrap();
}

#[tokio::test]
async fn early_response_is_released_on_registration() {
    let h = start(1000).await;
    let mut a = connect(&h).await;
    let c = "198.19.0.9:5000";
    assert!(
        !inject(&h, &response(c, 77)),
        "an unregistered response is never accepted"
    );
    assert_eq!(h.shared.lock().router.stats().holding, 1);
    let got = send_synced(
        &mut a,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        5,
    )
    .await;
    let got = if got.is_empty() {
        records(&mut a, 1).await
    } else {
        got
    };
    assert_eq!(got.len(), 1);
    assert_eq!(seq_of(&got[0]), 77);
    assert_eq!(h.shared.lock().router.stats().released, 1);
}

#[tokio::test]
async fn allowed_address_is_accepted_and_unregister_stops_delivery() {
    let h = start(1000).await;
    let mut a = connect(&h).await;
    assert!(inject(&h, &response("198.18.2.1:33333", 1)));
    let c = "198.19.0.2:6000";
    send_synced(
        &mut a,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        1,
    )
    .await;
    inject(&h, &response(c, 1));
    assert_eq!(records(&mut a, 1).await.len(), 1);
    send_synced(
        &mut a,
        &[Message::Unregister {
            tuples: vec![tuple(c)],
        }],
        2,
    )
    .await;
    assert!(!inject(&h, &response(c, 2)));
    assert!(send_synced(&mut a, &[], 3).await.is_empty());
    // The unregistered tuple is a tombstone: its response is dropped, not held.
    assert_eq!(
        h.shared.lock().router.stats().dropped_recently_unregistered,
        1
    );
}

#[tokio::test]
async fn bad_peers_are_refused_and_the_others_keep_working() {
    let h = start(1000).await;
    let mut good = connect(&h).await;
    let c = "198.19.0.3:7000";
    send_synced(
        &mut good,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        1,
    )
    .await;

    // Wrong secret.
    let s = TcpStream::connect(h.addr).await.unwrap();
    match client_handshake(s, Some(b"guess"), "intruder").await {
        Err(ProtoError::Remote { code, .. }) => assert_eq!(code, error_code::AUTH_FAILED),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    // No secret.
    let s = TcpStream::connect(h.addr).await.unwrap();
    assert!(client_handshake(s, None, "intruder").await.is_err());
    // Garbage: an HTTP request.
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    // The intercept closes it (EOF or reset, both fine) instead of waiting for the timeout.
    let _ = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut buf),
    )
    .await
    .expect("the intercept closes a garbage connection at once");

    // Garbage after a good handshake closes only that connection, and forgets its sessions.
    let mut rogue = connect(&h).await;
    let rc = "198.19.0.4:7001";
    send_synced(
        &mut rogue,
        &[Message::Register {
            tuples: vec![tuple(rc)],
        }],
        1,
    )
    .await;
    // (Through the writer, so that the frame carries a valid tag and only its type is wrong.)
    rogue.writer.write_frames(&[0, 0, 0, 1, 200]).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(5), rogue.reader.read_message())
        .await
        .unwrap()
    {
        Ok(Some(Message::Error { code, message })) => {
            assert_eq!(code, error_code::PROTOCOL);
            assert!(message.contains("unknown message type 200"), "{message}");
        }
        other => panic!("expected an Error, got {other:?}"),
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.shared.lock().router.route(&tuple(rc)).is_some() {
        assert!(
            Instant::now() < deadline,
            "the rogue copier's registration was not removed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The good copier still gets its records.
    inject(&h, &response(c, 9));
    assert_eq!(seq_of(&records(&mut good, 1).await[0]), 9);
}

#[tokio::test]
async fn slow_copier_loses_the_oldest_records_not_memory() {
    let h = start(10).await;
    let mut a = connect(&h).await;
    let c = "198.19.0.5:8000";
    send_synced(
        &mut a,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        1,
    )
    .await;
    // Fill the outlet faster than the writer can run: inject while holding no await.
    let outlet = h.shared.lock().outlets.values().next().unwrap().clone();
    for i in 0..1000 {
        inject(&h, &response(c, i));
        assert!(outlet.len() <= 10);
    }
    // Whatever arrives is in order and ends with the newest record.
    let mut last = None;
    let mut got = 0;
    loop {
        let r = send_synced(&mut a, &[], 2).await;
        got += r.len();
        for rec in &r {
            let s = seq_of(rec);
            if let Some(l) = last {
                assert!(s > l, "records out of order");
            }
            last = Some(s);
        }
        if last == Some(999) {
            break;
        }
    }
    assert!(got <= 1000);
}

#[tokio::test]
async fn shutdown_tells_the_copiers() {
    let h = start(1000).await;
    let mut a = connect(&h).await;
    send_synced(&mut a, &[], 1).await;
    let _ = h.stop.send(true);
    match next(&mut a).await {
        Message::Error { code, .. } => assert_eq!(code, error_code::SHUTDOWN),
        other => panic!("{other:?}"),
    }
    h.task.await.unwrap();
    assert!(h.shared.lock().outlets.is_empty());
}

/// Read Records frames until `n` records came; returns the number of frames and the records'
/// sequence numbers.
async fn read_frames(c: &mut Conn, n: usize) -> (usize, Vec<u32>) {
    let mut frames = 0;
    let mut got = Vec::new();
    while got.len() < n {
        match next(c).await {
            Message::Records { records } => {
                frames += 1;
                got.extend(records.iter().map(seq_of));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    (frames, got)
}

#[tokio::test]
async fn records_arriving_together_share_writes_and_a_lone_one_is_not_delayed() {
    let h = start(10_000).await;
    let mut a = connect(&h).await;
    let c = "198.19.0.6:9000";
    send_synced(
        &mut a,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        1,
    )
    .await;
    // A lone record after a quiet spell goes out at once.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let t0 = Instant::now();
    inject(&h, &response(c, 1));
    assert_eq!(records(&mut a, 1).await.len(), 1);
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "a lone record waited {:?}",
        t0.elapsed()
    );
    // A receive batch of 500 records (what the NFQUEUE worker hands over after one
    // `recvmmsg`) leaves in one write: one Records frame.
    let mut batch: Vec<_> = (0..500)
        .map(|i| {
            let (_, d) = h.shared.route(Instant::now(), &response(c, 100 + i));
            d.expect("registered")
        })
        .collect();
    crate::outlet::push_all(&mut batch);
    let (frames, got) = read_frames(&mut a, 500).await;
    assert_eq!(got, (100..600).collect::<Vec<_>>(), "all records, in order");
    assert_eq!(
        frames, 1,
        "{frames} frames for one receive batch of 500 records"
    );
    // 500 more from another thread one by one, as fast as it goes: each finds the connection
    // idle (written by the pushing thread) or busy (queued, and the control writer takes
    // what came during its write); either way all arrive, in order.
    let shared = h.shared.clone();
    let pusher = std::thread::spawn(move || {
        for i in 0..500 {
            let (_, d) = shared.route(Instant::now(), &response(c, 1000 + i));
            d.expect("registered").push();
        }
    });
    let (frames, got) = read_frames(&mut a, 500).await;
    pusher.join().unwrap();
    assert_eq!(
        got,
        (1000..1500).collect::<Vec<_>>(),
        "all records, in order"
    );
    eprintln!("500 records pushed one by one from another thread: {frames} frames");
    // A Ping is answered after the records queued before it.
    inject(&h, &response(c, 700));
    let before_pong = send_synced(&mut a, &[], 9).await;
    assert_eq!(
        before_pong.iter().map(seq_of).collect::<Vec<_>>(),
        vec![700]
    );
}

// ---- unauthenticated peers, idle copiers, tampering ----

#[test]
fn pending_slots_are_capped_in_all_and_per_address_and_given_back() {
    let a: std::net::IpAddr = "198.18.0.1".parse().unwrap();
    let b: std::net::IpAddr = "198.18.0.2".parse().unwrap();
    let mut p = super::Pending::new(3, 2);
    assert_eq!(p.admit(a), Ok(()));
    assert_eq!(p.admit(a), Ok(()));
    assert_eq!(p.admit(a), Err("pending_limit_addr"));
    assert_eq!(p.admit(b), Ok(()));
    assert_eq!(p.admit(b), Err("pending_limit"));
    assert_eq!(p.total(), 3);
    p.release(a);
    assert_eq!(p.admit(b), Ok(()));
    p.release(b);
    p.release(b);
    p.release(a);
    assert_eq!(p.total(), 0);
    // Releasing an address that holds nothing changes nothing.
    p.release(b);
    assert_eq!(p.total(), 0);
    assert_eq!(p.admit(a), Ok(()));
}

#[test]
fn refusal_logs_are_limited_per_reason_and_count_what_they_held_back() {
    let t0 = Instant::now();
    let mut l = super::LogLimiter::new(Duration::from_secs(1));
    assert_eq!(l.allow(t0, "timeout"), Some(0));
    for ms in [1, 200, 999] {
        assert_eq!(l.allow(t0 + Duration::from_millis(ms), "timeout"), None);
    }
    // Another reason has its own budget.
    assert_eq!(
        l.allow(t0 + Duration::from_millis(5), "auth_failed"),
        Some(0)
    );
    // A second later: one line, saying three were held back.
    assert_eq!(
        l.allow(t0 + Duration::from_millis(1000), "timeout"),
        Some(3)
    );
    assert_eq!(l.allow(t0 + Duration::from_millis(1001), "timeout"), None);
    assert_eq!(
        l.allow(t0 + Duration::from_millis(2500), "timeout"),
        Some(1)
    );
}

/// A TCP connection from `from` (any 127/8 address) that never speaks.
async fn silent_from(h: &Harness, from: &str) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(h.addr).await.unwrap()
}

/// Whether the intercept closes `s` within `within` (EOF or reset).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match tokio::io::AsyncReadExt::read(s, &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn silent_peers_beyond_the_caps_are_closed_at_once_and_a_copier_still_gets_in() {
    let mut cfg = ControlConfig::new(Some(SECRET.to_vec()), 100, "intercept-test".into());
    cfg.max_pending = 6;
    cfg.max_pending_per_addr = 4;
    let h = start_with(cfg).await;
    // Per address: 4 from 127.0.0.2 wait in their handshake, the next ones are closed at once.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(silent_from(&h, "127.0.0.2").await);
    }
    for i in 0..10 {
        let mut s = silent_from(&h, "127.0.0.2").await;
        assert!(
            closed_within(&mut s, Duration::from_secs(1)).await,
            "connection {i} over the per-address cap was kept open"
        );
    }
    // In all: 2 more from another address fill the 6 slots; a third address is refused too.
    for _ in 0..2 {
        held.push(silent_from(&h, "127.0.0.3").await);
    }
    let mut s = silent_from(&h, "127.0.0.4").await;
    assert!(closed_within(&mut s, Duration::from_secs(1)).await);
    // The held ones are still open (they wait for the 5 s handshake timeout).
    for s in &mut held[..1] {
        assert!(!closed_within(s, Duration::from_millis(200)).await);
    }
    // Their slots come back when they go: a real copier then gets in and works.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut good = loop {
        let s = TcpStream::connect(h.addr).await.unwrap();
        match client_handshake(s, Some(SECRET), "copier-test").await {
            Ok(c) => break c,
            Err(e) => {
                assert!(Instant::now() < deadline, "no slot came back: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let c = "198.19.0.9:7000";
    send_synced(
        &mut good,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        1,
    )
    .await;
    inject(&h, &response(c, 5));
    assert_eq!(seq_of(&records(&mut good, 1).await[0]), 5);
}

#[tokio::test]
async fn silent_copier_is_closed_after_the_idle_timeout_and_a_pinging_one_is_kept() {
    let mut cfg = ControlConfig::new(Some(SECRET.to_vec()), 100, "intercept-test".into());
    cfg.idle_timeout = Duration::from_millis(300);
    let h = start_with(cfg).await;
    let mut quiet = connect(&h).await;
    let mut alive = connect(&h).await;
    let (qc, ac) = ("198.19.0.10:7000", "198.19.0.11:7000");
    send_synced(
        &mut quiet,
        &[Message::Register {
            tuples: vec![tuple(qc)],
        }],
        1,
    )
    .await;
    send_synced(
        &mut alive,
        &[Message::Register {
            tuples: vec![tuple(ac)],
        }],
        1,
    )
    .await;
    let t0 = Instant::now();
    let pinger = async {
        for token in 2..12 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            send_synced(&mut alive, &[], token).await;
        }
    };
    let quiet_end = async {
        let end = tokio::time::timeout(Duration::from_secs(3), quiet.reader.read_message())
            .await
            .expect("the silent copier is closed");
        (end, t0.elapsed())
    };
    let ((end, after), ()) = tokio::join!(quiet_end, pinger);
    match end {
        Ok(Some(Message::Error { code, message })) => {
            assert_eq!(code, error_code::PROTOCOL);
            assert!(message.contains("nothing heard"), "{message}");
        }
        other => panic!("expected an Error, got {other:?}"),
    }
    assert!(
        after >= Duration::from_millis(250),
        "closed too early: {after:?}"
    );
    assert_eq!(quiet.reader.read_message().await.unwrap(), None);
    // Its registration is gone; the pinging copier (1 s, three timeouts) still gets records.
    let deadline = Instant::now() + Duration::from_secs(2);
    while h.shared.lock().router.route(&tuple(qc)).is_some() {
        assert!(
            Instant::now() < deadline,
            "the idle copier's registration stayed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    inject(&h, &response(ac, 3));
    assert_eq!(seq_of(&records(&mut alive, 1).await[0]), 3);
}

#[tokio::test]
async fn a_register_frame_modified_in_transit_closes_the_connection() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Copier -> relay (a man in the middle) -> intercept. The relay passes the handshake, then
    // flips one bit inside the first frame after it: a Register.
    let h = start(100).await;
    let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let mut hello = Vec::new();
    Message::Hello(common::proto::Hello::new(
        common::proto::Role::Copier,
        true,
        [0; 32],
        "copier-test",
    ))
    .encode(&mut hello);
    // Hello, then Auth (4 + 1 + 32 bytes); byte 12 of the next frame is inside its tuple.
    let target = hello.len() + 37 + 12;
    let flipped = Arc::new(AtomicUsize::new(0));
    let f2 = flipped.clone();
    let intercept_addr = h.addr;
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let (down, _) = relay.accept().await.unwrap();
        let up = TcpStream::connect(intercept_addr).await.unwrap();
        let (mut dr, mut dw) = down.into_split();
        let (mut ur, mut uw) = up.into_split();
        let to_intercept = async move {
            let mut buf = vec![0u8; 65536];
            let mut seen = 0;
            loop {
                let n = match dr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if seen <= target && target < seen + n {
                    buf[target - seen] ^= 0x01;
                    f2.fetch_add(1, Ordering::SeqCst);
                }
                seen += n;
                if uw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = uw.shutdown().await;
        };
        let to_copier = async move {
            let _ = tokio::io::copy(&mut ur, &mut dw).await;
            let _ = dw.shutdown().await;
        };
        tokio::join!(to_intercept, to_copier);
    });
    let s = TcpStream::connect(relay_addr).await.unwrap();
    let mut c = client_handshake(s, Some(SECRET), "copier-test")
        .await
        .unwrap();
    let t = "198.19.0.12:7000";
    c.writer
        .write_message(&Message::Register {
            tuples: vec![tuple(t)],
        })
        .await
        .unwrap();
    // The copier is told why and the connection ends; no Registered comes back.
    match next(&mut c).await {
        Message::Error { code, message } => {
            assert_eq!(code, error_code::PROTOCOL);
            assert!(
                message.contains("frame 0 from the copier fails its authentication tag"),
                "{message}"
            );
        }
        other => panic!("expected an Error, got {other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(3), c.reader.read_message())
        .await
        .expect("the connection ends");
    assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");
    assert_eq!(
        flipped.load(Ordering::SeqCst),
        1,
        "the relay did not tamper"
    );
    // The tampered registration never took effect (neither the sent nor the altered tuple).
    assert!(h.shared.lock().router.route(&tuple(t)).is_none());
    assert_eq!(h.shared.lock().router.stats().registrations, 0);
}

/// A record queued right after a write leaves with the next write, not after a timer: on a
/// paused clock (which only moves when a timer is waited for), the writer sends it without the
/// clock moving at all.
#[tokio::test(start_paused = true)]
async fn a_record_arriving_right_after_a_write_is_not_held_for_a_timer() {
    use crate::outlet::Outlet;
    use common::proto::io::FrameReader;
    let (near, far) = tokio::io::duplex(1 << 20);
    let mut reader = FrameReader::new(far);
    let outlet = Arc::new(Outlet::new(100));
    let (_reply_tx, reply_rx) = tokio::sync::mpsc::channel(4);
    let (_stop_tx, stop_rx) = watch::channel(false);
    let o = outlet.clone();
    let writer = tokio::spawn(async move {
        let mut w = near;
        super::write_loop(&mut w, &o, reply_rx, stop_rx).await
    });
    let rec = |n: u32| Record {
        orig_len: n,
        headers: vec![],
        payload: vec![],
        stamp: 0,
    };
    async fn read(r: &mut FrameReader<tokio::io::DuplexStream>) -> Vec<u32> {
        match r.read_message().await.unwrap().expect("open") {
            Message::Records { records } => records.iter().map(|r| r.orig_len).collect(),
            other => panic!("unexpected {other:?}"),
        }
    }
    let t0 = tokio::time::Instant::now();
    outlet.push([rec(1)]);
    assert_eq!(read(&mut reader).await, vec![1]);
    // Right after that write, with no time passing:
    outlet.push([rec(2)]);
    assert_eq!(read(&mut reader).await, vec![2]);
    outlet.push([rec(3), rec(4)]);
    outlet.push([rec(5)]);
    assert_eq!(read(&mut reader).await, vec![3, 4, 5]);
    assert_eq!(
        t0.elapsed(),
        Duration::ZERO,
        "the writer waited for a timer before writing"
    );
    writer.abort();
}

#[tokio::test]
async fn payload_goes_only_to_the_tuples_that_ask_and_to_older_copiers_on_all() {
    use common::proto::io::handshake_with_features;
    use common::proto::Role;
    let h = start_capped(
        ControlConfig::new(Some(SECRET.to_vec()), 100, "intercept-test".into()),
        6,
    )
    .await;
    // A copier of this build: a plain Register gets headers only, a RegisterPayload gets what
    // it asks for, within the intercept's --payload-bytes 6.
    let mut new = connect(&h).await;
    let (plain, asked, capped) = ("198.19.0.1:40000", "198.19.0.1:40001", "198.19.0.1:40002");
    send_synced(
        &mut new,
        &[
            Message::Register {
                tuples: vec![tuple(plain)],
            },
            Message::RegisterPayload {
                tuples: vec![(tuple(asked), 4), (tuple(capped), 65495)],
            },
        ],
        1,
    )
    .await;
    for c in [plain, asked, capped] {
        inject(&h, &response(c, 1));
    }
    let got: Vec<Vec<u8>> = records(&mut new, 3)
        .await
        .into_iter()
        .map(|r| r.payload)
        .collect();
    assert_eq!(got, [b"".to_vec(), b"resp".to_vec(), b"respon".to_vec()]);
    // A copier that predates the feature (no bit in its Hello): payload on every tuple, as
    // before.
    let s = TcpStream::connect(h.addr).await.unwrap();
    let mut old = handshake_with_features(s, Some(SECRET), "copier-old", Role::Copier, 0)
        .await
        .unwrap();
    assert!(
        old.peer.has(common::proto::FEATURE_PAYLOAD_REQUEST),
        "the intercept announces it"
    );
    let c = "198.19.0.1:40003";
    send_synced(
        &mut old,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        2,
    )
    .await;
    inject(&h, &response(c, 1));
    assert_eq!(records(&mut old, 1).await[0].payload, b"respon");
    h.stop.send(true).unwrap();
    let _ = h.task.await;
}

/// A copier that announces FEATURE_STAMPS gets each record with the time the intercept read
/// its packet and Pongs with the intercept's clock; an older one gets plain Records and Pongs.
#[tokio::test]
async fn stamps_and_clock_go_only_to_copiers_that_take_them() {
    use common::proto::io::handshake_with_features;
    use common::proto::Role;
    let h = start(100).await;
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let mut new = connect(&h).await;
    assert!(
        new.peer.has(common::proto::FEATURE_STAMPS),
        "the intercept announces it"
    );
    let c = "198.19.0.2:40000";
    send_synced(
        &mut new,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        1,
    )
    .await;
    let before = wall();
    inject(&h, &response(c, 1));
    let after = wall();
    let stamp = records(&mut new, 1).await[0].stamp;
    assert!(
        (before..=after).contains(&stamp),
        "{before} <= {stamp} <= {after}"
    );
    new.writer
        .write_message(&Message::Ping { token: 9 })
        .await
        .unwrap();
    let sent = wall();
    match next(&mut new).await {
        Message::Pong { token: 9, clock } => {
            assert!(clock >= sent - 1_000_000_000 && clock <= wall(), "{clock}")
        }
        other => panic!("unexpected {other:?}"),
    }
    let s = TcpStream::connect(h.addr).await.unwrap();
    let features = common::proto::FEATURES & !common::proto::FEATURE_STAMPS;
    let mut old = handshake_with_features(s, Some(SECRET), "copier-old", Role::Copier, features)
        .await
        .unwrap();
    let c = "198.19.0.2:40001";
    send_synced(
        &mut old,
        &[Message::Register {
            tuples: vec![tuple(c)],
        }],
        2,
    )
    .await;
    inject(&h, &response(c, 1));
    assert_eq!(records(&mut old, 1).await[0].stamp, 0, "plain Records");
    old.writer
        .write_message(&Message::Ping { token: 3 })
        .await
        .unwrap();
    assert_eq!(next(&mut old).await, Message::Pong { token: 3, clock: 0 });
    h.stop.send(true).unwrap();
    let _ = h.task.await;
}

/// A worker's send that the socket takes only in part leaves the rest of its sealed bytes to
/// the control writer, which writes them before anything queued later: on a socket pair with
/// small buffers and a reader that starts late, 10,000 records of 1 KB delivered in batches of
/// 50 from another thread (as an NFQUEUE worker does) arrive whole (every frame's tag
/// verifies, so no frame was torn or sealed out of order) and in order, and some of the
/// worker's sends were partial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_write_is_finished_by_the_writer_before_anything_else() {
    use crate::outlet::Outlet;
    use std::os::fd::AsFd;
    use tokio::net::UnixStream;
    let (near, far) = UnixStream::pair().unwrap();
    socket2::SockRef::from(&near)
        .set_send_buffer_size(8192)
        .unwrap();
    socket2::SockRef::from(&far)
        .set_recv_buffer_size(8192)
        .unwrap();
    let fd = near.as_fd().try_clone_to_owned().unwrap();
    let (srv, cli) = tokio::join!(
        common::proto::io::server_handshake(near, Some(SECRET), "intercept-test"),
        client_handshake(far, Some(SECRET), "copier-test"),
    );
    let (srv, mut cli) = (srv.unwrap(), cli.unwrap());
    let (mut w, sealer) = srv.writer.into_parts();
    assert!(sealer.is_some(), "a session key");
    let outlet = Arc::new(Outlet::new(1_000_000));
    outlet.attach(Some(fd), sealer, "partial-test");
    let (_reply_tx, reply_rx) = tokio::sync::mpsc::channel(4);
    let (_stop_tx, stop_rx) = watch::channel(false);
    let o = outlet.clone();
    let writer =
        tokio::spawn(async move { super::write_loop(&mut w, &o, reply_rx, stop_rx).await });
    const N: u32 = 10_000;
    let o = outlet.clone();
    let pusher = std::thread::spawn(move || {
        for b in 0..N / 50 {
            o.deliver(
                (0..50)
                    .map(|i| Record {
                        orig_len: b * 50 + i,
                        headers: vec![],
                        payload: vec![(i % 251) as u8; 1000],
                        stamp: 0,
                    })
                    .collect(),
            );
            // Paced, so that the writer catches up now and then and the next batch is the
            // worker's to write again.
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    // The reader starts late: the socket fills and the pusher's sends come back short.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut next_len = 0u32;
    while next_len < N {
        let m = tokio::time::timeout(Duration::from_secs(5), cli.reader.read_message())
            .await
            .expect("a message within 5 s")
            .expect("every frame whole and its tag valid")
            .expect("connection open");
        match m {
            Message::Records { records } => {
                for r in records {
                    assert_eq!(r.orig_len, next_len, "records reordered or lost");
                    assert_eq!(r.payload.len(), 1000);
                    next_len += 1;
                    // Pauses now and then: the socket fills again.
                    if next_len.is_multiple_of(2000) {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    pusher.join().unwrap();
    let partial = outlet.leftovers();
    eprintln!("{partial} of the worker's sends were partial or refused");
    assert!(partial > 0, "no send was partial: the test did not test");
    assert!(outlet.is_idle());
    writer.abort();
}

#[tokio::test]
async fn a_copiers_synced_ends_the_restart_grace_and_it_is_told_when_the_rules_go_and_come_back() {
    use common::proto::io::{client_handshake_as, Identity};
    let h = start(1024).await;
    // A restart whose settle time is over: only the copiers' Synced keeps the grace.
    h.shared.lock().router.start_grace(
        Instant::now() - Duration::from_secs(3),
        Duration::from_secs(60),
    );
    let s = TcpStream::connect(h.addr).await.unwrap();
    let id = Identity {
        instance: 7,
        fleet_index: 0,
        fleet_size: 1,
    };
    let mut c = client_handshake_as(
        s,
        Some(SECRET),
        "copier-test",
        common::proto::HANDSHAKE_TIMEOUT,
        id,
    )
    .await
    .unwrap();
    send_synced(&mut c, &[], 1).await;
    assert!(
        !inject(&h, &response("198.18.2.1:5000", 1)),
        "an allowed answer is held during the grace"
    );
    send_synced(&mut c, &[Message::Synced], 2).await;
    assert!(
        inject(&h, &response("198.18.2.1:5001", 1)),
        "the copier is synced: the grace is over"
    );
    assert_eq!(h.shared.lock().router.stats().grace, 0);
    // The rules go missing, then come back: the copier (FEATURE_RESTART) is told both.
    h.shared.rules_ok.send_replace(false);
    assert_eq!(next(&mut c).await, Message::Rules { in_force: false });
    h.shared.rules_ok.send_replace(true);
    assert_eq!(next(&mut c).await, Message::Rules { in_force: true });
}

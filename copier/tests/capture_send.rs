//! Capture and send against a real kernel, inside two network namespaces made by this test.
//!
//! Topology (names unique per run: `cpio-<pid>-<n>-{a,b}`):
//! `a` (client side, veth `a0` 198.18.200.1/24, 2001:db8:200::1/64) <-> `b` (copier side, veth
//! `b0` 198.18.200.2/24, 2001:db8:200::2/64). Sockets are created on threads that entered the
//! namespace with `setns`; a socket stays in the namespace it was created in, so the test thread
//! can use it afterwards. A guard deletes both namespaces, also when an assertion fails.
//!
//! Needs root. Without root the tests print a loud SKIPPED line and pass, unless `CI=true`, where
//! they fail.

use std::fs::File;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::flow::FourTuple;
use common::seq::SeqNum;
use common::testkit;
use common::wire::{parse_tcp_packet, TcpBuilder, TcpFlags};
use copier::bpf::{build_filter, FilterTarget};
use copier::capture::{Capture, CaptureConfig};
use copier::feed::{Feed, FeedConfig};
use copier::send::{RawSender, SendConfig};
use nix::sched::{setns, CloneFlags};

const A_V4: &str = "198.18.200.1";
const B_V4: &str = "198.18.200.2";
const A_V6: &str = "2001:db8:200::1";
const B_V6: &str = "2001:db8:200::2";

/// True if the test may run; false (after a loud message) if it must be skipped.
fn root_or_skip(test: &str) -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: needs root to create network namespaces, and CI=true forbids skipping");
    }
    eprintln!(
        "\n*** SKIPPED {test}: needs root (network namespaces, AF_PACKET, raw sockets) ***\n"
    );
    false
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("running `ip`");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces joined by a veth pair; deleted on drop.
struct Lab {
    a: String,
    b: String,
}

impl Lab {
    fn new() -> Lab {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let base = format!("cpio-{}-{n}", std::process::id());
        let lab = Lab {
            a: format!("{base}-a"),
            b: format!("{base}-b"),
        };
        ip(&["netns", "add", &lab.a]);
        ip(&["netns", "add", &lab.b]);
        ip(&[
            "link", "add", "a0", "netns", &lab.a, "type", "veth", "peer", "name", "b0", "netns",
            &lab.b,
        ]);
        for (ns, dev, v4, v6) in [(&lab.a, "a0", A_V4, A_V6), (&lab.b, "b0", B_V4, B_V6)] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev]);
            ip(&[
                "-n",
                ns,
                "-6",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            ip(&["-n", ns, "link", "set", dev, "mtu", "1500", "up"]);
        }
        lab
    }

    /// Run `f` on a thread inside namespace `ns`.
    fn within<T: Send + 'static>(&self, ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{ns}");
        std::thread::spawn(move || {
            let fd = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            setns(&fd, CloneFlags::CLONE_NEWNET).unwrap_or_else(|e| panic!("setns {path}: {e}"));
            f()
        })
        .join()
        .expect("namespace thread panicked")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// The template segment (`common::testkit`) from `src` to `dst` at `seq`, acking 1.
fn tcp_packet(src: SocketAddr, dst: SocketAddr, seq: u32, payload: &[u8]) -> Vec<u8> {
    testkit::emit(&TcpBuilder {
        src,
        dst,
        seq: SeqNum(seq),
        ack: SeqNum(1),
        payload,
        ident: 1,
        ..testkit::SEGMENT
    })
}

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// Collect captured packets until `want` arrived or `limit` passed, then a little longer to
/// catch anything that should not be there.
fn collect(cap: &mut Capture, want: usize, limit: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let start = Instant::now();
    let mut extra_until = None;
    loop {
        cap.drain(usize::MAX, |p| got.push(p.to_vec()));
        let now = Instant::now();
        if got.len() >= want && extra_until.is_none() {
            extra_until = Some(now + Duration::from_millis(100));
        }
        if extra_until.is_some_and(|t| now >= t) || now - start > limit {
            return got;
        }
        let _ = copier::sys::poll_readable(&[cap.fd()], Duration::from_millis(5));
    }
}

fn open_capture(lab: &Lab, interface: Option<&str>, targets: Vec<FilterTarget>) -> Capture {
    let cfg = CaptureConfig {
        interface: interface.map(str::to_string),
        block_size: 1 << 16,
        block_count: 4,
        initial_blocks: 4,
        retire: Duration::from_millis(5),
    };
    let filter = build_filter(&targets).unwrap();
    lab.within(&lab.b, move || {
        Capture::open(&cfg, &filter).expect("open capture in b")
    })
}

/// A capture on `b0` of everything sent to port 80, and a raw sender in `a`.
fn port80_capture_and_sender(lab: &Lab) -> (Capture, RawSender) {
    let cap = open_capture(
        lab,
        Some("b0"),
        vec![FilterTarget {
            addr: None,
            port: 80,
        }],
    );
    let sender = lab.within(&lab.a, || {
        RawSender::open(SendConfig::default()).expect("raw sockets in a")
    });
    (cap, sender)
}

fn tuple(src: SocketAddr, dst: SocketAddr) -> FourTuple {
    FourTuple::new(src, dst)
}

#[test]
fn capture_sees_only_mapped_tcp_and_sender_delivers() {
    if !root_or_skip("capture_sees_only_mapped_tcp_and_sender_delivers") {
        return;
    }
    let lab = Lab::new();
    let (mut cap, mut sender) = port80_capture_and_sender(&lab);

    let wanted: Vec<Vec<u8>> = (0..3u32)
        .map(|i| {
            tcp_packet(
                sa(A_V4, 40000 + i as u16),
                sa(B_V4, 80),
                1000 * i,
                format!("request {i}").as_bytes(),
            )
        })
        .chain([tcp_packet(sa(A_V6, 40100), sa(B_V6, 80), 5, b"over ipv6")])
        .collect();
    let unwanted = [
        tcp_packet(sa(A_V4, 40000), sa(B_V4, 81), 1, b"other port"),
        tcp_packet(sa(A_V4, 80), sa(B_V4, 40000), 1, b"source port 80 only"),
        tcp_packet(sa(A_V6, 40100), sa(B_V6, 8080), 1, b"other port v6"),
    ];
    let now = Instant::now();
    for p in unwanted.iter().chain(&wanted) {
        let parsed = parse_tcp_packet(p).unwrap();
        let mut buf = sender.buffer();
        buf.extend_from_slice(p);
        sender.enqueue(
            tuple(parsed.src_socket(), parsed.dst_socket()),
            parsed.dst,
            buf,
        );
    }
    sender.flush(now);
    assert_eq!(sender.pending(), 0, "everything sent: {:?}", sender.stats());
    assert_eq!(
        sender.stats().packets,
        (wanted.len() + unwanted.len()) as u64
    );
    // UDP to the mapped port must not pass the filter either.
    lab.within(&lab.a, || {
        let u = UdpSocket::bind(sa(A_V4, 0)).unwrap();
        u.send_to(b"udp to port 80", sa(B_V4, 80)).unwrap();
    });

    let got = collect(&mut cap, wanted.len(), Duration::from_secs(3));
    let mut got_sorted = got.clone();
    got_sorted.sort();
    let mut want_sorted = wanted.clone();
    want_sorted.sort();
    assert_eq!(
        got_sorted, want_sorted,
        "capture must hold exactly the packets to port 80, byte for byte"
    );

    cap.refresh_kernel_stats().unwrap();
    let st = cap.stats();
    assert_eq!(st.packets, wanted.len() as u64);
    assert!(st.kernel_packets >= wanted.len() as u64, "{st:?}");
    assert_eq!(st.kernel_drops, 0, "{st:?}");
    assert_eq!(st.truncated, 0);
}

#[test]
fn capture_on_all_interfaces_with_address_filter_and_real_tcp() {
    if !root_or_skip("capture_on_all_interfaces_with_address_filter_and_real_tcp") {
        return;
    }
    let lab = Lab::new();
    // Only 198.18.200.2:8080 is mapped; b's second address is not.
    ip(&["-n", &lab.b, "addr", "add", "198.18.200.3/24", "dev", "b0"]);
    let mut cap = open_capture(
        &lab,
        None,
        vec![FilterTarget {
            addr: Some(B_V4.parse().unwrap()),
            port: 8080,
        }],
    );

    let listener = lab.within(&lab.b, || TcpListener::bind("0.0.0.0:8080").unwrap());
    let server = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut buf).unwrap();
            bodies.push(buf);
        }
        bodies
    });
    lab.within(&lab.a, || {
        for dst in [B_V4, "198.18.200.3"] {
            let mut c = TcpStream::connect_timeout(&sa(dst, 8080), Duration::from_secs(2)).unwrap();
            std::io::Write::write_all(&mut c, format!("GET /{dst} HTTP/1.0\r\n\r\n").as_bytes())
                .unwrap();
        }
    });
    let bodies = server.join().unwrap();
    assert_eq!(bodies.len(), 2);

    // SYN, ACK, data, FIN, ACK of the first connection at least; nothing of the second one and
    // nothing the server sent (outgoing).
    let got = collect(&mut cap, 4, Duration::from_secs(3));
    assert!(got.len() >= 4, "only {} packets captured", got.len());
    let mut payload = Vec::new();
    let mut syn = false;
    for p in &got {
        let t = parse_tcp_packet(p).expect("captured packets are whole TCP packets");
        assert_eq!(t.dst, B_V4.parse::<IpAddr>().unwrap(), "address filter");
        assert_eq!(t.tcp.dst_port(), 8080, "no outgoing packet of the server");
        syn |= t.tcp.flags().contains(TcpFlags::SYN);
        payload.extend_from_slice(t.payload());
    }
    assert!(syn, "the SYN was captured");
    assert_eq!(payload, format!("GET /{B_V4} HTTP/1.0\r\n\r\n").as_bytes());
}

#[test]
fn sender_splits_when_the_route_mtu_is_smaller() {
    if !root_or_skip("sender_splits_when_the_route_mtu_is_smaller") {
        return;
    }
    let lab = Lab::new();
    ip(&["-n", &lab.a, "link", "set", "a0", "mtu", "1400"]);
    let (mut cap, mut sender) = port80_capture_and_sender(&lab);

    let body: Vec<u8> = (0..2400u32).map(|i| (i % 251) as u8).collect();
    let (src, dst) = (sa(A_V4, 41000), sa(B_V4, 80));
    let big = tcp_packet(src, dst, 7, &body);
    let mut buf = sender.buffer();
    buf.extend_from_slice(&big);
    sender.enqueue(tuple(src, dst), dst.ip(), buf);
    sender.flush(Instant::now());
    let st = *sender.stats();
    assert_eq!(st.err_msgsize, 1, "{st:?}");
    assert_eq!(st.packets, 2, "split in two halves that fit: {st:?}");

    let got = collect(&mut cap, 2, Duration::from_secs(3));
    assert_eq!(got.len(), 2);
    let mut joined = Vec::new();
    let mut seq = SeqNum(7);
    for p in &got {
        assert!(p.len() <= 1400);
        let t = parse_tcp_packet(p).unwrap();
        assert!(t.tcp_checksum_ok());
        assert_eq!(t.tcp.seq(), seq);
        seq = seq.add(t.payload().len() as u32);
        joined.extend_from_slice(t.payload());
    }
    assert_eq!(joined, body);

    // Later big packets are split before sending, without another EMSGSIZE.
    let mut buf = sender.buffer();
    buf.extend_from_slice(&tcp_packet(src, dst, 7 + 2400, &body));
    sender.enqueue(tuple(src, dst), dst.ip(), buf);
    sender.flush(Instant::now());
    assert_eq!(sender.stats().err_msgsize, 1);
    assert_eq!(sender.stats().packets, 4);
    assert_eq!(collect(&mut cap, 2, Duration::from_secs(3)).len(), 2);
}

/// The engine loop sleeps in `ppoll` on the ring socket for up to 100 ms at a time; a lone
/// packet must wake it when the kernel retires its block, not only when the block fills up.
#[test]
fn poll_wakes_when_a_partly_filled_block_retires() {
    if !root_or_skip("poll_wakes_when_a_partly_filled_block_retires") {
        return;
    }
    let lab = Lab::new();
    let (mut cap, mut sender) = port80_capture_and_sender(&lab);
    // Warm up ARP so the measured packet goes out at once.
    lab.within(&lab.a, || {
        let _ = UdpSocket::bind(sa(A_V4, 0))
            .unwrap()
            .send_to(b"arp", sa(B_V4, 9));
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!cap.has_ready());
    for round in 0..3 {
        let (src, dst) = (sa(A_V4, 42000 + round), sa(B_V4, 80));
        let mut buf = sender.buffer();
        buf.extend_from_slice(&tcp_packet(src, dst, 1, b"x"));
        let sent = Instant::now();
        sender.enqueue(tuple(src, dst), dst.ip(), buf);
        sender.flush(sent);
        let mut woke = None;
        while sent.elapsed() < Duration::from_secs(2) {
            if copier::sys::poll_readable(&[cap.fd()], Duration::from_secs(2)).unwrap() != 0
                && cap.has_ready()
            {
                woke = Some(sent.elapsed());
                break;
            }
        }
        // A block holding one small packet is handed over only when the kernel retires it
        // (5 ms timeout): without that, ppoll would sleep its whole 2 s and `woke` stay None.
        // No tight time bound: the condition is that ppoll woke with the block ready.
        let woke = woke.expect("ppoll never reported the retired block");
        assert!(
            woke < Duration::from_secs(1),
            "round {round}: woke after {woke:?}, not at the block's retirement"
        );
        let mut n = 0;
        cap.drain(usize::MAX, |_| n += 1);
        assert_eq!(n, 1);
    }
}

/// When the captured interface goes down the socket reports `ENETDOWN` through `POLLERR`; once
/// the error is read, `poll` sleeps again (no busy loop), and capture resumes when the interface
/// comes back up.
#[test]
fn interface_down_and_up() {
    if !root_or_skip("interface_down_and_up") {
        return;
    }
    let lab = Lab::new();
    let mut cap = open_capture(
        &lab,
        Some("b0"),
        vec![FilterTarget {
            addr: None,
            port: 80,
        }],
    );
    ip(&["-n", &lab.b, "link", "set", "b0", "down"]);
    let ready = copier::sys::poll_readable(&[cap.fd()], Duration::from_secs(1)).unwrap();
    assert_eq!(ready, 1, "POLLERR is reported");
    assert!(!cap.has_ready());
    let e = cap.take_error().expect("a pending error");
    assert_eq!(e.raw_os_error(), Some(nix::libc::ENETDOWN), "{e}");
    let t = Instant::now();
    assert_eq!(
        copier::sys::poll_readable(&[cap.fd()], Duration::from_millis(200)).unwrap(),
        0
    );
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "poll must sleep once the error was read"
    );

    ip(&["-n", &lab.b, "link", "set", "b0", "up"]);
    let mut sender = lab.within(&lab.a, || RawSender::open(SendConfig::default()).unwrap());
    let (src, dst) = (sa(A_V4, 43000), sa(B_V4, 80));
    // The veth carrier takes a moment; send until something arrives.
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.is_empty() && Instant::now() < deadline {
        let mut buf = sender.buffer();
        buf.extend_from_slice(&tcp_packet(src, dst, 1, b"again"));
        sender.enqueue(tuple(src, dst), dst.ip(), buf);
        sender.flush(Instant::now());
        got = collect(&mut cap, 1, Duration::from_millis(200));
    }
    assert!(
        !got.is_empty(),
        "capture resumed after the interface came back"
    );
}

/// `--workers 2`: two rings in one PACKET_FANOUT group. Every packet of a flow must land in the
/// same ring, the one its client port picks (`(port >> 1) % 2`), and both rings must get some.
#[test]
fn fanout_gives_each_ring_whole_flows() {
    if !root_or_skip("fanout_gives_each_ring_whole_flows") {
        return;
    }
    let lab = Lab::new();
    let cfg = CaptureConfig {
        interface: Some("b0".into()),
        block_size: 1 << 16,
        block_count: 4,
        initial_blocks: 4,
        retire: Duration::from_millis(5),
    };
    let filter = build_filter(&[FilterTarget {
        addr: None,
        port: 80,
    }])
    .unwrap();
    let mut caps = lab.within(&lab.b, move || {
        Capture::open_fanout(&cfg, &filter, 2).expect("open a fanout group in b")
    });
    assert_eq!(caps.len(), 2);
    let group = caps[0].fanout_group().expect("in a group");
    assert_eq!(
        caps[1].fanout_group(),
        Some(group),
        "both rings in one group"
    );
    // A second group in the same namespace gets another id (the kernel picks unique ones).
    let other = lab.within(&lab.b, move || {
        let f = build_filter(&[FilterTarget {
            addr: None,
            port: 80,
        }])
        .unwrap();
        Capture::open_fanout(
            &CaptureConfig {
                interface: Some("b0".into()),
                block_size: 1 << 16,
                block_count: 2,
                ..CaptureConfig::default()
            },
            &f,
            2,
        )
        .expect("a second group")
    });
    assert_ne!(other[0].fanout_group(), Some(group));
    drop(other);

    let mut sender = lab.within(&lab.a, || {
        RawSender::open(SendConfig::default()).expect("raw sockets in a")
    });
    const FLOWS: u16 = 64;
    const PER_FLOW: u32 = 6;
    let mut sent = 0;
    for round in 0..PER_FLOW {
        for f in 0..FLOWS {
            // IPv4 and IPv6 flows, the packets of each interleaved with every other flow's.
            let (src, dst) = if f % 4 == 3 {
                (sa(A_V6, 41000 + f), sa(B_V6, 80))
            } else {
                (sa(A_V4, 41000 + f), sa(B_V4, 80))
            };
            let p = tcp_packet(
                src,
                dst,
                1000 + 100 * round,
                format!("flow {f} packet {round}").as_bytes(),
            );
            let parsed = parse_tcp_packet(&p).unwrap();
            let mut buf = sender.buffer();
            buf.extend_from_slice(&p);
            sender.enqueue(
                tuple(parsed.src_socket(), parsed.dst_socket()),
                parsed.dst,
                buf,
            );
            sent += 1;
        }
        sender.flush(Instant::now());
    }
    assert_eq!(sender.pending(), 0, "{:?}", sender.stats());

    // Drain both rings until every packet arrived.
    let mut per_ring: Vec<Vec<Vec<u8>>> = vec![Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(5);
    while per_ring.iter().map(Vec::len).sum::<usize>() < sent && Instant::now() < deadline {
        for (i, c) in caps.iter_mut().enumerate() {
            c.drain(usize::MAX, |p| per_ring[i].push(p.to_vec()));
        }
        let fds = [caps[0].fd(), caps[1].fd()];
        let _ = copier::sys::poll_readable(&fds, Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    for (i, c) in caps.iter_mut().enumerate() {
        c.drain(usize::MAX, |p| per_ring[i].push(p.to_vec()));
    }

    // flow (client port) -> packets seen in each ring
    let mut seen: std::collections::BTreeMap<u16, [u32; 2]> = Default::default();
    for (i, pkts) in per_ring.iter().enumerate() {
        for p in pkts {
            let t = parse_tcp_packet(p).expect("a captured TCP packet");
            assert_eq!(t.tcp.dst_port(), 80);
            seen.entry(t.tcp.src_port()).or_default()[i] += 1;
        }
    }
    assert_eq!(seen.len(), FLOWS as usize, "every flow captured: {seen:?}");
    for (port, counts) in &seen {
        assert!(
            counts.contains(&0) && counts.iter().sum::<u32>() == PER_FLOW,
            "flow from port {port} split or incomplete across the rings: {counts:?}"
        );
        // The group's program: ring (client port >> 1) % 2, the engines' port shares.
        let ring = usize::from((port >> 1) % 2);
        assert_eq!(
            counts[ring], PER_FLOW,
            "flow from port {port} in the wrong ring: {counts:?}"
        );
    }
    let ring0 = seen.values().filter(|c| c[0] > 0).count();
    assert!(
        ring0 > 0 && ring0 < FLOWS as usize,
        "both rings must get flows (ring 0 got {ring0} of {FLOWS})"
    );
    for c in &mut caps {
        c.refresh_kernel_stats().unwrap();
        assert_eq!(c.stats().kernel_drops, 0);
    }
    eprintln!(
        "fanout group {group}: ring 0 got {ring0} flows, ring 1 {}",
        FLOWS as usize - ring0
    );
}

/// A raw sender in `a`, with `b`'s neighbour entry resolved.
fn sender_in_a(lab: &Lab) -> RawSender {
    let sender = lab.within(&lab.a, || {
        RawSender::open(SendConfig::default()).expect("raw sockets in a")
    });
    lab.within(&lab.a, || {
        let _ = UdpSocket::bind(sa(A_V4, 0))
            .unwrap()
            .send_to(b"arp", sa(B_V4, 9));
    });
    std::thread::sleep(Duration::from_millis(100));
    sender
}

/// Send `total` numbered TCP segments of about 1 KB from `a:port` to `b:80`, `batch` at a time
/// with `pause` between batches; returns them as sent.
fn send_numbered(
    sender: &mut RawSender,
    port: u16,
    total: u32,
    batch: u32,
    pause: Duration,
) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    for seq in 0..total {
        let body = format!("packet {seq:06} {}", "x".repeat(1000));
        let p = tcp_packet(sa(A_V4, port), sa(B_V4, 80), seq, body.as_bytes());
        let parsed = parse_tcp_packet(&p).unwrap();
        let mut buf = sender.buffer();
        buf.extend_from_slice(&p);
        sender.enqueue(
            tuple(parsed.src_socket(), parsed.dst_socket()),
            parsed.dst,
            buf,
        );
        sent.push(p);
        if seq % batch == batch - 1 {
            sender.flush(Instant::now());
            std::thread::sleep(pause);
        }
    }
    sender.flush(Instant::now());
    sent
}

/// A ring in `b` on `b0` for port 80, of 64 KiB blocks with a 5 ms timeout.
fn ring_in_b(lab: &Lab, block_count: u32, initial_blocks: u32) -> Capture {
    let cfg = CaptureConfig {
        interface: Some("b0".into()),
        block_size: 1 << 16,
        block_count,
        initial_blocks,
        retire: Duration::from_millis(5),
    };
    let filter = build_filter(&[FilterTarget {
        addr: None,
        port: 80,
    }])
    .unwrap();
    lab.within(&lab.b, move || {
        Capture::open(&cfg, &filter).expect("open capture in b")
    })
}

/// A capture thread over a fixed ring of 16 x 64 KiB in `b` (16 MiB of queue), and a sender in
/// `a`.
fn feed_in_b_and_sender(lab: &Lab) -> (Feed, RawSender) {
    let feed = Feed::start(
        ring_in_b(lab, 16, 16),
        FeedConfig {
            max_bytes: 16 << 20,
        },
    )
    .expect("capture thread");
    (feed, sender_in_a(lab))
}

/// No kernel drop, and `got` is `sent`: every packet once, in order, byte for byte.
fn assert_exact(got: &[Vec<u8>], sent: &[Vec<u8>], st: &copier::capture::CaptureStats) {
    assert_eq!(st.kernel_drops, 0, "nothing lost in the kernel: {st:?}");
    assert_eq!(got.len(), sent.len(), "every packet once: {st:?}");
    assert_eq!(
        got.iter().zip(sent).position(|(g, s)| g != s),
        None,
        "in order, byte for byte"
    );
}

#[test]
fn the_ring_grows_under_pressure_without_losing_or_repeating_a_packet() {
    if !root_or_skip("the_ring_grows_under_pressure_without_losing_or_repeating_a_packet") {
        return;
    }
    let lab = Lab::new();
    let cap = ring_in_b(&lab, 64, 8);
    assert_eq!(cap.stats().ring_bytes, 8 << 16, "it starts small");
    let mut sender = sender_in_a(&lab);
    // A sender that keeps going, a batch every 2 ms, while the capture grows (twice: 8 -> 32 ->
    // 64 blocks), so packets arrive before, during and after each switch of rings. Payloads
    // are large enough that a few dozen fill a 64 KiB block.
    const TOTAL: u32 = 6000;
    let sending = std::thread::spawn(move || {
        send_numbered(&mut sender, 40000, TOTAL, 20, Duration::from_millis(2))
    });
    // The reader is slow at first (nothing read for 25 ms: about five of the eight blocks pile
    // up, the 5 ms block timeout handing one over each time), then reads in small steps; the
    // larger rings are new sockets, opened in the reader's namespace.
    let (got, st) = lab.within(&lab.b, move || {
        let mut cap = cap;
        let mut got: Vec<Vec<u8>> = Vec::new();
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(25));
        let mut quiet_since = None;
        while start.elapsed() < Duration::from_secs(20) {
            let before = got.len();
            cap.drain(2, |p| got.push(p.to_vec()));
            if got.len() == before && !cap.has_ready() {
                let now = Instant::now();
                if got.len() >= TOTAL as usize
                    && *quiet_since.get_or_insert(now) + Duration::from_millis(200) < now
                {
                    break;
                }
                let _ = copier::sys::poll_readable(&[cap.fd()], Duration::from_millis(1));
            } else {
                quiet_since = None;
            }
            if cap.stats().ring_grows == 0 {
                // Slow until it has grown once.
                std::thread::sleep(Duration::from_millis(3));
            }
        }
        cap.refresh_kernel_stats().unwrap();
        (got, cap.stats())
    });
    let sent = sending.join().unwrap();
    eprintln!("{st:?}");
    assert!(st.ring_grows >= 1, "under pressure it grows: {st:?}");
    assert_exact(&got, &sent, &st);
    let blocks = if st.ring_grows == 1 { 32 } else { 64 };
    assert_eq!(
        st.ring_bytes,
        blocks << 16,
        "only the newest ring stays mapped: {st:?}"
    );
}

#[test]
fn the_capture_thread_absorbs_a_stalled_engine_beyond_the_ring() {
    if !root_or_skip("the_capture_thread_absorbs_a_stalled_engine_beyond_the_ring") {
        return;
    }
    let lab = Lab::new();
    // A fixed ring of 16 x 64 KiB: about 960 of the packets below fit in it. (Four blocks made
    // the test depend on the capture thread being scheduled within 5 ms under a loaded CI
    // machine; it failed once that way. A ring a third of the burst still shows the point.)
    let (mut feed, mut sender) = feed_in_b_and_sender(&lab);
    // 3000 packets of 1 KB (3 MB, three times the ring) while the engine takes nothing; at
    // 25 MB/s the ring covers 40 ms of the thread not being scheduled.
    let sent = send_numbered(&mut sender, 40001, 3000, 50, Duration::from_millis(2));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        feed.queued_bytes() > 1 << 20,
        "the thread holds what the engine did not take: {}",
        feed.queued_bytes()
    );
    let mut got: Vec<Vec<u8>> = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while got.len() < sent.len() && Instant::now() < until {
        if feed.drain(4, |p| got.push(p.to_vec())) == 0 {
            let _ = copier::sys::poll_readable(&[feed.fd()], Duration::from_millis(20));
        }
    }
    std::thread::sleep(Duration::from_millis(250));
    let st = feed.stats();
    assert_exact(&got, &sent, &st);
    assert_eq!(feed.queued_bytes(), 0);
}

#[test]
fn the_capture_threads_wake_up_is_read_once_and_never_spins() {
    if !root_or_skip("the_capture_threads_wake_up_is_read_once_and_never_spins") {
        return;
    }
    let lab = Lab::new();
    let (mut feed, mut sender) = feed_in_b_and_sender(&lab);
    // Small bursts with pauses, while the engine side below takes them the way the engine
    // loop does: poll, read the wake-up when the poll says so, take every batch.
    let sending = std::thread::spawn(move || {
        send_numbered(&mut sender, 40002, 2000, 10, Duration::from_millis(1))
    });
    let (mut got, mut wakes, mut empty_wakes, mut batches) = (Vec::new(), 0u64, 0u64, 0u64);
    let until = Instant::now() + Duration::from_secs(10);
    while got.len() < 2000 && Instant::now() < until {
        let ready = copier::sys::poll_readable(&[feed.fd()], Duration::from_millis(50)).unwrap();
        if ready & 1 != 0 {
            wakes += 1;
            feed.woken();
        }
        let n = feed.drain(usize::MAX, |p| got.push(p.to_vec()));
        batches += n as u64;
        if ready & 1 != 0 && n == 0 {
            empty_wakes += 1;
        }
    }
    let sent = sending.join().unwrap();
    std::thread::sleep(Duration::from_millis(250));
    feed.drain(usize::MAX, |p| got.push(p.to_vec()));
    assert_exact(&got, &sent, &feed.stats());
    // A wake-up that finds nothing is one whose batch an earlier drain already took: at most
    // one per batch. (A wake-up that stayed readable after its batch was taken made the engine
    // loop spin until the capture thread ran again.)
    assert!(
        empty_wakes <= batches,
        "{empty_wakes} empty wake-ups for {batches} batches ({wakes} wake-ups)"
    );
    // Everything taken, no more traffic: the descriptor is not readable.
    let ready = copier::sys::poll_readable(&[feed.fd()], Duration::ZERO).unwrap();
    if ready & 1 != 0 {
        feed.woken();
    }
    assert_eq!(feed.drain(usize::MAX, |_| ()), 0);
    assert_eq!(
        copier::sys::poll_readable(&[feed.fd()], Duration::ZERO).unwrap(),
        0,
        "idle: not readable"
    );
    println!("{wakes} wake-ups, {empty_wakes} of them empty, {batches} batches");
}

//! copier-floor: a measuring tool, not part of the product. It is the copier's floor in
//! `bench_copier` (issue 32): the least a copier could spend to put the same captured segments
//! on the wire toward a test server.
//!
//! It takes the clients' segments from the copier's own capture ring ([`copier::capture`], the
//! same ring sizes, the same kernel filter as `copier --map` builds, read by the same capture
//! thread, [`copier::feed`]), rewrites each segment's destination address and port (the source
//! address is kept, as the copier keeps it without `--client-ip`) with incremental checksum
//! updates (RFC 1624), and queues it on the copier's sender ([`copier::send`]: raw `IP_HDRINCL`
//! sockets, `sendmmsg` batches, super-segments whole through `AF_PACKET` with a GSO header as
//! `--gso auto` sends them). It keeps no session state: no reassembly, no sequence numbers
//! rewritten, no pacing, no intercept, no records. So its copies make no working session at the
//! test server (a copied segment meets no connection there and is answered with a reset, or
//! dropped): that is what a floor is.
//!
//! One exception to "incremental": on veth (and wherever the kernel offloads checksums) the
//! captured TCP checksum is unfinished, only the pseudo-header's sum; such a segment gets a full
//! checksum, as the copier must give it too (a super-segment that leaves whole gets the
//! pseudo-header's sum, finished by the kernel per piece, as the copier's do).
//!
//! It runs until killed and prints its counters every second in which they changed
//! (`bench_copier` reads the last line).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use common::checksum;
use common::flow::FourTuple;
use common::wire::{parse_tcp_packet, TcpFlags};
use copier::bpf::{build_filter, FilterTarget};
use copier::capture::{Capture, CaptureConfig};
use copier::feed::{Feed, FeedConfig};
use copier::send::{RawSender, SendConfig};

/// How often the counters are printed (when they changed).
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// The copier's engine loop: batches taken from the capture thread per turn, the longest
/// sleep, and the send queue's high-water mark.
const BATCHES_PER_TURN: usize = copier::run::BATCHES_PER_TURN;
const MAX_WAIT: Duration = copier::run::MAX_WAIT;

#[derive(Debug, Parser)]
#[command(
    name = "copier-floor",
    version,
    about = "A measuring tool, not part of the product: the copier's floor in bench_copier. Captures \
             the segments clients send to PORT with the copier's capture ring and filter, rewrites \
             their destination to ADDR:TPORT (incremental checksums) and sends them with the \
             copier's sender (sendmmsg batches, GSO super-segments), keeping no session state: no \
             reassembly, no sequence rewrite, no pacing, no intercept. Its copies make no working \
             session at the test server; that is what a floor is. Runs until killed; prints its \
             counters every second in which they changed."
)]
struct Args {
    /// PORT=ADDR:TPORT: the online port to capture and where its segments go (IPv4 only).
    #[arg(long, value_name = "PORT=ADDR:TPORT")]
    map: String,
    /// Interface to capture on (all if not given), as the copier's --interface.
    #[arg(long, value_name = "IF")]
    interface: Option<String>,
    /// Capture ring: bytes per block (the copier's default).
    #[arg(long, value_name = "BYTES", default_value_t = 256 * 1024)]
    ring_block_size: u32,
    /// Capture ring: the most blocks (the copier's default).
    #[arg(long, value_name = "N", default_value_t = 128)]
    ring_blocks: u32,
    /// Capture ring: blocks it starts with (the copier's default).
    #[arg(long, value_name = "N", default_value_t = 64)]
    ring_start_blocks: u32,
    /// MTU of the copies: a segment whose headers and payload exceed it leaves as a
    /// super-segment of pieces this size (cut by the kernel with --gso auto, else by the sender).
    #[arg(long, value_name = "BYTES", default_value_t = 1500)]
    mtu: u16,
    /// auto: super-segments leave whole where the path takes them (the copier's default); off:
    /// cut in user space.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["auto", "off"])]
    gso: String,
    /// Send only the segments that carry data or SYN, FIN or RST: leave out the clients' bare
    /// ACKs (the copier makes its own toward the test server).
    #[arg(long)]
    data_only: bool,
}

/// Where the captured segments go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Target {
    addr: Ipv4Addr,
    port: u16,
}

fn parse_map(s: &str) -> Result<(u16, Target)> {
    let (port, to) = s.split_once('=').context("--map wants PORT=ADDR:TPORT")?;
    let (addr, tport) = to.rsplit_once(':').context("--map wants PORT=ADDR:TPORT")?;
    Ok((
        port.trim().parse().context("--map: the online port")?,
        Target {
            addr: addr.trim().parse().context("--map: an IPv4 address")?,
            port: tport.trim().parse().context("--map: the target port")?,
        },
    ))
}

/// What [`rewrite`] did to a packet's TCP checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Csum {
    /// Updated for the new address and port (RFC 1624).
    Incremental,
    /// The captured checksum was unfinished (the pseudo-header's sum): computed whole.
    Full,
    /// Unfinished and left so: a super-segment, whose checksum the sender sets (the
    /// pseudo-header's sum for the kernel's GSO, or a fresh one on each piece it cuts).
    Left,
}

/// Rewrite the IPv4 + TCP packet `p` in place to go to `to`: destination address and port, the
/// IPv4 header checksum and the TCP checksum updated incrementally; a TCP checksum that was
/// unfinished (only the pseudo-header's sum, as captured on veth) is computed whole if
/// `finish`, else left for the sender. `None` (nothing changed) if `p` is not an unfragmented
/// IPv4 TCP packet.
fn rewrite(p: &mut [u8], to: Target, finish: bool) -> Option<Csum> {
    let (ihl, src, old_dst, seg_len) = {
        let t = parse_tcp_packet(p).ok()?;
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else {
            return None;
        };
        (t.ip_header_len, src, dst, t.ip_total_len - t.ip_header_len)
    };
    let seg_len = u32::try_from(seg_len).ok()?;
    let (new_dst, old_port) = (
        to.addr.octets(),
        u16::from_be_bytes([p[ihl + 2], p[ihl + 3]]),
    );
    // IPv4 header: destination address and its checksum.
    let ip_csum = u16::from_be_bytes([p[10], p[11]]);
    p[10..12].copy_from_slice(
        &checksum::update_bytes(ip_csum, &old_dst.octets(), &new_dst).to_be_bytes(),
    );
    p[16..20].copy_from_slice(&new_dst);
    // TCP: destination port, and the checksum over the pseudo-header's address and the port.
    let at = ihl + 16;
    let tcp_csum = u16::from_be_bytes([p[at], p[at + 1]]);
    p[ihl + 2..ihl + 4].copy_from_slice(&to.port.to_be_bytes());
    let unfinished = checksum::fold(checksum::pseudo_header(
        src.into(),
        old_dst.into(),
        6,
        seg_len,
    ));
    if tcp_csum == unfinished && !finish {
        return Some(Csum::Left);
    }
    if tcp_csum == unfinished {
        p[at..at + 2].fill(0);
        let end = ihl + seg_len as usize;
        let c = checksum::transport(src.into(), to.addr.into(), 6, &p[ihl..end]);
        p[at..at + 2].copy_from_slice(&c.to_be_bytes());
        return Some(Csum::Full);
    }
    let c = checksum::update_bytes(tcp_csum, &old_dst.octets(), &new_dst);
    let c = checksum::update_u16(c, old_port, to.port);
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Some(Csum::Incremental)
}

/// A TCP segment with no payload and none of SYN, FIN, RST.
fn is_bare_ack(p: &[u8]) -> bool {
    parse_tcp_packet(p).is_ok_and(|t| {
        t.tcp.payload().is_empty()
            && !t
                .tcp
                .flags()
                .intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST)
    })
}

#[derive(Debug, Default)]
struct Counts {
    captured: u64,
    rewritten: u64,
    full_checksums: u64,
    skipped: u64,
    /// Bare ACKs left out (`--data-only`).
    bare_acks: u64,
    super_segments: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let (online_port, to) = parse_map(&args.map)?;
    let cfg = CaptureConfig {
        interface: args.interface.clone(),
        block_size: args.ring_block_size,
        block_count: args.ring_blocks,
        initial_blocks: args.ring_start_blocks.min(args.ring_blocks),
        ..CaptureConfig::default()
    };
    if args.mtu < 576 {
        bail!("--mtu {} is below 576", args.mtu);
    }
    let filter = build_filter(&[FilterTarget {
        addr: None,
        port: online_port,
    }])
    .context("building the capture filter")?;
    let capture = Capture::open(&cfg, &filter).context("opening the capture ring (run as root)")?;
    let feed_cfg = FeedConfig {
        max_bytes: cfg.block_size as usize * cfg.block_count as usize,
    };
    let mut feed = Feed::start(capture, feed_cfg).context("starting the capture thread")?;
    let mut sender = RawSender::open(SendConfig {
        mtu: args.mtu,
        gso: args.gso == "auto",
        ..SendConfig::default()
    })
    .context("opening the raw send sockets (run as root)")?;
    eprintln!(
        "copier-floor: capturing port {online_port} on {}, sending to {}:{} (gso {}), no session state",
        args.interface.as_deref().unwrap_or("all interfaces"),
        to.addr,
        to.port,
        args.gso
    );
    let mut n = Counts::default();
    let mut next_report = Instant::now() + REPORT_EVERY;
    let mut reported = 0;
    let dst = IpAddr::V4(to.addr);
    loop {
        let now = Instant::now();
        feed.drain(BATCHES_PER_TURN, |pkt| {
            n.captured += 1;
            if args.data_only && is_bare_ack(pkt) {
                n.bare_acks += 1;
                return;
            }
            let mut buf = sender.buffer();
            buf.extend_from_slice(pkt);
            // a super-segment's checksum is the sender's to set
            let one_segment = buf.len() <= usize::from(args.mtu);
            let Some(how) = rewrite(&mut buf, to, one_segment) else {
                n.skipped += 1;
                sender.recycle(buf);
                return;
            };
            n.rewritten += 1;
            if how == Csum::Full {
                n.full_checksums += 1;
            }
            let Ok(t) = parse_tcp_packet(&buf) else {
                return;
            };
            let headers = t.ip_header_len + t.tcp.header_len();
            let tuple = FourTuple::new(
                SocketAddr::new(t.src, t.tcp.src_port()),
                SocketAddr::new(dst, to.port),
            );
            let gso_size = if !one_segment {
                args.mtu.saturating_sub(headers as u16)
            } else {
                0
            };
            if gso_size > 0 {
                n.super_segments += 1;
            }
            sender.enqueue_segment(tuple, dst, buf, gso_size, now);
        });
        sender.flush(now);
        let due = now >= next_report;
        if due {
            next_report = now + REPORT_EVERY;
        }
        if due && n.captured != reported {
            reported = n.captured;
            let s = sender.stats();
            let c = feed.stats();
            eprintln!(
                "copier-floor: captured {} (kernel drops {}), bare ACKs left out {}, rewritten {} ({} with a full checksum), skipped {}, \
                 super-segments {}; sent {} packets in {} sendmmsg, {} whole through GSO; dropped {} (queue full), errors {}",
                n.captured,
                c.kernel_drops,
                n.bare_acks,
                n.rewritten,
                n.full_checksums,
                n.skipped,
                n.super_segments,
                s.packets,
                s.syscalls,
                s.gso_whole,
                s.dropped_queue_full,
                s.err_other + s.err_perm + s.gso_errors,
            );
        }
        if feed.has_ready() {
            continue;
        }
        let mut wait = MAX_WAIT.min(next_report.saturating_duration_since(Instant::now()));
        if let Some(t) = sender.wakeup() {
            wait = wait.min(t.saturating_duration_since(Instant::now()));
        }
        if copier::sys::poll_readable(&[feed.fd()], wait)? != 0 {
            feed.woken();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::seq::SeqNum;
    use common::wire::{TcpBuilder, TcpOption};

    fn packet(payload: &[u8]) -> Vec<u8> {
        let ts = [TcpOption::Timestamps { tsval: 5, tsecr: 6 }];
        let mut out = Vec::new();
        TcpBuilder {
            src: "198.18.0.2:40001".parse().unwrap(),
            dst: "198.18.1.1:80".parse().unwrap(),
            seq: SeqNum(4_294_960_000),
            ack: SeqNum(77),
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 500,
            options: &ts,
            payload,
            ttl: 64,
            ident: 65_530,
        }
        .emit(&mut out);
        out
    }

    fn valid(p: &[u8]) -> bool {
        let t = parse_tcp_packet(p).unwrap();
        let end = t.ip_total_len;
        checksum::ipv4_header(&p[..t.ip_header_len]) == 0
            && checksum::verify_transport(t.src, t.dst, 6, &p[t.ip_header_len..end])
    }

    const TO: Target = Target {
        addr: Ipv4Addr::new(198, 18, 2, 1),
        port: 9,
    };

    #[test]
    fn checksums_stay_valid_after_the_incremental_rewrite() {
        for len in [0, 1, 7, 100, 1448, 5000] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut p = packet(&payload);
            assert!(valid(&p));
            assert_eq!(rewrite(&mut p, TO, true), Some(Csum::Incremental));
            assert!(valid(&p), "payload {len}");
            let t = parse_tcp_packet(&p).unwrap();
            assert_eq!(t.dst, IpAddr::V4(TO.addr));
            assert_eq!(t.tcp.dst_port(), 9);
            assert_eq!(t.src, "198.18.0.2".parse::<IpAddr>().unwrap());
            assert_eq!(t.tcp.src_port(), 40001);
            assert_eq!(t.tcp.payload(), &payload[..]);
        }
    }

    #[test]
    fn an_unfinished_checksum_is_computed_whole() {
        let mut p = packet(b"GET / HTTP/1.1\r\n\r\n");
        // as captured on veth: the TCP checksum holds only the pseudo-header's sum
        let t = parse_tcp_packet(&p).unwrap();
        let (ihl, len) = (t.ip_header_len, (t.ip_total_len - t.ip_header_len) as u32);
        let partial = checksum::fold(checksum::pseudo_header(t.src, t.dst, 6, len));
        p[ihl + 16..ihl + 18].copy_from_slice(&partial.to_be_bytes());
        assert!(!valid(&p));
        let mut q = p.clone();
        assert_eq!(rewrite(&mut p, TO, true), Some(Csum::Full));
        assert!(valid(&p));
        // a super-segment's is left to the sender, its address and port rewritten
        assert_eq!(rewrite(&mut q, TO, false), Some(Csum::Left));
        assert_eq!(q[..ihl + 16], p[..ihl + 16]);
    }

    #[test]
    fn not_ipv4_tcp_is_left_alone() {
        let mut junk = vec![0x45u8, 0, 0, 20];
        assert_eq!(rewrite(&mut junk, TO, true), None);
        assert_eq!(junk, [0x45, 0, 0, 20]);
    }

    #[test]
    fn bare_acks() {
        assert!(!is_bare_ack(&packet(b"x")));
        assert!(is_bare_ack(&packet(b"")));
    }

    #[test]
    fn maps() {
        assert_eq!(parse_map("80=198.18.2.1:9").unwrap(), (80, TO));
        assert!(parse_map("80").is_err());
        assert!(parse_map("80=[::1]:9").is_err());
    }
}

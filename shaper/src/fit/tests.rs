//! The definitions of sessions and requests over hand-made packets; whole captures with known
//! statistics are fitted in `tests/fit_plot.rs`.

use std::net::SocketAddr;

use common::seq::SeqNum;
use common::testkit;
use common::wire::{TcpBuilder, TcpFlags};

use super::*;

const CLIENT: &str = "198.18.0.10:40000";
const SERVER: &str = "198.18.1.1:80";

fn pkt(src: &str, dst: &str, seq: u32, ack: u32, flags: TcpFlags, payload: &[u8]) -> Vec<u8> {
    testkit::emit(&TcpBuilder {
        src: src.parse::<SocketAddr>().unwrap(),
        dst: dst.parse::<SocketAddr>().unwrap(),
        seq: SeqNum(seq),
        ack: SeqNum(ack),
        flags,
        payload,
        ident: 1,
        ..testkit::SEGMENT
    })
}

fn data(seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    pkt(
        CLIENT,
        SERVER,
        seq,
        ack,
        TcpFlags::ACK | TcpFlags::PSH,
        payload,
    )
}

fn answer(seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    pkt(
        SERVER,
        CLIENT,
        seq,
        ack,
        TcpFlags::ACK | TcpFlags::PSH,
        payload,
    )
}

fn fit(packets: &[(f64, Vec<u8>)]) -> Fit {
    let mut f = Fitter::new(FitConfig::new(80));
    for (t, p) in packets {
        f.handle_packet(1000.0 + t, p);
    }
    f.finish()
}

#[test]
fn requests_are_split_on_a_new_ack_or_an_answer() {
    let syn = pkt(CLIENT, SERVER, 99, 0, TcpFlags::SYN, b"");
    let packets = vec![
        (0.0, syn.clone()),
        (0.0, syn), // a repeated SYN is the same session
        (0.1, data(100, 500, b"GET /a")),
        (0.11, data(106, 500, b" HTTP/1.1\r\n\r\n")), // same request, second segment
        (0.12, data(100, 500, b"GET /a")),            // retransmission
        (0.2, answer(500, 119, b"HTTP/1.1 200 OK\r\n\r\n")),
        (0.3, data(119, 519, b"GET /b")), // ACK moved: new request
        (0.4, answer(519, 125, b"HTTP/1.1 200 OK\r\n\r\n")),
        (0.5, data(125, 519, b"GET /c")), // ACK did not move, but an answer came: new
        (0.6, data(131, 519, b"GET /d")), // pipelined, nothing in between: same request
        (
            0.7,
            pkt(CLIENT, SERVER, 137, 519, TcpFlags::FIN | TcpFlags::ACK, b""),
        ),
        // Port reuse: a SYN after the FIN is a new session.
        (2.0, pkt(CLIENT, SERVER, 9000, 0, TcpFlags::SYN, b"")),
        (2.1, data(9001, 700, b"GET /e")),
        // Mid-stream session of another client (the capture started late), another port's
        // traffic, and bytes that are not TCP.
        (
            3.0,
            pkt("198.18.0.11:5000", SERVER, 1, 1, TcpFlags::ACK, b"GET /f"),
        ),
        (
            3.1,
            pkt(
                "198.18.0.11:5000",
                "198.18.1.1:443",
                1,
                1,
                TcpFlags::ACK,
                b"x",
            ),
        ),
        (3.2, vec![0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0]),
    ];
    let f = fit(&packets);
    assert_eq!((f.packets, f.service_packets), (16, 14));
    assert_eq!((f.sessions, f.requests), (3, 5));
    let a = &f.clients[0];
    assert_eq!(a.addr.to_string(), "198.18.0.10");
    assert_eq!((a.sessions, a.requests), (2, 4));
    let t: Vec<f64> = a
        .request_times
        .iter()
        .map(|t| (t * 1000.0).round() / 1000.0)
        .collect();
    assert_eq!(t, vec![0.1, 0.3, 0.5, 2.1]);
    assert_eq!((f.clients[1].sessions, f.clients[1].requests), (1, 1));
    assert!((f.span - 3.2).abs() < 1e-9);
    assert_eq!(f.session_shares(), vec![2.0 / 3.0, 1.0 / 3.0]);
    // Gaps 0.2, 0.2, 1.6: bursts [0.1, 0.5] and [2.1]; the median short gap is the unit.
    assert_eq!(f.gaps.len(), 3);
    assert!((f.unit - 0.2).abs() < 1e-9, "{}", f.unit);
    // Sessions per client 2 and 1, mean 1.5: activities 2/1.5 and 1/1.5, half the clients each.
    assert_eq!(f.activity_table(), vec![[0.6667, 0.5], [1.333, 0.5]]);
}

#[test]
fn an_empty_capture_still_gives_a_valid_profile() {
    let f = fit(&[]);
    assert_eq!((f.sessions, f.requests, f.clients.len()), (0, 0, 0));
    assert!(f.hill_on.is_none() && f.hill_off.is_none());
    let p = f.profile();
    p.validate().unwrap();
    assert_eq!(p.onoff.sources, 1);
    let text = f.profile_toml();
    assert_eq!(Profile::from_toml_str(&text).unwrap(), p);
    assert!(text.contains("tail index OFF n/a"), "{text}");
}

#[test]
fn many_distinct_activities_are_binned() {
    let mut f = Fitter::new(FitConfig::new(80));
    // Client k opens k sessions (k = 1..=40): 40 distinct values, binned.
    let mut t = 0.0;
    for k in 1..=40u32 {
        for s in 0..k {
            let src = format!("198.18.{}.{}:{}", k / 200, k % 200 + 1, 1024 + s);
            f.handle_packet(t, &pkt(&src, SERVER, 1, 0, TcpFlags::SYN, b""));
            t += 0.001;
        }
    }
    let fit = f.finish();
    assert_eq!(fit.sessions, 820);
    let table = fit.activity_table();
    assert!(table.len() <= 16 && table.len() > 4, "{table:?}");
    let total: f64 = table.iter().map(|r| r[1]).sum();
    assert!((total - 1.0).abs() < 1e-3, "{table:?}");
    // The mean activity over clients stays 1.
    let mean: f64 = table.iter().map(|r| r[0] * r[1]).sum();
    assert!((mean - 1.0).abs() < 0.01, "{mean}");
    fit.profile().validate().unwrap();
}

#[test]
fn rounding_keeps_four_digits() {
    assert_eq!(round4(1.234_567), 1.235);
    assert_eq!(round4(0.000_123_456), 0.000_123_5);
    assert_eq!(round4(98_765.4), 98_770.0);
    assert_eq!(round4(0.0), 0.0);
}

//! `shaper fit` and `shaper plot` over a capture written here with known clients, sessions,
//! requests and Pareto ON/OFF timing: the fit recovers the counts exactly and the tail indices
//! closely, its profile validates, and the binary (run as a user would, no lab needed) writes
//! the profile and well-formed pictures of every kind.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::pcap::LinkType;
use common::seq::SeqNum;
use common::testkit;
use common::wire::{TcpBuilder, TcpFlags};
use rand::rngs::StdRng;
use rand::SeedableRng;
use shaper::fit::{FitConfig, Fitter};
use shaper::pareto::Pareto;
use shaper::Profile;

const ALPHA_ON: f64 = 1.3;
const ALPHA_OFF: f64 = 1.5;
/// Requests of a burst are this far apart (well under the 1 s idle gap).
const SPACING: f64 = 0.1;

/// What the synthetic capture holds, client by client.
struct Truth {
    clients: Vec<(IpAddr, u64, u64)>,
    frames: Vec<(f64, Vec<u8>)>,
}

fn segment(
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    payload: &[u8],
) -> Vec<u8> {
    testkit::emit(&TcpBuilder {
        src,
        dst,
        seq: SeqNum(seq),
        ack: SeqNum(ack),
        flags,
        window: 65000,
        payload,
        ident: 0,
        ..testkit::SEGMENT
    })
}

/// `clients` clients of a web server on port 80: client i opens `1 + 7i mod 5` sessions over
/// `bursts` bursts of requests; a burst lasts a Pareto(1.3, 0.2 s) time filled with requests
/// every 0.1 s, and the gap to the next burst is Pareto(1.5, 2 s). Client 0 retransmits each
/// request, client 1 sends each in two segments, client 2 reuses one port for all its sessions;
/// the last client is IPv6. Traffic to port 443 and a UDP packet are mixed in.
fn synth(clients: usize, bursts: usize, seed: u64) -> Truth {
    let mut rng = StdRng::seed_from_u64(seed);
    let on = Pareto::new(ALPHA_ON, 0.2).unwrap();
    let off = Pareto::new(ALPHA_OFF, 2.0).unwrap();
    let mut frames = Vec::new();
    let mut truth = Vec::new();
    let response = vec![b'x'; 300];
    for i in 0..clients {
        let v6 = i == clients - 1;
        let (caddr, saddr): (IpAddr, IpAddr) = if v6 {
            ("fd00::10".parse().unwrap(), "fd00::1".parse().unwrap())
        } else {
            (
                format!("198.18.0.{}", 10 + i).parse().unwrap(),
                "198.18.1.1".parse().unwrap(),
            )
        };
        let server = SocketAddr::new(saddr, 80);
        let sessions = 1 + (7 * i) % 5;
        // The request times of each burst.
        let mut t = 1.0 + i as f64 * 0.37;
        let mut burst_times = Vec::with_capacity(bursts);
        for _ in 0..bursts {
            let n = (on.sample(&mut rng) / SPACING).floor() as usize + 1;
            let times: Vec<f64> = (0..n).map(|k| t + k as f64 * SPACING).collect();
            t = times[n - 1] + off.sample(&mut rng);
            burst_times.push(times);
        }
        let mut requests = 0u64;
        for s in 0..sessions {
            let port = if i == 2 {
                20_200
            } else {
                20_000 + 100 * i as u16 + s as u16
            };
            let client = SocketAddr::new(caddr, port);
            let mine = &burst_times[s * bursts / sessions..(s + 1) * bursts / sessions];
            let start = mine[0][0];
            let (mut cseq, mut sseq) = (1000u32 + s as u32, 5000u32);
            let mut put = |at: f64, from_client: bool, seq, ack, flags, payload: &[u8]| {
                let (a, b) = if from_client {
                    (client, server)
                } else {
                    (server, client)
                };
                frames.push((at, segment(a, b, seq, ack, flags, payload)));
            };
            put(start - 0.03, true, cseq, 0, TcpFlags::SYN, b"");
            put(
                start - 0.02,
                false,
                sseq,
                cseq + 1,
                TcpFlags::SYN | TcpFlags::ACK,
                b"",
            );
            cseq += 1;
            sseq += 1;
            put(start - 0.01, true, cseq, sseq, TcpFlags::ACK, b"");
            let mut last = start;
            for (k, &rt) in mine.iter().flatten().enumerate() {
                let req = format!("GET /{i}/{k} HTTP/1.1\r\nHost: x\r\n\r\n");
                let data = TcpFlags::ACK | TcpFlags::PSH;
                if i == 1 {
                    let (a, b) = req.as_bytes().split_at(10);
                    put(rt, true, cseq, sseq, data, a);
                    put(rt + 0.001, true, cseq + 10, sseq, data, b);
                } else {
                    put(rt, true, cseq, sseq, data, req.as_bytes());
                    if i == 0 {
                        put(rt + 0.005, true, cseq, sseq, data, req.as_bytes());
                    }
                }
                cseq += req.len() as u32;
                put(rt + 0.02, false, sseq, cseq, data, &response);
                sseq += response.len() as u32;
                requests += 1;
                last = rt;
            }
            put(
                last + 0.05,
                true,
                cseq,
                sseq,
                TcpFlags::FIN | TcpFlags::ACK,
                b"",
            );
            put(
                last + 0.06,
                false,
                sseq,
                cseq + 1,
                TcpFlags::FIN | TcpFlags::ACK,
                b"",
            );
            // Another service of the same host: not counted.
            let other = SocketAddr::new(saddr, 443);
            let hello = segment(client, other, 1, 1, TcpFlags::ACK | TcpFlags::PSH, b"hello");
            frames.push((last + 0.07, hello));
        }
        truth.push((caddr, sessions as u64, requests));
    }
    // A UDP datagram (not TCP): ignored.
    frames.push((
        0.5,
        vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 9, 198, 18, 1, 1, 0, 53, 0, 53,
            0, 8, 0, 0,
        ],
    ));
    frames.sort_by(|a, b| a.0.total_cmp(&b.0));
    Truth {
        clients: truth,
        frames,
    }
}

/// The capture as pcap bytes, frames wrapped in Ethernet or raw.
fn pcap(truth: &Truth, link: LinkType) -> Vec<u8> {
    let frames: Vec<(Duration, Vec<u8>)> = truth
        .frames
        .iter()
        .map(|(t, ip)| {
            let ts = Duration::from_secs_f64(1_700_000_000.0 + t);
            let frame = match link {
                LinkType::Ethernet => {
                    testkit::eth(if ip[0] >> 4 == 6 { 0x86dd } else { 0x0800 }, ip)
                }
                _ => ip.clone(),
            };
            (ts, frame)
        })
        .collect();
    testkit::pcap_file(link, &frames)
}

#[test]
fn fit_recovers_counts_exactly_and_tails_closely() {
    let truth = synth(12, 200, 7);
    let bytes = pcap(&truth, LinkType::Raw);
    let mut reader = common::pcap::Reader::new(&bytes[..]).unwrap();
    let mut fitter = Fitter::new(FitConfig::new(80));
    while let Some(ev) = reader.next_event().unwrap() {
        if let common::pcap::Event::Packet(p) = ev {
            fitter.handle_packet(p.ts.as_secs_f64(), p.data);
        }
    }
    let fit = fitter.finish();
    eprintln!("{fit}");
    let mut got: Vec<(IpAddr, u64, u64)> = fit
        .clients
        .iter()
        .map(|c| (c.addr, c.sessions, c.requests))
        .collect();
    got.sort();
    let mut want = truth.clients.clone();
    want.sort();
    assert_eq!(got, want, "sessions and requests per client");
    let sessions: u64 = want.iter().map(|c| c.1).sum();
    assert_eq!(fit.sessions, sessions);
    assert_eq!(fit.requests, want.iter().map(|c| c.2).sum::<u64>());
    // The client address frequencies are the session shares.
    for (c, share) in fit.clients.iter().zip(fit.session_shares()) {
        assert_eq!(share, c.sessions as f64 / sessions as f64);
    }
    // The request unit is the spacing inside bursts, and every burst but the ends of each
    // client is a complete ON period.
    assert!((fit.unit - SPACING).abs() < 1e-6, "unit {}", fit.unit);
    assert_eq!(fit.off.len(), 12 * 199);
    assert_eq!(fit.on.len(), 12 * 198);
    let on = fit.hill_on.unwrap();
    let off = fit.hill_off.unwrap();
    assert!((off.alpha - ALPHA_OFF).abs() < 0.25, "OFF {off:?}");
    assert!((on.alpha - ALPHA_ON).abs() < 0.25, "ON {on:?}");
    // The profile takes them and validates.
    let text = fit.profile_toml();
    let p = Profile::from_toml_str(&text).unwrap();
    assert_eq!(p, fit.profile());
    assert_eq!(p.onoff.sources, 12);
    assert!((p.onoff.alpha_off - off.alpha).abs() < 1e-3);
    assert!((p.onoff.alpha_on - on.alpha).abs() < 1e-3);
    assert_eq!(p.pools.len(), 1);
    assert_eq!(p.pools[0].users, 12);
    // Activities: sessions 1..=5 relative to the mean, weighted by how many clients have each.
    let table = &p.pools[0].activity.table;
    assert_eq!(table.len(), 5);
    let mean = sessions as f64 / 12.0;
    for (k, row) in table.iter().enumerate() {
        let s = (k + 1) as u64;
        let n = want.iter().filter(|c| c.1 == s).count() as f64;
        assert!((row[0] - s as f64 / mean).abs() < 1e-3, "{table:?}");
        assert!((row[1] - n / 12.0).abs() < 1e-3, "{table:?}");
    }
    p.pool_specs().unwrap();
    p.onoff_model().unwrap();
}

// ---------------------------------------------------------------------------------------------
// The binary

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("shaper-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn shaper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shaper"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = shaper(args);
    assert!(
        out.status.success(),
        "shaper {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One root element, balanced tags, quoted attributes, no bare `<` or `&` in text.
fn assert_well_formed_svg(svg: &str) {
    assert!(svg.starts_with("<svg "));
    let (mut stack, mut rest, mut roots) = (Vec::new(), svg, 0);
    while let Some(open) = rest.find('<') {
        let text = &rest[..open];
        assert!(!text.contains('>'));
        assert!(text
            .split('&')
            .skip(1)
            .all(|t| ["amp;", "lt;", "gt;", "quot;", "#39;"]
                .iter()
                .any(|e| t.starts_with(e))));
        let close = open + rest[open..].find('>').unwrap();
        let tag = &rest[open + 1..close];
        assert_eq!(tag.matches('"').count() % 2, 0, "{tag}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(name.to_string()));
        } else if !tag.ends_with('/') {
            roots += usize::from(stack.is_empty());
            stack.push(tag.split_whitespace().next().unwrap().to_string());
        }
        rest = &rest[close + 1..];
    }
    assert!(stack.is_empty() && roots == 1 && rest.trim().is_empty());
}

fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    )
}

/// Plots `input` for every section in both formats; checks each file and the line printed.
fn plot_all(dir: &TempDir, tag: &str, input: &Path, extra: &[&str]) {
    for what in ["rate", "onoff", "users", "pools", "all"] {
        for ext in ["png", "svg"] {
            let out = dir.join(&format!("{tag}-{what}.{ext}"));
            let mut args = vec!["plot", s(input), "--what", what, "--out", s(&out)];
            args.extend_from_slice(extra);
            let line = ok(&args);
            let bytes = std::fs::read(&out).unwrap();
            if ext == "png" {
                let (w, h) = png_size(&bytes);
                assert_eq!(w, 1200);
                assert!(
                    line.contains(&format!("1200 x {h} PNG, {} bytes ({what})", bytes.len())),
                    "{line}"
                );
            } else {
                assert_well_formed_svg(std::str::from_utf8(&bytes).unwrap());
            }
        }
    }
}

#[test]
fn cli_fits_a_capture_and_plots_everything() {
    let dir = TempDir::new("cli");
    let truth = synth(6, 40, 11);
    let cap = dir.join("sample.pcap");
    std::fs::write(&cap, pcap(&truth, LinkType::Ethernet)).unwrap();
    let sessions: u64 = truth.clients.iter().map(|c| c.1).sum();
    let requests: u64 = truth.clients.iter().map(|c| c.2).sum();

    // fit --out: the measurements on stdout, the profile in the file.
    let prof = dir.join("fitted.toml");
    let text = ok(&["fit", s(&cap), "--port", "80", "--out", s(&prof)]);
    assert!(
        text.contains(&format!(
            "6 clients, {sessions} sessions, {requests} requests"
        )),
        "{text}"
    );
    assert!(text.contains("198.18.0.10"), "{text}");
    let p = Profile::load(&prof).unwrap();
    assert_eq!(p.onoff.sources, 6);
    // Without --out the profile goes to stdout.
    let toml = ok(&["fit", s(&cap), "--port", "80"]);
    assert_eq!(Profile::from_toml_str(&toml).unwrap(), p);
    // `shaper check` reads it like any profile (its verdicts are not the point here).
    let out = shaper(&["check", s(&prof), "--duration", "20000"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("achieved rho"));

    // Pictures of the capture, of a profile, of a plan folder and of a trace.
    plot_all(&dir, "cap", &cap, &["--port", "80"]);
    plot_all(&dir, "profile", &prof, &["--duration", "3000"]);
    let plan = dir.join("plan");
    ok(&[
        "plan",
        s(&prof),
        "--duration",
        "600",
        "--seed",
        "3",
        "--out",
        s(&plan),
    ]);
    plot_all(&dir, "plan", &plan, &["--profile", s(&prof)]);
    let trace = dir.join("trace.csv");
    let mut csv = String::from("time_s,source,pool\n");
    for k in 0..500 {
        csv.push_str(&format!(
            "{},{},{}\n",
            f64::from(k) * 0.37 % 60.0,
            k % 7,
            ["a", "b"][k as usize % 2]
        ));
    }
    std::fs::write(&trace, csv).unwrap();
    plot_all(&dir, "trace", &trace, &[]);

    // SHAPER_TEST_KEEP=DIR keeps the capture, the profile and the pictures for a look.
    if let Some(keep) = std::env::var_os("SHAPER_TEST_KEEP") {
        let keep = PathBuf::from(keep);
        std::fs::create_dir_all(&keep).unwrap();
        for e in std::fs::read_dir(&dir.0).unwrap().flatten() {
            if e.path().is_file() {
                std::fs::copy(e.path(), keep.join(e.file_name())).unwrap();
            }
        }
    }

    // Mistakes are named.
    let err = |args: &[&str]| {
        let out = shaper(args);
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let e = err(&["plot", s(&cap), "--out", s(&dir.join("x.png"))]);
    assert!(e.contains("give the service's --port"), "{e}");
    let e = err(&["plot", s(&prof), "--out", s(&dir.join("x.jpg"))]);
    assert!(e.contains("must end in .png or .svg"), "{e}");
    let e = err(&["fit", s(&dir.join("missing.pcap")), "--port", "80"]);
    assert!(e.contains("missing.pcap"), "{e}");
    let e = err(&["fit", s(&prof), "--port", "80"]);
    assert!(e.contains("not a pcap or pcapng file"), "{e}");
}

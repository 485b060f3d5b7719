//! A server-speaks-first protocol end to end: a line server that greets each connection before
//! the client says anything (as SMTP, FTP or MySQL do) runs on `online` and on `test`, a client
//! talks to it in lock-step, and the copier copies the sessions. The test server must get every
//! line of every session, once and in order, with each copied command sent only after the test
//! server answered the one before (greeting protocols go one request at a time), and none of
//! its answers may leave the test host.

use lab::setup::{metric_sum, scrape_metrics, tail, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, Lab};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

const PORT: u16 = 2525;
const COPIER_METRICS: &str = "127.0.0.1:9466";
/// Connections, one after the other, and commands on each.
const CONNS: usize = 4;
const COMMANDS: usize = 300;

/// Greets, then answers every line with `250 <line>` (`QUIT`: `221` and close), and appends
/// every line it gets to the file named by its first argument.
const SERVER: &str = r#"
import socketserver, sys, threading
log = open(sys.argv[1], 'a', buffering=1)
lock = threading.Lock()
class H(socketserver.StreamRequestHandler):
    def handle(self):
        self.wfile.write(b'220 lab ready\r\n')
        for raw in self.rfile:
            line = raw.strip().decode()
            with lock:
                log.write(line + '\n')
            if line.startswith('QUIT'):
                self.wfile.write(b'221 bye\r\n')
                return
            self.wfile.write(('250 ' + line + '\r\n').encode())
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
S(('0.0.0.0', int(sys.argv[2])), H).serve_forever()
"#;

/// Each connection's lines (`c<k> ...`), in the order the server logged them.
fn sessions(log: &Path) -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut by_conn: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let conn = line
            .split_whitespace()
            .find(|w| w.starts_with('c'))
            .unwrap_or("-")
            .to_string();
        by_conn.entry(conn).or_default().push(line.to_string());
    }
    by_conn
}

/// One session: read the greeting, then each command after the answer to the one before,
/// then QUIT (the server answers and closes).
fn session(lab: &Lab, k: usize) {
    let to = SocketAddr::V4(SocketAddrV4::new(addr::ONLINE, PORT));
    let s = lab
        .in_ns(Host::Client, || {
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
        })
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "220 lab ready\r\n", "the greeting");
    for i in 0..COMMANDS {
        let cmd = format!("PING c{k} {i}");
        w.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
        line.clear();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, format!("250 {cmd}\r\n"));
    }
    w.write_all(format!("QUIT c{k}\r\n").as_bytes()).unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "221 bye\r\n");
}

#[test]
fn a_server_speaks_first_protocol_is_copied_one_command_at_a_time() {
    let Some(mut lab) =
        lab_or_skip("a_server_speaks_first_protocol_is_copied_one_command_at_a_time")
    else {
        return;
    };
    let online_log = lab.dir().join("lines-online.txt");
    let test_log = lab.dir().join("lines-test.txt");
    let port = PORT.to_string();
    let opts = CopyOptions {
        copier_args: vec![
            "--metrics".into(),
            COPIER_METRICS.into(),
            "--map".into(),
            format!("{PORT}={}:{PORT}", addr::TEST),
        ],
        extra_ports: vec![PORT],
        ipv6: false,
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();
    let online_log_s = online_log.display().to_string();
    let test_log_s = test_log.display().to_string();
    let _online = lab
        .spawn(
            Host::Online,
            "greet-online",
            &["python3", "-c", SERVER, &online_log_s, &port],
        )
        .unwrap();
    let _test = lab
        .spawn(
            Host::Test,
            "greet-test",
            &["python3", "-c", SERVER, &test_log_s, &port],
        )
        .unwrap();
    // Both servers listen before the first client connects (a copy that meets a closed port
    // would be refused: another test's matter).
    for h in [Host::Online, Host::Test] {
        let wait = format!("for i in $(seq 100); do ss -ltn | grep -q ':{PORT} ' && exit 0; sleep 0.1; done; exit 1");
        lab.sh(h, &wait).unwrap();
    }

    let started = Instant::now();
    for k in 0..CONNS {
        session(&lab, k);
    }
    let online_took = started.elapsed();
    let want = CONNS * (COMMANDS + 1);
    let online = sessions(&online_log);
    assert_eq!(
        online.values().map(Vec::len).sum::<usize>(),
        want,
        "the online server's log"
    );

    // Every line at the test server, whole and in order (each session on its own connection).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut test = sessions(&test_log);
    while test.values().map(Vec::len).sum::<usize>() < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        test = sessions(&test_log);
    }
    let copier_log = tail(&c.copier.as_ref().unwrap().log(), 30);
    assert_eq!(
        test, online,
        "the test server got other lines than online\ncopier log:\n{copier_log}"
    );
    println!(
        "{want} lines online in {:.2} s; all at the test server {:.2} s after the client's last",
        online_took.as_secs_f64(),
        (started.elapsed() - online_took).as_secs_f64()
    );

    // A greeting protocol goes one command at a time: none was sent ahead of an answer. Each
    // test greeting counts for its session, even when it comes before the client's first
    // command was captured: no command waited for the answer timeout.
    let m = scrape_metrics(&lab, Host::Online, COPIER_METRICS);
    assert_eq!(metric_sum(&m, "copier_units_ahead_total", &[]), 0.0, "{m}");
    assert_eq!(
        metric_sum(&m, "copier_answer_timeouts_total", &[]),
        0.0,
        "{m}"
    );
    assert!(
        metric_sum(&m, "copier_units_sent_total", &[]) >= want as f64,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}

//! The lab's gRPC server and client (`assets/grpc_lab.py`, on Debian's python3 with
//! python3-grpcio, see `scripts/install-deps.sh`): a server pair on the online and test hosts
//! and the client's four kinds of calls, for the tests that copy or compare gRPC.

use std::path::PathBuf;

use crate::{addr, Host, Lab};

/// Debian's python3 (python3-grpcio is installed for it; the `python3` on a developer's PATH
/// may be another build without it).
pub const PYTHON: &str = "/usr/bin/python3";

/// The lab's gRPC script.
pub fn script() -> String {
    format!("{}/assets/grpc_lab.py", env!("CARGO_MANIFEST_DIR"))
}

/// Starts the gRPC server on the online and the test host on `port`, each logging its calls
/// (`<method> <id> <messages> <status>` per line) to `grpc-online.txt` / `grpc-test.txt` in the
/// lab's folder, the test one as `test_variant` when given (the script's `candidate` answers
/// some calls differently); waits until both listen. Returns the two logs' paths.
pub fn start_pair(lab: &mut Lab, port: u16, test_variant: Option<&str>) -> (PathBuf, PathBuf) {
    let (online_log, test_log) = (
        lab.dir().join("grpc-online.txt"),
        lab.dir().join("grpc-test.txt"),
    );
    let (script, port_s) = (script(), port.to_string());
    let (ol, tl) = (
        online_log.display().to_string(),
        test_log.display().to_string(),
    );
    lab.spawn(
        Host::Online,
        "grpc-online",
        &[PYTHON, &script, "server", &ol, &port_s],
    )
    .unwrap();
    let mut test = vec![PYTHON, &script, "server", &tl, &port_s];
    test.extend(test_variant);
    lab.spawn(Host::Test, "grpc-test", &test).unwrap();
    for h in [Host::Online, Host::Test] {
        let wait = format!(
            "for i in $(seq 100); do ss -ltn | grep -q ':{port} ' && exit 0; sleep 0.1; done; exit 1"
        );
        lab.sh(h, &wait).unwrap();
    }
    (online_log, test_log)
}

/// Runs the client on the client host against the online server on `port`: `calls` calls of
/// each of the four kinds. Returns what it printed (`ok N` when every call succeeded).
pub fn run_client(lab: &Lab, port: u16, calls: usize) -> String {
    let target = format!("{}:{port}", addr::ONLINE);
    lab.exec_ok(
        Host::Client,
        &[PYTHON, &script(), "client", &target, &calls.to_string()],
    )
    .unwrap()
}

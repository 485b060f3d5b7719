//! Tests of the intercept binary's main.

use super::*;
use clap::CommandFactory;

#[test]
fn cli_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn parsers() {
    assert_eq!(
        parse_listen("198.18.2.2").unwrap(),
        "198.18.2.2:36524".parse().unwrap()
    );
    assert_eq!(
        parse_listen("198.18.2.2:1").unwrap(),
        "198.18.2.2:1".parse().unwrap()
    );
    assert_eq!(
        parse_listen("[::1]").unwrap(),
        "[::1]:36524".parse().unwrap()
    );
    assert!(parse_listen("nowhere").is_err());
    assert_eq!(parse_balance("0:3").unwrap(), (0, 3));
    assert!(parse_balance("3:0").is_err());
    assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
    assert!(parse_duration("-1s").is_err());
    assert_eq!(parse_duration("3600s").unwrap(), Duration::from_secs(3600));
}

#[test]
fn byte_bounds_parse_with_units_and_default_to_the_documented_sizes() {
    let base = [
        "intercept",
        "--listen",
        "127.0.0.1",
        "--no-secret",
        "--port",
        "80",
    ];
    let parse = |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra));
    let c = parse(&[]).unwrap().config();
    assert_eq!((c.hold_bytes, c.copier_queue_bytes), (32 << 20, 16 << 20));
    assert_eq!(c.router_config().hold_bytes, 32 << 20);
    // The Kubernetes manifest's values.
    let c = parse(&["--hold-bytes", "32M", "--copier-queue-bytes", "16M"])
        .unwrap()
        .config();
    assert_eq!((c.hold_bytes, c.copier_queue_bytes), (32 << 20, 16 << 20));
    assert_eq!(c.validate(), Ok(()));
    let c = parse(&["--hold-bytes", "0", "--copier-queue-bytes", "512K"])
        .unwrap()
        .config();
    assert_eq!((c.hold_bytes, c.copier_queue_bytes), (0, 512 << 10));
    let e = parse(&["--hold-bytes", "12Q"]).unwrap_err().to_string();
    assert!(e.contains("--hold-bytes"), "{e}");
    let c = parse(&["--copier-queue-bytes", "100K"]).unwrap().config();
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("--copier-queue-bytes") && e.contains("at least"),
        "{e}"
    );
}

#[test]
fn huge_durations_and_port_zero_are_refused_clearly() {
    let base = ["intercept", "--listen", "127.0.0.1", "--no-secret"];
    let parse = |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra));
    // Used to panic in Duration::from_secs_f64.
    for flag in ["--hold-time", "--linger", "--exit-grace"] {
        let e = parse(&["--port", "80", flag, "1e30"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(flag) && e.contains("too long") && e.contains("3600s"),
            "{e}"
        );
        assert!(parse(&["--port", "80", flag, "3601s"]).is_err());
    }
    let e = parse(&["--port", "0"]).unwrap_err().to_string();
    assert!(e.contains("--port") && e.contains("port 0"), "{e}");
    let e = parse(&["--port", "80", "--port", "0"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("port 0"), "{e}");
    let e = parse(&["--port", "80", "--max-registrations", "0"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--max-registrations"), "{e}");
    let c = parse(&["--port", "80", "--port", "8080", "--linger", "5s"]).unwrap();
    assert_eq!(c.ports, vec![80, 8080]);
    assert_eq!(c.linger, Duration::from_secs(5));
    assert_eq!(c.exit_grace, Duration::from_secs(2));
    assert_eq!(c.max_registrations, DEFAULT_MAX_REGISTRATIONS);
    assert_eq!(c.max_rest, intercept::rest::MAX_REST);
    assert_eq!(
        parse(&["--port", "80", "--max-rest", "0"])
            .unwrap()
            .max_rest,
        Duration::ZERO
    );
    let e = parse(&["--port", "80", "--max-rest", "21ms"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--max-rest") && e.contains("too long"), "{e}");
}

#[test]
fn the_manifests_placeholder_secret_is_refused_at_start() {
    let dir = std::env::temp_dir().join(format!("intercept-placeholder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("secret");
    std::fs::write(&f, "REPLACE-ME-with-32-random-bytes-base64\n").unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let cli = Cli::try_parse_from([
        "intercept",
        "--port",
        "80",
        "--listen",
        "127.0.0.1",
        "--secret-file",
        f.to_str().unwrap(),
    ])
    .unwrap();
    let e = format!("{:#}", run(cli.config()).unwrap_err());
    assert!(
        e.contains("--secret-file") && e.contains("placeholder"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn secret_or_no_secret_is_required() {
    let base = ["intercept", "--port", "80", "--listen", "127.0.0.1"];
    assert!(Cli::try_parse_from(base).is_err());
    assert!(Cli::try_parse_from(base.iter().chain(&["--no-secret"])).is_ok());
    assert!(
        Cli::try_parse_from(base.iter().chain(&["--secret-file", "f", "--no-secret"])).is_err()
    );
    let c = Cli::try_parse_from(base.iter().chain(&[
        "--secret-file",
        "f",
        "--allow",
        "1.2.3.4,10.0.0.0/8",
    ]))
    .unwrap();
    assert_eq!(c.allow.len(), 2);
    assert!(Cli::try_parse_from(base.iter().chain(&[
        "--no-secret",
        "--queue-num",
        "1",
        "--queue-balance",
        "0:1"
    ]))
    .is_err());
}

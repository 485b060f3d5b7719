//! The intercept at the kernel's pace: with GSO delivery on, NFQUEUE hands over a test
//! server's super-segment as one packet, so a 100 KB answer is a handful of records instead of
//! ~70 MTU-sized ones, and the copier still copies every request exactly (it takes an answer's
//! length from the IP header, not from the copied bytes). Accepted answers (allowed
//! addresses) are segmented by the kernel after the verdict and arrive whole. Offloads stay
//! on (the lab's default), so the test server really emits super-segments.

use lab::setup::{metric_sum, scrape_metrics, CopyOptions, Copying};
use lab::{addr, lab_or_skip, Host, NginxOptions};

const METRICS: &str = "127.0.0.1:9466";
const ANSWER: usize = 100 * 1024;
const FETCHES: usize = 30;

#[test]
fn a_100kb_answer_is_a_few_records_and_allowed_clients_get_large_answers_whole() {
    let Some(mut lab) =
        lab_or_skip("a_100kb_answer_is_a_few_records_and_allowed_clients_get_large_answers_whole")
    else {
        return;
    };
    let files = vec![
        ("big.bin".to_string(), ANSWER),
        ("1m.bin".to_string(), 1 << 20),
    ];
    let opts = CopyOptions {
        online: NginxOptions {
            files: files.clone(),
            ..NginxOptions::default()
        },
        test: Some(NginxOptions {
            files,
            ..NginxOptions::default()
        }),
        intercept_args: vec!["--metrics".into(), METRICS.into()],
        ..CopyOptions::default()
    };
    let c = Copying::start(&mut lab, opts).unwrap();

    // FETCHES answers of 100 KB on one keep-alive connection (curl's URL globbing reuses it).
    let script = format!(
        "curl -sS --fail --max-time 60 'http://{}/big.bin?n=[1-{FETCHES}]' | wc -c",
        addr::ONLINE
    );
    let got = lab.sh(Host::Client, &script).unwrap();
    assert_eq!(
        got.trim().parse::<usize>().unwrap(),
        FETCHES * ANSWER,
        "the client's own answers"
    );
    assert_eq!(c.assert_copied_exactly(&mut lab), FETCHES);
    // The test server sent every answer in full: the copier acknowledged all of each one.
    let test = c.test().requests().unwrap();
    assert!(
        test.iter().all(|e| e.body_bytes_sent == ANSWER as u64),
        "{test:?}"
    );

    let m = scrape_metrics(&lab, Host::Test, METRICS);
    let records = metric_sum(&m, "intercept_records_sent_total", &[]);
    let queued = metric_sum(&m, "intercept_packets_queued_total", &[]);
    let per_answer = records / FETCHES as f64;
    eprintln!("{records} records ({queued} packets queued) for {FETCHES} copied answers of 100 KB: {per_answer:.2} per answer");
    // Without GSO delivery each answer alone is ~71 MTU-sized packets (1448 bytes of payload
    // each), every one a record. The count includes the connection's handshake and close.
    assert!(records >= FETCHES as f64, "fewer records than answers: {m}");
    assert!(
        per_answer <= 4.0,
        "{per_answer:.2} records per 100 KB answer (GSO delivery off?)"
    );

    // An allowed address gets real answers, also large ones that left as super-segments and
    // were segmented by the kernel after the ACCEPT.
    for (path, size) in [("/big.bin", ANSWER), ("/1m.bin", 1 << 20)] {
        let url = format!("http://{}{path}", addr::TEST);
        let out = lab
            .exec_ok(
                Host::Online,
                &[
                    "curl",
                    "-sS",
                    "--fail",
                    "--max-time",
                    "30",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code} %{size_download}",
                    &url,
                ],
            )
            .unwrap();
        assert_eq!(out.trim(), format!("200 {size}"), "{url}");
    }
    let m = scrape_metrics(&lab, Host::Test, METRICS);
    assert!(
        metric_sum(&m, "intercept_packets_accepted_total", &[]) > 0.0,
        "{m}"
    );
    c.assert_no_leak(&mut lab);
}

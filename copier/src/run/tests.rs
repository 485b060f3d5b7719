use crate::engine::OverloadReason;
use crate::send::SendStats;

use super::drain::publish_now;
use super::*;

fn summary(lags_ms: &[f64], ahead: u64) -> Summary {
    let mut engine = EngineStats {
        units_sent: lags_ms.len() as u64,
        units_ahead: ahead,
        ..EngineStats::default()
    };
    for &ms in lags_ms {
        engine.replay_lag.record(Duration::from_secs_f64(ms / 1e3));
    }
    Summary {
        engine,
        capture: CaptureStats::default(),
        send: SendStats::default(),
        panics: 0,
        elapsed: Duration::from_secs(2),
        offline: None,
    }
}

#[test]
fn behind_on_a_backlog_or_after_drops_with_hysteresis() {
    let t0 = Instant::now();
    let max = 1600;
    let backlog = Some(OverloadReason::CaptureBacklog);
    assert_eq!(overload_of(0, max, None, None, t0), None);
    assert_eq!(
        overload_of(400, max, None, None, t0),
        None,
        "a quarter is still fine"
    );
    assert_eq!(overload_of(401, max, None, None, t0), backlog);
    // Once behind, until under a sixteenth.
    assert_eq!(overload_of(101, max, None, backlog, t0), backlog);
    assert_eq!(overload_of(100, max, None, backlog, t0), None);
    // Kernel drops: behind for OVERLOAD_AFTER_DROPS whatever the backlog.
    let drops = Some(OverloadReason::KernelDrops);
    assert_eq!(
        overload_of(0, max, Some(t0), None, t0 + Duration::from_millis(1999)),
        drops
    );
    assert_eq!(
        overload_of(0, max, Some(t0), drops, t0 + OVERLOAD_AFTER_DROPS),
        None
    );
}

#[test]
fn unregisters_wait_for_a_register_or_their_deadline() {
    let t0 = Instant::now();
    // A Register goes at once, with whatever waits before it.
    assert!(publish_now(true, None, t0, 1));
    assert!(publish_now(true, Some(t0), t0, 10));
    // Unregisters alone wait...
    assert!(!publish_now(false, Some(t0), t0, 1));
    assert!(!publish_now(
        false,
        Some(t0),
        t0 + UNREGISTER_WAIT - Duration::from_millis(1),
        10
    ));
    // ... until the oldest is UNREGISTER_WAIT old, or a batch is full.
    assert!(publish_now(false, Some(t0), t0 + UNREGISTER_WAIT, 1));
    assert!(publish_now(false, Some(t0), t0, UNREGISTER_BATCH));
}

#[test]
fn links_rest_after_a_read_unless_something_waits_on_the_records() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let rest = ms(2);
    // A read that took records starts (or renews) a rest of --record-wait.
    assert_eq!(link_rest(rest, false, true, None, t0), Some(t0 + rest));
    assert_eq!(
        link_rest(rest, false, true, Some(t0 + ms(1)), t0 + ms(1)),
        Some(t0 + ms(3))
    );
    // A turn that read nothing keeps the rest until its deadline, then polls again.
    assert_eq!(
        link_rest(rest, false, false, Some(t0 + rest), t0 + ms(1)),
        Some(t0 + rest)
    );
    assert_eq!(
        link_rest(rest, false, false, Some(t0 + rest), t0 + rest),
        None
    );
    assert_eq!(link_rest(rest, false, false, None, t0), None);
    // A rest that became shorter (a connection opens: --open-wait) ends that soon.
    assert_eq!(
        link_rest(ms(1), false, false, Some(t0 + ms(20)), t0 + ms(5)),
        Some(t0 + ms(6))
    );
    assert_eq!(
        link_rest(ms(1), false, true, Some(t0 + ms(20)), t0 + ms(5)),
        Some(t0 + ms(6))
    );
    // Something waits on the records, or --record-wait 0: no rest, even one under way.
    assert_eq!(link_rest(rest, true, true, Some(t0 + rest), t0), None);
    assert_eq!(link_rest(Duration::ZERO, false, true, None, t0), None);
}

#[test]
fn the_summary_line_says_how_far_behind_the_copies_ran() {
    let mut lags = vec![0.3; 98];
    lags.extend([15.0, 15.0]);
    let line = summary(&lags, 40).to_string();
    assert!(
        line.contains(
            "100 requests sent (40 ahead of an answer), replay lag p50 <= 0.5 ms, p99 <= 20 ms"
        ),
        "{line}"
    );
    let two = RunSummary {
        workers: vec![summary(&[0.3], 0), summary(&[70_000.0], 1)],
        mirror: None,
    }
    .to_string();
    assert!(
        two.contains(
            "2 requests sent (1 ahead of an answer), replay lag p50 <= 0.5 ms, p99 > 60 s"
        ),
        "{two}"
    );
    assert!(
        !summary(&[], 0).to_string().contains("replay lag"),
        "no figure without requests"
    );
}

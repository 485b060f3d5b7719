//! Tests of the target chooser: parsing, the weighted spread, the health state machine.

use super::*;

/// Slot `idx`, its first occupant.
fn sl(idx: u32) -> SlotRef {
    SlotRef { idx, gen: 0 }
}

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn map() -> PortMap {
    PortMap {
        online_ip: None,
        online_port: 80,
        target: a("198.18.1.2:80"),
    }
}

fn two(w1: u32, w2: u32) -> Targets {
    two_with(
        w1,
        w2,
        HealthConfig {
            down_after: Duration::from_secs(3),
            retry: Duration::from_secs(5),
            ..HealthConfig::default()
        },
    )
}

/// Two servers weighted `w1`, `w2` under `map()`, judged by `cfg`.
fn two_with(w1: u32, w2: u32, cfg: HealthConfig) -> Targets {
    let m = map();
    let spread = MapTargets {
        map: m,
        targets: vec![
            WeightedTarget {
                addr: a("198.18.1.2:80"),
                weight: w1,
            },
            WeightedTarget {
                addr: a("198.18.3.2:80"),
                weight: w2,
            },
        ],
    };
    Targets::new(&[m], &[spread], cfg)
}

#[test]
fn parses_one_target_or_a_weighted_list() {
    assert_eq!(
        parse_targets("198.18.1.2:80").unwrap(),
        vec![WeightedTarget {
            addr: a("198.18.1.2:80"),
            weight: 1
        }]
    );
    let l = parse_targets("198.18.1.2:80@3, 198.18.3.2:8080@1").unwrap();
    assert_eq!(l.len(), 2);
    assert_eq!((l[0].weight, l[1].addr), (3, a("198.18.3.2:8080")));
    assert_eq!(
        parse_targets("[fd00::2]:80@2,[fd00::3]:80").unwrap()[1].weight,
        1
    );
    for (bad, says) in [
        ("198.18.1.2:80@0", "not from 1"),
        ("198.18.1.2:80@x", "not a whole number"),
        ("198.18.1.2:80,198.18.1.2:80", "given twice"),
        ("198.18.1.2:80,[fd00::3]:80", "different IP families"),
        ("198.18.1.2", "not IP:PORT"),
        ("0.0.0.0:80", "unicast"),
    ] {
        let e = parse_targets(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn weights_spread_sessions_exactly_and_interleaved() {
    let mut t = two(3, 1);
    let now = Instant::now();
    let picks: Vec<SocketAddr> = (0..400).map(|_| t.pick(now, &map()).unwrap()).collect();
    let first = picks.iter().filter(|&&p| p == a("198.18.1.2:80")).count();
    assert_eq!(first, 300);
    // Smooth: never more than three in a row on the heavier one.
    assert!(picks
        .windows(4)
        .all(|w| w.iter().any(|&p| p == a("198.18.3.2:80"))));
}

#[test]
fn a_map_with_one_target_always_gets_it() {
    let m = map();
    let mut t = Targets::new(&[m], &[], HealthConfig::default());
    let now = Instant::now();
    assert!((0..10).all(|_| t.pick(now, &m).unwrap() == m.target));
    let other = PortMap {
        online_port: 81,
        ..m
    };
    assert_eq!(t.pick(now, &other).unwrap(), other.target);
}

#[test]
fn a_silent_server_goes_out_after_down_after_and_back_when_it_answers() {
    let mut t = two(1, 1);
    let t0 = Instant::now();
    let (s1, s2) = (a("198.18.1.2:80"), a("198.18.3.2:80"));
    t.on_started(t0, s1, sl(1));
    t.on_started(t0, s2, sl(2));
    // s1 answers (resets prove nothing), s2 does not.
    t.on_answer(t0 + Duration::from_millis(10), s1, false);
    t.on_answer(t0 + Duration::from_millis(10), s2, true);
    t.check(t0 + Duration::from_millis(2999));
    assert!(t.poll_event().is_none());
    t.check(t0 + Duration::from_secs(3));
    assert_eq!(
        t.poll_event(),
        Some(TargetEvent::Down {
            addr: s2,
            silent: Duration::from_secs(3)
        })
    );
    // Every new session goes to s1 until the probe is due (5 s after going down).
    let t1 = t0 + Duration::from_secs(3);
    for k in 0..50 {
        assert_eq!(
            t.pick(t1 + Duration::from_millis(k * 90), &map()).unwrap(),
            s1
        );
    }
    let t2 = t1 + Duration::from_secs(5);
    assert_eq!(t.pick(t2, &map()).unwrap(), s2, "the probe");
    assert_eq!(t.pick(t2, &map()).unwrap(), s1, "one probe per retry");
    let st = t.stats().find(|s| s.addr == s2).copied().unwrap();
    assert_eq!((st.up, st.probes, st.downs), (false, 1, 1));
    // It answers the probe: back in, and the spread is even again.
    t.on_started(t2, s2, sl(3));
    t.on_answer(t2 + Duration::from_millis(1), s2, false);
    assert_eq!(t.poll_event(), Some(TargetEvent::Up(s2)));
    let picks: Vec<_> = (0..10).map(|_| t.pick(t2, &map()).unwrap()).collect();
    assert_eq!(picks.iter().filter(|&&p| p == s2).count(), 5);
}

#[test]
fn a_busy_server_that_answers_stays_in() {
    let mut t = two(1, 1);
    let t0 = Instant::now();
    let s1 = a("198.18.1.2:80");
    for k in 0..100u64 {
        let now = t0 + Duration::from_millis(100 * k);
        t.on_started(now, s1, sl(4));
        t.on_answer(now + Duration::from_millis(50), s1, false);
        t.check(now + Duration::from_millis(60));
    }
    assert!(t.poll_event().is_none());
    // No copy started since the last answer: silence is not a failure.
    t.check(t0 + Duration::from_secs(3600));
    assert!(t.poll_event().is_none());
}

#[test]
fn all_servers_down_raises_one_alert_and_keeps_the_weights() {
    let mut t = two(3, 1);
    let t0 = Instant::now();
    let (s1, s2) = (a("198.18.1.2:80"), a("198.18.3.2:80"));
    t.on_started(t0, s1, sl(5));
    t.on_started(t0, s2, sl(6));
    t.check(t0 + Duration::from_secs(3));
    let evs: Vec<_> = std::iter::from_fn(|| t.poll_event()).collect();
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert_eq!(evs[2], TargetEvent::AllDown(map()));
    assert_eq!(t.all_down().count(), 1);
    let picks: Vec<_> = (0..8)
        .map(|_| t.pick(t0 + Duration::from_secs(4), &map()).unwrap())
        .collect();
    assert_eq!(picks.iter().filter(|&&p| p == s1).count(), 6);
    t.on_answer(t0 + Duration::from_secs(5), s2, false);
    assert_eq!(t.poll_event(), Some(TargetEvent::Up(s2)));
    assert_eq!(t.poll_event(), Some(TargetEvent::SomeUp(map())));
    assert!((0..8).all(|_| t.pick(t0 + Duration::from_secs(5), &map()).unwrap() == s2));
}

#[test]
fn an_overloaded_server_sheds_new_sessions_to_the_other_and_all_overloaded_refuses() {
    let m = map();
    let mut t = two_with(
        1,
        1,
        HealthConfig {
            max_live: 4,
            ..HealthConfig::default()
        },
    );
    let (s1, s2) = (a("198.18.1.2:80"), a("198.18.3.2:80"));
    let now = Instant::now();
    // s1 is slow: its copies stay live; s2's end at once.
    let mut slot = 0;
    let mut to_s2 = 0;
    for _ in 0..40 {
        let p = t.pick(now, &m).unwrap();
        slot += 1;
        t.on_started(now, p, sl(slot));
        t.on_answer(now, p, false);
        if p == s2 {
            to_s2 += 1;
            t.on_ended(sl(slot));
        }
    }
    assert_eq!(
        t.stats().find(|x| x.addr == s1).unwrap().live,
        4,
        "s1 stops at max_live"
    );
    assert_eq!(to_s2, 36);
    assert_eq!(t.poll_event(), Some(TargetEvent::Overloaded(s1)));
    // s2 fills up too: every server overloaded, new copies are refused, once alerted.
    for k in 0..4 {
        t.on_started(now, s2, sl(100 + k));
    }
    assert_eq!(t.pick(now, &m), None);
    assert_eq!(t.pick(now, &m), None);
    let evs: Vec<_> = std::iter::from_fn(|| t.poll_event()).collect();
    assert_eq!(
        evs,
        vec![TargetEvent::Overloaded(s2), TargetEvent::AllOverloaded(m)]
    );
    assert_eq!(t.stats().next().unwrap().refused, 2);
    // s1's copies end: relieved at 3 of 4, takes sessions again.
    t.on_ended(sl(1));
    t.on_ended(sl(2));
    assert_eq!(t.pick(now, &m), Some(s1));
    let evs: Vec<_> = std::iter::from_fn(|| t.poll_event()).collect();
    assert_eq!(
        evs,
        vec![TargetEvent::Relieved(s1), TargetEvent::SomeRelieved(m)]
    );
}

#[test]
fn a_slow_server_gets_no_new_sessions_but_probes_and_is_back_when_fast() {
    let m = map();
    let cfg = HealthConfig {
        slow_after: Duration::from_millis(200),
        retry: Duration::from_secs(5),
        ..HealthConfig::default()
    };
    let mut t = two_with(1, 1, cfg);
    let (s1, s2) = (a("198.18.1.2:80"), a("198.18.3.2:80"));
    let now = Instant::now();
    let ms = Duration::from_millis;
    // s2 answers in 300 ms: the smoothed time passes 200 ms at the first answer.
    t.on_answer_time(now, s1, ms(10));
    t.on_answer_time(now, s2, ms(300));
    assert_eq!(
        t.poll_event(),
        Some(TargetEvent::Slow {
            addr: s2,
            answer: ms(300)
        })
    );
    let picks: Vec<_> = (0..10).map(|_| t.pick(now, &m).unwrap()).collect();
    assert!(picks.iter().all(|&p| p == s1), "{picks:?}");
    // A slow answer keeps it slow; one within 150 ms makes it fast, smoothing from there.
    t.on_answer_time(now, s2, ms(180));
    assert!(t.stats().any(|x| x.addr == s2 && x.slow));
    // Its probe is due after --target-retry.
    assert_eq!(t.pick(now + ms(5000), &m), Some(s2));
    assert_eq!(t.stats().find(|x| x.addr == s2).unwrap().probes, 1);
    assert_eq!(t.pick(now + ms(5001), &m), Some(s1), "one probe per retry");
    t.on_answer_time(now, s2, ms(120));
    assert_eq!(t.poll_event(), Some(TargetEvent::Fast(s2)));
    let st = *t.stats().find(|x| x.addr == s2).unwrap();
    assert_eq!(
        (st.slow, st.slow_turns, st.answer_smoothed, st.answers),
        (false, 1, Some(ms(120)), 3)
    );
    let picks: Vec<_> = (0..4)
        .map(|_| t.pick(now + ms(5002), &m).unwrap())
        .collect();
    assert_eq!(picks.iter().filter(|&&p| p == s2).count(), 2, "{picks:?}");
    // Both slow: no new copy (as when all are overloaded), alerted once.
    for _ in 0..30 {
        t.on_answer_time(now + ms(5003), s1, ms(900));
        t.on_answer_time(now + ms(5003), s2, ms(900));
    }
    assert_eq!(t.pick(now + ms(5003), &m), None);
    let evs: Vec<_> = std::iter::from_fn(|| t.poll_event()).collect();
    assert_eq!(evs.last(), Some(&TargetEvent::AllOverloaded(m)));
}

#[test]
fn a_failing_server_gets_no_new_sessions_but_probes_and_is_back_when_sound() {
    let m = map();
    let cfg = HealthConfig {
        fail_percent: 30,
        retry: Duration::from_secs(5),
        ..HealthConfig::default()
    };
    let mut t = two_with(1, 1, cfg);
    let (s1, s2) = (a("198.18.1.2:80"), a("198.18.3.2:80"));
    let now = Instant::now();
    let ms = Duration::from_millis;
    // Start copies in slots 0..; each server's copies end: s1's complete, s2's fail half.
    let mut slot = 0u32;
    let mut end = |t: &mut Targets, at: Instant, failed_on_s2: bool| -> SocketAddr {
        let to = t.pick(at, &m).unwrap();
        t.on_started(at, to, sl(slot));
        t.on_answer(at, to, false); // it answers (failing is not down)
        t.on_outcome(at, sl(slot), to == s2 && failed_on_s2);
        t.on_ended(sl(slot));
        slot += 1;
        to
    };
    // Four outcomes each, s2's all failed: not judged before five.
    for _ in 0..8 {
        end(&mut t, now, true);
    }
    assert!(
        t.stats().all(|x| !x.failing),
        "at least five outcomes first"
    );
    // Its fifth failure: failing (smoothed share 67 %).
    assert_eq!(end(&mut t, now, true), s1);
    assert_eq!(end(&mut t, now, true), s2);
    assert_eq!(
        t.poll_event(),
        Some(TargetEvent::Failing {
            addr: s2,
            percent: 67
        })
    );
    let st = *t.stats().find(|x| x.addr == s2).unwrap();
    assert_eq!((st.failing, st.failing_turns, st.failures), (true, 1, 5));
    assert_eq!(
        t.stats().find(|x| x.addr == s1).unwrap().failures,
        0,
        "completed copies are no failures"
    );
    // No new session for s2 but one probe per retry; probes that complete bring it back once
    // the share is under 15 %.
    let picks: Vec<_> = (0..10).map(|_| end(&mut t, now, false)).collect();
    assert!(picks.iter().all(|&p| p == s1), "{picks:?}");
    let mut probes = 0;
    let mut at = now;
    while t.stats().any(|x| x.addr == s2 && x.failing) {
        at += ms(5000);
        assert_eq!(end(&mut t, at, false), s2, "the probe, once per retry");
        assert_eq!(end(&mut t, at, false), s1);
        probes += 1;
        assert!(probes < 20);
    }
    // 0.67 x 0.8^n < 0.15: n = 7.
    assert_eq!(probes, 7);
    assert_eq!(t.poll_event(), Some(TargetEvent::Sound(s2)));
    let picks: Vec<_> = (0..4).map(|_| end(&mut t, at, false)).collect();
    assert_eq!(picks.iter().filter(|&&p| p == s2).count(), 2, "{picks:?}");
}

#[test]
fn without_a_fail_rate_failures_are_counted_only() {
    let m = map();
    let mut t = two_with(1, 1, HealthConfig::default());
    let now = Instant::now();
    for slot in 0..20 {
        let to = t.pick(now, &m).unwrap();
        t.on_started(now, to, sl(slot));
        t.on_outcome(now, sl(slot), true);
        t.on_ended(sl(slot));
    }
    assert!(t.stats().all(|x| !x.failing && x.failures == 10));
    assert_eq!(t.poll_event(), None);
}

#[test]
fn a_bare_ack_keeps_a_server_in_but_brings_none_back() {
    let mut t = two(1, 1);
    let t0 = Instant::now();
    let (s1, s2) = (a("198.18.1.2:80"), a("198.18.3.2:80"));
    t.on_started(t0, s1, sl(1));
    t.on_started(t0, s2, sl(2));
    // s1 acknowledges only (an upload): heard from. s2 is silent: taken out.
    t.on_bare_ack(s1);
    t.check(t0 + Duration::from_secs(3));
    assert!(matches!(t.poll_event(), Some(TargetEvent::Down { addr, .. }) if addr == s2));
    assert!(t.poll_event().is_none(), "s1 stays in");
    // A TIME_WAIT's bare ACK to a probe of the stopped s2: still out.
    let t1 = t0 + Duration::from_secs(8);
    assert_eq!(t.pick(t1, &map()).unwrap(), s2, "the probe");
    t.on_started(t1, s2, sl(3));
    t.on_bare_ack(s2);
    assert!(t.poll_event().is_none());
    let st = t.stats().find(|s| s.addr == s2).copied().unwrap();
    assert!(!st.up, "a bare ACK brought a stopped server back");
    // Its SYN-ACK does.
    t.on_answer(t1 + Duration::from_millis(2), s2, false);
    assert_eq!(t.poll_event(), Some(TargetEvent::Up(s2)));
}

#[test]
fn an_outcome_of_a_slots_earlier_copy_is_not_charged_to_the_next() {
    let cfg = HealthConfig {
        fail_percent: 50,
        ..HealthConfig::default()
    };
    let mut t = two_with(1, 1, cfg);
    let (s1, s2) = (a("198.18.1.2:80"), a("198.18.3.2:80"));
    let now = Instant::now();
    // Slot 1 held a copy on s1, then (its events not yet drained) a copy on s2.
    let old = SlotRef { idx: 1, gen: 0 };
    let new = SlotRef { idx: 1, gen: 1 };
    t.on_started(now, s1, old);
    t.on_started(now, s2, new);
    for _ in 0..3 * FAIL_MIN_OUTCOMES {
        t.on_outcome(now, old, true);
        t.on_ended(old);
    }
    let failures = |t: &Targets, x: SocketAddr| {
        t.stats()
            .find(|s| s.addr == x)
            .map(|s| (s.failures, s.live))
    };
    assert_eq!(
        failures(&t, s2),
        Some((0, 1)),
        "s2 charged with s1's failures"
    );
    t.on_outcome(now, new, true);
    t.on_ended(new);
    assert_eq!(failures(&t, s2), Some((1, 0)));
}

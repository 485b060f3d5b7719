//! Tests of the shaper runtime (`Shaper`): plans, gates and release times on a seeded clock.
use super::*;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn client(i: u32) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::from(0xcb00_7100 + (i % 200))),
        30000 + (i / 200) as u16,
    )
}

fn profile(toml: &str) -> Profile {
    Profile::from_toml_str(toml).unwrap()
}

const POOLS: &str = r#"
[[pools]]
name = "a"
weight = 3
cidr = "198.19.0.0/24"
users = 50
[[pools]]
name = "b"
weight = 1
cidr = "198.19.1.0/24"
users = 20
"#;

/// Factor 2.5 over 4,000 sessions: 10,000 copies expected; the count of sessions that get a
/// third copy is binomial(4000, 0.5), sd 32 copies, so 2% (200) is over 6 sd.
#[test]
fn factor_two_and_a_half_copies_with_distinct_tuples() {
    let mut s = Shaper::new(
        &profile(&format!("[multiplication]\nfactor = 2.5\n{POOLS}")),
        1,
    )
    .unwrap();
    let mut tuples = HashSet::new();
    let mut total = 0usize;
    for i in 0..4000 {
        let plans = s.on_session(ms(u64::from(i)), client(i)).unwrap();
        assert!(plans.len() == 2 || plans.len() == 3);
        for p in &plans {
            assert!(tuples.insert(p.client), "tuple {} reused", p.client);
            assert!(p.user.is_some() && p.source.is_none());
        }
        total += plans.len();
    }
    assert!((total as f64 / 10_000.0 - 1.0).abs() < 0.02, "{total}");
    // Asking again for a live session gives the same plans.
    let again = s.on_session(ms(5000), client(7)).unwrap();
    let first: Vec<_> = again.iter().map(|p| p.session).collect();
    assert_eq!(s.on_session(ms(5001), client(7)).unwrap(), again);
    assert_eq!(first.len(), again.len());
    assert_eq!(s.live_copies(), total);
}

/// 20,000 sessions from distinct client addresses: each address draws its user once, so the
/// pool shares are those of 20,000 draws of Bernoulli(0.75): sd 0.003, 1% relative is 2.5 sd.
#[test]
fn pools_get_their_share_of_copies() {
    let mut s = Shaper::new(&profile(POOLS), 2).unwrap();
    for i in 0..20_000u32 {
        let c = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0xcb00_0000 + i)), 40000);
        s.on_session(ms(u64::from(i)), c).unwrap();
    }
    let counts = s.pool_sessions();
    let a = counts[0] as f64 / (counts[0] + counts[1]) as f64;
    assert!((a / 0.75 - 1.0).abs() < 0.01, "{a}");
}

#[test]
fn same_seed_same_answers() {
    let p = profile(&format!(
        "[multiplication]\nfactor = 1.7\n[onoff]\nenabled = true\nhorizon_s = 600\n{POOLS}"
    ));
    let run = |seed| {
        let mut s = Shaper::new(&p, seed).unwrap();
        let mut out = Vec::new();
        for i in 0..300 {
            for plan in s.on_session(ms(u64::from(i) * 10), client(i * 7)).unwrap() {
                let r = s
                    .release_at(ms(u64::from(i) * 10), plan.session, 0)
                    .unwrap();
                out.push((plan.client, plan.user, plan.source, r));
            }
        }
        out
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10));
}

#[test]
fn think_time_scales_the_online_gaps() {
    // W = 2 for every user (variance 0), no gating.
    let p = profile(
        "[[pools]]\ncidr = \"198.19.0.0/24\"\nusers = 3\nthink = { mean = 2.0, variance = 0.0, min = 0.1, max = 5.0 }\n",
    );
    let mut s = Shaper::new(&p, 3).unwrap();
    let plan = s.on_session(ms(0), client(1)).unwrap()[0];
    assert_eq!(plan.think, 2.0);
    assert_eq!(s.release_at(ms(0), plan.session, 0).unwrap(), ms(0));
    assert_eq!(s.release_at(ms(1000), plan.session, 1).unwrap(), ms(2000));
    assert_eq!(s.release_at(ms(3000), plan.session, 2).unwrap(), ms(6000));
    // Stable answer for the same index; an older index is an error.
    assert_eq!(s.release_at(ms(9999), plan.session, 2).unwrap(), ms(6000));
    assert!(matches!(
        s.release_at(ms(4000), plan.session, 1),
        Err(ShaperError::OutOfOrder { .. })
    ));

    // W = 0.5 with a global factor 1: a copy never leaves before its online request.
    let p = profile(
        "[[pools]]\ncidr = \"198.19.0.0/24\"\nusers = 3\nthink = { mean = 0.5, variance = 0.0, min = 0.1, max = 5.0 }\n",
    );
    let mut s = Shaper::new(&p, 3).unwrap();
    let plan = s.on_session(ms(0), client(1)).unwrap()[0];
    assert_eq!(s.release_at(ms(0), plan.session, 0).unwrap(), ms(0));
    assert_eq!(s.release_at(ms(1000), plan.session, 1).unwrap(), ms(1000));
}

/// With gating on, every release falls in an ON period of the copy's source, never before the
/// online arrival, and in order; and an OFF source holds requests rather than dropping them.
#[test]
fn gated_releases_fall_in_on_periods() {
    let p = profile("[onoff]\nenabled = true\nsources = 8\nrho = 0.3\nhorizon_s = 2000\nmax_on_s = 100\nmax_off_s = 300\n");
    let mut s = Shaper::new(&p, 4).unwrap();
    let mut held = 0;
    for i in 0..200u32 {
        let now = ms(u64::from(i) * 5000);
        let plans = s.on_session(now, client(i)).unwrap();
        assert_eq!(plans.len(), 1);
        let plan = plans[0];
        let source = plan.source.unwrap() as usize;
        let mut prev = Duration::ZERO;
        for k in 0..5u32 {
            let arrival = now + ms(u64::from(k) * 700);
            let r = s.release_at(arrival, plan.session, k).unwrap();
            assert!(r >= arrival && r >= prev);
            let t = r.as_secs_f64() % 2000.0;
            assert!(
                s.plan().unwrap().is_on(source, t),
                "session {i} request {k} released at {r:?} while OFF"
            );
            if r > arrival {
                held += 1;
            }
            prev = r;
        }
        s.end_session(plan.session);
    }
    assert!(held > 100, "with rho = 0.3 most requests wait: {held}");
    assert_eq!(s.live_copies(), 0);
}

#[test]
fn plans_wrap_around_their_horizon() {
    let plan = Plan::from_csv("0,0,10,off\n0,10,20,on\n0,20,100,off\n").unwrap();
    // A wait ends one nanosecond after the ON period's start (see next_on_wrapped).
    let ns = Duration::from_nanos(1);
    assert_eq!(next_on_wrapped(&plan, 0, ms(5_000)), ms(10_000) + ns);
    assert_eq!(next_on_wrapped(&plan, 0, ms(15_000)), ms(15_000));
    assert_eq!(next_on_wrapped(&plan, 0, ms(50_000)), ms(110_000) + ns);
    assert_eq!(next_on_wrapped(&plan, 0, ms(205_000)), ms(210_000) + ns);
    let never = Plan::from_csv("0,0,100,off\n").unwrap();
    assert_eq!(next_on_wrapped(&never, 0, ms(5_000)), ms(5_000));
}

#[test]
fn idle_copies_expire_and_free_their_ports() {
    let p = profile("[nat]\nlifetime_s = 10\nport_min = 40000\nport_max = 40000\n");
    let mut s = Shaper::new(&p, 5).unwrap();
    // Without pools the copy keeps the real address, and one port is available.
    let a = s.on_session(ms(0), client(1)).unwrap()[0];
    assert_eq!(a.client, SocketAddr::new(client(1).ip(), 40000));
    let other = SocketAddr::new(client(1).ip(), 50000);
    assert!(matches!(
        s.on_session(ms(1), other),
        Err(ShaperError::Users(UsersError::PortsExhausted(_)))
    ));
    // Used at 5 s, so alive until 15 s.
    s.release_at(ms(5000), a.session, 0).unwrap();
    s.handle_timeout(ms(14_000));
    assert_eq!(s.live_copies(), 1);
    assert!(s.poll_timeout().is_some());
    s.handle_timeout(ms(15_000));
    assert_eq!(s.live_copies(), 0);
    assert!(matches!(
        s.release_at(ms(15_001), a.session, 1),
        Err(ShaperError::UnknownSession(_))
    ));
    let b = s.on_session(ms(15_002), other).unwrap()[0];
    assert_eq!(b.client.port(), 40000);
    s.end_session(b.session);
    assert_eq!(
        s.on_session(ms(15_003), client(1)).unwrap()[0]
            .client
            .port(),
        40000
    );
}

#[test]
fn a_factor_below_one_samples_sessions() {
    let mut s = Shaper::new(&profile("[multiplication]\nfactor = 0.25\n"), 6).unwrap();
    let kept: usize = (0..20_000)
        .map(|i| s.on_session(ms(0), client(i)).unwrap().len())
        .sum();
    // Binomial(20000, 0.25): sd 61; 4 sd = 245.
    assert!((kept as i64 - 5000).abs() < 245, "{kept}");
}

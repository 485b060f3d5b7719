//! Tests of the virtual user pools: weights, think times and the address table.
use super::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::HashSet;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn cidr_parses_masks_and_counts() {
    let c: Cidr = "198.18.7.9/16".parse().unwrap();
    assert_eq!(c.to_string(), "198.18.0.0/16");
    assert_eq!(c.size(), 65536);
    assert_eq!(c.usable(), 65534);
    assert_eq!(c.nth_usable(0), Some("198.18.0.1".parse().unwrap()));
    assert_eq!(c.nth_usable(65533), Some("198.18.255.254".parse().unwrap()));
    assert_eq!(c.nth_usable(65534), None);
    assert!(c.contains("198.18.200.1".parse().unwrap()));
    assert!(!c.contains("198.19.0.1".parse().unwrap()));
    let one: Cidr = "198.18.0.5/32".parse().unwrap();
    assert_eq!(one.nth_usable(0), Some("198.18.0.5".parse().unwrap()));
    let v6: Cidr = "2001:db8::/120".parse().unwrap();
    assert_eq!(v6.usable(), 255);
    assert_eq!(v6.nth_usable(0), Some("2001:db8::1".parse().unwrap()));
    for bad in ["198.18.0.0", "198.18.0.0/33", "x/8", "2001:db8::/129"] {
        assert!(bad.parse::<Cidr>().is_err(), "{bad}");
    }
}

#[test]
fn normal_cdf_matches_known_values() {
    assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
    assert!((normal_cdf(1.0) - 0.841_344_746).abs() < 1e-7);
    assert!((normal_cdf(-2.0) - 0.022_750_132).abs() < 1e-7);
    assert!((normal_cdf(3.0) - 0.998_650_102).abs() < 1e-7);
}

#[test]
fn truncated_normal_stays_in_bounds_and_rejects_empty_ranges() {
    let mut rng = StdRng::seed_from_u64(40);
    // The published activity law: mean 1, variance 12.5, here truncated to [0.01, 20].
    let t = TruncatedNormal::new(1.0, 12.5, 0.01, 20.0).unwrap();
    let xs: Vec<f64> = (0..100_000).map(|_| t.sample(&mut rng)).collect();
    assert!(xs.iter().all(|x| (0.01..=20.0).contains(x)));
    // Symmetric truncation keeps the mean.
    let s = TruncatedNormal::new(1.0, 0.5, 0.0, 2.0).unwrap();
    let m = (0..100_000).map(|_| s.sample(&mut rng)).sum::<f64>() / 100_000.0;
    assert!((m - 1.0).abs() < 0.01, "{m}");
    assert!(TruncatedNormal::new(1.0, 0.5, 2.0, 1.0).is_err());
    assert!(
        TruncatedNormal::new(0.0, 1.0, 10.0, 11.0).is_err(),
        "mass ~1e-23"
    );
    assert!(TruncatedNormal::new(0.0, -1.0, 0.0, 1.0).is_err());
    assert_eq!(
        TruncatedNormal::new(1.0, 0.0, 0.0, 2.0)
            .unwrap()
            .sample(&mut rng),
        1.0
    );
}

#[test]
fn alias_table_draws_each_weight_within_one_percent() {
    let w = [5.0, 1.0, 3.0, 0.0, 1.0];
    let t = AliasTable::new(&w).unwrap();
    let mut rng = StdRng::seed_from_u64(41);
    let n = 1_000_000;
    let mut counts = [0usize; 5];
    for _ in 0..n {
        counts[t.sample(&mut rng)] += 1;
    }
    assert_eq!(counts[3], 0, "a zero weight is never drawn");
    for (i, &wi) in w.iter().enumerate().filter(|(_, &wi)| wi > 0.0) {
        let share = counts[i] as f64 / n as f64;
        assert!((share / (wi / 10.0) - 1.0).abs() < 0.01, "{i}: {share}");
    }
    assert!(AliasTable::new(&[]).is_err());
    assert!(AliasTable::new(&[0.0, 0.0]).is_err());
    assert!(AliasTable::new(&[1.0, -1.0]).is_err());
    assert!(AliasTable::new(&[1.0, f64::NAN]).is_err());
}

/// Two pools (0.7, 0.3) with users of activity 1, 2, 4 and 1, 1: expected user shares 0.1, 0.2,
/// 0.4, 0.15, 0.15. Over 10^6 draws the relative standard error of a 0.1 share is 0.3%, so 1%
/// is more than 3 standard errors.
#[test]
fn pools_and_users_are_chosen_in_proportion() {
    let csv = "user,pool,pool_weight,addr,activity,think_weight\n\
               0,a,0.7,198.18.0.1,1,1\n1,a,0.7,198.18.0.2,2,1\n2,a,0.7,198.18.0.3,4,1\n\
               3,b,0.3,198.19.0.1,1,1\n4,b,0.3,198.19.0.2,1,1\n";
    let table = UserTable::from_csv(csv).unwrap();
    let want = table.user_shares();
    let expect = [0.1, 0.2, 0.4, 0.15, 0.15];
    for (w, e) in want.iter().zip(expect) {
        assert!((w - e).abs() < 1e-12);
    }
    let mut rng = StdRng::seed_from_u64(42);
    let n = 1_000_000;
    let mut counts = [0usize; 5];
    for _ in 0..n {
        counts[table.choose(&mut rng) as usize] += 1;
    }
    for (i, e) in expect.iter().enumerate() {
        let share = counts[i] as f64 / n as f64;
        assert!((share / e - 1.0).abs() < 0.01, "user {i}: {share} vs {e}");
    }
    let pool_a = (counts[0] + counts[1] + counts[2]) as f64 / n as f64;
    assert!((pool_a / 0.7 - 1.0).abs() < 0.01, "pool a {pool_a}");
    assert!(
        ((1.0 - pool_a) / 0.3 - 1.0).abs() < 0.01,
        "pool b {}",
        1.0 - pool_a
    );
}

fn spec(name: &str, weight: f64, cidr: &str, users: u32) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        weight,
        cidr: cidr.parse().unwrap(),
        users,
        activity: Activity::Normal(TruncatedNormal::new(1.0, 12.5, 0.01, 50.0).unwrap()),
        think: TruncatedNormal::new(1.0, 0.5, 0.1, 5.0).unwrap(),
    }
}

#[test]
fn generated_users_get_distinct_addresses_in_their_ranges() {
    let pools = [
        spec("home", 3.0, "198.18.0.0/22", 1000),
        spec("office", 1.0, "198.19.0.0/24", 254),
    ];
    let mut rng = StdRng::seed_from_u64(43);
    let t = UserTable::generate(&pools, &mut rng).unwrap();
    assert_eq!(t.users().len(), 1254);
    let addrs: HashSet<IpAddr> = t.users().iter().map(|u| u.addr).collect();
    assert_eq!(addrs.len(), 1254);
    for u in t.users() {
        assert!(pools[u.pool].cidr.contains(u.addr));
        assert!((0.01..=50.0).contains(&u.activity) && (0.1..=5.0).contains(&u.think));
    }
    assert_eq!(t.pool_shares(), vec![0.75, 0.25]);
    let back = UserTable::from_csv(&t.to_csv()).unwrap();
    assert_eq!(back, t);
    // 255 users do not fit in a /24 (254 usable addresses).
    let too_many = [spec("office", 1.0, "198.19.0.0/24", 255)];
    assert!(matches!(
        UserTable::generate(&too_many, &mut rng),
        Err(UsersError::RangeTooSmall { usable: 254, .. })
    ));
}

#[test]
fn empirical_activity_table_is_followed() {
    let mut rng = StdRng::seed_from_u64(44);
    let a = Activity::Table(vec![(1.0, 3.0), (10.0, 1.0)]);
    let xs = a.draw(100_000, &mut rng).unwrap();
    let tens = xs.iter().filter(|&&x| x == 10.0).count() as f64 / 100_000.0;
    assert!(xs.iter().all(|&x| x == 1.0 || x == 10.0));
    assert!((tens - 0.25).abs() < 0.005, "{tens}");
}

fn nat(lifetime_s: u64, port_min: u16, port_max: u16) -> NatTable {
    NatTable::new(NatConfig {
        lifetime: Duration::from_secs(lifetime_s),
        port_min,
        port_max,
        seed: 1,
    })
}

const S: fn(u64) -> Duration = Duration::from_secs;

#[test]
fn user_mapping_is_sticky_until_it_expires() {
    let mut t = nat(60, 1024, 65535);
    let client: IpAddr = "203.0.113.9".parse().unwrap();
    let mut next = 0u32;
    let mut choose = || {
        next += 1;
        next
    };
    assert_eq!(t.user_for(S(0), client, 0, &mut choose), 1);
    // Used again at 50 s: same user, lifetime renewed to 110 s.
    assert_eq!(t.user_for(S(50), client, 0, &mut choose), 1);
    assert_eq!(t.user_for(S(100), client, 0, &mut choose), 1);
    // Another copy of the same client is its own mapping.
    assert_eq!(t.user_for(S(100), client, 1, &mut choose), 2);
    assert_eq!(t.next_expiry(), Some(S(110)));
    assert_eq!(t.expire(S(159)), 0, "renewed at 100 s: lives until 160 s");
    assert_eq!(t.user_mappings(), 2);
    assert_eq!(t.expire(S(160)), 2);
    assert_eq!(t.user_mappings(), 0);
    assert_eq!(
        t.user_for(S(161), client, 0, &mut choose),
        3,
        "a new user after expiry"
    );
}

#[test]
fn sessions_keep_their_port_when_free_and_never_share_a_tuple() {
    let mut t = nat(300, 1024, 65535);
    let vaddr: IpAddr = "198.18.0.1".parse().unwrap();
    let a = t.open(S(0), (sa("203.0.113.1:40000"), 0), vaddr).unwrap();
    assert_eq!(
        a,
        SocketAddr::new(vaddr, 40000),
        "the real port is kept when free"
    );
    // Same real port from other clients (and another copy) onto the same virtual address.
    let mut seen = HashSet::from([a]);
    for i in 2..200 {
        let client = sa(&format!("203.0.113.{}:40000", i % 250));
        for copy in 0..2 {
            let v = t.open(S(1), (client, copy), vaddr).unwrap();
            assert_eq!(v.ip(), vaddr);
            assert!(seen.insert(v), "{v} handed out twice");
        }
    }
    // Re-opening a live session returns its translation.
    assert_eq!(
        t.open(S(2), (sa("203.0.113.1:40000"), 0), vaddr).unwrap(),
        a
    );
    assert_eq!(t.lookup(S(2), (sa("203.0.113.1:40000"), 0)), Some(a));
    // Closing frees the port for the next session.
    assert_eq!(t.close((sa("203.0.113.1:40000"), 0)), Some(a));
    let b = t.open(S(3), (sa("203.0.113.250:40000"), 0), vaddr).unwrap();
    assert_eq!(b, a);
}

#[test]
fn expired_sessions_free_their_ports_and_exhaustion_is_an_error() {
    let mut t = nat(10, 5000, 5003);
    let vaddr: IpAddr = "198.18.0.1".parse().unwrap();
    for i in 0..4 {
        t.open(S(0), (sa(&format!("203.0.113.{i}:80")), 0), vaddr)
            .unwrap();
    }
    assert_eq!(
        t.open(S(1), (sa("203.0.113.9:80"), 0), vaddr),
        Err(UsersError::PortsExhausted(vaddr))
    );
    // Keep one session alive; the other three expire at 10 s.
    assert!(t.lookup(S(5), (sa("203.0.113.0:80"), 0)).is_some());
    let v = t.open(S(10), (sa("203.0.113.9:80"), 0), vaddr).unwrap();
    assert!((5000..=5003).contains(&v.port()));
    assert_eq!(t.sessions(), 2);
    assert_eq!(t.lookup(S(10), (sa("203.0.113.1:80"), 0)), None);
    // A clock that goes backwards is clamped: nothing comes back to life.
    assert_eq!(t.lookup(S(0), (sa("203.0.113.1:80"), 0)), None);
}

/// A simulated run: 20,000 sessions arrive over 2,000 s from 500 real clients, each living a
/// random time; at every step no two live sessions share a virtual (address, port).
#[test]
fn no_collision_under_churn() {
    let pools = [spec("p", 1.0, "198.18.0.0/29", 6)];
    let mut rng = StdRng::seed_from_u64(45);
    let users = UserTable::generate(&pools, &mut rng).unwrap();
    let mut t = nat(30, 40000, 40999);
    let mut live: Vec<(SessionKey, SocketAddr, Duration)> = Vec::new();
    for k in 0..20_000u64 {
        let now = Duration::from_millis(k * 100);
        live.retain(|(key, _, end)| {
            if *end <= now {
                t.close(*key);
                false
            } else {
                true
            }
        });
        let client = SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(203, 0, 113, rng.random_range(0..250))),
            rng.random_range(40000..40100),
        );
        let key = (client, rng.random_range(0..2));
        let user = t.user_for(now, client.ip(), key.1, || users.choose(&mut rng));
        let v = t.open(now, key, users.user(user).addr).unwrap();
        if !live.iter().any(|(k, _, _)| *k == key) {
            live.push((
                key,
                v,
                now + Duration::from_millis(rng.random_range(100..20_000)),
            ));
        }
        let tuples: HashSet<SocketAddr> = live.iter().map(|l| l.1).collect();
        assert_eq!(tuples.len(), live.len(), "collision at step {k}");
    }
}

//! Tests of the request rules.

use super::*;

fn err(t: &str) -> String {
    Rules::from_toml_str(t).unwrap_err().to_string()
}

#[test]
fn errors_name_the_rule() {
    assert!(err("[[filter]]\nname = \"a\"\npath = \"x\"")
        .contains("rule \"a\": path \"x\" must start with /"));
    assert!(err("[[filter]]\nname = \"b\"\npath_regex = \"(\"").contains("rule \"b\": path_regex"));
    assert!(err("[[filter]]\nname = \"c\"\nclient = \"1.2.3.4/40\"").contains("rule \"c\": client"));
    assert!(
        err("[[filter]]\nname = \"d\"\nprefix = \"Q\"\nmethods = [\"GET\"]").contains("rule \"d\"")
    );
    assert!(err("[[filter]]\nname = \"e\"\n[[filter]]\nname = \"e\"")
        .contains("rule \"e\": the name is taken"));
    assert!(err("[[filter]]\nname = \"f\"\naction = \"maybe\"").contains("rule \"f\": action"));
    assert!(
        err("[[header]]\nname = \"Host\"\nset = \"a\"\ndelete = true")
            .contains("rule \"header Host\"")
    );
    assert!(err("[[header]]\nname = \"Bad Name\"\ndelete = true").contains("not a header name"));
    assert!(err("[[header]]\nname = \"A\"\nfile = \"/nonexistent/x\"").contains("/nonexistent/x"));
    assert!(
        err("[[rewrite]]\nname = \"r\"\nregex = \"[\"\nreplace = \"\"")
            .contains("rule \"r\": regex")
    );
    assert!(
        err("[[filter]]\nname = \"g\"\npaht = \"/x\"").contains("paht"),
        "unknown keys are refused"
    );
}

#[test]
fn filters_match_in_order() {
    let r = Rules::from_toml_str(
        "[[filter]]\nname = \"pay\"\nmethods = [\"POST\"]\npath = \"/pay/**\"\n\
         [[filter]]\nname = \"one\"\npath = \"/a/*/b\"\n\
         [[filter]]\nname = \"hdr\"\nheader = \"x-real\"\nheader_regex = \"^1$\"\n\
         [[filter]]\nname = \"quit\"\nprefix = \"QU\\\\x49T\"\nclient = \"198.18.0.0/16\"\n",
    )
    .unwrap();
    let c: IpAddr = "198.18.0.5".parse().unwrap();
    let http = |m: &'static str, t: &'static str| Req::Http {
        method: m.as_bytes(),
        target: t.as_bytes(),
        headers: &[],
    };
    assert_eq!(
        r.verdict(c, &http("POST", "/pay/x/y?z=1")),
        Verdict::Drop(Some(0))
    );
    assert_eq!(r.verdict(c, &http("GET", "/pay/x")), Verdict::Copy(None));
    assert_eq!(
        r.verdict(c, &http("GET", "/a/q/b?x")),
        Verdict::Drop(Some(1))
    );
    assert_eq!(r.verdict(c, &http("GET", "/a/q/r/b")), Verdict::Copy(None));
    let h = [("X-Real", &b"1"[..])];
    assert_eq!(
        r.verdict(
            c,
            &Req::Http {
                method: b"GET",
                target: b"/",
                headers: &h
            }
        ),
        Verdict::Drop(Some(2))
    );
    assert_eq!(
        r.verdict(c, &Req::Bytes(b"QUIT\r\n")),
        Verdict::Drop(Some(3))
    );
    assert_eq!(
        r.verdict("10.0.0.1".parse().unwrap(), &Req::Bytes(b"QUIT\r\n")),
        Verdict::Copy(None)
    );
    assert_eq!(
        r.verdict(c, &http("QUIT", "/")),
        Verdict::Copy(None),
        "a prefix rule never matches HTTP"
    );
    let a = Rules::from_toml_str(
        "[[filter]]\nname = \"api\"\naction = \"allow\"\npath = \"/api/**\"\n",
    )
    .unwrap();
    assert_eq!(
        a.verdict(c, &http("GET", "/api/v1")),
        Verdict::Copy(Some(0))
    );
    assert_eq!(a.verdict(c, &http("GET", "/web")), Verdict::Drop(None));
    assert_eq!(a.counter_names(), ["api", "allow_only"]);
}

#[test]
fn the_readme_and_module_examples_are_valid() {
    let readme = include_str!("../../../../README.md");
    let start = readme
        .find("```toml\n  path_case")
        .expect("the README's rules example")
        + 8;
    let end = start + readme[start..].find("```").unwrap();
    let text: String = readme[start..end]
        .lines()
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    let token = std::env::temp_dir().join(format!("rules-readme-{}", std::process::id()));
    std::fs::write(&token, "Bearer t\n").unwrap();
    let r =
        Rules::from_toml_str(&text.replace("/etc/tcopy/test-token", &token.display().to_string()));
    std::fs::remove_file(&token).unwrap();
    let r = r.unwrap();
    assert_eq!(
        r.counter_names(),
        ["no-payments", "no-internal", "allow_only", "api-v2"]
    );
    let doc = include_str!("../rules.rs");
    let start = doc.find("//! ```toml\n").unwrap() + 12;
    let end = start + doc[start..].find("//! ```").unwrap();
    let text: String = doc[start..end]
        .lines()
        .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
        .collect();
    // The module example shows every key: drop the alternatives a real file picks among.
    let text = text
        .replace("path_regex = \"^/pay/\"", "")
        .replace("replace = \"...\"", "")
        .replace("file = \"/etc/tc/token\"", "")
        .replace("delete = true", "")
        .replace("prefix = \"DEL \"", "");
    Rules::from_toml_str(&text).unwrap();
}

#[test]
fn paths_are_matched_normalised_so_spellings_do_not_walk_around_a_deny() {
    for (raw, norm) in [
        ("/pay/1", "/pay/1"),
        ("//pay/1", "/pay/1"),
        ("/%70ay/1", "/pay/1"),
        ("/pay%2F1", "/pay/1"),
        ("/x/../pay/./1", "/pay/1"),
        ("/%2e%2e/pay/1", "/pay/1"),
        ("/../../pay/1?a=/x", "/pay/1"),
        ("/pay/1#frag", "/pay/1"),
        ("http://shop.example//pay/1?x", "/pay/1"),
        ("/pay/", "/pay/"),
        ("/pay/x/..", "/pay/"),
        ("", "/"),
        ("/%zz/%4", "/%zz/%4"),
    ] {
        assert_eq!(
            String::from_utf8_lossy(&normalize_target(raw.as_bytes())),
            norm,
            "{raw}"
        );
    }
    let r = Rules::from_toml_str("[[filter]]\nname = \"pay\"\npath = \"/pay/*\"\n").unwrap();
    let v = |t: &str| {
        r.verdict(
            "198.18.0.9".parse().unwrap(),
            &Req::Http {
                method: b"GET",
                target: t.as_bytes(),
                headers: &[],
            },
        )
    };
    for t in [
        "/pay/1",
        "//pay/1",
        "/%70ay/1",
        "/PAY/1",
        "/Pay/%31?q",
        "/a/../pay/1",
        "/pay/%FF",
    ] {
        assert_eq!(v(t), Verdict::Drop(Some(0)), "{t} must be denied");
    }
    for t in ["/payment/1", "/pay/1/2", "/a/pay/1", "/pa%79x/1"] {
        assert_eq!(v(t), Verdict::Copy(None), "{t} must pass");
    }
    // Case-sensitive on request.
    let s = Rules::from_toml_str(
        "path_case = \"sensitive\"\n[[filter]]\nname = \"pay\"\npath = \"/pay/*\"\n",
    )
    .unwrap();
    let vs = |t: &str| {
        s.verdict(
            "198.18.0.9".parse().unwrap(),
            &Req::Http {
                method: b"GET",
                target: t.as_bytes(),
                headers: &[],
            },
        )
    };
    assert_eq!(
        (vs("/PAY/1"), vs("//pay/1")),
        (Verdict::Copy(None), Verdict::Drop(Some(0)))
    );
    assert!(Rules::from_toml_str("path_case = \"upper\"\n")
        .unwrap_err()
        .to_string()
        .contains("path_case"));
    // A path_regex sees the raw target and the normalised one.
    let re = Rules::from_toml_str(
        "[[filter]]\nname = \"pay\"\npath_regex = \"^/pay/[0-9]+\\\\?x=1$\"\n",
    )
    .unwrap();
    let vr = |t: &str| {
        re.verdict(
            "198.18.0.9".parse().unwrap(),
            &Req::Http {
                method: b"GET",
                target: t.as_bytes(),
                headers: &[],
            },
        )
    };
    assert_eq!(
        (vr("/pay/1?x=1"), vr("//%70ay/1?x=1"), vr("/pay/1")),
        (
            Verdict::Drop(Some(0)),
            Verdict::Drop(Some(0)),
            Verdict::Copy(None)
        )
    );
}

proptest::proptest! {
    /// Any target: no panic, and the path is rooted, with no empty, `.` or `..` segment
    /// left (a trailing `/` aside).
    #[test]
    fn any_target_normalises_to_a_rooted_path_without_dot_or_empty_segments(t in proptest::collection::vec(proptest::sample::select(b"/.%2fFe?#a0".to_vec()), 0..40)) {
        let n = normalize_target(&t);
        proptest::prop_assert_eq!(n.first(), Some(&b'/'));
        let body = n.strip_suffix(b"/").unwrap_or(&n);
        for seg in body.split(|&c| c == b'/').skip(1) {
            proptest::prop_assert!(seg != b"" && seg != b"." && seg != b"..", "{:?} -> {:?}", String::from_utf8_lossy(&t), String::from_utf8_lossy(&n));
        }
    }
}

//! A traffic mirror in the lab: `online`'s client link mirrored (both directions, `tc clsact`
//! ingress and egress, `u32` match-all, `mirred egress mirror`) into a VXLAN device whose
//! remote end is `test2`, over a link of its own (`online` mir0 198.18.4.1 -- `test2` mir0
//! 198.18.4.2, MTU 9000 so the inner 1500-byte packets plus 50 bytes of VXLAN fit). `test2`
//! then plays the mirror host: no VXLAN device there, the copier's `--mirror` socket takes the
//! datagrams; its only other link goes to `test`, which routes the real clients back through
//! it (so the test server's answers to copies go toward the copier host, where the intercept
//! has already dropped them). Nothing of the client traffic reaches `test2` except the mirror.

use crate::{addr, ifname, Host, Lab};
use anyhow::Result;

/// `online`'s end of the mirror link.
pub const MIRROR_SRC: &str = "198.18.4.1";
/// `test2`'s end of the mirror link: where the mirror is sent.
pub const MIRROR_DST: &str = "198.18.4.2";
/// The mirror link's name on both ends.
pub const MIRROR_IF: &str = "mir0";
/// The VXLAN device on `online`.
pub const VXLAN_IF: &str = "vxm0";
/// The VNI of the lab's mirror session.
pub const VNI: u32 = 42;

/// Builds the mirror link and routes; with `vxlan`, also the VXLAN device and the tc mirror
/// rules (without, a test sends its own encapsulated datagrams over the link).
pub fn build(lab: &Lab, vxlan: bool) -> Result<()> {
    let (on, t2) = (lab.ns(Host::Online), lab.ns(Host::Test2));
    crate::run(&[
        "ip", "link", "add", MIRROR_IF, "netns", &on, "type", "veth", "peer", "name", MIRROR_IF,
        "netns", &t2,
    ])?;
    for (h, a) in [(Host::Online, MIRROR_SRC), (Host::Test2, MIRROR_DST)] {
        lab.sh(
            h,
            &format!("ip addr add {a}/24 dev {MIRROR_IF} && ip link set {MIRROR_IF} mtu 9000 up"),
        )?;
    }
    // The test server answers the real clients through the copier host.
    lab.sh(
        Host::Test,
        &format!("ip route replace {} via {}", addr::CLIENT_NET, addr::TEST2),
    )?;
    if vxlan {
        // Segments cut to the inner MTU before they are wrapped: one datagram per packet. No
        // IPv6 on the device: its own DAD, MLD reports and router solicitations (7 datagrams in
        // its first 6 s) would reach `test2` unasked, some before the copier binds its socket,
        // and a test counting datagrams at the firewall would count them.
        lab.sh(
            Host::Online,
            &format!(
                "ip link add {VXLAN_IF} type vxlan id {VNI} dstport 4789 local {MIRROR_SRC} remote {MIRROR_DST} dev {MIRROR_IF} && \
                 sysctl -qw net.ipv6.conf.{VXLAN_IF}.disable_ipv6=1 && \
                 ip link set {VXLAN_IF} mtu 8950 up && \
                 ethtool -K {VXLAN_IF} tx off tso off gso off >/dev/null && \
                 tc qdisc add dev {c} clsact"
            ,
                c = ifname::ONLINE_TO_CLIENT
            ),
        )?;
        mirror_rule(lab, "ingress", 1)?;
        mirror_rule(lab, "egress", 1)?;
    }
    Ok(())
}

/// The `tc` rule mirroring a direction (`ingress`: the clients' packets; `egress`: the
/// answers) of `online`'s client link into the VXLAN device, `copies` times per packet (a
/// second `mirred` action on the rule duplicates; a second rule would not, the first match
/// ends the classification). [`build`] mirrors both directions once; a test that wants
/// duplicates calls it again for `ingress` after [`build`] (the rule is replaced).
pub fn mirror_rule(lab: &Lab, dir: &str, copies: usize) -> Result<()> {
    let action = format!(" action mirred egress mirror dev {VXLAN_IF}");
    lab.sh(
        Host::Online,
        &format!(
            "tc filter del dev {d} {dir} pref 1 2>/dev/null; \
             tc filter add dev {d} {dir} pref 1 protocol ip u32 match u32 0 0{}",
            action.repeat(copies),
            d = ifname::ONLINE_TO_CLIENT
        ),
    )?;
    Ok(())
}

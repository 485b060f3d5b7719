//! One mapping of an online service onto a test server ([`PortMap`], the `--map` flag) and its
//! display as the user writes it: a leaf that the configuration, the spread of a map over
//! several servers ([`super::targets`]) and the copier's logs and checks all take it from.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// One mapping of an online service onto a test server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortMap {
    /// The online service's address; `None` matches any destination address.
    pub online_ip: Option<IpAddr>,
    /// The online service's port.
    pub online_port: u16,
    /// Where the copies go.
    pub target: SocketAddr,
}

/// `--map` as the user would write it: `[ONLINE_IP:]PORT=TARGET_IP:PORT`.
impl fmt::Display for PortMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.online_ip {
            None => write!(f, "{}={}", self.online_port, self.target),
            Some(ip) => write!(
                f,
                "{}={}",
                SocketAddr::new(ip, self.online_port),
                self.target
            ),
        }
    }
}

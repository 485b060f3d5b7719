//! Intercept library: the routing decision logic ([`router`], sans-IO, with [`allow`] and
//! [`hold`]) and its I/O layer ([`nfqueue`] workers, [`control`] connections, iptables
//! [`rules`], [`metrics`] names).

pub mod allow;
pub mod hold;
pub mod router;

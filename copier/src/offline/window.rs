//! The time slice of an offline replay (`--from`, `--until`): only sessions whose client SYN
//! was captured in `[from, until)` (Unix time, the file's timestamps) are replayed, whole: every
//! later packet of such a session goes too, whatever its time, a retransmitted SYN (same ISN)
//! included; a session without a SYN in the file (caught mid-stream) is left out once a slice
//! is asked for. Sans-IO.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::wire::{TcpFlags, TcpSegment};

use super::pace::Accepted;

/// Which sessions of the file the slice keeps (see the module documentation).
#[derive(Debug, Default)]
pub struct Window {
    from: Option<Duration>,
    until: Option<Duration>,
    /// Per client and server end: the ISN of its latest SYN and whether that session is kept.
    live: HashMap<(SocketAddr, SocketAddr), (u32, bool)>,
}

impl Window {
    /// A slice; both ends `None` keeps everything.
    #[must_use]
    pub fn new(from: Option<Duration>, until: Option<Duration>) -> Window {
        Window {
            from,
            until,
            live: HashMap::new(),
        }
    }

    /// Whether the session of `acc` is kept, as decided by its client's packets so far (the
    /// service's answers of a session go with it; `--offline --compare`).
    #[must_use]
    pub fn keeps(&self, acc: &Accepted) -> bool {
        (self.from.is_none() && self.until.is_none())
            || self
                .live
                .get(&(acc.client, acc.server))
                .is_some_and(|x| x.1)
    }

    /// Whether the accepted packet `pkt` (captured at `ts`) is replayed.
    pub fn admit(&mut self, ts: Duration, acc: &Accepted, pkt: &[u8]) -> bool {
        if self.from.is_none() && self.until.is_none() {
            return true;
        }
        // `acc` says the packet parsed as TCP: its fixed header is there.
        let tcp = pkt
            .get(acc.tcp_offset..)
            .filter(|b| b.len() >= 20)
            .map(TcpSegment::new_unchecked);
        let flags = tcp.as_ref().map_or(TcpFlags::NONE, TcpSegment::flags);
        let key = (acc.client, acc.server);
        if let Some(t) =
            tcp.filter(|_| flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK))
        {
            let isn = t.seq().0;
            let inside = match self.live.get(&key) {
                Some(&(i, keep)) if i == isn => keep, // a retransmission: decided already
                _ => self.from.is_none_or(|f| ts >= f) && self.until.is_none_or(|u| ts < u),
            };
            self.live.insert(key, (isn, inside));
            return inside;
        }
        let keep = self.live.get(&key).is_some_and(|x| x.1);
        if flags.contains(TcpFlags::RST) {
            self.live.remove(&key);
        }
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_kept_whole_by_the_time_of_their_syn() {
        let acc = |port: u16| Accepted {
            client: SocketAddr::from(([198, 18, 1, 2], port)),
            server: SocketAddr::from(([198, 18, 1, 1], 80)),
            tcp_offset: 0,
        };
        let pkt = |flags: u8| {
            let mut p = vec![0u8; 20];
            p[13] = flags;
            p
        };
        let s = Duration::from_secs;
        let mut w = Window::new(Some(s(100)), Some(s(200)));
        assert!(
            !w.admit(s(99), &acc(1), &pkt(0x02)),
            "a SYN before the slice"
        );
        assert!(
            !w.admit(s(150), &acc(1), &pkt(0x02)),
            "retransmitted in it: still out"
        );
        assert!(
            !w.admit(s(150), &acc(1), &pkt(0x10)),
            "its later packets neither"
        );
        assert!(w.admit(s(100), &acc(2), &pkt(0x02)));
        assert!(
            w.admit(s(500), &acc(2), &pkt(0x18)),
            "a kept session goes on after the slice"
        );
        assert!(w.admit(s(501), &acc(2), &pkt(0x14)), "its RST");
        assert!(
            !w.admit(s(502), &acc(2), &pkt(0x10)),
            "nothing after its RST"
        );
        assert!(!w.admit(s(200), &acc(3), &pkt(0x02)), "the end is excluded");
        let mut new_isn = pkt(0x02);
        new_isn[7] = 9;
        assert!(
            w.admit(s(150), &acc(1), &new_isn),
            "the port's next session, in the slice"
        );
        assert!(
            !w.admit(s(150), &acc(4), &pkt(0x10)),
            "no SYN in the file: left out"
        );
        let mut all = Window::new(None, None);
        assert!(all.admit(s(1), &acc(4), &pkt(0x10)));
    }
}

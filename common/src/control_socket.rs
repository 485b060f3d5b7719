//! The control connection's own socket settings, the same at both ends.
//!
//! Records and registrations are a few dozen bytes each, latency-bound, and never fill a link.
//! A congestion control that paces (BBR, the default of many hosts and of this project's lab)
//! makes the kernel send them from a pacing timer when there is no `fq` qdisc: an hrtimer
//! interrupt and a softirq for what the writing thread could have sent itself, and a record held
//! back by however long the pacing rate says. So the control connection asks for a congestion
//! control that does not pace (`cubic`, else `reno`, which every Linux has), before it is
//! established: the kernel decides whether a connection paces when it opens, and a listening
//! socket's choice passes to the connections it accepts.

use socket2::SockRef;

/// The congestion controls asked for, in order of preference; neither paces.
pub const CONTROL_CONGESTION: [&str; 2] = ["cubic", "reno"];

/// Ask for a congestion control of [`CONTROL_CONGESTION`] on a socket that is not connected
/// yet (the copier's, before `connect`) or that listens (the intercept's). Returns the one
/// taken, or the last error when the kernel refused both (the connection then keeps the
/// host's default: slower, never wrong).
pub fn set_control_congestion(sock: SockRef<'_>) -> std::io::Result<&'static str> {
    let mut last = None;
    for name in CONTROL_CONGESTION {
        match sock.set_tcp_congestion(name.as_bytes()) {
            Ok(()) => return Ok(name),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("CONTROL_CONGESTION is not empty"))
}

/// The congestion control a socket has, by name (the kernel pads it with NULs).
pub fn congestion_of(sock: SockRef<'_>) -> std::io::Result<String> {
    let name = sock.tcp_congestion()?;
    Ok(String::from_utf8_lossy(&name)
        .trim_end_matches('\0')
        .to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_takes_a_congestion_control_that_does_not_pace_and_passes_it_on() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let name = set_control_congestion(SockRef::from(&listener)).unwrap();
        assert!(CONTROL_CONGESTION.contains(&name));
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert_eq!(
            congestion_of(SockRef::from(&accepted)).unwrap(),
            name,
            "the accepted connection inherits it"
        );
        drop(client);
    }

    #[test]
    fn a_socket_before_connect_takes_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let name = set_control_congestion(SockRef::from(&sock)).unwrap();
        sock.connect(&listener.local_addr().unwrap().into())
            .unwrap();
        assert_eq!(congestion_of(SockRef::from(&sock)).unwrap(), name);
    }
}

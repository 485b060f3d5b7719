//! The intercept's only unsafe code: socket options on the NFQUEUE netlink socket, which the
//! `nfq` crate opens but does not expose.
//!
//! The socket is found by its number: [`next_fd`] says which descriptor the next `socket()` gets
//! (the lowest free one), the caller opens the queue at once, and [`is_netfilter_socket`] checks
//! that the descriptor really is a `NETLINK_NETFILTER` socket before anything is set on it. If
//! the check fails (another thread opened a descriptor in between), nothing is touched.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// The descriptor number the next `socket()` or `open()` of this process will get, if no other
/// thread opens one first.
pub fn next_fd() -> io::Result<RawFd> {
    let f = std::fs::File::open("/dev/null")?;
    Ok(f.as_raw_fd())
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `val` and `len` are valid for writes of the sizes given; a bad fd only makes the
    // call fail with EBADF/ENOTSOCK.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut val as *mut libc::c_int).cast(), &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(val)
}

/// Whether `fd` is an open `AF_NETLINK` / `NETLINK_NETFILTER` socket.
pub fn is_netfilter_socket(fd: RawFd) -> bool {
    matches!(getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN), Ok(d) if d == libc::AF_NETLINK)
        && matches!(getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL), Ok(p) if p == libc::NETLINK_NETFILTER)
}

/// Sets the receive buffer of `fd` to `bytes`, above `net.core.rmem_max` (needs CAP_NET_ADMIN,
/// which the intercept has anyway). Returns the size the kernel reports afterwards.
pub fn force_rcvbuf(fd: RawFd, bytes: usize) -> io::Result<usize> {
    let val = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: passes a pointer to a c_int with its exact size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_netfilter_netlink_socket_is_recognised() {
        assert!(next_fd().unwrap() >= 0);
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!is_netfilter_socket(s.as_raw_fd()));
        assert!(!is_netfilter_socket(-1));
        // SAFETY: plain socket(2) call; the descriptor is closed below.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_NETFILTER) };
        assert!(fd >= 0, "{}", io::Error::last_os_error());
        assert!(is_netfilter_socket(fd));
        // SAFETY: closes the descriptor opened above, used nowhere else.
        unsafe { libc::close(fd) };
    }
}

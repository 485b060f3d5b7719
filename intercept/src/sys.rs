//! The intercept's only unsafe code: the NFQUEUE netlink socket (open, bind, socket options,
//! `send`, `recv` and `recvmmsg`), and the NFQUEUE workers' non-blocking writes to a copier's
//! connection ([`send_now`]). The messages themselves are built and parsed in safe code
//! ([`crate::netlink`]).

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `val` and `len` are valid for writes of the sizes given; a bad fd only makes the
    // call fail with EBADF/ENOTSOCK.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut val as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(val)
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a c_int with its exact size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

fn kernel_addr() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain data; all zeroes is a valid value (the kernel, no groups).
    let mut a: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    a.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    a
}

/// A bound `AF_NETLINK` / `NETLINK_NETFILTER` socket.
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
}

impl NetlinkSocket {
    /// Open a `NETLINK_NETFILTER` socket and bind it (the kernel picks its port id).
    pub fn open_netfilter() -> io::Result<NetlinkSocket> {
        // SAFETY: plain socket(2); the descriptor is owned by the OwnedFd at once.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_NETFILTER,
            )
        })?;
        // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let addr = kernel_addr();
        // SAFETY: `addr` is a valid sockaddr_nl of the size given.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        Ok(NetlinkSocket { fd })
    }

    /// Join the netlink multicast group `group` (`NETLINK_ADD_MEMBERSHIP`; for
    /// `NETLINK_NETFILTER` the groups are `NFNLGRP_*`, and joining needs CAP_NET_ADMIN).
    pub fn join_group(&self, group: u32) -> io::Result<()> {
        let val = libc::c_int::try_from(group)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        setsockopt_int(
            self.fd.as_raw_fd(),
            libc::SOL_NETLINK,
            libc::NETLINK_ADD_MEMBERSHIP,
            val,
        )
    }

    /// Set the receive buffer to `bytes`, above `net.core.rmem_max` (`SO_RCVBUFFORCE`, needs
    /// CAP_NET_ADMIN, which the intercept has anyway). Returns the size the kernel reports.
    pub fn force_rcvbuf(&self, bytes: usize) -> io::Result<usize> {
        let val = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        setsockopt_int(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            val,
        )?;
        Ok(usize::try_from(getsockopt_int(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
        )?)
        .unwrap_or(0))
    }

    /// Whether the kernel reports a receive-buffer overrun as ENOBUFS on the next receive
    /// (`NETLINK_NO_ENOBUFS` off; the default).
    pub fn report_enobufs(&self, on: bool) -> io::Result<()> {
        setsockopt_int(
            self.fd.as_raw_fd(),
            libc::SOL_NETLINK,
            libc::NETLINK_NO_ENOBUFS,
            libc::c_int::from(!on),
        )
    }

    /// Send netlink messages (one datagram) to the kernel.
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        let addr = kernel_addr();
        loop {
            // SAFETY: `buf` is valid for reads of its length, `addr` is a sockaddr_nl of the
            // size given.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    0,
                    (&addr as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if r >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receive one datagram into `buf`; returns its length (at most `buf.len()`; the rest of
    /// a longer one is lost).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let r = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(usize::try_from(r).unwrap_or(0).min(buf.len()))
    }

    /// Receive as many datagrams as are waiting, up to the batch's size, with one `recvmmsg`:
    /// it sleeps until the first arrives, then takes only what is already there
    /// (`MSG_WAITFORONE`). Returns how many were received; their bytes are `batch.get(i)`.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        self.recv_batch_flags(batch, libc::MSG_WAITFORONE)
    }

    /// [`recv_batch`](Self::recv_batch) without sleeping: what is already there, or
    /// `WouldBlock` when nothing is.
    pub fn recv_batch_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        self.recv_batch_flags(batch, libc::MSG_DONTWAIT)
    }

    fn recv_batch_flags(&self, batch: &mut RecvBatch, flags: libc::c_int) -> io::Result<usize> {
        let n = batch.bufs.len();
        batch.lens.iter_mut().for_each(|l| *l = 0);
        batch.iov.clear();
        for b in batch.bufs.iter_mut() {
            batch.iov.push(libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            });
        }
        batch.hdrs.clear();
        for iov in batch.iov.iter_mut() {
            // SAFETY: mmsghdr is plain data; all zeroes is valid (no name, no control).
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            batch.hdrs.push(h);
        }
        // SAFETY: `hdrs` holds `n` headers, each pointing at one iovec of `iov`, each of which
        // points at a buffer of `bufs` valid for writes of its length; all outlive the call
        // and none is moved during it.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                batch.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let got = usize::try_from(r).unwrap_or(0).min(n);
        for i in 0..got {
            batch.lens[i] = (batch.hdrs[i].msg_len as usize).min(batch.bufs[i].len());
        }
        Ok(got)
    }
}

impl AsRawFd for NetlinkSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Buffers for [`NetlinkSocket::recv_batch`].
#[derive(Debug)]
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iov` and `hdrs` point only into `bufs` and `iov`, owned by the
// same value; they are rebuilt before every use, so moving the batch to another thread is fine.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// `count` buffers of `size` bytes (at least one of one byte).
    pub fn new(count: usize, size: usize) -> RecvBatch {
        let count = count.max(1);
        RecvBatch {
            bufs: vec![vec![0u8; size.max(1)]; count],
            lens: vec![0; count],
            iov: Vec::with_capacity(count),
            hdrs: Vec::with_capacity(count),
        }
    }

    /// The bytes of datagram `i` of the last receive (empty past what was received).
    pub fn get(&self, i: usize) -> &[u8] {
        match (self.bufs.get(i), self.lens.get(i)) {
            (Some(b), Some(&n)) => &b[..n],
            _ => &[],
        }
    }

    /// How many datagrams one receive can take.
    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }
}

/// Send as much of `buf` as the socket takes now, without waiting. Returns the bytes sent
/// (0 when it would block), or the error if nothing was sent (after a partial send the error
/// comes back on the next call).
pub fn send_now(fd: &OwnedFd, buf: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        // SAFETY: `rest` is valid for reads of its length; `fd` is an open descriptor we own.
        let r = unsafe {
            libc::send(
                fd.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(done),
                _ if done > 0 => return Ok(done),
                _ => return Err(e),
            }
        }
        done += r as usize;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_netfilter_socket_opens_with_a_forced_buffer_and_batches_start_empty() {
        let s = NetlinkSocket::open_netfilter().expect("open a NETLINK_NETFILTER socket (root)");
        assert_eq!(
            getsockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PROTOCOL).unwrap(),
            libc::NETLINK_NETFILTER
        );
        let n = s.force_rcvbuf(4 << 20).unwrap();
        // the kernel reports twice what was set (its bookkeeping share)
        assert!(n >= 4 << 20, "receive buffer {n}");
        s.report_enobufs(true).unwrap();
        let b = RecvBatch::new(4, 256);
        assert_eq!(b.capacity(), 4);
        assert!(b.get(0).is_empty() && b.get(9).is_empty());
    }
}

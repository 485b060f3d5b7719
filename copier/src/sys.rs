//! Every system call of the copier that needs `unsafe`, behind a safe API.
//!
//! Owns: the `AF_PACKET` socket with its TPACKET_V3 receive ring (setup, the shared mapping,
//! handing blocks between kernel and user space, `PACKET_STATISTICS`, `PACKET_FANOUT`),
//! `sendmmsg`, the `AF_PACKET` send socket of super-segments ([`PacketTx`]: `PACKET_VNET_HDR`,
//! `sendmsg` of a `virtio_net_hdr`, an Ethernet header and the IP packet), an `eventfd` for waking the engine thread, `ppoll`, `if_nametoindex`,
//! `SO_SNDBUFFORCE`, glibc's `malloc_trim` and the registration of a socket with tokio for
//! writability only.
//!
//! Invariants:
//! - The ring mapping lives exactly as long as [`RxRing`]; block bytes are only handed out (to a
//!   closure) while the block's status says it belongs to user space, and the block is given back
//!   (status `TP_STATUS_KERNEL`, release ordering) when the closure returns or unwinds.
//! - The socket receives nothing before the filter and the ring are in place: it is created with
//!   protocol 0 and bound to `ETH_P_ALL` last.
//! - Parsing of block and frame headers is not done here: it is plain safe code over `&[u8]` in
//!   [`crate::capture`], so it can be tested without a kernel.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::bpf::Insn;

/// Offset of `block_status` in `struct tpacket_block_desc` (checked in the tests).
const BLOCK_STATUS_OFFSET: usize = 8;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a valid, initialised T for the duration of the call and we pass its size.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// How to lay out the receive ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingParams {
    /// Interface to bind to; 0 for all interfaces.
    pub ifindex: u32,
    /// Bytes per block: a multiple of the page size (a power of two is safest).
    pub block_size: u32,
    /// Number of blocks.
    pub block_count: u32,
    /// Nominal frame size the kernel wants for TPACKET_V3 (frames are variable length).
    pub frame_size: u32,
    /// After this many milliseconds a partly filled block is handed to user space anyway.
    pub retire_ms: u32,
    /// Also see the frames this host sends (the comparison's ring: the online answers).
    pub outgoing: bool,
}

/// Counters of `PACKET_STATISTICS` since the previous read (the kernel resets them on read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Packets that passed the filter (drops included).
    pub packets: u32,
    /// Packets that passed the filter but found no room in the ring.
    pub drops: u32,
    /// Times the queue was frozen because the ring was full.
    pub freeze_q_cnt: u32,
}

/// An `AF_PACKET`/`SOCK_DGRAM` socket with a TPACKET_V3 receive ring mapped into this process.
#[derive(Debug)]
pub struct RxRing {
    fd: OwnedFd,
    map: NonNull<u8>,
    map_len: usize,
    block_size: usize,
    block_count: usize,
}

// SAFETY: the mapping is owned by this value alone; moving it to another thread moves the only
// user-space accessor with it.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Create the socket, set TPACKET_V3, ignore outgoing frames, attach `filter`, set up and map
    /// the ring, then bind to `ETH_P_ALL` on `params.ifindex`.
    pub fn open(params: &RingParams, filter: &[Insn]) -> io::Result<RxRing> {
        let page = page_size();
        if params.block_size == 0 || params.block_size as usize % page != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "ring block size {} is not a multiple of the page size {page}",
                    params.block_size
                ),
            ));
        }
        if params.block_count == 0
            || params.frame_size == 0
            || params.block_size % params.frame_size != 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring needs blocks and a frame size dividing the block",
            ));
        }
        // SAFETY: plain syscall; the result is checked and owned right away.
        let raw = cvt(unsafe {
            libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
        })?;
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let version: libc::c_int = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        setsockopt(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_VERSION, &version)?;
        // Older kernels lack this; the filter rejects outgoing frames as well.
        if !params.outgoing {
            let _ = setsockopt(
                fd.as_fd(),
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                &(1 as libc::c_int),
            );
        }
        attach_filter(fd.as_fd(), filter)?;

        let req = libc::tpacket_req3 {
            tp_block_size: params.block_size,
            tp_block_nr: params.block_count,
            tp_frame_size: params.frame_size,
            tp_frame_nr: (params.block_size / params.frame_size) * params.block_count,
            tp_retire_blk_tov: params.retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;

        let map_len = params.block_size as usize * params.block_count as usize;
        // SAFETY: a fresh shared mapping of the ring that the kernel just allocated for `fd`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        let ring = RxRing {
            fd,
            map,
            map_len,
            block_size: params.block_size as usize,
            block_count: params.block_count as usize,
        };

        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as libc::c_ushort;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = params.ifindex as libc::c_int;
        // SAFETY: `sll` is a valid sockaddr_ll and we pass its exact size.
        cvt(unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(ring)
    }

    /// The socket, for `poll`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Number of blocks in the ring.
    pub fn block_count(&self) -> usize {
        self.block_count
    }

    fn status(&self, idx: usize) -> &AtomicU32 {
        assert!(idx < self.block_count);
        // SAFETY: the offset lies inside the mapping (idx < block_count, block_size >= page size);
        // the field is 4-byte aligned (blocks are page aligned) and the kernel accesses it as a u32.
        unsafe {
            AtomicU32::from_ptr(
                self.map
                    .as_ptr()
                    .add(idx * self.block_size + BLOCK_STATUS_OFFSET)
                    .cast(),
            )
        }
    }

    /// Is block `idx` filled and handed to user space?
    pub fn block_ready(&self, idx: usize) -> bool {
        self.status(idx).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Is block `idx` handed to user space with `TP_STATUS_LOSING` (the kernel dropped packets
    /// for want of room since the socket's counters were last read)?
    pub fn block_losing(&self, idx: usize) -> bool {
        let st = self.status(idx).load(Ordering::Acquire);
        st & libc::TP_STATUS_USER != 0 && st & libc::TP_STATUS_LOSING != 0
    }

    /// Bytes of the mapped ring.
    pub fn bytes(&self) -> usize {
        self.map_len
    }

    /// If block `idx` belongs to user space, call `f` with its bytes and give the block back to
    /// the kernel afterwards (also if `f` panics). Returns `None` if the block is not ready.
    pub fn with_block<R>(&mut self, idx: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if !self.block_ready(idx) {
            return None;
        }
        struct GiveBack<'a>(&'a AtomicU32);
        impl Drop for GiveBack<'_> {
            fn drop(&mut self) {
                self.0.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            }
        }
        let _give_back = GiveBack(self.status(idx));
        // SAFETY: the block lies inside the mapping; while its status says TP_STATUS_USER the kernel
        // does not write to it, and it stays ours until `_give_back` runs after `f` returns. `&mut
        // self` keeps any other borrow of the block out.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add(idx * self.block_size),
                self.block_size,
            )
        };
        Some(f(bytes))
    }

    /// Read and reset the kernel's counters for this socket.
    pub fn statistics(&self) -> io::Result<KernelStats> {
        let mut st = MaybeUninit::<libc::tpacket_stats_v3>::zeroed();
        let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` has room for `len` bytes; the kernel writes at most `len`.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                st.as_mut_ptr().cast(),
                &mut len,
            )
        })?;
        // SAFETY: zero-initialised POD, possibly partly overwritten by the kernel.
        let st = unsafe { st.assume_init() };
        Ok(KernelStats {
            packets: st.tp_packets,
            drops: st.tp_drops,
            freeze_q_cnt: st.tp_freeze_q_cnt,
        })
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping created in `open`; no borrow of it outlives `&mut self`.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.map_len);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Attach a classic BPF program with `SO_ATTACH_FILTER`.
pub fn attach_filter(fd: BorrowedFd<'_>, filter: &[Insn]) -> io::Result<()> {
    with_fprog(filter, |prog| {
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, prog)
    })
}

/// Join the `AF_PACKET` socket `fd` (bound, so running) to a `PACKET_FANOUT` group whose
/// members are chosen by a classic BPF program (`PACKET_FANOUT_CBPF`, set with
/// [`set_fanout_program`]), with IP fragments reassembled before the choice
/// (`PACKET_FANOUT_FLAG_DEFRAG`) and, when the kernel knows the flag, outgoing packets kept out
/// of the group (`PACKET_FANOUT_FLAG_IGNORE_OUTGOING`: a member socket's own
/// `PACKET_IGNORE_OUTGOING` does not apply to a group). With `id` `None` the kernel picks an id
/// that no other group of this network namespace uses (`PACKET_FANOUT_FLAG_UNIQUEID`), so the
/// copier never joins another process's group by accident; the other members join with the id
/// returned (and the same `ignore_outgoing`, which is returned too: all members must agree).
/// Members are numbered in the order they join.
pub fn join_fanout(fd: BorrowedFd<'_>, id: Option<(u16, bool)>) -> io::Result<(u16, bool)> {
    let base = libc::PACKET_FANOUT_CBPF | libc::PACKET_FANOUT_FLAG_DEFRAG;
    let join = |id: u16, mode: u32| {
        let arg = (u32::from(id) | (mode << 16)) as libc::c_int;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
    };
    let ignore_out = match id {
        Some((id, ignore_out)) => {
            let flag = if ignore_out {
                libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING
            } else {
                0
            };
            join(id, base | flag)?;
            ignore_out
        }
        None => {
            let unique = base | libc::PACKET_FANOUT_FLAG_UNIQUEID;
            match join(0, unique | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING) {
                Ok(()) => true,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    join(0, unique)?;
                    false
                }
                Err(e) => return Err(e),
            }
        }
    };
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` has room for `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    // The kernel answers `id | type << 16 | flags << 24`.
    Ok(((v as u32 & 0xffff) as u16, ignore_out))
}

/// Give the fanout group of `fd` (a `PACKET_FANOUT_CBPF` group) its classic BPF program
/// (`PACKET_FANOUT_DATA`): the value it returns, modulo the number of members, is the member
/// that gets the packet. Until it has one, every packet goes to member 0.
pub fn set_fanout_program(fd: BorrowedFd<'_>, program: &[Insn]) -> io::Result<()> {
    with_fprog(program, |prog| {
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_FANOUT_DATA, prog)
    })
}

fn with_fprog<R>(
    program: &[Insn],
    f: impl FnOnce(&libc::sock_fprog) -> io::Result<R>,
) -> io::Result<R> {
    let mut insns: Vec<libc::sock_filter> = program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let len = u16::try_from(insns.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
    let prog = libc::sock_fprog {
        len,
        filter: insns.as_mut_ptr(),
    };
    // The kernel copies the program during the call; `insns` outlives it.
    f(&prog)
}

/// Wait until one of `fds` is readable (or has an error) or `timeout` passes; returns which were
/// ready as a bit set (bit i for `fds[i]`). `EINTR` counts as a timeout.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<u32> {
    assert!(fds.len() <= 32);
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|f| libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfds` and `ts` are valid for the call; no signal mask is changed.
    let ret = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if ret < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    let mut ready = 0u32;
    for (i, p) in pfds.iter().enumerate() {
        if p.revents != 0 {
            ready |= 1 << i;
        }
    }
    Ok(ready)
}

/// Register `sock` with the current tokio runtime for writability only (incoming bytes do not
/// wake the runtime: another thread reads the socket, see `crate::link`).
pub fn register_writable(
    sock: std::net::TcpStream,
) -> io::Result<tokio::io::unix::AsyncFd<std::net::TcpStream>> {
    // SAFETY: the TcpStream owns its descriptor, which stays open and the same until the
    // AsyncFd, which owns the stream, is dropped.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(sock, tokio::io::Interest::WRITABLE)?
    };
    Ok(fd)
}

/// Read and clear the socket's pending error (`SO_ERROR`); `None` if there is none. An
/// `AF_PACKET` socket gets `ENETDOWN` when its interface goes down, and `poll` reports `POLLERR`
/// until the error is read.
pub fn take_socket_error(fd: BorrowedFd<'_>) -> io::Result<Option<io::Error>> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` has room for `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok((v != 0).then(|| io::Error::from_raw_os_error(v)))
}

/// A non-blocking `eventfd` used to wake the engine thread from other threads.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new counter at zero.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; the result is checked and owned right away.
        let raw = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh descriptor.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(raw) }))
    }

    /// Make the descriptor readable. Never blocks; a saturated counter is already readable.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Reset to not readable.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN when already zero is fine.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// The descriptor, for `poll`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A non-blocking one-shot `timerfd` (monotonic clock): readable once it expires, until it is
/// set again or disarmed. The engine thread polls it with its eventfd; the control clients arm it
/// for records that may wait a little (see `crate::workers::Wake`).
#[derive(Debug)]
pub struct TimerFd(OwnedFd);

impl TimerFd {
    /// A new, disarmed timer.
    pub fn new() -> io::Result<TimerFd> {
        // SAFETY: plain syscall; the result is checked and owned right away.
        let raw = cvt(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: fresh descriptor.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(raw) }))
    }

    /// Expire `after` from now (replacing any earlier setting); `Duration::ZERO` disarms it.
    /// Either way an expiry not yet read is forgotten (the descriptor is no longer readable).
    pub fn set(&self, after: Duration) {
        let ts = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `ts` is valid for the call; the old value is not asked for.
        let _ = unsafe { libc::timerfd_settime(self.0.as_raw_fd(), 0, &ts, std::ptr::null_mut()) };
    }

    /// Read an expiry, making the descriptor not readable (it stays disarmed, being one-shot);
    /// a timer set again meanwhile is left as it is.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN when nothing expired is fine.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// The descriptor, for `poll`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The index of interface `name`.
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// Raise the send buffer past `net.core.wmem_max` (needs CAP_NET_ADMIN; the caller falls back).
pub fn force_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &v)
}

/// The path MTU the kernel knows for the destination a datagram socket is connected to
/// (`IP_MTU` / `IPV6_MTU`).
pub fn connected_mtu(fd: BorrowedFd<'_>, v6: bool) -> io::Result<u32> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` has room for `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    u32::try_from(v).map_err(|_| io::Error::other("negative MTU"))
}

/// An `AF_PACKET`/`SOCK_RAW` socket that only sends: whole Ethernet frames, each after a
/// `virtio_net_hdr` (`PACKET_VNET_HDR`) that can ask the kernel to cut a TCP super-segment into
/// segments (GSO) and to finish its checksum, as a virtual NIC hands its host such packets. It
/// receives nothing (protocol 0, never bound).
#[derive(Debug)]
pub struct PacketTx(OwnedFd);

/// Bytes of a `struct virtio_net_hdr` (without `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;

impl PacketTx {
    /// Open the socket with `PACKET_VNET_HDR` on, non-blocking, with a send buffer of `sndbuf`
    /// bytes (forced past `wmem_max` when allowed). Needs CAP_NET_RAW.
    pub fn open(sndbuf: usize) -> io::Result<PacketTx> {
        // SAFETY: plain syscall; the result is checked and owned right away.
        let raw = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        })?;
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        setsockopt(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            &(1 as libc::c_int),
        )?;
        if force_send_buffer(fd.as_fd(), sndbuf).is_err() {
            let v = libc::c_int::try_from(sndbuf).unwrap_or(libc::c_int::MAX);
            setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, &v)?;
        }
        Ok(PacketTx(fd))
    }

    /// Send one frame out of interface `ifindex`: `vnet` (a `virtio_net_hdr`, host byte order
    /// little-endian as the kernel reads it without `PACKET_VNET_HDR_SZ`), then `eth` (the
    /// Ethernet header, whose EtherType is `ethertype`), then `packet` (the IP packet), with one
    /// `sendmsg(MSG_DONTWAIT)`. Returns the bytes the kernel took.
    pub fn send(
        &self,
        ifindex: u32,
        ethertype: u16,
        vnet: &[u8; VNET_HDR_LEN],
        eth: &[u8; 14],
        packet: &[u8],
    ) -> io::Result<usize> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as libc::c_ushort;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = ifindex as libc::c_int;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&eth[..6]);
        let mut iov = [
            libc::iovec {
                iov_base: vnet.as_ptr() as *mut libc::c_void,
                iov_len: vnet.len(),
            },
            libc::iovec {
                iov_base: eth.as_ptr() as *mut libc::c_void,
                iov_len: eth.len(),
            },
            libc::iovec {
                iov_base: packet.as_ptr() as *mut libc::c_void,
                iov_len: packet.len(),
            },
        ];
        // SAFETY: msghdr is plain old data; all-zero is valid (no control data, no flags).
        let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
        mh.msg_name = (&mut sll as *mut libc::sockaddr_ll).cast();
        mh.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        mh.msg_iov = iov.as_mut_ptr();
        mh.msg_iovlen = iov.len();
        // SAFETY: `mh` points at `sll` and at three iovecs over buffers borrowed for the call;
        // the kernel only reads them.
        let ret = unsafe { libc::sendmsg(self.0.as_raw_fd(), &mh, libc::MSG_DONTWAIT) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(ret as usize)
        }
    }
}

/// Most messages one [`send_batch`] call passes to the kernel.
pub const MAX_BATCH: usize = 64;

/// Send up to [`MAX_BATCH`] datagrams with one `sendmmsg(MSG_DONTWAIT)`. Returns how many were
/// sent (the first ones); an error belongs to the first message (none was sent).
pub fn send_batch(fd: BorrowedFd<'_>, msgs: &[(&[u8], &socket2::SockAddr)]) -> io::Result<usize> {
    let n = msgs.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    let mut iovs: [MaybeUninit<libc::iovec>; MAX_BATCH] =
        [const { MaybeUninit::uninit() }; MAX_BATCH];
    let mut hdrs: [MaybeUninit<libc::mmsghdr>; MAX_BATCH] =
        [const { MaybeUninit::uninit() }; MAX_BATCH];
    for (i, (buf, _)) in msgs[..n].iter().enumerate() {
        iovs[i].write(libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        });
    }
    for (i, (_, addr)) in msgs[..n].iter().enumerate() {
        // SAFETY: msghdr is plain old data; all-zero is valid (no control data, no flags).
        let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
        mh.msg_name = addr.as_ptr() as *mut libc::c_void;
        mh.msg_namelen = addr.len();
        mh.msg_iov = iovs[i].as_mut_ptr();
        mh.msg_iovlen = 1;
        hdrs[i].write(libc::mmsghdr {
            msg_hdr: mh,
            msg_len: 0,
        });
    }
    // SAFETY: the first n headers and iovecs are initialised and point at buffers and addresses
    // borrowed for the duration of the call; the kernel only reads them (and writes msg_len).
    let ret = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_status_offset_matches_libc() {
        assert_eq!(
            std::mem::offset_of!(libc::tpacket_block_desc, hdr)
                + std::mem::offset_of!(libc::tpacket_hdr_v1, block_status),
            BLOCK_STATUS_OFFSET
        );
    }

    #[test]
    fn eventfd_wakes_poll_and_drains() {
        let ev = EventFd::new().unwrap();
        assert_eq!(
            poll_readable(&[ev.fd()], Duration::from_millis(1)).unwrap(),
            0
        );
        ev.notify();
        ev.notify();
        assert_eq!(
            poll_readable(&[ev.fd()], Duration::from_secs(1)).unwrap(),
            1
        );
        ev.drain();
        assert_eq!(poll_readable(&[ev.fd()], Duration::ZERO).unwrap(), 0);
    }

    #[test]
    fn timerfd_expires_once_and_disarms() {
        let t = TimerFd::new().unwrap();
        assert_eq!(
            poll_readable(&[t.fd()], Duration::from_millis(5)).unwrap(),
            0,
            "disarmed at first"
        );
        t.set(Duration::from_millis(2));
        assert_eq!(poll_readable(&[t.fd()], Duration::from_secs(1)).unwrap(), 1);
        // An expiry not read is forgotten when the timer is set again.
        t.set(Duration::ZERO);
        assert_eq!(poll_readable(&[t.fd()], Duration::ZERO).unwrap(), 0);
        t.set(Duration::from_millis(1));
        assert_eq!(poll_readable(&[t.fd()], Duration::from_secs(1)).unwrap(), 1);
        t.clear();
        assert_eq!(
            poll_readable(&[t.fd()], Duration::ZERO).unwrap(),
            0,
            "read: no longer readable"
        );
        t.set(Duration::from_millis(1));
        t.set(Duration::ZERO);
        assert_eq!(
            poll_readable(&[t.fd()], Duration::from_millis(10)).unwrap(),
            0,
            "disarmed before it expired"
        );
    }

    #[test]
    fn unknown_interface_is_an_error() {
        assert!(interface_index("no-such-if0").is_err());
        assert!(interface_index("lo").unwrap() > 0);
    }
}

thread_local! {
    /// The most sessions this thread's engine held since memory was last given back.
    static SESSION_PEAK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Called about once a second with the sessions the calling thread's engine holds: once they
/// fell under half of their peak (of at least 1,024), give the allocator's free pages back to
/// the kernel (glibc's `malloc_trim(0)`: the engine compacts its tables, but the room freed in
/// the middle of an arena stays resident until trimmed). A no-op on other C libraries.
pub fn trim_after_peak(sessions: usize) {
    SESSION_PEAK.with(|peak| {
        let p = peak.get().max(sessions);
        if p >= 1024 && sessions * 2 < p {
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: `malloc_trim` takes no pointer and may be called at any time.
            unsafe {
                libc::malloc_trim(0);
            }
            peak.set(sessions);
        } else {
            peak.set(p);
        }
    });
}

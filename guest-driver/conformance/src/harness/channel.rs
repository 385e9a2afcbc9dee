//! A UNIX socket pair between the suite and a forked child: small messages, each optionally
//! carrying a file descriptor (`SCM_RIGHTS`), the way one process hands another a shared fence.
#![allow(unsafe_code)] // socketpair, sendmsg, recvmsg, setsockopt.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::harness::proc;

/// Which end a process uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The process that made the channel.
    Parent = 0,
    /// The forked child.
    Child = 1,
}

/// A `SOCK_SEQPACKET` socket pair; both processes hold both ends and each uses its own.
#[derive(Debug)]
pub struct Channel {
    fds: [i32; 2],
    timeout: Duration,
}

/// Room for one `cmsghdr` carrying one `int`, aligned for it.
#[repr(C, align(8))]
struct CmsgBuf([u8; 32]);

impl Channel {
    /// A new pair; a receive gives up after `timeout` (so a dead peer fails the test instead of
    /// hanging the suite).
    ///
    /// # Errors
    /// `socketpair`'s or `setsockopt`'s errno.
    pub fn new(timeout: Duration) -> Result<Channel, crate::Error> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        let r =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
        if r != 0 {
            return Err(format!("socketpair: {}", io::Error::last_os_error()).into());
        }
        let channel = Channel { fds, timeout };
        let tv = libc::timeval {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros()),
        };
        for fd in fds {
            // SAFETY: `tv` is a valid `timeval` of the size given.
            let r = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    core::ptr::from_ref(&tv).cast(),
                    core::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            if r != 0 {
                return Err(format!("setsockopt: {}", io::Error::last_os_error()).into());
            }
        }
        Ok(channel)
    }

    /// Sends `word`, and `fd` if given, from `side` to the other side.
    ///
    /// # Errors
    /// `sendmsg`'s errno.
    pub fn send(&self, side: Side, word: u64, fd: Option<BorrowedFd<'_>>) -> Result<(), crate::Error> {
        let mut data = word.to_ne_bytes();
        let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
        let mut cmsg = CmsgBuf([0; 32]);
        // SAFETY: an all-zero `msghdr` is valid (null pointers, zero lengths).
        let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(fd) = fd {
            msg.msg_control = cmsg.0.as_mut_ptr().cast();
            // SAFETY: `CMSG_SPACE` is arithmetic.
            msg.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as usize;
            // SAFETY: `msg` has a control buffer of `CMSG_SPACE(4)` ≤ 32 bytes, aligned for a
            // `cmsghdr`: the first header and its 4 data bytes lie inside it.
            unsafe {
                let h = libc::CMSG_FIRSTHDR(&msg);
                (*h).cmsg_level = libc::SOL_SOCKET;
                (*h).cmsg_type = libc::SCM_RIGHTS;
                (*h).cmsg_len = libc::CMSG_LEN(4) as usize;
                core::ptr::write_unaligned(libc::CMSG_DATA(h).cast::<i32>(), fd.as_raw_fd());
            }
        }
        // SAFETY: `msg` points at live buffers (`data`, `cmsg`) for the duration of the call.
        let r = unsafe { libc::sendmsg(self.fds[side as usize], &msg, 0) };
        if r != 8 {
            return Err(format!("sendmsg: {}", io::Error::last_os_error()).into());
        }
        Ok(())
    }

    /// Receives the next message sent to `side`: its word and the descriptor it carried.
    ///
    /// # Errors
    /// `recvmsg`'s errno (`EAGAIN` after the timeout), or a short message; a child of this thread
    /// that failed before the word came ([`proc::readable_within`]).
    pub fn recv(&self, side: Side) -> Result<(u64, Option<OwnedFd>), crate::Error> {
        // Waits here, where a failed child ends the wait; `SO_RCVTIMEO` bounds the read after.
        if !proc::readable_within(self.fds[side as usize], self.timeout)? {
            return Err(format!(
                "no message within {} s: the other process ended or stalled before it sent",
                self.timeout.as_secs_f64()
            )
            .into());
        }
        let mut data = [0u8; 8];
        let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
        let mut cmsg = CmsgBuf([0; 32]);
        // SAFETY: an all-zero `msghdr` is valid.
        let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.0.as_mut_ptr().cast();
        msg.msg_controllen = cmsg.0.len();
        let r = loop {
            // SAFETY: `msg` points at live buffers for the duration of the call.
            let r = unsafe { libc::recvmsg(self.fds[side as usize], &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if r >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break r;
            }
        };
        if r != 8 {
            return Err(format!("recvmsg: {} bytes: {}", r, io::Error::last_os_error()).into());
        }
        let mut fd = None;
        // SAFETY: the kernel filled `msg_controllen` bytes of the control buffer; the macros walk
        // only headers inside it.
        unsafe {
            let h = libc::CMSG_FIRSTHDR(&msg);
            if !h.is_null() && (*h).cmsg_level == libc::SOL_SOCKET && (*h).cmsg_type == libc::SCM_RIGHTS {
                let raw = core::ptr::read_unaligned(libc::CMSG_DATA(h).cast::<i32>());
                // The kernel installed `raw` in this process for this message: it is ours.
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
        }
        Ok((u64::from_ne_bytes(data), fd))
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: the descriptors are owned by this value.
        unsafe {
            libc::close(self.fds[0]);
            libc::close(self.fds[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_word_sent_by_a_child_is_received() {
        let ch = Channel::new(Duration::from_secs(30)).unwrap();
        let child = proc::spawn("sends 7", || ch.send(Side::Child, 7, None)).unwrap();
        assert_eq!(ch.recv(Side::Parent).unwrap().0, 7);
        child.join().unwrap();
    }

    #[test]
    fn a_child_that_fails_before_it_sends_ends_the_receive_at_once() {
        let ch = Channel::new(Duration::from_secs(30)).unwrap();
        let child = proc::spawn("fails before it sends", || Err("gone".into())).unwrap();
        let start = Instant::now();
        let err = ch.recv(Side::Parent).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(10), "waited {:?}", start.elapsed());
        assert!(err.to_string().contains("process fails before it sends failed"), "{err}");
        assert!(child.join().is_err());
    }

    #[test]
    fn a_receive_nobody_answers_ends_at_the_timeout() {
        let ch = Channel::new(Duration::from_millis(300)).unwrap();
        let start = Instant::now();
        let err = ch.recv(Side::Parent).unwrap_err();
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5), "waited {waited:?}");
        assert!(err.to_string().contains("no message within"), "{err}");
    }
}

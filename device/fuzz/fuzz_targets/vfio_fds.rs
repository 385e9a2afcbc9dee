//! Fuzz target: a vfio-user stream whose messages carry file descriptors of every kind a
//! hostile client could pass (SCM_RIGHTS), served by a real device.
//!
//! After a valid VERSION message the input is read as chunks:
//!
//! ```text
//! kinds:u8  length:u8  bytes (length * 4)
//! ```
//!
//! Each chunk is one `sendmsg` carrying one fd per bit of `kinds` ([`fd_of_kind`]): an eventfd,
//! both ends of a pipe (the write end full), a sealed and an unsealed memfd, a read-only file,
//! a socket and a directory. The server must neither panic nor hang nor block on any of them
//! (DMA_MAP checks the fd is a sealed regular file; SET_IRQS takes eventfds only), and every
//! fd it was given is closed when the connection ends.
#![no_main]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use belfry_device::config::DeviceConfig;
use belfry_device::device::Device;
use belfry_device::gpu::cmp::CommandProcessor;
use belfry_device::trace::Tracer;
use belfry_device::vfio_user::serve_connection;
use libfuzzer_sys::fuzz_target;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

mod common;
use common::{memfd, version_message};

/// A pipe's (read, write) ends, the write end filled until it would block.
fn full_pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`; result checked.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) }, 0);
    // SAFETY: both are fresh descriptors owned by nothing else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut writer = File::from(w.try_clone().unwrap());
    while writer.write(&[0u8; 4096]).is_ok() {}
    (r, w)
}

/// The fd of kind `bit` (0..8).
fn fd_of_kind(bit: u32) -> OwnedFd {
    match bit {
        0 => {
            // SAFETY: eventfd with valid flags; result checked.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            assert!(fd >= 0);
            // SAFETY: fresh descriptor.
            unsafe { OwnedFd::from_raw_fd(fd) }
        }
        1 => full_pipe().0,
        2 => full_pipe().1,
        3 => memfd(1 << 20, true).into(),
        4 => memfd(1 << 20, false).into(),
        5 => File::open("/proc/self/status").unwrap().into(),
        6 => UnixStream::pair().unwrap().0.into(),
        _ => File::open("/").unwrap().into(),
    }
}

fuzz_target!(|data: &[u8]| {
    let config = DeviceConfig::from_flags(["--vram-size", "1M", "--doorbells", "4"]).unwrap();
    let device = Arc::new(Device::new(config, Arc::new(Tracer::new("fuzz"))).unwrap());
    let cmp = CommandProcessor::start(device.gpu.clone()).unwrap();
    let (mut client, server) = UnixStream::pair().unwrap();
    let mut chunks = vec![(0u8, version_message())];
    let mut rest = data;
    while let [kinds, len, tail @ ..] = rest {
        let n = (usize::from(*len) * 4).min(tail.len());
        chunks.push((*kinds, tail[..n].to_vec()));
        rest = &tail[n..];
    }
    let writer = std::thread::spawn(move || {
        for (kinds, bytes) in chunks {
            let fds: Vec<OwnedFd> = (0..8).filter(|b| kinds & (1 << b) != 0).map(fd_of_kind).collect();
            let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            if client.send_with_fds(&[&bytes[..]], &raw).is_err() {
                break;
            }
        }
        let _ = client.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = client.read_to_end(&mut sink);
    });
    serve_connection(&device, server);
    writer.join().unwrap();
    cmp.stop();
});

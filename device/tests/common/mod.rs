//! Shared harness of the device's integration tests: start the real `belfry-device` binary on a
//! socket in a private temp dir, guest RAM as a memfd, eventfds for interrupts, the JSON trace,
//! and a raw vfio-user client of our own that can send anything, malformed messages included.
#![allow(dead_code)]

pub mod gpu;
pub mod in_process;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// A running device process, killed on drop.
pub struct DeviceProcess {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub trace: PathBuf,
    /// Where its stderr goes, if not to the test's ([`Self::start_logged`]).
    pub log: Option<PathBuf>,
}

impl DeviceProcess {
    /// Starts the device with extra flags and waits for its socket; its messages go to the
    /// test's stderr.
    pub fn start(extra: &[&str]) -> Self {
        Self::spawn(extra, false)
    }

    /// Like [`Self::start`], with its messages in a file ([`Self::log_text`]).
    pub fn start_logged(extra: &[&str]) -> Self {
        Self::spawn(extra, true)
    }

    fn spawn(extra: &[&str], logged: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("belfry.sock");
        let trace = dir.path().join("trace.jsonl");
        let log = logged.then(|| dir.path().join("device.log"));
        let stderr = match &log {
            Some(path) => Stdio::from(File::create(path).unwrap()),
            None => Stdio::inherit(),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_belfry-device"))
            .arg("--socket-path")
            .arg(&socket)
            .arg("--trace")
            .arg(&trace)
            .args(extra)
            .stdin(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start belfry-device");
        let mut dev = DeviceProcess { child, dir, socket, trace, log };
        dev.wait_for_socket();
        dev
    }

    /// What the device wrote to stderr so far (started with [`Self::start_logged`]).
    pub fn log_text(&self) -> String {
        let path = self.log.as_ref().expect("the device was started with start_logged");
        std::fs::read_to_string(path).unwrap()
    }

    fn wait_for_socket(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.socket.exists() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("belfry-device exited early: {status}");
            }
            assert!(Instant::now() < deadline, "socket never appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Trace records so far.
    pub fn trace_records(&self) -> Vec<serde_json::Value> {
        let mut text = String::new();
        if let Ok(mut file) = belfry_trace_schema::file::open(&self.trace) {
            // A read error past what was read leaves the records before it.
            let _ = std::io::Read::read_to_string(&mut file, &mut text);
        }
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// Waits until a trace record satisfies `pred`; returns it.
    pub fn wait_trace(&self, what: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(r) = self.trace_records().into_iter().find(|r| pred(r)) {
                return r;
            }
            assert!(Instant::now() < deadline, "no trace record for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for DeviceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A memfd standing in for guest RAM, sealed against shrinking and growing as QEMU's
/// `memory-backend-memfd` seals it by default.
pub fn memfd(size: u64) -> File {
    let file = unsealed_memfd(size);
    // SAFETY: fcntl on a descriptor we own; F_ADD_SEALS only adds seals.
    let sealed = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) };
    assert_eq!(sealed, 0, "F_ADD_SEALS");
    file
}

/// A memfd that can still be shrunk (`F_SEAL_SHRINK` not applied).
pub fn unsealed_memfd(size: u64) -> File {
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"guest-ram".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: fd is a fresh descriptor owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size).unwrap();
    file
}

/// A pipe: (read end, write end).
pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [-1; 2];
    // SAFETY: pipe writes two descriptors into the array on success (checked).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: both are fresh descriptors owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Reads a little-endian u32 from the memfd at `offset`.
pub fn read_u32(ram: &File, offset: u64) -> u32 {
    let mut b = [0u8; 4];
    ram.read_exact_at(&mut b, offset).unwrap();
    u32::from_le_bytes(b)
}

/// A non-blocking eventfd and a bounded wait for it.
pub fn eventfd() -> EventFd {
    EventFd::new(libc::EFD_NONBLOCK).unwrap()
}

/// Waits up to `timeout` for the eventfd to be signalled; returns its count (0 on timeout).
pub fn wait_eventfd(efd: &EventFd, timeout: Duration) -> u64 {
    let mut pfd = libc::pollfd { fd: efd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if n == 1 {
        efd.read().unwrap_or(0)
    } else {
        0
    }
}

/// Reply to a raw request: the header fields and the payload.
#[derive(Debug)]
pub struct RawReply {
    pub id: u16,
    pub command: u16,
    pub flags: u32,
    pub error: u32,
    pub payload: Vec<u8>,
}

impl RawReply {
    pub fn is_error(&self) -> bool {
        self.flags & (1 << 5) != 0
    }
}

/// A vfio-user client that builds every byte itself.
pub struct RawClient {
    pub stream: UnixStream,
    next_id: u16,
}

/// The header flag of a message that wants no reply (a posted write).
pub const NO_REPLY: u32 = 1 << 4;

pub fn header(id: u16, command: u16, size: u32, flags: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(16);
    h.extend_from_slice(&id.to_le_bytes());
    h.extend_from_slice(&command.to_le_bytes());
    h.extend_from_slice(&size.to_le_bytes());
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h
}

impl RawClient {
    pub fn connect(path: &Path) -> Self {
        Self::over(UnixStream::connect(path).unwrap())
    }

    /// A client on a connected stream (e.g. one end of a socket pair served in-process).
    pub fn over(stream: UnixStream) -> Self {
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        RawClient { stream, next_id: 1 }
    }

    /// Sends raw bytes (with fds on the first byte).
    pub fn send_raw(&mut self, bytes: &[u8], fds: &[RawFd]) {
        if fds.is_empty() {
            self.stream.write_all(bytes).unwrap();
        } else {
            let n = self.stream.send_with_fds(&[bytes], fds).unwrap();
            self.stream.write_all(&bytes[n..]).unwrap();
        }
    }

    /// Reads one reply.
    pub fn recv(&mut self) -> RawReply {
        let mut h = [0u8; 16];
        self.stream.read_exact(&mut h).unwrap();
        let size = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
        let mut payload = vec![0u8; size - 16];
        self.stream.read_exact(&mut payload).unwrap();
        RawReply {
            id: u16::from_le_bytes(h[0..2].try_into().unwrap()),
            command: u16::from_le_bytes(h[2..4].try_into().unwrap()),
            flags: u32::from_le_bytes(h[8..12].try_into().unwrap()),
            error: u32::from_le_bytes(h[12..16].try_into().unwrap()),
            payload,
        }
    }

    /// Sends a command with `payload`, `fds` and header `flags`; returns its id.
    fn send(&mut self, command: u16, payload: &[u8], fds: &[RawFd], flags: u32) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut msg = header(id, command, 16 + payload.len() as u32, flags);
        msg.extend_from_slice(payload);
        self.send_raw(&msg, fds);
        id
    }

    /// Sends a command with `payload` and `fds`, returns the reply (checking the id echoes).
    pub fn request(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> RawReply {
        let id = self.send(command, payload, fds, 0);
        let reply = self.recv();
        assert_eq!(reply.id, id, "reply id");
        assert_eq!(reply.command, command, "reply command");
        reply
    }

    /// VERSION 0.1 with empty capabilities.
    pub fn negotiate(&mut self) -> RawReply {
        let mut p = vec![0, 0, 1, 0];
        p.extend_from_slice(b"{\"capabilities\":{\"max_msg_fds\":8}}\0");
        let r = self.request(1, &p, &[]);
        assert!(!r.is_error(), "version negotiation failed: {r:?}");
        r
    }

    pub fn region_access(offset: u64, region: u32, count: u32) -> Vec<u8> {
        let mut p = offset.to_le_bytes().to_vec();
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        p
    }

    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> Result<Vec<u8>, u32> {
        let r = self.request(9, &Self::region_access(offset, region, count), &[]);
        if r.is_error() {
            return Err(r.error);
        }
        Ok(r.payload[16..].to_vec())
    }

    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), u32> {
        let mut p = Self::region_access(offset, region, data.len() as u32);
        p.extend_from_slice(data);
        let r = self.request(10, &p, &[]);
        if r.is_error() {
            Err(r.error)
        } else {
            Ok(())
        }
    }

    /// A posted 32-bit region write (`VFIO_USER_FLAGS_NO_REPLY`): nothing is read back, so
    /// the write may be the device's last message (a write that ends the device).
    pub fn post_write32(&mut self, region: u32, offset: u32, value: u32) {
        let mut p = Self::region_access(u64::from(offset), region, 4);
        p.extend_from_slice(&value.to_le_bytes());
        self.send(10, &p, &[], NO_REPLY);
    }

    pub fn read32(&mut self, region: u32, offset: u32) -> u32 {
        u32::from_le_bytes(self.region_read(region, u64::from(offset), 4).unwrap().try_into().unwrap())
    }

    pub fn write32(&mut self, region: u32, offset: u32, value: u32) {
        self.region_write(region, u64::from(offset), &value.to_le_bytes()).unwrap();
    }

    pub fn dma_map(&mut self, address: u64, size: u64, fds: &[RawFd]) -> RawReply {
        self.dma_map_with(address, size, 3, fds)
    }

    /// DMA_MAP with `flags` (1 read, 2 write).
    pub fn dma_map_with(&mut self, address: u64, size: u64, flags: u32, fds: &[RawFd]) -> RawReply {
        self.dma_map_at(address, size, 0, flags, fds)
    }

    /// DMA_UNMAP of `address..address+size` (no flags): what QEMU sends when the guest's
    /// IOMMU drops the range.
    pub fn dma_unmap(&mut self, address: u64, size: u64) -> RawReply {
        let mut p = 24u32.to_le_bytes().to_vec();
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&address.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.request(3, &p, &[])
    }

    /// DMA_MAP of `size` bytes at `offset` into the fd with `flags` (1 read, 2 write): one
    /// IOTLB entry as QEMU sends it behind a guest IOMMU, a page of guest RAM at an IOVA.
    pub fn dma_map_at(&mut self, address: u64, size: u64, offset: u64, flags: u32, fds: &[RawFd]) -> RawReply {
        let mut p = 32u32.to_le_bytes().to_vec();
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&address.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.request(2, &p, fds)
    }

    pub fn set_irqs(&mut self, index: u32, flags: u32, start: u32, count: u32, fds: &[RawFd]) -> RawReply {
        let mut p = 20u32.to_le_bytes().to_vec();
        for v in [flags, index, start, count] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        self.request(8, &p, fds)
    }
}

/// Owned dup of a raw fd (for moving fds into messages).
pub fn dup(fd: RawFd) -> OwnedFd {
    // SAFETY: dup of a valid fd returns a new descriptor that we own (checked).
    let new = unsafe { libc::dup(fd) };
    assert!(new >= 0);
    // SAFETY: `new` is fresh and owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(new) }
}

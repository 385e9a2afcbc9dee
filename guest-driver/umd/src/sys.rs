//! The only module with `unsafe`: the system calls the library makes on `/dev/belfry<N>` and
//! the accesses it makes to the pages the module maps.
//!
//! Implementation note: everything else in the crate is safe code over three primitives:
//! - [`open`]: the character device as an `OwnedFd`;
//! - [`ioctl`]: one generic call over the uapi argument structs, typed by [`Request`] so a
//!   request number can only be paired with the struct whose size it encodes;
//! - [`Mapping`]: an `mmap` of an offset the module returned, unmapped on drop, with
//!   bounds-checked volatile byte copies, atomic 32/64-bit loads and stores (ring control,
//!   status, LastQueuedValue, progress CurrentValue) and the doorbell store;
//! - [`packet_bytes`]: an abi packet struct's bytes, which are its wire form, so the command
//!   buffer builder keeps no field list of its own.
//!
//! Memory the GPU or the module may change concurrently is never exposed as a Rust reference:
//! only copies in and out.

#![allow(unsafe_code)]

use core::marker::PhantomData;
use core::mem::size_of;
use core::ptr::NonNull;
use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use belfry_abi::{packet, uapi, uapi_sync};

use crate::deadline::{poll_timeout_ms, retry_interrupted, Deadline};

pub(crate) mod clock;
pub(crate) use clock::monotonic_ns;

/// Opens a Belfry character device read/write, close-on-exec.
pub(crate) fn open(path: &Path) -> io::Result<OwnedFd> {
    let cpath = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `cpath` is a NUL-terminated string that outlives the call; `open` reads nothing else.
    let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by a successful `open` and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: `sysconf` has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
}

mod sealed {
    pub trait Sealed {}
}

/// A command packet struct of the abi: `#[repr(C)]`, only `u32` and `u64` fields, each
/// naturally aligned in declaration order with no padding (the abi asserts every size), so all
/// its bytes are initialized and, the wire being little-endian like this target, they are the
/// packet as the device reads it. Sealed: implemented here only, for exactly the abi's packet
/// list (`belfry_abi::for_each_packet!`).
pub(crate) trait WirePacket: sealed::Sealed + Copy {}

macro_rules! wire_packets {
    ($($name:ident),*) => {$(
        impl sealed::Sealed for packet::$name {}
        impl WirePacket for packet::$name {}
    )*};
}
belfry_abi::for_each_packet!(wire_packets);

#[cfg(not(target_endian = "little"))]
compile_error!("packet_bytes views packets in place: the wire is little-endian, and so must the target be");

/// The bytes of `packet`: its wire form (see [`WirePacket`]).
pub(crate) fn packet_bytes<T: WirePacket>(packet: &T) -> &[u8] {
    // SAFETY: `packet` is a live, aligned `T` borrowed for the returned lifetime; `T:
    // WirePacket` has no padding and only integer fields, so its `size_of::<T>()` bytes are
    // all initialized and readable as `u8`s.
    unsafe { core::slice::from_raw_parts((packet as *const T).cast::<u8>(), size_of::<T>()) }
}

/// An ioctl argument struct of the uapi: `#[repr(C)]`, only integer fields (every bit pattern
/// valid), so the module may read and write all of it. Sealed: implemented here only.
pub(crate) trait UapiArg: sealed::Sealed + Copy {}

macro_rules! uapi_args {
    ($($arg_module:ident::$arg:ident { $($name:ident = $module:ident::$number:ident),+ $(,)? })*) => {$(
        impl sealed::Sealed for belfry_abi::$arg_module::$arg {}
        impl UapiArg for belfry_abi::$arg_module::$arg {}
    )*};
}
belfry_abi::for_each_ioctl!(uapi_args);

/// An ioctl request number paired with its argument type and its name (for errors).
pub(crate) struct Request<T> {
    code: u32,
    name: &'static str,
    _arg: PhantomData<fn(&mut T)>,
}

impl<T> Clone for Request<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Request<T> {}

impl<T> core::fmt::Debug for Request<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name)
    }
}

impl<T: UapiArg> Request<T> {
    /// Pairs `code` with `T`; fails to compile (in a `const`) if the size encoded in `code`
    /// is not `size_of::<T>()`.
    const fn new(code: u32, name: &'static str) -> Self {
        assert!(((code >> 16) & 0x3fff) as usize == size_of::<T>());
        Self { code, name, _arg: PhantomData }
    }

    /// The ioctl's name, as in the uapi (`QUERY_CAPS`, ...).
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
}

/// The typed requests, one per row of the abi's one ioctl list (`belfry_abi::for_each_ioctl!`),
/// named as there (`QUERY_CAPS`, ...). The library calls most of them; the few it has no use
/// for (`WAIT_FENCE`, `WAIT_PROGRESS`, `TEARDOWN_DEBUG`) come with the list.
macro_rules! requests {
    ($($arg_module:ident::$arg:ident { $($name:ident = $module:ident::$number:ident),+ $(,)? })*) => {$($(
        #[doc = concat!("`", stringify!($name), "`.")]
        #[allow(dead_code)]
        pub(crate) const $name: Request<belfry_abi::$arg_module::$arg> =
            Request::new(belfry_abi::$module::$number, stringify!($name));
    )+)*};
}
belfry_abi::for_each_ioctl!(requests);

/// `EXPORT_FENCE` of fence `handle`: the new file descriptor, owned.
///
/// # Errors
/// The errno the module returned.
pub(crate) fn export_fence(fd: BorrowedFd<'_>, handle: u32) -> io::Result<OwnedFd> {
    let mut arg = uapi::ExportFence { handle, fd: -1 };
    ioctl(fd, EXPORT_FENCE, &mut arg)?;
    if arg.fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: a successful EXPORT_FENCE installed `arg.fd` in this process for the caller, and
    // nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(arg.fd) })
}

/// `EXPORT_SYNC_FILE` of fence `handle` at `value`: the new `sync_file` descriptor, owned.
///
/// # Errors
/// The errno the module returned.
pub(crate) fn export_sync_file(fd: BorrowedFd<'_>, handle: u32, value: u64) -> io::Result<OwnedFd> {
    let mut arg = uapi_sync::ExportSyncFile { handle, value, fd: -1, ..Default::default() };
    ioctl(fd, EXPORT_SYNC_FILE, &mut arg)?;
    if arg.fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: a successful EXPORT_SYNC_FILE installed `arg.fd` in this process for the caller,
    // and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(arg.fd) })
}

/// A new eventfd (counter 0, non-blocking, close-on-exec).
///
/// # Errors
/// `eventfd`'s errno.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: `eventfd` has no memory-safety preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by a successful `eventfd` and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `poll(2)` for `POLLIN` on `fd` until `deadline` (a passed deadline: do not block); whether
/// it is ready. After `EINTR` it polls again for the time left (`deadline::retry_interrupted`).
///
/// # Errors
/// `poll`'s errno other than `EINTR`.
pub(crate) fn poll_in(fd: BorrowedFd<'_>, deadline: Deadline) -> io::Result<bool> {
    retry_interrupted(deadline, monotonic_ns, |left| {
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: `pfd` is one valid, exclusive `pollfd` for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, poll_timeout_ms(left)) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc > 0 && pfd.revents & libc::POLLIN != 0)
    })
}

/// Reads (and so resets) an eventfd's counter; 0 if it was not signaled.
///
/// # Errors
/// `read`'s errno other than `EAGAIN`.
pub(crate) fn eventfd_take(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into a valid, exclusive `u64`.
    let rc = unsafe { libc::read(fd.as_raw_fd(), core::ptr::from_mut(&mut count).cast(), 8) };
    if rc == 8 {
        return Ok(count);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EAGAIN) {
        return Ok(0);
    }
    Err(err)
}

/// Issues `request` (one that does not block) on `fd` with `arg`, retrying on `EINTR`.
///
/// # Errors
/// The errno the module returned.
pub(crate) fn ioctl<T: UapiArg>(fd: BorrowedFd<'_>, request: Request<T>, arg: &mut T) -> io::Result<()> {
    retry_interrupted(Deadline::FOREVER, monotonic_ns, |_| ioctl_once(fd, request, arg))
}

/// Issues `request` on `fd` with `arg` once: `EINTR` is returned, for a caller that must change
/// the argument before it calls again (a wait's timeout, `deadline.rs`).
///
/// # Errors
/// The errno the module returned.
pub(crate) fn ioctl_once<T: UapiArg>(fd: BorrowedFd<'_>, request: Request<T>, arg: &mut T) -> io::Result<()> {
    // SAFETY: `Request<T>` pairs the request number with `T`, whose size it encodes
    // (checked in `Request::new`), so the module reads and writes exactly `size_of::<T>()`
    // bytes at `arg`, which is a valid, exclusive, live `T`; `T: UapiArg` has only integer
    // fields, so any bytes the module writes leave it valid. `READ_TIMELINE` also writes up
    // to `capacity` entries at `entries`; its one caller (`timeline.rs`) points it at a
    // live buffer of that many `TimelineEntry`s it does not touch during the call.
    // `WAIT_FENCES` only reads `count` entries at `entries`; its one caller
    // (`DeviceFile::wait_fences`) points it at a live slice of that many `WaitFenceEntry`s.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request.code as _, core::ptr::from_mut(arg)) };
    if rc >= 0 {
        return Ok(());
    }
    Err(io::Error::last_os_error())
}

/// Access a mapping allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// `PROT_READ`.
    ReadOnly,
    /// `PROT_READ | PROT_WRITE`.
    ReadWrite,
}

/// A shared mapping of `len` bytes at an mmap offset of the device file; unmapped on drop.
///
/// # Invariants
/// `ptr..ptr + len` is a live `MAP_SHARED` mapping owned by this value, readable, and writable
/// iff `access` is `ReadWrite`; `ptr` is page aligned.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    access: Access,
}

// SAFETY: The mapping is plain shared memory owned by this value; every access goes through
// volatile or atomic operations on raw pointers, never through references, so moving the owner
// to another thread is sound.
unsafe impl Send for Mapping {}
// SAFETY: Shared (`&self`) methods only read (volatile or atomic) or store atomically; byte
// writes take `&mut self`, so no two threads race on non-atomic stores through one `Mapping`.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes (rounded up to pages) at `offset` of `fd`.
    ///
    /// # Errors
    /// `EINVAL` for a zero or overflowing length or offset; otherwise `mmap`'s errno.
    pub(crate) fn new(fd: BorrowedFd<'_>, offset: u64, len: usize, access: Access) -> io::Result<Self> {
        let page = page_size();
        let len =
            len.checked_next_multiple_of(page).filter(|l| *l > 0).ok_or(io::Error::from_raw_os_error(libc::EINVAL))?;
        let off = libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let prot = match access {
            Access::ReadOnly => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        // SAFETY: A fresh mapping at an address of the kernel's choosing (no `MAP_FIXED`), so
        // no existing memory is affected; the arguments are checked by the kernel.
        let ptr = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), off) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(io::Error::from_raw_os_error(libc::EFAULT))?;
        Ok(Self { ptr, len, access })
    }

    /// Address of the first byte (for callers that check the protection, e.g. by a store in
    /// a forked child).
    pub(crate) fn address(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Mapped length in bytes (a multiple of the page size).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Panics unless `[offset, offset + size)` lies inside the mapping and `offset` is a
    /// multiple of `align`: the bounds check every accessor relies on.
    fn check(&self, offset: usize, size: usize, align: usize) {
        let end = offset.checked_add(size);
        assert!(
            end.is_some_and(|e| e <= self.len) && offset.is_multiple_of(align),
            "mapping access {offset:#x}+{size} (align {align}) outside {} bytes",
            self.len
        );
    }

    fn check_writable(&self) {
        assert_eq!(self.access, Access::ReadWrite, "store to a read-only mapping");
    }

    /// Copies `buf.len()` bytes at `offset` out of the mapping (volatile loads).
    ///
    /// # Panics
    /// If the range is outside the mapping.
    pub(crate) fn read_bytes(&self, offset: usize, buf: &mut [u8]) {
        self.check(offset, buf.len(), 1);
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: `offset + i < len` by the check above, so the byte is inside the live
            // mapping (type invariant); a volatile load of a `u8` has no alignment needs.
            *b = unsafe { self.ptr.as_ptr().add(offset + i).read_volatile() };
        }
    }

    /// Copies `data` into the mapping at `offset` (volatile stores).
    ///
    /// # Panics
    /// If the range is outside the mapping or the mapping is read-only.
    pub(crate) fn write_bytes(&mut self, offset: usize, data: &[u8]) {
        self.check(offset, data.len(), 1);
        self.check_writable();
        for (i, b) in data.iter().enumerate() {
            // SAFETY: In bounds by the check above, writable by `check_writable` (type
            // invariant), and `&mut self` excludes other non-atomic stores through this mapping.
            unsafe { self.ptr.as_ptr().add(offset + i).write_volatile(*b) };
        }
    }

    /// The `AtomicU32` at `offset`.
    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4, 4);
        // SAFETY: In bounds and 4-aligned by the check (the base is page aligned); the memory
        // lives as long as `self`, and this crate accesses it only atomically.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(offset).cast()) }
    }

    /// The `AtomicU64` at `offset`.
    fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8, 8);
        // SAFETY: As in `atomic_u32`, with 8-byte bounds and alignment.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast()) }
    }

    /// Atomic 32-bit load (status word, ring-control read index).
    pub(crate) fn load_u32(&self, offset: usize, order: Ordering) -> u32 {
        self.atomic_u32(offset).load(order)
    }

    /// Atomic 32-bit store (ring-control write index).
    pub(crate) fn store_u32(&self, offset: usize, value: u32, order: Ordering) {
        self.check_writable();
        self.atomic_u32(offset).store(value, order);
    }

    /// Atomic 64-bit load (progress CurrentValue).
    pub(crate) fn load_u64(&self, offset: usize, order: Ordering) -> u64 {
        self.atomic_u64(offset).load(order)
    }

    /// Atomic 64-bit store (LastQueuedValue).
    pub(crate) fn store_u64(&self, offset: usize, value: u64, order: Ordering) {
        self.check_writable();
        self.atomic_u64(offset).store(value, order);
    }

    /// Rings a doorbell: a full fence (everything stored before — ring entry, write index,
    /// LastQueuedValue — is visible first), then one volatile 64-bit store of `value` at
    /// `offset` (device memory or the dummy page).
    pub(crate) fn ring_doorbell(&self, offset: usize, value: u64) {
        self.check(offset, 8, 8);
        self.check_writable();
        fence(Ordering::SeqCst);
        // SAFETY: In bounds, 8-aligned and writable by the checks above (type invariant).
        unsafe { self.ptr.as_ptr().add(offset).cast::<u64>().write_volatile(value.to_le()) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + len` is a mapping this value owns (type invariant) and no
        // reference into it outlives `self`.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if rc != 0 {
            log::warn!("munmap of {} bytes failed: {}", self.len, io::Error::last_os_error());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn requests_carry_their_uapi_names() {
        assert_eq!(QUERY_CAPS.name(), "QUERY_CAPS");
        assert_eq!(NOTIFY_WORK.code, uapi::IOCTL_NOTIFY_WORK);
    }

    #[test]
    fn ioctl_on_a_non_device_reports_the_errno() {
        let file = tempfile::tempfile().unwrap();
        let mut caps = uapi::QueryCaps::default();
        let err = ioctl(file.as_fd(), QUERY_CAPS, &mut caps).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY));
    }

    #[test]
    fn mappings_of_a_file_copy_bounded_bytes_and_atomics() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[0u8; 8192]).unwrap();
        let mut map = Mapping::new(file.as_fd(), 0, 100, Access::ReadWrite).unwrap();
        assert_eq!(map.len(), page_size());
        map.write_bytes(3, b"belfry");
        let mut buf = [0u8; 6];
        map.read_bytes(3, &mut buf);
        assert_eq!(&buf, b"belfry");
        map.store_u64(8, 0x1122_3344_5566_7788, Ordering::Release);
        assert_eq!(map.load_u32(8, Ordering::Acquire), 0x5566_7788);
        map.ring_doorbell(16, 7);
        assert_eq!(map.load_u64(16, Ordering::Acquire), 7);
        let out_of_bounds = std::panic::catch_unwind(|| map.load_u64(map.len() - 4, Ordering::Relaxed));
        assert!(out_of_bounds.is_err());
        let ro = Mapping::new(file.as_fd(), 0, 8, Access::ReadOnly).unwrap();
        assert_eq!(ro.load_u64(8, Ordering::Acquire), 0x1122_3344_5566_7788);
        assert!(std::panic::catch_unwind(|| ro.store_u32(0, 1, Ordering::Relaxed)).is_err());
    }
}

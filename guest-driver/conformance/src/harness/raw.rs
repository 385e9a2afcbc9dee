//! Raw ioctls on a device file of the suite's own, for what the library never does: using
//! another file's handles and offsets, submitting through a forbidden path, freeing ring
//! allocations early.
#![allow(unsafe_code)] // ioctl and mmap on a file this module owns.

use std::ffi::CString;
use std::io;
use std::path::Path;

use belfry_abi::uapi;
use belfry_abi::uapi_debug;
use belfry_abi::uapi_sync::{self, WaitFenceEntry, WaitFences};

use crate::harness::mapping::RawMapping;

/// The module's live-object counts of a `DEBUG_STATS` answer as one array: contexts, queues,
/// allocations, doorbells, mapped GPU pages (numbers of one type, for comparing and indexing).
#[must_use]
pub fn live_objects(s: &uapi_debug::DebugStats) -> [u64; 5] {
    [s.contexts.into(), s.queues.into(), s.allocations.into(), s.doorbells.into(), s.gpu_pages]
}

/// An open device file.
#[derive(Debug)]
pub struct RawDev {
    fd: i32,
}

impl Drop for RawDev {
    fn drop(&mut self) {
        // SAFETY: `fd` is owned by this value and closed once.
        unsafe { libc::close(self.fd) };
    }
}

impl std::os::fd::AsFd for RawDev {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: `fd` is open for as long as this value lives.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) }
    }
}

impl RawDev {
    /// Opens `path` read/write.
    ///
    /// # Errors
    /// `open`'s errno.
    pub fn open(path: &Path) -> io::Result<RawDev> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `c` is a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(RawDev { fd })
    }

    /// Issues `code` with `arg`; the errno on failure.
    fn ioctl<T>(&self, code: u32, arg: &mut T) -> Result<(), i32> {
        // SAFETY: `self.fd` is open for as long as `self` lives, which outlives the borrow.
        ioctl_on(unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) }, code, arg)
    }

    /// Maps `len` bytes at `offset` shared and writable ([`RawMapping`]).
    ///
    /// # Errors
    /// `mmap`'s errno.
    pub fn map(&self, offset: u64, len: usize) -> Result<RawMapping, i32> {
        RawMapping::new(self.fd, offset, len)
    }

    /// A handle-only ioctl.
    ///
    /// # Errors
    /// The errno.
    pub fn handle_op(&self, code: u32, handle: u32) -> Result<(), i32> {
        self.ioctl(code, &mut uapi::Handle { handle, pad: 0 })
    }

    /// `CREATE_CONTEXT`.
    ///
    /// # Errors
    /// The errno.
    pub fn create_context(&self) -> Result<u32, i32> {
        let mut a = uapi::CreateContext::default();
        self.ioctl(uapi::IOCTL_CREATE_CONTEXT, &mut a)?;
        Ok(a.handle)
    }

    /// `ALLOC`.
    ///
    /// # Errors
    /// The errno.
    pub fn alloc(&self, context: u32, size: u64) -> Result<uapi::Alloc, i32> {
        let mut a = uapi::Alloc { context, size, ..Default::default() };
        self.ioctl(uapi::IOCTL_ALLOC, &mut a)?;
        Ok(a)
    }

    /// `CREATE_QUEUE` (user-mode when `ring` is `Some((ring, ring_control))`).
    ///
    /// # Errors
    /// The errno.
    pub fn create_queue(&self, context: u32, ring: Option<(u32, u32)>, entries: u32) -> Result<uapi::CreateQueue, i32> {
        self.create_queue_on(context, 0, ring, entries)
    }

    /// `CREATE_QUEUE` on `engine`.
    ///
    /// # Errors
    /// The errno.
    pub fn create_queue_on(
        &self,
        context: u32,
        engine: u32,
        ring: Option<(u32, u32)>,
        entries: u32,
    ) -> Result<uapi::CreateQueue, i32> {
        let mut a = uapi::CreateQueue {
            context,
            engine,
            priority: 1,
            flags: if ring.is_some() { uapi::QUEUE_USER_MODE_SUBMISSION } else { 0 },
            ring: ring.map_or(0, |r| r.0),
            ring_entries: entries,
            ring_control: ring.map_or(0, |r| r.1),
            ..Default::default()
        };
        self.ioctl(uapi::IOCTL_CREATE_QUEUE, &mut a)?;
        Ok(a)
    }

    /// `CREATE_QUEUE` of a user-mode queue whose ring and ring control the module makes in VRAM
    /// (`QUEUE_RING_IN_VRAM`), on engine 0.
    ///
    /// # Errors
    /// The errno.
    pub fn create_vram_ring_queue(&self, context: u32, entries: u32) -> Result<uapi::CreateQueue, i32> {
        let mut a = uapi::CreateQueue {
            context,
            priority: 1,
            flags: uapi::QUEUE_USER_MODE_SUBMISSION | uapi::QUEUE_RING_IN_VRAM,
            ring_entries: entries,
            ..Default::default()
        };
        self.ioctl(uapi::IOCTL_CREATE_QUEUE, &mut a)?;
        Ok(a)
    }

    /// `CREATE_ALLOCATION` of `size` bytes preferring `preferred` (`SEGMENT_*`), used from
    /// `fallback` when not there.
    ///
    /// # Errors
    /// The errno.
    pub fn create_allocation(
        &self,
        context: u32,
        preferred: u32,
        fallback: u32,
        size: u64,
    ) -> Result<uapi::CreateAllocation, i32> {
        let mut a = uapi::CreateAllocation { context, preferred, fallback, size, ..Default::default() };
        self.ioctl(uapi::IOCTL_CREATE_ALLOCATION, &mut a)?;
        Ok(a)
    }

    /// `CREATE_DOORBELL`.
    ///
    /// # Errors
    /// The errno.
    pub fn create_doorbell(&self, queue: u32) -> Result<uapi::CreateDoorbell, i32> {
        let mut a = uapi::CreateDoorbell { queue, ..Default::default() };
        self.ioctl(uapi::IOCTL_CREATE_DOORBELL, &mut a)?;
        Ok(a)
    }

    /// `SUBMIT`.
    ///
    /// # Errors
    /// The errno.
    pub fn submit(&self, s: uapi::Submit) -> Result<(), i32> {
        let mut s = s;
        self.ioctl(uapi::IOCTL_SUBMIT, &mut s)
    }

    /// `SUBMIT_SPLIT` of `size` bytes at the start of allocation `cmdbuf` on kernel-mode queue
    /// `queue`, with no allocation or patch list (one part); returns once the module says it
    /// has run.
    ///
    /// # Errors
    /// The errno.
    pub fn submit_split(&self, queue: u32, cmdbuf: u32, size: u32, progress_value: u64) -> Result<(), i32> {
        let mut s = belfry_abi::vidmem::SubmitSplit { queue, cmdbuf, size, progress_value, ..Default::default() };
        self.ioctl(belfry_abi::vidmem::IOCTL_SUBMIT_SPLIT, &mut s)
    }

    /// `WAIT_PROGRESS`.
    ///
    /// # Errors
    /// The errno.
    pub fn wait_progress(&self, queue: u32, value: u64, timeout_ns: u64) -> Result<(), i32> {
        self.ioctl(uapi::IOCTL_WAIT_PROGRESS, &mut uapi::WaitProgress { queue, pad: 0, value, timeout_ns })
    }

    /// `READ_TIMELINE` of `arg` into `buf`, or (`None`) into an address no mapping can have
    /// (the first page); `arg.entries` is set here. The result as the module wrote it back.
    ///
    /// # Errors
    /// The errno.
    ///
    /// # Panics
    /// If `arg.capacity` exceeds `buf`'s length (the module could write past it).
    pub fn read_timeline(
        &self,
        mut arg: uapi_debug::ReadTimeline,
        buf: Option<&mut [uapi_debug::TimelineEntry]>,
    ) -> Result<uapi_debug::ReadTimeline, i32> {
        arg.entries = match buf {
            Some(buf) => {
                assert!(arg.capacity as usize <= buf.len(), "capacity past the buffer");
                buf.as_mut_ptr() as u64
            }
            None => 16,
        };
        self.ioctl(uapi_debug::IOCTL_READ_TIMELINE, &mut arg)?;
        Ok(arg)
    }

    /// `DEBUG_STATS`.
    ///
    /// # Errors
    /// The errno.
    pub fn debug_stats(&self) -> Result<uapi_debug::DebugStats, i32> {
        let mut a = uapi_debug::DebugStats::default();
        self.ioctl(uapi_debug::IOCTL_DEBUG_STATS, &mut a)?;
        Ok(a)
    }

    /// `VERBOSE_LOG` with `a` (its answer written back).
    ///
    /// # Errors
    /// The errno.
    pub fn verbose_log(&self, mut a: uapi::VerboseLog) -> Result<uapi::VerboseLog, i32> {
        self.ioctl(uapi::IOCTL_VERBOSE_LOG, &mut a)?;
        Ok(a)
    }

    /// `TEARDOWN_DEBUG` (module-wide).
    ///
    /// # Errors
    /// The errno.
    pub fn teardown_debug(&self) -> Result<uapi_debug::TeardownDebug, i32> {
        let mut a = uapi_debug::TeardownDebug::default();
        self.ioctl(uapi_debug::IOCTL_TEARDOWN_DEBUG, &mut a)?;
        Ok(a)
    }

    /// `CREATE_FENCE` with `a` as given (kinds and flags the library would not send).
    ///
    /// # Errors
    /// The errno.
    pub fn create_fence(&self, a: uapi::CreateFence) -> Result<uapi::CreateFence, i32> {
        let mut a = a;
        self.ioctl(uapi::IOCTL_CREATE_FENCE, &mut a)?;
        Ok(a)
    }

    /// `SIGNAL_FENCE` (`wait` false) or `WAIT_FENCE` of `value` on fence `handle`.
    ///
    /// # Errors
    /// The errno.
    pub fn fence_op(&self, wait: bool, handle: u32, value: u64, timeout_ns: u64) -> Result<(), i32> {
        let code = if wait { uapi::IOCTL_WAIT_FENCE } else { uapi::IOCTL_SIGNAL_FENCE };
        self.ioctl(code, &mut uapi::FenceOp { handle, pad: 0, value, timeout_ns })
    }

    /// `QUEUE_WAIT_FENCE` (`wait`) or `QUEUE_SIGNAL_FENCE` of `value` on fence `fence`, queued on
    /// kernel-mode queue `queue`.
    ///
    /// # Errors
    /// The errno.
    pub fn queue_fence_op(&self, wait: bool, queue: u32, fence: u32, value: u64) -> Result<(), i32> {
        let code = if wait { uapi::IOCTL_QUEUE_WAIT_FENCE } else { uapi::IOCTL_QUEUE_SIGNAL_FENCE };
        self.ioctl(code, &mut uapi::QueueFenceOp { queue, fence, value })
    }

    /// `WAIT_FENCES` once (no restart after `EINTR`) on `entries` with `flags` until the
    /// absolute `deadline_ns`; the `first` index the module returned.
    ///
    /// # Errors
    /// The errno.
    pub fn wait_fences(&self, entries: &[WaitFenceEntry], flags: u32, deadline_ns: u64) -> Result<u32, i32> {
        let mut a = WaitFences {
            entries: entries.as_ptr() as u64,
            count: u32::try_from(entries.len()).map_err(|_| libc::EINVAL)?,
            flags,
            deadline_ns,
            ..Default::default()
        };
        // The module reads `count` entries at `entries`, a live slice borrowed for the call.
        self.ioctl(uapi_sync::IOCTL_WAIT_FENCES, &mut a)?;
        Ok(a.first)
    }

    /// `FENCE_INFO`.
    ///
    /// # Errors
    /// The errno.
    pub fn fence_info(&self, handle: u32) -> Result<uapi_debug::FenceInfo, i32> {
        let mut a = uapi_debug::FenceInfo { handle, ..Default::default() };
        self.ioctl(uapi_debug::IOCTL_FENCE_INFO, &mut a)?;
        Ok(a)
    }

    /// As [`RawDev::poke_u32`], 64 bits.
    ///
    /// # Errors
    /// `mmap`'s errno.
    pub fn poke_u64(&self, offset: u64, value: u64) -> Result<(), i32> {
        self.poke_u32(offset, value as u32)?; // CAST: the low half, then the high half.
        self.poke_at(offset, 4, (value >> 32) as u32)
    }

    /// Maps one page at `offset` shared and writable, stores `value` at offset 0, unmaps it.
    ///
    /// # Errors
    /// `mmap`'s errno.
    pub fn poke_u32(&self, offset: u64, value: u32) -> Result<(), i32> {
        self.poke_at(offset, 0, value)
    }

    fn poke_at(&self, offset: u64, at: usize, value: u32) -> Result<(), i32> {
        let len = 4096;
        let off = libc::off_t::try_from(offset).map_err(|_| libc::EINVAL)?;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh shared mapping of the module's page; unmapped below.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, self.fd, off) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        // SAFETY: `p` is a live writable page-aligned mapping of a page; `at` ≤ 4.
        unsafe { core::ptr::write_volatile(p.cast::<u8>().add(at.min(4)).cast::<u32>(), value) };
        // SAFETY: `p..p+len` is the mapping made above.
        unsafe { libc::munmap(p, len) };
        Ok(())
    }

    /// Maps one page at `offset` shared, reads its first `u64` and unmaps it.
    ///
    /// # Errors
    /// `mmap`'s errno.
    pub fn peek_u64(&self, offset: u64) -> Result<u64, i32> {
        let len = 4096;
        let off = libc::off_t::try_from(offset).map_err(|_| libc::EINVAL)?;
        // SAFETY: a fresh shared read-only mapping of the module's page; unmapped below.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, self.fd, off) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        // SAFETY: `p` is a live page-aligned mapping of at least 8 bytes.
        let v = unsafe { core::ptr::read_volatile(p.cast::<u64>()) };
        // SAFETY: `p..p+len` is the mapping made above.
        unsafe { libc::munmap(p, len) };
        Ok(v)
    }
}

/// An ioctl on a device file another owner opened (a library `Device`): `code` with `arg`,
/// the uapi struct whose size `code` encodes.
///
/// # Errors
/// The errno.
pub fn ioctl_on<T>(fd: std::os::fd::BorrowedFd<'_>, code: u32, arg: &mut T) -> Result<(), i32> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: `arg` is a uapi struct whose size is encoded in `code`; the module reads and
    // writes only that many bytes.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), code as _, core::ptr::from_mut(arg)) };
    if r < 0 {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}

/// `EXPORT_FENCE` of fence `handle` on device file `fd`: the new descriptor, owned.
///
/// # Errors
/// The errno.
pub fn export_fence_on(fd: std::os::fd::BorrowedFd<'_>, handle: u32) -> Result<std::os::fd::OwnedFd, i32> {
    use std::os::fd::FromRawFd as _;
    let mut a = uapi::ExportFence { handle, fd: -1 };
    ioctl_on(fd, uapi::IOCTL_EXPORT_FENCE, &mut a)?;
    if a.fd < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: a successful EXPORT_FENCE installed `a.fd` in this process; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(a.fd) })
}

/// Name of an errno for messages.
pub fn errno_name(e: i32) -> String {
    match e {
        libc::ENOENT => "ENOENT".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::EBUSY => "EBUSY".into(),
        libc::EPERM => "EPERM".into(),
        libc::EIO => "EIO".into(),
        libc::ETIMEDOUT => "ETIMEDOUT".into(),
        other => format!("errno {other}"),
    }
}

/// A locked page of anonymous memory holding a `u64`, whose guest physical address is known.
#[derive(Debug)]
pub struct LockedPage {
    ptr: *mut libc::c_void,
}

const PAGE: usize = 4096;

impl LockedPage {
    /// Maps and locks a page and stores `value` at its start.
    ///
    /// # Errors
    /// `mmap`'s or `mlock`'s errno.
    pub fn new(value: u64) -> io::Result<LockedPage> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh private anonymous mapping, owned by the value returned.
        let ptr =
            unsafe { libc::mmap(core::ptr::null_mut(), PAGE, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let page = LockedPage { ptr };
        // SAFETY: `ptr` is a live writable page.
        unsafe { core::ptr::write_volatile(ptr.cast::<u64>(), value) };
        // SAFETY: locks the page mapped above.
        if unsafe { libc::mlock(ptr, PAGE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(page)
    }

    /// The `u64` at its start.
    pub fn read(&self) -> u64 {
        // SAFETY: `ptr` is a live page-aligned mapping.
        unsafe { core::ptr::read_volatile(self.ptr.cast::<u64>()) }
    }

    /// Its guest physical address (`/proc/self/pagemap` shows frame numbers to root only).
    pub fn phys(&self) -> Option<u64> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let mut f = std::fs::File::open("/proc/self/pagemap").ok()?;
        f.seek(SeekFrom::Start((self.ptr as u64 / PAGE as u64) * 8)).ok()?;
        let mut b = [0u8; 8];
        f.read_exact(&mut b).ok()?;
        let entry = u64::from_le_bytes(b);
        let pfn = entry & ((1 << 55) - 1);
        (entry >> 63 == 1 && pfn != 0).then_some(pfn * PAGE as u64)
    }
}

impl Drop for LockedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping is owned by this value.
        unsafe { libc::munmap(self.ptr, PAGE) };
    }
}

//! Guest memory as the device sees it: the regions the client maps with `DMA_MAP`.
//!
//! Each mapping is an mmap of the fd QEMU sends (guest RAM must be a shareable memfd), kept in
//! a `GuestMemoryAtomic<GuestMemoryMmap>` that is swapped on map and unmap, so the command
//! processor reads a consistent snapshot without taking a lock.
//!
//! A region mapped without an fd is one the client does not share (QEMU maps its BIOS and
//! option ROMs that way). The vfio-user specification lets a server reach such regions with
//! `DMA_READ`/`DMA_WRITE` messages; this device accepts them as *unreachable* instead — it
//! records them so that `DMA_UNMAP` and overlap checks treat them like any region, and any
//! device access there fails exactly as for unmapped memory. Nothing the guest driver hands
//! the device lives in them (its rings, fences and buffers are in RAM, which has an fd), so
//! serving them by message would add a synchronous round trip to the command processor's
//! memory path for addresses it never uses.
//!
//! The client's fds are not trusted. `DMA_MAP` accepts only a regular file (a memfd or a file on
//! a filesystem; a pipe, socket or device is refused) as long as the mapping, and by default
//! only one sealed with `F_SEAL_SHRINK`: a file shrunk under a mapping would make the next
//! device access raise SIGBUS and kill the process. QEMU's `memory-backend-memfd` seals its
//! memfd by default (`seal=on`); `--allow-unsealed-ram` accepts unsealable file backends and
//! the risk that comes with them (docs/THREAT_MODEL.md). A region is mapped with exactly the
//! access the client granted (`PROT_READ` for a read-only one), and [`DmaMemory`] — the
//! memory every device access goes through — refuses an access the region does not grant
//! before it touches the mapping, so a GPU write into a read-only region faults its context.
//!
//! No DMA outlives its permission: [`GuestRam::quiesce`] waits until every snapshot taken
//! before it (an engine's slice, a mailbox command, a record write) is dropped. `DMA_UNMAP`
//! quiesces before it is answered (the specification requires the server to drop every
//! reference first), a device reset before it completes, and clearing the PCI command
//! register's bus-master bit before the write returns; while that bit is clear every access
//! fails and engines pick no work.
//!
//! While the device records an input log, a read copies the bytes once, logs the copy and reads
//! only the copy ([`copies`]): the log holds exactly what the device used, whatever the guest
//! stores meanwhile. Replaying, the copy is the log's bytes. An atomic read-modify-write (the
//! peer-signal page's claim) cannot work on a copy: its bytes are logged just before it, and a
//! replay writes them into memory for it.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use belfry_trace_schema::input_log::Entry;
use thiserror::Error;
use vm_memory::atomic::GuestMemoryLoadGuard;
use vm_memory::bitmap::BS;
use vm_memory::guest_memory::GuestMemorySliceIterator;
use vm_memory::{
    GuestAddress, GuestAddressSpace, GuestMemory, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryError,
    GuestMemoryMmap, GuestMemoryRegion, GuestRegionMmap, Permissions, VolatileSlice,
};

mod copies;
pub mod test_hook;
mod windows;
use copies::{Copies, Slices};
pub use windows::Unmapped;
use windows::{SharedFile, Windows};

use crate::record::{self, RecordSlot};
use crate::vfio_user::protocol::{DMA_FLAG_READ, DMA_FLAG_WRITE, MAX_DMA_MAPS};

/// A DMA map or unmap request that cannot be honoured.
#[derive(Debug, Error)]
pub enum DmaError {
    /// Zero size, address overflow or unknown flags.
    #[error("Invalid DMA range {address:#x}+{size:#x} (flags {flags:#x})")]
    Range {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
        /// Flags.
        flags: u32,
    },
    /// The new region overlaps a mapped one.
    #[error("DMA range {address:#x}+{size:#x} overlaps a mapped region")]
    Overlap {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
    },
    /// The fd is shorter than the mapping.
    #[error("DMA range {address:#x}+{size:#x} at fd offset {offset:#x} is past the fd's end ({file_len:#x})")]
    PastEnd {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
        /// Offset in the fd.
        offset: u64,
        /// Length of the file behind the fd.
        file_len: u64,
    },
    /// The fd is not a regular file (a pipe, socket, device...).
    #[error("DMA fd for {address:#x}+{size:#x} is not a regular file ({what})")]
    NotAFile {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
        /// What it is.
        what: String,
    },
    /// The file can shrink under the mapping.
    #[error(
        "DMA fd for {address:#x}+{size:#x} is not sealed against shrinking (F_SEAL_SHRINK; QEMU's \
         memory-backend-memfd seals by default; --allow-unsealed-ram accepts it at the risk of a SIGBUS)"
    )]
    Unsealed {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
    },
    /// Too many regions mapped.
    #[error("Too many DMA regions (limit {MAX_DMA_MAPS})")]
    TooMany,
    /// mmap of the fd failed (e.g. past its end).
    #[error("Cannot map DMA region {address:#x}+{size:#x}: {source}")]
    Mmap {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
        /// The mmap failure.
        source: std::io::Error,
    },
    /// A writable window onto a file the client sent read-only.
    #[error("DMA range {address:#x}+{size:#x} asks for writes into a file sent read-only")]
    NotWritable {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
    },
    /// An unmap that would cut a window at a point that is not a whole number of pages into
    /// it (or cut a window that cannot be cut).
    #[error("DMA unmap of {address:#x}+{size:#x} cuts the window at {window:#x} off a page boundary")]
    Cut {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
        /// The window's start.
        window: u64,
    },
}

impl DmaError {
    /// The errno this error is reported with.
    pub fn errno(&self) -> i32 {
        match self {
            DmaError::Range { .. }
            | DmaError::PastEnd { .. }
            | DmaError::Mmap { .. }
            | DmaError::NotAFile { .. }
            | DmaError::Unsealed { .. }
            | DmaError::Cut { .. } => libc::EINVAL,
            DmaError::NotWritable { .. } => libc::EACCES,
            DmaError::Overlap { .. } => libc::EEXIST,
            DmaError::TooMany => libc::ENOSPC,
        }
    }
}

/// How a region was mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// An mmap of the client's fd: the device reads and writes it directly.
    Direct,
    /// No fd came with it: recorded, but the device cannot reach it.
    Unreachable,
}

/// The guest memory mapped for DMA.
pub struct GuestRam {
    memory: GuestMemoryAtomic<GuestMemoryMmap>,
    /// The IOVA windows behind `memory` (rebuilt from them on every change), with the regions
    /// mapped without an fd.
    windows: Mutex<Windows>,
    /// Memory given whole (unit tests), kept alive beneath the windows that view it.
    _given: Option<GuestMemoryMmap>,
    /// Accept fds not sealed against shrinking (`--allow-unsealed-ram`).
    allow_unsealed: bool,
    /// The PCI command register's bus-master bit: no DMA while clear.
    bus_master: AtomicBool,
    /// Held (cloned) by every snapshot; [`quiesce`](Self::quiesce) swaps in a fresh one and
    /// waits until nobody holds the old one.
    epoch: Mutex<Arc<()>>,
    /// The input recorder, if the device records: the bytes of every access that reads.
    pub recording: Arc<RecordSlot>,
}

/// How long [`GuestRam::quiesce`] waits for accesses in flight (a slice or a mailbox command
/// takes milliseconds; this bounds a stuck one, which is logged).
pub const QUIESCE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for GuestRam {
    fn default() -> Self {
        GuestRam::new(false)
    }
}

impl GuestRam {
    /// No memory yet, bus mastering off; `allow_unsealed` accepts fds that can shrink.
    pub fn new(allow_unsealed: bool) -> Self {
        GuestRam {
            memory: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            windows: Mutex::default(),
            _given: None,
            allow_unsealed,
            bus_master: AtomicBool::new(false),
            epoch: Mutex::default(),
            recording: Arc::default(),
        }
    }

    /// Guest memory that is already built, bus mastering on (unit tests: anonymous regions).
    pub fn with_memory(memory: GuestMemoryMmap) -> Self {
        let windows = Windows::fixed(&memory);
        GuestRam {
            memory: GuestMemoryAtomic::new(windows.memory()),
            windows: Mutex::new(windows),
            _given: Some(memory),
            bus_master: AtomicBool::new(true),
            ..GuestRam::new(false)
        }
    }

    /// A consistent snapshot of guest memory for the command processor, with the access each
    /// region grants (none while bus mastering is off).
    pub fn memory(&self) -> DmaMemory {
        let epoch = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
        DmaMemory {
            memory: self.memory.memory(),
            enabled: self.bus_master.load(Ordering::Acquire),
            _epoch: Arc::clone(&epoch),
            recording: self.recording.is_on().then(|| Arc::clone(&self.recording)),
            copies: Copies::default(),
        }
    }

    /// Whether bus mastering is on.
    pub fn bus_master(&self) -> bool {
        self.bus_master.load(Ordering::Acquire)
    }

    /// Sets the bus-master bit; clearing it returns only once no access is in flight.
    pub fn set_bus_master(&self, on: bool) {
        let was = self.bus_master.swap(on, Ordering::AcqRel);
        if was && !on {
            self.quiesce();
        }
    }

    /// Returns once every snapshot taken before the call has been dropped (at most
    /// [`QUIESCE_TIMEOUT`]; a longer wait is logged and given up, and answered false).
    pub fn quiesce(&self) -> bool {
        let old = std::mem::take(&mut *self.epoch.lock().unwrap_or_else(|e| e.into_inner()));
        let deadline = Instant::now() + QUIESCE_TIMEOUT;
        while Arc::strong_count(&old) > 1 {
            if Instant::now() > deadline {
                log::error!("device accesses still in flight after {QUIESCE_TIMEOUT:?}: no longer waiting for them");
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// Maps `size` bytes of `fd` at `offset` as device addresses `address..address+size`;
    /// without an fd, records the range as unreachable.
    pub fn map(
        &self,
        address: u64,
        size: u64,
        offset: u64,
        flags: u32,
        fd: Option<OwnedFd>,
    ) -> Result<Mapping, DmaError> {
        if size == 0
            || address.checked_add(size).is_none()
            || offset.checked_add(size).is_none()
            || usize::try_from(size).is_err()
            || flags & !(DMA_FLAG_READ | DMA_FLAG_WRITE) != 0
        {
            return Err(DmaError::Range { address, size, flags });
        }
        let prot = if flags & DMA_FLAG_READ != 0 { libc::PROT_READ } else { 0 }
            | if flags & DMA_FLAG_WRITE != 0 { libc::PROT_WRITE } else { 0 };
        let guard = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let (direct, unreachable) = windows.counts();
        if direct + unreachable >= MAX_DMA_MAPS {
            return Err(DmaError::TooMany);
        }
        if windows.overlaps(address, size) {
            return Err(DmaError::Overlap { address, size });
        }
        let Some(fd) = fd else {
            windows.insert_unreachable(address, size, prot);
            log::debug!("DMA region {address:#x}+{size:#x} came without an fd: recorded, unreachable by the device");
            return Ok(Mapping::Unreachable);
        };
        // mmap succeeds past the end of a file, and touching such pages raises SIGBUS: refuse
        // what is not a regular file, mappings the file cannot back, and (unless allowed) files
        // that could shrink afterwards.
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| DmaError::NotAFile { address, size, what: e.to_string() })?;
        if !meta.file_type().is_file() {
            return Err(DmaError::NotAFile { address, size, what: format!("{:?}", meta.file_type()) });
        }
        let file_len = meta.len();
        if offset + size > file_len {
            return Err(DmaError::PastEnd { address, size, offset, file_len });
        }
        if !self.allow_unsealed && !sealed_against_shrinking(&file) {
            return Err(DmaError::Unsealed { address, size });
        }
        let id = (meta.dev(), meta.ino());
        let shared = match windows.file(id, offset + size) {
            Some(shared) => shared,
            None => {
                let shared =
                    SharedFile::map(file, id, file_len).map_err(|source| DmaError::Mmap { address, size, source })?;
                windows.add_file(shared.clone());
                shared
            }
        };
        windows.insert_file(address, size, prot, shared, offset)?;
        guard.replace(windows.memory());
        Ok(Mapping::Direct)
    }

    /// Unmaps `address..address+size` from every window it touches (see [`Windows::remove_range`]);
    /// returns once no access that could use what was unmapped is in flight.
    pub fn unmap(&self, address: u64, size: u64) -> Result<Unmapped, DmaError> {
        let guard = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let gone = windows.remove_range(address, size)?;
        if gone.direct > 0 {
            guard.replace(windows.memory());
            drop(windows);
            self.settle();
        }
        Ok(gone)
    }

    /// Unmaps everything (client disconnect, `DMA_UNMAP` of all); returns once no access is in
    /// flight.
    pub fn clear(&self) -> Unmapped {
        let guard = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let gone = self.windows.lock().unwrap_or_else(|e| e.into_inner()).clear();
        guard.replace(GuestMemoryMmap::new());
        self.settle();
        gone
    }

    /// Waits for the accesses in flight, then lets go of the files no window uses any more
    /// (kept, mapped, if an access outlived the wait).
    fn settle(&self) {
        if self.quiesce() {
            self.windows.lock().unwrap_or_else(|e| e.into_inner()).release_unused_files();
        }
    }

    /// Number of regions mapped without an fd.
    pub fn unreachable_count(&self) -> usize {
        self.windows.lock().unwrap_or_else(|e| e.into_inner()).counts().1
    }

    /// Number of directly mapped regions.
    pub fn region_count(&self) -> usize {
        GuestMemoryBackend::num_regions(&*self.memory.memory())
    }

    /// Number of the client's files mapped beneath the windows.
    pub fn file_count(&self) -> usize {
        self.windows.lock().unwrap_or_else(|e| e.into_inner()).file_count()
    }
}

/// Whether `file` carries `F_SEAL_SHRINK` (files that cannot be sealed do not).
fn sealed_against_shrinking(file: &File) -> bool {
    // SAFETY: fcntl(F_GET_SEALS) on an fd we own only reads its seals (-1 if it has none).
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}

/// Guest memory as the device reaches it: a snapshot of the DMA regions in which every access
/// is checked against the access its region grants (its mmap protection) before the mapping
/// is touched. An access a region does not grant — a write into a read-only region, anything
/// in a region mapped with neither — fails like an access to unmapped memory, so the caller
/// faults a context or reports a status; the process never takes a SIGSEGV.
///
/// Nothing is reachable while bus mastering is off. Holding one delays `DMA_UNMAP`, reset
/// and clearing bus mastering ([`GuestRam::quiesce`]): take it per slice or command, never
/// keep it.
pub struct DmaMemory {
    memory: GuestMemoryLoadGuard<GuestMemoryMmap>,
    enabled: bool,
    _epoch: Arc<()>,
    recording: Option<Arc<RecordSlot>>,
    /// The copies recorded reads were served from.
    copies: Copies,
}

impl DmaMemory {
    /// Whether bus mastering was on when the snapshot was taken: off, every access fails.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The DMA regions themselves (counting and listing; accesses go through [`GuestMemory`]).
    pub fn regions(&self) -> &GuestMemoryMmap {
        &self.memory
    }

    /// Whether every byte of `addr..addr+count` is mapped and its region grants `access`
    /// (nothing while bus mastering is off).
    pub fn grants(&self, addr: GuestAddress, count: usize, access: Permissions) -> bool {
        if !self.enabled {
            return count == 0;
        }
        let need = if access.allow(Permissions::Read) { libc::PROT_READ } else { 0 }
            | if access.has_write() { libc::PROT_WRITE } else { 0 };
        let (mut at, mut left) = (addr.0, count as u64);
        while left > 0 {
            let Some(region) = self.memory.find_region(GuestAddress(at)) else { return false };
            if region.prot() & need != need {
                return false;
            }
            let in_region = region.len() - (at - region.start_addr().0);
            let n = in_region.min(left);
            left -= n;
            let Some(next) = at.checked_add(n) else { return left == 0 };
            at = next;
        }
        true
    }

    /// A read's one copy of `addr..addr+count`: guest memory's bytes, appended to the log, and
    /// the only bytes the access reads (`None` for an empty access). Replaying, the log's bytes
    /// instead (and guest memory's past them, should the replay read further).
    fn read_once(&self, recording: &RecordSlot, addr: GuestAddress, count: usize) -> Option<VolatileSlice<'_>> {
        if count == 0 {
            return None;
        }
        let mut words = copies::buffer(count);
        {
            let bytes = &mut copies::bytes_mut(&mut words)[..count];
            self.copy_out(addr, bytes);
            let read = || Entry::GuestRead { thread: record::thread_number(), address: addr.0, bytes: bytes.to_vec() };
            match recording.input(read) {
                Some(Entry::GuestRead { bytes: logged, .. }) => {
                    let n = logged.len().min(count);
                    bytes[..n].copy_from_slice(&logged[..n]);
                }
                _ if !recording.is_replay() => test_hook::after_recorded_read(addr.0, count),
                _ => {}
            }
        }
        Some(self.copies.keep(words, count))
    }

    /// Appends the bytes of `addr..addr+count` as an access that reads and writes them (an
    /// atomic read-modify-write, which cannot work on a copy) is about to find them.
    ///
    /// Replaying, the log's bytes are written into the memory first, so the access reads what
    /// the recorded one did.
    fn record_read(&self, recording: &RecordSlot, addr: GuestAddress, count: usize) {
        let recorded = recording.input(|| {
            let mut bytes = vec![0u8; count];
            self.copy_out(addr, &mut bytes);
            Entry::GuestRead { thread: record::thread_number(), address: addr.0, bytes }
        });
        match recorded {
            Some(Entry::GuestRead { bytes, .. }) => self.write_behind_mapping(addr, &bytes),
            _ if !recording.is_replay() => test_hook::after_recorded_read(addr.0, count),
            _ => {}
        }
    }

    /// Copies guest memory at `addr` into `bytes` (as far as it is mapped).
    fn copy_out(&self, addr: GuestAddress, bytes: &mut [u8]) {
        let count = bytes.len();
        let mut at = 0;
        for slice in GuestMemoryBackend::get_slices(&*self.memory, addr, count).flatten() {
            let n = slice.len().min(count - at);
            slice.subslice(0, n).map(|s| s.copy_to(&mut bytes[at..at + n])).ok();
            at += n;
        }
    }

    /// Writes `bytes` at `addr` through the file's one mapping, which is writable whatever
    /// access the window grants when the fd allows (a replay's stand-in memfds do), for a
    /// replay's recorded read-modify-writes.
    fn write_behind_mapping(&self, addr: GuestAddress, bytes: &[u8]) {
        let mut at = 0;
        for slice in GuestMemoryBackend::get_slices(&*self.memory, addr, bytes.len()).flatten() {
            let n = slice.len().min(bytes.len() - at);
            slice.subslice(0, n).map(|s| s.copy_from(&bytes[at..at + n])).ok();
            at += n;
        }
    }
}

impl GuestMemory for DmaMemory {
    type PhysicalMemory = GuestMemoryMmap;
    type Bitmap = <GuestRegionMmap as GuestMemoryRegion>::B;

    fn check_range(&self, addr: GuestAddress, count: usize, access: Permissions) -> bool {
        self.grants(addr, count, access)
    }

    fn get_slices<'a>(
        &'a self,
        addr: GuestAddress,
        count: usize,
        access: Permissions,
    ) -> vm_memory::guest_memory::Result<impl GuestMemorySliceIterator<'a, BS<'a, Self::Bitmap>>> {
        if !self.grants(addr, count, access) {
            return Err(GuestMemoryError::InvalidGuestAddress(addr));
        }
        if let Some(recording) = &self.recording {
            // A read is served from the one copy the log holds; a read-modify-write works on
            // guest memory, the bytes before it logged.
            if access == Permissions::Read {
                return Ok(Slices::Copied(self.read_once(recording, addr, count)));
            }
            if access.allow(Permissions::Read) {
                self.record_read(recording, addr, count);
            }
        }
        Ok(Slices::Live(GuestMemoryBackend::get_slices(&*self.memory, addr, count)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;
    use vm_memory::Bytes;

    fn memfd(size: u64) -> OwnedFd {
        let name = c"belfry-test";
        // SAFETY: memfd_create with a valid C string; the returned fd is checked and owned.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0);
        // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        File::from(owned.try_clone().unwrap()).set_len(size).unwrap();
        owned
    }

    /// A memfd sealed against shrinking, as QEMU's memfd backend seals guest RAM.
    fn sealed(size: u64) -> OwnedFd {
        let fd = memfd(size);
        // SAFETY: fcntl(F_ADD_SEALS) on a descriptor we own only adds seals.
        assert_eq!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) }, 0);
        fd
    }

    /// Runs `access` holding a snapshot of `ram` for 200 ms on another thread, calling `op` once
    /// the snapshot is taken; true if `op` returned only after the snapshot was dropped.
    pub(crate) fn waits_for_access_in_flight(ram: &std::sync::Arc<GuestRam>, op: impl FnOnce()) -> bool {
        use std::sync::atomic::{AtomicBool, Ordering};
        let released = std::sync::Arc::new(AtomicBool::new(false));
        let (taken_tx, taken) = std::sync::mpsc::channel();
        let holder = {
            let (ram, released) = (ram.clone(), released.clone());
            std::thread::spawn(move || {
                let snapshot = ram.memory();
                taken_tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(200));
                released.store(true, Ordering::SeqCst);
                drop(snapshot);
            })
        };
        taken.recv().unwrap();
        op();
        let waited = released.load(Ordering::SeqCst);
        holder.join().unwrap();
        waited
    }

    #[test]
    fn unmap_returns_only_once_no_access_is_in_flight() {
        let ram = std::sync::Arc::new(GuestRam::default());
        ram.map(0x10000, 0x1000, 0, 3, Some(sealed(0x1000))).unwrap();
        assert!(waits_for_access_in_flight(&ram, || {
            ram.unmap(0x10000, 0x1000).unwrap();
        }));
    }

    #[test]
    fn read_only_regions_are_read_but_never_written() {
        let ram = GuestRam::default();
        ram.set_bus_master(true);
        let fd = sealed(0x2000);
        File::from(fd.try_clone().unwrap()).write_all_at(&7u32.to_le_bytes(), 0x10).unwrap();
        ram.map(0x10000, 0x2000, 0, DMA_FLAG_READ, Some(fd.try_clone().unwrap())).unwrap();
        ram.map(0x20000, 0x1000, 0, 0, Some(sealed(0x1000))).unwrap();
        let mem = ram.memory();
        assert_eq!(mem.read_obj::<u32>(GuestAddress(0x10010)).unwrap(), 7);
        assert!(mem.write_obj(9u32, GuestAddress(0x10010)).is_err(), "read-only");
        assert!(mem.store(9u32, GuestAddress(0x10010), std::sync::atomic::Ordering::SeqCst).is_err());
        assert!(!mem.check_range(GuestAddress(0x10000), 4, Permissions::Write));
        assert!(mem.check_range(GuestAddress(0x10000), 0x2000, Permissions::Read));
        assert!(mem.read_obj::<u32>(GuestAddress(0x20000)).is_err(), "neither read nor write granted");
        let mut b = [0u8; 4];
        File::from(fd).read_exact_at(&mut b, 0x10).unwrap();
        assert_eq!(u32::from_le_bytes(b), 7, "unchanged");
    }

    #[test]
    fn only_regular_files_sealed_against_shrinking_are_mapped() {
        let ram = GuestRam::default();
        assert_eq!(ram.map(0x10000, 0x1000, 0, 3, Some(memfd(0x1000))).unwrap_err().errno(), libc::EINVAL, "unsealed");
        let mut fds = [-1; 2];
        // SAFETY: pipe fills two descriptors (checked) that the OwnedFds below take over.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors owned by nothing else.
        let (r, _w) = unsafe {
            use std::os::fd::FromRawFd;
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        assert!(matches!(ram.map(0x10000, 0x1000, 0, 3, Some(r)), Err(DmaError::NotAFile { .. })));
        ram.map(0x10000, 0x1000, 0, 3, Some(sealed(0x1000))).unwrap();
        GuestRam::new(true).map(0x10000, 0x1000, 0, 3, Some(memfd(0x1000))).unwrap();
    }

    #[test]
    fn map_read_write_unmap() {
        let ram = GuestRam::default();
        ram.set_bus_master(true);
        ram.map(0x10000, 0x4000, 0, 3, Some(sealed(0x4000))).unwrap();
        ram.memory().write_obj(0xdead_beefu32, GuestAddress(0x10010)).unwrap();
        assert_eq!(ram.memory().read_obj::<u32>(GuestAddress(0x10010)).unwrap(), 0xdead_beef);
        ram.set_bus_master(false);
        assert!(ram.memory().read_obj::<u32>(GuestAddress(0x10010)).is_err(), "no DMA without bus mastering");
        ram.set_bus_master(true);
        assert!(ram.memory().read_obj::<u32>(GuestAddress(0x14000)).is_err());
        ram.unmap(0x10000, 0x4000).unwrap();
        assert_eq!(ram.region_count(), 0);
    }

    #[test]
    fn regions_without_an_fd_are_recorded_but_unreachable() {
        let ram = GuestRam::default();
        assert_eq!(ram.map(0xc0000, 0x20000, 0, 1, None).unwrap(), Mapping::Unreachable);
        assert_eq!((ram.region_count(), ram.unreachable_count()), (0, 1));
        assert!(ram.memory().read_obj::<u32>(GuestAddress(0xc0010)).is_err(), "the device cannot reach it");
        // Overlaps are refused both ways, and the range checks still apply.
        assert_eq!(ram.map(0xd0000, 0x1000, 0, 3, Some(sealed(0x1000))).unwrap_err().errno(), libc::EEXIST);
        assert_eq!(ram.map(0xc8000, 0x1000, 0, 3, None).unwrap_err().errno(), libc::EEXIST);
        ram.map(0x100000, 0x1000, 0, 3, Some(sealed(0x1000))).unwrap();
        assert_eq!(ram.map(0x100000, 0x1000, 0, 3, None).unwrap_err().errno(), libc::EEXIST);
        assert_eq!(ram.map(0, 0, 0, 3, None).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(ram.map(0, 0x1000, 0, 0x80, None).unwrap_err().errno(), libc::EINVAL);
        // Unmapped by range, like any region.
        assert_eq!(ram.unmap(0xc0000, 0x20000).unwrap(), Unmapped { direct: 0, unreachable: 0x20000 });
        assert_eq!(ram.unmap(0x100000, 0x1000).unwrap(), Unmapped { direct: 0x1000, unreachable: 0 });
        assert_eq!((ram.region_count(), ram.unreachable_count()), (0, 0));
        ram.map(0xc0000, 0x20000, 0, 1, None).unwrap();
        ram.clear();
        assert_eq!(ram.unreachable_count(), 0);
    }

    #[test]
    fn bad_maps_are_refused() {
        let ram = GuestRam::default();
        assert_eq!(ram.map(0, 0, 0, 3, Some(sealed(0x1000))).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(ram.map(u64::MAX - 5, 0x1000, 0, 3, Some(sealed(0x1000))).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(ram.map(0, 0x1000, 0, 0x80, Some(sealed(0x1000))).unwrap_err().errno(), libc::EINVAL);
        ram.map(0x1000, 0x2000, 0, 3, Some(sealed(0x2000))).unwrap();
        assert_eq!(ram.map(0x2000, 0x2000, 0, 3, Some(sealed(0x2000))).unwrap_err().errno(), libc::EEXIST);
        ram.map(0x3000, 0x1000, 0, 3, Some(sealed(0x1000))).unwrap();
        assert_eq!(ram.region_count(), 2);
    }

    /// A guest with an IOMMU maps page by page onto one memfd, at file offsets of its choosing.
    fn map_pages(ram: &GuestRam, fd: &OwnedFd, pages: &[(u64, u64)]) {
        for &(address, offset) in pages {
            ram.map(address, 0x1000, offset, 3, Some(fd.try_clone().unwrap())).unwrap();
        }
    }

    #[test]
    fn windows_onto_one_file_share_its_one_mapping_and_translate_to_their_offsets() {
        let ram = GuestRam::default();
        ram.set_bus_master(true);
        let fd = sealed(0x10000);
        let file = File::from(fd.try_clone().unwrap());
        for page in 0..16u32 {
            file.write_all_at(&(0x100 + page).to_le_bytes(), u64::from(page) * 0x1000).unwrap();
        }
        // Device address 0x8000_0000 + n pages shows file page 15 - n.
        let pages: Vec<(u64, u64)> = (0..16).map(|n| (0x8000_0000 + n * 0x1000, (15 - n) * 0x1000)).collect();
        map_pages(&ram, &fd, &pages);
        assert_eq!((ram.region_count(), ram.file_count()), (16, 1), "sixteen windows, one file mapping");
        let mem = ram.memory();
        for n in 0..16u32 {
            assert_eq!(mem.read_obj::<u32>(GuestAddress(0x8000_0000 + u64::from(n) * 0x1000)).unwrap(), 0x100 + 15 - n);
        }
        mem.write_obj(0xabcdu32, GuestAddress(0x8000_0004)).unwrap();
        drop(mem);
        let mut b = [0u8; 4];
        file.read_exact_at(&mut b, 15 * 0x1000 + 4).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0xabcd, "the write landed in the file page the window shows");
        // The last window gone, the file's mapping goes too.
        ram.unmap(0x8000_0000, 0x10000).unwrap();
        assert_eq!((ram.region_count(), ram.file_count()), (0, 0));
    }

    #[test]
    fn an_unmap_removes_a_range_across_windows_and_gaps_and_cuts_the_windows_it_straddles() {
        let ram = GuestRam::default();
        ram.set_bus_master(true);
        let fd = sealed(0x10000);
        let file = File::from(fd.try_clone().unwrap());
        for page in 0..16u32 {
            file.write_all_at(&page.to_le_bytes(), u64::from(page) * 0x1000).unwrap();
        }
        // Two 4-page windows with a gap between them, and one more page far away.
        ram.map(0x10000, 0x4000, 0, 3, Some(fd.try_clone().unwrap())).unwrap();
        ram.map(0x20000, 0x4000, 0x8000, 3, Some(fd.try_clone().unwrap())).unwrap();
        ram.map(0x90000, 0x1000, 0xf000, 3, Some(fd.try_clone().unwrap())).unwrap();
        // A range with nothing in it is no error and changes nothing.
        assert_eq!(ram.unmap(0x40000, 0x10000).unwrap(), Unmapped::default());
        // Unmapping 0x12000..0x22000 keeps 0x10000..0x12000 and 0x22000..0x24000.
        assert_eq!(ram.unmap(0x12000, 0x10000).unwrap(), Unmapped { direct: 0x4000, unreachable: 0 });
        let mem = ram.memory();
        assert_eq!(mem.read_obj::<u32>(GuestAddress(0x11000)).unwrap(), 1, "left part kept its translation");
        assert_eq!(mem.read_obj::<u32>(GuestAddress(0x22000)).unwrap(), 10, "right part kept its translation");
        for gone in [0x12000, 0x13000, 0x20000, 0x21000] {
            assert!(mem.read_obj::<u32>(GuestAddress(gone)).is_err(), "{gone:#x} unmapped");
        }
        assert_eq!(mem.read_obj::<u32>(GuestAddress(0x90000)).unwrap(), 15);
        drop(mem);
        // A cut off a page boundary is refused and changes nothing.
        assert_eq!(ram.unmap(0x10800, 0x1000).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(ram.memory().read_obj::<u32>(GuestAddress(0x10800)).unwrap(), 0);
        assert_eq!(ram.unmap(0, 0).unwrap_err().errno(), libc::EINVAL, "empty range");
        assert_eq!(ram.unmap(u64::MAX, 2).unwrap_err().errno(), libc::EINVAL, "wraps");
        // A range up to the top of the address space (QEMU's unmap of an IOMMU's section).
        assert_eq!(
            ram.unmap(0x80000, 0u64.wrapping_sub(0x80000)).unwrap(),
            Unmapped { direct: 0x1000, unreachable: 0 }
        );
        assert!(ram.memory().read_obj::<u32>(GuestAddress(0x90000)).is_err());
        // Everything at once.
        assert_eq!(ram.clear(), Unmapped { direct: 0x2000 + 0x2000, unreachable: 0 });
        assert_eq!((ram.region_count(), ram.file_count()), (0, 0));
    }

    #[test]
    fn a_cut_window_keeps_its_access_and_a_write_window_needs_a_writable_file() {
        let ram = GuestRam::default();
        ram.set_bus_master(true);
        let fd = sealed(0x4000);
        ram.map(0x10000, 0x4000, 0, DMA_FLAG_READ, Some(fd.try_clone().unwrap())).unwrap();
        ram.unmap(0x11000, 0x1000).unwrap();
        let mem = ram.memory();
        assert!(mem.read_obj::<u32>(GuestAddress(0x12000)).is_ok());
        assert!(mem.write_obj(1u32, GuestAddress(0x12000)).is_err(), "still read-only after the cut");
        drop(mem);
        // A read-only fd of a file: readable windows only.
        let path = std::env::temp_dir().join(format!("belfry-dma-ro-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 0x1000]).unwrap();
        let ro = OwnedFd::from(File::open(&path).unwrap());
        let ram = GuestRam::new(true);
        assert_eq!(ram.map(0x1000, 0x1000, 0, 3, Some(ro.try_clone().unwrap())).unwrap_err().errno(), libc::EACCES);
        ram.map(0x1000, 0x1000, 0, DMA_FLAG_READ, Some(ro)).unwrap();
        std::fs::remove_file(path).unwrap();
    }
}

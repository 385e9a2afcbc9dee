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

use std::fs::File;
use std::os::fd::OwnedFd;

use thiserror::Error;
use vm_memory::{
    FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap, GuestRegionMmap, MmapRegion,
};

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
        source: vm_memory::mmap::MmapRegionError,
    },
    /// Unmap of a range that is not exactly one mapped region.
    #[error("No DMA region is mapped at exactly {address:#x}+{size:#x}")]
    NotMapped {
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
    },
}

impl DmaError {
    /// The errno this error is reported with.
    pub fn errno(&self) -> i32 {
        match self {
            DmaError::Range { .. } | DmaError::PastEnd { .. } | DmaError::Mmap { .. } => libc::EINVAL,
            DmaError::Overlap { .. } => libc::EEXIST,
            DmaError::TooMany => libc::ENOSPC,
            DmaError::NotMapped { .. } => libc::ENOENT,
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
    /// Regions mapped without an fd, as `(address, size)`.
    unreachable: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl Default for GuestRam {
    fn default() -> Self {
        GuestRam { memory: GuestMemoryAtomic::new(GuestMemoryMmap::new()), unreachable: Default::default() }
    }
}

impl GuestRam {
    /// Guest memory that is already built (unit tests: anonymous regions).
    pub fn with_memory(memory: GuestMemoryMmap) -> Self {
        GuestRam { memory: GuestMemoryAtomic::new(memory), unreachable: Default::default() }
    }

    /// A consistent snapshot of guest memory for the command processor.
    pub fn memory(&self) -> vm_memory::atomic::GuestMemoryLoadGuard<GuestMemoryMmap> {
        self.memory.memory()
    }

    /// Maps `size` bytes of `fd` at `offset` as guest addresses `address..address+size`; without
    /// an fd, records the range as unreachable.
    pub fn map(
        &self,
        address: u64,
        size: u64,
        offset: u64,
        flags: u32,
        fd: Option<OwnedFd>,
    ) -> Result<Mapping, DmaError> {
        let range_err = DmaError::Range { address, size, flags };
        if size == 0
            || address.checked_add(size).is_none()
            || offset.checked_add(size).is_none()
            || flags & !(DMA_FLAG_READ | DMA_FLAG_WRITE) != 0
        {
            return Err(range_err);
        }
        let len = usize::try_from(size).map_err(|_| DmaError::Range { address, size, flags })?;
        let guard = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let mut unreachable = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.memory.memory();
        if vm_memory::GuestMemoryBackend::num_regions(&*current) + unreachable.len() >= MAX_DMA_MAPS {
            return Err(DmaError::TooMany);
        }
        let overlaps = vm_memory::GuestMemoryBackend::iter(&*current)
            .map(|r| {
                use vm_memory::GuestMemoryRegion;
                (r.start_addr().0, r.len())
            })
            .chain(unreachable.iter().copied())
            .any(|(start, len)| address < start + len && start < address + size);
        if overlaps {
            return Err(DmaError::Overlap { address, size });
        }
        let Some(fd) = fd else {
            unreachable.push((address, size));
            log::debug!("DMA region {address:#x}+{size:#x} came without an fd: recorded, unreachable by the device");
            return Ok(Mapping::Unreachable);
        };
        // mmap succeeds past the end of a file, and touching such pages raises SIGBUS: refuse
        // mappings the fd cannot back (see docs/THREAT_MODEL.md for a file shrunk afterwards).
        let file = File::from(fd);
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if offset + size > file_len {
            return Err(DmaError::PastEnd { address, size, offset, file_len });
        }
        let region = MmapRegion::from_file(FileOffset::new(file, offset), len).map_err(|source| DmaError::Mmap {
            address,
            size,
            source,
        })?;
        let region =
            GuestRegionMmap::new(region, GuestAddress(address)).ok_or(DmaError::Range { address, size, flags })?;
        let next =
            current.insert_region(std::sync::Arc::new(region)).map_err(|_| DmaError::Overlap { address, size })?;
        guard.replace(next);
        Ok(Mapping::Direct)
    }

    /// Unmaps the region mapped at exactly `address..address+size`.
    pub fn unmap(&self, address: u64, size: u64) -> Result<Mapping, DmaError> {
        let guard = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let mut unreachable = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = unreachable.iter().position(|&r| r == (address, size)) {
            unreachable.remove(at);
            return Ok(Mapping::Unreachable);
        }
        let current = self.memory.memory();
        let (next, _) =
            current.remove_region(GuestAddress(address), size).map_err(|_| DmaError::NotMapped { address, size })?;
        guard.replace(next);
        Ok(Mapping::Direct)
    }

    /// Unmaps everything (client disconnect).
    pub fn clear(&self) {
        let guard = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        self.unreachable.lock().unwrap_or_else(|e| e.into_inner()).clear();
        guard.replace(GuestMemoryMmap::new());
    }

    /// Number of regions mapped without an fd.
    pub fn unreachable_count(&self) -> usize {
        self.unreachable.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Number of directly mapped regions.
    pub fn region_count(&self) -> usize {
        vm_memory::GuestMemoryBackend::num_regions(&*self.memory.memory())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::Bytes;

    fn memfd(size: u64) -> OwnedFd {
        let name = c"belfry-test";
        // SAFETY: memfd_create with a valid C string; the returned fd is checked and owned.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        File::from(owned.try_clone().unwrap()).set_len(size).unwrap();
        owned
    }

    #[test]
    fn map_read_write_unmap() {
        let ram = GuestRam::default();
        ram.map(0x10000, 0x4000, 0, 3, Some(memfd(0x4000))).unwrap();
        ram.memory().write_obj(0xdead_beefu32, GuestAddress(0x10010)).unwrap();
        assert_eq!(ram.memory().read_obj::<u32>(GuestAddress(0x10010)).unwrap(), 0xdead_beef);
        assert!(ram.memory().read_obj::<u32>(GuestAddress(0x14000)).is_err());
        assert_eq!(ram.unmap(0x10000, 0x1000).unwrap_err().errno(), libc::ENOENT);
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
        assert_eq!(ram.map(0xd0000, 0x1000, 0, 3, Some(memfd(0x1000))).unwrap_err().errno(), libc::EEXIST);
        assert_eq!(ram.map(0xc8000, 0x1000, 0, 3, None).unwrap_err().errno(), libc::EEXIST);
        ram.map(0x100000, 0x1000, 0, 3, Some(memfd(0x1000))).unwrap();
        assert_eq!(ram.map(0x100000, 0x1000, 0, 3, None).unwrap_err().errno(), libc::EEXIST);
        assert_eq!(ram.map(0, 0, 0, 3, None).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(ram.map(0, 0x1000, 0, 0x80, None).unwrap_err().errno(), libc::EINVAL);
        // Unmapped exactly, like any region; a partial unmap is refused.
        assert_eq!(ram.unmap(0xc0000, 0x1000).unwrap_err().errno(), libc::ENOENT);
        assert_eq!(ram.unmap(0xc0000, 0x20000).unwrap(), Mapping::Unreachable);
        assert_eq!(ram.unmap(0x100000, 0x1000).unwrap(), Mapping::Direct);
        assert_eq!((ram.region_count(), ram.unreachable_count()), (0, 0));
        ram.map(0xc0000, 0x20000, 0, 1, None).unwrap();
        ram.clear();
        assert_eq!(ram.unreachable_count(), 0);
    }

    #[test]
    fn bad_maps_are_refused() {
        let ram = GuestRam::default();
        assert_eq!(ram.map(0, 0, 0, 3, Some(memfd(0x1000))).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(ram.map(u64::MAX - 5, 0x1000, 0, 3, Some(memfd(0x1000))).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(ram.map(0, 0x1000, 0, 0x80, Some(memfd(0x1000))).unwrap_err().errno(), libc::EINVAL);
        ram.map(0x1000, 0x2000, 0, 3, Some(memfd(0x2000))).unwrap();
        assert_eq!(ram.map(0x2000, 0x2000, 0, 3, Some(memfd(0x2000))).unwrap_err().errno(), libc::EEXIST);
        ram.map(0x3000, 0x1000, 0, 3, Some(memfd(0x1000))).unwrap();
        assert_eq!(ram.region_count(), 2);
    }
}

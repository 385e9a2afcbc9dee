//! The IOVA windows the client mapped: each `DMA_MAP` is a window of device addresses onto a
//! range of one of the client's files, and each file is mmapped once, whole, however many
//! windows look into it.
//!
//! Without an IOMMU in the guest QEMU maps guest RAM in a few large windows. With one (an
//! `intel-iommu` or `virtio-iommu` device), every IOTLB entry the guest creates becomes a
//! `DMA_MAP` of one page (4 KiB, 2 MiB or 1 GiB), all onto the same memfd: a window per mmap
//! would spend one kernel mapping per guest page and meet `vm.max_map_count` long before
//! [`MAX_DMA_MAPS`](crate::vfio_user::protocol::MAX_DMA_MAPS). A window is therefore a view
//! (`MmapRegion::build_raw`) into its file's one mapping, carrying the access the client
//! granted as its protection, which [`DmaMemory`](super::DmaMemory) checks before every access.
//!
//! `DMA_UNMAP` removes a range, not a window: QEMU's IOMMU notifiers unmap whole address-space
//! ranges (a domain switch unmaps everything, an invalidation a power-of-two range), so every
//! window inside the range goes, a window the range cuts keeps the pages outside it (an IOMMU
//! unmaps pages, not the requests that mapped them), and a range with nothing mapped in it is
//! no error — the kernel's type1 IOMMU driver's rules, which QEMU's VFIO code is written for.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use vm_memory::{GuestAddress, GuestMemoryMmap, GuestMemoryRegion, GuestRegionMmap, MmapRegion};

use super::DmaError;

/// The granule of a window's file offset and of the cuts an unmap makes in a window.
pub const PAGE: u64 = 4096;

/// One of the client's files, mapped whole.
pub struct SharedFile {
    /// `(st_dev, st_ino)`: the same file sent again (another fd, another message) is found.
    id: (u64, u64),
    /// The mapping (read-write when the fd allows it, else read-only).
    map: MmapRegion,
    writable: bool,
}

impl SharedFile {
    /// Maps all `len` bytes of `file` shared, read-write if its fd allows, else read-only.
    pub fn map(file: File, id: (u64, u64), len: u64) -> Result<Arc<SharedFile>, std::io::Error> {
        let len = usize::try_from(len).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        let build = |prot| {
            MmapRegion::build(Some(vm_memory::FileOffset::new(file.try_clone()?, 0)), len, prot, libc::MAP_SHARED)
                .map_err(|e| std::io::Error::other(e.to_string()))
        };
        match build(libc::PROT_READ | libc::PROT_WRITE) {
            Ok(map) => Ok(Arc::new(SharedFile { id, map, writable: true })),
            Err(_) => Ok(Arc::new(SharedFile { id, map: build(libc::PROT_READ)?, writable: false })),
        }
    }

    /// Bytes mapped.
    pub fn len(&self) -> u64 {
        self.map.size() as u64
    }
}

/// A window's backing.
#[derive(Clone)]
enum Backing {
    /// A view into a shared file at `offset`.
    File { file: Arc<SharedFile>, offset: u64, region: Arc<GuestRegionMmap> },
    /// A region given whole (unit tests' anonymous memory): it cannot be cut.
    Fixed(Arc<GuestRegionMmap>),
    /// No fd came with it: recorded, unreachable by the device.
    Unreachable,
}

/// One window of device addresses.
#[derive(Clone)]
struct Window {
    size: u64,
    /// `PROT_*` the client granted.
    prot: i32,
    backing: Backing,
}

/// What an unmap removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unmapped {
    /// Bytes of windows the device could reach.
    pub direct: u64,
    /// Bytes of windows it could not (mapped without an fd).
    pub unreachable: u64,
}

/// The windows, by start address, and the files they look into.
#[derive(Default)]
pub struct Windows {
    by_start: BTreeMap<u64, Window>,
    files: Vec<Arc<SharedFile>>,
}

impl Windows {
    /// The regions given whole, as windows that cannot be cut.
    pub fn fixed(memory: &GuestMemoryMmap) -> Windows {
        let mut w = Windows::default();
        for r in vm_memory::GuestMemoryBackend::iter(memory) {
            let region = Arc::new(
                GuestRegionMmap::new(
                    // SAFETY: a view of a mapping `memory` owns; `memory` is kept by the
                    // GuestRam beside these windows for as long as they exist.
                    unsafe {
                        MmapRegion::build_raw(
                            r.as_ptr(),
                            usize::try_from(r.len()).expect("a mapped region's length fits"),
                            r.prot(),
                            libc::MAP_SHARED,
                        )
                        .expect("a view of an existing region")
                    },
                    r.start_addr(),
                )
                .expect("a region that already existed"),
            );
            let prot = r.prot();
            w.by_start.insert(r.start_addr().0, Window { size: r.len(), prot, backing: Backing::Fixed(region) });
        }
        w
    }

    /// Number of windows the device can reach and of those it cannot.
    pub fn counts(&self) -> (usize, usize) {
        let unreachable = self.by_start.values().filter(|w| matches!(w.backing, Backing::Unreachable)).count();
        (self.by_start.len() - unreachable, unreachable)
    }

    /// Whether `address..address+size` overlaps a window.
    pub fn overlaps(&self, address: u64, size: u64) -> bool {
        let end = address + size;
        self.by_start.range(..end).next_back().is_some_and(|(&start, w)| start + w.size > address)
    }

    /// The file with identity `id` mapped at least `len` bytes long, if one is.
    pub fn file(&self, id: (u64, u64), len: u64) -> Option<Arc<SharedFile>> {
        self.files.iter().find(|f| f.id == id && f.len() >= len).cloned()
    }

    /// Keeps `file` for later windows onto it (replacing a shorter mapping of the same file,
    /// which stays alive while windows use it).
    pub fn add_file(&mut self, file: Arc<SharedFile>) {
        self.files.retain(|f| f.id != file.id);
        self.files.push(file);
    }

    /// Adds a window onto `size` bytes of `file` at `offset` (checked: inside the file,
    /// page-aligned offset, no overlap) with protection `prot`.
    pub fn insert_file(
        &mut self,
        address: u64,
        size: u64,
        prot: i32,
        file: Arc<SharedFile>,
        offset: u64,
    ) -> Result<(), DmaError> {
        let range = DmaError::Range { address, size, flags: prot as u32 };
        if !offset.is_multiple_of(PAGE) || offset.checked_add(size).is_none_or(|end| end > file.len()) {
            return Err(range);
        }
        if prot & libc::PROT_WRITE != 0 && !file.writable {
            return Err(DmaError::NotWritable { address, size });
        }
        let region = view(&file, offset, address, size, prot).ok_or(range)?;
        self.by_start.insert(address, Window { size, prot, backing: Backing::File { file, offset, region } });
        Ok(())
    }

    /// Records a window without an fd.
    pub fn insert_unreachable(&mut self, address: u64, size: u64, prot: i32) {
        self.by_start.insert(address, Window { size, prot, backing: Backing::Unreachable });
    }

    /// Removes `address..address+size` from every window it touches: windows inside it go, a
    /// window it cuts keeps its pages outside it. Refused, changing nothing, when a cut is not
    /// a whole number of pages into a window, or cuts a window that cannot be cut.
    pub fn remove_range(&mut self, address: u64, size: u64) -> Result<Unmapped, DmaError> {
        // The range may end exactly at 2^64 (QEMU unmaps an IOMMU's section up to the top of
        // the address space), so it is held by its last byte.
        let last = size.checked_sub(1).and_then(|s| address.checked_add(s)).ok_or(DmaError::Range {
            address,
            size,
            flags: 0,
        })?;
        let first = self.by_start.range(..=address).next_back().filter(|(&s, w)| s + w.size > address).map(|(&s, _)| s);
        let from = first.unwrap_or(address);
        let touched: Vec<u64> = self.by_start.range(from..=last).map(|(&s, _)| s).collect();
        // Every part a cut keeps, built (and checked) before anything changes. A window never
        // reaches 2^64 (a map's end must fit), so `w_last + 1` cannot overflow.
        let mut parts = Vec::new();
        for &start in &touched {
            let w = &self.by_start[&start];
            let w_last = start + (w.size - 1);
            let left = (start < address).then(|| (start, address - start, 0));
            let right = (w_last > last).then(|| (last + 1, w_last - last, last + 1 - start));
            let cuts_on_pages = (address.max(start) - start).is_multiple_of(PAGE)
                && (last.min(w_last) + 1 - start).is_multiple_of(PAGE);
            for (at, len, skip) in left.into_iter().chain(right) {
                let cut = DmaError::Cut { address, size, window: start };
                let backing = match &w.backing {
                    Backing::Unreachable => Backing::Unreachable,
                    Backing::File { file, offset, .. } if cuts_on_pages => {
                        let offset = offset + skip;
                        let region = view(file, offset, at, len, w.prot).ok_or(cut)?;
                        Backing::File { file: file.clone(), offset, region }
                    }
                    _ => return Err(cut),
                };
                parts.push((at, Window { size: len, prot: w.prot, backing }));
            }
        }
        let mut gone = Unmapped::default();
        for start in touched {
            let w = self.by_start.remove(&start).expect("listed above");
            let inside = (start + (w.size - 1)).min(last) + 1 - start.max(address);
            match w.backing {
                Backing::Unreachable => gone.unreachable += inside,
                _ => gone.direct += inside,
            }
        }
        self.by_start.extend(parts);
        Ok(gone)
    }

    /// Removes every window.
    pub fn clear(&mut self) -> Unmapped {
        let mut gone = Unmapped::default();
        for w in std::mem::take(&mut self.by_start).into_values() {
            match w.backing {
                Backing::Unreachable => gone.unreachable += w.size,
                _ => gone.direct += w.size,
            }
        }
        gone
    }

    /// Forgets the files no window looks into any more. Call only once no snapshot of guest
    /// memory taken before their last window went can still be in use.
    pub fn release_unused_files(&mut self) {
        let used: Vec<(u64, u64)> = self
            .by_start
            .values()
            .filter_map(|w| match &w.backing {
                Backing::File { file, .. } => Some(file.id),
                _ => None,
            })
            .collect();
        self.files.retain(|f| used.contains(&f.id));
    }

    /// Number of files mapped.
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// The guest memory the device reaches: the windows that have a mapping, in order.
    pub fn memory(&self) -> GuestMemoryMmap {
        let regions: Vec<Arc<GuestRegionMmap>> = self
            .by_start
            .values()
            .filter_map(|w| match &w.backing {
                Backing::File { region, .. } | Backing::Fixed(region) => Some(region.clone()),
                Backing::Unreachable => None,
            })
            .collect();
        if regions.is_empty() {
            return GuestMemoryMmap::new();
        }
        GuestMemoryMmap::from_arc_regions(regions).expect("windows are sorted and do not overlap")
    }
}

/// A view of `size` bytes of `file` at `offset`, at device address `address`, with `prot`.
fn view(file: &Arc<SharedFile>, offset: u64, address: u64, size: u64, prot: i32) -> Option<Arc<GuestRegionMmap>> {
    let len = usize::try_from(size).ok()?;
    let at = usize::try_from(offset).ok()?;
    // SAFETY: offset + size is inside the file's mapping (checked by the callers), and the
    // mapping outlives the view: the window holding the view holds the file's Arc, and a file
    // is released only after every snapshot that could hold the view has been dropped.
    let region = unsafe { MmapRegion::build_raw(file.map.as_ptr().add(at), len, prot, libc::MAP_SHARED) }.ok()?;
    GuestRegionMmap::new(region, GuestAddress(address)).map(Arc::new)
}

//! A raw shared mapping of a device file's mmap offset, probed without touching it: which
//! bytes still read (a `write` of them into a memfd fails with EFAULT where a page was zapped
//! and cannot fault back in, where a load would SIGBUS the suite) and the file offset the
//! kernel keeps for it (`/proc/self/maps`); and a direct store, for a child whose death by
//! `SIGBUS` is the point.
#![allow(unsafe_code)] // mmap, munmap, memfd_create, write, a volatile store.

use std::io;

/// A `MAP_SHARED` read/write mapping, unmapped on drop.
#[derive(Debug)]
pub struct RawMapping {
    ptr: *mut u8,
    len: usize,
}

impl Drop for RawMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl RawMapping {
    /// Maps `len` bytes at `offset` of `fd`, shared, readable and writable.
    ///
    /// # Errors
    /// `mmap`'s errno.
    pub fn new(fd: i32, offset: u64, len: usize) -> Result<RawMapping, i32> {
        let off = libc::off_t::try_from(offset).map_err(|_| libc::EINVAL)?;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh shared mapping chosen by the kernel; unmapped on drop.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, off) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(RawMapping { ptr: p.cast(), len })
    }

    /// Copies `bytes` into the mapping at byte `at`, then a release fence (what a submitter's
    /// ring writes are).
    ///
    /// # Panics
    /// If `at + bytes.len()` is past the mapping.
    pub fn store(&self, at: usize, bytes: &[u8]) {
        assert!(at.checked_add(bytes.len()).is_some_and(|end| end <= self.len), "store past the mapping");
        for (i, b) in bytes.iter().enumerate() {
            // SAFETY: `at + i` lies in the live mapping (checked above).
            unsafe { self.ptr.add(at + i).write_volatile(*b) };
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    }

    /// The `u32` at byte `at` (4-byte aligned).
    ///
    /// # Panics
    /// If `at` is unaligned or past the mapping.
    pub fn load_u32(&self, at: usize) -> u32 {
        assert!(at.is_multiple_of(4) && at + 4 <= self.len, "load of {at} outside the mapping");
        // SAFETY: `at` is aligned and lies in the live mapping (checked above).
        unsafe { self.ptr.add(at).cast::<u32>().read_volatile() }
    }

    /// Stores `value` at every 4 KiB page's first `u64` (the page index in the high half).
    pub fn stamp_pages(&self, value: u32) {
        for page in 0..self.len / 4096 {
            // SAFETY: the offset lies in the live mapping and is 8-byte aligned.
            unsafe { self.ptr.add(page * 4096).cast::<u64>().write_volatile(stamp(page, value)) };
        }
    }

    /// Stores `value` at byte `offset` (8-byte aligned, inside the mapping) from this process:
    /// where the mapping shows no page the store raises `SIGBUS`, so call it in a child that
    /// may die of it (`harness::proc`).
    pub fn store_u64(&self, offset: usize, value: u64) {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.len, "store at {offset:#x} outside the mapping");
        // SAFETY: the offset lies in the live mapping and is 8-byte aligned (checked above).
        unsafe { self.ptr.add(offset).cast::<u64>().write_volatile(value) };
    }

    /// The mapping's bytes, read through the kernel (so a zapped page is an error, not a
    /// SIGBUS).
    ///
    /// # Errors
    /// Where a kernel copy of the mapping stops, or `memfd`/`write`'s errno.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        self.copy_through_kernel()
    }

    /// The first page whose first `u64` is not what [`Self::stamp_pages`] stored, read through
    /// the kernel (so a zapped page is an error, not a SIGBUS).
    ///
    /// # Errors
    /// The page a kernel copy of the mapping stops at, or `memfd`/`write`'s errno.
    pub fn check_stamps(&self, value: u32) -> Result<(), String> {
        let copy = self.copy_through_kernel()?;
        for page in 0..self.len / 4096 {
            let mut word = [0u8; 8];
            word.copy_from_slice(&copy[page * 4096..page * 4096 + 8]);
            let got = u64::from_le_bytes(word);
            if got != stamp(page, value) {
                return Err(format!("page {page} reads {got:#x}, expected {:#x}", stamp(page, value)));
            }
        }
        Ok(())
    }

    /// The mapping's bytes, copied by `write` into a memfd and read back.
    fn copy_through_kernel(&self) -> Result<Vec<u8>, String> {
        // SAFETY: a NUL-terminated name; the fd is closed below.
        let fd = unsafe { libc::memfd_create(c"belfry-probe".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("memfd_create: {}", io::Error::last_os_error()));
        }
        let mut done = 0;
        let mut failure = None;
        while done < self.len {
            // SAFETY: `ptr+done..ptr+len` lies in the live mapping; the kernel copies from it and
            // reports a fault as EFAULT or a short count.
            let n = unsafe { libc::write(fd, self.ptr.add(done).cast(), self.len - done) };
            if n <= 0 {
                let err = io::Error::last_os_error();
                failure =
                    Some(format!("the mapping no longer reads from byte {done:#x} (page {}): {err}", done / 4096));
                break;
            }
            done += n as usize; // CAST: n > 0.
        }
        let mut out = vec![0u8; self.len];
        if failure.is_none() {
            // SAFETY: `out` has room for `len` bytes; `fd` holds exactly them.
            let n = unsafe { libc::pread(fd, out.as_mut_ptr().cast(), self.len, 0) };
            if n != self.len as isize {
                failure = Some(format!("pread of the copy: {n}"));
            }
        }
        // SAFETY: `fd` is the memfd created above, closed once.
        unsafe { libc::close(fd) };
        failure.map_or(Ok(out), Err)
    }

    /// The file offset `/proc/self/maps` shows for the mapping (the VMA's `vm_pgoff`, in
    /// bytes).
    ///
    /// # Errors
    /// The mapping is not listed, or the file cannot be read.
    pub fn maps_offset(&self) -> Result<u64, String> {
        let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| format!("/proc/self/maps: {e}"))?;
        let start = format!("{:x}-", self.ptr as usize);
        let line = maps.lines().find(|l| l.starts_with(&start)).ok_or("mapping not in /proc/self/maps")?;
        let offset = line.split_whitespace().nth(2).ok_or("no offset column")?;
        u64::from_str_radix(offset, 16).map_err(|e| format!("offset {offset}: {e}"))
    }
}

/// What [`RawMapping::stamp_pages`] stores in `page`.
fn stamp(page: usize, value: u32) -> u64 {
    ((page as u64) << 32) | u64::from(value) // CAST: page counts fit in 32 bits.
}

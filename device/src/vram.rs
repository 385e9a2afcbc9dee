//! Device memory (VRAM): the memory behind the VRAM BAR.
//!
//! It is anonymous memory of the device process, reached by the CPU only through trapped
//! `REGION_READ`/`REGION_WRITE` (slow by design: mapping it would turn off QEMU's posted writes
//! for the whole device) and by the command processor directly.

use vm_memory::{Bytes, MmapRegion, VolatileMemory};

use crate::record::{ticket, RecordSlot};

/// The word every 8 bytes of VRAM hold after a D3hot → D0 return on a device that loses VRAM
/// in D3 (`--vram-lost-in-d3`).
pub const LOST_PATTERN: u64 = 0xDEAD_D3D3_DEAD_D3D3;

/// Device memory.
pub struct Vram {
    region: MmapRegion,
    /// The input recorder or the replay's turnstile, if the device records or replays: every
    /// access is ordered (a ticket each), because VRAM is the device's own memory that several
    /// threads read and write (engines, the command processor's fence updates, BAR accesses)
    /// and a replay rebuilds it from what its threads do, so it must do it in the recorded
    /// order — an engine's look at a MonitoredValue in VRAM sees the command processor's store
    /// or not as the run did.
    pub recording: RecordSlot,
}

impl Vram {
    /// `size` bytes of zeroed device memory.
    pub fn new(size: u64) -> std::io::Result<Self> {
        let len = usize::try_from(size).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let region = MmapRegion::new(len).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Vram { region, recording: RecordSlot::default() })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.region.size() as u64
    }

    /// Reads `buf.len()` bytes at `offset`; `None` if out of range.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Option<()> {
        let off = usize::try_from(offset).ok()?;
        let slice = self.region.get_slice(off, buf.len()).ok()?;
        self.recording.ordered(ticket, || slice.read_slice(buf, 0).ok())
    }

    /// Writes `data` at `offset`; `None` if out of range.
    pub fn write(&self, offset: u64, data: &[u8]) -> Option<()> {
        let off = usize::try_from(offset).ok()?;
        let slice = self.region.get_slice(off, data.len()).ok()?;
        self.recording.ordered(ticket, || slice.write_slice(data, 0).ok())
    }
}

impl Vram {
    /// Loses every byte (a power-up after D3hot on a device that does not keep VRAM powered):
    /// all of VRAM becomes [`LOST_PATTERN`].
    pub fn lose(&self) {
        let chunk: Vec<u8> = LOST_PATTERN.to_le_bytes().iter().copied().cycle().take(1 << 16).collect();
        let mut off = 0usize;
        while off < self.region.size() {
            let len = (self.region.size() - off).min(chunk.len());
            let _ = self.write(off as u64, &chunk[..len]);
            off += len;
        }
    }

    fn atomic<T>(&self, offset: u64) -> Option<*const T> {
        let off = usize::try_from(offset).ok()?;
        let end = off.checked_add(std::mem::size_of::<T>())?;
        if end > self.region.size() || !off.is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        // SAFETY: `off` is in bounds of the mapping (checked above), which lives as long as `self`.
        Some(unsafe { self.region.as_ptr().add(off) }.cast::<T>().cast_const())
    }

    /// Atomic 64-bit load at an 8-byte aligned offset.
    pub fn load_u64(&self, offset: u64, order: std::sync::atomic::Ordering) -> Option<u64> {
        let p = self.atomic::<std::sync::atomic::AtomicU64>(offset)?;
        // SAFETY: `p` is aligned and in bounds; the mapping is only ever accessed through atomics
        // or volatile copies, never through Rust references to non-atomic data.
        Some(self.recording.ordered(ticket, || unsafe { &*p }.load(order)))
    }

    /// Atomic 64-bit store at an 8-byte aligned offset.
    pub fn store_u64(&self, offset: u64, value: u64, order: std::sync::atomic::Ordering) -> Option<()> {
        let p = self.atomic::<std::sync::atomic::AtomicU64>(offset)?;
        // SAFETY: as in `load_u64`.
        self.recording.ordered(ticket, || unsafe { &*p }.store(value, order));
        Some(())
    }

    /// Atomic 32-bit store at a 4-byte aligned offset.
    pub fn store_u32(&self, offset: u64, value: u32, order: std::sync::atomic::Ordering) -> Option<()> {
        let p = self.atomic::<std::sync::atomic::AtomicU32>(offset)?;
        // SAFETY: as in `load_u64`.
        self.recording.ordered(ticket, || unsafe { &*p }.store(value, order));
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_writes_and_refuses_out_of_range() {
        let vram = Vram::new(1 << 20).unwrap();
        vram.write(100, b"belfry").unwrap();
        let mut buf = [0u8; 6];
        vram.read(100, &mut buf).unwrap();
        assert_eq!(&buf, b"belfry");
        assert!(vram.read((1 << 20) - 2, &mut buf).is_none());
        assert!(vram.write(u64::MAX, b"x").is_none());
    }
}

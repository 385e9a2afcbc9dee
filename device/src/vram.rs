//! Device memory (VRAM): the memory behind the VRAM BAR.
//!
//! It is anonymous memory of the device process, reached by the CPU only through trapped
//! `REGION_READ`/`REGION_WRITE` (slow by design: mapping it would turn off QEMU's posted writes
//! for the whole device) and by the command processor directly.

use vm_memory::{Bytes, MmapRegion, VolatileMemory};

/// Device memory.
pub struct Vram {
    region: MmapRegion,
}

impl Vram {
    /// `size` bytes of zeroed device memory.
    pub fn new(size: u64) -> std::io::Result<Self> {
        let len = usize::try_from(size).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let region = MmapRegion::new(len).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Vram { region })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.region.size() as u64
    }

    /// Reads `buf.len()` bytes at `offset`; `None` if out of range.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Option<()> {
        let off = usize::try_from(offset).ok()?;
        let slice = self.region.get_slice(off, buf.len()).ok()?;
        slice.read_slice(buf, 0).ok()
    }

    /// Writes `data` at `offset`; `None` if out of range.
    pub fn write(&self, offset: u64, data: &[u8]) -> Option<()> {
        let off = usize::try_from(offset).ok()?;
        let slice = self.region.get_slice(off, data.len()).ok()?;
        slice.write_slice(data, 0).ok()
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

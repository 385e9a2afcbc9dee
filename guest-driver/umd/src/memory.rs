//! GPU memory: an allocation has a GPU VA in its context's address space and a CPU mapping in
//! the process, reached through bounds-checked copies (the GPU may write it at any time, so no
//! Rust reference into it is ever handed out).

use std::sync::Arc;

use belfry_abi::uapi;

use crate::error::{Error, Result};
use crate::handle::{ContextInner, OwnedHandle};
use crate::sys::{self, Access, Mapping};

/// GPU memory with a CPU mapping; freed on drop.
///
/// Drop order (field order): the CPU mapping is unmapped, then `FREE`, then the context
/// reference is released (destroying the context if this was the last user).
#[derive(Debug)]
pub struct Allocation {
    map: Mapping,
    handle: OwnedHandle,
    _ctx: Arc<ContextInner>,
    size: u64,
    gpu_va: u64,
}

impl Allocation {
    pub(crate) fn new(ctx: Arc<ContextInner>, size: u64, flags: u32) -> Result<Allocation> {
        if size == 0 {
            return Err(Error::Invalid("zero-sized allocation"));
        }
        let file = ctx.file().clone();
        let mut arg = uapi::Alloc { context: ctx.handle.get(), flags, size, ..Default::default() };
        file.ioctl(sys::ALLOC, &mut arg)?;
        let handle = OwnedHandle::new(file.clone(), arg.handle, sys::FREE);
        let len = usize::try_from(size).map_err(|_| Error::Invalid("allocation larger than the address space"))?;
        let map = Mapping::new(file.fd(), arg.mmap_offset, len, Access::ReadWrite)
            .map_err(|source| Error::Map { what: "allocation", source })?;
        Ok(Allocation { map, handle, _ctx: ctx, size, gpu_va: arg.gpu_va })
    }

    /// The module's handle.
    pub fn handle(&self) -> u32 {
        self.handle.get()
    }

    /// GPU VA of byte 0.
    pub fn gpu_va(&self) -> u64 {
        self.gpu_va
    }

    /// Size requested (the mapping may be longer, up to the page).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// GPU VA of byte `offset` (bounds checked against the size).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn va_at(&self, offset: u64) -> Result<u64> {
        self.check(offset, 0)?;
        Ok(self.gpu_va + offset)
    }

    fn check(&self, offset: u64, len: u64) -> Result<usize> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(offset as usize), // CAST: offset < size ≤ usize::MAX (mapped).
            _ => Err(Error::OutOfBounds { offset, len, size: self.size }),
        }
    }

    /// Copies `buf.len()` bytes at `offset` out of the allocation.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.check(offset, buf.len() as u64)?;
        self.map.read_bytes(at, buf);
        Ok(())
    }

    /// Copies `data` into the allocation at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.check(offset, data.len() as u64)?;
        self.map.write_bytes(at, data);
        Ok(())
    }

    /// Fills `len` bytes at `offset` with `byte`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn fill(&mut self, offset: u64, len: u64, byte: u8) -> Result<()> {
        let at = self.check(offset, len)?;
        self.map.write_bytes(at, &vec![byte; len as usize]);
        Ok(())
    }

    /// Reads a little-endian `u32` at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn read_u32(&self, offset: u64) -> Result<u32> {
        let mut b = [0; 4];
        self.read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads a little-endian `u64` at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn read_u64(&self, offset: u64) -> Result<u64> {
        let mut b = [0; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian `u32` at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn write_u32(&mut self, offset: u64, value: u32) -> Result<()> {
        self.write(offset, &value.to_le_bytes())
    }

    /// Writes a little-endian `u64` at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn write_u64(&mut self, offset: u64, value: u64) -> Result<()> {
        self.write(offset, &value.to_le_bytes())
    }

    /// The mapping, for the queue's atomic accesses to ring control.
    pub(crate) fn mapping(&self) -> &Mapping {
        &self.map
    }
}

//! Video memory and split DMA buffers: [`VideoAllocation`]s the module's memory manager places
//! (VRAM preferred, system memory as fallback — also for work that needs it while VRAM cannot
//! hold it, counted in [`uapi::MmStats`]`::fallback_placements` — or VRAM only), [`SplitBuffer`], a kernel-mode command buffer
//! with its allocation list and patch-location list, and [`SplitQueue`], a kernel-mode queue
//! that runs such buffers with `SUBMIT_SPLIT`.
//!
//! A split buffer binds allocations to the slots of the device's resource table with
//! `BIND_SLOT` packets whose address the module patches in. Its rules, from the reference:
//! every bind and unbind declares a split point (SPLIT-13); at each split point the buffer binds
//! again every slot still in use (the device keeps no binding across a command buffer, so a part
//! starting there must program its state anew — SPLIT-05 — and each re-bound allocation is free
//! to move between parts — SPLIT-15, SPLIT-16); [`SplitBuffer::finish`] unbinds what is still
//! bound (SPLIT-14). CPU access to a video allocation goes through `ALLOCATION_RW`, which moves it
//! to system memory first ([`VideoAllocation::read`], [`VideoAllocation::write`]).

use std::sync::Arc;

use belfry_abi::{packet, uapi};

use crate::cmdbuf::CommandBuffer;
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::handle::{ContextInner, OwnedHandle};
use crate::memory::Allocation;
use crate::sys;

/// Where an allocation prefers to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Segment {
    /// Device memory, falling back to system memory when evicted, and when work needs it while
    /// VRAM cannot hold it (larger than VRAM, or not fitting beside the other allocations that
    /// work needs at once): the work then uses it in system memory.
    Vram,
    /// System memory only.
    System,
    /// Device memory only, with no fallback: work that needs it while VRAM cannot hold it fails
    /// ([`SplitQueue::submit`]: `E2BIG`).
    VramOnly,
}

/// An allocation the module's memory manager places and moves; its GPU VA never changes.
#[derive(Debug)]
pub struct VideoAllocation {
    handle: OwnedHandle,
    _ctx: Arc<ContextInner>,
    gpu_va: u64,
    size: u64,
}

impl VideoAllocation {
    /// `size` bytes (a multiple of 4096) in `ctx`, preferring `segment`.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`CREATE_ALLOCATION`).
    pub fn new(ctx: &Context, size: u64, segment: Segment) -> Result<VideoAllocation> {
        let inner = ctx.inner().clone();
        let (preferred, fallback) = match segment {
            Segment::Vram => (uapi::SEGMENT_VRAM, uapi::SEGMENT_SYSTEM),
            Segment::System => (uapi::SEGMENT_SYSTEM, uapi::SEGMENT_SYSTEM),
            Segment::VramOnly => (uapi::SEGMENT_VRAM, uapi::SEGMENT_NONE),
        };
        let mut arg =
            uapi::CreateAllocation { context: inner.handle.get(), preferred, fallback, size, ..Default::default() };
        inner.file().ioctl(sys::CREATE_ALLOCATION, &mut arg)?;
        let handle = OwnedHandle::new(inner.file().clone(), arg.handle, sys::DESTROY_ALLOCATION);
        Ok(VideoAllocation { handle, _ctx: inner, gpu_va: arg.gpu_va, size })
    }

    /// The module's handle.
    pub fn handle(&self) -> u32 {
        self.handle.get()
    }

    /// GPU VA of byte 0.
    pub fn gpu_va(&self) -> u64 {
        self.gpu_va
    }

    /// Bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn rw(&self, offset: u64, ptr: u64, len: usize, write: bool) -> Result<()> {
        let mut arg = uapi::AllocationRw {
            handle: self.handle(),
            write: u32::from(write),
            offset,
            size: len as u64,
            user_ptr: ptr,
        };
        self.handle.file().ioctl(sys::ALLOCATION_RW, &mut arg)
    }

    /// Reads `buf.len()` bytes at `offset` (the module moves the allocation to system memory
    /// first if it is in VRAM).
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`ALLOCATION_RW`).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.rw(offset, buf.as_mut_ptr() as u64, buf.len(), false)
    }

    /// Writes `data` at `offset` (the module moves the allocation to system memory first if it
    /// is in VRAM).
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`ALLOCATION_RW`).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.rw(offset, data.as_ptr() as u64, data.len(), true)
    }
}

/// A kernel-mode command buffer with its allocation list and patch-location list.
#[derive(Debug)]
pub struct SplitBuffer {
    cmds: CommandBuffer,
    allocations: Vec<u32>,
    patches: Vec<uapi::PatchLocation>,
    /// Per slot: the allocation bound there (handle, size).
    bound: Vec<Option<(u32, u64)>>,
}

impl SplitBuffer {
    /// An empty buffer for a device whose resource table has `slots` slots
    /// ([`Device::mm_stats`]`.slots`).
    pub fn new(slots: u32) -> SplitBuffer {
        SplitBuffer {
            cmds: CommandBuffer::new(),
            allocations: Vec::new(),
            patches: Vec::new(),
            bound: vec![None; slots as usize],
        }
    }

    /// Binds `alloc` to `slot`: a split point (SPLIT-13).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a slot past the table; the packet errors.
    pub fn bind(&mut self, slot: u32, alloc: &VideoAllocation) -> Result<&mut Self> {
        self.split_point(&[(slot, Some((alloc.handle(), alloc.size())))])
    }

    /// Binds several slots at one split point.
    ///
    /// # Errors
    /// As [`Self::bind`].
    pub fn bind_all(&mut self, binds: &[(u32, &VideoAllocation)]) -> Result<&mut Self> {
        let changes: Vec<_> = binds.iter().map(|(s, a)| (*s, Some((a.handle(), a.size())))).collect();
        self.split_point(&changes)
    }

    /// Unbinds `slot` (a NULL allocation in the list): a split point (SPLIT-13).
    ///
    /// # Errors
    /// As [`Self::bind`].
    pub fn unbind(&mut self, slot: u32) -> Result<&mut Self> {
        self.split_point(&[(slot, None)])
    }

    /// Unbinds every slot still bound (SPLIT-14: large resources are released when done).
    ///
    /// # Errors
    /// As [`Self::bind`].
    pub fn finish(&mut self) -> Result<&mut Self> {
        let changes: Vec<_> =
            self.bound.iter().enumerate().filter(|(_, b)| b.is_some()).map(|(s, _)| (s as u32, None)).collect();
        if changes.is_empty() {
            return Ok(self);
        }
        self.split_point(&changes)
    }

    /// A split point here: `changes` applied, then a `BIND_SLOT` for every changed slot and
    /// every slot still bound (re-emitted state, SPLIT-05, SPLIT-15), each named in the lists.
    fn split_point(&mut self, changes: &[(u32, Option<(u32, u64)>)]) -> Result<&mut Self> {
        let offset = u32::try_from(self.cmds.len()).map_err(|_| Error::Invalid("buffer too large"))?;
        let mut emit: Vec<(u32, Option<(u32, u64)>)> = Vec::new();
        for &(slot, b) in changes {
            *self.bound.get_mut(slot as usize).ok_or(Error::Invalid("slot past the resource table"))? = b;
            emit.push((slot, b));
        }
        for (slot, b) in self.bound.iter().enumerate() {
            let slot = slot as u32;
            if b.is_some() && !emit.iter().any(|(s, _)| *s == slot) {
                emit.push((slot, *b));
            }
        }
        for (slot, b) in emit {
            let at = u32::try_from(self.cmds.len()).map_err(|_| Error::Invalid("buffer too large"))?;
            self.cmds.bind_slot(slot, 0, 0)?;
            self.patches.push(uapi::PatchLocation {
                allocation_index: self.allocations.len() as u32,
                slot_id: slot,
                split_offset: offset,
                patch_offset: at + packet::BIND_SLOT_PATCH_OFFSET,
            });
            self.allocations.push(b.map_or(0, |(h, _)| h));
        }
        Ok(self)
    }

    /// `SLOT_COPY` through the current bindings.
    ///
    /// # Errors
    /// The packet errors.
    pub fn slot_copy(
        &mut self,
        src_slot: u32,
        src_offset: u64,
        dst_slot: u32,
        dst_offset: u64,
        size: u32,
    ) -> Result<&mut Self> {
        self.cmds.slot_copy(src_slot, src_offset, dst_slot, dst_offset, size)?;
        Ok(self)
    }

    /// The packets, for packets between split points.
    pub fn commands(&mut self) -> &mut CommandBuffer {
        &mut self.cmds
    }

    /// The buffer's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.cmds.as_bytes()
    }

    /// The allocation list (handles, 0 for an unbind).
    pub fn allocations(&self) -> &[u32] {
        &self.allocations
    }

    /// The patch-location list.
    pub fn patches(&self) -> &[uapi::PatchLocation] {
        &self.patches
    }
}

/// A kernel-mode queue that runs [`SplitBuffer`]s (`SUBMIT_SPLIT`, which returns once the
/// buffer has run) and its command-buffer allocation.
#[derive(Debug)]
pub struct SplitQueue {
    cmdbuf: Allocation,
    handle: OwnedHandle,
    value: u64,
}

/// Bytes of a split queue's command-buffer allocation.
const SPLIT_CMDBUF_BYTES: u64 = 1 << 20;

impl SplitQueue {
    /// A kernel-mode queue on `engine` in `ctx`.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`ALLOC`, `CREATE_QUEUE`), [`Error::Map`].
    pub fn new(ctx: &Context, engine: u32) -> Result<SplitQueue> {
        let cmdbuf = ctx.alloc(SPLIT_CMDBUF_BYTES, 0)?;
        let inner = ctx.inner();
        let mut arg = uapi::CreateQueue {
            context: inner.handle.get(),
            engine,
            priority: 1,
            ring_entries: 16,
            ..Default::default()
        };
        inner.file().ioctl(sys::CREATE_QUEUE, &mut arg)?;
        let handle = OwnedHandle::new(inner.file().clone(), arg.handle, sys::DESTROY_QUEUE);
        Ok(SplitQueue { cmdbuf, handle, value: 0 })
    }

    /// The module's queue handle.
    pub fn handle(&self) -> u32 {
        self.handle.get()
    }

    /// Runs `buf`; the number of parts it ran in.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a buffer past the command-buffer allocation; [`Error::Ioctl`]
    /// (`SUBMIT_SPLIT`: `E2BIG` when one split point needs more VRAM for its
    /// [`Segment::VramOnly`] allocations than the device can give them).
    pub fn submit(&mut self, buf: &SplitBuffer) -> Result<u32> {
        self.submit_with(buf, &buf.patches)
    }

    /// Runs `buf` with the patch-location list `patches` instead of its own (tests of the
    /// module's checks).
    ///
    /// # Errors
    /// As [`Self::submit`].
    pub fn submit_with(&mut self, buf: &SplitBuffer, patches: &[uapi::PatchLocation]) -> Result<u32> {
        let bytes = buf.as_bytes();
        if bytes.len() as u64 > SPLIT_CMDBUF_BYTES {
            return Err(Error::Invalid("split buffer larger than its allocation"));
        }
        self.cmdbuf.write(0, bytes)?;
        let mut arg = uapi::SubmitSplit {
            queue: self.handle(),
            cmdbuf: self.cmdbuf.handle(),
            offset: 0,
            size: bytes.len() as u32,
            progress_value: self.value + 1,
            allocation_count: buf.allocations.len() as u32,
            patch_count: patches.len() as u32,
            allocations: buf.allocations.as_ptr() as u64,
            patches: patches.as_ptr() as u64,
            ..Default::default()
        };
        self.handle.file().ioctl(sys::SUBMIT_SPLIT, &mut arg)?;
        self.value += 1;
        Ok(arg.parts)
    }
}

impl Device {
    /// The memory manager's counters (`MM_STATS`).
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn mm_stats(&self) -> Result<uapi::MmStats> {
        let mut arg = uapi::MmStats::default();
        self.file.ioctl(sys::MM_STATS, &mut arg)?;
        Ok(arg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmdbuf::{decode, Packet};

    /// proves: SPLIT-05, SPLIT-13, SPLIT-14, SPLIT-15 — every bind and unbind is a split point,
    /// each split point binds every slot still in use again (the state a part starting there
    /// needs), and `finish` unbinds what is left.
    #[test]
    fn split_points_rebind_every_slot_in_use_and_finish_unbinds() {
        let mut b = SplitBuffer::new(4);
        b.split_point(&[(0, Some((7, 0x1000)))]).unwrap();
        b.slot_copy(0, 0, 0, 0x800, 0x100).unwrap();
        let second = b.as_bytes().len() as u32;
        b.split_point(&[(2, Some((9, 0x2000)))]).unwrap();
        let third = b.as_bytes().len() as u32;
        b.split_point(&[(0, None)]).unwrap();
        let fourth = b.as_bytes().len() as u32;
        b.finish().unwrap();
        let split = |p: &uapi::PatchLocation| (p.split_offset, p.slot_id, b.allocations()[p.allocation_index as usize]);
        let got: Vec<_> = b.patches().iter().map(split).collect();
        assert_eq!(
            got,
            [(0, 0, 7), (second, 2, 9), (second, 0, 7), (third, 0, 0), (third, 2, 9), (fourth, 2, 0)],
            "each split point re-binds the slots in use; unbinds are NULL entries"
        );
        // Every patch location is the `va` of a BIND_SLOT of its slot.
        let bytes = b.as_bytes();
        for p in b.patches() {
            let at = (p.patch_offset - packet::BIND_SLOT_PATCH_OFFSET) as usize;
            match &decode(&bytes[at..at + 24]).unwrap()[..] {
                [Packet::BindSlot(bind)] => assert_eq!((bind.slot, bind.va, bind.size), (p.slot_id, 0, 0)),
                other => panic!("not a BIND_SLOT at {at}: {other:?}"),
            }
        }
        assert!(b.bound.iter().all(Option::is_none), "finish unbinds everything");
        assert!(b.split_point(&[(4, None)]).is_err(), "slot 4 of 4");
    }
}

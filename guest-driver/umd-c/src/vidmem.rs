//! Video memory: allocations the kernel module's memory manager places and moves (VRAM
//! preferred, system memory as fallback; the GPU VA never changes), read and written by the CPU
//! through the module, and used by the GPU through split buffers: a kernel-mode command buffer
//! that binds allocations to resource-table slots, whose addresses the module patches in at
//! submission (`SUBMIT_SPLIT`).

use core::ffi::{c_int, c_void};

use belfry_umd::{Segment, SplitBuffer, SplitQueue, VideoAllocation};

use crate::errors::{fail, invalid, Code};
use crate::{ptr, BelfryContext};

/// A video-memory allocation.
pub struct BelfryVideoAllocation(VideoAllocation);
/// A split buffer being built (packets, allocation list, patch-location list).
pub struct BelfrySplitBuffer(SplitBuffer);
/// A kernel-mode queue that runs split buffers.
pub struct BelfrySplitQueue(SplitQueue);

/// `belfry_vidmem_create` segment: VRAM preferred, system memory when evicted or when VRAM
/// cannot hold it beside what a split buffer needs at once.
pub const BELFRY_SEGMENT_VRAM: u32 = 1;
/// `belfry_vidmem_create` segment: system memory only.
pub const BELFRY_SEGMENT_SYSTEM: u32 = 2;
/// `belfry_vidmem_create` segment: VRAM only, no fallback (`belfry_split_submit` fails with
/// `-E2BIG` when VRAM cannot hold it).
pub const BELFRY_SEGMENT_VRAM_ONLY: u32 = 3;

/// Creates a video-memory allocation of `size` bytes (a multiple of 4096) in `ctx`,
/// preferring `segment` (`BELFRY_SEGMENT_*`).
///
/// Errors: `-EINVAL` (size, segment), `-ENOSPC`, `-ENOMEM`.
///
/// # Safety
/// `ctx` is NULL or a live context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_vidmem_create(
    ctx: *const BelfryContext,
    size: u64,
    segment: u32,
    out: *mut *mut BelfryVideoAllocation,
) -> c_int {
    // SAFETY: the caller's contract for `ctx`.
    let Some(ctx) = (unsafe { ptr::shared(ctx) }) else { return invalid("belfry_vidmem_create: ctx") };
    let segment = match segment {
        BELFRY_SEGMENT_VRAM => Segment::Vram,
        BELFRY_SEGMENT_SYSTEM => Segment::System,
        BELFRY_SEGMENT_VRAM_ONLY => Segment::VramOnly,
        _ => return invalid("belfry_vidmem_create: segment"),
    };
    match VideoAllocation::new(&ctx.0, size, segment) {
        // SAFETY: the caller's contract for `out`.
        Ok(a) => Code::stored(unsafe { ptr::give(out, BelfryVideoAllocation(a)) }, "belfry_vidmem_create: out"),
        Err(e) => fail(&e),
    }
}

/// Frees a video-memory allocation.
///
/// # Safety
/// `a` is NULL or from `belfry_vidmem_create`, not freed before, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_vidmem_destroy(a: *mut BelfryVideoAllocation) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(a) }
}

/// The allocation's GPU VA (0 for NULL); it never changes while the allocation moves.
///
/// # Safety
/// `a` is NULL or a live video-memory allocation.
#[no_mangle]
pub unsafe extern "C" fn belfry_vidmem_gpu_va(a: *const BelfryVideoAllocation) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { ptr::shared(a) }.map_or(0, |a| a.0.gpu_va())
}

/// The allocation's size in bytes (0 for NULL).
///
/// # Safety
/// `a` is NULL or a live video-memory allocation.
#[no_mangle]
pub unsafe extern "C" fn belfry_vidmem_size(a: *const BelfryVideoAllocation) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { ptr::shared(a) }.map_or(0, |a| a.0.size())
}

/// Reads `len` bytes at `offset` into `buf` (the module moves the allocation to system memory
/// first if it is in VRAM). `-EINVAL` out of bounds.
///
/// # Safety
/// `a` is NULL or a live video-memory allocation; `buf` is NULL or `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn belfry_vidmem_read(
    a: *const BelfryVideoAllocation,
    offset: u64,
    buf: *mut c_void,
    len: u64,
) -> c_int {
    // SAFETY: the caller's contract for `a` and `buf`.
    let (Some(a), Some(buf)) = (unsafe { ptr::shared(a) }, unsafe { ptr::slice_mut(buf.cast::<u8>(), len as usize) })
    else {
        return invalid("belfry_vidmem_read: allocation or buffer");
    };
    Code::of(a.0.read(offset, buf))
}

/// Writes `len` bytes from `data` at `offset` (the module moves the allocation to system
/// memory first if it is in VRAM). `-EINVAL` out of bounds.
///
/// # Safety
/// `a` is NULL or a live video-memory allocation; `data` is NULL or `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn belfry_vidmem_write(
    a: *const BelfryVideoAllocation,
    offset: u64,
    data: *const c_void,
    len: u64,
) -> c_int {
    // SAFETY: the caller's contract for `a` and `data`.
    let (Some(a), Some(data)) = (unsafe { ptr::shared(a) }, unsafe { ptr::slice(data.cast::<u8>(), len as usize) })
    else {
        return invalid("belfry_vidmem_write: allocation or data");
    };
    Code::of(a.0.write(offset, data))
}

/// A new, empty split buffer whose resource table has `slots` slots (NULL only if memory ran
/// out).
#[no_mangle]
pub extern "C" fn belfry_split_create(slots: u32) -> *mut BelfrySplitBuffer {
    Box::into_raw(Box::new(BelfrySplitBuffer(SplitBuffer::new(slots))))
}

/// Frees a split buffer.
///
/// # Safety
/// `b` is NULL or from `belfry_split_create`, not freed before, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_destroy(b: *mut BelfrySplitBuffer) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(b) }
}

/// Binds `slot` to the allocation `a` (a split point: the module may move allocations
/// between the parts before and after it). `-EINVAL` for a slot out of range.
///
/// # Safety
/// `b` is NULL or a live split buffer used by no other thread meanwhile; `a` is NULL or live
/// until the buffer is submitted.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_bind(
    b: *mut BelfrySplitBuffer,
    slot: u32,
    a: *const BelfryVideoAllocation,
) -> c_int {
    // SAFETY: the caller's contract for `b` and `a`.
    let (Some(b), Some(a)) = (unsafe { ptr::exclusive(b) }, unsafe { ptr::shared(a) }) else {
        return invalid("belfry_split_bind: split buffer or allocation");
    };
    Code::of(b.0.bind(slot, &a.0).map(drop))
}

/// Unbinds `slot` (a split point).
///
/// # Safety
/// `b` is NULL or a live split buffer used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_unbind(b: *mut BelfrySplitBuffer, slot: u32) -> c_int {
    // SAFETY: the caller's contract for `b`.
    let Some(b) = (unsafe { ptr::exclusive(b) }) else { return invalid("belfry_split_unbind: split buffer") };
    Code::of(b.0.unbind(slot).map(drop))
}

/// Appends a `SLOT_COPY` of `size` bytes from `src_offset` of the allocation bound to
/// `src_slot` to `dst_offset` of the one bound to `dst_slot`.
///
/// # Safety
/// As `belfry_split_unbind`.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_slot_copy(
    b: *mut BelfrySplitBuffer,
    src_slot: u32,
    src_offset: u64,
    dst_slot: u32,
    dst_offset: u64,
    size: u32,
) -> c_int {
    // SAFETY: the caller's contract for `b`.
    let Some(b) = (unsafe { ptr::exclusive(b) }) else { return invalid("belfry_split_slot_copy: split buffer") };
    Code::of(b.0.slot_copy(src_slot, src_offset, dst_slot, dst_offset, size).map(drop))
}

/// Appends a `WRITE_DATA32` of `value` at the GPU VA `va` between split points (e.g. into a
/// bound allocation's range: its VA never changes).
///
/// # Safety
/// As `belfry_split_unbind`.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_write32(b: *mut BelfrySplitBuffer, va: u64, value: u32) -> c_int {
    // SAFETY: the caller's contract for `b`.
    let Some(b) = (unsafe { ptr::exclusive(b) }) else { return invalid("belfry_split_write32: split buffer") };
    Code::of(b.0.commands().write32(va, value).map(drop))
}

/// Ends the buffer: unbinds every slot still bound. Call before `belfry_split_submit`.
///
/// # Safety
/// As `belfry_split_unbind`.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_finish(b: *mut BelfrySplitBuffer) -> c_int {
    // SAFETY: the caller's contract for `b`.
    let Some(b) = (unsafe { ptr::exclusive(b) }) else { return invalid("belfry_split_finish: split buffer") };
    Code::of(b.0.finish().map(drop))
}

/// Creates a kernel-mode queue on `engine` that runs split buffers.
///
/// # Safety
/// `ctx` is NULL or a live context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_queue_create(
    ctx: *const BelfryContext,
    engine: u32,
    out: *mut *mut BelfrySplitQueue,
) -> c_int {
    // SAFETY: the caller's contract for `ctx`.
    let Some(ctx) = (unsafe { ptr::shared(ctx) }) else { return invalid("belfry_split_queue_create: ctx") };
    match SplitQueue::new(&ctx.0, engine) {
        // SAFETY: the caller's contract for `out`.
        Ok(q) => Code::stored(unsafe { ptr::give(out, BelfrySplitQueue(q)) }, "belfry_split_queue_create: out"),
        Err(e) => fail(&e),
    }
}

/// Destroys a split queue.
///
/// # Safety
/// `q` is NULL or from `belfry_split_queue_create`, not destroyed before, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_queue_destroy(q: *mut BelfrySplitQueue) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(q) }
}

/// Runs the split buffer `b` on `q` and returns once it ran; stores the number of parts it ran
/// in at `*parts` (if not NULL). `-E2BIG` when one split point needs more VRAM for its
/// `BELFRY_SEGMENT_VRAM_ONLY` allocations than the device can give them.
///
/// # Safety
/// `q` is NULL or a live split queue used by no other thread meanwhile; `b` is NULL or live
/// (with its allocations); `parts` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_split_submit(
    q: *mut BelfrySplitQueue,
    b: *const BelfrySplitBuffer,
    parts: *mut u32,
) -> c_int {
    // SAFETY: the caller's contract for `q` and `b`.
    let (Some(q), Some(b)) = (unsafe { ptr::exclusive(q) }, unsafe { ptr::shared(b) }) else {
        return invalid("belfry_split_submit: queue or split buffer");
    };
    match q.0.submit(&b.0) {
        Ok(n) => {
            // SAFETY: the caller's contract for `parts` (NULL: not wanted).
            unsafe { ptr::write(parts, n) };
            0
        }
        Err(e) => fail(&e),
    }
}

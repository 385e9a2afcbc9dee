//! The command buffer's packets beyond a 32-bit write and the fence packets: each appends one
//! packet of the abi's list (docs/PROTOCOL.md) to a `BelfryCommandBuffer`, refusing what the
//! device would refuse with `-EINVAL` (the message names the rule) before anything is
//! submitted; `-E2BIG` when the buffer would exceed the largest command buffer.

use core::ffi::c_int;

use belfry_umd::abi::packet::ComputeOp;
use belfry_umd::CommandBuffer;

use crate::errors::{invalid, Code};
use crate::{ptr, BelfryCommandBuffer};

/// `belfry_cmdbuf_compute` operation: `dst[i] = a[i] + b[i]` (wrapping 32-bit).
pub const BELFRY_COMPUTE_ADD_U32: u32 = 1;
/// `belfry_cmdbuf_compute` operation: `dst[i] = a[i] * b[i]` (wrapping 32-bit).
pub const BELFRY_COMPUTE_MUL_U32: u32 = 2;
/// `belfry_cmdbuf_compute` operation: `dst[i] = scalar * a[i] + b[i]` (`float`; `scalar` holds
/// the float's bits).
pub const BELFRY_COMPUTE_SAXPY_F32: u32 = 3;
const _: () = assert!(BELFRY_COMPUTE_ADD_U32 == ComputeOp::AddU32 as u32);
const _: () = assert!(BELFRY_COMPUTE_MUL_U32 == ComputeOp::MulU32 as u32);
const _: () = assert!(BELFRY_COMPUTE_SAXPY_F32 == ComputeOp::SaxpyF32 as u32);

/// Runs `append` on the command buffer `c`, or `-EINVAL` naming `call` for NULL.
///
/// # Safety
/// `c` is NULL or a live command buffer used by no other thread meanwhile.
unsafe fn append(
    c: *mut BelfryCommandBuffer,
    call: &str,
    append: impl FnOnce(&mut CommandBuffer) -> belfry_umd::Result<&mut CommandBuffer>,
) -> c_int {
    // SAFETY: the caller's contract for `c`.
    let Some(c) = (unsafe { ptr::exclusive(c) }) else { return invalid(&format!("{call}: command buffer")) };
    Code::of(append(&mut c.0).map(drop))
}

/// Appends a `WRITE_DATA64` of `value` at `va` (8-byte aligned), stored in one access.
///
/// # Safety
/// `c` is NULL or a live command buffer used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_write64(c: *mut BelfryCommandBuffer, va: u64, value: u64) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_write64", |c| c.write64(va, value)) }
}

/// Appends a `WRITE_TIMESTAMP`: the GPU's timestamp stored at `va` (8-byte aligned).
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_timestamp(c: *mut BelfryCommandBuffer, va: u64) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_timestamp", |c| c.timestamp(va)) }
}

/// Appends a `COPY` of `size` bytes from `src_va` to `dst_va` (ranges that do not overlap).
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_copy(c: *mut BelfryCommandBuffer, src_va: u64, dst_va: u64, size: u32) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_copy", |c| c.copy(src_va, dst_va, size)) }
}

/// Appends a `FILL` of `size` bytes (a multiple of 4) at `dst_va` with the 32-bit `value`.
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_fill(c: *mut BelfryCommandBuffer, dst_va: u64, size: u32, value: u32) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_fill", |c| c.fill(dst_va, size, value)) }
}

/// Appends a `COMPUTE`: `dst[i] = op(a[i], b[i], scalar)` over `count` 32-bit elements, `op`
/// one of `BELFRY_COMPUTE_*`.
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_compute(
    c: *mut BelfryCommandBuffer,
    op: u32,
    count: u32,
    scalar: u32,
    a_va: u64,
    b_va: u64,
    dst_va: u64,
) -> c_int {
    let Ok(op) = ComputeOp::try_from(op) else { return invalid("belfry_cmdbuf_compute: op") };
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_compute", |c| c.compute(op, count, scalar, a_va, b_va, dst_va)) }
}

/// Appends a `NOTIFY`: an interrupt record carrying `token`.
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_notify(c: *mut BelfryCommandBuffer, token: u64) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_notify", |c| c.notify(token)) }
}

/// Appends a `NOP` of `dwords` dwords (header included).
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_nop(c: *mut BelfryCommandBuffer, dwords: u16) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_nop", |c| c.nop(dwords)) }
}

/// Appends a `JUMP` to the `size_bytes`-byte buffer at `va`: nothing after it runs.
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_jump(c: *mut BelfryCommandBuffer, va: u64, size_bytes: u32) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_jump", |c| c.jump(va, size_bytes)) }
}

/// Appends a `BIND_SLOT`: `slot` of the resource table bound to `size` bytes at `va` (both
/// 0: unbound).
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_bind_slot(c: *mut BelfryCommandBuffer, slot: u32, va: u64, size: u64) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_bind_slot", |c| c.bind_slot(slot, va, size)) }
}

/// Appends a `SLOT_COPY` of `size` bytes from `src_offset` in the range bound to `src_slot`
/// to `dst_offset` in the range bound to `dst_slot`.
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_slot_copy(
    c: *mut BelfryCommandBuffer,
    src_slot: u32,
    src_offset: u64,
    dst_slot: u32,
    dst_offset: u64,
    size: u32,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { append(c, "belfry_cmdbuf_slot_copy", |c| c.slot_copy(src_slot, src_offset, dst_slot, dst_offset, size)) }
}

/// Empties the command buffer, for building the next one.
///
/// # Safety
/// As `belfry_cmdbuf_write64`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_clear(c: *mut BelfryCommandBuffer) -> c_int {
    // SAFETY: the caller's contract for `c`.
    let Some(c) = (unsafe { ptr::exclusive(c) }) else { return invalid("belfry_cmdbuf_clear: command buffer") };
    c.0.clear();
    0
}

/// The command buffer's length in bytes (0 for NULL).
///
/// # Safety
/// `c` is NULL or a live command buffer.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_size(c: *const BelfryCommandBuffer) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { ptr::shared(c) }.map_or(0, |c| c.0.len() as u32)
}

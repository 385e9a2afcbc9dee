//! The C API of Belfry's user-mode driver library, [`belfry_umd`]: what most GPU driver test
//! code (IGT, vendor tests) is written in. Built as a `cdylib` (`libbelfry_umd_c.so`) and a
//! `staticlib` (`libbelfry_umd_c.a`); the header `include/belfry_umd.h` is generated from this
//! file by cbindgen (the `header_is_current` test regenerates it and fails on a difference),
//! `belfry-umd.pc` is its pkg-config file. The README shows a C program.
//!
//! Conventions, as libdrm's: every fallible call returns 0 or a negative errno (`-ETIMEDOUT`,
//! `-EINVAL`, ...) and writes its results through out-pointers; the calling thread's
//! [`belfry_last_error`] then describes the failure. Objects are opaque pointers made by a
//! `*_create`/`*_open`/`*_import` call and released by the matching `*_destroy`/`*_close`, in
//! any order (each keeps what it was made from alive, like the Rust objects). A NULL handle or
//! out-pointer is `-EINVAL`. Deadlines are absolute `CLOCK_MONOTONIC` nanoseconds
//! ([`belfry_monotonic_ns`]) or [`BELFRY_DEADLINE_FOREVER`]: a wait interrupted by a signal
//! goes on with the same deadline. An object may be used from one thread at a time.
//!
//! Code map: `lib.rs` devices, contexts, allocations, fences, queues and command buffers;
//! `packets.rs` the command buffer's other packets; `events.rs` pollable fence waits;
//! `query.rs` device enumeration and capabilities; `vidmem.rs` video memory and split
//! buffers; `ptr.rs` the pointer conversions (the only other `unsafe`); `errors.rs` the error
//! codes and the last-error message. `tests/coverage.rs` checks that every public call of the
//! Rust library has its C counterpart here, or a documented reason not to.

mod errors;
mod events;
mod packets;
mod ptr;
mod query;
mod vidmem;

use core::ffi::{c_char, c_int};
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::time::Duration;

use belfry_umd::{CommandBuffer, Context, Deadline, Device, EngineId, Fence, FenceKind, QueueDesc, QueueMode};

pub use errors::belfry_last_error;
use errors::{fail, invalid, Code};

/// An open `/dev/belfry<N>`.
pub struct BelfryDevice(Device);
/// A context and its GPU address space.
pub struct BelfryContext(Context);
/// GPU memory mapped in a context and in the process.
pub struct BelfryAllocation(belfry_umd::Allocation);
/// A fence (native DEFAULT or INTRA_GPU, or monitored).
pub struct BelfryFence(Fence);
/// A hardware queue (user-mode: ring and doorbell; or kernel-mode).
pub struct BelfryQueue(belfry_umd::Queue);
/// A command buffer being built.
pub struct BelfryCommandBuffer(CommandBuffer);

/// The version of the C API this header declares. It goes up by one with every change that
/// could break a program built against the previous one (a call whose meaning or arguments
/// changed); additions keep it. Compare it with [`belfry_api_version`], the library's.
pub const BELFRY_UMD_API_VERSION: u32 = 2;
/// A deadline that never passes.
pub const BELFRY_DEADLINE_FOREVER: u64 = u64::MAX;
/// `belfry_fence_create` kind: both values in system memory, every CPU and GPU operation.
pub const BELFRY_FENCE_KIND_DEFAULT: u32 = 1;
/// `belfry_fence_create` kind: values in device memory, GPU operations only.
pub const BELFRY_FENCE_KIND_INTRA_GPU: u32 = 2;
/// `belfry_fence_create` kind: a monitored (WDDM 2.0) fence.
pub const BELFRY_FENCE_KIND_MONITORED: u32 = 3;
/// `belfry_fence_create` flag: shareable across processes (`belfry_fence_export`).
pub const BELFRY_FENCE_SHAREABLE: u32 = 1;
/// `belfry_queue_create` mode: user-mode submission (ring and doorbell).
pub const BELFRY_QUEUE_USER_MODE: u32 = 0;
/// `belfry_queue_create` mode: kernel-mode submission (`SUBMIT`).
pub const BELFRY_QUEUE_KERNEL_MODE: u32 = 1;
/// `belfry_queue_create_ex` flag: a user-mode queue's ring and ring control live in VRAM.
pub const BELFRY_QUEUE_RING_IN_VRAM: u32 = 1;
/// `belfry_wait_fences` flag: wait for all the values (default: any one).
pub const BELFRY_WAIT_ALL: u32 = 1;
/// `belfry_context_reset_status` flag: the context was lost (create a new one).
pub const BELFRY_CONTEXT_LOST: u32 = 1;
/// `belfry_context_reset_status` flag: its own work caused the loss.
pub const BELFRY_CONTEXT_GUILTY: u32 = 2;
/// `belfry_context_fault` reason: the driver reset the engine after the context's queue hung.
/// Any other nonzero reason is a fault of its work (a GPU page fault, a refused packet: the
/// context fault reasons of docs/PROTOCOL.md).
pub const BELFRY_FAULT_ENGINE_RESET: u32 = 10;
const _: () = assert!(BELFRY_FAULT_ENGINE_RESET == belfry_umd::abi::engine::FaultReason::EngineReset as u32);

/// The version of the C API the library implements ([`BELFRY_UMD_API_VERSION`] of the header
/// it was built with): a program built against another version should not use it.
#[no_mangle]
pub extern "C" fn belfry_api_version() -> u32 {
    BELFRY_UMD_API_VERSION
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: add a timeout to it to make a deadline.
#[no_mangle]
pub extern "C" fn belfry_monotonic_ns() -> u64 {
    Deadline::after(Duration::ZERO).as_monotonic_ns()
}

/// Opens the device at `path` (e.g. `"/dev/belfry0"`) and stores it at `*out`.
///
/// Errors: `-ENOENT`, `-EACCES` (open), `-ENOTTY` (not a Belfry device), `-EPROTO` (another
/// uapi version), `-EINVAL`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_device_open(path: *const c_char, out: *mut *mut BelfryDevice) -> c_int {
    // SAFETY: the caller's contract for `path`.
    let Some(path) = (unsafe { ptr::string(path) }) else { return invalid("belfry_device_open: path") };
    match Device::open(path) {
        // SAFETY: the caller's contract for `out`.
        Ok(dev) => Code::stored(unsafe { ptr::give(out, BelfryDevice(dev)) }, "belfry_device_open: out"),
        Err(e) => fail(&e),
    }
}

/// Closes a device (its contexts and their objects keep the file open until they go).
///
/// # Safety
/// `dev` is NULL or from `belfry_device_open`, not closed before, and unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_device_close(dev: *mut BelfryDevice) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(dev) }
}

/// Creates a context with its own GPU address space.
///
/// Errors: `-ENOSPC` (64 per device file), `-EINVAL`, the module's errno.
///
/// # Safety
/// `dev` is NULL or a live device; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_context_create(dev: *const BelfryDevice, out: *mut *mut BelfryContext) -> c_int {
    // SAFETY: the caller's contract for `dev`.
    let Some(dev) = (unsafe { ptr::shared(dev) }) else { return invalid("belfry_context_create: dev") };
    match dev.0.create_context() {
        // SAFETY: the caller's contract for `out`.
        Ok(ctx) => Code::stored(unsafe { ptr::give(out, BelfryContext(ctx)) }, "belfry_context_create: out"),
        Err(e) => fail(&e),
    }
}

/// Releases a context (the module's context goes once its allocations, fences and queues are
/// destroyed too).
///
/// # Safety
/// `ctx` is NULL or from `belfry_context_create`, not destroyed before, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_context_destroy(ctx: *mut BelfryContext) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(ctx) }
}

/// Whether the context is usable: stores `BELFRY_CONTEXT_*` flags at `*flags` (0: usable;
/// `BELFRY_CONTEXT_LOST | BELFRY_CONTEXT_GUILTY` after a GPU fault of its own work).
///
/// # Safety
/// `ctx` is NULL or a live context; `flags` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_context_reset_status(ctx: *const BelfryContext, flags: *mut u32) -> c_int {
    // SAFETY: the caller's contract for `ctx`.
    let Some(ctx) = (unsafe { ptr::shared(ctx) }) else { return invalid("belfry_context_reset_status: ctx") };
    match ctx.0.reset_status() {
        // SAFETY: the caller's contract for `flags`.
        Ok(s) => Code::stored(unsafe { ptr::write(flags, s.flags.bits()) }, "belfry_context_reset_status: flags"),
        Err(e) => fail(&e),
    }
}

/// Why the context was lost: stores the device's fault reason at `*reason` (0 while it is
/// usable or when no reason is known; [`BELFRY_FAULT_ENGINE_RESET`] after a hang, another value
/// for a fault of its work) and the faulting GPU address at `*address` (0 when not known).
///
/// # Safety
/// `ctx` is NULL or a live context; `reason` and `address` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_context_fault(ctx: *const BelfryContext, reason: *mut u32, address: *mut u64) -> c_int {
    // SAFETY: the caller's contract for `ctx`.
    let Some(ctx) = (unsafe { ptr::shared(ctx) }) else { return invalid("belfry_context_fault: ctx") };
    match ctx.0.reset_status() {
        Ok(s) => {
            let raw = s.fault_reason.map_or(0, u32::from);
            // SAFETY: the caller's contract for `reason` and `address`.
            let stored = unsafe { ptr::write(reason, raw) && ptr::write(address, s.fault_address) };
            Code::stored(stored, "belfry_context_fault: reason, address")
        }
        Err(e) => fail(&e),
    }
}

/// Allocates `size` bytes of zeroed GPU memory mapped in the context and the process.
///
/// Errors: `-EINVAL` (0 or more than the device's largest allocation), `-ENOSPC`, `-ENOMEM`.
///
/// # Safety
/// `ctx` is NULL or a live context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_alloc_create(
    ctx: *const BelfryContext,
    size: u64,
    out: *mut *mut BelfryAllocation,
) -> c_int {
    // SAFETY: the caller's contract for `ctx`.
    let Some(ctx) = (unsafe { ptr::shared(ctx) }) else { return invalid("belfry_alloc_create: ctx") };
    match ctx.0.alloc(size, 0) {
        // SAFETY: the caller's contract for `out`.
        Ok(a) => Code::stored(unsafe { ptr::give(out, BelfryAllocation(a)) }, "belfry_alloc_create: out"),
        Err(e) => fail(&e),
    }
}

/// Frees an allocation.
///
/// # Safety
/// `a` is NULL or from `belfry_alloc_create`, not freed before, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_alloc_destroy(a: *mut BelfryAllocation) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(a) }
}

/// The allocation's GPU VA (0 for NULL).
///
/// # Safety
/// `a` is NULL or a live allocation.
#[no_mangle]
pub unsafe extern "C" fn belfry_alloc_gpu_va(a: *const BelfryAllocation) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { ptr::shared(a) }.map_or(0, |a| a.0.gpu_va())
}

/// The allocation's size in bytes (0 for NULL).
///
/// # Safety
/// `a` is NULL or a live allocation.
#[no_mangle]
pub unsafe extern "C" fn belfry_alloc_size(a: *const BelfryAllocation) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { ptr::shared(a) }.map_or(0, |a| a.0.size())
}

/// Reads `len` bytes at byte `offset` into `buf`. `-EINVAL` out of bounds.
///
/// # Safety
/// `a` is NULL or a live allocation; `buf` is NULL or `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn belfry_alloc_read(
    a: *const BelfryAllocation,
    offset: u64,
    buf: *mut core::ffi::c_void,
    len: u64,
) -> c_int {
    // SAFETY: the caller's contract for `a` and `buf`.
    let (Some(a), Some(buf)) = (unsafe { ptr::shared(a) }, unsafe { ptr::slice_mut(buf.cast::<u8>(), len as usize) })
    else {
        return invalid("belfry_alloc_read: allocation or buffer");
    };
    Code::of(a.0.read(offset, buf))
}

/// Writes `len` bytes from `data` at byte `offset`. `-EINVAL` out of bounds.
///
/// # Safety
/// `a` is NULL or a live allocation not used by another thread meanwhile; `data` is NULL or
/// `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn belfry_alloc_write(
    a: *mut BelfryAllocation,
    offset: u64,
    data: *const core::ffi::c_void,
    len: u64,
) -> c_int {
    // SAFETY: the caller's contract for `a` and `data`.
    let (Some(a), Some(data)) = (unsafe { ptr::exclusive(a) }, unsafe { ptr::slice(data.cast::<u8>(), len as usize) })
    else {
        return invalid("belfry_alloc_write: allocation or data");
    };
    Code::of(a.0.write(offset, data))
}

/// Reads the 32-bit word at byte `offset` into `*value`. `-EINVAL` out of bounds.
///
/// # Safety
/// `a` is NULL or a live allocation; `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_alloc_read_u32(a: *const BelfryAllocation, offset: u64, value: *mut u32) -> c_int {
    // SAFETY: the caller's contract for `a`.
    let Some(a) = (unsafe { ptr::shared(a) }) else { return invalid("belfry_alloc_read_u32: allocation") };
    match a.0.read_u32(offset) {
        // SAFETY: the caller's contract for `value`.
        Ok(v) => Code::stored(unsafe { ptr::write(value, v) }, "belfry_alloc_read_u32: value"),
        Err(e) => fail(&e),
    }
}

/// Writes the 32-bit word `value` at byte `offset`. `-EINVAL` out of bounds.
///
/// # Safety
/// `a` is NULL or a live allocation not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn belfry_alloc_write_u32(a: *mut BelfryAllocation, offset: u64, value: u32) -> c_int {
    // SAFETY: the caller's contract for `a`.
    let Some(a) = (unsafe { ptr::exclusive(a) }) else { return invalid("belfry_alloc_write_u32: allocation") };
    Code::of(a.0.write_u32(offset, value))
}

/// Creates a fence of `kind` (`BELFRY_FENCE_KIND_*`) with `flags` (`BELFRY_FENCE_SHAREABLE`)
/// and CurrentValue `initial`.
///
/// Errors: `-EINVAL` (unknown kind or flags, a shareable INTRA_GPU fence), `-EOPNOTSUPP`
/// (native fences off), `-ENOSPC`, `-ERANGE` (32-bit mode).
///
/// # Safety
/// `ctx` is NULL or a live context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_create(
    ctx: *const BelfryContext,
    kind: u32,
    flags: u32,
    initial: u64,
    out: *mut *mut BelfryFence,
) -> c_int {
    // SAFETY: the caller's contract for `ctx`.
    let Some(ctx) = (unsafe { ptr::shared(ctx) }) else { return invalid("belfry_fence_create: ctx") };
    let kind = match kind {
        BELFRY_FENCE_KIND_DEFAULT => FenceKind::Default,
        BELFRY_FENCE_KIND_INTRA_GPU => FenceKind::IntraGpu,
        BELFRY_FENCE_KIND_MONITORED => FenceKind::Monitored,
        _ => return invalid("belfry_fence_create: kind"),
    };
    match ctx.0.create_fence(kind, flags, initial) {
        // SAFETY: the caller's contract for `out`.
        Ok(f) => Code::stored(unsafe { ptr::give(out, BelfryFence(f)) }, "belfry_fence_create: out"),
        Err(e) => fail(&e),
    }
}

/// Destroys a fence; its pending pollable waits become readable.
///
/// # Safety
/// `f` is NULL or from `belfry_fence_create`/`belfry_fence_import`, not destroyed before,
/// unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_destroy(f: *mut BelfryFence) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(f) }
}

/// Stores the fence's CurrentValue at `*value` (read through its read-only mapping).
/// `-EPERM` for an INTRA_GPU fence.
///
/// # Safety
/// `f` is NULL or a live fence; `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_value(f: *const BelfryFence, value: *mut u64) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_value: fence") };
    let Some(v) = f.0.value() else { return errors::code(libc::EPERM, "belfry_fence_value: INTRA_GPU fence") };
    // SAFETY: the caller's contract for `value`.
    Code::stored(unsafe { ptr::write(value, v) }, "belfry_fence_value: value")
}

/// CPU signal: CurrentValue becomes `value`. `-EINVAL` below CurrentValue (a fence never moves
/// backwards), `-EPERM` for INTRA_GPU, `-ERANGE` outside the 32-bit window.
///
/// # Safety
/// `f` is NULL or a live fence.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_signal(f: *const BelfryFence, value: u64) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_signal: fence") };
    Code::of(f.0.signal(value))
}

/// CPU wait until CurrentValue ≥ `value` or the absolute `deadline_ns`
/// (`CLOCK_MONOTONIC`, or `BELFRY_DEADLINE_FOREVER`). `-ETIMEDOUT` once it passed, `-EPERM`
/// for INTRA_GPU, `-ECANCELED` when a signal that would have reached `value` was in the
/// unexecuted work of a context lost to a GPU fault or hang (also with no deadline).
///
/// # Safety
/// `f` is NULL or a live fence.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_wait(f: *const BelfryFence, value: u64, deadline_ns: u64) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_wait: fence") };
    Code::of(f.0.wait_until(value, Deadline::at_monotonic_ns(deadline_ns)))
}

/// One CPU wait on `count` fences (1..=64, of one device file) for `values[i]` each: until any
/// one is reached, or all with `BELFRY_WAIT_ALL` in `flags`, or `deadline_ns`. With any, the
/// lowest index of a reached fence is stored at `*first` (if not NULL).
///
/// Errors: `-ETIMEDOUT`, `-EINVAL` (no fences, more than 64, NULL arrays, fences of different
/// device files, unknown flags), `-EPERM` (INTRA_GPU).
///
/// # Safety
/// `fences` and `values` are NULL or point at `count` elements (each fence live); `first` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_wait_fences(
    fences: *const *const BelfryFence,
    values: *const u64,
    count: u32,
    flags: u32,
    deadline_ns: u64,
    first: *mut u32,
) -> c_int {
    let n = count as usize;
    // SAFETY: the caller's contract for `fences` and `values`.
    let (Some(fences), Some(values)) = (unsafe { ptr::slice(fences, n) }, unsafe { ptr::slice(values, n) }) else {
        return invalid("belfry_wait_fences: arrays");
    };
    if flags & !BELFRY_WAIT_ALL != 0 {
        return invalid("belfry_wait_fences: flags");
    }
    let mut points = Vec::with_capacity(n);
    for (&f, &v) in fences.iter().zip(values) {
        // SAFETY: the caller's contract: each element is a live fence.
        let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_wait_fences: a NULL fence") };
        points.push(f.0.point(v));
    }
    let deadline = Deadline::at_monotonic_ns(deadline_ns);
    let r = if flags & BELFRY_WAIT_ALL != 0 {
        belfry_umd::wait_all(&points, deadline).map(|()| 0)
    } else {
        belfry_umd::wait_any(&points, deadline)
    };
    match r {
        Ok(i) => {
            // SAFETY: the caller's contract for `first` (NULL: not wanted).
            unsafe { ptr::write(first, u32::try_from(i).unwrap_or(0)) };
            0
        }
        Err(e) => fail(&e),
    }
}

/// Exports a shareable fence as a file descriptor (close-on-exec) stored at `*fd`, for another
/// process's `belfry_fence_import`; the caller owns and closes it. `-EINVAL` for a fence
/// created without `BELFRY_FENCE_SHAREABLE`.
///
/// # Safety
/// `f` is NULL or a live fence; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_export(f: *const BelfryFence, fd: *mut c_int) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_export: fence") };
    if fd.is_null() {
        return invalid("belfry_fence_export: fd");
    }
    match f.0.export() {
        // SAFETY: the caller's contract for `fd` (checked non-NULL above).
        Ok(owned) => Code::stored(unsafe { ptr::write(fd, owned.into_raw_fd()) }, "belfry_fence_export: fd"),
        Err(e) => fail(&e),
    }
}

/// A `sync_file` descriptor (close-on-exec, the caller's to close) stored at `*fd`, which
/// `poll(2)` reports readable once the MONITORED fence `f` reaches `value`; its fence signals
/// with an error (`-ECANCELED`: fence destroyed or device file closed; `-ENODEV`: device
/// unbound; `-ETIMEDOUT`: pending for 10 s) if that can no longer happen in bounded time. `-EOPNOTSUPP` when the guest kernel has no
/// `sync_file`, `-EPERM` for a native fence (a user-mode queue may signal it with no bound the
/// kernel can enforce: Documentation/driver-api/dma-buf.rst, "Indefinite DMA Fences").
///
/// # Safety
/// `f` is NULL or a live fence; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_export_sync_file(f: *const BelfryFence, value: u64, fd: *mut c_int) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_export_sync_file: fence") };
    if fd.is_null() {
        return invalid("belfry_fence_export_sync_file: fd");
    }
    match f.0.export_sync_file(value) {
        // SAFETY: the caller's contract for `fd` (checked non-NULL above).
        Ok(owned) => Code::stored(unsafe { ptr::write(fd, owned.into_raw_fd()) }, "belfry_fence_export_sync_file: fd"),
        Err(e) => fail(&e),
    }
}

/// Opens, in `ctx`, the shared fence an exported `fd` names (the caller keeps `fd`).
/// `-EINVAL` not a fence fd, `-EXDEV` another device's.
///
/// # Safety
/// `ctx` is NULL or a live context; `fd` is an open file descriptor; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_import(
    ctx: *const BelfryContext,
    fd: c_int,
    out: *mut *mut BelfryFence,
) -> c_int {
    // SAFETY: the caller's contract for `ctx`.
    let Some(ctx) = (unsafe { ptr::shared(ctx) }) else { return invalid("belfry_fence_import: ctx") };
    if fd < 0 {
        return errors::code(libc::EBADF, "belfry_fence_import: fd");
    }
    // SAFETY: `fd` is open for the duration of the call by the caller's contract; borrowed only.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    match ctx.0.import_fence(fd) {
        // SAFETY: the caller's contract for `out`.
        Ok(f) => Code::stored(unsafe { ptr::give(out, BelfryFence(f)) }, "belfry_fence_import: out"),
        Err(e) => fail(&e),
    }
}

/// Stores the fence's kind (`BELFRY_FENCE_KIND_*`) at `*kind`.
///
/// # Safety
/// `f` is NULL or a live fence; `kind` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_kind(f: *const BelfryFence, kind: *mut u32) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_kind: fence") };
    let raw = match f.0.kind() {
        FenceKind::Default => BELFRY_FENCE_KIND_DEFAULT,
        FenceKind::IntraGpu => BELFRY_FENCE_KIND_INTRA_GPU,
        FenceKind::Monitored => BELFRY_FENCE_KIND_MONITORED,
        _ => 0,
    };
    // SAFETY: the caller's contract for `kind`.
    Code::stored(unsafe { ptr::write(kind, raw) }, "belfry_fence_kind: kind")
}

/// The fence's GPU VA in its context (0 for NULL): where packets of that context's command
/// buffers address it.
///
/// # Safety
/// `f` is NULL or a live fence.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_gpu_va(f: *const BelfryFence) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { ptr::shared(f) }.map_or(0, |f| f.0.gpu_va())
}

/// Closes a file descriptor `belfry_fence_export` returned (as `close(2)` would).
///
/// # Safety
/// `fd` is an fd the caller owns and does not use afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_fd_close(fd: c_int) {
    if fd >= 0 {
        // SAFETY: the caller owns `fd` and gives it up.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

/// Creates a queue on engine 0 with `mode` (`BELFRY_QUEUE_USER_MODE` or
/// `BELFRY_QUEUE_KERNEL_MODE`), priority 1, 16 slots of 4 KiB: `belfry_queue_create_ex`
/// with those values.
///
/// Errors: `-EINVAL` (unknown mode; user-mode without native fences), `-EIO` (the context
/// was lost), `-ENOSPC`.
///
/// # Safety
/// `ctx` is NULL or a live context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_queue_create(
    ctx: *const BelfryContext,
    mode: u32,
    out: *mut *mut BelfryQueue,
) -> c_int {
    // SAFETY: the caller's contract for `ctx` and `out`, passed on.
    unsafe { belfry_queue_create_ex(ctx, mode, 0, 1, 0, 0, 0, out) }
}

/// Creates a queue on `engine` (0 compute, 1 copy; `BELFRY_CAP_ENGINE_COUNT` engines) with
/// `mode`, `priority` (0..=3), `ring_entries` ring entries and command-buffer slots (a power of
/// two; 0: 16) of `slot_bytes` bytes each (a multiple of 4, at least 64; 0: 4096) and `flags`
/// (`BELFRY_QUEUE_RING_IN_VRAM`).
///
/// Errors: `-EINVAL` (unknown mode or flags, sizes out of range, an engine the device lacks,
/// user-mode on an engine without user-mode submission), `-EPERM` (a priority above the
/// process's), `-EIO`, `-ENOSPC`.
///
/// # Safety
/// `ctx` is NULL or a live context; `out` is NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // The C call takes the descriptor's fields one by one.
pub unsafe extern "C" fn belfry_queue_create_ex(
    ctx: *const BelfryContext,
    mode: u32,
    engine: u32,
    priority: u32,
    ring_entries: u32,
    slot_bytes: u32,
    flags: u32,
    out: *mut *mut BelfryQueue,
) -> c_int {
    // SAFETY: the caller's contract for `ctx`.
    let Some(ctx) = (unsafe { ptr::shared(ctx) }) else { return invalid("belfry_queue_create: ctx") };
    let mode = match mode {
        BELFRY_QUEUE_USER_MODE => QueueMode::UserMode,
        BELFRY_QUEUE_KERNEL_MODE => QueueMode::KernelMode,
        _ => return invalid("belfry_queue_create: mode"),
    };
    if flags & !BELFRY_QUEUE_RING_IN_VRAM != 0 {
        return invalid("belfry_queue_create_ex: flags");
    }
    let defaults = QueueDesc::default();
    let desc = defaults
        .with_mode(mode)
        .with_engine(EngineId::new(engine))
        .with_priority(priority)
        .with_ring_entries(if ring_entries == 0 { defaults.ring_entries } else { ring_entries })
        .with_slot_bytes(if slot_bytes == 0 { defaults.slot_bytes } else { slot_bytes })
        .with_ring_in_vram(flags & BELFRY_QUEUE_RING_IN_VRAM != 0);
    match ctx.0.create_queue(&desc) {
        // SAFETY: the caller's contract for `out`.
        Ok(q) => Code::stored(unsafe { ptr::give(out, BelfryQueue(q)) }, "belfry_queue_create: out"),
        Err(e) => fail(&e),
    }
}

/// Destroys a queue (its doorbell first, then the queue, then its rings).
///
/// # Safety
/// `q` is NULL or from `belfry_queue_create`, not destroyed before, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_queue_destroy(q: *mut BelfryQueue) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(q) }
}

/// Submits the command buffer (user-mode: ring and doorbell, reconnecting as needed) and
/// stores the progress value marking its completion at `*progress`.
///
/// Errors: `-ECANCELED` (the context was lost to a GPU fault), `-EAGAIN` (the doorbell stayed
/// disconnected), `-EINVAL` (too large), `-ETIMEDOUT` (no ring slot freed up), `-EXDEV` (the
/// buffer names a fence of another context or device file: nothing is submitted; `-EINVAL`
/// also when a signal it names went below one submitted since the buffer was built).
///
/// # Safety
/// `q` is NULL or a live queue used by no other thread meanwhile; `cmds` is NULL or live;
/// `progress` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_queue_submit(
    q: *mut BelfryQueue,
    cmds: *const BelfryCommandBuffer,
    progress: *mut u64,
) -> c_int {
    // SAFETY: the caller's contract for `q` and `cmds`.
    let (Some(q), Some(cmds)) = (unsafe { ptr::exclusive(q) }, unsafe { ptr::shared(cmds) }) else {
        return invalid("belfry_queue_submit: queue or command buffer");
    };
    match q.0.submit(&cmds.0) {
        // SAFETY: the caller's contract for `progress`.
        Ok(v) => Code::stored(unsafe { ptr::write(progress, v) }, "belfry_queue_submit: progress"),
        Err(e) => fail(&e),
    }
}

/// Waits until progress value `value` completed or the absolute `deadline_ns`
/// (`CLOCK_MONOTONIC`, or `BELFRY_DEADLINE_FOREVER`) passed, as every wait of this API.
/// `-ETIMEDOUT`, `-ECANCELED` (the context was lost), `-EINVAL` (never submitted).
///
/// # Safety
/// `q` is NULL or a live queue used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn belfry_queue_wait(q: *mut BelfryQueue, value: u64, deadline_ns: u64) -> c_int {
    // SAFETY: the caller's contract for `q`.
    let Some(q) = (unsafe { ptr::exclusive(q) }) else { return invalid("belfry_queue_wait: queue") };
    let timeout = Deadline::at_monotonic_ns(deadline_ns).remaining().unwrap_or(Duration::MAX);
    Code::of(q.0.wait(value, timeout))
}

/// Stores the highest progress value known complete at `*value`.
///
/// # Safety
/// `q` is NULL or a live queue; `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_queue_completed(q: *const BelfryQueue, value: *mut u64) -> c_int {
    // SAFETY: the caller's contract for `q`.
    let Some(q) = (unsafe { ptr::shared(q) }) else { return invalid("belfry_queue_completed: queue") };
    // SAFETY: the caller's contract for `value`.
    Code::stored(unsafe { ptr::write(value, q.0.completed()) }, "belfry_queue_completed: value")
}

/// Stores the last progress value submitted at `*value`.
///
/// # Safety
/// `q` is NULL or a live queue; `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_queue_last_submitted(q: *const BelfryQueue, value: *mut u64) -> c_int {
    // SAFETY: the caller's contract for `q`.
    let Some(q) = (unsafe { ptr::shared(q) }) else { return invalid("belfry_queue_last_submitted: queue") };
    // SAFETY: the caller's contract for `value`.
    Code::stored(unsafe { ptr::write(value, q.0.last_submitted()) }, "belfry_queue_last_submitted: value")
}

/// GPU signal of `f` to `value` after the work submitted to `q` so far (a monitored fence's
/// `MONITORED_FENCE_SIGNAL`, or the module's software signal on an engine that cannot write
/// fences; a native fence's `FENCE_SIGNAL`). `-EXDEV` for a fence of another context.
///
/// # Safety
/// `q` is NULL or a live queue used by no other thread meanwhile; `f` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn belfry_queue_signal_fence(q: *mut BelfryQueue, f: *const BelfryFence, value: u64) -> c_int {
    // SAFETY: the caller's contract for `q` and `f`.
    let (Some(q), Some(f)) = (unsafe { ptr::exclusive(q) }, unsafe { ptr::shared(f) }) else {
        return invalid("belfry_queue_signal_fence: queue or fence");
    };
    Code::of(q.0.signal_fence(&f.0, value))
}

/// GPU wait: the work submitted to `q` after this call runs once `f` reaches `value`.
/// `-EXDEV` for a fence of another context.
///
/// # Safety
/// As `belfry_queue_signal_fence`.
#[no_mangle]
pub unsafe extern "C" fn belfry_queue_wait_fence(q: *mut BelfryQueue, f: *const BelfryFence, value: u64) -> c_int {
    // SAFETY: the caller's contract for `q` and `f`.
    let (Some(q), Some(f)) = (unsafe { ptr::exclusive(q) }, unsafe { ptr::shared(f) }) else {
        return invalid("belfry_queue_wait_fence: queue or fence");
    };
    Code::of(q.0.wait_fence(&f.0, value))
}

/// A new, empty command buffer (NULL only if memory ran out).
#[no_mangle]
pub extern "C" fn belfry_cmdbuf_create() -> *mut BelfryCommandBuffer {
    Box::into_raw(Box::new(BelfryCommandBuffer(CommandBuffer::new())))
}

/// Frees a command buffer.
///
/// # Safety
/// `c` is NULL or from `belfry_cmdbuf_create`, not freed before, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_destroy(c: *mut BelfryCommandBuffer) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(c) }
}

/// Appends a `WRITE_DATA32` of `value` at GPU VA `va` (4-byte aligned: else `-EINVAL`).
///
/// # Safety
/// `c` is NULL or a live command buffer used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_write32(c: *mut BelfryCommandBuffer, va: u64, value: u32) -> c_int {
    // SAFETY: the caller's contract for `c`.
    let Some(c) = (unsafe { ptr::exclusive(c) }) else { return invalid("belfry_cmdbuf_write32: command buffer") };
    Code::of(c.0.write32(va, value).map(|_| ()))
}

/// Appends a GPU wait: the work after it runs once `fence` reaches `value` (a native fence's
/// `FENCE_WAIT`, logged). `-EXDEV` for a fence of another context than the fences the buffer
/// already names; a queue of another context than its fences refuses the buffer (`-EXDEV`).
///
/// # Safety
/// `c` is NULL or a live command buffer used by no other thread meanwhile; `f` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_wait_fence(
    c: *mut BelfryCommandBuffer,
    f: *const BelfryFence,
    value: u64,
) -> c_int {
    // SAFETY: the caller's contract for `c` and `f`.
    let (Some(c), Some(f)) = (unsafe { ptr::exclusive(c) }, unsafe { ptr::shared(f) }) else {
        return invalid("belfry_cmdbuf_wait_fence: command buffer or fence");
    };
    Code::of(c.0.wait_fence(&f.0, value).map(|_| ()))
}

/// Appends a GPU signal of `fence` to `value`: a native fence's `FENCE_SIGNAL` (logged), a
/// monitored fence's `MONITORED_FENCE_SIGNAL`, whose interrupt wakes the threads waiting for it
/// (`belfry_fence_wait`, `belfry_wait_fences`, pollable waits); monitored fences are the
/// kernel-mode model: a user-mode queue's device refuses their signals and waits (the context
/// faults). `-EXDEV` as `belfry_cmdbuf_wait_fence`; `-EINVAL` for a value below the fence's
/// CurrentValue, a signal of it already submitted through `f`, or an earlier signal of it in this
/// buffer (GPU signals never move a fence backwards).
///
/// # Safety
/// As `belfry_cmdbuf_wait_fence`.
#[no_mangle]
pub unsafe extern "C" fn belfry_cmdbuf_signal_fence(
    c: *mut BelfryCommandBuffer,
    f: *const BelfryFence,
    value: u64,
) -> c_int {
    // SAFETY: the caller's contract for `c` and `f`.
    let (Some(c), Some(f)) = (unsafe { ptr::exclusive(c) }, unsafe { ptr::shared(f) }) else {
        return invalid("belfry_cmdbuf_signal_fence: command buffer or fence");
    };
    Code::of(c.0.signal_fence(&f.0, value).map(|_| ()))
}

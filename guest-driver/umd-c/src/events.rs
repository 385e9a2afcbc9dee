//! Pollable fence waits: a `BelfryFenceEvent` owns an eventfd that `poll(2)`/`epoll` report
//! readable once its fence reaches the value (or the fence is destroyed), so one thread can
//! wait on fences, sockets and timers at once; and the same registration on an eventfd the
//! caller owns (`belfry_fence_notify`).

use core::ffi::c_int;
use std::os::fd::{AsRawFd, BorrowedFd};

use belfry_umd::FenceEvent;

use crate::errors::{fail, invalid, Code};
use crate::{ptr, BelfryFence};

/// A pollable wait of a fence for a value.
pub struct BelfryFenceEvent(FenceEvent);

/// Creates a pollable wait of `f` for `value`: its descriptor (`belfry_fence_event_fd`)
/// becomes readable once `f` reaches `value` or is destroyed.
///
/// Errors: `-ENOSPC` (the process's limit of pending pollable waits), `-EMFILE` (descriptors),
/// `-EPERM` (INTRA_GPU), `-EINVAL`.
///
/// # Safety
/// `f` is NULL or a live fence; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_event_create(
    f: *const BelfryFence,
    value: u64,
    out: *mut *mut BelfryFenceEvent,
) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_event_create: fence") };
    match f.0.event(value) {
        // SAFETY: the caller's contract for `out`.
        Ok(ev) => Code::stored(unsafe { ptr::give(out, BelfryFenceEvent(ev)) }, "belfry_fence_event_create: out"),
        Err(e) => fail(&e),
    }
}

/// Withdraws the wait and closes its descriptor.
///
/// # Safety
/// `ev` is NULL or from `belfry_fence_event_create`, not destroyed before, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_event_destroy(ev: *mut BelfryFenceEvent) {
    // SAFETY: the caller's contract.
    unsafe { ptr::take(ev) }
}

/// The wait's descriptor, for `poll(2)`/`epoll` (`POLLIN`); it stays the event's: do not close
/// it. -1 for NULL.
///
/// # Safety
/// `ev` is NULL or a live event.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_event_fd(ev: *const BelfryFenceEvent) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { ptr::shared(ev) }.map_or(-1, |ev| std::os::fd::AsFd::as_fd(&ev.0).as_raw_fd())
}

/// Polls until the fence reached the value (0) or the absolute `deadline_ns` passed
/// (`-ETIMEDOUT`; a deadline already past checks without sleeping). `-ENOENT` when the fence
/// was destroyed before reaching it; `-ECANCELED` when the work that was to signal the value
/// was lost with its context (as soon as the module processed the loss); `-ENODEV` when the
/// device went before the value was reached (unbound, lost, or reset through its PCI function:
/// the descriptor becomes readable then).
///
/// # Safety
/// `ev` is NULL or a live event.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_event_wait(ev: *const BelfryFenceEvent, deadline_ns: u64) -> c_int {
    // SAFETY: the caller's contract for `ev`.
    let Some(ev) = (unsafe { ptr::shared(ev) }) else { return invalid("belfry_fence_event_wait: event") };
    match ev.0.wait_until(belfry_umd::Deadline::at_monotonic_ns(deadline_ns)) {
        Ok(true) => 0,
        Ok(false) => crate::errors::code(libc::ETIMEDOUT, "belfry_fence_event_wait: the deadline passed"),
        Err(e) => fail(&e),
    }
}

/// Reads and resets the descriptor's counter into `*count` (how many signals arrived since
/// the last read); `-EAGAIN` when none did.
///
/// # Safety
/// `ev` is NULL or a live event; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_event_take(ev: *const BelfryFenceEvent, count: *mut u64) -> c_int {
    // SAFETY: the caller's contract for `ev`.
    let Some(ev) = (unsafe { ptr::shared(ev) }) else { return invalid("belfry_fence_event_take: event") };
    match ev.0.take() {
        // SAFETY: the caller's contract for `count`.
        Ok(n) => Code::stored(unsafe { ptr::write(count, n) }, "belfry_fence_event_take: count"),
        Err(e) => fail(&e),
    }
}

/// Registers the caller's `eventfd` to be signalled once `f` reaches `value` (or is
/// destroyed), until then, `belfry_fence_cancel_notify`, or the device file's close.
/// `-EINVAL` for a descriptor that is not an eventfd, `-ENOSPC` past the process's limit of pending pollable waits.
///
/// # Safety
/// `f` is NULL or a live fence; `eventfd` is open for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_notify(f: *const BelfryFence, value: u64, eventfd: c_int) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_notify: fence") };
    if eventfd < 0 {
        return crate::errors::code(libc::EBADF, "belfry_fence_notify: eventfd");
    }
    // SAFETY: open for the duration of the call by the caller's contract; borrowed only.
    Code::of(f.0.notify(value, unsafe { BorrowedFd::borrow_raw(eventfd) }))
}

/// Withdraws a `belfry_fence_notify` registration; stores at `*withdrawn` 1 if it was still
/// pending, 0 if it had fired or was never made.
///
/// # Safety
/// `f` is NULL or a live fence; `eventfd` is open for the duration of the call; `withdrawn`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_fence_cancel_notify(
    f: *const BelfryFence,
    value: u64,
    eventfd: c_int,
    withdrawn: *mut u32,
) -> c_int {
    // SAFETY: the caller's contract for `f`.
    let Some(f) = (unsafe { ptr::shared(f) }) else { return invalid("belfry_fence_cancel_notify: fence") };
    if eventfd < 0 {
        return crate::errors::code(libc::EBADF, "belfry_fence_cancel_notify: eventfd");
    }
    // SAFETY: open for the duration of the call by the caller's contract; borrowed only.
    match f.0.cancel_notify(value, unsafe { BorrowedFd::borrow_raw(eventfd) }) {
        // SAFETY: the caller's contract for `withdrawn`.
        Ok(w) => Code::stored(unsafe { ptr::write(withdrawn, u32::from(w)) }, "belfry_fence_cancel_notify: withdrawn"),
        Err(e) => fail(&e),
    }
}

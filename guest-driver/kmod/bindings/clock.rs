// SPDX-License-Identifier: GPL-2.0

//! `CLOCK_MONOTONIC` as userspace reads it (`clock_gettime`), in nanoseconds: what the
//! absolute deadlines of the uapi are points of. The 7.3 `kernel::time::Instant` keeps its
//! nanoseconds to the `kernel` crate.

use kernel::bindings;

/// Nanoseconds of `CLOCK_MONOTONIC` now (`ktime_get`).
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: `ktime_get` has no preconditions; it reads the timekeeper and may be called from
    // any context.
    let ns = unsafe { bindings::ktime_get() };
    u64::try_from(ns).unwrap_or(0)
}

//! The clock of the uapi's deadlines, apart from the rest of `sys` so that [`crate::deadline`]
//! reads it without importing the system calls that take its deadlines.

/// `CLOCK_MONOTONIC` now, in nanoseconds (the clock of the uapi's deadlines).
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, exclusive `timespec` for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // CLOCK_MONOTONIC always exists on Linux; the time is never negative.
    debug_assert_eq!(rc, 0);
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

//! A CPU thread sleeping in `WAIT_FENCE` for each signal of a measurement (the interrupt-form
//! and wake-path figures share it), and the clock their stamps use.

use std::sync::mpsc;
use std::time::Duration;

use belfry_umd::Fence;

use crate::BoxError;

/// How long a sample may take.
pub(crate) const LIMIT: Duration = Duration::from_secs(10);

/// `CLOCK_MONOTONIC` now in nanoseconds (the module's `ktime_get` clock).
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// `n` rounds with a thread that waits on `fence` for `base + i` in round `i` (1-based): each
/// round starts once the thread is about to wait, and `round(i, woke)` signals; `woke()` then
/// gives the [`now_ns`] at which the thread returned from its wait (an error after [`LIMIT`]).
///
/// # Errors
/// The first error of a round, the thread's wait or a [`LIMIT`] passed.
pub(crate) fn with_sleeping_waiter(
    fence: &Fence,
    base: u64,
    n: u32,
    mut round: impl FnMut(u64, &mut dyn FnMut() -> Result<u64, BoxError>) -> Result<(), BoxError>,
) -> Result<(), BoxError> {
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let (woke_tx, woke_rx) = mpsc::channel::<Result<u64, String>>();
    std::thread::scope(|s| -> Result<(), BoxError> {
        s.spawn(move || {
            for i in 1..=u64::from(n) {
                if ready_tx.send(()).is_err() {
                    return;
                }
                let outcome = fence.wait(base + i, LIMIT).map(|()| now_ns()).map_err(|e| e.to_string());
                if woke_tx.send(outcome).is_err() {
                    return;
                }
            }
        });
        for i in 1..=u64::from(n) {
            ready_rx.recv_timeout(LIMIT)?;
            round(i, &mut || Ok(woke_rx.recv_timeout(LIMIT)??))?;
        }
        Ok(())
    })
}

//! Absolute deadlines ([`Deadline`]): points of `CLOCK_MONOTONIC`, as the module's
//! `WAIT_FENCES` takes them (`abi::uapi_sync`), or "forever".
//!
//! Every blocking call of the library has a deadline computed once, when the wait is asked
//! for, and every retry after a signal (`EINTR`) goes through one helper,
//! [`retry_interrupted`], which recomputes the time left from that deadline before each call:
//! `WAIT_FENCES` is called again with the very same absolute deadline, `poll` (a
//! [`crate::FenceEvent`] wait) with the time that remains of it. A process that keeps receiving
//! signals still times out when it asked to, and never earlier.

use std::io;
use std::time::Duration;

use belfry_abi::uapi_sync::DEADLINE_FOREVER;

use crate::sys::clock::monotonic_ns;

/// A point of `CLOCK_MONOTONIC` a wait ends at, or [`Deadline::FOREVER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(u64);

impl Deadline {
    /// Never.
    pub const FOREVER: Deadline = Deadline(DEADLINE_FOREVER);

    /// `timeout` from now (a wait with `Duration::ZERO` checks without sleeping;
    /// [`Duration::MAX`], or anything past the clock's range, is [`Deadline::FOREVER`]).
    pub fn after(timeout: Duration) -> Deadline {
        Self::after_from(monotonic_ns(), timeout)
    }

    /// `timeout` after the `CLOCK_MONOTONIC` time `now_ns`.
    fn after_from(now_ns: u64, timeout: Duration) -> Deadline {
        let ns = u64::try_from(timeout.as_nanos()).ok().and_then(|t| now_ns.checked_add(t));
        Deadline(ns.unwrap_or(DEADLINE_FOREVER))
    }

    /// The `CLOCK_MONOTONIC` time `ns` (nanoseconds, `clock_gettime`'s
    /// `tv_sec * 10^9 + tv_nsec`); `u64::MAX` is [`Deadline::FOREVER`].
    pub const fn at_monotonic_ns(ns: u64) -> Deadline {
        Deadline(ns)
    }

    /// The deadline as the uapi carries it: `CLOCK_MONOTONIC` nanoseconds, or
    /// `uapi_sync::DEADLINE_FOREVER`.
    pub const fn as_monotonic_ns(self) -> u64 {
        self.0
    }

    /// Whether this is [`Deadline::FOREVER`].
    pub const fn is_forever(self) -> bool {
        self.0 == DEADLINE_FOREVER
    }

    /// The time left until it (zero once it passed); `None` for [`Deadline::FOREVER`].
    pub fn remaining(self) -> Option<Duration> {
        self.remaining_from(monotonic_ns())
    }

    /// The time left from the `CLOCK_MONOTONIC` time `now_ns` (zero once it passed); `None`
    /// for [`Deadline::FOREVER`].
    fn remaining_from(self, now_ns: u64) -> Option<Duration> {
        (!self.is_forever()).then(|| Duration::from_nanos(self.0.saturating_sub(now_ns)))
    }
}

/// `poll(2)`'s timeout for `left` (as [`Deadline::remaining`] gives it): milliseconds rounded
/// up, so a wait never ends before its deadline; -1 (forever) for `None`.
pub(crate) fn poll_timeout_ms(left: Option<Duration>) -> i32 {
    left.map_or(-1, |left| {
        let ms = left.as_nanos().div_ceil(1_000_000);
        i32::try_from(ms).unwrap_or(i32::MAX)
    })
}

/// Calls `call` with the time left until `deadline` (`None`: forever), read from `now` (the
/// `CLOCK_MONOTONIC` nanoseconds) before each call, until it ends with something other than
/// `EINTR`. The one retry loop of the library's system calls: a caller that passes the time
/// left to a relative-timeout call (`poll`) so waits exactly until the deadline however many
/// signals arrive; one that passes the absolute deadline (`WAIT_FENCES`) ignores the argument.
pub(crate) fn retry_interrupted<T>(
    deadline: Deadline,
    now: impl Fn() -> u64,
    mut call: impl FnMut(Option<Duration>) -> io::Result<T>,
) -> io::Result<T> {
    loop {
        match call(deadline.remaining_from(now())) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_points_of_the_monotonic_clock() {
        assert_eq!(Deadline::after_from(1_000, Duration::from_nanos(500)).as_monotonic_ns(), 1_500);
        assert_eq!(Deadline::after_from(1_000, Duration::ZERO).as_monotonic_ns(), 1_000);
        assert_eq!(Deadline::after_from(5, Duration::MAX), Deadline::FOREVER);
        assert_eq!(Deadline::after_from(u64::MAX - 1, Duration::from_secs(1)), Deadline::FOREVER);
        assert!(Deadline::FOREVER.is_forever() && Deadline::FOREVER.remaining().is_none());
        let d = Deadline::after(Duration::from_secs(3600));
        let left = d.remaining().unwrap();
        assert!(left > Duration::from_secs(3590) && left <= Duration::from_secs(3600), "{left:?}");
        assert_eq!(Deadline::at_monotonic_ns(0).remaining(), Some(Duration::ZERO));
    }

    #[test]
    fn poll_timeouts_round_up_and_forever_is_minus_one() {
        assert_eq!(poll_timeout_ms(None), -1);
        assert_eq!(poll_timeout_ms(Some(Duration::ZERO)), 0);
        assert_eq!(poll_timeout_ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(poll_timeout_ms(Some(Duration::from_millis(300))), 300);
        assert_eq!(poll_timeout_ms(Some(Duration::from_secs(u64::MAX / 4))), i32::MAX);
    }

    /// A call interrupted by signals while 100 ms pass between calls (a fake clock): each
    /// retry gets what remains of the 300 ms, and the wait ends at the deadline instead of
    /// starting its 300 ms over after every signal.
    #[test]
    fn retries_after_eintr_get_the_time_left_until_the_deadline() {
        let clock = std::cell::Cell::new(1_000_000_000u64);
        let deadline = Deadline::after_from(clock.get(), Duration::from_millis(300));
        let mut asked = Vec::new();
        let r = retry_interrupted(
            deadline,
            || clock.get(),
            |left| {
                asked.push(poll_timeout_ms(left));
                clock.set(clock.get() + 100_000_000);
                // Interrupted until the time is up (or, for a loop that never counts down, 6 calls).
                if left == Some(Duration::ZERO) || asked.len() == 6 {
                    Ok(asked.len())
                } else {
                    Err(io::Error::from_raw_os_error(libc::EINTR))
                }
            },
        );
        assert_eq!(asked, [300, 200, 100, 0]);
        assert_eq!(r.unwrap(), 4);
        // Another error ends the retries at once; forever stays forever.
        let mut calls = Vec::new();
        let r: io::Result<()> = retry_interrupted(
            Deadline::FOREVER,
            || clock.get(),
            |left| {
                calls.push(left);
                Err(io::Error::from_raw_os_error(libc::EIO))
            },
        );
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(calls, [None]);
    }
}

//! Absolute deadlines ([`Deadline`]): points of `CLOCK_MONOTONIC`, as the module's
//! `WAIT_FENCES` takes them (`abi::uapi_sync`), or "forever".
//!
//! Every blocking wait of the library goes through `WAIT_FENCES` with a deadline computed once,
//! when the wait is asked for; a signal that interrupts it (`EINTR`) makes the library call
//! again with the very same deadline, so a process that keeps receiving signals still times out
//! when it asked to, and never earlier.

use std::time::Duration;

use belfry_abi::uapi_sync::DEADLINE_FOREVER;

use crate::sys;

/// A point of `CLOCK_MONOTONIC` a wait ends at, or [`Deadline::FOREVER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(u64);

impl Deadline {
    /// Never.
    pub const FOREVER: Deadline = Deadline(DEADLINE_FOREVER);

    /// `timeout` from now (a wait with `Duration::ZERO` checks without sleeping;
    /// [`Duration::MAX`], or anything past the clock's range, is [`Deadline::FOREVER`]).
    pub fn after(timeout: Duration) -> Deadline {
        Self::after_from(sys::monotonic_ns(), timeout)
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
        (!self.is_forever()).then(|| Duration::from_nanos(self.0.saturating_sub(sys::monotonic_ns())))
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
}

//! Rate-limited logging of what a guest can cause at will (a store to an unused offset, a
//! write to a read-only register, a mailbox submit in D3hot): one [`LogLimiter`] per kind of
//! occurrence logs its 1st, 2nd, 4th, 8th, … occurrence with the count so far, so a process
//! hammering the device adds a logarithmic number of lines to the device's log, not one per
//! store, and the count is never lost. Counting, not time, decides: no clock read on the
//! access path and the same lines for the same accesses.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts the occurrences of one kind of event and says which to log.
#[derive(Debug, Default)]
pub struct LogLimiter {
    seen: AtomicU64,
}

impl LogLimiter {
    /// A limiter that has seen nothing.
    pub const fn new() -> Self {
        LogLimiter { seen: AtomicU64::new(0) }
    }

    /// Counts one occurrence; its number when it is one to log (a power of two).
    pub fn admit(&self) -> Option<u64> {
        let n = self.seen.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        n.is_power_of_two().then_some(n)
    }

    /// Occurrences so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Occurrences logged so far (one per power of two up to [`LogLimiter::seen`]).
    pub fn logged(&self) -> u64 {
        u64::from(u64::BITS - self.seen().leading_zeros())
    }
}

/// `log::warn!` through a [`LogLimiter`]: the message, then `(N so far)`, on the occurrences
/// the limiter admits.
#[macro_export]
macro_rules! warn_limited {
    ($limiter:expr, $($arg:tt)+) => {
        if let Some(n) = $limiter.admit() {
            log::warn!("{} ({n} so far)", format_args!($($arg)+));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_are_admitted_and_everything_is_counted() {
        let l = LogLimiter::new();
        let admitted: Vec<u64> = (0..10_000).filter_map(|_| l.admit()).collect();
        assert_eq!(admitted, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]);
        assert_eq!((l.seen(), l.logged()), (10_000, 14));
        assert_eq!(LogLimiter::new().logged(), 0);
    }
}

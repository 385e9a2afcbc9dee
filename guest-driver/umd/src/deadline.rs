//! Blocking waits with a relative timeout (`WAIT_FENCE`, `WAIT_PROGRESS`), restarted after a
//! signal interrupts them (`EINTR`) with the time left until the original deadline, not the
//! full timeout again: a process that keeps receiving signals still times out when it asked to.

use std::io;
use std::time::{Duration, Instant};

/// Calls `call` with a timeout in nanoseconds, `timeout` first, and after each `EINTR` again
/// with what is left of `timeout` since the first call, measured by `now` (0 once it has
/// passed: the module then checks without sleeping). Returns the first other result.
///
/// # Errors
/// The first error of `call` other than `EINTR`.
pub(crate) fn restart_with_deadline(
    timeout: Duration,
    now: impl Fn() -> Instant,
    mut call: impl FnMut(u64) -> io::Result<()>,
) -> io::Result<()> {
    let start = now();
    loop {
        let left = timeout.saturating_sub(now().saturating_duration_since(start));
        match call(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX)) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;

    #[test]
    fn an_interrupted_wait_restarts_with_the_time_left() {
        let t0 = Instant::now();
        let clock = Cell::new(t0);
        let seen = RefCell::new(Vec::new());
        let r = restart_with_deadline(
            Duration::from_millis(100),
            || clock.get(),
            |ns| {
                seen.borrow_mut().push(ns);
                // Each call is interrupted after 40 ms; the third finds the deadline passed.
                clock.set(clock.get() + Duration::from_millis(40));
                if ns == 0 {
                    return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
                }
                Err(io::Error::from_raw_os_error(libc::EINTR))
            },
        );
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ETIMEDOUT));
        assert_eq!(*seen.borrow(), [100_000_000, 60_000_000, 20_000_000, 0]);
    }

    #[test]
    fn a_wait_that_ends_is_not_restarted() {
        let mut calls = 0;
        restart_with_deadline(Duration::ZERO, Instant::now, |ns| {
            calls += 1;
            assert_eq!(ns, 0);
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 1);
    }
}

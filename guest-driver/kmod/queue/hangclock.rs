// SPDX-License-Identifier: GPL-2.0

//! The per-engine hang clock of [`watch`](super::watch), pure (host-tested): an engine is
//! pending while a queue on it has submitted work its progress has not reached; every advance
//! of a progress value on it restarts the clock; an engine pending without progress for the
//! timeout is reported once and its clock restarts (the reset that follows decides whether
//! anyone was guilty).

/// One engine's clock: since when (ms, any monotonic origin) it has been pending without
/// progress, or `None` when it is not pending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HangClock {
    /// Start of the current pending-without-progress stretch.
    since: Option<u64>,
}

impl HangClock {
    /// One look at time `now` (ms): whether the engine is `pending` and whether it
    /// `progressed` since the last look. The time it waited (ms) when that reached
    /// `timeout_ms`: the engine is to be reset.
    pub(crate) fn look(&mut self, now: u64, pending: bool, progressed: bool, timeout_ms: u64) -> Option<u64> {
        if !pending {
            self.since = None;
            return None;
        }
        match self.since {
            Some(start) if !progressed => {
                let waited = now.saturating_sub(start);
                if waited < timeout_ms {
                    return None;
                }
                self.since = Some(now);
                Some(waited)
            }
            _ => {
                self.since = Some(now);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_engine_without_progress_is_reported_once_per_timeout() {
        let mut c = HangClock::default();
        assert_eq!(c.look(0, true, false, 400), None, "the clock starts");
        assert_eq!(c.look(399, true, false, 400), None);
        assert_eq!(c.look(410, true, false, 400), Some(410));
        assert_eq!(c.look(500, true, false, 400), None, "restarted after the report");
        assert_eq!(c.look(810, true, false, 400), Some(400));
    }

    #[test]
    fn progress_or_an_idle_engine_restarts_the_clock() {
        let mut c = HangClock::default();
        c.look(0, true, false, 400);
        assert_eq!(c.look(300, true, true, 400), None, "progress");
        assert_eq!(c.look(650, true, false, 400), None, "only 350 ms since the progress");
        assert_eq!(c.look(700, true, false, 400), Some(400));
        assert_eq!(c.look(800, false, false, 400), None, "nothing pending");
        assert_eq!(c.look(5000, true, false, 400), None, "pending again: a new stretch starts");
        assert_eq!(c.look(5399, true, false, 400), None);
    }
}

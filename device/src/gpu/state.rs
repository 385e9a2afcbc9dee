//! Queue and context states and every transition between them, in one place.
//!
//! A queue is [`QueueState::Idle`] until a doorbell or `KICK_QUEUE` makes it
//! [`Ready`](QueueState::Ready); an engine picks a ready queue ([`QueueState::pick`]) and runs
//! a slice of it ([`Running`](QueueState::Running)); the slice's end ([`SliceEnd`]) makes it
//! ready again, idle, [`Waiting`](QueueState::Waiting) in a `FENCE_WAIT` (an engine picks it
//! again once the fence is reached) or [`Hung`](QueueState::Hung) for good. A kick that arrives
//! while the queue runs is remembered, so an empty ring read before the kick does not lose it.
//!
//! A context is [`ContextState::Active`], [`Suspended`](ContextState::Suspended) (off the
//! runlists) or [`Faulted`](ContextState::Faulted); a fault is kept until the context is
//! destroyed and outranks suspension: resuming a faulted context leaves it faulted.

use std::time::Duration;

use belfry_abi::engine::{FaultReason, QueueState as Reported};
use belfry_abi::ids::QueueId;

/// Where an engine is inside a queue's current command buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// Next packet.
    pub va: u64,
    /// End of the buffer.
    pub end: u64,
    /// Executing time spent in this submission so far (fence waits excluded).
    pub busy: Duration,
    /// The ring entry carried `RING_FLAG_SPLIT_CONTINUES`: a split part with more to come.
    pub continues: bool,
}

/// A `FENCE_WAIT` a queue is blocked in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// GPU VA of the CurrentValue.
    pub fence_va: u64,
    /// Value awaited.
    pub value: u64,
    /// GPU time the engine first saw the wait.
    pub observed: u64,
}

/// How a slice of a queue ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceEnd {
    /// Budget used; more may remain.
    Yield,
    /// The ring is empty.
    Empty,
    /// Parked in a fence wait at this point of the buffer.
    Blocked(Cursor, Wait),
    /// A guest error: why and the faulting address.
    Fault(FaultReason, u64),
    /// Over the hang timeout.
    Hung,
}

/// Where a hardware queue is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueState {
    /// Nothing announced: the ring is read again only after a kick.
    Idle,
    /// An engine should run it: work was announced (`cursor` `None`: read the ring) or a command
    /// buffer is in progress.
    Ready {
        /// Position in the current command buffer.
        cursor: Option<Cursor>,
    },
    /// An engine is running a slice of it now.
    Running {
        /// The wait it was picked from (it stays "waiting" for `QUERY_QUEUE` until the slice ends).
        wait: Option<Wait>,
        /// A kick arrived during the slice.
        kicked: bool,
    },
    /// Parked in a `FENCE_WAIT`.
    Waiting {
        /// The `FENCE_WAIT` packet's position.
        cursor: Cursor,
        /// What it waits for.
        wait: Wait,
    },
    /// Stopped by the hang watchdog; it never runs again.
    Hung,
}

impl QueueState {
    /// A doorbell, `KICK_QUEUE`, a doorbell connect or a context resume announced work.
    pub fn kick(&mut self) {
        match self {
            QueueState::Idle => *self = QueueState::Ready { cursor: None },
            QueueState::Running { kicked, .. } => *kicked = true,
            // Already due to run, parked (the wait decides), or stopped for good.
            QueueState::Ready { .. } | QueueState::Waiting { .. } | QueueState::Hung => {}
        }
    }

    /// Whether an engine should pick it now; `fence_reached` says whether a wait is satisfied.
    pub fn is_ready(&self, fence_reached: impl FnOnce(&Wait) -> bool) -> bool {
        match self {
            QueueState::Ready { .. } => true,
            QueueState::Waiting { wait, .. } => fence_reached(wait),
            QueueState::Idle | QueueState::Running { .. } | QueueState::Hung => false,
        }
    }

    /// An engine takes the queue for a slice: the cursor and the wait it resumes from, or `None`
    /// if it has nothing to run.
    pub fn pick(&mut self) -> Option<(Option<Cursor>, Option<Wait>)> {
        let resume = match *self {
            QueueState::Ready { cursor } => (cursor, None),
            QueueState::Waiting { cursor, wait } => (Some(cursor), Some(wait)),
            QueueState::Idle | QueueState::Running { .. } | QueueState::Hung => return None,
        };
        *self = QueueState::Running { wait: resume.1, kicked: false };
        Some(resume)
    }

    /// The slice picked by [`pick`](Self::pick) ended with `end` at `cursor`.
    pub fn finish(&mut self, end: SliceEnd, cursor: Option<Cursor>) {
        let kicked = matches!(self, QueueState::Running { kicked: true, .. });
        *self = match end {
            SliceEnd::Yield => QueueState::Ready { cursor },
            SliceEnd::Blocked(cursor, wait) => QueueState::Waiting { cursor, wait },
            SliceEnd::Hung => QueueState::Hung,
            // A faulted queue keeps its place; its context no longer runs.
            SliceEnd::Empty | SliceEnd::Fault(..) if kicked || cursor.is_some() => QueueState::Ready { cursor },
            SliceEnd::Empty | SliceEnd::Fault(..) => QueueState::Idle,
        };
    }

    /// The wait it is parked in (or was picked from), if any.
    pub fn wait(&self) -> Option<Wait> {
        match *self {
            QueueState::Waiting { wait, .. } | QueueState::Running { wait: Some(wait), .. } => Some(wait),
            _ => None,
        }
    }

    /// The command buffer it is inside (ready to go on, or parked in a wait), if any.
    pub fn cursor(&self) -> Option<Cursor> {
        match *self {
            QueueState::Ready { cursor } => cursor,
            QueueState::Waiting { cursor, .. } => Some(cursor),
            QueueState::Idle | QueueState::Running { .. } | QueueState::Hung => None,
        }
    }

    /// Whether it has work announced, in progress or parked (an engine running it is not idle).
    pub fn has_work(&self) -> bool {
        !matches!(self, QueueState::Idle | QueueState::Hung)
    }

    /// Whether the watchdog stopped it.
    pub fn is_hung(&self) -> bool {
        *self == QueueState::Hung
    }

    /// How guilty it is of a hang, for `RESET_ENGINE` (not while a slice runs): stopped by the
    /// watchdog ranks first, then an unfinished command buffer by the time spent executing it;
    /// `None` for a queue with no unfinished buffer or one parked in a fence wait.
    pub fn hang_rank(&self) -> Option<Duration> {
        match *self {
            QueueState::Hung => Some(Duration::MAX),
            QueueState::Ready { cursor: Some(c) } => Some(c.busy),
            _ => None,
        }
    }

    /// `RESET_ENGINE` dropped its work: the unfinished buffer is forgotten (its context is
    /// faulted, so nothing of it runs again).
    pub fn drop_work(&mut self) {
        *self = QueueState::Idle;
    }
}

/// A context's fault, kept until the context is destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Why.
    pub reason: FaultReason,
    /// Faulting GPU VA (or 0).
    pub address: u64,
    /// Queue that faulted.
    pub queue: QueueId,
}

/// Whether a context's queues may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextState {
    /// Its queues run.
    Active,
    /// Off the runlists (`SUSPEND_CONTEXT`).
    Suspended,
    /// A queue of it faulted: every queue of the context stops.
    Faulted(Fault),
}

impl ContextState {
    /// `SUSPEND_CONTEXT`.
    pub fn suspend(&mut self) {
        if *self == ContextState::Active {
            *self = ContextState::Suspended;
        }
    }

    /// `RESUME_CONTEXT`.
    pub fn resume(&mut self) {
        if *self == ContextState::Suspended {
            *self = ContextState::Active;
        }
    }

    /// A queue of the context faulted; the first fault is the one kept.
    pub fn fault(&mut self, fault: Fault) {
        if !matches!(self, ContextState::Faulted(_)) {
            *self = ContextState::Faulted(fault);
        }
    }

    /// Whether its queues may run.
    pub fn runs(&self) -> bool {
        *self == ContextState::Active
    }

    /// Its fault, if any.
    pub fn fault_info(&self) -> Option<Fault> {
        match *self {
            ContextState::Faulted(f) => Some(f),
            _ => None,
        }
    }
}

/// The state `QUERY_QUEUE` reports for a queue in `queue` whose context is in `context`: a
/// fault first, then a hang, a suspension, a wait, idle without work, and running otherwise.
pub fn reported(queue: &QueueState, context: Option<ContextState>) -> Reported {
    match (queue, context) {
        (_, Some(ContextState::Faulted(_))) => Reported::Faulted,
        (QueueState::Hung, _) => Reported::Hung,
        (_, Some(ContextState::Suspended)) => Reported::Suspended,
        _ if queue.wait().is_some() => Reported::Waiting,
        _ if !queue.has_work() => Reported::Idle,
        _ => Reported::Running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(va: u64) -> Cursor {
        Cursor { va, end: va + 64, busy: Duration::ZERO, continues: false }
    }

    fn wait() -> Wait {
        Wait { fence_va: 0x1000, value: 5, observed: 1 }
    }

    #[test]
    fn query_queue_reports_idle_only_when_the_device_holds_no_work() {
        let active = Some(ContextState::Active);
        let mut q = QueueState::Idle;
        assert_eq!(reported(&q, active), Reported::Idle);
        q.kick();
        assert_eq!(reported(&q, active), Reported::Running, "announced, not yet read");
        q.pick();
        assert_eq!(reported(&q, active), Reported::Running, "in a slice");
        q.finish(SliceEnd::Empty, None);
        assert_eq!(reported(&q, active), Reported::Idle, "its ring read empty");
        let parked = QueueState::Waiting { cursor: cursor(0x1000), wait: wait() };
        assert_eq!(reported(&parked, active), Reported::Waiting);
        assert_eq!(reported(&QueueState::Idle, Some(ContextState::Suspended)), Reported::Suspended);
    }

    #[test]
    fn a_kick_makes_an_idle_queue_ready_and_a_slice_consumes_it() {
        let mut q = QueueState::Idle;
        assert!(!q.is_ready(|_| true) && !q.has_work());
        q.kick();
        assert_eq!(q, QueueState::Ready { cursor: None });
        assert_eq!(q.pick(), Some((None, None)));
        assert_eq!(q.pick(), None, "a running queue is not picked twice");
        q.finish(SliceEnd::Empty, None);
        assert_eq!(q, QueueState::Idle);
    }

    #[test]
    fn a_kick_during_a_slice_is_not_lost_when_the_ring_read_empty() {
        let mut q = QueueState::Ready { cursor: None };
        q.pick();
        q.kick();
        q.finish(SliceEnd::Empty, None);
        assert_eq!(q, QueueState::Ready { cursor: None });
    }

    #[test]
    fn a_yield_keeps_the_queue_ready_at_its_cursor() {
        let mut q = QueueState::Ready { cursor: Some(cursor(0x100)) };
        assert_eq!(q.pick(), Some((Some(cursor(0x100)), None)));
        q.finish(SliceEnd::Yield, Some(cursor(0x140)));
        assert_eq!(q, QueueState::Ready { cursor: Some(cursor(0x140)) });
    }

    #[test]
    fn a_blocked_queue_waits_for_its_fence_then_resumes_with_its_wait() {
        let mut q = QueueState::Ready { cursor: Some(cursor(0x100)) };
        q.pick();
        q.finish(SliceEnd::Blocked(cursor(0x120), wait()), Some(cursor(0x120)));
        assert_eq!(q.wait(), Some(wait()));
        assert!(q.has_work());
        q.kick();
        assert!(!q.is_ready(|_| false), "a kick does not release a wait");
        assert!(q.is_ready(|w| w.value == 5));
        assert_eq!(q.pick(), Some((Some(cursor(0x120)), Some(wait()))));
        assert_eq!(q.wait(), Some(wait()), "still reported waiting while the slice runs");
        q.finish(SliceEnd::Empty, None);
        assert_eq!(q, QueueState::Idle);
    }

    #[test]
    fn a_hung_queue_never_runs_again() {
        let mut q = QueueState::Ready { cursor: Some(cursor(0)) };
        q.pick();
        q.finish(SliceEnd::Hung, Some(cursor(0x40)));
        assert!(q.is_hung() && !q.has_work());
        q.kick();
        assert_eq!(q, QueueState::Hung);
        assert_eq!(q.pick(), None);
    }

    #[test]
    fn the_hung_queue_outranks_the_longest_busy_one_and_waits_are_never_guilty() {
        let hung = QueueState::Hung;
        let busy = |ms| QueueState::Ready { cursor: Some(Cursor { busy: Duration::from_millis(ms), ..cursor(0) }) };
        assert!(hung.hang_rank() > busy(5000).hang_rank());
        assert!(busy(300).hang_rank() > busy(20).hang_rank());
        assert_eq!(QueueState::Ready { cursor: None }.hang_rank(), None, "no unfinished buffer");
        assert_eq!(QueueState::Waiting { cursor: cursor(0), wait: wait() }.hang_rank(), None);
        assert_eq!(QueueState::Idle.hang_rank(), None);
        let mut q = busy(10);
        q.drop_work();
        assert_eq!(q, QueueState::Idle);
    }

    #[test]
    fn a_faulted_slice_keeps_the_queue_position() {
        let mut q = QueueState::Ready { cursor: Some(cursor(0)) };
        q.pick();
        q.finish(SliceEnd::Fault(FaultReason::BadPacket, 8), Some(cursor(8)));
        assert_eq!(q, QueueState::Ready { cursor: Some(cursor(8)) });
        let mut idle = QueueState::Ready { cursor: None };
        idle.pick();
        idle.finish(SliceEnd::Fault(FaultReason::BadRing, 8), None);
        assert_eq!(idle, QueueState::Idle);
    }

    #[test]
    fn a_fault_outranks_suspension_and_the_first_fault_is_kept() {
        let first = Fault { reason: FaultReason::BadPacket, address: 1, queue: QueueId::new(1) };
        let second = Fault { reason: FaultReason::BadRing, address: 2, queue: QueueId::new(2) };
        let mut c = ContextState::Active;
        assert!(c.runs());
        c.suspend();
        assert_eq!(c, ContextState::Suspended);
        assert!(!c.runs());
        c.resume();
        assert!(c.runs());
        c.suspend();
        c.fault(first);
        c.fault(second);
        assert_eq!(c.fault_info(), Some(first));
        c.resume();
        assert_eq!(c, ContextState::Faulted(first), "resuming a faulted context leaves it faulted");
        c.suspend();
        assert!(!c.runs());
    }
}

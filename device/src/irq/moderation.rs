//! Interrupt moderation (`CAPS.irq_moderation`, `IRQ_MODERATION`, `IRQ_MODERATED`): an
//! interrupt throttle as NICs and GPUs have. A vector carrying record causes (fences, NOTIFY,
//! engine state, faults) is raised at most once per interval; a raise sooner is held, and the
//! held causes are raised together when the interval ends (by the moderation thread). The
//! records themselves are written to the interrupt ring at once, so an interrupt covers every
//! record written before it, and a lone raise after a quiet interval goes out at once (no
//! latency added to an idle device). Mailbox completions are never held: a driver waits for
//! them one at a time.
//!
//! The decision ([`Throttle`]) is pure over a clock value, so unit tests drive it without
//! sleeping; [`super::InterruptBlock`] owns one and the thread that ends the intervals.

use belfry_abi::irq;

/// Causes the throttle may hold back.
pub const MODERATED: u32 =
    irq::cause::NATIVE_FENCE | irq::cause::MONITORED_FENCE | irq::cause::ENGINE_STATE | irq::cause::FAULT;

/// What to do with a raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Deliver it now.
    Now,
    /// Held: it goes out with the vector's next delivery, at the latest at this time (ns).
    Held(u64),
}

/// Per-vector moderation state.
#[derive(Clone, Copy, Debug, Default)]
struct Vector {
    /// When this vector was last delivered (ns), if ever.
    last: Option<u64>,
    /// Causes held since.
    pending: u32,
}

/// The moderation decision for every vector of a device.
#[derive(Debug)]
pub struct Throttle {
    interval_ns: u64,
    vectors: Vec<Vector>,
    /// Raises held back (folded into a later delivery), wrapping.
    pub held: u32,
}

impl Throttle {
    /// A throttle for `vectors` vectors with an interval of `us` microseconds.
    pub fn new(vectors: u16, us: u32) -> Self {
        Throttle { interval_ns: u64::from(us) * 1000, vectors: vec![Vector::default(); usize::from(vectors)], held: 0 }
    }

    /// The interval in microseconds.
    pub fn interval_us(&self) -> u32 {
        u32::try_from(self.interval_ns / 1000).unwrap_or(u32::MAX)
    }

    /// Sets the interval; a shorter one lets held causes go at the new interval's end.
    pub fn set_interval_us(&mut self, us: u32) {
        self.interval_ns = u64::from(us) * 1000;
    }

    /// Forgets every vector's history and held causes (device reset), keeping the interval.
    pub fn reset(&mut self, us: u32) {
        self.vectors.iter_mut().for_each(|v| *v = Vector::default());
        self.interval_ns = u64::from(us) * 1000;
        self.held = 0;
    }

    /// A raise of `cause` on `vector` at `now`: deliver now or hold. Causes outside
    /// [`MODERATED`] always go now, and so does any raise with moderation off.
    pub fn admit(&mut self, vector: u16, cause: u32, now: u64) -> Admit {
        let interval = self.interval_ns;
        let Some(v) = self.vectors.get_mut(usize::from(vector)) else { return Admit::Now };
        if interval == 0 || cause & !MODERATED != 0 {
            *v = Vector { last: Some(now), pending: 0 };
            return Admit::Now;
        }
        match v.last {
            Some(last) if now.saturating_sub(last) < interval => {
                v.pending |= cause;
                self.held = self.held.wrapping_add(1);
                Admit::Held(last.saturating_add(interval))
            }
            _ => {
                *v = Vector { last: Some(now), pending: 0 };
                Admit::Now
            }
        }
    }

    /// The earliest time a held vector is due, if any is held.
    pub fn next_due(&self) -> Option<u64> {
        self.vectors
            .iter()
            .filter(|v| v.pending != 0)
            .filter_map(|v| v.last.map(|l| l.saturating_add(self.interval_ns)))
            .min()
    }

    /// Takes the vectors whose interval has ended at `now`, with their held causes, and marks
    /// them delivered at `now`.
    pub fn take_due(&mut self, now: u64) -> Vec<(u16, u32)> {
        let interval = self.interval_ns;
        let mut due = Vec::new();
        for (i, v) in self.vectors.iter_mut().enumerate() {
            let ready = v.last.is_none_or(|l| now.saturating_sub(l) >= interval);
            if v.pending != 0 && ready {
                if let Ok(vector) = u16::try_from(i) {
                    due.push((vector, v.pending));
                }
                *v = Vector { last: Some(now), pending: 0 };
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use belfry_abi::irq::cause;

    const US: u64 = 1000;

    #[test]
    fn a_storm_gets_one_interrupt_per_interval_and_the_held_causes_at_its_end() {
        let mut t = Throttle::new(4, 100);
        assert_eq!(t.admit(1, cause::NATIVE_FENCE, 0), Admit::Now);
        // 99 more raises within the interval: all held, due at its end.
        for i in 1..100 {
            assert_eq!(t.admit(1, cause::MONITORED_FENCE, i * US / 2), Admit::Held(100 * US));
        }
        assert_eq!(t.held, 99);
        assert_eq!(t.next_due(), Some(100 * US));
        assert!(t.take_due(99 * US).is_empty(), "not before the interval ends");
        assert_eq!(t.take_due(100 * US), vec![(1, cause::MONITORED_FENCE)]);
        assert_eq!(t.next_due(), None);
        // The next raise within the new interval is held again.
        assert_eq!(t.admit(1, cause::FAULT, 150 * US), Admit::Held(200 * US));
    }

    #[test]
    fn a_lone_raise_after_a_quiet_interval_goes_at_once() {
        let mut t = Throttle::new(4, 100);
        assert_eq!(t.admit(1, cause::NATIVE_FENCE, 0), Admit::Now);
        assert_eq!(t.admit(1, cause::NATIVE_FENCE, 100 * US), Admit::Now);
        assert_eq!(t.admit(2, cause::ENGINE_STATE, 100 * US), Admit::Now, "vectors are throttled apart");
    }

    #[test]
    fn mailbox_completions_and_an_interval_of_zero_are_never_held() {
        let mut t = Throttle::new(1, 100);
        assert_eq!(t.admit(0, cause::NATIVE_FENCE, 0), Admit::Now);
        assert_eq!(t.admit(0, cause::MAILBOX, US), Admit::Now);
        assert_eq!(t.admit(0, cause::MAILBOX | cause::NATIVE_FENCE, 2 * US), Admit::Now);
        t.set_interval_us(0);
        assert_eq!(t.admit(0, cause::NATIVE_FENCE, 3 * US), Admit::Now);
        assert_eq!(t.held, 0);
    }

    #[test]
    fn an_unmoderated_delivery_covers_what_was_held() {
        let mut t = Throttle::new(1, 100);
        t.admit(0, cause::NATIVE_FENCE, 0);
        assert!(matches!(t.admit(0, cause::NATIVE_FENCE, US), Admit::Held(_)));
        assert_eq!(t.admit(0, cause::MAILBOX, 2 * US), Admit::Now);
        assert_eq!(t.next_due(), None, "the mailbox interrupt carried the held records");
    }
}

//! The hardware scheduler's choice, as pure logic: which queue an engine runs next.
//!
//! Each engine has a runlist of queues with priorities. The highest priority that has a
//! runnable queue wins; queues of equal priority take turns (round robin, resuming after the
//! last one picked). No fds, no guest memory: "runnable" is a predicate the caller supplies.

use std::collections::BTreeMap;

use belfry_abi::ids::{EngineId, QueueId};

/// A queue on a runlist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    engine: EngineId,
    priority: u32,
}

/// Runlists of every engine.
#[derive(Debug, Default)]
pub struct Scheduler {
    queues: BTreeMap<QueueId, Entry>,
    last: BTreeMap<(EngineId, u32), QueueId>,
}

impl Scheduler {
    /// Puts `queue` on `engine`'s runlist at `priority` (replacing any earlier entry).
    pub fn add(&mut self, queue: QueueId, engine: EngineId, priority: u32) {
        self.queues.insert(queue, Entry { engine, priority });
    }

    /// Takes `queue` off its runlist.
    pub fn remove(&mut self, queue: QueueId) {
        self.queues.remove(&queue);
    }

    /// Whether `queue` is on a runlist.
    pub fn contains(&self, queue: QueueId) -> bool {
        self.queues.contains_key(&queue)
    }

    /// The priority of `queue` on its runlist.
    pub fn priority(&self, queue: QueueId) -> Option<u32> {
        self.queues.get(&queue).map(|e| e.priority)
    }

    /// Queues on `engine`'s runlist, in id order.
    pub fn runlist(&self, engine: EngineId) -> impl Iterator<Item = QueueId> + '_ {
        self.queues.iter().filter(move |(_, e)| e.engine == engine).map(|(q, _)| *q)
    }

    /// The queue `engine` should run next among those `runnable` says can run, if any.
    pub fn next(&mut self, engine: EngineId, mut runnable: impl FnMut(QueueId) -> bool) -> Option<QueueId> {
        let mut priorities: Vec<u32> =
            self.queues.values().filter(|e| e.engine == engine).map(|e| e.priority).collect();
        priorities.sort_unstable_by(|a, b| b.cmp(a));
        priorities.dedup();
        for priority in priorities {
            let ids: Vec<QueueId> = self
                .queues
                .iter()
                .filter(|(_, e)| e.engine == engine && e.priority == priority)
                .map(|(q, _)| *q)
                .collect();
            let after = self.last.get(&(engine, priority)).copied();
            let start = after.map_or(0, |a| ids.iter().position(|&q| q > a).unwrap_or(0));
            let order = ids[start..].iter().chain(&ids[..start]);
            for &q in order {
                if runnable(q) {
                    self.last.insert((engine, priority), q);
                    return Some(q);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: u32) -> QueueId {
        QueueId::new(id)
    }

    const E0: EngineId = EngineId::new(0);
    const E1: EngineId = EngineId::new(1);

    #[test]
    fn equal_priorities_take_turns() {
        let mut s = Scheduler::default();
        for id in [1, 2, 3] {
            s.add(q(id), E0, 1);
        }
        let picks: Vec<_> = (0..6).map(|_| s.next(E0, |_| true).unwrap()).collect();
        assert_eq!(picks, [1, 2, 3, 1, 2, 3].map(q).to_vec());
    }

    #[test]
    fn higher_priority_runs_first_and_lower_runs_when_it_cannot() {
        let mut s = Scheduler::default();
        s.add(q(1), E0, 0);
        s.add(q(2), E0, 3);
        assert_eq!(s.next(E0, |_| true), Some(q(2)));
        assert_eq!(s.next(E0, |_| true), Some(q(2)));
        assert_eq!(s.next(E0, |x| x != q(2)), Some(q(1)));
        assert_eq!((s.priority(q(2)), s.priority(q(9))), (Some(3), None));
    }

    #[test]
    fn engines_have_separate_runlists_and_removal_works() {
        let mut s = Scheduler::default();
        s.add(q(1), E0, 0);
        s.add(q(2), E1, 0);
        assert_eq!(s.next(E1, |_| true), Some(q(2)));
        assert_eq!(s.runlist(E0).collect::<Vec<_>>(), vec![q(1)]);
        s.remove(q(2));
        assert_eq!(s.next(E1, |_| true), None);
        assert!(!s.contains(q(2)));
    }

    #[test]
    fn non_runnable_queues_are_skipped_without_losing_their_turn() {
        let mut s = Scheduler::default();
        for id in [1, 2, 3] {
            s.add(q(id), E0, 0);
        }
        assert_eq!(s.next(E0, |x| x == q(2)), Some(q(2)));
        assert_eq!(s.next(E0, |_| true), Some(q(3)));
        assert_eq!(s.next(E0, |_| true), Some(q(1)));
        assert_eq!(s.next(E0, |_| false), None);
    }
}

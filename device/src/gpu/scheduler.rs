//! The hardware scheduler's choice, as pure logic: which queue an engine runs next.
//!
//! Each engine has a runlist of queues with priorities. The highest priority that has a
//! runnable queue wins; queues of equal priority take turns (round robin, resuming after the
//! last one picked). No fds, no guest memory: "runnable" is a predicate the caller supplies.

use std::collections::BTreeMap;

/// A queue on a runlist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    engine: u32,
    priority: u32,
}

/// Runlists of every engine.
#[derive(Debug, Default)]
pub struct Scheduler {
    queues: BTreeMap<u32, Entry>,
    last: BTreeMap<(u32, u32), u32>,
}

impl Scheduler {
    /// Puts `queue` on `engine`'s runlist at `priority` (replacing any earlier entry).
    pub fn add(&mut self, queue: u32, engine: u32, priority: u32) {
        self.queues.insert(queue, Entry { engine, priority });
    }

    /// Takes `queue` off its runlist.
    pub fn remove(&mut self, queue: u32) {
        self.queues.remove(&queue);
    }

    /// Whether `queue` is on a runlist.
    pub fn contains(&self, queue: u32) -> bool {
        self.queues.contains_key(&queue)
    }

    /// Queues on `engine`'s runlist, in id order.
    pub fn runlist(&self, engine: u32) -> impl Iterator<Item = u32> + '_ {
        self.queues.iter().filter(move |(_, e)| e.engine == engine).map(|(q, _)| *q)
    }

    /// The queue `engine` should run next among those `runnable` says can run, if any.
    pub fn next(&mut self, engine: u32, mut runnable: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut priorities: Vec<u32> =
            self.queues.values().filter(|e| e.engine == engine).map(|e| e.priority).collect();
        priorities.sort_unstable_by(|a, b| b.cmp(a));
        priorities.dedup();
        for priority in priorities {
            let ids: Vec<u32> = self
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

    #[test]
    fn equal_priorities_take_turns() {
        let mut s = Scheduler::default();
        for q in [1, 2, 3] {
            s.add(q, 0, 1);
        }
        let picks: Vec<_> = (0..6).map(|_| s.next(0, |_| true).unwrap()).collect();
        assert_eq!(picks, vec![1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn higher_priority_runs_first_and_lower_runs_when_it_cannot() {
        let mut s = Scheduler::default();
        s.add(1, 0, 0);
        s.add(2, 0, 3);
        assert_eq!(s.next(0, |_| true), Some(2));
        assert_eq!(s.next(0, |_| true), Some(2));
        assert_eq!(s.next(0, |q| q != 2), Some(1));
    }

    #[test]
    fn engines_have_separate_runlists_and_removal_works() {
        let mut s = Scheduler::default();
        s.add(1, 0, 0);
        s.add(2, 1, 0);
        assert_eq!(s.next(1, |_| true), Some(2));
        assert_eq!(s.runlist(0).collect::<Vec<_>>(), vec![1]);
        s.remove(2);
        assert_eq!(s.next(1, |_| true), None);
        assert!(!s.contains(2));
    }

    #[test]
    fn non_runnable_queues_are_skipped_without_losing_their_turn() {
        let mut s = Scheduler::default();
        for q in [1, 2, 3] {
            s.add(q, 0, 0);
        }
        assert_eq!(s.next(0, |q| q == 2), Some(2));
        assert_eq!(s.next(0, |_| true), Some(3));
        assert_eq!(s.next(0, |_| true), Some(1));
        assert_eq!(s.next(0, |_| false), None);
    }
}

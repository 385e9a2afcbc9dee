// SPDX-License-Identifier: GPL-2.0

//! The physical-doorbell slots and their least-recently-used order: slot `i` holds the
//! doorbell connected to physical doorbell `i` and the stamp of its last use. Pure `core` code
//! over slices, compiled into the module and into the host crate `belfry-kmod-host`, whose
//! tests run it.

/// One physical doorbell: its holder and the stamp of the holder's last use, or free.
pub(crate) type Slot<T> = Option<(T, u64)>;

/// The clock the stamps come from: every connect and every use takes a new, larger stamp.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LruClock(u64);

impl LruClock {
    /// A clock that has stamped nothing.
    pub(crate) const fn new() -> Self {
        Self(0)
    }

    /// A new stamp, larger than every earlier one.
    fn tick(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }

    /// Gives slot `index` to `holder`, most recently used; `false` (nothing changes) for an
    /// index past the slots.
    pub(crate) fn claim<T>(&mut self, slots: &mut [Slot<T>], index: usize, holder: T) -> bool {
        let stamp = self.tick();
        let Some(slot) = slots.get_mut(index) else {
            return false;
        };
        *slot = Some((holder, stamp));
        true
    }

    /// Marks the slots whose holder `is` selects most recently used.
    pub(crate) fn touch<T>(&mut self, slots: &mut [Slot<T>], is: impl Fn(&T) -> bool) {
        let stamp = self.tick();
        for (holder, s) in slots.iter_mut().flatten() {
            if is(holder) {
                *s = stamp;
            }
        }
    }
}

/// The lowest free slot.
pub(crate) fn free_slot<T>(slots: &[Slot<T>]) -> Option<usize> {
    slots.iter().position(Option::is_none)
}

/// The held slot used least recently, and its holder.
pub(crate) fn least_recent<T>(slots: &[Slot<T>]) -> Option<(usize, &T)> {
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, slot)| slot.as_ref().map(|(holder, stamp)| (i, holder, *stamp)))
        .min_by_key(|&(_, _, stamp)| stamp)
        .map(|(i, holder, _)| (i, holder))
}

/// Frees slot `index` if its holder `is` selects (another holder keeps it).
pub(crate) fn release<T>(slots: &mut [Slot<T>], index: usize, is: impl Fn(&T) -> bool) {
    if let Some(slot) = slots.get_mut(index) {
        if slot.as_ref().is_some_and(|(holder, _)| is(holder)) {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_slots_first_then_least_recently_used() {
        let mut clock = LruClock::new();
        let mut slots: [Slot<char>; 3] = [None, None, None];
        assert_eq!(free_slot(&slots), Some(0));
        assert!(clock.claim(&mut slots, 0, 'a'));
        assert!(clock.claim(&mut slots, 1, 'b'));
        assert!(clock.claim(&mut slots, 2, 'c'));
        assert_eq!(free_slot(&slots), None);
        assert_eq!(least_recent(&slots), Some((0, &'a')));
        // Using `a` makes `b` the victim.
        clock.touch(&mut slots, |&h| h == 'a');
        assert_eq!(least_recent(&slots), Some((1, &'b')));
        // A victim's slot given to a new holder is the most recently used.
        assert!(clock.claim(&mut slots, 1, 'd'));
        assert_eq!(least_recent(&slots), Some((2, &'c')));
    }

    #[test]
    fn release_frees_only_the_holders_slot() {
        let mut clock = LruClock::new();
        let mut slots: [Slot<char>; 2] = [None, None];
        clock.claim(&mut slots, 0, 'a');
        clock.claim(&mut slots, 1, 'b');
        release(&mut slots, 0, |&h| h == 'b');
        assert_eq!(free_slot(&slots), None);
        release(&mut slots, 0, |&h| h == 'a');
        assert_eq!(free_slot(&slots), Some(0));
        // Out of range: nothing happens.
        release(&mut slots, 7, |_| true);
        assert!(!clock.claim(&mut slots, 7, 'z'));
    }

    #[test]
    fn empty_has_no_victim() {
        let slots: [Slot<u32>; 0] = [];
        assert_eq!(least_recent(&slots), None);
        assert_eq!(free_slot(&slots), None);
    }
}

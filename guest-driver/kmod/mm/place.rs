// SPDX-License-Identifier: GPL-2.0

//! Placement in VRAM, as pure functions (compiled and unit-tested on the host by
//! `belfry-kmod-host`): the first free range that fits among the ranges in use, and the
//! least-recently-used allocation that may be evicted.

/// A range in use: `(offset, bytes)`.
pub(crate) type Range = (u64, u64);

/// The lowest offset in `[base, end)` where `size` bytes fit between the `used` ranges (sorted
/// here in place); `None` when no gap is large enough.
pub(crate) fn first_fit(used: &mut [Range], base: u64, end: u64, size: u64) -> Option<u64> {
    used.sort_unstable_by_key(|r| r.0);
    let mut at = base;
    for &(offset, bytes) in used.iter() {
        if offset >= at && offset - at >= size {
            return Some(at);
        }
        at = at.max(offset.saturating_add(bytes));
    }
    (end >= at && end - at >= size).then_some(at)
}

/// Among `candidates` (`(last_use, evictable)`), the index of the evictable one used least
/// recently.
pub(crate) fn lru_victim(candidates: impl Iterator<Item = (u64, bool)>) -> Option<usize> {
    candidates
        .enumerate()
        .filter(|(_, (_, evictable))| *evictable)
        .min_by_key(|(_, (last_use, _))| *last_use)
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_takes_the_lowest_gap_that_is_large_enough() {
        let mut used = [(0x30, 0x10), (0x10, 0x10)];
        assert_eq!(first_fit(&mut used, 0x10, 0x100, 0x10), Some(0x20));
        assert_eq!(first_fit(&mut used, 0x10, 0x100, 0x20), Some(0x40));
        assert_eq!(first_fit(&mut used, 0x10, 0x50, 0x20), None);
        assert_eq!(first_fit(&mut [], 0x10, 0x30, 0x20), Some(0x10));
        assert_eq!(first_fit(&mut [], 0x10, 0x2f, 0x20), None);
    }

    #[test]
    fn the_victim_is_the_least_recently_used_evictable_one() {
        let c = [(5, true), (1, false), (3, true), (9, true)];
        assert_eq!(lru_victim(c.iter().copied()), Some(2));
        assert_eq!(lru_victim([(1, false)].iter().copied()), None);
    }
}

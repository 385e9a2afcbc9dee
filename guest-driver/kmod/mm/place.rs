// SPDX-License-Identifier: GPL-2.0

//! Placement in VRAM, as pure functions (compiled and unit-tested on the host by
//! `belfry-kmod-host`): the first free range that fits among the ranges in use, and the
//! least-recently-used allocation that may be evicted.

/// A range in use: `(offset, bytes)`.
pub(crate) type Range = (u64, u64);

/// The lowest offset in `[base, end)` where `size` bytes fit between the `used` ranges; `None`
/// when no gap is large enough. The candidates are `base` and the end of every range (a lowest
/// fit starts at one of them); quadratic in the few resident allocations, and free of the
/// slice sort, whose code the kernel's objtool refuses.
pub(crate) fn first_fit(used: &[Range], base: u64, end: u64, size: u64) -> Option<u64> {
    let fits = |at: u64| {
        at >= base
            && at.checked_add(size).is_some_and(|e| e <= end)
            && used.iter().all(|&(o, b)| at.saturating_add(size) <= o || o.saturating_add(b) <= at)
    };
    core::iter::once(base).chain(used.iter().map(|&(o, b)| o.saturating_add(b))).filter(|&at| fits(at)).min()
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
        let used = [(0x30, 0x10), (0x10, 0x10)];
        assert_eq!(first_fit(&used, 0x10, 0x100, 0x10), Some(0x20));
        assert_eq!(first_fit(&used, 0x10, 0x100, 0x20), Some(0x40));
        assert_eq!(first_fit(&used, 0x10, 0x50, 0x20), None);
        assert_eq!(first_fit(&[], 0x10, 0x30, 0x20), Some(0x10));
        assert_eq!(first_fit(&[], 0x10, 0x2f, 0x20), None);
        assert_eq!(first_fit(&[(0x18, 0x8)], 0x10, 0x40, 0x8), Some(0x10), "before the first range");
    }

    #[test]
    fn the_victim_is_the_least_recently_used_evictable_one() {
        let c = [(5, true), (1, false), (3, true), (9, true)];
        assert_eq!(lru_victim(c.iter().copied()), Some(2));
        assert_eq!(lru_victim([(1, false)].iter().copied()), None);
    }
}

// SPDX-License-Identifier: GPL-2.0

//! Id bitmaps: the device-wide id allocators (address spaces, contexts, queues, VRAM fence
//! pages) and the per-context-id flags (faulted, suspended); where a slot of the system address
//! space lies ([`SlotLayout`]). Pure `core` code, compiled into the module and into the host
//! crate `belfry-kmod-host`, whose tests run it.

/// A set of ids `0..64 × W`, the lowest free one handed out first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IdBitmap<const W: usize>([u64; W]);

impl<const W: usize> IdBitmap<W> {
    /// No id in use.
    pub(crate) const fn new() -> Self {
        Self([0; W])
    }

    /// Only id 0 in use (reserved, e.g. the system address space).
    pub(crate) const fn with_zero() -> Self {
        let mut words = [0; W];
        words[0] = 1;
        Self(words)
    }

    /// Takes the lowest free id below `limit` (ids past the bitmap are never free).
    pub(crate) fn take(&mut self, limit: u32) -> Option<u32> {
        let id = (0..limit).find(|&id| self.slot(id).is_some_and(|(w, bit)| w & bit == 0))?;
        self.insert(id);
        Some(id)
    }

    /// Marks `id` in use (ignored past the bitmap).
    pub(crate) fn insert(&mut self, id: u32) {
        // CAST: `id / 64` of a `u32` fits `usize`.
        if let Some(w) = self.0.get_mut((id / 64) as usize) {
            *w |= 1 << (id % 64);
        }
    }

    /// Frees `id` (ignored past the bitmap).
    pub(crate) fn remove(&mut self, id: u32) {
        // CAST: as in `insert`.
        if let Some(w) = self.0.get_mut((id / 64) as usize) {
            *w &= !(1 << (id % 64));
        }
    }

    /// Whether `id` is in use.
    pub(crate) fn contains(&self, id: u32) -> bool {
        self.slot(id).is_some_and(|(w, bit)| w & bit != 0)
    }

    /// Whether no id is in use.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Adds every id of `other`.
    pub(crate) fn union(&mut self, other: &Self) {
        for (w, o) in self.0.iter_mut().zip(other.0.iter()) {
            *w |= o;
        }
    }

    /// The word holding `id` and `id`'s bit in it.
    fn slot(&self, id: u32) -> Option<(u64, u64)> {
        // CAST: as in `insert`.
        self.0.get((id / 64) as usize).map(|&w| (w, 1 << (id % 64)))
    }
}

impl<const W: usize> Default for IdBitmap<W> {
    fn default() -> Self {
        Self::new()
    }
}

/// A free-running cursor handing out ranges (mmap offsets in pages, GPU VAs in bytes): each
/// range is followed by a gap of `gap` units, so neighbours never touch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RangeCursor {
    /// The next start.
    next: u64,
    /// Units left free after each range.
    gap: u64,
}

impl RangeCursor {
    /// A cursor starting at `base`.
    pub(crate) const fn new(base: u64, gap: u64) -> Self {
        Self { next: base, gap }
    }

    /// A new range of `len` units; its start.
    pub(crate) fn take(&mut self, len: u64) -> u64 {
        let start = self.next;
        self.next = self.next.wrapping_add(len).wrapping_add(self.gap);
        start
    }
}

/// Where the slots of an address space lie: slot `n` starts `n` strides above `base`. A slot is
/// `stride` bytes, of which the owner maps the first pages and the rest stay unmapped (guard
/// pages), so neighbours never touch; a stride dividing the span of a leaf table keeps every
/// slot inside one leaf table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotLayout {
    /// Start of slot 0.
    base: u64,
    /// Bytes per slot.
    stride: u64,
}

impl SlotLayout {
    /// Slots of `stride` bytes (non-zero) from `base`.
    pub(crate) const fn new(base: u64, stride: u64) -> Self {
        Self { base, stride }
    }

    /// Start of slot `slot`.
    pub(crate) const fn va(&self, slot: usize) -> u64 {
        // CAST: slot numbers are below `i32::MAX` (the kernel's bitmap length limit).
        self.base + slot as u64 * self.stride
    }

    /// The slot starting at `va`, if a slot starts there.
    pub(crate) fn slot(&self, va: u64) -> Option<usize> {
        let off = va.checked_sub(self.base)?;
        if off % self.stride != 0 {
            return None;
        }
        usize::try_from(off / self.stride).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_lowest_free_and_reuses_freed() {
        let mut ids = IdBitmap::<2>::new();
        assert_eq!(ids.take(128), Some(0));
        assert_eq!(ids.take(128), Some(1));
        assert_eq!(ids.take(128), Some(2));
        ids.remove(1);
        assert_eq!(ids.take(128), Some(1));
        assert_eq!(ids.take(128), Some(3));
    }

    #[test]
    fn with_zero_never_hands_out_zero() {
        let mut ids = IdBitmap::<4>::with_zero();
        assert!(ids.contains(0));
        assert_eq!(ids.take(256), Some(1));
    }

    #[test]
    fn respects_limit_and_size() {
        let mut ids = IdBitmap::<1>::new();
        for want in 0..3 {
            assert_eq!(ids.take(3), Some(want));
        }
        assert_eq!(ids.take(3), None);
        // A limit past the bitmap cannot hand out ids the bitmap cannot hold.
        let mut full = IdBitmap::<1>::new();
        for _ in 0..64 {
            assert!(full.take(1000).is_some());
        }
        assert_eq!(full.take(1000), None);
    }

    #[test]
    fn crosses_word_boundaries() {
        let mut ids = IdBitmap::<2>::new();
        for _ in 0..64 {
            ids.take(128);
        }
        assert_eq!(ids.take(128), Some(64));
        assert!(ids.contains(64));
        ids.remove(63);
        assert!(!ids.contains(63));
        assert_eq!(ids.take(128), Some(63));
    }

    #[test]
    fn union_and_emptiness() {
        let mut a = IdBitmap::<4>::new();
        assert!(a.is_empty());
        let mut b = IdBitmap::<4>::new();
        b.insert(200);
        b.insert(5);
        a.union(&b);
        assert!(a.contains(200) && a.contains(5) && !a.contains(6));
        assert!(!a.is_empty());
        // Out-of-range ids are ignored, never a panic.
        a.insert(10_000);
        a.remove(10_000);
        assert!(!a.contains(10_000));
    }

    #[test]
    fn slot_layout_round_trips_and_rejects_other_addresses() {
        let l = SlotLayout::new(0x1000_0000, 0x4000);
        assert_eq!(l.va(0), 0x1000_0000);
        assert_eq!(l.va(3), 0x1000_c000);
        assert_eq!(l.slot(0x1000_c000), Some(3));
        assert_eq!(l.slot(0x1000_d000), None);
        assert_eq!(l.slot(0x0fff_c000), None);
        // 128 slots of four pages fill one leaf table (512 pages) exactly.
        assert_eq!(l.va(128) - l.va(0), 512 * 0x1000);
    }

    #[test]
    fn range_cursor_leaves_gaps() {
        let mut c = RangeCursor::new(0x100, 1);
        assert_eq!(c.take(1), 0x100);
        assert_eq!(c.take(3), 0x102);
        assert_eq!(c.take(1), 0x106);
    }
}

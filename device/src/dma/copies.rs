//! The copies recorded reads are served from: while the device records (or replays) an input
//! log, a read of guest memory copies the bytes once, logs that copy and reads the copy, so the
//! log holds exactly the bytes the device used — a guest store landing after the copy changes
//! neither. Replaying, the copy is the log's bytes instead of guest memory's.
//!
//! A copy lives as long as the [`DmaMemory`](super::DmaMemory) snapshot that made it (one
//! slice, one mailbox command, one record write): the slices handed out borrow the snapshot.

use std::iter::FusedIterator;
use std::sync::Mutex;

use vm_memory::guest_memory::{GuestMemorySliceIterator, Result};
use vm_memory::VolatileSlice;

/// Copies of guest memory made for one snapshot, freed with it.
#[derive(Default)]
pub struct Copies(Mutex<Vec<Box<[u64]>>>);

impl Copies {
    /// Keeps `bytes` (`len` of them, in 8-byte words so that an atomic load of the copy is
    /// aligned as the guest's word was) and returns a slice over them, valid while `self` is.
    pub fn keep(&self, bytes: Box<[u64]>, len: usize) -> VolatileSlice<'_> {
        assert!(len <= bytes.len() * 8, "a copy of {len} bytes in {} words", bytes.len());
        let at = bytes.as_ptr().cast::<u8>().cast_mut();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(bytes);
        // SAFETY: `at` points to `len` initialized bytes of a heap allocation that `self`
        // owns and neither moves (the box's contents stay where they are when the vector
        // grows) nor frees before it is dropped, which the returned lifetime forbids while the
        // slice lives; nothing else reaches the allocation, so volatile reads and writes
        // through the slice alias no reference.
        unsafe { VolatileSlice::new(at, len) }
    }
}

/// A zeroed buffer of at least `len` bytes, as 8-byte words.
pub fn buffer(len: usize) -> Box<[u64]> {
    vec![0u64; len.div_ceil(8)].into_boxed_slice()
}

/// The bytes of `words`.
pub fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: a `u64` slice is `len` initialized bytes, any of whose bit patterns is a valid
    // `u8`, aligned for `u8`; the borrow is handed on, so nothing else reaches them meanwhile.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

/// The slices an access reads or writes: guest memory's own, or the one copy a recorded read
/// took.
pub enum Slices<'a, I> {
    /// Guest memory.
    Live(I),
    /// A recorded read's copy (none left once handed out, or for an empty access).
    Copied(Option<VolatileSlice<'a>>),
}

impl<'a, I: Iterator<Item = Result<VolatileSlice<'a>>>> Iterator for Slices<'a, I> {
    type Item = Result<VolatileSlice<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Slices::Live(slices) => slices.next(),
            Slices::Copied(copy) => copy.take().map(Ok),
        }
    }
}

impl<'a, I: FusedIterator<Item = Result<VolatileSlice<'a>>>> FusedIterator for Slices<'a, I> {}

impl<'a, I: GuestMemorySliceIterator<'a, ()>> GuestMemorySliceIterator<'a, ()> for Slices<'a, I> {}

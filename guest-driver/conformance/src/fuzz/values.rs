//! The fuzzer's values: what it has learned from the module's answers (handles, mmap offsets,
//! file descriptors) mixed with boundary values, and how an ioctl argument is built from them.

/// Values worth trying, learned and fixed.
#[derive(Debug, Default)]
pub struct Pool {
    /// Small nonzero `u32`s the module returned (handles, indexes, counts).
    handles: Vec<u32>,
    /// Page-aligned nonzero `u64`s the module returned (mmap offsets, GPU addresses).
    offsets: Vec<u64>,
    /// Descriptors this process holds.
    fds: Vec<i32>,
    /// Values learned so far: picks the slot a new one replaces once a list is full.
    learned: usize,
}

/// Most learned values of each kind kept (the oldest are replaced).
const KEEP: usize = 256;

/// Boundary values of a 32-bit field.
const EDGES_32: [u32; 10] = [0, 1, 2, 3, 0xff, 0x1000, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, u32::MAX];
/// Boundary values of a 64-bit field.
const EDGES_64: [u64; 8] =
    [0, 1, 0x1000, 1 << 32, 0x7fff_ffff_ffff_f000, 0x8000_0000_0000_0000, u64::MAX - 0xfff, u64::MAX];

fn push<T: PartialEq>(list: &mut Vec<T>, value: T, learned: &mut usize) {
    if list.contains(&value) {
        return;
    }
    *learned += 1;
    if list.len() < KEEP {
        list.push(value);
    } else {
        list[*learned % KEEP] = value;
    }
}

impl Pool {
    /// Remembers a descriptor this process holds.
    pub fn add_fd(&mut self, fd: i32) {
        push(&mut self.fds, fd, &mut self.learned);
    }

    /// Learns from an answer: small nonzero 32-bit halves as handles, page-aligned 64-bit
    /// words as offsets.
    pub fn harvest(&mut self, words: &[u64]) {
        for &w in words {
            for half in [w as u32, (w >> 32) as u32] {
                if half != 0 && half < 1 << 20 {
                    push(&mut self.handles, half, &mut self.learned);
                }
            }
            if w != 0 && w & 0xfff == 0 && w < 1 << 48 {
                push(&mut self.offsets, w, &mut self.learned);
            }
        }
    }

    /// A 32-bit field's value.
    fn word32(&self, rng: &mut fastrand::Rng) -> u32 {
        match rng.u32(0..100) {
            0..=34 if !self.handles.is_empty() => self.handles[rng.usize(0..self.handles.len())],
            35..=44 if !self.fds.is_empty() => self.fds[rng.usize(0..self.fds.len())] as u32,
            45..=64 => 0,
            65..=79 => rng.u32(1..16),
            80..=91 => EDGES_32[rng.usize(0..EDGES_32.len())],
            _ => rng.u32(..),
        }
    }

    /// A 64-bit field's value; `scratch` is a valid user buffer's address.
    fn word64(&self, rng: &mut fastrand::Rng, scratch: u64) -> u64 {
        match rng.u32(0..100) {
            0..=14 if !self.offsets.is_empty() => self.offsets[rng.usize(0..self.offsets.len())],
            15..=29 => scratch,
            // Sizes the module serves (allocations, rings).
            30..=44 => u64::from(rng.u32(1..=16)) * 4096,
            45..=54 => EDGES_64[rng.usize(0..EDGES_64.len())],
            55..=59 => rng.u64(..),
            _ => u64::from(self.word32(rng)) | u64::from(self.word32(rng)) << 32,
        }
    }

    /// Fills the first `size` bytes of `arg`. Half the calls are sparse — mostly zero words
    /// (reserved fields and flags), the rest learned handles, sizes, small counts and a valid
    /// pointer — so well-formed requests reach deep states; the others are wild, each 8-byte
    /// word one 64-bit value or two 32-bit ones.
    pub fn fill(&self, rng: &mut fastrand::Rng, arg: &mut [u64], size: usize, scratch: u64) {
        let sparse = rng.u32(0..10) < 7;
        for w in arg.iter_mut().take(size.div_ceil(8)) {
            *w = if sparse {
                self.sparse_word(rng, scratch)
            } else if rng.bool() {
                self.word64(rng, scratch)
            } else {
                u64::from(self.word32(rng)) | u64::from(self.word32(rng)) << 32
            };
        }
    }

    /// A word of a sparse argument.
    fn sparse_word(&self, rng: &mut fastrand::Rng, scratch: u64) -> u64 {
        let handle = |rng: &mut fastrand::Rng| {
            if self.handles.is_empty() {
                1
            } else {
                u64::from(self.handles[rng.usize(0..self.handles.len())])
            }
        };
        match rng.u32(0..100) {
            0..=44 => 0,
            45..=74 => handle(rng),
            75..=84 => u64::from(rng.u32(1..=16)) * 4096,
            85..=89 => handle(rng) | handle(rng) << 32,
            90..=94 => u64::from(rng.u32(1..=4)),
            _ => scratch,
        }
    }

    /// An mmap offset: a learned one, a small page multiple, or a boundary.
    pub fn offset(&self, rng: &mut fastrand::Rng) -> u64 {
        match rng.u32(0..10) {
            0..=5 if !self.offsets.is_empty() => self.offsets[rng.usize(0..self.offsets.len())],
            6..=8 => u64::from(rng.u32(0..0x2000)) * 4096,
            _ => EDGES_64[rng.usize(0..EDGES_64.len())] & !0xfff,
        }
    }

    /// A byte to store into a mapping: mostly small packet-like values, sometimes random.
    pub fn byte(&self, rng: &mut fastrand::Rng) -> u8 {
        match rng.u32(0..4) {
            0 => 0,
            1 => rng.u8(0..0x45),
            _ => rng.u8(..),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harvest_learns_handles_and_page_aligned_offsets_only() {
        let mut pool = Pool::default();
        pool.harvest(&[7 | 9 << 32, 0x12_3000, 0x12_3008, u64::MAX]);
        assert!(pool.handles.contains(&7) && pool.handles.contains(&9));
        assert_eq!(pool.offsets, vec![0x12_3000]);
        let mut rng = fastrand::Rng::with_seed(1);
        assert!((0..100).any(|_| pool.offset(&mut rng) == 0x12_3000));
    }

    #[test]
    fn fill_writes_only_the_argument_s_words() {
        let pool = Pool::default();
        let mut rng = fastrand::Rng::with_seed(3);
        let mut arg = [0xaaaa_u64; 4];
        for _ in 0..50 {
            pool.fill(&mut rng, &mut arg, 12, 0x5000);
            assert_eq!(arg[2..], [0xaaaa, 0xaaaa]);
        }
    }
}

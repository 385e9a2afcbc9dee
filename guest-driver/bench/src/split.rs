//! The same workload unsplit and split under VRAM pressure: an 8 MiB input copied through
//! three 8 MiB VRAM allocations (`SLOT_COPY` through bound slots, one split point per copy) on a
//! device with room for all three (one part) and on a 16 MiB device (only one fits: the
//! memory manager splits the buffer and pages between the parts). Prints parts, bytes paged
//! each way and the time of `SUBMIT_SPLIT` (the whole buffer, paging included), and the ratio.

use std::time::{Duration, Instant};

use belfry_umd::abi::engine::ENGINE_COMPUTE;
use belfry_umd::{Device, Segment, SplitBuffer, SplitQueue, VideoAllocation};

use crate::BoxError;

const SIZE: u64 = 8 << 20;

/// One device's figures.
pub struct Figures {
    /// Parts of the last run.
    pub parts: u32,
    /// Bytes paged into VRAM per run.
    pub paged_in: u64,
    /// Bytes paged out per run.
    pub paged_out: u64,
    /// Median time of one `SUBMIT_SPLIT`.
    pub median: Duration,
}

/// Runs the workload `runs` times on device `index`.
pub fn run(index: u32, runs: u32) -> Result<Figures, BoxError> {
    let dev = Device::open_index(index)?;
    let ctx = dev.create_context()?;
    let v = |s| VideoAllocation::new(&ctx, SIZE, s);
    let input = v(Segment::System)?;
    let vram = [v(Segment::Vram)?, v(Segment::Vram)?, v(Segment::Vram)?];
    let mid = [v(Segment::System)?, v(Segment::System)?];
    let output = v(Segment::System)?;
    input.write(0, &vec![0x5a; SIZE as usize])?;
    let slots = dev.mm_stats()?.slots;
    let mut b = SplitBuffer::new(slots);
    for (src, dst) in [
        (&input, &vram[0]),
        (&vram[0], &mid[0]),
        (&mid[0], &vram[1]),
        (&vram[1], &mid[1]),
        (&mid[1], &vram[2]),
        (&vram[2], &output),
    ] {
        b.bind_all(&[(0, src), (1, dst)])?;
        b.slot_copy(0, 0, 1, 0, SIZE as u32)?;
    }
    b.finish()?;
    let mut q = SplitQueue::new(&ctx, ENGINE_COMPUTE)?;
    // One run first, so every run starts from the same residency.
    q.submit(&b)?;
    let before = dev.mm_stats()?;
    let mut times = Vec::new();
    let mut parts = 0;
    for _ in 0..runs {
        let t = Instant::now();
        parts = q.submit(&b)?;
        times.push(t.elapsed());
    }
    let after = dev.mm_stats()?;
    times.sort_unstable();
    let n = u64::from(runs.max(1));
    Ok(Figures {
        parts,
        paged_in: (after.paged_in - before.paged_in) / n,
        paged_out: (after.paged_out - before.paged_out) / n,
        median: times[times.len() / 2],
    })
}

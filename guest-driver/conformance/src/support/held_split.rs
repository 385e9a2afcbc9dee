//! A split submission held behind a fence: two 4 KiB VRAM allocations bound to a split buffer
//! whose commands first wait on a fence, so its part stays on the GPU until the fence is
//! signalled. The memory manager's tests and the concurrent fuzzer keep a split running with it.

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_umd::{Context, Device, Fence, Segment, SplitBuffer, SplitQueue, VideoAllocation};

/// What a held split needs alive until it is submitted and done (dropped in the order of its
/// fields: the buffer, the queue, then the allocations).
pub(crate) struct HeldSplit {
    pub(crate) buffer: SplitBuffer,
    pub(crate) queue: SplitQueue,
    /// The two allocations bound to the buffer's slots 0 and 1.
    _allocations: [VideoAllocation; 2],
}

/// A split buffer on `ctx`'s compute engine that waits for `fence` to reach 1 before it runs.
pub(crate) fn held_split(dev: &Device, ctx: &Context, fence: &Fence) -> belfry_umd::Result<HeldSplit> {
    let a = VideoAllocation::new(ctx, 4096, Segment::Vram)?;
    let b = VideoAllocation::new(ctx, 4096, Segment::Vram)?;
    let queue = SplitQueue::new(ctx, ENGINE_COMPUTE)?;
    let mut buffer = SplitBuffer::new(dev.mm_stats()?.slots);
    buffer.commands().wait_fence(fence, 1)?;
    buffer.bind(0, &a)?.bind(1, &b)?.finish()?;
    Ok(HeldSplit { buffer, queue, _allocations: [a, b] })
}

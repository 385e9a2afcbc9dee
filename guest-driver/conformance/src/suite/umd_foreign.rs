//! The library refuses a fence of another context or device file (no rule family): its GPU
//! VA is valid only in its own context, so `Queue::signal_fence`/`wait_fence` (user-mode and
//! kernel-mode queues), `Queue::software_signal`, `CommandBuffer::signal_fence`/`wait_fence`
//! and `Queue::submit` of such a buffer end with `Error::ForeignFence` and nothing reaches the
//! GPU; the fence the caller named moves, the others do not.

use std::path::Path;

use belfry_umd::{CommandBuffer, Device, Fence, FenceKind};

use crate::support::fixture::open_context;
use crate::support::work::{kernel_queue, user_queue};
use crate::support::{expect_foreign_fence, HOLD, WAIT};
use crate::{Test, TestResult};

/// CurrentValue of `f`, read from the CPU.
fn current(f: &Fence) -> Result<u64, crate::Error> {
    f.value().ok_or_else(|| format!("fence {} has no CPU mapping", f.handle()).into())
}

/// Two contexts of one device file and a context of a second file of the same device, a
/// native fence at 0 in each: a user-mode and a kernel-mode queue of the first context refuse,
/// with `ForeignFence`, to signal or wait on the other two (directly, through a command buffer
/// submitted to them, or the software signal of a monitored fence of the other file), and a
/// command buffer refuses a second fence of another context than its first. After the queue
/// signals its own context's fence to 9 (and the refused calls had their chance to run for
/// `HOLD`), that fence reads 9 and the other two still 0.
fn queues_refuse_fences_of_other_contexts_and_files(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let sibling = dev.create_context()?;
    let other_file = Device::open(path)?;
    let stranger = other_file.create_context()?;
    let own = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let theirs = sibling.create_fence(FenceKind::Default, 0, 0)?;
    let far = stranger.create_fence(FenceKind::Default, 0, 0)?;
    let far_monitored = stranger.create_fence(FenceKind::Monitored, 0, 0)?;
    let mut user = user_queue(&ctx)?;
    let mut kernel = kernel_queue(&ctx)?;
    for (q, mode) in [(&mut user, "user-mode"), (&mut kernel, "kernel-mode")] {
        for (f, whose) in [(&theirs, "another context's"), (&far, "another file's")] {
            expect_foreign_fence(q.signal_fence(f, 9), &format!("a {mode} queue's signal_fence of {whose} fence"))?;
            expect_foreign_fence(q.wait_fence(f, 1), &format!("a {mode} queue's wait_fence on {whose} fence"))?;
            let mut cb = CommandBuffer::new();
            cb.signal_fence(f, 7)?;
            expect_foreign_fence(q.submit(&cb), &format!("a {mode} queue's submit of {whose} fence signal"))?;
            let mut cb = CommandBuffer::new();
            cb.wait_fence(f, 1)?;
            expect_foreign_fence(q.submit(&cb), &format!("a {mode} queue's submit of a wait on {whose} fence"))?;
        }
    }
    expect_foreign_fence(kernel.software_signal(&far_monitored, 5), "a software signal of another file's fence")?;
    expect_foreign_fence(kernel.signal_fence(&far_monitored, 5), "a signal of another file's monitored fence")?;
    let mut mixed = CommandBuffer::new();
    mixed.signal_fence(&own, 1)?;
    expect_foreign_fence(mixed.wait_fence(&theirs, 1).map(drop), "a command buffer's second fence of another context")?;

    user.signal_fence(&own, 9)?;
    own.wait(9, WAIT)?;
    std::thread::sleep(HOLD);
    let (o, t, f) = (current(&own)?, current(&theirs)?, current(&far)?);
    ensure!(o == 9, "the named fence reads {o}, expected 9");
    ensure!(t == 0 && f == 0, "fences nobody named moved: other context {t}, other file {f} (expected 0, 0)");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![test_entry!(queues_refuse_fences_of_other_contexts_and_files, Default, [])]
}

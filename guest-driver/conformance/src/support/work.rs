//! Queues and work: user- and kernel-mode queues with the default description, `WRITE_DATA32`
//! submissions (also ones that fault their context), doorbell-status, held-work and data
//! expectations, device-wide object counts and termination steps, and the two-process
//! contended load.

use std::path::Path;

use belfry_abi::uapi::DoorbellStatus;
use belfry_abi::uapi_debug;
use belfry_umd::{Allocation, CommandBuffer, Context, Device, Queue, QueueDesc, QueueMode, SubmitStats};

use crate::harness::proc::{self, Signal};
use crate::support::{HOLD, WAIT};
use crate::TestResult;

/// A user-mode queue of the default description in `ctx`.
pub(crate) fn user_queue(ctx: &Context) -> belfry_umd::Result<Queue> {
    ctx.create_queue(&QueueDesc::default())
}

/// A kernel-mode queue of the default description in `ctx`.
pub(crate) fn kernel_queue(ctx: &Context) -> belfry_umd::Result<Queue> {
    ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode))
}

/// Work held behind a new DEFAULT fence of `ctx` nobody has signalled: on `q`, a GPU wait for
/// value 1, then a `WRITE_DATA32` of `word` at `buf`'s start. Returns the fence (signal it to 1
/// to release the work) and the write's progress value.
pub(crate) fn held_write(
    ctx: &Context,
    q: &mut Queue,
    buf: &Allocation,
    word: u32,
) -> belfry_umd::Result<(belfry_umd::Fence, u64)> {
    let fence = ctx.create_fence(belfry_umd::FenceKind::Default, 0, 0)?;
    q.wait_fence(&fence, 1)?;
    let last = write32(q, buf.gpu_va(), word)?;
    Ok((fence, last))
}

/// Submits a `WRITE_DATA32` of `value` at `va`; returns the progress value.
pub(crate) fn write32(q: &mut Queue, va: u64, value: u32) -> belfry_umd::Result<u64> {
    let mut cb = CommandBuffer::new();
    cb.write32(va, value)?;
    q.submit(&cb)
}

/// Submits a NOTIFY with `token` on `q` (a test-only device fault's switch, say) and waits
/// until it ran.
pub(crate) fn notify_ran(q: &mut Queue, token: u64) -> TestResult {
    let mut cb = CommandBuffer::new();
    cb.notify(token)?;
    let v = q.submit(&cb)?;
    ensure!(crate::support::wait_until(WAIT, || q.completed() >= v), "the NOTIFY {token:#x} did not run");
    Ok(())
}

/// Submits work that faults its context. The fault can be processed before the library reads
/// the doorbell status: the library then sees DISCONNECTED_ABORT, cannot replace the queue in
/// the faulted context and reports the context lost, the lost queue staying in place.
pub(crate) fn submit_faulting(q: &mut Queue, cmds: &CommandBuffer) -> TestResult {
    match q.submit(cmds) {
        Ok(_) | Err(belfry_umd::Error::ContextLost { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Submits a `WRITE_DATA32` that faults the context.
pub(crate) fn write32_faulting(q: &mut Queue, va: u64, value: u32) -> TestResult {
    let mut cb = CommandBuffer::new();
    cb.write32(va, value)?;
    submit_faulting(q, &cb)
}

/// `q`'s doorbell status.
pub(crate) fn status(q: &Queue) -> belfry_umd::Result<DoorbellStatus> {
    q.doorbell_status()
}

/// Fails unless `q`'s doorbell reads `want`.
pub(crate) fn expect_status(q: &Queue, want: DoorbellStatus, what: &str) -> TestResult {
    let got = status(q)?;
    ensure!(got == want, "{what}: doorbell status {got:?}, expected {want:?}");
    Ok(())
}

/// Gives the device [`HOLD`] to run `q`'s work up to `value`, then checks it did not.
pub(crate) fn expect_held(q: &Queue, value: u64, what: &str) -> TestResult {
    std::thread::sleep(HOLD);
    ensure!(q.completed() < value, "{what} ran");
    Ok(())
}

/// Fails unless the `u32` at `offset` of `a` is `want`.
pub(crate) fn expect_u32(a: &Allocation, offset: u64, want: u32, what: &str) -> TestResult {
    let got = a.read_u32(offset)?;
    ensure!(got == want, "{what}: read {got:#x} at offset {offset:#x}, expected {want:#x}");
    Ok(())
}

/// User-mode queues per process of [`contended_load`].
const QUEUES_PER_PROCESS: usize = 3;

/// Submission rounds of each queue of [`contended_load`].
const ROUNDS: u32 = 8;

/// Two processes, three user-mode queues each, submitting rounds at once; `check` judges
/// each queue's stats.
pub(crate) fn contended_load(path: &Path, check: fn(usize, SubmitStats, DoorbellStatus) -> TestResult) -> TestResult {
    let go = Signal::new()?;
    let mut children = Vec::new();
    for p in 0..2u32 {
        let go = &go;
        children.push(proc::spawn(if p == 0 { "load process 0" } else { "load process 1" }, move || {
            let dev = Device::open(path)?;
            let ctx = dev.create_context()?;
            let mut bufs = Vec::new();
            let mut queues = Vec::new();
            for _ in 0..QUEUES_PER_PROCESS {
                bufs.push(ctx.alloc(4096, 0)?);
                queues.push(user_queue(&ctx)?);
            }
            go.take()?;
            let mut last = [0; QUEUES_PER_PROCESS];
            for round in 0..ROUNDS {
                for (i, q) in queues.iter_mut().enumerate() {
                    let value = (p << 24) | ((i as u32) << 16) | (round + 1);
                    last[i] = write32(q, bufs[i].va_at(u64::from(round) * 4)?, value)?;
                }
            }
            for (i, q) in queues.iter_mut().enumerate() {
                q.wait(last[i], WAIT)?;
                for round in 0..ROUNDS {
                    let value = (p << 24) | ((i as u32) << 16) | (round + 1);
                    expect_u32(&bufs[i], u64::from(round) * 4, value, "a round's write")?;
                }
                check(i, q.stats(), status(q)?)?;
            }
            Ok(())
        })?);
    }
    go.post(2);
    let mut result = Ok(());
    for c in children {
        let r = c.join();
        if result.is_ok() {
            result = r;
        }
    }
    result
}

/// The device-wide object counts.
pub(crate) fn counts(s: &uapi_debug::DebugStats) -> (u32, u32, u32, u32, u64) {
    (s.contexts, s.queues, s.allocations, s.doorbells, s.gpu_pages)
}

pub(crate) use crate::harness::raw::live_objects;

/// Waits up to [`WAIT`] for the module's live objects read through `probe` to be `baseline`
/// again; the last reading if they are not.
pub(crate) fn live_objects_return(probe: &crate::harness::raw::RawDev, baseline: [u64; 5]) -> Result<(), [u64; 5]> {
    let mut now = baseline;
    let back = crate::support::wait_until(WAIT, || {
        now = probe.debug_stats().map(|s| live_objects(&s)).unwrap_or(now);
        now == baseline
    });
    if back {
        Ok(())
    } else {
        Err(now)
    }
}

/// The recorded steps up to the terminating 0.
pub(crate) fn steps(s: &uapi_debug::DebugStats) -> Vec<u8> {
    s.last_termination_steps.iter().copied().take_while(|&c| c != 0).collect()
}

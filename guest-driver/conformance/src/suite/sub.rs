//! SUB-xx: Progress fences and the submission sequence (RULES.md § Progress fences and the submission sequence).

use std::path::Path;

use belfry_abi::packet::ComputeOp;
use belfry_abi::uapi_debug;
use belfry_umd::{CommandBuffer, QueueDesc, QueueMode};

use crate::harness::proc::{self, Signal};
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::{open_context, Fixture};
use crate::support::work::{expect_u32, user_queue, write32};
use crate::support::{wait_until, HOLD, WAIT};
use crate::{Test, TestResult};

/// proves: SUB-02 — each submission gets the next progress value, and the queue's progress
/// fence (read-only CPU mapping and `WAIT_PROGRESS`) reaches each in order.
fn progress_fence_values_increase_and_are_reached(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx: _ctx, buf, mut q } = Fixture::new(path)?;
    ensure!(q.progress_fence_va() != 0, "no progress fence VA");
    ensure!(q.completed() == 0, "progress starts at {}", q.completed());
    for n in 1..=40u64 {
        let v = write32(&mut q, buf.va_at((n % 64) * 4)?, n as u32)?;
        ensure!(v == n, "submission {n} got progress value {v}");
        if n % 8 == 0 {
            q.wait(v, WAIT)?;
            ensure!(q.completed() >= v, "after the wait progress reads {}", q.completed());
        }
    }
    ensure!(q.completed() == 40, "final progress {}", q.completed());
    Ok(())
}

/// proves: SUB-01, DB-11 — once connected, user-mode submissions and polling the progress
/// page make no ioctl at all (the file's ioctl count does not move).
fn user_mode_submission_makes_no_kernel_call(path: &Path) -> TestResult {
    let Fixture { dev, ctx: _ctx, buf, mut q } = Fixture::connected(path)?;
    let a = dev.debug_stats()?.ioctls_by_caller;
    let b = dev.debug_stats()?.ioctls_by_caller;
    let wakes_before = q.stats().wakes;
    let mut last = 0;
    for n in 0..16u32 {
        last = write32(&mut q, buf.va_at(u64::from(n) * 4)?, n + 100)?;
    }
    let done = wait_until(WAIT, || q.completed() >= last);
    let c = dev.debug_stats()?.ioctls_by_caller;
    ensure!(done, "progress {} of {last} after 10 s of polling", q.completed());
    // On shared doorbells a ring that finds the command processor asleep is followed by the
    // library's one wake call (`SubmitStats::wakes`, 0 on trapped doorbells): nothing else.
    let wakes = q.stats().wakes - wakes_before;
    ensure!(
        c - b == b - a + wakes,
        "16 submissions made {} ioctl(s) besides {wakes} wake(s)",
        (c - b).wrapping_sub(b - a).wrapping_sub(wakes) as i64
    );
    for n in 0..16u32 {
        expect_u32(&buf, u64::from(n) * 4, n + 100, "a submission's write")?;
    }
    Ok(())
}

/// COPY, FILL and COMPUTE (u32 add, u32 mul, f32 saxpy) write the expected bytes, on a
/// user-mode and on a kernel-mode queue.
fn copy_fill_and_compute_write_the_expected_data(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    for mode in [QueueMode::UserMode, QueueMode::KernelMode] {
        let mut q = ctx.create_queue(&QueueDesc::default().with_mode(mode))?;
        let mut a = ctx.alloc(4096, 0)?;
        let mut b = ctx.alloc(4096, 0)?;
        let out = ctx.alloc(4 * 4096, 0)?;
        let n = 256u32;
        for i in 0..n {
            a.write_u32(u64::from(i) * 4, i * 3 + 1)?;
            b.write_u32(u64::from(i) * 4, 1000 - i)?;
        }
        let fa = ctx.alloc(4096, 0)?;
        let mut fb = ctx.alloc(4096, 0)?;
        let mut fa = fa;
        for i in 0..n {
            fa.write(u64::from(i) * 4, &(i as f32).to_le_bytes())?;
            fb.write(u64::from(i) * 4, &0.5f32.to_le_bytes())?;
        }
        let mut cb = CommandBuffer::new();
        cb.copy(a.gpu_va(), out.gpu_va(), 1024)?
            .fill(out.va_at(4096)?, 1024, 0xA5A5_5A5A)?
            .compute(ComputeOp::AddU32, n, 0, a.gpu_va(), b.gpu_va(), out.va_at(2 * 4096)?)?
            .compute(ComputeOp::MulU32, n, 0, a.gpu_va(), b.gpu_va(), out.va_at(2 * 4096 + 1024)?)?
            .compute(ComputeOp::SaxpyF32, n, 2.0f32.to_bits(), fa.gpu_va(), fb.gpu_va(), out.va_at(3 * 4096)?)?;
        let v = q.submit(&cb)?;
        q.wait(v, WAIT)?;
        for i in 0..n {
            let off = u64::from(i) * 4;
            let (x, y) = (i * 3 + 1, 1000 - i);
            expect_u32(&out, off, x, &format!("{mode:?} COPY"))?;
            expect_u32(&out, 4096 + off, 0xA5A5_5A5A, &format!("{mode:?} FILL"))?;
            expect_u32(&out, 2 * 4096 + off, x.wrapping_add(y), &format!("{mode:?} COMPUTE add"))?;
            expect_u32(&out, 2 * 4096 + 1024 + off, x.wrapping_mul(y), &format!("{mode:?} COMPUTE mul"))?;
            let mut f = [0u8; 4];
            out.read(3 * 4096 + off, &mut f)?;
            let got = f32::from_le_bytes(f);
            let want = 2.0 * i as f32 + 0.5;
            ensure!(got == want, "{mode:?} COMPUTE saxpy element {i}: {got}, expected {want}");
        }
        expect_u32(&out, 1024, 0, &format!("{mode:?} COPY stopped at its size"))?;
    }
    Ok(())
}

/// The termination record (`DEBUG_STATS`) of a child that exits with one user-mode queue whose
/// work is done, plus (`suspend`) work queued in its suspended context.
fn exit_record(path: &Path, suspend: bool) -> Result<uapi_debug::DebugStats, crate::Error> {
    let ready = Signal::new()?;
    let ready_ref = &ready;
    let child = proc::spawn("exiting process", move || {
        let r = (|| -> Result<_, crate::Error> {
            let Fixture { dev, ctx, buf, mut q } = Fixture::connected(path)?;
            let v = write32(&mut q, buf.gpu_va(), 1)?;
            q.wait(v, WAIT)?;
            if suspend {
                ctx.suspend()?;
                write32(&mut q, buf.gpu_va(), 2)?;
            }
            Ok((q, buf, ctx, dev))
        })();
        ready_ref.post(1);
        std::mem::forget(r?);
        Ok(())
    })?;
    ready.take()?;
    child.join()?;
    Ok(RawDev::open(path)?.debug_stats().map_err(errno_name)?)
}

/// proves: SUB-03 — the module learns whether a user-mode queue has pending work only from the
/// published LastQueuedValue: the release of a process whose work is done waits for no queue
/// (steps DISCONNECT, WAIT_SATISFIED, DESTROY); one that exits with work queued in a suspended
/// context waits for that one queue until its drain times out (shortened for the test), then
/// marks, suspends, destroys.
fn release_waits_only_for_work_last_queued_value_says_is_pending(path: &Path) -> TestResult {
    let _drain = crate::support::param::unfinishable_work_close_drain()?;
    use uapi_debug::{
        TERM_STEP_DESTROY as DESTROY, TERM_STEP_DISCONNECT as DISCONNECT, TERM_STEP_MARK_ERROR as MARK,
        TERM_STEP_SUSPEND as SUSPEND, TERM_STEP_WAIT_SATISFIED as SATISFIED, TERM_STEP_WAIT_TIMED_OUT as TIMED_OUT,
    };
    let steps = |s: &uapi_debug::DebugStats| -> Vec<u8> {
        s.last_termination_steps.iter().copied().take_while(|&c| c != 0).collect()
    };
    let idle = exit_record(path, false)?;
    ensure!(
        idle.last_termination_waited == 0,
        "a process without pending work: {} queue(s) waited for",
        idle.last_termination_waited
    );
    ensure!(steps(&idle) == [DISCONNECT, SATISFIED, DESTROY], "steps without pending work {:?}", steps(&idle));
    let pending = exit_record(path, true)?;
    let (waited, timed_out) = (pending.last_termination_waited, pending.last_termination_timed_out);
    ensure!(
        waited == 1 && timed_out == 1,
        "with pending work: {waited} queue(s) waited for, {timed_out} timed out; expected 1 and 1"
    );
    let want = [DISCONNECT, TIMED_OUT, MARK, SUSPEND, DESTROY];
    ensure!(steps(&pending) == want, "steps with pending work {:?}, expected {want:?}", steps(&pending));
    Ok(())
}

/// proves: SUB-06 — a queue's progress fence is a native fence other work can wait on: a
/// second queue's GPU FENCE_WAIT on the first queue's progress fence (its GPU VA and the value
/// a submission returned) holds the second queue's work while the first queue's work is held
/// (behind a CPU-signaled fence), and the first queue's progress signal releases it.
fn progress_fence_releases_another_queues_gpu_wait(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let buf = ctx.alloc(4096, 0)?;
    let gate = ctx.create_fence(belfry_umd::FenceKind::Default, 0, 0)?;
    let mut first = user_queue(&ctx)?;
    let mut second = user_queue(&ctx)?;
    let mut held = CommandBuffer::new();
    held.fence_wait(gate.gpu_va(), 1, None)?.write32(buf.gpu_va(), 0x5B06_0001)?;
    let progress = first.submit(&held)?;
    let mut behind = CommandBuffer::new();
    behind.fence_wait(first.progress_fence_va(), progress, None)?.write32(buf.va_at(4)?, 0x5B06_0002)?;
    let v = second.submit(&behind)?;
    std::thread::sleep(HOLD);
    ensure!(second.completed() < v, "the wait on the other queue's progress fence did not hold");
    expect_u32(&buf, 4, 0, "work behind the progress-fence wait")?;
    gate.signal(1)?;
    second.wait(v, WAIT)?;
    ensure!(first.completed() >= progress, "released before the first queue's progress value");
    expect_u32(&buf, 0, 0x5B06_0001, "the first queue's work")?;
    expect_u32(&buf, 4, 0x5B06_0002, "work released by the progress signal")
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(progress_fence_values_increase_and_are_reached, Default, ["SUB-02"]),
        test_entry!(user_mode_submission_makes_no_kernel_call, Default, ["SUB-01", "DB-11"]),
        test_entry!(copy_fill_and_compute_write_the_expected_data, Default, []),
        test_entry!(release_waits_only_for_work_last_queued_value_says_is_pending, Default, ["SUB-03"]),
        test_entry!(progress_fence_releases_another_queues_gpu_wait, Default, ["SUB-06"]),
    ]
}

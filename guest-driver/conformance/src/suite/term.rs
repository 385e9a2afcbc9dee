//! TERM-xx: Process termination (RULES.md § Process termination).

use std::path::Path;
use std::time::Duration;

use belfry_abi::uapi_debug;
use belfry_umd::{Allocation, CommandBuffer, Context, Device, Fence, FenceKind, Queue, QueueDesc, QueueMode};

use crate::harness::channel::{Channel, Side};
use crate::harness::proc::{self, Signal};
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::Fixture;
use crate::support::work::{counts, kernel_queue, steps, user_queue, write32};
use crate::support::{wait_until, HOLD, WAIT};
use crate::{Test, TestResult};

/// Runs `child` in a process that builds objects and queued work, posts `ready`, then either
/// exits (`kill` false) or waits to be killed; then checks the counts return to baseline.
fn counts_return_to_baseline(path: &Path, kill: bool) -> TestResult {
    let d = RawDev::open(path)?;
    let baseline = counts(&d.debug_stats().map_err(errno_name)?);
    let (ready, go) = (Signal::new()?, Signal::new()?);
    let (ready_ref, go_ref) = (&ready, &go);
    let child = proc::spawn("terminating process", move || {
        let r = build_and_queue(path, kill);
        ready_ref.post(1); // Also on failure, so the parent never blocks.
        let (um, km, buf, ctx, dev) = r?;
        go_ref.take()?; // Killed here, or told to exit once the parent counted the objects.
        if kill {
            std::thread::sleep(Duration::from_secs(60));
        }
        // Exits with queues, doorbell and work alive: the file's release cleans up.
        std::mem::forget((um, km, buf, ctx, dev));
        Ok(())
    })?;
    ready.take()?;
    let during = counts(&d.debug_stats().map_err(errno_name)?);
    go.post(1);
    if !(during.0 > baseline.0 && during.3 > baseline.3) {
        let why = if kill { child.kill().err() } else { child.join().err() };
        return Err(format!("the process's objects are not counted: {during:?} ({why:?})").into());
    }
    if kill {
        child.kill()?;
    } else {
        child.join()?;
    }
    let mut now = during;
    let back = wait_until(WAIT, || {
        now = d.debug_stats().map(|s| counts(&s)).unwrap_or(now);
        now == baseline
    });
    ensure!(back, "counts (contexts, queues, allocations, doorbells, GPU pages) {now:?}, baseline {baseline:?}");
    Ok(())
}

/// The objects of a terminating process: two queues with work queued (stuck in a suspended
/// context if `suspend`).
fn build_and_queue(path: &Path, suspend: bool) -> Result<(Queue, Queue, Allocation, Context, Device), crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut buf = ctx.alloc(64 * 1024, 0)?;
    buf.fill(0, 64 * 1024, 1)?;
    let mut um = user_queue(&ctx)?;
    let mut km = kernel_queue(&ctx)?;
    if suspend {
        ctx.suspend()?; // The work stays queued until the process dies.
    }
    for n in 0..6u32 {
        let mut cb = CommandBuffer::new();
        cb.fill(buf.gpu_va(), 64 * 1024, n)?;
        um.submit(&cb)?;
        km.submit(&cb)?;
    }
    Ok((um, km, buf, ctx, dev))
}

/// proves: TERM-03 — a process that exits with queued work on a user-mode and a kernel-mode
/// queue has every object, doorbell and GPU page released.
fn exiting_with_queued_work_releases_every_object(path: &Path) -> TestResult {
    counts_return_to_baseline(path, false)
}

/// proves: TERM-06 — a killed process whose work is stuck in a suspended context has its
/// queues, doorbells, ring allocations and GPU pages destroyed without waiting for the work.
fn killed_process_releases_every_object(path: &Path) -> TestResult {
    counts_return_to_baseline(path, true)
}

/// A kernel-mode queue of priority 3 spinning on engine 0 (a `JUMP` to itself), so work of
/// lower priority on that engine waits; [`Hog::release`] (or drop) ends the spin.
struct Hog {
    spin: Allocation,
    queue: Queue,
    value: u64,
    _ctx: Context,
}

impl Hog {
    fn start(dev: &Device) -> Result<Hog, crate::Error> {
        let ctx = dev.create_context()?;
        let mut spin = ctx.alloc(4096, 0)?;
        let mut jump = CommandBuffer::new();
        jump.jump(spin.gpu_va(), 16)?;
        spin.write(0, jump.as_bytes())?;
        let mut queue = ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode).with_priority(3))?;
        let value = queue.submit(&jump)?;
        Ok(Hog { spin, queue, value, _ctx: ctx })
    }

    fn stop(&mut self) -> TestResult {
        let mut nop = CommandBuffer::new();
        nop.nop(4)?;
        self.spin.write(0, nop.as_bytes())?;
        Ok(())
    }

    /// Ends the spin and waits until the hog's submission completed.
    fn release(&mut self) -> TestResult {
        self.stop()?;
        self.queue.wait(self.value, WAIT)?;
        Ok(())
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A process that queues user-mode work on engine 0, held behind a [`Hog`], and then exits
/// (`kill`: is killed; its work then writes to an unmapped VA, so running it would fault). The
/// hog is let go once the exit is under way. Returns the statistics afterwards, the GPU pages
/// while the process was alive and those while its release drained (normal exit).
fn terminate_with_held_work(path: &Path, kill: bool) -> Result<(uapi_debug::DebugStats, u64, u64), crate::Error> {
    let dev = Device::open(path)?;
    let mut hog = Hog::start(&dev)?;
    let baseline = dev.debug_stats()?;
    let (ready, go) = (Signal::new()?, Signal::new()?);
    let (ready_ref, go_ref) = (&ready, &go);
    let child = proc::spawn("terminating process", move || {
        let r = (|| -> Result<_, crate::Error> {
            let Fixture { dev, ctx, buf, mut q } = Fixture::connected(path)?;
            // The killed process's work would fault its context if it ever ran.
            let va = if kill { buf.gpu_va() + (256 << 20) } else { buf.gpu_va() };
            write32(&mut q, va, 0x7E40)?;
            Ok((q, buf, ctx, dev))
        })();
        ready_ref.post(1); // Also on failure, so the parent never blocks.
        let objects = r?;
        go_ref.take()?;
        if kill {
            std::thread::sleep(Duration::from_secs(60));
        }
        std::mem::forget(objects); // Exits with its work queued: the file's release runs.
        Ok(())
    })?;
    ready.take()?;
    let during = dev.debug_stats()?.gpu_pages;
    let result = (|| -> Result<u64, crate::Error> {
        if kill {
            return Ok(during);
        }
        go.post(1);
        let draining = wait_until(WAIT, || dev.debug_stats().is_ok_and(|s| s.terminations_draining > 0));
        ensure!(draining, "the exiting process's release never waited for its queued work");
        std::thread::sleep(HOLD);
        let s = dev.debug_stats()?;
        ensure!(s.terminations_draining > 0, "the release stopped waiting while the work was held");
        Ok(s.gpu_pages)
    })();
    let joined = if kill { child.kill() } else { hog.release().and_then(|()| child.join()) };
    let while_draining = result?;
    joined?;
    hog.release()?;
    if kill {
        std::thread::sleep(HOLD); // Time for the killed process's work to run, if it could.
    }
    let after = dev.debug_stats()?;
    let counts = |s: &uapi_debug::DebugStats| (s.normal_terminations, s.abnormal_terminations);
    ensure!(
        after.gpu_pages == baseline.gpu_pages,
        "GPU pages {} after the exit, {} before",
        after.gpu_pages,
        baseline.gpu_pages
    );
    let (n, a) = counts(&after);
    let (n0, a0) = counts(&baseline);
    let want = if kill { (n0, a0 + 1) } else { (n0 + 1, a0) };
    ensure!((n, a) == want, "terminations (normal, abnormal) {:?}, expected {want:?}", (n, a));
    ensure!(after.faults == baseline.faults, "the terminated process's work ran after its release (it faulted)");
    Ok((after, during, while_draining))
}

/// proves: TERM-01, TERM-02, TERM-03 — a process exits with user-mode work held behind another
/// process's higher-priority queue: its release first disconnects the doorbell, then waits
/// (DEBUG_STATS shows it draining, still after 300 ms, with every GPU page of the process
/// mapped) until the test lets the engine go; the work then completes (the wait is satisfied,
/// not timed out, for the one queue that had work pending) and only then are the objects
/// destroyed: steps DISCONNECT, WAIT_SATISFIED, DESTROY, the ring allocations resident until
/// DESTROY, every page released after it.
fn normal_exit_disconnects_then_finishes_queued_work_before_destroying(path: &Path) -> TestResult {
    let (s, during, while_draining) = terminate_with_held_work(path, false)?;
    use uapi_debug::{
        TERM_STEP_DESTROY as DESTROY, TERM_STEP_DISCONNECT as DISCONNECT, TERM_STEP_WAIT_SATISFIED as SATISFIED,
    };
    ensure!(steps(&s) == [DISCONNECT, SATISFIED, DESTROY], "steps {:?}", steps(&s));
    ensure!(
        s.last_termination_waited == 1 && s.last_termination_timed_out == 0,
        "{} queue(s) waited for, {} timed out; expected 1 and 0",
        s.last_termination_waited,
        s.last_termination_timed_out
    );
    ensure!(while_draining == during, "GPU pages {while_draining} during the wait, {during} before the exit");
    let pages = &s.last_termination_pages[..3];
    ensure!(pages.iter().all(|&p| p == during), "GPU pages at each step {pages:?}, {during} before the exit");
    Ok(())
}

/// proves: TERM-04, TERM-05 — a killed process with work queued: its release does not wait
/// for the work; it marks the process's device in error, suspends its context, and only then
/// disconnects the doorbell and destroys the objects (steps MARK_ERROR, SUSPEND, DISCONNECT,
/// DESTROY), its ring allocations resident (GPU pages unchanged) through the mark and suspend
/// steps; the termination counts as abnormal, and the pending work never runs (once the engine
/// is free, its write to an unmapped VA raises no fault).
fn killed_process_is_marked_in_error_and_suspended_before_disconnect_and_destroy(path: &Path) -> TestResult {
    let (s, during, _) = terminate_with_held_work(path, true)?;
    use uapi_debug::{
        TERM_STEP_DESTROY as DESTROY, TERM_STEP_DISCONNECT as DISCONNECT, TERM_STEP_MARK_ERROR as MARK,
        TERM_STEP_SUSPEND as SUSPEND,
    };
    ensure!(steps(&s) == [MARK, SUSPEND, DISCONNECT, DESTROY], "steps {:?}", steps(&s));
    ensure!(
        s.last_termination_waited == 0,
        "the release of a killed process waited for {} queue(s)",
        s.last_termination_waited
    );
    let pages = &s.last_termination_pages[..3];
    ensure!(pages.iter().all(|&p| p == during), "GPU pages at each step {pages:?}, {during} before the kill");
    Ok(())
}

/// A kernel-mode queue with four submissions held behind a GPU wait nobody will signal.
fn held_work(path: &Path) -> Result<(Queue, Fence, Allocation, Device), crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    q.wait_fence(&f, 1)?;
    for n in 0..4 {
        write32(&mut q, buf.va_at(n * 4)?, 1)?;
    }
    Ok((q, f, buf, dev))
}

/// Held work does not leak or hang: a queue destroyed with work held behind a wait nobody will
/// signal, and a process exiting in that state (its file's release, whose drain times out,
/// shortened for the test), leave the device's object counts as they were.
fn queues_with_held_work_are_destroyed_and_closed_cleanly(path: &Path) -> TestResult {
    let _drain = crate::support::param::unfinishable_work_close_drain()?;
    let observer = Device::open(path)?;
    let counts = |s: belfry_umd::abi::uapi_debug::DebugStats| (s.contexts, s.queues, s.allocations, s.gpu_pages);
    let base = counts(observer.debug_stats()?);
    let (q, f, buf, dev) = held_work(path)?;
    drop(q);
    ensure!(f.value() == Some(0) && buf.read_u32(0)? == 0, "held work ran");
    drop((f, buf, dev));
    let child = proc::spawn("process exiting with held work", move || {
        // Exits with the held work in place: the file's release cleans up.
        std::mem::forget(held_work(path)?);
        Ok(())
    })?;
    child.join()?;
    let mut now = base;
    let back = wait_until(WAIT, || {
        now = observer.debug_stats().map(counts).unwrap_or(now);
        now == base
    });
    ensure!(back, "counts (contexts, queues, allocations, GPU pages) {now:?}, before {base:?}");
    Ok(())
}

/// A file of `path` with a context and an idle kernel-mode queue (so its release records its
/// termination steps), opened by the calling process.
fn file_with_a_queue(path: &Path) -> Result<RawDev, crate::Error> {
    let raw = RawDev::open(path)?;
    let ctx = raw.create_context().map_err(errno_name)?;
    raw.create_queue(ctx, None, 16).map_err(errno_name)?;
    Ok(raw)
}

/// Waits until `observer` counts one more termination of the kind `abnormal` than `before`;
/// the steps of that release.
fn next_termination(
    observer: &Device,
    before: &uapi_debug::DebugStats,
    abnormal: bool,
) -> Result<Vec<u8>, crate::Error> {
    let mut s = *before;
    let counted = wait_until(WAIT, || {
        s = observer.debug_stats().unwrap_or(s);
        s.normal_terminations + s.abnormal_terminations > before.normal_terminations + before.abnormal_terminations
    });
    ensure!(counted, "no release recorded");
    let (normal, killed) =
        (s.normal_terminations - before.normal_terminations, s.abnormal_terminations - before.abnormal_terminations);
    ensure!(
        (normal, killed) == if abnormal { (0, 1) } else { (1, 0) },
        "{normal} normal and {killed} abnormal release(s), expected the {}; steps {:?}",
        if abnormal { "abnormal" } else { "normal" },
        steps(&s)
    );
    Ok(steps(&s))
}

/// The release path is judged on the process that opened the file, not on the one that closes
/// its last reference: a file whose opener closed it normally is released
/// normally (DISCONNECT, WAIT_SATISFIED, DESTROY) although the child that inherited it, and
/// closes it last, is SIGKILLed; a file whose opener was SIGKILLed is released as killed (MARK,
/// SUSPEND, DISCONNECT, DESTROY) although the grandchild that inherited it exits normally.
fn the_release_path_is_judged_on_the_process_that_opened_the_file(path: &Path) -> TestResult {
    use uapi_debug::{
        TERM_STEP_DESTROY as DESTROY, TERM_STEP_DISCONNECT as DISCONNECT, TERM_STEP_MARK_ERROR as MARK,
        TERM_STEP_SUSPEND as SUSPEND, TERM_STEP_WAIT_SATISFIED as SATISFIED,
    };
    let observer = Device::open(path)?;

    let before = observer.debug_stats()?;
    let raw = file_with_a_queue(path)?;
    let holder = proc::spawn("child holding the file", || {
        std::thread::sleep(Duration::from_secs(3600));
        Ok(())
    })?;
    drop(raw);
    holder.kill()?;
    let got = next_termination(&observer, &before, false)
        .map_err(|e| format!("opener closed normally, last holder killed: {e}"))?;
    ensure!(got == [DISCONNECT, SATISFIED, DESTROY], "opener closed normally, last holder killed: steps {got:?}");

    let before = observer.debug_stats()?;
    let (ready, go) = (Channel::new(WAIT)?, Channel::new(WAIT)?);
    let opener = proc::spawn("opener", || {
        let _raw = file_with_a_queue(path)?;
        let _holder = proc::spawn("grandchild holding the file", || {
            go.recv(Side::Child)?;
            Ok(())
        })?;
        ready.send(Side::Child, 1, None)?;
        std::thread::sleep(Duration::from_secs(3600));
        Ok(())
    })?;
    ready.recv(Side::Parent)?;
    opener.kill()?;
    go.send(Side::Parent, 1, None)?;
    let got = next_termination(&observer, &before, true)
        .map_err(|e| format!("opener killed, last holder exited normally: {e}"))?;
    ensure!(got == [MARK, SUSPEND, DISCONNECT, DESTROY], "opener killed, last holder exited normally: steps {got:?}");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(exiting_with_queued_work_releases_every_object, Default, ["TERM-03"]),
        test_entry!(killed_process_releases_every_object, Default, ["TERM-06"]),
        test_entry!(
            normal_exit_disconnects_then_finishes_queued_work_before_destroying,
            Default,
            ["TERM-01", "TERM-02", "TERM-03"]
        ),
        test_entry!(
            killed_process_is_marked_in_error_and_suspended_before_disconnect_and_destroy,
            Default,
            ["TERM-04", "TERM-05"]
        ),
        test_entry!(queues_with_held_work_are_destroyed_and_closed_cleanly, Default, []),
        test_entry!(the_release_path_is_judged_on_the_process_that_opened_the_file, Default, []),
    ]
}

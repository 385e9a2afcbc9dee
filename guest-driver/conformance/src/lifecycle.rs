//! Doorbell disconnection on request, process termination (normal and abnormal, checked
//! through the module's termination counters) and the ring allocations a queue is created
//! from.

use std::path::Path;
use std::time::Duration;

use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_umd::{Allocation, CommandBuffer, Context, Device, Error, Queue, QueueDesc, QueueMode};

use crate::capabilities::Rebinding;
use crate::proc::{self, Signal};
use crate::raw::{errno_name, RawDev};
use crate::tests::{expect_status, expect_u32, kernel_queue, user_queue, write32, HOLD};
use crate::{ensure, expect_errno, wait_until, Test, TestResult};

const WAIT: Duration = Duration::from_secs(10);

/// proves: DB-17 — DISCONNECT_DOORBELL (the module's disconnect path on request) publishes the
/// status it is given and moves the doorbell mapping to the dummy page. After RETRY, work rung
/// on the doorbell does not reach the device (a queue allowed no reconnect keeps it in the ring,
/// not run) until the doorbell is connected again, and the library's RETRY reconnect runs the
/// next submission at once; after ABORT the doorbell cannot reconnect (EIO) and the library
/// takes its abort path (a new queue runs the work). Any other status is EINVAL.
fn disconnect_doorbell_on_request_publishes_its_status_and_holds_work_until_reconnect(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = ctx.create_queue(&QueueDesc { retry_limit: 0, ..QueueDesc::default() })?;
    q.connect_doorbell()?;
    let v = write32(&mut q, buf.va_at(0)?, 1)?;
    q.wait(v, WAIT)?;
    q.disconnect_doorbell(DoorbellStatus::DisconnectedRetry)?;
    expect_status(&q, DoorbellStatus::DisconnectedRetry, "after DISCONNECT_DOORBELL(RETRY)")?;
    let held = match write32(&mut q, buf.va_at(4)?, 2) {
        Err(Error::RetryLimit { value, .. }) => value,
        other => return Err(format!("a submission with no reconnect allowed: {other:?}, expected RetryLimit").into()),
    };
    std::thread::sleep(HOLD);
    ensure!(q.completed() < held, "work rung on the disconnected doorbell ran");
    expect_u32(&buf, 4, 0, "work rung on the disconnected doorbell")?;
    q.connect_doorbell()?;
    q.wait(held, WAIT)?;
    expect_u32(&buf, 4, 2, "the held work after the reconnect")?;

    let mut r = user_queue(&ctx)?;
    r.connect_doorbell()?;
    r.disconnect_doorbell(DoorbellStatus::DisconnectedRetry)?;
    let v = write32(&mut r, buf.va_at(8)?, 3)?;
    ensure!(r.stats().reconnects == 1, "{} reconnects after RETRY, expected 1", r.stats().reconnects);
    r.wait(v, WAIT)?;
    expect_u32(&buf, 8, 3, "work after the library's reconnect")?;

    r.disconnect_doorbell(DoorbellStatus::DisconnectedAbort)?;
    expect_status(&r, DoorbellStatus::DisconnectedAbort, "after DISCONNECT_DOORBELL(ABORT)")?;
    match r.connect_doorbell() {
        Err(e) if e.errno() == Some(libc::EIO) => {}
        other => return Err(format!("CONNECT_DOORBELL after ABORT: {other:?}, expected EIO").into()),
    }
    let v = write32(&mut r, buf.va_at(12)?, 4)?;
    let s = r.stats();
    ensure!(s.losses == 1 && s.recreations == 1, "after ABORT: {s:?}, expected one loss and one re-creation");
    r.wait(v, WAIT)?;
    expect_u32(&buf, 12, 4, "work on the re-created queue")?;
    match r.disconnect_doorbell(DoorbellStatus::Connected) {
        Err(e) if e.errno() == Some(libc::EINVAL) => Ok(()),
        other => Err(format!("DISCONNECT_DOORBELL(CONNECTED): {other:?}, expected EINVAL").into()),
    }
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
        let mut queue =
            ctx.create_queue(&QueueDesc { mode: QueueMode::KernelMode, priority: 3, ..QueueDesc::default() })?;
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
fn terminate_with_held_work(path: &Path, kill: bool) -> Result<(uapi::DebugStats, u64, u64), crate::Error> {
    let dev = Device::open(path)?;
    let mut hog = Hog::start(&dev)?;
    let baseline = dev.debug_stats()?;
    let (ready, go) = (Signal::new()?, Signal::new()?);
    let (ready_ref, go_ref) = (&ready, &go);
    let child = proc::spawn("terminating process", move || {
        let r = (|| -> Result<_, crate::Error> {
            let dev = Device::open(path)?;
            let ctx = dev.create_context()?;
            let buf = ctx.alloc(4096, 0)?;
            let mut q = user_queue(&ctx)?;
            q.connect_doorbell()?;
            // The killed process's work would fault its context if it ever ran.
            let va = if kill { buf.gpu_va() + (256 << 20) } else { buf.gpu_va() };
            write32(&mut q, va, 0x7E40)?;
            Ok((q, buf, ctx, dev))
        })();
        ready_ref.post(1); // Also on failure, so the parent never blocks.
        let objects = r?;
        go_ref.take();
        if kill {
            std::thread::sleep(Duration::from_secs(60));
        }
        std::mem::forget(objects); // Exits with its work queued: the file's release runs.
        Ok(())
    })?;
    ready.take();
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
    let counts = |s: &uapi::DebugStats| (s.normal_terminations, s.abnormal_terminations);
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

/// The recorded steps up to the terminating 0.
fn steps(s: &uapi::DebugStats) -> Vec<u8> {
    s.last_termination_steps.iter().copied().take_while(|&c| c != 0).collect()
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
    use uapi::{
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
    use uapi::{
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

/// proves: RING-01 — a user-mode queue is created from ring and ring-control allocations made
/// before it and named in CREATE_QUEUE: a missing one (0 or unknown), another process's or a
/// freed one is ENOENT; one of another context, a ring too small for its entries or the same
/// allocation as both is EINVAL; named and valid, the queue is created.
fn queue_creation_needs_both_ring_allocations_named(path: &Path) -> TestResult {
    let d = RawDev::open(path)?;
    let other = RawDev::open(path)?;
    let e = errno_name;
    let ctx = d.create_context().map_err(e)?;
    let ctx2 = d.create_context().map_err(e)?;
    let ring = d.alloc(ctx, 4096).map_err(e)?.handle;
    let control = d.alloc(ctx, 4096).map_err(e)?.handle;
    let elsewhere = d.alloc(ctx2, 4096).map_err(e)?.handle;
    let freed = d.alloc(ctx, 4096).map_err(e)?.handle;
    d.handle_op(uapi::IOCTL_FREE, freed).map_err(e)?;
    let octx = other.create_context().map_err(e)?;
    let mut foreign = 0;
    for _ in 0..16 {
        foreign = other.alloc(octx, 4096).map_err(e)?.handle; // Beyond every handle of `d`.
    }
    let cases: [(&str, u32, u32, u32, i32); 9] = [
        ("no ring", 0, control, 16, libc::ENOENT),
        ("no ring control", ring, 0, 16, libc::ENOENT),
        ("an unknown ring", 999, control, 16, libc::ENOENT),
        ("another process's ring", foreign, control, 16, libc::ENOENT),
        ("another process's ring control", ring, foreign, 16, libc::ENOENT),
        ("a freed ring", freed, control, 16, libc::ENOENT),
        ("a ring of another context", elsewhere, control, 16, libc::EINVAL),
        ("a ring too small for 512 entries", ring, control, 512, libc::EINVAL),
        ("one allocation as both", ring, ring, 16, libc::EINVAL),
    ];
    for (what, r, c, entries, want) in cases {
        match d.create_queue(ctx, Some((r, c)), entries) {
            Err(got) if got == want => {}
            other => return Err(format!("CREATE_QUEUE with {what}: {other:?}, expected {}", e(want)).into()),
        }
    }
    let q = d.create_queue(ctx, Some((ring, control)), 16).map_err(e)?;
    ensure!(q.handle != 0, "no queue handle");
    Ok(())
}

/// proves: SUB-06 — a queue's progress fence is a native fence other work can wait on: a
/// second queue's GPU FENCE_WAIT on the first queue's progress fence (its GPU VA and the value
/// a submission returned) holds the second queue's work while the first queue's work is held
/// (behind a CPU-signaled fence), and the first queue's progress signal releases it.
fn progress_fence_releases_another_queues_gpu_wait(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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

/// The kernel's taint bits for an oops (`D`) and a warning (`W`).
fn oops_or_warning_taint() -> Result<u64, crate::Error> {
    let text = std::fs::read_to_string("/proc/sys/kernel/tainted")?;
    Ok(text.trim().parse::<u64>()? & ((1 << 7) | (1 << 9)))
}

/// proves: RING-04 — device termination: unbinding the device while a process holds a context,
/// a user-mode queue with its connected doorbell and ring allocations and a kernel-mode queue
/// ends them all: the doorbell reads DISCONNECTED_ABORT (its mapping on the dummy page: a
/// submission rings it harmlessly and fails), CONNECT_DOORBELL, SUBMIT and CREATE_CONTEXT give
/// ENODEV, the process drops everything and exits cleanly, no oops or warning taints the
/// kernel, and the device binds again and runs work.
fn unbinding_the_device_ends_every_queue_doorbell_and_ring_allocation(path: &Path) -> TestResult {
    let binding = Rebinding::new(path)?;
    let taint = oops_or_warning_taint()?;
    let (ready, go) = (Signal::new()?, Signal::new()?);
    let (ready_ref, go_ref) = (&ready, &go);
    let child = proc::spawn("process of an unbound device", move || {
        let built = (|| -> Result<_, crate::Error> {
            let dev = Device::open(path)?;
            let ctx = dev.create_context()?;
            let buf = ctx.alloc(4096, 0)?;
            let mut um = user_queue(&ctx)?;
            um.connect_doorbell()?;
            let v = write32(&mut um, buf.gpu_va(), 0xDE40)?;
            um.wait(v, WAIT)?;
            let mut km = kernel_queue(&ctx)?;
            let v = write32(&mut km, buf.va_at(4)?, 0xDE41)?;
            km.wait(v, WAIT)?;
            Ok((um, km, buf, ctx, dev))
        })();
        ready_ref.post(1);
        let (mut um, mut km, buf, ctx, dev) = built?;
        go_ref.take(); // The device is unbound now.
        expect_status(&um, DoorbellStatus::DisconnectedAbort, "after the unbind")?;
        expect_errno(um.connect_doorbell(), libc::ENODEV, "CONNECT_DOORBELL after the unbind")?;
        expect_errno(write32(&mut km, buf.gpu_va(), 1), libc::ENODEV, "SUBMIT after the unbind")?;
        expect_errno(dev.create_context(), libc::ENODEV, "CREATE_CONTEXT after the unbind")?;
        let lost = write32(&mut um, buf.gpu_va(), 2);
        ensure!(lost.is_err(), "a user-mode submission after the unbind succeeded: {lost:?}");
        drop((um, km, buf, ctx, dev));
        Ok(())
    })?;
    ready.take();
    let unbound = binding.unbind();
    go.post(1);
    let joined = child.join();
    unbound?;
    joined?;
    binding.bind()?;
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    let v = write32(&mut q, buf.gpu_va(), 0xB1ED)?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0xB1ED, "work after re-binding")?;
    let now = oops_or_warning_taint()?;
    ensure!(now == taint, "the kernel is tainted by an oops or a warning ({taint:#x} -> {now:#x})");
    Ok(())
}

/// Every test of this file.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            disconnect_doorbell_on_request_publishes_its_status_and_holds_work_until_reconnect,
            Default,
            ["DB-17"]
        ),
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
        test_entry!(queue_creation_needs_both_ring_allocations_named, Default, ["RING-01"]),
        test_entry!(progress_fence_releases_another_queues_gpu_wait, Default, ["SUB-06"]),
        test_entry!(unbinding_the_device_ends_every_queue_doorbell_and_ring_allocation, Default, ["RING-04"]),
    ]
}

//! The library's waits as libdrm and Vulkan users expect them (no rule family): one
//! wait on several fence and progress values, any or all (`WAIT_FENCES`), released by every
//! interrupt form the suite's devices offer; absolute deadlines that hold under a storm of
//! signals, and "forever"; a context's reset status after a real fault; a wait on a signal
//! lost with its hung context ends with the loss.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use belfry_abi::engine::FaultReason;
use belfry_abi::uapi;
use belfry_abi::uapi_debug;
use belfry_abi::uapi_sync::{self, WaitFenceEntry};
use belfry_umd::{
    wait_all, wait_any, Allocation, CommandBuffer, Deadline, Fence, FenceKind, Queue, QueueMode, ResetFlags,
};

use crate::harness::{proc, raw::RawDev};
use crate::support::fencelog::{debug_when, expect_asleep, gated_signal, warm_queue};
use crate::support::fixture::open_context;
use crate::support::work::kernel_queue;
use crate::support::{expect_errno, wait_until, HOLD, WAIT};
use crate::{Test, TestResult};

/// `WAIT_FENCES` on two native fences, a monitored fence and a queue's progress, in one call,
/// on a device whose interrupt path is `path` (`uapi::PATH_*`): "any" returns the index of the
/// one fence a GPU signal reached (the interrupt path counted the release) and withdraws the
/// other waits (their MonitoredValues back to UINT64_MAX, nothing pending); "all" stays asleep
/// through a GPU signal of a native fence and a GPU `MONITORED_FENCE_SIGNAL` of the monitored
/// one, and returns only on the CPU signal of the last.
fn multi_fence_waits(path: &Path, release_path: usize) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let a = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let b = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let m = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let mut qu = warm_queue(&ctx, QueueMode::UserMode)?;
    let mut qk = kernel_queue(&ctx)?;
    let deadline = Deadline::after(WAIT);

    // Any: b, signalled by the GPU, is the one.
    let d0 = dev.irq_debug()?;
    let first = std::thread::scope(|s| -> Result<usize, crate::Error> {
        let waiter = s.spawn(|| wait_any(&[a.point(1), b.point(1), m.point(1)], deadline));
        expect_asleep(&a, 1)?;
        expect_asleep(&b, 1)?;
        let mut cb = CommandBuffer::new();
        cb.signal_fence(&b, 1)?;
        qu.submit(&cb)?;
        Ok(waiter.join().map_err(|_| "waiter panicked")??)
    })?;
    ensure!(first == 1, "wait_any returned index {first}; only entry 1 (b) was signalled");
    let on_path = |x: &uapi_debug::IrqDebug, y: &uapi_debug::IrqDebug| {
        y.released[release_path].wrapping_sub(x.released[release_path])
    };
    let d1 = debug_when(&dev, &d0, |x, y| on_path(x, y) >= 1)?;
    ensure!(on_path(&d0, &d1) >= 1, "interrupt path {release_path} released no wait: {d1:?}");
    for (name, f) in [("a", &a), ("b", &b), ("m", &m)] {
        let native = f.kind() != FenceKind::Monitored;
        // The interrupt path moves MonitoredValue after it released the wait (MV-07), so the
        // waiter may be back first.
        let back = |i: &uapi_debug::FenceInfo| i.pending_waits == 0 && (!native || i.monitored_value == u64::MAX);
        wait_until(WAIT, || f.info().is_ok_and(|i| back(&i)));
        let info = f.info()?;
        ensure!(
            back(&info),
            "after wait_any returned, fence {name} has {} pending wait(s), MonitoredValue {:#x}",
            info.pending_waits,
            info.monitored_value
        );
    }

    // All: a by the GPU (behind a gate, with the user-mode queue's progress), m by the GPU's
    // monitored signal, b by the CPU.
    let mut gate = gated_signal(&ctx, &mut qu, &a, 2)?;
    let progress = qu.last_submitted();
    let points = [a.point(2), b.point(2), m.point(1), qu.progress_point(progress)];
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| wait_all(&points, deadline));
        expect_asleep(&b, 2)?;
        gate.write_u32(0, 1)?;
        ensure!(wait_until(WAIT, || a.value() == Some(2) && qu.completed() >= progress), "a's GPU signal did not run");
        std::thread::sleep(HOLD);
        ensure!(!waiter.is_finished(), "wait_all returned with only a and the progress reached");
        let mut cb = CommandBuffer::new();
        cb.monitored_signal(m.gpu_va(), 1)?;
        qk.submit(&cb)?;
        ensure!(wait_until(WAIT, || m.value() == Some(1)), "m's GPU signal did not run");
        std::thread::sleep(HOLD);
        ensure!(!waiter.is_finished(), "wait_all returned with b still at {:?}", b.value());
        b.signal(2)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    Ok(())
}

/// The multi-fence wait on the default device (exact records: each names its fence).
fn multi_fence_waits_with_exact_records(path: &Path) -> TestResult {
    multi_fence_waits(path, uapi_debug::PATH_EXACT)
}

/// The multi-fence wait on the per-queue device (records name a queue; the module reads its
/// signal log).
fn multi_fence_waits_with_per_queue_records(path: &Path) -> TestResult {
    multi_fence_waits(path, uapi_debug::PATH_PER_QUEUE)
}

/// The multi-fence wait on the scan-all device (NULL records: every wait is examined).
fn multi_fence_waits_with_scan_all_records(path: &Path) -> TestResult {
    multi_fence_waits(path, uapi_debug::PATH_SCAN_ALL)
}

/// `WAIT_FENCES` refuses what it cannot wait on before sleeping: no entries, more than
/// `MAX_WAIT_FENCES`, unknown flags, an INTRA_GPU fence (`EPERM`), an unknown handle; a
/// progress entry of a queue whose context faulted ends at once with `ECANCELED` even when
/// another entry could still be reached.
fn multi_fence_waits_refuse_bad_entries_and_lost_progress(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let vram = ctx.create_fence(FenceKind::IntraGpu, 0, 0)?;
    let raw = RawDev::open(path)?;
    let rc = raw.create_context().map_err(|e| format!("CREATE_CONTEXT: errno {e}"))?;
    let rf = raw
        .create_fence(uapi::CreateFence { context: rc, kind: uapi::FENCE_KIND_DEFAULT, ..Default::default() })
        .map_err(|e| format!("CREATE_FENCE: errno {e}"))?
        .handle;
    let entry = |handle, flags, value| WaitFenceEntry { handle, flags, value };
    let past = 0;
    let cases: [(&str, Vec<WaitFenceEntry>, u32, i32); 5] = [
        ("no entries", vec![], 0, libc::EINVAL),
        ("65 entries", vec![entry(rf, 0, 1); 65], 0, libc::EINVAL),
        ("unknown wait flags", vec![entry(rf, 0, 1)], 1 << 7, libc::EINVAL),
        ("unknown entry flags", vec![entry(rf, 1 << 5, 1)], 0, libc::EINVAL),
        ("an unknown fence handle", vec![entry(rf + 1000, 0, 1)], 0, libc::ENOENT),
    ];
    for (what, entries, flags, errno) in cases {
        match raw.wait_fences(&entries, flags, past) {
            Err(e) if e == errno || (errno == libc::ENOENT && e == libc::EINVAL) => {}
            other => return Err(format!("WAIT_FENCES with {what}: {other:?}, expected errno {errno}").into()),
        }
    }
    // 64 entries are fine (none reached, the deadline passed: ETIMEDOUT without sleeping).
    match raw.wait_fences(&[entry(rf, 0, 1); 64], 0, past) {
        Err(libc::ETIMEDOUT) => {}
        other => return Err(format!("WAIT_FENCES with 64 entries past the deadline: {other:?}").into()),
    }
    expect_errno(
        wait_any(&[f.point(1), vram.point(1)], Deadline::after(Duration::ZERO)),
        libc::EPERM,
        "a wait on an INTRA_GPU fence",
    )?;
    // Lost progress.
    let mut q = kernel_queue(&ctx)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut bad = CommandBuffer::new();
    bad.write32(buf.gpu_va() + (256 << 20), 0xBAD)?;
    let lost = q.submit(&bad)?;
    let start = Instant::now();
    let r = wait_any(&[f.point(1), q.progress_point(lost)], Deadline::after(Duration::from_secs(5)));
    expect_errno(r, libc::ECANCELED, "wait_any on a fence and the progress of a faulting context")?;
    ensure!(start.elapsed() < Duration::from_secs(2), "the wait on lost progress took {:?}", start.elapsed());
    Ok(())
}

/// Signals the handler of [`deadlines_hold_under_a_signal_storm`] counted.
static STORM_SIGNALS: AtomicU32 = AtomicU32::new(0);

/// Counts a storm signal (it only interrupts the wait).
extern "C" fn count_signal(_: libc::c_int) {
    STORM_SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// Installs [`count_signal`] for `sig` without `SA_RESTART` (the module's `EINTR` comes back to
/// the caller); the previous action.
fn install_counter(sig: libc::c_int) -> Result<libc::sigaction, crate::Error> {
    // SAFETY: zeroed sigactions are valid; the handler touches one atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        let mut old: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = count_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(sig, &sa, &mut old) != 0 {
            return Err(format!("sigaction: {}", std::io::Error::last_os_error()).into());
        }
        Ok(old)
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
fn monotonic_ns() -> u64 {
    Deadline::after(Duration::ZERO).as_monotonic_ns()
}

/// A child process sends this process SIGUSR1 and SIGALRM in turn every 2 ms (handlers without
/// `SA_RESTART`). A raw `WAIT_FENCES` called again with the same argument after each `EINTR`
/// ends with `ETIMEDOUT` at its absolute deadline, 1 s ahead — not before it, and not a full
/// timeout after the last signal (a relative timeout restarted would never end) — and so does
/// the library's `Fence::wait_until`. A deadline already passed checks without sleeping, and
/// `Deadline::FOREVER` sleeps until the value is signalled.
fn deadlines_hold_under_a_signal_storm(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let raw = RawDev::open(path)?;
    let rc = raw.create_context().map_err(|e| format!("CREATE_CONTEXT: errno {e}"))?;
    let rf = raw
        .create_fence(uapi::CreateFence { context: rc, kind: uapi::FENCE_KIND_DEFAULT, ..Default::default() })
        .map_err(|e| format!("CREATE_FENCE: errno {e}"))?
        .handle;
    let old_usr1 = install_counter(libc::SIGUSR1)?;
    let old_alrm = install_counter(libc::SIGALRM)?;
    // SAFETY: `getpid` has no preconditions.
    let parent = unsafe { libc::getpid() };
    let storm = proc::spawn("signal storm", move || loop {
        for sig in [libc::SIGUSR1, libc::SIGALRM] {
            // SAFETY: sends a signal to the parent, which handles both.
            unsafe { libc::kill(parent, sig) };
            std::thread::sleep(Duration::from_millis(2));
        }
    })?;
    let result = storm_waits(&raw, rf, &f);
    let killed = storm.kill();
    // SAFETY: restores the actions saved above; the storm is over (its child reaped).
    unsafe {
        libc::sigaction(libc::SIGUSR1, &old_usr1, std::ptr::null_mut());
        libc::sigaction(libc::SIGALRM, &old_alrm, std::ptr::null_mut());
    }
    result?;
    killed
}

/// The waits of [`deadlines_hold_under_a_signal_storm`], while the storm blows.
fn storm_waits(raw: &RawDev, rf: u32, f: &belfry_umd::Fence) -> TestResult {
    let timeout = Duration::from_secs(1);
    let give_up = 4 * timeout;
    // The raw ioctl, restarted with the very same argument.
    let entries = [WaitFenceEntry { handle: rf, flags: 0, value: 1 }];
    let start = Instant::now();
    let deadline = monotonic_ns() + u64::try_from(timeout.as_nanos())?;
    let mut eintr = 0u32;
    let r = loop {
        match raw.wait_fences(&entries, uapi_sync::WAIT_FENCES_ALL, deadline) {
            Err(libc::EINTR) if start.elapsed() < give_up => eintr += 1,
            r => break r,
        }
    };
    let (took, now) = (start.elapsed(), monotonic_ns());
    ensure!(eintr >= 10, "only {eintr} EINTR in {took:?}: the storm did not reach the wait");
    ensure!(r == Err(libc::ETIMEDOUT), "the raw wait ended {r:?} after {took:?} and {eintr} EINTRs");
    ensure!(now >= deadline, "the raw wait timed out {} ns before its deadline", deadline - now);
    ensure!(took < 2 * timeout, "the raw 1 s wait took {took:?} ({eintr} EINTRs)");
    // The library's wait.
    let before = STORM_SIGNALS.load(Ordering::Relaxed);
    let start = Instant::now();
    let d = Deadline::after(timeout);
    let r = f.wait_until(1, d);
    let (took, now) = (start.elapsed(), monotonic_ns());
    let signals = STORM_SIGNALS.load(Ordering::Relaxed) - before;
    ensure!(signals >= 10, "only {signals} signals during the library's wait");
    expect_errno(r, libc::ETIMEDOUT, "the library's wait under the storm")?;
    ensure!(now >= d.as_monotonic_ns(), "the library's wait timed out before its deadline");
    ensure!(took < 2 * timeout, "the library's 1 s wait took {took:?} ({signals} signals)");
    // Passed: no sleep. Forever: until signalled.
    match raw.wait_fences(&entries, 0, 0) {
        Err(libc::ETIMEDOUT) => {}
        other => return Err(format!("a wait whose deadline passed: {other:?}, expected ETIMEDOUT").into()),
    }
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait_until(1, Deadline::FOREVER));
        expect_asleep(f, 1)?;
        std::thread::sleep(HOLD);
        ensure!(!waiter.is_finished(), "a wait until FOREVER ended unsignalled");
        f.signal(1)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })
}

/// A context's reset status (`CONTEXT_STATUS`, `Context::reset_status`): usable before; after
/// its kernel-mode queue's GPU write to an unmapped address, lost and guilty with the MMU fault
/// and its address (the fault record counted by cause), while another context of the same
/// file stays usable.
fn reset_status_reports_a_guilty_context_after_its_fault(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let bystander = dev.create_context()?;
    let status = ctx.reset_status()?;
    ensure!(status.flags.is_empty() && !status.is_lost(), "a fresh context reports {status:?}");
    let faults = dev.interrupt_counts()?.fault;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let bad_va = buf.gpu_va() + (256 << 20);
    let mut bad = CommandBuffer::new();
    bad.write32(bad_va, 0xBAD)?;
    let lost = q.submit(&bad)?;
    match q.wait(lost, WAIT) {
        Err(belfry_umd::Error::ContextLost { .. }) => {}
        other => return Err(format!("the faulting work's wait: {other:?}, expected ContextLost").into()),
    }
    let now = dev.interrupt_counts()?.fault;
    ensure!(now > faults, "no fault record counted ({faults} before, {now} after)");
    let status = ctx.reset_status()?;
    ensure!(
        status.flags == ResetFlags::LOST | ResetFlags::GUILTY,
        "the faulted context reports {status:?}, expected LOST | GUILTY"
    );
    ensure!(
        status.fault_reason == Some(FaultReason::MmuNotPresent) && status.fault_address == bad_va,
        "the fault reported: {:?} at {:#x}, expected MmuNotPresent at {bad_va:#x}",
        status.fault_reason,
        status.fault_address
    );
    let other = bystander.reset_status()?;
    ensure!(other.flags.is_empty(), "the other context of the file reports {other:?}");
    Ok(())
}

/// A pollable wait (`FenceEvent`) on a monitored fence that a kernel-mode queue's software
/// signal packet (`QUEUE_SIGNAL_FENCE`) writes becomes readable when the packet runs, with no
/// later interrupt needed: the module writes the value in its interrupt thread, and the
/// eventfd waits it satisfies are completed there too, after the write.
fn a_fence_event_sees_a_software_signal_when_it_runs(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let fence = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let event = fence.event(1)?;
    let mut q = kernel_queue(&ctx)?;
    q.software_signal(&fence, 1)?;
    ensure!(
        wait_until(WAIT, || fence.value() == Some(1)),
        "the software signal never wrote the fence: {:?}",
        fence.value()
    );
    ensure!(
        event.wait(Duration::from_secs(2))?,
        "the fence reads 1 but its FenceEvent for 1 was not readable 2 s later"
    );
    Ok(())
}

/// The module's hang timeout for [`a_wait_on_a_signal_lost_with_its_context_ends_with_the_loss`].
const LOST_HANG_TIMEOUT_MS: u32 = 400;

/// How long after the hang timeout the wait may still take: the reset, the loss's processing
/// and the wake-up, on a loaded TCG guest.
const LOST_BOUND: Duration = Duration::from_secs(10);

/// How long the parent lets the child run before it kills it: a wait that would never end.
const LOST_GUARD: Duration = Duration::from_secs(60);

/// A wait on a fence whose pending signal sits in a hung queue's unexecuted work ends, even
/// with `Deadline::FOREVER`: a user-mode queue loops (a `JUMP` to itself) with a signal of
/// fence F to 1 queued behind the loop; the module's 400 ms hang timeout resets the engine and
/// loses the context, and the waiter on F gets `ContextLost` within the timeout plus a bound.
/// A wait on F started afterwards ends the same way at once; a wait for 2 on F (no lost work
/// named it) and a waiter on an unrelated fence G are not disturbed — G's waiter returns only
/// on G's CPU signal — and F itself keeps its value (a CPU signal still completes it). The
/// whole scenario runs in a child the parent kills after 60 s.
fn a_wait_on_a_signal_lost_with_its_context_ends_with_the_loss(path: &Path) -> TestResult {
    let _timeout = crate::support::param::ModuleParam::set("hang_timeout_ms", LOST_HANG_TIMEOUT_MS)?;
    let done = proc::Signal::new()?;
    let done_ref = &done;
    let child = proc::spawn("waits on a lost context's fence signal", move || {
        let r = wait_on_lost_signal(path);
        done_ref.post(1);
        r
    })?;
    if !wait_until(LOST_GUARD, || done.try_take()) {
        child.kill()?;
        return Err(format!(
            "the FOREVER wait on a fence only the hung queue's dropped work would signal did not end in {LOST_GUARD:?}"
        )
        .into());
    }
    child.join()
}

/// The child's half of [`a_wait_on_a_signal_lost_with_its_context_ends_with_the_loss`].
fn wait_on_lost_signal(path: &Path) -> TestResult {
    use belfry_umd::Error;
    let crate::support::fixture::Fixture { dev: _dev, ctx, mut buf, mut q } =
        crate::support::fixture::Fixture::connected(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let g = ctx.create_fence(FenceKind::Default, 0, 0)?;
    std::thread::scope(|s| -> TestResult {
        let unrelated = s.spawn(|| g.wait_until(1, Deadline::FOREVER));
        let start = hang_with_a_signal_behind(&mut buf, &mut q, &f)?;
        let waited = f.wait_until(1, Deadline::FOREVER);
        let took = start.elapsed();
        let limit = Duration::from_millis(u64::from(LOST_HANG_TIMEOUT_MS)) + LOST_BOUND;
        match waited {
            Err(Error::ContextLost { value: 1 }) => {}
            other => {
                return Err(format!("the FOREVER wait on F: {other:?} after {took:?}, expected ContextLost").into())
            }
        }
        ensure!(took < limit, "the wait on F ended after {took:?}, more than the hang timeout plus {LOST_BOUND:?}");
        match f.wait_until(1, Deadline::after(WAIT)) {
            Err(Error::ContextLost { value: 1 }) => {}
            other => return Err(format!("a wait on F started after the loss: {other:?}, expected ContextLost").into()),
        }
        expect_errno(
            f.wait_until(2, Deadline::after(Duration::ZERO)),
            libc::ETIMEDOUT,
            "a wait for 2 on F, which no lost work named",
        )?;
        ensure!(!unrelated.is_finished(), "the wait on the unrelated fence G ended with the loss");
        g.signal(1)?;
        let g_waited = unrelated.join().map_err(|_| "G's waiter panicked")?;
        ensure!(g_waited.is_ok(), "the wait on the unrelated fence G: {g_waited:?}, expected Ok on its CPU signal");
        ensure!(f.value() == Some(0), "F reads {:?}: the lost signal wrote it", f.value());
        f.signal(1)?;
        f.wait_until(1, Deadline::after(Duration::ZERO))?;
        Ok(())
    })
}

/// Makes `q` loop forever (a `JUMP` to itself written at the start of `buf`) with a signal of
/// `f` to 1 queued behind the loop, so the hang timeout loses the context with that signal
/// unexecuted; when the loop was submitted.
fn hang_with_a_signal_behind(buf: &mut Allocation, q: &mut Queue, f: &Fence) -> Result<Instant, crate::Error> {
    let mut jump = CommandBuffer::new();
    jump.jump(buf.gpu_va(), 16)?;
    buf.write(0, jump.as_bytes())?;
    let start = Instant::now();
    q.submit(&jump)?;
    q.signal_fence(f, 1)?;
    Ok(start)
}

/// The deadline of the pollable wait of
/// [`a_pollable_wait_on_a_signal_lost_with_its_context_ends_with_the_loss`]: far past the hang
/// timeout plus [`LOST_BOUND`].
const POLL_DEADLINE: Duration = Duration::from_secs(40);

/// A pollable wait (`FenceEvent`, an eventfd) on a fence whose pending signal sits in a hung
/// queue's unexecuted work ends with `ContextLost` within the hang timeout plus a bound, well
/// before its 40 s deadline: a user-mode queue loops with a signal of F to 1 queued behind the
/// loop; the module's 400 ms hang timeout loses the context. A pollable wait on F for 1
/// registered afterwards ends the same way at once; one for 2 on F (no lost work named it)
/// stays pending, and F still completes on a CPU signal.
fn a_pollable_wait_on_a_signal_lost_with_its_context_ends_with_the_loss(path: &Path) -> TestResult {
    use belfry_umd::Error;
    let _timeout = crate::support::param::ModuleParam::set("hang_timeout_ms", LOST_HANG_TIMEOUT_MS)?;
    let crate::support::fixture::Fixture { dev: _dev, ctx, mut buf, mut q } =
        crate::support::fixture::Fixture::connected(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let event = f.event(1)?;
    let start = hang_with_a_signal_behind(&mut buf, &mut q, &f)?;
    let waited = event.wait(POLL_DEADLINE);
    let took = start.elapsed();
    let limit = Duration::from_millis(u64::from(LOST_HANG_TIMEOUT_MS)) + LOST_BOUND;
    match waited {
        Err(Error::ContextLost { value: 1 }) => {}
        other => {
            return Err(format!(
            "the pollable wait on F for 1: {other:?} after {took:?} (deadline {POLL_DEADLINE:?}), expected ContextLost"
        )
            .into())
        }
    }
    ensure!(
        took < limit,
        "the pollable wait on F ended after {took:?}, more than the hang timeout plus {LOST_BOUND:?}"
    );
    match f.event(1)?.wait(WAIT) {
        Err(Error::ContextLost { value: 1 }) => {}
        other => {
            return Err(
                format!("a pollable wait on F registered after the loss: {other:?}, expected ContextLost").into()
            )
        }
    }
    let later = f.event(2)?;
    ensure!(!later.is_ready()?, "the pollable wait for 2 on F, which no lost work named, ended with the loss");
    f.signal(2)?;
    ensure!(later.wait(WAIT)?, "the pollable wait for 2 on F did not end on F's CPU signal to 2");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(multi_fence_waits_with_exact_records, Default, []),
        test_entry!(multi_fence_waits_with_per_queue_records, PerQueueInterrupts, []),
        test_entry!(multi_fence_waits_with_scan_all_records, ScanAllInterrupts, []),
        test_entry!(multi_fence_waits_refuse_bad_entries_and_lost_progress, Default, []),
        test_entry!(deadlines_hold_under_a_signal_storm, Default, []),
        test_entry!(reset_status_reports_a_guilty_context_after_its_fault, Default, []),
        test_entry!(a_fence_event_sees_a_software_signal_when_it_runs, Default, []),
        test_entry!(a_wait_on_a_signal_lost_with_its_context_ends_with_the_loss, Default, []),
        test_entry!(a_pollable_wait_on_a_signal_lost_with_its_context_ends_with_the_loss, Default, []),
    ]
}

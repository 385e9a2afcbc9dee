//! The library as its users expect it (no rule family): a dropped pollable wait is
//! withdrawn, a wait on a lost context's work returns the loss at once, a CPU signal never moves
//! a fence backwards and the GPU signals the library knows to go backwards are refused, a pollable wait on a destroyed fence becomes ready with the fence gone,
//! an exported fence fd does not claim to be ready, and a wait interrupted by signals still
//! times out when asked to.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use belfry_abi::uapi;
use belfry_umd::{CommandBuffer, Device, Error, FenceFlags, FenceKind};

use crate::support::fixture::open_context;
use crate::support::work::kernel_queue;
use crate::support::{expect_errno, WAIT};
use crate::{Test, TestResult};

/// How long a wait on lost work may take: the fault's interrupt, not the timeout, ends it.
const LOSS_NOTICED: Duration = Duration::from_secs(2);

/// `poll(2)` of `fd` for input with a timeout of `ms`: the returned events (0: not ready).
fn poll_events(fd: BorrowedFd<'_>, ms: i32) -> std::io::Result<i16> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(if rc == 0 { 0 } else { p.revents })
}

/// Waits [`dropped_pollable_waits_are_withdrawn`] registers and drops one after another: one
/// more than the per-file limit, so if every dropped wait still counted against the limit the
/// last registration would be refused. A wait whose drop leaked only now and then is caught
/// after the loop instead: the pending count must be back at its base, and exactly the limit's
/// worth of waits must then be served before the refusal. Twice the limit (512 waits, each a
/// registration and a withdrawal with MonitoredValue recomputed) proves nothing more, at twice
/// the cost on the debug kernel.
const DROPPED_WAITS: u32 = uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS + 1;

/// Dropping a `FenceEvent` withdraws its wait: the pending count goes back, MonitoredValue is
/// recomputed from the waits left (MV-03's rule for a withdrawn wait) and the per-file limit of
/// pending waits is never reached by waits that were dropped; past the limit the library
/// reports `Error::TooManyFenceEvents`.
fn dropped_pollable_waits_are_withdrawn(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let base = dev.fence_debug()?.event_waits;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let kept = f.event(9)?;
    let dropped = f.event(5)?;
    let mv = f.info()?.monitored_value;
    ensure!(mv == 4, "MonitoredValue {mv:#x} with waits for 5 and 9, expected 4");
    drop(dropped);
    let info = f.info()?;
    ensure!(
        info.pending_waits == 1 && info.monitored_value == 8,
        "after the drop of the wait for 5: {} pending wait(s), MonitoredValue {:#x}; expected 1, 8",
        info.pending_waits,
        info.monitored_value
    );
    drop(kept);
    let mv = f.info()?.monitored_value;
    ensure!(mv == u64::MAX, "MonitoredValue {mv:#x} with every wait dropped");
    for v in 0..DROPPED_WAITS {
        drop(f.event(100 + u64::from(v))?);
    }
    let left = dev.fence_debug()?.event_waits;
    ensure!(left == base, "{left} eventfd waits pending after the drops, expected {base}");
    let mut held: Vec<_> =
        (0..uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS).map(|v| f.event(100 + u64::from(v))).collect::<Result<_, _>>()?;
    match f.event(1000) {
        Err(Error::TooManyFenceEvents { limit }) if limit == uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS => {}
        other => return Err(format!("a wait past the per-file limit: {other:?}, expected TooManyFenceEvents").into()),
    }
    // One held wait dropped at the limit gives back its place: the next is served.
    drop(held.pop());
    f.event(1000)?;
    // The fence goes first and takes the other held waits with it (their drops then withdraw
    // nothing): withdrawing them one by one, each with MonitoredValue recomputed from the many
    // waits left, is the loop's withdrawal again and cost the debug kernel more than the rest
    // of the test.
    drop(f);
    drop(held);
    Ok(())
}

/// A wait on the progress of a context lost to a GPU fault returns at once with the loss
/// (`Error::ContextLost`; the module's `ECANCELED`), whether it was sleeping when the fault came
/// or started afterwards; a wait for work completed before the fault still succeeds.
fn waits_on_a_faulted_context_s_work_return_the_loss_at_once(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let mut good = CommandBuffer::new();
    good.write32(buf.va_at(0)?, 1)?;
    let done = q.submit(&good)?;
    q.wait(done, WAIT)?;
    let mut bad = CommandBuffer::new();
    bad.write32(buf.gpu_va() + (256 << 20), 0xBAD)?;
    let lost = q.submit(&bad)?;
    for when in ["while the fault arrives", "after the fault"] {
        let start = Instant::now();
        let r = q.wait(lost, Duration::from_secs(5));
        let took = start.elapsed();
        match r {
            Err(Error::ContextLost { value }) if value == lost => {}
            other => return Err(format!("wait {when}: {other:?} after {took:?}, expected ContextLost").into()),
        }
        ensure!(took < LOSS_NOTICED, "the wait {when} took {took:?}");
    }
    q.wait(done, Duration::ZERO)?;
    Ok(())
}

/// A CPU signal never moves a fence backwards (Vulkan VUID-VkSemaphoreSignalInfo-value-03258):
/// a lower value is refused with `EINVAL` and CurrentValue is unchanged, for a native and a
/// (64-bit) monitored fence; signaling the current value again is allowed.
fn cpu_signals_never_move_a_fence_backwards(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    for kind in [FenceKind::Default, FenceKind::Monitored] {
        let f = ctx.create_fence(kind, 0, 0)?;
        f.signal(5)?;
        expect_errno(f.signal(3), libc::EINVAL, &format!("a {kind:?} fence signaled 3 after 5"))?;
        ensure!(f.value() == Some(5), "{kind:?} fence reads {:?} after the refused signal", f.value());
        f.signal(5)?;
        f.signal(6)?;
        ensure!(f.value() == Some(6), "{kind:?} fence reads {:?} after signal 6", f.value());
    }
    Ok(())
}

/// A GPU signal the library knows would move a fence backwards is refused at submission with
/// `Error::FenceValueBackwards`, nothing submitted: below CurrentValue (`Queue::signal_fence`
/// and `CommandBuffer::signal_fence`), below a signal still queued behind a GPU wait, below an
/// earlier signal in the same buffer, and a buffer built before a higher signal was submitted;
/// the same value again and higher values pass. The fences keep their values.
fn gpu_signals_the_library_knows_to_be_backwards_are_refused(path: &Path) -> TestResult {
    let crate::support::fixture::Fixture { dev: _dev, ctx, buf: _buf, mut q } =
        crate::support::fixture::Fixture::connected(path)?;
    let backwards = |r: belfry_umd::Result<()>, value: u64, floor: u64, what: &str| -> TestResult {
        match r {
            Err(Error::FenceValueBackwards { value: v, floor: fl, .. }) if v == value && fl == floor => Ok(()),
            other => Err(format!("{what}: {other:?}, expected FenceValueBackwards {value} below {floor}").into()),
        }
    };
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    q.signal_fence(&f, 5)?;
    f.wait(5, WAIT)?;
    backwards(q.signal_fence(&f, 3), 3, 5, "Queue::signal_fence 3 after 5")?;
    backwards(CommandBuffer::new().signal_fence(&f, 4).map(drop), 4, 5, "CommandBuffer::signal_fence 4 after 5")?;
    q.signal_fence(&f, 5)?;
    // Queued, not executed: held behind a GPU wait on `gate`.
    let (gate, g) = (ctx.create_fence(FenceKind::Default, 0, 0)?, ctx.create_fence(FenceKind::Default, 0, 0)?);
    q.wait_fence(&gate, 1)?;
    q.signal_fence(&g, 10)?;
    let mut late = CommandBuffer::new();
    late.signal_fence(&g, 12)?;
    backwards(late.signal_fence(&g, 11).map(drop), 11, 12, "a signal below an earlier one of the same buffer")?;
    backwards(q.signal_fence(&g, 7), 7, 10, "a signal below one still queued")?;
    q.signal_fence(&g, 14)?;
    backwards(q.submit(&late).map(drop), 12, 14, "a buffer built before a higher signal was submitted")?;
    ensure!(g.value() == Some(0), "G reads {:?} while its signals wait behind the gate", g.value());
    gate.signal(1)?;
    g.wait(14, WAIT)?;
    q.wait(q.last_submitted(), WAIT)?;
    ensure!(f.value() == Some(5) && g.value() == Some(14), "F {:?}, G {:?}: expected 5 and 14", f.value(), g.value());
    Ok(())
}

/// A pollable wait whose fence is destroyed becomes readable (an epoll loop wakes) and the
/// library reports the fence gone; one satisfied before the destroy still reports ready.
fn pollable_wait_on_a_destroyed_fence_reports_it_gone(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let base = dev.fence_debug()?.event_waits;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let orphan = f.event(100)?;
    let fired = f.event(1)?;
    f.signal(1)?;
    drop(f);
    let left = dev.fence_debug()?.event_waits;
    ensure!(left == base, "{left} eventfd waits after the destroy, expected {base}");
    let events = poll_events(orphan.as_fd(), 1000)?;
    ensure!(events & libc::POLLIN != 0, "the eventfd of a wait on a destroyed fence polls {events:#x}");
    match orphan.wait(WAIT) {
        Err(Error::FenceGone { .. }) => {}
        other => return Err(format!("a wait on a destroyed fence: {other:?}, expected FenceGone").into()),
    }
    ensure!(fired.is_ready()?, "a wait satisfied before the destroy is not ready");
    Ok(())
}

/// `poll(2)` of an exported fence fd does not report it ready: it names a whole timeline, not
/// a point that could be signaled (0 events after 100 ms, before and after a signal).
fn exported_fence_fd_is_never_ready_to_poll(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, FenceFlags::SHAREABLE, 0)?;
    let fd = f.export()?;
    let events = poll_events(fd.as_fd(), 100)?;
    ensure!(events == 0, "poll of an exported fence fd with nothing signaled: {events:#x}");
    f.signal(1)?;
    let events = poll_events(fd.as_fd(), 100)?;
    ensure!(events == 0, "poll of an exported fence fd after a signal: {events:#x}");
    ensure!(f.value() == Some(1), "the fence reads {:?} after the signal", f.value());
    Ok(())
}

/// The handler of [`interrupted_waits_still_time_out`]'s signal: does nothing (the signal only
/// interrupts the wait).
extern "C" fn ignore_signal(_: libc::c_int) {}

/// The timeout of [`interrupted_waits_still_time_out`]'s wait: 25 of its signals every 20 ms, and
/// its end checked with a margin as long again; its length proves nothing more (a restart with
/// the full timeout would never end under the signals).
const INTERRUPTED_WAIT: Duration = Duration::from_millis(500);

/// A blocking CPU wait interrupted by a signal every 20 ms (a handler without SA_RESTART: the
/// module returns `EINTR` each time) still ends with `ETIMEDOUT` about when its
/// [`INTERRUPTED_WAIT`] timeout says: the library restarts it with the time left, not the full
/// timeout.
fn interrupted_waits_still_time_out(path: &Path) -> TestResult {
    use std::sync::atomic::{AtomicBool, Ordering};

    let (_dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    // SAFETY: a zeroed sigaction with a handler that touches nothing, no flags (no
    // SA_RESTART), installed for SIGUSR1, which nothing else in the suite uses.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut())
    };
    ensure!(rc == 0, "sigaction: {}", std::io::Error::last_os_error());
    let done = AtomicBool::new(false);
    let timeout = INTERRUPTED_WAIT;
    std::thread::scope(|s| -> TestResult {
        let (tx, rx) = std::sync::mpsc::channel();
        let (f, done) = (&f, &done);
        let waiter = s.spawn(move || {
            // SAFETY: `pthread_self` has no preconditions.
            let _ = tx.send(unsafe { libc::pthread_self() });
            let start = Instant::now();
            let r = f.wait(1, timeout);
            done.store(true, Ordering::Release);
            (r, start.elapsed())
        });
        let thread = rx.recv().map_err(|_| "the waiter did not start")?;
        let storm = Instant::now();
        while !done.load(Ordering::Acquire) && storm.elapsed() < 4 * timeout {
            // SAFETY: `thread` is a live thread of this scope (it has not been joined).
            unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
            std::thread::sleep(Duration::from_millis(20));
        }
        let stopped = done.load(Ordering::Acquire);
        if !stopped {
            // Let the wait end: with no more signals a full-timeout restart finishes.
            f.signal(1)?;
        }
        let (r, took) = waiter.join().map_err(|_| "waiter panicked")?;
        ensure!(stopped, "the wait was still running after {:?} of signals (result {r:?})", 4 * timeout);
        expect_errno(r, libc::ETIMEDOUT, "the interrupted wait")?;
        ensure!(took < 2 * timeout, "the interrupted {timeout:?} wait took {took:?}");
        Ok(())
    })
}

/// The C API's demo program (`guest-driver/umd-c/examples/belfry_c_demo.c`, compiled by the
/// provisioning root's gcc against `libbelfry_umd_c.a`, in `/belfry/bin` beside the suite)
/// runs on this device and passes each of its steps: a user-mode submission, a GPU wait on a
/// fence the CPU signals, a CPU wait with an absolute deadline (and its timeout), a wait on any
/// of two fences, a fence shared with a forked child process, device enumeration and
/// capabilities, a thread sleeping in `belfry_fence_wait` woken by the GPU's signal of a
/// MONITORED fence, a pollable wait, video memory copied by the GPU through a split buffer, and
/// a kernel-mode queue on the last engine with its own ring and slot sizes.
fn c_api_program_passes_in_the_guest(path: &Path) -> TestResult {
    let exe = std::env::current_exe()?;
    let demo = exe.with_file_name("belfry-c-demo");
    ensure!(demo.exists(), "{} is missing (cargo belfry conformance builds it)", demo.display());
    let out = std::process::Command::new(&demo).arg(path).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "belfry-c-demo exited {}:\n{stdout}{stderr}", out.status);
    let steps = [
        "ok submit",
        "ok gpu-wait",
        "ok cpu-wait",
        "ok wait-any",
        "ok shared",
        "ok query",
        "ok monitored",
        "ok pollable",
        "ok vidmem",
        "ok engine",
        "belfry-c-demo: all ok",
    ];
    for step in steps {
        ensure!(stdout.lines().any(|l| l.starts_with(step)), "belfry-c-demo printed no '{step}':\n{stdout}");
    }
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(dropped_pollable_waits_are_withdrawn, Default, []),
        test_entry!(waits_on_a_faulted_context_s_work_return_the_loss_at_once, Default, []),
        test_entry!(cpu_signals_never_move_a_fence_backwards, Default, []),
        test_entry!(gpu_signals_the_library_knows_to_be_backwards_are_refused, Default, []),
        test_entry!(pollable_wait_on_a_destroyed_fence_reports_it_gone, Default, []),
        test_entry!(exported_fence_fd_is_never_ready_to_poll, Default, []),
        test_entry!(interrupted_waits_still_time_out, Default, []),
        test_entry!(c_api_program_passes_in_the_guest, Default, []),
    ]
}

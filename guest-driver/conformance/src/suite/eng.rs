//! ENG-xx: Engine state transitions and timeout recovery (RULES.md § Engine state transitions).

use std::path::Path;
use std::time::Duration;

use belfry_abi::engine::FaultReason;
use belfry_abi::uapi::DoorbellStatus;
use belfry_abi::uapi_debug;
use belfry_umd::{CommandBuffer, Device, Error, FenceKind, Queue, QueueDesc, QueueMode, ResetFlags};

use crate::harness::proc::{self, Signal};
use crate::support::fixture::Fixture;
use crate::support::param::ModuleParam;
use crate::support::work::{expect_status, expect_u32, write32};
use crate::support::{wait_until, WAIT};
use crate::{Test, TestResult};

/// Submits a command buffer that jumps to itself forever (written at the start of `buf`) on
/// `q`; its progress value.
fn submit_loop(q: &mut Queue, buf: &mut belfry_umd::Allocation) -> Result<u64, crate::Error> {
    let mut jump = CommandBuffer::new();
    jump.jump(buf.gpu_va(), 16)?;
    buf.write(0, jump.as_bytes())?;
    Ok(q.submit(&jump)?)
}

/// Waits on `q`'s progress `value` on another thread (up to 30 s); join it for the result.
fn waiter(mut q: Queue, value: u64) -> std::thread::JoinHandle<(belfry_umd::Result<()>, Queue)> {
    std::thread::spawn(move || (q.wait(value, Duration::from_secs(30)), q))
}

/// The waiter's outcome must be the loss of its context, and its doorbell ABORT for good.
fn expect_lost(joined: std::thread::Result<(belfry_umd::Result<()>, Queue)>) -> TestResult {
    let (waited, q) = joined.map_err(|_| "the waiter panicked")?;
    match waited {
        Err(Error::ContextLost { .. }) => {}
        other => return Err(format!("the wait on the hung queue's progress: {other:?}, expected ContextLost").into()),
    }
    expect_status(&q, DoorbellStatus::DisconnectedAbort, "the hung queue's doorbell after the reset")
}

/// `(by timeout, by the device, contexts lost)` of `s`.
fn counts(s: &uapi_debug::RecoveryDebug) -> (u32, u32, u32) {
    (s.hangs_by_timeout, s.hangs_by_device, s.contexts_lost)
}

/// The module's hang timeout for [`a_looping_queue_is_reset_within_the_timeout_and_only_its_context_is_lost`],
/// well under the device's own watchdog (2 s of execution).
const SHORT_TIMEOUT_MS: u32 = 400;

/// proves: ENG-01, ENG-06, DB-16 — with the module's hang timeout at 400 ms, a user-mode queue
/// looping forever (a `JUMP` to itself) is caught by the module's progress timeout (not the
/// device's 2-second watchdog): the engine is reset, the looping context is lost (a CPU waiter
/// on its progress gets `ContextLost` instead of hanging, its doorbell reads
/// DISCONNECTED_ABORT), while a second process's queue on the same engine finishes its work
/// during the loop and after the reset.
fn a_looping_queue_is_reset_within_the_timeout_and_only_its_context_is_lost(path: &Path) -> TestResult {
    let _timeout = ModuleParam::set("hang_timeout_ms", SHORT_TIMEOUT_MS)?;
    let Fixture { dev, ctx: _ctx, mut buf, mut q } = Fixture::connected(path)?;
    let before = dev.recovery_debug()?;
    let (ready, go, again) = (Signal::new()?, Signal::new()?, Signal::new()?);
    let (ready_ref, go_ref, again_ref) = (&ready, &go, &again);
    let child = proc::spawn("second process on the same engine", move || {
        let built = Fixture::connected(path);
        ready_ref.post(1); // Also on failure, so the parent never blocks.
        let Fixture { dev: _dev, ctx: _ctx, buf, mut q } = built?;
        go_ref.take()?;
        for n in 0..4u32 {
            let v = write32(&mut q, buf.va_at(u64::from(n) * 4)?, 0xB0 + n)?;
            q.wait(v, WAIT)?;
        }
        again_ref.take()?;
        let v = write32(&mut q, buf.va_at(16)?, 0xB4)?;
        q.wait(v, WAIT)?;
        (0..5u32).try_for_each(|n| expect_u32(&buf, u64::from(n) * 4, 0xB0 + n, "the second process's work"))
    })?;
    ready.take()?;
    let looping = submit_loop(&mut q, &mut buf)?;
    go.post(1);
    let waiting = waiter(q, looping);
    let reset = wait_until(WAIT, || dev.recovery_debug().is_ok_and(|s| s.contexts_lost > before.contexts_lost));
    again.post(1);
    let second = child.join();
    let lost = expect_lost(waiting.join());
    let after = dev.recovery_debug()?;
    ensure!(reset, "no context lost 10 s after the loop started: {:?} → {:?}", counts(&before), counts(&after));
    second?;
    lost?;
    ensure!(
        after.hangs_by_timeout > before.hangs_by_timeout && after.hangs_by_device == before.hangs_by_device,
        "the module's {SHORT_TIMEOUT_MS} ms timeout did not catch the loop first (by timeout, by the device, lost): {:?} → {:?}",
        counts(&before),
        counts(&after)
    );
    ensure!(after.timeout_ms == SHORT_TIMEOUT_MS, "RECOVERY_DEBUG reports a timeout of {} ms", after.timeout_ms);
    Ok(())
}

/// proves: ENG-02, ENG-06 — with the module's own timeout out of the way (60 s), a looping
/// queue is stopped by the device's watchdog, whose `Hung` engine-state interrupt the module
/// answers with the same recovery: the engine reset, the context lost, the waiter released
/// with `ContextLost`, its doorbell DISCONNECTED_ABORT; a new context on the device then works.
fn a_hang_the_device_reports_is_recovered_by_the_module(path: &Path) -> TestResult {
    let _timeout = ModuleParam::set("hang_timeout_ms", 60_000)?;
    let Fixture { dev, ctx: _ctx, mut buf, mut q } = Fixture::connected(path)?;
    let before = dev.recovery_debug()?;
    let looping = submit_loop(&mut q, &mut buf)?;
    let waiting = waiter(q, looping);
    let lost = expect_lost(waiting.join());
    let after = dev.recovery_debug()?;
    lost?;
    ensure!(
        after.hangs_by_device > before.hangs_by_device
            && after.hangs_by_timeout == before.hangs_by_timeout
            && after.contexts_lost > before.contexts_lost,
        "expected a device-reported hang and a lost context (by timeout, by the device, lost): {:?} → {:?}",
        counts(&before),
        counts(&after)
    );
    fresh_work(&dev)
}

/// proves: ENG-06 — after a hang, the library's reset status says it was one: a context whose
/// looping queue the module's timeout reset reads `LOST | GUILTY` with the fault reason
/// `ENGINE_RESET` (the reason the device wrote), so a recovery handler tells a hang from a fault.
fn a_hung_context_s_reset_status_names_the_engine_reset(path: &Path) -> TestResult {
    let _timeout = ModuleParam::set("hang_timeout_ms", SHORT_TIMEOUT_MS)?;
    let Fixture { dev: _dev, ctx, mut buf, mut q } = Fixture::connected(path)?;
    let looping = submit_loop(&mut q, &mut buf)?;
    // The queue stays alive: the module reads the reason from the device's state of the
    // context's queues.
    let (waited, _q) = waiter(q, looping).join().map_err(|_| "the waiter panicked")?;
    ensure!(matches!(waited, Err(Error::ContextLost { .. })), "the wait on the hung queue's progress: {waited:?}");
    let status = ctx.reset_status()?;
    ensure!(
        status.flags == ResetFlags::LOST | ResetFlags::GUILTY && status.fault_reason == Some(FaultReason::EngineReset),
        "the hung context's reset status: {status:?}, expected LOST | GUILTY for ENGINE_RESET"
    );
    Ok(())
}

/// A new context of `dev` runs work.
pub(super) fn fresh_work(dev: &Device) -> TestResult {
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = crate::support::work::user_queue(&ctx)?;
    let v = write32(&mut q, buf.gpu_va(), 0x600D)?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0x600D, "work of a new context after the recovery")
}

/// The power steps recorded after `before` (the latest [`uapi_debug::POWER_STEPS`] at most), as
/// `(code, engine)`.
pub(super) fn steps_since(before: &uapi_debug::PowerDebug, after: &uapi_debug::PowerDebug) -> Vec<(u8, u8)> {
    let new = (after.step_count.wrapping_sub(before.step_count) as usize).min(uapi_debug::POWER_STEPS);
    let kept = (after.step_count as usize).min(uapi_debug::POWER_STEPS);
    after.steps[kept - new.min(kept)..kept].iter().map(|s| ((s >> 8) as u8, (s & 0xff) as u8)).collect()
}

/// Whether `steps` holds `want`, in that order, on `engine` (other steps may come between).
fn in_order(steps: &[(u8, u8)], engine: u8, want: &[u8]) -> bool {
    let mut want = want.iter().peekable();
    for &(code, e) in steps {
        if e == engine && want.peek() == Some(&&code) {
            want.next();
        }
    }
    want.peek().is_none()
}

/// proves: ENG-04, ENG-05 — an idle engine the device asks to put in F1 gets its user-mode
/// doorbells disconnected (DISCONNECTED_RETRY) and only then F1, in that order in the module's
/// power steps; the next submission reconnects, which sets the engine back to F0 before the
/// connect, and its work runs.
fn an_idle_engine_goes_to_f1_and_a_submission_brings_it_back(path: &Path) -> TestResult {
    let Fixture { dev, ctx: _ctx, buf, mut q } = Fixture::connected(path)?;
    let v = write32(&mut q, buf.gpu_va(), 0xF0)?;
    q.wait(v, WAIT)?;
    let before = dev.power_debug()?;
    let f1 = wait_until(WAIT, || {
        dev.power_debug().is_ok_and(|p| p.engine_f1 > before.engine_f1)
            && matches!(q.doorbell_status(), Ok(DoorbellStatus::DisconnectedRetry))
    });
    ensure!(f1, "no F1 with the doorbell DISCONNECTED_RETRY 10 s into an idle period: {:?}", q.doorbell_status());
    let idle = dev.power_debug()?;
    let down = steps_since(&before, &idle);
    let f1_order = [uapi_debug::POWER_STEP_F1_DISCONNECT, uapi_debug::POWER_STEP_ENGINE_F1];
    ensure!(in_order(&down, 0, &f1_order), "steps {down:?}: expected the disconnect, then F1, on engine 0");
    let reconnects = q.stats().reconnects;
    let v = write32(&mut q, buf.gpu_va(), 0xF1)?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0xF1, "work submitted to the engine in F1")?;
    ensure!(q.stats().reconnects == reconnects + 1, "the submission did not reconnect");
    let up = steps_since(&idle, &dev.power_debug()?);
    let f0_order = [uapi_debug::POWER_STEP_ENGINE_F0, uapi_debug::POWER_STEP_CONNECT];
    ensure!(in_order(&up, 0, &f0_order), "steps {up:?}: expected F0, then the connect, on engine 0");
    Ok(())
}

/// How long the module's F1 entry sleeps between taking the device's request and its look at
/// the engine (the test-only `test_f1_entry_delay_ms`, on the `mailbox-stall` device) in
/// [`an_f1_request_older_than_a_kernel_mode_kick_leaves_the_engine_in_f0`]: the kick comes
/// [`KICK_INTO_DELAY`] into it, which leaves twice as long before the look (a kick delayed past
/// the look would find the engine in F1 and wake it, and the race would not be tried).
const F1_ENTRY_DELAY: Duration = Duration::from_millis(1_500);

/// How long an engine of the suite's devices stays idle before the device asks for its F1
/// (`--idle-f1-ms`, the device's default).
const IDLE_F1: Duration = Duration::from_millis(1_000);

/// When the kick comes, after the device's F1 request: inside [`F1_ENTRY_DELAY`], half a second
/// after the request (the margin the test always had for a late request) and a second before
/// the module's look.
const KICK_INTO_DELAY: Duration = Duration::from_millis(500);

/// proves: ENG-04, ENG-05 — kernel-mode work kicked after the device asked for an idle engine's
/// F1, but before the module acted on that request, is not left on an engine in F1: the work
/// waits on the GPU for a fence the CPU signals only once the module has refused the request as
/// stale (or after [`WAIT`]), and it runs. The module counts its `KICK_QUEUE`s and the
/// device's request carries how many it had run: a request older than a kick is stale. The
/// window is widened on the `mailbox-stall` device, where the module sleeps [`F1_ENTRY_DELAY`]
/// after taking the request (`test_f1_entry_delay_ms`): the kick comes [`KICK_INTO_DELAY`] into
/// it.
fn an_f1_request_older_than_a_kernel_mode_kick_leaves_the_engine_in_f0(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let gate = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode))?;
    let _delay = ModuleParam::set("test_f1_entry_delay_ms", F1_ENTRY_DELAY.as_millis() as u32)?;
    // The engine runs something and goes idle: the device asks for its F1 once it has been
    // idle for IDLE_F1, and the module sleeps F1_ENTRY_DELAY before it looks.
    let v = write32(&mut q, buf.gpu_va(), 1)?;
    q.wait(v, WAIT)?;
    let before = dev.power_debug()?;
    std::thread::sleep(IDLE_F1 + KICK_INTO_DELAY);
    // Kernel-mode work the engine takes and parks in a GPU wait, kicked inside the window.
    q.wait_fence(&gate, 1)?;
    let done = write32(&mut q, buf.gpu_va() + 4, 2)?;
    // The module has refused the request as stale before the CPU releases the wait. Had it
    // not within WAIT (it set the engine to F1 instead), the wait is released then, and the
    // work must still run. Another engine's F1 does not end this wait: released before the
    // module's look, the work could finish before a wrong F1.
    wait_until(WAIT, || dev.power_debug().is_ok_and(|p| p.f1_aborted > before.f1_aborted));
    gate.signal(1)?;
    let ran = q.wait(done, WAIT);
    let after = dev.power_debug()?;
    let steps = steps_since(&before, &after);
    ensure!(
        ran.is_ok(),
        "the work kicked after the F1 request did not run {WAIT:?} after its fence was signalled ({ran:?}; \
         power steps since the engine went idle {steps:?}: an engine set to F1 with it parked on it)"
    );
    expect_u32(&buf, 4, 2, "the work kicked after the F1 request")?;
    ensure!(
        after.f1_aborted > before.f1_aborted,
        "no F1 request was refused as stale (power steps {steps:?}): the request did not come in the \
         window, and the race was not tried"
    );
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            a_looping_queue_is_reset_within_the_timeout_and_only_its_context_is_lost,
            Default,
            ["ENG-01", "ENG-06", "DB-16"]
        ),
        test_entry!(a_hang_the_device_reports_is_recovered_by_the_module, Default, ["ENG-02", "ENG-06"]),
        test_entry!(a_hung_context_s_reset_status_names_the_engine_reset, Default, ["ENG-06"]),
        test_entry!(an_idle_engine_goes_to_f1_and_a_submission_brings_it_back, Default, ["ENG-04", "ENG-05"]),
        test_entry!(
            an_f1_request_older_than_a_kernel_mode_kick_leaves_the_engine_in_f0,
            MailboxStall,
            ["ENG-04", "ENG-05"]
        ),
    ]
}

//! A device that stops answering its mailbox (no rule family; on
//! the test-only `mailbox-stall` device): what the module frees, what it keeps, and what it
//! reports for the commands after the one that got no answer; and a command-ring fault, which
//! fails the command at once; and the module unloaded while a device-lost reprobe is queued.

use std::path::Path;
use std::time::Instant;

use belfry_abi::uapi_debug::TeardownDebug;
use belfry_umd::{CommandBuffer, Device, FenceKind};

use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::Fixture;
use crate::support::reload;
use crate::support::work::kernel_queue;
use crate::support::{wait_until, REPROBE, WAIT};
use crate::{Test, TestResult};

/// `TEARDOWN_DEBUG` through a file of `path`.
pub(super) fn teardown(raw: &RawDev) -> Result<TeardownDebug, crate::Error> {
    raw.teardown_debug().map_err(|e| format!("TEARDOWN_DEBUG: {}", errno_name(e)).into())
}

/// The device-lost path after `what`: the old binding's file `old` answers `ENODEV` within
/// [`WAIT`], the device comes back at `path` within [`REPROBE`], and its device-lost count passed
/// `lost_before`; the new binding's device.
pub(super) fn recovered(path: &Path, old: &Device, lost_before: u32, what: &str) -> Result<Device, crate::Error> {
    let new = back(path, old, what)?;
    ensure!(new.recovery_debug()?.device_lost > lost_before, "the device-lost path did not run");
    Ok(new)
}

/// The reprobe after `what`: the old binding's file `old` answers `ENODEV` within [`WAIT`] and
/// the device comes back at `path` within [`REPROBE`]; the new binding's device.
pub(super) fn back(path: &Path, old: &Device, what: &str) -> Result<Device, crate::Error> {
    let unbound = wait_until(WAIT, || old.create_context().is_err_and(|e| e.errno() == Some(libc::ENODEV)));
    ensure!(unbound, "the old binding's file still answers 10 s after {what}");
    // The module refuses to open a dead binding (`ENODEV`) until its reprobe replaces it; a
    // file is the new binding's once its context is created (the binding may die again
    // between the open and the context).
    let mut reopened = None;
    let back = wait_until(REPROBE, || {
        reopened = Device::open(path).ok().filter(|d| d.create_context().is_ok());
        reopened.is_some()
    });
    reopened.filter(|_| back).ok_or_else(|| format!("{} did not come back", path.display()).into())
}

/// Teardown under a silent device. A process's fence, kernel-mode queue and
/// context are destroyed after the device stopped answering (`mailbox-stall`; the mailbox
/// timeout shortened for the test): the fence's UNREGISTER_FENCE gets no answer, and the queue's DESTROY_QUEUE and the context's
/// DESTROY_CONTEXT are refused by the wedged mailbox, so none is confirmed, and the module
/// keeps all three (the fence's CurrentValue and MonitoredValue page; ring, progress and
/// MonitoredValue pages; page tables and ids) in quarantine instead of freeing what the
/// device may still write or walk. After the timeout every command fails at once (`EIO`, wedged; or
/// `ENODEV` once the device-lost path unbound it): none is sent to the silent device again
/// (which would time out) or reported done. The device-lost path resets the device and binds
/// it again; once the old binding's last file is closed the quarantine is freed, and the new
/// binding runs work.
fn unconfirmed_destroys_are_quarantined_until_the_device_is_reset(path: &Path) -> TestResult {
    let _timeout = crate::support::param::silent_device_mailbox_timeout()?;
    let raw = RawDev::open(path)?;
    let before = teardown(&raw)?;
    let Fixture { dev, ctx, buf, mut q } = Fixture::connected(path)?;
    let victim = Device::open(path)?;
    let vctx = victim.create_context()?;
    let vq = kernel_queue(&vctx)?;
    let vfence = vctx.create_fence(FenceKind::Default, 0, 0)?;
    let lost_before = dev.recovery_debug()?.device_lost;

    let mut stall = CommandBuffer::new();
    stall.notify(belfry_abi::regs::MAILBOX_STALL_TOKEN)?;
    let v = q.submit(&stall)?;
    ensure!(wait_until(WAIT, || q.completed() >= v), "the NOTIFY did not run");

    // DESTROY_FENCE, DESTROY_QUEUE, then DESTROY_CONTEXT (the library's drops, which keep going
    // on errors).
    let t = Instant::now();
    drop(vfence);
    let fence_ms = t.elapsed().as_millis();
    drop(vq);
    drop(vctx);
    match dev.create_context() {
        Err(e) if matches!(e.errno(), Some(libc::EIO | libc::ENODEV)) => {}
        other => {
            return Err(format!(
                "CREATE_CONTEXT after the mailbox timed out: {other:?}, expected EIO (wedged) or ENODEV at once"
            )
            .into())
        }
    }
    let mid = teardown(&raw)?;
    ensure!(
        mid.fence_pages_quarantined > before.fence_pages_quarantined,
        "the unconfirmed UNREGISTER_FENCE ({fence_ms} ms) let its page be freed: {mid:?}, before {before:?}"
    );
    ensure!(
        mid.queues_quarantined > before.queues_quarantined,
        "the unconfirmed DESTROY_QUEUE freed the queue: {mid:?}, before {before:?}"
    );
    ensure!(
        mid.contexts_quarantined > before.contexts_quarantined,
        "the unconfirmed DESTROY_CONTEXT freed the context's page tables: {mid:?}, before {before:?}"
    );
    ensure!(mid.quarantine_held >= before.quarantine_held + 3, "quarantine holds {mid:?}, before {before:?}");
    ensure!(mid.mailbox_timeouts > before.mailbox_timeouts, "no mailbox timeout counted: {mid:?}");
    ensure!(
        mid.mailbox_refused_wedged > before.mailbox_refused_wedged,
        "no command refused by the wedged mailbox: {mid:?}"
    );
    ensure!(mid.mailbox_mismatches == before.mailbox_mismatches, "a completion was mismatched: {mid:?}");

    let new = recovered(path, &dev, lost_before, "the mailbox timed out")?;
    // The old binding's objects go with its last file.
    drop((q, buf, ctx, dev, victim, raw));
    let raw = RawDev::open(path)?;
    let after = teardown(&raw)?;
    ensure!(
        after.quarantine_released >= mid.quarantine_released + 3 && after.quarantine_held == before.quarantine_held,
        "after the reset and the old files' close the quarantine was not freed: {after:?}, before {before:?}"
    );
    super::eng::fresh_work(&new)
}

/// A completion of another sequence number is refused: the device answers a
/// CREATE_CONTEXT with `Ok` and the previous command's sequence number without running it (the
/// late completion of an abandoned command; `MAILBOX_STALE_SEQ_TOKEN`). The module does not
/// take it for the command it waits on: the call fails with `EIO` (never a context the device
/// does not have), the mailbox is wedged (the next command `EIO` or `ENODEV` at once), the
/// mismatch is counted, and the device-lost path brings the device back.
fn a_completion_of_another_sequence_is_refused_and_the_device_recovered(path: &Path) -> TestResult {
    let raw = RawDev::open(path)?;
    let before = teardown(&raw)?;
    let Fixture { dev, ctx, buf, mut q } = Fixture::connected(path)?;
    let lost_before = dev.recovery_debug()?.device_lost;
    let mut stale = CommandBuffer::new();
    stale.notify(belfry_abi::regs::MAILBOX_STALE_SEQ_TOKEN)?;
    let v = q.submit(&stale)?;
    ensure!(wait_until(WAIT, || q.completed() >= v), "the NOTIFY did not run");
    match dev.create_context() {
        Err(e) if e.errno() == Some(libc::EIO) => {}
        other => {
            return Err(format!(
                "CREATE_CONTEXT answered with the previous command's sequence number: {other:?}, expected EIO"
            )
            .into())
        }
    }
    match dev.create_context() {
        Err(e) if matches!(e.errno(), Some(libc::EIO | libc::ENODEV)) => {}
        other => {
            return Err(format!("the command after the mismatch: {other:?}, expected EIO or ENODEV at once").into())
        }
    }
    let mid = teardown(&raw)?;
    ensure!(mid.mailbox_mismatches > before.mailbox_mismatches, "no mismatch counted: {mid:?}, before {before:?}");
    let new = recovered(path, &dev, lost_before, "the mismatch")?;
    drop((q, buf, ctx, dev, raw));
    super::eng::fresh_work(&new)
}

/// A command-ring fault fails the command at once: the device takes the module's
/// next command-ring entry for a ring fault (`CMD_RING_FAULT_TOKEN`: `CMD_RING_ERROR` counted,
/// the mailbox interrupt raised, the entry neither run nor completed). The module reads
/// `CMD_RING_ERROR` when that interrupt brings nothing to consume and fails the command with
/// `EIO` well before the 5 s mailbox timeout (none is counted), reports the fault in
/// `MAILBOX_TIMING`, and takes the wedged mailbox's device-lost path: the device comes back and
/// runs work. On a device without the command ring (a run with `--no-cmd-ring`) the token
/// changes nothing and the command succeeds.
fn a_command_ring_fault_fails_the_command_at_once_and_the_device_recovers(path: &Path) -> TestResult {
    let raw = RawDev::open(path)?;
    let before = teardown(&raw)?;
    let Fixture { dev, ctx, buf, mut q } = Fixture::connected(path)?;
    let lost_before = dev.recovery_debug()?.device_lost;
    let ring = dev.mailbox_timing()?.path == belfry_abi::uapi_debug::MAILBOX_PATH_RING;
    let mut fault = CommandBuffer::new();
    fault.notify(belfry_abi::regs::CMD_RING_FAULT_TOKEN)?;
    let v = q.submit(&fault)?;
    ensure!(wait_until(WAIT, || q.completed() >= v), "the NOTIFY did not run");
    let t = Instant::now();
    let created = dev.create_context();
    let ms = t.elapsed().as_millis();
    if !ring {
        ensure!(created.is_ok(), "CREATE_CONTEXT through the BAR0 mailbox after the ring-fault token: {created:?}");
        return Ok(());
    }
    match created {
        Err(e) if e.errno() == Some(libc::EIO) => {}
        other => {
            return Err(
                format!("CREATE_CONTEXT after a command-ring fault: {other:?} after {ms} ms, expected EIO").into()
            )
        }
    }
    ensure!(ms < 1000, "the command-ring fault failed the command only after {ms} ms (the mailbox timeout is 5000)");
    let mid = teardown(&raw)?;
    ensure!(mid.mailbox_timeouts == before.mailbox_timeouts, "the ring fault was a mailbox timeout: {mid:?}");
    match dev.mailbox_timing() {
        Ok(m) => ensure!(
            m.ring_errors >= 1 && m.last_ring_error == belfry_abi::cmdring::RingError::BadBase as u32,
            "MAILBOX_TIMING does not report the ring fault: {m:?}"
        ),
        // The device-lost path may have unbound the old binding already.
        Err(e) if e.errno() == Some(libc::ENODEV) => {}
        Err(e) => return Err(format!("MAILBOX_TIMING: {e}").into()),
    }
    let new = recovered(path, &dev, lost_before, "the command-ring fault")?;
    drop((q, buf, ctx, dev, raw));
    super::eng::fresh_work(&new)
}

/// Rounds of [`unloading_the_module_inside_a_device_lost_reprobe_runs_no_module_code_after_it`]
/// in one suite: each reloads the module, which binds every device again (~1 min on the debug
/// kernel with the suite's devices); more rounds are `--repeat N` of the test.
const UNLOAD_ROUNDS: u32 = 1;
/// The test-only reprobe delay the rounds unload the module in (ms).
const REPROBE_DELAY_MS: u32 = 2000;
/// What the watchdog logs as it queues the device-lost reprobe.
const DEVICE_LOST_LINE: &str = "device lost (the mailbox stopped answering)";

/// One round: the device's mailbox wedged (a completion of another sequence), the watchdog's
/// device-lost line seen (the reprobe is queued and sleeps [`REPROBE_DELAY_MS`]), every file of
/// the test closed, then `rmmod` inside that sleep.
fn wedge_and_unload(path: &Path) -> TestResult {
    std::fs::write("/sys/module/belfry/parameters/test_reprobe_delay_ms", REPROBE_DELAY_MS.to_string())?;
    let seen = crate::support::kernel_log::read()?.matches(DEVICE_LOST_LINE).count();
    {
        let Fixture { dev, ctx: _ctx, buf: _buf, mut q } = Fixture::connected(path)?;
        let mut stale = CommandBuffer::new();
        stale.notify(belfry_abi::regs::MAILBOX_STALE_SEQ_TOKEN)?;
        let v = q.submit(&stale)?;
        ensure!(wait_until(WAIT, || q.completed() >= v), "the NOTIFY did not run");
        ensure!(dev.create_context().is_err(), "CREATE_CONTEXT on the wedged mailbox succeeded");
        let queued = wait_until(WAIT, || {
            crate::support::kernel_log::read().is_ok_and(|log| log.matches(DEVICE_LOST_LINE).count() > seen)
        });
        ensure!(queued, "no {DEVICE_LOST_LINE:?} line 10 s after the mailbox wedged");
    }
    reload::run("rmmod", &["belfry"])
}

/// No work outlives the module: [`UNLOAD_ROUNDS`] times, the device's mailbox is wedged, and once
/// the watchdog has queued the device-lost reprobe (which on this test-only device first sleeps
/// `test_reprobe_delay_ms`, 2 s) the module is unloaded inside that sleep, then loaded again with
/// the parameters it had and every device bound in its old order (`support::reload`: found by
/// PCI address). `rmmod` waits for the reprobe (the module's own workqueue, drained at exit),
/// which finds no driver: no oops, no warning, no kernel report, and the device is back at its
/// device file. The module's promise (THREAT_MODEL); no rule id.
fn unloading_the_module_inside_a_device_lost_reprobe_runs_no_module_code_after_it(path: &Path) -> TestResult {
    let module = reload::module_path()?;
    let taint = crate::support::oops_or_warning_taint()?;
    let warnings = crate::support::kernel_log::warnings()?.len();
    for round in 0..UNLOAD_ROUNDS {
        let devices = reload::Devices::now()?;
        let args = reload::load_args()?;
        let unloaded = wedge_and_unload(path);
        if reload::module_loaded() {
            unloaded.map_err(|e| format!("round {round}: {e}"))?;
            return Err(format!("round {round}: the module is still loaded after rmmod").into());
        }
        let loaded = devices.reload(&module, &args);
        unloaded.map_err(|e| format!("round {round}: {e}"))?;
        loaded.map_err(|e| format!("round {round}: {e}"))?;
        let now = crate::support::oops_or_warning_taint()?;
        ensure!(now == taint, "round {round}: the kernel is tainted by an oops or a warning ({taint:#x} -> {now:#x})");
        let reports = crate::support::kernel_log::warnings()?;
        ensure!(reports.len() == warnings, "round {round}: the kernel reported {:?}", &reports[warnings..]);
    }
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(unconfirmed_destroys_are_quarantined_until_the_device_is_reset, MailboxStall, []),
        test_entry!(a_completion_of_another_sequence_is_refused_and_the_device_recovered, MailboxStall, []),
        test_entry!(a_command_ring_fault_fails_the_command_at_once_and_the_device_recovers, MailboxStall, []),
        test_entry!(unloading_the_module_inside_a_device_lost_reprobe_runs_no_module_code_after_it, MailboxStall, []),
    ]
}

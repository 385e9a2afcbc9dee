//! A PCI function reset of a bound device (no rule family): root resets the function through
//! sysfs while processes hold contexts, queues and CPU waits of every kind on it; the module
//! logs it as a reset, not as a device that stopped answering, and frees what the device forgot.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Instant;

use belfry_abi::uapi_debug::RecoveryDebug;
use belfry_umd::{Device, FenceKind};

use crate::harness::raw::{errno_name, RawDev};
use crate::support::binding::pci_address;
use crate::support::fences::expect_pending;
use crate::support::fixture::Fixture;
use crate::support::gone::{expect_pollable_gone, expect_status_gone, read_ends_across, BlockingEventfd};
use crate::support::param::ModuleParam;
use crate::support::work::kernel_queue;
use crate::support::{expect_errno, wait_until, REPROBE, WAIT};
use crate::{Test, TestResult};

/// What the module logs when the PCI core is about to reset a device it holds.
const RESET_LINE: &str = "function reset: every context is lost";
/// What the module logs as it binds a device again after a function reset.
const BOUND_AGAIN_LINE: &str = "binding the device again after a function reset";
/// What the module logs for a device whose mailbox stopped answering (not a reset it was told
/// about).
const STOPPED_LINE: &str = "the mailbox stopped answering";

/// The sysfs file that resets the PCI function of the device at `path`.
fn reset_file(path: &Path) -> Result<String, crate::Error> {
    let address = pci_address(path)?;
    let reset = format!("/sys/bus/pci/devices/{address}/reset");
    ensure!(Path::new(&reset).exists(), "{reset} is absent: the device offers no function reset");
    Ok(reset)
}

/// Resets the PCI function through `reset` (root).
fn reset_function(reset: &str) -> crate::TestResult {
    std::fs::write(reset, "1").map_err(|e| format!("write 1 to {reset}: {e}"))?;
    Ok(())
}

/// The reprobe after `what`, one or more function resets the module was told about: the device
/// comes back at `path` (`stall::back`), `RECOVERY_DEBUG` counts them as function resets, passing
/// `before.function_resets`, and not as device losses (`device_lost` still `before`'s: the
/// device never stopped answering); the new binding's device.
fn recovered(path: &Path, old: &Device, before: &RecoveryDebug, what: &str) -> Result<Device, crate::Error> {
    let new = super::stall::back(path, old, what)?;
    let after = new.recovery_debug()?;
    ensure!(
        after.function_resets > before.function_resets,
        "RECOVERY_DEBUG.function_resets stayed at {} after {what}",
        after.function_resets
    );
    ensure!(
        after.device_lost == before.device_lost,
        "{what} counted as a device loss: RECOVERY_DEBUG.device_lost {} -> {}",
        before.device_lost,
        after.device_lost
    );
    Ok(new)
}

/// How many lines of the kernel log hold `line`.
fn logged(line: &str) -> Result<usize, crate::Error> {
    Ok(crate::support::kernel_log::read()?.matches(line).count())
}

/// A Function Level Reset of a bound device through sysfs (`echo 1 >
/// /sys/bus/pci/devices/<address>/reset`, root) is a device loss the module is told about
/// (`reset_prepare`/`reset_done`): a CPU wait pending on a fence across the reset ends with
/// `ENODEV` (the device forgot the fence: nothing will signal it), the old binding's file
/// answers `ENODEV`, the module logs the reset and counts it as a function reset (not a device loss), the device comes back
/// at the same path and a new process's work runs on it.
fn a_function_reset_ends_every_wait_and_the_device_comes_back(path: &Path) -> TestResult {
    let reset = reset_file(path)?;
    let Fixture { dev, ctx, buf, q } = Fixture::connected(path)?;
    super::eng::fresh_work(&dev)?;
    let before = dev.recovery_debug()?;
    let logged_before = logged(RESET_LINE)?;
    let fence = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let waited = std::thread::scope(|s| -> Result<belfry_umd::Result<()>, crate::Error> {
        let f = &fence;
        let waiter = s.spawn(move || f.wait(1, REPROBE));
        expect_pending(&fence, 1)?;
        reset_function(&reset)?;
        let ended = wait_until(WAIT, || waiter.is_finished());
        ensure!(ended, "a CPU wait pending across the reset still waits {WAIT:?} after it");
        waiter.join().map_err(|_| "the waiting thread panicked".into())
    })?;
    match waited {
        Err(e) if e.errno() == Some(libc::ENODEV) => {}
        other => {
            return Err(format!("the CPU wait pending across the reset ended with {other:?}, expected ENODEV").into())
        }
    }
    let new = recovered(path, &dev, &before, "the reset")?;
    ensure!(logged(RESET_LINE)? > logged_before, "no {RESET_LINE:?} line after the reset");
    drop((fence, q, buf, ctx, dev));
    super::eng::fresh_work(&new)
}

/// A pollable wait (`FenceEvent`) on a DEFAULT fence and an eventfd registered for a wait of a
/// MONITORED fence (`Fence::notify`, read by a blocked thread), pending across a function reset
/// through sysfs: the pollable wait becomes ready within [`WAIT`] and reports `ENODEV`, the read
/// returns within [`WAIT`] with the eventfd signaled once and the wait's status `ENODEV` — as the
/// blocking wait ends — and the device comes back and runs a new process's work.
fn pollable_and_eventfd_waits_end_with_enodev_across_a_function_reset(path: &Path) -> TestResult {
    let reset = reset_file(path)?;
    let Fixture { dev, ctx, buf, q } = Fixture::connected(path)?;
    let before = dev.recovery_debug()?;
    let native = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let monitored = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let polled = native.event(1)?;
    let ev = BlockingEventfd::new()?;
    monitored.notify(1, ev.as_fd())?;
    ensure!(!polled.is_ready()?, "a pollable wait of an unreached value was ready");
    let ended = read_ends_across(&ev, || reset_function(&reset), "the reset")
        .and_then(|()| expect_status_gone(&monitored, 1, "the status of the eventfd wait after the reset"))
        .and_then(|()| expect_pollable_gone(&polled, "the pollable wait on a DEFAULT fence across the reset"));
    // Back before anything is reported, so the next test finds the device bound.
    let new = recovered(path, &dev, &before, "the reset");
    drop((polled, native, monitored, q, buf, ctx, dev));
    ended?;
    super::eng::fresh_work(&new?)
}

/// A function reset the module was told about is one, not a device that stopped answering:
/// its reprobe logs that it binds the device again after a function reset, never "the mailbox
/// stopped answering", and `RECOVERY_DEBUG` counts it in `function_resets`, not in
/// `device_lost`; and what a process destroys on the old binding after the reset — a
/// user-mode and a kernel-mode queue, their context, a DEFAULT and a MONITORED fence — is
/// released, not quarantined: the reset made the device forget every object of the binding,
/// with bus mastering off across it, so it can reach none of their memory. `TEARDOWN_DEBUG`
/// counts no queue, context or fence page quarantined and holds nothing more than before.
fn a_function_reset_is_told_as_one_and_what_the_device_forgot_is_released(path: &Path) -> TestResult {
    let reset = reset_file(path)?;
    let before = super::stall::teardown(&RawDev::open(path)?)?;
    let (stopped_before, again_before) = (logged(STOPPED_LINE)?, logged(BOUND_AGAIN_LINE)?);
    let Fixture { dev, ctx, buf, q } = Fixture::connected(path)?;
    let km = kernel_queue(&ctx)?;
    let native = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let monitored = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let counts = dev.recovery_debug()?;
    reset_function(&reset)?;
    let new = recovered(path, &dev, &counts, "the reset")?;
    // Destroyed on the old binding, after the reset and the reprobe.
    drop((native, monitored, km, q, buf, ctx, dev));
    let after = super::stall::teardown(&RawDev::open(path)?)?;
    ensure!(
        after.queues_quarantined == before.queues_quarantined
            && after.contexts_quarantined == before.contexts_quarantined
            && after.fence_pages_quarantined == before.fence_pages_quarantined,
        "objects destroyed after the reset were quarantined: {after:?}, before {before:?}"
    );
    ensure!(after.quarantine_held == before.quarantine_held, "the quarantine holds {after:?}, before {before:?}");
    ensure!(logged(BOUND_AGAIN_LINE)? > again_before, "no {BOUND_AGAIN_LINE:?} line after the reset");
    let stopped = logged(STOPPED_LINE)?;
    ensure!(stopped == stopped_before, "the reset was logged as a device whose {STOPPED_LINE:?}");
    super::eng::fresh_work(&new)
}

/// How long the test-only `test_reprobe_delay_ms` holds a binding lost to a function reset
/// before its reprobe unbinds it, on the `mailbox-stall` device (ms): the window the tests below
/// act in. What they do in it is one `open` or one export, issued as the reset's write returns:
/// tens of milliseconds on the debug kernel under load, well inside.
const DEAD_WINDOW_MS: u32 = 500;

/// A program that opens the device file in a loop right after a function reset never gets a
/// file of the binding the reset took: until the reprobe replaces it — held off for
/// [`DEAD_WINDOW_MS`] by the test-only `test_reprobe_delay_ms` on the `mailbox-stall` device —
/// `open` fails (`ENODEV` while the dead binding's node is there), and the first file it opens
/// is the new binding's, whose CREATE_CONTEXT succeeds; no open returns a file whose
/// CREATE_CONTEXT answers `ENODEV`.
fn open_never_returns_a_file_of_a_binding_lost_to_a_function_reset(path: &Path) -> TestResult {
    let reset = reset_file(path)?;
    let _window = ModuleParam::set("test_reprobe_delay_ms", DEAD_WINDOW_MS)?;
    let old = Device::open(path)?;
    let before = old.recovery_debug()?;
    reset_function(&reset)?;
    let start = Instant::now();
    let mut refused: Vec<String> = Vec::new();
    let mut opened = None;
    let answered = wait_until(REPROBE, || match Device::open(path) {
        Err(e) => {
            let name = e.errno().map_or_else(|| e.to_string(), errno_name);
            if !refused.contains(&name) {
                refused.push(name);
            }
            false
        }
        Ok(d) => {
            opened = Some((start.elapsed(), d.create_context().map(drop), d));
            true
        }
    });
    let status = std::fs::read_to_string(reset.replace("/reset", "/power/runtime_status")).unwrap_or_default();
    ensure!(
        answered,
        "{} did not open again {REPROBE:?} after the reset (opens refused: {refused:?}; runtime PM status {:?})",
        path.display(),
        status.trim()
    );
    let Some((at, created, _new)) = opened else {
        return Err("the loop ended without a file".into());
    };
    if let Err(e) = created {
        return Err(format!(
            "a file opened {at:?} after the reset belongs to the binding the reset took: CREATE_CONTEXT {e} (opens refused before it: {refused:?})"
        )
        .into());
    }
    ensure!(
        !refused.is_empty(),
        "the first open after the reset ({at:?}) already reached the new binding: the loop never met the dead one"
    );
    let new = recovered(path, &old, &before, "the reset")?;
    drop(old);
    super::eng::fresh_work(&new)
}

/// A `sync_file` exported on a binding a function reset took — a MONITORED fence of a file
/// opened before the reset, exported inside [`DEAD_WINDOW_MS`] before the reprobe — fails at
/// once with `ENODEV`, as the exports pending at the reset did (nothing will signal it): its
/// status is `-ENODEV` as the export returns (or the export itself is refused with `ENODEV`),
/// never pending until the unbind. Without `sync_file` in the kernel: SKIP.
fn a_sync_file_exported_on_a_binding_lost_to_a_function_reset_fails_at_once(path: &Path) -> TestResult {
    let reset = reset_file(path)?;
    let _window = ModuleParam::set("test_reprobe_delay_ms", DEAD_WINDOW_MS)?;
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let m = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    if !dev.caps().sync_file_export() {
        expect_errno(m.export_sync_file(1), libc::EOPNOTSUPP, "a sync_file export without CONFIG_SYNC_FILE")?;
        return crate::skip_kernel_lacks("sync_file (CONFIG_SYNC_FILE): exports are EOPNOTSUPP, nothing else checked");
    }
    let before = dev.recovery_debug()?;
    reset_function(&reset)?;
    let start = Instant::now();
    let exported = m.export_sync_file(1);
    let at = start.elapsed();
    let status = match &exported {
        Ok(sf) => Some(super::umd_sync::sync_status(sf.as_fd())),
        Err(_) => None,
    };
    // Back before anything is reported, so the next test finds the device bound.
    let new = recovered(path, &dev, &before, "the reset");
    drop((m, ctx, dev));
    match (exported, status) {
        (Err(e), _) if e.errno() == Some(libc::ENODEV) => {}
        (Ok(_), Some(Ok(status))) => ensure!(
            status == -libc::ENODEV,
            "a sync_file exported {at:?} after the reset has status {status} as the export returns (0: pending), expected -ENODEV"
        ),
        (Ok(_), Some(Err(e))) => return Err(e),
        (other, _) => return Err(format!("a sync_file export {at:?} after the reset: {other:?}, expected ENODEV").into()),
    }
    super::eng::fresh_work(&new?)
}

/// Function resets written back to back by [`a_reset_written_during_the_reprobe_still_brings_the_device_back`].
const BACK_TO_BACK: u32 = 8;

/// A function reset written again and again while the first one's reprobe unbinds and probes
/// the device again ([`BACK_TO_BACK`] writes of the `reset` file, each as soon as the previous
/// returned, some landing on the dead binding, some on the unbound device, some on the new
/// binding) never leaves the device away: it comes back at its path and runs a new process's
/// work.
fn a_reset_written_during_the_reprobe_still_brings_the_device_back(path: &Path) -> TestResult {
    let reset = reset_file(path)?;
    let dev = Device::open(path)?;
    let before = dev.recovery_debug()?;
    for i in 0..BACK_TO_BACK {
        reset_function(&reset).map_err(|e| format!("reset {i}: {e}"))?;
    }
    let new = recovered(path, &dev, &before, "the resets")?;
    drop(dev);
    super::eng::fresh_work(&new)
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(a_function_reset_ends_every_wait_and_the_device_comes_back, Default, []),
        test_entry!(pollable_and_eventfd_waits_end_with_enodev_across_a_function_reset, Default, []),
        test_entry!(a_function_reset_is_told_as_one_and_what_the_device_forgot_is_released, Default, []),
        test_entry!(open_never_returns_a_file_of_a_binding_lost_to_a_function_reset, MailboxStall, []),
        test_entry!(a_sync_file_exported_on_a_binding_lost_to_a_function_reset_fails_at_once, MailboxStall, []),
        test_entry!(a_reset_written_during_the_reprobe_still_brings_the_device_back, Default, []),
    ]
}

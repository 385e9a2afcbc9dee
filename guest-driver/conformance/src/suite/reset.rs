//! A PCI function reset of a bound device (no rule family): root resets the function through
//! sysfs while processes hold contexts, queues and CPU waits of every kind on it; the module
//! logs it as a reset, not as a device that stopped answering, and frees what the device forgot.

use std::os::fd::AsFd;
use std::path::Path;

use belfry_umd::FenceKind;

use crate::harness::raw::RawDev;
use crate::support::binding::pci_address;
use crate::support::fences::expect_pending;
use crate::support::fixture::Fixture;
use crate::support::gone::{expect_pollable_gone, expect_status_gone, read_ends_across, BlockingEventfd};
use crate::support::work::kernel_queue;
use crate::support::{wait_until, REPROBE, WAIT};
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

/// How many lines of the kernel log hold `line`.
fn logged(line: &str) -> Result<usize, crate::Error> {
    Ok(crate::support::kernel_log::read()?.matches(line).count())
}

/// A Function Level Reset of a bound device through sysfs (`echo 1 >
/// /sys/bus/pci/devices/<address>/reset`, root) is a device loss the module is told about
/// (`reset_prepare`/`reset_done`): a CPU wait pending on a fence across the reset ends with
/// `ENODEV` (the device forgot the fence: nothing will signal it), the old binding's file
/// answers `ENODEV`, the module logs the reset and counts a device loss, the device comes back
/// at the same path and a new process's work runs on it.
fn a_function_reset_ends_every_wait_and_the_device_comes_back(path: &Path) -> TestResult {
    let reset = reset_file(path)?;
    let Fixture { dev, ctx, buf, q } = Fixture::connected(path)?;
    super::eng::fresh_work(&dev)?;
    let lost_before = dev.recovery_debug()?.device_lost;
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
    let new = super::stall::recovered(path, &dev, lost_before, "the reset")?;
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
    let lost_before = dev.recovery_debug()?.device_lost;
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
    let new = super::stall::recovered(path, &dev, lost_before, "the reset");
    drop((polled, native, monitored, q, buf, ctx, dev));
    ended?;
    super::eng::fresh_work(&new?)
}

/// A function reset the module was told about is one, not a device that stopped answering:
/// its reprobe logs that it binds the device again after a function reset, never "the mailbox
/// stopped answering"; and what a process destroys on the old binding after the reset — a
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
    let lost_before = dev.recovery_debug()?.device_lost;
    reset_function(&reset)?;
    let new = super::stall::recovered(path, &dev, lost_before, "the reset")?;
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

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(a_function_reset_ends_every_wait_and_the_device_comes_back, Default, []),
        test_entry!(pollable_and_eventfd_waits_end_with_enodev_across_a_function_reset, Default, []),
        test_entry!(a_function_reset_is_told_as_one_and_what_the_device_forgot_is_released, Default, []),
    ]
}

//! A PCI function reset of a bound device (no rule family): root resets the function through
//! sysfs while processes hold contexts, queues and CPU waits of every kind on it.

use std::os::fd::AsFd;
use std::path::Path;

use belfry_umd::FenceKind;

use crate::support::binding::pci_address;
use crate::support::fences::expect_pending;
use crate::support::fixture::Fixture;
use crate::support::gone::{expect_pollable_gone, expect_status_gone, read_ends_across, BlockingEventfd};
use crate::support::{wait_until, REPROBE, WAIT};
use crate::{Test, TestResult};

/// What the module logs when the PCI core is about to reset a device it holds.
const RESET_LINE: &str = "function reset: every context is lost";

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

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(a_function_reset_ends_every_wait_and_the_device_comes_back, Default, []),
        test_entry!(pollable_and_eventfd_waits_end_with_enodev_across_a_function_reset, Default, []),
    ]
}

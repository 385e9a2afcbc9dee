//! A PCI function reset of a bound device (no rule family): root resets the function through
//! sysfs while processes hold contexts, queues and CPU waits on it.

use std::path::Path;

use belfry_umd::FenceKind;

use crate::support::binding::pci_address;
use crate::support::fences::expect_pending;
use crate::support::fixture::Fixture;
use crate::support::{wait_until, REPROBE, WAIT};
use crate::{Test, TestResult};

/// What the module logs when the PCI core is about to reset a device it holds.
const RESET_LINE: &str = "function reset: every context is lost";

/// A Function Level Reset of a bound device through sysfs (`echo 1 >
/// /sys/bus/pci/devices/<address>/reset`, root) is a device loss the module is told about
/// (`reset_prepare`/`reset_done`): a CPU wait pending on a fence across the reset ends with
/// `ENODEV` (the device forgot the fence: nothing will signal it), the old binding's file
/// answers `ENODEV`, the module logs the reset and counts a device loss, the device comes back
/// at the same path and a new process's work runs on it.
fn a_function_reset_ends_every_wait_and_the_device_comes_back(path: &Path) -> TestResult {
    let address = pci_address(path)?;
    let reset = format!("/sys/bus/pci/devices/{address}/reset");
    ensure!(Path::new(&reset).exists(), "{reset} is absent: the device offers no function reset");
    let Fixture { dev, ctx, buf, q } = Fixture::connected(path)?;
    super::eng::fresh_work(&dev)?;
    let lost_before = dev.recovery_debug()?.device_lost;
    let logged_before = crate::support::kernel_log::read()?.matches(RESET_LINE).count();
    let fence = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let waited = std::thread::scope(|s| -> Result<belfry_umd::Result<()>, crate::Error> {
        let f = &fence;
        let waiter = s.spawn(move || f.wait(1, REPROBE));
        expect_pending(&fence, 1)?;
        std::fs::write(&reset, "1").map_err(|e| format!("write 1 to {reset}: {e}"))?;
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
    let logged = crate::support::kernel_log::read()?.matches(RESET_LINE).count();
    ensure!(logged > logged_before, "no {RESET_LINE:?} line after the reset");
    drop((fence, q, buf, ctx, dev));
    super::eng::fresh_work(&new)
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![test_entry!(a_function_reset_ends_every_wait_and_the_device_comes_back, Default, [])]
}

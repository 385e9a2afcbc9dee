//! Runtime PM of one device through the PCI device's standard sysfs `power/` files: a test
//! allows it ([`RuntimePmAllowed`]: `control` = `auto`, a short `autosuspend_delay_ms`), waits
//! for `runtime_status` without calling into the module (every ioctl holds the device in D0),
//! and on drop (a failed test included) `control` goes back to `on` (the PCI default, which
//! resumes the device) and the delay to its old value.
//!
//! System sleep: [`system_sleep`] runs the guest's `s2idle.sh` (one suspend-to-idle, woken by
//! the launcher's key press; `qemu-integration/guest/s2idle.sh`).

use std::path::Path;
use std::time::Duration;

use crate::support::binding::pci_address;
use crate::support::wait_until;

/// Runtime PM allowed on one device for one test.
pub(crate) struct RuntimePmAllowed {
    /// `/sys/bus/pci/devices/<address>`.
    dir: String,
    /// `power/autosuspend_delay_ms` before the test.
    delay_was: String,
}

/// Writes `value` to `path`.
fn write(path: &str, value: &str) -> Result<(), crate::Error> {
    std::fs::write(path, value).map_err(|e| format!("writing {value:?} to {path}: {e}"))?;
    Ok(())
}

/// Reads `path`, trimmed.
fn read(path: &str) -> Result<String, crate::Error> {
    Ok(std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?.trim().to_string())
}

impl RuntimePmAllowed {
    /// Sets the autosuspend delay of the device of `path` to `delay_ms`, then allows runtime
    /// PM (`control` = `auto`): an idle device suspends once the delay passed since its last
    /// ioctl.
    pub(crate) fn new(path: &Path, delay_ms: u32) -> Result<RuntimePmAllowed, crate::Error> {
        let dir = format!("/sys/bus/pci/devices/{}", pci_address(path)?);
        let delay_was = read(&format!("{dir}/power/autosuspend_delay_ms"))?;
        write(&format!("{dir}/power/autosuspend_delay_ms"), &delay_ms.to_string())?;
        let pm = RuntimePmAllowed { dir, delay_was };
        write(&format!("{}/power/control", pm.dir), "auto")?;
        Ok(pm)
    }

    /// `power/runtime_status` (`active`, `suspending`, `suspended`, `resuming`).
    pub(crate) fn status(&self) -> String {
        read(&format!("{}/power/runtime_status", self.dir)).unwrap_or_else(|e| e.to_string())
    }

    /// The PCI core's view of the device's power state (`power_state`: `D0`, `D3hot`).
    pub(crate) fn power_state(&self) -> String {
        read(&format!("{}/power_state", self.dir)).unwrap_or_else(|e| e.to_string())
    }

    /// Polls `runtime_status` (no ioctl) until it reads `suspended`, up to `timeout`.
    pub(crate) fn wait_suspended(&self, timeout: Duration) -> bool {
        wait_until(timeout, || self.status() == "suspended")
    }

    /// Pins the device in D0 again (`control` = `on`, which resumes it).
    pub(crate) fn pin_d0(&self) -> Result<(), crate::Error> {
        write(&format!("{}/power/control", self.dir), "on")
    }
}

impl Drop for RuntimePmAllowed {
    fn drop(&mut self) {
        let _ = self.pin_d0();
        let _ = write(&format!("{}/power/autosuspend_delay_ms", self.dir), &self.delay_was);
    }
}

/// The guest script that sleeps once (s2idle) and is woken by the launcher.
const S2IDLE_SCRIPT: &str = "/belfry/guest/s2idle.sh";

/// One system sleep (suspend-to-idle) of the whole guest, woken by the launcher (`BELFRY_WAKE`
/// must be set: the launcher exports it when it presses keys on request); `tag` names it on the
/// console. Fails with the script's words if the kernel refused the sleep or nothing counted it.
pub(crate) fn system_sleep(tag: &str) -> Result<(), crate::Error> {
    let out = std::process::Command::new("sh")
        .arg(S2IDLE_SCRIPT)
        .arg(tag)
        .output()
        .map_err(|e| format!("running {S2IDLE_SCRIPT}: {e}"))?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stdout);
        return Err(format!("system sleep ({S2IDLE_SCRIPT}, {}): {}", out.status, text.trim()).into());
    }
    Ok(())
}

//! The module's `native_fences` parameter and device rebinding through sysfs: [`Rebinding`]
//! unbinds a device, sets the parameter and binds it again, and puts both back on drop.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use belfry_umd::Device;

use crate::harness::fail_inject::unmarked;
use crate::support::{wait_until, WAIT};
use crate::TestResult;

/// The module parameter that switches native GPU fences.
const PARAM: &str = "/sys/module/belfry/parameters/native_fences";

/// The PCI driver directory, for `unbind` and `bind`.
const DRIVER: &str = "/sys/bus/pci/drivers/belfry";

/// Writes `value` to the sysfs attribute at `path`.
fn write_sysfs(path: &str, value: &str) -> TestResult {
    unmarked(|| std::fs::write(path, value)).map_err(|e| format!("writing {value:?} to {path}: {e}"))?;
    Ok(())
}

/// Whether the `native_fences` parameter is on.
fn read_param() -> Result<bool, crate::Error> {
    let text = std::fs::read_to_string(PARAM).map_err(|e| format!("{PARAM}: {e}"))?;
    Ok(text.trim() == "Y")
}

/// Sets the `native_fences` parameter.
pub(crate) fn set_param(on: bool) -> TestResult {
    write_sysfs(PARAM, if on { "Y" } else { "N" })
}

/// The PCI addresses of the devices behind the device files bound now, by file name
/// (`belfry<N>`): each bound device's address under the name of the mailbox vector
/// (`belfry<N>-mb` in `/proc/interrupts`) among its MSI-X vectors: one read of
/// `/proc/interrupts` and of each bound device's `msi_irqs` for all of them.
pub(crate) fn addresses_by_name() -> Result<HashMap<String, String>, crate::Error> {
    let interrupts = std::fs::read_to_string("/proc/interrupts")?;
    let names: HashMap<&str, &str> = interrupts
        .lines()
        .filter_map(|l| {
            let name = l.split_whitespace().last()?.strip_suffix("-mb").filter(|n| n.starts_with("belfry"))?;
            Some((l.split(':').next()?.trim(), name))
        })
        .collect();
    let mut by_name = HashMap::new();
    for entry in std::fs::read_dir(DRIVER)? {
        let address = entry?.file_name().to_string_lossy().into_owned();
        if !address.contains(':') {
            continue;
        }
        // A device unbinding meanwhile has no vectors to list.
        let Ok(irqs) = std::fs::read_dir(format!("/sys/bus/pci/devices/{address}/msi_irqs")) else { continue };
        for irq in irqs.flatten() {
            if let Some(name) = names.get(irq.file_name().to_string_lossy().as_ref()) {
                by_name.insert(name.to_string(), address.clone());
            }
        }
    }
    Ok(by_name)
}

/// The PCI address of the device behind `/dev/belfry<N>`: the device whose MSI-X vectors
/// include the one `/proc/interrupts` names `belfry<N>-mb`.
pub(crate) fn pci_address(path: &Path) -> Result<String, crate::Error> {
    let dev = path.file_name().and_then(|n| n.to_str()).ok_or("device path without a name")?;
    addresses_by_name()?
        .remove(dev)
        .ok_or_else(|| format!("no device bound to {DRIVER} has the vector /proc/interrupts names {dev}-mb").into())
}

/// One device unbound and bound again through the driver's sysfs files; on drop (a failed
/// test included) the switch goes back to its old value and the device is bound again.
pub(crate) struct Rebinding {
    address: String,
    path: PathBuf,
    pub(crate) param_was: bool,
}

impl Rebinding {
    /// Prepares to rebind the device of `path`.
    pub(crate) fn new(path: &Path) -> Result<Rebinding, crate::Error> {
        Ok(Rebinding { address: pci_address(path)?, path: path.to_path_buf(), param_was: read_param()? })
    }

    fn bound(&self) -> bool {
        Path::new(&format!("{DRIVER}/{}", self.address)).exists()
    }

    /// Unbinds the device (the module's probe-time state goes with it).
    pub(crate) fn unbind(&self) -> TestResult {
        write_sysfs(&format!("{DRIVER}/unbind"), &self.address)?;
        ensure!(!self.bound(), "{} still bound after unbind", self.address);
        Ok(())
    }

    /// Binds the device again and waits for its device file.
    pub(crate) fn bind(&self) -> TestResult {
        write_sysfs(&format!("{DRIVER}/bind"), &self.address)?;
        let back = wait_until(WAIT, || self.bound() && Device::open(&self.path).is_ok());
        ensure!(back, "{} did not come back as {} after bind", self.address, self.path.display());
        Ok(())
    }

    /// Unbinds and binds the device.
    pub(crate) fn rebind(&self) -> TestResult {
        self.unbind()?;
        self.bind()
    }
}

impl Drop for Rebinding {
    fn drop(&mut self) {
        let restored = read_param().is_ok_and(|on| on == self.param_was);
        if !restored {
            let _ = set_param(self.param_was);
        }
        if !self.bound() {
            let _ = write_sysfs(&format!("{DRIVER}/bind"), &self.address);
        } else if !restored {
            // The device negotiated with the switch the test left: negotiate again.
            let _ = write_sysfs(&format!("{DRIVER}/unbind"), &self.address);
            let _ = write_sysfs(&format!("{DRIVER}/bind"), &self.address);
        }
        let _ = wait_until(WAIT, || Device::open(&self.path).is_ok());
    }
}

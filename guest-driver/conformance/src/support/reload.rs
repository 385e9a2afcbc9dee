//! Unloading the module and loading it again with every device back at its old
//! `/dev/belfry<N>`: [`Devices::now`] notes each device file's PCI address, [`Devices::reload`]
//! loads the module with the PCI bus's automatic probing off and binds the devices one by one in
//! the order of their old numbers (the module numbers devices lowest free slot first, in probe
//! order, which after a plain `insmod` is bus order, not necessarily the order the devices had),
//! then checks each is back where it was. The rest of the suite, which found its devices by
//! path once, keeps finding the same ones.

use std::path::{Path, PathBuf};

use belfry_umd::Device;

use crate::harness::fail_inject::unmarked;
use crate::support::binding::addresses_by_name;
use crate::support::{wait_until, REPROBE};
use crate::TestResult;

/// The PCI bus's switch for probing a driver's devices when it registers.
const AUTOPROBE: &str = "/sys/bus/pci/drivers_autoprobe";
/// The module's PCI driver directory, for `bind`.
const DRIVER: &str = "/sys/bus/pci/drivers/belfry";

/// `/sys/module/belfry/parameters/NAME`, trimmed.
pub(crate) fn param(name: &str) -> Result<String, crate::Error> {
    let path = format!("/sys/module/belfry/parameters/{name}");
    Ok(std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?.trim().to_string())
}

/// Runs `cmd` with `args`; its stderr on failure.
pub(crate) fn run(cmd: &str, args: &[&str]) -> TestResult {
    let out = unmarked(|| std::process::Command::new(cmd).args(args).output()).map_err(|e| format!("{cmd}: {e}"))?;
    ensure!(out.status.success(), "{cmd} {args:?}: {} {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}

/// The bound devices: each device file with its PCI address, by number.
pub(crate) struct Devices {
    files: Vec<(PathBuf, String)>,
}

/// The device files `/dev/belfry<N>`, by number.
fn device_files() -> Result<Vec<PathBuf>, crate::Error> {
    let mut numbered: Vec<(u32, PathBuf)> = std::fs::read_dir("/dev")?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("belfry").and_then(|n| n.parse().ok()).map(|n| (n, e.path()))
        })
        .collect();
    numbered.sort();
    Ok(numbered.into_iter().map(|(_, p)| p).collect())
}

/// The name of device file `path` (`belfry<N>`), as its vectors are named.
fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Puts the PCI bus's automatic probing back on when dropped.
struct AutoprobeOff;

impl AutoprobeOff {
    fn new() -> Result<Self, crate::Error> {
        std::fs::write(AUTOPROBE, "0").map_err(|e| format!("{AUTOPROBE}: {e}"))?;
        Ok(AutoprobeOff)
    }
}

impl Drop for AutoprobeOff {
    fn drop(&mut self) {
        let _ = std::fs::write(AUTOPROBE, "1");
    }
}

impl Devices {
    /// The devices bound now.
    pub(crate) fn now() -> Result<Devices, crate::Error> {
        let at = addresses_by_name()?;
        let files = device_files()?
            .into_iter()
            .map(|p| {
                let address = at
                    .get(&file_name(&p))
                    .ok_or_else(|| format!("no bound device has {}'s mailbox vector", p.display()))?;
                Ok((p, address.clone()))
            })
            .collect::<Result<Vec<_>, crate::Error>>()?;
        ensure!(!files.is_empty(), "no /dev/belfry<N>");
        Ok(Devices { files })
    }

    /// The device file whose device is at PCI `address` now, if one is.
    pub(crate) fn file_of(address: &str) -> Result<Option<PathBuf>, crate::Error> {
        let at = addresses_by_name()?;
        Ok(device_files()?.into_iter().find(|p| at.get(&file_name(p)).is_some_and(|a| a == address)))
    }

    /// Loads `module` with `args` (the module is unloaded), binds the devices in the order of
    /// their old numbers, and checks that each is back at its old device file within
    /// [`REPROBE`].
    pub(crate) fn reload(&self, module: &str, args: &[String]) -> TestResult {
        {
            let _off = AutoprobeOff::new()?;
            let mut insmod = vec![module];
            insmod.extend(args.iter().map(String::as_str));
            run("insmod", &insmod)?;
            for (_, address) in &self.files {
                // A device that failed to bind is found out below.
                let _ = unmarked(|| std::fs::write(format!("{DRIVER}/bind"), address));
            }
        }
        // Every device is looked for in each pass (one read of the addresses for all of them):
        // those back at their old file, answering, leave the list.
        let mut away: Vec<&(PathBuf, String)> = self.files.iter().collect();
        wait_until(REPROBE, || {
            if let Ok(at) = addresses_by_name() {
                away.retain(|(path, address)| {
                    !(at.get(&file_name(path)) == Some(address) && Device::open(path).is_ok())
                });
            }
            away.is_empty()
        });
        if let Some((path, address)) = away.first() {
            let now = Self::file_of(address)?;
            return Err(format!(
                "the device at {address} did not come back as {} after the module was loaded again (it is {:?})",
                path.display(),
                now
            )
            .into());
        }
        Ok(())
    }
}

/// The module's path (`BELFRY_MODULE`, set by the guest's run script).
pub(crate) fn module_path() -> Result<String, crate::Error> {
    Ok(std::env::var("BELFRY_MODULE").map_err(|_| "BELFRY_MODULE (the module's path) is not set")?)
}

/// The parameters to load the module with again: those the suite's run set
/// (`hang_timeout_ms`, `native_fences`), as they are now.
pub(crate) fn load_args() -> Result<Vec<String>, crate::Error> {
    Ok(vec![
        format!("hang_timeout_ms={}", param("hang_timeout_ms")?),
        format!("native_fences={}", if param("native_fences")? == "Y" { 1 } else { 0 }),
    ])
}

/// Whether `path` exists.
pub(crate) fn module_loaded() -> bool {
    Path::new("/sys/module/belfry").exists()
}

//! `cargo belfry selftests`, what goes into the guest: Linux's VFIO selftests built from the
//! provisioning root's kernel source (with Belfry's driver plugin for `vfio_pci_driver_test`
//! when the repository has one) and the distro image's VFIO modules, which the guest script
//! `selftests.sh` loads in order before it hands the device to vfio-pci.

use std::path::{Path, PathBuf};

use crate::setup::compile::Workspace;
use crate::setup::provision::{Provision, Result};

/// The selftests a run executes, in order (each a binary of `tools/testing/selftests/vfio`).
pub const SELFTESTS: [&str; 5] = [
    "vfio_pci_device_test",
    "vfio_dma_mapping_test",
    "vfio_dma_mapping_mmio_test",
    "vfio_iommufd_setup_test",
    "vfio_pci_driver_test",
];
/// Belfry's driver plugin for `vfio_pci_driver_test`, in the kernel's plugin layout.
pub const PLUGIN_DIR: &str = "qemu-integration/selftests/belfry";
/// Guest RAM of a selftests run: `vfio_pci_driver_test` maps (and pins) a 1 GiB memcpy region
/// beside its driver's, more than the 1 GiB of other runs holds.
pub const GUEST_MEMORY: &str = "2G";
/// Where the selftests are in the guest.
pub const GUEST_SELFTESTS: &str = "/belfry/selftests";
/// Where the VFIO modules are in the guest (named `NN-name.ko`, NN the load order).
pub const GUEST_VFIO_MODULES: &str = "/belfry/vfio";

/// Builds the selftests and fetches the modules; returns the initramfs additions (host path,
/// guest path) of `tests` and the modules.
pub fn build(ws: &Workspace, provision: &Provision, tests: &[String]) -> Result<Vec<(PathBuf, String)>> {
    let plugin = ws.repo.join(PLUGIN_DIR);
    let plugin = plugin.is_dir().then_some(plugin);
    let out = provision.vfio_selftests(&ws.guest_target_dir().join("vfio-selftests"), plugin.as_deref())?;
    let modules = provision.vfio_modules(&ws.guest_target_dir().join("vfio-modules"))?;
    Ok(adds(&out, tests, &modules))
}

/// The initramfs additions of the selftest binaries `tests` in `out` and of `modules`.
fn adds(out: &Path, tests: &[String], modules: &[PathBuf]) -> Vec<(PathBuf, String)> {
    let tests = tests.iter().map(|t| (out.join(t), format!("{GUEST_SELFTESTS}/{t}")));
    let modules = modules.iter().enumerate().filter_map(|(i, m)| {
        let name = m.file_name()?.to_str()?.replace('-', "_");
        Some((m.clone(), format!("{GUEST_VFIO_MODULES}/{i:02}-{name}")))
    });
    tests.chain(modules).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_are_numbered_in_load_order_under_their_module_names() {
        let adds = adds(
            Path::new("/o"),
            &["vfio_pci_device_test".into()],
            &["/m/irqbypass.ko".into(), "/m/vfio-pci-core.ko".into()],
        );
        let guest: Vec<&str> = adds.iter().map(|(_, g)| g.as_str()).collect();
        assert_eq!(
            guest,
            [
                "/belfry/selftests/vfio_pci_device_test",
                "/belfry/vfio/00-irqbypass.ko",
                "/belfry/vfio/01-vfio_pci_core.ko"
            ]
        );
        assert_eq!(adds[0].0, Path::new("/o/vfio_pci_device_test"));
    }
}

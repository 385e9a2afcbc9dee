//! The device file: opening `/dev/belfry<N>`, its capabilities, contexts and module-wide
//! debug counters.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use belfry_abi::irq::cause;
use belfry_abi::uapi;
use belfry_abi::uapi_debug;

use crate::caps::Caps;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::handle::{ContextId, ContextInner, DeviceFile, OwnedHandle};
use crate::sys;

/// An open `/dev/belfry<N>`.
#[derive(Debug)]
pub struct Device {
    pub(crate) file: Arc<DeviceFile>,
    caps: Caps,
}

impl Device {
    /// Opens the device at `path` and checks its uapi version.
    ///
    /// # Errors
    /// [`Error::Open`], [`Error::Ioctl`] (`QUERY_CAPS`) or [`Error::UapiVersion`].
    pub fn open(path: impl AsRef<Path>) -> Result<Device> {
        let file = Arc::new(DeviceFile::open(path.as_ref().to_path_buf())?);
        let mut raw = uapi::QueryCaps::default();
        file.ioctl(sys::QUERY_CAPS, &mut raw)?;
        if raw.uapi_version != uapi::UAPI_VERSION {
            return Err(Error::UapiVersion { found: raw.uapi_version, expected: uapi::UAPI_VERSION });
        }
        let device = Device { file, caps: Caps { raw } };
        if device.caps.raw.caps & belfry_abi::regs::CAPS::default().with_verbose_log(true).0 != 0 {
            // What the library's submissions follow until told otherwise (LOG-20).
            device.verbose_logging()?;
        }
        Ok(device)
    }

    /// Opens `/dev/belfry<n>`.
    ///
    /// # Errors
    /// As [`Device::open`].
    pub fn open_index(n: u32) -> Result<Device> {
        Self::open(format!("/dev/belfry{n}"))
    }

    /// The capabilities read at open.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The device path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Creates a context with its own GPU address space.
    ///
    /// # Errors
    /// [`Error::Ioctl`] `CREATE_CONTEXT`: `ENOSPC` past 64 contexts of this process (or
    /// the device's 256), `ENODEV` once the device is gone.
    pub fn create_context(&self) -> Result<Context> {
        let mut arg = uapi::CreateContext::default();
        self.file.ioctl(sys::CREATE_CONTEXT, &mut arg)?;
        let handle = OwnedHandle::new(self.file.clone(), arg.handle, sys::DESTROY_CONTEXT);
        Ok(Context::from_inner(Arc::new(ContextInner { handle, caps: self.caps, id: ContextId::next() })))
    }

    /// The paths of the Belfry devices of this system (`/dev/belfry<N>`), by index.
    ///
    /// # Errors
    /// [`Error::Open`] naming `/dev` when it cannot be listed.
    pub fn enumerate() -> Result<Vec<PathBuf>> {
        enumerate_in(Path::new("/dev"))
    }

    /// Interrupt records the module handled on this device, by cause (`DEBUG_STATS`'s
    /// `interrupts_by_cause`, named).
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`DEBUG_STATS`).
    pub fn interrupt_counts(&self) -> Result<InterruptCounts> {
        Ok(InterruptCounts::from_stats(&self.debug_stats()?))
    }

    /// The module's debug counters (`DEBUG_STATS`).
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`EPERM` for a process without `CAP_PERFMON` or
    /// `CAP_SYS_ADMIN`: the figures are the whole device's).
    pub fn debug_stats(&self) -> Result<uapi_debug::DebugStats> {
        let mut arg = uapi_debug::DebugStats::default();
        self.file.ioctl(sys::DEBUG_STATS, &mut arg)?;
        Ok(arg)
    }

    /// The module's hang detection and recovery counters (`RECOVERY_DEBUG`).
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`EPERM` for a process without `CAP_PERFMON` or
    /// `CAP_SYS_ADMIN`: the figures are the whole device's).
    pub fn recovery_debug(&self) -> Result<uapi_debug::RecoveryDebug> {
        let mut arg = uapi_debug::RecoveryDebug::default();
        self.file.ioctl(sys::RECOVERY_DEBUG, &mut arg)?;
        Ok(arg)
    }

    /// The module's engine power counters and its last power steps (`POWER_DEBUG`).
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`EPERM` for a process without `CAP_PERFMON` or
    /// `CAP_SYS_ADMIN`: the figures are the whole device's).
    pub fn power_debug(&self) -> Result<uapi_debug::PowerDebug> {
        let mut arg = uapi_debug::PowerDebug::default();
        self.file.ioctl(sys::POWER_DEBUG, &mut arg)?;
        Ok(arg)
    }

    /// The module's device power (D-state) counters and latencies (`DEVICE_POWER`). Like
    /// every call into the module, it holds the device in D0 while it runs (resuming it first
    /// from D3).
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`EPERM` for a process without `CAP_PERFMON` or
    /// `CAP_SYS_ADMIN`: the figures are the whole device's).
    pub fn device_power(&self) -> Result<uapi_debug::DevicePower> {
        let mut arg = uapi_debug::DevicePower::default();
        self.file.ioctl(sys::DEVICE_POWER, &mut arg)?;
        Ok(arg)
    }

    /// The module's fence bookkeeping (`FENCE_DEBUG`): shared-fence objects and handles,
    /// registered fences, pending waits, batched MonitoredValue updates.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`EPERM` for a process without `CAP_PERFMON` or
    /// `CAP_SYS_ADMIN`: the figures are the whole device's).
    pub fn fence_debug(&self) -> Result<uapi_debug::FenceDebug> {
        let mut arg = uapi_debug::FenceDebug::default();
        self.file.ioctl(sys::FENCE_DEBUG, &mut arg)?;
        Ok(arg)
    }
}

impl AsFd for Device {
    /// The open device file, for `poll`-less uses such as `fstat` or passing it on.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.fd()
    }
}

/// Interrupt records the module handled, by cause ([`Device::interrupt_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InterruptCounts {
    /// Mailbox completions.
    pub mailbox: u64,
    /// Native-fence records (a fence crossed its MonitoredValue).
    pub native_fence: u64,
    /// Monitored-fence records (an engine wrote a monitored fence) and `NOTIFY` records.
    pub monitored_fence: u64,
    /// Engine state changes (idle, hung).
    pub engine_state: u64,
    /// Context faults.
    pub fault: u64,
    /// Records of unknown kinds.
    pub unknown: u64,
}

impl InterruptCounts {
    /// The counts of `interrupts_by_cause`, indexed by `irq::cause` bit (unknown kinds at 7).
    pub fn from_stats(stats: &uapi_debug::DebugStats) -> InterruptCounts {
        let at = |cause: u32| stats.interrupts_by_cause[cause.trailing_zeros() as usize];
        InterruptCounts {
            mailbox: at(cause::MAILBOX),
            native_fence: at(cause::NATIVE_FENCE),
            monitored_fence: at(cause::MONITORED_FENCE),
            engine_state: at(cause::ENGINE_STATE),
            fault: at(cause::FAULT),
            unknown: stats.interrupts_by_cause[7],
        }
    }
}

/// The `belfry<N>` device nodes in `dir`, by `N`.
fn enumerate_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Open { path: dir.to_path_buf(), source })?;
    let mut found: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let n = name.to_str()?.strip_prefix("belfry")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enumeration_lists_belfry_nodes_by_index() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["belfry10", "belfry2", "belfryX", "null", "belfry0"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let names: Vec<String> = enumerate_in(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["belfry0", "belfry2", "belfry10"]);
        assert_eq!(enumerate_in(&dir.path().join("missing")).unwrap_err().errno(), Some(libc::ENOENT));
    }

    #[test]
    fn interrupt_counts_are_named_by_cause() {
        let stats = uapi_debug::DebugStats { interrupts_by_cause: [1, 2, 3, 4, 5, 0, 0, 9], ..Default::default() };
        let c = InterruptCounts::from_stats(&stats);
        assert_eq!(
            (c.mailbox, c.native_fence, c.monitored_fence, c.engine_state, c.fault, c.unknown),
            (1, 2, 3, 4, 5, 9)
        );
    }

    #[test]
    fn opening_a_missing_device_names_the_path_and_errno() {
        let err = Device::open("/nonexistent/belfry9").unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENOENT));
        assert!(err.to_string().contains("/nonexistent/belfry9"));
    }

    #[test]
    fn opening_a_file_that_is_no_device_fails_in_query_caps() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = Device::open(file.path()).unwrap_err();
        assert_eq!(err.ioctl_name(), Some("QUERY_CAPS"));
        assert_eq!(err.errno(), Some(libc::ENOTTY));
    }
}

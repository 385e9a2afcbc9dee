//! The device file: opening `/dev/belfry<N>`, its capabilities, contexts and module-wide
//! debug counters.

use std::path::Path;
use std::sync::Arc;

use belfry_abi::uapi;

use crate::caps::Caps;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::handle::{ContextInner, DeviceFile, OwnedHandle};
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
        Ok(Device { file, caps: Caps { raw } })
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
    /// [`Error::Ioctl`] (`CREATE_CONTEXT`).
    pub fn create_context(&self) -> Result<Context> {
        let mut arg = uapi::CreateContext::default();
        self.file.ioctl(sys::CREATE_CONTEXT, &mut arg)?;
        let handle = OwnedHandle::new(self.file.clone(), arg.handle, sys::DESTROY_CONTEXT);
        Ok(Context::from_inner(Arc::new(ContextInner { handle, caps: self.caps })))
    }

    /// The module's debug counters (`DEBUG_STATS`).
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn debug_stats(&self) -> Result<uapi::DebugStats> {
        let mut arg = uapi::DebugStats::default();
        self.file.ioctl(sys::DEBUG_STATS, &mut arg)?;
        Ok(arg)
    }

    /// The module's hang detection and recovery counters (`RECOVERY_DEBUG`).
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn recovery_debug(&self) -> Result<uapi::RecoveryDebug> {
        let mut arg = uapi::RecoveryDebug::default();
        self.file.ioctl(sys::RECOVERY_DEBUG, &mut arg)?;
        Ok(arg)
    }

    /// The module's engine power counters and its last power steps (`POWER_DEBUG`).
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn power_debug(&self) -> Result<uapi::PowerDebug> {
        let mut arg = uapi::PowerDebug::default();
        self.file.ioctl(sys::POWER_DEBUG, &mut arg)?;
        Ok(arg)
    }

    /// The module's fence bookkeeping (`FENCE_DEBUG`): shared-fence objects and handles,
    /// registered fences, pending waits, batched MonitoredValue updates.
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn fence_debug(&self) -> Result<uapi::FenceDebug> {
        let mut arg = uapi::FenceDebug::default();
        self.file.ioctl(sys::FENCE_DEBUG, &mut arg)?;
        Ok(arg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

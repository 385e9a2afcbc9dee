//! The device file, its capabilities and contexts.
//!
//! Lifetimes are reference counted: every object holds an `Arc` of what it was created from
//! (an allocation holds its context, a context holds the device file), so the module always
//! sees children destroyed before their parents and the file closed last, whatever order the
//! application drops its values in.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use belfry_abi::{regs, uapi};

use crate::error::{Error, Result};
use crate::fence::{Fence, FenceKind};
use crate::memory::Allocation;
use crate::queue::{Queue, QueueDesc};
use crate::sys::{self, Request};

/// The open device file, shared by everything created through it.
#[derive(Debug)]
pub(crate) struct DeviceFile {
    fd: OwnedFd,
    path: PathBuf,
}

impl DeviceFile {
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Issues an ioctl, naming it in the error.
    pub(crate) fn ioctl<T: sys::UapiArg>(&self, request: Request<T>, arg: &mut T) -> Result<()> {
        sys::ioctl(self.fd(), request, arg).map_err(|source| Error::Ioctl { name: request.name(), source })
    }

    /// Issues a handle-only ioctl.
    pub(crate) fn ioctl_handle(&self, request: Request<uapi::Handle>, handle: u32) -> Result<()> {
        self.ioctl(request, &mut uapi::Handle { handle, pad: 0 })
    }
}

/// A module handle destroyed by `destroy` on drop.
#[derive(Debug)]
pub(crate) struct OwnedHandle {
    file: Arc<DeviceFile>,
    handle: u32,
    destroy: Request<uapi::Handle>,
}

impl OwnedHandle {
    pub(crate) fn new(file: Arc<DeviceFile>, handle: u32, destroy: Request<uapi::Handle>) -> Self {
        Self { file, handle, destroy }
    }

    pub(crate) fn get(&self) -> u32 {
        self.handle
    }

    pub(crate) fn file(&self) -> &Arc<DeviceFile> {
        &self.file
    }
}

impl Drop for OwnedHandle {
    fn drop(&mut self) {
        if let Err(e) = self.file.ioctl_handle(self.destroy, self.handle) {
            log::warn!(
                "{}: {} of handle {}: {e} ({:?})",
                self.file.path.display(),
                self.destroy.name(),
                self.handle,
                e.errno()
            );
        }
    }
}

/// What the module and the device offer (`QUERY_CAPS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// The module's answer, as is.
    pub raw: uapi::QueryCaps,
}

impl Caps {
    /// The device's capability bits, masked by module parameters.
    pub fn bits(&self) -> regs::CAPS {
        regs::CAPS(self.raw.caps)
    }

    /// The test-only faults the device was started with (zero on a normal device).
    pub fn test_injections(&self) -> regs::TEST_INJECTIONS {
        regs::TEST_INJECTIONS(self.raw.test_injections)
    }

    /// Whether queues on `engine` may use user-mode submission (CAP-11).
    pub fn user_mode_submission(&self, engine: u32) -> bool {
        self.bits().user_mode_submission() && engine < 32 && self.raw.user_mode_submission_engines & (1 << engine) != 0
    }

    /// Physical doorbells.
    pub fn doorbell_count(&self) -> u32 {
        self.raw.doorbell_count
    }

    /// Engines.
    pub fn engine_count(&self) -> u32 {
        self.raw.engine_count
    }

    /// Whether native GPU fences (DEFAULT, INTRA_GPU) and user-mode queues are available
    /// (CAP-07): the module's feature switch was on when the device was bound and the device
    /// supports them.
    pub fn native_gpu_fence_supported(&self) -> bool {
        self.raw.flags & uapi::CAPS_FLAG_NATIVE_GPU_FENCE_SUPPORTED != 0
    }

    /// The native-fence capabilities version the module negotiated (0: feature off).
    pub fn native_fence_caps_version(&self) -> u32 {
        self.raw.native_fence_caps_version
    }

    /// Whether native fence values are mapped in the system (CMP) address space (CAP-06).
    pub fn map_to_gpu_system_process(&self) -> bool {
        self.raw.flags & uapi::CAPS_FLAG_MAP_TO_GPU_SYSTEM_PROCESS != 0
    }

    /// `uapi::FENCE_SEGMENT_*` bits: where fence values live (CAP-05).
    pub fn fence_segments(&self) -> u32 {
        self.raw.fence_segments
    }
}

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
        let path = path.as_ref().to_path_buf();
        let fd = sys::open(&path).map_err(|source| Error::Open { path: path.clone(), source })?;
        let file = Arc::new(DeviceFile { fd, path });
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
        &self.file.path
    }

    /// Creates a context with its own GPU address space.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`CREATE_CONTEXT`).
    pub fn create_context(&self) -> Result<Context> {
        let mut arg = uapi::CreateContext::default();
        self.file.ioctl(sys::CREATE_CONTEXT, &mut arg)?;
        let handle = OwnedHandle::new(self.file.clone(), arg.handle, sys::DESTROY_CONTEXT);
        Ok(Context { inner: Arc::new(ContextInner { handle }), caps: self.caps })
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

/// A context's handle, kept alive by everything created in the context.
#[derive(Debug)]
pub(crate) struct ContextInner {
    pub(crate) handle: OwnedHandle,
}

impl ContextInner {
    pub(crate) fn file(&self) -> &Arc<DeviceFile> {
        self.handle.file()
    }
}

/// A hardware context and its GPU address space. Cloning shares it; the module's context is
/// destroyed when the last clone and the last allocation and queue made in it are dropped.
#[derive(Clone, Debug)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
    pub(crate) caps: Caps,
}

impl Context {
    /// The module's handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle.get()
    }

    /// The capabilities of the device the context lives on.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Allocates `size` bytes of GPU memory mapped in this context's address space and in the
    /// process (`flags`: `uapi::ALLOC_*`).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a zero size, [`Error::Ioctl`] (`ALLOC`), [`Error::Map`].
    pub fn alloc(&self, size: u64, flags: u32) -> Result<Allocation> {
        Allocation::new(self.inner.clone(), size, flags)
    }

    /// Creates a hardware queue (user-mode with ring, ring control and doorbell, or
    /// kernel-mode) as `desc` says.
    ///
    /// # Errors
    /// See [`Queue::new`].
    pub fn create_queue(&self, desc: &QueueDesc) -> Result<Queue> {
        Queue::new(self, desc)
    }

    /// Creates a native fence of `kind` (`flags`: `uapi::FENCE_*`) with CurrentValue `initial`.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`CREATE_FENCE`), [`Error::Map`].
    pub fn create_fence(&self, kind: FenceKind, flags: u32, initial: u64) -> Result<Fence> {
        Fence::new(self.inner.clone(), kind, flags, initial)
    }

    /// Opens, in this context, the shared fence an exported `fd` names ([`Fence::export`], maybe
    /// from another process): a local handle with its own GPU VA and read-only mapping.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`IMPORT_FENCE`: `EINVAL` not a fence fd, `EXDEV` another device's),
    /// [`Error::Map`].
    pub fn import_fence(&self, fd: BorrowedFd<'_>) -> Result<Fence> {
        Fence::import(self.inner.clone(), fd)
    }

    /// Takes the context's queues off the device (`SUSPEND_CONTEXT`).
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn suspend(&self) -> Result<()> {
        self.inner.file().ioctl_handle(sys::SUSPEND_CONTEXT, self.handle())
    }

    /// Puts them back (`RESUME_CONTEXT`).
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn resume(&self) -> Result<()> {
        self.inner.file().ioctl_handle(sys::RESUME_CONTEXT, self.handle())
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

    #[test]
    fn user_mode_submission_needs_the_cap_bit_and_the_engine_bit() {
        let mut caps = Caps { raw: uapi::QueryCaps { user_mode_submission_engines: 0b10, ..Default::default() } };
        assert!(!caps.user_mode_submission(1));
        caps.raw.caps = regs::CAPS::default().with_user_mode_submission(true).0;
        assert!(caps.user_mode_submission(1) && !caps.user_mode_submission(0) && !caps.user_mode_submission(40));
    }
}

//! The module handles every library object is built on: the open device file
//! ([`DeviceFile`]), a handle destroyed on drop ([`OwnedHandle`]) and a context's handle
//! ([`ContextInner`]) that allocations, fences and queues keep alive.
//!
//! Lifetimes are reference counted: every object holds an `Arc` of what it was created from
//! (an allocation holds its context, a context holds the device file), so the module always
//! sees children destroyed before their parents and the file closed last, whatever order the
//! application drops its values in. This module depends on nothing but `sys` and `error`, so
//! every object module can use it without reaching back into the device or the context.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use belfry_abi::{uapi, uapi_sync};

use crate::deadline::{retry_interrupted, Deadline};

use crate::caps::Caps;
use crate::error::{Error, Result};
use crate::sys::{self, Request};

/// The open device file, shared by everything created through it.
#[derive(Debug)]
pub(crate) struct DeviceFile {
    fd: OwnedFd,
    path: PathBuf,
    /// Verbose fence logging as the library last learnt it (LOG-20, `crate::verbose`).
    verbose: AtomicBool,
}

impl DeviceFile {
    /// Opens the device file at `path`.
    pub(crate) fn open(path: PathBuf) -> Result<DeviceFile> {
        let fd = sys::open(&path).map_err(|source| Error::Open { path: path.clone(), source })?;
        Ok(DeviceFile { fd, path, verbose: AtomicBool::new(false) })
    }

    /// Verbose fence logging as the library last learnt it.
    pub(crate) fn verbose_log(&self) -> bool {
        self.verbose.load(Ordering::Relaxed)
    }

    /// Records what the module said of verbose fence logging.
    pub(crate) fn learn_verbose_log(&self, on: bool) {
        self.verbose.store(on, Ordering::Relaxed);
    }

    /// The device path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The file descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Issues an ioctl, naming it in the error.
    pub(crate) fn ioctl<T: sys::UapiArg>(&self, request: Request<T>, arg: &mut T) -> Result<()> {
        sys::ioctl(self.fd(), request, arg).map_err(|error| Error::Ioctl { name: request.name(), error })
    }

    /// `WAIT_FENCES` on `entries` until `deadline`, any one of them or `all`: called again
    /// with the same deadline after each `EINTR` (`deadline.rs`). Returns the module's `first`
    /// (the lowest index of an entry found reached; 0 when `all`).
    ///
    /// # Errors
    /// [`Error::Ioctl`] named `WAIT_FENCES` (`ETIMEDOUT`, `ECANCELED`, ...); `EINVAL` for no or
    /// more than `MAX_WAIT_FENCES` entries.
    pub(crate) fn wait_fences(
        &self,
        entries: &[uapi_sync::WaitFenceEntry],
        all: bool,
        deadline: Deadline,
    ) -> Result<usize> {
        let error = |error| Error::Ioctl { name: sys::WAIT_FENCES.name(), error };
        let count = u32::try_from(entries.len()).map_err(|_| error(io::Error::from_raw_os_error(libc::EINVAL)))?;
        let mut arg = uapi_sync::WaitFences {
            entries: entries.as_ptr() as u64,
            count,
            flags: if all { uapi_sync::WAIT_FENCES_ALL } else { 0 },
            deadline_ns: deadline.as_monotonic_ns(),
            ..Default::default()
        };
        // The same absolute deadline on each retry: the time spent so far counts.
        retry_interrupted(deadline, sys::monotonic_ns, |_| sys::ioctl_once(self.fd(), sys::WAIT_FENCES, &mut arg))
            .map_err(error)?;
        usize::try_from(arg.first).map_err(|_| Error::Invalid("WAIT_FENCES index"))
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

/// A context's handle, kept alive by everything created in the context, with the
/// capabilities of the device it lives on.
#[derive(Debug)]
pub(crate) struct ContextInner {
    pub(crate) handle: OwnedHandle,
    pub(crate) caps: Caps,
    /// Unique in this process (module handles are only unique within one device file): what
    /// a fence and a queue compare to know they share a context.
    pub(crate) id: ContextId,
}

/// A context's process-wide identity ([`ContextInner::id`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ContextId(u64);

impl ContextId {
    /// A new identity, never given before in this process.
    pub(crate) fn next() -> ContextId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        ContextId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl ContextInner {
    pub(crate) fn file(&self) -> &Arc<DeviceFile> {
        self.handle.file()
    }
}

//! The module handles every library object is built on: the open device file
//! ([`DeviceFile`]), a handle destroyed on drop ([`OwnedHandle`]) and a context's handle
//! ([`ContextInner`]) that allocations, fences and queues keep alive.
//!
//! Lifetimes are reference counted: every object holds an `Arc` of what it was created from
//! (an allocation holds its context, a context holds the device file), so the module always
//! sees children destroyed before their parents and the file closed last, whatever order the
//! application drops its values in. This module depends on nothing but `sys` and `error`, so
//! every object module can use it without reaching back into the device or the context.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use belfry_abi::uapi;

use crate::caps::Caps;
use crate::error::{Error, Result};
use crate::sys::{self, Request};

/// The open device file, shared by everything created through it.
#[derive(Debug)]
pub(crate) struct DeviceFile {
    fd: OwnedFd,
    path: PathBuf,
}

impl DeviceFile {
    /// Opens the device file at `path`.
    pub(crate) fn open(path: PathBuf) -> Result<DeviceFile> {
        let fd = sys::open(&path).map_err(|source| Error::Open { path: path.clone(), source })?;
        Ok(DeviceFile { fd, path })
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

    /// Issues a blocking wait ioctl whose argument carries a relative timeout (`set` stores it,
    /// in nanoseconds): restarted after `EINTR` with the time left, not the full `timeout`
    /// (`deadline.rs`).
    pub(crate) fn wait_ioctl<T: sys::UapiArg>(
        &self,
        request: Request<T>,
        arg: &mut T,
        timeout: std::time::Duration,
        set: impl Fn(&mut T, u64),
    ) -> Result<()> {
        crate::deadline::restart_with_deadline(timeout, std::time::Instant::now, |ns| {
            set(arg, ns);
            sys::ioctl_once(self.fd(), request, arg)
        })
        .map_err(|error| Error::Ioctl { name: request.name(), error })
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
}

impl ContextInner {
    pub(crate) fn file(&self) -> &Arc<DeviceFile> {
        self.handle.file()
    }
}

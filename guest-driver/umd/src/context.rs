//! Contexts: a hardware context and its GPU address space, and the objects made in it
//! (allocations, queues, fences).

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use crate::caps::Caps;
use crate::error::Result;
use crate::fence::{Fence, FenceKind};
use crate::handle::ContextInner;
use crate::memory::Allocation;
use crate::queue::{Queue, QueueDesc};
use crate::sys;

/// A hardware context and its GPU address space. Cloning shares it; the module's context is
/// destroyed when the last clone and the last allocation and queue made in it are dropped.
#[derive(Clone, Debug)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl Context {
    pub(crate) fn from_inner(inner: Arc<ContextInner>) -> Context {
        Context { inner }
    }

    /// The context's handle and device file, for the objects made in it.
    pub(crate) fn inner(&self) -> &Arc<ContextInner> {
        &self.inner
    }

    /// The module's handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle.get()
    }

    /// The capabilities of the device the context lives on.
    pub fn caps(&self) -> &Caps {
        &self.inner.caps
    }

    /// Allocates `size` bytes of GPU memory mapped in this context's address space and in the
    /// process (`flags`: `uapi::ALLOC_*`).
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a zero size, [`crate::Error::Ioctl`] (`ALLOC`), [`crate::Error::Map`].
    pub fn alloc(&self, size: u64, flags: u32) -> Result<Allocation> {
        Allocation::new(self.inner.clone(), size, flags)
    }

    /// Creates a hardware queue (user-mode with ring, ring control and doorbell, or
    /// kernel-mode) as `desc` says.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a bad `desc`; [`crate::Error::Ioctl`] (`ALLOC`, `CREATE_QUEUE`,
    /// `CREATE_DOORBELL`) or [`crate::Error::Map`].
    pub fn create_queue(&self, desc: &QueueDesc) -> Result<Queue> {
        Queue::new(self.inner.clone(), desc)
    }

    /// Creates a native fence of `kind` (`flags`: `uapi::FENCE_*`) with CurrentValue `initial`.
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] (`CREATE_FENCE`), [`crate::Error::Map`].
    pub fn create_fence(&self, kind: FenceKind, flags: u32, initial: u64) -> Result<Fence> {
        Fence::new(self.inner.clone(), kind, flags, initial)
    }

    /// Opens, in this context, the shared fence an exported `fd` names ([`Fence::export`], maybe
    /// from another process): a local handle with its own GPU VA and read-only mapping.
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] (`IMPORT_FENCE`: `EINVAL` not a fence fd, `EXDEV` another device's),
    /// [`crate::Error::Map`].
    pub fn import_fence(&self, fd: BorrowedFd<'_>) -> Result<Fence> {
        Fence::import(self.inner.clone(), fd)
    }

    /// Takes the context's queues off the device (`SUSPEND_CONTEXT`).
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`].
    pub fn suspend(&self) -> Result<()> {
        self.inner.file().ioctl_handle(sys::SUSPEND_CONTEXT, self.handle())
    }

    /// Puts them back (`RESUME_CONTEXT`).
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`].
    pub fn resume(&self) -> Result<()> {
        self.inner.file().ioctl_handle(sys::RESUME_CONTEXT, self.handle())
    }
}

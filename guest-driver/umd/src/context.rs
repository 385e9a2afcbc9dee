//! Contexts: a hardware context and its GPU address space, and the objects made in it
//! (allocations, queues, fences).

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use belfry_abi::engine::FaultReason;
use belfry_abi::{uapi, uapi_sync};

use crate::caps::Caps;
use crate::error::Result;
use crate::fence::{Fence, FenceKind};
use crate::handle::ContextInner;
use crate::memory::Allocation;
use crate::queue::{Queue, QueueDesc};
use crate::sys;

bitflags::bitflags! {
    /// What [`Context::reset_status`] found (`uapi_sync::CONTEXT_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct ResetFlags: u32 {
        /// The context was lost: its work ended, its pending progress never completes, and it
        /// refuses new queues. Create a new context.
        const LOST = uapi_sync::CONTEXT_LOST;
        /// Its own work caused the loss (a GPU fault in its address space, a refused packet);
        /// a context lost with its device is not guilty.
        const GUILTY = uapi_sync::CONTEXT_GUILTY;
    }
}

bitflags::bitflags! {
    /// [`Context::alloc`] flags (`uapi::ALLOC_*`). A raw `u32` converts as is (unknown bits
    /// kept, for the module to refuse with `EINVAL`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct AllocFlags: u32 {
        /// The GPU may only read the allocation.
        const GPU_READ_ONLY = uapi::ALLOC_GPU_READ_ONLY;
    }
}

bitflags::bitflags! {
    /// [`Context::create_fence`] flags (`uapi::FENCE_*`). A raw `u32` converts as is.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FenceFlags: u32 {
        /// Shareable: the fence gets pages of its own and can be exported
        /// ([`crate::Fence::export`]); DEFAULT fences only.
        const SHAREABLE = uapi::FENCE_SHAREABLE;
    }
}

impl From<u32> for AllocFlags {
    fn from(raw: u32) -> Self {
        AllocFlags::from_bits_retain(raw)
    }
}

impl From<u32> for FenceFlags {
    fn from(raw: u32) -> Self {
        FenceFlags::from_bits_retain(raw)
    }
}

/// A context's reset status ([`Context::reset_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResetStatus {
    /// Lost, guilty (empty: usable).
    pub flags: ResetFlags,
    /// Why the device faulted it (guilty contexts, when the device says).
    pub fault_reason: Option<FaultReason>,
    /// The faulting GPU VA (0 when not known).
    pub fault_address: u64,
}

impl ResetStatus {
    /// Whether the context was lost.
    pub fn is_lost(&self) -> bool {
        self.flags.contains(ResetFlags::LOST)
    }
}

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
    /// [`crate::Error::Invalid`] for a zero size; [`crate::Error::Ioctl`] `ALLOC`: `EINVAL` above
    /// `Caps::raw.max_allocation` (4 MiB) or unknown flags, `ENOSPC` past 1024 objects of this
    /// process (across its device files) or out of GPU VA, `ENOMEM`; [`crate::Error::Map`].
    pub fn alloc(&self, size: u64, flags: impl Into<AllocFlags>) -> Result<Allocation> {
        Allocation::new(self.inner.clone(), size, flags.into().bits())
    }

    /// Creates a hardware queue (user-mode with ring, ring control and doorbell, or
    /// kernel-mode) as `desc` says.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a bad `desc`; [`crate::Error::Ioctl`] (`ALLOC`, `CREATE_QUEUE`,
    /// `CREATE_DOORBELL`): `EIO` from `CREATE_QUEUE` when the context was lost to a GPU fault
    /// (create a new context; [`Context::reset_status`] says why), `EINVAL` for an engine
    /// without user-mode submission or a user-mode queue without native fences, `EOPNOTSUPP`
    /// for a user-mode queue while native fences are off, `ENOSPC` past 256 queues of one
    /// device file; or [`crate::Error::Map`].
    pub fn create_queue(&self, desc: &QueueDesc) -> Result<Queue> {
        Queue::new(self.inner.clone(), desc)
    }

    /// Creates a native fence of `kind` (`flags`: `uapi::FENCE_*`) with CurrentValue `initial`.
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] `CREATE_FENCE`: `EINVAL` for a kind the device lacks, unknown
    /// flags or a shareable INTRA_GPU fence (NF-17; only a `FENCE_SHAREABLE` DEFAULT fence can
    /// be exported), `EOPNOTSUPP` for a native fence while native fences are off, `ENOSPC` past
    /// 64 INTRA_GPU fences or 1024 objects of this process (across its device files), `ERANGE` for an initial value
    /// above `u32::MAX` of a monitored fence of the 32-bit mode; [`crate::Error::Map`].
    pub fn create_fence(&self, kind: FenceKind, flags: impl Into<FenceFlags>, initial: u64) -> Result<Fence> {
        Fence::new(self.inner.clone(), kind, flags.into().bits(), initial)
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

    /// Whether the context is usable, or was lost and why (`CONTEXT_STATUS`, like
    /// `amdgpu_cs_query_reset_state2`): after [`crate::Error::ContextLost`] or a wait's
    /// `ECANCELED`, this says whether the context's own work caused it, and the fault.
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] (`CONTEXT_STATUS`).
    pub fn reset_status(&self) -> Result<ResetStatus> {
        let mut arg = uapi_sync::ContextStatus { context: self.handle(), ..Default::default() };
        self.inner.file().ioctl(sys::CONTEXT_STATUS, &mut arg)?;
        Ok(ResetStatus {
            flags: ResetFlags::from_bits_retain(arg.flags),
            fault_reason: FaultReason::try_from(arg.fault_reason).ok(),
            fault_address: arg.fault_address,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_flags_convert_with_unknown_bits_kept() {
        assert_eq!(FenceFlags::from(uapi::FENCE_SHAREABLE), FenceFlags::SHAREABLE);
        assert_eq!(FenceFlags::from(0), FenceFlags::empty());
        assert_eq!(AllocFlags::from(1 << 9).bits(), 1 << 9, "the module refuses unknown bits, not the library");
        assert_eq!((AllocFlags::GPU_READ_ONLY).bits(), uapi::ALLOC_GPU_READ_ONLY);
    }
}

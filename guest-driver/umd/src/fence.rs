//! Native fences (`CREATE_FENCE`): a CurrentValue the GPU signals and waits on at
//! [`Fence::gpu_va`], the CPU reads through a read-only mapping, and the CPU signals and waits
//! on through the module — blocking ([`Fence::wait`]) or pollable ([`Fence::event`], an eventfd
//! the module signals). A `FENCE_SHAREABLE` DEFAULT fence can be exported as a file descriptor
//! ([`Fence::export`]) that another process, having received it (e.g. over a UNIX socket),
//! imports into one of its contexts ([`crate::Context::import_fence`]).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use belfry_abi::ids::FenceHandle;
use belfry_abi::uapi;
use belfry_abi::uapi_debug;
use belfry_abi::uapi_sync::WaitFenceEntry;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::handle::{ContextId, ContextInner, DeviceFile, OwnedHandle};
use crate::sys::{self, Access, Mapping};
use crate::wait::WaitPoint;

/// Fence kinds of `CREATE_FENCE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FenceKind {
    /// Both values in system memory; every CPU and GPU operation.
    Default,
    /// Both values in device memory; GPU operations only (the CPU has no mapping, and CPU
    /// signal and wait are refused with `EPERM`).
    IntraGpu,
    /// Monitored (WDDM 2.0) fence: one value, read-only to the process and read/write at
    /// [`Fence::gpu_va`]; signaled by the CPU or by `MONITORED_FENCE_SIGNAL`, each engine write
    /// raising an interrupt that re-checks the CPU waits.
    Monitored,
}

impl FenceKind {
    fn raw(self) -> u32 {
        match self {
            FenceKind::Default => uapi::FENCE_KIND_DEFAULT,
            FenceKind::IntraGpu => uapi::FENCE_KIND_INTRA_GPU,
            FenceKind::Monitored => uapi::FENCE_KIND_MONITORED,
        }
    }
}

/// A native fence; destroyed on drop.
///
/// Drop order: its last CurrentValue is recorded for its [`FenceEvent`]s (which then know the
/// fence gone), then (field order) the CPU mapping is unmapped, then `DESTROY_FENCE` (which
/// makes the pending pollable waits readable), then the context reference is released.
#[derive(Debug)]
pub struct Fence {
    map: Option<Mapping>,
    handle: OwnedHandle,
    ctx: Arc<ContextInner>,
    kind: FenceKind,
    gpu_va: u64,
    page_offset: usize,
    /// The global handle, once [`Fence::log_handle`] asked the module.
    log_handle: OnceLock<FenceHandle>,
    /// What its pollable waits learn when it is destroyed.
    life: Arc<FenceLife>,
    /// The highest value a GPU signal of it submitted through this handle names.
    queued: SignalFloor,
}

/// The highest value the library submitted a GPU signal of one fence for, shared by the
/// [`Fence`] and the [`crate::CommandBuffer`]s that signal it (which raise it once their queue
/// accepted them). Two floors are equal only if they are the same fence's.
#[derive(Clone, Debug, Default)]
pub(crate) struct SignalFloor(Arc<AtomicU64>);

impl SignalFloor {
    /// The highest value submitted so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// A signal to `value` was submitted.
    pub(crate) fn raise(&self, value: u64) {
        self.0.fetch_max(value, Ordering::AcqRel);
    }
}

impl PartialEq for SignalFloor {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SignalFloor {}

/// A fence's end, as its [`FenceEvent`]s see it: whether it was destroyed, and its last
/// CurrentValue then.
#[derive(Debug, Default)]
struct FenceLife {
    /// Set (after `last`) when the fence is dropped.
    gone: AtomicBool,
    /// CurrentValue when it was dropped.
    last: AtomicU64,
}

impl Drop for Fence {
    fn drop(&mut self) {
        // Before DESTROY_FENCE (a field, dropped after this), which signals the pending
        // pollable waits: they must find the fence gone when they wake.
        self.life.last.store(self.value().unwrap_or(0), Ordering::Relaxed);
        self.life.gone.store(true, Ordering::Release);
    }
}

impl Fence {
    pub(crate) fn new(ctx: Arc<ContextInner>, kind: FenceKind, flags: u32, initial: u64) -> Result<Fence> {
        let file = ctx.file().clone();
        let mut arg = uapi::CreateFence {
            context: ctx.handle.get(),
            kind: kind.raw(),
            flags,
            initial_value: initial,
            ..Default::default()
        };
        file.ioctl(sys::CREATE_FENCE, &mut arg)?;
        let handle = OwnedHandle::new(file.clone(), arg.handle, sys::DESTROY_FENCE);
        let page_offset = usize::try_from(arg.page_offset).map_err(|_| Error::Invalid("fence page offset"))?;
        let map = if arg.mmap_offset == 0 {
            None
        } else {
            Some(
                Mapping::new(file.fd(), arg.mmap_offset, page_offset + 8, Access::ReadOnly)
                    .map_err(|source| Error::Map { what: "fence CurrentValue page", source })?,
            )
        };
        Ok(Fence {
            map,
            handle,
            ctx,
            kind,
            gpu_va: arg.gpu_va,
            page_offset,
            log_handle: OnceLock::new(),
            life: Arc::default(),
            queued: SignalFloor::default(),
        })
    }

    /// Opens a local handle, in `ctx`, on the shared fence an exported `fd` names.
    pub(crate) fn import(ctx: Arc<ContextInner>, fd: BorrowedFd<'_>) -> Result<Fence> {
        let file = ctx.file().clone();
        let mut arg = uapi::ImportFence { fd: fd.as_raw_fd(), context: ctx.handle.get(), ..Default::default() };
        file.ioctl(sys::IMPORT_FENCE, &mut arg)?;
        let handle = OwnedHandle::new(file.clone(), arg.handle, sys::DESTROY_FENCE);
        let page_offset = usize::try_from(arg.page_offset).map_err(|_| Error::Invalid("fence page offset"))?;
        let map = Mapping::new(file.fd(), arg.mmap_offset, page_offset + 8, Access::ReadOnly)
            .map_err(|source| Error::Map { what: "shared fence CurrentValue page", source })?;
        // A cross-adapter fence opens as a monitored fence on a device without native fences
        // (XAD-10) and as a native one on a native device (XAD-11); a shared fence is DEFAULT.
        let mut xad = uapi_debug::XadInfo { handle: arg.handle, ..Default::default() };
        let kind = match file.ioctl(sys::XAD_INFO, &mut xad) {
            Ok(()) if xad.native == 0 => FenceKind::Monitored,
            _ => FenceKind::Default,
        };
        Ok(Fence {
            map: Some(map),
            handle,
            ctx,
            kind,
            gpu_va: arg.gpu_va,
            page_offset,
            log_handle: OnceLock::new(),
            life: Arc::default(),
            queued: SignalFloor::default(),
        })
    }

    /// A file descriptor naming this (`FENCE_SHAREABLE` DEFAULT) fence's global object, to pass
    /// to another process; it keeps the fence alive until closed.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`EXPORT_FENCE`; `EINVAL` for a fence that is not shareable).
    pub fn export(&self) -> Result<OwnedFd> {
        sys::export_fence(self.handle.file().fd(), self.handle())
            .map_err(|error| Error::Ioctl { name: sys::EXPORT_FENCE.name(), error })
    }

    /// A `sync_file` (the Linux kernel's fence file: `poll()`able, mergeable with
    /// `SYNC_IOC_MERGE`, accepted as an in-fence by other drivers) that signals once this
    /// MONITORED fence reaches `value` (at once if it has). Its fence signals with an error
    /// instead — `SYNC_IOC_FILE_INFO` reports it as the status — when nothing can signal it
    /// any more: `ECANCELED` once this fence is destroyed or the device file closed, `ENODEV`
    /// once the device is unbound, `ETIMEDOUT` once pending for
    /// [`belfry_abi::uapi_sync::SYNC_FILE_TIMEOUT_MS`] (10 s: a kernel fence signals in bounded
    /// time). Whether the kernel can do it at all is
    /// [`crate::Caps::sync_file_export`].
    ///
    /// Only monitored fences: their signals all go through the kernel (kernel-mode queues and
    /// CPU signals). A native fence may be signalled by a user-mode queue's work that no kernel
    /// code sees or bounds, and a kernel fence must signal in bounded time without depending
    /// on userspace (Documentation/driver-api/dma-buf.rst, "Indefinite DMA Fences"): it is
    /// refused with `EPERM`.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`EXPORT_SYNC_FILE`): `EOPNOTSUPP` when the guest kernel has no
    /// `sync_file` (`CONFIG_SYNC_FILE` off), `EPERM` for a native fence, `ENOSPC` with 256
    /// exports of this process pending, `ERANGE` for a 32-bit-mode value outside the window.
    pub fn export_sync_file(&self, value: u64) -> Result<OwnedFd> {
        sys::export_sync_file(self.handle.file().fd(), self.handle(), value)
            .map_err(|error| Error::Ioctl { name: sys::EXPORT_SYNC_FILE.name(), error })
    }

    /// A pollable CPU wait: an eventfd that becomes readable once CurrentValue ≥ `value`
    /// (at once if it already is), or once the fence is destroyed (then [`FenceEvent::wait`]
    /// reports [`Error::FenceGone`]), or once the device goes (unbound, lost or reset: `ENODEV`). Registering it does not block. Dropping the
    /// [`FenceEvent`] withdraws the wait (`CANCEL_FENCE_EVENTFD`): it stops counting in the
    /// fence's MonitoredValue and in the per-process limit.
    ///
    /// # Errors
    /// [`Error::TooManyFenceEvents`] when this process already has
    /// [`uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS`] pollable waits pending; [`Error::Ioctl`]
    /// (`WAIT_FENCE_EVENTFD`: `EPERM` for INTRA_GPU), or creating the eventfd.
    pub fn event(&self, value: u64) -> Result<FenceEvent> {
        let fd = sys::eventfd().map_err(|error| Error::Ioctl { name: "eventfd", error })?;
        self.notify(value, fd.as_fd())?;
        let wrap32 = self.kind == FenceKind::Monitored && self.ctx.caps.bits().no_64bit_atomics();
        Ok(FenceEvent {
            fd,
            file: self.handle.file().clone(),
            handle: self.handle(),
            value,
            wrap32,
            life: self.life.clone(),
        })
    }

    /// Registers eventfd `eventfd` (the caller's) to be signaled once CurrentValue ≥ `value`
    /// (or the fence is destroyed). The wait stays registered until then, until
    /// [`Fence::cancel_notify`] withdraws it, or until the device file is closed.
    ///
    /// # Errors
    /// [`Error::TooManyFenceEvents`] past the per-process limit; [`Error::Ioctl`]
    /// (`WAIT_FENCE_EVENTFD`: `EINVAL` for an fd that is not an eventfd).
    pub fn notify(&self, value: u64, eventfd: BorrowedFd<'_>) -> Result<()> {
        let mut arg = uapi::FenceEventWait { handle: self.handle(), eventfd: eventfd.as_raw_fd(), value };
        match self.handle.file().ioctl(sys::WAIT_FENCE_EVENTFD, &mut arg) {
            Err(e) if e.errno() == Some(libc::ENOSPC) => {
                Err(Error::TooManyFenceEvents { limit: uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS })
            }
            r => r,
        }
    }

    /// Withdraws the waits [`Fence::notify`] registered for `value` with `eventfd` and that
    /// are still pending; whether there was one (`false`: it was signaled already).
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`CANCEL_FENCE_EVENTFD`: `EINVAL` for an fd that is not an eventfd).
    pub fn cancel_notify(&self, value: u64, eventfd: BorrowedFd<'_>) -> Result<bool> {
        cancel(self.handle.file(), self.handle(), value, eventfd)
    }

    /// The module's handle.
    pub fn handle(&self) -> u32 {
        self.handle.get()
    }

    /// Its kind.
    pub fn kind(&self) -> FenceKind {
        self.kind
    }

    /// The context it belongs to.
    pub(crate) fn context_id(&self) -> ContextId {
        self.ctx.id
    }

    /// `Ok` if this fence belongs to the context `ctx` (its GPU VA is valid there), else
    /// [`Error::ForeignFence`].
    pub(crate) fn check_context(&self, ctx: ContextId) -> Result<()> {
        if self.ctx.id == ctx {
            Ok(())
        } else {
            Err(Error::ForeignFence { handle: self.handle() })
        }
    }

    /// Refuses a GPU signal to `value` that would move this fence backwards as far as the
    /// library knows: below its CurrentValue (read now) or below a signal it already submitted
    /// through this handle. In the 32-bit mode of monitored fences (values wrap) nothing is
    /// refused here; the device refuses and counts what it finds (see the crate README).
    ///
    /// # Errors
    /// [`Error::FenceValueBackwards`].
    pub(crate) fn check_forward(&self, value: u64) -> Result<()> {
        if self.kind == FenceKind::Monitored && self.ctx.caps.bits().no_64bit_atomics() {
            return Ok(());
        }
        let floor = self.value().unwrap_or(0).max(self.queued.get());
        if value < floor {
            return Err(Error::FenceValueBackwards { handle: self.handle(), value, floor });
        }
        Ok(())
    }

    /// The floor of the GPU signals submitted for this fence ([`Fence::check_forward`]).
    pub(crate) fn signal_floor(&self) -> &SignalFloor {
        &self.queued
    }

    /// GPU VA of CurrentValue in its own context's address space (for signal and wait
    /// packets); it means nothing, or another object, in any other context.
    pub fn gpu_va(&self) -> u64 {
        self.gpu_va
    }

    /// Byte offset of CurrentValue in its mapped page (non-shared fences are packed).
    pub fn page_offset(&self) -> usize {
        self.page_offset
    }

    /// CurrentValue, read through the read-only CPU mapping; `None` for an INTRA_GPU fence.
    pub fn value(&self) -> Option<u64> {
        self.map.as_ref().map(|m| m.load_u64(self.page_offset, core::sync::atomic::Ordering::Acquire))
    }

    /// The address of CurrentValue in this process (read-only; a store faults). `None` for an
    /// INTRA_GPU fence. For tests that check the mapping's protection.
    pub fn cpu_address(&self) -> Option<usize> {
        self.map.as_ref().map(|m| m.address() + self.page_offset)
    }

    /// CPU signal: CurrentValue becomes `value` and the waits it satisfies complete.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`SIGNAL_FENCE`; `EPERM` for INTRA_GPU).
    pub fn signal(&self, value: u64) -> Result<()> {
        let mut arg = uapi::FenceOp { handle: self.handle(), value, ..Default::default() };
        self.handle.file().ioctl(sys::SIGNAL_FENCE, &mut arg)
    }

    /// Blocking CPU wait until CurrentValue ≥ `value`, at most `timeout` (zero: do not sleep;
    /// `Duration::MAX`: no limit): [`Fence::wait_until`] `Deadline::after(timeout)`.
    ///
    /// # Errors
    /// As [`Fence::wait_until`].
    pub fn wait(&self, value: u64, timeout: Duration) -> Result<()> {
        self.wait_until(value, Deadline::after(timeout))
    }

    /// Blocking CPU wait until CurrentValue ≥ `value` or `deadline` (a point of
    /// `CLOCK_MONOTONIC`, or [`Deadline::FOREVER`]). A signal delivered to the thread does not
    /// end it: the wait goes on with the same deadline.
    ///
    /// # Errors
    /// [`Error::ContextLost`] when a GPU signal that would have reached `value` was in the
    /// unexecuted work of a context lost to a GPU fault or hang (the module ends the wait as
    /// soon as it has processed the loss; a wait for a value no lost work named goes on);
    /// [`Error::Ioctl`] `WAIT_FENCES`: `ETIMEDOUT` once the deadline passed, `EPERM` for
    /// INTRA_GPU, `ERANGE` for a 32-bit-mode monitored value outside the window.
    pub fn wait_until(&self, value: u64, deadline: Deadline) -> Result<()> {
        match self.handle.file().wait_fences(&[self.point(value).entry], true, deadline) {
            // The module's answer for a value that only lost work was going to signal.
            Err(e) if e.errno() == Some(libc::ECANCELED) => Err(Error::ContextLost { value }),
            r => r.map(|_| ()),
        }
    }

    /// This fence reaching `value`, for [`crate::wait_any`] and [`crate::wait_all`].
    pub fn point(&self, value: u64) -> WaitPoint<'_> {
        WaitPoint { file: self.handle.file(), entry: WaitFenceEntry { handle: self.handle(), flags: 0, value } }
    }

    /// The handle log entries record for this fence: its global handle, the one the module's
    /// CPU waits are keyed by, so a per-queue interrupt record releases them from the log entry
    /// (asked once with `FENCE_INFO`, then cached).
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn log_handle(&self) -> Result<FenceHandle> {
        if let Some(&h) = self.log_handle.get() {
            return Ok(h);
        }
        let h = FenceHandle::new(self.info()?.global_handle);
        Ok(*self.log_handle.get_or_init(|| h))
    }

    /// How this cross-adapter fence is open on its device (`XAD_INFO`): native or monitored,
    /// the one CurrentValue page's bus address, this device's MonitoredValue, the devices it is
    /// open on, notifications received and changes propagated.
    ///
    /// # Errors
    /// [`Error::Ioctl`] (`EINVAL` for a fence that is not cross-adapter).
    pub fn xad_info(&self) -> Result<uapi_debug::XadInfo> {
        let mut arg = uapi_debug::XadInfo { handle: self.handle(), ..Default::default() };
        self.handle.file().ioctl(sys::XAD_INFO, &mut arg)?;
        Ok(arg)
    }

    /// The module's view (`FENCE_INFO`): CurrentValue, MonitoredValue, pending CPU waits.
    ///
    /// # Errors
    /// [`Error::Ioctl`].
    pub fn info(&self) -> Result<uapi_debug::FenceInfo> {
        let mut arg = uapi_debug::FenceInfo { handle: self.handle(), ..Default::default() };
        self.handle.file().ioctl(sys::FENCE_INFO, &mut arg)?;
        Ok(arg)
    }
}

/// `CANCEL_FENCE_EVENTFD` of fence `handle`'s wait for `value` with `eventfd`; whether one was
/// pending.
fn cancel(file: &DeviceFile, handle: u32, value: u64, eventfd: BorrowedFd<'_>) -> Result<bool> {
    let mut arg = uapi::FenceEventWait { handle, eventfd: eventfd.as_raw_fd(), value };
    match file.ioctl(sys::CANCEL_FENCE_EVENTFD, &mut arg) {
        Ok(()) => Ok(true),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A pollable fence wait ([`Fence::event`]): an eventfd, usable with `poll`/`epoll` through
/// [`AsFd`]. It becomes readable when the fence reaches the value or is destroyed; dropping it
/// withdraws the wait.
#[derive(Debug)]
pub struct FenceEvent {
    fd: OwnedFd,
    file: Arc<DeviceFile>,
    handle: u32,
    value: u64,
    /// A monitored fence of the 32-bit mode: values compare across wraparound.
    wrap32: bool,
    life: Arc<FenceLife>,
}

impl FenceEvent {
    /// Whether the fence has reached the value (a `poll` that does not block).
    ///
    /// # Errors
    /// As [`FenceEvent::wait`].
    pub fn is_ready(&self) -> Result<bool> {
        self.wait(Duration::ZERO)
    }

    /// Polls until the fence reaches the value or `timeout` passes; whether it did.
    ///
    /// # Errors
    /// [`Error::FenceGone`] when the fence was destroyed before reaching the value (the
    /// eventfd is then readable, and stays so until [`FenceEvent::take`]);
    /// [`Error::ContextLost`] when a GPU signal that would have reached the value was in the
    /// unexecuted work of a context lost to a GPU fault or hang (the module makes the eventfd
    /// readable as soon as it has processed the loss, and withdraws the wait; a wait for a
    /// value no lost work named goes on); [`Error::Ioctl`] `WAIT_FENCES` with `ENODEV` when the
    /// device went before the value was reached — unbound, lost, or reset through its PCI
    /// function (the module makes the eventfd readable then, as a blocking wait ends with
    /// `ENODEV`); `poll`'s errno, as [`Error::Ioctl`] named `poll`.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        self.wait_until(Deadline::after(timeout))
    }

    /// Polls until the fence reaches the value or `deadline` passes; whether it did. A signal
    /// that interrupts `poll` does not extend the wait: it polls again for the time left.
    ///
    /// # Errors
    /// As [`FenceEvent::wait`].
    pub fn wait_until(&self, deadline: Deadline) -> Result<bool> {
        let ready = sys::poll_in(self.fd.as_fd(), deadline).map_err(|error| Error::Ioctl { name: "poll", error })?;
        if !ready {
            return Ok(false);
        }
        if self.gone() {
            return Err(Error::FenceGone { handle: self.handle, value: self.value });
        }
        self.ended()?;
        Ok(true)
    }

    /// Whether the fence was destroyed before reaching the value.
    fn gone(&self) -> bool {
        self.life.gone.load(Ordering::Acquire) && !self.reached(self.life.last.load(Ordering::Relaxed))
    }

    /// Why a ready wait ended, as the module answers a `WAIT_FENCES` that does not sleep:
    /// only lost work was going to signal the value (`ECANCELED`: [`Error::ContextLost`]), or
    /// the device is gone (`ENODEV`, the blocking wait's answer); reached, or any other answer,
    /// is `Ok`.
    fn ended(&self) -> Result<()> {
        let entry = WaitFenceEntry { handle: self.handle, flags: 0, value: self.value };
        match self.file.wait_fences(&[entry], true, Deadline::after(Duration::ZERO)) {
            Err(e) if e.errno() == Some(libc::ECANCELED) => Err(Error::ContextLost { value: self.value }),
            Err(e) if e.errno() == Some(libc::ENODEV) => Err(e),
            _ => Ok(()),
        }
    }

    /// The value waited for.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// Whether CurrentValue `current` satisfies the wait.
    fn reached(&self, current: u64) -> bool {
        if self.wrap32 {
            // CAST: the 32-bit mode compares the low halves, truncation intended.
            belfry_abi::fence::is_signaled32(current as u32, self.value as u32)
        } else {
            current >= self.value
        }
    }

    /// Reads the eventfd's counter (resetting it): how many signals arrived since the last read.
    ///
    /// # Errors
    /// `read`'s errno, as [`Error::Ioctl`] named `read`.
    pub fn take(&self) -> Result<u64> {
        sys::eventfd_take(self.fd.as_fd()).map_err(|error| Error::Ioctl { name: "read", error })
    }
}

impl Drop for FenceEvent {
    fn drop(&mut self) {
        // A destroyed fence took its waits with it.
        if self.life.gone.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = cancel(&self.file, self.handle, self.value, self.fd.as_fd()) {
            log::warn!(
                "{}: withdrawing the wait of fence {} for {}: {e}",
                self.file.path().display(),
                self.handle,
                self.value
            );
        }
    }
}

impl AsFd for FenceEvent {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

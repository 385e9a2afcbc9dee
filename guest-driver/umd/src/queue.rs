//! Hardware queues: the objects behind one submission stream and the real [`QueueOps`].
//!
//! A user-mode queue owns, in creation order (RING-01): its command-buffer slots, ring and
//! ring-control allocations, the module's queue (with its progress fence page) and a doorbell
//! (doorbell page, status page, LastQueuedValue page). A kernel-mode queue owns only the slots
//! and the module's queue. Drop runs in reverse: the doorbell's pages are unmapped and the
//! doorbell destroyed (DB-18), then the progress page and the queue, and only then the ring
//! allocations (RING-02: the library owns their lifetime; the module holds its own reference
//! while a doorbell uses them, RING-03).
//!
//! The doorbell starts disconnected (DB-08): the first submission rings the dummy page, reads
//! DISCONNECTED_RETRY and connects, as the submission sequence prescribes, unless
//! [`Queue::connect_doorbell`] was called first.

use core::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use belfry_abi::ids::{EngineId, FenceHandle};
use belfry_abi::ring::{self, RingEntry, CMDBUF_MAX_BYTES, WRITE_INDEX_OFFSET};
use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_abi::uapi_sync::{self, WaitFenceEntry};

use crate::cmdbuf::CommandBuffer;
use crate::dbpages::DoorbellPages;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::fence::{Fence, FenceKind};
use crate::handle::{ContextInner, OwnedHandle};
use crate::memory::Allocation;
use crate::submit::{QueueMode, QueueOps, SubmitStats, Submitter};
use crate::sys::{self, Access, Mapping};
use crate::wait::WaitPoint;

/// What a queue is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueDesc {
    /// Engine (0 compute, 1 copy).
    pub engine: EngineId,
    /// Priority 0..=3.
    pub priority: u32,
    /// User-mode (doorbell) or kernel-mode (`SUBMIT`) submission.
    pub mode: QueueMode,
    /// Ring entries, which is also the number of command-buffer slots (a power of two in
    /// `ring::MIN_ENTRIES..=ring::MAX_ENTRIES`).
    pub ring_entries: u32,
    /// Bytes per command-buffer slot (a multiple of 4, at most `CMDBUF_MAX_BYTES`); a
    /// user-mode submission also needs 32 bytes for the closing progress signal.
    pub slot_bytes: u32,
    /// Reconnects per submission before [`Error::RetryLimit`].
    pub retry_limit: u32,
    /// Longest wait for a ring slot to free up.
    pub slot_timeout: Duration,
    /// User-mode queues: the ring and ring control live in VRAM (`QUEUE_RING_IN_VRAM`; the
    /// module makes them, at most `VRAM_RING_MAX_ENTRIES` entries). Every store to them is then
    /// a trapped BAR access under QEMU, until D3 moves them to system memory and back.
    pub ring_in_vram: bool,
}

impl Default for QueueDesc {
    fn default() -> Self {
        Self {
            engine: EngineId::new(0),
            priority: 1,
            mode: QueueMode::UserMode,
            ring_entries: 16,
            slot_bytes: 4096,
            retry_limit: 256,
            slot_timeout: Duration::from_secs(10),
            ring_in_vram: false,
        }
    }
}

/// Builders: a `QueueDesc` is made from [`QueueDesc::default`] and these (the struct is
/// `#[non_exhaustive]`: new fields come with defaults that keep a program's meaning).
impl QueueDesc {
    /// With engine `engine`.
    #[must_use]
    pub fn with_engine(self, engine: EngineId) -> Self {
        Self { engine, ..self }
    }

    /// With priority `priority` (0..=3).
    #[must_use]
    pub fn with_priority(self, priority: u32) -> Self {
        Self { priority, ..self }
    }

    /// With submission mode `mode`.
    #[must_use]
    pub fn with_mode(self, mode: QueueMode) -> Self {
        Self { mode, ..self }
    }

    /// With `ring_entries` ring entries (and command-buffer slots).
    #[must_use]
    pub fn with_ring_entries(self, ring_entries: u32) -> Self {
        Self { ring_entries, ..self }
    }

    /// With `slot_bytes` bytes per command-buffer slot.
    #[must_use]
    pub fn with_slot_bytes(self, slot_bytes: u32) -> Self {
        Self { slot_bytes, ..self }
    }

    /// With at most `retry_limit` reconnects per submission.
    #[must_use]
    pub fn with_retry_limit(self, retry_limit: u32) -> Self {
        Self { retry_limit, ..self }
    }

    /// With `slot_timeout` as the longest wait for a ring slot.
    #[must_use]
    pub fn with_slot_timeout(self, slot_timeout: Duration) -> Self {
        Self { slot_timeout, ..self }
    }

    /// With the ring and ring control in VRAM (user-mode queues) or not.
    #[must_use]
    pub fn with_ring_in_vram(self, ring_in_vram: bool) -> Self {
        Self { ring_in_vram, ..self }
    }
}

impl QueueDesc {
    fn validate(&self) -> Result<()> {
        if !ring::is_valid_size(self.ring_entries) {
            return Err(Error::Invalid("ring entries not a power of two in MIN_ENTRIES..=MAX_ENTRIES"));
        }
        if !self.slot_bytes.is_multiple_of(4) || self.slot_bytes < 64 || self.slot_bytes > CMDBUF_MAX_BYTES {
            return Err(Error::Invalid("slot bytes not a multiple of 4 in 64..=CMDBUF_MAX_BYTES"));
        }
        if self.ring_in_vram && self.ring_entries > uapi::VRAM_RING_MAX_ENTRIES {
            return Err(Error::Invalid("a ring in VRAM has at most VRAM_RING_MAX_ENTRIES entries"));
        }
        Ok(())
    }
}

/// A `WAIT_FENCES` entry for `hw`'s progress fence reaching `value`.
fn progress_entry(hw: &HwQueue, value: u64) -> WaitFenceEntry {
    WaitFenceEntry { handle: hw.queue.get(), flags: uapi_sync::WAIT_ENTRY_PROGRESS, value }
}

/// A doorbell's module object and its three mappings.
///
/// Drop order (field order): the pages are unmapped, then `DESTROY_DOORBELL`.
#[derive(Debug)]
struct Doorbell {
    page: Mapping,
    status: Mapping,
    last_queued: Mapping,
    handle: OwnedHandle,
    /// The module's mmap offsets of the doorbell page and the status page.
    page_offset: u64,
    status_offset: u64,
}

/// The ring or ring control of a user-mode queue: an allocation of the library, or (a ring in
/// VRAM) a mapping of the module's allocation, which the module moves with it.
#[derive(Debug)]
enum RingMem {
    Alloc(Allocation),
    Vram(Mapping),
}

impl RingMem {
    fn mapping(&self) -> &Mapping {
        match self {
            RingMem::Alloc(a) => a.mapping(),
            RingMem::Vram(m) => m,
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        match self {
            RingMem::Alloc(a) => a.write(offset, data),
            RingMem::Vram(m) => {
                let at = usize::try_from(offset).map_err(|_| Error::Invalid("ring offset"))?;
                m.write_bytes(at, data);
                Ok(())
            }
        }
    }
}

/// The ring and ring control of a user-mode queue.
#[derive(Debug)]
struct Ring {
    entries: RingMem,
    control: RingMem,
}

/// One hardware queue as the module knows it.
///
/// Drop order (field order): doorbell, progress page, `DESTROY_QUEUE`, ring allocations,
/// command-buffer slots.
#[derive(Debug)]
struct HwQueue {
    doorbell: Option<Doorbell>,
    progress: Mapping,
    queue: OwnedHandle,
    ring: Option<Ring>,
    slots: Allocation,
    progress_fence_va: u64,
    progress_log_handle: FenceHandle,
    mode: QueueMode,
}

impl HwQueue {
    fn create(ctx: &Arc<ContextInner>, desc: &QueueDesc, mode: QueueMode) -> Result<HwQueue> {
        let alloc = |size, flags| Allocation::new(ctx.clone(), size, flags);
        let file = ctx.file().clone();
        let slot_bytes = u64::from(desc.slot_bytes);
        let entries = u64::from(desc.ring_entries);
        let slots = alloc(entries * slot_bytes, uapi::ALLOC_GPU_READ_ONLY)?;
        let in_vram = mode == QueueMode::UserMode && desc.ring_in_vram;
        let ring = match mode {
            QueueMode::UserMode if !in_vram => {
                let entries = alloc(entries * core::mem::size_of::<RingEntry>() as u64, uapi::ALLOC_GPU_READ_ONLY)?;
                let control = alloc(core::mem::size_of::<ring::RingControl>() as u64, 0)?;
                control.mapping().store_u32(WRITE_INDEX_OFFSET as usize, 0, Ordering::Release);
                Some(Ring { entries: RingMem::Alloc(entries), control: RingMem::Alloc(control) })
            }
            _ => None,
        };
        let handle_of = |m: &RingMem| match m {
            RingMem::Alloc(a) => a.handle(),
            RingMem::Vram(_) => 0,
        };
        let mut flags = if mode == QueueMode::UserMode { uapi::QUEUE_USER_MODE_SUBMISSION } else { 0 };
        if in_vram {
            flags |= uapi::QUEUE_RING_IN_VRAM;
        }
        let mut arg = uapi::CreateQueue {
            context: ctx.handle.get(),
            engine: desc.engine.raw(),
            priority: desc.priority,
            flags,
            ring: ring.as_ref().map_or(0, |r| handle_of(&r.entries)),
            ring_entries: desc.ring_entries,
            ring_control: ring.as_ref().map_or(0, |r| handle_of(&r.control)),
            ..Default::default()
        };
        file.ioctl(sys::CREATE_QUEUE, &mut arg)?;
        let queue = OwnedHandle::new(file.clone(), arg.handle, sys::DESTROY_QUEUE);
        let map = |offset, access, what| {
            Mapping::new(file.fd(), offset, sys::page_size(), access).map_err(|source| Error::Map { what, source })
        };
        // A ring in VRAM: the module's pages, written to zero by the module (write index 0).
        let ring = match ring {
            None if in_vram => Some(Ring {
                entries: RingMem::Vram(map(arg.ring_mmap_offset, Access::ReadWrite, "ring in VRAM")?),
                control: RingMem::Vram(map(arg.ring_control_mmap_offset, Access::ReadWrite, "ring control in VRAM")?),
            }),
            ring => ring,
        };
        let progress = map(arg.progress_mmap_offset, Access::ReadOnly, "progress fence page")?;
        let doorbell = match mode {
            QueueMode::UserMode => {
                let mut db = uapi::CreateDoorbell { queue: queue.get(), ..Default::default() };
                file.ioctl(sys::CREATE_DOORBELL, &mut db)?;
                let handle = OwnedHandle::new(file.clone(), db.handle, sys::DESTROY_DOORBELL);
                Some(Doorbell {
                    page: map(db.doorbell_offset, Access::ReadWrite, "doorbell page")?,
                    status: map(db.status_offset, Access::ReadOnly, "doorbell status page")?,
                    last_queued: map(db.last_queued_offset, Access::ReadWrite, "LastQueuedValue page")?,
                    handle,
                    page_offset: db.doorbell_offset,
                    status_offset: db.status_offset,
                })
            }
            QueueMode::KernelMode => None,
        };
        log::debug!("queue {}: created ({mode:?}, {})", queue.get(), desc.engine);
        Ok(HwQueue {
            doorbell,
            progress,
            queue,
            ring,
            slots,
            progress_fence_va: arg.progress_fence_va,
            progress_log_handle: FenceHandle::new(arg.progress_log_handle),
            mode,
        })
    }
}

/// A ring entry as the device reads it: `#[repr(C)]` field order, little-endian.
fn ring_entry_bytes(entry: &RingEntry) -> [u8; core::mem::size_of::<RingEntry>()] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&entry.cmdbuf_va.to_le_bytes());
    bytes[8..12].copy_from_slice(&entry.size_bytes.to_le_bytes());
    bytes[12..].copy_from_slice(&entry.flags.to_le_bytes());
    bytes
}

/// The real [`QueueOps`]: ioctls on the device file and stores to the mapped pages.
///
/// Drop order (field order): the hardware queue, then the context reference.
#[derive(Debug)]
struct Backend {
    hw: HwQueue,
    ctx: Arc<ContextInner>,
    desc: QueueDesc,
}

impl Backend {
    fn handle_ioctl(&self, request: sys::Request<uapi::Handle>, handle: u32) -> Result<()> {
        self.ctx.file().ioctl_handle(request, handle)
    }

    fn doorbell(&self) -> Result<&Doorbell> {
        self.hw.doorbell.as_ref().ok_or(Error::Invalid("kernel-mode queues have no doorbell"))
    }

    /// Replaces the current hardware queue; the old one is destroyed after the new one exists.
    fn replace(&mut self, mode: QueueMode) -> Result<()> {
        let new = HwQueue::create(&self.ctx, &self.desc, mode)?;
        log::warn!("queue {}: replaced by {mode:?} queue {}", self.hw.queue.get(), new.queue.get());
        self.hw = new;
        Ok(())
    }
}

impl QueueOps for Backend {
    fn mode(&self) -> QueueMode {
        self.hw.mode
    }

    fn verbose_log(&self) -> bool {
        self.ctx.file().verbose_log()
    }

    fn slots(&self) -> u32 {
        self.desc.ring_entries
    }

    fn slot_bytes(&self) -> usize {
        self.desc.slot_bytes as usize
    }

    fn progress_fence_va(&self) -> u64 {
        self.hw.progress_fence_va
    }

    fn progress_log_handle(&self) -> FenceHandle {
        self.hw.progress_log_handle
    }

    fn completed(&self) -> u64 {
        self.hw.progress.load_u64(0, Ordering::Acquire)
    }

    fn wait_progress(&mut self, value: u64, timeout: Duration) -> Result<()> {
        let entry = progress_entry(&self.hw, value);
        // A signal does not end it: called again with the same deadline (deadline.rs).
        match self.ctx.file().wait_fences(&[entry], true, Deadline::after(timeout)) {
            Err(e) if e.errno() == Some(libc::ETIMEDOUT) => Err(Error::Timeout { value }),
            // The module's answer for work of a context lost to a GPU fault.
            Err(e) if e.errno() == Some(libc::ECANCELED) => Err(Error::ContextLost { value }),
            Err(e) => Err(e),
            Ok(_) if self.completed() >= value => Ok(()),
            Ok(_) => Err(Error::Timeout { value }),
        }
    }

    fn write_cmdbuf(&mut self, slot: u32, bytes: &[u8]) -> Result<u64> {
        let offset = u64::from(slot) * u64::from(self.desc.slot_bytes);
        self.hw.slots.write(offset, bytes)?;
        self.hw.slots.va_at(offset)
    }

    fn publish_last_queued(&mut self, value: u64) {
        if let Some(db) = &self.hw.doorbell {
            db.last_queued.store_u64(0, value, Ordering::Release);
        }
    }

    fn write_ring_entry(&mut self, slot: u32, entry: RingEntry) {
        if let Some(ring) = &mut self.hw.ring {
            let offset = u64::from(slot) * core::mem::size_of::<RingEntry>() as u64;
            if let Err(e) = ring.entries.write(offset, &ring_entry_bytes(&entry)) {
                log::warn!("queue {}: ring entry {slot}: {e}", self.hw.queue.get());
            }
        }
    }

    fn store_write_index(&mut self, index: u32) {
        if let Some(ring) = &self.hw.ring {
            ring.control.mapping().store_u32(WRITE_INDEX_OFFSET as usize, index, Ordering::Release);
        }
    }

    fn ring_doorbell(&mut self, write_index: u32) {
        if let Some(db) = &self.hw.doorbell {
            db.page.ring_doorbell(0, u64::from(write_index));
        }
    }

    fn doorbell_status(&self) -> Result<DoorbellStatus> {
        let db = self.doorbell()?;
        // The doorbell store must be ordered before the status load (store→load).
        fence(Ordering::SeqCst);
        let raw = db.status.load_u32(0, Ordering::Acquire);
        DoorbellStatus::try_from(raw).map_err(|e| Error::UnknownStatus(e.raw))
    }

    fn asleep_after_ring(&self) -> bool {
        let shared = self.ctx.caps.bits().shared_doorbells();
        shared && self.hw.doorbell.as_ref().is_some_and(|db| crate::dbsleep::asleep_after_ring(&db.page))
    }

    fn connect_doorbell(&mut self) -> Result<()> {
        let handle = self.doorbell()?.handle.get();
        self.handle_ioctl(sys::CONNECT_DOORBELL, handle)
    }

    fn notify_work_submission(&mut self) -> Result<()> {
        let handle = self.doorbell()?.handle.get();
        self.handle_ioctl(sys::NOTIFY_WORK, handle)
    }

    fn kernel_submit(&mut self, slot: u32, size: u32, value: u64) -> Result<()> {
        let mut arg = uapi::Submit {
            queue: self.hw.queue.get(),
            cmdbuf: self.hw.slots.handle(),
            offset: slot * self.desc.slot_bytes,
            size,
            progress_value: value,
        };
        let started = Instant::now();
        loop {
            match self.ctx.file().ioctl(sys::SUBMIT, &mut arg) {
                // The module's ring takes two entries per submission (the buffer and the
                // progress signal), so it fills before the slots do: wait for the oldest
                // pending submission and try again. One reading of the progress decides, so
                // the wait is never for this submission itself (it has not been queued).
                Err(e) if e.errno() == Some(libc::EBUSY) => {
                    let done = self.completed();
                    if done.saturating_add(1) < value {
                        self.wait_progress(done + 1, self.desc.slot_timeout)?;
                    } else if started.elapsed() < self.desc.slot_timeout {
                        // Every earlier submission is complete, but the device moves the ring's
                        // read index just after it writes the progress fence: the room
                        // appears a moment later.
                        std::thread::sleep(Duration::from_micros(50));
                    } else {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    fn recreate_user_mode(&mut self) -> Result<()> {
        self.replace(QueueMode::UserMode)
    }

    fn fall_back_to_kernel_mode(&mut self) -> Result<()> {
        self.replace(QueueMode::KernelMode)
    }
}

/// A submission stream: a hardware queue that is replaced, when it is lost, by a new
/// user-mode queue or, failing that, a kernel-mode one (see [`crate::submit`]).
#[derive(Debug)]
pub struct Queue {
    backend: Backend,
    submitter: Submitter,
}

impl Queue {
    /// Creates the allocations, the queue and, for user-mode queues, the doorbell
    /// ([`crate::Context::create_queue`]).
    pub(crate) fn new(ctx: Arc<ContextInner>, desc: &QueueDesc) -> Result<Queue> {
        desc.validate()?;
        let hw = HwQueue::create(&ctx, desc, desc.mode)?;
        Ok(Queue {
            backend: Backend { hw, ctx, desc: *desc },
            submitter: Submitter::new(desc.retry_limit, desc.slot_timeout),
        })
    }

    /// Submits `cmds` and returns the progress value that marks its completion. Its logged
    /// fence packets ([`CommandBuffer::signal_fence`], [`CommandBuffer::wait_fence`]) and the
    /// progress signal closing a user-mode buffer get this queue's next fence-log indices
    /// ([`crate::logslot`]).
    ///
    /// # Errors
    /// [`Error::ForeignFence`] if `cmds` names a fence of another context (nothing is
    /// submitted); [`Error::FenceValueBackwards`] if a signal it names went below one submitted
    /// since it was built (nothing is submitted); else see [`Submitter::submit_logged`].
    pub fn submit(&mut self, cmds: &CommandBuffer) -> Result<u64> {
        cmds.check_fence_context(self.backend.ctx.id)?;
        cmds.check_signals()?;
        let value = self.submitter.submit_logged(&mut self.backend, cmds.as_bytes(), cmds.log_sites())?;
        cmds.note_signals_submitted();
        Ok(value)
    }

    /// Waits until progress value `value` has completed, sleeping in `WAIT_PROGRESS`.
    ///
    /// # Errors
    /// See [`Submitter::wait`].
    pub fn wait(&mut self, value: u64, timeout: Duration) -> Result<()> {
        self.submitter.wait(&mut self.backend, value, timeout)
    }

    /// The current hardware queue's progress fence reaching `value` (a value submitted to it),
    /// for [`crate::wait_any`] and [`crate::wait_all`]; the wait ends with `ECANCELED` once
    /// the queue's context is lost to a GPU fault.
    pub fn progress_point(&self, value: u64) -> WaitPoint<'_> {
        WaitPoint { file: self.backend.ctx.file(), entry: progress_entry(&self.backend.hw, value) }
    }

    /// Highest progress value known complete.
    pub fn completed(&self) -> u64 {
        self.submitter.completed(&self.backend)
    }

    /// Last progress value submitted.
    pub fn last_submitted(&self) -> u64 {
        self.submitter.last_value()
    }

    /// How the current hardware queue receives work (kernel-mode after a fallback).
    pub fn mode(&self) -> QueueMode {
        self.backend.hw.mode
    }

    /// The module's handle of the current hardware queue.
    pub fn handle(&self) -> u32 {
        self.backend.hw.queue.get()
    }

    /// The module's handle of the current doorbell (user-mode queues).
    pub fn doorbell_handle(&self) -> Option<u32> {
        self.backend.hw.doorbell.as_ref().map(|d| d.handle.get())
    }

    /// GPU VA of the current progress fence.
    pub fn progress_fence_va(&self) -> u64 {
        self.backend.hw.progress_fence_va
    }

    /// Global handle of the current progress fence: what its signal-log entries record.
    pub fn progress_log_handle(&self) -> FenceHandle {
        self.backend.hw.progress_log_handle
    }

    /// Rings the doorbell once more with the write index it last published, adding no work
    /// (the device finds nothing new to run): the guest's cost of one ring, for
    /// `belfry-bench`. Nothing happens on a kernel-mode queue.
    pub fn ring_again(&mut self) {
        let index = self
            .backend
            .hw
            .ring
            .as_ref()
            .map(|r| r.control.mapping().load_u32(WRITE_INDEX_OFFSET as usize, Ordering::Acquire));
        if let Some(index) = index {
            self.backend.ring_doorbell(index);
        }
    }

    /// A mapping of its own of the current doorbell's page and status page
    /// ([`DoorbellPages`]), for a caller that reads the status and rings the doorbell itself.
    ///
    /// # Errors
    /// [`Error::Invalid`] on a kernel-mode queue, [`Error::Map`].
    pub fn map_doorbell_pages(&self) -> Result<DoorbellPages> {
        let db = self.backend.doorbell()?;
        DoorbellPages::map(self.backend.ctx.file().fd(), db.page_offset, db.status_offset)
    }

    /// Reads the doorbell status page.
    ///
    /// # Errors
    /// [`Error::Invalid`] on a kernel-mode queue, [`Error::UnknownStatus`].
    pub fn doorbell_status(&self) -> Result<DoorbellStatus> {
        self.backend.doorbell_status()
    }

    /// `CONNECT_DOORBELL` now rather than at the first submission.
    ///
    /// # Errors
    /// [`Error::Invalid`] on a kernel-mode queue, [`Error::Ioctl`].
    pub fn connect_doorbell(&mut self) -> Result<()> {
        self.backend.connect_doorbell()
    }

    /// `NOTIFY_WORK_SUBMISSION`: tells the module new work was queued on this queue, as
    /// [`Queue::submit`] does after ringing whenever the doorbell status reads CONNECTED_NOTIFY.
    ///
    /// # Errors
    /// [`Error::Invalid`] on a kernel-mode queue, [`Error::Ioctl`].
    pub fn notify_work_submission(&mut self) -> Result<()> {
        self.backend.notify_work_submission()
    }

    /// `DISCONNECT_DOORBELL`: asks the module to disconnect the doorbell and publish `status`
    /// (DISCONNECTED_RETRY: the next submission reconnects; DISCONNECTED_ABORT: the queue is
    /// lost and the next submission replaces it), as the OS may on its own (DB-17).
    ///
    /// # Errors
    /// [`Error::Invalid`] on a kernel-mode queue, [`Error::Ioctl`].
    pub fn disconnect_doorbell(&mut self, status: DoorbellStatus) -> Result<()> {
        let handle = self.backend.doorbell()?.handle.get();
        let mut arg = uapi::DisconnectDoorbell { handle, status: status as u32 };
        self.backend.ctx.file().ioctl(sys::DISCONNECT_DOORBELL, &mut arg)
    }

    /// The ring-control read index the device last wrote (user-mode queues).
    pub fn read_index(&self) -> Option<u32> {
        let ring = self.backend.hw.ring.as_ref()?;
        Some(ring.control.mapping().load_u32(ring::READ_INDEX_OFFSET as usize, Ordering::Acquire))
    }

    /// GPU wait: the work submitted after this call runs only once `fence` reaches `value`
    /// (FEN-13, FEN-14). Returns at once. On a kernel-mode queue the module records it
    /// (`QUEUE_WAIT_FENCE`): a `FENCE_WAIT` on its ring for a native fence, later submissions
    /// held on the CPU for a monitored fence (FEN-15). On a user-mode queue a native fence
    /// gets a `FENCE_WAIT` command buffer of its own, logged at the queue's next wait-log index,
    /// with no kernel call; a monitored fence
    /// is refused by the module (`EPERM`, NF-21: user-mode queues cannot use monitored fences).
    ///
    /// # Errors
    /// [`Error::ForeignFence`] for a fence of another context or device file than the queue's
    /// (refused before anything is queued); [`Error::Ioctl`] (`QUEUE_WAIT_FENCE`: `EPERM`,
    /// `ERANGE` outside the 32-bit window), or
    /// those of [`Queue::submit`].
    pub fn wait_fence(&mut self, fence: &Fence, value: u64) -> Result<()> {
        fence.check_context(self.backend.ctx.id)?;
        if self.mode() == QueueMode::UserMode && fence.kind() != FenceKind::Monitored {
            let mut cb = CommandBuffer::new();
            cb.wait_fence(fence, value)?;
            self.submit(&cb)?;
            return Ok(());
        }
        self.queue_fence_op(sys::QUEUE_WAIT_FENCE, fence, value)
    }

    /// GPU signal of `fence` to `value` after the work submitted so far. An engine that writes
    /// fences gets a signal packet in a command buffer (`MONITORED_FENCE_SIGNAL` or
    /// `FENCE_SIGNAL`: no kernel call of its own, FEN-09); on an engine that cannot, a monitored
    /// fence gets the module's software signal packet ([`Queue::software_signal`], FEN-10).
    ///
    /// # Errors
    /// [`Error::ForeignFence`] for a fence of another context or device file than the queue's;
    /// [`Error::FenceValueBackwards`] for a value below the fence's CurrentValue or a signal
    /// already submitted through the same [`Fence`];
    /// those of [`Queue::submit`] or [`Queue::software_signal`]; [`Error::Invalid`] for a native
    /// fence on an engine that cannot write fences.
    pub fn signal_fence(&mut self, fence: &Fence, value: u64) -> Result<()> {
        fence.check_context(self.backend.ctx.id)?;
        fence.check_forward(value)?;
        let engine = self.backend.desc.engine.raw();
        let writes = engine < 32 && self.backend.ctx.caps.raw.fence_write_engines & (1 << engine) != 0;
        let mut cb = CommandBuffer::new();
        match (fence.kind(), writes) {
            (FenceKind::Monitored, true) => cb.monitored_signal(fence.gpu_va(), value)?,
            (FenceKind::Monitored, false) => return self.software_signal(fence, value),
            (_, true) => cb.signal_fence(fence, value)?,
            (_, false) => return Err(Error::Invalid("native fence signal on an engine that cannot write fences")),
        };
        self.submit(&cb)?;
        fence.signal_floor().raise(value);
        Ok(())
    }

    /// The software signal packet of a monitored fence (FEN-10, `QUEUE_SIGNAL_FENCE`): the module
    /// queues it behind this kernel-mode queue's work and writes `value` to the fence from the
    /// CPU when it executes. Returns at once.
    ///
    /// # Errors
    /// [`Error::ForeignFence`] for a fence of another context or device file than the queue's;
    /// [`Error::FenceValueBackwards`] for a value below the fence's CurrentValue or a signal
    /// already submitted through the same [`Fence`];
    /// [`Error::Ioctl`] (`QUEUE_SIGNAL_FENCE`: `EPERM` on a user-mode queue, `EINVAL` for a
    /// native fence, `ERANGE` outside the 32-bit window, `EBUSY`).
    pub fn software_signal(&mut self, fence: &Fence, value: u64) -> Result<()> {
        fence.check_context(self.backend.ctx.id)?;
        fence.check_forward(value)?;
        self.queue_fence_op(sys::QUEUE_SIGNAL_FENCE, fence, value)?;
        fence.signal_floor().raise(value);
        Ok(())
    }

    fn queue_fence_op(&self, request: sys::Request<uapi::QueueFenceOp>, fence: &Fence, value: u64) -> Result<()> {
        let mut arg = uapi::QueueFenceOp { queue: self.handle(), fence: fence.handle(), value };
        self.backend.ctx.file().ioctl(request, &mut arg)
    }

    /// Counters of reconnects, notifies, losses, re-creations and fallbacks.
    pub fn stats(&self) -> SubmitStats {
        self.submitter.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_entries_are_laid_out_as_ring_rs_says() {
        let bytes = ring_entry_bytes(&RingEntry { cmdbuf_va: 0x0102_0304_0506_0708, size_bytes: 0x40, flags: 0 });
        assert_eq!(bytes, [8, 7, 6, 5, 4, 3, 2, 1, 0x40, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn handles_can_move_to_and_be_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::Device>();
        send_sync::<crate::Context>();
        send_sync::<Allocation>();
        send_sync::<Queue>();
    }

    #[test]
    fn descriptions_are_checked_before_any_ioctl() {
        let ok = QueueDesc::default();
        assert!(ok.validate().is_ok());
        for bad in [
            QueueDesc { ring_entries: 3, ..ok },
            QueueDesc { ring_entries: 1, ..ok },
            QueueDesc { slot_bytes: 4098, ..ok },
            QueueDesc { slot_bytes: 32, ..ok },
            QueueDesc { slot_bytes: CMDBUF_MAX_BYTES + 4, ..ok },
        ] {
            assert!(matches!(bad.validate(), Err(Error::Invalid(_))), "{bad:?}");
        }
    }
}

// SPDX-License-Identifier: GPL-2.0

//! The device-programming core shared by the interrupt handlers and every open file: the CMP
//! mailbox, the interrupt ring and its per-cause counters, device-wide object ids, the system
//! address space (id 0) and the CPU fence waits.
//!
//! Implementation note: [`Core`] is `'static` and reference counted, because open files (and
//! their mappings) may outlive the bound device. Everything that needs the bound device — BAR0
//! and the `Device<Bound>` that DMA allocations want — is reached only through [`Core::hw`],
//! which locks the mailbox mutex and yields [`ENODEV`] once [`Core::revoke`] has run (the driver
//! core calls it before BAR0 is unmapped). Lock order: an open file's state, then the hardware
//! mutex ([`HwGuard`]), then the fence logs ([`Core::logs`]), then [`Objects`], then the
//! interrupt-safe [`Events`] spinlock.

use core::ptr::NonNull;

use kernel::{
    device::{Bound, Device},
    new_condvar, new_mutex, new_spinlock_irq,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Relaxed, Release},
        barrier::{dma_mb, Read},
        lock::{mutex::MutexBackend, Guard},
        Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLockIrq,
    },
    time::{delay::fsleep, msecs_to_jiffies, Delta, Jiffies},
    transmute::{AsBytes, FromBytes},
};

use crate::{
    abi::{
        fence,
        irq::{self as abi_irq, cause, RecordKind},
        mailbox::{self, Opcode, Status},
        regs,
    },
    device::{write_reg, Bar0, DeviceInfo},
    dmamem::DmaBuf,
    doorbell::Doorbell,
    pagetable::AddressSpace,
};

/// How long a mailbox command may take before the driver gives up on it.
pub(crate) const MAILBOX_TIMEOUT_MS: u32 = 5000;
/// Interrupt ring slots (the header and 64 records of 48 bytes fit one page).
const IRQ_RING_ENTRIES: u32 = 64;
/// Byte offset of the `status` word in a mailbox block.
const STATUS_OFFSET: usize = core::mem::offset_of!(mailbox::MailboxHeader, status);
/// Byte offsets of the interrupt ring header's fields.
const RING_WRITE_INDEX: usize = core::mem::offset_of!(abi_irq::InterruptRingHeader, write_index);
/// See [`RING_WRITE_INDEX`].
const RING_READ_INDEX: usize = core::mem::offset_of!(abi_irq::InterruptRingHeader, read_index);
/// See [`RING_WRITE_INDEX`].
const RING_OVERFLOWS: usize = core::mem::offset_of!(abi_irq::InterruptRingHeader, overflows);
/// Byte offset of [`abi_irq::InterruptRecord::context`].
const RECORD_CONTEXT: usize = core::mem::offset_of!(abi_irq::InterruptRecord, context);
/// Byte offset of [`abi_irq::InterruptRecord::queue`].
const RECORD_QUEUE: usize = core::mem::offset_of!(abi_irq::InterruptRecord, queue);
/// Byte offset of [`abi_irq::InterruptRecord::value`].
const RECORD_VALUE: usize = core::mem::offset_of!(abi_irq::InterruptRecord, value);
/// First mmap offset (in pages) handed out.
const PGOFF_BASE: u64 = 0x100;
/// First VA the module hands out in the system address space.
const SYSTEM_VA_BASE: u64 = 0x1000_0000;


/// What the interrupt handlers record, and the counters `DEBUG_STATS` reports.
#[derive(Default)]
pub(crate) struct Events {
    /// Bit `v`: a mailbox completion was seen on vector `v` since the bit was last cleared.
    done: u64,
    /// A mailbox command is in flight and its completion has not been counted yet.
    mb_pending: bool,
    /// Interrupts received, all vectors together.
    pub(crate) interrupts: u64,
    /// Interrupt events by `irq::cause` bit index: mailbox completions and records by kind.
    pub(crate) by_cause: [u64; 8],
    /// Context-fault records seen.
    pub(crate) faults: u64,
    /// Native-fence work the interrupt thread has yet to do (`fencelog`).
    pub(crate) fence_work: crate::fencelog::FenceWork,
    /// Next interrupt-ring record to consume.
    ring_read: u32,
    /// Records the device reported as dropped (ring full).
    pub(crate) overflows: u32,
    /// GPU pages mapped in all address spaces.
    pub(crate) gpu_pages: u64,
    /// Device context ids with a fault record not yet processed by [`Core::process_faults`].
    faulted: [u64; 4],
}

/// Device-wide ids and objects, under one mutex.
pub(crate) struct Objects {
    /// Address-space ids in use (bit 0, the system address space, always).
    spaces: [u64; 4],
    /// Context ids in use.
    contexts: [u64; 4],
    /// Queue ids in use.
    queues: [u64; 16],
    /// Next global fence handle.
    next_fence: u64,
    /// The system address space (id 0), once created.
    system: Option<AddressSpace>,
    /// Next free VA in the system address space.
    system_next_va: u64,
    /// Pending CPU waits.
    pub(crate) waits: KVec<PendingWait>,
    /// VRAM pages (from offset 0) holding INTRA_GPU fence values, in use.
    vram_fence_pages: [u64; 4],
    /// Live objects on the device: contexts, queues, allocations, doorbells.
    pub(crate) counts: [u32; 4],
    /// Next mmap offset, in pages. Device-wide: every file of a device shares the inode's
    /// address space, so `unmap_mapping_range` over one object's offset must not hit another
    /// file's mapping.
    next_pgoff: u64,
    /// The physical doorbells: who is connected to each.
    doorbells: KVec<Option<(Arc<Doorbell>, u64)>>,
    /// Stamps for the doorbells' last use.
    lru_clock: u64,
    /// Every doorbell, connected or not.
    all_doorbells: KVec<Arc<Doorbell>>,
    /// Device context ids that faulted (until their context is destroyed): device loss.
    faulted: [u64; 4],
    /// Device context ids suspended by `SUSPEND_CONTEXT` (until resumed or destroyed): their
    /// connected doorbells read CONNECTED_NOTIFY.
    suspended: [u64; 4],
    /// Eventfd waits, shared-fence and registration counts (`fencewait`).
    pub(crate) fences: crate::fencewait::FenceBook,
}

/// Index of a live-object count in [`Objects::counts`].
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// Contexts.
    Context = 0,
    /// Hardware queues.
    Queue = 1,
    /// Allocations.
    Allocation = 2,
    /// Doorbells.
    Doorbell = 3,
}

impl Objects {
    /// Takes the lowest free id below `limit` of `bits`.
    fn take(bits: &mut [u64], limit: u32) -> Option<u32> {
        for id in 0..limit {
            // CAST: `id` < `limit` ≤ 64 × `bits.len()`.
            let (word, bit) = ((id / 64) as usize, id % 64);
            let w = bits.get_mut(word)?;
            if *w & (1 << bit) == 0 {
                *w |= 1 << bit;
                return Some(id);
            }
        }
        None
    }

    /// Frees `id` of `bits`.
    fn put(bits: &mut [u64], id: u32) {
        // CAST: as in `take`.
        if let Some(w) = bits.get_mut((id / 64) as usize) {
            *w &= !(1 << (id % 64));
        }
    }

    /// A new address-space id (never 0) and context id.
    pub(crate) fn take_context_ids(&mut self) -> Option<(u32, u32)> {
        let space = Self::take(&mut self.spaces, mailbox::MAX_ADDRESS_SPACES)?;
        let Some(context) = Self::take(&mut self.contexts, mailbox::MAX_CONTEXTS) else {
            Self::put(&mut self.spaces, space);
            return None;
        };
        Some((space, context))
    }

    /// Frees the ids of [`Self::take_context_ids`].
    pub(crate) fn put_context_ids(&mut self, space: u32, context: u32) {
        if space != 0 {
            Self::put(&mut self.spaces, space);
        }
        Self::put(&mut self.contexts, context);
        Self::put(&mut self.faulted, context);
        Self::put(&mut self.suspended, context);
    }

    /// Bit `id` of `bits`.
    fn has(bits: &[u64], id: u32) -> bool {
        // CAST: as in `take`.
        bits.get((id / 64) as usize)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    /// Whether device context `context` is suspended.
    pub(crate) fn is_suspended(&self, context: u32) -> bool {
        Self::has(&self.suspended, context)
    }

    /// Records device context `context` as suspended or not.
    pub(crate) fn set_suspended(&mut self, context: u32, suspended: bool) {
        if suspended {
            // CAST: as in `take`.
            if let Some(w) = self.suspended.get_mut((context / 64) as usize) {
                *w |= 1 << (context % 64);
            }
        } else {
            Self::put(&mut self.suspended, context);
        }
    }

    /// The doorbells of device context `context`.
    pub(crate) fn doorbells_of(&self, context: u32) -> impl Iterator<Item = &Arc<Doorbell>> + '_ {
        self.all_doorbells
            .iter()
            .filter(move |d| d.context_id() == context)
    }

    /// Whether device context `context` faulted.
    pub(crate) fn is_faulted(&self, context: u32) -> bool {
        // CAST: context ids are below 256.
        self.faulted
            .get((context / 64) as usize)
            .is_some_and(|w| w & (1 << (context % 64)) != 0)
    }

    /// Adds a doorbell to the list of all doorbells.
    pub(crate) fn add_doorbell(&mut self, db: Arc<Doorbell>) -> Result {
        self.all_doorbells.push(db, GFP_KERNEL)?;
        Ok(())
    }

    /// Makes room for one more doorbell in the list of all doorbells.
    pub(crate) fn all_doorbells_reserve(&mut self) -> Result {
        self.all_doorbells.reserve(1, GFP_KERNEL)?;
        Ok(())
    }

    /// Every doorbell of the device.
    pub(crate) fn all_doorbells(&self) -> &[Arc<Doorbell>] {
        &self.all_doorbells
    }

    /// The doorbells of faulted contexts.
    pub(crate) fn doorbells_of_faulted(&self) -> impl Iterator<Item = Arc<Doorbell>> + '_ {
        self.all_doorbells
            .iter()
            .filter(|d| self.is_faulted(d.context_id()))
            .cloned()
    }

    /// Removes a doorbell from the list of all doorbells.
    pub(crate) fn remove_doorbell(&mut self, db: &Doorbell) {
        self.all_doorbells
            .retain(|d| !core::ptr::eq(Arc::as_ptr(d), core::ptr::from_ref(db)));
    }

    /// A new queue id.
    pub(crate) fn take_queue_id(&mut self) -> Option<u32> {
        Self::take(&mut self.queues, mailbox::MAX_QUEUES)
    }

    /// Frees a queue id.
    pub(crate) fn put_queue_id(&mut self, id: u32) {
        Self::put(&mut self.queues, id);
    }

    /// A new global fence handle (non-zero).
    pub(crate) fn take_fence_handle(&mut self) -> u64 {
        self.next_fence += 1;
        self.next_fence
    }

    /// A free VRAM page for fence values (byte offset), among the first `limit` pages.
    pub(crate) fn take_vram_fence_page(&mut self, limit: u32) -> Option<u64> {
        let page = Self::take(&mut self.vram_fence_pages, limit.min(256))?;
        Some(u64::from(page) * crate::abi::mmu::PAGE_SIZE)
    }

    /// Frees a page of [`Self::take_vram_fence_page`].
    pub(crate) fn put_vram_fence_page(&mut self, offset: u64) {
        if let Ok(page) = u32::try_from(offset / crate::abi::mmu::PAGE_SIZE) {
            Self::put(&mut self.vram_fence_pages, page);
        }
    }

    /// CPU waits (blocking and eventfd) pending on fence `handle`.
    pub(crate) fn pending_waits(&self, handle: u64) -> u32 {
        let n = self.waits.iter().filter(|w| w.handle == handle).count() + self.fences.waits_on(handle).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Blocking CPU waits pending, all fences.
    pub(crate) fn cpu_waits(&self) -> u32 {
        u32::try_from(self.waits.len()).unwrap_or(u32::MAX)
    }

    /// Counts an object of `kind` created (`up`) or destroyed.
    pub(crate) fn count(&mut self, kind: Kind, up: bool) {
        let c = &mut self.counts[kind as usize];
        *c = if up {
            c.saturating_add(1)
        } else {
            c.saturating_sub(1)
        };
    }

    /// The system address space.
    ///
    /// # Errors
    ///
    /// `ENODEV` before it exists.
    pub(crate) fn system(&mut self) -> Result<&mut AddressSpace> {
        self.system.as_mut().ok_or(ENODEV)
    }

    /// Reserves `pages` pages (and a guard page) of system VA.
    pub(crate) fn system_va(&mut self, pages: usize) -> u64 {
        let va = self.system_next_va;
        // CAST: page counts are small (module-chosen).
        self.system_next_va += (pages as u64 + 1) * crate::abi::mmu::PAGE_SIZE;
        va
    }

    /// A new mmap offset range of `pages` pages (and a gap page), in pages.
    pub(crate) fn new_pgoff(&mut self, pages: usize) -> u64 {
        let pgoff = self.next_pgoff;
        // CAST: page counts are small (bounded by the largest allocation).
        self.next_pgoff += pages as u64 + 1;
        pgoff
    }

    /// A free physical doorbell.
    pub(crate) fn free_doorbell(&self) -> Option<u32> {
        let i = self.doorbells.iter().position(Option::is_none)?;
        u32::try_from(i).ok()
    }

    /// The least recently used connected doorbell.
    pub(crate) fn lru_doorbell(&self) -> Option<(u32, Arc<Doorbell>)> {
        let (i, (db, _)) = self
            .doorbells
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| slot.as_ref().map(|s| (i, s)))
            .min_by_key(|(_, (_, stamp))| *stamp)?;
        Some((u32::try_from(i).ok()?, db.clone()))
    }

    /// Records `db` as connected to physical doorbell `index`, most recently used.
    pub(crate) fn claim_doorbell(&mut self, index: u32, db: Arc<Doorbell>) -> Result {
        self.lru_clock += 1;
        let stamp = self.lru_clock;
        // CAST: `index` came from this registry.
        let slot = self.doorbells.get_mut(index as usize).ok_or(EINVAL)?;
        *slot = Some((db, stamp));
        Ok(())
    }

    /// Marks `db` (if connected) most recently used.
    pub(crate) fn touch_doorbell(&mut self, db: &Arc<Doorbell>) {
        self.lru_clock += 1;
        let stamp = self.lru_clock;
        for (d, s) in self.doorbells.iter_mut().flatten() {
            if Arc::ptr_eq(d, db) {
                *s = stamp;
            }
        }
    }

    /// Frees physical doorbell `index` if `db` holds it (in the global model nobody does).
    pub(crate) fn release_doorbell(&mut self, index: u32, db: &Doorbell) {
        // CAST: as in `claim_doorbell`.
        if let Some(slot) = self.doorbells.get_mut(index as usize) {
            if slot
                .as_ref()
                .is_some_and(|(d, _)| core::ptr::eq(Arc::as_ptr(d), core::ptr::from_ref(db)))
            {
                *slot = None;
            }
        }
    }

    /// The lowest pending wait value (blocking and eventfd) of fence `handle`.
    pub(crate) fn lowest_wait(&self, handle: u64) -> Option<u64> {
        let blocking = self.waits.iter().filter(|w| w.handle == handle).map(|w| w.value);
        Iterator::chain(blocking, self.fences.waits_on(handle)).min()
    }
}

/// A pending CPU wait: the interrupt paths (`fencelog`) read its fence's CurrentValue.
pub(crate) struct PendingWait {
    /// Global fence handle.
    pub(crate) handle: u64,
    /// Value waited for.
    pub(crate) value: u64,
    /// The page holding CurrentValue.
    pub(crate) current: Arc<DmaBuf>,
    /// CurrentValue's byte offset in `current`.
    pub(crate) offset: usize,
    /// A monitored (WDDM 2.0) fence: examined after monitored-fence records.
    pub(crate) monitored: bool,
    /// A monitored fence of a device without 64-bit atomics: low halves compared across
    /// wraparound (`kring::reached`).
    pub(crate) wrap32: bool,
    /// Set (before the waiters are woken) once an interrupt path or a CPU signal found it
    /// satisfied; the waiter returns only then (or on its own re-sample, see
    /// [`Core::wait_fence`]).
    pub(crate) released: Arc<Atomic<bool>>,
}

impl PendingWait {
    /// Marks the wait released if its fence reached its value; whether it did just now.
    pub(crate) fn release_if_signaled(&self) -> bool {
        if self.released.load(Relaxed)
            || !crate::kring::reached(self.wrap32, self.current.read64(self.offset), self.value)
        {
            return false;
        }
        self.released.store(true, Release);
        true
    }
}

/// BAR0 and the bound device, as raw pointers valid until [`Core::revoke`].
struct HwRef {
    /// BAR0 of the bound device (its lifetime erased; see the `Send` impl).
    bar: NonNull<Bar0<'static>>,
    /// The bound device.
    dev: NonNull<Device<Bound>>,
}

// SAFETY: `HwRef` only points at objects (an MMIO mapping and a device) that may be used from
// any thread; it is only dereferenced while the hardware mutex is held and not revoked.
unsafe impl Send for HwRef {}

/// State under the hardware mutex.
struct HwState {
    /// The last mailbox sequence number.
    seq: u16,
    /// `None` once the device is unbound.
    hw: Option<HwRef>,
}

/// The device-programming core of one device.
#[pin_data]
pub(crate) struct Core {
    /// Identity and geometry.
    info: DeviceInfo,
    /// Bus address of BAR2 (doorbells).
    doorbell_bar: u64,
    /// The PCI device as a generic device (for `dma_mmap_attrs` and messages).
    dev: ARef<Device>,
    /// The mailbox argument block (one page).
    block: DmaBuf,
    /// The interrupt ring (header and records, one page).
    ring: DmaBuf,
    /// Serialises device programming; holds BAR0 while the device is bound.
    #[pin]
    hw: Mutex<HwState>,
    /// Device-wide ids and objects.
    #[pin]
    objects: Mutex<Objects>,
    /// What the handlers saw.
    #[pin]
    events: SpinLockIrq<Events>,
    /// Signalled by the handlers whenever `events` changes.
    #[pin]
    wake: CondVar,
    /// Signalled (with `events` locked) when an interrupt path or a CPU signal may have
    /// satisfied a CPU fence wait.
    #[pin]
    fence_wake: CondVar,
    /// Fence logs, interrupt-path counters and the timeline.
    #[pin]
    logs: Mutex<crate::fencelog::Logs>,
    /// Kernel-mode queues holding work behind a monitored-fence wait.
    #[pin]
    held: crate::kring::Held,
}

impl Core {
    /// A core for `dev`, with its mailbox block and interrupt ring allocated; not yet attached
    /// to a BAR (see [`Self::attach`]).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(
        dev: &Device<Bound>,
        info: DeviceInfo,
        doorbell_bar: u64,
    ) -> Result<Arc<Self>> {
        let count = info.doorbells.min(crate::abi::pci::DOORBELL_MAX_COUNT);
        let mut doorbells = KVec::new();
        for _ in 0..count {
            doorbells.push(None, GFP_KERNEL)?;
        }
        let block = DmaBuf::new(dev, 1)?;
        let ring = DmaBuf::new(dev, 1)?;
        let logs = crate::fencelog::Logs::new()?;
        let generic: &Device = dev;
        Arc::pin_init(
            try_pin_init!(Self {
                info,
                doorbell_bar,
                dev: generic.into(),
                block,
                ring,
                hw <- new_mutex!(HwState { seq: 0, hw: None }),
                objects <- new_mutex!(Objects {
                    spaces: [1, 0, 0, 0],
                    contexts: [0; 4],
                    queues: [0; 16],
                    next_fence: 0,
                    system: None,
                    system_next_va: SYSTEM_VA_BASE,
                    waits: KVec::new(),
                    vram_fence_pages: [0; 4],
                    counts: [0; 4],
                    next_pgoff: PGOFF_BASE,
                    doorbells,
                    lru_clock: 0,
                    all_doorbells: KVec::new(),
                    faulted: [0; 4],
                    suspended: [0; 4],
                    fences: crate::fencewait::FenceBook::new(),
                }),
                events <- new_spinlock_irq!(Events::default()),
                wake <- new_condvar!(),
                fence_wake <- new_condvar!(),
                logs <- new_mutex!(logs),
                held <- crate::kring::Held::new(),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Attaches BAR0 and the bound device.
    ///
    /// # Safety
    ///
    /// `bar` and `dev` must stay valid until [`Self::revoke`] returns, and the caller must call
    /// it before either goes away.
    pub(crate) unsafe fn attach(&self, bar: &Bar0<'_>, dev: &Device<Bound>) {
        let bar = NonNull::from(bar).cast::<Bar0<'static>>();
        self.hw.lock().hw = Some(HwRef {
            bar,
            dev: NonNull::from(dev),
        });
    }

    /// Detaches BAR0: every later device operation fails with `ENODEV`. Waits for the one in
    /// progress.
    pub(crate) fn revoke(&self) {
        self.hw.lock().hw = None;
    }

    /// Identity and geometry.
    pub(crate) fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Bus address of BAR2, the doorbell pages.
    pub(crate) fn doorbell_bar(&self) -> u64 {
        self.doorbell_bar
    }

    /// The device, for messages and `dma_mmap_attrs`.
    pub(crate) fn device(&self) -> &Device {
        &self.dev
    }

    /// Locks the hardware for a sequence of device operations.
    ///
    /// # Errors
    ///
    /// `ENODEV` once the device is unbound.
    pub(crate) fn hw(&self) -> Result<HwGuard<'_>> {
        let state = self.hw.lock();
        if state.hw.is_none() {
            return Err(ENODEV);
        }
        Ok(HwGuard { core: self, state })
    }

    /// The kernel-mode queues holding work behind a monitored-fence wait.
    pub(crate) fn held(&self) -> &crate::kring::Held {
        &self.held
    }

    /// Whether monitored-fence values are 32-bit and wrap (`CAPS.no_64bit_atomics`, FEN-07).
    pub(crate) fn wrap32(&self) -> bool {
        self.info.caps.no_64bit_atomics()
    }

    /// Locks the device-wide objects.
    pub(crate) fn objects(&self) -> Guard<'_, Objects, MutexBackend> {
        self.objects.lock()
    }

    /// Locks the fence logs (after the hardware mutex, before [`Objects`]).
    pub(crate) fn logs(&self) -> Guard<'_, crate::fencelog::Logs, MutexBackend> {
        self.logs.lock()
    }

    /// Takes the native-fence work the interrupt handlers recorded.
    pub(crate) fn take_fence_work(&self) -> crate::fencelog::FenceWork {
        core::mem::take(&mut self.events.lock().fence_work)
    }

    /// Wakes the CPU fence waiters to look at their `released` flags (taking the lock first
    /// orders the wake-up after the sleep of a waiter that saw its flag clear).
    pub(crate) fn wake_fence_waiters(&self) {
        drop(self.events.lock());
        self.fence_wake.notify_all();
    }

    /// After a CPU signal: releases the pending waits `pick` selects whose fence reached their
    /// value, and wakes them.
    fn release_signaled(&self, pick: impl Fn(&PendingWait) -> bool) {
        let mut any = false;
        for w in self.objects().waits.iter().filter(|w| pick(w)) {
            any |= w.release_if_signaled();
        }
        if any {
            self.wake_fence_waiters();
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self, out: impl FnOnce(&Events)) {
        out(&self.events.lock());
    }

    /// Maps a fence's CurrentValue page and MonitoredValue page read/write at two new
    /// consecutive pages of the system (CMP) address space (CAP-06), counting them; their
    /// system VA. Without a MonitoredValue page (it is in VRAM, NF-13) the second page stays
    /// unmapped. Nothing stays mapped on failure.
    ///
    /// # Errors
    ///
    /// `ENODEV` (no system address space or device), `ENOMEM`.
    pub(crate) fn map_fence_values(
        &self,
        hw: &HwGuard<'_>,
        objects: &mut Objects,
        current: &DmaBuf,
        monitored: Option<&DmaBuf>,
    ) -> Result<u64> {
        let sys_va = objects.system_va(2);
        let system = objects.system()?;
        let before = system.mapped_pages();
        let mapped = system.map_buf(hw.dev()?, sys_va, current, true).and_then(|()| {
            let Some(monitored) = monitored else {
                return Ok(());
            };
            system
                .map_buf(hw.dev()?, sys_va + crate::abi::mmu::PAGE_SIZE, monitored, true)
                .inspect_err(|_| system.unmap_range(sys_va, 1))
        });
        self.add_gpu_pages(before, system.mapped_pages());
        mapped.map(|()| sys_va)
    }

    /// Adds `delta` to the mapped GPU page count.
    pub(crate) fn add_gpu_pages(&self, before: u64, after: u64) {
        let mut ev = self.events.lock();
        ev.gpu_pages = ev.gpu_pages.wrapping_add(after).wrapping_sub(before);
    }

    /// Interrupt handler work for `vector`: notes a mailbox completion, consumes the interrupt
    /// ring (fence records become work for the interrupt thread: `fencelog` paths and the eventfd
    /// waits of `fencewait`), wakes sleepers. Returns the causes to clear in `INT_CLEAR` (0: none)
    /// and whether the thread has work.
    pub(crate) fn handle_interrupt(&self, vector: u16) -> (u32, bool) {
        let mut clear = 0;
        let mut ev = self.events.lock();
        ev.interrupts = ev.interrupts.wrapping_add(1);
        if self.block.read32(STATUS_OFFSET) != Status::Pending as u32 {
            ev.done |= vector_bit(vector);
            if ev.mb_pending {
                ev.mb_pending = false;
                ev.by_cause[0] += 1;
                clear |= cause::MAILBOX;
            }
        }

        let write = self.ring.read32(RING_WRITE_INDEX);
        // The device writes the records before the write index (release): read them after.
        dma_mb(Read);
        let mut read = ev.ring_read;
        if write.wrapping_sub(read) > IRQ_RING_ENTRIES {
            // Impossible for a healthy device: skip to the records that can still be there.
            read = write.wrapping_sub(IRQ_RING_ENTRIES);
        }
        let mut faults = false;
        while read != write {
            // CAST: slot < 64, so the offset is below 4096.
            let offset =
                (abi_irq::RECORDS_OFFSET + u64::from(read % IRQ_RING_ENTRIES) * 48) as usize;
            let kind = self.ring.read32(offset);
            let (index, bit) = if kind == RecordKind::NativeFenceSignaled as u32 {
                ev.fence_work.native(&self.ring, offset);
                (1, cause::NATIVE_FENCE)
            } else if kind == RecordKind::MonitoredFenceSignaled as u32
                || kind == RecordKind::Notify as u32
            {
                ev.fence_work.monitored = true;
                if kind == RecordKind::Notify as u32 {
                    // A software signal packet ran (FEN-10): the interrupt thread writes its fence.
                    let queue = self.ring.read32(offset + RECORD_QUEUE);
                    let token = self.ring.read64(offset + RECORD_VALUE);
                    self.held.notified(queue, token);
                }
                (2, cause::MONITORED_FENCE)
            } else if kind == RecordKind::EngineState as u32 {
                (3, cause::ENGINE_STATE)
            } else if kind == RecordKind::ContextFault as u32 {
                ev.faults += 1;
                let context = self.ring.read32(offset + RECORD_CONTEXT);
                // CAST: context ids are below 256 (others are ignored by `get_mut`).
                if let Some(w) = ev.faulted.get_mut((context / 64) as usize) {
                    *w |= 1 << (context % 64);
                    faults = true;
                }
                (4, cause::FAULT)
            } else {
                (7, 0)
            };
            ev.by_cause[index] += 1;
            clear |= bit;
            read = read.wrapping_add(1);
        }
        ev.ring_read = read;
        self.ring.write32(RING_READ_INDEX, read);
        ev.overflows = self.ring.read32(RING_OVERFLOWS);
        let thread = faults || ev.fence_work.pending();
        drop(ev);
        self.wake.notify_all();
        (clear, thread)
    }

    /// Device loss for the contexts named by fault records: their doorbells go to
    /// DISCONNECTED_ABORT. Runs in the interrupt thread (process context).
    pub(crate) fn process_faults(&self) {
        let faulted = core::mem::take(&mut self.events.lock().faulted);
        if faulted == [0; 4] {
            return;
        }
        let Ok(mut hw) = self.hw() else {
            return;
        };
        let mut objects = self.objects();
        for (word, bits) in objects.faulted.iter_mut().zip(faulted.iter()) {
            *word |= bits;
        }
        crate::doorbell::abort_faulted(&mut hw, &mut objects);
    }

    /// Points the device at the interrupt ring and creates the system address space.
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`, `ENOMEM`.
    pub(crate) fn start(&self) -> Result {
        let mut hw = self.hw()?;
        let mut ring = mailbox::SetInterruptRingArgs {
            base_pa: self.ring.dma_address(),
            entries: IRQ_RING_ENTRIES,
            ..Default::default()
        };
        hw.command(Opcode::SetInterruptRing, &mut ring, &[])?;

        let space = AddressSpace::new(hw.dev()?, 0)?;
        let mut args = mailbox::CreateAddressSpaceArgs {
            id: 0,
            root_pa: space.root_pa(),
            ..Default::default()
        };
        hw.command(Opcode::CreateAddressSpace, &mut args, &[])?;
        self.objects().system = Some(space);
        Ok(())
    }

    /// Sleeps until a mailbox completion is recorded on a vector of `mask`; `false` on timeout.
    /// Never returns early for a signal (a command in flight owns the block): a pending signal
    /// turns the wait into 1 ms uninterruptible sleeps.
    fn wait_done(&self, mask: u64) -> bool {
        let mut remaining: Jiffies = msecs_to_jiffies(MAILBOX_TIMEOUT_MS);
        let mut ev = self.events.lock();
        while ev.done & mask == 0 {
            match self.wake.wait_interruptible_timeout(&mut ev, remaining) {
                CondVarTimeoutResult::Timeout => return false,
                CondVarTimeoutResult::Woken { jiffies } => remaining = jiffies,
                CondVarTimeoutResult::Signal { .. } => {
                    drop(ev);
                    for _ in 0..MAILBOX_TIMEOUT_MS {
                        fsleep(Delta::from_millis(1));
                        if self.events.lock().done & mask != 0 {
                            return true;
                        }
                    }
                    return false;
                }
            }
        }
        true
    }

    /// Sleeps (interruptibly) until fence `handle`'s CurrentValue in `current` (at byte
    /// `offset`) reaches `value`, registering the wait so the device interrupts for it. A
    /// native fence gets its MonitoredValue updated; a `monitored` (WDDM 2.0) fence has none:
    /// every engine write of it posts a record anyway, after which the interrupt thread
    /// re-reads every monitored-fence wait (FEN-12). CurrentValue is re-sampled once after the
    /// update; then the wait ends when an interrupt path (`fencelog`) or a CPU signal releases
    /// it.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT` after `timeout_ms` (at once when 0), `EINTR` on a signal, `ENODEV`.
    pub(crate) fn wait_fence(
        &self,
        handle: u64,
        monitored: bool,
        current: &Arc<DmaBuf>,
        offset: usize,
        value: u64,
        timeout_ms: u32,
    ) -> Result {
        let wrap32 = monitored && self.wrap32();
        if crate::kring::reached(wrap32, current.read64(offset), value) {
            return Ok(());
        }
        if timeout_ms == 0 {
            return Err(ETIMEDOUT);
        }
        let released = Arc::new(Atomic::new(false), GFP_KERNEL)?;
        let wait = PendingWait {
            handle,
            value,
            current: current.clone(),
            offset,
            monitored,
            wrap32,
            released: released.clone(),
        };
        self.objects().waits.push(wait, GFP_KERNEL)?;
        let result = if monitored {
            self.sleep_on_fence(current, offset, value, wrap32, &released, timeout_ms)
        } else {
            self.update_monitored(handle).and_then(|()| {
                self.sleep_on_fence(current, offset, value, false, &released, timeout_ms)
            })
        };
        {
            let mut objects = self.objects();
            if let Some(i) = objects
                .waits
                .iter()
                .position(|w| Arc::ptr_eq(&w.released, &released))
            {
                let _ = objects.waits.remove(i);
            }
        }
        if !monitored {
            // Best effort: the fence may be gone already.
            let _ = self.update_monitored(handle);
        }
        result
    }

    /// CPU signal of a monitored fence (FEN-16): stores `value` into its value page (visible
    /// at once to every mapping; in the 32-bit mode the low half only, as the GPU does), then
    /// wakes the CPU waiters to re-read it and releases the GPU work held behind it (FEN-15).
    pub(crate) fn signal_monitored(&self, current: &DmaBuf, offset: usize, value: u64) {
        self.store_monitored(current, offset, value);
        crate::kring::release_held(self);
    }

    /// The store of [`Self::signal_monitored`] and the release of the CPU waits it satisfies.
    pub(crate) fn store_monitored(&self, current: &DmaBuf, offset: usize, value: u64) {
        if self.wrap32() {
            // CAST: the 32-bit mode stores the low half, truncation intended.
            current.write32(offset, value as u32);
        } else {
            current.write64(offset, value);
        }
        self.release_signaled(|w| core::ptr::eq(&*w.current, current) && w.offset == offset);
    }

    /// CPU signal: stores fence `handle`'s CurrentValue through the device (which releases GPU
    /// waiters), then wakes the CPU waiters to re-read it (the device posts no record for it).
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`.
    pub(crate) fn signal_fence(&self, handle: u64, value: u64) -> Result {
        self.set_fence_values(Opcode::UpdateCurrentValues, handle, value)?;
        self.release_signaled(|w| w.handle == handle);
        Ok(())
    }

    /// One-entry `UPDATE_CURRENT_VALUES` or `UPDATE_MONITORED_VALUES`.
    pub(crate) fn set_fence_values(&self, opcode: Opcode, handle: u64, value: u64) -> Result {
        let mut hw = self.hw()?;
        let entry = mailbox::FenceValue { handle, value };
        let mut args = mailbox::FenceValuesArgs {
            count: 1,
            ..Default::default()
        };
        hw.command(opcode, &mut args, entry.as_bytes())
    }

    /// Sets fence `handle`'s MonitoredValue from its lowest pending wait. The value is chosen
    /// under the hardware mutex, so the last update the device sees reflects the latest waits.
    fn update_monitored(&self, handle: u64) -> Result {
        let mut hw = self.hw()?;
        let lowest = self.objects().lowest_wait(handle);
        let entry = mailbox::FenceValue {
            handle,
            value: fence::monitored_value_for(lowest),
        };
        let mut args = mailbox::FenceValuesArgs {
            count: 1,
            ..Default::default()
        };
        hw.command(Opcode::UpdateMonitoredValues, &mut args, entry.as_bytes())?;
        self.objects().fences.vram_monitored.note(handle, entry.value);
        Ok(())
    }

    /// The sleeping half of [`Self::wait_fence`]: CurrentValue is re-sampled once, after the
    /// MonitoredValue update has returned (a signal before it); afterwards the wait ends only
    /// when an interrupt path (`fencelog`, in the interrupt thread) or a CPU signal marked it
    /// `released`.
    fn sleep_on_fence(
        &self,
        current: &DmaBuf,
        offset: usize,
        value: u64,
        wrap32: bool,
        released: &Atomic<bool>,
        timeout_ms: u32,
    ) -> Result {
        let mut remaining: Jiffies = msecs_to_jiffies(timeout_ms);
        let mut ev = self.events.lock();
        if crate::kring::reached(wrap32, current.read64(offset), value) {
            return Ok(());
        }
        // A path sets the flag before it takes the lock held here to wake, and the wait
        // releases the lock atomically: the wake-up cannot be lost.
        while !released.load(Acquire) {
            match self.fence_wake.wait_interruptible_timeout(&mut ev, remaining) {
                CondVarTimeoutResult::Timeout => return Err(ETIMEDOUT),
                CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
                CondVarTimeoutResult::Woken { jiffies } => remaining = jiffies,
            }
        }
        Ok(())
    }
}

/// The hardware, locked: mailbox commands and DMA allocations for the bound device.
pub(crate) struct HwGuard<'a> {
    /// The core.
    core: &'a Core,
    /// The locked state; `hw` is `Some` (checked by [`Core::hw`]).
    state: Guard<'a, HwState, MutexBackend>,
}

impl HwGuard<'_> {
    /// The bound device, for DMA allocations.
    ///
    /// # Errors
    ///
    /// `ENODEV` once revoked (cannot happen while the guard is held).
    pub(crate) fn dev(&self) -> Result<&Device<Bound>> {
        let hw = self.state.hw.as_ref().ok_or(ENODEV)?;
        // SAFETY: By the contract of `Core::attach`, the device is valid until `Core::revoke`,
        // which cannot complete while this guard holds the hardware mutex.
        Ok(unsafe { hw.dev.as_ref() })
    }

    /// BAR0.
    fn bar(&self) -> Result<&Bar0<'static>> {
        let hw = self.state.hw.as_ref().ok_or(ENODEV)?;
        // SAFETY: As in `dev`: BAR0 stays mapped until `Core::revoke` returns.
        Ok(unsafe { hw.bar.as_ref() })
    }

    /// Runs a mailbox command whose block is `args` (a [`mailbox::MailboxHeader`] first, filled
    /// in here) followed by `tail`; results are copied back into `args`.
    ///
    /// # Errors
    ///
    /// `ENOSPC` for [`Status::NoSpace`], `EIO` for another failure status, `ETIMEDOUT`,
    /// `EINVAL` for a block larger than a page, `ENODEV`.
    pub(crate) fn command<T: AsBytes + FromBytes>(
        &mut self,
        opcode: Opcode,
        args: &mut T,
        tail: &[u8],
    ) -> Result {
        match self.mailbox(opcode, args, tail, None)? {
            Status::Ok => Ok(()),
            status => {
                dev_warn!(
                    self.core.dev,
                    "mailbox {}: {}\n",
                    opcode.name(),
                    status.name()
                );
                Err(if status == Status::NoSpace {
                    ENOSPC
                } else {
                    EIO
                })
            }
        }
    }

    /// Runs a mailbox command and returns its status; with `vector`, waits for the completion
    /// on that vector (the self-test), otherwise on any.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT` when no completion arrives, `EIO` for an unknown status, `EINVAL`, `ENODEV`.
    pub(crate) fn mailbox<T: AsBytes + FromBytes>(
        &mut self,
        opcode: Opcode,
        args: &mut T,
        tail: &[u8],
        vector: Option<u16>,
    ) -> Result<Status> {
        let core = self.core;
        let len = core::mem::size_of::<T>()
            .checked_add(tail.len())
            .filter(|&l| l <= crate::dmamem::PAGE)
            .ok_or(EINVAL)?;
        let seq = self.state.seq.wrapping_add(1);
        self.state.seq = seq;

        core.block.write_bytes(0, args.as_bytes());
        core.block.write_bytes(core::mem::size_of::<T>(), tail);
        core.block.write32(0, opcode as u32);
        core.block.write32(4, u32::try_from(len)?);
        core.block.write32(8, u32::from(seq));
        core.block.write32(STATUS_OFFSET, Status::Pending as u32);
        let mask = match vector {
            Some(v) => vector_bit(v),
            None => u64::MAX,
        };
        {
            let mut ev = core.events.lock();
            ev.done = 0;
            ev.mb_pending = true;
        }

        let addr = core.block.dma_address();
        let bar = self.bar()?;
        // MMIO writes are ordered after the block's memory writes above (`writel` semantics).
        // CAST: the two halves of the 64-bit address, truncation intended.
        write_reg(bar, regs::MB_ARG_LO::default().with_value(addr as u32));
        // CAST: as above.
        write_reg(
            bar,
            regs::MB_ARG_HI::default().with_value((addr >> 32) as u32),
        );
        write_reg(bar, regs::MB_SUBMIT::default().with_seq(u32::from(seq)));

        if !core.wait_done(mask) {
            dev_err!(
                core.dev,
                "mailbox {}: no completion within {} ms (status {})\n",
                opcode.name(),
                MAILBOX_TIMEOUT_MS,
                status_name(core.block.read32(STATUS_OFFSET))
            );
            return Err(ETIMEDOUT);
        }
        let raw = core.block.read32(STATUS_OFFSET);
        // The device writes the payload before the status (release): read it after.
        dma_mb(Read);
        let mut bytes = KVec::from_elem(0u8, core::mem::size_of::<T>(), GFP_KERNEL)?;
        core.block.read_bytes(0, &mut bytes);
        if let Some(out) = T::from_bytes_copy(&bytes) {
            *args = out;
        }
        Status::try_from(raw).map_err(|_| EIO)
    }

    /// The sequence number of the last command.
    pub(crate) fn last_seq(&self) -> u16 {
        self.state.seq
    }
}

/// The bit of `vector` in [`Events::done`]; vectors are below `MSIX_MAX_VECTORS` (64).
fn vector_bit(vector: u16) -> u64 {
    1u64.checked_shl(u32::from(vector)).unwrap_or(0)
}

/// Name of the raw mailbox status `raw`, for messages.
pub(crate) fn status_name(raw: u32) -> &'static str {
    match Status::try_from(raw) {
        Ok(status) => status.name(),
        Err(_) => "(unknown)",
    }
}

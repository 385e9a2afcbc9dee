// SPDX-License-Identifier: GPL-2.0

//! The device-programming core shared by the interrupt handlers and every layer above: the CMP
//! mailbox, the interrupt ring and its per-cause counters, and the device-wide objects
//! ([`Objects`]: ids, the system address space).
//!
//! Implementation note: [`Core`] is `'static` and reference counted, because open files (and
//! their mappings) may outlive the bound device. Everything that needs the bound device — BAR0
//! and the `Device<Bound>` that DMA allocations want — is reached only through [`Core::hw`],
//! which locks the mailbox mutex and yields [`ENODEV`] once [`Core::revoke`] has run (the
//! bring-up calls it before BAR0 is unmapped). Lock order: the hardware mutex (`command::HwGuard`),
//! then [`Objects`], then the interrupt-safe [`Events`] spinlock. The layers above take their
//! own locks before [`Objects`].
//!
//! The interrupt ring is consumed here, record by record; what a record means beyond the
//! mailbox and context faults is the interrupt layer's business ([`Core::handle_interrupt`]
//! hands every record to it).

use core::{mem::offset_of, ptr::NonNull};

use kernel::{
    device::{Bound, Device},
    pci,
    new_condvar, new_mutex, new_spinlock_irq,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Release},
        barrier::{dma_mb, Read},
        lock::{mutex::MutexBackend, Guard},
        Arc, CondVar, Mutex, SpinLockIrq,
    },
    time::{ClockSource, Monotonic},
};

use super::{
    cmdring::CmdRing,
    dmamem::DmaBuf,
    ids::IdBitmap,
    objects::Objects,
    pagetable::AddressSpace,
    regs::{Bar0, DeviceInfo},
    shares::{Share, ShareOwner},
};
use crate::abi::{
    irq::{self as abi_irq, cause, InterruptRecord, RecordKind},
    mailbox::{self, Status},
    uapi_debug,
};

/// How often a command without completion looks at `CMD_RING_ERROR` (besides after every
/// interrupt that brought nothing to consume): a command-ring fault fails it then, not after
/// the mailbox timeout.
pub(super) const RING_CHECK_MS: u32 = 20;
/// How many 10 µs sleeps a command-ring entry's completion may lag its block's (the device
/// writes it right after; 10 ms is far past that).
pub(super) const ENTRY_LAG_POLLS: u32 = 1000;
/// Interrupt ring slots (the header and 64 records of 48 bytes fit one page).
pub(super) const IRQ_RING_ENTRIES: u32 = 64;
/// Byte offset of the `status` word in a mailbox block.
pub(super) const STATUS_OFFSET: usize = offset_of!(mailbox::MailboxHeader, status);
/// Byte offset of the `seq` word in a mailbox block.
pub(super) const SEQ_OFFSET: usize = offset_of!(mailbox::MailboxHeader, seq);
/// Byte offsets of the interrupt ring header's fields.
const RING_WRITE_INDEX: usize = offset_of!(abi_irq::InterruptRingHeader, write_index);
/// See [`RING_WRITE_INDEX`].
const RING_READ_INDEX: usize = offset_of!(abi_irq::InterruptRingHeader, read_index);
/// See [`RING_WRITE_INDEX`].
const RING_OVERFLOWS: usize = offset_of!(abi_irq::InterruptRingHeader, overflows);

/// The shortest time between two "interrupt ring full" log lines (a process flooding the ring
/// with NOTIFY packets must not flood the log): 5 s.
const OVERFLOW_LOG_NS: u64 = 5_000_000_000;

/// What the interrupt handlers record, and the counters `DEBUG_STATS` reports.
#[derive(Default)]
pub(crate) struct Events {
    /// Bit `v`: a mailbox completion was seen on vector `v` since the bit was last cleared.
    pub(super) done: u64,
    /// A mailbox command is in flight and its completion has not been counted yet.
    pub(super) mb_pending: bool,
    /// Interrupts received, all vectors together.
    pub(crate) interrupts: u64,
    /// Interrupt events by `irq::cause` bit index: mailbox completions and records by kind.
    pub(crate) by_cause: [u64; 8],
    /// Context-fault records seen.
    pub(crate) faults: u64,
    /// Next interrupt-ring record to consume.
    ring_read: u32,
    /// Records the device reported as dropped (ring full).
    pub(crate) overflows: u32,
    /// `overflows` as of the last "interrupt ring full" log line, and when it was written
    /// (monotonic ns; the line is written at most every [`OVERFLOW_LOG_NS`]).
    overflows_logged: u32,
    overflow_log_ns: Option<u64>,
    /// GPU pages mapped in all address spaces.
    pub(crate) gpu_pages: u64,
    /// Device context ids with a fault record not yet taken by [`Core::take_faults`].
    faulted: IdBitmap<4>,
    /// The mailbox wedged (the device stopped answering): the device-lost path is due.
    pub(super) wedged: bool,
    /// `WAKE_PATH`: when the wake-up stages last ran.
    wake: uapi_debug::WakePath,
    /// `MAILBOX_TIMING`: the last command's round trip and the counters.
    pub(super) mb: uapi_debug::MailboxTiming,
    /// When the hard handler saw the completion of the command in flight.
    pub(super) mb_irq_ns: u64,
    /// Interrupts that brought neither a mailbox completion nor a record while a command was
    /// in flight (a command-ring fault raises the mailbox interrupt with nothing else).
    pub(super) unexplained: u64,
    /// The device is marked D3 (a copy of `HwState::d3`, set under this lock too): the hard
    /// handler writes no `INT_CLEAR` (an interrupt raised before D3 entry may arrive after it).
    d3: bool,
}

/// One interrupt-ring record, read field by field from the ring (the device may be writing
/// other slots meanwhile).
pub(crate) struct Record<'a> {
    /// The ring.
    ring: &'a DmaBuf,
    /// Byte offset of the record in it.
    at: usize,
}

impl Record<'_> {
    /// `kind` ([`RecordKind`] as raw).
    pub(crate) fn kind(&self) -> u32 {
        self.ring.read32(self.at + offset_of!(InterruptRecord, kind))
    }

    /// `queue`.
    pub(crate) fn queue(&self) -> u32 {
        self.ring.read32(self.at + offset_of!(InterruptRecord, queue))
    }

    /// `engine`.
    pub(crate) fn engine(&self) -> u32 {
        self.ring.read32(self.at + offset_of!(InterruptRecord, engine))
    }

    /// `context`.
    pub(crate) fn context(&self) -> u32 {
        self.ring.read32(self.at + offset_of!(InterruptRecord, context))
    }

    /// `fence`.
    pub(crate) fn fence(&self) -> u64 {
        self.ring.read64(self.at + offset_of!(InterruptRecord, fence))
    }

    /// `value`.
    pub(crate) fn value(&self) -> u64 {
        self.ring.read64(self.at + offset_of!(InterruptRecord, value))
    }

    /// `address`.
    pub(crate) fn address(&self) -> u64 {
        self.ring.read64(self.at + offset_of!(InterruptRecord, address))
    }

    /// `detail`.
    pub(crate) fn detail(&self) -> u32 {
        self.ring.read32(self.at + offset_of!(InterruptRecord, detail))
    }
}

/// BAR0 and the bound device, as raw pointers valid until [`Core::revoke`].
pub(super) struct HwRef {
    /// BAR0 of the bound device (its lifetime erased; see the `Send` impl).
    pub(super) bar: NonNull<Bar0<'static>>,
    /// BAR2, mapped when the command ring is used.
    pub(super) doorbells: Option<NonNull<pci::Bar<'static>>>,
    /// The bound device.
    pub(super) dev: NonNull<Device<Bound>>,
}

// SAFETY: `HwRef` only points at objects (an MMIO mapping and a device) that may be used from
// any thread; it is only dereferenced while the hardware mutex is held and not revoked.
unsafe impl Send for HwRef {}

/// State under the hardware mutex.
pub(super) struct HwState {
    /// The last mailbox sequence number.
    pub(super) seq: u16,
    /// A command timed out or a completion did not match its command: the mailbox is out of
    /// step with the device, and every further command fails with `EIO` until the device is
    /// reset (unbind and bind: a new core).
    pub(super) wedged: bool,
    /// `None` once the device is unbound.
    pub(super) hw: Option<HwRef>,
    /// Bit `e`: the driver put engine `e` in F1 (`hw::power`).
    pub(super) engines_f1: u32,
    /// `KICK_QUEUE` commands sent: an F1 request carries the device's count (`hw::power`).
    pub(super) kicks: u64,
    /// The command ring, once [`Core::start`] enabled it; `None`: commands through BAR0.
    pub(super) ring: Option<CmdRing>,
    /// The device is in D3 (or going there): BAR0 is not touched, mailbox commands fail with
    /// `EAGAIN` (`hw::power`).
    pub(super) d3: bool,
}

/// The device-programming core of one device.
#[pin_data]
pub(crate) struct Core {
    /// Identity and geometry.
    pub(super) info: DeviceInfo,
    /// Bus address of BAR2 (doorbells).
    doorbell_bar: u64,
    /// Bus address of BAR4 (VRAM).
    vram_bar: u64,
    /// The PCI device as a generic device (for DMA mappings and messages).
    pub(super) dev: ARef<Device>,
    /// The mailbox argument block (one page).
    pub(super) block: DmaBuf,
    /// The interrupt ring (header and records, one page).
    pub(super) ring: DmaBuf,
    /// Serialises device programming; holds BAR0 while the device is bound.
    #[pin]
    pub(super) hw: Mutex<HwState>,
    /// [`Self::revoke`] has run (readable without the hardware mutex, e.g. by `mmap` under the
    /// mmap lock).
    revoked: Atomic<bool>,
    /// [`Self::lose_for_reset`] has run: the binding was lost to a function reset the module
    /// was told about, not to a device that stopped answering.
    lost_to_reset: Atomic<bool>,
    /// Device-wide ids and objects.
    #[pin]
    objects: Mutex<Objects>,
    /// What the handlers saw.
    #[pin]
    pub(super) events: SpinLockIrq<Events>,
    /// Signalled by the handlers whenever `events` changes.
    #[pin]
    pub(super) wake: CondVar,
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
        vram_bar: u64,
    ) -> Result<Arc<Self>> {
        let block = DmaBuf::new(dev, 1)?;
        let ring = DmaBuf::new(dev, 1)?;
        let generic: &Device = dev;
        Arc::pin_init(
            try_pin_init!(Self {
                info,
                doorbell_bar,
                vram_bar,
                dev: generic.into(),
                block,
                ring,
                hw <- new_mutex!(HwState {
                    seq: 0,
                    wedged: false,
                    hw: None,
                    engines_f1: 0,
                    kicks: 0,
                    ring: None,
                    d3: false,
                }),
                revoked: Atomic::new(false),
                lost_to_reset: Atomic::new(false),
                objects <- new_mutex!(Objects::new()),
                events <- new_spinlock_irq!(Events::default()),
                wake <- new_condvar!(),
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
    pub(crate) unsafe fn attach(
        &self,
        bar: &Bar0<'_>,
        doorbells: Option<&pci::Bar<'_>>,
        dev: &Device<Bound>,
    ) {
        let bar = NonNull::from(bar).cast::<Bar0<'static>>();
        let doorbells = doorbells.map(|d| NonNull::from(d).cast::<pci::Bar<'static>>());
        self.hw.lock().hw = Some(HwRef {
            bar,
            doorbells,
            dev: NonNull::from(dev),
        });
    }

    /// Detaches BAR0: every later device operation fails with `ENODEV`. Waits for the one in
    /// progress.
    pub(crate) fn revoke(&self) {
        let mut hw = self.hw.lock();
        self.revoked.store(true, Release);
        hw.hw = None;
    }

    /// A function reset is about to make the device forget everything the driver gave it:
    /// the mailbox is marked wedged (every later command fails with `EIO`; the hang watchdog
    /// takes the device-lost path, which binds the device again) and BAR0 detached (nothing
    /// programs the device any more). Waits for the device operation in progress.
    pub(crate) fn lose_for_reset(&self) {
        let mut hw = self.hw.lock();
        self.lost_to_reset.store(true, Release);
        hw.wedged = true;
        self.events.lock().wedged = true;
        self.revoked.store(true, Release);
        hw.hw = None;
    }

    /// Whether the binding was lost to a function reset the module was told about
    /// ([`Self::lose_for_reset`]) rather than to a device that stopped answering.
    pub(crate) fn lost_to_reset(&self) -> bool {
        self.lost_to_reset.load(Acquire)
    }

    /// The device was reset with bus mastering off — a function reset [`Self::lose_for_reset`]
    /// announced, done, or the unbind's own reset — and is back at its power-on state: it
    /// forgot every object of the binding and knows no address of anything the module gave it.
    /// What the quarantine holds is freed (counted released), and a destroy the device cannot
    /// confirm from now on frees at once.
    pub(crate) fn forget_after_reset(&self) {
        let items = self.objects().forget_all();
        drop(items);
    }

    /// Whether [`Self::revoke`] has run: the binding is gone, for good.
    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.load(Acquire)
    }

    /// Identity and geometry.
    pub(crate) fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Bus address of BAR2, the doorbell pages.
    pub(crate) fn doorbell_bar(&self) -> u64 {
        self.doorbell_bar
    }

    /// Bus address of BAR4, device memory (VRAM offset 0).
    pub(crate) fn vram_bar(&self) -> u64 {
        self.vram_bar
    }

    /// The device, for DMA mappings and messages.
    pub(crate) fn device(&self) -> &Device {
        &self.dev
    }


    /// Whether the device is in D3 (`hw::power`): the hang watchdog skips its runs then.
    pub(crate) fn is_d3(&self) -> bool {
        self.hw.lock().d3
    }

    /// Whether monitored-fence values are 32-bit and wrap (`CAPS.no_64bit_atomics`, FEN-07).
    pub(crate) fn wrap32(&self) -> bool {
        self.info.caps.no_64bit_atomics()
    }

    /// Whether queue progress fences are monitored fences: a device without 64-bit atomics
    /// (N14) or without native fences (`--no-native-fences`, the non-native adapter of XAD-10).
    pub(crate) fn monitored_progress(&self) -> bool {
        self.wrap32() || !self.info.caps.native_fence()
    }

    /// Locks the device-wide objects.
    pub(crate) fn objects(&self) -> Guard<'_, Objects, MutexBackend> {
        self.objects.lock()
    }

    /// One `what` more for `owner`, unless its process holds `cap` already ([`Objects::charge`]):
    /// the [`ShareCharge`] the object it counts keeps, which gives it back when dropped.
    ///
    /// # Errors
    ///
    /// `ENOSPC` at the cap or the per-user ceiling, `ENOMEM`.
    pub(crate) fn charge_share(self: &Arc<Self>, owner: &ShareOwner, what: Share, cap: u32) -> Result<ShareCharge> {
        self.objects().charge(owner, what, cap)?;
        Ok(ShareCharge {
            core: self.clone(),
            owner: owner.clone(),
            what,
        })
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self, out: impl FnOnce(&Events)) {
        out(&self.events.lock());
    }


    /// Unmaps `pages` pages at `sys_va` from the system address space (its slot stays taken).
    pub(crate) fn unmap_system(&self, sys_va: u64, pages: usize) {
        let mut objects = self.objects();
        if let Ok(system) = objects.system() {
            let before = system.mapped_pages();
            system.unmap_range(sys_va, pages);
            self.add_gpu_pages(before, system.mapped_pages());
        }
    }

    /// Unmaps both pages of the system-VA slot at `sys_va` ([`Self::map_system`]) and, if the
    /// device no longer names it (`forgotten`: it confirmed the unregistration, or was never
    /// given the VA), frees the slot for reuse; a slot the device may still name stays taken
    /// (unmapped: a stale access faults) for the life of the binding.
    pub(crate) fn release_system(&self, sys_va: u64, forgotten: bool) {
        self.unmap_system(sys_va, 2);
        if forgotten {
            self.objects().put_system_va(sys_va);
        }
    }

    /// Unmaps `pages` pages at `va` of `space`, counting them.
    pub(crate) fn unmap_pages(&self, space: &mut AddressSpace, va: u64, pages: usize) {
        let before = space.mapped_pages();
        space.unmap_range(va, pages);
        self.add_gpu_pages(before, space.mapped_pages());
    }

    /// Adds `after - before` to the mapped GPU page count.
    pub(crate) fn add_gpu_pages(&self, before: u64, after: u64) {
        let mut ev = self.events.lock();
        ev.gpu_pages = ev.gpu_pages.wrapping_add(after).wrapping_sub(before);
    }

    /// Interrupt handler work for `vector`: notes a mailbox completion, consumes the interrupt
    /// ring (counting records by kind, noting context faults for [`Self::take_faults`] and
    /// handing every record to `on_record`, which runs with the events spinlock held), wakes
    /// sleepers. The causes seen are acknowledged with `clear_causes` (the `INT_CLEAR` write),
    /// called under the events lock and only while the device is not marked D3: D3 entry sets
    /// its mark under that lock, so no handler writes a register of the device once it is
    /// marked (a cause left set costs nothing: the device raises every cause anew). Returns
    /// whether a context fault was recorded.
    pub(crate) fn handle_interrupt(
        &self,
        vector: u16,
        mut on_record: impl FnMut(&Record<'_>),
        clear_causes: impl FnOnce(u32),
    ) -> bool {
        let mut clear = 0;
        let now = monotonic_ns();
        let mut ev = self.events.lock();
        ev.interrupts = ev.interrupts.wrapping_add(1);
        let in_flight = ev.mb_pending;
        if self.block.read32(STATUS_OFFSET) != Status::Pending as u32 {
            ev.done |= vector_bit(vector);
            if ev.mb_pending {
                ev.mb_pending = false;
                ev.mb_irq_ns = now;
                ev.by_cause[0] += 1;
                clear |= cause::MAILBOX;
            }
        }

        let write = self.ring.read32(RING_WRITE_INDEX);
        // The device writes the records before the write index (release): read them after.
        dma_mb(Read);
        // A healthy device never claims more than the ring holds; otherwise skip to the
        // records that can still be there.
        let mut read = abi_irq::resume_index(write, ev.ring_read, IRQ_RING_ENTRIES);
        let mut faults = false;
        while read != write {
            // CAST: below a page (64 records of 48 bytes after the header).
            let at = abi_irq::record_offset(read, IRQ_RING_ENTRIES) as usize;
            let record = Record {
                ring: &self.ring,
                at,
            };
            let kind = record.kind();
            let (index, bit) = if kind == RecordKind::NativeFenceSignaled as u32 {
                (1, cause::NATIVE_FENCE)
            } else if kind == RecordKind::MonitoredFenceSignaled as u32
                || kind == RecordKind::Notify as u32
            {
                (2, cause::MONITORED_FENCE)
            } else if kind == RecordKind::EngineState as u32 {
                (3, cause::ENGINE_STATE)
            } else if kind == RecordKind::ContextFault as u32 {
                ev.faults += 1;
                let context = record.context();
                // Context ids are below 256; others are ignored.
                if context < 256 {
                    ev.faulted.insert(context);
                    faults = true;
                }
                (4, cause::FAULT)
            } else {
                (7, 0)
            };
            on_record(&record);
            if index == 1 || index == 2 {
                ev.wake.hard_irq_ns = now;
            }
            ev.by_cause[index] += 1;
            clear |= bit;
            read = read.wrapping_add(1);
        }
        if in_flight && ev.mb_pending && ev.ring_read == read {
            // Nothing to consume while a command is in flight: maybe a command-ring fault.
            ev.unexplained = ev.unexplained.wrapping_add(1);
        }
        ev.ring_read = read;
        self.ring.write32(RING_READ_INDEX, read);
        ev.overflows = self.ring.read32(RING_OVERFLOWS);
        let dropped = ev.overflows.wrapping_sub(ev.overflows_logged);
        let log = dropped != 0
            && ev
                .overflow_log_ns
                .is_none_or(|t| now.wrapping_sub(t) >= OVERFLOW_LOG_NS);
        if log {
            ev.overflows_logged = ev.overflows;
            ev.overflow_log_ns = Some(now);
        }
        let total = ev.overflows;
        if clear != 0 && !ev.d3 {
            clear_causes(clear);
        }
        drop(ev);
        if log {
            dev_warn!(
                self.dev,
                "interrupt ring full: the device dropped {} record(s) since the last such line ({} in all); each drop is followed by a scan of every wait\n",
                dropped,
                total
            );
        }
        self.wake.notify_all();
        faults
    }

    /// Copies the D3 mark for the hard handler ([`Self::handle_interrupt`]).
    pub(super) fn mark_d3_for_irq(&self, d3: bool) {
        self.events.lock().d3 = d3;
    }

    /// The threaded interrupt handler started (`WAKE_PATH`).
    pub(crate) fn note_thread(&self) {
        let now = monotonic_ns();
        let cpu = current_cpu();
        let mut ev = self.events.lock();
        ev.wake.thread_ns = now;
        ev.wake.thread_cpu = cpu;
    }

    /// A path that released CPU waits woke the sleepers (`WAKE_PATH`).
    pub(crate) fn note_released(&self) {
        let now = monotonic_ns();
        self.events.lock().wake.released_ns = now;
    }

    /// A CPU wait that slept returned satisfied (`WAKE_PATH`).
    pub(crate) fn note_woken(&self) {
        let now = monotonic_ns();
        let cpu = current_cpu();
        let mut ev = self.events.lock();
        ev.wake.woken_ns = now;
        ev.wake.woken_cpu = cpu;
    }

    /// A CPU wait's spin ended it (`hit`) or did not (`WAKE_PATH`).
    pub(crate) fn note_spin(&self, hit: bool) {
        let mut ev = self.events.lock();
        if hit {
            ev.wake.spin_hits = ev.wake.spin_hits.wrapping_add(1);
        } else {
            ev.wake.spin_misses = ev.wake.spin_misses.wrapping_add(1);
        }
    }

    /// `MAILBOX_TIMING`.
    pub(crate) fn mailbox_timing(&self) -> uapi_debug::MailboxTiming {
        self.events.lock().mb
    }

    /// `WAKE_PATH`.
    pub(crate) fn wake_path(&self) -> uapi_debug::WakePath {
        let ev = self.events.lock();
        uapi_debug::WakePath {
            interrupts: ev.interrupts,
            ..ev.wake
        }
    }

    /// Whether the mailbox wedged (read without waiting for a command in flight).
    pub(crate) fn is_wedged(&self) -> bool {
        self.events.lock().wedged
    }

    /// Records device context `context` lost without a fault record (an engine reset blamed
    /// it): the next [`Self::take_faults`] returns it with the faulted ones. Ids of 256 and
    /// above are ignored, as in fault records.
    pub(crate) fn note_lost(&self, context: u32) {
        if context < 256 {
            self.events.lock().faulted.insert(context);
        }
    }

    /// Takes the device context ids named by fault records since the last call.
    pub(crate) fn take_faults(&self) -> IdBitmap<4> {
        core::mem::take(&mut self.events.lock().faulted)
    }


}

/// `CLOCK_MONOTONIC` now, in nanoseconds (the clock userspace reads with `clock_gettime`).
pub(crate) fn monotonic_ns() -> u64 {
    u64::try_from(<Monotonic as ClockSource>::ktime_get()).unwrap_or(0)
}

/// The CPU running the caller (for `WAKE_PATH`; may change right after).
fn current_cpu() -> u32 {
    kernel::cpu::CpuId::current().as_u32()
}

/// The bit of `vector` in [`Events::done`]; vectors are below `MSIX_MAX_VECTORS` (64).
pub(super) fn vector_bit(vector: u16) -> u64 {
    1u64.checked_shl(u32::from(vector)).unwrap_or(0)
}

/// Name of the raw mailbox status `raw`, for messages.
pub(crate) fn status_name(raw: u32) -> &'static str {
    match Status::try_from(raw) {
        Ok(status) => status.name(),
        Err(_) => "(unknown)",
    }
}

/// One unit of a process's share ([`Share`]: a handle, an eventfd wait, a `sync_file` export),
/// kept by the object it counts and given back when that object is dropped — on its destroy,
/// on its file's release, or however else it goes (signaled, cancelled, abandoned), so no path
/// can forget it. Never dropped under [`Core::objects`] (it takes that lock).
pub(crate) struct ShareCharge {
    /// The device whose [`Objects`] counted it.
    core: Arc<Core>,
    /// Who it is counted for.
    owner: ShareOwner,
    /// What it counts.
    what: Share,
}

impl Drop for ShareCharge {
    fn drop(&mut self) {
        self.core.objects().uncharge(&self.owner, self.what);
    }
}

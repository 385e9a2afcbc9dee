// SPDX-License-Identifier: GPL-2.0

//! Native-fence logs, the timeline, and the native-fence records the interrupt handler saw
//! ([`Logs`]); the interrupt paths that use them are in [`super::irqpath`].
//!
//! Logs (LOG-02..04): every hardware queue gets exactly two 4 KiB log buffers, a wait log and a
//! signal log, allocated here and mapped only in the system address space (the device's and
//! the CMP's view) and in the kernel (DMA-coherent memory); they have no mmap offset, so no
//! process can map them. Each is given to the device with its own `SET_LOG_BUFFER` call.
//!
//! Interrupt paths (in the interrupt thread, `irqpath::process`): the hard handler turns each
//! native-fence record into [`FenceWork`]. An exact record (a fence handle, IRQ-02/08) releases
//! the waits of that fence; a per-queue record (IRQ-09/10) reads only that queue's logs and
//! releases the waits of the fences its new signal entries name; a NULL record (IRQ-04/05/11)
//! examines every pending wait (the legacy monitored-fence waits too when the record carries
//! EvaluateLegacyMonitoredFences, IRQ-06). "Release" means: read the fence's CurrentValue and,
//! if the wait is satisfied, mark it released, count it for its path and wake the waiters.
//! Exact and NULL records are served before any log is read (they need none); the logs are
//! read next (for per-queue records, overflow detection and the timeline). Reading logs follows
//! LOG-13: read every chosen log's header, `FLUSH_LOGS` each queue with new entries, then read
//! the entries. A log whose WraparoundCount/FirstFreeEntryIndex moved by more than its 84
//! entries since the cached copy overflowed (LOG-15): every wait is examined. A per-queue record
//! carries the log index of its signal's entry; a record whose own entry is not among its
//! queue's new entries (a signal logged with `NO_LOG` or under another fence's handle, which the
//! device reports as no index, or an entry read earlier, by `READ_TIMELINE` say), or whose
//! entries release no wait (a wrong handle in an entry: entries are the submitter's word), also
//! falls back to examining every wait, so no wake-up is lost. Another entry of the queue with the
//! record's value does not stand in for its own: it may name another fence
//! (`FenceWork::unexplained`).
//!
//! Timeline (LOG-01): every entry read becomes a [`uapi_debug::TimelineEntry`] (signal executed /
//! wait unblocked with its GPU timestamps, and with verbose logging (LOG-20) wait begun; an empty
//! entry or an operation this module does not know is skipped); kernel-mode `SUBMIT` adds "signal queued" / "wait
//! queued" events with the CPU time, for the logged fence packets of the command buffer and for
//! the progress-fence signal the module appends (logged in the signal log at the next index).
//! Thread events ([`Logs::note_thread`]) add what guest threads did around the fences: CPU
//! waits and their ends, CPU signals, eventfd completions, doorbell status changes and
//! kernel-mode submissions, with the thread's ids (`belfry-trace` draws a track per thread)
//! and, kept aside for `READ_TIMELINE`'s "own events" filter, the thread's process as its
//! held `struct pid` ([`ProcessRef`]; the recorded tgid is a number a later process may reuse).
//! `READ_TIMELINE` collects every log first, then copies events from a cursor.

use core::mem::offset_of;

use kernel::{
    new_mutex, new_spinlock_irq,
    prelude::*,
    sync::{
        barrier::{dma_mb, Read},
        lock::{mutex::MutexBackend, Guard},
        Arc, Mutex, SpinLockIrq,
    },
    time::{Instant, Monotonic},
    uaccess::{UserPtr, UserSlice},
};

use super::work::{FenceWork, LoggedSignal};
use crate::{
    bindings::pid::ProcessRef,
    abi::{
        fence::{self, LogKind, LogOperation},
        ids::{ContextId, FenceHandle, QueueId},
        mailbox::{self, Opcode},
        mmu, packet, uapi_debug,
    },
    hw::{
        command::HwGuard,
        core::Core,
        dmamem::DmaBuf,
        objects::Objects,
    },
};

/// The largest fixed-length packet, over the abi's one packet list.
const MAX_PACKET_BYTES: usize = {
    macro_rules! largest {
        ($($name:ident),*) => {{
            let mut most = 0;
            $(
                if core::mem::size_of::<packet::$name>() > most {
                    most = core::mem::size_of::<packet::$name>();
                }
            )*
            most
        }};
    }
    crate::for_each_packet!(largest)
};
/// Timeline events kept (the oldest are dropped first).
const TIMELINE_LEN: usize = 1024;
/// Bytes of a log page.
const PAGE: u64 = mmu::PAGE_SIZE;

/// The two logs of one hardware queue.
pub(super) struct QueueLog {
    /// Device queue id.
    queue: QueueId,
    /// The wait log and the signal log, indexed by [`LogKind`].
    bufs: [DmaBuf; 2],
    /// System-address-space VA of the wait log (the signal log follows it).
    sys_va: u64,
    /// Cached log positions read so far (WraparoundCount × entries + FirstFreeEntryIndex).
    read: [u32; 2],
    /// Next signal-log index the module uses for a kernel-mode `SUBMIT`'s progress signal.
    next_signal: u32,
    /// The queue's device context (whose fences its entries may name) and its progress fence.
    context: ContextId,
    progress: FenceHandle,
}

impl QueueLog {
    /// Shows `e`'s fence as 0, flagged, unless the queue's context may name it: a fence of the
    /// context (`objects`) or the queue's progress fence (entries are the
    /// submitter's word, and must not put another process's fence in the timeline).
    fn contain(&self, objects: &Objects, e: &mut uapi_debug::TimelineEntry) {
        if e.fence != 0
            && e.fence != self.progress.raw()
            && !objects.may_name(self.context.raw(), e.fence)
        {
            e.fence = 0;
            e.flags |= uapi_debug::TIMELINE_FLAG_FOREIGN_FENCE;
        }
    }
}

/// A timeline event and, for a thread event, the process of the thread (held while the event
/// is kept).
pub(crate) struct Event {
    /// The event as `READ_TIMELINE` copies it out.
    pub(crate) entry: uapi_debug::TimelineEntry,
    /// The process of a thread event; `None` for a log event or a thread without one left.
    pub(crate) process: Option<ProcessRef>,
}

/// The fence logs of a device, the interrupt-path counters and the timeline.
pub(super) struct LogState {
    /// Logs by queue.
    queues: KVec<QueueLog>,
    /// Timeline events, a ring indexed by sequence number.
    timeline: KVVec<Event>,
    /// Sequence number of the next event.
    next_seq: u64,
    /// Time origin of the CPU timestamps.
    start: Instant<Monotonic>,
    /// Counters.
    pub(super) stats: uapi_debug::IrqDebug,
    /// Signal entries read outside the interrupt thread (`READ_TIMELINE`, a queue's detach),
    /// kept for the next queue-array pass: a record naming their queue finds them read.
    carried: KVec<LoggedSignal>,
    /// Entries were read outside the interrupt thread past [`CARRIED_MAX`]: the next
    /// queue-array pass reads every waited fence's value instead.
    carried_lost: bool,
}

/// Most signal entries kept for the next queue-array pass ([`LogState::carried`]).
const CARRIED_MAX: usize = 256;

impl LogState {
    /// Empty, with room for the timeline.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    fn new() -> Result<Self> {
        Ok(Self {
            queues: KVec::new(),
            timeline: KVVec::with_capacity(TIMELINE_LEN, GFP_KERNEL)?,
            next_seq: 0,
            start: Instant::now(),
            stats: uapi_debug::IrqDebug::default(),
            carried: KVec::new(),
            carried_lost: false,
        })
    }

    /// Keeps signal entries read outside the interrupt thread for the next queue-array pass.
    fn carry(&mut self, signaled: KVec<LoggedSignal>) {
        for e in signaled {
            if self.carried.len() >= CARRIED_MAX || self.carried.push(e, GFP_KERNEL).is_err() {
                self.carried_lost = true;
                return;
            }
        }
    }

    /// The entries [`Self::carry`] kept, and whether some were not kept; none kept after.
    pub(super) fn take_carried(&mut self) -> (KVec<LoggedSignal>, bool) {
        let lost = core::mem::replace(&mut self.carried_lost, false);
        (core::mem::replace(&mut self.carried, KVec::new()), lost)
    }

    /// CPU time since the logs were created, in ns.
    fn cpu_ns(&self) -> u64 {
        u64::try_from((Instant::<Monotonic>::now() - self.start).as_nanos()).unwrap_or(0)
    }

    /// Appends a log event (its sequence number is set here).
    fn push(&mut self, entry: uapi_debug::TimelineEntry) {
        self.push_event(Event { entry, process: None });
    }

    /// Appends a timeline event (its sequence number is set here); the event it overwrites
    /// gives back its process.
    fn push_event(&mut self, mut e: Event) {
        e.entry.seq = self.next_seq;
        self.next_seq += 1;
        // CAST: the remainder is below `TIMELINE_LEN`.
        let at = (e.entry.seq % TIMELINE_LEN as u64) as usize;
        if let Some(slot) = self.timeline.get_mut(at) {
            *slot = e;
        } else {
            // Room was reserved for `TIMELINE_LEN` events.
            let _ = self.timeline.push(e, GFP_ATOMIC);
        }
    }

    /// Reads the new entries of the logs of the queues `pick` selects (LOG-13: headers first,
    /// then `FLUSH_LOGS` per queue with new entries, then the entries) into the timeline;
    /// signal entries go to `signaled`. Returns whether a log overflowed (LOG-15).
    pub(super) fn collect(
        &mut self,
        core: &Core,
        hw: Option<&mut HwGuard<'_>>,
        pick: impl Fn(QueueId) -> bool,
        signaled: &mut KVec<LoggedSignal>,
    ) -> bool {
        // (1) The headers.
        let mut heads = KVec::<(usize, [u32; 2])>::new();
        for (i, q) in self.queues.iter().enumerate() {
            if pick(q.queue) {
                let head = [position(&q.bufs[0]), position(&q.bufs[1])];
                if head != q.read && heads.push((i, head), GFP_KERNEL).is_err() {
                    break;
                }
            }
        }
        // (2) A barrier per queue, so every entry below the index is visible.
        if let Some(hw) = hw {
            for &(i, _) in heads.iter() {
                let mut args = mailbox::ObjectArgs {
                    id: self.queues[i].queue.raw(),
                    ..Default::default()
                };
                if hw.command(Opcode::FlushLogs, &mut args, &[]).is_ok() {
                    self.stats.log_flushes += 1;
                }
            }
        }
        dma_mb(Read);
        // (3) The entries.
        let objects = core.objects();
        let mut overflow = false;
        for &(i, head) in heads.iter() {
            for kind in [LogKind::Waits, LogKind::Signals] {
                let k = kind as usize;
                let (queue, from) = (self.queues[i].queue, self.queues[i].read[k]);
                let unread = fence::log_unread(from, head[k]);
                if unread.overflowed {
                    // Wrapped over unread entries (or moved backwards): what is left is read.
                    overflow = true;
                    self.stats.overflows += 1;
                    self.push(uapi_debug::TimelineEntry {
                        queue: queue.raw(),
                        operation: uapi_debug::TIMELINE_LOST,
                        value: u64::from(unread.lost),
                        log_index: head[k],
                        ..Default::default()
                    });
                }
                let first = unread.from;
                let mut at = first;
                while at != head[k] {
                    let mut e = read_entry(&self.queues[i].bufs[k], at, queue.raw());
                    if e.operation == 0 {
                        // An empty entry (a `WAIT_BEGIN` slot written while verbose logging
                        // was off) or a type this module does not know: not an event.
                        at = at.wrapping_add(1);
                        continue;
                    }
                    let logged = e.fence;
                    self.queues[i].contain(&objects, &mut e);
                    if e.operation == uapi_debug::TIMELINE_SIGNAL_EXECUTED {
                        // The interrupt paths take the handle as logged: a wrong one costs a
                        // scan, never a lost wake-up; only an entry of a fence the queue's
                        // context may name releases a wait on its value alone (queue-array).
                        let entry = LoggedSignal {
                            queue,
                            handle: FenceHandle::new(logged),
                            value: e.value,
                            index: at,
                            nameable: logged != 0
                                && e.flags & uapi_debug::TIMELINE_FLAG_FOREIGN_FENCE == 0,
                        };
                        let _ = signaled.push(entry, GFP_KERNEL);
                    }
                    self.push(e);
                    self.stats.log_entries += 1;
                    at = at.wrapping_add(1);
                }
                self.queues[i].read[k] = head[k];
            }
        }
        overflow
    }
}

/// The fence logs of a device and the native-fence work of the interrupt thread.
///
/// Lock order: the hardware mutex, then the log state, then the fence book, then the core's
/// objects; the work spinlock is taken alone (and inside the core's events spinlock).
#[pin_data]
pub(crate) struct Logs {
    /// The core.
    core: Arc<Core>,
    /// The origin of the timeline's CPU times (the state's, copied).
    start: Instant<Monotonic>,
    /// Logs by queue, the timeline and the interrupt-path counters.
    #[pin]
    state: Mutex<LogState>,
    /// Native-fence records not yet handled by the interrupt thread.
    #[pin]
    work: SpinLockIrq<FenceWork>,
    /// The end of a CPU wait noted while the state was busy (the interrupt thread holds it
    /// across its `FLUSH_LOGS` commands), appended to the timeline by the next holder
    /// ([`Self::state`]): a released waiter does not wait for the log collection.
    #[pin]
    deferred: Mutex<KVec<Event>>,
}

/// Most wait ends kept aside ([`Logs::deferred`]); past it a waiter takes the state lock.
const DEFERRED_MAX: usize = 64;

impl Logs {
    /// No log yet, with room for the timeline.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(core: Arc<Core>) -> Result<Arc<Self>> {
        let state = LogState::new()?;
        let start = state.start;
        Arc::pin_init(
            try_pin_init!(Self {
                core,
                start,
                state <- new_mutex!(state),
                work <- new_spinlock_irq!(FenceWork::default()),
                deferred <- new_mutex!(KVec::new()),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// The core.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Locks the log state (after the hardware mutex), the events kept aside appended first.
    pub(super) fn state(&self) -> Guard<'_, LogState, MutexBackend> {
        let mut state = self.state.lock();
        Self::append_deferred(&mut state, &self.deferred);
        state
    }

    /// Appends the events of `deferred` to the timeline of `state`, in the order noted.
    fn append_deferred(state: &mut LogState, deferred: &Mutex<KVec<Event>>) {
        let events = core::mem::replace(&mut *deferred.lock(), KVec::new());
        for e in events {
            state.push_event(e);
        }
    }

    /// Hard interrupt handler: runs `f` on the work of the interrupt thread.
    pub(crate) fn note(&self, f: impl FnOnce(&mut FenceWork)) {
        f(&mut self.work.lock());
    }

    /// Whether the interrupt thread has native-fence work (callable in the hard handler).
    pub(crate) fn work_pending(&self) -> bool {
        self.work.lock().pending()
    }

    /// Takes the native-fence work the interrupt handlers recorded.
    pub(super) fn take_work(&self) -> FenceWork {
        core::mem::take(&mut *self.work.lock())
    }

    /// Gives device queue `queue` its two log buffers (LOG-02, LOG-03): allocated, mapped in
    /// the system address space, then one `SET_LOG_BUFFER` each.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, `ENOSPC`, or the device's refusal (`EIO`).
    pub(crate) fn attach(
        &self,
        hw: &mut HwGuard<'_>,
        queue: QueueId,
        context: ContextId,
        progress: FenceHandle,
    ) -> Result {
        let bufs = [DmaBuf::new(hw.dev()?, 1)?, DmaBuf::new(hw.dev()?, 1)?];
        let mut logs = self.state();
        logs.queues.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let sys_va = self.core.map_system(hw, &bufs[0], Some(&bufs[1]))?;
        let log = QueueLog {
            queue,
            bufs,
            sys_va,
            read: [0; 2],
            next_signal: 0,
            context,
            progress,
        };
        for kind in [LogKind::Waits, LogKind::Signals] {
            if let Err(e) = set_log_buffer(hw, queue, kind, sys_va + kind as u64 * PAGE) {
                // The device may have taken the other log: the slot stays taken.
                self.core.release_system(log.sys_va, false);
                return Err(e);
            }
        }
        logs.queues.push(log, GFP_KERNEL_ACCOUNT)?;
        Ok(())
    }

    /// After device queue `queue` was destroyed (`destroyed`) or not: its last entries go to
    /// the timeline and its logs are freed. A queue the device kept has its logs removed
    /// first; if the device refuses that too, the buffers stay (the device may still write
    /// them).
    pub(crate) fn detach(&self, hw: Option<&mut HwGuard<'_>>, queue: QueueId, destroyed: bool) {
        if !destroyed {
            let removed = hw.is_some_and(|hw| {
                set_log_buffer(hw, queue, LogKind::Waits, 0).is_ok()
                    && set_log_buffer(hw, queue, LogKind::Signals, 0).is_ok()
            });
            if !removed {
                return;
            }
        }
        let mut logs = self.state();
        // The queue's commands have completed: its entries are visible without a flush.
        // Its lost entries, if any, matter to nobody: a record still naming it finds no entry
        // and scans.
        let mut signaled = KVec::new();
        logs.collect(&self.core, None, |q| q == queue, &mut signaled);
        logs.carry(signaled);
        let Some(i) = logs.queues.iter().position(|q| q.queue == queue) else {
            return;
        };
        if let Ok(log) = logs.queues.remove(i) {
            self.core.release_system(log.sys_va, true);
        }
    }

    /// Kernel-mode `SUBMIT` of `size` bytes at `offset` of `cmdbuf` on device queue `queue`: its
    /// logged fence packets are queued now (timeline), and so is the progress signal of `handle`
    /// to `value` the module appends. Returns the signal-log index for that signal (`NO_LOG` for
    /// a queue without logs): past every index the command buffer used.
    pub(crate) fn note_submit(
        &self,
        queue: QueueId,
        cmdbuf: &DmaBuf,
        offset: u32,
        size: u32,
        handle: FenceHandle,
        value: u64,
    ) -> u32 {
        let mut logs = self.state();
        let now = logs.cpu_ns();
        let Some(qi) = logs.queues.iter().position(|q| q.queue == queue) else {
            return packet::NO_LOG;
        };
        // CAST: `u32` fits `usize`; the caller checked the range lies in `cmdbuf`.
        let (mut at, end) = (offset as usize, offset as usize + size as usize);
        let mut bytes = [0u8; MAX_PACKET_BYTES];
        while at + 4 <= end {
            // Each packet is read as the device will check it (`packet::check_header`, then
            // `packet::validate`): the device faults the queue's context at the first packet it
            // refuses and runs nothing after it, so nothing after it is queued either.
            let Ok((op, dwords)) = packet::check_header(cmdbuf.read32(at)) else {
                break;
            };
            // CAST: at most 65535 dwords.
            let len = dwords as usize * 4;
            if at + len > end {
                break;
            }
            // A variable-length `NOP` is only skipped.
            if let Some(packet) = bytes.get_mut(..len).filter(|_| op.dwords().is_some()) {
                cmdbuf.read_bytes(at, packet);
                if packet::validate(packet).is_err() {
                    break;
                }
                let signal = op == packet::Opcode::FenceSignal;
                let logged = match op {
                    packet::Opcode::FenceSignal => packet::FenceSignal::from_le_bytes(packet)
                        .map(|p| (p.log_entry, p.log_handle, p.value)),
                    packet::Opcode::FenceWait => packet::FenceWait::from_le_bytes(packet)
                        .map(|p| (p.log_entry, p.log_handle, p.value)),
                    _ => None,
                };
                if let Some((index, fence, value)) =
                    logged.filter(|&(index, ..)| index != packet::NO_LOG)
                {
                    let mut e = uapi_debug::TimelineEntry {
                        fence,
                        value,
                        cpu_ns: now,
                        queue: queue.raw(),
                        operation: if signal {
                            uapi_debug::TIMELINE_SIGNAL_QUEUED
                        } else {
                            uapi_debug::TIMELINE_WAIT_QUEUED
                        },
                        log_index: index,
                        ..Default::default()
                    };
                    logs.queues[qi].contain(&self.core.objects(), &mut e);
                    logs.push(e);
                    let q = &mut logs.queues[qi];
                    if signal && fence::log_index_at_or_after(index, q.next_signal) {
                        q.next_signal = index.wrapping_add(1);
                    }
                }
            }
            at += len;
        }
        let q = &mut logs.queues[qi];
        let index = q.next_signal;
        q.next_signal = index.wrapping_add(1);
        logs.push(uapi_debug::TimelineEntry {
            fence: handle.raw(),
            value,
            cpu_ns: now,
            queue: queue.raw(),
            operation: uapi_debug::TIMELINE_SIGNAL_QUEUED,
            log_index: index,
            ..Default::default()
        });
        index
    }

    /// A `SUBMIT` that [`note_submit`] saw failed (`EBUSY`, say): its progress signal never reaches
    /// the ring, so its signal-log index `index` is handed out again. The library counts one index
    /// per successful `SUBMIT` for the module's progress signal and assigns the next ones to its own
    /// logged packets (LOG-04); a failed `SUBMIT` consuming one would make the two disagree.
    pub(crate) fn unnote_submit(&self, queue: QueueId, index: u32) {
        let mut logs = self.state();
        if let Some(q) = logs.queues.iter_mut().find(|q| q.queue == queue) {
            if q.next_signal == index.wrapping_add(1) {
                q.next_signal = index;
            }
        }
    }

    /// A thread event of the timeline (`uapi_debug::TIMELINE_CPU_WAIT_START` and on): `operation` by
    /// the calling thread (its tid and tgid recorded, its process kept), at the CPU time now, about `queue`
    /// (`irq::NONE` for none), `fence` and `value`, with the code's `detail`. Sleeps (the
    /// state's mutex): process or interrupt-thread context only.
    pub(crate) fn note_thread(
        &self,
        operation: u32,
        queue: u32,
        fence: u64,
        value: u64,
        detail: u64,
    ) {
        let mut logs = self.state();
        let e = Self::thread_event(&logs, operation, queue, fence, value, detail);
        logs.push_event(e);
    }

    /// [`Self::note_thread`] for the end of a CPU wait: when the state is busy (the interrupt
    /// thread collecting the logs that released this wait, a mailbox command each) the event
    /// is kept aside, stamped now, and appended by the next holder of the state instead of the
    /// waiter waiting for the collection on its way back to user space.
    pub(crate) fn note_thread_end(
        &self,
        operation: u32,
        queue: u32,
        fence: u64,
        value: u64,
        detail: u64,
    ) {
        if let Some(mut logs) = self.state.try_lock() {
            Self::append_deferred(&mut logs, &self.deferred);
            let e = Self::thread_event(&logs, operation, queue, fence, value, detail);
            logs.push_event(e);
            return;
        }
        // The origin of the CPU times never changes: its copy serves while the state is busy.
        let e = Self::thread_event_at(self.start, operation, queue, fence, value, detail);
        let mut deferred = self.deferred.lock();
        let e = if deferred.len() < DEFERRED_MAX && deferred.reserve(1, GFP_KERNEL).is_ok() {
            match deferred.push_within_capacity(e) {
                Ok(()) => return,
                Err(e) => e.0,
            }
        } else {
            e
        };
        drop(deferred);
        self.state().push_event(e);
    }

    /// A timeline event of the calling thread, stamped now against `logs`' origin.
    fn thread_event(
        logs: &LogState,
        operation: u32,
        queue: u32,
        fence: u64,
        value: u64,
        detail: u64,
    ) -> Event {
        Self::thread_event_at(logs.start, operation, queue, fence, value, detail)
    }

    /// A timeline event of the calling thread, stamped now against `start`.
    fn thread_event_at(
        start: Instant<Monotonic>,
        operation: u32,
        queue: u32,
        fence: u64,
        value: u64,
        detail: u64,
    ) -> Event {
        let task = kernel::current!();
        let (tid, pid) = (task.pid(), task.tgid());
        let cpu_ns = u64::try_from((Instant::<Monotonic>::now() - start).as_nanos()).unwrap_or(0);
        let entry = uapi_debug::TimelineEntry {
            fence,
            value,
            cpu_ns,
            queue,
            operation,
            log_index: u32::try_from(tid).unwrap_or(0),
            observed_gpu: u64::try_from(pid).unwrap_or(0),
            end_gpu: detail,
            ..Default::default()
        };
        Event {
            entry,
            process: ProcessRef::current().ok(),
        }
    }

    /// `IRQ_DEBUG`.
    pub(crate) fn irq_debug(&self) -> uapi_debug::IrqDebug {
        let logs = self.state();
        let mut s = logs.stats;
        s.log_buffers = u32::try_from(logs.queues.len() * 2).unwrap_or(u32::MAX);
        s
    }

    /// `READ_TIMELINE`: collects every log, then copies the events from `a.cursor` on that
    /// `visible` (given each event and, for a thread event, its process) lets the caller see (the others are passed over: the cursor moves past them).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a capacity above `TIMELINE_MAX_READ` or a non-zero `count`/`lost`, `EFAULT`,
    /// `ENOMEM`.
    pub(crate) fn read_timeline(
        &self,
        a: &mut uapi_debug::ReadTimeline,
        visible: impl Fn(&uapi_debug::TimelineEntry, Option<&ProcessRef>) -> bool,
    ) -> Result {
        if a.capacity > uapi_debug::TIMELINE_MAX_READ || a.count != 0 || a.lost != 0 {
            return Err(EINVAL);
        }
        // CAST: at most `TIMELINE_MAX_READ`.
        let cap = a.capacity as usize;
        let mut out = KVec::with_capacity(cap, GFP_KERNEL)?;
        {
            let mut hw = self.core.hw().ok();
            let mut logs = self.state();
            // Entries read (or lost) here are not looked for by a later per-queue record, which
            // then scans: no wake-up depends on them; a queue-array pass takes them from
            // `carried`.
            let mut signaled = KVec::new();
            logs.collect(&self.core, hw.as_mut(), |_| true, &mut signaled);
            drop(hw);
            logs.carry(signaled);
            // CAST: at most `TIMELINE_LEN`.
            let oldest = logs.next_seq - logs.timeline.len() as u64;
            a.lost = oldest.saturating_sub(a.cursor);
            let mut seq = a.cursor.max(oldest);
            while seq < logs.next_seq && out.len() < cap {
                // CAST: the remainder is below `TIMELINE_LEN`.
                if let Some(e) = logs.timeline.get((seq % TIMELINE_LEN as u64) as usize) {
                    if visible(&e.entry, e.process.as_ref()) {
                        out.push(e.entry, GFP_KERNEL)?;
                    }
                }
                seq += 1;
            }
            a.cursor = seq;
        }
        let bytes = out.len() * core::mem::size_of::<uapi_debug::TimelineEntry>();
        let addr = usize::try_from(a.entries).map_err(|_| EFAULT)?;
        let mut writer = UserSlice::new(UserPtr::from_addr(addr), bytes).writer();
        for e in out.iter() {
            writer.write(e)?;
        }
        a.count = u32::try_from(out.len())?;
        Ok(())
    }
}

/// A log's position: WraparoundCount × entries + FirstFreeEntryIndex (the header's first eight
/// bytes, read until two reads agree so a torn read is not taken).
fn position(buf: &DmaBuf) -> u32 {
    let mut raw = buf.read64(0);
    for _ in 0..3 {
        let again = buf.read64(0);
        if again == raw {
            break;
        }
        raw = again;
    }
    // CAST: the two little-endian halves, truncation intended.
    let (first_free, wraps) = (raw as u32, (raw >> 32) as u32);
    fence::log_position(first_free, wraps)
}

/// The timeline event of the entry at free-running `index` of `buf`, a log of `queue`.
fn read_entry(buf: &DmaBuf, index: u32, queue: u32) -> uapi_debug::TimelineEntry {
    // CAST: below a page.
    let at = fence::log_entry_offset(index) as usize;
    let field = |offset: usize| buf.read64(at + offset);
    let operation = buf.read32(at + offset_of!(fence::LogEntry, operation));
    uapi_debug::TimelineEntry {
        fence: field(offset_of!(fence::LogEntry, fence_handle)),
        value: field(offset_of!(fence::LogEntry, value)),
        observed_gpu: field(offset_of!(fence::LogEntry, observed_gpu_timestamp)),
        end_gpu: field(offset_of!(fence::LogEntry, end_gpu_timestamp)),
        queue,
        operation: if operation == LogOperation::SignalExecuted as u32 {
            uapi_debug::TIMELINE_SIGNAL_EXECUTED
        } else if operation == LogOperation::WaitUnblocked as u32 {
            uapi_debug::TIMELINE_WAIT_UNBLOCKED
        } else if operation == LogOperation::WaitBegin as u32 {
            uapi_debug::TIMELINE_WAIT_BEGIN
        } else {
            0
        },
        log_index: index,
        ..Default::default()
    }
}


/// One `SET_LOG_BUFFER`.
fn set_log_buffer(hw: &mut HwGuard<'_>, queue: QueueId, kind: LogKind, va: u64) -> Result {
    let mut args = mailbox::SetLogBufferArgs {
        queue: queue.raw(),
        kind: kind as u32,
        va,
        ..Default::default()
    };
    hw.command(Opcode::SetLogBuffer, &mut args, &[])
}

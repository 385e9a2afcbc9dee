// SPDX-License-Identifier: GPL-2.0

//! Native-fence logs and the native-fence interrupt paths.
//!
//! Logs (LOG-02..04): every hardware queue gets exactly two 4 KiB log buffers, a wait log and a
//! signal log, allocated here and mapped only in the system address space (the device's and
//! the CMP's view) and in the kernel (DMA-coherent memory); they have no mmap offset, so no
//! process can map them. Each is given to the device with its own `SET_LOG_BUFFER` call.
//!
//! Interrupt paths (in the interrupt thread, [`process`]): the hard handler turns each
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
//! whose signal is not among its queue's new entries (a signal logged with `NO_LOG`, or whose
//! entry was read earlier, by `READ_TIMELINE` say), or whose entries release no wait (a wrong
//! handle in an entry: entries are the submitter's word), also falls back to examining every
//! wait, so no wake-up is lost.
//!
//! Timeline (LOG-01): every entry read becomes a [`uapi::TimelineEntry`] (signal executed /
//! wait unblocked with its GPU timestamps); kernel-mode `SUBMIT` adds "signal queued" / "wait
//! queued" events with the CPU time, for the logged fence packets of the command buffer and for
//! the progress-fence signal the module appends (logged in the signal log at the next index).
//! `READ_TIMELINE` collects every log first, then copies events from a cursor.

use core::mem::offset_of;

use kernel::{
    prelude::*,
    sync::barrier::{dma_mb, Read},
    time::{Instant, Monotonic},
    uaccess::{UserPtr, UserSlice},
};

use crate::{
    abi::{
        fence::{self, LogKind, LogOperation, LOG_ENTRIES},
        irq::{self as abi_irq, InterruptRecord},
        mailbox::{self, Opcode},
        mmu, packet, uapi,
    },
    dmamem::DmaBuf,
    gpucore::{Core, HwGuard},
};


/// Records of one kind kept per batch; more make the batch a scan of every wait.
const MAX_RECORDS: usize = 16;
/// Timeline events kept (the oldest are dropped first).
const TIMELINE_LEN: usize = 1024;
/// Bytes of a log page.
const PAGE: u64 = mmu::PAGE_SIZE;

/// Native-fence records seen by the hard interrupt handler, for the interrupt thread.
#[derive(Default)]
pub(crate) struct FenceWork {
    /// Fences named by exact records.
    exact: [u64; MAX_RECORDS],
    /// Entries of `exact` in use.
    n_exact: usize,
    /// (queue, signaled value) of per-queue records.
    per_queue: [(u32, u64); MAX_RECORDS],
    /// Entries of `per_queue` in use.
    n_per_queue: usize,
    /// A NULL record (or too many records): examine every wait.
    null: bool,
    /// A record asked for the legacy (monitored-fence) waits too.
    legacy: bool,
    /// A monitored-fence or NOTIFY record: examine the monitored-fence waits.
    pub(crate) monitored: bool,
    /// Records by form, for [`uapi::IrqDebug`].
    counts: [u64; 3],
}

impl FenceWork {
    /// Notes the native-fence record at byte `at` of the interrupt ring `ring`.
    pub(crate) fn native(&mut self, ring: &DmaBuf, at: usize) {
        let fence = ring.read64(at + offset_of!(InterruptRecord, fence));
        let queue = ring.read32(at + offset_of!(InterruptRecord, queue));
        let value = ring.read64(at + offset_of!(InterruptRecord, value));
        let detail = ring.read32(at + offset_of!(InterruptRecord, detail));
        if fence != 0 {
            self.counts[0] += 1;
            match self.exact.get_mut(self.n_exact) {
                Some(slot) => {
                    *slot = fence;
                    self.n_exact += 1;
                }
                None => self.null = true,
            }
        } else if queue != abi_irq::NONE && detail & abi_irq::DETAIL_PER_QUEUE != 0 {
            self.counts[1] += 1;
            match self.per_queue.get_mut(self.n_per_queue) {
                Some(slot) => {
                    *slot = (queue, value);
                    self.n_per_queue += 1;
                }
                None => self.null = true,
            }
        } else {
            self.counts[2] += 1;
            self.null = true;
        }
        if detail & abi_irq::DETAIL_EVALUATE_LEGACY != 0 {
            self.legacy = true;
        }
    }

    /// Whether the interrupt thread has something to do.
    pub(crate) fn pending(&self) -> bool {
        self.n_exact > 0 || self.n_per_queue > 0 || self.null || self.monitored
    }

    /// The fences of the exact records.
    fn exact(&self) -> &[u64] {
        self.exact.get(..self.n_exact).unwrap_or(&[])
    }

    /// The per-queue records.
    fn per_queue(&self) -> &[(u32, u64)] {
        self.per_queue.get(..self.n_per_queue).unwrap_or(&[])
    }
}

/// The two logs of one hardware queue.
struct QueueLog {
    /// Device queue id.
    queue: u32,
    /// The wait log and the signal log, indexed by [`LogKind`].
    bufs: [DmaBuf; 2],
    /// System-address-space VA of the wait log (the signal log follows it).
    sys_va: u64,
    /// Cached log positions read so far (WraparoundCount × entries + FirstFreeEntryIndex).
    read: [u32; 2],
    /// Next signal-log index the module uses for a kernel-mode `SUBMIT`'s progress signal.
    next_signal: u32,
}

/// A signal-log entry read: (queue, fence handle as logged, value).
type Signaled = (u32, u64, u64);

/// The fence logs of a device, the interrupt-path counters and the timeline.
pub(crate) struct Logs {
    /// Logs by queue.
    queues: KVec<QueueLog>,
    /// Timeline events, a ring indexed by sequence number.
    timeline: KVVec<uapi::TimelineEntry>,
    /// Sequence number of the next event.
    next_seq: u64,
    /// Time origin of the CPU timestamps.
    start: Instant<Monotonic>,
    /// Counters.
    stats: uapi::IrqDebug,
}

impl Logs {
    /// Empty, with room for the timeline.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            queues: KVec::new(),
            timeline: KVVec::with_capacity(TIMELINE_LEN, GFP_KERNEL)?,
            next_seq: 0,
            start: Instant::now(),
            stats: uapi::IrqDebug::default(),
        })
    }

    /// CPU time since the logs were created, in ns.
    fn cpu_ns(&self) -> u64 {
        u64::try_from((Instant::<Monotonic>::now() - self.start).as_nanos()).unwrap_or(0)
    }

    /// Appends a timeline event (its sequence number is set here).
    fn push(&mut self, mut e: uapi::TimelineEntry) {
        e.seq = self.next_seq;
        self.next_seq += 1;
        // CAST: the remainder is below `TIMELINE_LEN`.
        let at = (e.seq % TIMELINE_LEN as u64) as usize;
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
    fn collect(
        &mut self,
        hw: Option<&mut HwGuard<'_>>,
        pick: impl Fn(u32) -> bool,
        signaled: &mut KVec<Signaled>,
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
                    id: self.queues[i].queue,
                    ..Default::default()
                };
                if hw.command(Opcode::FlushLogs, &mut args, &[]).is_ok() {
                    self.stats.log_flushes += 1;
                }
            }
        }
        dma_mb(Read);
        // (3) The entries.
        let mut overflow = false;
        for &(i, head) in heads.iter() {
            for kind in [LogKind::Waits, LogKind::Signals] {
                let k = kind as usize;
                let (queue, from) = (self.queues[i].queue, self.queues[i].read[k]);
                let new = head[k].wrapping_sub(from);
                let first = if new > LOG_ENTRIES {
                    // Wrapped over unread entries (or moved backwards): what is left is read.
                    overflow = true;
                    self.stats.overflows += 1;
                    let lost = if new > u32::MAX / 2 { 0 } else { new - LOG_ENTRIES };
                    self.push(uapi::TimelineEntry {
                        queue,
                        operation: uapi::TIMELINE_LOST,
                        value: u64::from(lost),
                        log_index: head[k],
                        ..Default::default()
                    });
                    if new > u32::MAX / 2 {
                        head[k]
                    } else {
                        head[k].wrapping_sub(LOG_ENTRIES)
                    }
                } else {
                    from
                };
                let mut at = first;
                while at != head[k] {
                    let e = read_entry(&self.queues[i].bufs[k], at, queue);
                    if e.operation == uapi::TIMELINE_SIGNAL_EXECUTED {
                        let _ = signaled.push((queue, e.fence, e.value), GFP_KERNEL);
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
    wraps
        .wrapping_mul(LOG_ENTRIES)
        .wrapping_add(first_free % LOG_ENTRIES)
}

/// The timeline event of the entry at free-running `index` of `buf`, a log of `queue`.
fn read_entry(buf: &DmaBuf, index: u32, queue: u32) -> uapi::TimelineEntry {
    // CAST: below a page.
    let at = fence::log_entry_offset(index) as usize;
    let field = |offset: usize| buf.read64(at + offset);
    let operation = buf.read32(at + offset_of!(fence::LogEntry, operation));
    uapi::TimelineEntry {
        fence: field(offset_of!(fence::LogEntry, fence_handle)),
        value: field(offset_of!(fence::LogEntry, value)),
        observed_gpu: field(offset_of!(fence::LogEntry, observed_gpu_timestamp)),
        end_gpu: field(offset_of!(fence::LogEntry, end_gpu_timestamp)),
        queue,
        operation: if operation == LogOperation::SignalExecuted as u32 {
            uapi::TIMELINE_SIGNAL_EXECUTED
        } else if operation == LogOperation::WaitUnblocked as u32 {
            uapi::TIMELINE_WAIT_UNBLOCKED
        } else {
            0
        },
        log_index: index,
        ..Default::default()
    }
}

/// Gives device queue `queue` its two log buffers (LOG-02, LOG-03): allocated, mapped in the
/// system address space, then one `SET_LOG_BUFFER` each.
///
/// # Errors
///
/// `ENOMEM`, `ENOSPC`, or the device's refusal (`EIO`).
pub(crate) fn attach(core: &Core, hw: &mut HwGuard<'_>, queue: u32) -> Result {
    let bufs = [DmaBuf::new(hw.dev()?, 1)?, DmaBuf::new(hw.dev()?, 1)?];
    let mut logs = core.logs();
    logs.queues.reserve(1, GFP_KERNEL)?;
    let sys_va = {
        let mut objects = core.objects();
        let va = objects.system_va(2);
        let system = objects.system()?;
        let before = system.mapped_pages();
        let mapped = system.map_buf(hw.dev()?, va, &bufs[0], true).and_then(|()| {
            system
                .map_buf(hw.dev()?, va + PAGE, &bufs[1], true)
                .inspect_err(|_| system.unmap_range(va, 1))
        });
        core.add_gpu_pages(before, system.mapped_pages());
        mapped?;
        va
    };
    let log = QueueLog {
        queue,
        bufs,
        sys_va,
        read: [0; 2],
        next_signal: 0,
    };
    for kind in [LogKind::Waits, LogKind::Signals] {
        if let Err(e) = set_log_buffer(hw, queue, kind, sys_va + kind as u64 * PAGE) {
            unmap(core, &log);
            return Err(e);
        }
    }
    logs.queues.push(log, GFP_KERNEL)?;
    Ok(())
}

/// One `SET_LOG_BUFFER`.
fn set_log_buffer(hw: &mut HwGuard<'_>, queue: u32, kind: LogKind, va: u64) -> Result {
    let mut args = mailbox::SetLogBufferArgs {
        queue,
        kind: kind as u32,
        va,
        ..Default::default()
    };
    hw.command(Opcode::SetLogBuffer, &mut args, &[])
}

/// Unmaps `log` from the system address space.
fn unmap(core: &Core, log: &QueueLog) {
    let mut objects = core.objects();
    if let Ok(system) = objects.system() {
        let before = system.mapped_pages();
        system.unmap_range(log.sys_va, 2);
        core.add_gpu_pages(before, system.mapped_pages());
    }
}

/// After device queue `queue` was destroyed (`destroyed`) or not: its last entries go to the
/// timeline and its logs are freed. A queue the device kept has its logs removed first; if the
/// device refuses that too, the buffers stay (the device may still write them).
pub(crate) fn detach(core: &Core, hw: Option<&mut HwGuard<'_>>, queue: u32, destroyed: bool) {
    if !destroyed {
        let removed = hw.is_some_and(|hw| {
            set_log_buffer(hw, queue, LogKind::Waits, 0).is_ok()
                && set_log_buffer(hw, queue, LogKind::Signals, 0).is_ok()
        });
        if !removed {
            return;
        }
    }
    let mut logs = core.logs();
    // The queue's commands have completed: its entries are visible without a flush.
    // Its lost entries, if any, matter to nobody: a record still naming it finds no entry and
    // scans.
    let mut signaled = KVec::new();
    logs.collect(None, |q| q == queue, &mut signaled);
    let Some(i) = logs.queues.iter().position(|q| q.queue == queue) else {
        return;
    };
    if let Ok(log) = logs.queues.remove(i) {
        unmap(core, &log);
    }
}

/// Kernel-mode `SUBMIT` of `size` bytes at `offset` of `cmdbuf` on device queue `queue`: its
/// logged fence packets are queued now (timeline), and so is the progress signal of `handle`
/// to `value` the module appends. Returns the signal-log index for that signal (`NO_LOG` for
/// a queue without logs): past every index the command buffer used.
pub(crate) fn note_submit(
    core: &Core,
    queue: u32,
    cmdbuf: &DmaBuf,
    offset: u32,
    size: u32,
    handle: u64,
    value: u64,
) -> u32 {
    let mut logs = core.logs();
    let now = logs.cpu_ns();
    let Some(qi) = logs.queues.iter().position(|q| q.queue == queue) else {
        return packet::NO_LOG;
    };
    // CAST: `u32` fits `usize`; the caller checked the range lies in `cmdbuf`.
    let (mut at, end) = (offset as usize, offset as usize + size as usize);
    while at + 4 <= end {
        let header = cmdbuf.read32(at);
        // CAST: at most 65535 dwords.
        let dwords = packet::header_dwords(header) as usize;
        if dwords == 0 {
            break;
        }
        let op = packet::header_opcode(header);
        let signal = op == packet::Opcode::FenceSignal as u32;
        if (signal || op == packet::Opcode::FenceWait as u32) && dwords == 8 && at + 32 <= end {
            let index = cmdbuf.read32(at + offset_of!(packet::FenceSignal, log_entry));
            if index != packet::NO_LOG {
                logs.push(uapi::TimelineEntry {
                    fence: cmdbuf.read64(at + offset_of!(packet::FenceSignal, log_handle)),
                    value: cmdbuf.read64(at + offset_of!(packet::FenceSignal, value)),
                    cpu_ns: now,
                    queue,
                    operation: if signal {
                        uapi::TIMELINE_SIGNAL_QUEUED
                    } else {
                        uapi::TIMELINE_WAIT_QUEUED
                    },
                    log_index: index,
                    ..Default::default()
                });
                let q = &mut logs.queues[qi];
                if signal && index.wrapping_sub(q.next_signal) <= u32::MAX / 2 {
                    q.next_signal = index.wrapping_add(1);
                }
            }
        }
        at += dwords * 4;
    }
    let q = &mut logs.queues[qi];
    let index = q.next_signal;
    q.next_signal = index.wrapping_add(1);
    logs.push(uapi::TimelineEntry {
        fence: handle,
        value,
        cpu_ns: now,
        queue,
        operation: uapi::TIMELINE_SIGNAL_QUEUED,
        log_index: index,
        ..Default::default()
    });
    index
}

/// A `SUBMIT` that [`note_submit`] saw failed (`EBUSY`, say): its progress signal never reaches
/// the ring, so its signal-log index `index` is handed out again. The library counts one index
/// per successful `SUBMIT` for the module's progress signal and assigns the next ones to its own
/// logged packets (LOG-04); a failed `SUBMIT` consuming one would make the two disagree.
pub(crate) fn unnote_submit(core: &Core, queue: u32, index: u32) {
    let mut logs = core.logs();
    if let Some(q) = logs.queues.iter_mut().find(|q| q.queue == queue) {
        if q.next_signal == index.wrapping_add(1) {
            q.next_signal = index;
        }
    }
}

/// The interrupt thread's native-fence work: the paths of the module doc.
pub(crate) fn process(core: &Core) {
    let work = core.take_fence_work();
    if !work.pending() {
        return;
    }
    // Exact and NULL records need no log: their waits are released at once (IRQ-08: read the
    // fence value, wake its waiters), before the logs are read for the timeline.
    let mut released = [0u64; 4];
    if release(core, &work, &[], work.null, false, &mut released) {
        core.wake_fence_waiters();
    }
    let mut hw = core.hw().ok();
    let mut logs = core.logs();
    let stats = &mut logs.stats;
    stats.exact_records += work.counts[0];
    stats.per_queue_records += work.counts[1];
    stats.null_records += work.counts[2];
    // Per-queue records read only their queues' logs (IRQ-10); exact records read every log
    // for the timestamps (IRQ-08), NULL records rescan every log (IRQ-11).
    let every_log = work.n_exact > 0 || work.null;
    let mut signaled = KVec::new();
    let mut overflow = false;
    if every_log || work.n_per_queue > 0 {
        let per_queue = work.per_queue();
        overflow = logs.collect(
            hw.as_mut(),
            |q| every_log || per_queue.iter().any(|&(p, _)| p == q),
            &mut signaled,
        );
    }
    drop(hw);
    let mut scan = overflow;
    // A per-queue record whose signal is not among its queue's new entries cannot be trusted
    // to name what it released: scan.
    for &(queue, value) in work.per_queue() {
        if !scan && !signaled.iter().any(|&(q, _, v)| q == queue && v == value) {
            scan = true;
            logs.stats.unlogged += 1;
        }
    }
    let mut any = false;
    if scan || work.n_per_queue > 0 {
        any = release(core, &work, &signaled, scan, overflow, &mut released);
    }
    if !scan && work.n_per_queue > 0 && released[uapi::PATH_PER_QUEUE] == 0 {
        // The device interrupted for a CPU waiter, yet the logged fences released none (an
        // entry with another fence's handle): scan, so no wake-up is lost.
        scan = true;
        logs.stats.unlogged += 1;
        any |= release(core, &work, &signaled, scan, overflow, &mut released);
    }
    if scan || work.null {
        logs.stats.scans += 1;
        if work.legacy {
            logs.stats.legacy_scans += 1;
        }
    }
    for (total, n) in logs.stats.released.iter_mut().zip(released) {
        *total += n;
    }
    drop(logs);
    if any {
        core.wake_fence_waiters();
    }
}

/// One pass over the pending waits: those the batch's records name (or every one, `scan`)
/// whose fence reached their value are marked released and counted by path in `released`
/// (all under [`uapi::PATH_OVERFLOW`] after an `overflow`). Whether it released any.
fn release(
    core: &Core,
    work: &FenceWork,
    signaled: &[Signaled],
    scan: bool,
    overflow: bool,
    released: &mut [u64; 4],
) -> bool {
    let per_queue_fence = |handle: u64| {
        signaled
            .iter()
            .any(|&(q, h, _)| h == handle && work.per_queue().iter().any(|&(p, _)| p == q))
    };
    let mut any = false;
    let objects = core.objects();
    for w in objects.waits.iter() {
        let path = if w.monitored {
            // Legacy waits: after monitored-fence records, or a scan that asks for them.
            (work.monitored || (scan && work.legacy)).then_some(None)
        } else if work.exact().contains(&w.handle) {
            Some(Some(uapi::PATH_EXACT))
        } else if per_queue_fence(w.handle) {
            Some(Some(uapi::PATH_PER_QUEUE))
        } else if scan {
            Some(Some(uapi::PATH_SCAN_ALL))
        } else {
            None
        };
        let Some(path) = path else {
            continue;
        };
        if w.release_if_signaled() {
            any = true;
            let path = if overflow && path.is_some() {
                Some(uapi::PATH_OVERFLOW)
            } else {
                path
            };
            if let Some(n) = path.and_then(|p| released.get_mut(p)) {
                *n += 1;
            }
        }
    }
    any
}

/// `IRQ_DEBUG`.
pub(crate) fn irq_debug(core: &Core) -> uapi::IrqDebug {
    let logs = core.logs();
    let mut s = logs.stats;
    s.log_buffers = u32::try_from(logs.queues.len() * 2).unwrap_or(u32::MAX);
    s
}

/// `READ_TIMELINE`: collects every log, then copies the events from `a.cursor` on.
///
/// # Errors
///
/// `EINVAL` for a capacity above `TIMELINE_MAX_READ` or a non-zero `count`/`lost`, `EFAULT`,
/// `ENOMEM`.
pub(crate) fn read_timeline(core: &Core, a: &mut uapi::ReadTimeline) -> Result {
    if a.capacity > uapi::TIMELINE_MAX_READ || a.count != 0 || a.lost != 0 {
        return Err(EINVAL);
    }
    // CAST: at most `TIMELINE_MAX_READ`.
    let mut out = KVec::with_capacity(a.capacity as usize, GFP_KERNEL)?;
    {
        let mut hw = core.hw().ok();
        let mut logs = core.logs();
        // Entries read (or lost) here are not looked for by a later per-queue record, which
        // then scans: no wake-up depends on them.
        let mut signaled = KVec::new();
        logs.collect(hw.as_mut(), |_| true, &mut signaled);
        drop(hw);
        // CAST: at most `TIMELINE_LEN`.
        let oldest = logs.next_seq - logs.timeline.len() as u64;
        a.lost = oldest.saturating_sub(a.cursor);
        let mut seq = a.cursor.max(oldest);
        while seq < logs.next_seq && out.len() < out.capacity() {
            // CAST: the remainder is below `TIMELINE_LEN`.
            if let Some(e) = logs.timeline.get((seq % TIMELINE_LEN as u64) as usize) {
                out.push(*e, GFP_KERNEL)?;
            }
            seq += 1;
        }
        a.cursor = seq;
    }
    let bytes = out.len() * core::mem::size_of::<uapi::TimelineEntry>();
    let addr = usize::try_from(a.entries).map_err(|_| EFAULT)?;
    let mut writer = UserSlice::new(UserPtr::from_addr(addr), bytes).writer();
    for e in out.iter() {
        writer.write(e)?;
    }
    a.count = u32::try_from(out.len())?;
    Ok(())
}

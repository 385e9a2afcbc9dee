//! The submission sequence as pure logic over [`QueueOps`], the kernel- and memory-facing
//! operations of one hardware queue, so host tests drive it with a scripted fake.
//!
//! Implementation note — the order of one user-mode submission (SUB-04/05, DB-11..16,
//! RING-07), for a queue whose last value is N:
//! 1. take N+1 (and wait, if needed, until the slot it reuses has completed);
//! 2. copy the command buffer into the slot, closed by `FENCE_SIGNAL` of N+1 to the queue's
//!    progress fence; the buffer's logged fence packets and that signal get the queue's next
//!    fence-log indices ([`crate::logslot`], LOG-04/05);
//! 3. publish LastQueuedValue = N+1 — before the work is visible;
//! 4. write the ring entry, then store the write index (release): the work is now visible;
//! 5. ring the doorbell with the write index, then read the status:
//!    CONNECTED → done; CONNECTED_NOTIFY → `NOTIFY_WORK_SUBMISSION`, done;
//!    DISCONNECTED_RETRY → `CONNECT_DOORBELL` and ring again, at most `retry_limit` times;
//!    DISCONNECTED_ABORT or a failed connect → the queue is lost: re-create the user-mode
//!    queue, doorbell and ring (DB-16) and submit N+1 again there; if that fails, or the new
//!    queue is lost within the same submission, fall back to a kernel-mode queue (the
//!    reference pseudocode's `cleanup_fallback`) and submit N+1 through `SUBMIT`. A re-creation
//!    refused with `EIO` means the context itself is lost (a GPU fault): nothing in it can
//!    replace the queue, so the submission fails with [`Error::ContextLost`] and the
//!    application creates a new context; the lost queue stays in place, ready to be dropped.
//!
//! Progress values stay monotonic across re-creation (the new queue's fence jumps from 0 to
//! the next value). Values submitted to a lost queue that had not completed are reported as
//! [`Error::Lost`] by [`Submitter::wait`], never as done.

use std::time::Duration;

use belfry_abi::fence::LogKind;
use belfry_abi::ids::FenceHandle;
use belfry_abi::packet;
use belfry_abi::ring::{self, RingEntry};
use belfry_abi::uapi::DoorbellStatus;

use crate::error::{Error, Result};
use crate::logslot::LogCursor;

/// How a hardware queue receives work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueMode {
    /// Ring and doorbell written by the process (`QUEUE_USER_MODE_SUBMISSION`).
    UserMode,
    /// `SUBMIT` ioctl onto a ring the module owns.
    KernelMode,
}

/// Counters of what submissions went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubmitStats {
    /// Submissions that reached a queue.
    pub submissions: u64,
    /// `CONNECT_DOORBELL`s after a DISCONNECTED_RETRY status.
    pub reconnects: u64,
    /// `NOTIFY_WORK_SUBMISSION`s after a CONNECTED_NOTIFY status.
    pub notifies: u64,
    /// Queues lost (DISCONNECTED_ABORT or a failed connect).
    pub losses: u64,
    /// User-mode queues re-created after a loss.
    pub recreations: u64,
    /// Fallbacks to a kernel-mode queue.
    pub fallbacks: u64,
    /// Submissions that waited for a ring slot.
    pub slot_waits: u64,
    /// `NOTIFY_WORK_SUBMISSION`s because the ring found a shared-doorbell device's command
    /// processor asleep (the doorbell page's sleep word: CONNECTED_NOTIFY for that ring).
    pub wakes: u64,
}

/// The operations a submission needs from a hardware queue. The real implementation is
/// [`crate::Queue`]'s backend (ioctls and mapped pages); tests script a fake.
pub trait QueueOps {
    /// How the current hardware queue receives work.
    fn mode(&self) -> QueueMode;
    /// Ring entries, which is also the number of command-buffer slots (a power of two).
    fn slots(&self) -> u32;
    /// Bytes per command-buffer slot.
    fn slot_bytes(&self) -> usize;
    /// GPU VA of the current queue's progress fence.
    fn progress_fence_va(&self) -> u64;
    /// Global handle of the current queue's progress fence (`CREATE_QUEUE`'s
    /// `progress_log_handle`), recorded in its signal-log entries.
    fn progress_log_handle(&self) -> FenceHandle;
    /// The current queue's progress CurrentValue.
    fn completed(&self) -> u64;
    /// Sleeps until the current queue's progress reaches `value` (`WAIT_PROGRESS`).
    ///
    /// # Errors
    /// [`Error::Timeout`], or the ioctl's error.
    fn wait_progress(&mut self, value: u64, timeout: Duration) -> Result<()>;
    /// Copies a command buffer into `slot`; returns its GPU VA.
    ///
    /// # Errors
    /// Bounds errors of the slot memory.
    fn write_cmdbuf(&mut self, slot: u32, bytes: &[u8]) -> Result<u64>;
    /// Stores LastQueuedValue.
    fn publish_last_queued(&mut self, value: u64);
    /// Writes ring entry `slot`.
    fn write_ring_entry(&mut self, slot: u32, entry: RingEntry);
    /// Stores the ring-control write index with release order.
    fn store_write_index(&mut self, index: u32);
    /// Writes `write_index` to the doorbell page.
    fn ring_doorbell(&mut self, write_index: u32);
    /// Reads the doorbell status page.
    ///
    /// # Errors
    /// [`Error::UnknownStatus`].
    fn doorbell_status(&self) -> Result<DoorbellStatus>;
    /// After a ring that read CONNECTED: whether the device's command processor may be asleep
    /// (a shared-doorbell device's sleep word, `belfry_abi::doorbell`), so the ring must be
    /// notified as if the status were CONNECTED_NOTIFY. Trapped doorbells never sleep.
    fn asleep_after_ring(&self) -> bool {
        false
    }
    /// Whether verbose fence logging is on as the library last learnt it (LOG-20): each logged
    /// wait then reserves a `WAIT_BEGIN` entry before its `WAIT_UNBLOCKED` one.
    fn verbose_log(&self) -> bool {
        false
    }
    /// `CONNECT_DOORBELL`.
    ///
    /// # Errors
    /// The ioctl's error.
    fn connect_doorbell(&mut self) -> Result<()>;
    /// `NOTIFY_WORK_SUBMISSION`.
    ///
    /// # Errors
    /// The ioctl's error.
    fn notify_work_submission(&mut self) -> Result<()>;
    /// `SUBMIT` of `size` bytes in `slot`, signaling `value` when done.
    ///
    /// # Errors
    /// The ioctl's error.
    fn kernel_submit(&mut self, slot: u32, size: u32, value: u64) -> Result<()>;
    /// Replaces the current queue by a new user-mode queue with its own ring, ring control,
    /// slots and doorbell (write index 0, progress 0).
    ///
    /// # Errors
    /// Any creation error; the current queue then stays in place.
    fn recreate_user_mode(&mut self) -> Result<()>;
    /// Replaces the current queue by a new kernel-mode queue.
    ///
    /// # Errors
    /// As [`QueueOps::recreate_user_mode`].
    fn fall_back_to_kernel_mode(&mut self) -> Result<()>;
}

/// Fence-signal packet closing every user-mode command buffer.
const SIGNAL_BYTES: usize = core::mem::size_of::<packet::FenceSignal>();

/// What became of one user-mode attempt.
enum Attempt {
    Done,
    Lost,
}

/// The library-side state of a hardware queue's submissions.
#[derive(Clone, Debug)]
pub struct Submitter {
    /// Last progress value handed out.
    last_value: u64,
    /// First value submitted to the current hardware queue.
    base: u64,
    /// Highest value known complete on a hardware queue lost since.
    completed_before_loss: u64,
    /// Write index of the current queue (a submission counter on kernel-mode queues).
    write_index: u32,
    /// Next fence-log indices of the current queue.
    logs: LogCursor,
    retry_limit: u32,
    slot_timeout: Duration,
    stats: SubmitStats,
}

impl Submitter {
    /// A fresh queue: no value submitted, write index 0; at most `retry_limit` reconnects per
    /// submission; waits of at most `slot_timeout` for a ring slot.
    pub fn new(retry_limit: u32, slot_timeout: Duration) -> Self {
        Self {
            last_value: 0,
            base: 1,
            completed_before_loss: 0,
            write_index: 0,
            logs: LogCursor::new(),
            retry_limit,
            slot_timeout,
            stats: SubmitStats::default(),
        }
    }

    /// Last progress value submitted.
    pub fn last_value(&self) -> u64 {
        self.last_value
    }

    /// Counters.
    pub fn stats(&self) -> SubmitStats {
        self.stats
    }

    /// Highest progress value known complete (a lost queue's unfinished values excluded).
    pub fn completed(&self, ops: &impl QueueOps) -> u64 {
        let current = ops.completed();
        if current >= self.base {
            current
        } else {
            self.completed_before_loss
        }
    }

    /// Submits `cmds` (packets without the closing progress signal) and returns its progress
    /// value; see [`Submitter::submit_logged`].
    ///
    /// # Errors
    /// As [`Submitter::submit_logged`].
    pub fn submit(&mut self, ops: &mut impl QueueOps, cmds: &[u8]) -> Result<u64> {
        self.submit_logged(ops, cmds, &[])
    }

    /// Submits `cmds` (packets without the closing progress signal), whose fence packets at the
    /// byte offsets `log_sites` get the queue's next log indices, and returns its progress
    /// value, in the order of the module docs.
    ///
    /// # Errors
    /// [`Error::CommandBufferTooLarge`] before anything is published; [`Error::Timeout`] when
    /// no slot frees up; [`Error::ContextLost`] when the queue was lost with its context; [`Error::RetryLimit`] or [`Error::UnknownStatus`] with the work
    /// queued (the value is then taken); an ioctl error of `NOTIFY_WORK_SUBMISSION`, `SUBMIT`
    /// or of the fallback's creation.
    pub fn submit_logged(&mut self, ops: &mut impl QueueOps, cmds: &[u8], log_sites: &[u32]) -> Result<u64> {
        let value = self.last_value + 1;
        let mut recreated = false;
        loop {
            match ops.mode() {
                QueueMode::KernelMode => {
                    self.submit_kernel(ops, cmds, log_sites, value)?;
                    return Ok(value);
                }
                QueueMode::UserMode => match self.submit_user(ops, cmds, log_sites, value)? {
                    Attempt::Done => return Ok(value),
                    Attempt::Lost => {
                        self.stats.losses += 1;
                        self.completed_before_loss = self.completed(ops);
                        // DB-16 once per submission; then the pseudocode's fallback (DB-15).
                        let replaced = !recreated
                            && match ops.recreate_user_mode() {
                                Ok(()) => true,
                                // The module refuses new queues in a faulted context.
                                Err(e) if e.errno() == Some(libc::EIO) => {
                                    self.base = value + 1;
                                    return Err(Error::ContextLost { value });
                                }
                                Err(e) => {
                                    log::warn!("re-creating the user-mode queue: {e}");
                                    false
                                }
                            };
                        if replaced {
                            self.stats.recreations += 1;
                            recreated = true;
                        } else {
                            ops.fall_back_to_kernel_mode()?;
                            self.stats.fallbacks += 1;
                        }
                        self.base = value;
                        self.write_index = 0;
                        self.logs = LogCursor::new();
                    }
                },
            }
        }
    }

    /// Waits, if the slot `value` will use is still in use, until it completes.
    fn reserve_slot(&mut self, ops: &mut impl QueueOps, value: u64) -> Result<()> {
        let slots = u64::from(ops.slots());
        if value - self.base < slots {
            return Ok(()); // First use of this slot on the current queue.
        }
        let previous = value - slots;
        if ops.completed() < previous {
            self.stats.slot_waits += 1;
            ops.wait_progress(previous, self.slot_timeout)?;
        }
        Ok(())
    }

    fn check_size(ops: &impl QueueOps, bytes: usize) -> Result<u32> {
        let max = ops.slot_bytes();
        if bytes > max || !bytes.is_multiple_of(4) {
            return Err(Error::CommandBufferTooLarge { bytes, max });
        }
        Ok(bytes as u32) // CAST: bytes ≤ slot_bytes ≤ CMDBUF_MAX_BYTES.
    }

    fn submit_kernel(&mut self, ops: &mut impl QueueOps, cmds: &[u8], log_sites: &[u32], value: u64) -> Result<()> {
        let size = Self::check_size(ops, cmds.len())?;
        self.reserve_slot(ops, value)?;
        let mut bytes = cmds.to_vec();
        let mut logs = self.logs;
        logs.assign_verbose(&mut bytes, log_sites, ops.verbose_log());
        let slot = ring::slot(self.write_index, ops.slots());
        ops.write_cmdbuf(slot, &bytes)?;
        ops.kernel_submit(slot, size, value)?;
        // The module logged its progress signal at the signal log's next index.
        logs.skip(LogKind::Signals);
        self.logs = logs;
        self.write_index = self.write_index.wrapping_add(1);
        self.last_value = value;
        self.stats.submissions += 1;
        Ok(())
    }

    fn submit_user(&mut self, ops: &mut impl QueueOps, cmds: &[u8], log_sites: &[u32], value: u64) -> Result<Attempt> {
        let size = Self::check_size(ops, cmds.len() + SIGNAL_BYTES)?;
        self.reserve_slot(ops, value)?;
        // (2) The buffer, closed by the progress signal; its fence packets and that signal get
        // the queue's next log indices (LOG-05).
        let mut bytes = Vec::with_capacity(size as usize);
        bytes.extend_from_slice(cmds);
        let mut tail = crate::CommandBuffer::new();
        tail.logged_signal(ops.progress_fence_va(), value, ops.progress_log_handle())?;
        bytes.extend_from_slice(tail.as_bytes());
        let mut sites = log_sites.to_vec();
        sites.push(u32::try_from(cmds.len()).map_err(|_| Error::Invalid("command buffer offset"))?);
        let mut logs = self.logs;
        logs.assign_verbose(&mut bytes, &sites, ops.verbose_log());
        let slot = ring::slot(self.write_index, ops.slots());
        let cmdbuf_va = ops.write_cmdbuf(slot, &bytes)?;
        self.logs = logs;
        // (3) LastQueuedValue covers the work before the GPU can see it (SUB-05).
        ops.publish_last_queued(value);
        // (4) Ring entry, then the write index with release order (RING-07).
        ops.write_ring_entry(slot, RingEntry { cmdbuf_va, size_bytes: size, flags: 0 });
        self.write_index = self.write_index.wrapping_add(1);
        ops.store_write_index(self.write_index);
        self.last_value = value;
        self.stats.submissions += 1;
        // (5) Doorbell (DB-11), then the status (DB-13..16).
        ops.ring_doorbell(self.write_index);
        let mut retries = 0;
        loop {
            match ops.doorbell_status()? {
                DoorbellStatus::Connected => {
                    if ops.asleep_after_ring() {
                        ops.notify_work_submission()?;
                        self.stats.wakes += 1;
                    }
                    return Ok(Attempt::Done);
                }
                DoorbellStatus::ConnectedNotify => {
                    ops.notify_work_submission()?;
                    self.stats.notifies += 1;
                    return Ok(Attempt::Done);
                }
                DoorbellStatus::DisconnectedRetry => {
                    if retries == self.retry_limit {
                        return Err(Error::RetryLimit { retries, value });
                    }
                    retries += 1;
                    self.stats.reconnects += 1;
                    if let Err(e) = ops.connect_doorbell() {
                        log::warn!("connecting the doorbell: {e}");
                        return Ok(Attempt::Lost);
                    }
                    ops.ring_doorbell(self.write_index);
                }
                DoorbellStatus::DisconnectedAbort => return Ok(Attempt::Lost),
            }
        }
    }

    /// Waits until `value` has completed.
    ///
    /// # Errors
    /// [`Error::NotSubmitted`], [`Error::Lost`] for a value lost with its queue,
    /// [`Error::ContextLost`] for a value whose context was lost to a GPU fault (at once: the
    /// module answers `ECANCELED` as soon as it has processed the fault), [`Error::Timeout`],
    /// or the ioctl's error.
    pub fn wait(&self, ops: &mut impl QueueOps, value: u64, timeout: Duration) -> Result<()> {
        if value > self.last_value {
            return Err(Error::NotSubmitted { value, last: self.last_value });
        }
        if value <= self.completed_before_loss {
            return Ok(());
        }
        if value < self.base {
            return Err(Error::Lost { value });
        }
        if ops.completed() >= value {
            return Ok(());
        }
        ops.wait_progress(value, timeout)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    use super::*;
    use crate::cmdbuf::{decode, Packet};
    use DoorbellStatus::*;

    /// One operation the fake saw, in order.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Op {
        Cmdbuf { queue: u32, slot: u32, bytes: Vec<u8> },
        Publish(u64),
        RingEntry { slot: u32, entry: RingEntry },
        WriteIndex(u32),
        Doorbell(u32),
        Status(DoorbellStatus),
        Connect,
        Notify,
        KernelSubmit { slot: u32, size: u32, value: u64 },
        Recreate,
        Fallback,
        Wait(u64),
    }

    /// A scripted queue: statuses are popped per read (CONNECTED when the script is empty);
    /// every operation is logged.
    struct Fake {
        ops: RefCell<Vec<Op>>,
        statuses: RefCell<VecDeque<DoorbellStatus>>,
        mode: QueueMode,
        queue: u32,
        connect_fails: bool,
        recreate_fails: bool,
        recreate_errno: Option<i32>,
        fallback_fails: bool,
        completed: u64,
        slots: u32,
    }

    impl Fake {
        fn new(statuses: &[DoorbellStatus]) -> Self {
            Fake {
                ops: RefCell::default(),
                statuses: RefCell::new(statuses.iter().copied().collect()),
                mode: QueueMode::UserMode,
                queue: 1,
                connect_fails: false,
                recreate_fails: false,
                recreate_errno: None,
                fallback_fails: false,
                completed: 0,
                slots: 4,
            }
        }

        fn fence_va(queue: u32) -> u64 {
            0x10_0000 * u64::from(queue)
        }

        fn cmdbuf_va(queue: u32, slot: u32) -> u64 {
            Self::fence_va(queue) + 0x1000 + 0x100 * u64::from(slot)
        }

        fn log(&self, op: Op) {
            self.ops.borrow_mut().push(op);
        }

        /// The operations, command-buffer bytes left out.
        fn order(&self) -> Vec<Op> {
            let strip = |o: &Op| match o {
                Op::Cmdbuf { queue, slot, .. } => Op::Cmdbuf { queue: *queue, slot: *slot, bytes: vec![] },
                o => o.clone(),
            };
            self.ops.borrow().iter().map(strip).collect()
        }

        fn position(&self, pred: impl Fn(&Op) -> bool) -> usize {
            self.ops.borrow().iter().position(pred).unwrap_or_else(|| panic!("not in {:?}", self.order()))
        }

        /// The packets of the `nth` command buffer written.
        fn packets(&self, nth: usize) -> Vec<Packet> {
            let ops = self.ops.borrow();
            let mut cmdbufs =
                ops.iter().filter_map(|o| if let Op::Cmdbuf { bytes, .. } = o { Some(bytes) } else { None });
            decode(cmdbufs.nth(nth).unwrap()).unwrap()
        }
    }

    impl QueueOps for Fake {
        fn mode(&self) -> QueueMode {
            self.mode
        }
        fn slots(&self) -> u32 {
            self.slots
        }
        fn slot_bytes(&self) -> usize {
            0x100
        }
        fn progress_fence_va(&self) -> u64 {
            Self::fence_va(self.queue)
        }
        fn progress_log_handle(&self) -> FenceHandle {
            FenceHandle::new(0x100 + u64::from(self.queue))
        }
        fn completed(&self) -> u64 {
            self.completed
        }
        fn wait_progress(&mut self, value: u64, _timeout: Duration) -> Result<()> {
            self.log(Op::Wait(value));
            if self.completed >= value {
                Ok(())
            } else {
                Err(Error::Timeout { value })
            }
        }
        fn write_cmdbuf(&mut self, slot: u32, bytes: &[u8]) -> Result<u64> {
            self.log(Op::Cmdbuf { queue: self.queue, slot, bytes: bytes.to_vec() });
            Ok(Self::cmdbuf_va(self.queue, slot))
        }
        fn publish_last_queued(&mut self, value: u64) {
            self.log(Op::Publish(value));
        }
        fn write_ring_entry(&mut self, slot: u32, entry: RingEntry) {
            self.log(Op::RingEntry { slot, entry });
        }
        fn store_write_index(&mut self, index: u32) {
            self.log(Op::WriteIndex(index));
        }
        fn ring_doorbell(&mut self, write_index: u32) {
            self.log(Op::Doorbell(write_index));
        }
        fn doorbell_status(&self) -> Result<DoorbellStatus> {
            let s = self.statuses.borrow_mut().pop_front().unwrap_or(Connected);
            self.log(Op::Status(s));
            Ok(s)
        }
        fn connect_doorbell(&mut self) -> Result<()> {
            self.log(Op::Connect);
            if self.connect_fails {
                Err(Error::Invalid("scripted connect failure"))
            } else {
                Ok(())
            }
        }
        fn notify_work_submission(&mut self) -> Result<()> {
            self.log(Op::Notify);
            Ok(())
        }
        fn kernel_submit(&mut self, slot: u32, size: u32, value: u64) -> Result<()> {
            self.log(Op::KernelSubmit { slot, size, value });
            Ok(())
        }
        fn recreate_user_mode(&mut self) -> Result<()> {
            self.log(Op::Recreate);
            if let Some(errno) = self.recreate_errno {
                let error = std::io::Error::from_raw_os_error(errno);
                return Err(Error::Ioctl { name: "CREATE_QUEUE", error });
            }
            if self.recreate_fails {
                return Err(Error::Invalid("scripted re-create failure"));
            }
            self.queue += 1;
            self.completed = 0;
            Ok(())
        }
        fn fall_back_to_kernel_mode(&mut self) -> Result<()> {
            self.log(Op::Fallback);
            if self.fallback_fails {
                return Err(Error::Invalid("scripted fallback failure"));
            }
            self.queue += 1;
            self.completed = 0;
            self.mode = QueueMode::KernelMode;
            Ok(())
        }
    }

    fn work() -> Vec<u8> {
        let mut cb = crate::CommandBuffer::new();
        cb.write32(0x8000, 0x1234).unwrap();
        cb.as_bytes().to_vec()
    }

    fn submitter() -> Submitter {
        Submitter::new(8, Duration::from_secs(1))
    }

    /// The user-mode sequence of one attempt on `queue` with `value` at `slot`.
    fn user_sequence(queue: u32, slot: u32, value: u64, index: u32) -> Vec<Op> {
        let size = (work().len() + SIGNAL_BYTES) as u32;
        let va = Fake::cmdbuf_va(queue, slot);
        vec![
            Op::Cmdbuf { queue, slot, bytes: vec![] },
            Op::Publish(value),
            Op::RingEntry { slot, entry: RingEntry { cmdbuf_va: va, size_bytes: size, flags: 0 } },
            Op::WriteIndex(index),
            Op::Doorbell(index),
        ]
    }

    #[test]
    fn a_connected_submission_runs_the_reference_order_and_ends_with_the_progress_signal() {
        let mut q = Fake::new(&[Connected]);
        let mut s = submitter();
        assert_eq!(s.submit(&mut q, &work()).unwrap(), 1);
        let mut want = user_sequence(1, 0, 1, 1);
        want.push(Op::Status(Connected));
        assert_eq!(q.order(), want);
        let packets = q.packets(0);
        assert_eq!(packets.len(), 2);
        assert!(matches!(packets[0], Packet::WriteData32(p) if p.value == 0x1234));
        assert!(
            matches!(packets[1], Packet::FenceSignal(p) if p.fence_va == Fake::fence_va(1) && p.value == 1 && p.log_entry == 0 && p.log_handle == 0x101)
        );
        assert_eq!(s.last_value(), 1);
    }

    #[test]
    fn progress_values_increase_and_slots_follow_the_write_index() {
        let mut q = Fake::new(&[]);
        let mut s = submitter();
        for v in 1..=3 {
            assert_eq!(s.submit(&mut q, &work()).unwrap(), v);
        }
        let order = q.order();
        assert_eq!(&order[12..17], &user_sequence(1, 2, 3, 3)[..]);
        assert!(matches!(q.packets(2)[1], Packet::FenceSignal(p) if p.value == 3));
    }

    #[test]
    fn retry_retry_connected_reconnects_twice_and_rings_again_each_time() {
        let mut q = Fake::new(&[DisconnectedRetry, DisconnectedRetry, Connected]);
        let mut s = submitter();
        assert_eq!(s.submit(&mut q, &work()).unwrap(), 1);
        let mut want = user_sequence(1, 0, 1, 1);
        want.extend([
            Op::Status(DisconnectedRetry),
            Op::Connect,
            Op::Doorbell(1),
            Op::Status(DisconnectedRetry),
            Op::Connect,
            Op::Doorbell(1),
            Op::Status(Connected),
        ]);
        assert_eq!(q.order(), want);
        assert_eq!(s.stats().reconnects, 2);
    }

    /// proves: SUB-04, SUB-05 — the command buffer (ending with the progress signal), then
    /// LastQueuedValue, then the ring entry and write index, then the doorbell: the published
    /// value covers the work before the GPU can see it.
    #[test]
    fn last_queued_is_published_before_the_write_index_and_the_write_index_before_the_doorbell() {
        let mut q = Fake::new(&[DisconnectedRetry, Connected]);
        let mut s = submitter();
        s.submit(&mut q, &work()).unwrap();
        let cmdbuf = q.position(|o| matches!(o, Op::Cmdbuf { .. }));
        let publish = q.position(|o| *o == Op::Publish(1));
        let entry = q.position(|o| matches!(o, Op::RingEntry { .. }));
        let index = q.position(|o| *o == Op::WriteIndex(1));
        let doorbell = q.position(|o| *o == Op::Doorbell(1));
        assert!(cmdbuf < publish && publish < entry && entry < index && index < doorbell);
        assert!(q.order()[..doorbell].iter().all(|o| !matches!(o, Op::Status(_) | Op::Connect)));
    }

    /// proves: DB-13 — after ringing, a CONNECTED_NOTIFY status makes the library call
    /// notify-work-submission, once.
    #[test]
    fn connected_notify_calls_notify_work_submission_once() {
        let mut q = Fake::new(&[ConnectedNotify]);
        let mut s = submitter();
        s.submit(&mut q, &work()).unwrap();
        let order = q.order();
        assert_eq!(&order[5..], &[Op::Status(ConnectedNotify), Op::Notify]);
        assert_eq!(s.stats().notifies, 1);
    }

    #[test]
    fn retries_are_bounded_and_the_work_stays_queued() {
        let mut q = Fake::new(&[DisconnectedRetry; 20]);
        let mut s = Submitter::new(3, Duration::from_secs(1));
        assert!(matches!(s.submit(&mut q, &work()), Err(Error::RetryLimit { retries: 3, value: 1 })));
        assert_eq!(q.order().iter().filter(|o| **o == Op::Connect).count(), 3);
        assert_eq!(s.last_value(), 1, "the value is taken: the ring holds the work");
        assert_eq!(
            s.submit(&mut q, &work()).unwrap_err().to_string(),
            Error::RetryLimit { retries: 3, value: 2 }.to_string()
        );
    }

    #[test]
    fn abort_recreates_the_user_mode_queue_and_resubmits_the_same_value_there() {
        let mut q = Fake::new(&[DisconnectedAbort, Connected]);
        let mut s = submitter();
        assert_eq!(s.submit(&mut q, &work()).unwrap(), 1);
        let mut want = user_sequence(1, 0, 1, 1);
        want.extend([Op::Status(DisconnectedAbort), Op::Recreate]);
        want.extend(user_sequence(2, 0, 1, 1));
        want.push(Op::Status(Connected));
        assert_eq!(q.order(), want);
        assert!(matches!(q.packets(1)[1], Packet::FenceSignal(p) if p.fence_va == Fake::fence_va(2)));
        assert_eq!((s.stats().losses, s.stats().recreations, s.stats().fallbacks), (1, 1, 0));
    }

    #[test]
    fn a_failed_connect_is_fatal_like_abort() {
        let mut q = Fake::new(&[DisconnectedRetry, Connected]);
        q.connect_fails = true;
        let mut s = submitter();
        s.submit(&mut q, &work()).unwrap();
        let order = q.order();
        assert_eq!(&order[5..8], &[Op::Status(DisconnectedRetry), Op::Connect, Op::Recreate]);
    }

    /// proves: DB-15 — an ABORT whose re-creation fails falls back to a kernel-mode queue, as
    /// the reference pseudocode does.
    #[test]
    fn a_failed_recreate_falls_back_to_kernel_mode_submission_without_the_signal() {
        let mut q = Fake::new(&[DisconnectedAbort]);
        q.recreate_fails = true;
        let mut s = submitter();
        assert_eq!(s.submit(&mut q, &work()).unwrap(), 1);
        let size = work().len() as u32;
        let order = q.order();
        assert_eq!(
            &order[5..],
            &[
                Op::Status(DisconnectedAbort),
                Op::Recreate,
                Op::Fallback,
                Op::Cmdbuf { queue: 2, slot: 0, bytes: vec![] },
                Op::KernelSubmit { slot: 0, size, value: 1 },
            ]
        );
        assert_eq!(q.packets(1).len(), 1, "the module appends the progress signal");
        assert_eq!(s.submit(&mut q, &work()).unwrap(), 2);
        assert_eq!(q.order().last(), Some(&Op::KernelSubmit { slot: 1, size, value: 2 }));
    }

    #[test]
    fn a_lost_context_is_reported_as_context_lost_without_a_fallback() {
        let mut q = Fake::new(&[DisconnectedAbort, DisconnectedAbort]);
        q.recreate_errno = Some(libc::EIO);
        let mut s = submitter();
        match s.submit(&mut q, &work()) {
            Err(Error::ContextLost { value: 1 }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(&q.order()[5..], &[Op::Status(DisconnectedAbort), Op::Recreate]);
        assert_eq!(q.mode, QueueMode::UserMode, "no kernel-mode fallback in a lost context");
        assert!(matches!(s.wait(&mut q, 1, Duration::ZERO), Err(Error::Lost { value: 1 })));
        let e = s.submit(&mut q, &work()).unwrap_err();
        assert!(matches!(e, Error::ContextLost { value: 2 }), "{e:?}");
        assert!(e.to_string().contains("new context"), "{e}");
    }

    #[test]
    fn a_second_loss_in_one_submission_falls_back_instead_of_recreating_again() {
        let mut q = Fake::new(&[DisconnectedAbort, DisconnectedAbort]);
        let mut s = submitter();
        s.submit(&mut q, &work()).unwrap();
        let order = q.order();
        let recoveries: Vec<_> = order.iter().filter(|o| matches!(o, Op::Recreate | Op::Fallback)).collect();
        assert_eq!(recoveries, [&Op::Recreate, &Op::Fallback]);
        assert!(matches!(order.last(), Some(Op::KernelSubmit { value: 1, .. })));
    }

    #[test]
    fn when_every_replacement_fails_the_error_is_returned() {
        let mut q = Fake::new(&[DisconnectedAbort]);
        (q.recreate_fails, q.fallback_fails) = (true, true);
        let mut s = submitter();
        assert!(matches!(s.submit(&mut q, &work()), Err(Error::Invalid("scripted fallback failure"))));
    }

    #[test]
    fn a_kernel_mode_queue_never_touches_ring_or_doorbell() {
        let mut q = Fake::new(&[]);
        q.mode = QueueMode::KernelMode;
        let mut s = submitter();
        s.submit(&mut q, &work()).unwrap();
        let order = q.order();
        assert_eq!(
            order,
            [
                Op::Cmdbuf { queue: 1, slot: 0, bytes: vec![] },
                Op::KernelSubmit { slot: 0, size: work().len() as u32, value: 1 }
            ]
        );
    }

    #[test]
    fn reusing_a_slot_waits_for_the_submission_that_used_it() {
        let mut q = Fake::new(&[]);
        q.slots = 2;
        let mut s = submitter();
        s.submit(&mut q, &work()).unwrap();
        s.submit(&mut q, &work()).unwrap();
        assert!(matches!(s.submit(&mut q, &work()), Err(Error::Timeout { value: 1 })));
        assert_eq!(q.order().last(), Some(&Op::Wait(1)));
        assert_eq!(s.last_value(), 2, "nothing was published");
        q.completed = 1;
        assert_eq!(s.submit(&mut q, &work()).unwrap(), 3);
        assert_eq!(q.order()[13..18], user_sequence(1, 0, 3, 3)[..], "slot 0 reused once value 1 completed");
    }

    #[test]
    fn oversized_buffers_are_refused_before_anything_is_published() {
        let mut q = Fake::new(&[]);
        let mut s = submitter();
        let big = vec![0u8; 0x100 - SIGNAL_BYTES + 4];
        assert!(matches!(s.submit(&mut q, &big), Err(Error::CommandBufferTooLarge { .. })));
        assert!(q.order().is_empty());
    }

    #[test]
    fn waits_report_lost_values_and_never_call_them_done() {
        let mut q = Fake::new(&[Connected, Connected, DisconnectedAbort, Connected]);
        let mut s = submitter();
        s.submit(&mut q, &work()).unwrap();
        s.submit(&mut q, &work()).unwrap();
        q.completed = 1;
        assert_eq!(s.submit(&mut q, &work()).unwrap(), 3); // Lost on queue 1, re-submitted on queue 2.
        assert!(s.wait(&mut q, 1, Duration::ZERO).is_ok(), "completed before the loss");
        assert!(matches!(s.wait(&mut q, 2, Duration::ZERO), Err(Error::Lost { value: 2 })));
        assert!(matches!(s.wait(&mut q, 3, Duration::ZERO), Err(Error::Timeout { value: 3 })));
        assert!(matches!(s.wait(&mut q, 4, Duration::ZERO), Err(Error::NotSubmitted { value: 4, last: 3 })));
        assert_eq!(s.completed(&q), 1);
        q.completed = 3;
        assert!(s.wait(&mut q, 3, Duration::ZERO).is_ok());
        assert_eq!(s.completed(&q), 3);
    }

    /// (log index, handle) of fence packets.
    type Slots = Vec<(u32, u64)>;

    /// The slots of the fence packets of the `nth` command buffer, signals and waits apart.
    fn log_slots(q: &Fake, nth: usize) -> (Slots, Slots) {
        let (mut signals, mut waits) = (Vec::new(), Vec::new());
        for p in q.packets(nth) {
            match p {
                Packet::FenceSignal(p) => signals.push((p.log_entry, p.log_handle)),
                Packet::FenceWait(p) => waits.push((p.log_entry, p.log_handle)),
                _ => {}
            }
        }
        (signals, waits)
    }

    #[test]
    fn every_fence_operation_and_progress_signal_gets_the_queues_next_log_index() {
        let mut q = Fake::new(&[]);
        let mut s = submitter();
        let mut cb = crate::CommandBuffer::new();
        cb.logged_wait(0x9000, 1, FenceHandle::new(0x55))
            .unwrap()
            .write32(0x8000, 1)
            .unwrap()
            .logged_signal(0x9008, 2, FenceHandle::new(0x66))
            .unwrap();
        for _ in 0..3 {
            s.submit_logged(&mut q, cb.as_bytes(), cb.log_sites()).unwrap();
        }
        s.submit(&mut q, &work()).unwrap();
        // One index per operation, in stream order, per log; the progress signal last.
        for n in 0..3u32 {
            let (signals, waits) = log_slots(&q, n as usize);
            assert_eq!(signals, [(2 * n, 0x66), (2 * n + 1, 0x101)]);
            assert_eq!(waits, [(n, 0x55)]);
        }
        assert_eq!(log_slots(&q, 3), (vec![(6, 0x101)], vec![]));
    }

    #[test]
    fn log_indices_run_on_past_the_84_entry_ring() {
        let mut q = Fake::new(&[]);
        q.completed = u64::MAX / 2; // Every slot free.
        let mut s = submitter();
        let n = 2 * belfry_abi::fence::LOG_ENTRIES + 5;
        for _ in 0..n {
            s.submit(&mut q, &work()).unwrap();
        }
        let indices: Vec<u32> = (0..n as usize).map(|i| log_slots(&q, i).0[0].0).collect();
        assert_eq!(indices, (0..n).collect::<Vec<_>>(), "not one per submission, monotonic");
        assert_eq!(belfry_abi::fence::log_slot(indices[84]), 0, "index 84 reuses ring entry 0");
    }

    #[test]
    fn a_new_queue_starts_its_logs_at_zero_and_kernel_mode_counts_the_modules_progress_signal() {
        let mut q = Fake::new(&[DisconnectedAbort, DisconnectedAbort]);
        q.recreate_fails = true;
        let mut s = submitter();
        let mut cb = crate::CommandBuffer::new();
        cb.logged_signal(0x9008, 2, FenceHandle::new(0x66)).unwrap();
        s.submit_logged(&mut q, cb.as_bytes(), cb.log_sites()).unwrap();
        // The lost queue's buffer took 0 and 1; the kernel-mode fallback's logs start at 0.
        assert_eq!(log_slots(&q, 0).0, [(0, 0x66), (1, 0x101)]);
        assert_eq!(log_slots(&q, 1).0, [(0, 0x66)], "no progress signal of the library's own");
        // The module's progress signal took index 1: the next buffer's signal gets 2.
        s.submit_logged(&mut q, cb.as_bytes(), cb.log_sites()).unwrap();
        assert_eq!(log_slots(&q, 2).0, [(2, 0x66)]);
    }
}

// SPDX-License-Identifier: GPL-2.0

//! Kernel-mode queues: the module-owned ring that `SUBMIT` writes, the GPU waits of
//! `QUEUE_WAIT_FENCE` (FEN-13, FEN-14, FEN-15) and the software signal packets of
//! `QUEUE_SIGNAL_FENCE` (FEN-10).
//!
//! A [`KernelRing`] is shared (`Arc`) between its queue's file and the device-wide [`Held`]
//! registry. Its state holds the write index and a FIFO of work not yet given to the device.
//! While the FIFO is empty a submission goes straight to the ring (the command buffer, then a
//! `FENCE_SIGNAL` of its progress value) and `KICK_QUEUE`. A wait on a native fence is a
//! `FENCE_WAIT` packet in the ring (the GPU waits; no CPU). A wait on a monitored fence, which
//! has no GPU-side wait, is queued in the FIFO, and so is everything submitted after it: the
//! ring registers itself in [`Held`], and [`Held::release`] — called after every CPU signal of a
//! monitored fence and, in the interrupt thread, after every monitored-fence interrupt —
//! re-reads the held fences and writes what became runnable to the ring, in order. The ring
//! room the FIFO will need is reserved, so a release always fits.
//!
//! A software signal packet (`QUEUE_SIGNAL_FENCE`, FEN-10) is a `NOTIFY` item carrying a
//! per-queue token, registered in [`Held`] before it reaches the ring; the hard handler notes
//! the last token each queue's `NOTIFY` records carried, and [`Held::release`] writes the fences
//! of the signals whose token was reached ("at or above", so a dropped record is covered by a
//! later one). A process that puts a `NOTIFY` of its own into a command buffer can only fire
//! its own queue's software signals early, which `SIGNAL_FENCE` lets it do anyway.
//!
//! The ring-control page is mapped in the queue's context, so the read index there is the
//! device's copy that the context's own command buffers could overwrite: it is only a hint.
//! Whether work has run ([`KernelRing::done`]) or is still unexecuted ([`Held::rings_busy`]) is
//! the device's own read index ([`devstate::read_index`]) against the write index the module
//! keeps, asked for when the hint says the answer may have changed.
//!
//! Lock order: the file state, then a ring's state, then one of the [`Held`] lists or the
//! hardware mutex (then the fence book). So a queue is [`KernelRing::close`]d (its FIFO dropped, no more kicks) before the
//! caller takes the hardware mutex to destroy it.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Full, Release},
        barrier::{dma_mb, Write},
        Arc, Mutex,
    },
    transmute::AsBytes,
};

use super::{
    devstate,
    items::{HeldWait, Item, Progress, PACKET_BYTES},
};
use crate::{
    abi::{
        ids::{ContextId, FenceHandle, QueueId},
        mailbox,
        packet,
        ring::{self, RingEntry},
    },
    fence::waits::Fences,
    hw::{
        core::Core,
        dmamem::{DmaBuf, PAGE},
    },
};

/// Most items one queue may hold behind its waits (held waits take no ring room, so the ring
/// does not bound them).
const MAX_HELD: usize = 64;

/// A kernel ring's mutable state.
struct RingState {
    /// Device queue id; `None` after [`KernelRing::close`].
    id: Option<QueueId>,
    /// The write index last published.
    write_index: u32,
    /// Work behind a held wait, oldest first (the first item is a [`Item::Held`]).
    held: KVec<Item>,
    /// Ring entries `held` will take.
    reserved: u32,
    /// Token of the last software signal packet queued.
    last_token: u64,
}

/// The module-owned ring of a kernel-mode queue.
#[pin_data]
pub(crate) struct KernelRing {
    /// Ring entries.
    pub(crate) ring: DmaBuf,
    /// Ring control.
    pub(crate) control: DmaBuf,
    /// One packet slot per ring entry.
    pub(crate) packets: DmaBuf,
    /// GPU VA of `packets` in the queue's address space.
    pub(crate) packets_va: u64,
    /// Ring entries (a power of two).
    entries: u32,
    /// Device queue id (kept after [`Self::close`], for the device's read index). No
    /// reference to the core: a quarantined queue keeps its ring, and the core keeps the
    /// quarantine.
    queue: QueueId,
    /// Device id of the queue's context.
    context: ContextId,
    /// The queue's progress fence, which every submission signals.
    progress: Progress,
    /// Write index and held work.
    #[pin]
    state: Mutex<RingState>,
}

impl KernelRing {
    /// A ring of `entries` entries for device queue `id` (not created yet), whose packets will be
    /// mapped at `packets_va` and whose progress fence is `progress`; forgets the software
    /// signal tokens an earlier queue of that id saw.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(
        dev: &kernel::device::Device<kernel::device::Bound>,
        held: &Held,
        id: QueueId,
        context: ContextId,
        entries: u32,
        packets_va: u64,
        progress: Progress,
    ) -> Result<Arc<Self>> {
        let (ring_pages, packet_pages) = Self::pages(entries);
        held.notified(id, 0);
        held.all.lock().reserve(1, GFP_KERNEL_ACCOUNT)?;
        let ring = Arc::pin_init(
            try_pin_init!(Self {
                ring: DmaBuf::new(dev, ring_pages)?,
                control: DmaBuf::new(dev, 1)?,
                packets: DmaBuf::new(dev, packet_pages)?,
                packets_va,
                entries,
                queue: id,
                context,
                progress,
                state <- new_mutex!(RingState {
                    id: Some(id),
                    write_index: 0,
                    held: KVec::new(),
                    reserved: 0,
                    last_token: 0,
                }),
            }? Error),
            GFP_KERNEL_ACCOUNT,
        )?;
        held.all.lock().push(ring.clone(), GFP_KERNEL_ACCOUNT)?;
        Ok(ring)
    }

    /// Whether the ring holds entries the device has not executed: the write index the module
    /// published past the device's own read index. The ring-control copy of the read index is
    /// the hint: only when it shows entries unexecuted is the device asked (a device that cannot
    /// answer counts as busy), so a forged copy cannot keep the device awake; one forged to
    /// show the ring executed can only let D3 suspend the forger's own context with its work,
    /// which runs on after the resume.
    fn unexecuted(&self, core: &Core) -> bool {
        let write = self.write_index();
        // CAST: `READ_INDEX_OFFSET` is 64.
        let hint = self.control.read32(ring::READ_INDEX_OFFSET as usize);
        if ring::pending(write, hint) == 0 {
            return false;
        }
        let Ok(mut hw) = core.hw() else {
            return true;
        };
        devstate::read_index(&mut hw, self.queue).map_or(true, |read| ring::pending(write, read) != 0)
    }

    /// Pages of the ring and of the packet slots for `entries` entries.
    pub(crate) fn pages(entries: u32) -> (usize, usize) {
        // CAST: at most 65536 entries.
        let n = entries as usize;
        let page = PAGE;
        (
            (n * core::mem::size_of::<RingEntry>()).div_ceil(page),
            (n * PACKET_BYTES).div_ceil(page),
        )
    }

    /// `SUBMIT`: the command buffer at `va` and a `FENCE_SIGNAL` of `progress`; to the ring and
    /// kicked, or behind the held wait (FEN-14).
    ///
    /// # Errors
    ///
    /// `EBUSY` when the ring (with the room held work reserves) is full or inconsistent or
    /// [`MAX_HELD`] items are held,
    /// `EINVAL` once closed or for a packet the device would refuse (a module bug), `ENOMEM`,
    /// and the errors of `KICK_QUEUE`.
    pub(crate) fn submit(
        &self,
        held: &Held,
        va: u64,
        size: u32,
        progress: u64,
        log_entry: u32,
    ) -> Result {
        self.add(
            held,
            Item::Submit {
                va,
                size,
                progress,
                log_entry,
            },
        )
    }

    /// A command buffer at `va` with ring-entry `flags` and no progress signal (a split part
    /// before the last, a paging buffer); returns the ring index just past it, which the read
    /// index reaches once it has run ([`Self::done`]).
    ///
    /// # Errors
    ///
    /// As [`Self::submit`]; `EBUSY` also while work is held behind a wait (the memory manager
    /// does not queue behind one).
    pub(crate) fn submit_raw(&self, held: &Held, va: u64, size: u32, flags: u32) -> Result<u32> {
        let mut st = self.state.lock();
        if !st.held.is_empty() {
            return Err(EBUSY);
        }
        self.add_locked(held, &mut st, Item::Raw { va, size, flags })?;
        Ok(st.write_index)
    }

    /// Whether the device has executed the ring up to index `end` (exclusive), by its own read
    /// index. The ring-control copy, which the queue's context can overwrite, only says when
    /// to ask: nothing is done before it shows `end` reached.
    ///
    /// # Errors
    ///
    /// The mailbox's, and `EIO` once the device no longer has the queue.
    pub(crate) fn done(&self, core: &Core, end: u32) -> Result<bool> {
        // CAST: `READ_INDEX_OFFSET` is 64.
        let hint = self.control.read32(ring::READ_INDEX_OFFSET as usize);
        if !self.reached(end, hint) {
            return Ok(false);
        }
        let read = devstate::read_index(&mut core.hw()?, self.queue)?;
        Ok(self.reached(end, read))
    }

    /// Whether read index `read` is at or past ring index `end`: free-running indexes, so `end`
    /// is reached when no more than the ring lies between.
    fn reached(&self, end: u32, read: u32) -> bool {
        ring::pending(end, read) > self.entries || ring::pending(end, read) == 0
    }

    /// The write index last published (the end of everything submitted so far).
    pub(crate) fn write_index(&self) -> u32 {
        self.state.lock().write_index
    }

    /// `QUEUE_WAIT_FENCE` on a native fence: a `FENCE_WAIT` packet, on the ring or behind the
    /// held wait.
    ///
    /// # Errors
    ///
    /// As [`Self::submit`].
    pub(crate) fn gpu_wait(
        &self,
        held: &Held,
        fence_va: u64,
        value: u64,
        handle: FenceHandle,
    ) -> Result {
        self.add(
            held,
            Item::GpuWait {
                fence_va,
                value,
                handle,
            },
        )
    }

    /// `QUEUE_WAIT_FENCE` on a monitored fence: later work is held until `wait` is reached
    /// (at once if it already is). Never blocks (FEN-13).
    ///
    /// # Errors
    ///
    /// `EBUSY` with [`MAX_HELD`] items held, `EINVAL` once closed, `ENOMEM`.
    pub(crate) fn hold(self: &Arc<Self>, held: &Held, wait: HeldWait) -> Result {
        let mut st = self.state.lock();
        st.id.ok_or(EINVAL)?;
        if st.held.len() >= MAX_HELD {
            return Err(EBUSY);
        }
        st.held.reserve(1, GFP_KERNEL_ACCOUNT)?;
        if st.held.is_empty() {
            held.register(self)?;
        }
        st.held.push(Item::Held(wait), GFP_KERNEL_ACCOUNT)?;
        // Registered first, read after: a signal before the registration is seen here, one
        // after it finds the ring registered. The wait is recorded either way: a failed kick
        // (device gone) is only logged.
        if let Err(e) = self.release_locked(held, &mut st) {
            dev_warn!(held.core.device(), "releasing held work: {:?}\n", e);
        }
        Ok(())
    }

    /// `QUEUE_SIGNAL_FENCE`: a software signal packet (FEN-10) of `signal`'s value, behind the
    /// queue's work; the fence is written from the CPU once its `NOTIFY` record arrives.
    ///
    /// # Errors
    ///
    /// As [`Self::submit`].
    pub(crate) fn soft_signal(&self, held: &Held, signal: HeldWait) -> Result {
        let mut st = self.state.lock();
        let id = st.id.ok_or(EINVAL)?;
        let token = st.last_token + 1;
        let soft = SoftSignal {
            queue: id,
            token,
            signal,
        };
        held.add_signal(soft)?;
        // Never reused, even if the packet reached the ring before an error (a failed kick).
        st.last_token = token;
        let added = self.add_locked(held, &mut st, Item::SoftSignal { token });
        if added.is_err() {
            held.cancel_signals(id, token);
        }
        added
    }

    /// Adds `item` at the end of the queue's work: the ring if nothing is held, else the FIFO.
    fn add(&self, held: &Held, item: Item) -> Result {
        let mut st = self.state.lock();
        self.add_locked(held, &mut st, item)
    }

    /// [`Self::add`], with the state locked.
    fn add_locked(&self, held: &Held, st: &mut RingState, item: Item) -> Result {
        let id = st.id.ok_or(EINVAL)?;
        // CAST: `READ_INDEX_OFFSET` is 64.
        let read = self.control.read32(ring::READ_INDEX_OFFSET as usize);
        if !ring::is_consistent(st.write_index, read, self.entries)
            || ring::pending(st.write_index, read) + st.reserved + item.entries() > self.entries
        {
            return Err(EBUSY);
        }
        // The module's own packets are checked as the device checks every packet
        // (`packet::validate`): a refusal is a module bug, reported here rather than as a fault
        // of the queue's context.
        if let Some(p) = item.packet(&self.progress) {
            packet::validate(p.as_slice()).map_err(|_| EINVAL)?;
        }
        if !st.held.is_empty() {
            if st.held.len() >= MAX_HELD {
                return Err(EBUSY);
            }
            let n = item.entries();
            st.held.push(item, GFP_KERNEL_ACCOUNT)?;
            st.reserved += n;
            return Ok(());
        }
        self.write(&mut st.write_index, &item);
        self.publish(&held.core, id, st.write_index)
    }

    /// Writes `item`'s ring entries (and packet) at `*write`, advancing it; not yet published.
    fn write(&self, write: &mut u32, item: &Item) {
        if let Item::Submit { va, size, .. } = *item {
            self.put(
                write,
                RingEntry {
                    cmdbuf_va: va,
                    size_bytes: size,
                    flags: 0,
                },
            );
        }
        if let Item::Raw { va, size, flags } = *item {
            self.put(
                write,
                RingEntry {
                    cmdbuf_va: va,
                    size_bytes: size,
                    flags,
                },
            );
        }
        if let Some(p) = item.packet(&self.progress) {
            self.put_packet(write, p.as_slice());
        }
    }

    /// Writes ring entry `e` at `*write` and advances it.
    fn put(&self, write: &mut u32, e: RingEntry) {
        // CAST: slot below 65536; an entry is 16 bytes.
        let at = ring::slot(*write, self.entries) as usize * core::mem::size_of::<RingEntry>();
        self.ring.write_bytes(at, e.as_bytes());
        *write = write.wrapping_add(1);
    }

    /// Writes a one-packet buffer into the packet slot of entry `*write` and its ring entry.
    fn put_packet(&self, write: &mut u32, bytes: &[u8]) {
        // CAST: slots are below 65536.
        let offset = ring::slot(*write, self.entries) as usize * PACKET_BYTES;
        self.packets.write_bytes(offset, bytes);
        let e = RingEntry {
            // CAST: as above.
            cmdbuf_va: self.packets_va + offset as u64,
            // CAST: at most 32.
            size_bytes: bytes.len() as u32,
            flags: 0,
        };
        self.put(write, e);
    }

    /// Publishes `write` to the ring control and kicks queue `id`.
    fn publish(&self, core: &Core, id: QueueId, write: u32) -> Result {
        // The entries and packets are written before the write index (release); the write
        // index before KICK_QUEUE's MMIO write (`writel` orders after memory writes).
        dma_mb(Write);
        // CAST: `WRITE_INDEX_OFFSET` is 0.
        self.control
            .write32(ring::WRITE_INDEX_OFFSET as usize, write);
        let mut hw = core.hw()?;
        // An engine in F1 runs nothing: kernel-mode work wakes every F1 engine (ENG-05).
        hw.wake_engines()?;
        hw.kick_queue(id.raw())
    }

    /// Gives the device the held work that no unreached wait precedes; unregisters the ring
    /// once nothing is held.
    fn release_locked(&self, held: &Held, st: &mut RingState) -> Result {
        let RingState {
            id,
            write_index,
            held: items,
            reserved,
            ..
        } = st;
        let Some(id) = *id else {
            return Ok(());
        };
        let start = *write_index;
        let mut done = 0;
        for item in items.iter() {
            if let Item::Held(w) = item {
                if !w.reached() {
                    break;
                }
            }
            self.write(write_index, item);
            *reserved -= item.entries();
            done += 1;
        }
        if done == 0 {
            return Ok(());
        }
        if done == items.len() {
            items.clear();
            held.unregister(self);
        } else {
            // Drop the released items; `remove(0)` of a short FIFO, done at most once per item.
            for _ in 0..done {
                let _ = items.remove(0);
            }
        }
        if *write_index == start {
            return Ok(());
        }
        self.publish(&held.core, id, *write_index)
    }

    /// Drops the held work and stops all later kicks: the queue is about to be destroyed.
    /// Must be called before the caller takes the hardware mutex (lock order).
    pub(crate) fn close(&self, held: &Held) {
        let mut st = self.state.lock();
        if let Some(id) = st.id.take() {
            held.cancel_signals(id, 0);
        }
        if !st.held.is_empty() {
            st.held.clear();
            st.reserved = 0;
            held.unregister(self);
        }
    }
}

/// A software signal packet queued and not yet executed.
struct SoftSignal {
    /// Device queue id.
    queue: QueueId,
    /// Its token.
    token: u64,
    /// The fence and the value to write.
    signal: HeldWait,
}

/// The kernel rings with held work and the pending software signals, device-wide.
#[pin_data]
pub(crate) struct Held {
    /// The core.
    core: Arc<Core>,
    /// The fences (the software signals' CPU stores).
    fences: Arc<Fences>,
    /// The rings.
    #[pin]
    queues: Mutex<KVec<Arc<KernelRing>>>,
    /// Every kernel ring of the device, from [`KernelRing::new`] to [`Held::forget`] (a leaf
    /// lock: nothing is taken under it).
    #[pin]
    all: Mutex<KVec<Arc<KernelRing>>>,
    /// The software signals.
    #[pin]
    signals: Mutex<KVec<SoftSignal>>,
    /// How many rings; read by the hard interrupt handler.
    count: Atomic<u32>,
    /// How many software signals; read by the hard interrupt handler.
    signal_count: Atomic<u32>,
    /// By device queue id: the last software-signal token its `NOTIFY` records carried
    /// (written by the hard interrupt handler).
    tokens: KVec<Atomic<u64>>,
}

impl Held {
    /// An empty registry for the device of `fences`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(fences: Arc<Fences>) -> Result<Arc<Self>> {
        let init = try_pin_init!(Self {
            core: fences.core().clone(),
            fences,
            queues <- new_mutex!(KVec::new()),
            all <- new_mutex!(KVec::new()),
            signals <- new_mutex!(KVec::new()),
            count: Atomic::new(0),
            signal_count: Atomic::new(0),
            tokens: {
                // CAST: 1024.
                let n = mailbox::MAX_QUEUES as usize;
                let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
                for _ in 0..n {
                    v.push(Atomic::new(0), GFP_KERNEL)?;
                }
                v
            },
        }? Error);
        Arc::pin_init(init, GFP_KERNEL)
    }

    /// The core of the device.
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// Whether some queue holds work behind a wait or a software signal is pending (callable in
    /// the hard interrupt handler).
    pub(crate) fn waiting(&self) -> bool {
        self.count.load(Acquire) != 0 || self.signal_count.load(Acquire) != 0
    }

    /// Forgets `ring` (its queue is destroyed or was never made).
    pub(crate) fn forget(&self, ring: &KernelRing) {
        self.all
            .lock()
            .retain(|q| !core::ptr::eq(Arc::as_ptr(q), core::ptr::from_ref(ring)));
    }

    /// Whether a kernel ring of a running context (neither faulted nor suspended) holds entries
    /// the device has not executed: work already given to the device, which D3 entry waits for
    /// like a user-mode queue's (the held work behind waits is [`Self::waiting`]).
    pub(crate) fn rings_busy(&self) -> bool {
        let mut rings = KVec::new();
        {
            let all = self.all.lock();
            if rings.reserve(all.len(), GFP_KERNEL).is_err() {
                // Cannot look: busy, so D3 entry is refused and tried again later.
                return true;
            }
            for r in all.iter() {
                let _ = rings.push(r.clone(), GFP_KERNEL);
            }
        }
        {
            let objects = self.core.objects();
            rings.retain(|r| !objects.is_faulted(r.context) && !objects.is_suspended(r.context));
        }
        // The objects lock is not held across the device's answers (lock order).
        rings.iter().any(|r| r.unexecuted(&self.core))
    }

    /// Hard interrupt handler: a `NOTIFY` record of queue `queue` carried `token`.
    pub(crate) fn notified(&self, queue: QueueId, token: u64) {
        // CAST: `get` ignores out-of-range ids.
        if let Some(t) = self.tokens.get(queue.raw() as usize) {
            t.store(token, Release);
        }
    }

    /// Adds `ring`.
    fn register(&self, ring: &Arc<KernelRing>) -> Result {
        let mut queues = self.queues.lock();
        queues.push(ring.clone(), GFP_KERNEL_ACCOUNT)?;
        // CAST: fewer rings than queue ids (1024).
        // A full barrier: the caller's next fence read is ordered after this store.
        let _ = self.count.xchg(queues.len() as u32, Full);
        Ok(())
    }

    /// Removes `ring`.
    fn unregister(&self, ring: &KernelRing) {
        let mut queues = self.queues.lock();
        queues.retain(|q| !core::ptr::eq(Arc::as_ptr(q), core::ptr::from_ref(ring)));
        // CAST: as in `register`.
        let _ = self.count.xchg(queues.len() as u32, Full);
    }

    /// Adds a pending software signal.
    fn add_signal(&self, soft: SoftSignal) -> Result {
        let mut signals = self.signals.lock();
        signals.push(soft, GFP_KERNEL_ACCOUNT)?;
        // CAST: bounded by the queues' held and ring room.
        let _ = self.signal_count.xchg(signals.len() as u32, Full);
        Ok(())
    }

    /// Drops queue `queue`'s pending software signals with a token at or above `from`.
    fn cancel_signals(&self, queue: QueueId, from: u64) {
        let mut signals = self.signals.lock();
        signals.retain(|s| s.queue != queue || s.token < from);
        // CAST: as in `add_signal`.
        let _ = self.signal_count.xchg(signals.len() as u32, Full);
    }

    /// Takes the software signals whose `NOTIFY` has executed.
    fn take_due_signals(&self) -> KVec<HeldWait> {
        let mut due = KVec::new();
        let mut signals = self.signals.lock();
        signals.retain(|s| {
            // CAST: as in `notified`.
            let seen = self
                .tokens
                .get(s.queue.raw() as usize)
                .map_or(0, |t| t.load(Acquire));
            seen < s.token || due.push(s.signal.clone(), GFP_KERNEL).is_err()
        });
        // CAST: as in `add_signal`.
        let _ = self.signal_count.xchg(signals.len() as u32, Full);
        due
    }

    /// Writes the fences of the software signal packets that have executed (FEN-10), then
    /// gives the device the held work whose monitored-fence waits are now reached (FEN-15).
    /// Process context only (it takes mutexes and runs mailbox commands): the interrupt thread
    /// after a monitored-fence or `NOTIFY` interrupt, and `SIGNAL_FENCE` after a CPU signal.
    pub(crate) fn release(&self) {
        if !self.waiting() {
            return;
        }
        for s in self.take_due_signals() {
            self.fences.store_monitored(&s.page, s.offset, s.value);
        }
        let mut rings = KVec::new();
        {
            let queues = self.queues.lock();
            if rings.reserve(queues.len(), GFP_KERNEL).is_err() {
                return;
            }
            for q in queues.iter() {
                let _ = rings.push(q.clone(), GFP_KERNEL);
            }
        }
        for r in rings {
            let mut st = r.state.lock();
            if let Err(e) = r.release_locked(self, &mut st) {
                dev_warn!(self.core.device(), "releasing held work: {:?}\n", e);
            }
        }
    }
}

//! [`Gpu`]: the GPU state shared by the command processor thread (mailbox commands, doorbells,
//! timers) and the engine executor threads — the object tables behind one mutex, the condition
//! variable engines and waiters sleep on, the interrupt-record ring, and the [`Ports`] through
//! which all of it reaches the rest of the device.

use std::sync::atomic::AtomicU64;
use std::sync::{Condvar, Mutex, MutexGuard, RwLock};

use belfry_abi::engine::ENGINE_COUNT;
use belfry_abi::ids::EngineId;
use belfry_abi::irq::InterruptRecord;

use super::objects::{Objects, PeerPages};
use super::ports::Ports;
use super::records::{self, RecordRing};
use crate::record;

/// Whether this thread holds its wake-ups ([`Gpu::holding_wakeups`]), and has one to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    No,
    Yes,
    Pending,
}

thread_local! {
    static HELD: std::cell::Cell<Held> = const { std::cell::Cell::new(Held::No) };
}

/// The GPU state of one device.
pub struct Gpu {
    /// The rest of the device, as the GPU sees it.
    pub ports: Ports,
    objects: Mutex<Objects>,
    /// Signalled whenever something may have become runnable or a queue stopped executing:
    /// mailbox commands and the peer-signal consumer wait here. Engines do not: wake them
    /// through [`notify`](Self::notify) or [`wake_engines`](Self::wake_engines).
    pub(super) changed: Condvar,
    /// One per engine, where its executor sleeps ([`wait_engine`](Self::wait_engine)): a
    /// [`notify`](Self::notify) wakes only the engines with queues on their runlist, so an idle
    /// engine's thread does not wake (and, on a device given one host core, preempt the busy
    /// engine) at every fence signal and slice end.
    engine_wake: [Condvar; ENGINE_COUNT as usize],
    /// The interrupt-record ring.
    pub records: Mutex<RecordRing>,
    /// The peer-signal pages `SET_PEER_SIGNALS` gave ([`peer`](super::peer)): producers write
    /// payloads holding it for reading, so once `SET_PEER_SIGNALS` (which takes it for writing)
    /// completes, no page it dropped is written again and the driver may free it.
    pub peer_pages: RwLock<PeerPages>,
    /// GPU signals refused because they would have moved a registered fence's CurrentValue
    /// backwards ([`fences`](super::fences); each one traced as `fence_backwards`).
    pub fences_backwards: AtomicU64,
    /// The queue-array interrupt form: the queues whose signal logs got entries since the last
    /// native-fence record (the next record names them, `records::queue_array`).
    pub queues_to_name: Mutex<std::collections::BTreeSet<u32>>,
}

impl Gpu {
    /// An empty GPU working through `ports`.
    pub fn new(ports: Ports) -> Self {
        let objects = Objects::new(ports.config.gpu.doorbells);
        Gpu {
            ports,
            objects: Mutex::new(objects),
            changed: Condvar::new(),
            engine_wake: std::array::from_fn(|_| Condvar::new()),
            records: Mutex::default(),
            peer_pages: RwLock::default(),
            fences_backwards: AtomicU64::new(0),
            queues_to_name: Mutex::default(),
        }
    }

    /// Locks the object tables (a poisoned lock is recovered: the tables stay consistent
    /// because every update is a few field stores).
    ///
    /// Recording, each acquisition appends a ticket while the lock is held, so the log has
    /// the order the lock was handed out in.
    /// Replaying, the lock is taken when this thread's ticket is the log's next record.
    pub fn lock(&self) -> MutexGuard<'_, Objects> {
        self.ports.recording.around(record::ticket, || self.objects.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Recording, appends this thread's ticket for an acquisition of the tables' lock (the
    /// caller holds it).
    fn ticket(&self) {
        self.ports.recording.note(record::ticket);
    }

    /// Waits on [`changed`](Self::changed) with the tables locked. A thread that
    /// [holds](Self::holding_wakeups) wake-ups sends them instead and returns at once, as a
    /// spurious wake-up (what it waits for may need them; callers wait in a loop).
    ///
    /// Recording, the reacquisition on waking takes a ticket like [`lock`](Self::lock);
    /// replaying, the wake-up is the ticket's turn.
    pub fn wait<'a>(&'a self, objects: MutexGuard<'a, Objects>) -> MutexGuard<'a, Objects> {
        if HELD.with(|h| h.get()) == Held::Pending {
            return self.release_held(objects);
        }
        if self.ports.recording.is_replay() {
            return self.wait_for_turn(objects);
        }
        let objects = self.changed.wait(objects).unwrap_or_else(|e| e.into_inner());
        self.ticket();
        objects
    }

    /// Waits on [`changed`](Self::changed) for at most `timeout` (a poll), ticketed like
    /// [`wait`](Self::wait).
    pub fn wait_timeout<'a>(
        &'a self,
        objects: MutexGuard<'a, Objects>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, Objects> {
        self.wait_on(&self.changed, objects, timeout)
    }

    /// The executor of `engine` waits for work for at most `timeout` (a poll), ticketed like
    /// [`wait`](Self::wait).
    pub fn wait_engine<'a>(
        &'a self,
        engine: EngineId,
        objects: MutexGuard<'a, Objects>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, Objects> {
        match self.engine_wake.get(engine.raw() as usize) {
            Some(wake) => self.wait_on(wake, objects, timeout),
            None => self.wait_timeout(objects, timeout),
        }
    }

    /// [`wait_timeout`](Self::wait_timeout) on `condvar`.
    fn wait_on<'a>(
        &'a self,
        condvar: &Condvar,
        objects: MutexGuard<'a, Objects>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, Objects> {
        if HELD.with(|h| h.get()) == Held::Pending {
            return self.release_held(objects);
        }
        if self.ports.recording.is_replay() {
            return self.wait_for_turn(objects);
        }
        let objects = condvar.wait_timeout(objects, timeout).unwrap_or_else(|e| e.into_inner()).0;
        self.ticket();
        objects
    }

    /// Replaying, a wait: the lock released until this thread's next ticket is the log's
    /// next record, then taken again.
    fn wait_for_turn<'a>(&'a self, objects: MutexGuard<'a, Objects>) -> MutexGuard<'a, Objects> {
        drop(objects);
        self.lock()
    }

    /// The object tables (queues, contexts, fences, engines) as text, unless a thread holds
    /// them (a replay's `--dump`).
    pub fn dump(&self) -> String {
        match self.objects.try_lock() {
            Ok(objects) => format!("{objects:#?}"),
            Err(std::sync::TryLockError::Poisoned(e)) => format!("{:#?}", e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                "(the object tables are held by a thread the replay stopped)".into()
            }
        }
    }

    /// Wakes the waiters on [`changed`](Self::changed) and the engines with queues on their
    /// runlist (every engine once the device is killed), moving the [`epoch`](Objects::epoch)
    /// first (an engine that misses the wake-up sees the epoch at its next poll). The epoch
    /// moves under the object lock, so an engine's pick sees it moved or not in the lock's
    /// order — the order an input log holds, which a replay follows. The caller must not hold
    /// the lock. Inside [`holding_wakeups`](Self::holding_wakeups) the wake-up is held.
    pub fn notify(&self) {
        if HELD.with(|h| h.get()) != Held::No {
            HELD.with(|h| h.set(Held::Pending));
            return;
        }
        self.wake();
    }

    /// [`notify`](Self::notify) itself.
    fn wake(&self) {
        let mut o = self.lock();
        o.epoch = o.epoch.wrapping_add(1);
        self.wake_engines(o);
    }

    /// Releases `o` and wakes the waiters on [`changed`](Self::changed) and the engines with
    /// queues on their runlist (every engine once the device is killed), without moving the
    /// epoch: a peer signal named a fence, whose parked waits the engines re-read at their next
    /// pick (XAD-15). Not held by [`holding_wakeups`](Self::holding_wakeups).
    pub fn wake_engines(&self, o: MutexGuard<'_, Objects>) {
        let mut engines = [false; ENGINE_COUNT as usize];
        for (engine, busy) in (0..ENGINE_COUNT).zip(engines.iter_mut()) {
            *busy = o.kill || o.scheduler.runlist(EngineId::new(engine)).next().is_some();
        }
        drop(o);
        self.changed.notify_all();
        for (wake, _) in self.engine_wake.iter().zip(engines).filter(|(_, busy)| *busy) {
            wake.notify_all();
        }
    }

    /// Runs `command` (a mailbox command through to its completion and interrupt) with the
    /// wake-ups this thread makes meanwhile ([`notify`](Self::notify)) held until it returns,
    /// then sent once. The command processor and the engines are separate processors on a
    /// GPU; here they may share one host core (`--placement device-core`), where a `KICK_QUEUE`
    /// that woke its engine at once was preempted by it and finished its completion in the
    /// middle of the engine's work. A wait inside `command` sends what is held first.
    pub fn holding_wakeups<R>(&self, command: impl FnOnce() -> R) -> R {
        let outer = HELD.with(|h| h.replace(Held::Yes));
        let result = command();
        let pending = HELD.with(|h| h.replace(outer)) == Held::Pending;
        if pending {
            self.notify();
        }
        result
    }

    /// Sends the wake-ups this thread holds: the lock dropped meanwhile, then taken again.
    fn release_held<'a>(&'a self, objects: MutexGuard<'a, Objects>) -> MutexGuard<'a, Objects> {
        HELD.with(|h| h.set(Held::Yes));
        drop(objects);
        self.wake();
        self.lock()
    }

    /// Writes `record` to the interrupt ring and raises `cause` (see [`records::post`]).
    pub fn post(&self, record: InterruptRecord, cause: u32) {
        records::post(&self.ports, &self.records, record, cause);
    }

    /// The driver acknowledged interrupts (`INT_CLEAR`), its read index of the interrupt ring
    /// advanced: the records the device owes go out now (see [`records::flush`]). Not in
    /// D3hot, where the device writes nothing; the return to D0 flushes instead.
    pub fn interrupts_acknowledged(&self) {
        if !self.is_d3() {
            records::flush(&self.ports, &self.records);
        }
    }

    /// Power-on state: every object gone; engines drop what they were doing.
    pub fn reset(&self) {
        let mut o = self.lock();
        let generation = o.generation + 1;
        let currents: Vec<_> = o.engines.iter().map(|e| e.current).collect();
        *o = Objects::new(self.ports.config.gpu.doorbells);
        o.generation = generation;
        for (e, c) in o.engines.iter_mut().zip(currents) {
            e.current = c;
        }
        drop(o);
        *records::lock(&self.ports, &self.records) = RecordRing::default();
        *self.peer_pages.write().unwrap_or_else(|e| e.into_inner()) = PeerPages::default();
        self.notify();
    }

    /// Device power D3hot (`d3`) or D0, from the PM capability or `SET_DEVICE_POWER`: in D3hot
    /// no engine starts a slice; doorbells rung meanwhile still mark their queues (latched),
    /// which run once back in D0.
    pub fn set_d3(&self, d3: bool) {
        self.lock().d3 = d3;
        self.notify();
        if !d3 {
            // Records owed since an acknowledgement made in D3hot (none is made there).
            records::flush(&self.ports, &self.records);
        }
    }

    /// Whether the device is in D3hot.
    pub fn is_d3(&self) -> bool {
        self.lock().d3
    }

    /// Stops the engine threads.
    pub fn kill(&self) {
        self.lock().kill = true;
        self.notify();
    }
}

//! The replay's turnstile: every point where the recording device appended a record, the
//! replaying device's thread waits until the log's next record is its own, then passes — so
//! the threads meet their inputs, and take the GPU objects' lock, in the order they did when
//! recorded. An input's pass hands back the log's record (the value the device is to see); an
//! output's pass compares the device's with the log's, and a difference stops the replay.
//!
//! Which thread is which: a replaying thread is matched to the recorded thread whose record it
//! presents first (of the same kind and fields), and held to it from then on. A record nobody
//! presents stops the replay as a stall, with what each waiting thread offered instead.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::{Duration, Instant};

use belfry_trace_schema::input_log::Entry;

use crate::threads::thread_number;
use crate::vfio_user::protocol::Command;

/// How long a waiting thread sleeps before it looks again without being unparked.
const PARK_LIMIT: Duration = Duration::from_millis(20);

/// The recorded records, and how far the replaying device has come through them.
pub struct Turnstile {
    log: Vec<(u64, Entry)>,
    /// The recorded threads' names.
    names: BTreeMap<u16, String>,
    /// The device's threads' names begin with this (`belfry0-`).
    prefix: String,
    until: Option<u64>,
    state: Mutex<State>,
    /// Notified when the replay ends (for [`Turnstile::outcome`]); the replaying threads park
    /// instead, and only those whose turn may have come are unparked.
    ended: Condvar,
    connections: AtomicU32,
}

#[derive(Default)]
struct State {
    cursor: usize,
    /// Replaying thread → recorded thread.
    threads: BTreeMap<u16, u16>,
    /// Recorded thread → replaying thread.
    claimed: BTreeMap<u16, u16>,
    /// What each waiting thread offers (replaying thread → its entry).
    waiting: BTreeMap<u16, Entry>,
    /// The waiting threads, to unpark when their turn may have come.
    parked: BTreeMap<u16, Thread>,
    outcome: Option<Outcome>,
    /// Whether the lock tickets at the log's end were left unenforced (see
    /// [`Turnstile::release_tail`]).
    released: bool,
}

/// How a replay ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every record was met, every output matched.
    Finished,
    /// Stopped after the record before `at` (`--until`).
    Stopped {
        /// The record number.
        at: u64,
    },
    /// The first difference between the replay and the log.
    Diverged(Divergence),
}

/// The first difference: the record number, the log's record and what the replay did instead,
/// each decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The log's record number.
    pub record: u64,
    /// Why the replay stopped there.
    pub reason: String,
    /// The log's record, decoded.
    pub recorded: String,
    /// What the replaying device's threads did instead, decoded.
    pub replayed: Vec<String>,
}

impl Turnstile {
    /// A turnstile over `log` (the records after the configuration) of the device named
    /// `device`, stopping after record `until` if given.
    pub fn new(mut log: Vec<(u64, Entry)>, device: &str, until: Option<u64>) -> Turnstile {
        let mut names = BTreeMap::new();
        log.retain(|(_, e)| match e {
            Entry::Thread { thread, name } => {
                names.insert(*thread, name.clone());
                false
            }
            _ => true,
        });
        Turnstile {
            log,
            names,
            prefix: format!("{device}-"),
            until,
            state: Mutex::new(State::default()),
            ended: Condvar::new(),
            connections: AtomicU32::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of a connection that starts now.
    pub fn connection_started(&self) -> u32 {
        self.connections.fetch_add(1, Ordering::Relaxed)
    }

    /// Waits for `entry`'s turn and passes: the log's record (`None` past the log's end, where
    /// the device runs on unreplayed). After the replay stopped or diverged, never returns:
    /// the device stays as it was for the dump.
    pub fn pass(&self, entry: Entry) -> Option<Entry> {
        self.pass_with(entry, || ()).0
    }

    /// Like [`pass`](Self::pass), running `during` once the turn has come and before the next
    /// record's: a lock taken there is taken in the log's order, not merely asked for in it.
    pub fn pass_with<T>(&self, entry: Entry, during: impl FnOnce() -> T) -> (Option<Entry>, T) {
        let me = thread_number();
        let mut state = self.state();
        loop {
            if state.outcome == Some(Outcome::Finished) {
                drop(state);
                return (None, during());
            }
            if state.outcome.is_none() {
                let Some((sequence, recorded)) = self.log.get(state.cursor) else {
                    state.outcome = Some(Outcome::Finished);
                    self.ended(&state);
                    continue;
                };
                if self.until.is_some_and(|u| *sequence > u) {
                    state.outcome = Some(Outcome::Stopped { at: *sequence });
                    self.ended(&state);
                } else if recorded_thread(recorded).is_some_and(|t| state.threads.get(&me) == Some(&t))
                    && (recorded_thread(&entry).is_some() || matches!(entry, Entry::Reply { .. }))
                    && self.my_turn(&state, me, recorded, &entry).is_none()
                {
                    // The log's next record is this thread's own, and it presents another
                    // record only it makes (one naming it, or its connection's reply; an
                    // interrupt may be raised by another thread): it left the recorded path
                    // here, and no other thread can pass that record.
                    state.outcome = Some(Outcome::Diverged(Divergence {
                        record: *sequence,
                        reason: "the thread that made this record does something else instead".into(),
                        recorded: describe(recorded),
                        replayed: vec![format!("thread {me}: {}", describe(&entry))],
                    }));
                    self.ended(&state);
                } else if let Some(turn) = self.my_turn(&state, me, recorded, &entry) {
                    if let Some(reason) = differs(recorded, &entry) {
                        state.outcome = Some(Outcome::Diverged(Divergence {
                            record: *sequence,
                            reason,
                            recorded: describe(recorded),
                            replayed: vec![format!("thread {me}: {}", describe(&entry))],
                        }));
                        self.ended(&state);
                    } else {
                        if let Some(recorded_thread) = turn {
                            state.threads.insert(me, recorded_thread);
                            state.claimed.insert(recorded_thread, me);
                        }
                        state.waiting.remove(&me);
                        state.parked.remove(&me);
                        // The cursor stays on this record, which no other thread matches,
                        // until `during` is done.
                        drop(state);
                        let done = during();
                        let mut state = self.state();
                        state.cursor += 1;
                        self.unpark_next(&state);
                        return (Some(recorded.clone()), done);
                    }
                }
            }
            state.waiting.insert(me, entry.clone());
            state.parked.insert(me, std::thread::current());
            drop(state);
            // An unpark between the unlock and the park makes the park return at once; the
            // timeout only bounds the cost of a wake-up this turnstile failed to give.
            std::thread::park_timeout(PARK_LIMIT);
            state = self.state();
        }
    }

    /// Unparks the thread that may pass the record now under the cursor: the replaying
    /// thread of the recorded thread it names once claimed (no other may pass it), else every
    /// waiting thread. One wake-up a record instead of every waiting thread's: the replay's
    /// cost is its hand-offs.
    fn unpark_next(&self, state: &State) {
        let owner =
            self.log.get(state.cursor).and_then(|(_, e)| recorded_thread(e)).and_then(|t| state.claimed.get(&t));
        match owner {
            Some(me) => {
                if let Some(thread) = state.parked.get(me) {
                    thread.unpark();
                }
            }
            None => state.parked.values().for_each(Thread::unpark),
        }
    }

    /// The replay ended (finished, stopped or diverged): every thread and the watcher see it.
    fn ended(&self, state: &State) {
        state.parked.values().for_each(Thread::unpark);
        self.ended.notify_all();
    }

    /// Waits until the replay finishes, stops or diverges; a record nobody presents for
    /// `stall` is a divergence (the stall), with what the waiting threads offered instead.
    pub fn outcome(&self, stall: Duration) -> Outcome {
        let mut state = self.state();
        let mut last = (state.cursor, Instant::now());
        loop {
            if let Some(outcome) = &state.outcome {
                return outcome.clone();
            }
            if state.cursor != last.0 {
                last = (state.cursor, Instant::now());
            } else if last.1.elapsed() >= stall {
                let replayed = state.waiting.iter().map(|(t, e)| format!("thread {t}: {}", describe(e))).collect();
                let divergence = match self.log.get(state.cursor) {
                    Some((sequence, recorded)) => Divergence {
                        record: *sequence,
                        reason: format!("no thread of the replay reached it in {stall:?}"),
                        recorded: describe(recorded),
                        replayed,
                    },
                    // Every record was met, but the device's threads neither asked for another
                    // nor ended.
                    None => Divergence {
                        record: self.log.last().map_or(0, |(s, _)| s + 1),
                        reason: format!("every record was met, but the replay's device did not stop in {stall:?}"),
                        recorded: "the log's end".into(),
                        replayed,
                    },
                };
                state.outcome = Some(Outcome::Diverged(divergence));
                self.ended(&state);
                continue;
            }
            state = self.ended.wait_timeout(state, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The replay's device stopped (every thread of it ended): a replay that met every record
    /// is finished. Without this, only a look past the log's end finished it, and a recording
    /// whose last records were the device's own stop (a pass of each, no look after) read as a
    /// device that did not stop.
    pub fn device_stopped(&self) {
        let mut state = self.state();
        if state.outcome.is_none() && state.cursor >= self.log.len() {
            state.outcome = Some(Outcome::Finished);
            self.ended(&state);
        }
    }

    /// The records passed so far, the log's length and the records
    /// [`release_tail`](Self::release_tail) left unenforced, taken together (the first and
    /// the last add up to the second once the tail was released).
    pub fn progress(&self) -> (usize, usize, usize) {
        let state = self.state();
        (state.cursor, self.log.len(), self.unenforced(&state))
    }

    /// The recorded device's clients are all gone: if the records left are only lock tickets
    /// and wake-ups (the device's own stop, which no client saw), the replay is finished and
    /// the threads run on unordered; how many records that left unenforced.
    pub fn release_tail(&self) -> usize {
        let mut state = self.state();
        let tail = &self.log[state.cursor.min(self.log.len())..];
        if state.outcome.is_none() && tail.iter().all(|(_, e)| matches!(e, Entry::Ticket { .. } | Entry::Wake { .. })) {
            state.outcome = Some(Outcome::Finished);
            state.released = true;
            self.ended(&state);
        }
        self.unenforced(&state)
    }

    /// The records after the cursor once the tail was released: a record whose turn had come
    /// as the tail was released counts as passed once its thread moves the cursor past it.
    fn unenforced(&self, state: &State) -> usize {
        if state.released {
            self.log.len().saturating_sub(state.cursor)
        } else {
            0
        }
    }
}

impl Turnstile {
    /// Whether `offered`, presented by replaying thread `me`, is the log's `recorded`: `None`
    /// if not, `Some(Some(t))` if it is and names recorded thread `t` (claimed by `me` now or
    /// before), `Some(None)` if it is and names no thread. An unclaimed recorded thread the
    /// device named is claimed by the thread of that name; others by the first to present.
    fn my_turn(&self, state: &State, me: u16, recorded: &Entry, offered: &Entry) -> Option<Option<u16>> {
        let same_thread = |t: u16| match state.threads.get(&me) {
            Some(&mine) => mine == t,
            None => !state.claimed.contains_key(&t) && self.same_name(t),
        };
        my_turn(&same_thread, recorded, offered)
    }

    /// Whether the calling thread may be recorded thread `t` by its name.
    fn same_name(&self, t: u16) -> bool {
        let current = std::thread::current();
        let mine = current.name().unwrap_or_default();
        match self.names.get(&t) {
            Some(name) if name.starts_with(&self.prefix) => name == mine,
            _ => !mine.starts_with(&self.prefix),
        }
    }
}

/// Whether `offered` is `recorded`, `same_thread` telling whether a recorded thread may be the
/// caller (see [`Turnstile::my_turn`]).
fn my_turn(same_thread: &dyn Fn(u16) -> bool, recorded: &Entry, offered: &Entry) -> Option<Option<u16>> {
    match (recorded, offered) {
        (Entry::Message { connection: c, fds: f, bytes: b }, Entry::Message { connection, fds, bytes }) => {
            let kinds = f.iter().map(|x| x.kind).eq(fds.iter().map(|x| x.kind));
            (c == connection && b == bytes && kinds).then_some(None)
        }
        (Entry::Reply { .. }, Entry::Reply { .. }) => Some(None),
        // A read is its thread's at its address whatever its length: it is fed the log's bytes
        // (and guest memory's past them, should it read further), and a replay that read
        // otherwise shows in what it does with them.
        (Entry::GuestRead { thread: t, address: a, .. }, Entry::GuestRead { address, .. })
        | (Entry::VramRead { thread: t, offset: a, .. }, Entry::VramRead { offset: address, .. }) => {
            (same_thread(*t) && a == address).then_some(Some(*t))
        }
        (Entry::GuestWrite { thread: t, address: a, bytes: b }, Entry::GuestWrite { address, bytes, .. }) => {
            (same_thread(*t) && a == address && b.len() == bytes.len()).then_some(Some(*t))
        }
        (Entry::Doorbell { index: i, .. }, Entry::Doorbell { index, .. }) => (i == index).then_some(None),
        (Entry::Departure { connection: c }, Entry::Departure { connection }) => (c == connection).then_some(None),
        (Entry::Interrupt { thread: t, vector: v, .. }, Entry::Interrupt { vector, .. }) => {
            (same_thread(*t) && v == vector).then_some(Some(*t))
        }
        // A log of version 2 names no thread: any thread's write of the vector is it.
        (Entry::InterruptFd { vector: v, .. }, Entry::Interrupt { vector, .. }) => (v == vector).then_some(None),
        (Entry::Clock { thread: t, .. }, Entry::Clock { .. })
        | (Entry::Ticket { thread: t }, Entry::Ticket { .. })
        | (Entry::Wake { thread: t, .. }, Entry::Wake { .. })
        | (Entry::Rung { thread: t, .. }, Entry::Rung { .. }) => same_thread(*t).then_some(Some(*t)),
        _ => None,
    }
}

/// The recorded thread a record names, if it names one.
fn recorded_thread(entry: &Entry) -> Option<u16> {
    match entry {
        Entry::GuestRead { thread, .. }
        | Entry::GuestWrite { thread, .. }
        | Entry::VramRead { thread, .. }
        | Entry::Clock { thread, .. }
        | Entry::Ticket { thread }
        | Entry::Interrupt { thread, .. }
        | Entry::Wake { thread, .. }
        | Entry::Rung { thread, .. } => Some(*thread),
        _ => None,
    }
}

/// How an output the device made differs from the log's, if it does.
fn differs(recorded: &Entry, offered: &Entry) -> Option<String> {
    match (recorded, offered) {
        (Entry::Reply { bytes: b }, Entry::Reply { bytes }) if b != bytes => {
            let at = b.iter().zip(bytes).position(|(x, y)| x != y).unwrap_or(b.len().min(bytes.len()));
            Some(format!("the reply differs from byte {at}"))
        }
        (Entry::GuestWrite { bytes: b, .. }, Entry::GuestWrite { bytes, .. }) if b != bytes => {
            Some("the guest-memory write differs".into())
        }
        (
            Entry::InterruptFd { result: r, .. } | Entry::Interrupt { result: r, .. },
            Entry::Interrupt { result, .. },
        ) if r != result => Some(format!("the interrupt eventfd write returned {result}, recorded {r}")),
        _ => None,
    }
}

/// One record, decoded: its kind, a vfio-user message's or reply's command, id, size, error
/// and leading bytes, an access's address and bytes.
pub fn describe(entry: &Entry) -> String {
    match entry {
        Entry::Config { .. } => "config".into(),
        Entry::Message { connection, fds, bytes } => {
            format!("message on connection {connection}: {} with {} fds", vfio(bytes), fds.len())
        }
        Entry::Reply { bytes } => format!("reply: {}", vfio(bytes)),
        Entry::GuestRead { thread, address, bytes } => {
            format!("guest_read by thread {thread} at {address:#x}: {}", hex(bytes))
        }
        Entry::GuestWrite { thread, address, bytes } => {
            format!("guest_write by thread {thread} at {address:#x}: {}", hex(bytes))
        }
        Entry::VramRead { thread, offset, bytes } => {
            format!("vram_read by thread {thread} at {offset:#x}: {}", hex(bytes))
        }
        Entry::Doorbell { index, value } => format!("doorbell {index} value {value}"),
        Entry::InterruptFd { vector, result } => format!("interrupt_fd vector {vector} result {result}"),
        Entry::Interrupt { thread, vector, result } => {
            format!("interrupt vector {vector} written by thread {thread}, result {result}")
        }
        Entry::Departure { connection } => format!("departure of connection {connection}"),
        Entry::Clock { thread, ns } => format!("clock read by thread {thread}: {ns} ns"),
        Entry::Ticket { thread } => format!(
            "ticket of thread {thread} (a lock or an ordered access: the GPU objects' lock, the record ring's, VRAM)"
        ),
        Entry::Thread { thread, name } => format!("thread {thread} is {name:?}"),
        Entry::Rung { thread, doorbells } => {
            format!("doorbells rung as thread {thread} looked, (index, value): {doorbells:?}")
        }
        Entry::Wake { thread, tokens } => {
            format!(
                "wake-up of thread {thread}: tokens {tokens:?} (0 kill, 1 reset, 2 mailbox, 3 doorbell; none: timeout)"
            )
        }
    }
}

/// A vfio-user header (command, id, size, flags, error) and the bytes after it.
fn vfio(bytes: &[u8]) -> String {
    let word = |at: usize, n: usize| {
        bytes.get(at..at + n).map(|b| b.iter().rev().fold(0u32, |a, &x| a << 8 | u32::from(x))).unwrap_or(0)
    };
    if bytes.len() < 16 {
        return format!("{} bytes, no whole header", bytes.len());
    }
    let command = u16::try_from(word(2, 2)).ok().and_then(Command::from_raw).map_or("UNKNOWN", |c| c.name());
    format!(
        "{command} id {} size {} flags {:#x} error {}, body {}",
        word(0, 2),
        word(4, 4),
        word(8, 4),
        word(12, 4),
        hex(&bytes[16..])
    )
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::new();
    for b in bytes.iter().take(32) {
        let _ = write!(s, "{b:02x}");
    }
    if bytes.len() > 32 {
        let _ = write!(s, "… ({} bytes)", bytes.len());
    }
    s
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A log of one record, passed by a thread that then ends, as a device's last thread does.
    fn passed_to_its_end() -> Arc<Turnstile> {
        let turnstile = Arc::new(Turnstile::new(vec![(1, Entry::Ticket { thread: 7 })], "replayed", None));
        let t = turnstile.clone();
        std::thread::spawn(move || t.pass(crate::record::ticket())).join().unwrap();
        assert_eq!(turnstile.progress(), (1, 1, 0));
        turnstile
    }

    #[test]
    fn a_replay_whose_device_stopped_after_its_last_record_is_finished() {
        let turnstile = passed_to_its_end();
        turnstile.device_stopped();
        assert_eq!(turnstile.outcome(Duration::from_secs(5)), Outcome::Finished);
    }

    #[test]
    fn a_device_that_stopped_before_the_logs_end_finishes_nothing() {
        let turnstile = Arc::new(Turnstile::new(vec![(1, Entry::Ticket { thread: 7 })], "replayed", None));
        turnstile.device_stopped();
        let Outcome::Diverged(d) = turnstile.outcome(Duration::from_millis(200)) else { panic!("finished unmet") };
        assert!(d.reason.contains("no thread of the replay reached it"), "{d:?}");
    }
}

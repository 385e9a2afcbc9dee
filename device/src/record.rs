//! The input recorder (`--record FILE`): every input that crosses the device's boundary and
//! can change what it does, appended to one input log (`belfry_trace_schema::input_log`) in the
//! order the device met them, each with the next number of one sequence.
//!
//! The blocks that meet inputs hold a [`RecordSlot`], empty unless the device records: the cost
//! of recording off is one atomic load and a branch per input, and no entry is built. Recorded
//! today: vfio-user messages with their fds' identity and the replies (server), the bytes of
//! every guest-memory access that reads (`DmaMemory`), the GPU clock reads (register file), the
//! doorbell values the command processor takes, each MSI-X eventfd write with its result, each
//! acquisition of the GPU objects' lock (a ticket, in the order the lock was handed out), the
//! accesses other threads' accesses must be ordered with (a ticket each: `MB_STATUS`, the
//! interrupt mask, pending causes and eventfd table), the command processor's wake-ups and
//! looks at the trapped doorbells, and each thread's name before its first record. Appends are serialized by one mutex, whose order is the log's
//! order. Replaying (`crate::replay`), the slot holds the replay's turnstile ([`Turnstile`]) instead.
//!
//! A write error (a full disk) stops the recording, logged once; the device goes on. The
//! buffers are written out at most [`FLUSH_INTERVAL`] after a record, and [`Recorder::finish`]
//! ends the log when the device stops serving.

use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use belfry_trace_schema::file::Compression;
use belfry_trace_schema::input_log::{Entry, FdIdentity, FdKind, LogWriter};

use crate::build_identity::BUILD;
use crate::config::DeviceConfig;
use crate::trace::TraceLevel;

mod turnstile;
pub use crate::threads::thread_number;
pub use turnstile::{describe, Divergence, Outcome, Turnstile};

/// The record an ordered access leaves in an input log (a lock taken, or a look at or change
/// of state another thread also reads or writes): a ticket of the calling thread.
pub fn ticket() -> Entry {
    Entry::Ticket { thread: thread_number() }
}

/// The input log being written.
pub struct Recorder {
    /// `None` once finished.
    writer: Mutex<Option<LogWriter>>,
    /// When the writer last flushed (checked every [`FLUSH_CHECK`] records).
    flushed: Mutex<Instant>,
    failed: AtomicBool,
    connections: AtomicU32,
}

impl Recorder {
    /// A log at `path` that starts with the device's configuration (`config_json`).
    pub fn create(path: &Path, compression: Compression, config_json: &str) -> std::io::Result<Recorder> {
        Ok(Recorder {
            writer: Mutex::new(Some(LogWriter::create(path, compression, config_json)?)),
            flushed: Mutex::new(Instant::now()),
            failed: AtomicBool::new(false),
            connections: AtomicU32::new(0),
        })
    }

    /// Appends `entry`.
    pub fn note(&self, entry: &Entry) {
        if self.failed.load(Ordering::Relaxed) {
            return;
        }
        let mut guard = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.append(&mut guard, entry);
    }

    /// Runs `during`, then appends the entry `make` builds, both under the log's mutex: no
    /// other record comes between the two, so the log's order is the order of what `during`
    /// did among the records of the other threads.
    pub fn note_after<T>(&self, make: impl FnOnce() -> Entry, during: impl FnOnce() -> T) -> T {
        if self.failed.load(Ordering::Relaxed) {
            return during();
        }
        let mut guard = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let done = during();
        self.append(&mut guard, &make());
        done
    }

    /// Appends `entry` (after the calling thread's name, before its first record) to the
    /// writer `guard` holds.
    fn append(&self, guard: &mut Option<LogWriter>, entry: &Entry) {
        let Some(writer) = guard.as_mut() else { return };
        let first = !ANNOUNCED.with(|a| a.replace(true));
        let announced = if first {
            let name = std::thread::current().name().unwrap_or_default().to_owned();
            writer.append(&Entry::Thread { thread: thread_number(), name }).map(drop)
        } else {
            Ok(())
        };
        let result = announced.and_then(|()| writer.append(entry)).and_then(|n| {
            if n % FLUSH_CHECK == 0 {
                let mut flushed = self.flushed.lock().unwrap_or_else(|e| e.into_inner());
                if flushed.elapsed() >= FLUSH_INTERVAL {
                    *flushed = Instant::now();
                    return writer.flush();
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            self.failed.store(true, Ordering::Relaxed);
            log::error!("input recording stopped at record {}: {e}", writer.records());
        }
    }

    /// Ends the log (what is recorded later is dropped); how many records it holds.
    pub fn finish(&self) -> u64 {
        let Some(writer) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() else { return 0 };
        let records = writer.records();
        if let Err(e) = writer.finish() {
            log::error!("input recording: finishing the log failed: {e}");
        }
        records
    }
}

thread_local! {
    /// Whether the thread's name is in the log (a [`Entry::Thread`] before its first record).
    static ANNOUNCED: Cell<bool> = const { Cell::new(false) };
}

/// Every this many records the recorder looks at the clock…
const FLUSH_CHECK: u64 = 64;
/// …and writes its buffers out if they were last written this long ago, so a device killed
/// mid-run leaves a log readable up to a fraction of a second before its end.
const FLUSH_INTERVAL: Duration = Duration::from_millis(200);

/// Where a block finds the recorder, if the device records, or the replay's turnstile, if
/// the device replays a log.
#[derive(Default)]
pub struct RecordSlot(OnceLock<Sink>);

/// What a [`RecordSlot`] hands its entries to.
enum Sink {
    Record(Arc<Recorder>),
    Replay(Arc<Turnstile>),
}

impl RecordSlot {
    /// Records into `recorder` from now on (a second call changes nothing).
    pub fn set(&self, recorder: &Arc<Recorder>) {
        let _ = self.0.set(Sink::Record(Arc::clone(recorder)));
    }

    /// Replays through `turnstile` from now on (a second call changes nothing).
    pub fn replay(&self, turnstile: &Arc<Turnstile>) {
        let _ = self.0.set(Sink::Replay(Arc::clone(turnstile)));
    }

    /// Appends the entry `make` builds, if the device records; replaying, waits for the
    /// entry's turn in the log (and stops the replay if an output differs from the log's).
    #[inline]
    pub fn note(&self, make: impl FnOnce() -> Entry) {
        match self.0.get() {
            None => {}
            Some(Sink::Record(recorder)) => recorder.note(&make()),
            Some(Sink::Replay(turnstile)) => {
                turnstile.pass(make());
            }
        }
    }

    /// Like [`note`](Self::note) for an input: replaying, the log's record of it once its turn
    /// has come (the value the device is to see instead of its own); `None` otherwise, or
    /// past the log's end.
    #[inline]
    pub fn input(&self, make: impl FnOnce() -> Entry) -> Option<Entry> {
        match self.0.get() {
            None => None,
            Some(Sink::Record(recorder)) => {
                recorder.note(&make());
                None
            }
            Some(Sink::Replay(turnstile)) => turnstile.pass(make()),
        }
    }

    /// A clock read of `ns` nanoseconds by the calling thread, as an input (a `clock` record):
    /// replaying, the log's value once its turn has come; `None` otherwise, or past the log's
    /// end.
    #[inline]
    pub fn clock(&self, ns: u64) -> Option<u64> {
        match self.input(|| Entry::Clock { thread: thread_number(), ns }) {
            Some(Entry::Clock { ns: recorded, .. }) => Some(recorded),
            _ => None,
        }
    }

    /// Runs `during` (taking a lock): recording, then appends the entry `make` builds (while
    /// the lock is held); replaying, when the entry's turn has come, so the lock is taken in
    /// the log's order.
    #[inline]
    pub fn around<T>(&self, make: impl FnOnce() -> Entry, during: impl FnOnce() -> T) -> T {
        match self.0.get() {
            Some(Sink::Replay(turnstile)) => turnstile.pass_with(make(), during).1,
            _ => {
                let done = during();
                self.note(make);
                done
            }
        }
    }

    /// Runs `during` (an access another thread's access must be ordered with, such as a
    /// register one thread stores and another loads): recording, with the entry `make` builds
    /// appended under the log's mutex together with it, so the log orders it; replaying, when
    /// the entry's turn has come.
    #[inline]
    pub fn ordered<T>(&self, make: impl FnOnce() -> Entry, during: impl FnOnce() -> T) -> T {
        match self.0.get() {
            None => during(),
            Some(Sink::Record(recorder)) => recorder.note_after(make, during),
            Some(Sink::Replay(turnstile)) => turnstile.pass_with(make(), during).1,
        }
    }

    /// The number of a connection that starts now (0, 1, … with `--persist`; 0 unrecorded).
    pub fn connection_started(&self) -> u32 {
        match self.0.get() {
            None => 0,
            Some(Sink::Record(r)) => r.connections.fetch_add(1, Ordering::Relaxed),
            Some(Sink::Replay(t)) => t.connection_started(),
        }
    }

    /// Whether the device records or replays.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.0.get().is_some()
    }

    /// Whether the device replays a log.
    #[inline]
    pub fn is_replay(&self) -> bool {
        matches!(self.0.get(), Some(Sink::Replay(_)))
    }
}

/// The log's first record: the device's configuration as JSON with, as `trace_level`, the
/// level of the trace the device writes (`null` if none) — tracing reads guest memory (a
/// mailbox block's bytes), so a replay traces at the same level — and, as `build`, the build
/// that records ([`BUILD`]), which a replay checks before it starts.
pub fn config_json(config: &DeviceConfig, traced: Option<TraceLevel>) -> serde_json::Result<String> {
    let mut json = serde_json::to_value(config)?;
    if let Some(object) = json.as_object_mut() {
        object.insert(TRACE_LEVEL_FIELD.into(), serde_json::to_value(traced)?);
        object.insert(BUILD_FIELD.into(), BUILD.into());
    }
    serde_json::to_string(&json)
}

/// The field of the configuration record that holds the trace level.
pub const TRACE_LEVEL_FIELD: &str = "trace_level";

/// The field of the configuration record that names the build that recorded the log.
pub const BUILD_FIELD: &str = "build";

/// What an fd sent with a message was: its kind and `fstat` identity (zeros if `fstat` fails).
pub fn fd_identity(fd: &OwnedFd) -> FdIdentity {
    // SAFETY: an all-zero stat is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an fd we own, with a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return FdIdentity { kind: FdKind::Other, dev: 0, ino: 0 };
    }
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => FdKind::File,
        // eventfds and other anonymous inodes have no file type bits.
        0 => FdKind::Anonymous,
        _ => FdKind::Other,
    };
    FdIdentity { kind, dev: st.st_dev, ino: st.st_ino }
}

//! Structured tracing of everything that crosses the device's boundary.
//!
//! Every vfio-user message, register access (decoded by name from the abi register map),
//! doorbell, mailbox command, DMA mapping and interrupt becomes an [`Event`]. Events go to the
//! `log` facade (target `belfry::trace`, level debug) and, with `--trace FILE`, to a JSON-lines
//! file, gzip-compressed unless `--trace-compression none` (`belfry_trace_schema::file`), written
//! by a dedicated thread so that no device thread ever waits on file I/O or compression.
//!
//! The file starts with a header record (format [`FORMAT_VERSION`], the device configuration,
//! the level and size limit, and the host clocks at time zero), keeps only the events of its
//! [`TraceLevel`], and stops at its size limit: past it, events are counted by kind instead of
//! written, a `limit_reached` record marks the spot, and a `dropped` record with the counts
//! closes the file. `docs/TRACE.md` describes the format; `belfry-trace` reads it.
//!
//! The queue to the writer thread is bounded ([`TraceSettings::queue_records`]): a device
//! thread never waits for the disk and the queue never holds more than that many records. An
//! event that finds the queue full is counted instead (by kind, as past the size limit), and
//! the next event that finds room first writes a `dropped` record with `reason`
//! `writer_behind` and those counts, so the file says where and how much it lost.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use belfry_abi::mailbox;
pub use belfry_trace_schema::file::Compression;
use belfry_trace_schema::file::Writer;
pub use belfry_trace_schema::words::{
    BufferPhase, ConnectionState, Delivery, DmaOp, FenceSource, MailboxPhase, Passed, ResetSource, ScheduleWhy,
};
use belfry_trace_schema::Record as SchemaRecord;
pub use belfry_trace_schema::{Event, Name, TraceLevel, WalkStep, FORMAT_VERSION};
use serde::Serialize;
use vm_memory::{Bytes, GuestAddress, GuestMemory};

use crate::config::DeviceConfig;

mod header;

/// Bytes of a packet recorded in its `packet` record (the longest fixed packet is 40).
pub const PACKET_BYTES_MAX: usize = 64;

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// Default size limit of a trace file.
pub const DEFAULT_LIMIT_BYTES: u64 = 1 << 30;

/// How long a record may wait in the writer before it is flushed to the file (readers of a
/// live trace see it by then). Flushing only on a pause keeps a gzip file's blocks large.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);

/// Default bound of the queue to the writer thread, in records (a record is 100 to 500 bytes:
/// at most some 30 MiB waiting for the disk).
pub const DEFAULT_QUEUE_RECORDS: usize = 65536;

/// Records the argument block of mailbox command `seq` at guest physical `address`, as a
/// [`Event::MailboxBlock`] (nothing when tracing is off or the block is unreadable).
pub fn mailbox_block<M: GuestMemory>(tracer: &Tracer, mem: &M, seq: u32, address: u64) {
    if !tracer.wants(TraceLevel::Control) {
        return;
    }
    let mut header = [0u8; core::mem::size_of::<mailbox::MailboxHeader>()];
    if mem.read_slice(&mut header, GuestAddress(address)).is_err() {
        return;
    }
    let length = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let length = u32::try_from(header.len()).map_or(length, |min| length.clamp(min, mailbox::BLOCK_MAX_LEN));
    let length = usize::try_from(length).unwrap_or(header.len());
    let mut block = vec![0u8; length];
    if mem.read_slice(&mut block, GuestAddress(address)).is_err() {
        block = header.to_vec();
    }
    tracer.emit(Event::MailboxBlock { seq, bytes: hex(&block) });
}

/// How a trace file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceSettings {
    /// Events above this level are not recorded.
    pub level: TraceLevel,
    /// Bytes of event records after which events are only counted (0: no limit).
    pub limit_bytes: u64,
    /// Records that may wait for the writer thread; events past it are counted, not queued.
    pub queue_records: usize,
    /// How the file is stored.
    pub compression: Compression,
}

impl Default for TraceSettings {
    fn default() -> Self {
        TraceSettings {
            level: TraceLevel::Packets,
            limit_bytes: DEFAULT_LIMIT_BYTES,
            queue_records: DEFAULT_QUEUE_RECORDS,
            compression: Compression::default(),
        }
    }
}

/// Counts of events kept out of the file (by the size limit, or by a full writer queue).
#[derive(Default)]
struct Dropped {
    by_event: BTreeMap<&'static str, u64>,
    first_t_ns: Option<u64>,
    last_t_ns: u64,
}

enum Sink {
    Line(String),
    Sync(Sender<()>),
}

/// The tracer of one device.
pub struct Tracer {
    device: String,
    start: Instant,
    level: TraceLevel,
    limit_bytes: u64,
    written: AtomicU64,
    full: AtomicBool,
    dropped: Mutex<Dropped>,
    /// Events dropped on a full writer queue since the last `writer_behind` record (locked
    /// under the queue's lock).
    behind: Mutex<Dropped>,
    file: Option<Mutex<SyncSender<Sink>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// An event record without its time (added under the writer's lock, first in the line).
#[derive(Serialize)]
struct Record<'a> {
    dev: &'a str,
    #[serde(flatten)]
    event: &'a Event,
}

impl Tracer {
    /// A tracer that only logs (no file), at every level.
    pub fn new(device: &str) -> Self {
        Tracer {
            device: device.to_string(),
            start: Instant::now(),
            level: TraceLevel::Packets,
            limit_bytes: 0,
            written: AtomicU64::new(0),
            full: AtomicBool::new(false),
            dropped: Mutex::new(Dropped::default()),
            behind: Mutex::new(Dropped::default()),
            file: None,
            writer: Mutex::new(None),
        }
    }

    /// A tracer that logs and writes JSON lines to `path` (created or truncated, stored as
    /// `settings.compression` says), starting with the header record of device `config`.
    pub fn with_file(config: &DeviceConfig, path: &Path, settings: TraceSettings) -> std::io::Result<Self> {
        let mut out = Writer::create(path, settings.compression)?;
        let start = Instant::now();
        let header = header::record(config, settings);
        let header = serde_json::to_string(&header).map_err(std::io::Error::other)?;
        writeln!(out, "{header}")?;
        out.flush()?;
        let (tx, rx) = sync_channel::<Sink>(settings.queue_records);
        let writer = std::thread::Builder::new().name("belfry-trace".into()).spawn(move || write_file(out, &rx))?;
        Ok(Tracer {
            device: config.name.clone(),
            start,
            level: settings.level,
            limit_bytes: settings.limit_bytes,
            written: AtomicU64::new(0),
            full: AtomicBool::new(false),
            dropped: Mutex::new(Dropped::default()),
            behind: Mutex::new(Dropped::default()),
            file: Some(Mutex::new(tx)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Whether events are consumed at all (skip building them otherwise).
    pub fn enabled(&self) -> bool {
        self.file.is_some() || log::log_enabled!(target: "belfry::trace", log::Level::Debug)
    }

    /// Whether events of `level` are recorded (skip building them otherwise).
    pub fn wants(&self, level: TraceLevel) -> bool {
        level <= self.level && self.enabled()
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records `event` (if its level is recorded; counted instead once the file is full).
    ///
    /// The time is taken under the writer's lock, so the file is in time order whichever
    /// thread emits (the reader relies on it: a packet never precedes the doorbell it ran for).
    pub fn emit(&self, event: Event) {
        if !self.wants(event.level()) {
            return;
        }
        if self.full.load(Ordering::Relaxed) {
            Self::count(&self.dropped, &event, self.now_ns());
            return;
        }
        let record = Record { dev: &self.device, event: &event };
        let Ok(body) = serde_json::to_string(&record) else { return };
        let Some(tx) = &self.file else {
            log::debug!(target: "belfry::trace", "{{\"t_ns\":{},{}", self.now_ns(), &body[1..]);
            return;
        };
        let Ok(tx) = tx.lock() else { return };
        let t_ns = self.now_ns();
        let line = format!("{{\"t_ns\":{t_ns},{}", &body[1..]);
        log::debug!(target: "belfry::trace", "{line}");
        let len = line.len() as u64 + 1;
        if self.limit_bytes != 0 && self.written.fetch_add(len, Ordering::Relaxed) + len > self.limit_bytes {
            // The first event over the limit closes the file to events (later, smaller ones
            // too: the file stays a prefix of the run).
            if !self.full.swap(true, Ordering::Relaxed) {
                let mark = SchemaRecord {
                    t_ns,
                    dev: self.device.clone(),
                    event: Event::LimitReached { limit_bytes: self.limit_bytes },
                };
                // A full queue loses the mark; the closing `dropped` record still counts.
                if let Ok(mark) = serde_json::to_string(&mark) {
                    let _ = tx.try_send(Sink::Line(mark));
                }
            }
            drop(tx);
            Self::count(&self.dropped, &event, t_ns);
            return;
        }
        // Never wait for the writer: what does not fit is counted, and the count is written
        // first once there is room again.
        let queued = self.write_behind_record(&tx, t_ns) && tx.try_send(Sink::Line(line)).is_ok();
        if !queued {
            self.written.fetch_sub(len, Ordering::Relaxed);
            Self::count(&self.behind, &event, t_ns);
        }
    }

    /// Queues the `writer_behind` record of the events a full queue dropped, if any (called
    /// under the queue's lock); false if the queue is still full.
    fn write_behind_record(&self, tx: &SyncSender<Sink>, t_ns: u64) -> bool {
        let mut behind = self.behind.lock().unwrap_or_else(|e| e.into_inner());
        let Some(line) = self.dropped_line(&behind, "writer_behind", t_ns) else { return true };
        match tx.try_send(Sink::Line(line)) {
            Err(TrySendError::Full(_)) => false,
            _ => {
                *behind = Dropped::default();
                true
            }
        }
    }

    /// The `dropped` record of `d` (none if it counted nothing).
    fn dropped_line(&self, d: &Dropped, reason: &'static str, t_ns: u64) -> Option<String> {
        let first_t_ns = d.first_t_ns?;
        let record = SchemaRecord {
            t_ns,
            dev: self.device.clone(),
            event: Event::Dropped {
                reason: reason.into(),
                records: d.by_event.values().sum(),
                first_t_ns,
                by_event: d.by_event.iter().map(|(&kind, &n)| (kind.into(), n)).collect(),
            },
        };
        serde_json::to_string(&record).ok()
    }

    fn count(counts: &Mutex<Dropped>, event: &Event, t_ns: u64) {
        let mut d = counts.lock().unwrap_or_else(|e| e.into_inner());
        *d.by_event.entry(event.kind()).or_default() += 1;
        d.first_t_ns.get_or_insert(t_ns);
        d.last_t_ns = t_ns;
    }

    /// Waits until every event emitted so far is in the file.
    pub fn sync(&self) {
        if let Some(tx) = &self.file {
            let (ack_tx, ack_rx) = channel();
            // Waits for room outside the queue's lock: emitters never wait behind it.
            let Ok(tx) = tx.lock().map(|tx| tx.clone()) else { return };
            let sent = tx.send(Sink::Sync(ack_tx)).is_ok();
            if sent {
                let _ = ack_rx.recv();
            }
        }
    }

    /// Writes the `dropped` records of what a full queue or the limit kept out (waiting for
    /// the writer: the device is going away).
    fn close(&self) {
        let Some(tx) = &self.file else { return };
        let Ok(tx) = tx.lock() else { return };
        for (counts, reason) in [(&self.behind, "writer_behind"), (&self.dropped, "limit")] {
            let d = counts.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(line) = self.dropped_line(&d, reason, d.last_t_ns) {
                let _ = tx.send(Sink::Line(line));
            }
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.close();
        self.file = None;
        if let Ok(mut writer) = self.writer.lock() {
            if let Some(handle) = writer.take() {
                let _ = handle.join();
            }
        }
    }
}

/// The writer thread: writes what is queued, flushes a pause's worth at most
/// [`FLUSH_INTERVAL`] after its first unflushed record (and at once on a `sync`), and ends the
/// file once the tracer is gone.
fn write_file(mut out: Writer, rx: &std::sync::mpsc::Receiver<Sink>) {
    yield_to_the_device();
    // When the oldest record not yet flushed was written.
    let mut unflushed: Option<Instant> = None;
    loop {
        if unflushed.is_some_and(|since| since.elapsed() >= FLUSH_INTERVAL) {
            let _ = out.flush();
            unflushed = None;
        }
        let msg = match unflushed {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(since) => rx.recv_timeout(FLUSH_INTERVAL.saturating_sub(since.elapsed())),
        };
        match msg {
            Ok(Sink::Line(line)) => {
                if writeln!(out, "{line}").is_err() {
                    return;
                }
                unflushed.get_or_insert_with(Instant::now);
            }
            Ok(Sink::Sync(ack)) => {
                let _ = out.flush();
                unflushed = None;
                let _ = ack.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = out.flush();
                unflushed = None;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = out.finish();
}

/// Makes the calling thread (the writer) give way to the device's own threads: `SCHED_BATCH`, so
/// a record's emitter that wakes it is not preempted by it, and a slice of
/// [`WRITER_SLICE`], longer than any device thread's, so a device thread that wakes while it
/// writes preempts it at once (EEVDF's `PREEMPT_SHORT`). On a device whose threads share one
/// core, the writer woken at every control-level record otherwise preempted an engine between
/// a fence's signal and the waiter's next packet. Its weight stays a normal thread's: it is not
/// starved on a busy host. Best effort: a kernel without custom slices (before 6.12) keeps the
/// policy alone, and a refusal leaves the thread as it was.
fn yield_to_the_device() {
    let attr = libc::sched_attr {
        size: SCHED_ATTR_SIZE,
        // CAST: SCHED_BATCH is 3.
        sched_policy: libc::SCHED_BATCH as u32,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: u64::try_from(WRITER_SLICE.as_nanos()).unwrap_or(u64::MAX),
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: sched_setattr on the calling thread (0) reads `attr`, whose size field says how much.
    let slice = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0u32) };
    if slice != 0 {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler on the calling thread (0) reads `param`.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    }
}

/// `SCHED_ATTR_SIZE_VER0`: the size of the `struct sched_attr` every kernel since 3.14 reads.
const SCHED_ATTR_SIZE: u32 = 48;
const _: () = assert!(std::mem::size_of::<libc::sched_attr>() == SCHED_ATTR_SIZE as usize);

/// The writer's time slice (see `yield_to_the_device`): device threads ask for 100 µs
/// (`--placement device-core`) or run with the host's default (about 3 ms).
const WRITER_SLICE: Duration = Duration::from_millis(20);

#[cfg(test)]
mod tests;

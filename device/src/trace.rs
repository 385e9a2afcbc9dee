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
use std::time::{Duration, Instant, SystemTime};

use belfry_abi::mailbox;
pub use belfry_trace_schema::file::Compression;
use belfry_trace_schema::file::Writer;
use serde::Serialize;
use vm_memory::{Bytes, GuestAddress, GuestMemory};

use crate::config::DeviceConfig;

mod header;
use header::{monotonic_ns, Header, HeaderClock};

/// Version of the trace file format, in the header record. Version 1 files (no header) are
/// still read by `belfry-trace`; a reader ignores fields and event kinds it does not know.
pub const FORMAT_VERSION: u32 = 2;

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

/// How much a trace file records: each level includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceLevel {
    /// The control plane: connections, resets, DMA and interrupt setup, mailbox commands with
    /// their argument blocks, interrupts and their records, fence decisions, faults, queue,
    /// engine and power states.
    Control,
    /// Also each submission's path in: doorbells, doorbell wake-ups, register accesses and
    /// vfio-user messages.
    Commands,
    /// Also every packet an engine executes (the bulk of a busy trace).
    Packets,
}

/// One traced event. Serialized with an `event` tag in snake case.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A client connected or disconnected.
    Connection {
        /// `connected` or `disconnected`.
        state: &'static str,
    },
    /// A vfio-user message was handled.
    Message {
        /// Message id.
        id: u16,
        /// Command name, or `UNKNOWN(n)`.
        command: String,
        /// Message size from the header.
        size: u32,
        /// File descriptors received with it.
        fds: usize,
        /// errno of the error reply, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        errno: Option<i32>,
        /// Why it failed, if it did.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The client asked for no reply (posted write).
        posted: bool,
    },
    /// A register was read.
    RegRead {
        /// Region name (`config`, `bar0`, …).
        region: &'static str,
        /// Byte offset in the region.
        offset: u64,
        /// Access size.
        size: usize,
        /// Register name, when the offset is a declared register.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<&'static str>,
        /// Value read.
        value: u64,
    },
    /// A register was written.
    RegWrite {
        /// Region name.
        region: &'static str,
        /// Byte offset in the region.
        offset: u64,
        /// Access size.
        size: usize,
        /// Register name, when the offset is a declared register.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<&'static str>,
        /// Value written.
        value: u64,
        /// Decoded fields of the written value (`name=value`).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        fields: Vec<String>,
    },
    /// A doorbell was rung.
    Doorbell {
        /// Doorbell index.
        index: u32,
        /// Value written.
        value: u64,
    },
    /// The command processor woke for rung doorbells.
    DoorbellWake {
        /// Doorbells found rung, with their latest values.
        rung: Vec<(u32, u64)>,
    },
    /// A mailbox command was submitted or completed.
    Mailbox {
        /// `submit`, `complete` or `dropped`.
        phase: &'static str,
        /// Opcode name, once known.
        #[serde(skip_serializing_if = "Option::is_none")]
        opcode: Option<&'static str>,
        /// Sequence number.
        seq: u32,
        /// Guest physical address of the argument block.
        address: u64,
        /// Completion status name.
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'static str>,
        /// Detail of a failure.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// An interrupt was raised (or suppressed).
    Interrupt {
        /// MSI-X vector (or 0 for INTx).
        vector: u16,
        /// Cause bits (`irq::cause`).
        cause: u32,
        /// `msix`, `intx`, `masked`, `no-eventfd` or `suppressed`.
        delivery: &'static str,
    },
    /// A DMA region was mapped or unmapped.
    Dma {
        /// `map` or `unmap`.
        op: &'static str,
        /// Guest address.
        address: u64,
        /// Size.
        size: u64,
    },
    /// Interrupt eventfds were configured.
    SetIrqs {
        /// IRQ index name.
        index: &'static str,
        /// First vector.
        start: u32,
        /// Number of vectors.
        count: u32,
        /// Action and data type.
        action: String,
    },
    /// The device was reset.
    Reset {
        /// `vfio-user`, `register` or `connection`.
        source: &'static str,
    },
    /// An engine executed a packet.
    Packet {
        /// Queue.
        queue: u32,
        /// Engine.
        engine: u32,
        /// Opcode name.
        opcode: &'static str,
        /// GPU VA of the packet.
        va: u64,
        /// The packet's bytes (at most [`PACKET_BYTES_MAX`]), lowercase hex; `belfry-trace`
        /// decodes them with the abi's packet structs.
        #[serde(skip_serializing_if = "String::is_empty")]
        bytes: String,
    },
    /// An engine fetched a ring entry and started its command buffer, or reached the end of it.
    CommandBuffer {
        /// `begin` or `end`.
        phase: &'static str,
        /// Queue.
        queue: u32,
        /// Engine.
        engine: u32,
        /// The ring index of the entry (the device's read index before it advances).
        ring_index: u32,
        /// GPU VA of the buffer (`begin`).
        #[serde(skip_serializing_if = "Option::is_none")]
        va: Option<u64>,
        /// Size of the buffer in bytes (`begin`).
        #[serde(skip_serializing_if = "Option::is_none")]
        size: Option<u32>,
    },
    /// The scheduler picked a queue for an engine's next slice.
    Schedule {
        /// Engine.
        engine: u32,
        /// Queue picked.
        queue: u32,
        /// `only_ready` (no other queue of the runlist could run), `priority` (it had the
        /// highest priority among the ready ones) or `round_robin` (its turn among ready
        /// queues of its priority).
        why: &'static str,
        /// Other queues of the runlist that had work and did not run, with why:
        /// `lost` (ready, not picked), `waiting` (parked on a fence not reached),
        /// `suspended`, `faulted`, `hung`.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        others: Vec<(u32, &'static str)>,
    },
    /// A native-fence interrupt decision.
    FenceDecision {
        /// `signal` (engine), `monitored_update` (CMP), or `notify` (CMP: a
        /// `NOTIFY_FENCE_CHANGED`, which never interrupts).
        source: &'static str,
        /// Fence handle.
        handle: u64,
        /// CurrentValue used.
        current: u64,
        /// MonitoredValue used.
        monitored: u64,
        /// Whether the CPU was interrupted.
        interrupt: bool,
        /// Queue whose `FENCE_SIGNAL` it was (engine signals).
        #[serde(skip_serializing_if = "Option::is_none")]
        queue: Option<u32>,
        /// Engine that executed it (engine signals).
        #[serde(skip_serializing_if = "Option::is_none")]
        engine: Option<u32>,
    },
    /// A fence was registered, with where its values live.
    FenceRegistered {
        /// Handle.
        handle: u64,
        /// Kind.
        kind: String,
        /// CurrentValue placement (guest RAM or VRAM).
        current: String,
        /// MonitoredValue placement.
        monitored: String,
    },
    /// `QUERY_LOST_SIGNALS` answered: the fences a faulted context's unexecuted work was
    /// going to signal.
    LostSignals {
        /// Context.
        context: u32,
        /// Fences found.
        fences: u32,
    },
    /// A GPU signal that would have moved a registered fence's CurrentValue backwards,
    /// refused (the fence kept its value).
    FenceBackwards {
        /// Fence handle.
        handle: u64,
        /// CurrentValue before.
        from: u64,
        /// The value the signal named.
        to: u64,
        /// Queue whose packet it was.
        queue: u32,
        /// Engine that executed it.
        engine: u32,
        /// Such signals on this device so far, this one included.
        count: u64,
    },
    /// A context faulted.
    Fault {
        /// Context.
        context: u32,
        /// Queue.
        queue: u32,
        /// Reason name.
        reason: &'static str,
        /// Faulting GPU VA.
        address: u64,
        /// For MMU faults, the page walk of `address` (root level first) as far as it got.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        walk: Vec<crate::mmu::WalkStep>,
    },
    /// A queue changed state.
    QueueState {
        /// Queue.
        queue: u32,
        /// New state.
        state: &'static str,
        /// Detail.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// An engine changed power state (or asked to).
    EngineState {
        /// Engine.
        engine: u32,
        /// State name.
        state: &'static str,
    },
    /// An interrupt record was written.
    Record {
        /// `irq::RecordKind`.
        kind: u32,
        /// Engine.
        engine: u32,
        /// Queue.
        queue: u32,
        /// Context.
        context: u32,
        /// Fence handle.
        fence: u64,
        /// Value.
        value: u64,
        /// Address.
        address: u64,
        /// Detail.
        detail: u32,
    },
    /// The PCI power state changed.
    PowerState {
        /// New state (0 = D0, 3 = D3hot).
        state: u8,
    },
    /// The GPU timestamp (`TIMESTAMP_LO/HI`, `WRITE_TIMESTAMP`) read at this record's `t_ns`:
    /// the anchor that puts GPU times (the module's fence timeline) on the trace clock.
    Clock {
        /// GPU timestamp in nanoseconds.
        gpu_ns: u64,
    },
    /// A mailbox command's argument block as it was after the command ran (results included),
    /// written just before its `complete` record.
    MailboxBlock {
        /// Sequence number.
        seq: u32,
        /// The block's bytes (header included, at most `BLOCK_MAX_LEN`), lowercase hex.
        bytes: String,
    },
}

impl Event {
    /// The level from which this event is recorded.
    pub fn level(&self) -> TraceLevel {
        match self {
            Event::Packet { .. } => TraceLevel::Packets,
            Event::CommandBuffer { .. }
            | Event::Schedule { .. }
            | Event::Message { .. }
            | Event::RegRead { .. }
            | Event::RegWrite { .. }
            | Event::Doorbell { .. }
            | Event::DoorbellWake { .. } => TraceLevel::Commands,
            _ => TraceLevel::Control,
        }
    }

    /// The `event` tag it is written with.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Connection { .. } => "connection",
            Event::Message { .. } => "message",
            Event::RegRead { .. } => "reg_read",
            Event::RegWrite { .. } => "reg_write",
            Event::Doorbell { .. } => "doorbell",
            Event::DoorbellWake { .. } => "doorbell_wake",
            Event::Mailbox { .. } => "mailbox",
            Event::Interrupt { .. } => "interrupt",
            Event::Dma { .. } => "dma",
            Event::SetIrqs { .. } => "set_irqs",
            Event::Reset { .. } => "reset",
            Event::Packet { .. } => "packet",
            Event::CommandBuffer { .. } => "command_buffer",
            Event::Schedule { .. } => "schedule",
            Event::FenceDecision { .. } => "fence_decision",
            Event::FenceRegistered { .. } => "fence_registered",
            Event::LostSignals { .. } => "lost_signals",
            Event::FenceBackwards { .. } => "fence_backwards",
            Event::Fault { .. } => "fault",
            Event::QueueState { .. } => "queue_state",
            Event::EngineState { .. } => "engine_state",
            Event::Record { .. } => "record",
            Event::PowerState { .. } => "power_state",
            Event::Clock { .. } => "clock",
            Event::MailboxBlock { .. } => "mailbox_block",
        }
    }
}

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

/// The record of events kept out of the file: closing a file that reached its limit, or
/// where a full writer queue dropped events.
#[derive(Serialize)]
struct DroppedRecord<'a> {
    t_ns: u64,
    dev: &'a str,
    event: &'static str,
    /// `limit` (the size limit) or `writer_behind` (the writer's queue was full).
    reason: &'static str,
    records: u64,
    first_t_ns: u64,
    by_event: &'a BTreeMap<&'static str, u64>,
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
        let header = Header {
            t_ns: 0,
            dev: &config.name,
            event: "header",
            format: "belfry-trace",
            version: FORMAT_VERSION,
            producer: format!("belfry-device {}", env!("CARGO_PKG_VERSION")),
            abi_version: [belfry_abi::regs::VERSION_MAJOR, belfry_abi::regs::VERSION_MINOR],
            level: settings.level,
            limit_bytes: settings.limit_bytes,
            clock: HeaderClock {
                monotonic_ns: monotonic_ns(),
                unix_ns: SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                    .unwrap_or(0),
            },
            device: config,
        };
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
                let mark = serde_json::json!({
                    "t_ns": t_ns, "dev": self.device, "event": "limit_reached", "limit_bytes": self.limit_bytes,
                });
                // A full queue loses the mark; the closing `dropped` record still counts.
                let _ = tx.try_send(Sink::Line(mark.to_string()));
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
        let record = DroppedRecord {
            t_ns,
            dev: &self.device,
            event: "dropped",
            reason,
            records: d.by_event.values().sum(),
            first_t_ns,
            by_event: &d.by_event,
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

#[cfg(test)]
mod tests;

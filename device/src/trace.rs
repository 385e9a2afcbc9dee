//! Structured tracing of everything that crosses the device's boundary.
//!
//! Every vfio-user message, register access (decoded by name from the abi register map),
//! doorbell, mailbox command, DMA mapping and interrupt becomes an [`Event`]. Events go to the
//! `log` facade (target `belfry::trace`, level debug) and, with `--trace FILE`, to a JSON-lines
//! file written by a dedicated thread so that no device thread ever waits on file I/O.
//!
//! The file starts with a header record (format [`FORMAT_VERSION`], the device configuration,
//! the level and size limit, and the host clocks at time zero), keeps only the events of its
//! [`TraceLevel`], and stops at its size limit: past it, events are counted by kind instead of
//! written, a `limit_reached` record marks the spot, and a `dropped` record with the counts
//! closes the file. `docs/TRACE.md` describes the format; `belfry-trace` reads it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use belfry_abi::mailbox;
use serde::Serialize;
use vm_memory::{Bytes, GuestAddress, GuestMemory};

use crate::config::DeviceConfig;

/// Version of the trace file format, in the header record. Version 1 files (no header) are
/// still read by `belfry-trace`; a reader ignores fields and event kinds it does not know.
pub const FORMAT_VERSION: u32 = 2;

/// Bytes of a packet recorded in its `packet` record (the longest fixed packet is 40).
pub const PACKET_BYTES_MAX: usize = 64;

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Default size limit of a trace file.
pub const DEFAULT_LIMIT_BYTES: u64 = 1 << 30;

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
        /// `signal` (engine) or `monitored_update` (CMP).
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
}

impl Default for TraceSettings {
    fn default() -> Self {
        TraceSettings { level: TraceLevel::Packets, limit_bytes: DEFAULT_LIMIT_BYTES }
    }
}

/// The device configuration as the header records it.
#[derive(Serialize)]
struct HeaderDevice<'a> {
    name: &'a str,
    doorbells: u32,
    msix_vectors: u16,
    vram_size: u64,
    faults: &'a [crate::config::Fault],
    doorbell_model: String,
    interrupt_form: String,
    no_64bit_atomics: bool,
    engines_without_fence_writes: &'a [u32],
    hang_timeout_ms: u64,
    idle_f1_ms: u64,
}

/// Host clocks at the trace's time zero.
#[derive(Serialize)]
struct HeaderClock {
    /// `CLOCK_MONOTONIC` in nanoseconds (the same on every device of one host: it aligns them).
    monotonic_ns: u64,
    /// Wall-clock time in nanoseconds since the Unix epoch.
    unix_ns: u64,
}

/// The first record of a trace file.
#[derive(Serialize)]
struct Header<'a> {
    t_ns: u64,
    dev: &'a str,
    event: &'static str,
    format: &'static str,
    version: u32,
    producer: String,
    abi_version: [u32; 2],
    level: TraceLevel,
    limit_bytes: u64,
    clock: HeaderClock,
    device: HeaderDevice<'a>,
}

fn value_name<T: clap::ValueEnum>(v: &T) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Counts of what the size limit kept out of the file.
#[derive(Default)]
struct Dropped {
    by_event: BTreeMap<&'static str, u64>,
    first_t_ns: Option<u64>,
    last_t_ns: u64,
}

/// The closing record of a file that reached its limit.
#[derive(Serialize)]
struct DroppedRecord<'a> {
    t_ns: u64,
    dev: &'a str,
    event: &'static str,
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
    file: Option<Mutex<Sender<Sink>>>,
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
            file: None,
            writer: Mutex::new(None),
        }
    }

    /// A tracer that logs and writes JSON lines to `path` (created or truncated), starting
    /// with the header record of device `config`.
    pub fn with_file(config: &DeviceConfig, path: &Path, settings: TraceSettings) -> std::io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
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
            device: HeaderDevice {
                name: &config.name,
                doorbells: config.doorbells,
                msix_vectors: config.msix_vectors,
                vram_size: config.vram_size,
                faults: &config.faults,
                doorbell_model: value_name(&config.doorbell_model),
                interrupt_form: value_name(&config.interrupt_form),
                no_64bit_atomics: config.no_64bit_atomics,
                engines_without_fence_writes: &config.engines_without_fence_writes,
                hang_timeout_ms: config.hang_timeout_ms,
                idle_f1_ms: config.idle_f1_ms,
            },
        };
        let header = serde_json::to_string(&header).map_err(std::io::Error::other)?;
        writeln!(out, "{header}")?;
        out.flush()?;
        let (tx, rx) = channel::<Sink>();
        let writer = std::thread::Builder::new().name("belfry-trace".into()).spawn(move || {
            // Write everything queued, then flush once the queue is empty, so a reader sees
            // records promptly without a flush per line.
            while let Ok(first) = rx.recv() {
                let mut next = Some(first);
                while let Some(msg) = next.take() {
                    match msg {
                        Sink::Line(line) => {
                            if writeln!(out, "{line}").is_err() {
                                return;
                            }
                        }
                        Sink::Sync(ack) => {
                            let _ = out.flush();
                            let _ = ack.send(());
                        }
                    }
                    next = rx.try_recv().ok();
                }
                let _ = out.flush();
            }
        })?;
        Ok(Tracer {
            device: config.name.clone(),
            start,
            level: settings.level,
            limit_bytes: settings.limit_bytes,
            written: AtomicU64::new(0),
            full: AtomicBool::new(false),
            dropped: Mutex::new(Dropped::default()),
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
            self.count_dropped(&event, self.now_ns());
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
                let _ = tx.send(Sink::Line(mark.to_string()));
            }
            drop(tx);
            self.count_dropped(&event, t_ns);
            return;
        }
        let _ = tx.send(Sink::Line(line));
    }

    fn send(&self, tx: &Mutex<Sender<Sink>>, line: String) {
        if let Ok(tx) = tx.lock() {
            let _ = tx.send(Sink::Line(line));
        }
    }

    fn count_dropped(&self, event: &Event, t_ns: u64) {
        let mut d = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
        *d.by_event.entry(event.kind()).or_default() += 1;
        d.first_t_ns.get_or_insert(t_ns);
        d.last_t_ns = t_ns;
    }

    /// Waits until every event emitted so far is in the file.
    pub fn sync(&self) {
        if let Some(tx) = &self.file {
            let (ack_tx, ack_rx) = channel();
            let sent = tx.lock().map(|tx| tx.send(Sink::Sync(ack_tx)).is_ok()).unwrap_or(false);
            if sent {
                let _ = ack_rx.recv();
            }
        }
    }

    /// Writes the `dropped` record if the limit kept events out.
    fn close(&self) {
        let Some(tx) = &self.file else { return };
        let d = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
        let Some(first_t_ns) = d.first_t_ns else { return };
        let record = DroppedRecord {
            t_ns: d.last_t_ns,
            dev: &self.device,
            event: "dropped",
            records: d.by_event.values().sum(),
            first_t_ns,
            by_event: &d.by_event,
        };
        if let Ok(line) = serde_json::to_string(&record) {
            self.send(tx, line);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> DeviceConfig {
        DeviceConfig { name: "belfry7".into(), ..DeviceConfig::default() }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    #[test]
    fn events_are_written_as_tagged_json_lines_after_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
        tracer.emit(Event::Doorbell { index: 3, value: 9 });
        tracer.emit(Event::Reset { source: "register" });
        tracer.sync();
        let lines = lines(&path);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["event"], "header");
        assert_eq!(lines[0]["version"], FORMAT_VERSION);
        assert_eq!(lines[0]["level"], "packets");
        assert_eq!(lines[0]["device"]["name"], "belfry7");
        assert_eq!(lines[0]["device"]["doorbell_model"], "dedicated");
        assert!(lines[0]["clock"]["monotonic_ns"].as_u64().unwrap() > 0);
        assert_eq!(lines[1]["event"], "doorbell");
        assert_eq!(lines[1]["index"], 3);
        assert_eq!(lines[1]["dev"], "belfry7");
        assert_eq!(lines[2]["source"], "register");
        assert!(lines[2]["t_ns"].as_u64() >= lines[1]["t_ns"].as_u64());
    }

    #[test]
    fn the_file_is_in_time_order_whichever_thread_emits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let tracer = &tracer;
                s.spawn(move || {
                    for i in 0..2000 {
                        tracer.emit(Event::Doorbell { index: t, value: i });
                    }
                });
            }
        });
        drop(tracer);
        let times: Vec<u64> = lines(&path).iter().map(|l| l["t_ns"].as_u64().unwrap()).collect();
        assert_eq!(times.len(), 8001);
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "out of order");
    }

    #[test]
    fn the_level_keeps_out_events_above_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let settings = TraceSettings { level: TraceLevel::Control, ..TraceSettings::default() };
        let tracer = Tracer::with_file(&config(), &path, settings).unwrap();
        assert!(!tracer.wants(TraceLevel::Packets));
        tracer.emit(Event::Packet { queue: 1, engine: 0, opcode: "NOP", va: 0x1000, bytes: String::new() });
        tracer.emit(Event::Doorbell { index: 3, value: 9 });
        tracer.emit(Event::Fault { context: 1, queue: 1, reason: "BAD_PACKET", address: 0, walk: vec![] });
        tracer.sync();
        let kinds: Vec<_> = lines(&path).iter().map(|l| l["event"].as_str().unwrap().to_string()).collect();
        assert_eq!(kinds, ["header", "fault"]);
    }

    #[test]
    fn past_the_limit_events_are_counted_and_the_count_closes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let settings = TraceSettings { level: TraceLevel::Packets, limit_bytes: 300 };
        let tracer = Tracer::with_file(&config(), &path, settings).unwrap();
        for i in 0..10 {
            tracer.emit(Event::Doorbell { index: i, value: 1 });
        }
        tracer.emit(Event::Reset { source: "register" });
        drop(tracer);
        let lines = lines(&path);
        let kinds: Vec<_> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
        let kept = kinds.iter().filter(|k| **k == "doorbell").count();
        assert!((1..10).contains(&kept), "{kinds:?}");
        let body: usize = std::fs::read_to_string(&path).unwrap().lines().skip(1).take(kept).map(|l| l.len() + 1).sum();
        assert!(body <= 300);
        assert_eq!(kinds[kept + 1], "limit_reached");
        let last = lines.last().unwrap();
        assert_eq!(last["event"], "dropped");
        assert_eq!(last["records"], 11 - kept as u64);
        assert_eq!(last["by_event"]["doorbell"], 10 - kept as u64);
        assert_eq!(last["by_event"]["reset"], 1);
    }

    #[test]
    fn a_file_within_its_limit_has_no_dropped_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
        tracer.emit(Event::Clock { gpu_ns: 5 });
        drop(tracer);
        let kinds: Vec<_> = lines(&path).iter().map(|l| l["event"].as_str().unwrap().to_string()).collect();
        assert_eq!(kinds, ["header", "clock"]);
    }

    #[test]
    fn a_mailbox_block_is_recorded_whole_as_hex() {
        use vm_memory::GuestMemoryMmap;
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 16)]).unwrap();
        let args = mailbox::DoorbellArgs {
            header: mailbox::MailboxHeader {
                opcode: mailbox::Opcode::ConnectDoorbell as u32,
                length: 24,
                seq: 7,
                status: 1,
            },
            queue: 5,
            doorbell: 2,
        };
        let words = [args.header.opcode, args.header.length, 7, 1, 5, 2, 0xdead_beef];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        mem.write_slice(&bytes, GuestAddress(0x800)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
        mailbox_block(&tracer, &mem, 7, 0x800);
        mailbox_block(&tracer, &mem, 8, 1 << 20);
        drop(tracer);
        let lines = lines(&path);
        assert_eq!(lines.len(), 2, "an unreadable block is not recorded");
        assert_eq!(lines[1]["event"], "mailbox_block");
        assert_eq!(lines[1]["seq"], 7);
        let hex: String = bytes[..24].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(lines[1]["bytes"], hex);
    }

    #[test]
    fn every_event_kind_is_its_serialized_tag() {
        let events = [
            Event::Packet { queue: 1, engine: 0, opcode: "NOP", va: 0, bytes: String::new() },
            Event::CommandBuffer { phase: "end", queue: 1, engine: 0, ring_index: 3, va: None, size: None },
            Event::Schedule { engine: 0, queue: 1, why: "priority", others: vec![(2, "waiting")] },
            Event::DoorbellWake { rung: vec![] },
            Event::MailboxBlock { seq: 1, bytes: String::new() },
            Event::Clock { gpu_ns: 1 },
            Event::PowerState { state: 3 },
        ];
        for e in events {
            assert_eq!(serde_json::to_value(&e).unwrap()["event"], e.kind());
        }
    }
}

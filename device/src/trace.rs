//! Structured tracing of everything that crosses the device's boundary.
//!
//! Every vfio-user message, register access (decoded by name from the abi register map),
//! doorbell, mailbox command, DMA mapping and interrupt becomes an [`Event`]. Events go to the
//! `log` facade (target `belfry::trace`, level debug) and, with `--trace FILE`, to a JSON-lines
//! file written by a dedicated thread so that no device thread ever waits on file I/O.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Instant;

use serde::Serialize;

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
}

enum Sink {
    Line(String),
    Sync(Sender<()>),
}

/// The tracer of one device.
pub struct Tracer {
    device: String,
    start: Instant,
    file: Option<Mutex<Sender<Sink>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Serialize)]
struct Record<'a> {
    t_ns: u64,
    dev: &'a str,
    #[serde(flatten)]
    event: &'a Event,
}

impl Tracer {
    /// A tracer that only logs (no file).
    pub fn new(device: &str) -> Self {
        Tracer { device: device.to_string(), start: Instant::now(), file: None, writer: Mutex::new(None) }
    }

    /// A tracer that logs and writes JSON lines to `path` (created or truncated).
    pub fn with_file(device: &str, path: &Path) -> std::io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
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
            device: device.to_string(),
            start: Instant::now(),
            file: Some(Mutex::new(tx)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Whether events are consumed at all (skip building them otherwise).
    pub fn enabled(&self) -> bool {
        self.file.is_some() || log::log_enabled!(target: "belfry::trace", log::Level::Debug)
    }

    /// Records `event`.
    pub fn emit(&self, event: Event) {
        if !self.enabled() {
            return;
        }
        let t_ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let record = Record { t_ns, dev: &self.device, event: &event };
        let Ok(line) = serde_json::to_string(&record) else { return };
        log::debug!(target: "belfry::trace", "{line}");
        if let Some(tx) = &self.file {
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(Sink::Line(line));
            }
        }
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
}

impl Drop for Tracer {
    fn drop(&mut self) {
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

    #[test]
    fn events_are_written_as_tagged_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let tracer = Tracer::with_file("belfry7", &path).unwrap();
        tracer.emit(Event::Doorbell { index: 3, value: 9 });
        tracer.emit(Event::Reset { source: "register" });
        tracer.sync();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "doorbell");
        assert_eq!(lines[0]["index"], 3);
        assert_eq!(lines[0]["dev"], "belfry7");
        assert_eq!(lines[1]["source"], "register");
        assert!(lines[1]["t_ns"].as_u64() >= lines[0]["t_ns"].as_u64());
    }
}

//! The records of a device trace file (`device<I>.trace.jsonl`), as this tool reads them.
//!
//! One JSON object a line: `t_ns` (nanoseconds since the device's tracer started), `dev`
//! (device name), `event` (the kind) and the kind's fields. Format version 2 starts with a
//! `header` record; version 1 files have none. Every field added after version 1 has a default
//! and unknown kinds read as [`Event::Unknown`], so this reader takes every version up to its
//! own and skips what a later one adds (`docs/TRACE.md`).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The newest format version this tool knows.
pub const KNOWN_VERSION: u32 = 2;

/// One line of a trace file.
#[derive(Clone, Debug, Deserialize)]
pub struct Record {
    /// Nanoseconds since the device's tracer started.
    pub t_ns: u64,
    /// Device name.
    #[serde(default)]
    pub dev: String,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// The header record (format version 2 on).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Header {
    /// Format version.
    #[serde(default)]
    pub version: u32,
    /// What wrote the file.
    #[serde(default)]
    pub producer: String,
    /// `[major, minor]` of the abi the device implements.
    #[serde(default)]
    pub abi_version: [u32; 2],
    /// `control`, `commands` or `packets`.
    #[serde(default)]
    pub level: String,
    /// Size limit of the file in bytes (0: none).
    #[serde(default)]
    pub limit_bytes: u64,
    /// Host clocks at `t_ns` = 0.
    #[serde(default)]
    pub clock: HeaderClock,
    /// The device configuration (kept as JSON: shown, not interpreted).
    #[serde(default)]
    pub device: serde_json::Value,
}

/// Host clocks at a trace's time zero.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct HeaderClock {
    /// `CLOCK_MONOTONIC`, nanoseconds.
    #[serde(default)]
    pub monotonic_ns: u64,
    /// Unix time, nanoseconds.
    #[serde(default)]
    pub unix_ns: u64,
}

/// One level of an MMU fault's page walk.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub struct WalkStep {
    /// Table level (3 is the root, 0 the leaf).
    pub level: u32,
    /// Guest physical address of the entry.
    pub at: u64,
    /// Its value (`None`: the table was not in guest memory).
    pub entry: Option<u64>,
}

/// A traced event. Field meanings are those of the device's `trace::Event`.
#[allow(missing_docs)]
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Header(Header),
    Clock {
        gpu_ns: u64,
    },
    LimitReached {
        #[serde(default)]
        limit_bytes: u64,
    },
    Dropped {
        /// `limit` (the size limit), `writer_behind` (the writer's queue was full); empty in
        /// files of devices before the reason was written (the limit).
        #[serde(default)]
        reason: String,
        #[serde(default)]
        records: u64,
        #[serde(default)]
        first_t_ns: u64,
        #[serde(default)]
        by_event: BTreeMap<String, u64>,
    },
    Connection {
        state: String,
    },
    Message {
        id: u16,
        command: String,
        #[serde(default)]
        size: u32,
        #[serde(default)]
        fds: usize,
        #[serde(default)]
        errno: Option<i32>,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        posted: bool,
    },
    RegRead {
        region: String,
        offset: u64,
        #[serde(default)]
        size: usize,
        #[serde(default)]
        name: Option<String>,
        value: u64,
    },
    RegWrite {
        region: String,
        offset: u64,
        #[serde(default)]
        size: usize,
        #[serde(default)]
        name: Option<String>,
        value: u64,
        #[serde(default)]
        fields: Vec<String>,
    },
    Doorbell {
        index: u32,
        value: u64,
    },
    DoorbellWake {
        rung: Vec<(u32, u64)>,
    },
    Mailbox {
        phase: String,
        #[serde(default)]
        opcode: Option<String>,
        seq: u32,
        #[serde(default)]
        address: u64,
        #[serde(default)]
        status: Option<String>,
        #[serde(default)]
        detail: Option<String>,
    },
    MailboxBlock {
        seq: u32,
        bytes: String,
    },
    Interrupt {
        vector: u16,
        cause: u32,
        delivery: String,
    },
    Dma {
        op: String,
        address: u64,
        size: u64,
    },
    SetIrqs {
        index: String,
        start: u32,
        count: u32,
        #[serde(default)]
        action: String,
    },
    Reset {
        source: String,
    },
    Packet {
        queue: u32,
        engine: u32,
        opcode: String,
        va: u64,
        /// The packet's bytes, hex (from the device of this tool's version on).
        #[serde(default)]
        bytes: String,
    },
    CommandBuffer {
        phase: String,
        queue: u32,
        engine: u32,
        ring_index: u32,
        #[serde(default)]
        va: Option<u64>,
        #[serde(default)]
        size: Option<u32>,
    },
    Schedule {
        engine: u32,
        queue: u32,
        why: String,
        #[serde(default)]
        others: Vec<(u32, String)>,
    },
    FenceDecision {
        source: String,
        handle: u64,
        current: u64,
        monitored: u64,
        interrupt: bool,
        /// The queue whose signal it was (engine signals, newer devices).
        #[serde(default)]
        queue: Option<u32>,
        #[serde(default)]
        engine: Option<u32>,
    },
    FenceRegistered {
        handle: u64,
        kind: String,
        #[serde(default)]
        current: String,
        #[serde(default)]
        monitored: String,
    },
    LostSignals {
        context: u32,
        fences: u32,
    },
    FenceBackwards {
        handle: u64,
        from: u64,
        to: u64,
        queue: u32,
        engine: u32,
        count: u64,
    },
    Fault {
        context: u32,
        queue: u32,
        reason: String,
        address: u64,
        /// The page walk of an MMU fault, root level first (newer devices).
        #[serde(default)]
        walk: Vec<WalkStep>,
    },
    QueueState {
        queue: u32,
        state: String,
        #[serde(default)]
        detail: Option<String>,
    },
    EngineState {
        engine: u32,
        state: String,
    },
    Record {
        kind: u32,
        engine: u32,
        queue: u32,
        context: u32,
        fence: u64,
        value: u64,
        address: u64,
        detail: u32,
    },
    PowerState {
        state: u8,
    },
    /// A kind this version of the tool does not know (a later format's).
    #[serde(other)]
    Unknown,
}

impl Event {
    /// The `event` tag (for filters and counts).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Header(_) => "header",
            Event::Clock { .. } => "clock",
            Event::LimitReached { .. } => "limit_reached",
            Event::Dropped { .. } => "dropped",
            Event::Connection { .. } => "connection",
            Event::Message { .. } => "message",
            Event::RegRead { .. } => "reg_read",
            Event::RegWrite { .. } => "reg_write",
            Event::Doorbell { .. } => "doorbell",
            Event::DoorbellWake { .. } => "doorbell_wake",
            Event::Mailbox { .. } => "mailbox",
            Event::MailboxBlock { .. } => "mailbox_block",
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
            Event::Unknown => "unknown",
        }
    }
}

/// Every kind a trace record can have (for `--kind` and its help).
pub const KINDS: &[&str] = &[
    "header",
    "clock",
    "limit_reached",
    "dropped",
    "connection",
    "message",
    "reg_read",
    "reg_write",
    "doorbell",
    "doorbell_wake",
    "mailbox",
    "mailbox_block",
    "interrupt",
    "dma",
    "set_irqs",
    "reset",
    "packet",
    "command_buffer",
    "schedule",
    "fence_decision",
    "fence_registered",
    "lost_signals",
    "fence_backwards",
    "fault",
    "queue_state",
    "engine_state",
    "record",
    "power_state",
];

/// The largest time (ns) a record may carry: `t_ns`, a `clock` record's `gpu_ns` and the
/// header's `CLOCK_MONOTONIC` (about 36 years). Bounded so that the run-time arithmetic of
/// every reader (offsets between clocks, sums of a few times) stays far inside `i64`.
pub const MAX_TIME_NS: u64 = 1 << 60;

/// `ns` as a signed number (saturated: the readers bound times far below, see
/// [`MAX_TIME_NS`]).
pub fn signed(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

/// The largest device index a trace's file name may give (the Perfetto track ids hold 16 bits
/// of it).
pub const MAX_DEVICE_INDEX: usize = u16::MAX as usize;

/// Parses one line: the record, or why the line is not one (not JSON, a field of the wrong
/// type, a time over [`MAX_TIME_NS`]).
pub fn parse_line(line: &str) -> Result<Record, String> {
    let record: Record = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let time = |name: &str, ns: u64| {
        if ns > MAX_TIME_NS {
            Err(format!("{name} {ns} is over the largest time a trace holds ({MAX_TIME_NS} ns)"))
        } else {
            Ok(())
        }
    };
    time("t_ns", record.t_ns)?;
    match &record.event {
        Event::Clock { gpu_ns } => time("gpu_ns", *gpu_ns)?,
        Event::Header(h) => time("clock.monotonic_ns", h.clock.monotonic_ns)?,
        _ => {}
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_lines_and_unknown_kinds_parse() {
        let r = parse_line(r#"{"t_ns":5,"dev":"belfry0","event":"doorbell","index":2,"value":7}"#).unwrap();
        assert!(matches!(r.event, Event::Doorbell { index: 2, value: 7 }));
        let r = parse_line(r#"{"t_ns":6,"dev":"belfry0","event":"from_the_future","x":1}"#).unwrap();
        assert!(matches!(r.event, Event::Unknown));
        let r = parse_line(r#"{"t_ns":0,"dev":"b","event":"header","version":2,"clock":{"monotonic_ns":9}}"#).unwrap();
        let Event::Header(h) = r.event else { panic!("not a header") };
        assert_eq!((h.version, h.clock.monotonic_ns), (2, 9));
        assert!(parse_line(r#"{"t_ns":6,"dev":"belfry0","event":"doorb"#).is_err());
    }

    #[test]
    fn records_without_the_newer_fields_read_with_their_defaults() {
        let r = parse_line(r#"{"t_ns":5,"event":"packet","queue":1,"engine":0,"opcode":"NOP","va":64}"#).unwrap();
        assert!(matches!(r.event, Event::Packet { ref bytes, .. } if bytes.is_empty()));
        let line = r#"{"t_ns":5,"event":"fence_decision","source":"signal","handle":1,"current":2,"monitored":1,"interrupt":true}"#;
        assert!(matches!(parse_line(line).unwrap().event, Event::FenceDecision { queue: None, .. }));
        let line = r#"{"t_ns":5,"event":"fault","context":1,"queue":2,"reason":"MMU_NOT_PRESENT","address":4096,
            "walk":[{"level":3,"at":4096,"entry":8193},{"level":2,"at":8192,"entry":0}]}"#;
        let Event::Fault { walk, .. } = parse_line(&line.replace('\n', "")).unwrap().event else { panic!() };
        assert_eq!(walk[1], WalkStep { level: 2, at: 8192, entry: Some(0) });
        let line = r#"{"t_ns":5,"event":"schedule","engine":0,"queue":2,"why":"priority","others":[[1,"waiting"]]}"#;
        let Event::Schedule { others, .. } = parse_line(line).unwrap().event else { panic!() };
        assert_eq!(others, [(1, "waiting".to_string())]);
    }

    #[test]
    fn times_past_the_bound_and_fields_of_the_wrong_type_are_refused_with_a_reason() {
        let huge = parse_line(r#"{"t_ns":18446744073709551615,"event":"reset","source":"x"}"#).unwrap_err();
        assert!(huge.contains("t_ns 18446744073709551615 is over"), "{huge}");
        let clock = parse_line(r#"{"t_ns":1,"event":"clock","gpu_ns":9223372036854775808}"#).unwrap_err();
        assert!(clock.contains("gpu_ns"), "{clock}");
        let header = r#"{"t_ns":0,"event":"header","clock":{"monotonic_ns":18446744073709551615}}"#;
        assert!(parse_line(header).unwrap_err().contains("monotonic_ns"));
        let wrong = parse_line(r#"{"t_ns":"5","event":"doorbell","index":1,"value":2}"#).unwrap_err();
        assert!(wrong.contains("invalid type"), "{wrong}");
        let negative = parse_line(r#"{"t_ns":-1,"event":"doorbell","index":1,"value":2}"#).unwrap_err();
        assert!(negative.contains("invalid value"), "{negative}");
        assert!(parse_line(&format!(r#"{{"t_ns":{MAX_TIME_NS},"event":"reset","source":"x"}}"#)).is_ok());
    }

    #[test]
    fn every_kind_is_listed() {
        let r = parse_line(r#"{"t_ns":1,"event":"mailbox","phase":"submit","seq":3}"#).unwrap();
        assert!(KINDS.contains(&r.event.kind()));
        assert_eq!(r.dev, "");
    }
}

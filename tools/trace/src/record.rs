//! The records of a device trace file (`device<I>.trace.jsonl.gz`, or plain), as this tool
//! reads them: the schema's own types (`belfry_trace_schema`, which the device writes with), and
//! the bounds this tool puts on what it reads (a trace is untrusted input).
//!
//! One JSON object a line: `t_ns` (nanoseconds since the device's tracer started), `dev`
//! (device name), `event` (the kind) and the kind's fields. Format version 2 starts with a
//! `header` record; version 1 files have none. Every field added after version 1 has a default
//! and unknown kinds read as [`Event::Unknown`], so this reader takes every version up to its
//! own and skips what a later one adds (`docs/TRACE.md`).

pub use belfry_trace_schema::words::{
    BufferPhase, ConnectionState, Delivery, DmaOp, FenceSource, MailboxPhase, Passed, ResetSource, ScheduleWhy,
};
pub use belfry_trace_schema::{Event, Header, HeaderClock, Record, WalkStep, KINDS};

/// The newest format version this tool knows.
pub const KNOWN_VERSION: u32 = belfry_trace_schema::FORMAT_VERSION;

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
        assert_eq!(others, [(1, Passed::Waiting)]);
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

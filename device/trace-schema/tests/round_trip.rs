//! Every kind of event written and read back unchanged, as JSON lines and through a gzip trace
//! file; a later format's kinds and words read as unknown; recorded files of earlier devices
//! read without loss.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::Path;

use belfry_trace_schema::examples::every_kind;
use belfry_trace_schema::file::{self, Compression};
use belfry_trace_schema::words::Delivery;
use belfry_trace_schema::{Event, Record, KINDS};

fn records() -> Vec<Record> {
    every_kind()
        .into_iter()
        .enumerate()
        .map(|(i, event)| Record { t_ns: i as u64 * 10, dev: "belfry0".into(), event })
        .collect()
}

#[test]
fn the_examples_are_one_of_every_kind_tagged_as_their_kind() {
    let kinds: Vec<&str> = every_kind().iter().map(Event::kind).collect();
    assert_eq!(kinds, KINDS, "one example per kind, in KINDS order");
    for record in records() {
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["event"], record.event.kind());
        assert_eq!(json["t_ns"], record.t_ns, "time first, as the device writes it");
    }
}

#[test]
fn every_kind_reads_back_as_written() {
    for record in records() {
        let line = serde_json::to_string(&record).unwrap();
        let back: Record = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(back, record, "{line}");
    }
}

#[test]
fn every_kind_reads_back_from_a_gzip_trace_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file::device_file_name(0, Compression::Gzip));
    let mut out = file::Writer::create(&path, Compression::Gzip).unwrap();
    for record in records() {
        writeln!(out, "{}", serde_json::to_string(&record).unwrap()).unwrap();
    }
    out.finish().unwrap();
    let back: Vec<Record> =
        file::open(&path).unwrap().lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    assert_eq!(back, records());
}

#[test]
fn a_later_formats_kinds_and_words_read_as_unknown() {
    let r: Record = serde_json::from_str(r#"{"t_ns":6,"dev":"b","event":"from_the_future","x":1}"#).unwrap();
    assert_eq!(r.event, Event::Unknown);
    let r: Record =
        serde_json::from_str(r#"{"t_ns":6,"event":"interrupt","vector":1,"cause":2,"delivery":"teleported"}"#).unwrap();
    assert_eq!(r.event, Event::Interrupt { vector: 1, cause: 2, delivery: Delivery::Other });
    assert_eq!(r.dev, "", "dev has a default");
}

/// The recorded traces of `belfry-trace`'s fixtures: earlier devices' version-2 files, one from
/// before the scheduler's picks, buffer boundaries and packet bytes were written.
fn recorded(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/trace/tests/fixtures")
        .join(name)
        .join("device0.trace.jsonl")
}

#[test]
fn recorded_traces_of_earlier_devices_read_whole() {
    for name in ["run", "run-boundaries"] {
        let path = recorded(name);
        assert!(!file::is_gzip(&path).unwrap(), "the plain form");
        let mut kinds = BTreeSet::new();
        for (n, line) in file::open(&path).unwrap().lines().enumerate() {
            let line = line.unwrap();
            let record: Record = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{name}:{}: {e}", n + 1));
            assert_ne!(record.event, Event::Unknown, "{name}:{}: every kind of an earlier file is known", n + 1);
            kinds.insert(record.event.kind());
            // Nothing is lost: written again, it says what it said.
            let original: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(serde_json::to_value(&record).unwrap(), original, "{name}:{}", n + 1);
        }
        assert!(kinds.contains("header") && kinds.contains("mailbox_block") && kinds.contains("packet"), "{kinds:?}");
    }
}

#[test]
fn a_version_1_file_reads_without_its_later_fields() {
    let lines = [
        r#"{"t_ns":5,"dev":"belfry0","event":"doorbell","index":2,"value":7}"#,
        r#"{"t_ns":6,"event":"packet","queue":1,"engine":0,"opcode":"NOP","va":64}"#,
        r#"{"t_ns":7,"event":"fence_decision","source":"signal","handle":1,"current":2,"monitored":1,"interrupt":true}"#,
        r#"{"t_ns":8,"event":"mailbox","phase":"submit","seq":3}"#,
    ];
    for line in lines {
        let r: Record = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_ne!(r.event, Event::Unknown);
    }
}

//! The input log read back as written, and untrusted logs (cut short, garbage, altered) refused
//! with the record number and a reason, never a panic.

use std::io::{Cursor, Write};
use std::sync::{Arc, Mutex};

use belfry_trace_schema::file::Compression;
use belfry_trace_schema::input_log::{
    self, Entry, FdIdentity, FdKind, LogError, LogReader, LogWriter, Problem, KIND_NAMES, MAX_RECORD_BYTES,
};

/// A `Write` whose bytes the test keeps.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const CONFIG: &str = r#"{"name":"belfry0"}"#;

/// One entry of every kind after the configuration.
fn every_kind() -> Vec<Entry> {
    vec![
        Entry::Message {
            connection: 1,
            fds: vec![
                FdIdentity { kind: FdKind::File, dev: 5, ino: 77 },
                FdIdentity { kind: FdKind::Anonymous, dev: 14, ino: 1 },
                FdIdentity { kind: FdKind::Other, dev: u64::MAX, ino: 0 },
            ],
            bytes: vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        },
        Entry::Reply { bytes: vec![0xff; 24] },
        Entry::GuestRead { thread: 2, address: 0x1_0000_1000, bytes: vec![0xaa; 64] },
        Entry::GuestWrite { thread: 3, address: 0x2000, bytes: vec![0x55; 8] },
        Entry::VramRead { thread: 1, offset: 0x40_0000, bytes: vec![9; 16] },
        Entry::Doorbell { index: 7, value: u64::MAX - 1 },
        Entry::InterruptFd { vector: 2, result: -11 },
        Entry::Clock { thread: 0, ns: 123_456_789 },
        Entry::Ticket { thread: 4 },
        Entry::Thread { thread: 1, name: "belfry0-cmp".into() },
        Entry::Wake { thread: 1, tokens: vec![2, 3] },
        Entry::Rung { thread: 1, doorbells: vec![(3, 1), (69, u64::MAX)] },
        Entry::Interrupt { thread: 3, vector: 1, result: 0 },
        Entry::Departure { connection: 2 },
    ]
}

fn written(entries: &[Entry]) -> Vec<u8> {
    let out = Shared::default();
    let mut w = LogWriter::new(Box::new(out.clone()), CONFIG).unwrap();
    for e in entries {
        w.append(e).unwrap();
    }
    w.flush().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    bytes
}

fn read_all(bytes: &[u8]) -> Result<Vec<(u64, Entry)>, LogError> {
    LogReader::new(Cursor::new(bytes.to_vec()))?.collect()
}

#[test]
fn every_record_kind_reads_back_as_written_with_its_sequence_number() {
    let entries = every_kind();
    let kinds: Vec<u8> = entries.iter().map(Entry::kind).collect();
    assert_eq!(kinds.len() + 1, KIND_NAMES.len(), "one example of every kind but the configuration");
    let back = read_all(&written(&entries)).unwrap();
    assert_eq!(back[0], (0, Entry::Config { json: CONFIG.into() }));
    for (i, (sequence, entry)) in back[1..].iter().enumerate() {
        assert_eq!(*sequence, i as u64 + 1);
        assert_eq!(entry, &entries[i]);
        assert_eq!(entry.kind_name(), KIND_NAMES[usize::from(entry.kind())].1);
    }
}

#[test]
fn a_gzip_log_file_and_a_plain_one_both_read_back() {
    let dir = tempfile::tempdir().unwrap();
    for compression in [Compression::Gzip, Compression::None] {
        let path = dir.path().join(input_log::device_file_name(0, compression));
        let mut w = LogWriter::create(&path, compression, CONFIG).unwrap();
        for e in every_kind() {
            w.append(&e).unwrap();
        }
        assert_eq!(w.records(), 15);
        drop(w);
        let back: Vec<_> = input_log::open(&path).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(back.len(), 15, "{compression:?}");
        assert_eq!(back[9].1, Entry::Ticket { thread: 4 });
        assert_eq!(back[12].1, Entry::Rung { thread: 1, doorbells: vec![(3, 1), (69, u64::MAX)] });
    }
}

#[test]
fn a_log_cut_at_any_byte_reads_its_whole_records_then_reports_the_torn_one() {
    let bytes = written(&every_kind());
    for cut in 0..bytes.len() {
        let reader = LogReader::new(Cursor::new(bytes[..cut].to_vec()));
        let Ok(reader) = reader else {
            assert!(cut < 10, "only a cut inside the file header fails to open (cut {cut})");
            continue;
        };
        let results: Vec<_> = reader.collect();
        let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        match errors.as_slice() {
            [] => {}
            [e] => {
                assert_eq!(e.problem, Problem::Truncated, "cut {cut}: {e}");
                assert_eq!(e.record, results.len() as u64 - 1, "the error names the torn record");
                assert!(e.to_string().contains("torn or truncated"), "{e}");
            }
            more => panic!("cut {cut}: reading goes on after an error: {more:?}"),
        }
    }
}

#[test]
fn garbage_is_refused_with_a_reason_and_the_record_number() {
    assert_eq!(read_all(b"").unwrap_err().problem, Problem::Truncated);
    assert_eq!(read_all(b"{\"kind\":\"header\"}\n").unwrap_err().problem, Problem::NotALog);
    let mut bytes = written(&every_kind());
    bytes[8] = 9;
    let e = read_all(&bytes).unwrap_err();
    assert_eq!(e.problem, Problem::Version(9));
    assert!(e.to_string().contains("format version 9"), "{e}");

    // The second record (sequence 1) starts after the header and the configuration record.
    let second = 10 + 4 + 9 + CONFIG.len();
    let corrupt = |at: usize, value: &[u8]| {
        let mut b = written(&every_kind());
        b[at..at + value.len()].copy_from_slice(value);
        read_all(&b).unwrap_err()
    };
    let e = corrupt(second, &(MAX_RECORD_BYTES + 1).to_le_bytes());
    assert_eq!((e.record, e.offset, e.problem.clone()), (1, second as u64, Problem::Length(MAX_RECORD_BYTES + 1)));
    assert_eq!(corrupt(second, &3u32.to_le_bytes()).problem, Problem::Length(3));
    let e = corrupt(second + 4, &7u64.to_le_bytes());
    assert_eq!((e.record, e.problem), (1, Problem::Sequence { expected: 1, found: 7 }));
    let e = corrupt(second + 12, &[200]);
    assert_eq!((e.record, e.problem.clone()), (1, Problem::UnknownKind(200)));
    assert!(e.to_string().starts_with("input log record 1 (byte "), "{e}");
    let e = corrupt(second + 13 + 4, &[17]);
    assert_eq!((e.record, e.problem), (1, Problem::Malformed("more fds than a message carries")));
    let e = corrupt(14 + 8, &[3]);
    assert_eq!((e.record, e.problem), (0, Problem::NoConfig));
}

#[test]
fn a_version_1_log_still_reads_and_the_replay_records_bound_their_lengths() {
    let mut bytes = written(&every_kind()[..9]);
    bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
    assert_eq!(read_all(&bytes).unwrap().len(), 10, "a version 1 log (no thread, wake or rung records)");

    let one = |entry: Entry, at_end: &[u8]| {
        let mut b = written(&[entry]);
        let second = 10 + 4 + 9 + CONFIG.len();
        b.extend_from_slice(at_end);
        let length = u32::from_le_bytes(b[second..second + 4].try_into().unwrap()) + at_end.len() as u32;
        b[second..second + 4].copy_from_slice(&length.to_le_bytes());
        read_all(&b).unwrap_err()
    };
    let e = one(Entry::Wake { thread: 1, tokens: vec![0; 8] }, &[0]);
    assert_eq!((e.record, e.problem), (1, Problem::Malformed("more tokens than a wake-up reports")));
    let e = one(Entry::Rung { thread: 1, doorbells: vec![(1, 1)] }, &[0; 5]);
    assert_eq!((e.record, e.problem), (1, Problem::Malformed("a rung doorbell is not 12 bytes")));
}

#[test]
fn random_bytes_after_a_valid_header_never_panic() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let mut bytes = written(&[]);
        for _ in 0..(seed % 200) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            bytes.push(seed as u8);
        }
        if let Ok(reader) = LogReader::new(Cursor::new(bytes)) {
            for r in reader {
                if let Err(e) = r {
                    assert!(!e.to_string().is_empty());
                }
            }
        }
    }
}

#[test]
fn a_message_with_more_fds_than_the_protocol_allows_is_not_written() {
    let mut w = LogWriter::new(Box::new(Shared::default()), CONFIG).unwrap();
    let fd = FdIdentity { kind: FdKind::File, dev: 0, ino: 0 };
    assert!(w.append(&Entry::Message { connection: 0, fds: vec![fd; 17], bytes: vec![] }).is_err());
    assert_eq!(w.records(), 1);
}

//! `belfry-trace inputs` on a recorded run's input log: the summary of a whole log, the records
//! up to `--until`, and a torn or altered log reported with the record number, exit status 1.

use std::path::Path;
use std::process::Command;

use belfry_trace_schema::file::Compression;
use belfry_trace_schema::input_log::{self, Entry, LogWriter};

fn inputs(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_belfry-trace")).arg("inputs").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// A run directory whose device 1 recorded a message, its reply, a guest read and a ticket.
fn run_dir(dir: &Path, compression: Compression) -> std::path::PathBuf {
    let path = dir.join(input_log::device_file_name(1, compression));
    let mut w = LogWriter::create(&path, compression, r#"{"name":"belfry1"}"#).unwrap();
    w.append(&Entry::Message {
        connection: 0,
        fds: vec![],
        bytes: vec![1, 0, 1, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    })
    .unwrap();
    w.append(&Entry::Reply { bytes: vec![1, 0, 1, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0] }).unwrap();
    w.append(&Entry::GuestRead { thread: 2, address: 0x1000, bytes: vec![0xab; 32] }).unwrap();
    w.append(&Entry::Ticket { thread: 2 }).unwrap();
    w.finish().unwrap();
    path
}

#[test]
fn a_run_directory_s_log_is_summarised_by_kind_and_listed_up_to_a_record() {
    let dir = tempfile::tempdir().unwrap();
    run_dir(dir.path(), Compression::Gzip);
    let (ok, out, err) = inputs(&[dir.path().to_str().unwrap(), "--device", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains(": 5 records,"), "{out}");
    assert!(out.contains(r#"device: {"name":"belfry1"}"#), "{out}");
    assert!(out.contains("guest_read            1 records           32 payload bytes"), "{out}");
    let (ok, out, _) = inputs(&[dir.path().to_str().unwrap(), "--device", "1", "--until", "2", "--list"]);
    assert!(ok);
    assert!(out.contains("         1 message      connection 0 id 1 command 1 size 16"), "{out}");
    assert!(out.contains(": 3 records,") && !out.contains("guest_read"), "{out}");
    let (ok, _, err) = inputs(&[dir.path().to_str().unwrap(), "--device", "0"]);
    assert!(!ok && err.contains("no input log of device 0"), "{err}");
}

#[test]
fn a_torn_or_altered_log_is_reported_with_the_record_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = run_dir(dir.path(), Compression::None);
    let whole = std::fs::read(&path).unwrap();

    std::fs::write(&path, &whole[..whole.len() - 3]).unwrap();
    let (ok, out, err) = inputs(&[path.to_str().unwrap()]);
    assert!(!ok, "{out}");
    assert!(err.contains("input log record 4 (byte ") && err.contains("torn or truncated"), "{err}");
    assert!(out.contains(": 4 records,"), "the whole records before it are summarised: {out}");

    // The kind byte of record 3 (the guest read): header, config, message and reply before it.
    let mut altered = whole.clone();
    let record3 = 10 + (4 + 9 + 18) + (4 + 9 + 4 + 1 + 16) + (4 + 9 + 16);
    assert_eq!(altered[record3 + 12], 3, "the guest read's kind");
    altered[record3 + 12] = 0x7f;
    std::fs::write(&path, &altered).unwrap();
    let (ok, _, err) = inputs(&[path.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains(&format!("input log record 3 (byte {record3}): unknown record kind 127")), "{err}");

    std::fs::write(&path, b"{\"kind\":\"header\"}\n").unwrap();
    let (ok, _, err) = inputs(&[path.to_str().unwrap()]);
    assert!(!ok && err.contains("not a Belfry input log"), "{err}");
}

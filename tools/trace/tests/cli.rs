//! `belfry-trace show` and `stats` on the fixture run directory, as a user runs them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/run")
}

fn tool(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_belfry-trace")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn show_filters_by_queue_and_kind_and_decodes() {
    let dir = fixture();
    let out = tool(&["show", dir.to_str().unwrap(), "--queue", "2", "--kind", "doorbell,packet,fence_decision,guest"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].ends_with("doorbell         #1 value=1 → queue 2"), "{out}");
    assert!(lines[1].contains("queue 2 ctx 1 on 1 (copy) FENCE_SIGNAL @0x10c000"), "{out}");
    assert!(lines.iter().any(|l| l.contains("guest            queue 2 signal-executed fence 0x77 value 3")), "{out}");
    assert!(lines.iter().any(|l| l.contains("CurrentValue 3 > MonitoredValue 0 → interrupt")), "{out}");
    assert!(!out.contains('\x1b'), "no colour off a terminal");
}

#[test]
fn show_time_window_fence_and_colour() {
    let dir = fixture();
    let dir = dir.to_str().unwrap();
    let out = tool(&["show", dir, "--fence", "0x77", "--from", "0.0224", "--to", "0.0226", "--colour", "always"]);
    assert!(out.contains("\x1b[35m"), "fence decisions in colour: {out}");
    assert!(out.contains("NativeFenceSignaled"), "{out}");
    assert!(!out.contains("REGISTER_FENCE"), "outside the window: {out}");
    let mailbox = tool(&["show", dir, "--kind", "mailbox_block", "--fence", "0x77"]);
    assert!(mailbox.contains("REGISTER_FENCE seq=5 handle=0x77 kind=IntraGpu current=vram:0x10000"), "{mailbox}");
}

#[test]
fn stats_report_latency_packets_interrupts_mailbox_and_fences() {
    let out = tool(&["stats", fixture().to_str().unwrap()]);
    let row = |prefix: &str| {
        out.lines().find(|l| l.trim_start().starts_with(prefix)).unwrap_or_else(|| panic!("{prefix}: {out}"))
    };
    // queue 2: doorbell at 22.262 ms, FENCE_SIGNAL at 22.392 ms.
    assert!(row("2    1").contains("130.2"), "{out}");
    assert!(row("FENCE_SIGNAL").ends_with(" 1"), "{out}");
    assert!(row("NATIVE_FENCE").ends_with(" 1"), "{out}");
    assert!(row("REGISTER_FENCE").contains(" 2      1 "), "two, one failed: {out}");
    let fence = row("0x77");
    let cols: Vec<&str> = fence.split_whitespace().collect();
    assert_eq!(cols, ["0x77", "1", "0", "1", "1", "1", "1"], "{out}");
}

#[test]
fn a_version_1_trace_without_header_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = std::fs::read_to_string(fixture().join("device0.trace.jsonl")).unwrap();
    let v1: String = v2
        .lines()
        .filter(|l| !l.contains(r#""event":"header""#) && !l.contains(r#""event":"clock""#))
        .filter(|l| !l.contains(r#""event":"mailbox_block""#))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.path().join("device0.trace.jsonl");
    std::fs::write(&path, v1).unwrap();
    let out = tool(&["stats", path.to_str().unwrap()]);
    assert!(out.contains("format v1"), "{out}");
    assert!(out.contains("none mapped to a queue: 2 doorbell write(s)"), "{out}");
    assert!(out.lines().any(|l| l.trim_start().starts_with("FENCE_SIGNAL")), "{out}");
    let shown = tool(&["show", path.to_str().unwrap(), "--kind", "doorbell"]);
    assert_eq!(shown.lines().count(), 2, "{shown}");
}

#[test]
fn follow_prints_records_appended_to_a_live_trace() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device0.trace.jsonl");
    std::fs::write(&path, "{\"t_ns\":1000,\"dev\":\"belfry0\",\"event\":\"reset\",\"source\":\"register\"}\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_belfry-trace"))
        .args(["show", "--follow", "--kind", "fault,reset"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let next = || rx.recv_timeout(std::time::Duration::from_secs(10)).expect("a followed line");
    assert!(next().contains("reset            by register"));
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    // A torn line first: nothing is printed until it is whole.
    write!(f, "{{\"t_ns\":2000,\"dev\":\"belfry0\",\"event\":\"fault\",").unwrap();
    f.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert!(rx.try_recv().is_err(), "a torn line was printed");
    writeln!(f, "\"context\":3,\"queue\":4,\"reason\":\"BAD_PACKET\",\"address\":16}}").unwrap();
    let line = next();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(line.contains("context 3 faulted on queue 4: BAD_PACKET at 0x10"), "{line}");
}

/// A run whose device traced the scheduler's picks, command-buffer boundaries and packet bytes
/// (the same intra-GPU fence test, by a later device).
fn boundaries() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/run-boundaries")
}

#[test]
fn show_decodes_packet_operands_picks_and_buffers() {
    let dir = boundaries();
    let out = tool(&["show", dir.to_str().unwrap(), "--queue", "1", "--kind", "schedule,command_buffer,packet"]);
    assert!(out.contains("engine 0 (compute) picks queue 1: the only ready queue"), "{out}");
    assert!(out.contains("begin ring[0] buffer @0x10a000 48 bytes"), "{out}");
    assert!(
        out.contains("FENCE_WAIT @0x10a000 log_entry=none fence_va=0x90000000 value=3 log_handle=0xbeef0003"),
        "{out}"
    );
    assert!(out.contains("WRITE_DATA32 @0x10a020 value=9 va=0x100000"), "{out}");
    assert!(out.lines().last().unwrap().contains("end ring[0]"), "{out}");
}

#[test]
fn stats_time_submissions_by_their_buffers() {
    let out = tool(&["stats", boundaries().to_str().unwrap()]);
    assert!(out.contains("doorbell or KICK_QUEUE → buffer fetched → buffer ended"), "{out}");
    // Queue 1's buffer parked on its FENCE_WAIT until queue 2 signaled: it completes at its
    // end (0.044517), not at the first packet.
    assert!(out.contains("queue 1 ctx 1: doorbell 0=1 at 0.042128, picked up 0.042378, completed 0.044517"), "{out}");
    assert!(out.contains("0 (compute)  only_ready                       3"), "{out}");
    let old = tool(&["stats", fixture().to_str().unwrap()]);
    assert!(old.contains("inferred: no buffer boundaries in the trace"), "{old}");
}

#[test]
fn show_prints_guest_threads_waits_and_wakes() {
    let out = tool(&["show", boundaries().to_str().unwrap(), "--kind", "guest", "--fence", "0x77"]);
    assert!(out.contains("pid 800 tid 812: CPU wait on fence 0x77 ≥ 3\n"), "{out}");
    assert!(out.contains("pid 800 tid 812: CPU wait on fence 0x77 ≥ 3 woke: reached"), "{out}");
    assert!(out.contains("pid 800 tid 814: CPU wait on fence 0x77 ≥ 9 ended: ETIMEDOUT"), "{out}");
    let submit = tool(&["show", boundaries().to_str().unwrap(), "--kind", "guest", "--queue", "2"]);
    assert!(submit.contains("pid 800 tid 813: SUBMIT to queue 2: progress fence 0x5 → 1"), "{submit}");
    assert!(!submit.contains("tid 812"), "a wait names no queue: {submit}");
}

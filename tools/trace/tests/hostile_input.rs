//! Crafted and damaged inputs, as a user (or an attacker handing over a trace) gives them:
//! huge numbers, fields of the wrong type, torn and enormous lines, times out of order. Every
//! command reads them without panicking, skips what is not a record and names its line.

use std::path::Path;
use std::process::Command;

use belfry_trace::model::Model;
use belfry_trace::run::{DeviceTrace, Run};
use belfry_trace::show::{self, Filter, Style};
use belfry_trace::{perfetto, stats};

/// Runs the tool on `dir` with each command; returns the stderr of `show` (all must succeed).
fn every_command(dir: &Path) -> String {
    let mut show_err = String::new();
    for command in ["show", "stats", "perfetto"] {
        let mut args = vec![command.to_string(), dir.display().to_string()];
        if command == "perfetto" {
            args.extend(["-o".to_string(), dir.join("out.perfetto").display().to_string()]);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_belfry-trace")).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{command} failed: {stderr}");
        assert!(!stderr.contains("panicked"), "{command}: {stderr}");
        if command == "show" {
            show_err = stderr;
        }
    }
    show_err
}

fn header(monotonic_ns: &str) -> String {
    format!(r#"{{"t_ns":0,"dev":"b","event":"header","version":2,"clock":{{"monotonic_ns":{monotonic_ns}}}}}"#)
}

#[test]
fn huge_times_are_refused_by_line_not_added_up() {
    let dir = tempfile::tempdir().unwrap();
    let first = [
        header("18446744073709551615"),
        r#"{"t_ns":18446744073709551615,"dev":"b","event":"reset","source":"register"}"#.to_string(),
        r#"{"t_ns":5,"dev":"b","event":"clock","gpu_ns":18446744073709551615}"#.to_string(),
        r#"{"t_ns":7,"dev":"b","event":"set_irqs","index":"msix","start":4294967295,"count":4294967295}"#.to_string(),
        r#"{"t_ns":9,"dev":"b","event":"reset","source":"register"}"#.to_string(),
    ];
    std::fs::write(dir.path().join("device0.trace.jsonl"), first.join("\n") + "\n").unwrap();
    std::fs::write(dir.path().join("device1.trace.jsonl"), header("1000") + "\n").unwrap();
    let timeline = "\
1 4 signal-queued 0x10 5 0 9223372036854775808 0 0
2 4 signal-executed 0x10 5 0 0 0 9000
";
    std::fs::write(dir.path().join("timeline.txt"), timeline).unwrap();
    let err = every_command(dir.path());
    let trace = dir.path().join("device0.trace.jsonl").display().to_string();
    assert!(err.contains(&format!("{trace}: 3 line(s) were not trace records")), "{err}");
    assert!(err.contains(&format!("{trace}:1: clock.monotonic_ns 18446744073709551615 is over")), "{err}");
    assert!(err.contains(&format!("{trace}:2: t_ns 18446744073709551615 is over")), "{err}");
    assert!(err.contains(&format!("{trace}:3: gpu_ns 18446744073709551615 is over")), "{err}");
    assert!(err.contains("timeline.txt:1: cpu_ns 9223372036854775808 is over"), "{err}");
    let run = Run::load(&[dir.path().to_path_buf()], None).unwrap();
    let d = run.device(0).unwrap();
    assert_eq!(d.records.len(), 2, "the set_irqs and the last reset are read");
    assert_eq!((d.run_offset_ns, d.run_ns(9)), (0, 9), "no header: device 0 starts at the run's zero");
    let models: Vec<Model> = run.devices.iter().map(Model::build).collect();
    let lines = show::render(&run, &models, &Filter::default(), Style { colour: false });
    assert!(lines.iter().any(|l| l.contains("msix vectors 4294967295..8589934590")), "{lines:?}");
}

#[test]
fn wrong_types_and_torn_lines_are_named_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        r#"{"t_ns":"5","dev":"b","event":"doorbell","index":1,"value":2}"#,
        r#"{"t_ns":6,"dev":"b","ev"#,
        r#"{"t_ns":7,"dev":"b","event":"doorbell","index":-1,"value":2}"#,
        r#"{"t_ns":8,"dev":"b","event":"doorbell","index":1,"value":2}"#,
        "\u{fffd}\u{0}not json at all",
    ];
    std::fs::write(dir.path().join("device0.trace.jsonl"), lines.join("\n") + "\n").unwrap();
    std::fs::write(dir.path().join("timeline.txt"), "1 4 signal-queued 0x10 5\n1 x signal-queued 0 0 0 0 0 0\n")
        .unwrap();
    let err = every_command(dir.path());
    let trace = dir.path().join("device0.trace.jsonl").display().to_string();
    assert!(err.contains(&format!("{trace}: 4 line(s) were not trace records")), "{err}");
    assert!(err.contains(&format!("{trace}:1: invalid type: string \"5\", expected u64")), "{err}");
    assert!(err.contains(&format!("{trace}:2: EOF while parsing")), "{err}");
    assert!(err.contains(&format!("{trace}:3: invalid value: integer `-1`, expected u32")), "{err}");
    assert!(err.contains(&format!("{trace}:5: expected value")), "{err}");
    assert!(err.contains("timeline.txt:1: 5 field(s), an event has 9"), "{err}");
    assert!(err.contains("timeline.txt:2: queue \"x\" is not a number"), "{err}");
}

#[test]
fn an_enormous_line_is_read_past_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device0.trace.jsonl");
    let huge = format!(r#"{{"t_ns":1,"dev":"b","event":"reset","source":"{}"}}"#, "x".repeat(3 << 20));
    let good = r#"{"t_ns":2,"dev":"b","event":"reset","source":"register"}"#;
    std::fs::write(&path, format!("{good}\n{huge}\n{good}\n")).unwrap();
    let err = every_command(dir.path());
    let length = huge.len();
    assert!(
        err.contains(&format!("{}:2: a line of {length} bytes, over the 1048576-byte limit", path.display())),
        "{err}"
    );
    let d = DeviceTrace::read(&path, 0).unwrap();
    assert_eq!((d.records.len(), d.skipped.count, d.read_lines), (2, 1, 3));
}

#[test]
fn records_appended_out_of_time_order_do_not_make_negative_latencies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device0.trace.jsonl");
    let submit = r#"{"t_ns":100,"dev":"b","event":"mailbox","phase":"submit","seq":4,"address":4096}"#;
    std::fs::write(&path, format!("{submit}\n")).unwrap();
    let mut d = DeviceTrace::read(&path, 0).unwrap();
    // A followed file gains a completion stamped before the submit it completes.
    let complete =
        r#"{"t_ns":50,"dev":"b","event":"mailbox","phase":"complete","opcode":"KICK_QUEUE","seq":4,"status":"OK"}"#;
    std::fs::write(&path, format!("{submit}\n{complete}\n")).unwrap();
    assert_eq!(d.read_more().unwrap(), 1);
    let run = Run { devices: vec![d], ..Run::default() };
    let models: Vec<Model> = run.devices.iter().map(Model::build).collect();
    let lines = show::render(&run, &models, &Filter::default(), Style { colour: false });
    assert!(lines.iter().any(|l| l.ends_with("complete KICK_QUEUE seq=4 OK")), "no latency shown: {lines:?}");
    let report = stats::report(&run, &models);
    let row = report.lines().find(|l| l.trim_start().starts_with("KICK_QUEUE")).unwrap();
    assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["KICK_QUEUE", "1", "0", "-", "-", "-"], "{report}");
    assert!(!perfetto::encode(&perfetto::build(&run, &models)).is_empty());
}

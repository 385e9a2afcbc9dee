//! The Perfetto output of the fixture run (`tests/fixtures/run`: a device trace of the device's
//! intra-GPU fence test, doorbells to two queues, a fence signal that interrupts, and a module
//! timeline): decoded back with prost, and with the official Perfetto protos in Python.

use std::path::{Path, PathBuf};
use std::process::Command;

use belfry_trace::model::Model;
use belfry_trace::perfetto::{self, proto};
use belfry_trace::run::Run;
use prost::Message;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/run")
}

/// The same test traced by a later device: picks, buffer boundaries, packet bytes.
fn boundaries() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/run-boundaries")
}

fn trace() -> perfetto::Trace {
    trace_of(&fixture())
}

fn trace_of(dir: &Path) -> perfetto::Trace {
    let run = Run::load(&[dir.to_path_buf()], None).unwrap();
    let models: Vec<Model> = run.devices.iter().map(Model::build).collect();
    perfetto::build(&run, &models)
}

fn track_names(t: &perfetto::Trace) -> Vec<String> {
    t.packet.iter().filter_map(|p| p.track_descriptor.as_ref()).filter_map(|d| d.name.clone()).collect()
}

#[test]
fn the_encoding_round_trips_through_prost() {
    let t = trace();
    let bytes = perfetto::encode(&t);
    let back = perfetto::Trace::decode(bytes.as_slice()).unwrap();
    assert_eq!(back, t);
    let names = track_names(&back);
    for want in ["CMP mailbox", "doorbells", "interrupts", "engine 0 (compute)", "engine 1 (copy)"] {
        assert!(names.iter().any(|n| n == want), "no track {want}: {names:?}");
    }
    assert!(names.iter().any(|n| n.starts_with("queue 2 (context 1, engine 1")), "{names:?}");
    assert!(names.iter().any(|n| n == "fence 0x77 CurrentValue"), "{names:?}");
}

#[test]
fn a_submission_flows_from_doorbell_to_the_module() {
    let t = trace();
    let events: Vec<(&str, &proto::TrackEvent)> =
        t.packet.iter().filter_map(|p| p.track_event.as_ref()).map(|e| (e.name.as_deref().unwrap_or(""), e)).collect();
    let doorbell = events.iter().find(|(n, _)| *n == "doorbell 1 → queue 2").expect("doorbell instant").1;
    let [flow] = doorbell.flow_ids[..] else { panic!("one flow on the doorbell: {doorbell:?}") };
    let on_flow: Vec<&str> = events
        .iter()
        .filter(|(_, e)| e.flow_ids.contains(&flow) || e.terminating_flow_ids.contains(&flow))
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        on_flow,
        ["doorbell 1 → queue 2", "queue 2", "signal-executed 0x77=3", "signal 0x77=3 → interrupt", "NATIVE_FENCE"]
    );
    let slices = events.iter().filter(|(_, e)| e.r#type == Some(proto::EventType::SliceBegin as i32)).count();
    let ends = events.iter().filter(|(_, e)| e.r#type == Some(proto::EventType::SliceEnd as i32)).count();
    assert_eq!(slices, ends);
    assert!(events.iter().any(|(n, _)| *n == "CREATE_QUEUE"), "mailbox slices");
}

#[test]
fn buffers_are_slices_on_their_queue_and_picks_instants_on_the_scheduler() {
    let t = trace_of(&boundaries());
    let names = track_names(&t);
    assert!(names.iter().any(|n| n == "scheduler"), "{names:?}");
    let events: Vec<(&str, &proto::TrackEvent)> =
        t.packet.iter().filter_map(|p| p.track_event.as_ref()).map(|e| (e.name.as_deref().unwrap_or(""), e)).collect();
    let buffers = events.iter().filter(|(n, _)| n.starts_with("buffer ring[0] on engine")).count();
    assert_eq!(buffers, 2, "one slice per command buffer");
    let picks = events.iter().filter(|(n, _)| n.starts_with("engine 0 → queue 1 (only_ready)")).count();
    assert_eq!(picks, 3);
    assert!(!events.iter().any(|(n, _)| n.starts_with("run on engine")), "runs are on the engine tracks only");
    let doorbell = events.iter().find(|(n, _)| *n == "doorbell 1 → queue 2").expect("doorbell instant").1;
    let [flow] = doorbell.flow_ids[..] else { panic!("one flow on the doorbell: {doorbell:?}") };
    let on_flow: Vec<&str> = events.iter().filter(|(_, e)| e.flow_ids.contains(&flow)).map(|(n, _)| *n).collect();
    assert_eq!(
        on_flow,
        [
            "doorbell 1 → queue 2",
            "queue 2",
            "signal 0x77=3 → interrupt",
            "signal-executed 0x77=3",
            "NATIVE_FENCE",
            "woke: 0x77 reached 3"
        ],
        "the flow ends at the guest thread the interrupt woke"
    );
    for thread in ["pid 800 tid 812", "pid 800 tid 813", "pid 800 tid 814"] {
        assert!(names.iter().any(|n| n == thread), "a track per guest thread: {names:?}");
    }
    let waits = events.iter().filter(|(n, _)| n.starts_with("CPU wait 0x77")).count();
    assert_eq!(waits, 2, "each CPU wait is a slice on its thread");
    let timeout = events.iter().find(|(n, _)| n.starts_with("wait ended: errno 110")).expect("the timeout").1;
    assert!(timeout.flow_ids.is_empty(), "a wait that timed out was woken by nothing");
}

#[test]
fn gpu_work_is_in_perfettos_gpu_view_with_the_fence_signals_it_executed() {
    let t = trace();
    let first = &t.packet[0];
    assert_eq!(first.sequence_flags, Some(proto::SEQ_INCREMENTAL_STATE_CLEARED));
    let interned = first.interned_data.as_ref().expect("the first packet interns the GPU view's names");
    let work: Vec<&proto::GpuRenderStageEvent> =
        t.packet.iter().filter_map(|p| p.gpu_render_stage_event.as_ref()).collect();
    let runs = t
        .packet
        .iter()
        .filter_map(|p| p.track_event.as_ref())
        .filter(|e| e.name.as_deref().is_some_and(|n| n.starts_with("run on engine")))
        .count();
    assert!(runs > 0);
    assert_eq!(work.len(), runs, "one render stage per execution run");
    let spec = |iid| interned.gpu_specifications.iter().find(|s| s.iid == Some(iid)).and_then(|s| s.name.clone());
    let queues: Vec<String> = work.iter().filter_map(|w| spec(w.hw_queue_iid.unwrap())).collect();
    assert_eq!(queues.len(), work.len(), "every hardware queue is interned: {interned:?}");
    assert!(queues.iter().any(|q| q.starts_with("belfry0 queue 2 (context 1")), "{queues:?}");
    let stages: Vec<String> = work.iter().filter_map(|w| spec(w.stage_iid.unwrap())).collect();
    assert!(stages.iter().any(|s| s == "engine 1 (copy)"), "{stages:?}");
    let signals: Vec<&str> = work
        .iter()
        .flat_map(|w| &w.extra_data)
        .filter(|x| x.name.as_deref() == Some("fence signals"))
        .filter_map(|x| x.value.as_deref())
        .collect();
    assert!(signals.iter().any(|s| s.starts_with("0x77=")), "the signal of fence 0x77 is on its work: {signals:?}");
}

/// The Python with the official protos, or `None` (with the reason printed) when it cannot be
/// had; `BELFRY_REQUIRE_PERFETTO=1` turns that into a failure.
fn perfetto_python() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/perfetto-python.sh");
    let out = Command::new(&script).output().expect("run perfetto-python.sh");
    if out.status.success() {
        return Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()));
    }
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(3) && std::env::var_os("BELFRY_REQUIRE_PERFETTO").is_none(),
        "no Python with the perfetto package: {why}"
    );
    eprintln!(
        "SKIPPED: the official Perfetto protos are not available ({}); set BELFRY_REQUIRE_PERFETTO=1 to fail instead",
        why.trim()
    );
    None
}

/// Runs `belfry-trace perfetto` on the run directory `run`, writing `out`.
fn write_perfetto(run: &Path, out: &Path) {
    let status =
        Command::new(env!("CARGO_BIN_EXE_belfry-trace")).arg("perfetto").arg(run).arg("-o").arg(out).status().unwrap();
    assert!(status.success(), "belfry-trace perfetto {} failed: {status}", run.display());
}

#[test]
fn the_official_perfetto_protos_decode_tracks_slices_and_flows() {
    let Some(python) = perfetto_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.perfetto");
    write_perfetto(&fixture(), &out);
    let expect = serde_json::json!({
        "processes": ["belfry0 (device 0)", "module: /dev/belfry0"],
        "tracks": ["CMP mailbox", "doorbells", "interrupts", "faults", "engine 0", "engine 1", "queue 1", "queue 2", "fence 0x77 MonitoredValue"],
        "slices": ["queue", "run", "CREATE_QUEUE", "CONNECT_DOORBELL", "REGISTER_FENCE"],
        "flow_min_events": 5,
        "flows_min": 1,
        "gpu_queues": ["belfry0 queue 1 (context 1", "belfry0 queue 2 (context 1"],
        "gpu_min": 2,
    });
    check(&python, &out, &expect);
    // A trace with picks and buffer boundaries: buffer slices on the queue tracks, the
    // scheduler track, and the flow through the run the pick started.
    // gzip, as a run directory keeps it.
    let out = dir.path().join("boundaries.perfetto.gz");
    write_perfetto(&boundaries(), &out);
    let expect = serde_json::json!({
        "processes": ["belfry0 (device 0)", "guest threads using /dev/belfry0"],
        "tracks": ["scheduler", "engine 0", "engine 1", "queue 1", "queue 2", "pid 800 tid 812"],
        "slices": ["queue", "buffer", "CREATE_QUEUE", "CPU"],
        "flow_min_events": 6,
        "flows_min": 1,
        "gpu_queues": ["belfry0 queue 1", "belfry0 queue 2"],
        "gpu_min": 2,
    });
    check(&python, &out, &expect);
}

fn check(python: &Path, trace: &Path, expect: &serde_json::Value) {
    let checker = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/check_perfetto.py");
    let result = Command::new(python).arg(checker).arg(trace).arg(expect.to_string()).output().unwrap();
    let text = String::from_utf8_lossy(&result.stdout).to_string() + &String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{text}");
    assert!(text.contains("check_perfetto: ok"), "{text}");
}

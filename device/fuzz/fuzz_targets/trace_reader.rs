//! Fuzz target: `belfry-trace`'s readers and everything built on them, on arbitrary bytes.
//!
//! The input is a device trace file, optionally followed by a line `#timeline` and a module
//! timeline. The trace is read in two parts as `show --follow` reads a file still being
//! written (the first byte picks where the first read stops, so torn lines are continued);
//! then the records are modelled, shown, summarised and encoded as a Perfetto trace. Nothing
//! may panic (the tool's release profile checks overflow, as this build does), every record
//! read stays within the reader's time bound, and no more of the file is taken than exists.
#![no_main]

use std::path::Path;

use belfry_trace::model::Model;
use belfry_trace::record::MAX_TIME_NS;
use belfry_trace::run::{DeviceTrace, Run};
use belfry_trace::show::{self, Filter, Style};
use belfry_trace::{perfetto, stats, timeline};
use libfuzzer_sys::fuzz_target;

/// Separates the trace from the timeline in an input.
const TIMELINE: &[u8] = b"\n#timeline\n";

fuzz_target!(|data: &[u8]| {
    let (trace, guest) = match data.windows(TIMELINE.len()).position(|w| w == TIMELINE) {
        Some(at) => (&data[..=at], &data[at + TIMELINE.len()..]),
        None => (data, &[][..]),
    };
    let first_read = trace.first().map_or(0, |&b| trace.len() * usize::from(b) / 256);
    let mut device = DeviceTrace::empty(Path::new("fuzz.trace.jsonl"), 0);
    device.read_lines_from(&trace[..first_read]).unwrap();
    let taken = usize::try_from(device.read_bytes).unwrap();
    assert!(taken <= first_read);
    device.read_lines_from(&trace[taken..]).unwrap();
    assert!(device.read_bytes <= trace.len() as u64);
    assert!(device.records.iter().all(|r| r.t_ns <= MAX_TIME_NS));

    let timeline = timeline::parse(guest).unwrap();
    let mut run = Run { devices: vec![device], guest: timeline.events, ..Run::default() };
    run.align();
    let models: Vec<Model> = run.devices.iter().map(Model::build).collect();
    let lines = show::render(&run, &models, &Filter::default(), Style { colour: true });
    assert!(lines.len() >= run.devices[0].records.len());
    let _ = stats::report(&run, &models);
    let _ = perfetto::encode(&perfetto::build(&run, &models));
});

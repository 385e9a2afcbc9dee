//! `belfry-trace replay`: a recorded device's input log run again through the device model
//! (`belfry_device::replay`), without QEMU or a guest, and the result as text — the records
//! replayed, how long it took, and where it stopped: the log's end, `--until`, or the first
//! divergence with its record number and both sides decoded; with `--dump`, the GPU's queues,
//! contexts and fences where it stopped. A log another build recorded, replayed anyway
//! (`--allow-other-build`), says so first.

use std::fmt::Write as _;
use std::path::Path;

use belfry_device::build_identity::BUILD;
use belfry_device::replay::{Outcome, Report};

/// The report as text; whether the replay matched the log (to its end or to `--until`).
pub fn report(path: &Path, report: &Report) -> (String, bool) {
    let mut out = String::new();
    if let Some(other) = &report.other_build {
        let _ = writeln!(
            out,
            "{}: recorded by {other}, replayed by {BUILD} (--allow-other-build): a divergence may be where the builds differ",
            path.display()
        );
    }
    let _ = writeln!(
        out,
        "{}: replayed {} of {} records in {:.3} s",
        path.display(),
        report.passed,
        report.records,
        report.elapsed.as_secs_f64()
    );
    let matched = match &report.outcome {
        Outcome::Finished => {
            let _ = writeln!(out, "no divergence: every reply and interrupt matched the recording");
            if report.released > 0 {
                let _ = writeln!(
                    out,
                    "the last {} records, lock tickets of the device's own stop after its client left, ran unordered",
                    report.released
                );
            }
            true
        }
        Outcome::Stopped { at } => {
            let _ = writeln!(out, "stopped before record {at} (--until): no divergence up to it");
            true
        }
        Outcome::Diverged(d) => {
            let _ = writeln!(out, "divergence at record {}: {}", d.record, d.reason);
            let _ = writeln!(out, "  recorded: {}", d.recorded);
            for r in &d.replayed {
                let _ = writeln!(out, "  replayed: {r}");
            }
            if d.replayed.is_empty() {
                let _ = writeln!(out, "  replayed: (no thread was waiting)");
            }
            false
        }
    };
    if let Some(dump) = &report.dump {
        let _ = writeln!(out, "GPU objects where the replay stopped:\n{dump}");
    }
    (out, matched)
}

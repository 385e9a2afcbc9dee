//! The module's fence timeline: `belfry-timeline` prints it on the results channel after the
//! suite; it is saved as the run directory's `timeline.txt`, next to the device traces.

use crate::outcome::golden;
use crate::run_dir::RunDir;
use crate::setup::guest;

/// Saves the fence timeline the guest put on the results channel; a note saying where, if
/// there was one.
pub fn save(run: &RunDir) -> Option<String> {
    let results = std::fs::read(run.results()).ok()?;
    let timeline =
        golden::extract_section(&String::from_utf8_lossy(&results), guest::TIMELINE_BEGIN, guest::TIMELINE_END)?;
    let events = timeline.lines().filter(|l| !l.starts_with('#')).count();
    match std::fs::write(run.timeline(), timeline) {
        Ok(()) => Some(format!("fence timeline: {events} event(s) in {}", run.timeline().display())),
        Err(e) => Some(format!("fence timeline not saved: {}: {e}", run.timeline().display())),
    }
}

//! `cargo belfry soak`: the guest side is `belfry-soak` (a mixed workload across processes with
//! its own bounds: guest memory, the module's live objects, kernel warnings); this module
//! builds its command line and judges the host side after the run: each device's peak RSS
//! (which the device logs as it exits) and the size of its trace file, which must stay under
//! the trace limit the soak gives the devices.

use std::path::Path;

use crate::run_dir::RunDir;

/// The guest binary: package and binary.
pub const GUEST_BIN: &str = "belfry-conformance:belfry-soak";
/// The trace limit the soak gives every device (`--trace-limit`).
pub const TRACE_LIMIT: &str = "64M";
/// [`TRACE_LIMIT`] in bytes, plus room for the records that close a limited file.
const TRACE_BOUND: u64 = (64 << 20) + (1 << 20);

/// The guest command of a soak of `minutes` with `workers` worker processes.
pub fn command(minutes: f64, workers: u32) -> Vec<String> {
    vec!["belfry-soak".into(), "--minutes".into(), minutes.to_string(), "--workers".into(), workers.to_string()]
}

/// The peak RSS a device logged as it exited, in KiB (`NAME: peak RSS N KiB`).
fn peak_rss_kib(log: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| l.split_once("peak RSS ")?.1.strip_suffix(" KiB")?.trim().parse().ok())
}

/// The host-side verdict of a soak over `devices` devices: a line per device, or why it failed.
///
/// # Errors
/// A device's peak RSS above `max_rss_mib`, no peak RSS line in its log, or a trace file above
/// the soak's trace limit.
pub fn judge(run: &RunDir, devices: usize, max_rss_mib: u64) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    for i in 0..devices {
        let log = std::fs::read_to_string(run.device_log(i)).unwrap_or_default();
        let rss = peak_rss_kib(&log).ok_or_else(|| format!("device {i} logged no peak RSS (device{i}.log)"))?;
        let trace = file_size(&run.device_trace(i));
        notes.push(format!("soak: device {i}: peak RSS {} MiB, trace {} MiB", rss >> 10, trace >> 20));
        if rss >> 10 > max_rss_mib {
            return Err(format!("device {i}'s peak RSS {} MiB is above --max-device-rss {max_rss_mib} MiB", rss >> 10));
        }
        if trace > TRACE_BOUND {
            return Err(format!("device {i}'s trace is {} MiB, above its {TRACE_LIMIT} limit", trace >> 20));
        }
    }
    Ok(notes)
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_rss_line_is_found_and_anything_else_is_not() {
        let log = "[2026-11-25T17:00:00Z INFO  belfry_device] belfry0: client disconnected\n\
                   [2026-11-25T17:00:00Z INFO  belfry_device] belfry0: peak RSS 48212 KiB\n";
        assert_eq!(peak_rss_kib(log), Some(48212));
        assert_eq!(peak_rss_kib("belfry0: peak RSS many KiB"), None);
        assert_eq!(peak_rss_kib(""), None);
    }

    #[test]
    fn the_guest_command_names_minutes_and_workers() {
        assert_eq!(command(0.5, 3), ["belfry-soak", "--minutes", "0.5", "--workers", "3"]);
    }
}

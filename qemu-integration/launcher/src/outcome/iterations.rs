//! `conformance --repeat N` / `--until-fail`: the suite announces each iteration on the console
//! (`ITERATION k/N`, or `ITERATION k` until a failure); the console reader notes the host's
//! `CLOCK_MONOTONIC` as each announcement arrives ([`Marks`]), and after the run every failing
//! iteration's stretch of each device trace — the header, then the records from its
//! announcement (less [`MARGIN_NS`]) to the next announcement (plus the margin) — is copied to
//! `iteration-K/` in the run directory, with the module's timeline when K was the last
//! iteration, where `belfry-trace show`/`stats` read it as they read a run directory.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::PathBuf;

use belfry_trace_schema::file;

use crate::run_dir::RunDir;

/// The line the suite prints before each iteration (`belfry_conformance::ITERATION`).
pub const MARKER: &str = "ITERATION ";
/// The start of the suite's closing lines of a repeated run: how many iterations passed, then
/// each failure with its iteration (`repeat: iteration K: FAIL …`).
pub const SUMMARY: &str = "repeat: ";

/// How far around an iteration's announcements its traces are cut: the console line arrives
/// after the guest printed it (serial port, TCG), and its last records may trail its next one.
pub const MARGIN_NS: u64 = 500_000_000;

/// The suite's options for `--repeat N` and `--until-fail` (none for neither).
pub fn suite_args(repeat: Option<u32>, until_fail: bool) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(n) = repeat {
        args.extend(["--repeat".to_string(), n.to_string()]);
    }
    if until_fail {
        args.push("--until-fail".into());
    }
    args
}

/// The iteration an announcement line names (`ITERATION 3/500` or `ITERATION 3`).
pub fn announced(line: &str) -> Option<u32> {
    let rest = line.strip_prefix(MARKER)?;
    rest.split('/').next()?.trim().parse().ok()
}

/// When each iteration was announced on the console (host `CLOCK_MONOTONIC`, ns), in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Marks(Vec<(u32, u64)>);

impl Marks {
    /// Notes `line` if it announces an iteration, at host time `now_ns`.
    pub fn feed(&mut self, line: &str, now_ns: u64) {
        if let Some(k) = announced(line) {
            self.0.push((k, now_ns));
        }
    }

    /// The last iteration announced.
    pub fn last(&self) -> Option<u32> {
        self.0.last().map(|&(k, _)| k)
    }

    /// The host-time window of iteration `k`'s records: from its announcement, less the margin,
    /// to the next announcement plus the margin (to the end of the traces for the last one).
    pub fn window(&self, k: u32) -> Option<(u64, u64)> {
        let at = self.0.iter().position(|&(i, _)| i == k)?;
        let from = self.0[at].1.saturating_sub(MARGIN_NS);
        let to = self.0.get(at + 1).map_or(u64::MAX, |&(_, t)| t.saturating_add(MARGIN_NS));
        Some((from, to))
    }
}

/// The `t_ns` a trace line starts with (`{"t_ns":123,…`).
fn t_ns(line: &str) -> Option<u64> {
    let rest = line.strip_prefix(r#"{"t_ns":"#)?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

/// Copies the lines of device trace `input` whose host time falls in `[from_ns, to_ns)` to
/// `out`, the header line (which gives the file's host clock) and the clock record first;
/// returns the records copied besides them. A trace without a header copies nothing.
///
/// # Errors
/// Reading or writing.
pub fn cut(input: impl BufRead, mut out: impl Write, from_ns: u64, to_ns: u64) -> std::io::Result<usize> {
    let mut start = None;
    let mut copied = 0;
    for line in input.lines() {
        let line = line?;
        let Some(start_ns) = start else {
            // The header: `clock.monotonic_ns` is the host time of `t_ns` 0.
            let Ok(record) = belfry_trace::record::parse_line(&line) else { continue };
            let belfry_trace::record::Event::Header(header) = record.event else { return Ok(0) };
            start = Some(header.clock.monotonic_ns);
            writeln!(out, "{line}")?;
            continue;
        };
        let Some(t) = t_ns(&line) else { continue };
        let host = start_ns.saturating_add(t);
        if line.contains(r#""event":"clock""#) {
            writeln!(out, "{line}")?;
        } else if (from_ns..to_ns).contains(&host) {
            writeln!(out, "{line}")?;
            copied += 1;
        } else if host >= to_ns {
            break;
        }
    }
    out.flush()?;
    Ok(copied)
}

/// Keeps iteration `k`'s traces: its stretch of each `device<I>.trace.jsonl.gz` of `run` (and the
/// module's `timeline.txt` when `k` was the last iteration) in `run/iteration-K/`. Returns that
/// directory and the records kept.
///
/// # Errors
/// Creating the directory or a file, reading a trace.
pub fn keep(run: &RunDir, traces: &[PathBuf], marks: &Marks, k: u32) -> std::io::Result<(PathBuf, usize)> {
    let (from, to) =
        marks.window(k).ok_or_else(|| std::io::Error::other(format!("iteration {k} was not announced")))?;
    let dir = run.path.join(format!("iteration-{k}"));
    std::fs::create_dir_all(&dir)?;
    let mut kept = 0;
    for trace in traces {
        let (Ok(input), Some(name)) = (file::open(trace), trace.file_name()) else { continue };
        let mut out = file::Writer::create(&dir.join(name), file::Compression::Gzip)?;
        kept += cut(input, &mut out, from, to)?;
        out.finish()?;
    }
    let timeline = run.timeline();
    if marks.last() == Some(k) && timeline.exists() {
        std::fs::copy(&timeline, dir.join("timeline.txt"))?;
    }
    Ok((dir, kept))
}

/// After a repeated run: keeps the traces of every iteration a test failed in (`failed`, the
/// iterations of the failed tests; [`keep`]) and says where (nothing for a run that did not
/// repeat or had no failure).
pub fn keep_failing(run: &RunDir, failed: impl IntoIterator<Item = u32>, marks: &Marks, devices: usize) -> Vec<String> {
    let failing: BTreeSet<u32> = failed.into_iter().collect();
    let traces: Vec<PathBuf> = (0..devices).map(|i| run.device_trace(i)).collect();
    failing
        .into_iter()
        .map(|k| match keep(run, &traces, marks, k) {
            Ok((dir, records)) => format!("iteration {k} failed: its traces ({records} records) in {}", dir.display()),
            Err(e) => format!("iteration {k} failed; its traces were not kept: {e}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_is_told_what_the_command_line_asked() {
        assert!(suite_args(None, false).is_empty());
        assert_eq!(suite_args(Some(500), false), ["--repeat", "500"]);
        assert_eq!(suite_args(Some(5), true), ["--repeat", "5", "--until-fail"]);
        assert_eq!(suite_args(None, true), ["--until-fail"]);
    }

    #[test]
    fn announcements_are_read_with_or_without_a_bound() {
        assert_eq!(announced("ITERATION 3/500"), Some(3));
        assert_eq!(announced("ITERATION 12"), Some(12));
        assert_eq!(announced("ITERATIONS 3"), None);
        assert_eq!(announced("PASS ITERATION 3"), None);
    }

    #[test]
    fn an_iterations_window_runs_to_the_next_announcement_with_margins() {
        let mut marks = Marks::default();
        marks.feed("PASS something", 5);
        marks.feed("ITERATION 1/3", 1_000_000_000);
        marks.feed("ITERATION 2/3", 3_000_000_000);
        assert_eq!(marks.window(1), Some((500_000_000, 3_500_000_000)));
        assert_eq!(marks.window(2), Some((2_500_000_000, u64::MAX)));
        assert_eq!(marks.window(3), None);
        assert_eq!(marks.last(), Some(2));
    }

    #[test]
    fn a_cut_keeps_the_header_the_clock_and_the_window() {
        let header = r#"{"t_ns":0,"dev":"b","event":"header","version":2,"clock":{"monotonic_ns":1000}}"#;
        let clock = r#"{"t_ns":5,"dev":"b","event":"clock","gpu_ns":7}"#;
        let lines = [
            header.to_string(),
            clock.to_string(),
            r#"{"t_ns":100,"dev":"b","event":"doorbell","index":0,"value":1}"#.to_string(),
            r#"{"t_ns":200,"dev":"b","event":"doorbell","index":0,"value":2}"#.to_string(),
            r#"{"t_ns":300,"dev":"b","event":"doorbell","index":0,"value":3}"#.to_string(),
        ];
        let input = lines.join("\n");
        let mut out = Vec::new();
        // Host times 1100, 1200, 1300: the window [1150, 1300) holds the second only.
        let copied = cut(input.as_bytes(), &mut out, 1150, 1300).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(copied, 1);
        assert_eq!(text, format!("{header}\n{clock}\n{}\n", lines[3]));
        // No header: nothing.
        let mut out = Vec::new();
        assert_eq!(cut(lines[2..].join("\n").as_bytes(), &mut out, 0, u64::MAX).unwrap(), 0);
        assert!(out.is_empty());
    }
}

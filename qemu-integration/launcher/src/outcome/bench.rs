//! `bench.json`: the figures `belfry-bench` printed (each `BELFRY-BENCH {…}` line of the
//! console, in order) beside the host they were measured on — its CPU model, its load average
//! before the boot and at the end, the run's placement — so that a figure quoted from a run
//! keeps the conditions it was measured under. Written only by runs whose guest printed
//! figures.

use std::path::Path;

/// What starts a line of `belfry-bench` figures (the rest of the line is one JSON object).
pub const MARKER: &str = "BELFRY-BENCH ";

/// The file's name in the run directory.
pub const FILE: &str = "bench.json";

/// The host a run's figures were measured on.
pub struct Host<'a> {
    /// The CPU model (`/proc/cpuinfo`).
    pub cpu: Option<String>,
    /// The 1, 5 and 15 minute load averages before the boot.
    pub load_before: Option<&'a str>,
    /// The same at the run's end.
    pub load_after: Option<String>,
    /// Where the guest and the devices ran (`--placement`, as the run said it).
    pub placement: &'a str,
}

/// The JSON objects of the `BELFRY-BENCH` lines of `console`; a line whose rest does not parse
/// is kept as a string, so nothing the guest printed is lost.
pub fn figures(console: &str) -> Vec<serde_json::Value> {
    console
        .lines()
        .filter_map(|line| line.split_once(MARKER).map(|(_, rest)| rest.trim_end()))
        .map(|rest| serde_json::from_str(rest).unwrap_or_else(|_| serde_json::Value::String(rest.to_string())))
        .collect()
}

/// The document of `bench.json`: the host and the figures.
pub fn document(host: &Host<'_>, figures: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({
        "host": {
            "cpu": host.cpu,
            "load_before_boot": host.load_before,
            "load_at_end": host.load_after,
            "placement": host.placement,
        },
        "figures": figures,
    })
}

/// Writes `bench.json` into `dir` from its console log if the guest printed figures; the
/// note to print, or `None` when there were none.
pub fn save(dir: &Path, console_log: &Path, host: &Host<'_>) -> Option<String> {
    let console = std::fs::read(console_log).ok()?;
    let figures = figures(&String::from_utf8_lossy(&console));
    if figures.is_empty() {
        return None;
    }
    let count = figures.len();
    let path = dir.join(FILE);
    let text = serde_json::to_string_pretty(&document(host, figures)).ok()?;
    Some(match std::fs::write(&path, text + "\n") {
        Ok(()) => format!("benchmark figures: {} ({count} set(s), with the host's CPU and load)", path.display()),
        Err(e) => format!("{FILE} not written: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_marked_line_is_kept_in_order_and_a_broken_one_as_text() {
        let console =
            "boot\nBELFRY-BENCH {\"repeat\":3}\r\nother line\n[  5.1] BELFRY-BENCH {\"a\":1}\nBELFRY-BENCH {oops\n";
        let got = figures(console);
        assert_eq!(
            got,
            vec![serde_json::json!({"repeat": 3}), serde_json::json!({"a": 1}), serde_json::json!("{oops")]
        );
        assert!(figures("no figures here\n").is_empty());
    }

    #[test]
    fn the_file_names_the_host_beside_the_figures_and_is_absent_without_figures() {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("console.log");
        let host = Host {
            cpu: Some("Example CPU".into()),
            load_before: Some("0.50 0.40 0.30"),
            load_after: Some("1.00 0.50 0.30".into()),
            placement: "device-core",
        };
        std::fs::write(&console, "nothing measured\n").unwrap();
        assert_eq!(save(dir.path(), &console, &host), None);
        assert!(!dir.path().join(FILE).exists());
        std::fs::write(&console, "BELFRY-BENCH {\"repeat\":3}\n").unwrap();
        let note = save(dir.path(), &console, &host).unwrap();
        assert!(note.contains("1 set(s)"), "{note}");
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(FILE)).unwrap()).unwrap();
        assert_eq!(written["host"]["cpu"], "Example CPU");
        assert_eq!(written["host"]["load_before_boot"], "0.50 0.40 0.30");
        assert_eq!(written["host"]["load_at_end"], "1.00 0.50 0.30");
        assert_eq!(written["host"]["placement"], "device-core");
        assert_eq!(written["figures"], serde_json::json!([{"repeat": 3}]));
    }
}

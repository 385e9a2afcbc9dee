//! `belfry-conformance`: runs the conformance suite against the attached Belfry devices.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Run the Belfry conformance suite in the guest.
#[derive(Debug, Parser)]
#[command(name = "belfry-conformance", version, about)]
struct Cli {
    /// Run only tests whose name contains FILTER or that prove rule id FILTER (repeatable).
    #[arg(value_name = "FILTER")]
    filters: Vec<String>,
    /// List the selected tests, their rule ids and the configuration they need; run nothing.
    #[arg(long)]
    list: bool,
    /// Write the JSON results here (default: $BELFRY_RESULTS, else none).
    #[arg(long, value_name = "PATH")]
    results: Option<PathBuf>,
    /// Devices to use (default: every /dev/belfry0..31 that opens); each test runs on the first
    /// whose capabilities match its needs.
    #[arg(long = "device", value_name = "PATH")]
    devices: Vec<PathBuf>,
    /// Run the selection N times in a row (an `ITERATION k/N` line before each); the totals
    /// count every iteration, and the end lists how many iterations passed and each failure.
    #[arg(long, value_name = "N")]
    repeat: Option<u32>,
    /// Stop after the first iteration with a failure (at most --repeat N iterations; without
    /// --repeat, until a failure).
    #[arg(long)]
    until_fail: bool,
    /// (For a test that exec's the suite) create contexts on DEVICE until refused, exit with
    /// how many; run nothing else.
    #[arg(long, value_name = "DEVICE", hide = true)]
    count_contexts: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(path) = &cli.count_contexts {
        return ExitCode::from(belfry_conformance::exec_probe::count_contexts(path));
    }
    let (tests, unselected): (Vec<_>, Vec<_>) =
        belfry_conformance::registry().into_iter().partition(|t| belfry_conformance::selected(t, &cli.filters));
    if cli.list {
        for t in &tests {
            println!("{} [{}] ({}) in {}", t.name, t.ids.join(", "), t.needs.listed(), t.file());
        }
        return ExitCode::SUCCESS;
    }
    let devices = belfry_conformance::probe_devices(&cli.devices);
    for (path, caps) in &devices {
        println!(
            "device {}: {} doorbells of {} bytes, caps {:#x}, {} engines, user-mode engines {:#b}",
            path.display(),
            caps.doorbell_count(),
            caps.raw.doorbell_size,
            caps.raw.caps,
            caps.engine_count(),
            caps.raw.user_mode_submission_engines
        );
    }
    let repeat = match (cli.repeat, cli.until_fail) {
        (None, false) => belfry_conformance::Repeat::ONCE,
        (times, until_fail) => belfry_conformance::Repeat { times, until_fail },
    };
    let mut report = belfry_conformance::run(&tests, &unselected, &devices, repeat);
    // A run given filters or devices is partial: its gaps are not its own.
    report.incomplete = belfry_conformance::incomplete(&report, !cli.filters.is_empty() || !cli.devices.is_empty());
    if let Some(why) = &report.incomplete {
        println!("INCOMPLETE: {why}");
    }
    let path = cli.results.or_else(|| std::env::var_os("BELFRY_RESULTS").filter(|v| !v.is_empty()).map(PathBuf::from));
    if let Some(path) = path {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => {
                if let Err(e) = std::fs::write(&path, json + "\n") {
                    eprintln!("conformance: writing {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            Err(e) => {
                eprintln!("conformance: serializing the results: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if report.failed > 0 || report.incomplete.is_some() || (report.passed == 0 && !tests.is_empty()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

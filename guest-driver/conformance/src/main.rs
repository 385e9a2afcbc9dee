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
    /// Run up to N tests at once, each in a process of its own, as the resources each declares
    /// allow (tests on different devices side by side, the exclusive ones alone after them);
    /// 1 runs every test in this process, one after another in registry order. Output stays
    /// per test and in registry order either way.
    #[arg(long, value_name = "N", default_value_t = belfry_conformance::runner::DEFAULT_JOBS)]
    jobs: usize,
    /// Fail PERCENT % of the kernel allocations the tests' own processes make with the module's
    /// code on the stack (failslab and fail_page_alloc, through debugfs; the debug kernel has
    /// them), one test at a time; each test passes when every device's live objects return to
    /// where they were before it, whatever its own checks made of the failures.
    #[arg(long, value_name = "PERCENT")]
    fail_inject: Option<u32>,
    /// Run only shard K of N of the selection (K from 1): the launcher's runs across N guests
    /// give each guest one, dealt by each test's expected time (`--durations`; every guest
    /// makes the same deal). A shard is judged like a filtered run (its coverage is partial);
    /// the launcher judges the merged report.
    #[arg(long, value_name = "K/N", value_parser = belfry_conformance::shard::Shard::parse)]
    shard: Option<belfry_conformance::shard::Shard>,
    /// (With --shard) whose whole run's times the deal expects: `distro` (`durations.txt`) or
    /// `debug` (`durations-debug.txt`).
    #[arg(long, value_name = "KERNEL", default_value = "distro", value_parser = belfry_conformance::shard::Durations::parse)]
    durations: belfry_conformance::shard::Durations,
    /// (Run by the suite itself) run only the test of exactly this name on the first --device,
    /// writing its record to --record.
    #[arg(long = "run-one", value_name = "NAME", hide = true)]
    run_one: Option<String>,
    /// (With --run-one) where the record goes.
    #[arg(long, value_name = "PATH", hide = true)]
    record: Option<PathBuf>,
    /// (With --run-one) the iteration the test runs in.
    #[arg(long, value_name = "K", hide = true)]
    iteration: Option<u32>,
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
    if let Some(name) = &cli.run_one {
        return run_one(name, &cli);
    }
    let (tests, mut unselected): (Vec<_>, Vec<_>) =
        belfry_conformance::registry().into_iter().partition(|t| belfry_conformance::selected(t, &cli.filters));
    let shard = cli.shard.unwrap_or(belfry_conformance::shard::Shard::WHOLE);
    let (tests, other_shards) = shard.take(tests, cli.durations, cli.jobs);
    unselected.extend(other_shards);
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
    let fail_inject = match cli.fail_inject.map(belfry_conformance::fail_inject::FailInject::setup).transpose() {
        Ok(fi) => fi,
        Err(e) => {
            eprintln!("conformance: --fail-inject: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut report = belfry_conformance::run(&tests, &unselected, &devices, repeat, cli.jobs, fail_inject.as_ref());
    // A run given filters, devices or a shard is partial: its gaps are not its own.
    let partial = !cli.filters.is_empty() || !cli.devices.is_empty() || shard.count > 1;
    report.incomplete = belfry_conformance::incomplete(&report, partial);
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

/// `--run-one NAME`: the test of that name on the first `--device`, its record to `--record`.
fn run_one(name: &str, cli: &Cli) -> ExitCode {
    let Some(test) = belfry_conformance::registry().into_iter().find(|t| t.name == name) else {
        eprintln!("conformance: no test is named {name}");
        return ExitCode::FAILURE;
    };
    let (Some(device), Some(record)) = (cli.devices.first(), &cli.record) else {
        eprintln!("conformance: --run-one needs --device and --record");
        return ExitCode::FAILURE;
    };
    match belfry_conformance::runner::run_in_this_process(&test, device, cli.iteration, record) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conformance: writing {}: {e}", record.display());
            ExitCode::FAILURE
        }
    }
}

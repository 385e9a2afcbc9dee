//! `belfry-ioctl-fuzz`: the suite's ioctl and mmap fuzzer for longer runs than the suite's
//! (`cargo belfry exec --guest-bin belfry-conformance:belfry-ioctl-fuzz -- belfry-ioctl-fuzz
//! --iterations 100000`), with the same verdict: no wedge, no kernel warning, no object left,
//! the device still working. `--threads N` runs the concurrent fuzzer (N threads sharing files
//! and mappings, each running `--iterations`). `--seed` replays a run's sequence of choices (the
//! concurrent fuzzer's interleaving is the scheduler's).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Fuzz the Belfry module's ioctls and mmaps, then check the module and device.
#[derive(Debug, Parser)]
#[command(name = "belfry-ioctl-fuzz", version, about)]
struct Cli {
    /// The device file.
    #[arg(long, default_value = "/dev/belfry0")]
    device: PathBuf,
    /// Operations of the main fuzzing process.
    #[arg(long, default_value_t = 20_000)]
    iterations: u64,
    /// Seed (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Fork a child that is SIGKILLed mid-way once per this many operations (0: never).
    #[arg(long, default_value_t = 100)]
    fork_every: u64,
    /// Operations each such child attempts.
    #[arg(long, default_value_t = 200)]
    child_iterations: u64,
    /// Threads sharing the files and mappings, each running `--iterations` (1: one thread).
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// With `--threads`: stall split submissions behind a fence another file signals.
    #[arg(long)]
    split_stalls: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let seed = cli.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!(
        "belfry-ioctl-fuzz: seed {seed}, {} threads of {} operations on {}",
        cli.threads.max(1),
        cli.iterations,
        cli.device.display()
    );
    let config = belfry_conformance::fuzz::Config {
        seed,
        iterations: cli.iterations,
        child_iterations: cli.child_iterations,
        fork_every: cli.fork_every,
        threads: cli.threads,
        split_stalls: cli.split_stalls,
    };
    let start = std::time::Instant::now();
    match belfry_conformance::fuzz::session(&cli.device, &config) {
        Ok(stats) => {
            let secs = start.elapsed().as_secs_f64();
            let ops = u64::from(cli.threads.max(1)) * cli.iterations;
            println!(
                "belfry-ioctl-fuzz: passed in {secs:.1} s ({:.0} operations/s): {ops} operations, {}",
                ops as f64 / secs,
                stats.summary()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("belfry-ioctl-fuzz: FAILED: {}", belfry_conformance::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

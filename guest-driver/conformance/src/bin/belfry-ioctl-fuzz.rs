//! `belfry-ioctl-fuzz`: the suite's ioctl and mmap fuzzer for longer runs than the suite's
//! (`cargo belfry exec --guest-bin belfry-conformance:belfry-ioctl-fuzz -- belfry-ioctl-fuzz
//! --iterations 100000`), with the same verdict: no wedge, no kernel warning, no object left,
//! the device still working. `--seed` replays a run.

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let seed = cli.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!("belfry-ioctl-fuzz: seed {seed}, {} operations on {}", cli.iterations, cli.device.display());
    let config = belfry_conformance::fuzz::Config {
        seed,
        iterations: cli.iterations,
        child_iterations: cli.child_iterations,
        fork_every: cli.fork_every,
    };
    let start = std::time::Instant::now();
    match belfry_conformance::fuzz::session(&cli.device, &config) {
        Ok(stats) => {
            println!(
                "belfry-ioctl-fuzz: passed in {:.1} s: {} ioctls ({} accepted), {} mmaps ({} mapped), {} children killed",
                start.elapsed().as_secs_f64(),
                stats.ioctls,
                stats.accepted,
                stats.mmaps,
                stats.mapped,
                stats.kills
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("belfry-ioctl-fuzz: FAILED: {}", belfry_conformance::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

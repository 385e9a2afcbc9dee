//! `belfry-soak`: a mixed workload across processes for a set time (`belfry_conformance::soak`),
//! with its bounds checked; `cargo belfry soak --minutes N` runs it in the guest and judges the
//! host side.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

/// Soak the Belfry module and device with a mixed workload, then check the bounds.
#[derive(Debug, Parser)]
#[command(name = "belfry-soak", version, about)]
struct Cli {
    /// The device file.
    #[arg(long, default_value = "/dev/belfry0")]
    device: PathBuf,
    /// How long the workload runs, in minutes (fractions allowed).
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    workers: u32,
    /// Seed (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let seed = cli.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let Ok(duration) = Duration::try_from_secs_f64(cli.minutes * 60.0) else {
        eprintln!("belfry-soak: --minutes {} is not a duration", cli.minutes);
        return ExitCode::FAILURE;
    };
    println!(
        "belfry-soak: seed {seed}, {} worker(s) for {:.1} min on {}",
        cli.workers,
        cli.minutes,
        cli.device.display()
    );
    let config = belfry_conformance::soak::Config { device: cli.device, duration, workers: cli.workers, seed };
    match belfry_conformance::soak::run(&config) {
        Ok(report) => {
            let low = report.samples.iter().map(|s| s.1).min().unwrap_or(report.mem_after);
            println!(
                "belfry-soak: passed: MemAvailable {} MiB before, {} MiB after, {} MiB at its lowest; {} samples",
                report.mem_before >> 20,
                report.mem_after >> 20,
                low >> 20,
                report.samples.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("belfry-soak: FAILED (seed {seed}): {}", belfry_conformance::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

//! `--repeat N`: the headline figures N times in one boot, their variants interleaved, so a
//! host's drift (another job starting, a frequency change) falls on every variant alike: each
//! round measures user-mode and kernel-mode submission latency (in alternating order) and the
//! GPU-side and CPU-mediated waits on both clocks, then the figures are shown as ranges —
//! min / median / max of the rounds' medians and p99s — with the per-round comparisons the
//! claims rest on. The host's CPU model and load are in the launcher's `summary.txt`.

use belfry_umd::{Device, QueueMode};

use crate::fence_wait::{self, Spread};
use crate::{latency, micros, ratio, BoxError};

/// The figures of one round.
struct Round {
    user_mode: Spread,
    kernel_mode: Spread,
    waits: fence_wait::Figures,
}

impl Round {
    fn figures(&self) -> [(&'static str, Spread); 6] {
        [
            ("submit → progress, user-mode (doorbell)", self.user_mode),
            ("submit → progress, kernel-mode (ioctl)", self.kernel_mode),
            ("GPU-side wait, GPU's clock", self.waits.gpu_side.gpu_clock),
            ("CPU-mediated wait, GPU's clock", self.waits.cpu_mediated.gpu_clock),
            ("GPU-side wait, end to end", self.waits.gpu_side.end_to_end),
            ("CPU-mediated wait, end to end", self.waits.cpu_mediated.end_to_end),
        ]
    }
}

/// Min, median and max of `values`.
fn range(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |i: usize| values.get(i).copied().unwrap_or(f64::NAN);
    (at(0), at(values.len() / 2), at(values.len().saturating_sub(1)))
}

/// Runs `rounds` rounds of `n` samples per figure on `dev` and prints the ranges.
pub(crate) fn run(dev: &Device, n: u32, rounds: u32) -> Result<(), BoxError> {
    println!("belfry-bench --repeat {rounds}: {n} samples per figure per round, variants interleaved");
    let mut all = Vec::new();
    for r in 0..rounds {
        let (user_mode, kernel_mode) = if r % 2 == 0 {
            let um = latency(dev, QueueMode::UserMode, n)?;
            (um, latency(dev, QueueMode::KernelMode, n)?)
        } else {
            let km = latency(dev, QueueMode::KernelMode, n)?;
            (latency(dev, QueueMode::UserMode, n)?, km)
        };
        let round = Round { user_mode, kernel_mode, waits: fence_wait::measure(dev, n)? };
        println!(
            "round {}/{rounds}: user-mode median {:.1} µs p99 {:.1} µs, kernel-mode median {:.1} µs p99 {:.1} µs, \
             waits on the GPU's clock {:.1} / {:.1} µs",
            r + 1,
            micros(round.user_mode.0),
            micros(round.user_mode.1),
            micros(round.kernel_mode.0),
            micros(round.kernel_mode.1),
            micros(round.waits.gpu_side.gpu_clock.0),
            micros(round.waits.cpu_mediated.gpu_clock.0),
        );
        all.push(round);
    }
    println!("| figure ({rounds} rounds) | median: min / median / max (µs) | p99: min / median / max (µs) |");
    println!("|---|---|---|");
    let table: Vec<_> = all.iter().map(Round::figures).collect();
    let mut json = serde_json::Map::new();
    for i in 0..6 {
        let name = table.first().map_or("", |figures| figures[i].0);
        let medians: Vec<f64> = table.iter().map(|figures| micros(figures[i].1 .0)).collect();
        let p99s: Vec<f64> = table.iter().map(|figures| micros(figures[i].1 .1)).collect();
        let (m, p) = (range(medians.clone()), range(p99s.clone()));
        println!("| {name} | {:.1} / {:.1} / {:.1} | {:.1} / {:.1} / {:.1} |", m.0, m.1, m.2, p.0, p.1, p.2);
        json.insert(name.into(), serde_json::json!({"medians_us": medians, "p99s_us": p99s}));
    }
    let user_over_kernel = range(all.iter().map(|r| ratio(r.user_mode.0, r.kernel_mode.0)).collect());
    let p99_below = all.iter().filter(|r| r.user_mode.1 < r.kernel_mode.1).count();
    let wait_on_gpu =
        range(all.iter().map(|r| ratio(r.waits.cpu_mediated.gpu_clock.0, r.waits.gpu_side.gpu_clock.0)).collect());
    let wait_end_to_end =
        range(all.iter().map(|r| ratio(r.waits.cpu_mediated.end_to_end.0, r.waits.gpu_side.end_to_end.0)).collect());
    println!(
        "user-mode / kernel-mode median: {:.3} / {:.3} / {:.3} (min / median / max of the rounds)",
        user_over_kernel.0, user_over_kernel.1, user_over_kernel.2
    );
    println!("user-mode p99 below kernel-mode p99 in {p99_below} of {rounds} rounds");
    println!(
        "CPU-mediated / GPU-side median wait: {:.1} / {:.1} / {:.1}x on the GPU's clock, {:.2} / {:.2} / {:.2}x end to end",
        wait_on_gpu.0, wait_on_gpu.1, wait_on_gpu.2, wait_end_to_end.0, wait_end_to_end.1, wait_end_to_end.2
    );
    println!(
        "BELFRY-BENCH {}",
        serde_json::json!({"submissions": n, "repeat": rounds, "figures": json, "user_mode_p99_below_kernel_mode": p99_below})
    );
    Ok(())
}

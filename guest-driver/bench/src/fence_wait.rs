//! GPU-side wait against CPU-mediated wait: a kernel-mode queue's write behind a GPU wait,
//! released by another kernel-mode queue's signal. Native fence: the wait is a `FENCE_WAIT` on
//! the ring and the device releases it by itself. Monitored fence: the module holds the write
//! and releases it from the interrupt thread after the `MONITORED_FENCE_SIGNAL` interrupt
//! (then `KICK_QUEUE`). Same packets otherwise; each sample runs from the signaler's `submit`
//! until the waiter's progress value is visible (polling its read-only mapping every 20 µs:
//! a busy poll takes a vCPU the CPU-mediated path needs, which under TCG on a shared 2-core
//! host made that path ten times slower — 7.9 ms instead of 0.7–0.8 ms median).

use std::time::{Duration, Instant};

use belfry_umd::{CommandBuffer, Device, FenceKind, QueueDesc, QueueMode};

use crate::fences::signal_cmds;
use crate::{micros, percentiles, BoxError};

/// Median and p99 of `n` releases of a wait on a fence of `kind`.
fn release_latency(dev: &Device, kind: FenceKind, n: u32) -> Result<(Duration, Duration), BoxError> {
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(kind, 0, 0)?;
    let target = ctx.alloc(4096, 0)?;
    let desc = QueueDesc::default().with_mode(QueueMode::KernelMode);
    let mut waiter = ctx.create_queue(&desc)?;
    let mut signaler = ctx.create_queue(&desc)?;
    let mut write = CommandBuffer::new();
    write.write32(target.gpu_va(), 0x5eed)?;
    let mut samples = Vec::with_capacity(n as usize);
    for value in 1..=u64::from(n) + 20 {
        waiter.wait_fence(&fence, value)?;
        let done = waiter.submit(&write)?;
        let signal = signal_cmds(&fence, value)?;
        let start = Instant::now();
        signaler.submit(&signal)?;
        while waiter.completed() < done {
            std::thread::sleep(Duration::from_micros(20));
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("{kind:?}: the wait for {value} was not released in 10 s").into());
            }
        }
        // The first 20 are warm-up.
        if value > 20 {
            samples.push(start.elapsed());
        }
    }
    Ok(percentiles(&mut samples))
}

/// Measures both, prints them and their ratio; returns the figures.
pub(crate) fn run(dev: &Device, n: u32) -> Result<serde_json::Value, BoxError> {
    let (gpu_med, gpu_p99) = release_latency(dev, FenceKind::Default, n)?;
    let (cpu_med, cpu_p99) = release_latency(dev, FenceKind::Monitored, n)?;
    println!(
        "signal → waiter's work done, GPU-side wait (native FENCE_WAIT):     median {:9.1} µs  p99 {:9.1} µs",
        micros(gpu_med),
        micros(gpu_p99)
    );
    println!(
        "signal → waiter's work done, CPU-mediated wait (monitored, held):   median {:9.1} µs  p99 {:9.1} µs",
        micros(cpu_med),
        micros(cpu_p99)
    );
    let ratio = cpu_med.as_secs_f64() / gpu_med.as_secs_f64();
    println!("CPU-mediated / GPU-side median wait latency: {ratio:.2}x");
    Ok(serde_json::json!({
        "gpu_side_wait_us": {"median": micros(gpu_med), "p99": micros(gpu_p99)},
        "cpu_mediated_wait_us": {"median": micros(cpu_med), "p99": micros(cpu_p99)},
        "cpu_over_gpu_wait_latency": ratio,
    }))
}

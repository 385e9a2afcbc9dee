//! GPU-side wait against CPU-mediated wait: a kernel-mode queue's write behind a GPU wait,
//! released by another kernel-mode queue's signal. Native fence: the wait is a `FENCE_WAIT` on
//! the ring and the device releases it by itself. Monitored fence: the module holds the write
//! and releases it from the interrupt thread after the `MONITORED_FENCE_SIGNAL` interrupt
//! (then `KICK_QUEUE`). Same packets otherwise; each sample runs from the signaler's `submit`
//! until the waiter's progress value is visible (polling its read-only mapping every 20 µs:
//! a busy poll takes a vCPU the CPU-mediated path needs, which under TCG on a shared 2-core
//! host made that path ten times slower — 7.9 ms instead of 0.7–0.8 ms median).
//!
//! Both sides of that end-to-end figure end with the same CPU wake-up, which hides what the
//! GPU-side wait saves, so each release is also measured on the GPU's clock: the signaler's
//! `WRITE_TIMESTAMP` just before its signal until the waiter's at the start of its work.

use std::time::{Duration, Instant};

use belfry_umd::{CommandBuffer, Device, FenceKind, QueueDesc, QueueMode};

use crate::fences::push_signal;
use crate::{micros, percentiles, ratio, BoxError};

/// Median and p99 of one figure.
pub(crate) type Spread = (Duration, Duration);

/// One wait form's releases, on both clocks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Release {
    /// From the signaler's `submit` until the CPU sees the waiter's progress value: includes
    /// the CPU's own wake-up (interrupt, threaded handler, scheduler, the 20 µs poll).
    pub end_to_end: Spread,
    /// On the GPU's clock: the signaler's timestamp just before its signal packet until the
    /// waiter's timestamp at the start of the work behind the wait (`WRITE_TIMESTAMP`).
    pub gpu_clock: Spread,
}

/// Releases of `n` waits on a fence of `kind` (after 20 warm-up ones).
pub(crate) fn release_latency(dev: &Device, kind: FenceKind, n: u32) -> Result<Release, BoxError> {
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(kind, 0, 0)?;
    let stamps = ctx.alloc(4096, 0)?;
    let (signaled_at, started_at) = (stamps.gpu_va(), stamps.gpu_va() + 8);
    let desc = QueueDesc::default().with_mode(QueueMode::KernelMode);
    let mut waiter = ctx.create_queue(&desc)?;
    let mut signaler = ctx.create_queue(&desc)?;
    let mut work = CommandBuffer::new();
    work.timestamp(started_at)?.write32(stamps.gpu_va() + 16, 0x5eed)?;
    let (mut host, mut gpu) = (Vec::with_capacity(n as usize), Vec::with_capacity(n as usize));
    for value in 1..=u64::from(n) + 20 {
        waiter.wait_fence(&fence, value)?;
        let done = waiter.submit(&work)?;
        let mut signal = CommandBuffer::new();
        signal.timestamp(signaled_at)?;
        push_signal(&mut signal, &fence, value)?;
        let start = Instant::now();
        signaler.submit(&signal)?;
        while waiter.completed() < done {
            std::thread::sleep(Duration::from_micros(20));
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("{kind:?}: the wait for {value} was not released in 10 s").into());
            }
        }
        let elapsed = start.elapsed();
        // The first 20 are warm-up.
        if value > 20 {
            host.push(elapsed);
            let mut words = [0u8; 16];
            stamps.read(0, &mut words)?;
            let at = |i: usize| u64::from_le_bytes(words[i..i + 8].try_into().unwrap_or_default());
            // The GPU timestamp counts nanoseconds (`TIMESTAMP_FREQ` 1 GHz).
            gpu.push(Duration::from_nanos(at(8).saturating_sub(at(0))));
        }
    }
    Ok(Release { end_to_end: percentiles(&mut host), gpu_clock: percentiles(&mut gpu) })
}

/// Both forms' releases.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Figures {
    /// Native fence, `FENCE_WAIT` on the ring.
    pub gpu_side: Release,
    /// Monitored fence, the work held by the module.
    pub cpu_mediated: Release,
}

/// Measures both forms.
pub(crate) fn measure(dev: &Device, n: u32) -> Result<Figures, BoxError> {
    Ok(Figures {
        gpu_side: release_latency(dev, FenceKind::Default, n)?,
        cpu_mediated: release_latency(dev, FenceKind::Monitored, n)?,
    })
}

/// The JSON of a median and p99 in microseconds.
pub(crate) fn spread_json((median, p99): Spread) -> serde_json::Value {
    serde_json::json!({"median": micros(median), "p99": micros(p99)})
}

/// Measures both, prints them and their ratios on each clock; returns the figures.
pub(crate) fn run(dev: &Device, n: u32) -> Result<serde_json::Value, BoxError> {
    let f = measure(dev, n)?;
    let line = |what: &str, (median, p99): Spread| {
        println!("signal → waiter's work, {what:58} median {:9.1} µs  p99 {:9.1} µs", micros(median), micros(p99));
    };
    line("GPU-side wait, on the GPU's clock:", f.gpu_side.gpu_clock);
    line("CPU-mediated wait, on the GPU's clock:", f.cpu_mediated.gpu_clock);
    line("GPU-side wait, end to end (incl. the CPU's wake-up):", f.gpu_side.end_to_end);
    line("CPU-mediated wait, end to end (incl. the CPU's wake-up):", f.cpu_mediated.end_to_end);
    let on_gpu = ratio(f.cpu_mediated.gpu_clock.0, f.gpu_side.gpu_clock.0);
    let end_to_end = ratio(f.cpu_mediated.end_to_end.0, f.gpu_side.end_to_end.0);
    println!("CPU-mediated / GPU-side median wait: {on_gpu:.2}x on the GPU's clock, {end_to_end:.2}x end to end");
    Ok(serde_json::json!({
        "gpu_side_wait_us": spread_json(f.gpu_side.end_to_end),
        "cpu_mediated_wait_us": spread_json(f.cpu_mediated.end_to_end),
        "cpu_over_gpu_wait_latency": end_to_end,
        "gpu_clock": {
            "gpu_side_wait_us": spread_json(f.gpu_side.gpu_clock),
            "cpu_mediated_wait_us": spread_json(f.cpu_mediated.gpu_clock),
            "cpu_over_gpu_wait_latency": on_gpu,
        },
    }))
}

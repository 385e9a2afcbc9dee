//! Fence benchmarks: what a native fence costs and what it saves.
//!
//! - Signal → CPU wake: a GPU `FENCE_SIGNAL` submitted on a user-mode queue while another thread
//!   sleeps in `WAIT_FENCE`; the time from submit until the sleeper runs, against the time until
//!   a thread polling the read-only CurrentValue mapping sees the value (the difference is the
//!   interrupt and wake-up path). The same for a monitored fence signaled from a kernel-mode
//!   queue, whose every engine write interrupts.
//! - Interrupts per 1,000 GPU signals, counted by the module (`DEBUG_STATS`), with nobody waiting
//!   (MonitoredValue stays UINT64_MAX: none expected) and with a CPU waiter on every value.
//! - Fence operations per second: CPU signals (`SIGNAL_FENCE`), CPU waits already satisfied
//!   (`WAIT_FENCE` returning at once), and GPU signals executed (one command buffer of signals).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use belfry_umd::{CommandBuffer, Context, Device, Fence, FenceKind, Queue, QueueDesc, QueueMode};

use crate::{percentiles, BoxError};

/// How long any single wait may take before the benchmark gives up.
const LIMIT: Duration = Duration::from_secs(10);
/// Signals per user-mode submission batch: fewer than the ring's entries, so the library never
/// waits for ring space (that wait would itself take fence interrupts).
const BATCH: u32 = 32;

/// Figures of [`run`].
#[derive(Debug)]
pub struct Figures {
    /// Submit → sleeping waiter runs, native fence: median, p99.
    pub native_wake: (Duration, Duration),
    /// Submit → polling thread sees the value, native fence: median, p99.
    pub native_poll: (Duration, Duration),
    /// Submit → sleeping waiter runs, monitored fence: median, p99.
    pub monitored_wake: (Duration, Duration),
    /// Native-fence interrupts per 1,000 GPU signals without a waiter.
    pub interrupts_without_waiter: f64,
    /// Native-fence interrupts per 1,000 GPU signals with a CPU waiter on each value.
    pub interrupts_with_waiter: f64,
    /// `SIGNAL_FENCE` calls per second.
    pub cpu_signals_per_second: f64,
    /// Satisfied `WAIT_FENCE` calls per second.
    pub cpu_waits_per_second: f64,
    /// GPU `FENCE_SIGNAL` packets executed per second.
    pub gpu_signals_per_second: f64,
}

pub(crate) fn user_queue(ctx: &Context) -> Result<Queue, BoxError> {
    let mut q = ctx.create_queue(&QueueDesc::default().with_ring_entries(64))?;
    q.connect_doorbell()?;
    Ok(q)
}

/// A command buffer signaling `fence` to `value` from the GPU: `MONITORED_FENCE_SIGNAL` for a
/// monitored fence, `FENCE_SIGNAL` (unlogged) for a native one.
pub(crate) fn signal_cmds(fence: &Fence, value: u64) -> Result<CommandBuffer, BoxError> {
    let mut cmds = CommandBuffer::new();
    push_signal(&mut cmds, fence, value)?;
    Ok(cmds)
}

/// Appends the GPU signal of `fence` to `value` its kind takes to `cmds`.
pub(crate) fn push_signal(cmds: &mut CommandBuffer, fence: &Fence, value: u64) -> Result<(), BoxError> {
    match fence.kind() {
        FenceKind::Monitored => cmds.monitored_signal(fence.gpu_va(), value)?,
        _ => cmds.fence_signal(fence.gpu_va(), value, None)?,
    };
    Ok(())
}

/// Spins until `fence` reads at least `value` through its mapping.
fn spin_until(fence: &Fence, value: u64) -> Result<(), BoxError> {
    let start = Instant::now();
    while fence.value().unwrap_or(0) < value {
        std::hint::spin_loop();
        if start.elapsed() > LIMIT {
            return Err(format!("fence value {value} not seen in {LIMIT:?}").into());
        }
    }
    Ok(())
}

/// Submit → wake latency of `n` GPU signals of `fence` on `queue`: with `sleep`, a thread
/// blocked in `WAIT_FENCE` notes when it runs; without, a thread polls the mapping.
pub(crate) fn wake_latency(
    queue: &mut Queue,
    fence: &Fence,
    n: u32,
    sleep: bool,
) -> Result<(Duration, Duration), BoxError> {
    let mut samples = Vec::with_capacity(n as usize);
    let base = fence.value().unwrap_or(0);
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let (woke_tx, woke_rx) = mpsc::channel::<Result<Instant, String>>();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<(), BoxError> {
        s.spawn(|| {
            for i in 1..=u64::from(n) {
                if stop.load(Ordering::Relaxed) || ready_tx.send(()).is_err() {
                    return;
                }
                let outcome = if sleep {
                    fence.wait(base + i, LIMIT).map_err(|e| e.to_string())
                } else {
                    spin_until(fence, base + i).map_err(|e| e.to_string())
                };
                if woke_tx.send(outcome.map(|()| Instant::now())).is_err() {
                    return;
                }
            }
        });
        let result = (|| -> Result<(), BoxError> {
            for i in 1..=u64::from(n) {
                ready_rx.recv_timeout(LIMIT)?;
                if sleep {
                    // Let the waiter reach its sleep (registering its wait) before the signal.
                    std::thread::sleep(Duration::from_micros(200));
                }
                let cmds = signal_cmds(fence, base + i)?;
                let start = Instant::now();
                queue.submit(&cmds)?;
                let woke = woke_rx.recv_timeout(LIMIT)??;
                samples.push(woke.saturating_duration_since(start));
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    Ok(percentiles(&mut samples))
}

/// GPU signal (user-mode queue) → a CPU thread sleeping in `WAIT_FENCE` runs: median, p99.
pub(crate) fn sleeping_wake(dev: &Device, n: u32) -> Result<(Duration, Duration), BoxError> {
    let ctx = dev.create_context()?;
    let native = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut queue = user_queue(&ctx)?;
    wake_latency(&mut queue, &native, n, true)
}

/// Native-fence interrupts the module counted.
fn fence_interrupts(dev: &Device) -> Result<u64, BoxError> {
    Ok(dev.debug_stats()?.interrupts_by_cause[1])
}

/// Native-fence interrupts per 1,000 of `n` GPU signals, without (`waiter` false) or with a
/// CPU waiter on every value.
fn interrupts_per_thousand(dev: &Device, ctx: &Context, n: u32, waiter: bool) -> Result<f64, BoxError> {
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut queue = user_queue(ctx)?;
    let before = fence_interrupts(dev)?;
    if waiter {
        wake_latency(&mut queue, &fence, n, true)?;
    } else {
        let mut value = 0;
        while value < u64::from(n) {
            let mut cmds = CommandBuffer::new();
            for _ in 0..BATCH.min(n - value as u32) {
                value += 1;
                cmds.fence_signal(fence.gpu_va(), value, None)?;
            }
            queue.submit(&cmds)?;
            spin_until(&fence, value)?;
        }
    }
    let after = fence_interrupts(dev)?;
    Ok((after - before) as f64 * 1000.0 / f64::from(n))
}

/// Operations per second of `n` repetitions of `op`.
fn rate(n: u32, mut op: impl FnMut(u64) -> Result<(), BoxError>) -> Result<f64, BoxError> {
    let start = Instant::now();
    for i in 1..=u64::from(n) {
        op(i)?;
    }
    Ok(f64::from(n) / start.elapsed().as_secs_f64())
}

/// Runs every fence benchmark with `n` operations per figure.
pub fn run(dev: &Device, n: u32) -> Result<Figures, BoxError> {
    let ctx = dev.create_context()?;
    let native = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut queue = user_queue(&ctx)?;
    let native_wake = wake_latency(&mut queue, &native, n, true)?;
    let native_poll = wake_latency(&mut queue, &native, n, false)?;
    let monitored = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let mut kernel_queue = ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode))?;
    let monitored_wake = wake_latency(&mut kernel_queue, &monitored, n, true)?;

    let interrupts_without_waiter = interrupts_per_thousand(dev, &ctx, n, false)?;
    let interrupts_with_waiter = interrupts_per_thousand(dev, &ctx, n, true)?;

    let cpu = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let cpu_signals_per_second = rate(n, |i| Ok(cpu.signal(i)?))?;
    let cpu_waits_per_second = rate(n, |_| Ok(cpu.wait(1, Duration::ZERO)?))?;
    let gpu = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut cmds = CommandBuffer::new();
    for i in 1..=u64::from(n) {
        cmds.fence_signal(gpu.gpu_va(), i, None)?;
    }
    let slot_bytes = u32::try_from(cmds.len() + 32)?.next_multiple_of(4096);
    let mut gpu_queue = ctx.create_queue(&QueueDesc::default().with_slot_bytes(slot_bytes))?;
    gpu_queue.connect_doorbell()?;
    let start = Instant::now();
    gpu_queue.submit(&cmds)?;
    spin_until(&gpu, u64::from(n))?;
    let gpu_signals_per_second = f64::from(n) / start.elapsed().as_secs_f64();

    Ok(Figures {
        native_wake,
        native_poll,
        monitored_wake,
        interrupts_without_waiter,
        interrupts_with_waiter,
        cpu_signals_per_second,
        cpu_waits_per_second,
        gpu_signals_per_second,
    })
}

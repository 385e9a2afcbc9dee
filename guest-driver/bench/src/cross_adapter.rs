//! Cross-adapter fences (`--peer-device N`): a user-mode queue's write behind a GPU wait
//! (`FENCE_WAIT` in its stream) released by a `FENCE_SIGNAL` of another user-mode queue —
//! on the other device through a cross-adapter fence (the signalling device's interrupt, the
//! module's propagation, the waiting device's notification-only update) or on the same device
//! through a plain DEFAULT fence (the device alone); and the native-fence interrupts per 1,000
//! GPU signals with no waiter anywhere, cross-adapter (MonitoredValue held at 0) against plain.
//! With `--peer-signals-device N` as well (XAD-15; `--device` and N with `--peer-signals`,
//! the `--peer-device` without): the cross-adapter wait without and with peer signals against
//! the same-device wait, and per signal the notifications and interrupts.
//! Each latency sample runs from the signaller's `submit` until the waiter's progress value is
//! visible (polled every 20 µs, as in `fence_wait.rs`).

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use belfry_abi::uapi;
use belfry_umd::{CommandBuffer, Context, Device, Fence, FenceKind, QueueDesc};

use crate::{micros, percentiles, BoxError};

/// The `n` releases of waits on `wait` (in `waiter_ctx`) by signals of `signal` (the same fence,
/// maybe through another device's handle, in `signal_ctx`): median and p99.
pub(crate) fn release_latency(
    waiter_ctx: &Context,
    wait: &Fence,
    signal_ctx: &Context,
    signal: &Fence,
    n: u32,
) -> Result<(Duration, Duration), BoxError> {
    let target = waiter_ctx.alloc(4096, 0)?;
    let mut waiter = waiter_ctx.create_queue(&QueueDesc::default())?;
    let mut signaler = signal_ctx.create_queue(&QueueDesc::default())?;
    let mut samples = Vec::with_capacity(n as usize);
    for value in 1..=u64::from(n) + 20 {
        let mut cmds = CommandBuffer::new();
        cmds.wait_fence(wait, value)?;
        cmds.write32(target.gpu_va(), 0x5eed)?;
        let done = waiter.submit(&cmds)?;
        let mut sig = CommandBuffer::new();
        sig.fence_signal(signal.gpu_va(), value, None)?;
        let start = Instant::now();
        signaler.submit(&sig)?;
        while waiter.completed() < done {
            std::thread::sleep(Duration::from_micros(20));
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("the wait for {value} was not released in 10 s").into());
            }
        }
        if value > 20 {
            samples.push(start.elapsed());
        }
    }
    Ok(percentiles(&mut samples))
}

/// Native-fence interrupts `dev` counted per 1,000 of `n` GPU signals of `fence` with no
/// waiter: ten signals per submission, the completion seen through the fence's mapping (a CPU
/// wait, or the library waiting for ring room, would interrupt by itself).
/// Also the native-fence records (`IRQ_DEBUG`, every form) per 1,000: one interrupt can carry
/// several records.
fn interrupts_per_thousand(
    dev: &Device,
    ctx: &Context,
    fence: &Fence,
    first: u64,
    n: u32,
) -> Result<(f64, f64), BoxError> {
    let records = |d: &Device| -> Result<u64, BoxError> {
        let i = d.irq_debug()?;
        Ok(i.exact_records + i.per_queue_records + i.null_records)
    };
    let mut queue = ctx.create_queue(&QueueDesc::default())?;
    let before = dev.debug_stats()?.interrupts_by_cause[1];
    let records_before = records(dev)?;
    let mut value = first;
    let end = first + u64::from(n);
    while value < end {
        let mut cmds = CommandBuffer::new();
        for _ in 0..10.min(end - value) {
            cmds.fence_signal(fence.gpu_va(), value, None)?;
            value += 1;
        }
        queue.submit(&cmds)?;
        let start = Instant::now();
        while fence.value().unwrap_or(0) < value - 1 {
            std::thread::sleep(Duration::from_micros(20));
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("signal {} not seen in 10 s", value - 1).into());
            }
        }
    }
    // Let the interrupt thread count the last records.
    std::thread::sleep(Duration::from_millis(100));
    let after = dev.debug_stats()?.interrupts_by_cause[1];
    let per_thousand = |d: u64| d as f64 * 1000.0 / f64::from(n);
    Ok((per_thousand(after - before), per_thousand(records(dev)? - records_before)))
}

/// What one cross-adapter pair cost: release latency and, per GPU signal, the notifications
/// (`NOTIFY_FENCE_CHANGED` mailbox round trips) the waiting device received and the guest
/// interrupts each device took.
struct PairCost {
    median: Duration,
    p99: Duration,
    notifications: f64,
    waiter_interrupts: f64,
    signaller_interrupts: f64,
}

/// Every interrupt `dev` counted, whatever its cause.
fn interrupts(dev: &Device) -> Result<u64, BoxError> {
    Ok(dev.debug_stats()?.interrupts_by_cause.iter().sum())
}

/// [`release_latency`] of a cross-adapter fence created on `dev` (the waiter) and opened on
/// `other` (the signaller), with its costs per signal.
fn pair_cost(dev: &Device, other: &Device, n: u32) -> Result<PairCost, BoxError> {
    let (ctx, other_ctx) = (dev.create_context()?, other.create_context()?);
    let cross = ctx.create_fence(FenceKind::Default, uapi::FENCE_CROSS_ADAPTER, 0)?;
    let remote = other_ctx.import_fence(cross.export()?.as_fd())?;
    let (notified, waiter_irqs, signaller_irqs) =
        (cross.xad_info()?.notifications, interrupts(dev)?, interrupts(other)?);
    let (median, p99) = release_latency(&ctx, &cross, &other_ctx, &remote, n)?;
    // Let the interrupt threads count the last signal.
    std::thread::sleep(Duration::from_millis(100));
    let signals = f64::from(n + 20);
    let per_signal = |d: u64| d as f64 / signals;
    Ok(PairCost {
        median,
        p99,
        notifications: per_signal(cross.xad_info()?.notifications - notified),
        waiter_interrupts: per_signal(interrupts(dev)? - waiter_irqs),
        signaller_interrupts: per_signal(interrupts(other)? - signaller_irqs),
    })
}

/// Peer signals (`--peer-signals-device N`, XAD-15): the cross-adapter GPU wait on `dev`
/// released by a GPU signal on `peer` (no peer signals: the module's propagation) and on
/// `partner` (both devices with peer signals: the signalling GPU's payload), against the
/// same-device wait; the ratios to the same-device median, and per signal the notifications
/// and interrupts.
pub(crate) fn run_peer_signals(
    dev: &Device,
    peer: &Device,
    partner: &Device,
    n: u32,
) -> Result<serde_json::Value, BoxError> {
    let ctx = dev.create_context()?;
    let plain = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let (s_med, s_p99) = release_latency(&ctx, &plain, &ctx, &plain, n)?;
    let without = pair_cost(dev, peer, n)?;
    let with = pair_cost(dev, partner, n)?;
    println!(
        "GPU wait released by a GPU signal, same device:                 median {:9.1} µs  p99 {:9.1} µs",
        micros(s_med),
        micros(s_p99)
    );
    let mut json = serde_json::json!({"same_device_release_us": {"median": micros(s_med), "p99": micros(s_p99)}});
    for (name, key, c) in
        [("without peer signals", "without_peer_signals", &without), ("with peer signals", "with_peer_signals", &with)]
    {
        let ratio = c.median.as_secs_f64() / s_med.as_secs_f64();
        println!(
            "cross-adapter, {name:<21}:                 median {:9.1} µs  p99 {:9.1} µs  ({ratio:.2}x same-device; per signal: {:.2} notifications, {:.2} interrupts on the waiter, {:.2} on the signaller)",
            micros(c.median),
            micros(c.p99),
            c.notifications,
            c.waiter_interrupts,
            c.signaller_interrupts
        );
        json[key] = serde_json::json!({
            "release_us": {"median": micros(c.median), "p99": micros(c.p99)},
            "over_same_device": ratio,
            "notifications_per_signal": c.notifications,
            "waiter_interrupts_per_signal": c.waiter_interrupts,
            "signaller_interrupts_per_signal": c.signaller_interrupts,
        });
    }
    Ok(json)
}

/// Measures, prints and returns the figures.
pub(crate) fn run(dev: &Device, peer: &Device, n: u32) -> Result<serde_json::Value, BoxError> {
    let (ctx, peer_ctx) = (dev.create_context()?, peer.create_context()?);
    let cross = ctx.create_fence(FenceKind::Default, uapi::FENCE_CROSS_ADAPTER, 0)?;
    let remote = peer_ctx.import_fence(cross.export()?.as_fd())?;
    let plain = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let (x_med, x_p99) = release_latency(&ctx, &cross, &peer_ctx, &remote, n)?;
    let (s_med, s_p99) = release_latency(&ctx, &plain, &ctx, &plain, n)?;
    println!(
        "signal → waiter's work done, cross-adapter (other device):      median {:9.1} µs  p99 {:9.1} µs",
        micros(x_med),
        micros(x_p99)
    );
    println!(
        "signal → waiter's work done, same device, GPU-side wait:        median {:9.1} µs  p99 {:9.1} µs",
        micros(s_med),
        micros(s_p99)
    );
    let ratio = x_med.as_secs_f64() / s_med.as_secs_f64();
    println!("cross-adapter / same-device median release latency: {ratio:.2}x");
    let base = u64::from(n) + 100;
    let (cross_irqs, cross_records) = interrupts_per_thousand(dev, &ctx, &cross, base, n)?;
    let (plain_irqs, plain_records) = interrupts_per_thousand(dev, &ctx, &plain, base, n)?;
    println!(
        "native-fence interrupts (records) per 1000 GPU signals, no waiter: cross-adapter {cross_irqs:.0} ({cross_records:.0}), same-device fence {plain_irqs:.0} ({plain_records:.0})"
    );
    Ok(serde_json::json!({
        "cross_adapter_release_us": {"median": micros(x_med), "p99": micros(x_p99)},
        "same_device_release_us": {"median": micros(s_med), "p99": micros(s_p99)},
        "cross_over_same_latency": ratio,
        "interrupts_per_1000_signals": {"cross_adapter": cross_irqs, "same_device": plain_irqs},
        "records_per_1000_signals": {"cross_adapter": cross_records, "same_device": plain_records},
    }))
}

/// `--park-seconds S` (with `--peer-signals-device N`): a GPU wait on `dev` for a cross-adapter
/// fence opened on `partner` stays parked for `secs` seconds, then `partner`'s GPU signal
/// releases it. Run under `tools/devcpu/devcpu.py` as the guest's last command, the device
/// processes' CPU while a queue waits on a fence nobody signals is its idle figure.
pub(crate) fn park(dev: &Device, partner: &Device, secs: u64) -> Result<(), BoxError> {
    let (ctx, other_ctx) = (dev.create_context()?, partner.create_context()?);
    let cross = ctx.create_fence(FenceKind::Default, uapi::FENCE_CROSS_ADAPTER, 0)?;
    let remote = other_ctx.import_fence(cross.export()?.as_fd())?;
    let target = ctx.alloc(4096, 0)?;
    let mut waiter = ctx.create_queue(&QueueDesc::default())?;
    let mut signaler = other_ctx.create_queue(&QueueDesc::default())?;
    let mut cmds = CommandBuffer::new();
    cmds.wait_fence(&cross, 1)?;
    cmds.write32(target.gpu_va(), 0x5eed)?;
    let done = waiter.submit(&cmds)?;
    println!("a GPU wait on a cross-adapter fence parked for {secs} s");
    std::thread::sleep(Duration::from_secs(secs));
    let parked = waiter.completed() < done;
    let mut sig = CommandBuffer::new();
    sig.fence_signal(remote.gpu_va(), 1, None)?;
    let start = Instant::now();
    signaler.submit(&sig)?;
    while waiter.completed() < done {
        std::thread::sleep(Duration::from_micros(20));
        if start.elapsed() > Duration::from_secs(10) {
            return Err("the parked wait was not released in 10 s".into());
        }
    }
    println!("parked throughout: {parked}; released {:.1} µs after the signal's submit", micros(start.elapsed()));
    Ok(())
}

//! Native-fence interrupt forms side by side (`--irq-form-devices A,B`): on each device, `n`
//! logged GPU signals (`signal_fence`: the library's log slot, so the signal's own entry is in
//! its queue's log), each of a fresh value with one thread asleep on it — the signal is
//! submitted only once the waiter's MonitoredValue is set, so the signal itself crosses it and
//! the device posts a record of its form (not the catch-up record of a late MonitoredValue
//! update). Around the run, the module's `IRQ_DEBUG` counters: fence CurrentValues the
//! interrupt paths read, log entries read, records, scans and fallbacks; per sample its
//! `WAKE_PATH` stamps: the threaded handler's own time before its wake-up call, and submit →
//! the waiter back in user space, median and p99.

use std::time::Duration;

use std::time::Instant;

use belfry_umd::{CommandBuffer, Device, Fence, FenceKind};

use crate::fences::user_queue;
use crate::waiter::{now_ns, with_sleeping_waiter, LIMIT};
use crate::{percentiles, BoxError};

/// What one device measured.
#[derive(Debug)]
pub(crate) struct FormFigures {
    /// `/dev/belfryN`.
    pub(crate) device: u32,
    /// The device's native-fence record form, from its capabilities.
    pub(crate) form: &'static str,
    /// Signals measured, each with a sleeping waiter.
    pub(crate) signals: u32,
    /// Native-fence records the module counted.
    pub(crate) records: u64,
    /// Of those, NULL (scan-all) records.
    pub(crate) null_records: u64,
    /// Interrupts received meanwhile (all vectors).
    pub(crate) interrupts: u64,
    /// Fence CurrentValues the interrupt paths read to decide releases.
    pub(crate) fence_value_reads: u64,
    /// Fence-log entries read.
    pub(crate) log_entries: u64,
    /// Scans of every wait.
    pub(crate) scans: u64,
    /// Queue-array fallbacks to reading every waited fence.
    pub(crate) fallbacks: u64,
    /// Samples the threaded handler released (with its stamps in order).
    pub(crate) handler_samples: usize,
    /// The threaded handler's start → its wake-up call, µs (median, p99).
    pub(crate) handler_us: (f64, f64),
    /// Submit → the waiter back in user space, µs (median, p99).
    pub(crate) wake_us: (f64, f64),
}

/// The form `dev` advertises.
fn form(dev: &Device) -> &'static str {
    let bits = dev.caps().bits();
    if bits.queue_array_interrupt() {
        "queue-array"
    } else if bits.optimized_interrupt() {
        "per-queue"
    } else if bits.fence_handle_records() {
        "exact"
    } else {
        "scan-all"
    }
}

/// Waits until a CPU wait for `value` on `fence` has set its MonitoredValue.
fn armed(fence: &Fence, value: u64) -> Result<(), BoxError> {
    let start = Instant::now();
    while !fence.info().is_ok_and(|i| i.pending_waits >= 1 && i.monitored_value == value - 1) {
        if start.elapsed() > LIMIT {
            return Err(format!("the wait for {value} never set its MonitoredValue").into());
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// `n` logged signals with a sleeping waiter on device `index`.
pub(crate) fn run(index: u32, n: u32) -> Result<FormFigures, BoxError> {
    let dev = Device::open_index(index)?;
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut queue = user_queue(&ctx)?;
    let base = fence.value().unwrap_or(0);
    let (d0, w0) = (dev.irq_debug()?, dev.wake_path()?);
    let (mut handler, mut wake) = (Vec::new(), Vec::new());
    with_sleeping_waiter(&fence, base, n, |i, woke| {
        armed(&fence, base + i)?;
        let mut cmds = CommandBuffer::new();
        cmds.signal_fence(&fence, base + i)?;
        let start = now_ns();
        queue.submit(&cmds)?;
        let user = woke()?;
        let p = dev.wake_path()?;
        if user >= start {
            wake.push(Duration::from_nanos(user - start));
        }
        if p.thread_ns >= start && p.released_ns >= p.thread_ns && p.released_ns <= user {
            handler.push(Duration::from_nanos(p.released_ns - p.thread_ns));
        }
        Ok(())
    })?;
    let (d1, w1) = (dev.irq_debug()?, dev.wake_path()?);
    let us = |v: &mut Vec<Duration>| {
        if v.is_empty() {
            return (0.0, 0.0);
        }
        let (m, p) = percentiles(v);
        (m.as_secs_f64() * 1e6, p.as_secs_f64() * 1e6)
    };
    let records = |d: &belfry_abi::uapi_debug::IrqDebug| {
        d.exact_records + d.per_queue_records + d.null_records + d.queue_array_records
    };
    Ok(FormFigures {
        device: index,
        form: form(&dev),
        signals: n,
        records: records(&d1) - records(&d0),
        null_records: d1.null_records - d0.null_records,
        interrupts: w1.interrupts - w0.interrupts,
        fence_value_reads: d1.fence_value_reads - d0.fence_value_reads,
        log_entries: d1.log_entries - d0.log_entries,
        scans: d1.scans - d0.scans,
        fallbacks: d1.queue_array_fallbacks - d0.queue_array_fallbacks,
        handler_samples: handler.len(),
        handler_us: us(&mut handler),
        wake_us: us(&mut wake),
    })
}

/// `f` for the `BELFRY-BENCH` line.
pub(crate) fn json(f: &FormFigures) -> serde_json::Value {
    serde_json::json!({
        "device": f.device,
        "form": f.form,
        "signals": f.signals,
        "records": f.records,
        "null_records": f.null_records,
        "handler_samples": f.handler_samples,
        "interrupts": f.interrupts,
        "fence_value_reads": f.fence_value_reads,
        "log_entries": f.log_entries,
        "scans": f.scans,
        "fallbacks": f.fallbacks,
        "handler_us": [f.handler_us.0, f.handler_us.1],
        "wake_us": [f.wake_us.0, f.wake_us.1],
    })
}

/// Prints `f` as one table row: per 1,000 signals, and per interrupt.
pub(crate) fn print(f: &FormFigures) {
    let per_k = |x: u64| x as f64 * 1000.0 / f64::from(f.signals.max(1));
    let per_irq = |x: u64| x as f64 / f.interrupts.max(1) as f64;
    println!(
        "| {} ({}) | {:.0} | {:.0} ({:.0} NULL) | {:.0} ({:.2}) | {:.0} ({:.2}) | {:.0} / {:.0} | {:.1} / {:.1} µs ({}) | {:.1} / {:.1} µs |",
        f.form,
        f.device,
        per_k(f.interrupts),
        per_k(f.records),
        per_k(f.null_records),
        per_k(f.fence_value_reads),
        per_irq(f.fence_value_reads),
        per_k(f.log_entries),
        per_irq(f.log_entries),
        per_k(f.scans),
        per_k(f.fallbacks),
        f.handler_us.0,
        f.handler_us.1,
        f.handler_samples,
        f.wake_us.0,
        f.wake_us.1,
    );
}

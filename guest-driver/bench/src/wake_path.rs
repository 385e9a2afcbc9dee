//! Where a sleeping CPU waiter's wake-up goes: the GPU signal → sleeping waiter
//! latency split into the guest-side stages the module stamps (`WAKE_PATH`), all on
//! `CLOCK_MONOTONIC`:
//!
//! 1. submit → hard interrupt handler consumed the fence record: the ring reaching the device,
//!    the command processor and engine running the signal, the interrupt eventfd, QEMU's
//!    injection into the guest;
//! 2. hard handler → threaded handler (when the release needed the thread);
//! 3. the releasing handler → the waiter running again in the kernel, split in the handler's
//!    own work before its wake-up call (`released_ns`) and the wake-up call → the waiter
//!    running (the scheduler, and on another vCPU its wake-up);
//! 4. the waiter in the kernel → back in user space (the syscall return; the MonitoredValue
//!    update is the releasing path's, not the waiter's).
//!
//! Each sample is one signal of a fresh value with one thread asleep on it, as
//! `fences::sleeping_wake` measures; stages are medians and p99s over the samples.

use std::time::Duration;

use belfry_umd::{Device, FenceKind};

use crate::fences::{signal_cmds, user_queue};
use crate::waiter::{now_ns, with_sleeping_waiter};
use crate::{percentiles, BoxError};

/// Stage names, in order.
pub(crate) const STAGES: [&str; 9] = [
    "submit → hard IRQ (device + interrupt delivery)",
    "hard IRQ → threaded handler",
    "handler → waiter running (handler work, scheduler)",
    "waiter in kernel → user (return)",
    "total",
    "  of which handler start → its wake-up call",
    "  of which wake-up call → waiter running",
    "    that, the waiter on the handler's CPU",
    "    that, the waiter on another CPU",
];

/// What [`run`] measured.
pub(crate) struct WakePath {
    /// Per stage of [`STAGES`]: (median, p99).
    pub(crate) stages: Vec<(Duration, Duration)>,
    /// Samples the threaded handler released.
    pub(crate) threaded: u32,
    /// Of those, samples whose waiter woke on the handler's CPU.
    pub(crate) same_cpu: u32,
}

/// Per stage: (median, p99) over `n` samples, and how many samples used the threaded handler.
pub(crate) fn run(dev: &Device, n: u32) -> Result<WakePath, BoxError> {
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut queue = user_queue(&ctx)?;
    let base = fence.value().unwrap_or(0);
    let mut stages: Vec<Vec<Duration>> = vec![Vec::new(); STAGES.len()];
    let mut threaded = 0;
    let mut same_cpu = 0;
    with_sleeping_waiter(&fence, base, n, |i, woke| {
        // Let the waiter reach its sleep before the signal.
        std::thread::sleep(Duration::from_micros(200));
        let cmds = signal_cmds(&fence, base + i)?;
        let start = now_ns();
        queue.submit(&cmds)?;
        let user = woke()?;
        let p = dev.wake_path()?;
        if p.hard_irq_ns < start || p.woken_ns < p.hard_irq_ns || user < p.woken_ns {
            return Ok(()); // a sample the stamps do not order (the waiter did not sleep)
        }
        let used_thread = p.thread_ns >= p.hard_irq_ns && p.thread_ns <= p.woken_ns;
        let releaser = if used_thread {
            threaded += 1;
            stages[1].push(Duration::from_nanos(p.thread_ns - p.hard_irq_ns));
            if p.released_ns >= p.thread_ns && p.released_ns <= p.woken_ns {
                let wake = Duration::from_nanos(p.woken_ns - p.released_ns);
                stages[5].push(Duration::from_nanos(p.released_ns - p.thread_ns));
                stages[6].push(wake);
                stages[if p.thread_cpu == p.woken_cpu { 7 } else { 8 }].push(wake);
            }
            if p.thread_cpu == p.woken_cpu {
                same_cpu += 1;
            }
            p.thread_ns
        } else {
            p.hard_irq_ns
        };
        stages[0].push(Duration::from_nanos(p.hard_irq_ns - start));
        stages[2].push(Duration::from_nanos(p.woken_ns - releaser));
        stages[3].push(Duration::from_nanos(user - p.woken_ns));
        stages[4].push(Duration::from_nanos(user - start));
        Ok(())
    })?;
    let figures = stages
        .iter_mut()
        .map(|s| if s.is_empty() { (Duration::ZERO, Duration::ZERO) } else { percentiles(s) })
        .collect();
    Ok(WakePath { stages: figures, threaded, same_cpu })
}

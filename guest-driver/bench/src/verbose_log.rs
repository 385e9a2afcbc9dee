//! Verbose fence logging's cost (LOG-20, `--verbose-log-only`): the same user-mode submission
//! — a logged GPU wait on a fence already reached, then the progress signal — from `submit`
//! until the CPU sees the progress value, with verbose logging off and then on (one more
//! wait-log entry per wait, `WAIT_BEGIN`), median and p99 over N submissions each, and their
//! ratio. Turning the switch needs `CAP_PERFMON` or `CAP_SYS_ADMIN` (the guest runs as root);
//! it is turned off again at the end.

use std::time::Duration;

use belfry_umd::{CommandBuffer, Device, FenceKind, QueueDesc};

use crate::BoxError;

/// Median and p99 of `n` submissions of a logged wait with verbose logging `on`.
fn latency(dev: &Device, on: bool, n: u32) -> Result<(Duration, Duration), BoxError> {
    dev.set_verbose_logging(on)?;
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    fence.signal(1)?;
    let mut queue = ctx.create_queue(&QueueDesc::default())?;
    queue.connect_doorbell()?;
    let mut cmds = CommandBuffer::new();
    cmds.wait_fence(&fence, 1)?;
    crate::timed_submissions(&mut queue, &cmds, n, &format!("verbose {on}"))
}

/// Prints the figures; verbose logging is off afterwards.
pub fn run(dev: &Device, n: u32) -> Result<(), BoxError> {
    let off = latency(dev, false, n);
    let on = latency(dev, true, n);
    dev.set_verbose_logging(false)?;
    let ((off_med, off_p99), (on_med, on_p99)) = (off?, on?);
    for (name, med, p99) in [("off", off_med, off_p99), ("on", on_med, on_p99)] {
        println!(
            "logged wait + progress signal, user-mode, verbose logging {name:3}: median {:9.1} µs  p99 {:9.1} µs",
            crate::micros(med),
            crate::micros(p99)
        );
    }
    println!("on / off median: {:.2}x", on_med.as_secs_f64() / off_med.as_secs_f64());
    Ok(())
}

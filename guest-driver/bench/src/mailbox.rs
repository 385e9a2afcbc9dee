//! The module's mailbox round trip by stage, from its `MAILBOX_TIMING` stamps, and
//! the bounded spin of CPU waits (`wait_spin_us`) against none.
//!
//! Mailbox: each sample is one `SIGNAL_FENCE` of a native fence nobody waits on, which is one
//! `UPDATE_CURRENT_VALUES` command; its stamps split it into the submission's guest cost (the
//! ring entry and the store of its tail, or the three BAR0 writes), the device and the
//! completion interrupt (written → hard handler), and the sender's wake-up (hard handler →
//! the sending thread running). The path (ring or BAR0) is the module's, as it reports it.
//!
//! Spin: a user-mode queue's `FENCE_SIGNAL` submitted, then a CPU wait on that value at once;
//! submit → the wait returned, with the module's spin off and at the values given, and how many
//! waits the spin ended (`WAKE_PATH.spin_hits`).

use std::time::{Duration, Instant};

use belfry_abi::mailbox::Opcode;
use belfry_abi::uapi;
use belfry_umd::{Device, FenceKind};

use crate::fences::{signal_cmds, user_queue};
use crate::{percentiles, BoxError};

/// The module parameter the spin figures change (restored afterwards).
const SPIN_PARAM: &str = "/sys/module/belfry/parameters/wait_spin_us";

/// Stage names of the mailbox round trip, in order.
pub(crate) const STAGES: [&str; 4] = [
    "submission writes (guest cost)",
    "written → completion interrupt (device, MSI-X)",
    "interrupt → sender running again",
    "round trip (block written → sender running)",
];

/// The module's mailbox path, by name.
pub(crate) fn path_name(path: u32) -> &'static str {
    if path == uapi::MAILBOX_PATH_RING {
        "command ring"
    } else {
        "BAR0 mailbox"
    }
}

/// Per stage (median, p99) over `n` commands, and the path the module used.
pub(crate) fn round_trip(dev: &Device, n: u32) -> Result<(Vec<(Duration, Duration)>, u32), BoxError> {
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut stages: Vec<Vec<Duration>> = vec![Vec::new(); STAGES.len()];
    let mut path = u32::MAX;
    for i in 1..=u64::from(n) {
        fence.signal(i)?;
        let t = dev.mailbox_timing()?;
        let ordered = t.submit_ns <= t.written_ns && t.written_ns <= t.irq_ns && t.irq_ns <= t.done_ns;
        if t.opcode != Opcode::UpdateCurrentValues as u32 || !ordered {
            continue; // another command came last (or the completion was seen by a poll)
        }
        path = t.path;
        let d = Duration::from_nanos;
        stages[0].push(d(t.written_ns - t.submit_ns));
        stages[1].push(d(t.irq_ns - t.written_ns));
        stages[2].push(d(t.done_ns - t.irq_ns));
        stages[3].push(d(t.done_ns - t.submit_ns));
    }
    let figures = stages
        .iter_mut()
        .map(|s| if s.is_empty() { (Duration::ZERO, Duration::ZERO) } else { percentiles(s) })
        .collect();
    Ok((figures, path))
}

/// Submit → a CPU wait issued right after returns, (median, p99) over `n`, and the waits the
/// spin ended, with `wait_spin_us` set to `spin_us`.
fn submit_then_wait(dev: &Device, n: u32, spin_us: u32) -> Result<((Duration, Duration), u32), BoxError> {
    std::fs::write(SPIN_PARAM, spin_us.to_string())?;
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut queue = user_queue(&ctx)?;
    let hits_before = dev.wake_path()?.spin_hits;
    let mut samples = Vec::new();
    for i in 1..=u64::from(n) {
        let cmds = signal_cmds(&fence, i)?;
        let start = Instant::now();
        queue.submit(&cmds)?;
        fence.wait(i, Duration::from_secs(10))?;
        samples.push(start.elapsed());
    }
    let hits = dev.wake_path()?.spin_hits.wrapping_sub(hits_before);
    Ok((percentiles(&mut samples), hits))
}

/// One spin figure: `wait_spin_us`, submit → wait returned (median, p99), spin hits.
pub(crate) type SpinFigure = (u32, (Duration, Duration), u32);

/// [`submit_then_wait`] for each of `spins` (µs), the parameter restored afterwards.
pub(crate) fn spin(dev: &Device, n: u32, spins: &[u32]) -> Result<Vec<SpinFigure>, BoxError> {
    let saved = std::fs::read_to_string(SPIN_PARAM)?;
    let out = spins
        .iter()
        .map(|&us| submit_then_wait(dev, n, us).map(|(lat, hits)| (us, lat, hits)))
        .collect::<Result<Vec<_>, _>>();
    std::fs::write(SPIN_PARAM, saved.trim())?;
    out
}

//! `belfry-trace stats`: per device, submission latency per queue (doorbell or kick → pickup →
//! completion, median and p99), packets by opcode, interrupts by cause, faults, mailbox
//! commands by opcode with their latency, and per fence its signals, waits and interrupts.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::decode;
use crate::model::Model;
use crate::record::{Event, FenceSource};
use crate::run::{DeviceTrace, Run};
use crate::timeline::Operation;

/// How many of the slowest submissions are listed.
pub const SLOWEST: usize = 5;

/// The `p`-th percentile (nearest rank) of sorted `v`.
pub fn percentile(sorted: &[u64], p: u32) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (u64::from(p) * sorted.len() as u64).div_ceil(100).max(1) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

fn us(ns: Option<u64>) -> String {
    match ns {
        Some(ns) => format!("{:.1}", ns as f64 / 1000.0),
        None => "-".into(),
    }
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

/// Per-fence counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FenceStats {
    /// Engine signals (`fence_decision` source `signal`).
    pub signals: u64,
    /// MonitoredValue updates decided by the CMP.
    pub monitored_updates: u64,
    /// Decisions that interrupted the CPU.
    pub interrupts: u64,
    /// Interrupt records naming the fence.
    pub records: u64,
    /// Guest: logged waits unblocked.
    pub waits: u64,
    /// Guest: logged signals executed.
    pub logged_signals: u64,
}

/// Fence statistics of one device (guest columns from the timeline of the same index).
pub fn fences(d: &DeviceTrace, run: &Run) -> BTreeMap<u64, FenceStats> {
    let mut by: BTreeMap<u64, FenceStats> = BTreeMap::new();
    for r in &d.records {
        match &r.event {
            Event::FenceDecision { source, handle, interrupt, .. } => {
                let f = by.entry(*handle).or_default();
                if *source == FenceSource::Signal {
                    f.signals += 1;
                } else {
                    f.monitored_updates += 1;
                }
                f.interrupts += u64::from(*interrupt);
            }
            Event::Record { fence, .. } if *fence != 0 => by.entry(*fence).or_default().records += 1,
            _ => {}
        }
    }
    for e in run.guest.iter().filter(|e| e.device == d.index) {
        match e.operation {
            Operation::WaitUnblocked => by.entry(e.fence).or_default().waits += 1,
            Operation::SignalExecuted => by.entry(e.fence).or_default().logged_signals += 1,
            _ => {}
        }
    }
    by
}

/// The statistics report of `run`.
pub fn report(run: &Run, models: &[Model]) -> String {
    let mut o = String::new();
    for (d, m) in run.devices.iter().zip(models) {
        device(&mut o, run, d, m);
    }
    o
}

fn device(o: &mut String, run: &Run, d: &DeviceTrace, m: &Model) {
    let span = d.records.last().map_or(0, |r| r.t_ns);
    let _ = writeln!(
        o,
        "== {} (device {}): {} records, format v{}, {:.3} s{}",
        d.name,
        d.index,
        d.records.len(),
        d.version(),
        span as f64 / 1e9,
        d.header.as_ref().map(|h| format!(", level {}", h.level)).unwrap_or_default()
    );
    let guest: Vec<_> = run.guest.iter().filter(|e| e.device == d.index).collect();
    if !guest.is_empty() {
        let cpu = guest.iter().filter(|e| e.operation.cpu_timed()).count();
        let placed = match crate::timeline::cpu_offset(&run.guest, d.index, |g| d.gpu_to_trace(g)) {
            Some(o) => format!("guest CPU clock + {:.6} s by the causal bound", o as f64 / 1e9),
            None => "guest CPU clock from the module's bind (its last SELF_TEST before the timeline)".into(),
        };
        let _ = writeln!(
            o,
            "   module timeline: {} event(s), {} on the GPU clock (via the clock record), {cpu} on the {placed}",
            guest.len(),
            guest.len() - cpu
        );
    }
    for r in &d.records {
        if let Event::Dropped { reason, records, by_event, .. } = &r.event {
            let why = crate::show::dropped_reason(reason);
            let _ = writeln!(o, "   {why}: {records} event(s) not written: {by_event:?}");
        }
    }

    let path = if m.boundaries {
        "doorbell or KICK_QUEUE → buffer fetched → buffer ended"
    } else {
        "doorbell or KICK_QUEUE → first packet → first signal or run end; inferred: no buffer boundaries in the trace"
    };
    let _ = writeln!(o, "\nSubmissions per queue ({path}), µs");
    let _ = writeln!(
        o,
        "  {:>5} {:>4} {:>12} {:>6} {:>9} {:>9} {:>10} {:>10} {:>7}",
        "queue", "ctx", "engine", "subs", "pickup50", "pickup99", "complete50", "complete99", "no-pick"
    );
    // Queue ids are reused by later contexts: one row per (queue, context).
    let mut by_queue: BTreeMap<(u32, Option<u32>), Vec<&crate::model::Submission>> = BTreeMap::new();
    for s in &m.submissions {
        by_queue.entry((s.queue, s.context)).or_default().push(s);
    }
    for ((q, context), subs) in &by_queue {
        let info = m.queues.get(q).cloned().unwrap_or_default();
        let pickup = sorted(subs.iter().filter_map(|s| s.pickup.map(|p| p.1.saturating_sub(s.at_ns))).collect());
        let complete = sorted(subs.iter().filter_map(|s| s.complete.map(|c| c.1.saturating_sub(s.at_ns))).collect());
        let _ = writeln!(
            o,
            "  {:>5} {:>4} {:>12} {:>6} {:>9} {:>9} {:>10} {:>10} {:>7}",
            q,
            context.map_or("-".into(), |c| c.to_string()),
            info.engine.map_or("-".into(), decode::engine_label),
            subs.len(),
            us(percentile(&pickup, 50)),
            us(percentile(&pickup, 99)),
            us(percentile(&complete, 50)),
            us(percentile(&complete, 99)),
            subs.len() - pickup.len(),
        );
    }
    let unmapped = m.kicked.values().filter(|q| q.is_empty()).count();
    if unmapped > 0 && !by_queue.is_empty() {
        let _ = writeln!(o, "  {unmapped} doorbell write(s) found no queue connected to their doorbell");
    }
    if by_queue.is_empty() {
        let doorbells = d.records.iter().filter(|r| matches!(r.event, Event::Doorbell { .. })).count();
        let _ = writeln!(
            o,
            "  (none mapped to a queue: {doorbells} doorbell write(s); format v2 traces map them through CONNECT_DOORBELL)"
        );
    }

    let mut slowest: Vec<&crate::model::Submission> = m.submissions.iter().filter(|s| s.complete.is_some()).collect();
    slowest.sort_by_key(|s| std::cmp::Reverse(s.complete.map_or(0, |c| c.1.saturating_sub(s.at_ns))));
    if !slowest.is_empty() {
        let _ = writeln!(o, "\nSlowest submissions (run seconds: submitted, picked up, completed)");
    }
    for s in slowest.iter().take(SLOWEST) {
        let at = |ns: u64| format!("{:.6}", d.run_ns(ns) as f64 / 1e9);
        let via = match s.via {
            crate::model::Via::Doorbell(i, v) => format!("doorbell {i}={v}"),
            crate::model::Via::Kick(seq) => format!("KICK_QUEUE seq {seq}"),
        };
        let _ = writeln!(
            o,
            "  queue {} ctx {}: {via} at {}, picked up {}, completed {} ({} µs)",
            s.queue,
            s.context.map_or("-".into(), |c| c.to_string()),
            at(s.at_ns),
            s.pickup.map_or("-".into(), |p| at(p.1)),
            s.complete.map_or("-".into(), |c| at(c.1)),
            s.complete.map_or(0, |c| c.1.saturating_sub(s.at_ns)) / 1000
        );
    }

    let mut packets: BTreeMap<&str, u64> = BTreeMap::new();
    let mut interrupts: BTreeMap<(String, &str), u64> = BTreeMap::new();
    let mut faults: BTreeMap<(u32, u32, &str), (u64, u64)> = BTreeMap::new();
    let mut picks: BTreeMap<(u32, &str), u64> = BTreeMap::new();
    let mut passed_over: BTreeMap<(u32, &str), u64> = BTreeMap::new();
    for r in &d.records {
        match &r.event {
            Event::Schedule { engine, why, others, .. } => {
                *picks.entry((*engine, why.name())).or_default() += 1;
                for (_, reason) in others {
                    *passed_over.entry((*engine, reason.name())).or_default() += 1;
                }
            }
            Event::Packet { opcode, .. } => *packets.entry(opcode).or_default() += 1,
            Event::Interrupt { cause, delivery, .. } => {
                *interrupts.entry((decode::cause_names(*cause), delivery.name())).or_default() += 1;
            }
            Event::Fault { context, queue, reason, address, .. } => {
                faults.entry((*context, *queue, reason)).or_insert((0, *address)).0 += 1;
            }
            _ => {}
        }
    }
    let _ = writeln!(o, "\nPackets by opcode");
    for (op, n) in &packets {
        let _ = writeln!(o, "  {op:<24} {n:>9}");
    }
    if packets.is_empty() {
        let _ = writeln!(o, "  (none traced: level {})", d.header.as_ref().map_or("?", |h| h.level.name()));
    }
    if !picks.is_empty() {
        let _ = writeln!(o, "\nScheduler picks by engine and why (and queues with work passed over)");
        for ((engine, why), n) in &picks {
            let _ = writeln!(o, "  {:<12} {why:<24} {n:>9}", decode::engine_label(*engine));
        }
        for ((engine, reason), n) in &passed_over {
            let _ = writeln!(o, "  {:<12} not run: {reason:<15} {n:>9}", decode::engine_label(*engine));
        }
    }
    let _ = writeln!(o, "\nInterrupts by cause");
    for ((cause, delivery), n) in &interrupts {
        let _ = writeln!(o, "  {cause:<24} {delivery:<12} {n:>9}");
    }
    let _ = writeln!(o, "\nFaults");
    for ((context, queue, reason), (n, address)) in &faults {
        let _ = writeln!(o, "  context {context} queue {queue}: {reason} ×{n} (first at {address:#x})");
    }
    if faults.is_empty() {
        let _ = writeln!(o, "  none");
    }

    let _ = writeln!(o, "\nMailbox commands, µs from submit to completion");
    let _ = writeln!(o, "  {:<26} {:>6} {:>6} {:>9} {:>9} {:>9}", "opcode", "count", "failed", "p50", "p99", "max");
    let mut cmds: BTreeMap<&str, (u64, u64, Vec<u64>)> = BTreeMap::new();
    for c in &m.commands {
        let e = cmds.entry(c.opcode.as_deref().unwrap_or("(unknown)")).or_default();
        e.0 += 1;
        e.1 += u64::from(c.status.as_deref().is_some_and(|s| s != "OK"));
        if let Some(ns) = c.submit.zip(c.complete).and_then(|((_, a), (_, b))| b.checked_sub(a)) {
            e.2.push(ns);
        }
    }
    for (op, (n, failed, lat)) in cmds {
        let lat = sorted(lat);
        let _ = writeln!(
            o,
            "  {op:<26} {n:>6} {failed:>6} {:>9} {:>9} {:>9}",
            us(percentile(&lat, 50)),
            us(percentile(&lat, 99)),
            us(lat.last().copied())
        );
    }

    let fences = fences(d, run);
    let _ = writeln!(o, "\nFences (guest columns from the module's timeline)");
    let _ = writeln!(
        o,
        "  {:>18} {:>8} {:>9} {:>10} {:>8} {:>11} {:>11}",
        "handle", "signals", "mon.upd", "interrupts", "records", "guest-waits", "guest-sigs"
    );
    for (h, f) in &fences {
        let _ = writeln!(
            o,
            "  {:>18} {:>8} {:>9} {:>10} {:>8} {:>11} {:>11}",
            format!("{h:#x}"),
            f.signals,
            f.monitored_updates,
            f.interrupts,
            f.records,
            f.waits,
            f.logged_signals
        );
    }
    let _ = writeln!(o);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), Some(50));
        assert_eq!(percentile(&v, 99), Some(99));
        assert_eq!(percentile(&[7], 99), Some(7));
        assert_eq!(percentile(&[1, 2], 50), Some(1));
        assert_eq!(percentile(&[], 50), None);
    }
}

//! The guest's side: the kernel module's fence timeline (`timeline.txt` in a run directory, as
//! printed by `belfry-timeline`), and how its times are placed on the device trace's clock.
//!
//! GPU times (`observed_gpu`, `end_gpu`) are the device's timestamp, which the trace's `clock`
//! record ties to its `t_ns`. CPU times (`cpu_ns`, kernel-mode submissions queuing a logged
//! operation) are the guest's clock since the device was bound: the offset to the trace clock
//! is bounded by causality — an operation is queued before the device executes it — so each
//! `*_queued` event with its executed counterpart (same queue and log index) gives
//! `offset <= host(end_gpu) - cpu_ns`, and the smallest such bound is used (the tightest pair
//! lands on its execution; every other queued event lands before its own).

use std::io::BufRead;
use std::path::Path;

use crate::lines::{Line, Lines, Skipped, MAX_LINE_BYTES};
use crate::record::{signed, MAX_DEVICE_INDEX, MAX_TIME_NS};

/// A timeline operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// A kernel-mode submission queued a logged wait.
    WaitQueued,
    /// A kernel-mode submission queued a logged signal.
    SignalQueued,
    /// The engine executed a logged signal.
    SignalExecuted,
    /// A logged wait was unblocked.
    WaitUnblocked,
    /// Verbose fence logging (LOG-20): the engine first met a logged wait (GPU time).
    WaitBegin,
    /// Log entries were lost.
    Lost,
    /// A guest thread started a CPU wait (thread events: `log_index` is the tid,
    /// `observed_gpu` the pid, `end_gpu` the detail).
    CpuWaitStart,
    /// A CPU wait ended (`end_gpu`: 0 reached, else the errno).
    CpuWaitEnd,
    /// A CPU signal.
    CpuSignal,
    /// An eventfd wait completed.
    EventfdSignaled,
    /// A doorbell's status changed (`value`: the status, `end_gpu`: 1 connect, 2 disconnect,
    /// 3 victimized, 4 aborted).
    Doorbell,
    /// A kernel-mode submission (`fence`: the progress fence, `value` its value).
    Submit,
    /// Something newer.
    Unknown,
}

impl Operation {
    fn parse(s: &str) -> Operation {
        match s {
            "wait-queued" => Operation::WaitQueued,
            "signal-queued" => Operation::SignalQueued,
            "signal-executed" => Operation::SignalExecuted,
            "wait-unblocked" => Operation::WaitUnblocked,
            "wait-begin" => Operation::WaitBegin,
            "lost" => Operation::Lost,
            "cpu-wait-start" => Operation::CpuWaitStart,
            "cpu-wait-end" => Operation::CpuWaitEnd,
            "cpu-signal" => Operation::CpuSignal,
            "eventfd-signaled" => Operation::EventfdSignaled,
            "doorbell" => Operation::Doorbell,
            "submit" => Operation::Submit,
            _ => Operation::Unknown,
        }
    }

    /// The name `belfry-timeline` prints.
    pub fn name(self) -> &'static str {
        match self {
            Operation::WaitQueued => "wait-queued",
            Operation::SignalQueued => "signal-queued",
            Operation::SignalExecuted => "signal-executed",
            Operation::WaitUnblocked => "wait-unblocked",
            Operation::WaitBegin => "wait-begin",
            Operation::Lost => "lost",
            Operation::CpuWaitStart => "cpu-wait-start",
            Operation::CpuWaitEnd => "cpu-wait-end",
            Operation::CpuSignal => "cpu-signal",
            Operation::EventfdSignaled => "eventfd-signaled",
            Operation::Doorbell => "doorbell",
            Operation::Submit => "submit",
            Operation::Unknown => "unknown",
        }
    }

    /// Whether the event is timed by the guest CPU clock (else by the GPU clock).
    pub fn cpu_timed(self) -> bool {
        matches!(self, Operation::WaitQueued | Operation::SignalQueued) || self.is_thread()
    }

    /// Whether it is a thread event (what a guest thread did; `GuestEvent::thread`).
    pub fn is_thread(self) -> bool {
        matches!(
            self,
            Operation::CpuWaitStart
                | Operation::CpuWaitEnd
                | Operation::CpuSignal
                | Operation::EventfdSignaled
                | Operation::Doorbell
                | Operation::Submit
        )
    }
}

/// One timeline event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestEvent {
    /// Device index (`/dev/belfry<I>`).
    pub device: usize,
    /// Sequence number.
    pub seq: u64,
    /// Hardware queue.
    pub queue: u32,
    /// Operation.
    pub operation: Operation,
    /// Fence handle as logged.
    pub fence: u64,
    /// Fence value.
    pub value: u64,
    /// Free-running log index.
    pub log_index: u32,
    /// Guest CPU time (queued events), else 0.
    pub cpu_ns: u64,
    /// GPU time a wait was first seen, else 0.
    pub observed_gpu: u64,
    /// GPU time of the signal or unblock, else 0.
    pub end_gpu: u64,
}

impl GuestEvent {
    /// `(pid, tid)` of the guest thread of a thread event.
    pub fn thread(&self) -> Option<(u32, u32)> {
        self.operation.is_thread().then(|| (u32::try_from(self.observed_gpu).unwrap_or(0), self.log_index))
    }

    /// The queue it concerns (thread events may name none).
    pub fn queue(&self) -> Option<u32> {
        (self.queue != belfry_abi::irq::NONE).then_some(self.queue)
    }

    /// The GPU time of the event, if it has one.
    pub fn gpu_time(&self) -> Option<u64> {
        (!self.operation.cpu_timed() && self.end_gpu != 0).then_some(self.end_gpu)
    }
}

fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A timeline as read: its events, and the lines that were not events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The events, in file order.
    pub events: Vec<GuestEvent>,
    /// Lines that were neither events nor comments.
    pub skipped: Skipped,
}

/// One event line: `seq queue operation fence value log_index cpu_ns observed_gpu end_gpu`
/// (numbers decimal or `0x` hex; times up to [`MAX_TIME_NS`]).
fn parse_event(device: usize, line: &str) -> Result<GuestEvent, String> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 9 {
        return Err(format!("{} field(s), an event has 9", f.len()));
    }
    let field = |i: usize, name: &str| number(f[i]).ok_or_else(|| format!("{name} {:?} is not a number", f[i]));
    let narrow = |i: usize, name: &str| {
        u32::try_from(field(i, name)?).map_err(|_| format!("{name} {} does not fit 32 bits", f[i]))
    };
    let time = |i: usize, name: &str| {
        let ns = field(i, name)?;
        if ns > MAX_TIME_NS {
            return Err(format!("{name} {ns} is over the largest time a trace holds ({MAX_TIME_NS} ns)"));
        }
        Ok(ns)
    };
    Ok(GuestEvent {
        device,
        seq: field(0, "seq")?,
        queue: narrow(1, "queue")?,
        operation: Operation::parse(f[2]),
        fence: field(3, "fence")?,
        value: field(4, "value")?,
        log_index: narrow(5, "log_index")?,
        cpu_ns: time(6, "cpu_ns")?,
        observed_gpu: field(7, "observed_gpu")?,
        end_gpu: time(8, "end_gpu")?,
    })
}

/// Reads `belfry-timeline` output line by line: `# /dev/belfry<I>: …` starts device I's
/// section; each other line is an event (see [`parse_event`]).
pub fn parse(input: impl BufRead) -> std::io::Result<Timeline> {
    let mut device = 0;
    let mut timeline = Timeline::default();
    let mut lines = Lines::new(input, 1);
    while let Some(numbered) = lines.next_line()? {
        let line = match numbered.line {
            Line::Text(text) => text,
            Line::TooLong(length) => {
                timeline
                    .skipped
                    .note(numbered.number, format!("a line of {length} bytes, over the {MAX_LINE_BYTES}-byte limit"));
                continue;
            }
        };
        if let Some(comment) = line.strip_prefix('#') {
            let path = comment.trim().split(':').next().unwrap_or("");
            if let Some(rest) = path.strip_prefix("/dev/belfry") {
                if let Ok(i) = rest.parse::<usize>() {
                    if i <= MAX_DEVICE_INDEX {
                        device = i;
                    }
                }
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        match parse_event(device, &line) {
            Ok(e) => timeline.events.push(e),
            Err(why) => timeline.skipped.note(numbered.number, why),
        }
    }
    Ok(timeline)
}

/// Reads and parses a timeline file.
pub fn read(path: &Path) -> std::io::Result<Timeline> {
    parse(std::io::BufReader::new(std::fs::File::open(path)?))
}

/// The offset that puts device `device`'s guest CPU times on its trace clock
/// (`trace_ns = cpu_ns + offset`), from the causality bound described in the module docs;
/// `None` when no queued event has an executed counterpart. `gpu_to_trace` maps GPU times.
pub fn cpu_offset(events: &[GuestEvent], device: usize, gpu_to_trace: impl Fn(u64) -> i64) -> Option<i64> {
    let mut mine: Vec<&GuestEvent> = events.iter().filter(|e| e.device == device).collect();
    mine.sort_by_key(|e| e.seq);
    // Queue ids and log indexes are reused over a run: a queued operation's counterpart is the
    // next executed one (by sequence) of the same queue, log index, fence and value.
    let mut open: std::collections::HashMap<(u32, u32, u64, u64, Operation), u64> = std::collections::HashMap::new();
    let mut best: Option<i64> = None;
    for e in mine {
        let key = |op| (e.queue, e.log_index, e.fence, e.value, op);
        match e.operation {
            Operation::SignalQueued | Operation::WaitQueued if e.cpu_ns != 0 => {
                open.insert(key(e.operation), e.cpu_ns);
            }
            Operation::SignalExecuted | Operation::WaitUnblocked => {
                let queued = if e.operation == Operation::SignalExecuted {
                    Operation::SignalQueued
                } else {
                    Operation::WaitQueued
                };
                if let (Some(cpu), Some(gpu)) = (open.remove(&key(queued)), e.gpu_time()) {
                    let Some(bound) = gpu_to_trace(gpu).checked_sub(signed(cpu)) else { continue };
                    best = Some(best.map_or(bound, |b| b.min(bound)));
                }
            }
            _ => {}
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# /dev/belfry1: 3 event(s), 0 older one(s) no longer kept
# seq queue operation fence value log_index cpu_ns observed_gpu end_gpu
1 4 signal-queued 0x10 5 0 1000 0 0
2 4 signal-executed 0x10 5 0 0 0 9000
3 4 signal-queued 0x10 6 1 2000 0 0
4 4 signal-executed 0x10 6 1 0 0 9500
5 4 signal-queued 0x10 7 0 50000 0 0
6 4294967295 cpu-wait-end 0x10 7 812 60000 800 110
torn line
7 4 wait-begin 0x11 1 2 0 9600 9600
";

    #[test]
    fn sections_name_the_device_and_fields_parse() {
        let timeline = parse(TEXT.as_bytes()).unwrap();
        assert_eq!(timeline.skipped.first, [(9, "2 field(s), an event has 9".to_string())]);
        let events = timeline.events;
        assert_eq!(events.len(), 7);
        let begun = &events[6];
        assert_eq!((begun.operation, begun.queue(), begun.gpu_time()), (Operation::WaitBegin, Some(4), Some(9600)));
        assert_eq!(begun.operation.name(), "wait-begin");
        assert!(events.iter().all(|e| e.device == 1));
        assert_eq!(events[1].operation, Operation::SignalExecuted);
        assert_eq!((events[1].fence, events[1].end_gpu), (0x10, 9000));
        let woke = &events[5];
        assert_eq!((woke.operation, woke.thread(), woke.queue()), (Operation::CpuWaitEnd, Some((800, 812)), None));
        assert_eq!(woke.gpu_time(), None, "a thread event is timed by the guest CPU");
        assert_eq!(events[0].thread(), None);
    }

    #[test]
    fn the_cpu_offset_is_the_tightest_causal_bound() {
        let events = parse(TEXT.as_bytes()).unwrap().events;
        // Pairs: (1000 → 9000 - 100) and (2000 → 9500 - 100): bounds 7900 and 7400. The last
        // queued event reuses log index 0 but has not executed: it bounds nothing.
        assert_eq!(cpu_offset(&events, 1, |g| g as i64 - 100), Some(7400));
        assert_eq!(cpu_offset(&events, 0, |g| g as i64), None);
    }
}

//! `belfry-trace show`: one decoded line per event, device and guest merged on the run's clock,
//! filtered, optionally following files that are still being written.

use std::io::Write;

use crate::decode;
use crate::model::{Keys, Model};
use crate::record::{Event, MailboxPhase, Record, ScheduleWhy};
use crate::run::{DeviceTrace, Run};
use crate::timeline::{GuestEvent, Operation};

/// Which events to show.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Device names or indexes.
    pub devices: Vec<String>,
    /// Contexts.
    pub contexts: Vec<u32>,
    /// Queues.
    pub queues: Vec<u32>,
    /// Fence handles.
    pub fences: Vec<u64>,
    /// Doorbells.
    pub doorbells: Vec<u32>,
    /// Event kinds (`guest` for the module's timeline).
    pub kinds: Vec<String>,
    /// Run time from (ns).
    pub from_ns: Option<u64>,
    /// Run time to (ns).
    pub to_ns: Option<u64>,
}

impl Filter {
    fn device(&self, d: &DeviceTrace) -> bool {
        self.devices.is_empty() || self.devices.iter().any(|x| *x == d.name || *x == d.index.to_string())
    }

    fn time(&self, run_ns: u64) -> bool {
        self.from_ns.is_none_or(|f| run_ns >= f) && self.to_ns.is_none_or(|t| run_ns <= t)
    }

    fn kind(&self, kind: &str) -> bool {
        self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind)
    }

    fn keys(&self, k: &Keys) -> bool {
        let any = |want: &[u32], have: Option<u32>| want.is_empty() || have.is_some_and(|h| want.contains(&h));
        any(&self.queues, k.queue)
            && any(&self.contexts, k.context)
            && any(&self.doorbells, k.doorbell)
            && (self.fences.is_empty() || k.fences.iter().any(|f| self.fences.contains(f)))
    }

    /// Whether record `i` of device `d` passes.
    pub fn record(&self, d: &DeviceTrace, m: &Model, i: usize) -> bool {
        let r = &d.records[i];
        if !(self.device(d) && self.kind(r.event.kind()) && self.time(d.run_ns(r.t_ns))) {
            return false;
        }
        match m.kicked.get(&i) {
            // A global doorbell concerns every queue it kicked.
            Some(queues) if queues.len() > 1 => queues.iter().any(|&q| {
                let k = Keys { queue: Some(q), context: m.queues.get(&q).and_then(|i| i.context), ..m.keys[i].clone() };
                self.keys(&k)
            }),
            _ => self.keys(&m.keys[i]),
        }
    }

    /// Whether a guest event passes.
    pub fn guest(&self, d: &DeviceTrace, e: &GuestEvent, run_ns: u64, model: &Model) -> bool {
        let k = Keys {
            queue: e.queue(),
            context: e.queue().and_then(|q| model.context_at(q, run_ns.saturating_sub(d.run_offset_ns))),
            fences: if e.fence == 0 { Vec::new() } else { vec![e.fence] },
            ..Keys::default()
        };
        self.device(d) && self.kind("guest") && self.time(run_ns) && self.keys(&k)
    }
}

/// ANSI colours, or none.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    /// Whether to colour.
    pub colour: bool,
}

impl Style {
    fn paint(self, kind: &str, text: &str) -> String {
        if !self.colour {
            return text.to_string();
        }
        let code = match kind {
            "fault" | "limit_reached" | "dropped" => "1;31",
            "interrupt" | "record" => "33",
            "mailbox" | "mailbox_block" => "36",
            "doorbell" | "doorbell_wake" => "32",
            "fence_decision" | "fence_registered" | "fence_monitored_moved" | "fence_storage_moved" => "35",
            "guest" => "34",
            "packet" | "message" | "reg_read" | "reg_write" => "2",
            "schedule" | "command_buffer" => "37",
            _ => "0",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }
}

fn seconds(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000)
}

/// ` faults=[…]` for a device that injected test-only faults; nothing for one that did not
/// (or was built without fault injection, whose header has no `faults`).
fn injected(faults: &serde_json::Value) -> String {
    match faults.as_array() {
        Some(list) if !list.is_empty() => format!(" faults={faults}"),
        _ => String::new(),
    }
}

/// What kept the events of a `dropped` record out of the file.
pub fn dropped_reason(reason: &str) -> &str {
    match reason {
        "writer_behind" => "the writer's queue was full",
        "limit" | "" => "the size limit",
        other => other,
    }
}

fn none_or(v: u32) -> String {
    if v == belfry_abi::irq::NONE {
        "-".into()
    } else {
        v.to_string()
    }
}

/// The description of a device record (without time, device and kind).
pub fn describe(r: &Record, k: &Keys, model: &Model, index: usize) -> String {
    match &r.event {
        Event::Header(h) => {
            let dev = &h.device;
            format!(
                "format v{} ({}), level {}, limit {} MiB, abi {}.{}; doorbells={} msix={} vram={} MiB doorbell_model={} interrupt_form={}{}",
                h.version,
                h.producer,
                h.level,
                h.limit_bytes >> 20,
                h.abi_version[0],
                h.abi_version[1],
                dev["doorbells"],
                dev["msix_vectors"],
                dev["vram_size"].as_u64().unwrap_or(0) >> 20,
                dev["doorbell_model"].as_str().unwrap_or("?"),
                dev["interrupt_form"].as_str().unwrap_or("?"),
                injected(&dev["faults"]),
            )
        }
        Event::Clock { gpu_ns } => {
            let offset = crate::run::difference(*gpu_ns, r.t_ns).map_or("?".to_string(), |o| o.to_string());
            format!("GPU timestamp {gpu_ns} (GPU − trace = {offset} ns)")
        }
        Event::LimitReached { limit_bytes } => {
            format!("size limit of {limit_bytes} bytes reached: later events are only counted")
        }
        Event::Dropped { reason, records, first_t_ns, by_event } => {
            let list: Vec<String> = by_event.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let why = dropped_reason(reason);
            format!("{records} event(s) not written from t={} ({why}): {}", seconds(*first_t_ns), list.join(" "))
        }
        Event::Connection { state } => state.to_string(),
        Event::Message { id, command, size, fds, errno, error, posted } => {
            let mut s = format!("#{id} {command} size={size}");
            if *fds > 0 {
                s += &format!(" fds={fds}");
            }
            if *posted {
                s += " posted";
            }
            if let Some(e) = errno {
                s += &format!(" errno={e}");
            }
            if let Some(e) = error {
                s += &format!(" ({e})");
            }
            s
        }
        Event::RegRead { region, offset, name, value, .. } => {
            format!("{region} {} → {value:#x}", name.as_ref().map_or_else(|| format!("{offset:#x}"), |n| n.to_string()))
        }
        Event::RegWrite { region, offset, name, value, fields, .. } => {
            let mut s = format!("{region} {} ← {value:#x}", name.as_ref().map_or_else(|| format!("{offset:#x}"), |n| n.to_string()));
            if !fields.is_empty() {
                s += &format!(" [{}]", fields.join(" "));
            }
            s
        }
        Event::Doorbell { index: doorbell, value } => match model.kicked.get(&index).map(Vec::as_slice) {
            Some([]) => format!("#{doorbell} value={value} (no queue connected)"),
            Some([q]) => format!("#{doorbell} value={value} → queue {q}"),
            Some(qs) => {
                let list: Vec<String> = qs.iter().map(u32::to_string).collect();
                format!("#{doorbell} value={value} → queues {}", list.join(", "))
            }
            None => format!("#{doorbell} value={value}"),
        },
        Event::DoorbellWake { rung } => {
            let list: Vec<String> = rung.iter().map(|(i, v)| format!("#{i}={v}")).collect();
            format!("CMP woke for {}", list.join(" "))
        }
        Event::Mailbox { phase, opcode, seq, address, status, detail } => {
            let mut s = format!("{phase} seq={seq}");
            if let Some(op) = opcode {
                s = format!("{phase} {op} seq={seq}");
            }
            if *phase == MailboxPhase::Submit {
                s += &format!(" block@{address:#x}");
            }
            if let Some(st) = status {
                s += &format!(" {st}");
            }
            if let Some(d) = detail {
                s += &format!(" ({d})");
            }
            if let Some(c) = model.completions.get(&index).map(|&c| &model.commands[c]) {
                // Out of order (a later read of a followed file) is not a latency.
                if let (Some((_, a)), Some((_, b))) = (c.submit, c.complete) {
                    if let Some(ns) = b.checked_sub(a) {
                        s += &format!(" in {} µs", ns / 1000);
                    }
                }
            }
            s
        }
        Event::MailboxBlock { seq, .. } => match model.blocks.get(&index) {
            Some(b) => {
                let op = b.opcode.map_or("?", |o| o.name());
                let fields: Vec<String> = b.fields.iter().map(|(n, v)| format!("{n}={v}")).collect();
                let status = b.status.map_or("?", |s| s.name());
                format!("{op} seq={seq} {} → {status}", fields.join(" "))
            }
            None => format!("seq={seq} (undecodable block)"),
        },
        Event::Interrupt { vector, cause, delivery } => {
            format!("vector {vector} cause={} {delivery}", decode::cause_names(*cause))
        }
        Event::Dma { op, address, size } => format!("{op} {address:#x}+{size:#x}"),
        Event::SetIrqs { index, start, count, action } => {
            format!("{index} vectors {start}..{} {action}", u64::from(*start) + u64::from(*count))
        }
        Event::Reset { source } => format!("by {source}"),
        Event::Packet { queue, engine, opcode, va, bytes } => {
            let ctx = k.context.map(|c| format!(" ctx {c}")).unwrap_or_default();
            let mut s = format!("queue {queue}{ctx} on {} {opcode} @{va:#x}", decode::engine_label(*engine));
            for f in decode::packet_fields(opcode, bytes) {
                s += &format!(" {f}");
            }
            s
        }
        Event::CommandBuffer { phase, queue, engine, ring_index, va, size } => {
            let ctx = k.context.map(|c| format!(" ctx {c}")).unwrap_or_default();
            let on = decode::engine_label(*engine);
            match (va, size) {
                (Some(va), Some(size)) => {
                    format!("queue {queue}{ctx} on {on} {phase} ring[{ring_index}] buffer @{va:#x} {size} bytes")
                }
                _ => format!("queue {queue}{ctx} on {on} {phase} ring[{ring_index}]"),
            }
        }
        Event::Schedule { engine, queue, why, others } => {
            let why = match why {
                ScheduleWhy::OnlyReady => "the only ready queue",
                ScheduleWhy::Priority => "highest priority ready",
                ScheduleWhy::RoundRobin => "its turn (round robin)",
                other => other.name(),
            };
            let mut s = format!("engine {} picks queue {queue}: {why}", decode::engine_label(*engine));
            if !others.is_empty() {
                let list: Vec<String> = others.iter().map(|(q, r)| format!("{q} {r}")).collect();
                s += &format!("; not run: {}", list.join(", "));
            }
            s
        }
        Event::FenceDecision { source, handle, current, monitored, interrupt, .. } => {
            // The rule: interrupt when CurrentValue > MonitoredValue (the lowest pending wait − 1).
            let rule = belfry_abi::fence::needs_interrupt(*current, *monitored);
            let cmp = if rule { ">" } else { "≤" };
            let monitored = if *monitored == belfry_abi::fence::MONITORED_VALUE_NONE {
                "NONE".to_string()
            } else {
                monitored.to_string()
            };
            let queue = k.queue.map(|q| format!(" (queue {q})")).unwrap_or_default();
            let decided = if *interrupt { "interrupt" } else { "no interrupt" };
            let mut s = format!("{source} fence {handle:#x}{queue}: CurrentValue {current} {cmp} MonitoredValue {monitored} → {decided}");
            if *interrupt != rule {
                s += " (not what the rule gives: an injected fault?)";
            }
            s
        }
        Event::FenceRegistered { handle, kind, current, monitored } => {
            format!("fence {handle:#x} {kind}: CurrentValue at {current}, MonitoredValue at {monitored}")
        }
        Event::FenceMonitoredMoved { handle, from, to, current, monitored, interrupt } => {
            let decided = if *interrupt { "interrupt" } else { "no interrupt" };
            format!("fence {handle:#x}: MonitoredValue {monitored} moved from {from} to {to}; CurrentValue {current} → {decided}")
        }
        Event::FenceStorageMoved { handle, from, to, monitored_to, current, monitored, interrupt } => {
            let decided = if *interrupt { "interrupt" } else { "no interrupt" };
            format!(
                "fence {handle:#x}: storage moved, CurrentValue {current} from {from} to {to}, MonitoredValue {monitored} to {monitored_to} → {decided}"
            )
        }
        Event::LostSignals { context, fences } => {
            format!("context {context} lost: its unexecuted work was going to signal {fences} registered fence(s)")
        }
        Event::FenceBackwards { handle, from, to, queue, engine, count } => format!(
            "queue {queue} on engine {engine}: signal of fence {handle:#x} from {from} down to {to} refused ({count} on this device)"
        ),
        Event::Fault { context, queue, reason, address, walk } => {
            let mut s = format!("context {context} faulted on queue {queue}: {reason} at {address:#x}");
            if !walk.is_empty() {
                s += &format!("; walk {}", describe_walk(walk));
            }
            s
        }
        Event::QueueState { queue, state, detail } => {
            format!("queue {queue} {state}{}", detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())
        }
        Event::EngineState { engine, state } => format!("engine {} {state}", decode::engine_label(*engine)),
        Event::Record { kind, engine, queue, context, fence, value, address, detail } => {
            let record = belfry_abi::irq::InterruptRecord {
                kind: *kind,
                engine: *engine,
                queue: *queue,
                context: *context,
                fence: *fence,
                value: *value,
                address: *address,
                detail: *detail,
                seq: 0,
            };
            match decode::queue_array(&record) {
                Some(queues) => format!(
                    "{} engine={} queues=[{queues}] detail={detail:#x}",
                    decode::record_kind(*kind),
                    none_or(*engine),
                ),
                None => format!(
                    "{} engine={} queue={} context={} fence={fence:#x} value={value} address={address:#x} detail={detail:#x}",
                    decode::record_kind(*kind),
                    none_or(*engine),
                    none_or(*queue),
                    none_or(*context),
                ),
            }
        }
        Event::PowerState { state } => format!("D{state}"),
        Event::Unknown => "(a record of a later format)".into(),
    }
}

/// A page walk, root first: `L3[entry address]=value → …`, and where it stopped.
pub fn describe_walk(walk: &[crate::record::WalkStep]) -> String {
    let steps: Vec<String> = walk
        .iter()
        .map(|w| match w.entry {
            Some(e) => format!("L{}[{:#x}]={e:#x}", w.level, w.at),
            None => format!("L{}[{:#x}]=unreadable", w.level, w.at),
        })
        .collect();
    let end = match walk.last().and_then(|w| w.entry.map(|e| (w.level, e))) {
        Some((_, e)) if e & belfry_abi::mmu::PTE_PRESENT == 0 => " (not present)",
        Some((0, _)) => " (leaf)",
        _ => "",
    };
    format!("{}{end}", steps.join(" → "))
}

/// The description of a guest timeline event.
pub fn describe_guest(e: &GuestEvent) -> String {
    if let Some((pid, tid)) = e.thread() {
        let what = match e.operation {
            Operation::CpuWaitStart => format!("CPU wait on fence {:#x} ≥ {}", e.fence, e.value),
            Operation::CpuWaitEnd => {
                let how = match e.end_gpu {
                    0 => "woke: reached".to_string(),
                    110 => "ended: ETIMEDOUT".to_string(),
                    4 => "ended: EINTR".to_string(),
                    errno => format!("ended: errno {errno}"),
                };
                format!("CPU wait on fence {:#x} ≥ {} {how}", e.fence, e.value)
            }
            Operation::CpuSignal => format!("CPU signal of fence {:#x} to {}", e.fence, e.value),
            Operation::EventfdSignaled => format!("eventfd signaled: fence {:#x} reached {}", e.fence, e.value),
            Operation::Doorbell => {
                let why = match e.end_gpu {
                    1 => "connected",
                    2 => "disconnected",
                    3 => "victimized",
                    4 => "aborted",
                    _ => "changed",
                };
                let status = u32::try_from(e.value)
                    .ok()
                    .and_then(belfry_abi::uapi::DoorbellStatus::from_raw)
                    .map_or_else(|| e.value.to_string(), |st| format!("{st:?}"));
                format!("doorbell of queue {} {why}: status {status}", e.queue)
            }
            Operation::Submit => {
                format!("SUBMIT to queue {}: progress fence {:#x} → {}", e.queue, e.fence, e.value)
            }
            _ => e.operation.name().to_string(),
        };
        return format!("pid {pid} tid {tid}: {what}");
    }
    format!(
        "queue {} {} fence {:#x} value {} log#{}{}",
        e.queue,
        e.operation.name(),
        e.fence,
        e.value,
        e.log_index,
        if e.operation.cpu_timed() { " (guest CPU time)" } else { "" }
    )
}

fn line(style: Style, run_ns: u64, dev: &str, kind: &str, text: &str) -> String {
    style.paint(kind, &format!("{:>12} {dev:<8} {kind:<16} {text}", seconds(run_ns)))
}

/// Lines of everything in `run` that passes `filter`, in run-time order.
pub fn render(run: &Run, models: &[Model], filter: &Filter, style: Style) -> Vec<String> {
    let mut lines: Vec<(u64, usize, usize, String)> = Vec::new();
    for (di, (d, m)) in run.devices.iter().zip(models).enumerate() {
        for (i, r) in d.records.iter().enumerate() {
            if filter.record(d, m, i) {
                let t = d.run_ns(r.t_ns);
                lines.push((t, di, i, line(style, t, &d.name, r.event.kind(), &describe(r, &m.keys[i], m, i))));
            }
        }
    }
    let offsets = run.cpu_offsets();
    for (gi, e) in run.guest.iter().enumerate() {
        let Some((di, d)) = run.devices.iter().enumerate().find(|(_, d)| d.index == e.device) else { continue };
        let Some(t) = run.guest_run_ns(e, &offsets) else { continue };
        if filter.guest(d, e, t, &models[di]) {
            lines.push((
                t,
                di,
                usize::MAX - run.guest.len() + gi,
                line(style, t, &d.name, "guest", &describe_guest(e)),
            ));
        }
    }
    lines.sort_by_key(|l| (l.0, l.1, l.2));
    lines.into_iter().map(|l| l.3).collect()
}

/// Prints `run`, then (with `follow`) whatever its device traces gain, until killed.
pub fn show(mut run: Run, filter: &Filter, style: Style, follow: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let models: Vec<Model> = run.devices.iter().map(Model::build).collect();
    for l in render(&run, &models, filter, style) {
        if writeln!(out, "{l}").is_err() {
            return Ok(()); // closed pipe (`| head`)
        }
    }
    if !follow {
        return Ok(());
    }
    out.flush()?;
    let mut shown: Vec<usize> = run.devices.iter().map(|d| d.records.len()).collect();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        for (di, d) in run.devices.iter_mut().enumerate() {
            if d.read_more()? == 0 {
                continue;
            }
            let m = Model::build(d);
            for i in shown[di]..d.records.len() {
                let r = &d.records[i];
                if filter.record(d, &m, i) {
                    let text = describe(r, &m.keys[i], &m, i);
                    if writeln!(out, "{}", line(style, d.run_ns(r.t_ns), &d.name, r.event.kind(), &text)).is_err() {
                        return Ok(());
                    }
                }
            }
            shown[di] = d.records.len();
        }
        out.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doorbell_event(value: u64) -> GuestEvent {
        GuestEvent {
            device: 0,
            seq: 1,
            queue: 5,
            operation: Operation::Doorbell,
            fence: 0,
            value,
            log_index: 815,
            cpu_ns: 1_000,
            observed_gpu: 812,
            end_gpu: 1,
        }
    }

    #[test]
    fn fence_moves_are_decoded_with_their_places_values_and_decision() {
        let examples = belfry_trace_schema::examples::every_kind();
        let shown = |kind: &str| {
            let event = examples.iter().find(|e| e.kind() == kind).expect("an example of the kind").clone();
            let record = Record { t_ns: 1, dev: "belfry0".into(), event };
            describe(&record, &Keys::default(), &Model::default(), 0)
        };
        let storage = shown("fence_storage_moved");
        assert!(storage.contains("storage moved, CurrentValue"), "{storage}");
        assert!(storage.contains("MonitoredValue") && storage.contains('→'), "{storage}");
        let monitored = shown("fence_monitored_moved");
        assert!(monitored.contains("MonitoredValue") && monitored.contains("moved from"), "{monitored}");
    }

    #[test]
    fn doorbell_events_name_the_status_value_they_carry_and_print_any_other_raw() {
        let shown = |value| describe_guest(&doorbell_event(value));
        assert_eq!(shown(0), "pid 812 tid 815: doorbell of queue 5 connected: status Connected");
        assert_eq!(shown(3), "pid 812 tid 815: doorbell of queue 5 connected: status DisconnectedAbort");
        assert_eq!(shown(4), "pid 812 tid 815: doorbell of queue 5 connected: status 4");
        assert_eq!(shown(1 << 32), "pid 812 tid 815: doorbell of queue 5 connected: status 4294967296");
    }
}

//! `belfry-trace perfetto`: the run as a Perfetto protobuf trace of TrackEvent packets, and its
//! GPU work a second time as render-stage events for Perfetto's GPU view (a hardware queue per
//! Belfry queue, a stage per engine, the fence signals each piece executed as its arguments).
//!
//! Per device, a process track with child tracks: `CMP mailbox` (a slice per command, its
//! decoded arguments as slice arguments), one track per engine (a slice per execution run:
//! from the scheduler's pick to its last packet) and one per hardware queue (a slice per
//! command buffer from its fetch to its end; fence decisions as instants), `scheduler` (the
//! picks as instants), `doorbells`,
//! `interrupts` and `faults` (instants), and counter tracks for each fence's CurrentValue and
//! MonitoredValue. The guest's fence timeline is a second process per device (`module`), one
//! track per queue, and its thread events a third (`guest threads`), one track per guest
//! thread with its CPU waits as slices. Flows follow each submission: doorbell (or kick) → the
//! execution run that picked it up → the module's log entry of its signal (timed by the GPU
//! when the signal executed) → the fence decision → the interrupt → the guest thread it woke.
//! `docs/TRACE.md` describes the layout.

pub mod proto;

use std::collections::{BTreeMap, HashMap};

use proto::{DebugAnnotation, EventType};

use crate::decode;
use crate::model::Model;
use crate::record::{Delivery, Event, FenceSource};
use crate::run::{DeviceTrace, Run};
use crate::show;
use crate::timeline::{GuestEvent, Operation};

pub use proto::Trace;

/// How far apart (ns) a fence decision and the module's log entry of the same signal may be.
const MATCH_NS: u64 = 1_000_000;

/// How long (ns) after a fence interrupt a CPU wait's end counts as woken by it.
const WAKE_NS: u64 = 200_000_000;

/// The trusted sequence every packet is written on.
const SEQUENCE: u32 = 1;

/// Track uuids of device `d`: `(d + 1) << 40` plus a part.
fn uuid(d: usize, part: u64) -> u64 {
    ((d as u64 + 1) << 40) | part
}

const PROCESS: u64 = 1;
const MAILBOX: u64 = 2;
const DOORBELLS: u64 = 3;
const INTERRUPTS: u64 = 4;
const FAULTS: u64 = 5;
const FENCES: u64 = 6;
const GUEST: u64 = 7;
const SCHEDULER: u64 = 8;
const GUEST_THREADS: u64 = 9;
const THREAD: u64 = 0x3_0000;
const ENGINE: u64 = 0x100;
const QUEUE: u64 = 0x1_0000;
const GUEST_QUEUE: u64 = 0x2_0000;
const COUNTER: u64 = 0x100_0000;

/// One event before sorting: timestamp, an order among equal timestamps, the packet.
struct Pending {
    ts: u64,
    order: u8,
    seq: usize,
    event: Payload,
}

/// What a pending packet carries.
enum Payload {
    /// An event of a track.
    Track(proto::TrackEvent),
    /// A piece of GPU work for Perfetto's GPU view.
    Gpu(proto::GpuRenderStageEvent),
}

/// Iids of the GPU view's interned hardware queues: device `d`'s queue `q` is
/// `GPU_QUEUE_IID + (d << 32) + q`; stages are numbered from 1 by engine.
const GPU_QUEUE_IID: u64 = 1 << 48;

/// Iids of the GPU view's contexts: device `d`'s context `c` is `(d << 32) + c + 1`.
fn gpu_context_iid(d: usize, c: u32) -> u64 {
    ((d as u64) << 32) + u64::from(c) + 1
}

/// Builds the trace of `run`.
pub fn build(run: &Run, models: &[Model]) -> Trace {
    let mut b = Builder::default();
    let offsets = run.cpu_offsets();
    for (d, m) in run.devices.iter().zip(models) {
        b.device(run, d, m, &offsets);
    }
    b.finish()
}

/// The file name of a run directory's Perfetto trace: gzip, which Perfetto's UI and
/// `trace_processor` open as they are.
pub const RUN_FILE: &str = "trace.perfetto.gz";

/// Writes `RUN_FILE` into run directory `dir` from its device traces and timeline; a note
/// saying where, how big, how long it took and how to open it.
pub fn write_run(dir: &std::path::Path) -> Result<String, String> {
    let started = std::time::Instant::now();
    let run = Run::load(&[dir.to_path_buf()], None)?;
    let models: Vec<Model> = run.devices.iter().map(Model::build).collect();
    let trace = build(&run, &models);
    let out = dir.join(RUN_FILE);
    let size = write(&out, &encode(&trace))?;
    Ok(format!(
        "Perfetto timeline: {} ({} KiB, {:.1} s to build): open it at https://ui.perfetto.dev (Open trace file); \
         belfry-trace show|stats {} for text",
        out.display(),
        size / 1024,
        started.elapsed().as_secs_f64(),
        dir.display()
    ))
}

/// Encodes `trace` as protobuf bytes.
pub fn encode(trace: &Trace) -> Vec<u8> {
    use prost::Message;
    trace.encode_to_vec()
}

/// Writes the encoded trace `bytes` to `path`, gzip when its name ends in `.gz`; the size of
/// the file.
pub fn write(path: &std::path::Path, bytes: &[u8]) -> Result<usize, String> {
    use std::io::Write;
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    if path.extension().is_some_and(|e| e == "gz") {
        let file = std::fs::File::create(path).map_err(err)?;
        let mut gz = flate2::write::GzEncoder::new(std::io::BufWriter::new(file), flate2::Compression::default());
        gz.write_all(bytes).map_err(err)?;
        let mut file = gz.finish().map_err(err)?;
        file.flush().map_err(err)?;
        Ok(std::fs::metadata(path).map_err(err)?.len() as usize)
    } else {
        std::fs::write(path, bytes).map_err(err)?;
        Ok(bytes.len())
    }
}

#[derive(Default)]
struct Builder {
    tracks: Vec<proto::TrackDescriptor>,
    events: Vec<Pending>,
    /// The GPU view's hardware queues and stages, by iid.
    gpu_specs: BTreeMap<u64, proto::InternedGpuRenderStageSpecification>,
    /// The GPU view's contexts, by iid.
    gpu_contexts: BTreeMap<u64, proto::InternedGraphicsContext>,
}

/// A piece of GPU work for [`Builder::gpu_work`]: where and when it ran, and what it did.
struct GpuWork<'a> {
    queue: u32,
    engine: u32,
    start: u64,
    end: u64,
    name: String,
    args: &'a [DebugAnnotation],
    /// The fence signals it executed (`handle=value`).
    signals: Vec<String>,
}

fn name_of(e: &proto::TrackEvent) -> &str {
    e.name.as_deref().unwrap_or("")
}

impl Builder {
    fn track(&mut self, uuid: u64, parent: Option<u64>, name: String, rank: i32) {
        self.tracks.push(proto::TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: parent,
            name: Some(name),
            sibling_order_rank: Some(rank),
            ..Default::default()
        });
    }

    fn push(&mut self, ts: u64, kind: EventType, track: u64, name: &str, args: Vec<DebugAnnotation>, flows: Vec<u64>) {
        let order = if kind == EventType::SliceEnd { 0 } else { 1 };
        let event = proto::TrackEvent::message(kind, track, name, args, flows);
        let seq = self.events.len();
        self.events.push(Pending { ts, order, seq, event: Payload::Track(event) });
    }

    fn counter(&mut self, ts: u64, track: u64, value: u64) {
        let mut event = proto::TrackEvent::message(EventType::Counter, track, "", Vec::new(), Vec::new());
        event.name = None;
        event.counter_value = Some(i64::try_from(value).unwrap_or(i64::MAX));
        let seq = self.events.len();
        self.events.push(Pending { ts, order: 1, seq, event: Payload::Track(event) });
    }

    fn device(&mut self, run: &Run, d: &DeviceTrace, m: &Model, offsets: &[(usize, i64)]) {
        let i = d.index;
        let process = uuid(i, PROCESS);
        self.tracks.push(proto::TrackDescriptor {
            uuid: Some(process),
            process: Some(proto::ProcessDescriptor {
                pid: Some(10_000 + i as i32),
                process_name: Some(format!("{} (device {i})", d.name)),
            }),
            child_ordering: Some(proto::CHILD_ORDERING_EXPLICIT),
            ..Default::default()
        });
        self.track(uuid(i, MAILBOX), Some(process), "CMP mailbox".into(), 0);
        self.track(uuid(i, DOORBELLS), Some(process), "doorbells".into(), 1);
        self.track(uuid(i, INTERRUPTS), Some(process), "interrupts".into(), 2);
        self.track(uuid(i, FAULTS), Some(process), "faults".into(), 3);
        self.track(uuid(i, FENCES), Some(process), "fence decisions (CMP)".into(), 4);
        if m.boundaries {
            self.track(uuid(i, SCHEDULER), Some(process), "scheduler".into(), 5);
        }
        let mut engines: Vec<u32> = m.runs.iter().map(|r| r.engine).collect();
        let mut queues: Vec<u32> = m.runs.iter().map(|r| r.queue).collect();
        queues.extend(m.queues.keys());
        queues.extend(m.submissions.iter().map(|s| s.queue));
        engines.extend(m.queues.values().filter_map(|q| q.engine));
        engines.sort_unstable();
        engines.dedup();
        queues.sort_unstable();
        queues.dedup();
        for &e in &engines {
            self.track(
                uuid(i, ENGINE + u64::from(e)),
                Some(process),
                format!("engine {}", decode::engine_label(e)),
                10 + e as i32,
            );
        }
        for &q in &queues {
            let info = m.queues.get(&q).cloned().unwrap_or_default();
            let mut name = format!("queue {q}");
            if let (Some(c), Some(e)) = (info.context, info.engine) {
                name += &format!(" (context {c}, engine {e}{})", if info.user_mode { ", user-mode" } else { "" });
            }
            self.track(uuid(i, QUEUE + u64::from(q)), Some(process), name, 100 + q as i32);
        }
        let t = |t_ns: u64| d.run_ns(t_ns);

        // Flow ids: one per submission.
        let flow = |s: usize| uuid(i, 0x8000_0000 + s as u64);
        let mut run_flows: HashMap<usize, Vec<u64>> = HashMap::new();
        let mut doorbell_flows: HashMap<usize, Vec<u64>> = HashMap::new();
        let mut signal_flows: HashMap<usize, Vec<u64>> = HashMap::new(); // decision record → flows
        let signal_of_packet: HashMap<usize, usize> =
            m.signals.iter().enumerate().filter_map(|(si, s)| s.packet.map(|p| (p, si))).collect();
        let mut interrupt_flows: HashMap<usize, Vec<u64>> = HashMap::new();
        let mut flow_ends: HashMap<u64, (usize, u64)> = HashMap::new(); // flow → (signal, value) for the module's entry
        for (si, s) in m.submissions.iter().enumerate() {
            let (Some(ri), Some(_)) = (s.run, s.complete) else { continue };
            let f = flow(si);
            doorbell_flows.entry(s.record).or_default().push(f);
            run_flows.entry(ri).or_default().push(f);
            if let Some(&sig) = s.signal.and_then(|p| signal_of_packet.get(&p)) {
                signal_flows.entry(m.signals[sig].decision).or_default().push(f);
                if let Some(irq) = m.signals[sig].interrupt {
                    interrupt_flows.entry(irq).or_default().push(f);
                }
                if let Event::FenceDecision { current, .. } = d.records[m.signals[sig].decision].event {
                    flow_ends.insert(f, (sig, current));
                }
            }
        }

        // The guest's events on the run's clock, and the CPU waits each delivered fence interrupt
        // woke: a wait on the decision's fence for a value it reached, ending (reached) on the
        // guest's clock within WAKE_NS after the interrupt (or up to MATCH_NS before it: the
        // guest clock's placement error). The flow of the interrupt continues to the wake.
        let guest: Vec<_> = run.guest.iter().filter(|e| e.device == i).collect();
        let placed: Vec<Option<u64>> = guest.iter().map(|e| run.guest_run_ns(e, offsets)).collect();
        let mut wake_flows: HashMap<usize, Vec<u64>> = HashMap::new(); // guest index → flows
        let mut woken: Vec<bool> = vec![false; guest.len()];
        for (sig, s) in m.signals.iter().enumerate() {
            let Some(irq) = s.interrupt else { continue };
            let (irq_record, decision) = (&d.records[irq], &d.records[s.decision]);
            let (Event::Interrupt { delivery, .. }, Event::FenceDecision { handle, current, .. }) =
                (&irq_record.event, &decision.event)
            else {
                continue;
            };
            if *delivery == Delivery::Suppressed {
                continue;
            }
            let at = t(irq_record.t_ns);
            let wake = guest
                .iter()
                .zip(&placed)
                .enumerate()
                .filter(|(gi, (e, _))| {
                    !woken[*gi]
                        && e.operation == Operation::CpuWaitEnd
                        && e.end_gpu == 0
                        && e.fence == *handle
                        && belfry_abi::fence::is_signaled(*current, e.value)
                })
                .filter_map(|(gi, (_, ts))| ts.map(|ts| (ts, gi)))
                .filter(|(ts, _)| *ts + MATCH_NS >= at && *ts <= at + WAKE_NS)
                .min();
            let Some((_, gi)) = wake else { continue };
            woken[gi] = true;
            let flows = interrupt_flows.entry(irq).or_default();
            if flows.is_empty() {
                flows.push(uuid(i, 0x9000_0000 + sig as u64));
            }
            wake_flows.insert(gi, flows.clone());
        }

        // The fence signals each queue executed, by record, for the GPU view's work.
        let mut queue_signals: HashMap<u32, Vec<(usize, String)>> = HashMap::new();
        for s in &m.signals {
            let (Some(q), Some(p)) = (s.queue, s.packet) else { continue };
            if let Event::FenceDecision { handle, current, .. } = d.records[s.decision].event {
                queue_signals.entry(q).or_default().push((p, format!("{handle:#x}={current}")));
            }
        }
        for v in queue_signals.values_mut() {
            v.sort_unstable();
        }
        let signals_in = |q: u32, first: usize, last: usize| -> Vec<String> {
            queue_signals.get(&q).map_or_else(Vec::new, |v| {
                let (a, b) = (v.partition_point(|(r, _)| *r < first), v.partition_point(|(r, _)| *r <= last));
                v[a..b.max(a)].iter().map(|(_, s)| s.clone()).collect()
            })
        };

        // Execution runs on engine and queue tracks, ended before the next run on the engine.
        let mut next_start: HashMap<usize, u64> = HashMap::new();
        let mut last_on_engine: HashMap<u32, usize> = HashMap::new();
        for (ri, r) in m.runs.iter().enumerate() {
            if let Some(prev) = last_on_engine.insert(r.engine, ri) {
                next_start.insert(prev, r.start_ns);
            }
        }
        for (ri, r) in m.runs.iter().enumerate() {
            let start = t(r.start_ns);
            let limit = next_start.get(&ri).map_or(u64::MAX, |&n| t(n));
            let end = (t(r.end_ns) + 1000).min(limit).max(start + 1);
            let ops: Vec<String> = r.opcodes.iter().map(|(o, n)| format!("{o}×{n}")).collect();
            let args = vec![
                DebugAnnotation::uint("queue", r.queue.into()),
                DebugAnnotation::uint("packets", r.packets().into()),
                DebugAnnotation::string("opcodes", ops.join(" ")),
            ];
            let flows = run_flows.remove(&ri).unwrap_or_default();
            let name = format!("queue {}", r.queue);
            self.push(start, EventType::SliceBegin, uuid(i, ENGINE + u64::from(r.engine)), &name, args.clone(), flows);
            self.push(end, EventType::SliceEnd, uuid(i, ENGINE + u64::from(r.engine)), "", Vec::new(), Vec::new());
            if !m.boundaries {
                let qt = uuid(i, QUEUE + u64::from(r.queue));
                let name = format!("run on engine {}", r.engine);
                let signals = signals_in(r.queue, r.first, r.last);
                let work =
                    GpuWork { queue: r.queue, engine: r.engine, start, end, name: name.clone(), args: &args, signals };
                self.gpu_work(i, m, work);
                self.push(start, EventType::SliceBegin, qt, &name, args, Vec::new());
                self.push(end, EventType::SliceEnd, qt, "", Vec::new(), Vec::new());
            }
        }

        // Command buffers (traces with boundaries) on their queue's track, from the ring fetch
        // to the buffer's end (a buffer that never ended: its last packet).
        let mut next_begin: HashMap<usize, (usize, u64)> = HashMap::new();
        let mut last_of_queue: HashMap<u32, usize> = HashMap::new();
        for (bi, b) in m.buffers.iter().enumerate() {
            if let Some(prev) = last_of_queue.insert(b.queue, bi) {
                next_begin.insert(prev, b.begin);
            }
        }
        for (bi, b) in m.buffers.iter().enumerate() {
            let start = t(b.begin.1);
            let limit = next_begin.get(&bi).map_or(u64::MAX, |&(_, n)| t(n));
            let end = b.end.map_or(t(b.last_ns) + 1000, |(_, e)| t(e)).min(limit).max(start + 1);
            let ops: Vec<String> = b.opcodes.iter().map(|(o, n)| format!("{o}×{n}")).collect();
            let args = vec![
                DebugAnnotation::uint("ring_index", b.ring_index.into()),
                DebugAnnotation::string("va", format!("{:#x}", b.va)),
                DebugAnnotation::uint("size", b.size.into()),
                DebugAnnotation::uint("packets", b.opcodes.values().sum::<u32>().into()),
                DebugAnnotation::string("opcodes", ops.join(" ")),
                DebugAnnotation::string("ended", if b.end.is_some() { "yes" } else { "no (fault or end of trace)" }),
            ];
            let qt = uuid(i, QUEUE + u64::from(b.queue));
            let name = format!("buffer ring[{}] on engine {}", b.ring_index, b.engine);
            let last = b.end.map(|(r, _)| r).or(next_begin.get(&bi).map(|&(r, _)| r)).unwrap_or(usize::MAX);
            let signals = signals_in(b.queue, b.begin.0, last);
            let work =
                GpuWork { queue: b.queue, engine: b.engine, start, end, name: name.clone(), args: &args, signals };
            self.gpu_work(i, m, work);
            self.push(start, EventType::SliceBegin, qt, &name, args, Vec::new());
            self.push(end, EventType::SliceEnd, qt, "", Vec::new(), Vec::new());
        }

        // Mailbox commands, each ended no later than the next one's submit (the driver may
        // see a completion in MB_STATUS before the device traces it).
        for (ci, c) in m.commands.iter().enumerate() {
            let (Some((_, a)), Some((_, z))) = (c.submit, c.complete) else { continue };
            let next_submit = m.commands[ci + 1..].iter().find_map(|n| n.submit).map_or(u64::MAX, |(_, s)| s);
            let z = z.min(next_submit);
            let mut args = vec![DebugAnnotation::uint("seq", c.seq.into())];
            if let Some(s) = &c.status {
                args.push(DebugAnnotation::string("status", s.clone()));
            }
            if let Some(block) = c.block.and_then(|b| m.blocks.get(&b)) {
                for (n, v) in &block.fields {
                    args.push(DebugAnnotation::string(n, v.clone()));
                }
            }
            let name = c.opcode.clone().unwrap_or_else(|| "(unknown)".into());
            let flows = match c.block.and_then(|b| m.blocks.get(&b)).map(|b| &b.effect) {
                Some(decode::Effect::Kick(_)) => {
                    c.submit.and_then(|(i, _)| doorbell_flows.remove(&i)).unwrap_or_default()
                }
                _ => Vec::new(),
            };
            self.push(t(a), EventType::SliceBegin, uuid(i, MAILBOX), &name, args, flows);
            self.push(t(z).max(t(a) + 1), EventType::SliceEnd, uuid(i, MAILBOX), "", Vec::new(), Vec::new());
        }

        // Instants and counters from single records.
        let mut fence_tracks: BTreeMap<u64, u64> = BTreeMap::new();
        for (ri, r) in d.records.iter().enumerate() {
            let ts = t(r.t_ns);
            let k = &m.keys[ri];
            match &r.event {
                Event::Doorbell { index, value } => {
                    let name = match k.queue {
                        Some(q) => format!("doorbell {index} → queue {q}"),
                        None => format!("doorbell {index}"),
                    };
                    let args = vec![DebugAnnotation::uint("value", *value)];
                    let flows = doorbell_flows.remove(&ri).unwrap_or_default();
                    self.push(ts, EventType::Instant, uuid(i, DOORBELLS), &name, args, flows);
                }
                Event::Interrupt { vector, cause, delivery } => {
                    let args = vec![
                        DebugAnnotation::uint("vector", (*vector).into()),
                        DebugAnnotation::string("delivery", delivery.to_string()),
                    ];
                    let flows = interrupt_flows.remove(&ri).unwrap_or_default();
                    self.push(ts, EventType::Instant, uuid(i, INTERRUPTS), &decode::cause_names(*cause), args, flows);
                }
                Event::Record { .. } | Event::EngineState { .. } | Event::QueueState { .. } | Event::Reset { .. } => {
                    let text = show::describe(r, k, m, ri);
                    let track = match (&r.event, k.queue) {
                        (Event::QueueState { .. }, Some(q)) => uuid(i, QUEUE + u64::from(q)),
                        (Event::Record { .. }, _) => uuid(i, INTERRUPTS),
                        _ => uuid(i, FAULTS),
                    };
                    let name = format!("{}: {}", r.event.kind(), text.split(' ').next().unwrap_or(""));
                    self.push(
                        ts,
                        EventType::Instant,
                        track,
                        &name,
                        vec![DebugAnnotation::string("detail", text)],
                        Vec::new(),
                    );
                }
                Event::Schedule { engine, queue, why, others } => {
                    let mut args = vec![
                        DebugAnnotation::uint("engine", (*engine).into()),
                        DebugAnnotation::uint("queue", (*queue).into()),
                        DebugAnnotation::string("why", why.to_string()),
                    ];
                    if !others.is_empty() {
                        let list: Vec<String> = others.iter().map(|(q, r)| format!("{q} {r}")).collect();
                        args.push(DebugAnnotation::string("not run", list.join(", ")));
                    }
                    let name = format!("engine {engine} → queue {queue} ({why})");
                    self.push(ts, EventType::Instant, uuid(i, SCHEDULER), &name, args, Vec::new());
                }
                Event::Fault { reason, .. } => {
                    let text = show::describe(r, k, m, ri);
                    self.push(
                        ts,
                        EventType::Instant,
                        uuid(i, FAULTS),
                        reason,
                        vec![DebugAnnotation::string("detail", text)],
                        Vec::new(),
                    );
                }
                Event::FenceDecision { source, handle, current, monitored, interrupt, .. } => {
                    let name =
                        format!("{source} {handle:#x}={current}{}", if *interrupt { " → interrupt" } else { "" });
                    let args = vec![
                        DebugAnnotation::uint("current", *current),
                        DebugAnnotation::uint("monitored", *monitored),
                        DebugAnnotation::string("interrupt", interrupt.to_string()),
                    ];
                    let track = match k.queue {
                        Some(q) if *source == FenceSource::Signal => uuid(i, QUEUE + u64::from(q)),
                        _ => uuid(i, FENCES),
                    };
                    let flows = signal_flows.remove(&ri).unwrap_or_default();
                    self.push(ts, EventType::Instant, track, &name, args, flows);
                    let base = self.fence_counters(i, *handle, &mut fence_tracks);
                    self.counter(ts, base, *current);
                    self.counter(ts, base + 1, *monitored);
                }
                Event::MailboxBlock { .. } => {
                    if let Some(decode::Effect::FenceValues { monitored, values }) =
                        m.blocks.get(&ri).map(|b| &b.effect)
                    {
                        for (h, v) in values {
                            let base = self.fence_counters(i, *h, &mut fence_tracks);
                            self.counter(ts, base + u64::from(*monitored), *v);
                        }
                    }
                }
                _ => {}
            }
        }

        // The module's side.
        if guest.is_empty() {
            return;
        }
        self.guest_threads(i, &guest, &placed, &mut wake_flows);
        if guest.iter().all(|e| e.operation.is_thread()) {
            return;
        }
        let gp = uuid(i, GUEST);
        self.tracks.push(proto::TrackDescriptor {
            uuid: Some(gp),
            process: Some(proto::ProcessDescriptor {
                pid: Some(20_000 + i as i32),
                process_name: Some(format!("module: /dev/belfry{i} fence timeline")),
            }),
            child_ordering: Some(proto::CHILD_ORDERING_EXPLICIT),
            ..Default::default()
        });
        let mut guest_queues: Vec<u32> = guest.iter().filter(|e| !e.operation.is_thread()).map(|e| e.queue).collect();
        guest_queues.sort_unstable();
        guest_queues.dedup();
        for &q in &guest_queues {
            self.track(uuid(i, GUEST_QUEUE + u64::from(q)), Some(gp), format!("queue {q}"), q as i32);
        }
        // The module's entry of a flow's signal: a signal-executed of the same queue and value
        // within MATCH_NS of the decision (queue ids and values repeat over a run).
        let mut entry_flows: HashMap<usize, Vec<u64>> = HashMap::new();
        for (f, (sig, value)) in flow_ends {
            let Some(q) = m.signals[sig].queue else { continue };
            let decided = t(d.records[m.signals[sig].decision].t_ns);
            let best = guest
                .iter()
                .zip(&placed)
                .enumerate()
                .filter(|(_, (e, _))| e.operation == Operation::SignalExecuted && e.queue == q && e.value == value)
                .filter_map(|(gi, (_, ts))| ts.map(|ts| (ts.abs_diff(decided), gi)))
                .filter(|(gap, _)| *gap <= MATCH_NS)
                .min();
            if let Some((_, gi)) = best {
                entry_flows.entry(gi).or_default().push(f);
            }
        }
        for (gi, e) in guest.iter().enumerate() {
            let Some(ts) = placed[gi].filter(|_| !e.operation.is_thread()) else { continue };
            let args = vec![
                DebugAnnotation::string("fence", format!("{:#x}", e.fence)),
                DebugAnnotation::uint("value", e.value),
                DebugAnnotation::uint("log_index", e.log_index.into()),
                DebugAnnotation::string("clock", if e.operation.cpu_timed() { "guest CPU" } else { "GPU" }),
            ];
            let name = format!("{} {:#x}={}", e.operation.name(), e.fence, e.value);
            let flows = entry_flows.remove(&gi).unwrap_or_default();
            self.push(ts, EventType::Instant, uuid(i, GUEST_QUEUE + u64::from(e.queue)), &name, args, flows);
        }
    }

    /// The thread events of device `i`'s `guest` timeline (placed at `placed`) on a process of
    /// guest threads, a track per thread: CPU waits as slices from start to end with an instant
    /// at the end (carrying the `wake_flows` of the interrupt that woke it), the rest instants.
    fn guest_threads(
        &mut self,
        i: usize,
        guest: &[&GuestEvent],
        placed: &[Option<u64>],
        wake_flows: &mut HashMap<usize, Vec<u64>>,
    ) {
        let mut threads: Vec<(u32, u32)> = guest.iter().filter_map(|e| e.thread()).collect();
        if threads.is_empty() {
            return;
        }
        threads.sort_unstable();
        threads.dedup();
        let process = uuid(i, GUEST_THREADS);
        self.tracks.push(proto::TrackDescriptor {
            uuid: Some(process),
            process: Some(proto::ProcessDescriptor {
                pid: Some(30_000 + i as i32),
                process_name: Some(format!("guest threads using /dev/belfry{i}")),
            }),
            child_ordering: Some(proto::CHILD_ORDERING_EXPLICIT),
            ..Default::default()
        });
        let track = |th: (u32, u32)| uuid(i, THREAD + threads.binary_search(&th).unwrap_or(0) as u64);
        for (n, &(pid, tid)) in threads.iter().enumerate() {
            self.track(track((pid, tid)), Some(process), format!("pid {pid} tid {tid}"), n as i32);
        }
        let mut open: HashMap<u64, u64> = HashMap::new(); // track → start of its open wait
        let mut last = 0;
        for (gi, e) in guest.iter().enumerate() {
            let (Some(th), Some(ts)) = (e.thread(), placed[gi]) else { continue };
            let tr = track(th);
            last = last.max(ts);
            let args = vec![
                DebugAnnotation::string("fence", format!("{:#x}", e.fence)),
                DebugAnnotation::uint("value", e.value),
                DebugAnnotation::string("detail", show::describe_guest(e)),
            ];
            match e.operation {
                Operation::CpuWaitStart => {
                    if let Some(start) = open.remove(&tr) {
                        self.push(ts.max(start + 1), EventType::SliceEnd, tr, "", Vec::new(), Vec::new());
                    }
                    let name = format!("CPU wait {:#x} ≥ {}", e.fence, e.value);
                    self.push(ts, EventType::SliceBegin, tr, &name, args, Vec::new());
                    open.insert(tr, ts);
                }
                Operation::CpuWaitEnd => {
                    let end = open.remove(&tr).map(|start| ts.max(start + 1));
                    if let Some(end) = end {
                        self.push(end, EventType::SliceEnd, tr, "", Vec::new(), Vec::new());
                    }
                    let name = if e.end_gpu == 0 {
                        format!("woke: {:#x} reached {}", e.fence, e.value)
                    } else {
                        format!("wait ended: errno {}", e.end_gpu)
                    };
                    let flows = wake_flows.remove(&gi).unwrap_or_default();
                    self.push(end.unwrap_or(ts), EventType::Instant, tr, &name, args, flows);
                }
                _ => {
                    let name = match e.operation {
                        Operation::CpuSignal => format!("CPU signal {:#x}={}", e.fence, e.value),
                        Operation::EventfdSignaled => format!("eventfd {:#x} reached {}", e.fence, e.value),
                        Operation::Doorbell => format!("doorbell of queue {}", e.queue),
                        Operation::Submit => format!("SUBMIT queue {}", e.queue),
                        other => other.name().to_string(),
                    };
                    self.push(ts, EventType::Instant, tr, &name, args, Vec::new());
                }
            }
        }
        for (tr, start) in open {
            self.push(last.max(start + 1), EventType::SliceEnd, tr, "", Vec::new(), Vec::new());
        }
    }

    /// The counter track pair (CurrentValue, MonitoredValue) of `handle` on device `i`.
    fn fence_counters(&mut self, i: usize, handle: u64, tracks: &mut BTreeMap<u64, u64>) -> u64 {
        if let Some(&base) = tracks.get(&handle) {
            return base;
        }
        let base = uuid(i, COUNTER + 2 * tracks.len() as u64);
        tracks.insert(handle, base);
        for (k, what) in ["CurrentValue", "MonitoredValue"].iter().enumerate() {
            self.tracks.push(proto::TrackDescriptor {
                uuid: Some(base + k as u64),
                parent_uuid: Some(uuid(i, PROCESS)),
                name: Some(format!("fence {handle:#x} {what}")),
                counter: Some(proto::CounterDescriptor { unit_name: Some("value".into()) }),
                sibling_order_rank: Some(1000 + 2 * tracks.len() as i32 + k as i32),
                ..Default::default()
            });
        }
        base
    }

    fn finish(mut self) -> Trace {
        self.events.sort_by_key(|p| (p.ts, p.order, p.seq));
        let mut packets = Vec::with_capacity(self.tracks.len() + self.events.len() + 1);
        // The sequence's first packet clears its incremental state and interns what the GPU
        // view's events name by iid.
        packets.push(proto::TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE),
            sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
            interned_data: Some(proto::InternedData {
                graphics_contexts: self.gpu_contexts.into_values().collect(),
                gpu_specifications: self.gpu_specs.into_values().collect(),
            }),
            ..Default::default()
        });
        for t in self.tracks {
            packets.push(proto::TracePacket {
                trusted_packet_sequence_id: Some(SEQUENCE),
                track_descriptor: Some(t),
                ..Default::default()
            });
        }
        for p in self.events {
            let mut packet = proto::TracePacket {
                timestamp: Some(p.ts),
                trusted_packet_sequence_id: Some(SEQUENCE),
                ..Default::default()
            };
            match p.event {
                Payload::Track(event) => {
                    debug_assert!(event.r#type.is_some(), "{}", name_of(&event));
                    packet.track_event = Some(event);
                }
                Payload::Gpu(event) => packet.gpu_render_stage_event = Some(event),
            }
            packets.push(packet);
        }
        Trace { packet: packets }
    }

    /// `w` as a render-stage event of Perfetto's GPU view on device `i`: its hardware queue is
    /// the Belfry queue, its stage the engine, its context the queue's context.
    fn gpu_work(&mut self, i: usize, m: &Model, w: GpuWork) {
        let info = m.queues.get(&w.queue).cloned().unwrap_or_default();
        let queue_iid = GPU_QUEUE_IID + ((i as u64) << 32) + u64::from(w.queue);
        self.gpu_specs.entry(queue_iid).or_insert_with(|| {
            let mut name = format!("belfry{i} queue {}", w.queue);
            if let Some(c) = info.context {
                name += &format!(" (context {c}{})", if info.user_mode { ", user-mode" } else { "" });
            }
            proto::InternedGpuRenderStageSpecification {
                iid: Some(queue_iid),
                name: Some(name),
                description: Some("a Belfry hardware queue".into()),
                category: Some(proto::STAGE_OTHER),
            }
        });
        let stage_iid = u64::from(w.engine) + 1;
        self.gpu_specs.entry(stage_iid).or_insert_with(|| {
            let label = decode::engine_label(w.engine);
            let category = if label.contains("compute") { proto::STAGE_COMPUTE } else { proto::STAGE_OTHER };
            proto::InternedGpuRenderStageSpecification {
                iid: Some(stage_iid),
                name: Some(format!("engine {label}")),
                description: Some("the engine that ran the work".into()),
                category: Some(category),
            }
        });
        let context = info.context.map(|c| {
            let iid = gpu_context_iid(i, c);
            self.gpu_contexts.entry(iid).or_insert(proto::InternedGraphicsContext {
                iid: Some(iid),
                pid: Some(10_000 + i as i32),
                api: Some(0),
            });
            iid
        });
        let mut extra: Vec<proto::GpuExtraData> = w
            .args
            .iter()
            .filter_map(|a| {
                let value = a.string_value.clone().or_else(|| a.uint_value.map(|v| v.to_string()))?;
                Some(proto::GpuExtraData::new(a.name.as_deref()?, value))
            })
            .collect();
        if !w.signals.is_empty() {
            extra.push(proto::GpuExtraData::new("fence signals", w.signals.join(" ")));
        }
        let event = proto::GpuRenderStageEvent {
            event_id: Some(self.events.len() as u64),
            duration: Some(w.end - w.start),
            context,
            extra_data: extra,
            gpu_id: Some(i as i32),
            hw_queue_iid: Some(queue_iid),
            stage_iid: Some(stage_iid),
            name: Some(w.name),
            ..Default::default()
        };
        let seq = self.events.len();
        self.events.push(Pending { ts: w.start, order: 1, seq, event: Payload::Gpu(event) });
    }
}

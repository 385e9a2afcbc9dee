//! What one device's records mean together: its queues (from decoded `CREATE_QUEUE` and
//! `CONNECT_DOORBELL` blocks), which queue, context, doorbell and fences each record concerns,
//! the engines' execution runs, each submission's path (doorbell or `KICK_QUEUE` → pickup →
//! completion), mailbox commands with their latency, and each fence signal's path (packet →
//! decision → interrupt record → interrupt).
//!
//! An execution run is one slice of a queue on its engine: from the scheduler's pick
//! (`schedule` record) to the last packet or buffer end before the engine's next pick. A
//! submission is picked up by the first command buffer its queue fetches after the doorbell
//! (`command_buffer` `begin`) and completes at the end of the last buffer the queue fetched
//! before a newer submission was picked up; its signal is the first signaling packet
//! (`FENCE_SIGNAL`, `MONITORED_FENCE_SIGNAL`, `NOTIFY`) after the pickup.
//!
//! Traces of devices before those records (no picks, no buffer boundaries) are read by
//! inference: a run is a stretch of packets of one queue on its engine with no other queue's
//! packet and no gap over [`RUN_GAP_NS`] between them; pickup is the first packet of the queue
//! after the doorbell, completion the first signaling packet after it, or the end of its run.

use std::collections::{BTreeMap, HashMap};

use crate::decode::{self, Block, Effect};
use crate::record::{BufferPhase, Delivery, Event, FenceSource, MailboxPhase};
use crate::run::DeviceTrace;

/// Packets further apart than this (on one engine, same queue) start a new execution run.
pub const RUN_GAP_NS: u64 = 1_000_000;

/// What the trace says about a queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueInfo {
    /// Owning context.
    pub context: Option<u32>,
    /// Engine.
    pub engine: Option<u32>,
    /// Priority.
    pub priority: Option<u32>,
    /// User-mode (doorbell) submission.
    pub user_mode: bool,
}

/// The objects a record concerns (for filters and flows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys {
    /// Queue.
    pub queue: Option<u32>,
    /// Context.
    pub context: Option<u32>,
    /// Doorbell.
    pub doorbell: Option<u32>,
    /// Engine.
    pub engine: Option<u32>,
    /// Fence handles.
    pub fences: Vec<u64>,
}

/// A stretch of one queue's packets on its engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecRun {
    /// Engine.
    pub engine: u32,
    /// Queue.
    pub queue: u32,
    /// Trace time of the first packet.
    pub start_ns: u64,
    /// Trace time of the last packet.
    pub end_ns: u64,
    /// Record index of the first packet.
    pub first: usize,
    /// Record index of the last packet.
    pub last: usize,
    /// Packets by opcode.
    pub opcodes: BTreeMap<String, u32>,
}

impl ExecRun {
    /// Packets in the run.
    pub fn packets(&self) -> u32 {
        self.opcodes.values().sum()
    }
}

/// How a submission reached the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A doorbell write (index, value).
    Doorbell(u32, u64),
    /// A `KICK_QUEUE` mailbox command (sequence number).
    Kick(u32),
}

/// One submission's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// Queue.
    pub queue: u32,
    /// Its context at the time (queue ids are reused).
    pub context: Option<u32>,
    /// Doorbell or kick.
    pub via: Via,
    /// Record index of the doorbell or kick.
    pub record: usize,
    /// Trace time of the doorbell or kick.
    pub at_ns: u64,
    /// Record index and time of the first packet after it.
    pub pickup: Option<(usize, u64)>,
    /// Record index and time of its completion (see the module docs).
    pub complete: Option<(usize, u64)>,
    /// The execution run that picked it up.
    pub run: Option<usize>,
    /// Record index of the first signaling packet of its queue after the pickup.
    pub signal: Option<usize>,
}

/// One command buffer from its fetch to its end (traces with boundaries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// Queue.
    pub queue: u32,
    /// Engine.
    pub engine: u32,
    /// Ring index of its entry.
    pub ring_index: u32,
    /// GPU VA.
    pub va: u64,
    /// Size in bytes.
    pub size: u32,
    /// Record index and trace time of its `begin`.
    pub begin: (usize, u64),
    /// Record index and trace time of its `end` (none: faulted, or the trace ended first).
    pub end: Option<(usize, u64)>,
    /// Trace time of its last packet.
    pub last_ns: u64,
    /// Packets by opcode.
    pub opcodes: BTreeMap<String, u32>,
}

/// One mailbox command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// Sequence number.
    pub seq: u32,
    /// Record index and time of the submit (none if the trace starts after it).
    pub submit: Option<(usize, u64)>,
    /// Record index and time of the completion.
    pub complete: Option<(usize, u64)>,
    /// Opcode name.
    pub opcode: Option<String>,
    /// Status name.
    pub status: Option<String>,
    /// Record index of its argument block.
    pub block: Option<usize>,
}

/// One fence decision with what led to it and what followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    /// Record index of the `fence_decision`.
    pub decision: usize,
    /// Record index of the packet that signaled (engine signals).
    pub packet: Option<usize>,
    /// Queue of that packet.
    pub queue: Option<u32>,
    /// Record index of the interrupt record it posted.
    pub record: Option<usize>,
    /// Record index of the interrupt raised for it.
    pub interrupt: Option<usize>,
}

/// The analysis of one device's trace.
#[derive(Debug, Default)]
pub struct Model {
    /// Queues, by id (as of the end of the trace).
    pub queues: BTreeMap<u32, QueueInfo>,
    /// Each queue id's contexts over time: (trace time of its `CREATE_QUEUE`, context).
    pub queue_contexts: BTreeMap<u32, Vec<(u64, u32)>>,
    /// Per record, what it concerns.
    pub keys: Vec<Keys>,
    /// The queues each doorbell record kicked (several in the global doorbell model).
    pub kicked: HashMap<usize, Vec<u32>>,
    /// Decoded argument blocks, by record index.
    pub blocks: HashMap<usize, Block>,
    /// Execution runs, in start order.
    pub runs: Vec<ExecRun>,
    /// Submissions, in order.
    pub submissions: Vec<Submission>,
    /// Mailbox commands, in submit order.
    pub commands: Vec<Command>,
    /// The command each `mailbox` completion record belongs to (record index → command index).
    pub completions: HashMap<usize, usize>,
    /// Fence decisions.
    pub signals: Vec<Signal>,
    /// Command buffers, in fetch order (empty for traces without boundaries).
    pub buffers: Vec<Buffer>,
    /// Whether the trace has the scheduler's picks and buffer boundaries (runs and
    /// submissions from them rather than inferred).
    pub boundaries: bool,
}

impl Model {
    /// Analyses `d`.
    pub fn build(d: &DeviceTrace) -> Model {
        let mut m = Model { keys: vec![Keys::default(); d.records.len()], ..Model::default() };
        // Doorbell → queues connected to it (several in the global model).
        let mut doorbells: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut open_runs: HashMap<u32, usize> = HashMap::new(); // engine → run index
        let mut last_packet: HashMap<u32, u64> = HashMap::new(); // engine → time
        let mut waiting: HashMap<u32, Vec<usize>> = HashMap::new(); // queue → submissions not picked up
        let mut running: HashMap<u32, Vec<usize>> = HashMap::new(); // queue → picked up, not complete
        let mut commands: HashMap<u32, usize> = HashMap::new(); // seq → open command
        let mut unclaimed_signal_packets: Vec<usize> = Vec::new();
        let mut pending_records: Vec<usize> = Vec::new(); // signals waiting for their record
        let mut pending_interrupts: Vec<usize> = Vec::new(); // signals waiting for the interrupt
        let kicks = kicks_by_submit(d);
        m.boundaries =
            d.records.iter().any(|r| matches!(r.event, Event::Schedule { .. } | Event::CommandBuffer { .. }));
        let mut picked: HashMap<u32, (u32, u64)> = HashMap::new(); // engine → (queue, time) of a pick not yet started
        let mut open_buffers: HashMap<u32, usize> = HashMap::new(); // queue → buffer index

        for (i, r) in d.records.iter().enumerate() {
            let t = r.t_ns;
            let mut k = Keys::default();
            match &r.event {
                Event::Doorbell { index, value } => {
                    k.doorbell = Some(*index);
                    let queues = doorbells.get(index).cloned().unwrap_or_default();
                    if let [q] = queues[..] {
                        k.queue = Some(q);
                    }
                    m.kicked.insert(i, queues.clone());
                    let shared = queues.len() > 1;
                    for q in queues {
                        if shared {
                            // A global doorbell kicks every connected queue, most with nothing
                            // new: keep only the latest such kick of a queue waiting, so a
                            // queue's next work is not charged to an old hint.
                            let subs = &m.submissions;
                            if let Some(list) = waiting.get_mut(&q) {
                                list.retain(|&s| m.kicked.get(&subs[s].record).is_none_or(|k| k.len() <= 1));
                            }
                        }
                        m.submit(&mut waiting, q, Via::Doorbell(*index, *value), i, t);
                    }
                }
                Event::MailboxBlock { seq, bytes } => {
                    let Some(block) = decode::hex_bytes(bytes).as_deref().and_then(decode::mailbox_block) else {
                        continue;
                    };
                    k.queue = block.queue();
                    k.fences = block.fences();
                    let ok = block.status == Some(belfry_abi::mailbox::Status::Ok);
                    match block.effect {
                        Effect::CreateQueue { queue, context, engine, priority, user_mode } if ok => {
                            m.queue_contexts.entry(queue).or_default().push((t, context));
                            m.queues.insert(
                                queue,
                                QueueInfo {
                                    context: Some(context),
                                    engine: Some(engine),
                                    priority: Some(priority),
                                    user_mode,
                                },
                            );
                        }
                        Effect::Connect { queue, doorbell } if ok => {
                            k.doorbell = Some(doorbell);
                            let list = doorbells.entry(doorbell).or_default();
                            if !list.contains(&queue) {
                                list.push(queue);
                            }
                        }
                        Effect::Disconnect { queue, doorbell } if ok => {
                            k.doorbell = Some(doorbell);
                            if let Some(list) = doorbells.get_mut(&doorbell) {
                                list.retain(|&q| q != queue);
                            }
                        }
                        // Kicks are submitted at their `submit` record (see `kicks_by_submit`).
                        Effect::DestroyQueue(queue) if ok => {
                            // Work it never ran is not picked up by a later queue of that id.
                            waiting.remove(&queue);
                            running.remove(&queue);
                        }
                        Effect::Suspend { context, .. } => k.context = Some(context),
                        _ => {}
                    }
                    if let Some(&c) = commands.get(seq) {
                        m.commands[c].block = Some(i);
                    }
                    m.blocks.insert(i, block);
                }
                Event::Mailbox { phase, opcode, seq, status, .. } => match phase {
                    MailboxPhase::Submit => {
                        if let Some(&queue) = kicks.get(&i) {
                            m.submit(&mut waiting, queue, Via::Kick(*seq), i, t);
                        }
                        commands.insert(*seq, m.commands.len());
                        m.commands.push(Command {
                            seq: *seq,
                            submit: Some((i, t)),
                            complete: None,
                            opcode: None,
                            status: None,
                            block: None,
                        });
                    }
                    MailboxPhase::Complete => {
                        let c = match commands.remove(seq) {
                            Some(c) => c,
                            None => {
                                m.commands.push(Command {
                                    seq: *seq,
                                    submit: None,
                                    complete: None,
                                    opcode: None,
                                    status: None,
                                    block: None,
                                });
                                m.commands.len() - 1
                            }
                        };
                        m.completions.insert(i, c);
                        let cmd = &mut m.commands[c];
                        cmd.complete = Some((i, t));
                        cmd.opcode = opcode.as_ref().map(|o| o.to_string());
                        cmd.status = status.as_ref().map(|s| s.to_string());
                        if let Some(b) = cmd.block {
                            k = m.keys[b].clone();
                        }
                    }
                    _ => {}
                },
                Event::Schedule { engine, queue, .. } => {
                    k.queue = Some(*queue);
                    k.engine = Some(*engine);
                    // The engine's previous slice ended; the next one starts at this pick.
                    open_runs.remove(engine);
                    picked.insert(*engine, (*queue, t));
                }
                Event::CommandBuffer { phase, queue, engine, ring_index, va, size } => {
                    k.queue = Some(*queue);
                    k.engine = Some(*engine);
                    let ri = m.run_at(&mut open_runs, &mut picked, &last_packet, &mut running, *engine, *queue, i, t);
                    m.runs[ri].end_ns = t;
                    m.runs[ri].last = i;
                    if *phase == BufferPhase::Begin {
                        open_buffers.insert(*queue, m.buffers.len());
                        m.buffers.push(Buffer {
                            queue: *queue,
                            engine: *engine,
                            ring_index: *ring_index,
                            va: va.unwrap_or(0),
                            size: size.unwrap_or(0),
                            begin: (i, t),
                            end: None,
                            last_ns: t,
                            opcodes: BTreeMap::new(),
                        });
                        let new = waiting.remove(queue).unwrap_or_default();
                        if !new.is_empty() {
                            // Earlier submissions completed at the end of their last buffer.
                            running.insert(*queue, Vec::new());
                        }
                        for s in new {
                            m.submissions[s].pickup = Some((i, t));
                            m.submissions[s].run = Some(ri);
                            running.entry(*queue).or_default().push(s);
                        }
                    } else {
                        if let Some(b) = open_buffers.remove(queue) {
                            m.buffers[b].end = Some((i, t));
                        }
                        for &s in running.get(queue).into_iter().flatten() {
                            m.submissions[s].complete = Some((i, t));
                        }
                    }
                }
                Event::Packet { queue, engine, opcode, .. } => {
                    k.queue = Some(*queue);
                    k.engine = Some(*engine);
                    let ri = m.run_at(&mut open_runs, &mut picked, &last_packet, &mut running, *engine, *queue, i, t);
                    last_packet.insert(*engine, t);
                    let run = &mut m.runs[ri];
                    run.end_ns = t;
                    run.last = i;
                    *run.opcodes.entry(opcode.to_string()).or_default() += 1;
                    if let Some(b) = open_buffers.get(queue).map(|&b| &mut m.buffers[b]) {
                        b.last_ns = t;
                        *b.opcodes.entry(opcode.to_string()).or_default() += 1;
                    }
                    if !m.boundaries {
                        for s in waiting.remove(queue).unwrap_or_default() {
                            m.submissions[s].pickup = Some((i, t));
                            m.submissions[s].run = Some(ri);
                            running.entry(*queue).or_default().push(s);
                        }
                    }
                    if decode::packet_signals(opcode) {
                        for &s in running.get(queue).into_iter().flatten() {
                            let sub = &mut m.submissions[s];
                            sub.signal.get_or_insert(i);
                            if !m.boundaries {
                                sub.complete = Some((i, t));
                            }
                        }
                        if !m.boundaries {
                            running.remove(queue);
                        }
                        if opcode == "FENCE_SIGNAL" {
                            unclaimed_signal_packets.push(i);
                        }
                    }
                }
                Event::FenceDecision { source, handle, interrupt, queue, engine, .. } => {
                    k.fences = vec![*handle];
                    let packet = if *source == FenceSource::Signal {
                        // The engine thread traces the packet, then its decision: the latest
                        // FENCE_SIGNAL packet not yet claimed (of the decision's queue, when
                        // the device names it).
                        let of_queue = unclaimed_signal_packets
                            .iter()
                            .rposition(|&p| queue.is_none_or(|q| m.keys[p].queue == Some(q)));
                        of_queue.map(|at| unclaimed_signal_packets.remove(at))
                    } else {
                        None
                    };
                    if let Some(p) = packet {
                        k.queue = m.keys[p].queue;
                        k.engine = m.keys[p].engine;
                    }
                    k.queue = queue.or(k.queue);
                    k.engine = engine.or(k.engine);
                    let s = m.signals.len();
                    m.signals.push(Signal { decision: i, packet, queue: k.queue, record: None, interrupt: None });
                    if *interrupt {
                        pending_records.push(s);
                    }
                }
                Event::Record { kind, engine, queue, context, fence, .. } => {
                    k.queue = (*queue != belfry_abi::irq::NONE).then_some(*queue);
                    k.context = (*context != belfry_abi::irq::NONE).then_some(*context);
                    k.engine = (*engine != belfry_abi::irq::NONE).then_some(*engine);
                    if *fence != 0 {
                        k.fences = vec![*fence];
                    }
                    if *kind == belfry_abi::irq::RecordKind::NativeFenceSignaled as u32 && !pending_records.is_empty() {
                        let s = pending_records.remove(0);
                        m.signals[s].record = Some(i);
                        pending_interrupts.push(s);
                    }
                }
                Event::Interrupt { cause, delivery, .. } if cause & belfry_abi::irq::cause::NATIVE_FENCE != 0 => {
                    // A suppressed interrupt had no record: it belongs to a decision still
                    // waiting for one.
                    let pending =
                        if *delivery == Delivery::Suppressed { &mut pending_records } else { &mut pending_interrupts };
                    if !pending.is_empty() {
                        let s = pending.remove(0);
                        m.signals[s].interrupt = Some(i);
                        k = m.keys[m.signals[s].decision].clone();
                    }
                }
                Event::Fault { context, queue, .. } => {
                    k.queue = Some(*queue);
                    k.context = Some(*context);
                }
                Event::QueueState { queue, .. } => k.queue = Some(*queue),
                Event::EngineState { engine, .. } => k.engine = Some(*engine),
                Event::FenceRegistered { handle, .. }
                | Event::FenceMonitoredMoved { handle, .. }
                | Event::FenceStorageMoved { handle, .. } => k.fences = vec![*handle],
                _ => {}
            }
            if k.context.is_none() {
                k.context = k.queue.and_then(|q| m.queues.get(&q)).and_then(|q| q.context);
            }
            if k.engine.is_none() {
                k.engine = k.queue.and_then(|q| m.queues.get(&q)).and_then(|q| q.engine);
            }
            m.keys[i] = k;
        }
        // Whatever is still running completes at the end of its run (inferred runs; with
        // boundaries, a submission whose buffer never ended did not complete).
        for list in running.into_values().filter(|_| !m.boundaries) {
            for s in list {
                if let Some(ri) = m.submissions[s].run {
                    m.submissions[s].complete = Some((m.runs[ri].last, m.runs[ri].end_ns));
                }
            }
        }
        m
    }

    /// The run of `queue` on `engine` that record `i` at `t` belongs to, started if needed: at
    /// the engine's pick of the queue (traces with picks), or when another queue ran or the
    /// engine was idle over [`RUN_GAP_NS`] (inferred).
    #[allow(clippy::too_many_arguments)]
    fn run_at(
        &mut self,
        open_runs: &mut HashMap<u32, usize>,
        picked: &mut HashMap<u32, (u32, u64)>,
        last_packet: &HashMap<u32, u64>,
        running: &mut HashMap<u32, Vec<usize>>,
        engine: u32,
        queue: u32,
        i: usize,
        t: u64,
    ) -> usize {
        let continues = open_runs.get(&engine).is_some_and(|&ri| {
            self.runs[ri].queue == queue
                && (self.boundaries || t.saturating_sub(last_packet.get(&engine).copied().unwrap_or(t)) <= RUN_GAP_NS)
        });
        if continues {
            return open_runs[&engine];
        }
        if !self.boundaries {
            // A new run of this queue completes what its earlier runs left open.
            for s in running.remove(&queue).unwrap_or_default() {
                if let Some(r) = self.submissions[s].run {
                    self.submissions[s].complete = Some((self.runs[r].last, self.runs[r].end_ns));
                }
            }
        }
        let start_ns = match picked.remove(&engine) {
            Some((q, at)) if q == queue => at,
            _ => t,
        };
        open_runs.insert(engine, self.runs.len());
        self.runs.push(ExecRun { engine, queue, start_ns, end_ns: t, first: i, last: i, opcodes: BTreeMap::new() });
        self.runs.len() - 1
    }

    /// The context queue id `queue` belonged to at trace time `t_ns`.
    pub fn context_at(&self, queue: u32, t_ns: u64) -> Option<u32> {
        self.queue_contexts.get(&queue)?.iter().rev().find(|(t, _)| *t <= t_ns).map(|(_, c)| *c)
    }

    fn submit(&mut self, waiting: &mut HashMap<u32, Vec<usize>>, queue: u32, via: Via, record: usize, at_ns: u64) {
        waiting.entry(queue).or_default().push(self.submissions.len());
        let context = self.queues.get(&queue).and_then(|q| q.context);
        self.submissions.push(Submission {
            queue,
            context,
            via,
            record,
            at_ns,
            pickup: None,
            complete: None,
            run: None,
            signal: None,
        });
    }
}

/// The queue of every successful `KICK_QUEUE`, by the record index of its `submit`: the
/// device runs the kicked work before it writes the block and the completion, so the
/// submission starts at the submit.
fn kicks_by_submit(d: &DeviceTrace) -> HashMap<usize, u32> {
    let mut open: HashMap<u32, usize> = HashMap::new();
    let mut kicks = HashMap::new();
    for (i, r) in d.records.iter().enumerate() {
        match &r.event {
            Event::Mailbox { phase: MailboxPhase::Submit, seq, .. } => {
                open.insert(*seq, i);
            }
            Event::MailboxBlock { seq, bytes } => {
                let Some(submit) = open.remove(seq) else { continue };
                let block = decode::hex_bytes(bytes).as_deref().and_then(decode::mailbox_block);
                if let Some(Block {
                    effect: Effect::Kick(queue), status: Some(belfry_abi::mailbox::Status::Ok), ..
                }) = block
                {
                    kicks.insert(submit, queue);
                }
            }
            _ => {}
        }
    }
    kicks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::parse_line;

    fn trace(lines: &[String]) -> DeviceTrace {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("device0.trace.jsonl");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        DeviceTrace::read(&path, 0).unwrap()
    }

    fn block(t: u64, seq: u32, words: &[u32]) -> String {
        let hex: String = words.iter().flat_map(|w| w.to_le_bytes()).map(|b| format!("{b:02x}")).collect();
        format!(r#"{{"t_ns":{t},"event":"mailbox_block","seq":{seq},"bytes":"{hex}"}}"#)
    }

    fn packet(t: u64, queue: u32, opcode: &str) -> String {
        format!(r#"{{"t_ns":{t},"event":"packet","queue":{queue},"engine":0,"opcode":"{opcode}","va":4096}}"#)
    }

    #[test]
    fn a_doorbell_is_followed_to_pickup_and_completion() {
        use belfry_abi::mailbox::Opcode;
        let lines = vec![
            block(1, 1, &[Opcode::CreateQueue as u32, 56, 1, 1, 3, 2, 0, 1, 1, 64, 0, 0, 0, 0]),
            block(2, 2, &[Opcode::ConnectDoorbell as u32, 24, 2, 1, 3, 5]),
            r#"{"t_ns":100,"event":"doorbell","index":5,"value":1}"#.to_string(),
            packet(150, 3, "COPY"),
            packet(160, 3, "FENCE_SIGNAL"),
            r#"{"t_ns":161,"event":"fence_decision","source":"signal","handle":9,"current":1,"monitored":1,"interrupt":true}"#.to_string(),
            r#"{"t_ns":162,"event":"record","kind":1,"engine":0,"queue":4294967295,"context":4294967295,"fence":9,"value":1,"address":0,"detail":0}"#.to_string(),
            r#"{"t_ns":163,"event":"interrupt","vector":1,"cause":2,"delivery":"msix"}"#.to_string(),
            packet(170, 3, "NOP"),
            packet(5_000_000, 3, "NOP"),
        ];
        let d = trace(&lines);
        assert!(lines.iter().all(|l| parse_line(l).is_ok()));
        let m = Model::build(&d);
        assert_eq!(m.queues[&3].context, Some(2));
        assert_eq!(m.keys[2].queue, Some(3), "the doorbell maps to its queue");
        assert_eq!(m.keys[2].context, Some(2));
        let s = &m.submissions[0];
        assert_eq!((s.queue, s.at_ns, s.pickup, s.complete), (3, 100, Some((3, 150)), Some((4, 160))));
        assert_eq!(m.runs.len(), 2, "a gap splits runs");
        assert_eq!(m.runs[0].packets(), 3);
        let sig = &m.signals[0];
        assert_eq!((sig.packet, sig.queue, sig.record, sig.interrupt), (Some(4), Some(3), Some(6), Some(7)));
        assert_eq!(m.keys[7].fences, vec![9], "the interrupt is keyed by the fence it raised for");
    }

    #[test]
    fn mailbox_commands_pair_submit_and_complete() {
        let lines = vec![
            r#"{"t_ns":10,"event":"mailbox","phase":"submit","seq":4,"address":4096}"#.to_string(),
            block(20, 4, &[belfry_abi::mailbox::Opcode::KickQueue as u32, 24, 4, 1, 7, 0]),
            r#"{"t_ns":30,"event":"mailbox","phase":"complete","opcode":"KICK_QUEUE","seq":4,"address":4096,"status":"OK"}"#.to_string(),
        ];
        let m = Model::build(&trace(&lines));
        let c = &m.commands[0];
        assert_eq!((c.submit, c.complete, c.block), (Some((0, 10)), Some((2, 30)), Some(1)));
        assert_eq!(c.opcode.as_deref(), Some("KICK_QUEUE"));
        assert_eq!(m.submissions[0].via, Via::Kick(4));
        assert_eq!((m.submissions[0].record, m.submissions[0].at_ns), (0, 10), "a kick starts at its submit");
        assert_eq!(m.keys[2].queue, Some(7), "the completion is keyed like its block");
    }
}

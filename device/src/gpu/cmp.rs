//! The command processor (CMP): the device's firmware thread.
//!
//! It waits on typed wake-ups ([`Token`]) — kill, reset, mailbox, doorbell — drains each and
//! runs the work they announce. Mailbox commands execute here, never on the vfio-user socket
//! thread. It starts the engine threads ([`Engines`]) with it, and the peer-signal poller
//! ([`Poller`]) on a device with peer signals, and asks the driver for F1 on
//! engines idle for `idle_f1_ms`.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;

use belfry_abi::engine::{EngineState, ENGINE_COUNT};
use belfry_abi::ids::EngineId;
use belfry_abi::irq::{self, InterruptRecord, RecordKind};
use belfry_trace_schema::input_log::Entry;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use super::block;
use super::cmdring;
use super::commands;
use super::engine::Engines;
use super::peer::Poller;
use super::shared::Gpu;
use crate::record;
use crate::registers::MailboxRequest;
use crate::trace::{Event, TraceLevel};

/// What woke the command processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Token {
    /// Shut down.
    Kill = 0,
    /// The device was reset.
    Reset = 1,
    /// A mailbox command was submitted.
    Mailbox = 2,
    /// Doorbells were rung.
    Doorbell = 3,
}

impl Token {
    fn from_data(data: u64) -> Option<Token> {
        [Token::Kill, Token::Reset, Token::Mailbox, Token::Doorbell].into_iter().find(|t| *t as u64 == data)
    }
}

/// A running command processor.
pub struct CommandProcessor {
    gpu: Arc<Gpu>,
    thread: Option<JoinHandle<()>>,
    engines: Option<Engines>,
    poller: Option<Poller>,
}

impl CommandProcessor {
    /// Starts the command processor thread of `gpu`, and its engine threads.
    pub fn start(gpu: Arc<Gpu>) -> std::io::Result<Self> {
        let epoll = Epoll::new()?;
        let fds = [
            (gpu.ports.wake.kill.as_raw_fd(), Token::Kill),
            (gpu.ports.wake.reset.as_raw_fd(), Token::Reset),
            (gpu.ports.wake.mailbox.as_raw_fd(), Token::Mailbox),
            (gpu.ports.doorbells.wake_fd(), Token::Doorbell),
        ];
        for (fd, token) in fds {
            epoll.ctl(ControlOperation::Add, fd, EpollEvent::new(EventSet::IN, token as u64))?;
        }
        let g = gpu.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{}-cmp", gpu.ports.config.name))
            .spawn(move || run(&g, &epoll))?;
        let engines = Engines::start(gpu.clone())?;
        let poller = if gpu.ports.regs.caps().peer_signals() { Some(Poller::start(gpu.clone())?) } else { None };
        Ok(CommandProcessor { gpu, thread: Some(thread), engines: Some(engines), poller })
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.gpu.ports.wake.kill.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(e) = self.engines.take() {
            e.stop();
        }
        if let Some(p) = self.poller.take() {
            p.join();
        }
    }
}

impl Drop for CommandProcessor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(gpu: &Gpu, epoll: &Epoll) {
    let mut events = [EpollEvent::default(); EVENTS];
    let mut poll = Poll::new(gpu.ports.doorbells.poll_budget());
    loop {
        if poll.idle_check_due() {
            idle_check(gpu);
        }
        let tokens = match wait(gpu, epoll, poll.timeout_ms(), &mut events) {
            Ok(tokens) => tokens,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::error!("{}: command processor wait failed: {e}", gpu.ports.config.name);
                return;
            }
        };
        for token in tokens.iter() {
            if !handle(gpu, token) {
                return;
            }
            if matches!(token, Token::Doorbell | Token::Mailbox) {
                poll.activity();
            }
        }
        poll.step(gpu);
    }
}

/// Events one wait takes from epoll (the CMP waits on four eventfds).
const EVENTS: usize = 8;

/// The tokens of one wake-up in epoll's order, kept without allocating (the CMP wakes often).
#[derive(Default)]
struct Woken {
    tokens: [Option<Token>; EVENTS],
}

impl Woken {
    fn new(tokens: impl Iterator<Item = Token>) -> Self {
        let mut woken = Woken::default();
        for (slot, token) in woken.tokens.iter_mut().zip(tokens) {
            *slot = Some(token);
        }
        woken
    }

    fn reported(events: &[EpollEvent]) -> Self {
        Self::new(events.iter().filter_map(|e| Token::from_data(e.data())))
    }

    fn iter(&self) -> impl Iterator<Item = Token> + '_ {
        self.tokens.iter().map_while(|t| *t)
    }

    fn contains(&self, token: Token) -> bool {
        self.iter().any(|t| t == token)
    }
}

/// One wait of the loop: the tokens epoll reported, in its order (recorded as a wake-up).
/// Replaying, the recorded wake-up's tokens, once epoll reports each of them (their eventfds
/// were written before the recorded wake-up, by threads the replay has let past that point).
fn wait(gpu: &Gpu, epoll: &Epoll, timeout_ms: i32, events: &mut [EpollEvent]) -> std::io::Result<Woken> {
    let recording = &gpu.ports.recording;
    if recording.is_replay() {
        let offered = || Entry::Wake { thread: record::thread_number(), tokens: Vec::new() };
        if let Some(Entry::Wake { tokens, .. }) = recording.input(offered) {
            let tokens = Woken::new(tokens.iter().filter_map(|&t| Token::from_data(u64::from(t))));
            // A doorbell wake-up's eventfd need not be ready: the doorbells it reports come
            // from the log (`rung` records), and the replay's socket thread may have rung them
            // before an earlier look consumed the eventfd.
            let needed = || tokens.iter().filter(|&t| t != Token::Doorbell);
            while needed().next().is_some() {
                let n = epoll.wait(-1, events)?;
                let ready = Woken::reported(&events[..n]);
                if needed().all(|t| ready.contains(t)) {
                    break;
                }
                if ready.contains(Token::Kill) {
                    // The replay's device stops before what the recorded wake-up reported
                    // came (a replay that left the log): stop.
                    return Ok(Woken::new(std::iter::once(Token::Kill)));
                }
            }
            return Ok(tokens);
        }
    }
    let n = epoll.wait(timeout_ms, events)?;
    let tokens = Woken::reported(&events[..n]);
    recording
        .note(|| Entry::Wake { thread: record::thread_number(), tokens: tokens.iter().map(|t| t as u8).collect() });
    Ok(tokens)
}

/// The polling of shared doorbells: after activity the CMP looks at the doorbell pages on
/// every turn of its loop for `budget`, then publishes its sleep and waits on its eventfds.
struct Poll {
    /// `None` for trapped doorbells (rings wake the CMP; nothing to poll).
    budget: Option<std::time::Duration>,
    polling: bool,
    last_activity: std::time::Instant,
    last_idle_check: std::time::Instant,
}

impl Poll {
    fn new(budget: Option<std::time::Duration>) -> Self {
        let now = std::time::Instant::now();
        Poll { budget, polling: budget.is_some(), last_activity: now, last_idle_check: now }
    }

    /// Idle-engine checks run on every wake-up, and at most every [`IDLE_CHECK_MS`] while
    /// polling.
    fn idle_check_due(&mut self) -> bool {
        let due = !self.polling || self.last_idle_check.elapsed().as_millis() >= IDLE_CHECK_MS as u128;
        if due {
            self.last_idle_check = std::time::Instant::now();
        }
        due
    }

    fn timeout_ms(&self) -> i32 {
        if self.polling {
            0
        } else {
            IDLE_CHECK_MS
        }
    }

    fn activity(&mut self) {
        if self.budget.is_some() {
            self.polling = true;
            self.last_activity = std::time::Instant::now();
        }
    }

    /// One turn of polling: kicks what was rung, or goes to sleep once the budget is spent.
    fn step(&mut self, gpu: &Gpu) {
        let Some(budget) = self.budget else { return };
        if !self.polling {
            return;
        }
        let doorbells = &gpu.ports.doorbells;
        if kick(gpu, doorbells.poll()) {
            self.last_activity = std::time::Instant::now();
        } else if self.last_activity.elapsed() >= budget {
            // Publish the sleep, fence, look again (belfry_abi::doorbell): a ring that raced
            // the decision is found here or its library sees the sleep and wakes us.
            if kick(gpu, doorbells.try_sleep()) {
                self.last_activity = std::time::Instant::now();
            } else {
                self.polling = false;
            }
        } else {
            std::thread::yield_now();
        }
    }
}

/// Handles one wake-up of the command processor; false for [`Token::Kill`]. The thread calls
/// it in the order epoll reports the wake-ups, which is not the order the socket thread caused
/// them (a mailbox wake-up can be reported before an earlier doorbell's); tests call it in any
/// order.
///
/// Doorbell writes recorded before a mailbox command was submitted are handled before the
/// command runs, on the doorbell bindings they were written under: a ring that reached the
/// device before `DISCONNECT_DOORBELL` kicks the queue it was rung for, not the queue the
/// physical doorbell is connected to next (which would lose the victim's work: its library read
/// CONNECTED after ringing and does not ring again).
pub fn handle(gpu: &Gpu, token: Token) -> bool {
    match token {
        Token::Kill => return false,
        Token::Reset => {
            let _ = gpu.ports.wake.reset.read();
            log::debug!("{}: command processor reset", gpu.ports.config.name);
        }
        Token::Mailbox => {
            let _ = gpu.ports.wake.mailbox.read();
            if gpu.ports.regs.cmd_ring_latched() {
                // Back in D0 (the PMCSR write woke us) with the command ring rung in D3hot.
                drain_doorbells(gpu);
            }
            if let Some(request) = gpu.ports.regs.pending_mailbox() {
                if block::dropped_by_stall(gpu, request.seq, request.address, "mailbox") {
                    return true;
                }
                // The submit's `MB_STATUS` update (acquired by `pending_mailbox`) follows the
                // socket thread's record of every earlier ring, so this drain sees them all.
                drain_doorbells(gpu);
                execute_mailbox(gpu, request);
            }
        }
        Token::Doorbell => drain_doorbells(gpu),
    }
    true
}

/// The doorbells rung since the last look (recorded); replaying, the recorded look's.
fn take_rung(gpu: &Gpu) -> Vec<(u32, u64)> {
    let rung = gpu.ports.doorbells.take_rung();
    match gpu.ports.recording.input(|| Entry::Rung { thread: record::thread_number(), doorbells: rung.clone() }) {
        Some(Entry::Rung { doorbells, .. }) => doorbells,
        _ => rung,
    }
}

/// Kicks the queues connected to every doorbell rung since the last drain.
fn drain_doorbells(gpu: &Gpu) {
    kick(gpu, take_rung(gpu));
}

/// Kicks the queues of the `rung` doorbells, then runs the command ring if its doorbell is
/// among them; whether there were any.
fn kick(gpu: &Gpu, rung: Vec<(u32, u64)>) -> bool {
    let regs = &gpu.ports.regs;
    let mut ring_rung = kick_queues(gpu, &rung);
    let any = !rung.is_empty();
    if any {
        gpu.ports.tracer.emit(Event::DoorbellWake { rung });
    }
    if ring_rung && regs.pci_d3hot() {
        // D3hot executes nothing: the ring's doorbell latches, its entries run back in D0.
        regs.latch_cmd_ring();
        ring_rung = false;
    }
    // Rung in D3hot, and now in D0 (the PMCSR write wakes the CMP through its mailbox fd).
    ring_rung |= regs.take_cmd_ring_latch();
    if ring_rung {
        cmdring::run(gpu, |gpu| {
            let more = take_rung(gpu);
            kick_queues(gpu, &more);
        });
    }
    any
}

/// Kicks the queues of trapped queue doorbell `index`, rung with `value`, on the socket thread
/// that received the write ([`crate::doorbell::Ring::Caller`]), with no wake-up of the command
/// processor between, on the doorbell bindings of that moment, before the socket thread reads a
/// later message (a mailbox command that moves the doorbell included). An idle engine's first
/// slice then runs on this thread ([`super::engine::run_if_idle`]); a busy engine's thread is
/// woken.
pub fn kick_at_the_ring(gpu: &Gpu, index: u32, value: u64) {
    gpu.ports.recording.note(|| Entry::Doorbell { index, value });
    let engines = commands::kick_doorbell(gpu, index);
    // Checked before the event's list is built: this runs at every trapped ring, and the trace
    // records it only from `commands` on.
    if gpu.ports.tracer.wants(TraceLevel::Commands) {
        gpu.ports.tracer.emit(Event::DoorbellWake { rung: vec![(index, value)] });
    }
    // An idle engine's first slice runs here; otherwise its thread is woken (and with no queue
    // connected, the engines are woken as any ring woke them).
    let mut wake = engines.is_empty();
    for engine in engines {
        wake |= !super::engine::run_if_idle(gpu, engine);
    }
    if wake {
        gpu.notify();
    }
}

/// Kicks the queues of the `rung` doorbells other than the command ring's (each value taken is
/// recorded); whether the command ring's was among them.
fn kick_queues(gpu: &Gpu, rung: &[(u32, u64)]) -> bool {
    let ring = gpu.ports.config.gpu.cmd_ring_doorbell();
    let mut ring_rung = false;
    for &(index, value) in rung {
        gpu.ports.recording.note(|| Entry::Doorbell { index, value });
        if Some(index) == ring {
            ring_rung = true;
        } else {
            commands::doorbell_rung(gpu, index);
        }
    }
    ring_rung
}

/// How often the CMP looks for idle engines.
const IDLE_CHECK_MS: i32 = 20;

/// An active engine with nothing to do for `idle_f1_ms` asks the driver for F1, once per idle
/// period (ENG-03): an engine-state record `TransitionToF1`, whose `value` is the number of
/// `KICK_QUEUE` commands run so far (a driver that kicked a queue after that knows the request
/// is stale), and the `ENGINE_STATE` interrupt. Not in D3hot, where the device raises no
/// interrupt.
pub(super) fn idle_check(gpu: &Gpu) {
    let idle_for = std::time::Duration::from_millis(gpu.ports.config.gpu.idle_f1_ms);
    let mut report = Vec::new();
    let kicks;
    {
        let mut o = gpu.lock();
        if o.d3 {
            return;
        }
        kicks = o.kicks;
        let busy: Vec<bool> = (0..ENGINE_COUNT)
            .map(|e| {
                let has_work = |q| o.schedulable(q) && o.queues.get(&q).is_some_and(|q| q.state.has_work());
                o.scheduler.runlist(EngineId::new(e)).any(has_work)
            })
            .collect();
        for ((e, status), busy) in (0..ENGINE_COUNT).zip(o.engines.iter_mut()).zip(busy) {
            if busy || status.current.is_some() {
                status.idle_reported = false;
            } else if status.state == EngineState::Active
                && !status.idle_reported
                && gpu.ports.regs.elapsed_since(status.last_active) >= idle_for
            {
                status.idle_reported = true;
                report.push(e);
            }
        }
    }
    for engine in report {
        gpu.ports.tracer.emit(Event::EngineState { engine, state: EngineState::TransitionToF1.name().into() });
        gpu.post(
            InterruptRecord {
                kind: RecordKind::EngineState as u32,
                engine,
                queue: irq::NONE,
                context: irq::NONE,
                value: kicks,
                detail: EngineState::TransitionToF1 as u32,
                ..Default::default()
            },
            irq::cause::ENGINE_STATE,
        );
    }
}

fn execute_mailbox(gpu: &Gpu, request: MailboxRequest) {
    gpu.holding_wakeups(|| {
        let outcome = block::run_block(gpu, request, None);
        if !gpu.ports.regs.complete_mailbox(request, outcome.status) {
            return; // a reset intervened: drop the completion
        }
        block::finish(gpu, request, outcome);
    });
}

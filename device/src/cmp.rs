//! The command processor (CMP): the device's firmware thread.
//!
//! It waits on typed wake-ups ([`Token`]) — kill, reset, mailbox, doorbell — drains each and
//! runs the work they announce. Mailbox commands execute here, never on the vfio-user socket
//! thread. Scheduling of hardware queues onto engines joins this loop with the queue model.

use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use belfry_abi::irq;
use belfry_abi::mailbox::{self, MailboxHeader, Opcode, SelfTestArgs, Status};
use vm_memory::{Bytes, GuestAddress, GuestMemory};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use crate::device::Device;
use crate::doorbell::DoorbellSource;
use crate::registers::MailboxRequest;
use crate::trace::Event;
use crate::wire::Wire;

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
    device: Arc<Device>,
    thread: Option<JoinHandle<()>>,
    engines: Option<crate::gpu::engine::Engines>,
}

impl CommandProcessor {
    /// Starts the command processor thread of `device`.
    pub fn start(device: Arc<Device>) -> std::io::Result<Self> {
        let epoll = Epoll::new()?;
        let fds = [
            (device.wake.kill.as_raw_fd(), Token::Kill),
            (device.wake.reset.as_raw_fd(), Token::Reset),
            (device.wake.mailbox.as_raw_fd(), Token::Mailbox),
            (device.doorbells.wake_fd(), Token::Doorbell),
        ];
        for (fd, token) in fds {
            epoll.ctl(ControlOperation::Add, fd, EpollEvent::new(EventSet::IN, token as u64))?;
        }
        let dev = device.clone();
        let thread =
            std::thread::Builder::new().name(format!("{}-cmp", device.config.name)).spawn(move || run(&dev, &epoll))?;
        let engines = crate::gpu::engine::Engines::start(device.clone())?;
        Ok(CommandProcessor { device, thread: Some(thread), engines: Some(engines) })
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.device.wake.kill.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(e) = self.engines.take() {
            e.stop();
        }
    }
}

impl Drop for CommandProcessor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(device: &Device, epoll: &Epoll) {
    let mut events = vec![EpollEvent::default(); 8];
    loop {
        idle_check(device);
        let n = match epoll.wait(IDLE_CHECK_MS, &mut events) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::error!("{}: command processor wait failed: {e}", device.config.name);
                return;
            }
        };
        for event in &events[..n] {
            if let Some(token) = Token::from_data(event.data()) {
                if !handle(device, token) {
                    return;
                }
            }
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
pub fn handle(device: &Device, token: Token) -> bool {
    match token {
        Token::Kill => return false,
        Token::Reset => {
            let _ = device.wake.reset.read();
            log::debug!("{}: command processor reset", device.config.name);
        }
        Token::Mailbox => {
            let _ = device.wake.mailbox.read();
            if let Some(request) = device.regs.pending_mailbox() {
                // The submit's `MB_STATUS` update (acquired by `pending_mailbox`) follows the
                // socket thread's record of every earlier ring, so this drain sees them all.
                drain_doorbells(device);
                execute_mailbox(device, request);
            }
        }
        Token::Doorbell => drain_doorbells(device),
    }
    true
}

/// Kicks the queues connected to every doorbell rung since the last drain.
fn drain_doorbells(device: &Device) {
    let rung = device.doorbells.take_rung();
    for &(index, _) in &rung {
        crate::gpu::commands::doorbell_rung(device, index);
    }
    if !rung.is_empty() {
        device.tracer.emit(Event::DoorbellWake { rung });
    }
}

/// How often the CMP looks for idle engines.
const IDLE_CHECK_MS: i32 = 20;

/// An active engine with nothing to do for `idle_f1_ms` asks the driver for F1, once per idle
/// period (ENG-03): an engine-state record `TransitionToF1` and the `ENGINE_STATE` interrupt.
fn idle_check(device: &Device) {
    use belfry_abi::engine::EngineState;
    use belfry_abi::irq::{InterruptRecord, RecordKind};
    let idle_for = std::time::Duration::from_millis(device.config.idle_f1_ms);
    let mut report = Vec::new();
    {
        let mut o = device.gpu.lock();
        let busy: Vec<bool> = (0..o.engines.len() as u32)
            .map(|e| {
                o.scheduler.runlist(e).any(|q| {
                    o.schedulable(q)
                        && o.queues.get(&q).is_some_and(|q| q.kicked || q.cursor.is_some() || q.wait.is_some())
                })
            })
            .collect();
        for (i, e) in o.engines.iter_mut().enumerate() {
            if busy[i] || e.current.is_some() {
                e.idle_reported = false;
            } else if e.state == EngineState::Active && !e.idle_reported && e.last_active.elapsed() >= idle_for {
                e.idle_reported = true;
                report.push(i as u32);
            }
        }
    }
    for engine in report {
        device.tracer.emit(Event::EngineState { engine, state: EngineState::TransitionToF1.name() });
        crate::gpu::records::post(
            device,
            InterruptRecord {
                kind: RecordKind::EngineState as u32,
                engine,
                queue: belfry_abi::irq::NONE,
                context: belfry_abi::irq::NONE,
                detail: EngineState::TransitionToF1 as u32,
                ..Default::default()
            },
            irq::cause::ENGINE_STATE,
        );
    }
}

/// Outcome of a command: its status, the vector to raise, and a detail for the trace.
struct Outcome {
    opcode: Option<Opcode>,
    status: Status,
    vector: Option<u16>,
    detail: Option<String>,
}

impl Outcome {
    fn fail(opcode: Option<Opcode>, status: Status, detail: String) -> Self {
        Outcome { opcode, status, vector: None, detail: Some(detail) }
    }
}

fn execute_mailbox(device: &Device, request: MailboxRequest) {
    let mem = device.ram.memory();
    let addr = GuestAddress(request.address);
    let outcome = run_command(device, &*mem, request);
    // The block's header is written back whenever it is readable, whatever the outcome; an
    // unreadable block is reported through MB_STATUS only.
    let header_ok =
        request.address.is_multiple_of(mailbox::BLOCK_ALIGN) && mem.read_obj::<Wire<MailboxHeader>>(addr).is_ok();
    if header_ok {
        // Results first, then the sequence number, then the status last with release order,
        // so a driver that sees the status sees the results.
        let _ = mem.write_obj(request.seq, GuestAddress(request.address + 8));
        fence(Ordering::Release);
        let _ = mem.store(outcome.status as u32, GuestAddress(request.address + 12), Ordering::Release);
    }
    if !device.regs.complete_mailbox(request, outcome.status) {
        return; // a reset intervened: drop the completion
    }
    if outcome.status != Status::Ok {
        log::warn!(
            "{}: mailbox command {} at {:#x} failed: {} ({})",
            device.config.name,
            request.seq,
            request.address,
            outcome.status.name(),
            outcome.detail.as_deref().unwrap_or("")
        );
    }
    crate::trace::mailbox_block(&device.tracer, &*mem, request.seq, request.address);
    device.tracer.emit(Event::Mailbox {
        phase: "complete",
        opcode: outcome.opcode.map(Opcode::name),
        seq: request.seq,
        address: request.address,
        status: Some(outcome.status.name()),
        detail: outcome.detail,
    });
    device.interrupts.raise(irq::cause::MAILBOX, outcome.vector, &device.tracer);
}

fn run_command<M: GuestMemory>(device: &Device, mem: &M, request: MailboxRequest) -> Outcome {
    let addr = GuestAddress(request.address);
    if !request.address.is_multiple_of(mailbox::BLOCK_ALIGN) {
        return Outcome::fail(None, Status::BadAddress, format!("{:#x} is not 8-byte aligned", request.address));
    }
    let header: MailboxHeader = match mem.read_obj::<Wire<MailboxHeader>>(addr) {
        Ok(h) => h.0,
        Err(e) => return Outcome::fail(None, Status::BadAddress, format!("header unreadable: {e}")),
    };
    let opcode = match Opcode::try_from(header.opcode) {
        Ok(op) => op,
        Err(raw) => return Outcome::fail(None, Status::BadOpcode, format!("opcode {raw}")),
    };
    if !opcode.is_valid_len(header.length) {
        return Outcome::fail(
            Some(opcode),
            Status::BadLength,
            format!("length {} (expected {})", header.length, opcode.block_len()),
        );
    }
    if !device.regs.enabled() {
        return Outcome::fail(Some(opcode), Status::Disabled, "CONTROL.enable is clear".into());
    }
    match opcode {
        Opcode::SelfTest => self_test(device, mem, addr),
        other => match crate::gpu::commands::execute(device, mem, other, addr, header.length) {
            Ok(()) => Outcome { opcode: Some(other), status: Status::Ok, vector: None, detail: None },
            Err((status, detail)) => Outcome::fail(Some(other), status, detail),
        },
    }
}

fn self_test<M: GuestMemory>(device: &Device, mem: &M, addr: GuestAddress) -> Outcome {
    let op = Some(Opcode::SelfTest);
    let args: SelfTestArgs = match mem.read_obj::<Wire<SelfTestArgs>>(addr) {
        Ok(a) => a.0,
        Err(e) => return Outcome::fail(op, Status::BadAddress, format!("arguments unreadable: {e}")),
    };
    let vector = match u16::try_from(args.vector) {
        Ok(v) if v < device.config.msix_vectors => v,
        _ => return Outcome::fail(op, Status::BadArgument, format!("vector {} out of range", args.vector)),
    };
    let response_at = GuestAddress(addr.0 + core::mem::offset_of!(SelfTestArgs, response) as u64);
    if let Err(e) = mem.write_obj(mailbox::self_test_response(args.cookie), response_at) {
        return Outcome::fail(op, Status::BadAddress, format!("response unwritable: {e}"));
    }
    Outcome { opcode: op, status: Status::Ok, vector: Some(vector), detail: None }
}

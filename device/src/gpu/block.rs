//! One mailbox argument block run to completion, whichever way it arrived (`MB_SUBMIT` or a
//! command-ring entry): read and check the header, execute the command (`commands.rs`, or the
//! self-test here), write the header back, then log, trace and raise the mailbox interrupt.

use std::sync::atomic::{fence, Ordering};

use belfry_abi::irq;
use belfry_abi::mailbox::{self, MailboxHeader, Opcode, SelfTestArgs, Status};
use vm_memory::{Bytes, GuestAddress, GuestMemory};

use super::commands;
use super::shared::Gpu;
use crate::registers::MailboxRequest;
use crate::trace::{Event, MailboxPhase};
use crate::wire::Wire;

/// Outcome of a command: its status, the vector to raise, and a detail for the trace.
pub struct Outcome {
    opcode: Option<Opcode>,
    /// The completion status.
    pub status: Status,
    vector: Option<u16>,
    detail: Option<String>,
}

impl Outcome {
    fn fail(opcode: Option<Opcode>, status: Status, detail: String) -> Self {
        Outcome { opcode, status, vector: None, detail: Some(detail) }
    }
}

/// Test-only (`mailbox-stall`): whether the mailbox stopped answering (until a reset). If so,
/// the command `seq` at `address` that arrived through `path` is dropped unanswered and traced.
pub fn dropped_by_stall(gpu: &Gpu, seq: u32, address: u64, path: &str) -> bool {
    if !gpu.lock().mailbox_stalled {
        return false;
    }
    gpu.ports.tracer.emit(Event::Mailbox {
        phase: MailboxPhase::Dropped,
        opcode: None,
        seq,
        address,
        status: None,
        detail: Some(format!("injected mailbox-stall: the {path} does not answer")),
    });
    true
}

/// Runs the argument block of `request` (from `MB_SUBMIT` or a command-ring entry, whose
/// `opcode` the block must repeat) and writes its header back whenever it is readable, whatever
/// the outcome; an unreadable block is reported only through `MB_STATUS` or the ring entry.
pub fn run_block(gpu: &Gpu, request: MailboxRequest, entry_opcode: Option<u32>) -> Outcome {
    let mem = gpu.ports.ram.memory();
    let addr = GuestAddress(request.address);
    // Test-only (`mailbox-stall`, `MAILBOX_STALE_SEQ_TOKEN`): answered unrun, as the late
    // completion of the command before it.
    let stale = std::mem::take(&mut gpu.lock().mailbox_stale_seq);
    let outcome = if stale {
        Outcome {
            opcode: None,
            status: Status::Ok,
            vector: None,
            detail: Some("injected stale sequence number".into()),
        }
    } else {
        run_command(gpu, &mem, request, entry_opcode)
    };
    let block_seq = if stale { request.seq.wrapping_sub(1) } else { request.seq };
    let header_ok =
        request.address.is_multiple_of(mailbox::BLOCK_ALIGN) && mem.read_obj::<Wire<MailboxHeader>>(addr).is_ok();
    let seq_at = request.address.checked_add(8).map(GuestAddress);
    let status_at = request.address.checked_add(12).map(GuestAddress);
    if let (true, Some(seq_at), Some(status_at)) = (header_ok, seq_at, status_at) {
        // Results first, then the sequence number, then the status last with release order,
        // so a driver that sees the status sees the results.
        let _ = mem.write_obj(block_seq, seq_at);
        fence(Ordering::Release);
        let _ = mem.store(outcome.status as u32, status_at, Ordering::Release);
    }
    outcome
}

/// Logs, traces and signals (the mailbox interrupt) a completed command.
pub fn finish(gpu: &Gpu, request: MailboxRequest, outcome: Outcome) {
    let mem = gpu.ports.ram.memory();
    if outcome.status != Status::Ok {
        log::warn!(
            "{}: mailbox command {} at {:#x} failed: {} ({})",
            gpu.ports.config.name,
            request.seq,
            request.address,
            outcome.status.name(),
            outcome.detail.as_deref().unwrap_or("")
        );
    }
    crate::trace::mailbox_block(&gpu.ports.tracer, &mem, request.seq, request.address);
    gpu.ports.tracer.emit(Event::Mailbox {
        phase: MailboxPhase::Complete,
        opcode: outcome.opcode.map(|o| o.name().into()),
        seq: request.seq,
        address: request.address,
        status: Some(outcome.status.name().into()),
        detail: outcome.detail,
    });
    gpu.ports.interrupts.raise(irq::cause::MAILBOX, outcome.vector, &gpu.ports.tracer);
}

fn run_command<M: GuestMemory>(gpu: &Gpu, mem: &M, request: MailboxRequest, entry_opcode: Option<u32>) -> Outcome {
    let addr = GuestAddress(request.address);
    if !request.address.is_multiple_of(mailbox::BLOCK_ALIGN) {
        return Outcome::fail(None, Status::BadAddress, format!("{:#x} is not 8-byte aligned", request.address));
    }
    let header: MailboxHeader = match mem.read_obj::<Wire<MailboxHeader>>(addr) {
        Ok(h) => h.0,
        Err(e) => return Outcome::fail(None, Status::BadAddress, format!("header unreadable: {e}")),
    };
    if let Some(raw) = entry_opcode.filter(|&raw| raw != header.opcode) {
        return Outcome::fail(
            None,
            Status::BadOpcode,
            format!("ring entry opcode {raw} differs from the block's {}", header.opcode),
        );
    }
    let opcode = match Opcode::try_from(header.opcode) {
        Ok(op) => op,
        Err(e) => return Outcome::fail(None, Status::BadOpcode, format!("opcode {}", e.raw)),
    };
    if !opcode.is_valid_len(header.length) {
        return Outcome::fail(
            Some(opcode),
            Status::BadLength,
            format!("length {} (expected {})", header.length, opcode.block_len()),
        );
    }
    if !gpu.ports.regs.enabled() {
        return Outcome::fail(Some(opcode), Status::Disabled, "CONTROL.enable is clear".into());
    }
    match opcode {
        Opcode::SelfTest => self_test(gpu, mem, addr),
        other => match commands::execute(gpu, mem, other, addr, header.length) {
            Ok(()) => Outcome { opcode: Some(other), status: Status::Ok, vector: None, detail: None },
            Err((status, detail)) => Outcome::fail(Some(other), status, detail),
        },
    }
}

fn self_test<M: GuestMemory>(gpu: &Gpu, mem: &M, addr: GuestAddress) -> Outcome {
    let op = Some(Opcode::SelfTest);
    let args: SelfTestArgs = match mem.read_obj::<Wire<SelfTestArgs>>(addr) {
        Ok(a) => a.0,
        Err(e) => return Outcome::fail(op, Status::BadAddress, format!("arguments unreadable: {e}")),
    };
    let vector = match u16::try_from(args.vector) {
        Ok(v) if v < gpu.ports.config.gpu.msix_vectors => v,
        _ => return Outcome::fail(op, Status::BadArgument, format!("vector {} out of range", args.vector)),
    };
    let response_at = GuestAddress(addr.0 + core::mem::offset_of!(SelfTestArgs, response) as u64);
    if let Err(e) = mem.write_obj(mailbox::self_test_response(args.cookie), response_at) {
        return Outcome::fail(op, Status::BadAddress, format!("response unwritable: {e}"));
    }
    Outcome { opcode: op, status: Status::Ok, vector: Some(vector), detail: None }
}

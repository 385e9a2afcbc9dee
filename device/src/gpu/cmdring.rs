//! The command ring (`CAPS.cmd_ring`, `belfry_abi::cmdring`): mailbox commands the driver
//! queues in guest memory and announces by ringing the ring's doorbell page, run by the
//! command processor in order. Every field is the guest's: a bad base, size or tail is a
//! ring-level error (`CMD_RING_ERROR`, and the mailbox interrupt so a waiting driver looks),
//! a bad entry an error completion; nothing here panics.

use std::sync::atomic::{fence, Ordering};

use belfry_abi::cmdring::{self, Entry, RingError};
use belfry_abi::irq;
use belfry_abi::mailbox::Status;
use belfry_trace_schema::input_log::Entry as InputEntry;
use vm_memory::{Bytes, GuestAddress};

use super::block;
use super::shared::Gpu;
use crate::registers::MailboxRequest;
use crate::trace::{Event, MailboxPhase};
use crate::wire::Wire;

/// Runs the ring's entries from its head to the tail its doorbell holds. `before_each` runs
/// before every command: the caller kicks the queue doorbells rung meanwhile, so a ring that
/// reached the device before a command (say `DISCONNECT_DOORBELL`) is handled under the
/// bindings it was written under, as for the BAR0 mailbox.
pub fn run(gpu: &Gpu, mut before_each: impl FnMut(&Gpu)) {
    let regs = &gpu.ports.regs;
    loop {
        if regs.pci_d3hot() {
            // D3hot arrived between entries: the rest runs back in D0.
            regs.latch_cmd_ring();
            return;
        }
        let Some(ring) = regs.cmd_ring() else {
            log::debug!("{}: command-ring doorbell rung with the ring disabled", gpu.ports.config.name);
            return;
        };
        if !cmdring::valid_size(ring.size) {
            return ring_error(gpu, RingError::BadSize, format!("size {}", ring.size));
        }
        // The doorbell holds the free-running tail in its low 32 bits.
        let tail = u32::try_from(ring_tail(gpu, ring.doorbell) & u64::from(u32::MAX)).unwrap_or(u32::MAX);
        let Some(pending) = cmdring::pending(ring.head, tail, ring.size) else {
            return ring_error(gpu, RingError::BadTail, format!("tail {tail}, head {}, size {}", ring.head, ring.size));
        };
        if pending == 0 {
            return;
        }
        let Some(at) = cmdring::entry_address(ring.base, ring.size, ring.head) else {
            return ring_error(gpu, RingError::BadBase, format!("base {:#x}", ring.base));
        };
        let mem = gpu.ports.ram.memory();
        let entry: Entry = match mem.read_obj::<Wire<Entry>>(GuestAddress(at)) {
            Ok(e) => e.0,
            Err(e) => return ring_error(gpu, RingError::BadBase, format!("entry at {at:#x} unreadable: {e}")),
        };
        drop(mem);
        if std::mem::take(&mut gpu.lock().cmd_ring_fault) {
            return ring_error(gpu, RingError::BadBase, format!("injected ring fault at entry {at:#x}"));
        }
        if block::dropped_by_stall(gpu, entry.seq, entry.arg, "command ring") {
            return;
        }
        before_each(gpu);
        let request = MailboxRequest { address: entry.arg, seq: entry.seq, generation: regs.generation() };
        let completed = gpu.holding_wakeups(|| {
            let outcome = block::run_block(gpu, request, Some(entry.opcode));
            if request.generation != regs.generation() {
                return false; // a reset intervened: drop the completion
            }
            complete_entry(gpu, at, entry.seq, outcome.status);
            regs.set_cmd_head(ring.head.wrapping_add(1));
            block::finish(gpu, request, outcome);
            true
        });
        if !completed {
            return;
        }
    }
}

/// The command ring's doorbell value as the command processor reads it between entries: an
/// input of the input log (a `doorbell` record; replaying, the recorded value), as the
/// client's doorbell write may land before or after the look.
fn ring_tail(gpu: &Gpu, doorbell: u32) -> u64 {
    let value = gpu.ports.doorbells.value(doorbell);
    match gpu.ports.recording.input(|| InputEntry::Doorbell { index: doorbell, value }) {
        Some(InputEntry::Doorbell { value: recorded, .. }) => recorded,
        _ => value,
    }
}

/// Writes an entry's completion: the status, then (release) the sequence number.
fn complete_entry(gpu: &Gpu, at: u64, seq: u32, status: Status) {
    let mem = gpu.ports.ram.memory();
    let (Some(status_at), Some(seq_at)) =
        (at.checked_add(cmdring::STATUS_OFFSET), at.checked_add(cmdring::DONE_SEQ_OFFSET))
    else {
        return;
    };
    let _ = mem.write_obj(status as u32, GuestAddress(status_at));
    fence(Ordering::Release);
    let _ = mem.store(seq, GuestAddress(seq_at), Ordering::Release);
}

/// A ring-level error: counted, traced, and the mailbox interrupt raised so a driver waiting
/// for a completion looks at `CMD_RING_ERROR` instead of timing out blind.
fn ring_error(gpu: &Gpu, error: RingError, detail: String) {
    log::warn!("{}: command ring: {error:?} ({detail})", gpu.ports.config.name);
    gpu.ports.regs.cmd_ring_error(error);
    gpu.ports.tracer.emit(Event::Mailbox {
        phase: MailboxPhase::Dropped,
        opcode: None,
        seq: 0,
        address: 0,
        status: None,
        detail: Some(format!("command ring {error:?}: {detail}")),
    });
    gpu.ports.interrupts.raise(irq::cause::MAILBOX, None, &gpu.ports.tracer);
}

//! A client that leaves between its last command's completion and that command's interrupt
//! replays to its end: the device's reset at the departure (the interrupt mask cleared, the
//! eventfds dropped) and the command processor's raise are met in the recorded order, so the
//! replayed raise writes the eventfd the recorded one did.
//!
//! The order is made, not waited for: an in-process device records while a test-only hook
//! (`belfry_device::dma::test_hook`) holds the command processor in its trace of the completed
//! block — after the `MB_STATUS` store, before the raise — until the client has read
//! `MB_STATUS`; the client then waits for the interrupt and leaves. The log has the client's
//! last reply before the interrupt, and its replay's client leaves at once.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use belfry_abi::mailbox::{self, Opcode, Status};
use belfry_abi::regs;
use belfry_device::dma::test_hook;
use belfry_trace_schema::input_log::{self, Entry};
use common::gpu::*;
use common::in_process;

/// Where the test's client puts its mailbox blocks (`common::gpu`).
const MAILBOX_PA: u64 = 0x1000;

/// Records into `log` (the trace into `trace`) a session whose client reads `MB_STATUS` while
/// the command processor is held between its last command's completion and the interrupt, then
/// waits for the interrupt and leaves.
fn record_a_departure_between_completion_and_interrupt(log: &Path, trace: &Path) {
    let (mut g, serving) = in_process::record(log, Some(trace));
    let root = g.alloc(1);
    let mut block = to_bytes(&mailbox::CreateAddressSpaceArgs { id: 1, root_pa: root, ..Default::default() });
    let ram = g.ram.try_clone().unwrap();
    let (status_read, held_until) = mpsc::channel::<()>();
    let mut held = false;
    // The block's status word is written before MB_STATUS is stored: the first recorded read
    // of the block that finds it set is the trace's, after the store and before the raise.
    test_hook::set_after_recorded_read(Some(Box::new(move |address, _| {
        let mut status = [0u8; 4];
        ram.read_exact_at(&mut status, MAILBOX_PA + 12).unwrap();
        if address == MAILBOX_PA && u32::from_le_bytes(status) != Status::Pending as u32 && !held {
            held = true;
            let _ = held_until.recv_timeout(Duration::from_secs(10));
        }
    })));
    g.submit_mailbox(Opcode::CreateAddressSpace, &mut block);
    while regs::MB_STATUS(g.c.read32(0, regs::MB_STATUS::OFFSET)).busy() {}
    status_read.send(()).unwrap();
    g.wait_for_every_mailbox_interrupt();
    test_hook::set_after_recorded_read(None);
    let Gpu { c, .. } = g;
    drop(c);
    serving.join().unwrap();
}

#[test]
fn a_client_that_leaves_between_its_last_completion_and_the_interrupt_replays_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("device0.record");
    record_a_departure_between_completion_and_interrupt(&log, &dir.path().join("device0.trace"));
    let entries: Vec<(u64, Entry)> = input_log::open(&log).unwrap().collect::<Result<_, _>>().unwrap();
    let last_reply = entries.iter().rposition(|(_, e)| matches!(e, Entry::Reply { .. }));
    let interrupt = entries.iter().rposition(|(_, e)| matches!(e, Entry::Interrupt { vector: 0, .. }));
    assert!(
        matches!((last_reply, interrupt), (Some(r), Some(i)) if r < i),
        "the log has the client's last reply ({last_reply:?}) before the interrupt ({interrupt:?})"
    );
    in_process::replays_to_its_end(&log, 10);
}

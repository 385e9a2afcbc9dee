//! A guest store racing a recorded read: an in-process device records its inputs while a
//! test-only hook (`belfry_device::dma::test_hook`) rewrites a mailbox block's opcode in guest
//! memory right after the recorder copied the block's header, before the command processor
//! decides from it. The device runs the command the log holds — the copy is the only thing the
//! access reads — so the log replays without divergence.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use belfry_abi::mailbox::{self, Opcode, Status};
use belfry_device::dma::test_hook;
use belfry_trace_schema::input_log::{self, Entry};
use common::gpu::*;
use common::in_process;

/// Where the test's client puts its mailbox blocks (`common::gpu`).
const MAILBOX_PA: u64 = 0x1000;
/// An opcode no command has: what the racing store writes over the block's.
const FOREIGN_OPCODE: u32 = 0x7777;

/// Records into `log` a session of an in-process device whose last command,
/// CREATE_ADDRESS_SPACE, has its opcode overwritten in guest memory just after the recorder
/// copied the block's header. The command's status as the client found it.
fn record_with_a_racing_store(log: &Path) -> Status {
    let (mut g, serving) = in_process::record(log, None);
    let root = g.alloc(1);
    let mut block = to_bytes(&mailbox::CreateAddressSpaceArgs { id: 1, root_pa: root, ..Default::default() });
    let ram = g.ram.try_clone().unwrap();
    let stored = Arc::new(AtomicBool::new(false));
    let storing = stored.clone();
    test_hook::set_after_recorded_read(Some(Box::new(move |address, _| {
        if address == MAILBOX_PA && !storing.swap(true, Ordering::SeqCst) {
            ram.write_all_at(&FOREIGN_OPCODE.to_le_bytes(), MAILBOX_PA).unwrap();
        }
    })));
    let status = g.mailbox(Opcode::CreateAddressSpace, &mut block);
    test_hook::set_after_recorded_read(None);
    assert!(stored.load(Ordering::SeqCst), "the store raced no recorded read of the block");
    let Gpu { c, .. } = g;
    drop(c);
    serving.join().unwrap();
    status
}

#[test]
fn a_guest_store_after_the_recorders_copy_changes_nothing_the_device_or_the_replay_reads() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("device0.record");
    let status = record_with_a_racing_store(&log);
    assert_eq!(status, Status::Ok, "the device ran the command whose header the log holds");
    let entries: Vec<(u64, Entry)> = input_log::open(&log).unwrap().collect::<Result<_, _>>().unwrap();
    let create = (Opcode::CreateAddressSpace as u32).to_le_bytes();
    assert!(
        entries
            .iter()
            .any(|(_, e)| matches!(e, Entry::GuestRead { address: MAILBOX_PA, bytes, .. } if bytes[..4] == create)),
        "the log holds the header as copied, before the store"
    );
    assert!(
        entries.iter().any(
            |(_, e)| matches!(e, Entry::GuestRead { address: MAILBOX_PA, bytes, .. } if bytes[..4] == FOREIGN_OPCODE.to_le_bytes())
        ),
        "reads after the store log what it wrote"
    );
    in_process::replays_to_its_end(&log, 10);
}

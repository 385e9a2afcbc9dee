//! `--record`: a device driven like a driver would leaves an input log holding what crossed its
//! boundary — the vfio-user messages with their fds' identity and the replies as sent, the
//! guest-memory bytes its threads read (the command buffer among them), the doorbell value the
//! command processor took, clock reads, the interrupts raised, and the objects' lock order —
//! readable to its end.

mod common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_abi::mailbox::Status;
use belfry_trace_schema::input_log::{self, Entry, FdKind};
use common::gpu::*;
use common::read_u32;

#[test]
fn a_recorded_device_logs_messages_fds_guest_reads_doorbells_clocks_and_lock_order() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("device0.record.gz");
    let mut g = Gpu::start(&["--record", log.to_str().unwrap()]);
    let ram_identity = {
        let m = g.ram.metadata().unwrap();
        (m.dev(), m.ino())
    };
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 3), Status::Ok);
    let (dst, dst_pa) = g.buffer(p, 1);
    let packets = pk::write32(dst, 0x5eed_f00d);
    g.submit(&mut q, &packets);
    g.drain(&q);
    assert_eq!(read_u32(&g.ram, dst_pa), 0x5eed_f00d);
    // The engine may find the new write pointer before the command processor takes the ring;
    // the processor takes every doorbell written before a mailbox command ahead of it.
    g.query(q.id);
    let write_index = q.write_index;

    let Gpu { dev: mut device, c, .. } = g;
    drop(c);
    let status = device.wait_exit(Duration::from_secs(30)).expect("the device exits when its client leaves");
    assert!(status.success(), "{status}");

    let entries: Vec<(u64, Entry)> =
        input_log::open(&log).unwrap().collect::<Result<_, _>>().expect("the log reads to its end");
    let Entry::Config { json } = &entries[0].1 else { panic!("first record: {:?}", entries[0]) };
    let config: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(config["name"], "belfry0", "{json}");
    assert_eq!(
        config["build"],
        belfry_device::build_identity::BUILD,
        "the log names the build that recorded it: {json}"
    );

    let messages: Vec<_> =
        entries.iter().filter_map(|(_, e)| matches!(e, Entry::Message { .. }).then_some(e)).collect();
    let replies = entries.iter().filter(|(_, e)| matches!(e, Entry::Reply { .. })).count();
    assert!(messages.len() > 20, "{} messages", messages.len());
    assert!(replies > 0 && replies <= messages.len(), "{replies} replies to {} messages", messages.len());
    let dma_map_fds = messages.iter().find_map(|e| match e {
        Entry::Message { fds, .. } if fds.iter().any(|f| f.kind == FdKind::File) => Some(fds.clone()),
        _ => None,
    });
    let fd = dma_map_fds.expect("DMA_MAP's memfd")[0];
    assert_eq!((fd.dev, fd.ino), ram_identity, "the memfd's identity is the guest RAM file's");
    let eventfds = messages
        .iter()
        .filter_map(|e| match e {
            Entry::Message { fds, .. } => Some(fds.iter().filter(|f| f.kind == FdKind::Anonymous).count()),
            _ => None,
        })
        .max();
    assert!(eventfds >= Some(2), "SET_IRQS's eventfds are logged as anonymous inodes: {eventfds:?}");

    assert!(
        entries.iter().any(
            |(_, e)| matches!(e, Entry::GuestRead { bytes, .. } if bytes.windows(packets.len()).any(|w| w == packets))
        ),
        "the engine's read of the command buffer is logged with its bytes"
    );
    assert!(
        entries.iter().any(|(_, e)| *e == Entry::Doorbell { index: 3, value: u64::from(write_index) }),
        "the doorbell value the command processor took is logged: {:?} (write index {write_index})",
        entries.iter().filter(|(_, e)| matches!(e, Entry::Doorbell { .. } | Entry::Rung { .. })).collect::<Vec<_>>()
    );
    assert!(entries.iter().any(|(_, e)| matches!(e, Entry::Clock { .. })), "clock reads are logged");
    assert!(
        entries.iter().any(|(_, e)| matches!(e, Entry::Interrupt { result: 0, .. })),
        "the interrupts raised (mailbox completions) are logged with the write's result"
    );
    let ticket_threads: std::collections::BTreeSet<u16> = entries
        .iter()
        .filter_map(|(_, e)| match e {
            Entry::Ticket { thread } => Some(*thread),
            _ => None,
        })
        .collect();
    assert!(ticket_threads.len() >= 2, "the command processor and an engine both took the lock: {ticket_threads:?}");
}

//! What the engines write into the trace: the scheduler's picks, command-buffer boundaries,
//! packets with their bytes, the queue of a fence decision and the page walk of an MMU fault.

use std::path::Path;

use belfry_abi::mailbox::{self, Opcode};
use belfry_abi::packet::{self, Opcode as P};

use super::*;
use crate::trace::{TraceSettings, Tracer};

fn traced(path: &Path) -> Rig {
    let config = DeviceConfig::default();
    let tracer = Tracer::with_file(&config, path, TraceSettings::default()).unwrap();
    Rig::new_traced(config, Arc::new(tracer))
}

fn records(rig: &Rig, path: &Path, kinds: &[&str]) -> Vec<serde_json::Value> {
    rig.gpu.ports.tracer.sync();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut belfry_trace_schema::file::open(path).unwrap(), &mut text).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| kinds.contains(&v["event"].as_str().unwrap()))
        .collect()
}

#[test]
fn a_buffer_is_traced_from_the_pick_through_its_packets_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut rig = traced(&path);
    let write = pk(P::WriteData32, packet::WriteData32 { va: FREE_VA + 16, value: 0xabcd, ..Default::default() });
    let signal = pk(
        P::FenceSignal,
        packet::FenceSignal { fence_va: FREE_VA, value: 4, log_entry: packet::NO_LOG, ..Default::default() },
    );
    let args = mailbox::RegisterFenceArgs {
        handle: 0x33,
        kind: belfry_abi::fence::FenceKind::Default as u32,
        current_value: mailbox::FenceLocation {
            space: mailbox::LOCATION_SYSTEM_VA,
            address: FREE_VA,
            ..Default::default()
        },
        monitored_value: mailbox::FenceLocation {
            space: mailbox::LOCATION_SYSTEM_VA,
            address: FREE_VA + 8,
            ..Default::default()
        },
        ..Default::default()
    };
    rig.ok(Opcode::RegisterFence, args);
    let size = write.len() + signal.len();
    rig.submit(&[write.clone(), signal].concat());
    rig.run();
    let kinds = ["schedule", "command_buffer", "packet", "fence_decision"];
    let r = records(&rig, &path, &kinds);
    let seq: Vec<&str> = r.iter().map(|v| v["event"].as_str().unwrap()).collect();
    assert_eq!(seq, ["schedule", "command_buffer", "packet", "packet", "fence_decision", "command_buffer"]);
    assert_eq!((r[0]["engine"].as_u64(), r[0]["queue"].as_u64()), (Some(u64::from(ENGINE.raw())), Some(1)));
    assert_eq!(r[0]["why"], "only_ready");
    assert_eq!(r[1]["phase"], "begin");
    assert_eq!((r[1]["ring_index"].as_u64(), r[1]["va"].as_u64()), (Some(0), Some(CMDBUF_VA)));
    assert_eq!(r[1]["size"].as_u64(), Some(size as u64));
    let hex: String = write.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(r[2]["bytes"], hex, "a packet record carries the packet's bytes");
    assert_eq!((r[4]["queue"].as_u64(), r[4]["handle"].as_u64()), (Some(1), Some(0x33)));
    assert_eq!((r[5]["phase"].as_str(), r[5]["ring_index"].as_u64()), (Some("end"), Some(0)));
}

#[test]
fn a_pick_among_ready_queues_says_why_and_who_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut rig = traced(&path);
    rig.create_queue(2, 0);
    rig.push(&packet::header(P::Nop, 1).to_le_bytes());
    for id in [1, 2] {
        rig.ok(Opcode::KickQueue, mailbox::ObjectArgs { id, ..Default::default() });
    }
    assert!(crate::gpu::engine::step(&rig.gpu, ENGINE));
    let r = records(&rig, &path, &["schedule"]);
    assert_eq!(r[0]["why"], "round_robin");
    assert_eq!(r[0]["queue"], 1);
    assert_eq!(r[0]["others"], serde_json::json!([[2, "lost"]]));
}

#[test]
fn an_mmu_fault_records_its_page_walk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut rig = traced(&path);
    let unmapped = DATA_VA + 0x20_0000;
    rig.submit(&pk(P::WriteData32, packet::WriteData32 { va: unmapped, value: 1, ..Default::default() }));
    rig.run();
    let r = records(&rig, &path, &["fault"]);
    assert_eq!(r[0]["reason"], "MMU_NOT_PRESENT");
    let walk = r[0]["walk"].as_array().unwrap();
    let levels: Vec<u64> = walk.iter().map(|s| s["level"].as_u64().unwrap()).collect();
    assert_eq!(levels, [3, 2, 1], "the walk stops at the level-1 entry that is not present");
    assert_eq!(walk[2]["entry"], 0);
}

/// A GPU signal below a registered fence's CurrentValue is refused — the fence keeps its value,
/// the packet completes and the queue goes on — and counted and traced (`fence_backwards`); an
/// equal or higher value is written.
#[test]
fn a_gpu_signal_that_would_move_a_fence_backwards_is_refused_counted_and_traced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut rig = traced(&path);
    let loc = |address| mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address, ..Default::default() };
    rig.write(FREE_PA + 8, &u64::MAX.to_le_bytes());
    let args = mailbox::RegisterFenceArgs {
        handle: 0x44,
        kind: belfry_abi::fence::FenceKind::Default as u32,
        current_value: loc(FREE_VA),
        monitored_value: loc(FREE_VA + 8),
        ..Default::default()
    };
    rig.ok(Opcode::RegisterFence, args);
    let signal = |value| {
        pk(
            P::FenceSignal,
            packet::FenceSignal { fence_va: FREE_VA, value, log_entry: packet::NO_LOG, ..Default::default() },
        )
    };
    let after = pk(P::WriteData32, packet::WriteData32 { va: FREE_VA + 16, value: 0xabcd, ..Default::default() });
    rig.submit(&[signal(5), signal(3), signal(5), after].concat());
    rig.run();
    assert_eq!(rig.read_u64(FREE_PA), 5, "5→3 refused; 5 again is not backwards");
    assert_eq!(rig.read_u32(FREE_PA + 16), 0xabcd, "the queue went on");
    assert!(rig.context_state().runs(), "no fault");
    assert_eq!(rig.gpu.fences_backwards.load(std::sync::atomic::Ordering::Relaxed), 1);
    let r = records(&rig, &path, &["fence_backwards"]);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0]["handle"].as_u64(), r[0]["from"].as_u64(), r[0]["to"].as_u64()), (Some(0x44), Some(5), Some(3)));
    assert_eq!((r[0]["queue"].as_u64(), r[0]["count"].as_u64()), (Some(1), Some(1)));
}

//! One event of every kind with every field set (optional ones included): what the round-trip
//! test writes and reads back, and whose fields the documentation test looks for in
//! `docs/TRACE.md`.

use std::collections::BTreeMap;

use crate::event::{Event, Header, HeaderClock, TraceLevel, WalkStep, FORMAT_VERSION};
use crate::words::{
    BufferPhase, ConnectionState, Delivery, DmaOp, FenceSource, MailboxPhase, Passed, ResetSource, ScheduleWhy,
};

/// One event of each kind in [`crate::event::KINDS`], every field set.
pub fn every_kind() -> Vec<Event> {
    vec![
        Event::Header(Header {
            format: "belfry-trace".into(),
            version: FORMAT_VERSION,
            producer: "belfry-device 0.1.0".into(),
            abi_version: [1, 0],
            level: TraceLevel::Commands,
            limit_bytes: 1 << 30,
            clock: HeaderClock { monotonic_ns: 816_098_488_854, unix_ns: 1_795_465_713_608_950_195 },
            device: serde_json::json!({"name": "belfry0", "doorbells": 16}),
        }),
        Event::Clock { gpu_ns: 12_345 },
        Event::LimitReached { limit_bytes: 4096 },
        Event::Dropped {
            reason: "writer_behind".into(),
            records: 3,
            first_t_ns: 77,
            by_event: BTreeMap::from([("doorbell".into(), 2), ("packet".into(), 1)]),
        },
        Event::Connection { state: ConnectionState::Connected },
        Event::Message {
            id: 7,
            command: "DMA_MAP".into(),
            size: 48,
            fds: 1,
            errno: Some(22),
            error: Some("bad flags".into()),
            posted: true,
        },
        Event::RegRead { region: "bar0".into(), offset: 0x10, size: 4, name: Some("STATUS".into()), value: 1 },
        Event::RegWrite {
            region: "bar0".into(),
            offset: 0x20,
            size: 4,
            name: Some("CONTROL".into()),
            value: 3,
            fields: vec!["enable=1".into(), "reset=1".into()],
        },
        Event::Doorbell { index: 3, value: 9 },
        Event::DoorbellWake { rung: vec![(3, 9), (4, 1)] },
        Event::Mailbox {
            phase: MailboxPhase::Complete,
            opcode: Some("CREATE_QUEUE".into()),
            seq: 5,
            address: 0x1000,
            status: Some("INVALID".into()),
            detail: Some("no such context".into()),
        },
        Event::MailboxBlock { seq: 5, bytes: "0100000018000000".into() },
        Event::Interrupt { vector: 1, cause: 2, delivery: Delivery::Moderated },
        Event::Dma { op: DmaOp::MapUnreachable, address: 0x10_0000, size: 4096 },
        Event::SetIrqs { index: "MSIX".into(), start: 0, count: 4, action: "TRIGGER|EVENTFD".into() },
        Event::Reset { source: ResetSource::VfioUser },
        Event::Packet { queue: 2, engine: 0, opcode: "COPY".into(), va: 0x40_0000, bytes: "0a000000".into() },
        Event::CommandBuffer {
            phase: BufferPhase::Begin,
            queue: 2,
            engine: 0,
            ring_index: 6,
            va: Some(0x40_0000),
            size: Some(256),
        },
        Event::Schedule {
            engine: 0,
            queue: 2,
            why: ScheduleWhy::Priority,
            others: vec![(1, Passed::Waiting), (3, Passed::Lost)],
        },
        Event::FenceDecision {
            source: FenceSource::Signal,
            handle: 9,
            current: 4,
            monitored: 3,
            interrupt: true,
            queue: Some(2),
            engine: Some(0),
        },
        Event::FenceRegistered {
            handle: 9,
            kind: "Monitored".into(),
            current: "guest RAM 0x2000".into(),
            monitored: "VRAM 0x40".into(),
        },
        Event::FenceMonitoredMoved {
            handle: 9,
            from: "VRAM 0x40".into(),
            to: "guest RAM 0x3040".into(),
            current: 4,
            monitored: 3,
            interrupt: true,
        },
        Event::FenceStorageMoved {
            handle: 10,
            from: "VRAM 0x1000".into(),
            to: "guest RAM 0x5000".into(),
            monitored_to: "guest RAM 0x5800".into(),
            current: 7,
            monitored: u64::MAX,
            interrupt: false,
        },
        Event::LostSignals { context: 1, fences: 2 },
        Event::FenceBackwards { handle: 9, from: 5, to: 4, queue: 2, engine: 0, count: 1 },
        Event::Fault {
            context: 1,
            queue: 2,
            reason: "MMU_NOT_PRESENT".into(),
            address: 0xdead_0000,
            walk: vec![
                WalkStep { level: 3, at: 0x3000, entry: Some(0x4001) },
                WalkStep { level: 2, at: 0x4000, entry: None },
            ],
        },
        Event::QueueState { queue: 2, state: "hung".into(), detail: Some("watchdog".into()) },
        Event::EngineState { engine: 0, state: "F1".into() },
        Event::Record { kind: 1, engine: 0, queue: 2, context: 1, fence: 9, value: 4, address: 0x2000, detail: 7 },
        Event::PowerState { state: 3 },
    ]
}

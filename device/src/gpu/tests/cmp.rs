//! The command processor: a mailbox command submitted through the registers runs and completes
//! (header, status register, interrupt); doorbells kick their queues; idle engines ask for F1.

use belfry_abi::engine::EngineState;
use belfry_abi::irq::{self, RecordKind};
use belfry_abi::mailbox::{self, MailboxHeader, Opcode, Status};
use belfry_abi::regs::{MB_ARG_HI, MB_ARG_LO, MB_STATUS, MB_SUBMIT};

use super::*;
use crate::gpu::cmp::{handle, Token};
use crate::registers::WriteEffect;

/// Submits the block at `ARGS` through the mailbox registers and lets the CMP handle it.
fn submit(rig: &Rig, seq: u32) {
    let regs = &rig.gpu.ports.regs;
    regs.write(MB_ARG_LO::OFFSET, u32::try_from(ARGS).unwrap());
    regs.write(MB_ARG_HI::OFFSET, 0);
    assert!(matches!(regs.write(MB_SUBMIT::OFFSET, seq), WriteEffect::MailboxSubmitted(_)));
    assert!(handle(&rig.gpu, Token::Mailbox));
}

fn header(rig: &Rig) -> MailboxHeader {
    rig.gpu.ports.ram.memory().read_obj::<Wire<MailboxHeader>>(GuestAddress(ARGS)).unwrap().0
}

fn status_register(rig: &Rig) -> MB_STATUS {
    let irqs = InterruptBlock::new(Arc::new(RecordingSink::default()), 1);
    MB_STATUS(rig.gpu.ports.regs.read(MB_STATUS::OFFSET, &irqs))
}

#[test]
fn a_mailbox_command_runs_and_completes_with_its_status() {
    let rig = Rig::new(DeviceConfig::default());
    let args = mailbox::SelfTestArgs { cookie: 0x1234, vector: 1, ..Default::default() };
    rig.write(ARGS, &block(Opcode::SelfTest, args));
    submit(&rig, 7);
    let done: mailbox::SelfTestArgs = rig.gpu.ports.ram.memory().read_obj::<Wire<_>>(GuestAddress(ARGS)).unwrap().0;
    assert_eq!(done.response, mailbox::self_test_response(0x1234));
    assert_eq!((header(&rig).seq, header(&rig).status), (7, Status::Ok as u32));
    let st = status_register(&rig);
    assert_eq!((st.busy(), st.seq(), st.status()), (false, 7, Status::Ok as u32));
    assert_eq!(*rig.sink.0.lock().unwrap(), vec![(1, irq::cause::MAILBOX)], "on the requested vector");
}

#[test]
fn a_bad_or_disabled_command_completes_with_its_error() {
    let rig = Rig::new(DeviceConfig::default());
    rig.write(ARGS, &bytes(MailboxHeader { opcode: 0xee, length: 16, seq: 0, status: 0 }));
    submit(&rig, 1);
    assert_eq!(header(&rig).status, Status::BadOpcode as u32);
    rig.write(ARGS, &bytes(MailboxHeader { opcode: Opcode::KickQueue as u32, length: 99, seq: 0, status: 0 }));
    submit(&rig, 2);
    assert_eq!(header(&rig).status, Status::BadLength as u32);
    rig.gpu.ports.regs.write(belfry_abi::regs::CONTROL::OFFSET, 0);
    rig.write(ARGS, &block(Opcode::KickQueue, mailbox::ObjectArgs { id: 1, ..Default::default() }));
    submit(&rig, 3);
    assert_eq!(header(&rig).status, Status::Disabled as u32);
    assert_eq!(rig.queue_state(1), QueueState::Idle, "a disabled device runs nothing");
    assert_eq!(rig.sink.causes(), vec![irq::cause::MAILBOX; 3]);
}

#[test]
fn rung_doorbells_kick_their_queues() {
    let rig = Rig::new(DeviceConfig::from_flags(["--doorbells", "2"]).unwrap());
    let doorbells = &rig.doorbells;
    rig.create_queue(2, mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION);
    rig.ok(Opcode::ConnectDoorbell, mailbox::DoorbellArgs { queue: 2, doorbell: 1, ..Default::default() });
    rig.gpu.lock().queues.get_mut(&QueueId::new(2)).unwrap().state = QueueState::Idle;
    doorbells.ring(0, 1);
    assert!(handle(&rig.gpu, Token::Doorbell));
    assert_eq!(rig.queue_state(2), QueueState::Idle, "another doorbell");
    doorbells.ring(1, 1);
    assert!(handle(&rig.gpu, Token::Doorbell));
    assert_eq!(rig.queue_state(2), QueueState::Ready { cursor: None });
    assert!(!handle(&rig.gpu, Token::Kill));
}

#[test]
fn an_idle_engine_asks_for_f1_once_per_idle_period() {
    let rig = Rig::new(DeviceConfig::from_flags(["--idle-f1-ms", "0"]).unwrap());
    rig.gpu.lock().engines.iter_mut().for_each(|e| e.idle_reported = false);
    crate::gpu::cmp::idle_check(&rig.gpu);
    crate::gpu::cmp::idle_check(&rig.gpu);
    let r = rig.records();
    assert_eq!(r.len(), belfry_abi::engine::ENGINE_COUNT as usize, "one per engine, once");
    assert!(r
        .iter()
        .all(|r| r.kind == RecordKind::EngineState as u32 && r.detail == EngineState::TransitionToF1 as u32));
    assert!(rig.sink.causes().iter().all(|&c| c == irq::cause::ENGINE_STATE));
}

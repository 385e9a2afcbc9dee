//! Peer signals (XAD-15) between two GPUs on one guest memory: device A's engine signal of a
//! cross-adapter fence writes a payload into device B's peer-signal page, and B's consumer
//! releases the queue parked on that fence — with no `NOTIFY_FENCE_CHANGED` — while waits on
//! fences no payload named stay parked; an overflowed page makes B re-read every parked
//! cross-adapter wait.

use belfry_abi::fence::FenceKind;
use belfry_abi::packet::{self, Opcode as P};
use belfry_abi::peer;
use belfry_abi::regs::CAPS;

use super::*;
use crate::gpu::peer::Consumer;

/// A's peer-signal page.
const PAGE_A: u64 = 0x20_0000;
/// B's peer-signal page.
const PAGE_B: u64 = 0x20_1000;
/// The shared CurrentValue page of the cross-adapter fences: A's free page, mapped at
/// [`EXTRA_VA`] on both devices. Fence X's CurrentValue is at its start, fence Y's 64 bytes on.
const SHARED_PA: u64 = FREE_PA;
const X: u64 = 0;
const Y: u64 = 64;

fn peer_config() -> DeviceConfig {
    DeviceConfig::from_flags(["--peer-signals"]).unwrap()
}

fn peers(own_page: u64, others: &[u64]) -> mailbox::PeerSignalsArgs {
    let mut a =
        mailbox::PeerSignalsArgs { own_page, peer_count: u32::try_from(others.len()).unwrap(), ..Default::default() };
    a.peers[..others.len()].copy_from_slice(others);
    a
}

/// Registers `handle` cross-adapter on `rig`: CurrentValue at `EXTRA_VA + at` (the shared page),
/// MonitoredValue held at 0 on the rig's own free page (its `FREE_VA + 0x100 + at`).
fn register_side(rig: &Rig, handle: u64, at: u64) {
    let loc = |address| mailbox::FenceLocation { space: mailbox::LOCATION_SYSTEM_VA, address, ..Default::default() };
    rig.ok(
        Opcode::RegisterFence,
        mailbox::RegisterFenceArgs {
            handle,
            kind: FenceKind::Default as u32,
            flags: mailbox::REGISTER_CROSS_ADAPTER,
            current_value: loc(EXTRA_VA + at),
            monitored_value: loc(FREE_VA + 0x100 + at),
            ..Default::default()
        },
    );
}

/// Devices A and B with peer signals, each given its page and the other's, and fences X and Y
/// open on both.
fn pair() -> (Rig, Rig) {
    let mut a = Rig::new(peer_config());
    let mut b = Rig::beside(&a, peer_config());
    a.map_both(EXTRA_VA, SHARED_PA);
    b.map_both(EXTRA_VA, SHARED_PA);
    for (rig, handle) in [(&a, 0x10), (&b, 0x20)] {
        register_side(rig, handle + 1, X);
        register_side(rig, handle + 2, Y);
    }
    a.ok(Opcode::SetPeerSignals, peers(PAGE_A, &[PAGE_B]));
    b.ok(Opcode::SetPeerSignals, peers(PAGE_B, &[PAGE_A]));
    (a, b)
}

/// B's queue 1 waits for 3 on the fence at `EXTRA_VA + at`, then writes 1 at its `FREE_VA + 16`.
fn b_waits(b: &mut Rig, at: u64) {
    let mut buf = pk(
        P::FenceWait,
        packet::FenceWait { fence_va: EXTRA_VA + at, value: 3, log_entry: packet::NO_LOG, ..Default::default() },
    );
    buf.extend(pk(P::WriteData32, packet::WriteData32 { va: FREE_VA + 16, value: 1, ..Default::default() }));
    b.submit(&buf);
    b.run();
    assert!(matches!(b.queue_state(1), QueueState::Waiting { .. }), "{:?}", b.queue_state(1));
}

/// A's queue 1 signals the fence at `EXTRA_VA + at` to each of `values` (one command buffer).
fn a_signals(a: &mut Rig, at: u64, values: impl IntoIterator<Item = u64>) {
    let buf: Vec<u8> = values
        .into_iter()
        .flat_map(|value| {
            pk(
                P::FenceSignal,
                packet::FenceSignal { fence_va: EXTRA_VA + at, value, log_entry: packet::NO_LOG, ..Default::default() },
            )
        })
        .collect();
    a.submit(&buf);
    a.run();
    assert_eq!(a.queue_state(1), QueueState::Idle);
}

fn b_marked(b: &Rig) -> u32 {
    b.read_u32(FREE_PA + SECOND_RIG_SHIFT + 16)
}

/// proves: XAD-15 (device side) — a GPU signal of a cross-adapter fence wakes the other GPU directly: the
/// payload A's engine writes into B's peer-signal page releases B's queue parked on that fence,
/// and nothing else does (no `NOTIFY_FENCE_CHANGED`, no poll).
#[test]
fn a_peer_signal_releases_the_other_devices_wait_without_a_notification() {
    let (mut a, mut b) = pair();
    b_waits(&mut b, X);
    a_signals(&mut a, X, [3]);
    assert_eq!(a.read_u64(SHARED_PA + X), 3, "A signalled the shared CurrentValue");
    assert_eq!(b.run(), 0, "B's poll does not re-read a cross-adapter wait");
    assert_eq!(b_marked(&b), 0);
    let mut consumer = Consumer::default();
    assert_eq!(consumer.drain(&b.gpu), 1, "B's page held A's payload naming the fence");
    b.run();
    assert_eq!(b_marked(&b), 1, "released by the peer signal");
    assert_eq!(b.queue_state(1), QueueState::Idle);
    assert_eq!(consumer.drain(&b.gpu), 0, "consumed once");
    assert_eq!(a.read_u64(PAGE_A + peer::CLAIM_OFFSET), 0, "B signalled nothing into A's page");
}

/// A payload naming the fence a parked queue waits on wakes that queue's engine, asleep as an
/// idle engine sleeps (not only the waiters on `changed`): its next pick re-reads the wait at
/// once instead of after its poll.
#[test]
fn a_consumed_payload_wakes_the_engine_of_the_queue_waiting_on_its_fence() {
    let (mut a, mut b) = pair();
    b_waits(&mut b, X);
    let engine = super::wakeups::sleeping_engine(&b.gpu, ENGINE);
    a_signals(&mut a, X, [3]);
    assert_eq!(Consumer::default().drain(&b.gpu), 1);
    assert!(engine.recv_timeout(std::time::Duration::from_secs(5)).is_ok(), "the engine slept on");
}

/// Only the waits on the fence a payload names are re-read: a payload naming X leaves B's wait
/// on Y parked although Y's shared value (written by an adapter that says nothing) satisfies it.
#[test]
fn a_peer_signal_rereads_only_the_waits_on_the_fence_it_names() {
    let (mut a, mut b) = pair();
    b_waits(&mut b, Y);
    a.write(SHARED_PA + Y, &3u64.to_le_bytes());
    a_signals(&mut a, X, [5]);
    assert_eq!(Consumer::default().drain(&b.gpu), 1);
    assert_eq!(b.run(), 0, "the wait on Y was not re-read");
    assert!(matches!(b.queue_state(1), QueueState::Waiting { .. }));
    b.ok(Opcode::NotifyFenceChanged, mailbox::FenceHandleArgs { handle: 0x22, ..Default::default() });
    b.run();
    assert_eq!(b_marked(&b), 1);
}

/// An overflowed page loses payloads, so B re-reads every parked cross-adapter wait.
#[test]
fn an_overflowed_peer_page_rereads_every_cross_adapter_wait() {
    let (mut a, mut b) = pair();
    b_waits(&mut b, Y);
    a.write(SHARED_PA + Y, &3u64.to_le_bytes());
    a_signals(&mut a, X, 1..=peer::SLOTS + 1);
    assert_ne!(a.read_u64(PAGE_B + peer::OVERFLOW_OFFSET), 0, "A found B's page full");
    Consumer::default().drain(&b.gpu);
    b.run();
    assert_eq!(b_marked(&b), 1, "released by the overflow's rescan");
}

/// A device without the flag (the default) says so and refuses `SET_PEER_SIGNALS`; a wait there
/// is released by `NOTIFY_FENCE_CHANGED` only, as XAD-07 says.
#[test]
fn peer_signals_are_off_by_default_and_advertised_with_the_flag() {
    let caps = |rig: &Rig| CAPS(rig.gpu.ports.regs.read(CAPS::OFFSET, &rig.gpu.ports.interrupts));
    let plain = Rig::new(DeviceConfig::default());
    assert!(!caps(&plain).peer_signals());
    assert_eq!(plain.fails(Opcode::SetPeerSignals, peers(PAGE_A, &[PAGE_B])), Status::BadArgument);
    assert!(caps(&Rig::bare(peer_config())).peer_signals());
    let non_native = DeviceConfig::from_flags(["--peer-signals", "--no-native-fences"]).unwrap();
    assert!(!caps(&Rig::bare(non_native)).peer_signals(), "peer signals need native fences");
}

#[test]
fn set_peer_signals_is_validated() {
    let rig = Rig::new(peer_config());
    assert_eq!(rig.fails(Opcode::SetPeerSignals, peers(PAGE_A + 8, &[])), Status::BadAddress, "unaligned");
    assert_eq!(rig.fails(Opcode::SetPeerSignals, peers(RAM, &[])), Status::BadAddress, "outside guest RAM");
    assert_eq!(rig.fails(Opcode::SetPeerSignals, peers(PAGE_A, &[RAM])), Status::BadAddress, "peer outside RAM");
    assert_eq!(rig.fails(Opcode::SetPeerSignals, peers(PAGE_A, &[PAGE_A])), Status::BadArgument, "own page as peer");
    let too_many = mailbox::PeerSignalsArgs { own_page: PAGE_A, peer_count: 8, ..Default::default() };
    assert_eq!(rig.fails(Opcode::SetPeerSignals, too_many), Status::BadArgument);
    rig.ok(Opcode::SetPeerSignals, peers(PAGE_A, &[PAGE_B]));
    rig.ok(Opcode::SetPeerSignals, peers(0, &[]));
    assert_eq!(Consumer::default().drain(&rig.gpu), 0, "off");
}

/// A page the guest filled with garbage costs re-reads, never a panic or a release of a wait
/// whose fence is not reached.
#[test]
fn a_garbage_peer_page_is_harmless() {
    let (_a, mut b) = pair();
    b_waits(&mut b, X);
    for (i, word) in (0..peer::PAGE_BYTES / 8).zip((0u64..).map(|n| n.wrapping_mul(0x9E37_79B9_7F4A_7C15))) {
        b.write(PAGE_B + i * 8, &word.to_le_bytes());
    }
    let mut consumer = Consumer::default();
    for _ in 0..4 {
        consumer.drain(&b.gpu);
    }
    b.run();
    assert!(matches!(b.queue_state(1), QueueState::Waiting { .. }), "the fence is not reached");
}

/// The poller thread reads B's page while B's queue waits on a cross-adapter fence, and marks
/// the fence A's payload named (the test waits for the mark, then runs B's engine).
#[test]
fn the_poller_thread_consumes_the_page_while_a_queue_waits() {
    let (mut a, mut b) = pair();
    let poller = crate::gpu::peer::Poller::start(b.gpu.clone()).unwrap();
    b_waits(&mut b, X);
    a_signals(&mut a, X, [3]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut o = b.gpu.lock();
    while o.peer_seq == 0 && std::time::Instant::now() < deadline {
        o = b.gpu.changed.wait_timeout(o, std::time::Duration::from_millis(100)).unwrap().0;
    }
    let named = o.peer_seq;
    drop(o);
    b.run();
    let marked = b_marked(&b);
    b.gpu.kill();
    poller.join();
    assert_eq!(named, 1, "the poller consumed A's payload");
    assert_eq!(marked, 1);
}

/// Whether thread `tid` of this process is in a shared `FUTEX_WAIT` (the consumer's sleep; the
/// standard library's own waits are private futexes).
fn in_futex_wait(tid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).is_ok_and(|s| {
        let fields: Vec<&str> = s.split(' ').collect();
        fields.first() == Some(&libc::SYS_futex.to_string().as_str()) && fields.get(2) == Some(&"0x0")
    })
}

/// A's signal wakes B's consumer asleep on its page (a futex on the page's claim word, which
/// every device process maps) instead of leaving the payload to the sleep's end: B's consumer,
/// its page found empty, sleeps with a bound of a minute; once it is in the kernel's futex
/// wait, A's signal of X ends the sleep as a wake-up, and the next pass finds A's payload.
#[test]
fn a_peer_signal_wakes_the_consumer_asleep_on_its_page() {
    let (mut a, b) = pair();
    let mut consumer = Consumer::default();
    assert_eq!(consumer.drain(&b.gpu), 0, "B's page starts empty");
    let (tx, rx) = std::sync::mpsc::channel();
    let woke = std::thread::scope(|s| {
        let sleeper = s.spawn(|| {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            consumer.rest_at_most(&b.gpu, std::time::Duration::from_secs(60))
        });
        let tid = rx.recv().unwrap();
        while !in_futex_wait(tid) && !sleeper.is_finished() {
            std::thread::yield_now();
        }
        a_signals(&mut a, X, [3]);
        sleeper.join().unwrap()
    });
    assert_eq!(woke, Some(crate::gpu::peer::Woke::Woken), "A's payload woke B's consumer");
    assert_eq!(consumer.drain(&b.gpu), 1, "the pass after the wake-up found A's payload");
}

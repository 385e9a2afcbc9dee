//! Who a change wakes: an engine executor sleeps until a change may give it work, so
//! [`Gpu::notify`] wakes only the engines with queues on their runlist (and every engine when
//! the device is killed), and wake-ups made while a mailbox command runs go out once it has
//! completed ([`Gpu::holding_wakeups`]). On a device given one host core every needless
//! wake-up is a preemption of the engine that has work.

use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use belfry_abi::engine::ENGINE_COPY;

use super::*;

/// Long enough that a waiter still asleep after it was not woken.
const QUIET: Duration = Duration::from_millis(300);
/// How long a woken waiter may take to report (a loaded host).
const WOKEN_WITHIN: Duration = Duration::from_secs(5);
/// The waiters' poll: far above both.
const POLL: Duration = Duration::from_secs(30);

/// A thread of `gpu` asleep as `engine`'s executor sleeps; the receiver gets how long it slept.
/// Returns once the thread is inside its wait (it released the lock).
pub(super) fn sleeping_engine(gpu: &Arc<Gpu>, engine: EngineId) -> Receiver<Duration> {
    let (ready, is_ready) = channel();
    let (slept, woke) = channel();
    let g = gpu.clone();
    std::thread::spawn(move || {
        let objects = g.lock();
        ready.send(()).unwrap();
        let start = Instant::now();
        drop(g.wait_engine(engine, objects, POLL));
        let _ = slept.send(start.elapsed());
    });
    is_ready.recv().unwrap();
    // The thread held the lock when it said so: taking it means the thread is waiting.
    drop(gpu.lock());
    woke
}

#[test]
fn a_change_wakes_only_the_engines_with_queues_on_their_runlist_and_a_kill_wakes_all() {
    let rig = Rig::new(DeviceConfig::default());
    let busy = sleeping_engine(&rig.gpu, ENGINE);
    let idle = sleeping_engine(&rig.gpu, EngineId::new(ENGINE_COPY));
    rig.gpu.notify();
    assert!(busy.recv_timeout(WOKEN_WITHIN).is_ok(), "the engine with queue 1 on its runlist slept on");
    assert!(idle.recv_timeout(QUIET).is_err(), "the engine with an empty runlist woke for a change");
    rig.gpu.kill();
    assert!(idle.recv_timeout(WOKEN_WITHIN).is_ok(), "a kill left the idle engine asleep");
}

#[test]
fn wake_ups_made_while_a_command_runs_go_out_when_it_returns() {
    let rig = Rig::new(DeviceConfig::default());
    let engine = sleeping_engine(&rig.gpu, ENGINE);
    rig.gpu.holding_wakeups(|| {
        rig.gpu.notify();
        assert!(engine.recv_timeout(QUIET).is_err(), "woken while the command still ran");
    });
    assert!(engine.recv_timeout(WOKEN_WITHIN).is_ok(), "the held wake-up never went out");
}

#[test]
fn a_command_that_waits_sends_its_held_wake_ups_first() {
    let rig = Rig::new(DeviceConfig::default());
    let engine = sleeping_engine(&rig.gpu, ENGINE);
    // Should the held wake-up stay held, this command would wait for nobody: a later change
    // from another thread ends its wait so that the test fails instead of hanging.
    let gpu = rig.gpu.clone();
    std::thread::spawn(move || {
        std::thread::sleep(WOKEN_WITHIN * 2);
        gpu.notify();
    });
    let start = Instant::now();
    rig.gpu.holding_wakeups(|| {
        rig.gpu.notify();
        drop(rig.gpu.wait(rig.gpu.lock()));
    });
    assert!(start.elapsed() < WOKEN_WITHIN, "the command's wait waited {:?}", start.elapsed());
    assert!(engine.recv_timeout(WOKEN_WITHIN).is_ok(), "the engine was not woken before the command's wait");
}

//! A device thread that dies must take the process with it: a half-device whose engine is gone
//! would leave its queue marked running and every later teardown waiting forever. A test-only
//! injection (`--inject engine-panic`) makes the compute engine panic on a NOTIFY packet with
//! a magic token; the process must end promptly with a failure status and a clear message.

mod common;

use std::time::Duration;

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_abi::mailbox::{self, Opcode};
use belfry_device::inject::ENGINE_PANIC_TOKEN;
use common::gpu::*;

#[test]
fn a_panicking_engine_thread_ends_the_process() {
    let mut g = Gpu::start_logged(&["--inject", "engine-panic"]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 0, false);
    g.enqueue(&mut q, &pk::notify(ENGINE_PANIC_TOKEN));
    // The kick is the client's last message: the engine may panic, and the process end, before
    // or after the command's completion is written and the register write is answered.
    g.post_mailbox(Opcode::KickQueue, &mut to_bytes(&mailbox::ObjectArgs { id: q.id, ..Default::default() }));
    let status = g.dev.wait_exit(Duration::from_secs(10));
    let log = g.dev.log_text();
    let status = status
        .unwrap_or_else(|| panic!("the device process is still running after its engine thread panicked:\n{log}"));
    assert_eq!(status.code(), Some(belfry_device::fatal::EXIT_THREAD_PANICKED), "{status}:\n{log}");
    assert!(
        log.contains("device thread 'belfry0-compute' panicked; the device cannot continue without it"),
        "the device says why it ended:\n{log}"
    );
}

#[test]
fn the_injection_needs_its_token() {
    let mut g = Gpu::start(&["--inject", "engine-panic"]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 0, false);
    g.submit(&mut q, &pk::notify(7));
    // The engine that ran the NOTIFY runs the next packet too, and the device still answers.
    let (va, pa) = g.buffer(p, 1);
    g.submit(&mut q, &pk::write32(va, 0x5eed));
    g.drain(&q);
    assert_eq!(g.read_u64(pa) as u32, 0x5eed, "the engine ran on after an ordinary NOTIFY");
    assert!(g.dev.child.try_wait().unwrap().is_none(), "an ordinary NOTIFY changes nothing");
}

//! A device thread that dies must take the process with it: a half-device whose engine is gone
//! would leave its queue marked running and every later teardown waiting forever. A test-only
//! injection (`--inject engine-panic`) makes the compute engine panic on a NOTIFY packet with
//! a magic token; the process must end promptly with a failure status and a clear message.

mod common;

use std::time::Duration;

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_device::inject::ENGINE_PANIC_TOKEN;
use common::gpu::*;

#[test]
fn a_panicking_engine_thread_ends_the_process() {
    let mut g = Gpu::start(&["--inject", "engine-panic"]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 0, false);
    g.submit(&mut q, &pk::notify(ENGINE_PANIC_TOKEN));
    let status = g.dev.wait_exit(Duration::from_secs(10));
    let status = status.expect("the device process is still running after its engine thread panicked");
    assert!(!status.success(), "a device that lost a thread exits with a failure status: {status}");
    assert_eq!(status.code(), Some(belfry_device::fatal::EXIT_THREAD_PANICKED), "{status}");
}

#[test]
fn the_injection_needs_its_token() {
    let mut g = Gpu::start(&["--inject", "engine-panic"]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 0, false);
    g.submit(&mut q, &pk::notify(7));
    g.drain(&q);
    assert!(g.dev.wait_exit(Duration::from_millis(200)).is_none(), "an ordinary NOTIFY changes nothing");
}

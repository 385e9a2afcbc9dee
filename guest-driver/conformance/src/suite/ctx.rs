//! CTX-xx: Context suspend/resume (RULES.md § Context suspend/resume).

use std::path::Path;

use belfry_abi::uapi::DoorbellStatus;

use crate::support::fixture::Fixture;
use crate::support::work::{expect_held, expect_status, expect_u32, user_queue, write32};
use crate::support::WAIT;
use crate::{Test, TestResult};

/// proves: CTX-01, CTX-02, CTX-04, CTX-06 — a suspended context keeps its doorbell connected
/// (CONNECTED_NOTIFY, a connected status) and accepts user-mode work that does not run; after
/// resume it runs.
fn suspended_context_keeps_its_doorbell_and_runs_work_after_resume(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx, buf, mut q } = Fixture::connected(path)?;
    ctx.suspend()?;
    expect_status(&q, DoorbellStatus::ConnectedNotify, "after SUSPEND_CONTEXT")?;
    let v = write32(&mut q, buf.gpu_va(), 0x5005)?;
    ensure!(q.stats().reconnects == 0, "submitting to a suspended context reconnected");
    expect_held(&q, v, "work of a suspended context")?;
    expect_u32(&buf, 0, 0, "memory while suspended")?;
    expect_status(&q, DoorbellStatus::ConnectedNotify, "while suspended, after a submission")?;
    ctx.resume()?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0x5005, "work queued while suspended, after resume")
}

/// proves: CTX-03 — a kernel-mode submission to a suspended context is accepted and queued,
/// and runs after resume.
fn kernel_mode_submit_to_a_suspended_context_runs_after_resume(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx, buf, mut q } = Fixture::kernel_mode(path)?;
    ctx.suspend()?;
    let v = write32(&mut q, buf.gpu_va(), 0x6006)?;
    expect_held(&q, v, "kernel-mode work of a suspended context")?;
    ctx.resume()?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0x6006, "kernel-mode work queued while suspended")
}

/// proves: CTX-05 — a suspended queue whose doorbell is victimized reconnects (a new physical
/// doorbell) without stalling, and all its work runs after resume.
fn victimized_suspended_queue_reconnects_and_runs_after_resume(path: &Path) -> TestResult {
    let Fixture { dev, ctx, buf, mut q } = Fixture::connected(path)?;
    ctx.suspend()?;
    let v1 = write32(&mut q, buf.va_at(0)?, 0x7001)?;
    let other = dev.create_context()?;
    let mut o1 = user_queue(&other)?;
    let mut o2 = user_queue(&other)?;
    o1.connect_doorbell()?;
    o2.connect_doorbell()?;
    expect_status(&q, DoorbellStatus::DisconnectedRetry, "the suspended queue after two other connects")?;
    let v2 = write32(&mut q, buf.va_at(4)?, 0x7002)?;
    ensure!(q.stats().reconnects == 1, "expected 1 reconnect, saw {}", q.stats().reconnects);
    expect_status(&q, DoorbellStatus::ConnectedNotify, "the suspended queue after its reconnect")?;
    expect_held(&q, v1, "work of the suspended context")?;
    ctx.resume()?;
    q.wait(v2, WAIT)?;
    expect_u32(&buf, 0, 0x7001, "work before the victimization")?;
    expect_u32(&buf, 4, 0x7002, "work after the reconnect")?;
    let obuf = other.alloc(4096, 0)?;
    let w = write32(&mut o1, obuf.gpu_va(), 0x7003)?;
    o1.wait(w, WAIT)?;
    expect_u32(&obuf, 0, 0x7003, "the other context's work")?;
    drop(o2);
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            suspended_context_keeps_its_doorbell_and_runs_work_after_resume,
            Default,
            ["CTX-01", "CTX-02", "CTX-04", "CTX-06"]
        ),
        test_entry!(kernel_mode_submit_to_a_suspended_context_runs_after_resume, Default, ["CTX-03"]),
        test_entry!(victimized_suspended_queue_reconnects_and_runs_after_resume, TwoDoorbells, ["CTX-05"]),
    ]
}

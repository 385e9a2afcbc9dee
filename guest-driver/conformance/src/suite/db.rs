//! DB-xx: Doorbells (RULES.md § Doorbells).

use std::path::Path;

use belfry_abi::packet;
use belfry_abi::ring::{RingEntry, READ_INDEX_OFFSET, WRITE_INDEX_OFFSET};
use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_umd::{CommandBuffer, Device, Error, QueueDesc, QueueMode};

use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::Fixture;
use crate::support::work::{
    contended_load, expect_held, expect_status, expect_u32, kernel_queue, status, user_queue, write32, write32_faulting,
};
use crate::support::{wait_until, HOLD, REPROBE, WAIT};
use crate::{Test, TestResult};

/// proves: DB-07, DB-09 — a new doorbell reads DISCONNECTED_RETRY (no physical doorbell yet),
/// CONNECT makes it CONNECTED and a submission then needs no reconnect.
fn doorbell_is_created_retry_and_connect_makes_it_connected(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx: _ctx, buf, mut q } = Fixture::new(path)?;
    ensure!(q.doorbell_handle().is_some(), "a user-mode queue has no doorbell");
    expect_status(&q, DoorbellStatus::DisconnectedRetry, "after creation")?;
    q.connect_doorbell()?;
    expect_status(&q, DoorbellStatus::Connected, "after CONNECT_DOORBELL")?;
    let v = write32(&mut q, buf.gpu_va(), 0xC0DE_0001)?;
    q.wait(v, WAIT)?;
    ensure!(q.stats().reconnects == 0, "a connected doorbell needed {} reconnects", q.stats().reconnects);
    expect_u32(&buf, 0, 0xC0DE_0001, "work on the connected doorbell")
}

/// proves: DB-08 — before its connect a doorbell's page is a dummy page: work written into a
/// user-mode ring (raw, past the library, which would reconnect at once) and rung there does
/// not run — the ring's read index stays 0 and the status DISCONNECTED_RETRY while another
/// queue of the same engine, rung afterwards on a connected doorbell, runs its work — and the
/// same ring's work runs once CONNECT_DOORBELL gives the queue a physical doorbell.
fn a_ring_before_the_connect_runs_nothing_until_the_connect(path: &Path) -> TestResult {
    let d = RawDev::open(path)?;
    let ctx = d.create_context().map_err(errno_name)?;
    let page = |d: &RawDev| d.alloc(ctx, 4096).map_err(errno_name);
    let (ring, control, cmds, target) = (page(&d)?, page(&d)?, page(&d)?, page(&d)?);
    let q = d.create_queue(ctx, Some((ring.handle, control.handle)), 16).map_err(errno_name)?;
    let db = d.create_doorbell(q.handle).map_err(errno_name)?;
    let mut cb = CommandBuffer::new();
    cb.write32(target.gpu_va, 0xDB08)?;
    let bytes = cb.as_bytes();
    d.map(cmds.mmap_offset, 4096).map_err(errno_name)?.store(0, bytes);
    let entry = RingEntry { cmdbuf_va: cmds.gpu_va, size_bytes: u32::try_from(bytes.len())?, flags: 0 };
    let mut raw_entry = Vec::new();
    raw_entry.extend_from_slice(&entry.cmdbuf_va.to_le_bytes());
    raw_entry.extend_from_slice(&entry.size_bytes.to_le_bytes());
    raw_entry.extend_from_slice(&entry.flags.to_le_bytes());
    d.map(ring.mmap_offset, 4096).map_err(errno_name)?.store(0, &raw_entry);
    let control_page = d.map(control.mmap_offset, 4096).map_err(errno_name)?;
    control_page.store(WRITE_INDEX_OFFSET as usize, &1u32.to_le_bytes());
    // The ring, on the dummy page.
    d.map(db.doorbell_offset, 4096).map_err(errno_name)?.store(0, &1u32.to_le_bytes());
    // The status page is read-only: peeked through a read-only mapping (its first u32).
    let status = d.peek_u64(db.status_offset).map_err(errno_name)? as u32; // CAST: the low word.
    ensure!(status == DoorbellStatus::DisconnectedRetry as u32, "status {status} after the ring");
    // Another queue of the same engine, rung afterwards on a connected doorbell, runs.
    let Fixture { dev: _other_dev, ctx: _other_ctx, buf: other_buf, q: mut other_q } = Fixture::connected(path)?;
    let v = write32(&mut other_q, other_buf.gpu_va(), 0x0DB0)?;
    other_q.wait(v, WAIT)?;
    expect_u32(&other_buf, 0, 0x0DB0, "the connected queue's work")?;
    let target_page = d.map(target.mmap_offset, 4096).map_err(errno_name)?;
    ensure!(target_page.load_u32(0) == 0, "work rung on the dummy page ran: {:#x}", target_page.load_u32(0));
    let read = control_page.load_u32(READ_INDEX_OFFSET as usize);
    ensure!(read == 0, "the unconnected ring's read index is {read}");
    // The connect: the device reads the queue and runs what its ring holds.
    d.handle_op(uapi::IOCTL_CONNECT_DOORBELL, db.handle).map_err(errno_name)?;
    ensure!(
        wait_until(WAIT, || target_page.load_u32(0) == 0xDB08),
        "the ring's work did not run after CONNECT_DOORBELL: {:#x}",
        target_page.load_u32(0)
    );
    Ok(())
}

/// proves: DB-11, DB-12, DB-14, RING-05, RING-07 — a submission written into the ring and
/// ring control (mapped whatever the doorbell state) and rung on a disconnected doorbell lands
/// on the dummy page without faulting, reads RETRY, reconnects, rings again and its work runs.
fn submission_while_disconnected_reconnects_and_runs(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx: _ctx, buf, mut q } = Fixture::new(path)?;
    expect_status(&q, DoorbellStatus::DisconnectedRetry, "after creation")?;
    let v = write32(&mut q, buf.gpu_va(), 0x5EED_0001)?;
    ensure!(q.stats().reconnects == 1, "expected 1 reconnect, saw {}", q.stats().reconnects);
    expect_status(&q, DoorbellStatus::Connected, "after the submission")?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0x5EED_0001, "work submitted while disconnected")
}

/// proves: DB-16 — a GPU page fault in a context sends its doorbell to DISCONNECTED_ABORT for
/// good (a reconnect fails, the context refuses new queues), while a new context on the same
/// file keeps working.
fn context_fault_aborts_its_doorbells(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let faults_before = dev.debug_stats()?.faults;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    q.connect_doorbell()?;
    let bad_va = buf.gpu_va() + (256 << 20);
    write32_faulting(&mut q, bad_va, 0xBAD)?;
    let aborted = wait_until(WAIT, || matches!(status(&q), Ok(DoorbellStatus::DisconnectedAbort)));
    ensure!(aborted, "doorbell status {:?} 10 s after a write to an unmapped VA", status(&q));
    let faults = dev.debug_stats()?.faults;
    ensure!(faults > faults_before, "DEBUG_STATS.faults stayed at {faults}");
    match q.connect_doorbell() {
        Err(e) if e.errno() == Some(libc::EIO) => {}
        other => return Err(format!("CONNECT_DOORBELL after the abort: {other:?}, expected EIO").into()),
    }
    expect_status(&q, DoorbellStatus::DisconnectedAbort, "after the refused reconnect")?;
    match write32(&mut q, buf.gpu_va(), 0xBAD2) {
        Err(belfry_umd::Error::ContextLost { .. }) => {}
        other => return Err(format!("a submission in the faulted context: {other:?}, expected ContextLost").into()),
    }
    match user_queue(&ctx) {
        Err(e) if e.errno() == Some(libc::EIO) => {}
        other => return Err(format!("CREATE_QUEUE in the faulted context: {other:?}, expected EIO").into()),
    }
    drop(q);
    let ctx2 = dev.create_context()?;
    let buf2 = ctx2.alloc(4096, 0)?;
    let mut q2 = user_queue(&ctx2)?;
    let v = write32(&mut q2, buf2.gpu_va(), 0x600D)?;
    q2.wait(v, WAIT)?;
    expect_u32(&buf2, 0, 0x600D, "work of a new context after the fault")
}

/// proves: DB-02, VIC-05 — in the global model the same load connects each queue once and no
/// doorbell is ever victimized; all work runs.
fn global_doorbell_serves_six_queues_without_victimization(path: &Path) -> TestResult {
    contended_load(path, |i, stats, s| {
        ensure!(stats.reconnects == 1, "queue {i}: {} reconnects, expected only the first connect", stats.reconnects);
        ensure!(s == DoorbellStatus::Connected, "queue {i}: doorbell status {s:?} after the load");
        Ok(())
    })
}

/// proves: DB-05 — a kernel-mode queue and a user-mode queue of one context run side by side,
/// each doing its own work.
fn kernel_mode_queue_runs_beside_user_mode_queue(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx, buf, q: mut um } = Fixture::new(path)?;
    let mut km = kernel_queue(&ctx)?;
    ensure!(km.doorbell_handle().is_none(), "a kernel-mode queue has a doorbell");
    let mut values = (0, 0);
    for n in 0..8u32 {
        values.0 = write32(&mut um, buf.va_at(u64::from(n) * 8)?, 0x1000 + n)?;
        values.1 = write32(&mut km, buf.va_at(u64::from(n) * 8 + 4)?, 0x2000 + n)?;
    }
    um.wait(values.0, WAIT)?;
    km.wait(values.1, WAIT)?;
    ensure!(km.mode() == QueueMode::KernelMode, "the kernel-mode queue changed mode");
    for n in 0..8u32 {
        expect_u32(&buf, u64::from(n) * 8, 0x1000 + n, "user-mode work")?;
        expect_u32(&buf, u64::from(n) * 8 + 4, 0x2000 + n, "kernel-mode work")?;
    }
    Ok(())
}

/// proves: DB-04 — `SUBMIT` on a user-mode queue is refused with EPERM (and a doorbell on a
/// kernel-mode queue too), while `SUBMIT` on a kernel-mode queue is accepted.
fn kernel_mode_submit_is_refused_on_a_user_mode_queue(path: &Path) -> TestResult {
    let d = RawDev::open(path)?;
    let ctx = d.create_context().map_err(errno_name)?;
    let ring = d.alloc(ctx, 4096).map_err(errno_name)?;
    let ctl = d.alloc(ctx, 4096).map_err(errno_name)?;
    let cmd = d.alloc(ctx, 4096).map_err(errno_name)?;
    let um = d.create_queue(ctx, Some((ring.handle, ctl.handle)), 16).map_err(errno_name)?;
    d.poke_u32(cmd.mmap_offset, packet::header(packet::Opcode::Nop, 1)).map_err(errno_name)?;
    let submit = |queue| uapi::Submit { queue, cmdbuf: cmd.handle, offset: 0, size: 4, progress_value: 1 };
    match d.submit(submit(um.handle)) {
        Err(libc::EPERM) => {}
        other => {
            return Err(format!("SUBMIT on a user-mode queue: {:?}, expected EPERM", other.map_err(errno_name)).into())
        }
    }
    let km = d.create_queue(ctx, None, 16).map_err(errno_name)?;
    match d.create_doorbell(km.handle) {
        Err(libc::EPERM) => {}
        other => {
            return Err(format!(
                "CREATE_DOORBELL on a kernel-mode queue: {:?}, expected EPERM",
                other.map_err(errno_name)
            )
            .into())
        }
    }
    d.submit(submit(km.handle)).map_err(|e| format!("SUBMIT on a kernel-mode queue: {}", errno_name(e)))?;
    d.wait_progress(km.handle, 1, 10_000_000_000).map_err(|e| format!("WAIT_PROGRESS: {}", errno_name(e)))?;
    Ok(())
}

/// proves: DB-10, DB-13 — a connected doorbell reads CONNECTED, and CONNECTED_NOTIFY while its
/// context is suspended: a submission then makes the library call NOTIFY_WORK_SUBMISSION once
/// and the work waits; on resume the doorbell reads CONNECTED again and the work runs. DB-10's
/// other two values are shown elsewhere: DISCONNECTED_RETRY by
/// `doorbell_is_created_retry_and_connect_makes_it_connected`, DISCONNECTED_ABORT by
/// `context_fault_aborts_its_doorbells`.
fn doorbell_reads_connected_notify_while_its_context_is_suspended(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx, buf, mut q } = Fixture::connected(path)?;
    expect_status(&q, DoorbellStatus::Connected, "after CONNECT_DOORBELL")?;
    let v0 = write32(&mut q, buf.va_at(0)?, 0x1310)?;
    q.wait(v0, WAIT)?;
    let before = q.stats();
    ensure!(before.notifies == 0, "a running context's submission notified {} time(s)", before.notifies);
    ctx.suspend()?;
    expect_status(&q, DoorbellStatus::ConnectedNotify, "after SUSPEND_CONTEXT")?;
    let v = write32(&mut q, buf.va_at(4)?, 0x1313)?;
    let during = q.stats();
    ensure!(during.notifies == 1, "expected 1 notify while suspended, saw {}", during.notifies);
    ensure!(during.reconnects == before.reconnects, "a submission to a suspended context reconnected");
    expect_status(&q, DoorbellStatus::ConnectedNotify, "after NOTIFY_WORK_SUBMISSION")?;
    expect_held(&q, v, "work of a suspended context")?;
    expect_u32(&buf, 4, 0, "memory while suspended")?;
    ctx.resume()?;
    expect_status(&q, DoorbellStatus::Connected, "after RESUME_CONTEXT")?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 4, 0x1313, "work notified while suspended, after resume")?;
    let v2 = write32(&mut q, buf.va_at(8)?, 0x1314)?;
    q.wait(v2, WAIT)?;
    ensure!(q.stats().notifies == 1, "a submission after resume notified (notifies {})", q.stats().notifies);
    expect_u32(&buf, 8, 0x1314, "work after resume")
}

/// proves: DB-17 — DISCONNECT_DOORBELL (the module's disconnect path on request) publishes the
/// status it is given and moves the doorbell mapping to the dummy page. After RETRY, work rung
/// on the doorbell does not reach the device (a queue allowed no reconnect keeps it in the ring,
/// not run) until the doorbell is connected again, and the library's RETRY reconnect runs the
/// next submission at once; after ABORT the doorbell cannot reconnect (EIO) and the library
/// takes its abort path (a new queue runs the work). Any other status is EINVAL.
fn disconnect_doorbell_on_request_publishes_its_status_and_holds_work_until_reconnect(path: &Path) -> TestResult {
    let Fixture { dev: _dev, ctx, buf, mut q } = Fixture::with_queue(path, &QueueDesc::default().with_retry_limit(0))?;
    q.connect_doorbell()?;
    let v = write32(&mut q, buf.va_at(0)?, 1)?;
    q.wait(v, WAIT)?;
    q.disconnect_doorbell(DoorbellStatus::DisconnectedRetry)?;
    expect_status(&q, DoorbellStatus::DisconnectedRetry, "after DISCONNECT_DOORBELL(RETRY)")?;
    let held = match write32(&mut q, buf.va_at(4)?, 2) {
        Err(Error::RetryLimit { value, .. }) => value,
        other => return Err(format!("a submission with no reconnect allowed: {other:?}, expected RetryLimit").into()),
    };
    std::thread::sleep(HOLD);
    ensure!(q.completed() < held, "work rung on the disconnected doorbell ran");
    expect_u32(&buf, 4, 0, "work rung on the disconnected doorbell")?;
    q.connect_doorbell()?;
    q.wait(held, WAIT)?;
    expect_u32(&buf, 4, 2, "the held work after the reconnect")?;

    let mut r = user_queue(&ctx)?;
    r.connect_doorbell()?;
    r.disconnect_doorbell(DoorbellStatus::DisconnectedRetry)?;
    let v = write32(&mut r, buf.va_at(8)?, 3)?;
    ensure!(r.stats().reconnects == 1, "{} reconnects after RETRY, expected 1", r.stats().reconnects);
    r.wait(v, WAIT)?;
    expect_u32(&buf, 8, 3, "work after the library's reconnect")?;

    r.disconnect_doorbell(DoorbellStatus::DisconnectedAbort)?;
    expect_status(&r, DoorbellStatus::DisconnectedAbort, "after DISCONNECT_DOORBELL(ABORT)")?;
    match r.connect_doorbell() {
        Err(e) if e.errno() == Some(libc::EIO) => {}
        other => return Err(format!("CONNECT_DOORBELL after ABORT: {other:?}, expected EIO").into()),
    }
    let v = write32(&mut r, buf.va_at(12)?, 4)?;
    let s = r.stats();
    ensure!(s.losses == 1 && s.recreations == 1, "after ABORT: {s:?}, expected one loss and one re-creation");
    r.wait(v, WAIT)?;
    expect_u32(&buf, 12, 4, "work on the re-created queue")?;
    match r.disconnect_doorbell(DoorbellStatus::Connected) {
        Err(e) if e.errno() == Some(libc::EINVAL) => Ok(()),
        other => Err(format!("DISCONNECT_DOORBELL(CONNECTED): {other:?}, expected EINVAL").into()),
    }
}

/// proves: DB-16 — a device whose mailbox stops answering (the test-only `mailbox-stall`: a
/// NOTIFY with the stall token) takes the device-lost path: the command that gets no answer
/// fails after the module's mailbox timeout (shortened for the test,
/// `SILENT_DEVICE_MAILBOX_TIMEOUT_MS`), the module resets and binds the device again by
/// itself (`RECOVERY_DEBUG.device_lost` counts it), every context of the old binding is lost
/// (its file's ioctls get `ENODEV`, its doorbell reads DISCONNECTED_ABORT), and the device file
/// of the new binding runs work — no reboot, and the suite goes on.
fn a_device_that_stops_answering_is_reset_and_works_again(path: &Path) -> TestResult {
    let _timeout = crate::support::param::silent_device_mailbox_timeout()?;
    let Fixture { dev, ctx: _ctx, buf: _buf, mut q } = Fixture::connected(path)?;
    let lost_before = dev.recovery_debug()?.device_lost;
    let mut stall = CommandBuffer::new();
    stall.notify(belfry_abi::regs::MAILBOX_STALL_TOKEN)?;
    let v = q.submit(&stall)?;
    ensure!(wait_until(WAIT, || q.completed() >= v), "the NOTIFY did not run");
    // The first command to reach the silent device times out and wedges the mailbox: this one
    // (ETIMEDOUT), or the hang watchdog's QUERY_QUEUE of the running queue if it came first
    // (then this one fails at once with EIO).
    match dev.create_context() {
        Err(e) if matches!(e.errno(), Some(libc::ETIMEDOUT | libc::EIO)) => {}
        other => {
            return Err(format!("CREATE_CONTEXT on the silent device: {other:?}, expected ETIMEDOUT or EIO").into())
        }
    }
    let unbound = wait_until(WAIT, || dev.create_context().is_err_and(|e| e.errno() == Some(libc::ENODEV)));
    ensure!(unbound, "the old binding's file still answers 10 s after the mailbox timed out");
    // The unbind revokes the core (ENODEV) before it aborts the doorbells of open files.
    let aborted = wait_until(WAIT, || matches!(status(&q), Ok(DoorbellStatus::DisconnectedAbort)));
    ensure!(aborted, "a doorbell of the lost device reads {:?}, expected DISCONNECTED_ABORT", status(&q));
    let mut reopened = None;
    let back = wait_until(REPROBE, || {
        reopened = Device::open(path).ok();
        reopened.is_some()
    });
    let new = reopened.filter(|_| back).ok_or_else(|| format!("{} did not come back", path.display()))?;
    let lost = new.recovery_debug()?.device_lost;
    ensure!(lost > lost_before, "RECOVERY_DEBUG.device_lost stayed at {lost}");
    super::eng::fresh_work(&new)
}

/// proves: DB-07, DB-09, DB-10, DB-11, DB-12 — through the D3DKMT API (`belfry-d3dkmt-rules
/// doorbell`): `D3DKMTCreateDoorbell` gives the doorbell's and its status's CPU addresses (no
/// secondary, no LastQueuedValue); the status reads DISCONNECTED_RETRY before the connect, a
/// store to the disconnected doorbell does not fault, CONNECTED after it; the program's own ring
/// with the write index it reads at the doorbell address adds no work and the queue's next
/// submission completes; after `D3DKMTDestroyDoorbell` the queue still runs submissions.
fn d3dkmt_doorbell_addresses_let_the_program_read_the_status_and_ring(path: &Path) -> TestResult {
    crate::support::d3dkmt::rule_check_passes(
        path,
        "doorbell",
        &["ok addresses", "ok disconnected-store", "ok connected", "ok program-ring", "ok destroyed"],
    )
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(doorbell_is_created_retry_and_connect_makes_it_connected, Default, ["DB-07", "DB-09"]),
        test_entry!(a_ring_before_the_connect_runs_nothing_until_the_connect, Default, ["DB-08"]),
        test_entry!(
            submission_while_disconnected_reconnects_and_runs,
            Default,
            ["DB-11", "DB-12", "DB-14", "RING-05", "RING-07"]
        ),
        test_entry!(context_fault_aborts_its_doorbells, Default, ["DB-16"]),
        test_entry!(a_device_that_stops_answering_is_reset_and_works_again, MailboxStall, ["DB-16"]),
        test_entry!(global_doorbell_serves_six_queues_without_victimization, GlobalDoorbell, ["DB-02", "VIC-05"]),
        test_entry!(kernel_mode_queue_runs_beside_user_mode_queue, Default, ["DB-05"]),
        test_entry!(kernel_mode_submit_is_refused_on_a_user_mode_queue, Default, ["DB-04"]),
        test_entry!(doorbell_reads_connected_notify_while_its_context_is_suspended, Default, ["DB-10", "DB-13"]),
        test_entry!(
            disconnect_doorbell_on_request_publishes_its_status_and_holds_work_until_reconnect,
            Default,
            ["DB-17"]
        ),
        test_entry!(
            d3dkmt_doorbell_addresses_let_the_program_read_the_status_and_ring,
            Default,
            ["DB-07", "DB-09", "DB-10", "DB-11", "DB-12"]
        ),
    ]
}

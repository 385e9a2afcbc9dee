//! The tests. Each doc comment says what it proves in the form `ci/rules` parses; the
//! registry at the end repeats the ids.

use std::path::Path;
use std::time::Duration;

use belfry_abi::packet::{self, ComputeOp};
use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_umd::{
    Allocation, CommandBuffer, Context, Device, Fence, FenceKind, Queue, QueueDesc, QueueMode, SubmitStats,
};

use crate::proc::{self, Signal};
use crate::raw::{errno_name, LockedPage, RawDev};
use crate::{ensure, wait_until, Test, TestResult};

pub(crate) const WAIT: Duration = Duration::from_secs(10);

pub(crate) fn user_queue(ctx: &Context) -> belfry_umd::Result<Queue> {
    ctx.create_queue(&QueueDesc::default())
}

pub(crate) fn kernel_queue(ctx: &Context) -> belfry_umd::Result<Queue> {
    ctx.create_queue(&QueueDesc { mode: QueueMode::KernelMode, ..QueueDesc::default() })
}

/// Submits a `WRITE_DATA32` of `value` at `va`; returns the progress value.
pub(crate) fn write32(q: &mut Queue, va: u64, value: u32) -> belfry_umd::Result<u64> {
    let mut cb = CommandBuffer::new();
    cb.write32(va, value)?;
    q.submit(&cb)
}

/// Submits work that faults its context. The fault can be processed before the library reads
/// the doorbell status: the library then sees DISCONNECTED_ABORT, cannot replace the queue in
/// the faulted context and reports the context lost, the lost queue staying in place.
fn submit_faulting(q: &mut Queue, cmds: &CommandBuffer) -> TestResult {
    match q.submit(cmds) {
        Ok(_) | Err(belfry_umd::Error::ContextLost { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Submits a `WRITE_DATA32` that faults the context.
fn write32_faulting(q: &mut Queue, va: u64, value: u32) -> TestResult {
    let mut cb = CommandBuffer::new();
    cb.write32(va, value)?;
    submit_faulting(q, &cb)
}

fn status(q: &Queue) -> belfry_umd::Result<DoorbellStatus> {
    q.doorbell_status()
}

pub(crate) fn expect_status(q: &Queue, want: DoorbellStatus, what: &str) -> TestResult {
    let got = status(q)?;
    ensure!(got == want, "{what}: doorbell status {got:?}, expected {want:?}");
    Ok(())
}

/// How long work that must not run is given to run anyway.
pub(crate) const HOLD: Duration = Duration::from_millis(300);

/// Gives the device [`HOLD`] to run `q`'s work up to `value`, then checks it did not.
pub(crate) fn expect_held(q: &Queue, value: u64, what: &str) -> TestResult {
    std::thread::sleep(HOLD);
    ensure!(q.completed() < value, "{what} ran");
    Ok(())
}

pub(crate) fn expect_u32(a: &Allocation, offset: u64, want: u32, what: &str) -> TestResult {
    let got = a.read_u32(offset)?;
    ensure!(got == want, "{what}: read {got:#x} at offset {offset:#x}, expected {want:#x}");
    Ok(())
}

/// proves: DB-07, DB-08, DB-09 — a new doorbell reads DISCONNECTED_RETRY (no physical
/// doorbell yet), CONNECT makes it CONNECTED and a submission then needs no reconnect.
fn doorbell_is_created_retry_and_connect_makes_it_connected(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    ensure!(q.doorbell_handle().is_some(), "a user-mode queue has no doorbell");
    expect_status(&q, DoorbellStatus::DisconnectedRetry, "after creation")?;
    q.connect_doorbell()?;
    expect_status(&q, DoorbellStatus::Connected, "after CONNECT_DOORBELL")?;
    let v = write32(&mut q, buf.gpu_va(), 0xC0DE_0001)?;
    q.wait(v, WAIT)?;
    ensure!(q.stats().reconnects == 0, "a connected doorbell needed {} reconnects", q.stats().reconnects);
    expect_u32(&buf, 0, 0xC0DE_0001, "work on the connected doorbell")
}

/// proves: DB-11, DB-12, DB-14, RING-05, RING-07 — a submission written into the ring and
/// ring control (mapped whatever the doorbell state) and rung on a disconnected doorbell lands
/// on the dummy page without faulting, reads RETRY, reconnects, rings again and its work runs.
fn submission_while_disconnected_reconnects_and_runs(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    expect_status(&q, DoorbellStatus::DisconnectedRetry, "after creation")?;
    let v = write32(&mut q, buf.gpu_va(), 0x5EED_0001)?;
    ensure!(q.stats().reconnects == 1, "expected 1 reconnect, saw {}", q.stats().reconnects);
    expect_status(&q, DoorbellStatus::Connected, "after the submission")?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0x5EED_0001, "work submitted while disconnected")
}

/// proves: DB-03, VIC-01, VIC-02, VIC-03, VIC-04, RING-06 — with two physical doorbells,
/// creating a third doorbell takes none, connecting it victimizes the least recently used
/// queue (RETRY; its ring stays mapped and is written before it reconnects), which reconnects
/// by victimizing the next one, and every queue's own work runs.
fn least_recently_used_doorbell_is_victimized_and_reconnects(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q1 = user_queue(&ctx)?;
    let mut q2 = user_queue(&ctx)?;
    q1.connect_doorbell()?;
    q2.connect_doorbell()?;
    expect_status(&q1, DoorbellStatus::Connected, "q1 connected")?;
    expect_status(&q2, DoorbellStatus::Connected, "q2 connected")?;
    let mut q3 = user_queue(&ctx)?;
    expect_status(&q3, DoorbellStatus::DisconnectedRetry, "q3 after creation")?;
    expect_status(&q1, DoorbellStatus::Connected, "q1 after q3's creation")?;
    expect_status(&q2, DoorbellStatus::Connected, "q2 after q3's creation")?;
    q3.connect_doorbell()?;
    expect_status(&q3, DoorbellStatus::Connected, "q3 after connect")?;
    expect_status(&q1, DoorbellStatus::DisconnectedRetry, "q1 (least recently used) after q3's connect")?;
    expect_status(&q2, DoorbellStatus::Connected, "q2 after q3's connect")?;
    let v1 = write32(&mut q1, buf.va_at(0)?, 0x1111)?;
    ensure!(q1.stats().reconnects == 1, "q1: expected 1 reconnect, saw {}", q1.stats().reconnects);
    expect_status(&q1, DoorbellStatus::Connected, "q1 after its submission")?;
    expect_status(&q2, DoorbellStatus::DisconnectedRetry, "q2 (now least recently used) after q1 reconnected")?;
    expect_status(&q3, DoorbellStatus::Connected, "q3 after q1 reconnected")?;
    let v3 = write32(&mut q3, buf.va_at(8)?, 0x3333)?;
    let v2 = write32(&mut q2, buf.va_at(4)?, 0x2222)?;
    ensure!(q2.stats().reconnects == 1, "q2: expected 1 reconnect, saw {}", q2.stats().reconnects);
    q1.wait(v1, WAIT)?;
    q2.wait(v2, WAIT)?;
    q3.wait(v3, WAIT)?;
    expect_u32(&buf, 0, 0x1111, "q1's work")?;
    expect_u32(&buf, 4, 0x2222, "q2's work")?;
    expect_u32(&buf, 8, 0x3333, "q3's work")
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

const QUEUES_PER_PROCESS: usize = 3;
const ROUNDS: u32 = 8;

/// Two processes, three user-mode queues each, submitting rounds at once; `check` judges
/// each queue's stats.
fn contended_load(path: &Path, check: fn(usize, SubmitStats, DoorbellStatus) -> TestResult) -> TestResult {
    let go = Signal::new()?;
    let mut children = Vec::new();
    for p in 0..2u32 {
        let go = &go;
        children.push(proc::spawn(if p == 0 { "load process 0" } else { "load process 1" }, move || {
            let dev = Device::open(path)?;
            let ctx = dev.create_context()?;
            let mut bufs = Vec::new();
            let mut queues = Vec::new();
            for _ in 0..QUEUES_PER_PROCESS {
                bufs.push(ctx.alloc(4096, 0)?);
                queues.push(user_queue(&ctx)?);
            }
            go.take();
            let mut last = [0; QUEUES_PER_PROCESS];
            for round in 0..ROUNDS {
                for (i, q) in queues.iter_mut().enumerate() {
                    let value = (p << 24) | ((i as u32) << 16) | (round + 1);
                    last[i] = write32(q, bufs[i].va_at(u64::from(round) * 4)?, value)?;
                }
            }
            for (i, q) in queues.iter_mut().enumerate() {
                q.wait(last[i], WAIT)?;
                for round in 0..ROUNDS {
                    let value = (p << 24) | ((i as u32) << 16) | (round + 1);
                    expect_u32(&bufs[i], u64::from(round) * 4, value, "a round's write")?;
                }
                check(i, q.stats(), status(q)?)?;
            }
            Ok(())
        })?);
    }
    go.post(2);
    let mut result = Ok(());
    for c in children {
        let r = c.join();
        if result.is_ok() {
            result = r;
        }
    }
    result
}

/// proves: VIC-01, DB-14 — six queues of two processes on two physical doorbells all see
/// RETRY after their first connect (victimized by the others), reconnect, and all work runs.
fn six_queues_of_two_processes_on_two_doorbells_reconnect_and_complete(path: &Path) -> TestResult {
    contended_load(path, |i, stats, _| {
        ensure!(
            stats.reconnects >= 2,
            "queue {i}: {} reconnect(s): never victimized after its first connect",
            stats.reconnects
        );
        ensure!(stats.losses == 0, "queue {i}: lost {} time(s)", stats.losses);
        Ok(())
    })
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

/// proves: SUB-02 — each submission gets the next progress value, and the queue's progress
/// fence (read-only CPU mapping and `WAIT_PROGRESS`) reaches each in order.
fn progress_fence_values_increase_and_are_reached(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    ensure!(q.progress_fence_va() != 0, "no progress fence VA");
    ensure!(q.completed() == 0, "progress starts at {}", q.completed());
    for n in 1..=40u64 {
        let v = write32(&mut q, buf.va_at((n % 64) * 4)?, n as u32)?;
        ensure!(v == n, "submission {n} got progress value {v}");
        if n % 8 == 0 {
            q.wait(v, WAIT)?;
            ensure!(q.completed() >= v, "after the wait progress reads {}", q.completed());
        }
    }
    ensure!(q.completed() == 40, "final progress {}", q.completed());
    Ok(())
}

/// proves: SUB-01, DB-11 — once connected, user-mode submissions and polling the progress
/// page make no ioctl at all (the file's ioctl count does not move).
fn user_mode_submission_makes_no_kernel_call(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    q.connect_doorbell()?;
    let a = dev.debug_stats()?.ioctls_by_caller;
    let b = dev.debug_stats()?.ioctls_by_caller;
    let mut last = 0;
    for n in 0..16u32 {
        last = write32(&mut q, buf.va_at(u64::from(n) * 4)?, n + 100)?;
    }
    let done = wait_until(WAIT, || q.completed() >= last);
    let c = dev.debug_stats()?.ioctls_by_caller;
    ensure!(done, "progress {} of {last} after 10 s of polling", q.completed());
    ensure!(c - b == b - a, "16 submissions made {} ioctl(s)", (c - b) - (b - a));
    for n in 0..16u32 {
        expect_u32(&buf, u64::from(n) * 4, n + 100, "a submission's write")?;
    }
    Ok(())
}

/// COPY, FILL and COMPUTE (u32 add, u32 mul, f32 saxpy) write the expected bytes, on a
/// user-mode and on a kernel-mode queue.
fn copy_fill_and_compute_write_the_expected_data(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    for mode in [QueueMode::UserMode, QueueMode::KernelMode] {
        let mut q = ctx.create_queue(&QueueDesc { mode, ..QueueDesc::default() })?;
        let mut a = ctx.alloc(4096, 0)?;
        let mut b = ctx.alloc(4096, 0)?;
        let out = ctx.alloc(4 * 4096, 0)?;
        let n = 256u32;
        for i in 0..n {
            a.write_u32(u64::from(i) * 4, i * 3 + 1)?;
            b.write_u32(u64::from(i) * 4, 1000 - i)?;
        }
        let fa = ctx.alloc(4096, 0)?;
        let mut fb = ctx.alloc(4096, 0)?;
        let mut fa = fa;
        for i in 0..n {
            fa.write(u64::from(i) * 4, &(i as f32).to_le_bytes())?;
            fb.write(u64::from(i) * 4, &0.5f32.to_le_bytes())?;
        }
        let mut cb = CommandBuffer::new();
        cb.copy(a.gpu_va(), out.gpu_va(), 1024)?
            .fill(out.va_at(4096)?, 1024, 0xA5A5_5A5A)?
            .compute(ComputeOp::AddU32, n, 0, a.gpu_va(), b.gpu_va(), out.va_at(2 * 4096)?)?
            .compute(ComputeOp::MulU32, n, 0, a.gpu_va(), b.gpu_va(), out.va_at(2 * 4096 + 1024)?)?
            .compute(ComputeOp::SaxpyF32, n, 2.0f32.to_bits(), fa.gpu_va(), fb.gpu_va(), out.va_at(3 * 4096)?)?;
        let v = q.submit(&cb)?;
        q.wait(v, WAIT)?;
        for i in 0..n {
            let off = u64::from(i) * 4;
            let (x, y) = (i * 3 + 1, 1000 - i);
            expect_u32(&out, off, x, &format!("{mode:?} COPY"))?;
            expect_u32(&out, 4096 + off, 0xA5A5_5A5A, &format!("{mode:?} FILL"))?;
            expect_u32(&out, 2 * 4096 + off, x.wrapping_add(y), &format!("{mode:?} COMPUTE add"))?;
            expect_u32(&out, 2 * 4096 + 1024 + off, x.wrapping_mul(y), &format!("{mode:?} COMPUTE mul"))?;
            let mut f = [0u8; 4];
            out.read(3 * 4096 + off, &mut f)?;
            let got = f32::from_le_bytes(f);
            let want = 2.0 * i as f32 + 0.5;
            ensure!(got == want, "{mode:?} COMPUTE saxpy element {i}: {got}, expected {want}");
        }
        expect_u32(&out, 1024, 0, &format!("{mode:?} COPY stopped at its size"))?;
    }
    Ok(())
}

/// proves: DB-05 — a kernel-mode queue and a user-mode queue of one context run side by side,
/// each doing its own work.
fn kernel_mode_queue_runs_beside_user_mode_queue(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut um = user_queue(&ctx)?;
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

/// proves: RING-02, RING-03, DB-18 — while the queue exists its ring and ring-control
/// allocations cannot be freed (EBUSY); destroying the doorbell tears it down but leaves both
/// allocations alive until the library frees them.
fn ring_allocations_are_held_by_the_queue_and_freed_only_by_the_library(path: &Path) -> TestResult {
    let d = RawDev::open(path)?;
    let ctx = d.create_context().map_err(errno_name)?;
    let ring = d.alloc(ctx, 4096).map_err(errno_name)?;
    let ctl = d.alloc(ctx, 4096).map_err(errno_name)?;
    let q = d.create_queue(ctx, Some((ring.handle, ctl.handle)), 16).map_err(errno_name)?;
    let before = d.debug_stats().map_err(errno_name)?.doorbells;
    let db = d.create_doorbell(q.handle).map_err(errno_name)?;
    ensure!(d.debug_stats().map_err(errno_name)?.doorbells == before + 1, "CREATE_DOORBELL did not add a doorbell");
    for (what, h) in [("ring", ring.handle), ("ring control", ctl.handle)] {
        match d.handle_op(uapi::IOCTL_FREE, h) {
            Err(libc::EBUSY) => {}
            other => {
                return Err(format!("FREE of the {what} under a live doorbell: {:?}", other.map_err(errno_name)).into())
            }
        }
    }
    match d.handle_op(uapi::IOCTL_DESTROY_QUEUE, q.handle) {
        Err(libc::EBUSY) => {}
        other => {
            return Err(format!("DESTROY_QUEUE with a doorbell: {:?}, expected EBUSY", other.map_err(errno_name)).into())
        }
    }
    d.handle_op(uapi::IOCTL_DESTROY_DOORBELL, db.handle).map_err(errno_name)?;
    ensure!(d.debug_stats().map_err(errno_name)?.doorbells == before, "DESTROY_DOORBELL left the doorbell counted");
    match d.handle_op(uapi::IOCTL_FREE, ring.handle) {
        Err(libc::EBUSY) => {}
        other => return Err(format!("FREE of the ring under a live queue: {:?}", other.map_err(errno_name)).into()),
    }
    d.handle_op(uapi::IOCTL_DESTROY_QUEUE, q.handle).map_err(errno_name)?;
    d.peek_u64(ring.mmap_offset).map_err(|e| format!("mapping the ring after the queue: {}", errno_name(e)))?;
    for (what, h) in [("ring", ring.handle), ("ring control", ctl.handle)] {
        d.handle_op(uapi::IOCTL_FREE, h)
            .map_err(|e| format!("FREE of the {what} after the queue: {}", errno_name(e)))?;
    }
    Ok(())
}

/// Handles, mmap offsets and a GPU VA of process A's objects.
#[derive(Clone, Copy, Debug)]
struct Foreign {
    context: u32,
    alloc: u32,
    alloc_offset: u64,
    queue: u32,
    doorbell: u32,
    target_va: u64,
}

/// Another process (its own file) gets an errno for every foreign handle and mmap offset.
fn expect_foreign_refused(path: &Path, f: Foreign) -> TestResult {
    let d = RawDev::open(path)?;
    let refused = |what: &str, r: Result<(), i32>| -> TestResult {
        match r {
            Err(libc::ENOENT | libc::EINVAL) => Ok(()),
            other => {
                Err(format!("{what} with A's handle: {:?}, expected ENOENT/EINVAL", other.map_err(errno_name)).into())
            }
        }
    };
    refused("ALLOC", d.alloc(f.context, 4096).map(|_| ()))?;
    refused("CREATE_QUEUE", d.create_queue(f.context, None, 16).map(|_| ()))?;
    refused("CREATE_DOORBELL", d.create_doorbell(f.queue).map(|_| ()))?;
    refused(
        "SUBMIT",
        d.submit(uapi::Submit { queue: f.queue, cmdbuf: f.alloc, offset: 0, size: 0, progress_value: 1 }),
    )?;
    refused("WAIT_PROGRESS", d.wait_progress(f.queue, 1, 0))?;
    refused("CONNECT_DOORBELL", d.handle_op(uapi::IOCTL_CONNECT_DOORBELL, f.doorbell))?;
    refused("NOTIFY_WORK", d.handle_op(uapi::IOCTL_NOTIFY_WORK, f.doorbell))?;
    refused("SUSPEND_CONTEXT", d.handle_op(uapi::IOCTL_SUSPEND_CONTEXT, f.context))?;
    refused("RESUME_CONTEXT", d.handle_op(uapi::IOCTL_RESUME_CONTEXT, f.context))?;
    refused("DESTROY_DOORBELL", d.handle_op(uapi::IOCTL_DESTROY_DOORBELL, f.doorbell))?;
    refused("DESTROY_QUEUE", d.handle_op(uapi::IOCTL_DESTROY_QUEUE, f.queue))?;
    refused("FREE", d.handle_op(uapi::IOCTL_FREE, f.alloc))?;
    refused("DESTROY_CONTEXT", d.handle_op(uapi::IOCTL_DESTROY_CONTEXT, f.context))?;
    match d.peek_u64(f.alloc_offset) {
        Err(_) => Ok(()),
        Ok(v) => Err(format!("mmap of A's allocation offset succeeded (read {v:#x})").into()),
    }
}

/// Isolation: process B gets ENOENT/EINVAL for A's context, allocation, queue and doorbell
/// handles in every ioctl and for A's mmap offset; B's write to A's GPU VA faults B's context
/// (its doorbell reads DISCONNECTED_ABORT) and A's data and queue are unchanged.
fn another_process_cannot_reach_this_process_objects(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut q = user_queue(&ctx)?;
    // B allocates far fewer pages than this, so A's last VA lies beyond B's address space.
    let mut pads = Vec::new();
    for _ in 0..8 {
        pads.push(ctx.alloc(64 * 1024, 0)?);
    }
    let mut target = ctx.alloc(4096, 0)?;
    target.write_u32(0, 0xA11CE)?;
    let v = write32(&mut q, target.va_at(4)?, 0xA2)?;
    q.wait(v, WAIT)?;
    // The library keeps mmap offsets to itself: a second file of A's gives a real one.
    let raw = RawDev::open(path)?;
    let raw_ctx = raw.create_context().map_err(errno_name)?;
    let raw_alloc = raw.alloc(raw_ctx, 4096).map_err(errno_name)?;
    ensure!(raw.peek_u64(raw_alloc.mmap_offset).is_ok(), "A cannot map its own allocation");
    let foreign = Foreign {
        context: ctx.handle(),
        alloc: target.handle(),
        alloc_offset: raw_alloc.mmap_offset,
        queue: q.handle(),
        doorbell: q.doorbell_handle().ok_or("no doorbell")?,
        target_va: target.gpu_va(),
    };
    let faults_before = dev.debug_stats()?.faults;
    let child = proc::spawn("process B", move || {
        expect_foreign_refused(path, foreign)?;
        let dev = Device::open(path)?;
        let ctx = dev.create_context()?;
        let mut q = user_queue(&ctx)?;
        write32_faulting(&mut q, foreign.target_va, 0xEE11)?;
        let aborted = wait_until(WAIT, || matches!(status(&q), Ok(DoorbellStatus::DisconnectedAbort)));
        ensure!(aborted, "B's doorbell reads {:?} after writing A's VA", status(&q));
        Ok(())
    })?;
    child.join()?;
    ensure!(dev.debug_stats()?.faults > faults_before, "no fault counted for B's write");
    expect_u32(&target, 0, 0xA11CE, "A's data after B's write")?;
    expect_u32(&target, 4, 0xA2, "A's GPU-written data after B's write")?;
    expect_status(&q, DoorbellStatus::Connected, "A's doorbell after B's fault")?;
    let v = write32(&mut q, target.va_at(8)?, 0xA3)?;
    q.wait(v, WAIT)?;
    expect_u32(&target, 8, 0xA3, "A's work after B's fault")
}

/// Builds one packet with the physical address and a VA of B's own in its address fields.
type Build = fn(&mut CommandBuffer, u64, u64) -> belfry_umd::Result<()>;

/// Isolation: process B putting a raw guest physical address (that of a page of A's) in any
/// address field of any packet faults B's context, reads nothing of A's into B's memory, and
/// leaves A's page unchanged.
fn raw_physical_addresses_in_any_packet_field_fault_the_context(path: &Path) -> TestResult {
    const PATTERN: u64 = 0xA5A5_0123_4567_89AB;
    // A's page: locked anonymous memory (pagemap shows no frames of the module's PFN mappings).
    let page = LockedPage::new(PATTERN)?;
    let phys = page.phys().ok_or("no frame number in /proc/self/pagemap (not root?)")?;
    ensure!(phys < 0x1_0000_0000, "guest physical address {phys:#x} above 4 GiB");
    let child = proc::spawn("process B", move || {
        let cases: [(&str, Build); 12] = [
            ("WRITE_DATA32", |cb, p, _| cb.write32(p, 1).map(drop)),
            ("WRITE_DATA64", |cb, p, _| cb.write64(p, 1).map(drop)),
            ("WRITE_TIMESTAMP", |cb, p, _| cb.timestamp(p).map(drop)),
            ("FENCE_SIGNAL", |cb, p, _| cb.fence_signal(p, 1, None).map(drop)),
            ("MONITORED_FENCE_SIGNAL", |cb, p, _| cb.monitored_signal(p, 1).map(drop)),
            ("COPY source", |cb, p, own| cb.copy(p, own, 64).map(drop)),
            ("COPY destination", |cb, p, own| cb.copy(own, p, 64).map(drop)),
            ("FILL", |cb, p, _| cb.fill(p, 64, 7).map(drop)),
            ("COMPUTE a", |cb, p, own| cb.compute(ComputeOp::AddU32, 4, 0, p, own, own + 64).map(drop)),
            ("COMPUTE b", |cb, p, own| cb.compute(ComputeOp::AddU32, 4, 0, own, p, own + 64).map(drop)),
            ("COMPUTE destination", |cb, p, own| cb.compute(ComputeOp::AddU32, 4, 0, own, own, p).map(drop)),
            ("JUMP", |cb, p, _| cb.jump(p, 64).map(drop)),
        ];
        let dev = Device::open(path)?;
        for (what, build) in cases {
            let ctx = dev.create_context()?;
            let own = ctx.alloc(4096, 0)?;
            let mut q = user_queue(&ctx)?;
            let mut cb = CommandBuffer::new();
            build(&mut cb, phys, own.gpu_va())?;
            submit_faulting(&mut q, &cb)?;
            let aborted = wait_until(WAIT, || matches!(status(&q), Ok(DoorbellStatus::DisconnectedAbort)));
            ensure!(aborted, "{what} at physical {phys:#x}: B's doorbell reads {:?}", status(&q));
            let mut mine = [0u8; 128];
            own.read(0, &mut mine)?;
            ensure!(mine.iter().all(|&b| b == 0), "{what}: B's memory changed: {:x?}", &mine[..16]);
        }
        Ok(())
    })?;
    child.join()?;
    let now = page.read();
    ensure!(now == PATTERN, "A's page at physical {phys:#x} reads {now:#x}, expected {PATTERN:#x}");
    Ok(())
}

/// proves: CAP-12 — QUERY_CAPS reports the doorbell size (one page, what the doorbell mapping
/// is) and the engines that take user-mode queues; a user-mode queue with a doorbell is
/// accepted on every flagged engine and refused on any other (here only engines past the
/// last: every engine of the device is flagged, so CAP-11's refusal is not exercised).
fn capabilities_report_doorbell_size_and_user_mode_engines(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let caps = *dev.caps();
    ensure!(caps.raw.doorbell_size == 4096, "doorbell size {} (BAR2 has one 4 KiB page each)", caps.raw.doorbell_size);
    let engines = caps.engine_count();
    let d = RawDev::open(path)?;
    let ctx = d.create_context().map_err(errno_name)?;
    let mut refused = 0;
    for engine in 0..engines + 1 {
        let ring = d.alloc(ctx, 4096).map_err(errno_name)?;
        let ctl = d.alloc(ctx, 4096).map_err(errno_name)?;
        let r = d.create_queue_on(ctx, engine, Some((ring.handle, ctl.handle)), 16);
        let flagged = caps.user_mode_submission(engine) && engine < engines;
        match (flagged, r) {
            (true, Ok(q)) => {
                let db = d.create_doorbell(q.handle).map_err(errno_name)?;
                d.handle_op(uapi::IOCTL_DESTROY_DOORBELL, db.handle).map_err(errno_name)?;
                d.handle_op(uapi::IOCTL_DESTROY_QUEUE, q.handle).map_err(errno_name)?;
            }
            (false, Err(_)) => refused += 1,
            (true, Err(e)) => {
                return Err(format!("user-mode queue on flagged engine {engine}: {}", errno_name(e)).into())
            }
            (false, Ok(_)) => return Err(format!("user-mode queue on unflagged engine {engine} accepted").into()),
        }
    }
    ensure!(refused >= 1, "no engine refused");
    Ok(())
}

/// proves: CTX-01, CTX-02, CTX-04, CTX-06 — a suspended context keeps its doorbell connected
/// (CONNECTED_NOTIFY, a connected status) and accepts user-mode work that does not run; after
/// resume it runs.
fn suspended_context_keeps_its_doorbell_and_runs_work_after_resume(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    q.connect_doorbell()?;
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

/// proves: DB-10, DB-13 — a connected doorbell reads CONNECTED, and CONNECTED_NOTIFY while its
/// context is suspended: a submission then makes the library call NOTIFY_WORK_SUBMISSION once
/// and the work waits; on resume the doorbell reads CONNECTED again and the work runs. DB-10's
/// other two values are shown elsewhere: DISCONNECTED_RETRY by
/// `doorbell_is_created_retry_and_connect_makes_it_connected`, DISCONNECTED_ABORT by
/// `context_fault_aborts_its_doorbells`.
fn doorbell_reads_connected_notify_while_its_context_is_suspended(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    q.connect_doorbell()?;
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

/// proves: CTX-03 — a kernel-mode submission to a suspended context is accepted and queued,
/// and runs after resume.
fn kernel_mode_submit_to_a_suspended_context_runs_after_resume(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    q.connect_doorbell()?;
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

/// The termination record (`DEBUG_STATS`) of a child that exits with one user-mode queue whose
/// work is done, plus (`suspend`) work queued in its suspended context.
fn exit_record(path: &Path, suspend: bool) -> Result<uapi::DebugStats, crate::Error> {
    let ready = Signal::new()?;
    let ready_ref = &ready;
    let child = proc::spawn("exiting process", move || {
        let r = (|| -> Result<_, crate::Error> {
            let dev = Device::open(path)?;
            let ctx = dev.create_context()?;
            let buf = ctx.alloc(4096, 0)?;
            let mut q = user_queue(&ctx)?;
            q.connect_doorbell()?;
            let v = write32(&mut q, buf.gpu_va(), 1)?;
            q.wait(v, WAIT)?;
            if suspend {
                ctx.suspend()?;
                write32(&mut q, buf.gpu_va(), 2)?;
            }
            Ok((q, buf, ctx, dev))
        })();
        ready_ref.post(1);
        std::mem::forget(r?);
        Ok(())
    })?;
    ready.take();
    child.join()?;
    Ok(RawDev::open(path)?.debug_stats().map_err(errno_name)?)
}

/// proves: SUB-03 — the module learns whether a user-mode queue has pending work only from the
/// published LastQueuedValue: the release of a process whose work is done waits for no queue
/// (steps DISCONNECT, WAIT_SATISFIED, DESTROY); one that exits with work queued in a suspended
/// context waits for that one queue until its drain times out, then marks, suspends, destroys.
fn release_waits_only_for_work_last_queued_value_says_is_pending(path: &Path) -> TestResult {
    use uapi::{
        TERM_STEP_DESTROY as DESTROY, TERM_STEP_DISCONNECT as DISCONNECT, TERM_STEP_MARK_ERROR as MARK,
        TERM_STEP_SUSPEND as SUSPEND, TERM_STEP_WAIT_SATISFIED as SATISFIED, TERM_STEP_WAIT_TIMED_OUT as TIMED_OUT,
    };
    let steps = |s: &uapi::DebugStats| -> Vec<u8> {
        s.last_termination_steps.iter().copied().take_while(|&c| c != 0).collect()
    };
    let idle = exit_record(path, false)?;
    ensure!(
        idle.last_termination_waited == 0,
        "a process without pending work: {} queue(s) waited for",
        idle.last_termination_waited
    );
    ensure!(steps(&idle) == [DISCONNECT, SATISFIED, DESTROY], "steps without pending work {:?}", steps(&idle));
    let pending = exit_record(path, true)?;
    let (waited, timed_out) = (pending.last_termination_waited, pending.last_termination_timed_out);
    ensure!(
        waited == 1 && timed_out == 1,
        "with pending work: {waited} queue(s) waited for, {timed_out} timed out; expected 1 and 1"
    );
    let want = [DISCONNECT, TIMED_OUT, MARK, SUSPEND, DESTROY];
    ensure!(steps(&pending) == want, "steps with pending work {:?}, expected {want:?}", steps(&pending));
    Ok(())
}

/// The device-wide object counts.
fn counts(s: &uapi::DebugStats) -> (u32, u32, u32, u32, u64) {
    (s.contexts, s.queues, s.allocations, s.doorbells, s.gpu_pages)
}

/// Runs `child` in a process that builds objects and queued work, posts `ready`, then either
/// exits (`kill` false) or waits to be killed; then checks the counts return to baseline.
fn counts_return_to_baseline(path: &Path, kill: bool) -> TestResult {
    let d = RawDev::open(path)?;
    let baseline = counts(&d.debug_stats().map_err(errno_name)?);
    let (ready, go) = (Signal::new()?, Signal::new()?);
    let (ready_ref, go_ref) = (&ready, &go);
    let child = proc::spawn("terminating process", move || {
        let r = build_and_queue(path, kill);
        ready_ref.post(1); // Also on failure, so the parent never blocks.
        let (um, km, buf, ctx, dev) = r?;
        go_ref.take(); // Killed here, or told to exit once the parent counted the objects.
        if kill {
            std::thread::sleep(Duration::from_secs(60));
        }
        // Exits with queues, doorbell and work alive: the file's release cleans up.
        std::mem::forget((um, km, buf, ctx, dev));
        Ok(())
    })?;
    ready.take();
    let during = counts(&d.debug_stats().map_err(errno_name)?);
    go.post(1);
    if !(during.0 > baseline.0 && during.3 > baseline.3) {
        let why = if kill { child.kill().err() } else { child.join().err() };
        return Err(format!("the process's objects are not counted: {during:?} ({why:?})").into());
    }
    if kill {
        child.kill()?;
    } else {
        child.join()?;
    }
    let mut now = during;
    let back = wait_until(WAIT, || {
        now = d.debug_stats().map(|s| counts(&s)).unwrap_or(now);
        now == baseline
    });
    ensure!(back, "counts (contexts, queues, allocations, doorbells, GPU pages) {now:?}, baseline {baseline:?}");
    Ok(())
}

/// The objects of a terminating process: two queues with work queued (stuck in a suspended
/// context if `suspend`).
fn build_and_queue(path: &Path, suspend: bool) -> Result<(Queue, Queue, Allocation, Context, Device), crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut buf = ctx.alloc(64 * 1024, 0)?;
    buf.fill(0, 64 * 1024, 1)?;
    let mut um = user_queue(&ctx)?;
    let mut km = kernel_queue(&ctx)?;
    if suspend {
        ctx.suspend()?; // The work stays queued until the process dies.
    }
    for n in 0..6u32 {
        let mut cb = CommandBuffer::new();
        cb.fill(buf.gpu_va(), 64 * 1024, n)?;
        um.submit(&cb)?;
        km.submit(&cb)?;
    }
    Ok((um, km, buf, ctx, dev))
}

/// proves: TERM-03 — a process that exits with queued work on a user-mode and a kernel-mode
/// queue has every object, doorbell and GPU page released.
fn exiting_with_queued_work_releases_every_object(path: &Path) -> TestResult {
    counts_return_to_baseline(path, false)
}

/// proves: TERM-06 — a killed process whose work is stuck in a suspended context has its
/// queues, doorbells, ring allocations and GPU pages destroyed without waiting for the work.
fn killed_process_releases_every_object(path: &Path) -> TestResult {
    counts_return_to_baseline(path, true)
}

/// Interrupt records of native-fence kind counted so far (`DEBUG_STATS`).
pub(crate) fn fence_interrupts(dev: &Device) -> Result<u64, crate::Error> {
    Ok(dev.debug_stats()?.interrupts_by_cause[1])
}

/// Submits a `FENCE_SIGNAL` of `value` on `f`; returns the progress value.
pub(crate) fn gpu_signal(q: &mut Queue, f: &Fence, value: u64) -> belfry_umd::Result<u64> {
    let mut cb = CommandBuffer::new();
    cb.fence_signal(f.gpu_va(), value, None)?;
    q.submit(&cb)
}

/// Waits (polling `FENCE_INFO`) until `f` has `n` pending CPU waits.
pub(crate) fn expect_pending(f: &Fence, n: u32) -> TestResult {
    let ok = wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits == n));
    ensure!(ok, "pending waits {:?}, expected {n}", f.info()?.pending_waits);
    Ok(())
}

/// proves: FEN-02, FEN-17, NF-11 — a CPU wait on a DEFAULT fence sleeps (still blocked after
/// 200 ms, one pending wait) until a command buffer's FENCE_SIGNAL, whose interrupt wakes it;
/// the read-only mapping then reads the signaled value.
fn cpu_wait_wakes_on_a_gpu_signal(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = user_queue(&ctx)?;
    ensure!(f.value() == Some(0), "initial value {:?}", f.value());
    let before = fence_interrupts(&dev)?;
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| {
            let start = std::time::Instant::now();
            f.wait(7, WAIT).map(|()| start.elapsed())
        });
        expect_pending(&f, 1)?;
        std::thread::sleep(Duration::from_millis(200));
        ensure!(!waiter.is_finished(), "the CPU wait returned before any signal");
        gpu_signal(&mut q, &f, 7)?;
        let took = waiter.join().map_err(|_| "waiter panicked")??;
        ensure!(took >= Duration::from_millis(200), "the wait returned after {took:?}");
        Ok(())
    })?;
    ensure!(f.value() == Some(7), "CurrentValue reads {:?} after the wait", f.value());
    let after = fence_interrupts(&dev)?;
    ensure!(after > before, "no native-fence interrupt woke the waiter");
    expect_pending(&f, 0)?;
    Ok(())
}

/// proves: NF-01, MV-08, FEN-02 — a GPU wait on one queue is released by a GPU signal from
/// another queue: the work behind the wait does not run before the signal and runs after it,
/// with no native-fence interrupt counted and no ioctl made meanwhile.
fn gpu_wait_released_by_another_queue_without_interrupts(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut waiter = user_queue(&ctx)?;
    let mut signaler = user_queue(&ctx)?;
    // Connect both doorbells first (their first submissions reach the module).
    let w0 = write32(&mut waiter, buf.va_at(8)?, 1)?;
    let s0 = write32(&mut signaler, buf.va_at(12)?, 1)?;
    ensure!(wait_until(WAIT, || waiter.completed() >= w0 && signaler.completed() >= s0), "warm-up work did not run");
    let stats0 = dev.debug_stats()?;
    let mut cb = CommandBuffer::new();
    cb.fence_wait(f.gpu_va(), 5, None)?.write32(buf.va_at(0)?, 0xB0)?;
    let done = waiter.submit(&cb)?;
    std::thread::sleep(Duration::from_millis(100));
    ensure!(buf.read_u32(0)? == 0, "the work behind the GPU wait ran before the signal");
    let s = gpu_signal(&mut signaler, &f, 5)?;
    let ran = wait_until(WAIT, || waiter.completed() >= done && signaler.completed() >= s);
    let stats1 = dev.debug_stats()?;
    ensure!(ran, "the GPU wait was not released (progress {} of {done})", waiter.completed());
    expect_u32(&buf, 0, 0xB0, "the write behind the GPU wait")?;
    let irqs = stats1.interrupts_by_cause[1] - stats0.interrupts_by_cause[1];
    ensure!(irqs == 0, "{irqs} native-fence interrupt(s) during a GPU-only signal/wait");
    let ioctls = stats1.ioctls_by_caller - stats0.ioctls_by_caller;
    ensure!(ioctls == 1, "{} ioctl(s) besides DEBUG_STATS", ioctls - 1);
    Ok(())
}

/// proves: MV-06, MV-02 — with no CPU waiter MonitoredValue is UINT64_MAX and 32 GPU signals
/// raise no native-fence interrupt; one more signal with a CPU waiter pending raises one.
fn gpu_signals_without_a_waiter_raise_no_interrupt(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = user_queue(&ctx)?;
    // Kept until the write ran: a temporary would be freed (unmapped) before the GPU writes.
    let scratch = ctx_scratch(&ctx)?;
    let w = write32(&mut q, scratch.va_at(0)?, 1)?;
    ensure!(wait_until(WAIT, || q.completed() >= w), "warm-up work did not run");
    let info = f.info()?;
    ensure!(info.monitored_value == u64::MAX, "MonitoredValue {:#x} with no waiter", info.monitored_value);
    let before = fence_interrupts(&dev)?;
    // In batches that fit the ring, polling in between: a full ring would make the library
    // wait for a slot in WAIT_PROGRESS, whose progress-fence interrupts would count here.
    for batch in 0..4 {
        for v in 1..=8 {
            gpu_signal(&mut q, &f, batch * 8 + v)?;
        }
        let want = Some(batch * 8 + 8);
        ensure!(wait_until(WAIT, || f.value() == want), "CurrentValue {:?}, expected {want:?}", f.value());
        let done = q.last_submitted();
        ensure!(wait_until(WAIT, || q.completed() >= done), "batch {batch} did not complete");
    }
    let after = fence_interrupts(&dev)?;
    ensure!(after == before, "{} interrupt(s) for signals nobody waited for", after - before);
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait(33, WAIT));
        expect_pending(&f, 1)?;
        gpu_signal(&mut q, &f, 33)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    let last = fence_interrupts(&dev)?;
    ensure!(last > after, "the signal a CPU waiter needed raised no interrupt");
    Ok(())
}

/// A small allocation of `ctx` for warm-up writes.
fn ctx_scratch(ctx: &Context) -> belfry_umd::Result<Allocation> {
    ctx.alloc(4096, 0)
}

/// proves: MV-01, MV-02, MV-05, MV-07, MV-03 — the reference's example: CurrentValue 41 with a
/// CPU wait for 42 gives MonitoredValue 41; a second wait for 50 leaves it at 41; the GPU
/// signal of 42 releases the first wait and moves MonitoredValue to 49; the CPU signal of 50
/// releases the second and MonitoredValue returns to UINT64_MAX.
fn monitored_value_follows_the_pending_waits(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 41)?;
    let mut q = user_queue(&ctx)?;
    let expect = |pending: u32, monitored: u64, what: &str| -> TestResult {
        let ok =
            wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits == pending && i.monitored_value == monitored));
        let i = f.info()?;
        ensure!(
            ok,
            "{what}: {} pending wait(s), MonitoredValue {:#x}; expected {pending}, {monitored:#x}",
            i.pending_waits,
            i.monitored_value
        );
        Ok(())
    };
    expect(0, u64::MAX, "no waiter")?;
    std::thread::scope(|s| -> TestResult {
        let w42 = s.spawn(|| f.wait(42, WAIT));
        expect(1, 41, "a wait for 42 at CurrentValue 41")?;
        ensure!(f.info()?.current_value == 41, "CurrentValue {}", f.info()?.current_value);
        let w50 = s.spawn(|| f.wait(50, WAIT));
        expect(2, 41, "waits for 42 and 50")?;
        gpu_signal(&mut q, &f, 42)?;
        w42.join().map_err(|_| "waiter panicked")??;
        expect(1, 49, "after the signal of 42")?;
        ensure!(!w50.is_finished(), "the wait for 50 returned at 42");
        f.signal(50)?;
        w50.join().map_err(|_| "waiter panicked")??;
        expect(0, u64::MAX, "after the signal of 50")?;
        Ok(())
    })?;
    ensure!(f.value() == Some(50), "CurrentValue {:?}", f.value());
    Ok(())
}

/// proves: FEN-03, NF-03 — the CurrentValue mapping is read-only: a store through it in
/// a forked child kills the child with SIGSEGV and the value is unchanged; the CPU signals only
/// through SIGNAL_FENCE, which the mapping then shows.
fn current_value_mapping_is_read_only(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 3)?;
    let addr = f.cpu_address().ok_or("a DEFAULT fence without a CPU mapping")?;
    let sig = proc::store_signal(addr, 1000)?;
    ensure!(sig == Some(libc::SIGSEGV), "a store to CurrentValue ended the child with {sig:?}, not SIGSEGV");
    ensure!(f.value() == Some(3), "CurrentValue {:?} after the refused store", f.value());
    f.signal(4)?;
    ensure!(f.value() == Some(4), "CurrentValue {:?} after SIGNAL_FENCE", f.value());
    Ok(())
}

/// proves: NF-15, NF-16, NF-17 — an INTRA_GPU fence has no CPU mapping; CPU wait and CPU signal
/// on it are refused with EPERM, a shareable one with EINVAL; a GPU wait on it is released by a
/// GPU signal from another queue.
fn intra_gpu_fence_refuses_the_cpu_and_works_gpu_to_gpu(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::IntraGpu, 0, 0)?;
    ensure!(f.value().is_none() && f.cpu_address().is_none(), "an INTRA_GPU fence has a CPU mapping");
    let e = f.wait(1, Duration::from_millis(10)).err().and_then(|e| e.errno());
    ensure!(e == Some(libc::EPERM), "CPU wait: {:?}, expected EPERM", e.map(errno_name));
    let e = f.signal(1).err().and_then(|e| e.errno());
    ensure!(e == Some(libc::EPERM), "CPU signal: {:?}, expected EPERM", e.map(errno_name));
    let e = ctx.create_fence(FenceKind::IntraGpu, uapi::FENCE_SHAREABLE, 0).err().and_then(|e| e.errno());
    ensure!(e == Some(libc::EINVAL), "shareable INTRA_GPU: {:?}, expected EINVAL", e.map(errno_name));
    let buf = ctx.alloc(4096, 0)?;
    let mut waiter = user_queue(&ctx)?;
    let mut signaler = user_queue(&ctx)?;
    let mut cb = CommandBuffer::new();
    cb.fence_wait(f.gpu_va(), 9, None)?.write32(buf.va_at(0)?, 0x16)?;
    let done = waiter.submit(&cb)?;
    std::thread::sleep(Duration::from_millis(100));
    ensure!(buf.read_u32(0)? == 0, "the work behind the GPU wait ran before the signal");
    gpu_signal(&mut signaler, &f, 9)?;
    ensure!(wait_until(WAIT, || waiter.completed() >= done), "the GPU wait on INTRA_GPU was not released");
    expect_u32(&buf, 0, 0x16, "the write behind the GPU wait")?;
    Ok(())
}

/// proves: NF-07, NF-08, FEN-06 — QUERY_CAPS declares a 64-byte stride; three non-shareable
/// fences of a context share one CurrentValue page at distinct stride-aligned offsets, each a
/// separate value; each shareable fence gets a page of its own at offset 0.
fn fence_values_are_packed_at_the_stride_unless_shareable(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let stride = dev.caps().raw.fence_stride;
    ensure!(stride == 64, "fence stride {stride}");
    let ctx = dev.create_context()?;
    let packed = (0..3).map(|i| ctx.create_fence(FenceKind::Default, 0, 10 + i)).collect::<Result<Vec<_>, _>>()?;
    let shared = (0..2)
        .map(|_| ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 0))
        .collect::<Result<Vec<_>, _>>()?;
    let page = |f: &Fence| f.gpu_va() & !0xfff;
    for (i, f) in packed.iter().enumerate() {
        ensure!(page(f) == page(&packed[0]), "packed fence {i} is on another GPU page");
        ensure!(f.page_offset() % 64 == 0, "packed fence {i} at offset {}", f.page_offset());
        ensure!(f.gpu_va() % 8 == 0 && f.cpu_address().is_some_and(|a| a % 8 == 0), "fence {i} not 8-byte aligned");
        ensure!(f.value() == Some(10 + i as u64), "packed fence {i} reads {:?}", f.value());
    }
    let offsets: std::collections::BTreeSet<_> = packed.iter().map(Fence::page_offset).collect();
    ensure!(offsets.len() == 3, "packed offsets {offsets:?}");
    packed[1].signal(100)?;
    ensure!(packed[0].value() == Some(10) && packed[2].value() == Some(12), "a signal changed a neighbour");
    ensure!(packed[1].value() == Some(100), "signaled fence reads {:?}", packed[1].value());
    for f in &shared {
        ensure!(f.page_offset() == 0, "shareable fence at offset {}", f.page_offset());
        ensure!(page(f) != page(&packed[0]), "a shareable fence shares the packed page");
    }
    ensure!(page(&shared[0]) != page(&shared[1]), "two shareable fences share a page");
    Ok(())
}

/// proves: FEN-16, FEN-02 — a CPU signal releases a GPU wait (the work behind it runs) and is
/// visible at once through the mapping.
fn cpu_signal_releases_a_gpu_wait(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    let mut cb = CommandBuffer::new();
    cb.fence_wait(f.gpu_va(), 3, None)?.write32(buf.va_at(0)?, 0x16)?;
    let done = q.submit(&cb)?;
    std::thread::sleep(Duration::from_millis(100));
    ensure!(buf.read_u32(0)? == 0, "the work behind the GPU wait ran before the signal");
    f.signal(3)?;
    ensure!(f.value() == Some(3), "CurrentValue {:?} right after SIGNAL_FENCE", f.value());
    ensure!(wait_until(WAIT, || q.completed() >= done), "the CPU signal did not release the GPU wait");
    expect_u32(&buf, 0, 0x16, "the write behind the GPU wait")?;
    Ok(())
}

/// Interrupt records of monitored-fence kind counted so far (`DEBUG_STATS`).
pub(crate) fn monitored_interrupts(dev: &Device) -> Result<u64, crate::Error> {
    Ok(dev.debug_stats()?.interrupts_by_cause[2])
}

/// Submits a `MONITORED_FENCE_SIGNAL` of `value` on `f`; returns the progress value.
pub(crate) fn gpu_monitored_signal(q: &mut Queue, f: &Fence, value: u64) -> belfry_umd::Result<u64> {
    let mut cb = CommandBuffer::new();
    cb.monitored_signal(f.gpu_va(), value)?;
    q.submit(&cb)
}

/// proves: FEN-01, FEN-02, FEN-11, FEN-12, FEN-17 — a monitored fence is created with its
/// initial value, a handle, a CPU and a GPU address; two CPU waits (for 9 and 12) sleep until
/// a command buffer's MONITORED_FENCE_SIGNAL of 9, whose monitored-fence interrupt wakes both
/// to re-read the value: the wait for 9 returns, the one for 12 keeps sleeping until a second
/// GPU signal of 12.
fn monitored_fence_cpu_wait_wakes_on_a_gpu_signal(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 5)?;
    ensure!(f.handle() != 0, "monitored fence handle 0");
    ensure!(f.value() == Some(5), "initial value {:?}", f.value());
    ensure!(f.gpu_va() != 0 && f.gpu_va() % 8 == 0, "GPU VA {:#x}", f.gpu_va());
    ensure!(f.cpu_address().is_some_and(|a| a % 8 == 0), "CPU address {:?}", f.cpu_address());
    let mut q = kernel_queue(&ctx)?;
    let before = monitored_interrupts(&dev)?;
    std::thread::scope(|s| -> TestResult {
        let start = std::time::Instant::now();
        let fence = &f;
        let w9 = s.spawn(move || fence.wait(9, WAIT).map(|()| start.elapsed()));
        let w12 = s.spawn(|| f.wait(12, WAIT));
        expect_pending(&f, 2)?;
        std::thread::sleep(Duration::from_millis(200));
        ensure!(!w9.is_finished() && !w12.is_finished(), "a CPU wait returned before any signal");
        gpu_monitored_signal(&mut q, &f, 9)?;
        let took = w9.join().map_err(|_| "waiter panicked")??;
        ensure!(took >= Duration::from_millis(200), "the wait for 9 returned after {took:?}");
        expect_pending(&f, 1)?;
        std::thread::sleep(Duration::from_millis(100));
        ensure!(!w12.is_finished(), "the wait for 12 returned at 9");
        gpu_monitored_signal(&mut q, &f, 12)?;
        w12.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    ensure!(f.value() == Some(12), "value {:?} after the waits", f.value());
    let after = monitored_interrupts(&dev)?;
    ensure!(after >= before + 2, "{} monitored-fence interrupt(s) for two GPU signals", after - before);
    let info = f.info()?;
    ensure!(info.current_value == 12, "FENCE_INFO value {}", info.current_value);
    ensure!(info.monitored_value == u64::MAX, "a monitored fence reports MonitoredValue {:#x}", info.monitored_value);
    expect_pending(&f, 0)?;
    Ok(())
}

/// proves: FEN-16, FEN-19 — a CPU signal of a monitored fence is in the read-only mapping as
/// soon as SIGNAL_FENCE returns, releases a sleeping CPU wait, and a thread polling the mapping
/// sees the value.
fn monitored_fence_cpu_signal_is_visible_at_once_and_releases_a_waiter(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait(4, WAIT));
        let poller = s.spawn(|| wait_until(WAIT, || f.value() == Some(4)));
        expect_pending(&f, 1)?;
        std::thread::sleep(Duration::from_millis(100));
        ensure!(!waiter.is_finished() && !poller.is_finished(), "a wait returned before the signal");
        f.signal(4)?;
        ensure!(f.value() == Some(4), "value {:?} right after SIGNAL_FENCE", f.value());
        waiter.join().map_err(|_| "waiter panicked")??;
        ensure!(poller.join().map_err(|_| "poller panicked")?, "the polling thread never saw 4");
        Ok(())
    })?;
    expect_pending(&f, 0)?;
    ensure!(f.info()?.current_value == 4, "FENCE_INFO value {}", f.info()?.current_value);
    Ok(())
}

/// proves: FEN-03 — the CPU mapping of a monitored fence is read-only: a store through it in a
/// forked child kills the child with SIGSEGV and the value is unchanged, while the GPU writes
/// it at its GPU VA (MONITORED_FENCE_SIGNAL) and the CPU signals it through SIGNAL_FENCE.
fn monitored_fence_mapping_is_read_only(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 3)?;
    let addr = f.cpu_address().ok_or("a monitored fence without a CPU mapping")?;
    let sig = proc::store_signal(addr, 1000)?;
    ensure!(sig == Some(libc::SIGSEGV), "a store to the fence value ended the child with {sig:?}, not SIGSEGV");
    ensure!(f.value() == Some(3), "value {:?} after the refused store", f.value());
    let mut q = kernel_queue(&ctx)?;
    gpu_monitored_signal(&mut q, &f, 6)?;
    ensure!(wait_until(WAIT, || f.value() == Some(6)), "value {:?} after the GPU signal", f.value());
    f.signal(7)?;
    ensure!(f.value() == Some(7), "value {:?} after SIGNAL_FENCE", f.value());
    Ok(())
}

/// Every test, in order of value.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(doorbell_is_created_retry_and_connect_makes_it_connected, Default, ["DB-07", "DB-08", "DB-09"]),
        test_entry!(
            submission_while_disconnected_reconnects_and_runs,
            Default,
            ["DB-11", "DB-12", "DB-14", "RING-05", "RING-07"]
        ),
        test_entry!(
            least_recently_used_doorbell_is_victimized_and_reconnects,
            TwoDoorbells,
            ["DB-03", "VIC-01", "VIC-02", "VIC-03", "VIC-04", "RING-06"]
        ),
        test_entry!(context_fault_aborts_its_doorbells, Default, ["DB-16"]),
        test_entry!(
            six_queues_of_two_processes_on_two_doorbells_reconnect_and_complete,
            TwoDoorbells,
            ["VIC-01", "DB-14"]
        ),
        test_entry!(global_doorbell_serves_six_queues_without_victimization, GlobalDoorbell, ["DB-02", "VIC-05"]),
        test_entry!(progress_fence_values_increase_and_are_reached, Default, ["SUB-02"]),
        test_entry!(user_mode_submission_makes_no_kernel_call, Default, ["SUB-01", "DB-11"]),
        test_entry!(copy_fill_and_compute_write_the_expected_data, Default, []),
        test_entry!(kernel_mode_queue_runs_beside_user_mode_queue, Default, ["DB-05"]),
        test_entry!(kernel_mode_submit_is_refused_on_a_user_mode_queue, Default, ["DB-04"]),
        test_entry!(
            ring_allocations_are_held_by_the_queue_and_freed_only_by_the_library,
            Default,
            ["RING-02", "RING-03", "DB-18"]
        ),
        test_entry!(another_process_cannot_reach_this_process_objects, Default, []),
        test_entry!(raw_physical_addresses_in_any_packet_field_fault_the_context, Default, []),
        test_entry!(capabilities_report_doorbell_size_and_user_mode_engines, Default, ["CAP-12"]),
        test_entry!(release_waits_only_for_work_last_queued_value_says_is_pending, Default, ["SUB-03"]),
        test_entry!(
            suspended_context_keeps_its_doorbell_and_runs_work_after_resume,
            Default,
            ["CTX-01", "CTX-02", "CTX-04", "CTX-06"]
        ),
        test_entry!(doorbell_reads_connected_notify_while_its_context_is_suspended, Default, ["DB-10", "DB-13"]),
        test_entry!(kernel_mode_submit_to_a_suspended_context_runs_after_resume, Default, ["CTX-03"]),
        test_entry!(victimized_suspended_queue_reconnects_and_runs_after_resume, TwoDoorbells, ["CTX-05"]),
        test_entry!(exiting_with_queued_work_releases_every_object, Default, ["TERM-03"]),
        test_entry!(killed_process_releases_every_object, Default, ["TERM-06"]),
        test_entry!(cpu_wait_wakes_on_a_gpu_signal, Default, ["FEN-02", "FEN-17", "NF-11"]),
        test_entry!(gpu_wait_released_by_another_queue_without_interrupts, Default, ["NF-01", "MV-08", "FEN-02"]),
        test_entry!(gpu_signals_without_a_waiter_raise_no_interrupt, Default, ["MV-06", "MV-02"]),
        test_entry!(monitored_value_follows_the_pending_waits, Default, ["MV-01", "MV-02", "MV-05", "MV-07", "MV-03"]),
        test_entry!(current_value_mapping_is_read_only, Default, ["FEN-03", "NF-03"]),
        test_entry!(intra_gpu_fence_refuses_the_cpu_and_works_gpu_to_gpu, Default, ["NF-15", "NF-16", "NF-17"]),
        test_entry!(fence_values_are_packed_at_the_stride_unless_shareable, Default, ["NF-07", "NF-08", "FEN-06"]),
        test_entry!(cpu_signal_releases_a_gpu_wait, Default, ["FEN-16", "FEN-02"]),
        test_entry!(
            monitored_fence_cpu_wait_wakes_on_a_gpu_signal,
            Default,
            ["FEN-01", "FEN-02", "FEN-11", "FEN-12", "FEN-17"]
        ),
        test_entry!(monitored_fence_cpu_signal_is_visible_at_once_and_releases_a_waiter, Default, ["FEN-16", "FEN-19"]),
        test_entry!(monitored_fence_mapping_is_read_only, Default, ["FEN-03"]),
    ]
}

#[cfg(test)]
mod checks {
    use std::collections::{BTreeMap, BTreeSet};

    /// The `proves:` ids of each test function of the suite (collected by `build.rs`).
    fn documented() -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (id, place) in crate::coverage::guest_documented() {
            let name = place.rsplit(':').next().unwrap_or(place);
            out.entry(name.to_string()).or_default().insert((*id).to_string());
        }
        out
    }

    #[test]
    fn registry_ids_match_the_proves_lines_and_names_are_unique() {
        let docs = documented();
        let mut names = BTreeSet::new();
        for t in crate::registry() {
            assert!(names.insert(t.name), "duplicate test {}", t.name);
            let ids: BTreeSet<String> = t.ids.iter().map(|s| (*s).to_string()).collect();
            let documented = docs.get(t.name).cloned().unwrap_or_default();
            assert_eq!(documented, ids, "{}: registry ids differ from its proves line", t.name);
            for id in &ids {
                let (family, number) = id.split_once('-').unwrap();
                assert!(family.chars().all(|c| c.is_ascii_uppercase()) && number.parse::<u32>().is_ok(), "{id}");
            }
        }
    }

    #[test]
    fn filters_match_name_substrings_and_exact_rule_ids() {
        let all = super::all();
        let pick = |f: &str| all.iter().filter(|t| crate::selected(t, &[f.to_string()])).count();
        assert_eq!(pick("VIC-05"), 1);
        assert_eq!(pick("vic-0"), 0, "ids match exactly");
        assert!(pick("doorbell") > 1);
        assert_eq!(all.iter().filter(|t| crate::selected(t, &[])).count(), all.len());
    }
}

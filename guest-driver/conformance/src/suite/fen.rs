//! FEN-xx: Monitored fences (RULES.md § Monitored fences).

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use belfry_abi::uapi;
use belfry_umd::{Allocation, CommandBuffer, Device, Fence, FenceKind, Queue};

use crate::harness::proc;
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fences::{expect_pending, fence_interrupts, gpu_signal, pollable_waits_follow_their_own_fence};
use crate::support::fixture::open_context;
use crate::support::sleeping::{wait_fence_for_a_later_gpu_signal, wait_progress_for_a_later_completion};
use crate::support::work::{expect_held, expect_u32, kernel_queue, user_queue, write32};
use crate::support::{expect_errno, expect_foreign_fence, wait_until, WAIT};
use crate::{Test, TestResult};

/// proves: FEN-02, FEN-17, NF-11 — a CPU wait on a DEFAULT fence sleeps (still blocked after
/// 200 ms, one pending wait) until a command buffer's FENCE_SIGNAL, whose interrupt wakes it;
/// the read-only mapping then reads the signaled value.
fn cpu_wait_wakes_on_a_gpu_signal(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = user_queue(&ctx)?;
    ensure!(f.value() == Some(0), "initial value {:?}", f.value());
    let before = fence_interrupts(&dev)?;
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait(7, WAIT));
        expect_pending(&f, 1)?;
        std::thread::sleep(Duration::from_millis(200));
        ensure!(!waiter.is_finished(), "the CPU wait returned before any signal");
        gpu_signal(&mut q, &f, 7)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    ensure!(f.value() == Some(7), "CurrentValue reads {:?} after the wait", f.value());
    let after = fence_interrupts(&dev)?;
    ensure!(after > before, "no native-fence interrupt woke the waiter");
    expect_pending(&f, 0)?;
    Ok(())
}

/// proves: FEN-03, NF-03 — the CurrentValue mapping is read-only: a store through it in
/// a forked child kills the child with SIGSEGV and the value is unchanged; the CPU signals only
/// through SIGNAL_FENCE, which the mapping then shows.
fn current_value_mapping_is_read_only(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 3)?;
    let addr = f.cpu_address().ok_or("a DEFAULT fence without a CPU mapping")?;
    let sig = proc::store_signal(addr, 1000)?;
    ensure!(sig == Some(libc::SIGSEGV), "a store to CurrentValue ended the child with {sig:?}, not SIGSEGV");
    ensure!(f.value() == Some(3), "CurrentValue {:?} after the refused store", f.value());
    f.signal(4)?;
    ensure!(f.value() == Some(4), "CurrentValue {:?} after SIGNAL_FENCE", f.value());
    Ok(())
}

/// proves: FEN-16, FEN-02 — a CPU signal releases a GPU wait (the work behind it runs) and is
/// visible at once through the mapping.
fn cpu_signal_releases_a_gpu_wait(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
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
/// GPU signal of 12. FEN-12's "a command buffer completed" is, in Belfry, that interrupt: the
/// device raises it when the command buffer's MONITORED_FENCE_SIGNAL runs, and the module then
/// re-reads the fence and releases the satisfied wait only.
fn monitored_fence_cpu_wait_wakes_on_a_gpu_signal(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 5)?;
    ensure!(f.handle() != 0, "monitored fence handle 0");
    ensure!(f.value() == Some(5), "initial value {:?}", f.value());
    ensure!(f.gpu_va() != 0 && f.gpu_va() % 8 == 0, "GPU VA {:#x}", f.gpu_va());
    ensure!(f.cpu_address().is_some_and(|a| a % 8 == 0), "CPU address {:?}", f.cpu_address());
    let mut q = kernel_queue(&ctx)?;
    let before = monitored_interrupts(&dev)?;
    std::thread::scope(|s| -> TestResult {
        let w9 = s.spawn(|| f.wait(9, WAIT));
        let w12 = s.spawn(|| f.wait(12, WAIT));
        expect_pending(&f, 2)?;
        std::thread::sleep(Duration::from_millis(200));
        ensure!(!w9.is_finished() && !w12.is_finished(), "a CPU wait returned before any signal");
        gpu_monitored_signal(&mut q, &f, 9)?;
        w9.join().map_err(|_| "waiter panicked")??;
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
    let (_dev, ctx) = open_context(path)?;
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
    let (_dev, ctx) = open_context(path)?;
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

/// WAIT_FENCE_EVENTFD validates its input: a pipe is not an eventfd (EINVAL), an INTRA_GPU
/// fence has no CPU wait (EPERM, and no export: EINVAL); one file may keep 256 waits pending,
/// the next is refused with ENOSPC; destroying the fence drops them all, signaling the eventfd
/// (a poller wakes and finds the fence gone).
fn eventfd_waits_refuse_bad_arguments_and_are_bounded(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let base = dev.fence_debug()?.event_waits;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let (reader, _writer) = std::io::pipe()?;
    expect_errno(f.notify(1, reader.as_fd()), libc::EINVAL, "a pipe as the eventfd")?;
    let intra = ctx.create_fence(FenceKind::IntraGpu, 0, 0)?;
    expect_errno(intra.event(1), libc::EPERM, "a pollable wait on INTRA_GPU")?;
    expect_errno(intra.export(), libc::EINVAL, "export of INTRA_GPU")?;
    let ev = f.event(1)?;
    for v in 2..=256 {
        f.notify(v, ev.as_fd())?;
    }
    let pending = dev.fence_debug()?.event_waits;
    ensure!(pending == base + 256, "{pending} eventfd waits, expected {}", base + 256);
    expect_errno(f.notify(300, ev.as_fd()), libc::ENOSPC, "the 257th wait of one file")?;
    let mv = f.info()?.monitored_value;
    ensure!(mv == 0, "MonitoredValue {mv:#x} with waits for 1..=256");
    drop(f);
    let left = dev.fence_debug()?.event_waits;
    ensure!(left == base, "{left} eventfd waits after the destroy, expected {base}");
    match ev.is_ready() {
        Err(belfry_umd::Error::FenceGone { .. }) => {}
        other => return Err(format!("a wait on the destroyed fence: {other:?}, expected FenceGone").into()),
    }
    Ok(())
}

/// proves: FEN-18, MV-07 — registering a pollable wait returns at once and counts as a
/// pending wait (MonitoredValue = value − 1); poll(2) says not ready, still not after 200 ms;
/// the GPU signal's interrupt makes it ready (counter 1) and MonitoredValue returns to
/// UINT64_MAX. A wait for a reached value is ready at once, one a CPU signal reaches is ready
/// when the signal returns.
fn pollable_wait_becomes_ready_on_a_gpu_signal(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = user_queue(&ctx)?;
    let before = fence_interrupts(&dev)?;
    let ev = f.event(5)?;
    ensure!(!ev.is_ready()?, "ready before any signal");
    let info = f.info()?;
    ensure!(
        info.pending_waits == 1 && info.monitored_value == 4,
        "{} pending wait(s), MonitoredValue {:#x}; expected 1, 4",
        info.pending_waits,
        info.monitored_value
    );
    std::thread::sleep(Duration::from_millis(200));
    ensure!(!ev.is_ready()?, "ready 200 ms later with no signal");
    gpu_signal(&mut q, &f, 5)?;
    ensure!(ev.wait(WAIT)?, "not ready after the GPU signal");
    ensure!(ev.take()? == 1, "the eventfd counter is not 1");
    expect_pending(&f, 0)?;
    // The interrupt thread releases the wait, then moves MonitoredValue (MV-07).
    let ok = wait_until(WAIT, || f.info().is_ok_and(|i| i.monitored_value == u64::MAX));
    ensure!(ok, "MonitoredValue {:#x} with no wait left", f.info()?.monitored_value);
    ensure!(fence_interrupts(&dev)? > before, "no native-fence interrupt made it ready");
    let reached = f.event(3)?;
    ensure!(reached.is_ready()?, "a wait for a reached value is not ready at once");
    let cpu = f.event(8)?;
    ensure!(!cpu.is_ready()?, "a wait for 8 is ready at 5");
    f.signal(8)?;
    ensure!(cpu.is_ready()?, "not ready when the CPU signal of 8 returned");
    expect_pending(&f, 0)?;
    Ok(())
}

/// proves: FEN-18 — a pollable wait on a monitored fence (no MonitoredValue) becomes ready on the
/// interrupt of a MONITORED_FENCE_SIGNAL from a kernel-mode queue; a pending one is dropped
/// when its fence handle is destroyed, its eventfd signaled so a poller wakes to find the fence
/// gone.
fn pollable_wait_on_a_monitored_fence_and_its_drop_on_destroy(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let m = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let ev = m.event(3)?;
    ensure!(!ev.is_ready()?, "ready before any signal");
    let mut cb = CommandBuffer::new();
    cb.monitored_signal(m.gpu_va(), 3)?;
    q.submit(&cb)?;
    ensure!(ev.wait(WAIT)?, "not ready after the GPU signal");
    let base = dev.fence_debug()?.event_waits;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let orphan = f.event(100)?;
    let pending = dev.fence_debug()?.event_waits;
    ensure!(pending == base + 1, "{pending} eventfd waits pending, expected {}", base + 1);
    drop(f);
    let left = dev.fence_debug()?.event_waits;
    ensure!(left == base, "{left} eventfd waits after the destroy, expected {base}");
    match orphan.is_ready() {
        Err(belfry_umd::Error::FenceGone { .. }) => {}
        other => return Err(format!("the dropped wait: {other:?}, expected FenceGone").into()),
    }
    Ok(())
}

/// proves: FEN-18 — on a device that posts the per-queue form (the queue, not the fence), the
/// signaled fence's pollable wait becomes ready and the other's stays pending.
fn pollable_wait_is_released_by_a_per_queue_record(path: &Path) -> TestResult {
    pollable_waits_follow_their_own_fence(path)
}

/// Submits a write of `0x11` at offset 0 of `buf`, then a copy of that word to offset 4: the
/// copy reads 0x11 only if the two ran in order. Returns the second progress value.
fn ordered_pair(q: &mut Queue, buf: &Allocation) -> Result<u64, crate::Error> {
    write32(q, buf.va_at(0)?, 0x11)?;
    let mut cb = CommandBuffer::new();
    cb.copy(buf.va_at(0)?, buf.va_at(4)?, 4)?;
    Ok(q.submit(&cb)?)
}

/// Checks what [`ordered_pair`] wrote.
fn expect_ordered(buf: &Allocation) -> TestResult {
    expect_u32(buf, 0, 0x11, "the first held submission")?;
    expect_u32(buf, 4, 0x11, "the second held submission (copying the first one's word)")
}

/// proves: FEN-13, FEN-14, FEN-15 — a GPU wait of a kernel-mode queue on an unsignaled
/// monitored fence returns at once (the fence is still unsignaled when it and two later
/// submissions have returned); the later submissions do not run while the fence stays
/// unsignaled, and run, in order, once the CPU signals it.
fn monitored_gpu_wait_holds_later_work_until_a_cpu_signal(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let before = write32(&mut q, buf.va_at(8)?, 7)?;
    ensure!(wait_until(WAIT, || q.completed() >= before), "a submission before the wait did not run");
    let released = AtomicBool::new(false);
    std::thread::scope(|s| -> TestResult {
        // Should the GPU wait block until a signal, this thread ends it after 5 s, and the
        // check below fails instead of hanging.
        s.spawn(|| {
            if !wait_until(Duration::from_secs(5), || released.load(Ordering::Acquire)) {
                let _ = f.signal(1000);
            }
        });
        let start = Instant::now();
        let queued = q.wait_fence(&f, 5).map_err(crate::Error::from).and_then(|()| ordered_pair(&mut q, &buf));
        released.store(true, Ordering::Release);
        let last = queued?;
        ensure!(f.value() == Some(0), "the GPU wait and two submissions returned only after {:?}", start.elapsed());
        expect_held(&q, before + 1, "a submission behind the GPU wait")?;
        expect_u32(&buf, 0, 0, "the held submission's target")?;
        f.signal(4)?;
        expect_held(&q, before + 1, "a submission behind a GPU wait for 5 after a signal of 4")?;
        f.signal(5)?;
        ensure!(wait_until(WAIT, || q.completed() >= last), "the held work did not run after the signal");
        expect_ordered(&buf)
    })
}

/// proves: FEN-02, FEN-12, FEN-15 — GPU signal to GPU wait on a monitored fence: the work a
/// kernel-mode queue submitted after its GPU wait is held until another queue's
/// MONITORED_FENCE_SIGNAL, whose interrupt makes the module re-read the fence and release it:
/// the release is a mailbox command of the module's own (a kick beyond the signaler's), not a
/// wait the GPU resolves alone. FEN-12's trigger is that monitored-fence interrupt, raised as
/// the signaling command buffer's packet runs (Belfry's form of "a command buffer completed").
fn monitored_gpu_wait_is_released_by_another_queue_s_gpu_signal(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 1)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut waiter = kernel_queue(&ctx)?;
    let mut signaler = kernel_queue(&ctx)?;
    waiter.wait_fence(&f, 3)?;
    let last = ordered_pair(&mut waiter, &buf)?;
    let interrupts = monitored_interrupts(&dev)?;
    let two = gpu_monitored_signal(&mut signaler, &f, 2)?;
    ensure!(wait_until(WAIT, || signaler.completed() >= two && f.value() == Some(2)), "GPU signal of 2 did not land");
    expect_held(&waiter, last - 1, "work behind a GPU wait for 3 after a GPU signal of 2")?;
    let mailbox = dev.debug_stats()?.interrupts_by_cause[0];
    gpu_monitored_signal(&mut signaler, &f, 3)?;
    ensure!(wait_until(WAIT, || waiter.completed() >= last), "the GPU signal of 3 did not release the held work");
    expect_ordered(&buf)?;
    // The counters are cumulative and counted when the module handles each completion, which
    // may come after the released work is visible: wait for them to get there.
    let commands = || dev.debug_stats().map_or(0, |d| d.interrupts_by_cause[0] - mailbox);
    ensure!(
        wait_until(WAIT, || commands() >= 2),
        "{} mailbox command(s) for the signal's submission and the release",
        commands()
    );
    let monitored = || monitored_interrupts(&dev).map_or(0, |n| n - interrupts);
    ensure!(wait_until(WAIT, || monitored() >= 2), "{} monitored-fence interrupt(s) for two GPU signals", monitored());
    Ok(())
}

/// proves: FEN-09 — a GPU signal of a monitored fence is a MONITORED_FENCE_SIGNAL packet in the
/// command stream: submitting it costs the one SUBMIT any command buffer costs and no kernel
/// call of its own (the file's ioctl count), and the GPU writes the value at the fence's
/// address, where the read-only mapping sees it without any further call.
fn monitored_gpu_signal_is_a_packet_with_no_kernel_call_of_its_own(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let a = dev.debug_stats()?.ioctls_by_caller;
    let b = dev.debug_stats()?.ioctls_by_caller;
    let mut cb = CommandBuffer::new();
    cb.monitored_signal(f.gpu_va(), 9)?;
    q.submit(&cb)?;
    ensure!(wait_until(WAIT, || f.value() == Some(9)), "value {:?} after the GPU signal of 9", f.value());
    let c = dev.debug_stats()?.ioctls_by_caller;
    let calls = (c - b) - (b - a);
    ensure!(calls == 1, "a command buffer with a GPU signal made {calls} ioctl(s), expected its one SUBMIT");
    Ok(())
}

/// proves: FEN-10 — the software signal packet: QUEUE_SIGNAL_FENCE queues it behind a
/// kernel-mode queue's work; while the queue is blocked before it (a GPU wait on a native
/// fence) the monitored fence keeps its value, and once the packet reaches the head and runs
/// the module writes the value from the CPU, which wakes a CPU wait and releases another
/// queue's GPU wait held by the module.
fn software_signal_packet_writes_the_fence_from_the_cpu_when_it_runs(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let gate = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let mut other = kernel_queue(&ctx)?;
    other.wait_fence(&f, 5)?;
    let held = write32(&mut other, buf.va_at(4)?, 0x66)?;
    q.wait_fence(&gate, 1)?;
    let notifies = monitored_interrupts(&dev)?;
    q.software_signal(&f, 5)?;
    let after = write32(&mut q, buf.va_at(0)?, 0x55)?;
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait(5, WAIT));
        expect_held(&q, after, "work behind the GPU wait and the software signal")?;
        ensure!(f.value() == Some(0), "the fence reads {:?} before its software signal ran", f.value());
        ensure!(!waiter.is_finished(), "a CPU wait for 5 returned before the software signal ran");
        ensure!(other.completed() < held, "the other queue's held work ran before the software signal");
        gate.signal(1)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    ensure!(f.value() == Some(5), "value {:?} after the software signal", f.value());
    ensure!(wait_until(WAIT, || q.completed() >= after), "the work after the software signal did not run");
    ensure!(wait_until(WAIT, || other.completed() >= held), "the software signal did not release the held work");
    expect_u32(&buf, 4, 0x66, "the released work")?;
    ensure!(monitored_interrupts(&dev)? > notifies, "no NOTIFY interrupt was counted");
    Ok(())
}

/// A GPU wait of a kernel-mode queue on a native fence is a FENCE_WAIT on its ring: the later
/// submission is held by the GPU until another queue's FENCE_SIGNAL, with no CPU interrupt.
fn native_gpu_wait_of_a_kernel_mode_queue_waits_on_the_gpu(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut waiter = kernel_queue(&ctx)?;
    let mut signaler = kernel_queue(&ctx)?;
    let interrupts = fence_interrupts(&dev)?;
    waiter.wait_fence(&f, 2)?;
    let last = ordered_pair(&mut waiter, &buf)?;
    expect_held(&waiter, last - 1, "work behind a native GPU wait")?;
    gpu_signal(&mut signaler, &f, 2)?;
    ensure!(wait_until(WAIT, || waiter.completed() >= last), "the GPU signal did not release the GPU wait");
    expect_ordered(&buf)?;
    let after = fence_interrupts(&dev)?;
    ensure!(after == interrupts, "{} native-fence interrupt(s) for a GPU-to-GPU wait", after - interrupts);
    Ok(())
}

/// QUEUE_WAIT_FENCE and QUEUE_SIGNAL_FENCE refuse a fence of another context (the library with
/// `ForeignFence`, and the module, asked directly, with EINVAL), QUEUE_SIGNAL_FENCE a native fence (EINVAL), and past 64 items held behind a queue's waits,
/// more waits and submissions are refused (EBUSY), without touching the queue: its held work
/// still runs once the fence is signaled.
fn queued_fence_operations_refuse_bad_fences_and_unbounded_holds(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let other = dev.create_context()?;
    let foreign = other.create_fence(FenceKind::Monitored, 0, 0)?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    expect_foreign_fence(q.wait_fence(&foreign, 1), "GPU wait on another context's fence")?;
    expect_foreign_fence(q.software_signal(&foreign, 1), "software signal of another context's fence")?;
    module_refuses_queued_operations_on_another_contexts_fence(path)?;
    let native = ctx.create_fence(FenceKind::Default, 0, 0)?;
    expect_errno(q.software_signal(&native, 1), libc::EINVAL, "software signal of a native fence")?;
    for value in 1..=63 {
        q.wait_fence(&f, value)?;
    }
    let last = write32(&mut q, buf.va_at(0)?, 0x64)?;
    expect_errno(q.wait_fence(&f, 64), libc::EBUSY, "a 65th held item")?;
    f.signal(63)?;
    ensure!(wait_until(WAIT, || q.completed() >= last), "the held work did not run after the signal");
    expect_u32(&buf, 0, 0x64, "the held write")
}

/// The module's own check behind the library's: on a file of the test's own, QUEUE_WAIT_FENCE
/// and QUEUE_SIGNAL_FENCE on a kernel-mode queue naming a monitored fence of the file's other
/// context fail with EINVAL, and that fence does not move.
fn module_refuses_queued_operations_on_another_contexts_fence(path: &Path) -> TestResult {
    let raw = RawDev::open(path)?;
    let (mine, theirs) = (raw.create_context().map_err(errno_name)?, raw.create_context().map_err(errno_name)?);
    let queue = raw.create_queue(mine, None, 64).map_err(errno_name)?.handle;
    let fence = uapi::CreateFence { context: theirs, kind: uapi::FENCE_KIND_MONITORED, ..Default::default() };
    let fence = raw.create_fence(fence).map_err(errno_name)?.handle;
    for (wait, what) in [(true, "QUEUE_WAIT_FENCE"), (false, "QUEUE_SIGNAL_FENCE")] {
        match raw.queue_fence_op(wait, queue, fence, 1) {
            Err(libc::EINVAL) => {}
            other => return Err(format!("{what} on another context's fence: {other:?}, expected EINVAL").into()),
        }
    }
    match raw.fence_op(true, fence, 1, 0) {
        Err(libc::ETIMEDOUT) => Ok(()),
        other => Err(format!("the other context's fence moved (a zero-timeout wait for 1: {other:?})").into()),
    }
}

/// A monitored fence at `initial` on a device in the 32-bit mode (checked).
fn fence32(ctx: &belfry_umd::Context, initial: u64) -> Result<Fence, crate::Error> {
    ensure!(ctx.caps().bits().no_64bit_atomics(), "the device does not report no_64bit_atomics");
    Ok(ctx.create_fence(FenceKind::Monitored, 0, initial)?)
}

/// proves: FEN-07, CAP-10 — 32-bit mode, selected by the device's no-64-bit-atomics
/// capability, CPU signal and CPU wait across 0xFFFF_FFFF → 0: a wait for 5 made at
/// 0xFFFF_FFF0 (which a 64-bit comparison would find satisfied) sleeps through signals of
/// 0xFFFF_FFFF and 2 and returns at the signal of 5; the value reads 5.
fn monitored_cpu_signal_and_wait_wrap_across_the_32_bit_boundary(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let f = fence32(&ctx, 0xffff_fff0)?;
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| f.wait(5, WAIT));
        std::thread::sleep(Duration::from_millis(200));
        ensure!(!waiter.is_finished(), "the wait for 5 returned at 0xFFFF_FFF0");
        for v in [0xffff_ffff, 2] {
            f.signal(v)?;
            std::thread::sleep(Duration::from_millis(100));
            ensure!(!waiter.is_finished(), "the wait for 5 returned at {v:#x}");
        }
        f.signal(5)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    ensure!(f.value() == Some(5), "value {:?} after the wrap", f.value());
    f.wait(0xffff_fff8, Duration::ZERO)?;
    Ok(())
}

/// proves: FEN-07 — 32-bit mode, GPU signal and GPU wait across the boundary: work a
/// kernel-mode queue submitted behind a GPU wait for 3, made at 0xFFFF_FFFE, stays held
/// through another queue's GPU signal of 0xFFFF_FFFF and runs, in order, after its GPU signal
/// of 3 (a 32-bit store), which also wakes a CPU wait for 3.
fn monitored_gpu_signal_and_wait_wrap_across_the_32_bit_boundary(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let f = fence32(&ctx, 0xffff_fffe)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut waiter = kernel_queue(&ctx)?;
    let mut signaler = kernel_queue(&ctx)?;
    waiter.wait_fence(&f, 3)?;
    let last = ordered_pair(&mut waiter, &buf)?;
    std::thread::scope(|s| -> TestResult {
        let cpu = s.spawn(|| f.wait(3, WAIT));
        let one = gpu_monitored_signal(&mut signaler, &f, 0xffff_ffff)?;
        ensure!(wait_until(WAIT, || signaler.completed() >= one), "the GPU signal of 0xFFFF_FFFF did not run");
        expect_held(&waiter, last - 1, "work behind a GPU wait for 3 at 0xFFFF_FFFF")?;
        ensure!(!cpu.is_finished(), "the CPU wait for 3 returned at 0xFFFF_FFFF");
        gpu_monitored_signal(&mut signaler, &f, 3)?;
        cpu.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    ensure!(wait_until(WAIT, || waiter.completed() >= last), "the GPU signal of 3 did not release the held work");
    expect_ordered(&buf)?;
    ensure!(f.value() == Some(3), "value {:?} after the GPU wrap", f.value());
    Ok(())
}

/// proves: FEN-08 — 32-bit mode: signal values not at or ahead of the last signaled value by
/// at most UINT_MAX/2, wait values neither reached nor within that window, and values above
/// 0xFFFF_FFFF are refused with ERANGE (our documented report), leaving the value as it was;
/// the window's edge is accepted.
fn monitored_values_outside_the_32_bit_window_are_refused(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    let f = fence32(&ctx, 10)?;
    let mut q = kernel_queue(&ctx)?;
    let far = 10 + 0x8000_0000;
    expect_errno(f.signal(far), libc::ERANGE, "signal UINT_MAX/2 + 1 ahead")?;
    expect_errno(f.signal(9), libc::ERANGE, "signal behind the last signaled value")?;
    expect_errno(f.signal(1 << 32), libc::ERANGE, "signal above 0xFFFF_FFFF")?;
    expect_errno(f.wait(far, Duration::ZERO), libc::ERANGE, "CPU wait UINT_MAX/2 + 1 ahead")?;
    expect_errno(q.wait_fence(&f, far), libc::ERANGE, "GPU wait UINT_MAX/2 + 1 ahead")?;
    expect_errno(q.wait_fence(&f, 1 << 32), libc::ERANGE, "GPU wait above 0xFFFF_FFFF")?;
    expect_errno(ctx.create_fence(FenceKind::Monitored, 0, 1 << 32), libc::ERANGE, "initial value above 0xFFFF_FFFF")?;
    ensure!(f.value() == Some(10), "value {:?} after refused signals", f.value());
    f.wait(3, Duration::ZERO)?;
    f.signal(10 + 0x7fff_ffff)?;
    ensure!(f.value() == Some(10 + 0x7fff_ffff), "value {:?} at the window's edge", f.value());
    Ok(())
}

/// How long the value must have been in place when a wait ended by timing out, for that
/// timeout to show the wait slept through it: a module polling CurrentValue at any period
/// under it would have returned.
const IN_PLACE: Duration = Duration::from_millis(500);

/// proves: FEN-17 — with the device's fence-signaled interrupts suppressed, a blocking
/// `WAIT_FENCE` (timeout 1.5 s) for a value the GPU wrote after the wait began, and a
/// `WAIT_PROGRESS` for a completion after it began, each time out although the value had been
/// in place (read through the read-only mapping) for at least half a second: the module sleeps until
/// an interrupt releases the wait. A module that polled CurrentValue, or that returned before
/// the value was reached, would return.
fn cpu_waits_sleep_until_an_interrupt_and_time_out_without_one(path: &Path) -> TestResult {
    for (what, ended) in [
        ("WAIT_FENCE", wait_fence_for_a_later_gpu_signal(path)?),
        ("WAIT_PROGRESS", wait_progress_for_a_later_completion(path)?),
    ] {
        ensure!(ended.result.is_err(), "{what} returned with no fence interrupt: the module polls");
        let timed_out = match &ended.result {
            Err(belfry_umd::Error::Timeout { .. }) => true,
            Err(e) => e.errno() == Some(libc::ETIMEDOUT),
            Ok(()) => false,
        };
        ensure!(timed_out, "{what} failed otherwise than by timing out: {:?}", ended.result);
        ensure!(
            ended.in_place >= IN_PLACE,
            "premise: {what} timed out only {:?} after the value was in place",
            ended.in_place
        );
    }
    Ok(())
}

/// proves: FEN-02, FEN-16 — through the D3DKMT API (`belfry-d3dkmt-rules fen-02`): on monitored
/// fences made by `D3DKMTCreateSynchronizationObject2`, a CPU signal is visible through the CPU
/// mapping at once and releases a CPU wait; a GPU wait of one context holds the GPU signal
/// behind it until the CPU signals, and that GPU signal releases a CPU wait; a GPU wait of
/// another context is released by the first context's GPU signal.
fn d3dkmt_monitored_fence_pairs_every_signal_with_every_wait(path: &Path) -> TestResult {
    crate::support::d3dkmt::rule_check_passes(
        path,
        "fen-02",
        &["ok cpu-signal-cpu-wait", "ok cpu-signal-gpu-wait", "ok gpu-signal-cpu-wait", "ok gpu-signal-gpu-wait"],
    )
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(cpu_wait_wakes_on_a_gpu_signal, Default, ["FEN-02", "FEN-17", "NF-11"]),
        test_entry!(current_value_mapping_is_read_only, Default, ["FEN-03", "NF-03"]),
        test_entry!(cpu_signal_releases_a_gpu_wait, Default, ["FEN-16", "FEN-02"]),
        test_entry!(d3dkmt_monitored_fence_pairs_every_signal_with_every_wait, Default, ["FEN-02", "FEN-16"]),
        test_entry!(
            monitored_fence_cpu_wait_wakes_on_a_gpu_signal,
            Default,
            ["FEN-01", "FEN-02", "FEN-11", "FEN-12", "FEN-17"]
        ),
        test_entry!(monitored_fence_cpu_signal_is_visible_at_once_and_releases_a_waiter, Default, ["FEN-16", "FEN-19"]),
        test_entry!(monitored_fence_mapping_is_read_only, Default, ["FEN-03"]),
        test_entry!(eventfd_waits_refuse_bad_arguments_and_are_bounded, Default, []),
        test_entry!(pollable_wait_becomes_ready_on_a_gpu_signal, Default, ["FEN-18", "MV-07"]),
        test_entry!(pollable_wait_on_a_monitored_fence_and_its_drop_on_destroy, Default, ["FEN-18"]),
        test_entry!(pollable_wait_is_released_by_a_per_queue_record, PerQueueInterrupts, ["FEN-18"]),
        test_entry!(monitored_gpu_wait_holds_later_work_until_a_cpu_signal, Default, ["FEN-13", "FEN-14", "FEN-15"]),
        test_entry!(
            monitored_gpu_wait_is_released_by_another_queue_s_gpu_signal,
            Default,
            ["FEN-02", "FEN-12", "FEN-15"]
        ),
        test_entry!(monitored_gpu_signal_is_a_packet_with_no_kernel_call_of_its_own, Default, ["FEN-09"]),
        test_entry!(software_signal_packet_writes_the_fence_from_the_cpu_when_it_runs, Default, ["FEN-10"]),
        test_entry!(native_gpu_wait_of_a_kernel_mode_queue_waits_on_the_gpu, Default, []),
        test_entry!(queued_fence_operations_refuse_bad_fences_and_unbounded_holds, Default, []),
        test_entry!(
            monitored_cpu_signal_and_wait_wrap_across_the_32_bit_boundary,
            No64BitAtomics,
            ["FEN-07", "CAP-10"]
        ),
        test_entry!(monitored_gpu_signal_and_wait_wrap_across_the_32_bit_boundary, No64BitAtomics, ["FEN-07"]),
        test_entry!(monitored_values_outside_the_32_bit_window_are_refused, No64BitAtomics, ["FEN-08"]),
        test_entry!(cpu_waits_sleep_until_an_interrupt_and_time_out_without_one, NoFenceInterrupts, ["FEN-17"]),
    ]
}

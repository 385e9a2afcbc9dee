//! Monitored (WDDM 2.0) fences as GPU waits: the work a kernel-mode queue submits after a GPU
//! wait is held by the module until the fence is signaled (by the CPU or by another queue's
//! GPU signal), user-mode queues refuse them, and the 32-bit No64BitAtomics mode wraps.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use belfry_abi::uapi::DoorbellStatus;
use belfry_umd::{Allocation, CommandBuffer, Device, Fence, FenceKind, Queue};

use crate::tests::{
    expect_held, expect_u32, fence_interrupts, gpu_monitored_signal, gpu_signal, kernel_queue, monitored_interrupts,
    user_queue, write32, WAIT,
};
use crate::{ensure, expect_errno, proc, wait_until, Test, TestResult};

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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
/// wait the GPU resolves alone.
fn monitored_gpu_wait_is_released_by_another_queue_s_gpu_signal(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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

/// proves: NF-21 — a user-mode-submission queue cannot use a monitored fence: its GPU wait is
/// refused with EPERM (and the library has no other way to express it) and its GPU signal
/// (MONITORED_FENCE_SIGNAL) faults its context without writing the fence, while a native
/// fence works on that queue (a FENCE_WAIT in its own stream, holding its later work until the
/// signal) and the same monitored fence works on a kernel-mode queue.
fn user_mode_queues_refuse_monitored_fence_waits(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let monitored = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let native = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut user = user_queue(&ctx)?;
    expect_errno(user.wait_fence(&monitored, 1), libc::EPERM, "GPU wait on a monitored fence, user-mode queue")?;
    expect_errno(user.software_signal(&monitored, 1), libc::EPERM, "software signal on a user-mode queue")?;
    user.wait_fence(&native, 1)?;
    let last = write32(&mut user, buf.va_at(0)?, 0x21)?;
    expect_held(&user, last, "user-mode work behind a native GPU wait")?;
    native.signal(1)?;
    ensure!(wait_until(WAIT, || user.completed() >= last), "the native GPU wait was not released");
    let mut kernel = kernel_queue(&ctx)?;
    kernel.wait_fence(&monitored, 1)?;
    let held = write32(&mut kernel, buf.va_at(4)?, 0x22)?;
    monitored.signal(1)?;
    ensure!(wait_until(WAIT, || kernel.completed() >= held), "the kernel-mode queue's monitored wait was not released");
    expect_u32(&buf, 4, 0x22, "the kernel-mode queue's work")?;
    let other = dev.create_context()?;
    let f = other.create_fence(FenceKind::Monitored, 0, 0)?;
    let mut q = user_queue(&other)?;
    q.connect_doorbell()?;
    let mut cb = CommandBuffer::new();
    cb.monitored_signal(f.gpu_va(), 5)?;
    match q.submit(&cb) {
        // The fault can be processed before the library reads the doorbell status (then it
        // reports the context lost, or the kick fails with EIO).
        Ok(_) | Err(belfry_umd::Error::ContextLost { .. }) => {}
        Err(e) if e.errno() == Some(libc::EIO) => {}
        Err(e) => return Err(e.into()),
    }
    let aborted = wait_until(WAIT, || matches!(q.doorbell_status(), Ok(DoorbellStatus::DisconnectedAbort)));
    ensure!(aborted, "a user-mode MONITORED_FENCE_SIGNAL left the doorbell {:?}", q.doorbell_status());
    ensure!(f.value() == Some(0), "a user-mode queue's GPU signal wrote the monitored fence: {:?}", f.value());
    Ok(())
}

/// QUEUE_WAIT_FENCE and QUEUE_SIGNAL_FENCE refuse a fence of another context (EINVAL),
/// QUEUE_SIGNAL_FENCE a native fence (EINVAL), and past 64 items held behind a queue's waits,
/// more waits and submissions are refused (EBUSY), without touching the queue: its held work
/// still runs once the fence is signaled.
fn queued_fence_operations_refuse_bad_fences_and_unbounded_holds(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let other = dev.create_context()?;
    let foreign = other.create_fence(FenceKind::Monitored, 0, 0)?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    expect_errno(q.wait_fence(&foreign, 1), libc::EINVAL, "GPU wait on another context's fence")?;
    expect_errno(q.software_signal(&foreign, 1), libc::EINVAL, "software signal of another context's fence")?;
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

/// A kernel-mode queue with four submissions held behind a GPU wait nobody will signal.
fn held_work(path: &Path) -> Result<(Queue, Fence, Allocation, Device), crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    q.wait_fence(&f, 1)?;
    for n in 0..4 {
        write32(&mut q, buf.va_at(n * 4)?, 1)?;
    }
    Ok((q, f, buf, dev))
}

/// Held work does not leak or hang: a queue destroyed with work held behind a wait nobody will
/// signal, and a process exiting in that state (its file's release), leave the device's
/// object counts as they were.
fn queues_with_held_work_are_destroyed_and_closed_cleanly(path: &Path) -> TestResult {
    let observer = Device::open(path)?;
    let counts = |s: belfry_umd::abi::uapi::DebugStats| (s.contexts, s.queues, s.allocations, s.gpu_pages);
    let base = counts(observer.debug_stats()?);
    let (q, f, buf, dev) = held_work(path)?;
    drop(q);
    ensure!(f.value() == Some(0) && buf.read_u32(0)? == 0, "held work ran");
    drop((f, buf, dev));
    let child = proc::spawn("process exiting with held work", move || {
        // Exits with the held work in place: the file's release cleans up.
        std::mem::forget(held_work(path)?);
        Ok(())
    })?;
    child.join()?;
    let mut now = base;
    let back = wait_until(WAIT, || {
        now = observer.debug_stats().map(counts).unwrap_or(now);
        now == base
    });
    ensure!(back, "counts (contexts, queues, allocations, GPU pages) {now:?}, before {base:?}");
    Ok(())
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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

/// A device without native fences refuses user-mode queues (EINVAL): they could not
/// synchronize (their progress fence is a native fence, and monitored fences are not theirs),
/// while kernel-mode queues run there.
fn user_mode_queues_are_refused_without_native_fences(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    ensure!(!ctx.caps().bits().native_fence(), "the device offers native fences");
    expect_errno(user_queue(&ctx), libc::EINVAL, "a user-mode queue")?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let v = write32(&mut q, buf.va_at(0)?, 0x77)?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0x77, "the kernel-mode queue's work")
}

/// Every test of this file, in order.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(monitored_gpu_wait_holds_later_work_until_a_cpu_signal, Default, ["FEN-13", "FEN-14", "FEN-15"]),
        test_entry!(
            monitored_gpu_wait_is_released_by_another_queue_s_gpu_signal,
            Default,
            ["FEN-02", "FEN-12", "FEN-15"]
        ),
        test_entry!(monitored_gpu_signal_is_a_packet_with_no_kernel_call_of_its_own, Default, ["FEN-09"]),
        test_entry!(software_signal_packet_writes_the_fence_from_the_cpu_when_it_runs, Default, ["FEN-10"]),
        test_entry!(native_gpu_wait_of_a_kernel_mode_queue_waits_on_the_gpu, Default, []),
        test_entry!(user_mode_queues_refuse_monitored_fence_waits, Default, ["NF-21"]),
        test_entry!(queues_with_held_work_are_destroyed_and_closed_cleanly, Default, []),
        test_entry!(queued_fence_operations_refuse_bad_fences_and_unbounded_holds, Default, []),
        test_entry!(
            monitored_cpu_signal_and_wait_wrap_across_the_32_bit_boundary,
            No64BitAtomics,
            ["FEN-07", "CAP-10"]
        ),
        test_entry!(monitored_gpu_signal_and_wait_wrap_across_the_32_bit_boundary, No64BitAtomics, ["FEN-07"]),
        test_entry!(monitored_values_outside_the_32_bit_window_are_refused, No64BitAtomics, ["FEN-08"]),
        test_entry!(user_mode_queues_are_refused_without_native_fences, No64BitAtomics, []),
    ]
}

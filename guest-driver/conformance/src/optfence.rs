//! Tests of the optimized DEFAULT fence (NF-13): on a device offering
//! `CAPS.optimized_default_fence` (the default suite device), the module keeps the
//! MonitoredValues of non-shareable DEFAULT fences in VRAM, and everything the library sees stays
//! as for DEFAULT. Each doc comment says what it proves in the form `ci/rules` parses; the
//! registry at the end repeats the ids.

use std::path::Path;
use std::time::Duration;

use belfry_abi::uapi;
use belfry_umd::{CommandBuffer, Device, Fence, FenceKind, Queue};

use crate::tests::{expect_pending, expect_u32, fence_interrupts, gpu_signal, kernel_queue, user_queue, write32, WAIT};
use crate::{ensure, wait_until, Test, TestResult};

/// Pages mapped in the system (CMP) address space.
fn system_pages(dev: &Device) -> Result<u64, crate::Error> {
    Ok(dev.debug_stats()?.system_gpu_pages)
}

/// Fails unless `FENCE_INFO` of `f` places CurrentValue and MonitoredValue in `segments`
/// (`FENCE_SEGMENT_*`) with MonitoredValue `monitored`.
fn expect_placed(f: &Fence, segments: (u32, u32), monitored: u64, what: &str) -> TestResult {
    let i = f.info()?;
    ensure!(
        (i.current_segment, i.monitored_segment) == segments && i.monitored_value == monitored,
        "{what}: (CurrentValue, MonitoredValue) segments ({}, {}), MonitoredValue {:#x}; expected {segments:?}, {monitored:#x}",
        i.current_segment,
        i.monitored_segment,
        i.monitored_value
    );
    Ok(())
}

/// Where an optimized DEFAULT fence keeps its values.
const OPTIMIZED: (u32, u32) = (uapi::FENCE_SEGMENT_SYSTEM, uapi::FENCE_SEGMENT_VRAM);
/// Where a DEFAULT fence keeps its values.
const SYSTEM: (u32, u32) = (uapi::FENCE_SEGMENT_SYSTEM, uapi::FENCE_SEGMENT_SYSTEM);

/// Submits a GPU signal of `value` on `f` and polls until it ran (a `WAIT_PROGRESS` would arm
/// the progress fence's own interrupt).
fn signal_polled(q: &mut Queue, f: &Fence, value: u64) -> TestResult {
    let v = gpu_signal(q, f, value)?;
    ensure!(wait_until(WAIT, || q.completed() >= v), "the GPU signal of {value} did not complete");
    Ok(())
}

/// Waits (polling `FENCE_INFO`) until `f` has `pending` CPU waits and MonitoredValue `monitored`.
fn expect_monitored(f: &Fence, pending: u32, monitored: u64) -> TestResult {
    let ok = wait_until(WAIT, || f.info().is_ok_and(|i| i.pending_waits == pending && i.monitored_value == monitored));
    let i = f.info()?;
    ensure!(
        ok,
        "{} pending wait(s), MonitoredValue {:#x}; expected {pending}, {monitored:#x}",
        i.pending_waits,
        i.monitored_value
    );
    Ok(())
}

/// proves: NF-13, MV-02 — on the default device (CAPS.optimized_default_fence) the first
/// non-shareable DEFAULT fence of a context maps one system page (CurrentValue; a DEFAULT fence
/// maps two) and the device was given its MonitoredValue in VRAM (FENCE_INFO: CurrentValue in
/// system memory, MonitoredValue in VRAM, UINT64_MAX); a fence packed beside it maps nothing more
/// and is placed alike, while a shareable fence maps two system pages and keeps both values in
/// system memory. GPU signals of the optimized fences with nobody waiting raise no interrupt:
/// the device read UINT64_MAX in VRAM, though the page held 1 at slot 0 (an INTRA_GPU fence
/// signaled to 1 and destroyed just before; VRAM fence pages are handed out lowest first) and 0
/// elsewhere. Destroying the context unmaps every page.
fn optimized_default_fence_keeps_monitored_value_in_vram_unless_shareable(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    ensure!(dev.caps().bits().optimized_default_fence(), "the device does not offer CAPS.optimized_default_fence");
    let base = system_pages(&dev)?;
    let ctx = dev.create_context()?;
    let mut q = user_queue(&ctx)?;
    let scratch = ctx.alloc(4096, 0)?;
    let w = write32(&mut q, scratch.va_at(0)?, 1)?;
    ensure!(wait_until(WAIT, || q.completed() >= w), "warm-up work did not run");
    // Leave 1 in the lowest free VRAM fence page, where the first fence's MonitoredValue goes.
    let intra = ctx.create_fence(FenceKind::IntraGpu, 0, 0)?;
    signal_polled(&mut q, &intra, 1)?;
    drop(intra);
    let with_queue = system_pages(&dev)?;
    let first = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let one = system_pages(&dev)?;
    ensure!(one == with_queue + 1, "first fence page: {with_queue} -> {one} system pages, expected +1");
    expect_placed(&first, OPTIMIZED, u64::MAX, "the first fence")?;
    let packed = ctx.create_fence(FenceKind::Default, 0, 7)?;
    let two = system_pages(&dev)?;
    ensure!(two == one, "a packed fence: {one} -> {two} system pages, expected +0");
    ensure!(packed.page_offset() != first.page_offset(), "the second fence was not packed beside the first");
    expect_placed(&packed, OPTIMIZED, u64::MAX, "the packed fence")?;
    let shared = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 0)?;
    let three = system_pages(&dev)?;
    ensure!(three == two + 2, "a shareable fence: {two} -> {three} system pages, expected +2");
    expect_placed(&shared, SYSTEM, u64::MAX, "the shareable fence")?;

    let before = fence_interrupts(&dev)?;
    signal_polled(&mut q, &first, 5)?;
    signal_polled(&mut q, &packed, 8)?;
    let after = fence_interrupts(&dev)?;
    ensure!(after == before, "signals of optimized fences nobody waits on raised {} interrupt(s)", after - before);
    ensure!(first.value() == Some(5) && packed.value() == Some(8), "the signals did not land in CurrentValue");
    drop((first, packed, shared, q, scratch));
    drop(ctx);
    let end = system_pages(&dev)?;
    ensure!(end == base, "{end} system pages after the context went, {base} before it");
    Ok(())
}

/// proves: NF-13, FEN-02, MV-01, MV-06, MV-07 — on an optimized DEFAULT fence (MonitoredValue in
/// VRAM) every pairing works as on DEFAULT: a CPU wait for 3 sets MonitoredValue 2 and a CPU
/// signal ends it; a CPU wait for 10 sets 9, a GPU signal of 5 raises no interrupt and leaves it
/// asleep (the device compared against 9 in VRAM), one of 10 interrupts and wakes it; a CPU signal
/// releases a GPU wait on a kernel-mode queue; a GPU signal releases a GPU wait on another queue
/// with no interrupt; a pollable wait for 20 sets 19 and a GPU signal makes it ready. After each
/// wait MonitoredValue is back at UINT64_MAX.
fn optimized_default_fence_serves_every_cpu_and_gpu_pairing(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    expect_placed(&f, OPTIMIZED, u64::MAX, "the fence")?;
    let buf = ctx.alloc(4096, 0)?;
    let mut signaler = user_queue(&ctx)?;
    let mut waiter = user_queue(&ctx)?;
    let mut kq = kernel_queue(&ctx)?;
    let s0 = write32(&mut signaler, buf.va_at(16)?, 1)?;
    let w0 = write32(&mut waiter, buf.va_at(20)?, 1)?;
    let k0 = write32(&mut kq, buf.va_at(24)?, 1)?;
    let warm = wait_until(WAIT, || signaler.completed() >= s0 && waiter.completed() >= w0 && kq.completed() >= k0);
    ensure!(warm, "warm-up work did not run");

    // CPU signal / CPU wait.
    std::thread::scope(|s| -> TestResult {
        let w = s.spawn(|| f.wait(3, WAIT));
        expect_monitored(&f, 1, 2)?;
        f.signal(3)?;
        w.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    expect_monitored(&f, 0, u64::MAX)?;

    // GPU signal / CPU wait: the device compares against the MonitoredValue in VRAM.
    std::thread::scope(|s| -> TestResult {
        let w = s.spawn(|| f.wait(10, WAIT));
        expect_monitored(&f, 1, 9)?;
        let before = fence_interrupts(&dev)?;
        signal_polled(&mut signaler, &f, 5)?;
        std::thread::sleep(Duration::from_millis(100));
        let low = fence_interrupts(&dev)?;
        ensure!(low == before, "a signal of 5 under MonitoredValue 9 raised {} interrupt(s)", low - before);
        ensure!(!w.is_finished(), "the wait for 10 ended at 5");
        signal_polled(&mut signaler, &f, 10)?;
        w.join().map_err(|_| "waiter panicked")??;
        ensure!(fence_interrupts(&dev)? > low, "the signal of 10 raised no interrupt");
        Ok(())
    })?;
    expect_monitored(&f, 0, u64::MAX)?;

    // CPU signal / GPU wait (a kernel-mode queue's QUEUE_WAIT_FENCE).
    kq.wait_fence(&f, 12)?;
    let done = write32(&mut kq, buf.va_at(0)?, 0xC1)?;
    std::thread::sleep(Duration::from_millis(100));
    ensure!(buf.read_u32(0)? == 0, "the work behind the GPU wait for 12 ran before the signal");
    f.signal(12)?;
    ensure!(wait_until(WAIT, || kq.completed() >= done), "the CPU signal did not release the GPU wait");
    expect_u32(&buf, 0, 0xC1, "the write behind the GPU wait for 12")?;

    // GPU signal / GPU wait: no CPU involved, no interrupt.
    let before = fence_interrupts(&dev)?;
    let mut cb = CommandBuffer::new();
    cb.fence_wait(f.gpu_va(), 14, None)?.write32(buf.va_at(4)?, 0xC2)?;
    let done = waiter.submit(&cb)?;
    std::thread::sleep(Duration::from_millis(100));
    ensure!(buf.read_u32(4)? == 0, "the work behind the GPU wait for 14 ran before the signal");
    signal_polled(&mut signaler, &f, 14)?;
    ensure!(wait_until(WAIT, || waiter.completed() >= done), "the GPU signal did not release the GPU wait");
    expect_u32(&buf, 4, 0xC2, "the write behind the GPU wait for 14")?;
    let irqs = fence_interrupts(&dev)? - before;
    ensure!(irqs == 0, "{irqs} native-fence interrupt(s) during a GPU-only signal/wait");

    // GPU signal / pollable CPU wait.
    let ev = f.event(20)?;
    expect_monitored(&f, 1, 19)?;
    ensure!(!ev.is_ready()?, "the pollable wait for 20 is ready at 14");
    signal_polled(&mut signaler, &f, 20)?;
    ensure!(ev.wait(WAIT)?, "the pollable wait for 20 not ready after the GPU signal");
    expect_pending(&f, 0)?;
    expect_monitored(&f, 0, u64::MAX)?;
    ensure!(f.value() == Some(20), "CurrentValue {:?}, expected 20", f.value());
    Ok(())
}

/// proves: NF-13 — the module decides the form: with every VRAM fence page taken (INTRA_GPU
/// fences until `CREATE_FENCE` refuses one), a new context's first DEFAULT fence falls back to
/// the DEFAULT form (both values in system memory, two system pages) and a CPU wait on it ends on
/// a GPU signal; once the VRAM pages are free again, the next context's fence is optimized again.
fn optimized_form_falls_back_to_system_memory_without_a_free_vram_fence_page(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let holder = dev.create_context()?;
    let mut intra = Vec::new();
    while intra.len() < 1024 {
        match holder.create_fence(FenceKind::IntraGpu, 0, 0) {
            Ok(f) => intra.push(f),
            Err(_) => break,
        }
    }
    ensure!(!intra.is_empty() && intra.len() < 1024, "{} INTRA_GPU fences created", intra.len());
    let ctx = dev.create_context()?;
    let mut q = user_queue(&ctx)?;
    let before = system_pages(&dev)?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let after = system_pages(&dev)?;
    ensure!(after == before + 2, "the fallback fence page: {before} -> {after} system pages, expected +2");
    expect_placed(&f, SYSTEM, u64::MAX, "the fence created with no VRAM fence page free")?;
    std::thread::scope(|s| -> TestResult {
        let w = s.spawn(|| f.wait(4, WAIT));
        expect_monitored(&f, 1, 3)?;
        signal_polled(&mut q, &f, 4)?;
        w.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    drop(intra);
    let again = dev.create_context()?;
    let g = again.create_fence(FenceKind::Default, 0, 0)?;
    expect_placed(&g, OPTIMIZED, u64::MAX, "a fence created once VRAM fence pages were free again")?;
    Ok(())
}

/// The optimized-fence tests.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            optimized_default_fence_keeps_monitored_value_in_vram_unless_shareable,
            Default,
            ["NF-13", "MV-02"]
        ),
        test_entry!(
            optimized_default_fence_serves_every_cpu_and_gpu_pairing,
            Default,
            ["NF-13", "FEN-02", "MV-01", "MV-06", "MV-07"]
        ),
        test_entry!(optimized_form_falls_back_to_system_memory_without_a_free_vram_fence_page, Default, ["NF-13"]),
    ]
}

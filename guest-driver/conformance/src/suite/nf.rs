//! NF-xx: Native fence storage and types (RULES.md § Native fence storage and types).

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_abi::uapi_debug;
use belfry_umd::{Allocation, CommandBuffer, Context, Device, Fence, FenceKind, Queue};

use crate::harness::proc::{self, Signal};
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fences::{
    expect_counts, expect_monitored, expect_placed, fence_interrupts, gpu_signal, shared_counts, signal_polled,
    system_pages, OPTIMIZED,
};
use crate::support::fixture::open_context;
use crate::support::other_user::{become_other_user, OpenNode};
use crate::support::param::ModuleParam;
use crate::support::work::{expect_held, expect_u32, kernel_queue, user_queue, write32};
use crate::support::{expect_errno, wait_until, WAIT};
use crate::{Test, TestResult};

/// proves: NF-01, MV-08, FEN-02 — a GPU wait on one queue is released by a GPU signal from
/// another queue: the work behind the wait does not run before the signal and runs after it,
/// with no native-fence interrupt counted and no ioctl made meanwhile.
fn gpu_wait_released_by_another_queue_without_interrupts(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
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

/// proves: NF-15, NF-16, NF-17 — an INTRA_GPU fence has no CPU mapping; CPU wait and CPU signal
/// on it are refused with EPERM, a shareable one with EINVAL; a GPU wait on it is released by a
/// GPU signal from another queue.
fn intra_gpu_fence_refuses_the_cpu_and_works_gpu_to_gpu(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
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

/// proves: NF-20 — one call, DESTROY_FENCE, destroys a fence of every kind: an imported shared
/// fence (the last handle: its global object goes too), monitored, INTRA_GPU and DEFAULT; each
/// destroy unregisters it from the device.
fn one_destroy_call_destroys_every_kind_of_fence(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let base = shared_counts(&dev)?;
    let ctx = dev.create_context()?;
    let kinds = [FenceKind::Default, FenceKind::IntraGpu, FenceKind::Monitored];
    let mut fences: Vec<Fence> = kinds.iter().map(|&k| ctx.create_fence(k, 0, 0)).collect::<Result<_, _>>()?;
    let shared = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 0)?;
    let fd = shared.export()?;
    fences.push(ctx.import_fence(fd.as_fd())?);
    drop(fd);
    drop(shared);
    expect_counts(&dev, base, (1, 1, 4), "four fences")?;
    let steps =
        [("imported shared", (0, 0, 3)), ("monitored", (0, 0, 2)), ("INTRA_GPU", (0, 0, 1)), ("DEFAULT", (0, 0, 0))];
    for (what, want) in steps {
        drop(fences.pop());
        expect_counts(&dev, base, want, &format!("after destroying the {what} fence"))?;
    }
    Ok(())
}

/// proves: NF-10 — CREATE_FENCE with a type that is not DEFAULT, INTRA_GPU or monitored, with
/// unknown flags or non-zero padding fails with EINVAL and registers nothing; the type chosen
/// fixes the storage and the operations: DEFAULT gets a CPU mapping and takes a CPU signal,
/// INTRA_GPU has no CPU mapping and refuses it.
fn create_fence_refuses_an_unknown_type_and_the_type_fixes_the_storage(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let base = shared_counts(&dev)?;
    let raw = RawDev::open(path)?;
    let context = raw.create_context().map_err(errno_name)?;
    let create =
        |kind, flags, pad| raw.create_fence(uapi::CreateFence { context, kind, flags, pad, ..Default::default() });
    for kind in [0, 4, 0x100, u32::MAX] {
        let e = create(kind, 0, 0).err();
        ensure!(e == Some(libc::EINVAL), "kind {kind:#x}: {:?}, expected EINVAL", e.map(errno_name));
    }
    let e = create(uapi::FENCE_KIND_DEFAULT, 1 << 7, 0).err();
    ensure!(e == Some(libc::EINVAL), "unknown flag: {:?}, expected EINVAL", e.map(errno_name));
    let e = create(uapi::FENCE_KIND_DEFAULT, 0, 1).err();
    ensure!(e == Some(libc::EINVAL), "non-zero padding: {:?}, expected EINVAL", e.map(errno_name));
    expect_counts(&dev, base, (0, 0, 0), "after the refusals")?;
    let default = create(uapi::FENCE_KIND_DEFAULT, 0, 0).map_err(errno_name)?;
    let intra = create(uapi::FENCE_KIND_INTRA_GPU, 0, 0).map_err(errno_name)?;
    expect_counts(&dev, base, (0, 0, 2), "after two valid creates")?;
    ensure!(
        default.mmap_offset != 0 && intra.mmap_offset == 0,
        "CPU mappings: DEFAULT {:#x}, INTRA_GPU {:#x}",
        default.mmap_offset,
        intra.mmap_offset
    );
    raw.fence_op(false, default.handle, 1, 0).map_err(errno_name)?;
    let e = raw.fence_op(false, intra.handle, 1, 0).err();
    ensure!(e == Some(libc::EPERM), "CPU signal of INTRA_GPU: {:?}, expected EPERM", e.map(errno_name));
    Ok(())
}

/// proves: NF-02, NF-06, NF-05 — with CurrentValue 0x5EED_0000_0000_1000 and a CPU wait for
/// 0x42 more, the fence holds two different 64-bit values at once (CurrentValue in the mapping
/// and FENCE_INFO, MonitoredValue = wait − 1); a CPU signal moves CurrentValue and leaves
/// MonitoredValue alone. Of every mmap offset up to well past the file's last one, only the
/// CurrentValue page maps, and no page that maps holds MonitoredValue.
fn monitored_value_is_a_separate_64_bit_location_no_process_can_map(path: &Path) -> TestResult {
    const CV: u64 = 0x5EED_0000_0000_1000;
    let raw = RawDev::open(path)?;
    let context = raw.create_context().map_err(errno_name)?;
    let f = raw
        .create_fence(uapi::CreateFence {
            context,
            kind: uapi::FENCE_KIND_DEFAULT,
            initial_value: CV,
            ..Default::default()
        })
        .map_err(errno_name)?;
    ensure!(f.page_offset == 0, "the context's first fence at offset {}", f.page_offset);
    let info = |raw: &RawDev| raw.fence_info(f.handle).map_err(errno_name);
    std::thread::scope(|s| -> TestResult {
        // The wait outlives the mmap probe of 256+ offsets below, which takes over 10 s on the
        // debug kernel (KASAN, lockdep) under TCG; the final signal ends it.
        let waiter = s.spawn(|| raw.fence_op(true, f.handle, CV + 0x42, (WAIT * 6).as_nanos() as u64));
        // The wait is listed, then MonitoredValue is written: wait for both.
        let pending = |i: &uapi_debug::FenceInfo| i.pending_waits == 1 && i.monitored_value == CV + 0x41;
        ensure!(wait_until(WAIT, || info(&raw).is_ok_and(|i| pending(&i))), "the wait is not pending");
        let i = info(&raw)?;
        ensure!(
            i.current_value == CV && i.monitored_value == CV + 0x41,
            "CurrentValue {:#x}, MonitoredValue {:#x}",
            i.current_value,
            i.monitored_value
        );
        let mapped = raw.peek_u64(f.mmap_offset).map_err(errno_name)?;
        ensure!(mapped == CV, "the mapping reads {mapped:#x}");
        raw.fence_op(false, f.handle, CV + 0x10, 0).map_err(errno_name)?;
        let i = info(&raw)?;
        ensure!(
            i.current_value == CV + 0x10 && i.monitored_value == CV + 0x41,
            "after a signal of {:#x}: CurrentValue {:#x}, MonitoredValue {:#x}",
            CV + 0x10,
            i.current_value,
            i.monitored_value
        );
        let last = (f.mmap_offset >> 12) + 256;
        let mut maps = Vec::new();
        for page in 0..last {
            if let Ok(v) = raw.peek_u64(page << 12) {
                ensure!(v != CV + 0x41, "mmap offset {:#x} shows MonitoredValue", page << 12);
                maps.push(page << 12);
            }
        }
        ensure!(maps == [f.mmap_offset], "offsets that map: {maps:#x?}; only {:#x} should", f.mmap_offset);
        raw.fence_op(false, f.handle, CV + 0x42, 0).map_err(errno_name)?;
        waiter.join().map_err(|_| "waiter panicked")?.map_err(errno_name)?;
        Ok(())
    })
}

/// proves: NF-19 — an INTRA_GPU fence is still a kernel fence object: creating one registers one
/// more fence with the device (FENCE_DEBUG), FENCE_INFO names it by its global handle like any
/// other fence, and destroying it unregisters it.
fn intra_gpu_fence_is_a_kernel_object_debug_tools_see(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let base = shared_counts(&dev)?;
    let ctx = dev.create_context()?;
    let plain = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let f = ctx.create_fence(FenceKind::IntraGpu, 0, 0)?;
    expect_counts(&dev, base, (0, 0, 2), "a DEFAULT and an INTRA_GPU fence")?;
    let (gi, gp) = (f.info()?.global_handle, plain.info()?.global_handle);
    ensure!(gi != 0 && gi != gp, "INTRA_GPU global handle {gi:#x} (DEFAULT's {gp:#x})");
    drop(f);
    expect_counts(&dev, base, (0, 0, 1), "after destroying the INTRA_GPU fence")?;
    Ok(())
}

/// What [`current_value_is_never_seen_torn`]'s reader found.
#[derive(Debug, Default)]
struct TornCheck {
    /// Distinct values read.
    distinct: u64,
    /// The first value read that was not one the signals wrote, or that went backwards.
    bad: Option<(u64, u64)>,
}

/// The value pairs of [`current_value_is_never_seen_torn`]: `(k << 32) - 1` then `(k << 32) | 1`,
/// so every second signal carries into the high half. A read mixing two writes' halves gives a
/// value that is not of that form or that goes backwards.
fn crossing(k: u64) -> [u64; 2] {
    [(k << 32) - 1, (k << 32) | 1]
}

/// proves: NF-04 — while GPU signals (10,080 of them cross from one high half to the next) and
/// then CPU signals (32 crossings more) move CurrentValue, a thread reading the read-only
/// mapping never sees a value no signal wrote and never sees it go backwards: the two 32-bit
/// halves become visible together. (Checked against a device patched to store the halves one
/// after the other: it failed in each of 7 runs of 6,000 or more crossings.)
fn current_value_is_never_seen_torn(path: &Path) -> TestResult {
    const ROUNDS: u64 = 160;
    const PAIRS: u64 = 63;
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = user_queue(&ctx)?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let check = std::thread::scope(|s| -> Result<TornCheck, crate::Error> {
        let reader = s.spawn(|| {
            let mut out = TornCheck::default();
            let mut last = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let v = f.value().unwrap_or(0);
                let low = v & 0xffff_ffff;
                if v < last || (v != 0 && low != 1 && low != 0xffff_ffff) {
                    out.bad.get_or_insert((last, v));
                }
                if v != last {
                    out.distinct += 1;
                }
                last = v;
            }
            out
        });
        let mut run = || -> TestResult {
            for round in 0..ROUNDS {
                let mut cb = CommandBuffer::new();
                for k in round * PAIRS + 1..=(round + 1) * PAIRS {
                    for v in crossing(k) {
                        cb.fence_signal(f.gpu_va(), v, None)?;
                    }
                }
                let done = q.submit(&cb)?;
                ensure!(wait_until(WAIT, || q.completed() >= done), "round {round} did not complete");
            }
            for k in ROUNDS * PAIRS + 1..=ROUNDS * PAIRS + 32 {
                for v in crossing(k) {
                    f.signal(v)?;
                }
            }
            Ok(())
        };
        let ran = run();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let check = reader.join().map_err(|_| "reader panicked")?;
        ran?;
        Ok(check)
    })?;
    if let Some((before, after)) = check.bad {
        return Err(format!("CurrentValue read {after:#x} after {before:#x}: torn or backwards").into());
    }
    let last = crossing(ROUNDS * PAIRS + 32)[1];
    ensure!(f.value() == Some(last), "CurrentValue {:?}, expected {last:#x}", f.value());
    ensure!(
        check.distinct >= 16,
        "the reader saw only {} distinct values: it did not race the signals",
        check.distinct
    );
    Ok(())
}

/// proves: NF-21 — a user-mode-submission queue cannot use a monitored fence: its GPU wait is
/// refused with EPERM (and the library has no other way to express it) and its GPU signal
/// (MONITORED_FENCE_SIGNAL) faults its context without writing the fence, while a native
/// fence works on that queue (a FENCE_WAIT in its own stream, holding its later work until the
/// signal) and the same monitored fence works on a kernel-mode queue.
fn user_mode_queues_refuse_monitored_fence_waits(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
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

/// Where a DEFAULT fence keeps its values.
const SYSTEM: (u32, u32) = (uapi::FENCE_SEGMENT_SYSTEM, uapi::FENCE_SEGMENT_SYSTEM);
/// Where an INTRA_GPU fence keeps its values before any demotion.
const VRAM: (u32, u32) = (uapi::FENCE_SEGMENT_VRAM, uapi::FENCE_SEGMENT_VRAM);

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

/// Processes [`optimized_form_falls_back_to_system_memory_without_a_free_vram_fence_page`]
/// starts to take every VRAM fence page (the device's 256 at 64 per process, and one more).
const VRAM_FENCE_HOLDERS: usize = 5;
/// Of those, the ones of this (root) user: one user's processes hold at most 192 of the 256
/// pages together (the module's per-user ceiling); the others switch to another user.
const VRAM_FENCE_HOLDERS_OF_THIS_USER: usize = 3;

/// proves: NF-13 — the module decides the form: with every VRAM fence page taken (INTRA_GPU
/// fences, in as many processes as it takes, 64 each, until `CREATE_FENCE` refuses them), a
/// new context's first DEFAULT fence falls back to the DEFAULT form (both values in system memory, two system
/// pages) and a CPU wait on it ends on a GPU signal; once the VRAM pages are free again, the
/// next context's fence is optimized again.
fn optimized_form_falls_back_to_system_memory_without_a_free_vram_fence_page(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    // A process holds at most its cap of INTRA_GPU fences (64 of the 256 VRAM fence pages), and
    // one user's processes 192: processes of their own, of two users, take the pages, each until
    // refused, until one gets none.
    let node = OpenNode::new(path)?;
    let (ready, stop) = (Signal::new()?, Signal::new()?);
    let (ready_ref, stop_ref, node_ref) = (&ready, &stop, &node);
    let mut holders = Vec::new();
    for i in 0..VRAM_FENCE_HOLDERS {
        holders.push(proc::spawn("a holder of VRAM fence pages", move || {
            let taken = (|| -> Result<_, crate::Error> {
                let holder = if i < VRAM_FENCE_HOLDERS_OF_THIS_USER {
                    Device::open(path)?
                } else {
                    become_other_user()?;
                    Device::open(&node_ref.path)?
                };
                let holder = holder.create_context()?;
                let mut intra = Vec::new();
                while let Ok(f) = holder.create_fence(FenceKind::IntraGpu, 0, 0) {
                    intra.push(f);
                }
                Ok((holder, intra))
            })();
            ready_ref.post(1); // Also on failure, so the parent never blocks.
            let _held = taken?;
            stop_ref.take()?;
            Ok(())
        })?);
    }
    for _ in 0..VRAM_FENCE_HOLDERS {
        ready.take()?;
    }
    let result = (|| -> TestResult {
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
        })
    })();
    stop.post(VRAM_FENCE_HOLDERS);
    for h in holders {
        h.join()?;
    }
    result?;
    let again = dev.create_context()?;
    let g = again.create_fence(FenceKind::Default, 0, 0)?;
    expect_placed(&g, OPTIMIZED, u64::MAX, "a fence created once VRAM fence pages were free again")?;
    Ok(())
}

/// The start of a fence-demotion test on `dev`: the module's `demote_fences` on (until the
/// returned guard drops), a context with a signaler and a waiter user queue whose doorbells a
/// warm-up write each has connected, and a 4 KiB allocation (the warm-ups wrote its bytes 8 to
/// 15).
fn demotion_setup(dev: &Device) -> Result<(ModuleParam, Context, Queue, Queue, Allocation), crate::Error> {
    let demote = ModuleParam::set("demote_fences", 1)?;
    let ctx = dev.create_context()?;
    let (mut signaler, mut waiter) = (user_queue(&ctx)?, user_queue(&ctx)?);
    let buf = ctx.alloc(4096, 0)?;
    let (s0, w0) = (write32(&mut signaler, buf.va_at(8)?, 1)?, write32(&mut waiter, buf.va_at(12)?, 1)?);
    ensure!(wait_until(WAIT, || signaler.completed() >= s0 && waiter.completed() >= w0), "warm-up work did not run");
    Ok((demote, ctx, signaler, waiter, buf))
}

/// proves: NF-14 — with the module's `demote_fences` on, VRAM pressure (the fence segment shrunk
/// to nothing with `fence_vram_pages` 0) makes an INTRA_GPU fence take the VRAM page of the
/// process's optimized DEFAULT fences, whose MonitoredValues move to system memory mid-test
/// (`MM_STATS.fence_demotions` counts it; FENCE_INFO shows both values in system memory, each
/// MonitoredValue kept). The native-fence rules hold across the move and after it: a GPU
/// signal submitted just before the move, racing it, releases the CPU waiter pending since
/// before it (no lost signal); a GPU wait queued before the move is released by a CPU signal
/// after it; a later GPU signal releases a new CPU waiter although the old VRAM place now holds
/// the INTRA_GPU fence's CurrentValue, signaled to 2^40 (so the device compares against the new
/// place); a GPU signal below CurrentValue leaves it where it was.
fn optimized_default_fences_demoted_under_vram_pressure_keep_the_fence_rules(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    ensure!(dev.caps().bits().optimized_default_fence(), "the device does not offer CAPS.optimized_default_fence");
    let (_demote, ctx, mut signaler, mut waiter, buf) = demotion_setup(&dev)?;
    let a = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let b = ctx.create_fence(FenceKind::Default, 0, 0)?;
    ensure!(a.page_offset() == 0, "the context's first fence is at {:#x} of its page, not 0", a.page_offset());
    expect_placed(&a, OPTIMIZED, u64::MAX, "the first fence before the pressure")?;
    expect_placed(&b, OPTIMIZED, u64::MAX, "the packed fence before the pressure")?;
    signal_polled(&mut signaler, &a, 3)?;
    let mut gated = CommandBuffer::new();
    gated.fence_wait(b.gpu_va(), 2, None)?.write32(buf.va_at(0)?, 0xB0)?;
    let gated = waiter.submit(&gated)?;
    let demotions = dev.mm_stats()?.fence_demotions;
    let intra = std::thread::scope(|s| -> Result<_, crate::Error> {
        let w = s.spawn(|| a.wait(5, WAIT));
        expect_monitored(&a, 1, 4)?;
        let _full = ModuleParam::set("fence_vram_pages", 0)?;
        gpu_signal(&mut signaler, &a, 5)?;
        let intra = ctx
            .create_fence(FenceKind::IntraGpu, 0, 0)
            .map_err(|e| format!("the INTRA_GPU fence under pressure: {e}"))?;
        w.join().map_err(|_| "waiter panicked")?.map_err(|e| format!("the CPU waiter pending across the move: {e}"))?;
        Ok(intra)
    })?;
    let after = dev.mm_stats()?.fence_demotions;
    ensure!(after == demotions + 1, "MM_STATS.fence_demotions {demotions} -> {after}, expected one demotion");
    ensure!(a.value() == Some(5), "CurrentValue {:?} after the racing signal of 5", a.value());
    expect_monitored(&a, 0, u64::MAX)?;
    expect_placed(&a, SYSTEM, u64::MAX, "the demoted fence, its waiter released")?;
    expect_placed(&b, SYSTEM, u64::MAX, "the packed fence, demoted with it")?;

    ensure!(buf.read_u32(0)? == 0, "the work behind the GPU wait ran before the signal");
    b.signal(2)?;
    ensure!(wait_until(WAIT, || waiter.completed() >= gated), "the GPU wait queued before the move was not released");
    expect_u32(&buf, 0, 0xB0, "the write behind the GPU wait")?;

    signal_polled(&mut signaler, &intra, 1 << 40)?;
    std::thread::scope(|s| -> TestResult {
        let w = s.spawn(|| a.wait(6, WAIT));
        expect_monitored(&a, 1, 5)?;
        signal_polled(&mut signaler, &a, 6)?;
        w.join().map_err(|_| "waiter panicked")?.map_err(|e| format!("the CPU waiter after the move: {e}"))?;
        Ok(())
    })?;
    signal_polled(&mut signaler, &a, 4)?;
    ensure!(a.value() == Some(6), "a GPU signal of 4 moved CurrentValue from 6 to {:?}", a.value());
    Ok(())
}

/// proves: NF-14, NF-18 — demotion takes only the caller's own fences: with `demote_fences` on
/// and no VRAM fence page free, an INTRA_GPU fence of a process holding no optimized DEFAULT
/// fence and no INTRA_GPU fence is refused with `ENOSPC`, another process's optimized fence
/// keeps its MonitoredValue in VRAM, its INTRA_GPU fence both values, and
/// `MM_STATS.fence_demotions` does not move.
fn demotion_never_takes_another_process_fences(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    ensure!(dev.caps().bits().optimized_default_fence(), "the device does not offer CAPS.optimized_default_fence");
    let _demote = ModuleParam::set("demote_fences", 1)?;
    let ctx = dev.create_context()?;
    let mine = ctx.create_fence(FenceKind::Default, 0, 0)?;
    expect_placed(&mine, OPTIMIZED, u64::MAX, "this process's fence before the pressure")?;
    let mine_intra = ctx.create_fence(FenceKind::IntraGpu, 0, 0)?;
    expect_placed(&mine_intra, VRAM, u64::MAX, "this process's INTRA_GPU fence before the pressure")?;
    let demotions = dev.mm_stats()?.fence_demotions;
    let _full = ModuleParam::set("fence_vram_pages", 0)?;
    let other = proc::spawn("a process with no optimized fence of its own", || {
        let ctx = Device::open(path)?.create_context()?;
        expect_errno(ctx.create_fence(FenceKind::IntraGpu, 0, 0), libc::ENOSPC, "its INTRA_GPU fence under pressure")
    })?;
    other.join()?;
    expect_placed(&mine, OPTIMIZED, u64::MAX, "this process's fence after the other's INTRA_GPU fence")?;
    expect_placed(&mine_intra, VRAM, u64::MAX, "this process's INTRA_GPU fence after the other's")?;
    let after = dev.mm_stats()?.fence_demotions;
    ensure!(after == demotions, "MM_STATS.fence_demotions {demotions} -> {after}, expected none");
    Ok(())
}

/// proves: NF-18 — with the module's `demote_fences` on and VRAM pressure (`fence_vram_pages`
/// 0, and no optimized DEFAULT fence page of the process left to give up), a new INTRA_GPU
/// fence takes the VRAM page of the process's older INTRA_GPU fence, whose storage moves to
/// system memory mid-test (`MM_STATS.fence_demotions` counts it; FENCE_INFO shows both values
/// in system memory, CurrentValue kept at the 7 a GPU signal left before the move). The fence
/// still works from the GPU: a GPU wait for the kept value passes; a GPU wait for 8 queued before
/// the move stays held while the new fence, now at the old VRAM place, is signaled to 2^40,
/// and is released by a GPU signal of 8 after the move; the work behind it signals a DEFAULT
/// fence, which releases a CPU waiter pending since before the move.
fn intra_gpu_fence_demoted_under_vram_pressure_keeps_its_value_and_its_gpu_waits(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    ensure!(dev.caps().bits().fence_storage_move(), "the device does not offer CAPS.fence_storage_move");
    let (_demote, ctx, mut signaler, mut waiter, buf) = demotion_setup(&dev)?;
    let old = ctx.create_fence(FenceKind::IntraGpu, 0, 0)?;
    expect_placed(&old, VRAM, u64::MAX, "the INTRA_GPU fence before the pressure")?;
    signal_polled(&mut signaler, &old, 7)?;
    let _full = ModuleParam::set("fence_vram_pages", 0)?;
    let done = ctx.create_fence(FenceKind::Default, 0, 0)?;
    expect_placed(&done, SYSTEM, u64::MAX, "the DEFAULT fence created with no VRAM fence page free")?;
    let mut gated = CommandBuffer::new();
    gated.fence_wait(old.gpu_va(), 8, None)?.write32(buf.va_at(0)?, 0xB0)?.fence_signal(done.gpu_va(), 1, None)?;
    let gated = waiter.submit(&gated)?;
    let demotions = dev.mm_stats()?.fence_demotions;
    std::thread::scope(|s| -> TestResult {
        let w = s.spawn(|| done.wait(1, WAIT));
        expect_monitored(&done, 1, 0)?;
        let new = ctx
            .create_fence(FenceKind::IntraGpu, 0, 0)
            .map_err(|e| format!("the INTRA_GPU fence under pressure: {e}"))?;
        let after = dev.mm_stats()?.fence_demotions;
        ensure!(after == demotions + 1, "MM_STATS.fence_demotions {demotions} -> {after}, expected one demotion");
        let i = old.info()?;
        ensure!(
            (i.current_segment, i.monitored_segment) == SYSTEM && i.current_value == 7 && i.monitored_value == u64::MAX,
            "the demoted fence: segments ({}, {}), CurrentValue {}, MonitoredValue {:#x}; expected {SYSTEM:?}, 7, UINT64_MAX",
            i.current_segment,
            i.monitored_segment,
            i.current_value,
            i.monitored_value
        );
        expect_placed(&new, VRAM, u64::MAX, "the new INTRA_GPU fence, in the VRAM page given up")?;
        signal_polled(&mut signaler, &new, 1 << 40)?;
        ensure!(buf.read_u32(0)? == 0, "the work behind the GPU wait for 8 ran before the signal of 8");

        let mut kept = CommandBuffer::new();
        kept.fence_wait(old.gpu_va(), 7, None)?.write32(buf.va_at(4)?, 0x77)?;
        let kept = signaler.submit(&kept)?;
        ensure!(wait_until(WAIT, || signaler.completed() >= kept), "a GPU wait for the kept value 7 was not released");
        expect_u32(&buf, 4, 0x77, "the write behind the GPU wait for the kept value")?;

        signal_polled(&mut signaler, &old, 8)?;
        ensure!(
            wait_until(WAIT, || waiter.completed() >= gated),
            "the GPU wait queued before the move was not released by a GPU signal after it"
        );
        expect_u32(&buf, 0, 0xB0, "the write behind the GPU wait")?;
        w.join().map_err(|_| "waiter panicked")?.map_err(|e| format!("the CPU waiter pending across the move: {e}"))?;
        let i = old.info()?;
        ensure!(i.current_value == 8, "the demoted fence's CurrentValue {} after the GPU signal of 8", i.current_value);
        Ok(())
    })
}

/// proves: NF-15, NF-16, NF-17 — through the D3DKMT API (`belfry-d3dkmt-rules nf-intra`): a
/// shareable `D3DDDI_NATIVEFENCE_TYPE_INTRA_GPU` fence is refused; an INTRA_GPU fence has a GPU
/// address and no CPU mapping, its CPU signal and CPU wait return `STATUS_ACCESS_DENIED`, and a
/// GPU wait of one user-mode hardware queue on it is released by another's GPU signal.
fn d3dkmt_intra_gpu_fence_refuses_the_cpu_and_works_gpu_to_gpu(path: &Path) -> TestResult {
    crate::support::d3dkmt::rule_check_passes(
        path,
        "nf-intra",
        &[
            "ok sharing-refused",
            "ok no-cpu-mapping",
            "ok cpu-signal-refused",
            "ok cpu-wait-refused",
            "ok gpu-signal-gpu-wait",
        ],
    )
}

/// proves: NF-20 — through the D3DKMT API (`belfry-d3dkmt-rules nf-destroy`):
/// `D3DKMTDestroySynchronizationObject` destroys a native and a monitored fence (their handles
/// are then `STATUS_INVALID_HANDLE` to signals and to a second destroy), and a destroyed
/// device takes its fences with it.
fn d3dkmt_one_destroy_call_destroys_every_kind_of_fence(path: &Path) -> TestResult {
    crate::support::d3dkmt::rule_check_passes(path, "nf-destroy", &["ok destroyed", "ok destroyed-with-device"])
}

/// proves: NF-21, NF-01 — through the D3DKMT API (`belfry-d3dkmt-rules nf-21`): a user-mode
/// hardware queue refuses a GPU wait and a GPU signal of a monitored fence; a native fence's
/// GPU wait on one user-mode queue holds its submission until another queue's GPU signal.
fn d3dkmt_user_mode_queues_take_native_fences_only(path: &Path) -> TestResult {
    crate::support::d3dkmt::rule_check_passes(path, "nf-21", &["ok monitored-refused", "ok native-gpu-wait-released"])
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(gpu_wait_released_by_another_queue_without_interrupts, Default, ["NF-01", "MV-08", "FEN-02"]),
        test_entry!(intra_gpu_fence_refuses_the_cpu_and_works_gpu_to_gpu, Default, ["NF-15", "NF-16", "NF-17"]),
        test_entry!(fence_values_are_packed_at_the_stride_unless_shareable, Default, ["NF-07", "NF-08", "FEN-06"]),
        test_entry!(one_destroy_call_destroys_every_kind_of_fence, Default, ["NF-20"]),
        test_entry!(d3dkmt_intra_gpu_fence_refuses_the_cpu_and_works_gpu_to_gpu, Default, ["NF-15", "NF-16", "NF-17"]),
        test_entry!(d3dkmt_one_destroy_call_destroys_every_kind_of_fence, Default, ["NF-20"]),
        test_entry!(d3dkmt_user_mode_queues_take_native_fences_only, Default, ["NF-21", "NF-01"]),
        test_entry!(create_fence_refuses_an_unknown_type_and_the_type_fixes_the_storage, Default, ["NF-10"]),
        test_entry!(
            monitored_value_is_a_separate_64_bit_location_no_process_can_map,
            Default,
            ["NF-02", "NF-06", "NF-05"]
        ),
        test_entry!(intra_gpu_fence_is_a_kernel_object_debug_tools_see, Default, ["NF-19"]),
        test_entry!(current_value_is_never_seen_torn, Default, ["NF-04"]),
        test_entry!(user_mode_queues_refuse_monitored_fence_waits, Default, ["NF-21"]),
        test_entry!(
            optimized_default_fence_keeps_monitored_value_in_vram_unless_shareable,
            Default,
            ["NF-13", "MV-02"]
        ),
        test_entry!(optimized_form_falls_back_to_system_memory_without_a_free_vram_fence_page, Default, ["NF-13"]),
        test_entry!(optimized_default_fences_demoted_under_vram_pressure_keep_the_fence_rules, Default, ["NF-14"]),
        test_entry!(demotion_never_takes_another_process_fences, Default, ["NF-14", "NF-18"]),
        test_entry!(intra_gpu_fence_demoted_under_vram_pressure_keeps_its_value_and_its_gpu_waits, Default, ["NF-18"]),
    ]
}

//! CAP-xx: Capabilities and feature queries (RULES.md § Capabilities and feature queries).

use std::path::Path;

use belfry_abi::uapi;
use belfry_umd::{Device, EngineId, FenceKind, QueueDesc, QueueMode};

use crate::harness::raw::{errno_name, RawDev};
use crate::support::binding::{pci_address, set_param, Rebinding};
use crate::support::fences::system_pages;
use crate::support::fixture::open_context;
use crate::support::kernel_log;
use crate::support::param::ModuleParam;
use crate::support::work::{expect_u32, kernel_queue, user_queue, write32, write32_faulting};
use crate::support::{expect_errno, wait_until, WAIT};
use crate::{Test, TestResult};

/// proves: CAP-12 — QUERY_CAPS reports the doorbell size (one page, what the doorbell mapping
/// is) and the engines that take user-mode queues; a user-mode queue with a doorbell is
/// accepted on every flagged engine and refused on any other (here only the engine past the
/// last: every engine of the suite's devices is flagged, so CAP-11's refusal of an unflagged
/// engine is not exercised and CAP-11 is not cited).
fn capabilities_report_doorbell_size_and_user_mode_engines(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let caps = *dev.caps();
    ensure!(caps.raw.doorbell_size == 4096, "doorbell size {} (BAR2 has one 4 KiB page each)", caps.raw.doorbell_size);
    let engines = caps.engine_count();
    let d = RawDev::open(path)?;
    let ctx = d.create_context().map_err(errno_name)?;
    for engine in 0..engines + 1 {
        let ring = d.alloc(ctx, 4096).map_err(errno_name)?;
        let ctl = d.alloc(ctx, 4096).map_err(errno_name)?;
        let r = d.create_queue_on(ctx, engine, Some((ring.handle, ctl.handle)), 16);
        let flagged = caps.user_mode_submission(EngineId::new(engine)) && engine < engines;
        match (flagged, r) {
            (true, Ok(q)) => {
                let db = d.create_doorbell(q.handle).map_err(errno_name)?;
                d.handle_op(uapi::IOCTL_DESTROY_DOORBELL, db.handle).map_err(errno_name)?;
                d.handle_op(uapi::IOCTL_DESTROY_QUEUE, q.handle).map_err(errno_name)?;
            }
            (false, Err(_)) => {}
            (true, Err(e)) => {
                return Err(format!("user-mode queue on flagged engine {engine}: {}", errno_name(e)).into())
            }
            (false, Ok(_)) => return Err(format!("user-mode queue on unflagged engine {engine} accepted").into()),
        }
    }
    Ok(())
}

/// proves: CAP-11 — the module marks exactly the engines the device flags for user-mode
/// submission in `QUERY_CAPS` (the node metadata the library reads), and takes user-mode queues
/// only there: on the device without native fences, which flags no engine, `QUERY_CAPS` flags
/// none and every engine refuses a user-mode queue while it takes a kernel-mode one; the
/// default device beside it flags every engine, and takes a user-mode queue on each. A module
/// that reported every engine as flagged would let the library try user-mode submission where
/// the device has none.
fn only_the_engines_the_device_flags_are_reported_and_take_user_mode_queues(path: &Path) -> TestResult {
    let (default_path, default_dev) = crate::support::xad::peer(path)?;
    for (path, dev, flagged) in [(path, Device::open(path)?, false), (default_path.as_path(), default_dev, true)] {
        let caps = *dev.caps();
        let engines = caps.engine_count();
        let all = (1u32 << engines) - 1;
        let want = if flagged { all } else { 0 };
        ensure!(
            caps.raw.user_mode_submission_engines == want,
            "{}: QUERY_CAPS flags engines {:#b}, the device flags {want:#b}",
            path.display(),
            caps.raw.user_mode_submission_engines
        );
        let d = RawDev::open(path)?;
        let ctx = d.create_context().map_err(errno_name)?;
        for engine in 0..engines {
            ensure!(
                caps.user_mode_submission(EngineId::new(engine)) == flagged,
                "{}: the library's view of engine {engine} is not {flagged}",
                path.display()
            );
            let ring = d.alloc(ctx, 4096).map_err(errno_name)?;
            let ctl = d.alloc(ctx, 4096).map_err(errno_name)?;
            match (flagged, d.create_queue_on(ctx, engine, Some((ring.handle, ctl.handle)), 16)) {
                (true, Ok(q)) => d.handle_op(uapi::IOCTL_DESTROY_QUEUE, q.handle).map_err(errno_name)?,
                (false, Err(_)) => {}
                (true, Err(e)) => {
                    return Err(format!(
                        "{}: user-mode queue on flagged engine {engine}: {}",
                        path.display(),
                        errno_name(e)
                    )
                    .into())
                }
                (false, Ok(_)) => {
                    return Err(
                        format!("{}: user-mode queue on unflagged engine {engine} accepted", path.display()).into()
                    )
                }
            }
            let kernel_mode = d
                .create_queue_on(ctx, engine, None, 16)
                .map_err(|e| format!("{}: kernel-mode queue on engine {engine}: {}", path.display(), errno_name(e)))?;
            d.handle_op(uapi::IOCTL_DESTROY_QUEUE, kernel_mode.handle).map_err(errno_name)?;
        }
    }
    Ok(())
}

/// The native-fence answer of `QUERY_CAPS`: (version, NATIVE_GPU_FENCE_SUPPORTED,
/// MAP_TO_GPU_SYSTEM_PROCESS, segments).
fn native_caps(dev: &Device) -> (u32, bool, bool, u32) {
    let c = dev.caps();
    (c.native_fence_caps_version(), c.native_gpu_fence_supported(), c.map_to_gpu_system_process(), c.fence_segments())
}

fn errno_of<T>(r: belfry_umd::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.errno())
}

/// Native fences, user-mode and kernel-mode queues work as the switch says.
fn expect_native_paths(path: &Path, on: bool) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let refused = (!on).then_some(libc::EOPNOTSUPP);
    let default = ctx.create_fence(FenceKind::Default, 0, 0);
    ensure!(errno_of(default) == refused, "DEFAULT fence with the switch {on}: expected errno {refused:?}");
    let intra = ctx.create_fence(FenceKind::IntraGpu, 0, 0);
    ensure!(errno_of(intra) == refused, "INTRA_GPU fence with the switch {on}: expected errno {refused:?}");
    let user = ctx.create_queue(&QueueDesc::default());
    ensure!(errno_of(user) == refused, "user-mode queue with the switch {on}: expected errno {refused:?}");
    // Monitored fences and kernel-mode queues do not depend on the feature.
    let monitored = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    monitored.signal(3)?;
    ensure!(monitored.value() == Some(3), "monitored fence value {:?} after a CPU signal of 3", monitored.value());
    let mut km = ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode))?;
    let mut cb = belfry_umd::CommandBuffer::new();
    cb.write32(buf.gpu_va(), 0x0CA9_0001 + u32::from(on))?;
    let v = km.submit(&cb)?;
    km.wait(v, WAIT)?;
    let got = buf.read_u32(0)?;
    ensure!(got == 0x0CA9_0001 + u32::from(on), "kernel-mode queue work wrote {got:#x}");
    Ok(())
}

/// proves: CAP-01, CAP-02, CAP-03, CAP-05, CAP-07, CAP-08 — the switch is read at probe and
/// cached with the negotiated version 1: flipping it changes nothing until the device is
/// re-bound. On: version 1, NATIVE_GPU_FENCE_SUPPORTED (the device has CAPS.native_fence),
/// MAP_TO_GPU_SYSTEM_PROCESS, the system and VRAM segments and the 64-byte stride, and the
/// native paths work. Off: version 0, no native bit although the device still has
/// CAPS.native_fence, no segments, and DEFAULT/INTRA_GPU fences and user-mode queues are
/// refused with EOPNOTSUPP while monitored fences and kernel-mode queues keep working.
fn native_fence_switch_is_read_at_probe_and_gates_native_fences(path: &Path) -> TestResult {
    let binding = Rebinding::new(path)?;
    if !binding.param_was {
        set_param(true)?;
        binding.rebind()?;
    }
    let on = Device::open(path)?;
    let bits = on.caps().bits();
    let segments = uapi::FENCE_SEGMENT_SYSTEM | if bits.intra_gpu_fence() { uapi::FENCE_SEGMENT_VRAM } else { 0 };
    ensure!(bits.native_fence(), "the device has no CAPS.native_fence");
    let want_on = (uapi::NATIVE_FENCE_CAPS_VERSION, true, true, segments);
    ensure!(native_caps(&on) == want_on, "switch on: {:?}, expected {want_on:?}", native_caps(&on));
    ensure!(on.caps().raw.fence_stride == 64, "fence stride {}", on.caps().raw.fence_stride);
    drop(on);
    expect_native_paths(path, true)?;

    set_param(false)?;
    let cached = Device::open(path)?;
    ensure!(native_caps(&cached) == want_on, "switch flipped off, not re-bound: {:?}", native_caps(&cached));
    drop(cached);
    expect_native_paths(path, true)?;

    binding.rebind()?;
    let off = Device::open(path)?;
    ensure!(off.caps().bits().native_fence(), "CAPS.native_fence went away with the switch");
    ensure!(native_caps(&off) == (0, false, false, 0), "switch off after re-binding: {:?}", native_caps(&off));
    drop(off);
    expect_native_paths(path, false)?;

    set_param(true)?;
    let still_off = Device::open(path)?;
    ensure!(
        native_caps(&still_off) == (0, false, false, 0),
        "switch back on, not re-bound: {:?}",
        native_caps(&still_off)
    );
    drop(still_off);
    binding.rebind()?;
    let back = Device::open(path)?;
    ensure!(native_caps(&back) == want_on, "switch on after re-binding: {:?}", native_caps(&back));
    drop(back);
    expect_native_paths(path, true)
}

/// The module parameters that play the OS capabilities version 1 (CAP-04).
const OS_OPTIMIZED: &str = "os_optimized_default_fences";
const OS_INTRA: &str = "os_intra_gpu_fences";

/// Both OS capability switches set for a test and, on drop (a failed test included), set back
/// to what they were ([`ModuleParam`]), with the device bound again so that it reads them.
struct OsCapsSwitched<'a> {
    binding: &'a Rebinding,
    params: Option<(ModuleParam, ModuleParam)>,
}

impl<'a> OsCapsSwitched<'a> {
    fn set(binding: &'a Rebinding, optimized: bool, intra: bool) -> Result<Self, crate::Error> {
        let optimized = ModuleParam::set(OS_OPTIMIZED, u32::from(optimized))?;
        let params = Some((optimized, ModuleParam::set(OS_INTRA, u32::from(intra))?));
        Ok(OsCapsSwitched { binding, params })
    }
}

impl Drop for OsCapsSwitched<'_> {
    fn drop(&mut self) {
        drop(self.params.take());
        let _ = self.binding.rebind();
    }
}

/// What the module reported of the OS capabilities and what it made of them: (QUERY_CAPS's
/// OS optimized-DEFAULT bit, its OS INTRA_GPU bit, the device CAPS bits the module passes on
/// for those types).
fn os_caps(dev: &Device) -> (bool, bool, bool, bool) {
    let c = dev.caps();
    (
        c.os_optimized_default_fence(),
        c.os_intra_gpu_fence(),
        c.bits().optimized_default_fence(),
        c.bits().intra_gpu_fence(),
    )
}

/// Where a new DEFAULT fence's MonitoredValue lives (`FENCE_SEGMENT_*`), and whether an
/// INTRA_GPU fence can be created (the errno otherwise).
fn fence_types(path: &Path) -> Result<(u32, Option<i32>), crate::Error> {
    let (_dev, ctx) = open_context(path)?;
    let default = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let segment = default.info()?.monitored_segment;
    Ok((segment, errno_of(ctx.create_fence(FenceKind::IntraGpu, 0, 0))))
}

/// proves: CAP-04 — the OS capabilities version 1 (SupportOptimizedDefaultFenceType and
/// SupportIntraGpuFenceType, played by the module parameters `os_optimized_default_fences` and
/// `os_intra_gpu_fences`) are read when the device is bound and reported in QUERY_CAPS; a
/// fence type the OS does not support is not used: with both off and the device bound again,
/// an INTRA_GPU fence is refused with EOPNOTSUPP and a DEFAULT fence keeps its MonitoredValue
/// in system memory (no optimized form), although the device still offers both types; flipping
/// the switches without a re-bind changes nothing; back on, both types are used again.
fn os_fence_type_capabilities_are_read_at_probe_and_followed(path: &Path) -> TestResult {
    let binding = Rebinding::new(path)?;
    let dev = Device::open(path)?;
    ensure!(
        os_caps(&dev) == (true, true, true, true),
        "the default device with the OS supporting both types: {:?}, expected all on",
        os_caps(&dev)
    );
    drop(dev);
    let on = fence_types(path)?;
    ensure!(
        on == (uapi::FENCE_SEGMENT_VRAM, None),
        "both types supported: {on:?}, expected the optimized form and an INTRA_GPU fence"
    );
    let switched = OsCapsSwitched::set(&binding, false, false)?;
    let cached = fence_types(path)?;
    ensure!(cached == on, "switches off, the device not bound again: {cached:?}, expected {on:?}");
    binding.rebind()?;
    let dev = Device::open(path)?;
    ensure!(os_caps(&dev) == (false, false, false, false), "both switches off after a re-bind: {:?}", os_caps(&dev));
    drop(dev);
    let off = fence_types(path)?;
    ensure!(
        off == (uapi::FENCE_SEGMENT_SYSTEM, Some(libc::EOPNOTSUPP)),
        "the OS supports neither type: {off:?}, expected MonitoredValue in system memory and EOPNOTSUPP"
    );
    drop(switched);
    let back = fence_types(path)?;
    ensure!(back == on, "switches back on after a re-bind: {back:?}, expected {on:?}");
    Ok(())
}

/// proves: CAP-06 — with MAP_TO_GPU_SYSTEM_PROCESS, the values of native fences are mapped in
/// the system (CMP) address space: the first DEFAULT fence of a context maps two system pages
/// (CurrentValue and MonitoredValue; one where the device offers the optimized form, whose
/// MonitoredValues are in VRAM, NF-13), a fence packed beside it none, a shareable fence two
/// more, and destroying the context unmaps them. Those system addresses are what the device was
/// given: the shareable fence's MonitoredValue page is mapped nowhere else, yet a GPU signal
/// interrupts exactly when a CPU waiter set it (no interrupt for the fences nobody waits on)
/// and the waiter wakes.
fn native_fence_values_are_mapped_in_the_system_address_space(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    ensure!(dev.caps().map_to_gpu_system_process(), "QUERY_CAPS without MAP_TO_GPU_SYSTEM_PROCESS");
    let base = system_pages(&dev)?;
    let ctx = dev.create_context()?;
    let mut q = ctx.create_queue(&QueueDesc::default().with_mode(QueueMode::KernelMode))?;
    let with_queue = system_pages(&dev)?;
    let packed_fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let first = system_pages(&dev)?;
    // The optimized form (the default device) keeps the page's MonitoredValues in VRAM.
    let expect = if dev.caps().bits().optimized_default_fence() { 1 } else { 2 };
    ensure!(first == with_queue + expect, "first fence page: {with_queue} -> {first} system pages, expected +{expect}");
    let quiet = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let packed = system_pages(&dev)?;
    ensure!(packed == first, "a packed fence: {first} -> {packed} system pages, expected +0");
    let waited = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 0)?;
    let own = system_pages(&dev)?;
    ensure!(own == packed + 2, "a shareable fence: {packed} -> {own} system pages, expected +2");

    let interrupts = |dev: &Device| -> Result<u64, crate::Error> { Ok(dev.debug_stats()?.interrupts_by_cause[1]) };
    let signal = |q: &mut belfry_umd::Queue, f: &belfry_umd::Fence, value: u64| -> TestResult {
        let mut cb = belfry_umd::CommandBuffer::new();
        cb.fence_signal(f.gpu_va(), value, None)?;
        let v = q.submit(&cb)?;
        // Polled: a WAIT_PROGRESS would arm the progress fence's own interrupt.
        ensure!(wait_until(WAIT, || q.completed() >= v), "the signal of {value} did not complete");
        Ok(())
    };
    let before = interrupts(&dev)?;
    signal(&mut q, &quiet, 1)?;
    signal(&mut q, &packed_fence, 1)?;
    let unwatched = interrupts(&dev)?;
    ensure!(unwatched == before, "signals of fences nobody waits on raised {} interrupt(s)", unwatched - before);
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| waited.wait(5, WAIT));
        let armed = wait_until(WAIT, || waited.info().is_ok_and(|i| i.pending_waits == 1 && i.monitored_value == 4));
        let i = waited.info()?;
        ensure!(
            armed,
            "{} pending wait(s), MonitoredValue {:#x}; expected 1 and 4",
            i.pending_waits,
            i.monitored_value
        );
        signal(&mut q, &waited, 5)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    ensure!(interrupts(&dev)? > unwatched, "the signal the waiter watched raised no interrupt");
    drop((waited, quiet, packed_fence, q));
    drop(ctx);
    let after = system_pages(&dev)?;
    ensure!(after == base, "{after} system pages after the context went, {base} before it");
    Ok(())
}

/// The system address space's extent in slots and its page tables (`DEBUG_STATS`).
fn system_space(dev: &Device) -> Result<(u32, u32), crate::Error> {
    let s = dev.debug_stats()?;
    Ok((s.system_va_slots, s.system_page_tables))
}

/// Shareable fences [`system_slots_are_reused_and_empty_page_tables_freed`] holds at once: each
/// takes a slot of its own, and 300 slots span three leaf tables (128 slots each).
const BURST_FENCES: usize = 300;

/// A shareable DEFAULT fence in context `ctx` of `raw` (its handle), made (and destroyed by the
/// caller) through the ioctls alone: the library would also map its CurrentValue page for the
/// CPU and unmap it before the destroy, an mmap and a munmap per fence that the system address
/// space never sees (its slot is the fence's GPU mapping) and that the debug kernel makes dear.
fn shareable_fence(raw: &RawDev, ctx: u32) -> Result<u32, i32> {
    let a = uapi::CreateFence {
        context: ctx,
        kind: uapi::FENCE_KIND_DEFAULT,
        flags: uapi::FENCE_SHAREABLE,
        ..Default::default()
    };
    raw.create_fence(a).map(|f| f.handle)
}

/// Shareable fences it creates and destroys one after another: more slots than the burst took
/// (a space that never reused a slot would end 400 slots, four leaf tables, larger). 2,000 took
/// 49 s of the debug suite (each fence two mailbox commands) and showed nothing 400 does not.
const CHURN_FENCES: usize = 400;

/// proves: CAP-06 — the system address space reuses the VA of what was unmapped from it and
/// frees its page tables when they empty: with 300 shareable fences alive at once (a slot of
/// two pages each, over more than two leaf tables) its page tables grow, and once they are
/// destroyed its extent, page tables and mapped pages are back where they were; 400 fences
/// created and destroyed one after another then leave the extent unchanged (each takes the slot
/// the one before gave back). A GPU VA whose fence was destroyed, its system slot now another
/// file's shareable fence, faults the context that writes it: the new owner's value is intact
/// and its own signals still land.
fn system_slots_are_reused_and_empty_page_tables_freed(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    ensure!(dev.caps().map_to_gpu_system_process(), "QUERY_CAPS without MAP_TO_GPU_SYSTEM_PROCESS");
    let ctx = dev.create_context()?;
    let mut q = user_queue(&ctx)?;
    let raw = RawDev::open(path)?;
    let raw_ctx = raw.create_context().map_err(errno_name)?;
    let base = (system_space(&dev)?, system_pages(&dev)?);

    let burst = (0..BURST_FENCES)
        .map(|i| {
            shareable_fence(&raw, raw_ctx).map_err(|e| format!("shareable fence {i} of the burst: {}", errno_name(e)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (peak_slots, peak_tables) = system_space(&dev)?;
    ensure!(
        peak_slots as usize >= base.0 .0 as usize + BURST_FENCES && peak_tables > base.0 .1,
        "{BURST_FENCES} shareable fences: (slots, page tables) {:?} -> ({peak_slots}, {peak_tables})",
        base.0
    );
    for handle in burst {
        raw.handle_op(uapi::IOCTL_DESTROY_FENCE, handle).map_err(errno_name)?;
    }
    let after_burst = (system_space(&dev)?, system_pages(&dev)?);
    ensure!(
        after_burst == base,
        "after the {BURST_FENCES} fences went: ((slots, page tables), pages) {after_burst:?}, {base:?} before them"
    );

    for i in 0..CHURN_FENCES {
        let f = shareable_fence(&raw, raw_ctx).map_err(|e| {
            format!("shareable fence {i} of {CHURN_FENCES} created and destroyed in turn: {}", errno_name(e))
        })?;
        raw.handle_op(uapi::IOCTL_DESTROY_FENCE, f).map_err(errno_name)?;
    }
    let after_churn = (system_space(&dev)?, system_pages(&dev)?);
    ensure!(
        after_churn == base,
        "after {CHURN_FENCES} fences created and destroyed in turn: ((slots, page tables), pages) {after_churn:?}, {base:?} before them"
    );

    let other = Device::open(path)?;
    let other_ctx = other.create_context()?;
    let mut other_q = user_queue(&other_ctx)?;
    let stale = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 0)?;
    let stale_va = stale.gpu_va();
    let with_stale = system_space(&dev)?.0;
    drop(stale);
    let owner = other_ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 0x1234)?;
    let reused = system_space(&dev)?.0;
    ensure!(
        reused == with_stale,
        "the new owner's fence did not take the freed slot: extent {reused}, {with_stale} with the destroyed fence"
    );
    let faults_before = dev.debug_stats()?.faults;
    write32_faulting(&mut q, stale_va, 0xDEAD)?;
    let faulted = wait_until(WAIT, || dev.debug_stats().is_ok_and(|d| d.faults > faults_before));
    ensure!(faulted, "a write to the GPU VA of a destroyed fence did not fault within {WAIT:?}");
    ensure!(owner.value() == Some(0x1234), "the new owner's fence reads {:?}, expected 0x1234", owner.value());
    let mut cb = belfry_umd::CommandBuffer::new();
    cb.fence_signal(owner.gpu_va(), 0x1235, None)?;
    let v = other_q.submit(&cb)?;
    ensure!(wait_until(WAIT, || other_q.completed() >= v), "the new owner's signal did not complete");
    ensure!(owner.value() == Some(0x1235), "the new owner's signal: fence reads {:?}, expected 0x1235", owner.value());
    Ok(())
}

/// A device without native fences refuses user-mode queues (EINVAL): they could not
/// synchronize (their progress fence is a native fence, and monitored fences are not theirs),
/// while kernel-mode queues run there.
fn user_mode_queues_are_refused_without_native_fences(path: &Path) -> TestResult {
    let (_dev, ctx) = open_context(path)?;
    ensure!(!ctx.caps().bits().native_fence(), "the device offers native fences");
    expect_errno(user_queue(&ctx), libc::EINVAL, "a user-mode queue")?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let v = write32(&mut q, buf.va_at(0)?, 0x77)?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0x77, "the kernel-mode queue's work")
}

/// What the module logs when it binds a device that injects test-only faults.
const INJECTING_DEVICE_LINE: &str = "injects test-only faults";

/// The kernel's `TAINT_TEST` bit ('N'), set by code that runs only for tests.
const TAINT_TEST: u64 = 1 << 18;

/// A device that says it injects test-only faults (`QUERY_CAPS.test_injections`, the device's
/// `TEST_INJECTIONS` register, not zero) is never bound quietly: binding it logs a warning
/// naming the device and taints the kernel with `TAINT_TEST`, as a kernel that ran KUnit is.
fn binding_a_device_that_injects_faults_warns_and_taints_the_kernel(path: &Path) -> TestResult {
    let injected = Device::open(path)?.caps().test_injections();
    ensure!(injected.0 != 0, "the device shows no test injection");
    let address = pci_address(path)?;
    let warnings = || -> Result<usize, crate::Error> {
        let log = kernel_log::read()?;
        Ok(log.lines().filter(|l| l.contains(&address) && l.contains(INJECTING_DEVICE_LINE)).count())
    };
    let before = warnings()?;
    Rebinding::new(path)?.rebind()?;
    let after = warnings()?;
    ensure!(
        after > before,
        "binding {address} logged no '{INJECTING_DEVICE_LINE}' line ({before} before, {after} after)"
    );
    let tainted: u64 = std::fs::read_to_string("/proc/sys/kernel/tainted")?.trim().parse()?;
    ensure!(tainted & TAINT_TEST != 0, "the kernel is not tainted TAINT_TEST ({tainted:#x})");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(capabilities_report_doorbell_size_and_user_mode_engines, Default, ["CAP-12"]),
        test_entry!(
            native_fence_switch_is_read_at_probe_and_gates_native_fences,
            Default,
            ["CAP-01", "CAP-02", "CAP-03", "CAP-05", "CAP-07", "CAP-08"]
        ),
        test_entry!(native_fence_values_are_mapped_in_the_system_address_space, Default, ["CAP-06"]),
        test_entry!(system_slots_are_reused_and_empty_page_tables_freed, Default, ["CAP-06"]),
        test_entry!(os_fence_type_capabilities_are_read_at_probe_and_followed, Default, ["CAP-04"]),
        test_entry!(user_mode_queues_are_refused_without_native_fences, No64BitAtomics, []),
        test_entry!(
            only_the_engines_the_device_flags_are_reported_and_take_user_mode_queues,
            NoNativeFences,
            ["CAP-11"]
        ),
        test_entry!(binding_a_device_that_injects_faults_warns_and_taints_the_kernel, NoFenceInterrupts, []),
    ]
}

//! Tests of shared native fences across processes (SHR), pollable CPU waits (FEN-18) with
//! batched MonitoredValue updates, and native-fence storage rules (NF). Each doc comment says
//! what it proves in the form `ci/rules` parses; the registry at the end repeats the ids.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use belfry_abi::uapi;
use belfry_umd::{CommandBuffer, Device, Fence, FenceKind};

use crate::channel::{Channel, Side};
use crate::proc;
use crate::raw::{errno_name, RawDev};
use crate::tests::{expect_pending, fence_interrupts, gpu_signal, kernel_queue, user_queue, WAIT};
use crate::{ensure, expect_errno, wait_until, Test, TestResult};

/// The shared-fence counts of `FENCE_DEBUG`: global objects, local handles, fences registered
/// with the device.
fn shared_counts(dev: &Device) -> Result<(u32, u32, u32), crate::Error> {
    let d = dev.fence_debug()?;
    Ok((d.global_fences, d.local_handles, d.registered_fences))
}

/// Fails unless `FENCE_DEBUG` shows `base` plus `delta` (globals, locals, registered).
fn expect_counts(dev: &Device, base: (u32, u32, u32), delta: (u32, u32, u32), what: &str) -> TestResult {
    let want = (base.0 + delta.0, base.1 + delta.1, base.2 + delta.2);
    let got = shared_counts(dev)?;
    ensure!(got == want, "{what}: (global objects, local handles, registered) = {got:?}, expected {want:?}");
    Ok(())
}

/// Messages of [`shared_fence_lives_while_any_process_holds_it`].
const IMPORTED: u64 = 1;
/// See [`IMPORTED`].
const CREATOR_CLOSED: u64 = 2;
/// See [`IMPORTED`].
const IMPORTER_CLOSED: u64 = 3;

/// proves: SHR-01, SHR-02, SHR-03, SHR-04, SHR-05, NF-12 — process A creates a shareable
/// DEFAULT fence: one global object registered once with the device, one local handle. Its
/// exported fd crosses a UNIX socket (SCM_RIGHTS) to process B, whose import opens a second
/// local handle on the same global object (same global handle, one registration). A's CPU
/// signal ends B's CPU wait; B's GPU signal (through B's own GPU VA) ends A's CPU wait; A's GPU
/// signal ends B's CPU wait and B's CPU signal A's. A's destroy closes only A's handle: B still signals and waits, CPU and GPU. B's destroy closes
/// the last handle and the global object with it: every count is back at its baseline.
fn shared_fence_lives_while_any_process_holds_it(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let base = shared_counts(&dev)?;
    let ctx = dev.create_context()?;
    let f = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 5)?;
    let mut q = user_queue(&ctx)?;
    expect_counts(&dev, base, (1, 1, 1), "after A's create")?;
    let ch = Channel::new(WAIT)?;
    let importer = proc::spawn("importer", || importer(path, &ch))?;
    let mut run = || -> TestResult {
        let fd = f.export()?;
        ch.send(Side::Parent, f.info()?.global_handle, Some(fd.as_fd()))?;
        drop(fd);
        let (msg, _) = ch.recv(Side::Parent)?;
        ensure!(msg == IMPORTED, "importer said {msg}");
        expect_counts(&dev, base, (1, 2, 1), "after B's import")?;
        f.signal(10)?;
        f.wait(20, WAIT)?;
        ensure!(f.value() == Some(20), "A reads {:?} after B's GPU signal of 20", f.value());
        gpu_signal(&mut q, &f, 25)?;
        f.wait(27, WAIT)?;
        ensure!(f.value() == Some(27), "A reads {:?} after B's CPU signal of 27", f.value());
        Ok(())
    };
    if let Err(e) = run() {
        let _ = importer.kill();
        return Err(e);
    }
    drop(f);
    expect_counts(&dev, base, (1, 1, 1), "after A's destroy")?;
    ch.send(Side::Parent, CREATOR_CLOSED, None)?;
    let got = ch.recv(Side::Parent).map(|(m, _)| m);
    let closed_counts = shared_counts(&dev);
    importer.join()?;
    ensure!(got? == IMPORTER_CLOSED, "importer did not report its destroy");
    let closed_counts = closed_counts?;
    ensure!(closed_counts == base, "after B's destroy: {closed_counts:?}, expected the baseline {base:?}");
    Ok(())
}

/// Process B of [`shared_fence_lives_while_any_process_holds_it`].
fn importer(path: &Path, ch: &Channel) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let mut q = user_queue(&ctx)?;
    let (global, fd) = ch.recv(Side::Child)?;
    let fd = fd.ok_or("no file descriptor came with the message")?;
    let f = ctx.import_fence(fd.as_fd())?;
    drop(fd);
    ensure!(
        f.info()?.global_handle == global,
        "B's handle names global {:#x}, not {global:#x}",
        f.info()?.global_handle
    );
    ensure!(f.value() == Some(5), "B reads {:?}, the creator's initial value is 5", f.value());
    ch.send(Side::Child, IMPORTED, None)?;
    f.wait(10, WAIT)?;
    ensure!(f.value() == Some(10), "B reads {:?} after A's CPU signal", f.value());
    gpu_signal(&mut q, &f, 20)?;
    f.wait(25, WAIT)?;
    ensure!(f.value() == Some(25), "B reads {:?} after A's GPU signal", f.value());
    f.signal(27)?;
    let (msg, _) = ch.recv(Side::Child)?;
    ensure!(msg == CREATOR_CLOSED, "creator said {msg}");
    f.signal(30)?;
    ensure!(f.value() == Some(30), "B reads {:?} after its own CPU signal", f.value());
    gpu_signal(&mut q, &f, 40)?;
    f.wait(40, WAIT)?;
    drop(f);
    ch.send(Side::Child, IMPORTER_CLOSED, None)?;
    Ok(())
}

/// Export and import validate their input: only a shareable DEFAULT fence exports; an fd that
/// is not an exported fence (an eventfd) is refused, and so is a fence of
/// another device (EXDEV, when the guest has one); an exported fd keeps the fence alive after
/// its creator destroyed it, and the counts return to baseline.
fn fence_fds_are_refused_unless_they_name_a_fence_of_this_device(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let base = shared_counts(&dev)?;
    let ctx = dev.create_context()?;
    let plain = ctx.create_fence(FenceKind::Default, 0, 0)?;
    expect_errno(plain.export(), libc::EINVAL, "export of a non-shareable fence")?;
    let ev = plain.event(1)?;
    expect_errno(ctx.import_fence(ev.as_fd()), libc::EINVAL, "import of an eventfd")?;
    let shared = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 7)?;
    let fd = shared.export()?;
    for n in 0..8 {
        let other = format!("/dev/belfry{n}");
        if Path::new(&other) == path {
            continue;
        }
        let Ok(other) = Device::open(&other) else { continue };
        if !other.caps().bits().native_fence() {
            continue;
        }
        let octx = other.create_context()?;
        expect_errno(octx.import_fence(fd.as_fd()), libc::EXDEV, "import on another device")?;
        break;
    }
    drop(shared);
    expect_counts(&dev, base, (1, 0, 2), "the plain fence and the exported fd alone")?;
    let again = ctx.import_fence(fd.as_fd())?;
    ensure!(again.value() == Some(7), "imported after the creator's destroy: {:?}", again.value());
    drop(fd);
    drop(again);
    expect_counts(&dev, base, (0, 0, 1), "only the plain fence left")?;
    drop(ev);
    drop(plain);
    expect_counts(&dev, base, (0, 0, 0), "at the end")?;
    Ok(())
}

/// WAIT_FENCE_EVENTFD validates its input: a pipe is not an eventfd (EINVAL), an INTRA_GPU
/// fence has no CPU wait (EPERM, and no export: EINVAL); one file may keep 256 waits pending,
/// the next is refused with ENOSPC; destroying the fence drops them all, unsignaled.
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
    ensure!(!ev.is_ready()?, "dropped waits signaled the eventfd");
    Ok(())
}

/// proves: FEN-18, MV-07 — registering a pollable wait returns at once and counts as a
/// pending wait (MonitoredValue = value − 1); poll(2) says not ready, still not after 200 ms;
/// the GPU signal's interrupt makes it ready (counter 1) and MonitoredValue returns to
/// UINT64_MAX. A wait for a reached value is ready at once, one a CPU signal reaches is ready
/// when the signal returns.
fn pollable_wait_becomes_ready_on_a_gpu_signal(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
/// interrupt of a MONITORED_FENCE_SIGNAL from a kernel-mode queue; a pending one is dropped,
/// never signaled, when its fence handle is destroyed.
fn pollable_wait_on_a_monitored_fence_and_its_drop_on_destroy(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
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
    ensure!(!orphan.is_ready()?, "the dropped wait was signaled");
    Ok(())
}

/// Two fences with a pollable wait each: a GPU signal of one makes its wait ready (through a
/// native-fence interrupt) and leaves the other's pending with its MonitoredValue, until that
/// one is signaled too.
fn pollable_waits_follow_their_own_fence(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let (a, b) = (ctx.create_fence(FenceKind::Default, 0, 0)?, ctx.create_fence(FenceKind::Default, 0, 0)?);
    let mut q = user_queue(&ctx)?;
    let (ea, eb) = (a.event(1)?, b.event(1)?);
    let before = fence_interrupts(&dev)?;
    gpu_signal(&mut q, &a, 1)?;
    ensure!(ea.wait(WAIT)?, "the signaled fence's wait is not ready");
    ensure!(fence_interrupts(&dev)? > before, "no native-fence interrupt counted");
    std::thread::sleep(Duration::from_millis(100));
    ensure!(!eb.is_ready()?, "the other fence's wait is ready");
    let i = b.info()?;
    ensure!(
        i.pending_waits == 1 && i.monitored_value == 0,
        "other fence: {} pending, MonitoredValue {:#x}",
        i.pending_waits,
        i.monitored_value
    );
    gpu_signal(&mut q, &b, 1)?;
    ensure!(eb.wait(WAIT)?, "the second fence's wait is not ready after its signal");
    Ok(())
}

/// proves: IRQ-05, FEN-18 — on a device that posts NULL native-fence records (it cannot say
/// which fence signaled), the module examines every pending wait: the signaled fence's pollable
/// wait becomes ready, the other fence's stays pending.
fn pollable_wait_is_released_by_a_null_record_scan(path: &Path) -> TestResult {
    pollable_waits_follow_their_own_fence(path)
}

/// proves: FEN-18 — on a device that posts the per-queue form (the queue, not the fence), the
/// signaled fence's pollable wait becomes ready and the other's stays pending.
fn pollable_wait_is_released_by_a_per_queue_record(path: &Path) -> TestResult {
    pollable_waits_follow_their_own_fence(path)
}

/// proves: MV-09 — MonitoredValues of several fences go to the device in one batched
/// UPDATE_MONITORED_VALUES: a process that exits with eventfd waits on three fences has them
/// dropped unsignaled in one update carrying all three. Before that, eventfd waits on three
/// fences completed by one command buffer each move their fence's MonitoredValue to the
/// fence's remaining wait − 1, not UINT64_MAX (whether the interrupt thread sees the three
/// signals at once, and so batches them, depends on timing: not asserted).
fn eventfd_waits_on_several_fences_complete_in_one_batched_update(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let fences = (0..3).map(|_| ctx.create_fence(FenceKind::Default, 0, 0)).collect::<Result<Vec<_>, _>>()?;
    let mut q = user_queue(&ctx)?;
    let events = fences.iter().map(|f| f.event(1)).collect::<Result<Vec<_>, _>>()?;
    let keep = fences.iter().map(|f| f.event(2)).collect::<Result<Vec<_>, _>>()?;
    let mut cb = CommandBuffer::new();
    for f in &fences {
        cb.fence_signal(f.gpu_va(), 1, None)?;
    }
    q.submit(&cb)?;
    for (i, e) in events.iter().enumerate() {
        ensure!(e.wait(WAIT)?, "fence {i}: not ready after its GPU signal");
    }
    for (i, f) in fences.iter().enumerate() {
        let ok = wait_until(WAIT, || f.info().is_ok_and(|i| i.monitored_value == 1));
        ensure!(ok, "fence {i}: MonitoredValue {:#x}, expected 1", f.info()?.monitored_value);
    }
    for (f, k) in fences.iter().zip(&keep) {
        f.signal(2)?;
        ensure!(k.is_ready()?, "the second wait is not ready after the CPU signal");
    }
    let before = dev.fence_debug()?;
    let ch = Channel::new(WAIT)?;
    let child = proc::spawn("waiter", || {
        let dev = Device::open(path)?;
        let ctx = dev.create_context()?;
        let fences = (0..3).map(|_| ctx.create_fence(FenceKind::Default, 0, 0)).collect::<Result<Vec<_>, _>>()?;
        let events = fences.iter().map(|f| f.event(9)).collect::<Result<Vec<_>, _>>()?;
        ch.send(Side::Child, events.len() as u64, None)?;
        // Exit with the waits pending: the file's release drops them.
        std::mem::forget((events, fences, ctx, dev));
        Ok(())
    })?;
    let (n, _) = ch.recv(Side::Parent)?;
    child.join()?;
    ensure!(n == 3, "the child registered {n} waits");
    let after = dev.fence_debug()?;
    ensure!(after.event_waits == before.event_waits, "{} eventfd waits left after the exit", after.event_waits);
    ensure!(
        after.batched_updates > before.batched_updates && after.largest_batch >= 3,
        "the exit's three dropped waits gave {} batched update(s), largest {}",
        after.batched_updates - before.batched_updates,
        after.largest_batch
    );
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
        let waiter = s.spawn(|| raw.fence_op(true, f.handle, CV + 0x42, WAIT.as_nanos() as u64));
        // The wait is listed, then MonitoredValue is written: wait for both.
        let pending = |i: &uapi::FenceInfo| i.pending_waits == 1 && i.monitored_value == CV + 0x41;
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

/// Every test of this file, in order.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            shared_fence_lives_while_any_process_holds_it,
            Default,
            ["SHR-01", "SHR-02", "SHR-03", "SHR-04", "SHR-05", "NF-12"]
        ),
        test_entry!(fence_fds_are_refused_unless_they_name_a_fence_of_this_device, Default, []),
        test_entry!(pollable_wait_becomes_ready_on_a_gpu_signal, Default, ["FEN-18", "MV-07"]),
        test_entry!(pollable_wait_on_a_monitored_fence_and_its_drop_on_destroy, Default, ["FEN-18"]),
        test_entry!(eventfd_waits_refuse_bad_arguments_and_are_bounded, Default, []),
        test_entry!(pollable_wait_is_released_by_a_null_record_scan, ScanAllInterrupts, ["IRQ-05", "FEN-18"]),
        test_entry!(pollable_wait_is_released_by_a_per_queue_record, PerQueueInterrupts, ["FEN-18"]),
        test_entry!(eventfd_waits_on_several_fences_complete_in_one_batched_update, Default, ["MV-09"]),
        test_entry!(one_destroy_call_destroys_every_kind_of_fence, Default, ["NF-20"]),
        test_entry!(create_fence_refuses_an_unknown_type_and_the_type_fixes_the_storage, Default, ["NF-10"]),
        test_entry!(
            monitored_value_is_a_separate_64_bit_location_no_process_can_map,
            Default,
            ["NF-02", "NF-06", "NF-05"]
        ),
        test_entry!(current_value_is_never_seen_torn, Default, ["NF-04"]),
        test_entry!(intra_gpu_fence_is_a_kernel_object_debug_tools_see, Default, ["NF-19"]),
    ]
}

//! XAD-xx: cross-adapter native fences (RULES.md § Cross-adapter native fences): one fence
//! open on two devices of the guest — scenario 1 (two native devices), 2a and 2b (a device
//! without native fences) — row by row through the wait/signal tables, the interrupts they
//! cost, the one CurrentValue page, what happens when a holder dies or a device goes, and
//! peer signals (XAD-15): GPU-to-GPU wake-ups without the module's notification.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use belfry_abi::uapi;
use belfry_umd::{CommandBuffer, Device, FenceKind};

use crate::harness::channel::{Channel, Side};
use crate::harness::{proc, raw};
use crate::support::binding::Rebinding;
use crate::support::fences::{expect_pending, fence_interrupts, gpu_signal, records_settled, shared_counts};
use crate::support::work::kernel_queue;
use crate::support::xad::{peer, peer_signals_partner, table, End};
use crate::support::{expect_errno, wait_until, HOLD, REPROBE, WAIT};
use crate::{Test, TestResult};

/// proves: XAD-01, XAD-02 — a cross-adapter fence is created as a DEFAULT native fence (or a
/// monitored one) and opens on another device; an INTRA_GPU one is refused.
fn cross_adapter_native_fences_are_default_fences(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    expect_errno(
        ctx.create_fence(FenceKind::IntraGpu, uapi::FENCE_CROSS_ADAPTER, 0),
        libc::EINVAL,
        "a cross-adapter INTRA_GPU fence",
    )?;
    let a = End::create(dev, FenceKind::Default)?;
    let (_, other) = peer(path)?;
    let b = End::open(other, &a)?;
    let (ia, ib) = (a.info()?, b.info()?);
    ensure!(ia.native == 1 && ib.native == 1, "native on both devices: {ia:?} / {ib:?}");
    ensure!(ia.devices == 2 && ib.devices == 2, "open on {} / {} devices, expected 2", ia.devices, ib.devices);
    Ok(())
}

/// proves: XAD-03 — the fence's one CurrentValue page is what both devices map: without an
/// IOMMU the same bus address in both devices' page tables (behind one, each device its own
/// mapping of it), and a value one device's GPU writes is read at once through the other
/// device's mapping, before any propagation could have copied it (the other device is never
/// told a value: its notification carries none).
fn both_devices_map_the_one_current_value_page(path: &Path) -> TestResult {
    let mut a = End::create(Device::open(path)?, FenceKind::Default)?;
    let b = End::open(peer(path)?.1, &a)?;
    let (ia, ib) = (a.info()?, b.info()?);
    ensure!(
        ia.current_address != 0 && ib.current_address != 0,
        "CurrentValue at {:#x} for one device, {:#x} for the other",
        ia.current_address,
        ib.current_address
    );
    ensure!(
        behind_an_iommu() || ia.current_address == ib.current_address,
        "without an IOMMU, CurrentValue at {:#x} for one device, {:#x} for the other",
        ia.current_address,
        ib.current_address
    );
    let done = gpu_signal(&mut a.q, &a.fence, 77)?;
    ensure!(wait_until(WAIT, || a.q.completed() >= done), "the signal did not run");
    ensure!(b.fence.value() == Some(77), "the other device's mapping reads {:?}", b.fence.value());
    Ok(())
}

/// Whether the guest has an IOMMU (each device then has a DMA address space of its own).
fn behind_an_iommu() -> bool {
    std::fs::read_dir("/sys/class/iommu").is_ok_and(|mut d| d.next().is_some())
}

/// proves: XAD-07, XAD-09 — scenario 1, both directions: one native device's GPU and CPU
/// waits are released by the other native device's GPU and CPU signals. The waiting device's
/// engine never re-reads a cross-adapter fence unprompted: its hardware queue is released by
/// the module's notification-only update (counted in `XAD_INFO.notifications`), its CPU
/// waiters by the module after the signalling device's interrupt.
fn scenario_1_native_devices_release_each_others_waits(path: &Path) -> TestResult {
    let mut a = End::create(Device::open(path)?, FenceKind::Default)?;
    let mut b = End::open(peer(path)?.1, &a)?;
    let next = table(&mut b, &mut a, 1)?;
    table(&mut a, &mut b, next)?;
    let (ia, ib) = (a.info()?, b.info()?);
    ensure!(ib.notifications >= 4, "the waiting device was notified {} times for 4 signals", ib.notifications);
    ensure!(ia.notifications >= 4, "the waiting device was notified {} times for 4 signals", ia.notifications);
    Ok(())
}

/// proves: XAD-08 — a CPU signal updates CurrentValue and is propagated like a GPU signal:
/// the other device's GPU wait and its pollable (eventfd) wait end.
fn a_cpu_signal_is_propagated_to_the_other_device(path: &Path) -> TestResult {
    let a = End::create(Device::open(path)?, FenceKind::Default)?;
    let mut b = End::open(peer(path)?.1, &a)?;
    let event = b.fence.event(5)?;
    b.gpu_wait(5, 0, 0xc0)?;
    let before = b.info()?.notifications;
    a.fence.signal(5)?;
    b.expect_marker(0, 0xc0, "GPU wait after a CPU signal on the other device")?;
    ensure!(event.wait(WAIT)?, "the eventfd wait did not end");
    ensure!(b.info()?.notifications > before, "no notification reached the waiting device");
    Ok(())
}

/// proves: XAD-05, XAD-06 — while cross-adapter, each device's MonitoredValue is held at 0
/// (also across a CPU wait, which would otherwise set it to the wait's value − 1), so every GPU
/// signal interrupts with no waiter anywhere, while a plain fence signalled with no waiter
/// does not; a wait on the same device is still released by the GPU alone, with no
/// notification.
fn cross_adapter_signals_always_interrupt_and_same_gpu_waits_stay_on_the_gpu(path: &Path) -> TestResult {
    let mut a = End::create(Device::open(path)?, FenceKind::Default)?;
    let b = End::open(peer(path)?.1, &a)?;
    // A CPU wait on each device, pending when the fence is signalled: each sets the
    // MonitoredValue from its waits, then again once it ended.
    std::thread::scope(|s| -> TestResult {
        let (fa, fb) = (&a.fence, &b.fence);
        let ta = s.spawn(move || fa.wait(1, WAIT));
        let tb = s.spawn(move || fb.wait(1, WAIT));
        expect_pending(&a.fence, 1)?;
        expect_pending(&b.fence, 1)?;
        a.fence.signal(1)?;
        ta.join().map_err(|_| "waiter panicked")??;
        tb.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    ensure!(a.info()?.monitored_value == 0, "MonitoredValue {:#x} after a CPU wait", a.info()?.monitored_value);
    ensure!(b.info()?.monitored_value == 0, "MonitoredValue {:#x} after a CPU wait", b.info()?.monitored_value);
    let plain = a.ctx.create_fence(FenceKind::Default, 0, 0)?;
    let count = |f: &belfry_umd::Fence, first: u64, q: &mut belfry_umd::Queue| -> Result<u64, crate::Error> {
        let before = fence_interrupts(&a.dev)?;
        for v in first..first + 5 {
            let done = gpu_signal(q, f, v)?;
            ensure!(wait_until(WAIT, || q.completed() >= done), "signal {v} did not run");
        }
        // Every record of the five signals is counted once a NOTIFY behind them is.
        records_settled(&a.dev, q)?;
        Ok(fence_interrupts(&a.dev)? - before)
    };
    let mut q2 = a.ctx.create_queue(&belfry_umd::QueueDesc::default())?;
    let plain_irqs = count(&plain, 1, &mut q2)?;
    ensure!(plain_irqs == 0, "{plain_irqs} interrupts for 5 signals of a fence nobody waits on");
    let cross_irqs = count(&a.fence, 2, &mut q2)?;
    ensure!(cross_irqs >= 5, "{cross_irqs} interrupts for 5 cross-adapter signals");
    // Same GPU: another queue of the device waits, this one signals.
    let notified = a.info()?.notifications;
    a.gpu_wait(20, 64, 0x66)?;
    gpu_signal(&mut q2, &a.fence, 20)?;
    a.expect_marker(64, 0x66, "same-device GPU wait")?;
    ensure!(a.info()?.notifications == notified, "the same-device wait needed a notification");
    Ok(())
}

/// Messages of [`two_processes_on_two_devices_share_the_fence_by_fd`].
const OPENED: u64 = 1;

/// proves: XAD-03, XAD-07 — process A on one device creates the fence and sends its fd over a
/// UNIX socket to process B, which opens it on another device: A's GPU signal ends B's GPU
/// wait, B's GPU signal ends A's CPU wait.
fn two_processes_on_two_devices_share_the_fence_by_fd(path: &Path) -> TestResult {
    let mut a = End::create(Device::open(path)?, FenceKind::Default)?;
    let (other, _) = peer(path)?;
    let ch = Channel::new(WAIT)?;
    let child = proc::spawn("xad-importer", || {
        let dev = Device::open(&other)?;
        let ctx = dev.create_context()?;
        let (_, fd) = ch.recv(Side::Child)?;
        let fence = ctx.import_fence(fd.ok_or("no fd came")?.as_fd())?;
        let mut q = ctx.create_queue(&belfry_umd::QueueDesc::default())?;
        let buf = ctx.alloc(4096, 0)?;
        let mut cb = CommandBuffer::new();
        cb.wait_fence(&fence, 3)?;
        cb.write32(buf.gpu_va(), 0x33)?;
        q.submit(&cb)?;
        ch.send(Side::Child, OPENED, None)?;
        ensure!(wait_until(WAIT, || buf.read_u32(0).is_ok_and(|m| m == 0x33)), "B's GPU wait not released");
        gpu_signal(&mut q, &fence, 4)?;
        fence.wait(9, WAIT)?;
        Ok(())
    })?;
    let mut run = || -> TestResult {
        ch.send(Side::Parent, 0, Some(a.fence.export()?.as_fd()))?;
        ensure!(ch.recv(Side::Parent)?.0 == OPENED, "B did not open the fence");
        gpu_signal(&mut a.q, &a.fence, 3)?;
        a.fence.wait(4, WAIT)?;
        a.fence.signal(9)?;
        Ok(())
    };
    if let Err(e) = run() {
        let _ = child.kill();
        return Err(e);
    }
    child.join()
}

/// proves: XAD-10, XAD-12 — scenario 2a: a native fence opened on a device without native
/// fences is a monitored fence there; the native device's GPU and CPU signals release that
/// device's module-held GPU waits and its CPU waits, once the module propagates them.
fn scenario_2a_native_signals_release_a_non_native_devices_waits(path: &Path) -> TestResult {
    let (_, native) = peer(path)?;
    let mut n = End::create(native, FenceKind::Default)?;
    let mut m = End::open(Device::open(path)?, &n)?;
    ensure!(m.info()?.native == 0, "opened as a native fence on a device without native fences");
    ensure!(m.fence.kind() == FenceKind::Monitored, "the library sees {:?}", m.fence.kind());
    table(&mut m, &mut n, 1)?;
    Ok(())
}

/// proves: XAD-11, XAD-13 — scenario 2b: a monitored cross-adapter fence created on the device
/// without native fences opens as a native fence on the native device; that device's GPU
/// (`FENCE_WAIT` in a user-mode queue) and CPU waits are released by the non-native device's
/// software signal packets and CPU signals, propagated by the module.
fn scenario_2b_non_native_signals_release_a_native_devices_waits(path: &Path) -> TestResult {
    let mut m = End::create(Device::open(path)?, FenceKind::Monitored)?;
    let mut n = End::open(peer(path)?.1, &m)?;
    ensure!(n.info()?.native == 1, "a monitored fence opened on a native device is not native there");
    ensure!(m.info()?.native == 0, "created monitored, native on its own device");
    table(&mut n, &mut m, 1)?;
    Ok(())
}

/// proves: XAD-14 — on a native device's kernel-mode queue a cross-adapter fence behaves as on
/// a non-native device: `QUEUE_WAIT_FENCE` holds the work in the module (released when the
/// other device's signal is propagated) and `QUEUE_SIGNAL_FENCE` is a software signal (refused
/// for a native fence otherwise), which reaches the other device's GPU wait.
fn kernel_mode_queues_use_the_non_native_paths(path: &Path) -> TestResult {
    let mut a = End::create(Device::open(path)?, FenceKind::Default)?;
    let b = End::open(peer(path)?.1, &a)?;
    let mut kq = kernel_queue(&b.ctx)?;
    kq.wait_fence(&b.fence, 2)?;
    let mut cb = CommandBuffer::new();
    cb.write32(b.buf.va_at(8)?, 0x14)?;
    kq.submit(&cb)?;
    std::thread::sleep(crate::support::HOLD);
    ensure!(b.buf.read_u32(8)? != 0x14, "held work ran early");
    a.gpu_signal(2)?;
    b.expect_marker(8, 0x14, "held kernel-mode work")?;
    let plain = b.ctx.create_fence(FenceKind::Default, 0, 0)?;
    expect_errno(kq.software_signal(&plain, 1), libc::EINVAL, "software signal of a native fence")?;
    a.gpu_wait(3, 16, 0x15)?;
    kq.software_signal(&b.fence, 3)?;
    a.expect_marker(16, 0x15, "GPU wait after a software signal on the other device")?;
    Ok(())
}

/// A process holding cross-adapter fences on both devices is killed while its wait is
/// pending: each device's side goes with its last handle (the counts return to their baseline
/// on both devices), while a fence another process still holds keeps working between the
/// devices it is left on.
fn a_killed_holder_releases_its_sides_and_the_rest_keeps_working(path: &Path) -> TestResult {
    let (other, _) = peer(path)?;
    let (dev_a, dev_b) = (Device::open(path)?, Device::open(&other)?);
    let (base_a, base_b) = (shared_counts(&dev_a)?, shared_counts(&dev_b)?);
    let keeper = End::create(Device::open(path)?, FenceKind::Default)?;
    let fd = keeper.fence.export()?;
    let ch = Channel::new(WAIT)?;
    let child = proc::spawn("xad-holder", || {
        let mine = End::create(Device::open(path)?, FenceKind::Default)?;
        let _mine_b = End::open(Device::open(&other)?, &mine)?;
        let (_, fd) = ch.recv(Side::Child)?;
        let ctx = Device::open(&other)?.create_context()?;
        let shared = ctx.import_fence(fd.ok_or("no fd")?.as_fd())?;
        ch.send(Side::Child, OPENED, None)?;
        // Killed while waiting.
        shared.wait(1000, WAIT)?;
        Ok(())
    })?;
    ch.send(Side::Parent, 0, Some(fd.as_fd()))?;
    drop(fd);
    ensure!(ch.recv(Side::Parent)?.0 == OPENED, "the holder did not open the fences");
    ensure!(keeper.info()?.devices == 2, "the shared fence is open on {} devices", keeper.info()?.devices);
    child.kill()?;
    let gone = wait_until(WAIT, || keeper.info().is_ok_and(|i| i.devices == 1));
    ensure!(gone, "the killed holder's side is still there: {:?}", keeper.info()?);
    keeper.fence.signal(5)?;
    keeper.fence.wait(5, WAIT)?;
    drop(keeper);
    let back = wait_until(WAIT, || {
        shared_counts(&dev_a).is_ok_and(|c| c == base_a) && shared_counts(&dev_b).is_ok_and(|c| c == base_b)
    });
    ensure!(
        back,
        "counts {:?} / {:?}, baselines {base_a:?} / {base_b:?}",
        shared_counts(&dev_a)?,
        shared_counts(&dev_b)?
    );
    Ok(())
}

/// A device unbound while a cross-adapter fence is open on it leaves the fence: the other
/// device keeps signalling and waiting on it (CPU and GPU), the unbound device's calls end with
/// `ENODEV`, and after the device is bound again every count is back.
fn an_unbound_device_leaves_the_fence_to_the_others(path: &Path) -> TestResult {
    let (_, other) = peer(path)?;
    let base = shared_counts(&other)?;
    let mut keeper = End::create(other, FenceKind::Default)?;
    let rebinding = Rebinding::new(path)?;
    {
        let gone = End::open(Device::open(path)?, &keeper)?;
        rebinding.unbind()?;
        expect_errno(gone.fence.signal(3), libc::ENODEV, "a signal on the unbound device")?;
        keeper.gpu_wait(4, 0, 0x44)?;
        keeper.fence.signal(4)?;
        keeper.expect_marker(0, 0x44, "GPU wait on the device left")?;
        keeper.gpu_signal(6)?;
        keeper.fence.wait(6, WAIT)?;
    }
    rebinding.bind()?;
    ensure!(keeper.info()?.devices == 1, "open on {} devices after the other went", keeper.info()?.devices);
    drop(keeper);
    let dev = Device::open(peer(path)?.0)?;
    ensure!(shared_counts(&dev)? == base, "counts {:?}, baseline {base:?}", shared_counts(&dev)?);
    Ok(())
}

/// A device lost while a cross-adapter fence is open on it (the test-only `mailbox-stall`: its
/// mailbox stops answering and, after the mailbox timeout, shortened for the test, the module's
/// device-lost path unbinds it and binds it again by itself) leaves the fence to the other device: the lost side's calls end with `ENODEV`, the
/// other device keeps signalling and waiting on the fence (CPU and GPU), the fence is then open
/// on that device alone, and once every handle is closed its counts are back at their baseline.
fn a_lost_device_leaves_the_fence_to_the_others(path: &Path) -> TestResult {
    let _timeout = crate::support::param::silent_device_mailbox_timeout()?;
    let (_, other) = peer(path)?;
    let base = shared_counts(&other)?;
    let mut keeper = End::create(other, FenceKind::Default)?;
    {
        let mut lost = End::open(Device::open(path)?, &keeper)?;
        ensure!(keeper.info()?.devices == 2, "open on {} devices, expected 2", keeper.info()?.devices);
        let mut stall = CommandBuffer::new();
        stall.notify(belfry_abi::regs::MAILBOX_STALL_TOKEN)?;
        let v = lost.q.submit(&stall)?;
        ensure!(wait_until(WAIT, || lost.q.completed() >= v), "the NOTIFY did not run");
        let unbound = wait_until(Duration::from_secs(20), || {
            lost.dev.create_context().is_err_and(|e| e.errno() == Some(libc::ENODEV))
        });
        ensure!(unbound, "the lost device's old binding still answers");
        expect_errno(lost.fence.signal(3), libc::ENODEV, "a signal through the lost device")?;
        keeper.gpu_wait(4, 0, 0x45)?;
        keeper.fence.signal(4)?;
        keeper.expect_marker(0, 0x45, "GPU wait on the device left")?;
        keeper.gpu_signal(6)?;
        keeper.fence.wait(6, WAIT)?;
    }
    let left = wait_until(WAIT, || keeper.info().is_ok_and(|i| i.devices == 1));
    ensure!(left, "after the loss the fence is open on {} devices", keeper.info()?.devices);
    drop(keeper);
    let dev = Device::open(peer(path)?.0)?;
    ensure!(shared_counts(&dev)? == base, "counts {:?}, baseline {base:?}", shared_counts(&dev)?);
    // The lost device comes back for the tests after this one.
    ensure!(wait_until(REPROBE, || Device::open(path).is_ok()), "{} did not come back", path.display());
    Ok(())
}

/// What `count` + 1 GPU signals cost the waiting device: the notifications it received and
/// the payloads announced into its peer-signal page.
struct Cost {
    notifications: u64,
    payloads: u32,
}

/// `count` GPU waits on `waiter`, queued in order and held together for [`HOLD`] (the first
/// parks the rest behind it), each then released by a GPU signal on `signaller` (each signal
/// once the work behind the previous wait ran, so the GPU is parked on that very wait), then a
/// CPU wait on `waiter` released by one more; what they cost `waiter`. The CPU wait is released
/// by the signalling device's interrupt thread, after its propagation decided about every
/// earlier signal (and after the signalling device announced them all), so the counts are final.
fn cost_of_gpu_signals(waiter: &mut End, signaller: &mut End, first: u64, count: u64) -> Result<Cost, crate::Error> {
    let before = waiter.info()?;
    let marked = |value: u64| {
        // CAST: a marker of the value's low bits.
        ((value % 512) * 8, 0x1500_0000 | (value as u32 & 0xffff))
    };
    for value in first..first + count {
        let (offset, marker) = marked(value);
        waiter.queue_gpu_wait(value, offset, marker)?;
    }
    std::thread::sleep(HOLD);
    for value in first..first + count {
        let (offset, marker) = marked(value);
        waiter.expect_held(value, offset, marker)?;
    }
    for value in first..first + count {
        let (offset, marker) = marked(value);
        signaller.gpu_signal(value)?;
        waiter.expect_marker(offset, marker, "a GPU wait for another device's GPU signal")?;
    }
    let last = first + count;
    std::thread::scope(|s| -> TestResult {
        let f = &waiter.fence;
        let t = s.spawn(move || f.wait(last, WAIT));
        expect_pending(&waiter.fence, 1)?;
        signaller.gpu_signal(last)?;
        t.join().map_err(|_| "the waiting thread panicked")??;
        Ok(())
    })?;
    let after = waiter.info()?;
    Ok(Cost {
        notifications: after.notifications - before.notifications,
        payloads: after.peer_payloads.wrapping_sub(before.peer_payloads),
    })
}

/// proves: XAD-15 — peer signals: between two devices with `CAPS.peer_signals`, a GPU wait for
/// a cross-adapter fence that a GPU packet on the other device signals is released by the
/// signalling GPU's payload in the waiting device's peer-signal page (`XAD_INFO.peer_payloads`
/// counts one per signal) — the module sends the waiting device no notification
/// (`XAD_INFO.notifications` does not move), in both directions — while the module still
/// releases the CPU waiters there. The same waits and signals from the default device 0, which
/// has no peer signals, announce nothing and cost notifications as before (XAD-07).
fn a_gpu_signal_wakes_a_peer_gpus_wait_without_a_notification(path: &Path) -> TestResult {
    let mut a = End::create(peer_signals_partner(path)?.1, FenceKind::Default)?;
    let mut b = End::open(Device::open(path)?, &a)?;
    for (what, cost) in
        [("to", cost_of_gpu_signals(&mut b, &mut a, 1, 4)?), ("from", cost_of_gpu_signals(&mut a, &mut b, 10, 4)?)]
    {
        ensure!(cost.notifications == 0, "{} notifications for 5 GPU signals {what} a peer", cost.notifications);
        ensure!(cost.payloads >= 5, "{} payloads announced for 5 GPU signals {what} a peer", cost.payloads);
    }
    let mut plain = End::create(peer(path)?.1, FenceKind::Default)?;
    let mut c = End::open(Device::open(path)?, &plain)?;
    let without = cost_of_gpu_signals(&mut c, &mut plain, 1, 4)?;
    ensure!(without.notifications > 0, "no notification for 5 GPU signals from a device without peer signals");
    ensure!(without.payloads == 0, "{} payloads from a device without peer signals", without.payloads);
    Ok(())
}

/// A device with peer signals unbound and bound again leaves and rejoins the peer-signal
/// pages: the other device drops its old page when it unbinds (the module frees it only
/// then) and is given its new one when it binds, so GPU waits are again released across the
/// pair by payloads, without a notification, both ways; a fence open with device 0 meanwhile
/// keeps working.
fn a_rebound_peer_device_gets_new_peer_signal_pages(path: &Path) -> TestResult {
    let (_, partner) = peer_signals_partner(path)?;
    let partner_path = partner.path().to_path_buf();
    let mut keeper = End::create(partner, FenceKind::Default)?;
    let mut plain = End::open(peer(path)?.1, &keeper)?;
    let rebinding = Rebinding::new(path)?;
    {
        let mut gone = End::open(Device::open(path)?, &keeper)?;
        let cost = cost_of_gpu_signals(&mut gone, &mut keeper, 1, 2)?;
        ensure!(
            cost.notifications == 0 && cost.payloads >= 3,
            "before the unbind: {} notifications, {} payloads",
            cost.notifications,
            cost.payloads
        );
        rebinding.unbind()?;
        keeper.gpu_signal(4)?;
        plain.fence.wait(4, WAIT)?;
        plain.gpu_wait(5, 0, 0x55)?;
        keeper.gpu_signal(5)?;
        plain.expect_marker(0, 0x55, "GPU wait on device 0 after the unbind")?;
    }
    rebinding.bind()?;
    let mut a = End::create(Device::open(&partner_path)?, FenceKind::Default)?;
    let mut b = End::open(Device::open(path)?, &a)?;
    for (what, cost) in
        [("to", cost_of_gpu_signals(&mut b, &mut a, 1, 2)?), ("from", cost_of_gpu_signals(&mut a, &mut b, 10, 2)?)]
    {
        ensure!(
            cost.notifications == 0 && cost.payloads >= 3,
            "{what} the rebound device: {} notifications, {} payloads",
            cost.notifications,
            cost.payloads
        );
    }
    Ok(())
}

/// A cross-adapter DEFAULT fence of context `ctx` on device file `dev`, made, exported, asked
/// about (`XAD_INFO`) and destroyed (on drop) through the ioctls alone: the library would also
/// map its CurrentValue page for the CPU, and the signalling side of
/// [`a_process_signalling_many_cross_adapter_fences_does_not_saturate_the_other_device`] never
/// reads it (its GPU signals it by its GPU VA). An mmap and a munmap for each of its 256 fences
/// are dear on the debug kernel.
struct BareCrossAdapterFence<'a> {
    dev: &'a Device,
    handle: u32,
    gpu_va: u64,
}

impl<'a> BareCrossAdapterFence<'a> {
    fn create(dev: &'a Device, ctx: u32) -> Result<Self, crate::Error> {
        let mut a = uapi::CreateFence {
            context: ctx,
            kind: uapi::FENCE_KIND_DEFAULT,
            flags: uapi::FENCE_CROSS_ADAPTER,
            ..Default::default()
        };
        raw::ioctl_on(dev.as_fd(), uapi::IOCTL_CREATE_FENCE, &mut a)
            .map_err(|e| format!("CREATE_FENCE (cross-adapter): {}", raw::errno_name(e)))?;
        Ok(BareCrossAdapterFence { dev, handle: a.handle, gpu_va: a.gpu_va })
    }

    fn export(&self) -> Result<std::os::fd::OwnedFd, crate::Error> {
        Ok(raw::export_fence_on(self.dev.as_fd(), self.handle)
            .map_err(|e| format!("EXPORT_FENCE: {}", raw::errno_name(e)))?)
    }

    /// `XAD_INFO.propagations`.
    fn propagations(&self) -> Result<u64, crate::Error> {
        let mut a = belfry_abi::uapi_debug::XadInfo { handle: self.handle, ..Default::default() };
        raw::ioctl_on(self.dev.as_fd(), belfry_abi::uapi_debug::IOCTL_XAD_INFO, &mut a)
            .map_err(|e| format!("XAD_INFO: {}", raw::errno_name(e)))?;
        Ok(a.propagations)
    }
}

impl Drop for BareCrossAdapterFence<'_> {
    fn drop(&mut self) {
        let mut h = uapi::Handle { handle: self.handle, pad: 0 };
        let _ = raw::ioctl_on(self.dev.as_fd(), uapi::IOCTL_DESTROY_FENCE, &mut h);
    }
}

/// Cross-adapter fences one process signals in each round of [`a_process_signalling_many_cross_adapter_fences_does_not_saturate_the_other_device`].
const LOAD_FENCES: usize = 256;
/// Rounds of signals of every one of them at least (then as long as the other process times,
/// up to [`LOAD_MAX_ROUNDS`]).
const LOAD_MIN_ROUNDS: u64 = 8;
/// Rounds at most.
const LOAD_MAX_ROUNDS: u64 = 200;
/// The value of the last round, which the waiters on the other device wait for.
const LOAD_FINAL: u64 = LOAD_MAX_ROUNDS + 1;
/// `FENCE_SIGNAL`s (or `FENCE_WAIT`s) in one command buffer (its slot is 4 KiB).
const LOAD_PER_BUFFER: usize = 64;
/// Timed `CREATE_CONTEXT`s and `WAIT_FENCE`s of the other process (each).
const LOAD_SAMPLES: usize = 100;

/// The 99th percentile of `samples` (sorted here).
fn p99(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len().saturating_sub(1) * 99 / 100).copied().unwrap_or_default()
}

/// Process Q of [`a_process_signalling_many_cross_adapter_fences_does_not_saturate_the_other_device`]:
/// on `path`, times [`LOAD_SAMPLES`] `CREATE_CONTEXT`s and as many `WAIT_FENCE`s on a fence of
/// its own that its own user-mode queue signals (from the submission to the wait's return),
/// posts `timed`, and keeps both going until `stop`; every wait must end. Prints the p99s.
fn timed_neighbour(path: &Path, started: &proc::Signal, timed: &proc::Signal, stop: &proc::Signal) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut q = crate::support::work::user_queue(&ctx)?;
    let (mut creates, mut waits) = (Vec::new(), Vec::new());
    started.post(1);
    let mut n = 0;
    while !(creates.len() >= LOAD_SAMPLES && stop.try_take()) {
        let t = Instant::now();
        let c = dev.create_context()?;
        creates.push(t.elapsed());
        drop(c);
        n += 1;
        let t = Instant::now();
        gpu_signal(&mut q, &fence, n)?;
        fence.wait(n, WAIT).map_err(|e| format!("Q's wait {n} on its own fence: {e}"))?;
        waits.push(t.elapsed());
        if creates.len() == LOAD_SAMPLES {
            timed.post(1);
        }
    }
    let (pc, pw) = (p99(&mut creates), p99(&mut waits));
    println!(
        "xad load: Q's CREATE_CONTEXT p99 {} us, WAIT_FENCE p99 {} us, over {} of each (every wait ended)",
        pc.as_micros(),
        pw.as_micros(),
        creates.len()
    );
    Ok(())
}

/// One process on one device cannot saturate another: process P signals
/// [`LOAD_FENCES`] cross-adapter fences open on two devices from its GPU (a user-mode queue's
/// command buffers of `FENCE_SIGNAL` packets, round after round) while process Q on the second
/// device times `CREATE_CONTEXT` and `WAIT_FENCE` on a fence of its own. Each interrupt-thread
/// pass of the first device tells the second at most once, however many fences moved in it:
/// the notifications the second device receives (`XAD_INFO.notifications` summed over the
/// fences) are at most an eighth of the fence changes propagated (`XAD_INFO.propagations`
/// summed), far from one per fence. No wake-up
/// is lost: every one of Q's waits ends, and on the second device a CPU wait (`WAIT_FENCES`,
/// all of them) and a GPU wait (a queue's `FENCE_WAIT` on each) for every fence's last value
/// end. Q's p99s are printed as figures: the TCG guest on a shared host sets them, not the
/// module.
fn a_process_signalling_many_cross_adapter_fences_does_not_saturate_the_other_device(path: &Path) -> TestResult {
    let (other, _) = peer(path)?;
    let (started, timed, stop) = (proc::Signal::new()?, proc::Signal::new()?, proc::Signal::new()?);
    let (started_ref, timed_ref, stop_ref, other_ref) = (&started, &timed, &stop, &other);
    let q_process = proc::spawn("Q, timing on the second device", move || {
        timed_neighbour(other_ref, started_ref, timed_ref, stop_ref)
    })?;
    let run = || -> TestResult {
        let a = Device::open(path)?;
        let b = Device::open(&other)?;
        let (ctx_a, ctx_b) = (a.create_context()?, b.create_context()?);
        let mut on_a = Vec::with_capacity(LOAD_FENCES);
        let mut on_b = Vec::with_capacity(LOAD_FENCES);
        for _ in 0..LOAD_FENCES {
            let f = BareCrossAdapterFence::create(&a, ctx_a.handle())?;
            on_b.push(ctx_b.import_fence(f.export()?.as_fd())?);
            on_a.push(f);
        }
        // The GPU waits on the second device: one queue, a FENCE_WAIT for each fence's last
        // value, then a marker.
        let marks = ctx_b.alloc(4096, 0)?;
        let mut waiting = crate::support::work::user_queue(&ctx_b)?;
        for (i, chunk) in on_b.chunks(LOAD_PER_BUFFER).enumerate() {
            let mut cb = CommandBuffer::new();
            for f in chunk {
                cb.wait_fence(f, LOAD_FINAL)?;
            }
            if (i + 1) * LOAD_PER_BUFFER >= LOAD_FENCES {
                cb.write32(marks.gpu_va(), 0x16)?;
            }
            waiting.submit(&cb)?;
        }
        let mut signalling = crate::support::work::user_queue(&ctx_a)?;
        // One round: every fence signalled `value`, in command buffers of LOAD_PER_BUFFER.
        let mut round = |value: u64| -> TestResult {
            let mut done = 0;
            for chunk in on_a.chunks(LOAD_PER_BUFFER) {
                let mut cb = CommandBuffer::new();
                for f in chunk {
                    cb.fence_signal(f.gpu_va, value, None)?;
                }
                done = signalling.submit(&cb)?;
            }
            signalling.wait(done, WAIT)?;
            Ok(())
        };
        std::thread::scope(|s| -> TestResult {
            // The CPU waits on the second device, all pending before the first signal.
            let waiters: Vec<_> = on_b
                .chunks(uapi_sync_max())
                .map(|chunk| {
                    s.spawn(move || {
                        let points: Vec<_> = chunk.iter().map(|f| f.point(LOAD_FINAL)).collect();
                        belfry_umd::wait_all(&points, belfry_umd::Deadline::after(LOAD_WAIT))
                    })
                })
                .collect();
            let pending = wait_until(WAIT, || on_b.iter().all(|f| f.info().is_ok_and(|i| i.pending_waits == 1)));
            ensure!(pending, "the CPU waits on the second device are not all pending");
            started.take()?;
            let notified = |fences: &[belfry_umd::Fence]| -> Result<u64, crate::Error> {
                fences.iter().try_fold(0, |sum, f| Ok(sum + f.xad_info()?.notifications))
            };
            let (notified0, interrupts0) = (notified(&on_b)?, a.wake_path()?.interrupts);
            let commands0 = b.mailbox_timing()?.commands;
            let changes0 = on_a.iter().try_fold(0, |sum, f| Ok::<_, crate::Error>(sum + f.propagations()?))?;
            let t0 = Instant::now();
            let mut rounds = 0;
            while rounds < LOAD_MAX_ROUNDS - 1 && (rounds < LOAD_MIN_ROUNDS || !timed.try_take()) {
                rounds += 1;
                round(rounds)?;
            }
            round(LOAD_FINAL)?;
            for (i, w) in waiters.into_iter().enumerate() {
                w.join().map_err(|_| "a CPU waiter panicked")?.map_err(|e| format!("CPU waits {i}: {e}"))?;
            }
            let elapsed = t0.elapsed();
            let released = wait_until(WAIT, || marks.read_u32(0).is_ok_and(|m| m == 0x16));
            let (notifications, interrupts) = (notified(&on_b)? - notified0, a.wake_path()?.interrupts - interrupts0);
            let changes = on_a.iter().try_fold(0, |sum, f| Ok::<_, crate::Error>(sum + f.propagations()?))? - changes0;
            let commands = b.mailbox_timing()?.commands - commands0;
            let signals = (rounds + 1) * LOAD_FENCES as u64;
            println!(
                "xad load: {signals} GPU signals of {LOAD_FENCES} fences in {} ms; the second device got {notifications} \
                 notifications for {changes} fence changes ({commands} mailbox commands, Q's included), the first device took {interrupts} interrupts",
                elapsed.as_millis()
            );
            ensure!(released, "the GPU wait on the second device for every fence's last value was not released");
            ensure!(
                on_b.iter().all(|f| f.value() == Some(LOAD_FINAL)),
                "a fence on the second device does not read its last value"
            );
            // One notification per pass, not per fence: a pass takes the records of many of a
            // command buffer's 64 signals, so the fence changes propagated far outnumber the
            // notifications. Told per fence, the second device got one notification for every
            // two propagations counted (1,505 for 3,025); told per pass, 7 in a whole run.
            ensure!(
                notifications * 8 <= changes,
                "{notifications} notifications to the second device for {changes} fence changes propagated \
                 ({signals} signals, {interrupts} interrupts of the first device): one per fence, not per pass"
            );
            Ok(())
        })
    };
    let result = run();
    stop.post(1);
    // Q is stopped whatever the outcome; on a failure here it is killed rather than awaited.
    if result.is_err() {
        let _ = q_process.kill();
        return result;
    }
    q_process.join()
}

/// Entries of one `WAIT_FENCES`.
fn uapi_sync_max() -> usize {
    usize::try_from(belfry_abi::uapi_sync::MAX_WAIT_FENCES).unwrap_or(1)
}

/// How long the CPU waits on the second device may last: every round, then the last.
const LOAD_WAIT: Duration = Duration::from_secs(120);

/// The tests of this family.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(cross_adapter_native_fences_are_default_fences, TwoNativeDevices, ["XAD-01", "XAD-02"]),
        test_entry!(both_devices_map_the_one_current_value_page, TwoNativeDevices, ["XAD-03"]),
        test_entry!(scenario_1_native_devices_release_each_others_waits, TwoNativeDevices, ["XAD-07", "XAD-09"]),
        test_entry!(a_cpu_signal_is_propagated_to_the_other_device, TwoNativeDevices, ["XAD-08"]),
        test_entry!(
            cross_adapter_signals_always_interrupt_and_same_gpu_waits_stay_on_the_gpu,
            TwoNativeDevices,
            ["XAD-05", "XAD-06"]
        ),
        test_entry!(two_processes_on_two_devices_share_the_fence_by_fd, TwoNativeDevices, ["XAD-03", "XAD-07"]),
        test_entry!(
            scenario_2a_native_signals_release_a_non_native_devices_waits,
            NoNativeFences,
            ["XAD-10", "XAD-12"]
        ),
        test_entry!(
            scenario_2b_non_native_signals_release_a_native_devices_waits,
            NoNativeFences,
            ["XAD-11", "XAD-13"]
        ),
        test_entry!(kernel_mode_queues_use_the_non_native_paths, TwoNativeDevices, ["XAD-14"]),
        test_entry!(a_killed_holder_releases_its_sides_and_the_rest_keeps_working, TwoNativeDevices, []),
        test_entry!(an_unbound_device_leaves_the_fence_to_the_others, TwoNativeDevices, []),
        test_entry!(a_lost_device_leaves_the_fence_to_the_others, MailboxStall, []),
        test_entry!(a_gpu_signal_wakes_a_peer_gpus_wait_without_a_notification, PeerSignals, ["XAD-15"]),
        test_entry!(a_rebound_peer_device_gets_new_peer_signal_pages, PeerSignals, []),
        test_entry!(
            a_process_signalling_many_cross_adapter_fences_does_not_saturate_the_other_device,
            TwoNativeDevices,
            []
        ),
    ]
}

//! RING-xx: Ring buffer and allocation lifetimes (RULES.md § Ring buffer and allocation lifetimes).

use std::path::Path;

use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_umd::Device;

use crate::harness::proc::{self, Signal};
use crate::harness::raw::{errno_name, RawDev};
use crate::support::binding::Rebinding;
use crate::support::fixture::Fixture;
use crate::support::work::{expect_status, expect_u32, kernel_queue, user_queue, write32};
use crate::support::{expect_errno, oops_or_warning_taint, WAIT};
use crate::{Test, TestResult};

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

/// proves: RING-01 — a user-mode queue is created from ring and ring-control allocations made
/// before it and named in CREATE_QUEUE: a missing one (0 or unknown), another process's or a
/// freed one is ENOENT; one of another context, a ring too small for its entries or the same
/// allocation as both is EINVAL; named and valid, the queue is created.
fn queue_creation_needs_both_ring_allocations_named(path: &Path) -> TestResult {
    let d = RawDev::open(path)?;
    let other = RawDev::open(path)?;
    let e = errno_name;
    let ctx = d.create_context().map_err(e)?;
    let ctx2 = d.create_context().map_err(e)?;
    let ring = d.alloc(ctx, 4096).map_err(e)?.handle;
    let control = d.alloc(ctx, 4096).map_err(e)?.handle;
    let elsewhere = d.alloc(ctx2, 4096).map_err(e)?.handle;
    let freed = d.alloc(ctx, 4096).map_err(e)?.handle;
    d.handle_op(uapi::IOCTL_FREE, freed).map_err(e)?;
    let octx = other.create_context().map_err(e)?;
    let mut foreign = 0;
    for _ in 0..16 {
        foreign = other.alloc(octx, 4096).map_err(e)?.handle; // Beyond every handle of `d`.
    }
    let cases: [(&str, u32, u32, u32, i32); 9] = [
        ("no ring", 0, control, 16, libc::ENOENT),
        ("no ring control", ring, 0, 16, libc::ENOENT),
        ("an unknown ring", 999, control, 16, libc::ENOENT),
        ("another process's ring", foreign, control, 16, libc::ENOENT),
        ("another process's ring control", ring, foreign, 16, libc::ENOENT),
        ("a freed ring", freed, control, 16, libc::ENOENT),
        ("a ring of another context", elsewhere, control, 16, libc::EINVAL),
        ("a ring too small for 512 entries", ring, control, 512, libc::EINVAL),
        ("one allocation as both", ring, ring, 16, libc::EINVAL),
    ];
    for (what, r, c, entries, want) in cases {
        match d.create_queue(ctx, Some((r, c)), entries) {
            Err(got) if got == want => {}
            other => return Err(format!("CREATE_QUEUE with {what}: {other:?}, expected {}", e(want)).into()),
        }
    }
    let q = d.create_queue(ctx, Some((ring, control)), 16).map_err(e)?;
    ensure!(q.handle != 0, "no queue handle");
    Ok(())
}

/// proves: RING-04 — device termination: unbinding the device while a process holds a context,
/// a user-mode queue with its connected doorbell and ring allocations and a kernel-mode queue
/// ends them all: the doorbell reads DISCONNECTED_ABORT (its mapping on the dummy page: a
/// submission rings it harmlessly and fails), CONNECT_DOORBELL, SUBMIT and CREATE_CONTEXT give
/// ENODEV, the process drops everything and exits cleanly, no oops or warning taints the
/// kernel, and the device binds again and runs work.
fn unbinding_the_device_ends_every_queue_doorbell_and_ring_allocation(path: &Path) -> TestResult {
    let binding = Rebinding::new(path)?;
    let taint = oops_or_warning_taint()?;
    let (ready, go) = (Signal::new()?, Signal::new()?);
    let (ready_ref, go_ref) = (&ready, &go);
    let child = proc::spawn("process of an unbound device", move || {
        let built = (|| -> Result<_, crate::Error> {
            let Fixture { dev, ctx, buf, q: mut um } = Fixture::connected(path)?;
            let v = write32(&mut um, buf.gpu_va(), 0xDE40)?;
            um.wait(v, WAIT)?;
            let mut km = kernel_queue(&ctx)?;
            let v = write32(&mut km, buf.va_at(4)?, 0xDE41)?;
            km.wait(v, WAIT)?;
            Ok((um, km, buf, ctx, dev))
        })();
        ready_ref.post(1);
        let (mut um, mut km, buf, ctx, dev) = built?;
        go_ref.take()?; // The device is unbound now.
        expect_status(&um, DoorbellStatus::DisconnectedAbort, "after the unbind")?;
        expect_errno(um.connect_doorbell(), libc::ENODEV, "CONNECT_DOORBELL after the unbind")?;
        expect_errno(write32(&mut km, buf.gpu_va(), 1), libc::ENODEV, "SUBMIT after the unbind")?;
        expect_errno(dev.create_context(), libc::ENODEV, "CREATE_CONTEXT after the unbind")?;
        let lost = write32(&mut um, buf.gpu_va(), 2);
        ensure!(lost.is_err(), "a user-mode submission after the unbind succeeded: {lost:?}");
        drop((um, km, buf, ctx, dev));
        Ok(())
    })?;
    ready.take()?;
    let unbound = binding.unbind();
    go.post(1);
    let joined = child.join();
    unbound?;
    joined?;
    binding.bind()?;
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = user_queue(&ctx)?;
    let v = write32(&mut q, buf.gpu_va(), 0xB1ED)?;
    q.wait(v, WAIT)?;
    expect_u32(&buf, 0, 0xB1ED, "work after re-binding")?;
    let now = oops_or_warning_taint()?;
    ensure!(now == taint, "the kernel is tainted by an oops or a warning ({taint:#x} -> {now:#x})");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            ring_allocations_are_held_by_the_queue_and_freed_only_by_the_library,
            Default,
            ["RING-02", "RING-03", "DB-18"]
        ),
        test_entry!(queue_creation_needs_both_ring_allocations_named, Default, ["RING-01"]),
        test_entry!(unbinding_the_device_ends_every_queue_doorbell_and_ring_allocation, Default, ["RING-04"]),
    ]
}

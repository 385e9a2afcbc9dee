//! The device unbound through sysfs while processes wait on its fences (no rule family): every
//! kind of CPU wait ends, as the blocking ones do — a pollable wait (`FenceEvent`) becomes ready
//! and an eventfd registered for a fence wait is signaled once, each reporting `ENODEV` — and
//! the waits of another device are left alone.

use std::os::fd::AsFd;
use std::path::Path;

use belfry_umd::{Device, FenceKind};

use crate::support::binding::Rebinding;
use crate::support::gone::{expect_pollable_gone, expect_status_gone, read_ends_across, BlockingEventfd};
use crate::support::xad::peer;
use crate::support::{expect_errno, WAIT};
use crate::{Test, TestResult};

/// A pollable wait (`FenceEvent`, polled as an event loop would) on a DEFAULT and on a
/// MONITORED fence, pending while their device is unbound through sysfs: each becomes ready
/// within [`WAIT`] and reports `ENODEV` (the blocking wait's answer), and a pollable wait
/// registered after the unbind is refused with `ENODEV` instead of staying pending for good. A
/// pollable wait on the other device stays pending and ends on its own fence's signal. Runs on
/// two native devices (`Needs::TwoNativeDevices`): the unbound one, and device 0 beside it.
fn a_pollable_wait_ends_with_enodev_when_its_device_is_unbound(path: &Path) -> TestResult {
    let (_, other) = peer(path)?;
    let octx = other.create_context()?;
    let ofence = octx.create_fence(FenceKind::Default, 0, 0)?;
    let oev = ofence.event(1)?;
    let rebinding = Rebinding::new(path)?;
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let native = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let monitored = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let (en, em) = (native.event(1)?, monitored.event(1)?);
    ensure!(!en.is_ready()? && !em.is_ready()?, "a pollable wait of an unreached value was ready");
    rebinding.unbind()?;
    let ended = expect_pollable_gone(&en, "the pollable wait on a DEFAULT fence")
        .and_then(|()| expect_pollable_gone(&em, "the pollable wait on a MONITORED fence"))
        .and_then(|()| expect_errno(monitored.event(2), libc::ENODEV, "a pollable wait registered after the unbind"));
    let other_ready = oev.is_ready();
    drop((en, em, native, monitored, ctx, dev));
    rebinding.bind()?;
    ended?;
    ensure!(!other_ready?, "unbinding a device made another device's pollable wait ready");
    ofence.signal(1)?;
    ensure!(oev.wait(WAIT)?, "the other device's pollable wait did not end on its fence's signal");
    Ok(())
}

/// An eventfd registered for a wait of a MONITORED fence (`Fence::notify`, the raw
/// `WAIT_FENCE_EVENTFD`), a thread blocked reading it, while the device is unbound through
/// sysfs: the read returns within [`WAIT`], the eventfd signaled once, and the wait's status (a
/// `WAIT_FENCES` that does not sleep) is `ENODEV`; a registration after the unbind is refused
/// with `ENODEV` instead of staying pending for good.
fn an_eventfd_wait_is_signaled_and_reports_enodev_when_its_device_is_unbound(path: &Path) -> TestResult {
    let rebinding = Rebinding::new(path)?;
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let fence = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let ev = BlockingEventfd::new()?;
    fence.notify(1, ev.as_fd())?;
    let ended = read_ends_across(&ev, || rebinding.unbind(), "the unbind")
        .and_then(|()| expect_status_gone(&fence, 1, "the status of the eventfd wait after the unbind"))
        .and_then(|()| expect_errno(fence.notify(2, ev.as_fd()), libc::ENODEV, "WAIT_FENCE_EVENTFD after the unbind"));
    drop((fence, ctx, dev));
    rebinding.bind()?;
    ended
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(a_pollable_wait_ends_with_enodev_when_its_device_is_unbound, TwoNativeDevices, []),
        test_entry!(an_eventfd_wait_is_signaled_and_reports_enodev_when_its_device_is_unbound, Default, []),
    ]
}

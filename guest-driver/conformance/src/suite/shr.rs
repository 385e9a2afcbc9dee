//! SHR-xx: Shared fences and handles (RULES.md § Shared fences and handles).

use std::os::fd::AsFd;
use std::path::Path;

use belfry_abi::uapi;
use belfry_umd::{Device, FenceKind};

use crate::harness::channel::{Channel, Side};
use crate::harness::proc;
use crate::support::fences::{expect_counts, gpu_signal, shared_counts};
use crate::support::work::user_queue;
use crate::support::{expect_errno, WAIT};
use crate::{Test, TestResult};

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
/// is not an exported fence (an eventfd) is refused; an exported fd keeps the fence alive after
/// its creator destroyed it, and the counts return to baseline. (A fence of another device:
/// [`a_fence_fd_of_another_device_is_refused_with_exdev`].)
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

/// A shareable fence's exported fd is refused by another device's context with `EXDEV`, and the
/// fence stays usable on its own device. Runs on two native devices (`Needs::TwoNativeDevices`:
/// the per-queue device, with the default device 0 beside it).
fn a_fence_fd_of_another_device_is_refused_with_exdev(path: &Path) -> TestResult {
    let (_, other) = crate::support::xad::peer(path)?;
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let shared = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 7)?;
    let fd = shared.export()?;
    let octx = other.create_context()?;
    expect_errno(octx.import_fence(fd.as_fd()), libc::EXDEV, "import on another device")?;
    let again = ctx.import_fence(fd.as_fd())?;
    ensure!(again.value() == Some(7), "imported on its own device after the refusal: {:?}", again.value());
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            shared_fence_lives_while_any_process_holds_it,
            Default,
            ["SHR-01", "SHR-02", "SHR-03", "SHR-04", "SHR-05", "NF-12"]
        ),
        test_entry!(fence_fds_are_refused_unless_they_name_a_fence_of_this_device, Default, []),
        test_entry!(a_fence_fd_of_another_device_is_refused_with_exdev, TwoNativeDevices, []),
    ]
}

//! The library in the Linux fence world (no rule family): a monitored fence value
//! exported as a `sync_file` (`EXPORT_SYNC_FILE`, `Fence::export_sync_file`) that `poll()`
//! sees signalled by a kernel-mode queue, refused for native fences, and `EOPNOTSUPP` with
//! the caps flag clear on a kernel without `sync_file`, and ending with `ETIMEDOUT` when nothing
//! signals it (in D3 too), with `ECANCELED` when only lost work was going to, and readable after the
//! module is unloaded; and `WAIT_FENCES` restarted by the
//! kernel under an `SA_RESTART` handler (`ERESTARTSYS`), `EINTR` without.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use belfry_abi::uapi;
use belfry_abi::uapi_sync::{self, WaitFenceEntry};
use belfry_umd::{Context, Deadline, Device, Fence, FenceKind, QueueMode};

use crate::harness::raw::RawDev;
use crate::support::binding::Rebinding;
use crate::support::fencelog::warm_queue;
use crate::support::fixture::open_context;
use crate::support::power::RuntimePmAllowed;
use crate::support::work::kernel_queue;
use crate::support::{expect_errno, HOLD, WAIT};
use crate::{Test, TestResult};

/// The autosuspend delay of the D3 test (ms).
const D3_DELAY_MS: u32 = 50;

/// `struct sync_file_info` (`include/uapi/linux/sync_file.h`).
#[repr(C)]
#[derive(Default)]
struct SyncFileInfo {
    name: [u8; 32],
    status: i32,
    flags: u32,
    num_fences: u32,
    pad: u32,
    sync_fence_info: u64,
}

/// `SYNC_IOC_FILE_INFO`: `_IOWR('>', 4, struct sync_file_info)`.
const SYNC_IOC_FILE_INFO: u32 = (3 << 30) | ((std::mem::size_of::<SyncFileInfo>() as u32) << 16) | (0x3E << 8) | 4;

/// A `sync_file`'s status: 1 signalled, 0 pending, a negative errno signalled with an error.
pub(super) fn sync_status(fd: BorrowedFd<'_>) -> Result<i32, crate::Error> {
    let mut info = SyncFileInfo::default();
    // SAFETY: `info` is a valid `sync_file_info` with `num_fences` 0 (no array is written).
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SYNC_IOC_FILE_INFO as _, &mut info) };
    if rc != 0 {
        return Err(format!("SYNC_IOC_FILE_INFO: {}", std::io::Error::last_os_error()).into());
    }
    Ok(info.status)
}

/// Whether `poll(2)` finds `fd` readable within `ms` (0: without waiting).
fn readable(fd: BorrowedFd<'_>, ms: i32) -> Result<bool, crate::Error> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    if rc < 0 {
        return Err(format!("poll: {}", std::io::Error::last_os_error()).into());
    }
    Ok(rc > 0 && p.revents & libc::POLLIN != 0)
}

/// Where the kernel lacks `sync_file` (`CAPS_FLAG_SYNC_FILE_EXPORT` clear, every export
/// `EOPNOTSUPP`, which the caller checked): the test did not run. Debian's distro kernel is
/// built without `CONFIG_SYNC_FILE`, the suite's debug kernel with it, which must pass it.
fn no_sync_file() -> TestResult {
    crate::skip_kernel_lacks("sync_file (CONFIG_SYNC_FILE): exports are EOPNOTSUPP, nothing else checked")
}

/// A new context of `path` and a monitored fence at 0 in it, where the kernel has `sync_file`;
/// `None` where it lacks it, once an export was seen to be `EOPNOTSUPP` (the caller SKIPs).
fn monitored_with_sync_file(path: &Path) -> Result<Option<(Device, Context, Fence)>, crate::Error> {
    let (dev, ctx) = open_context(path)?;
    let m = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    if dev.caps().sync_file_export() {
        return Ok(Some((dev, ctx, m)));
    }
    expect_errno(m.export_sync_file(1), libc::EOPNOTSUPP, "a sync_file export without CONFIG_SYNC_FILE")?;
    Ok(None)
}

/// `EXPORT_SYNC_FILE` where the kernel has `sync_file` (`CAPS_FLAG_SYNC_FILE_EXPORT` set):
/// a monitored fence's export at a value a kernel-mode queue will signal — behind the queue's
/// GPU wait on a native gate fence — is not readable for `poll()` until the gate's CPU signal
/// lets the queue's GPU `MONITORED_FENCE_SIGNAL` run, then is, with status 1 (the interrupt
/// thread's path: the gate's signal itself never looks at monitored fences); the same through
/// the module's software signal packet; a value already reached is readable at once; a pending
/// export ends with `-ECANCELED` when its fence is destroyed; a native (DEFAULT) fence is
/// refused with `EPERM` ("Indefinite DMA Fences"). Where the kernel lacks `sync_file`, the
/// flag is clear and every export, native or monitored, is `EOPNOTSUPP`: then SKIP.
fn sync_file_export_follows_a_kernel_mode_queue(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let m = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    let native = ctx.create_fence(FenceKind::Default, 0, 0)?;
    if !dev.caps().sync_file_export() {
        expect_errno(m.export_sync_file(1), libc::EOPNOTSUPP, "a sync_file export without CONFIG_SYNC_FILE")?;
        expect_errno(
            native.export_sync_file(1),
            libc::EOPNOTSUPP,
            "a native fence's sync_file export without CONFIG_SYNC_FILE",
        )?;
        return no_sync_file();
    }
    expect_errno(native.export_sync_file(1), libc::EPERM, "a native fence's sync_file export")?;
    // A native fence signalled by a user-mode queue stays refused even once signalled.
    let mut qu = warm_queue(&ctx, QueueMode::UserMode)?;
    qu.signal_fence(&native, 1)?;
    expect_errno(native.export_sync_file(1), libc::EPERM, "a user-mode-queue-signalled fence's export")?;

    // The gate is a native fence the kernel-mode queue waits on with a GPU `FENCE_WAIT`: its
    // CPU signal goes through the device, so only the interrupt path can see `m` move.
    let gate = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let mut qk = kernel_queue(&ctx)?;
    // The GPU's own monitored signal, behind the GPU's wait on the gate.
    qk.wait_fence(&gate, 1)?;
    qk.signal_fence(&m, 1)?;
    let sf = m.export_sync_file(1)?;
    ensure!(!readable(sf.as_fd(), 0)?, "the export was readable before its value was signalled");
    std::thread::sleep(HOLD);
    ensure!(!readable(sf.as_fd(), 0)?, "the export became readable with the queue held ({:?})", m.value());
    ensure!(sync_status(sf.as_fd())? == 0, "a pending export's status is not 0");
    gate.signal(1)?;
    // Well within SYNC_FILE_TIMEOUT_MS, whose expiry would signal a reached export too.
    let prompt = Duration::from_millis(u64::from(uapi_sync::SYNC_FILE_TIMEOUT_MS) / 2);
    let ms = i32::try_from(prompt.as_millis())?;
    ensure!(
        readable(sf.as_fd(), ms)?,
        "the export was not readable {prompt:?} after the gate opened ({:?})",
        m.value()
    );
    ensure!(m.value() == Some(1), "the export became readable with the fence at {:?}", m.value());
    ensure!(sync_status(sf.as_fd())? == 1, "the signalled export's status is not 1");
    // The module's software signal packet.
    qk.wait_fence(&gate, 2)?;
    qk.software_signal(&m, 2)?;
    let soft = m.export_sync_file(2)?;
    std::thread::sleep(HOLD);
    ensure!(!readable(soft.as_fd(), 0)?, "the software-signal export was readable before the signal");
    gate.signal(2)?;
    ensure!(
        readable(soft.as_fd(), ms)?,
        "the software-signal export was not readable {prompt:?} after the gate opened"
    );
    // Reached already: readable at once.
    let done = m.export_sync_file(2)?;
    ensure!(readable(done.as_fd(), 0)?, "an export of a reached value was not readable at once");
    // Nothing will signal it once its fence is gone: it ends with an error.
    let orphan = m.export_sync_file(100)?;
    ensure!(!readable(orphan.as_fd(), 0)?, "an export of an unreached value was readable");
    drop(m);
    ensure!(readable(orphan.as_fd(), ms)?, "a destroyed fence's export was not readable {prompt:?} later");
    let status = sync_status(orphan.as_fd())?;
    ensure!(status == -libc::ECANCELED, "a destroyed fence's export has status {status}, expected -ECANCELED");
    Ok(())
}

/// A `sync_file` export of a value nothing will signal ends, `SYNC_FILE_TIMEOUT_MS` after the
/// export and not before, with status `-ETIMEDOUT` (a kernel fence signals in bounded time);
/// the fence itself is untouched. Without `sync_file` in the kernel: `EOPNOTSUPP`, and SKIP.
fn sync_file_export_times_out_when_nothing_signals(path: &Path) -> TestResult {
    let Some((_dev, _ctx, m)) = monitored_with_sync_file(path)? else {
        return no_sync_file();
    };
    let timeout = Duration::from_millis(u64::from(uapi_sync::SYNC_FILE_TIMEOUT_MS));
    let start = Instant::now();
    let sf = m.export_sync_file(1)?;
    let ms = i32::try_from((timeout + WAIT).as_millis())?;
    ensure!(readable(sf.as_fd(), ms)?, "an export nothing signals was still pending after {:?}", start.elapsed());
    let took = start.elapsed();
    ensure!(took + Duration::from_millis(50) >= timeout, "the export timed out after {took:?}, before {timeout:?}");
    let status = sync_status(sf.as_fd())?;
    ensure!(status == -libc::ETIMEDOUT, "the timed-out export has status {status}, expected -ETIMEDOUT");
    ensure!(m.value() == Some(0), "the fence moved to {:?}", m.value());
    Ok(())
}

/// A `sync_file` export pending while its device runtime-suspends still ends with status
/// `-ETIMEDOUT` by 10.5 s after the export (`SYNC_FILE_TIMEOUT_MS` and half a second): a kernel
/// fence's bound holds in D3 too. Nothing calls into the module meanwhile (an ioctl would wake
/// the device): the device's state is read from sysfs, the export's from the `sync_file`.
/// Without `sync_file` in the kernel: `EOPNOTSUPP`, and SKIP.
fn sync_file_export_pending_in_d3_times_out_by_10_5_s(path: &Path) -> TestResult {
    let Some((_dev, _ctx, m)) = monitored_with_sync_file(path)? else {
        return no_sync_file();
    };
    let bound = Duration::from_millis(u64::from(uapi_sync::SYNC_FILE_TIMEOUT_MS) + 500);
    let start = Instant::now();
    let sf = m.export_sync_file(1)?;
    let pm = RuntimePmAllowed::new(path, D3_DELAY_MS)?;
    ensure!(
        pm.wait_suspended(bound.saturating_sub(start.elapsed())),
        "runtime_status {} with only an export pending: the device never suspended",
        pm.status()
    );
    let left = bound.saturating_sub(start.elapsed());
    let ended = readable(sf.as_fd(), i32::try_from(left.as_millis())?)?;
    let took = start.elapsed();
    let in_d3 = pm.status();
    drop(pm);
    ensure!(ended, "an export pending in D3 was still pending {took:?} after the export (runtime_status {in_d3})");
    let status = sync_status(sf.as_fd())?;
    ensure!(status == -libc::ETIMEDOUT, "the export pending in D3 has status {status}, expected -ETIMEDOUT");
    Ok(())
}

/// Unbinding the device ends a pending `sync_file` export with status `-ENODEV` (nothing will
/// signal it any more), while the process still holds the device file and the fence; the
/// device binds again. Without `sync_file` in the kernel: `EOPNOTSUPP`, and SKIP.
fn sync_file_export_ends_with_enodev_on_unbind(path: &Path) -> TestResult {
    let Some((dev, ctx, m)) = monitored_with_sync_file(path)? else {
        return no_sync_file();
    };
    let sf = m.export_sync_file(1)?;
    ensure!(!readable(sf.as_fd(), 0)?, "an export of an unreached value was readable");
    let rebinding = Rebinding::new(path)?;
    rebinding.unbind()?;
    let ms = i32::try_from(WAIT.as_millis())?;
    let ended = readable(sf.as_fd(), ms);
    let status = sync_status(sf.as_fd());
    drop((m, ctx, dev));
    rebinding.bind()?;
    ensure!(ended?, "the export was still pending after the device was unbound");
    let status = status?;
    ensure!(status == -libc::ENODEV, "the unbound device's export has status {status}, expected -ENODEV");
    Ok(())
}

/// A pending `sync_file` export whose value only a lost context's unexecuted work was going to
/// signal ends with status `-ECANCELED` once the loss is processed, not at
/// `SYNC_FILE_TIMEOUT_MS` (`-ETIMEDOUT`): a kernel-mode queue's command buffer faults (a write
/// to an unmapped VA) before its `MONITORED_FENCE_SIGNAL` of M to 1. An export of M at 1 made
/// after the loss ends the same way at once; one at 2 (no lost work named it) stays pending.
/// Without `sync_file` in the kernel: `EOPNOTSUPP`, and SKIP.
fn sync_file_export_of_a_signal_lost_with_its_context_ends_with_ecanceled(path: &Path) -> TestResult {
    let Some((_dev, ctx, m)) = monitored_with_sync_file(path)? else {
        return no_sync_file();
    };
    let sf = m.export_sync_file(1)?;
    let buf = ctx.alloc(4096, 0)?;
    let mut q = kernel_queue(&ctx)?;
    let mut bad = belfry_umd::CommandBuffer::new();
    bad.write32(buf.gpu_va() + (256 << 20), 0xBAD)?;
    bad.monitored_signal(m.gpu_va(), 1)?;
    let start = Instant::now();
    let _ = q.submit(&bad)?;
    // Well within SYNC_FILE_TIMEOUT_MS, whose expiry ends it with -ETIMEDOUT instead.
    let prompt = Duration::from_millis(u64::from(uapi_sync::SYNC_FILE_TIMEOUT_MS) / 2);
    let ms = i32::try_from(prompt.as_millis())?;
    ensure!(readable(sf.as_fd(), ms)?, "the export was still pending {:?} after its context's fault", start.elapsed());
    let status = sync_status(sf.as_fd())?;
    ensure!(
        status == -libc::ECANCELED,
        "the export of a lost signal has status {status} after {:?}, expected -ECANCELED",
        start.elapsed()
    );
    let after = m.export_sync_file(1)?;
    ensure!(readable(after.as_fd(), ms)?, "an export of the lost value made after the loss stayed pending");
    let status = sync_status(after.as_fd())?;
    ensure!(status == -libc::ECANCELED, "an export made after the loss has status {status}, expected -ECANCELED");
    let other = m.export_sync_file(2)?;
    ensure!(!readable(other.as_fd(), 0)?, "the export at 2, which no lost work named, ended with the loss");
    ensure!(m.value() == Some(0), "the fence moved to {:?}", m.value());
    Ok(())
}

/// Signals the handler of [`wait_fences_restarts_under_sa_restart`] saw.
static HANDLED: AtomicU32 = AtomicU32::new(0);

/// Counts a signal.
extern "C" fn count(_: libc::c_int) {
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

/// Installs [`count`] for SIGALRM, with `SA_RESTART` or without; the previous action.
fn install(restart: bool) -> Result<libc::sigaction, crate::Error> {
    // SAFETY: zeroed sigactions are valid; the handler touches one atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        let mut old: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = count as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = if restart { libc::SA_RESTART } else { 0 };
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGALRM, &sa, &mut old) != 0 {
            return Err(format!("sigaction: {}", std::io::Error::last_os_error()).into());
        }
        Ok(old)
    }
}

/// One raw `WAIT_FENCES` on an unsignalled fence until 1 s from now, while another thread sends
/// SIGALRM to the waiting thread every 20 ms: what it returned, how many signals were handled
/// meanwhile, how long it took and how far past the deadline it returned (ns, negative before).
fn wait_with_alarms(raw: &RawDev, handle: u32) -> Result<(Result<u32, i32>, u32, Duration, i64), crate::Error> {
    let timeout = Duration::from_secs(1);
    // SAFETY: `getpid`/`gettid` have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    let stop = AtomicBool::new(false);
    let entries = [WaitFenceEntry { handle, flags: 0, value: 1 }];
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                // SAFETY: sends SIGALRM to the waiting thread of this process, which handles it.
                unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGALRM) };
            }
        });
        let before = HANDLED.load(Ordering::Relaxed);
        let start = Instant::now();
        let deadline = Deadline::after(timeout).as_monotonic_ns();
        let r = raw.wait_fences(&entries, 0, deadline);
        let took = start.elapsed();
        let late = i64::try_from(Deadline::after(Duration::ZERO).as_monotonic_ns())? - i64::try_from(deadline)?;
        stop.store(true, Ordering::Relaxed);
        Ok((r, HANDLED.load(Ordering::Relaxed) - before, took, late))
    })
}

/// `WAIT_FENCES` with an absolute deadline is restartable: under a SIGALRM handler installed
/// with `SA_RESTART`, signals every 20 ms (handled, so each interrupted the call) do not make
/// the 1 s wait fail — the kernel restarts it with the same deadline and it ends with
/// `ETIMEDOUT` at that deadline; with the handler installed without `SA_RESTART` the first
/// signal ends it with `EINTR`.
fn wait_fences_restarts_under_sa_restart(path: &Path) -> TestResult {
    let raw = RawDev::open(path)?;
    let rc = raw.create_context().map_err(|e| format!("CREATE_CONTEXT: errno {e}"))?;
    let rf = raw
        .create_fence(uapi::CreateFence { context: rc, kind: uapi::FENCE_KIND_MONITORED, ..Default::default() })
        .map_err(|e| format!("CREATE_FENCE: errno {e}"))?
        .handle;
    let old = install(true)?;
    let restarted = wait_with_alarms(&raw, rf);
    let plain = install(false).and_then(|_| wait_with_alarms(&raw, rf));
    // SAFETY: restores the action saved above; the alarm threads are over.
    unsafe { libc::sigaction(libc::SIGALRM, &old, std::ptr::null_mut()) };
    let (r, handled, took, late) = restarted?;
    ensure!(
        r == Err(libc::ETIMEDOUT),
        "the wait under an SA_RESTART handler ended {r:?} after {took:?} and {handled} signals, expected ETIMEDOUT"
    );
    ensure!(handled >= 5, "only {handled} SIGALRM handled during the SA_RESTART wait ({took:?})");
    ensure!(late >= 0, "the restarted wait timed out {} ns before its deadline", -late);
    ensure!(took < Duration::from_secs(2), "the restarted 1 s wait took {took:?}");
    let (r, handled, took, _) = plain?;
    ensure!(
        r == Err(libc::EINTR) && handled >= 1 && took < Duration::from_millis(900),
        "the wait under a handler without SA_RESTART ended {r:?} after {took:?} ({handled} signals), expected EINTR"
    );
    Ok(())
}

/// A `sync_file` outlives the module: one export signalled by a CPU signal and one still
/// pending, then every device file closed (the pending one ends with `-ECANCELED`), the module
/// unloaded (`rmmod`) and loaded again (`support::reload`: every device back at its device
/// file); only then are the two `sync_file`s read (`SYNC_IOC_FILE_INFO`, which asks the fence
/// for its driver and timeline names), polled and closed (which drops the last reference of
/// their fences), none of which may run module code any more: the kernel detaches a fence's ops
/// when it signals, and the module's fences signal at the latest as their file closes. No oops,
/// no warning, no kernel report (on the debug kernel under KASAN). Where the kernel lacks
/// `sync_file`: SKIP (nothing unloaded).
fn sync_file_exports_outlive_the_module(path: &Path) -> TestResult {
    let module = crate::support::reload::module_path()?;
    let (signalled, pending) = {
        let Some((_dev, _ctx, m)) = monitored_with_sync_file(path)? else { return no_sync_file() };
        let signalled = m.export_sync_file(1)?;
        let pending = m.export_sync_file(2)?;
        m.signal(1)?;
        ensure!(readable(signalled.as_fd(), 0)?, "the export of a signalled value is not readable");
        (signalled, pending)
    };
    let taint = crate::support::oops_or_warning_taint()?;
    let warnings = crate::support::kernel_log::warnings()?.len();
    let devices = crate::support::reload::Devices::now()?;
    let args = crate::support::reload::load_args()?;
    crate::support::reload::run("rmmod", &["belfry"])?;
    let read = (|| -> Result<(i32, i32, bool, bool), crate::Error> {
        Ok((
            sync_status(signalled.as_fd())?,
            sync_status(pending.as_fd())?,
            readable(signalled.as_fd(), 0)?,
            readable(pending.as_fd(), 0)?,
        ))
    })();
    drop(signalled);
    drop(pending);
    let loaded = devices.reload(&module, &args);
    let (signalled, pending, signalled_ready, pending_ready) = read?;
    loaded?;
    ensure!(
        signalled == 1 && signalled_ready,
        "the signalled export after rmmod: status {signalled}, readable {signalled_ready}"
    );
    ensure!(
        pending == -libc::ECANCELED && pending_ready,
        "the export pending when its file closed, after rmmod: status {pending} (expected {}), readable {pending_ready}",
        -libc::ECANCELED
    );
    let now = crate::support::oops_or_warning_taint()?;
    ensure!(now == taint, "the kernel is tainted by an oops or a warning ({taint:#x} -> {now:#x})");
    let reports = crate::support::kernel_log::warnings()?;
    ensure!(reports.len() == warnings, "the kernel reported {:?}", &reports[warnings..]);
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(sync_file_export_follows_a_kernel_mode_queue, Default, []),
        test_entry!(sync_file_export_times_out_when_nothing_signals, Default, []),
        test_entry!(sync_file_export_pending_in_d3_times_out_by_10_5_s, Default, []),
        test_entry!(sync_file_export_ends_with_enodev_on_unbind, Default, []),
        test_entry!(sync_file_export_of_a_signal_lost_with_its_context_ends_with_ecanceled, Default, []),
        test_entry!(wait_fences_restarts_under_sa_restart, Default, []),
        test_entry!(sync_file_exports_outlive_the_module, Default, []),
    ]
}

//! What needs privilege (no rule family: issue 11's defects 6 and 13): a process without the
//! capability is refused, the same request of a process with it is served.
#![allow(unsafe_code)] // capget/capset on the calling (forked) process.

use std::path::Path;

use belfry_abi::engine::{PRIORITY_MAX, PRIORITY_NORMAL};
use belfry_umd::{Device, QueueDesc, QueueMode};

use crate::harness::proc;
use crate::{Test, TestResult};

/// `CAP_SYS_NICE`.
const CAP_SYS_NICE: u32 = 23;
/// `_LINUX_CAPABILITY_VERSION_3` (two 32-bit words per set).
const CAP_V3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Removes `cap` from the calling process's effective and permitted sets (for good).
fn drop_capability(cap: u32) -> TestResult {
    let mut header = CapHeader { version: CAP_V3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: `header` and `data` are the layouts capget expects for version 3.
    let r = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) };
    ensure!(r == 0, "capget: {}", std::io::Error::last_os_error());
    let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
    data[word].effective &= !bit;
    data[word].permitted &= !bit;
    // SAFETY: as above; capset only reads them.
    let r = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    ensure!(r == 0, "capset: {}", std::io::Error::last_os_error());
    Ok(())
}

/// A kernel-mode queue of `priority` in a new context of a new file of `path`: the errno of
/// `CREATE_QUEUE`, or `None` when it was created.
fn queue_of_priority(path: &Path, priority: u32) -> Result<Option<i32>, crate::Error> {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    match ctx.create_queue(&QueueDesc { mode: QueueMode::KernelMode, priority, ..QueueDesc::default() }) {
        Ok(_) => Ok(None),
        Err(e) => Ok(Some(e.errno().ok_or_else(|| format!("CREATE_QUEUE of priority {priority}: {e}"))?)),
    }
}

/// Strict priority cannot be taken by anyone (defect 6; amdgpu's rule): a process without
/// `CAP_SYS_NICE` (dropped with `capset` in a forked child) is refused a queue above normal
/// priority with `EACCES` and still gets normal and lower ones; the suite's process, which has
/// the capability, gets every priority up to `PRIORITY_MAX`.
fn priorities_above_normal_need_cap_sys_nice(path: &Path) -> TestResult {
    let child = proc::spawn("process without CAP_SYS_NICE", || {
        drop_capability(CAP_SYS_NICE)?;
        for priority in 0..=PRIORITY_MAX {
            let got = queue_of_priority(path, priority)?;
            let want = (priority > PRIORITY_NORMAL).then_some(libc::EACCES);
            ensure!(
                got == want,
                "CREATE_QUEUE of priority {priority} without CAP_SYS_NICE: errno {got:?}, expected {want:?}"
            );
        }
        Ok(())
    })?;
    child.join()?;
    for priority in 0..=PRIORITY_MAX {
        let got = queue_of_priority(path, priority)?;
        ensure!(got.is_none(), "CREATE_QUEUE of priority {priority} with CAP_SYS_NICE: errno {got:?}");
    }
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![test_entry!(priorities_above_normal_need_cap_sys_nice, Default, [])]
}

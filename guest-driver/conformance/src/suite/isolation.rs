//! Process isolation (no rule family: RULES.md states it only as the premise of the
//! handle and address-space rules): another process's handles, mmap offsets, GPU VAs and raw
//! physical addresses are refused or fault the offender.

use std::path::Path;

use belfry_abi::packet::ComputeOp;
use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_umd::{CommandBuffer, Device};

use crate::harness::proc;
use crate::harness::raw::{errno_name, LockedPage, RawDev};
use crate::support::fixture::open_context;
use crate::support::work::{expect_status, expect_u32, status, submit_faulting, user_queue, write32, write32_faulting};
use crate::support::{wait_until, WAIT};
use crate::{Test, TestResult};

/// Handles, mmap offsets and a GPU VA of process A's objects.
#[derive(Clone, Copy, Debug)]
struct Foreign {
    context: u32,
    alloc: u32,
    alloc_offset: u64,
    queue: u32,
    doorbell: u32,
    target_va: u64,
}

/// Another process (its own file) gets an errno for every foreign handle and mmap offset.
fn expect_foreign_refused(path: &Path, f: Foreign) -> TestResult {
    let d = RawDev::open(path)?;
    let refused = |what: &str, r: Result<(), i32>| -> TestResult {
        match r {
            Err(libc::ENOENT | libc::EINVAL) => Ok(()),
            other => {
                Err(format!("{what} with A's handle: {:?}, expected ENOENT/EINVAL", other.map_err(errno_name)).into())
            }
        }
    };
    refused("ALLOC", d.alloc(f.context, 4096).map(|_| ()))?;
    refused("CREATE_QUEUE", d.create_queue(f.context, None, 16).map(|_| ()))?;
    refused("CREATE_DOORBELL", d.create_doorbell(f.queue).map(|_| ()))?;
    refused(
        "SUBMIT",
        d.submit(uapi::Submit { queue: f.queue, cmdbuf: f.alloc, offset: 0, size: 0, progress_value: 1 }),
    )?;
    refused("WAIT_PROGRESS", d.wait_progress(f.queue, 1, 0))?;
    refused("CONNECT_DOORBELL", d.handle_op(uapi::IOCTL_CONNECT_DOORBELL, f.doorbell))?;
    refused("NOTIFY_WORK", d.handle_op(uapi::IOCTL_NOTIFY_WORK, f.doorbell))?;
    refused("SUSPEND_CONTEXT", d.handle_op(uapi::IOCTL_SUSPEND_CONTEXT, f.context))?;
    refused("RESUME_CONTEXT", d.handle_op(uapi::IOCTL_RESUME_CONTEXT, f.context))?;
    refused("DESTROY_DOORBELL", d.handle_op(uapi::IOCTL_DESTROY_DOORBELL, f.doorbell))?;
    refused("DESTROY_QUEUE", d.handle_op(uapi::IOCTL_DESTROY_QUEUE, f.queue))?;
    refused("FREE", d.handle_op(uapi::IOCTL_FREE, f.alloc))?;
    refused("DESTROY_CONTEXT", d.handle_op(uapi::IOCTL_DESTROY_CONTEXT, f.context))?;
    match d.peek_u64(f.alloc_offset) {
        Err(_) => Ok(()),
        Ok(v) => Err(format!("mmap of A's allocation offset succeeded (read {v:#x})").into()),
    }
}

/// Isolation: process B gets ENOENT/EINVAL for A's context, allocation, queue and doorbell
/// handles in every ioctl and for A's mmap offset; B's write to A's GPU VA faults B's context
/// (its doorbell reads DISCONNECTED_ABORT) and A's data and queue are unchanged.
fn another_process_cannot_reach_this_process_objects(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let mut q = user_queue(&ctx)?;
    // B allocates far fewer pages than this, so A's last VA lies beyond B's address space.
    let mut pads = Vec::new();
    for _ in 0..8 {
        pads.push(ctx.alloc(64 * 1024, 0)?);
    }
    let mut target = ctx.alloc(4096, 0)?;
    target.write_u32(0, 0xA11CE)?;
    let v = write32(&mut q, target.va_at(4)?, 0xA2)?;
    q.wait(v, WAIT)?;
    // The library keeps mmap offsets to itself: a second file of A's gives a real one.
    let raw = RawDev::open(path)?;
    let raw_ctx = raw.create_context().map_err(errno_name)?;
    let raw_alloc = raw.alloc(raw_ctx, 4096).map_err(errno_name)?;
    ensure!(raw.peek_u64(raw_alloc.mmap_offset).is_ok(), "A cannot map its own allocation");
    let foreign = Foreign {
        context: ctx.handle(),
        alloc: target.handle(),
        alloc_offset: raw_alloc.mmap_offset,
        queue: q.handle(),
        doorbell: q.doorbell_handle().ok_or("no doorbell")?,
        target_va: target.gpu_va(),
    };
    let faults_before = dev.debug_stats()?.faults;
    let child = proc::spawn("process B", move || {
        expect_foreign_refused(path, foreign)?;
        let dev = Device::open(path)?;
        let ctx = dev.create_context()?;
        let mut q = user_queue(&ctx)?;
        write32_faulting(&mut q, foreign.target_va, 0xEE11)?;
        let aborted = wait_until(WAIT, || matches!(status(&q), Ok(DoorbellStatus::DisconnectedAbort)));
        ensure!(aborted, "B's doorbell reads {:?} after writing A's VA", status(&q));
        Ok(())
    })?;
    child.join()?;
    ensure!(dev.debug_stats()?.faults > faults_before, "no fault counted for B's write");
    expect_u32(&target, 0, 0xA11CE, "A's data after B's write")?;
    expect_u32(&target, 4, 0xA2, "A's GPU-written data after B's write")?;
    expect_status(&q, DoorbellStatus::Connected, "A's doorbell after B's fault")?;
    let v = write32(&mut q, target.va_at(8)?, 0xA3)?;
    q.wait(v, WAIT)?;
    expect_u32(&target, 8, 0xA3, "A's work after B's fault")
}

/// Builds one packet with the physical address and a VA of B's own in its address fields.
type Build = fn(&mut CommandBuffer, u64, u64) -> belfry_umd::Result<()>;

/// Isolation: process B putting a raw guest physical address (that of a page of A's) in any
/// address field of any packet faults B's context, reads nothing of A's into B's memory, and
/// leaves A's page unchanged.
fn raw_physical_addresses_in_any_packet_field_fault_the_context(path: &Path) -> TestResult {
    const PATTERN: u64 = 0xA5A5_0123_4567_89AB;
    // A's page: locked anonymous memory (pagemap shows no frames of the module's PFN mappings).
    let page = LockedPage::new(PATTERN)?;
    let phys = page.phys().ok_or("no frame number in /proc/self/pagemap (not root?)")?;
    ensure!(phys < 0x1_0000_0000, "guest physical address {phys:#x} above 4 GiB");
    let child = proc::spawn("process B", move || {
        let cases: [(&str, Build); 12] = [
            ("WRITE_DATA32", |cb, p, _| cb.write32(p, 1).map(drop)),
            ("WRITE_DATA64", |cb, p, _| cb.write64(p, 1).map(drop)),
            ("WRITE_TIMESTAMP", |cb, p, _| cb.timestamp(p).map(drop)),
            ("FENCE_SIGNAL", |cb, p, _| cb.fence_signal(p, 1, None).map(drop)),
            ("MONITORED_FENCE_SIGNAL", |cb, p, _| cb.monitored_signal(p, 1).map(drop)),
            ("COPY source", |cb, p, own| cb.copy(p, own, 64).map(drop)),
            ("COPY destination", |cb, p, own| cb.copy(own, p, 64).map(drop)),
            ("FILL", |cb, p, _| cb.fill(p, 64, 7).map(drop)),
            ("COMPUTE a", |cb, p, own| cb.compute(ComputeOp::AddU32, 4, 0, p, own, own + 64).map(drop)),
            ("COMPUTE b", |cb, p, own| cb.compute(ComputeOp::AddU32, 4, 0, own, p, own + 64).map(drop)),
            ("COMPUTE destination", |cb, p, own| cb.compute(ComputeOp::AddU32, 4, 0, own, own, p).map(drop)),
            ("JUMP", |cb, p, _| cb.jump(p, 64).map(drop)),
        ];
        let dev = Device::open(path)?;
        for (what, build) in cases {
            let ctx = dev.create_context()?;
            let own = ctx.alloc(4096, 0)?;
            let mut q = user_queue(&ctx)?;
            let mut cb = CommandBuffer::new();
            build(&mut cb, phys, own.gpu_va())?;
            submit_faulting(&mut q, &cb)?;
            let aborted = wait_until(WAIT, || matches!(status(&q), Ok(DoorbellStatus::DisconnectedAbort)));
            ensure!(aborted, "{what} at physical {phys:#x}: B's doorbell reads {:?}", status(&q));
            let mut mine = [0u8; 128];
            own.read(0, &mut mine)?;
            ensure!(mine.iter().all(|&b| b == 0), "{what}: B's memory changed: {:x?}", &mine[..16]);
        }
        Ok(())
    })?;
    child.join()?;
    let now = page.read();
    ensure!(now == PATTERN, "A's page at physical {phys:#x} reads {now:#x}, expected {PATTERN:#x}");
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(another_process_cannot_reach_this_process_objects, Default, []),
        test_entry!(raw_physical_addresses_in_any_packet_field_fault_the_context, Default, []),
    ]
}

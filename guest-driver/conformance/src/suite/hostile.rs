//! Hostile processes (no rule family: issue 11's review of the module): what one process does
//! to its own objects must not reach another process's mappings, and no request may make the
//! kernel warn.

use std::path::Path;

use belfry_abi::packet::TRANSFER_MAX_BYTES;
use belfry_abi::uapi::DoorbellStatus;
use belfry_umd::{CommandBuffer, Device};

use crate::harness::channel::{Channel, Side};
use crate::harness::proc;
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::open_context;
use crate::support::kernel_log;
use crate::support::work::{expect_u32, user_queue};
use crate::support::WAIT;
use crate::{chain, Test, TestResult};

/// Size of the allocation a doorbell zap must not reach: 1024 pages, so every mmap offset the
/// module hands out early lies inside its page range if the mapping loses its own offset.
const LARGE: u64 = 4 << 20;

/// Isolation of mappings: while process B connects and disconnects (and so zaps) doorbells it
/// created before A's 4 MiB allocation, on two physical doorbells (LRU victimization), every
/// page of A's mapping still reads what A stored, and the mapping keeps its own mmap offset.
fn doorbell_zaps_leave_another_process_allocation_mapped(path: &Path) -> TestResult {
    let ch = Channel::new(WAIT)?;
    let child = proc::spawn("process B", || {
        let dev = Device::open(path)?;
        let ctx = dev.create_context()?;
        let mut queues = (0..3).map(|_| user_queue(&ctx)).collect::<Result<Vec<_>, _>>()?;
        ch.send(Side::Child, 1, None)?;
        ch.recv(Side::Child)?;
        for _ in 0..2 {
            for q in &mut queues {
                q.connect_doorbell()?;
            }
            for q in &mut queues {
                q.disconnect_doorbell(DoorbellStatus::DisconnectedRetry)?;
            }
        }
        ch.send(Side::Child, 2, None)?;
        Ok(())
    })?;
    ch.recv(Side::Parent)?;
    let raw = RawDev::open(path)?;
    let ctx = raw.create_context().map_err(errno_name)?;
    let alloc = raw.alloc(ctx, LARGE).map_err(errno_name)?;
    // CAST: 4 MiB fits in usize.
    let map = raw.map(alloc.mmap_offset, LARGE as usize).map_err(errno_name)?;
    map.stamp_pages(0xB0D1);
    ch.send(Side::Parent, 1, None)?;
    ch.recv(Side::Parent)?;
    child.join()?;
    map.check_stamps(0xB0D1).map_err(|e| format!("A's allocation after B's doorbell connects and disconnects: {e}"))?;
    let shown = map.maps_offset()?;
    ensure!(
        shown == alloc.mmap_offset,
        "A's mapping shows file offset {shown:#x} in /proc/self/maps, not its mmap offset {:#x}",
        alloc.mmap_offset
    );
    Ok(())
}

/// No kernel warning from a size: ALLOC of `QUERY_CAPS.max_allocation` succeeds, the GPU
/// fills all of it (FILL packets), the CPU reads the fill at its first, middle and last word,
/// and the kernel log gains no WARNING or BUG line.
fn the_largest_allocation_is_served_and_filled_without_a_kernel_warning(path: &Path) -> TestResult {
    const VALUE: u32 = 0x5EED_F111;
    let before = kernel_log::warnings()?;
    let (dev, ctx) = open_context(path)?;
    let max = dev.caps().raw.max_allocation;
    let alloc = ctx.alloc(max, 0);
    let after = kernel_log::warnings()?;
    ensure!(
        after.len() == before.len(),
        "ALLOC of max_allocation {max:#x} made the kernel warn: {:?}",
        &after[before.len().min(after.len())..]
    );
    let buf = alloc.map_err(|e| format!("ALLOC of max_allocation {max:#x}: {}", chain(&e)))?;
    let mut q = user_queue(&ctx)?;
    let mut cb = CommandBuffer::new();
    let step = u64::from(TRANSFER_MAX_BYTES);
    for offset in (0..max).step_by(usize::try_from(step)?) {
        // CAST: at most TRANSFER_MAX_BYTES, a u32.
        cb.fill(buf.va_at(offset)?, (max - offset).min(step) as u32, VALUE)?;
    }
    let v = q.submit(&cb)?;
    q.wait(v, WAIT)?;
    for offset in [0, max / 2, max - 4] {
        expect_u32(&buf, offset, VALUE, "the GPU's fill")?;
    }
    let end = kernel_log::warnings()?;
    ensure!(end.len() == before.len(), "the kernel warned: {:?}", &end[before.len().min(end.len())..]);
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(doorbell_zaps_leave_another_process_allocation_mapped, TwoDoorbells, []),
        test_entry!(the_largest_allocation_is_served_and_filled_without_a_kernel_warning, Default, []),
    ]
}

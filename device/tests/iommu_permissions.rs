//! The device behind a guest IOMMU, proven on the host: guest RAM reached through IOVA windows
//! of one page each onto the RAM memfd, as QEMU's vfio-user client sends them for a guest
//! behind `intel-iommu` (one `DMA_MAP` per IOTLB entry, read-only when the guest's IOMMU maps
//! the page without write permission, a `DMA_UNMAP` when it drops it).
//!
//! A monitored fence's page mapped read/write is signaled through its IOVA; a page the IOMMU
//! maps read-only, or an IOVA it does not map, is never written: the GPU's write faults the
//! context that issued it (its queue's state, a `ContextFault` record, the `FAULT` interrupt
//! and a `fault` trace record whose page walk shows the GPU's own page table allowed the write),
//! and the device keeps serving every other context.

mod common;

use std::os::fd::AsRawFd;

use belfry_abi::engine::{FaultReason, QueueState, ENGINE_COMPUTE};
use belfry_abi::irq::{self, RecordKind};
use belfry_abi::mmu;
use common::gpu::*;

/// Where the test's IOVA windows start: above the identity window of guest RAM, as an IOMMU's
/// IOVAs need not be guest physical addresses.
const IOVA_BASE: u64 = 0x1_0000_0000;
/// DMA_MAP flags: read, read and write.
const READ: u32 = 1;
const READ_WRITE: u32 = 3;

/// Maps guest RAM page `pa` at `iova` with `flags`, as QEMU forwards one IOTLB entry.
fn map_page(g: &mut Gpu, iova: u64, pa: u64, flags: u32) {
    let fd = g.ram.as_raw_fd();
    assert!(!g.c.dma_map_at(iova, mmu::PAGE_SIZE, pa, flags, &[fd]).is_error(), "DMA_MAP {iova:#x}");
}

/// The leaf entry of the page walk a `fault` trace record carries.
fn leaf_entry(fault: &serde_json::Value) -> u64 {
    let walk = fault["walk"].as_array().expect("the fault record has its page walk");
    let leaf = walk.iter().find(|s| s["level"] == 0).expect("the walk reaches the leaf");
    leaf["entry"].as_u64().expect("the leaf entry was read")
}

/// A monitored fence's page the IOMMU maps read/write is written through its IOVA; one it maps
/// read-only keeps its value while the signal faults its context (MMU_READ_ONLY at the fence's
/// VA, although the GPU's page table maps it writable), and another context keeps running.
#[test]
fn a_fence_page_the_iommu_maps_read_only_is_never_written() {
    let mut g = Gpu::start(&[]);
    let writer = g.process(1, 1);
    let (fence_rw_pa, fence_ro_pa) = (g.alloc(1), g.alloc(1));
    g.write_u64(fence_ro_pa, 7);
    let (iova_rw, iova_ro) = (IOVA_BASE, IOVA_BASE + mmu::PAGE_SIZE);
    map_page(&mut g, iova_rw, fence_rw_pa, READ_WRITE);
    map_page(&mut g, iova_ro, fence_ro_pa, READ);
    let (fence_rw_va, fence_ro_va) = (0x7700_0000, 0x7700_1000);
    g.map(writer.root, fence_rw_va, iova_rw, mmu::PTE_WRITABLE);
    g.map(writer.root, fence_ro_va, iova_ro, mmu::PTE_WRITABLE);
    let mut q = g.queue(1, writer, ENGINE_COMPUTE, 1, false);
    g.submit(&mut q, &pk::monitored_signal(fence_rw_va, 5));
    g.drain(&q);
    assert_eq!(g.read_u64(fence_rw_pa), 5, "the read/write page is written through its IOVA");
    g.new_records();
    assert_eq!(g.interrupts(irq::VECTOR_FAULT), 0, "no fault so far");

    g.submit(&mut q, &pk::monitored_signal(fence_ro_va, 9));
    g.wait_query("the read-only fault", 1, |st| st.state == QueueState::Faulted as u32);
    let st = g.query(1);
    assert_eq!((FaultReason::try_from(st.fault_reason), st.fault_address), (Ok(FaultReason::MmuReadOnly), fence_ro_va));
    assert_eq!(g.read_u64(fence_ro_pa), 7, "the read-only page keeps its value");
    g.wait_for("the fault interrupt", || g.interrupts(irq::VECTOR_FAULT) > 0);
    let recs = g.new_records();
    let rec = recs.iter().find(|r| r.kind == RecordKind::ContextFault as u32).expect("a ContextFault record");
    assert_eq!((rec.context, rec.queue, rec.address), (1, 1, fence_ro_va));
    assert_eq!(rec.detail, FaultReason::MmuReadOnly as u32);
    assert!(recs.iter().all(|r| r.kind != RecordKind::MonitoredFenceSignaled as u32), "no signal reported: {recs:?}");
    let fault = g.dev.wait_trace("the fault's trace record", |r| r["event"] == "fault" && r["context"] == 1);
    assert_eq!((fault["reason"].as_str(), fault["address"].as_u64()), (Some("MMU_READ_ONLY"), Some(fence_ro_va)));
    let leaf = leaf_entry(&fault);
    assert_eq!(leaf & mmu::PTE_ADDR_MASK, iova_ro, "the walk ends at the IOVA");
    assert_ne!(leaf & mmu::PTE_WRITABLE, 0, "the GPU's page table allowed the write: the IOMMU refused it");

    let other = g.process(2, 2);
    let (out, out_pa) = g.buffer(other, 1);
    let mut q2 = g.queue(2, other, ENGINE_COMPUTE, 1, false);
    g.submit(&mut q2, &pk::write32(out, 0x55));
    g.drain(&q2);
    assert_eq!(common::read_u32(&g.ram, out_pa), 0x55, "another context keeps running");
    assert_eq!(g.query(2).state, QueueState::Idle as u32);
}

/// An IOVA the IOMMU stopped mapping (`DMA_UNMAP` of a fence page that was written through it)
/// is unreachable: the next signal faults its context with MMU_UNREACHABLE at the fence's VA
/// and the page keeps the last value written while it was mapped.
#[test]
fn a_fence_page_the_iommu_unmapped_is_never_written() {
    let mut g = Gpu::start(&[]);
    let p = g.process(1, 1);
    let fence_pa = g.alloc(1);
    map_page(&mut g, IOVA_BASE, fence_pa, READ_WRITE);
    let fence_va = 0x7700_0000;
    g.map(p.root, fence_va, IOVA_BASE, mmu::PTE_WRITABLE);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    g.submit(&mut q, &pk::monitored_signal(fence_va, 3));
    g.drain(&q);
    assert_eq!(g.read_u64(fence_pa), 3, "written while mapped");

    assert!(!g.c.dma_unmap(IOVA_BASE, mmu::PAGE_SIZE).is_error(), "DMA_UNMAP");
    g.submit(&mut q, &pk::monitored_signal(fence_va, 4));
    g.wait_query("the unmapped-IOVA fault", 1, |st| st.state == QueueState::Faulted as u32);
    let st = g.query(1);
    assert_eq!((FaultReason::try_from(st.fault_reason), st.fault_address), (Ok(FaultReason::MmuUnreachable), fence_va));
    assert_eq!(g.read_u64(fence_pa), 3, "nothing written after the unmap");
    let fault = g.dev.wait_trace("the fault's trace record", |r| r["event"] == "fault" && r["context"] == 1);
    assert_eq!(fault["reason"].as_str(), Some("MMU_UNREACHABLE"));

    // Mapped again read/write, a fresh context writes it: the device kept its windows straight.
    map_page(&mut g, IOVA_BASE, fence_pa, READ_WRITE);
    let again = g.process(2, 2);
    g.map(again.root, fence_va, IOVA_BASE, mmu::PTE_WRITABLE);
    let mut q2 = g.queue(2, again, ENGINE_COMPUTE, 1, false);
    g.submit(&mut q2, &pk::monitored_signal(fence_va, 6));
    g.drain(&q2);
    assert_eq!(g.read_u64(fence_pa), 6);
}

// SPDX-License-Identifier: GPL-2.0

//! Demotion of optimized DEFAULT fences under local-memory pressure (NF-14). With the
//! `demote_fences` module parameter on, an INTRA_GPU fence that finds no VRAM fence page free
//! (INTRA_GPU values have no other place, NF-15) takes the VRAM page of one of its own
//! process's optimized DEFAULT fence pages, whose MonitoredValues move to system memory: the
//! page becomes a plain DEFAULT one (NF-11), nothing the library sees changes.
//!
//! The protocol, with the file's state and the hardware mutex held (no MonitoredValue update,
//! registration, `FENCE_INFO` or destroy of these fences runs meanwhile):
//! 1. a new system page, every slot UINT64_MAX, mapped in the system (CMP) address space at
//!    the VA that DEFAULT pages use for MonitoredValues (one page after CurrentValue, reserved
//!    and left unmapped for an optimized page);
//! 2. one `MOVE_MONITORED_VALUE` per fence of the page: the device copies the value under its
//!    fence table's lock, retargets the registration, then reads CurrentValue and interrupts
//!    if a signal already passed the value — so no engine or queue is stopped, and a signal
//!    racing the move is never lost (docs/PROTOCOL.md);
//! 3. the page's MonitoredValues are the system page from now on; the VRAM page is the
//!    caller's, counted in `MM_STATS.fence_demotions`.
//!
//! A move the device refuses moves the fences already moved back to VRAM and frees the system
//! page; if moving back fails too, the page keeps both (the VRAM page is not handed out again)
//! and is kept until the device is reset. Demoted pages are never promoted back.
//!
//! When the process has no optimized page left, one of its INTRA_GPU fences is demoted instead
//! (NF-18, `CAPS.fence_storage_move`): its CurrentValue is mapped at a GPU VA of its context and
//! is the key by which the device finds the fence, so the move re-keys the registration and
//! rewrites the context's page-table entry, with the context quiesced:
//! 1. a new system page of the VRAM page's layout (CurrentValue at 0, MonitoredValue at 2048),
//!    mapped in the system address space;
//! 2. `SUSPEND_CONTEXT` (unless the context is suspended already): the device completes it once
//!    no engine runs the context's queues, and it has no TLB, so no engine holds a translation
//!    of the fence's VA from now on — the context's address space is the only one mapping it;
//! 3. `MOVE_FENCE_STORAGE`: the device copies both values, re-keys the registration and
//!    interrupts if CurrentValue already passed MonitoredValue;
//! 4. the context's entry for the VA retargeted to the system page (one 64-bit write in the
//!    leaf table that already holds it, so it cannot fail half-way);
//! 5. `RESUME_CONTEXT`, the engines woken first: the context's next translation finds the
//!    system page, where the registration points;
//! 6. the VRAM page is the caller's, counted in `MM_STATS.fence_demotions`.
//!
//! A `MOVE_FENCE_STORAGE` the device refuses changes nothing: the entry is not rewritten, the
//! system page is freed, the fence stays in VRAM (a move that timed out keeps the system page,
//! still mapped where the device may have moved the values, until the device is reset). The demoted fence keeps its system page until
//! it is destroyed: no promotion back.

use kernel::prelude::*;

use super::{
    object::{Fence, FencePages, VRAM_MONITORED_OFFSET},
    opt::MonitoredPage,
    waits::Fences,
};
use crate::{
    abi::{
        fence,
        ids::FenceHandle,
        mailbox::{self, Opcode},
        mmu,
    },
    context::Context,
    hw::{
        command::HwGuard,
        dmamem::{DmaBuf, PAGE},
        quarantine::Kept,
    },
};

/// A fence of a page: its global handle and its values' byte offset in the page.
pub(crate) type Member = (FenceHandle, usize);

/// Whether one of `pages` has its MonitoredValues in VRAM; its index.
pub(crate) fn candidate(pages: &mut FencePages) -> Option<usize> {
    pages
        .pages_mut()
        .iter()
        .position(|p| !p.shared && !p.kept && p.monitored.vram_offset().is_some())
}

/// Demotes page `index` of `pages`, whose fences are `members`, to system memory; its VRAM page
/// (byte offset), now the caller's.
///
/// # Errors
///
/// `EINVAL` (not an optimized page), `ENOMEM`, `ENODEV`, or the mailbox errors (`EIO`,
/// `ETIMEDOUT`).
pub(crate) fn demote(
    fences: &Fences,
    pages: &mut FencePages,
    index: usize,
    members: &[Member],
) -> Result<u64> {
    let core = fences.core();
    let mut hw = core.hw()?;
    let page = pages.pages_mut().get_mut(index).ok_or(EINVAL)?;
    let offset = page.monitored.vram_offset().ok_or(EINVAL)?;
    let monitored_va = page.sys_va + mmu::PAGE_SIZE;
    let buf = DmaBuf::new(hw.dev()?, 1)?;
    for off in (0..PAGE).step_by(8) {
        buf.write64(off, fence::MONITORED_VALUE_NONE);
    }
    core.map_system_at(&hw, monitored_va, &buf)?;
    let at = |base: u64, space: u32, off: usize| mailbox::FenceLocation {
        space,
        // CAST: below a page.
        address: base + off as u64,
        ..Default::default()
    };
    let mut moved = 0;
    let mut failure = None;
    for &(global, off) in members {
        let to = at(monitored_va, mailbox::LOCATION_SYSTEM_VA, off);
        if let Err(e) = move_monitored(&mut hw, global, to) {
            failure = Some(e);
            break;
        }
        moved += 1;
    }
    if let Some(e) = failure {
        let back = members[..moved].iter().all(|&(global, off)| {
            move_monitored(&mut hw, global, at(offset, mailbox::LOCATION_VRAM, off)).is_ok()
        });
        if back {
            core.unmap_system(monitored_va, 1);
        } else {
            pr_warn!("a fence page whose MonitoredValues could not all be demoted is kept until the device is reset\n");
            page.monitored = MonitoredPage::System(buf);
            page.kept = true;
        }
        return Err(e);
    }
    page.monitored = MonitoredPage::System(buf);
    {
        let mut book = fences.book();
        for &(global, _) in members {
            book.vram_monitored.forget(global);
        }
    }
    core.objects().fence_demotions += 1;
    pr_debug!(
        "belfry: {} fence MonitoredValue(s) demoted from VRAM {:#x} to system memory\n",
        members.len(),
        offset
    );
    Ok(offset)
}

/// `MOVE_MONITORED_VALUE` of fence `global` to `to`.
fn move_monitored(hw: &mut HwGuard<'_>, global: FenceHandle, to: mailbox::FenceLocation) -> Result {
    let mut args = mailbox::MoveMonitoredArgs {
        handle: global.raw(),
        monitored_value: to,
        ..Default::default()
    };
    hw.command(Opcode::MoveMonitoredValue, &mut args, &[])
}

/// Demotes INTRA_GPU fence `f` of `ctx`, its values still in VRAM, to a system page (NF-18);
/// its VRAM page (byte offset), now the caller's.
///
/// # Errors
///
/// `EOPNOTSUPP` (no `CAPS.fence_storage_move`), `EINVAL` (not an INTRA_GPU fence in VRAM, or its
/// VA not mapped), `ENOMEM`, `ENODEV`, or the mailbox errors (`EIO`, `ETIMEDOUT`).
pub(crate) fn demote_intra_gpu(fences: &Fences, ctx: &mut Context, f: &mut Fence) -> Result<u64> {
    let core = fences.core();
    if !core.info().caps.fence_storage_move() {
        return Err(EOPNOTSUPP);
    }
    let (offset, gpu_va) = f.intra_gpu_vram().ok_or(EINVAL)?;
    let mut hw = core.hw()?;
    let page = DmaBuf::new(hw.dev()?, 1)?;
    let sys_va = core.map_system(&hw, &page, None)?;
    let Some((table, entry)) = ctx.space.leaf_entry(gpu_va) else {
        core.unmap_system(sys_va, 2);
        return Err(EINVAL);
    };
    let id = ctx.id();
    let quiesce = !core.objects().is_suspended(id);
    if quiesce {
        if let Err(e) = hw.object_command(Opcode::SuspendContext, id.raw()) {
            core.unmap_system(sys_va, 2);
            return Err(e);
        }
    }
    let mut args = mailbox::MoveFenceStorageArgs {
        handle: f.global.raw(),
        current_value: mailbox::FenceLocation {
            space: mailbox::LOCATION_SYSTEM_VA,
            address: sys_va,
            ..Default::default()
        },
        monitored_value: mailbox::FenceLocation {
            space: mailbox::LOCATION_SYSTEM_VA,
            address: sys_va + VRAM_MONITORED_OFFSET,
            ..Default::default()
        },
        ..Default::default()
    };
    let moved = hw.command(Opcode::MoveFenceStorage, &mut args, &[]);
    if moved.is_ok() {
        let pte = mmu::entry(page.dma_address(), mmu::PTE_PRESENT | mmu::PTE_WRITABLE);
        table.write64(entry, pte);
    }
    if quiesce {
        let resumed = hw
            .wake_engines()
            .and_then(|_| hw.object_command(Opcode::ResumeContext, id.raw()));
        if resumed.is_err() {
            pr_warn!(
                "context {} could not be resumed after an INTRA_GPU fence demotion\n",
                id.raw()
            );
        }
    }
    if let Err(e) = moved {
        if e == ETIMEDOUT {
            // The device may still carry the move out: the page stays where it may point.
            pr_warn!("a system page an INTRA_GPU fence's move timed out to is kept until the device is reset\n");
            core.objects().quarantine(Kept::FencePage, page);
        } else {
            core.unmap_system(sys_va, 2);
        }
        return Err(e);
    }
    drop(hw);
    f.set_demoted(page, sys_va)?;
    core.objects().fence_demotions += 1;
    pr_debug!(
        "belfry: INTRA_GPU fence {:#x} demoted from VRAM {:#x} to system memory\n",
        f.global.raw(),
        offset
    );
    Ok(offset)
}

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

use kernel::prelude::*;

use super::{object::FencePages, opt::MonitoredPage, waits::Fences};
use crate::{
    abi::{
        fence,
        ids::FenceHandle,
        mailbox::{self, Opcode},
        mmu,
    },
    hw::{
        command::HwGuard,
        dmamem::{DmaBuf, PAGE},
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

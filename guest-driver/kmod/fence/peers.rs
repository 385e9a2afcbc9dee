// SPDX-License-Identifier: GPL-2.0

//! Peer signals (`CAPS.peer_signals`, XAD-15): the module-wide list of the peer-capable devices
//! and their peer-signal pages, and the `SET_PEER_SIGNALS` that keeps every member's device
//! pointed at its own page and the other members' pages.
//!
//! A device joins when it binds ([`PeerSignals::join`], before its `/dev/belfry<N>` exists) and
//! leaves when it unbinds ([`LeaveOnUnbind`], before its core is revoked). Exchanging the pages
//! at bind and unbind, not when a cross-adapter fence is opened, is what makes skipping the
//! notification safe: no fence can be open on a device before it joined, so every GPU signal
//! of a cross-adapter fence open on two members was announced by the signalling device into the
//! other's page ([`PeerSignals::active`] is the proof the propagation checks).
//!
//! Every member's device is told each page at its own bus address: a page is mapped once more
//! for every other member's device ([`DeviceView`], so behind an IOMMU, where each device has
//! a DMA space of its own, the address it gets names that page there). Those mappings come and
//! go with the members: made when a device joins, undone when it leaves.
//!
//! Leaving: the device is marked inactive first (propagations notify it again), every other
//! member is sent the list without its page, then the device itself is sent `own_page` 0; only
//! once every one of those commands completed is the page freed and its mappings undone — a
//! device that did not answer may still write into it, so the page and its mappings are then
//! kept (leaked, with a warning) instead; the same holds for the leaving device's mappings of
//! the other pages until it confirmed it dropped them.
//!
//! Lock order: the member list, then a device's hardware.

use kernel::{
    global_lock,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Release},
        Arc,
    },
};

use crate::{
    abi::{
        mailbox::{self, Opcode, MAX_PEER_PAGES},
        peer,
    },
    hw::{core::Core, devmap::DeviceView, dmamem::DmaBuf},
};

/// One device's part in peer signals.
pub(crate) struct PeerSignals {
    /// The device.
    core: Arc<Core>,
    /// Whether the device and every other member hold each other's pages: a GPU signal here is
    /// announced to them, and theirs to it.
    active: Atomic<bool>,
}

/// A member of the list: the device and its page.
struct Member {
    /// The device.
    signals: Arc<PeerSignals>,
    /// Its peer-signal page, zeroed when allocated.
    page: DmaBuf,
    /// The page as each other member's device reaches it.
    views: KVec<DeviceView>,
}

impl Member {
    /// The bus address of this member's page on the device of `other` (`EINVAL` if the page
    /// is not mapped there).
    fn address_on(&self, other: &Member) -> Result<u64> {
        let core = &other.signals.core;
        let dev = core.device();
        if self.page.is_for(dev) {
            return Ok(self.page.dma_address());
        }
        self.views
            .iter()
            .find(|v| v.is_for(dev))
            .map(DeviceView::address)
            .ok_or(EINVAL)
    }
}

global_lock! {
    // SAFETY: `init` runs at module load, before any device probes.
    unsafe(uninit) static MEMBERS: Mutex<KVec<Member>> = KVec::new();
}

/// Initialises the member list.
///
/// # Safety
///
/// Called once, at module load, before any device probes.
pub(crate) unsafe fn init() {
    // SAFETY: the caller calls this once, before any other use of the list.
    unsafe { MEMBERS.init() };
}

impl PeerSignals {
    /// The part of the device of `core`: not a member.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(core: Arc<Core>) -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                core,
                active: Atomic::new(false),
            },
            GFP_KERNEL,
        )?)
    }

    /// Whether this device takes part: its GPU signals of cross-adapter fences reach the other
    /// members' devices through their pages, and theirs reach it.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Acquire)
    }

    /// Payloads the other members' GPUs announced into this device's page so far (its claim
    /// index; 0 while it is not a member).
    pub(crate) fn announced(&self) -> u64 {
        let members = MEMBERS.lock();
        members
            .iter()
            .find(|m| core::ptr::eq(&*m.signals, self))
            .map_or(0, |m| m.page.read64(peer::CLAIM_OFFSET as usize))
    }

    /// At bind, on a device with `CAPS.peer_signals`: a zeroed page for it, and every member's
    /// device (this one included) told its page and the others'. A device that cannot take
    /// part (no page, a full list, a refused command) works as a device without peer signals.
    pub(crate) fn join(self: &Arc<Self>) {
        if !self.core.info().caps.peer_signals() {
            return;
        }
        let page = match self.core.hw().and_then(|hw| DmaBuf::new(hw.dev()?, 1)) {
            Ok(page) => page,
            Err(e) => {
                dev_warn!(self.core.device(), "no peer-signal page: {:?}\n", e);
                return;
            }
        };
        let mut members = MEMBERS.lock();
        if members.len() > MAX_PEER_PAGES {
            dev_warn!(
                self.core.device(),
                "more than {} peer-capable devices: peer signals off here\n",
                MAX_PEER_PAGES + 1
            );
            return;
        }
        let mut member = Member {
            signals: self.clone(),
            page,
            views: KVec::new(),
        };
        if let Err(e) = view_each_other(&mut members, &mut member) {
            dev_warn!(
                self.core.device(),
                "peer-signal pages not mapped: {:?}: peer signals off here\n",
                e
            );
            drop_views_of(&mut members, &member);
            return;
        }
        if members.push(member, GFP_KERNEL).is_err() {
            return;
        }
        let mut all_told = true;
        for i in 0..members.len() {
            if tell(&members, i).is_err() {
                // That member's device does not hold the new page: it takes no part any more.
                members[i].signals.active.store(false, Release);
                all_told = false;
                if core::ptr::eq(Arc::as_ptr(&members[i].signals), Arc::as_ptr(self)) {
                    return;
                }
            }
        }
        if !all_told {
            dev_warn!(
                self.core.device(),
                "a peer-capable device refused the peer-signal pages\n"
            );
        }
        self.active.store(true, Release);
    }

    /// At unbind: this device's page dropped from every other member's device, then peer
    /// signals off on this one, then the page freed (kept if a device did not confirm).
    fn leave(&self) {
        self.active.store(false, Release);
        let mut members = MEMBERS.lock();
        let Some(i) = members
            .iter()
            .position(|m| core::ptr::eq(&*m.signals, self))
        else {
            return;
        };
        let Ok(mut gone) = members.remove(i) else {
            return;
        };
        if members.is_empty() {
            // The list outlives every device: its buffer goes with the last member.
            *members = KVec::new();
        }
        let mut confirmed = true;
        for j in 0..members.len() {
            if tell(&members, j).is_err() {
                members[j].signals.active.store(false, Release);
                confirmed = false;
            }
        }
        let off = self.core.hw().and_then(|mut hw| {
            let mut args = mailbox::PeerSignalsArgs::default();
            hw.command(Opcode::SetPeerSignals, &mut args, &[])
        });
        if off.is_err() {
            // This device may still write into the other pages: their addresses there stay.
            for m in members.iter_mut() {
                keep_views_of(m, &gone);
            }
        } else {
            drop_views_of(&mut members, &gone);
        }
        drop(members);
        if off.is_err() || !confirmed {
            dev_warn!(
                self.core.device(),
                "a device did not confirm dropping the peer-signal page: keeping it\n"
            );
            for v in core::mem::take(&mut gone.views) {
                v.keep();
            }
            core::mem::forget(gone.page);
        }
    }
}

/// Maps `new`'s page for every member's device and every member's page for `new`'s device.
/// On error some may be mapped: [`drop_views_of`] undoes them.
///
/// # Errors
///
/// `ENOMEM`, `ENODEV`.
fn view_each_other(members: &mut [Member], new: &mut Member) -> Result {
    for m in members.iter_mut() {
        {
            let hw = m.signals.core.hw()?;
            let view = DeviceView::new(hw.dev()?, &new.page)?;
            new.views.push(view, GFP_KERNEL)?;
        }
        let hw = new.signals.core.hw()?;
        let view = DeviceView::new(hw.dev()?, &m.page)?;
        m.views.push(view, GFP_KERNEL)?;
    }
    Ok(())
}

/// Undoes the mappings of the members' pages for the device of `gone`.
fn drop_views_of(members: &mut [Member], gone: &Member) {
    let dev = gone.signals.core.device();
    for m in members.iter_mut() {
        m.views.retain(|v| !v.is_for(dev));
    }
}

/// Keeps the mapping of `m`'s page for the device of `gone` (it may still use it) until that
/// device unbinds, where its reset and bus mastering off end every use (`hw::dmamap`).
fn keep_views_of(m: &mut Member, gone: &Member) {
    let dev = gone.signals.core.device();
    if let Some(i) = m.views.iter().position(|v| v.is_for(dev)) {
        if let Ok(v) = m.views.remove(i) {
            v.keep();
        }
    }
}

/// `SET_PEER_SIGNALS` to the device of `members[i]`: its page, and the other members' pages,
/// each at its bus address on that device.
fn tell(members: &[Member], i: usize) -> Result {
    let mut args = mailbox::PeerSignalsArgs {
        own_page: members[i].page.dma_address(),
        ..Default::default()
    };
    let mut count = 0;
    for (j, m) in members.iter().enumerate() {
        if j != i && count < MAX_PEER_PAGES {
            args.peers[count] = m.address_on(&members[i])?;
            count += 1;
        }
    }
    args.peer_count = u32::try_from(count)?;
    members[i]
        .signals
        .core
        .hw()?
        .command(Opcode::SetPeerSignals, &mut args, &[])
}

/// Leaves the peer-signal list when dropped (unbind, before the core is revoked).
pub(crate) struct LeaveOnUnbind(pub(crate) Arc<PeerSignals>);

impl Drop for LeaveOnUnbind {
    fn drop(&mut self) {
        self.0.leave();
    }
}

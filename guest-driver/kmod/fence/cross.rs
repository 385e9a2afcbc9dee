// SPDX-License-Identifier: GPL-2.0

//! Cross-adapter fences (XAD-01..14): one fence open on several Belfry devices.
//!
//! An [`XFence`] is one CurrentValue page in system memory, allocated on the device that
//! created it, and one *side* per device the fence is open on. A side is a registration of that
//! very page with its device (`REGISTER_CROSS_ADAPTER`), mapped in the device's system address
//! space and, through every local handle, in the contexts' address spaces: all of them point at
//! the same physical page (XAD-03). Each side reaches the page at its own bus address
//! ([`DeviceView`]: behind an IOMMU every device has a DMA space of its own, so the page is
//! mapped once more for every device but the creating one; without an IOMMU every address is
//! the page's guest physical address). On a native-capable device
//! the side is a DEFAULT native fence with a MonitoredValue page of its own held at 0 for the
//! side's whole life (`FenceBook::pinned`, XAD-05), so every GPU signal interrupts; on a device
//! without native fences it is a monitored fence (XAD-10), and a fence created MONITORED opens
//! as a native fence on a native device (XAD-11).
//!
//! Propagation ([`XFence::propagate`]): after a device's interrupt thread (or a CPU signal)
//! ran, the fence's CurrentValue is compared with the value each side was last told of; a
//! change goes to every other side through its device's [`Adapter::changed`]: a notification-only
//! `NOTIFY_FENCE_CHANGED` to a native device (its hardware queues waiting on the fence are
//! re-evaluated, nothing is written, XAD-07, XAD-09), then the release of the device's CPU
//! waits (blocking and eventfd) and of the kernel-mode work it holds behind the fence (XAD-12).
//!
//! Peer signals (XAD-15, `super::peers`): when the change is a GPU signal of a device taking
//! part, the other devices taking part were woken by the signalling device itself, so their
//! sides get no notification, only the release of their CPU waits.
//!
//! Lifetimes: each local handle holds the `XFence` and counts as a user of its device's side;
//! the last user of a side unregisters it and drops it from the device's list. An exported fd
//! holds the `XFence` (and so the page) without holding any side. Lock order: a side list, then
//! the hardware; the device lists are locked alone.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

use super::waits::Fences;
use crate::{
    abi::{
        fence::{self, FenceKind},
        ids::FenceHandle,
        mailbox::{self, Opcode},
        mmu, uapi_debug,
    },
    hw::{devmap::DeviceView, dmamem::DmaBuf, pagetable::AddressSpace},
};

/// What a device offers a cross-adapter fence.
pub(crate) trait Adapter: Send + Sync {
    /// Its fences.
    fn fences(&self) -> &Arc<Fences>;
    /// The shared CurrentValues of fences `fences` (`None`: of any fence, re-check
    /// every wait) changed without this device reporting it: tell the device (`notify`: the
    /// native fence one notification-only update names, which re-reads every queue parked on
    /// a cross-adapter fence there) and release what waits here on them.
    fn changed(&self, notify: Option<FenceHandle>, fences: Option<&[FenceHandle]>);
    /// Whether this device takes part in peer signals (XAD-15): every other taking part
    /// announces its GPU signals of cross-adapter fences into this device's peer-signal page,
    /// which wakes the hardware queues waiting on them here without a notification.
    fn peer_signals(&self) -> bool;
    /// Adds `x` to the fences this device's interrupt thread propagates.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    fn enlist(&self, x: &Arc<XFence>) -> Result;
    /// Removes `x` from that list.
    fn delist(&self, x: &XFence);
}

/// One device's registration of the fence.
struct Side {
    /// The device.
    adapter: Arc<dyn Adapter>,
    /// Its global handle on that device.
    global: FenceHandle,
    /// A native (DEFAULT) fence there, else a monitored one.
    native: bool,
    /// The CurrentValue page as that device reaches it.
    current: DeviceView,
    /// Its MonitoredValue page, held at 0 (native sides).
    monitored: Option<DmaBuf>,
    /// VA of the CurrentValue page in that device's system address space (MonitoredValue one
    /// page after it).
    sys_va: u64,
    /// Local handles open on it.
    users: u32,
    /// The CurrentValue this device was last told of (or had when the side was opened).
    seen: u64,
    /// The CurrentValue its CPU waits were last released for without telling the device (a
    /// peer signal told it); `seen` stays, so a CPU signal's propagation still tells it.
    released: u64,
    /// Notifications sent to it.
    notifications: u64,
}

impl Side {
    /// Whether it is the side of the device of `fences`.
    fn is_on(&self, fences: &Fences) -> bool {
        core::ptr::eq(Arc::as_ptr(self.adapter.fences()), fences)
    }
}

/// The sides and the propagation count.
struct Sides {
    /// One per device.
    list: KVec<Side>,
    /// Propagations that told at least one device.
    propagations: u64,
}

/// A cross-adapter fence.
#[pin_data]
pub(crate) struct XFence {
    /// The one CurrentValue (offset 0), in system memory.
    current: Arc<DmaBuf>,
    /// Its sides.
    #[pin]
    sides: Mutex<Sides>,
}

impl XFence {
    /// A new cross-adapter fence with CurrentValue `initial`, its page allocated for the device
    /// of `fences`; open on no device yet (each device decides, when it opens it, whether it is
    /// native there).
    ///
    /// # Errors
    ///
    /// `ENOMEM`, `ENODEV`.
    pub(crate) fn new(fences: &Fences, initial: u64) -> Result<Arc<Self>> {
        let current = {
            let hw = fences.core().hw()?;
            Arc::new(DmaBuf::new(hw.dev()?, 1)?, GFP_KERNEL_ACCOUNT)?
        };
        current.write64(0, initial);
        Arc::pin_init(
            try_pin_init!(Self {
                current,
                sides <- new_mutex!(Sides {
                    list: KVec::new(),
                    propagations: 0,
                }),
            }? Error),
            GFP_KERNEL_ACCOUNT,
        )
    }

    /// The CurrentValue page.
    pub(crate) fn current(&self) -> &Arc<DmaBuf> {
        &self.current
    }

    /// Opens one more user of the fence on `adapter`'s device, registering a side there the
    /// first time (`native`: as a DEFAULT fence with MonitoredValue 0, else as a monitored
    /// fence); its global handle there and whether it is native.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, `ENODEV`, `EIO` (the device refused), `ETIMEDOUT`.
    pub(crate) fn attach(
        self: &Arc<Self>,
        adapter: &Arc<dyn Adapter>,
        native: bool,
    ) -> Result<(FenceHandle, bool)> {
        let fences = adapter.fences();
        let mut sides = self.sides.lock();
        if let Some(s) = sides.list.iter_mut().find(|s| s.is_on(fences)) {
            s.users += 1;
            return Ok((s.global, s.native));
        }
        sides.list.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let core = fences.core();
        let mut hw = core.hw()?;
        let monitored = if native {
            let m = DmaBuf::new(hw.dev()?, 1)?;
            // Held at 0 while the fence is cross-adapter (XAD-05).
            m.write64(0, 0);
            Some(m)
        } else {
            None
        };
        let current = DeviceView::new(hw.dev()?, &self.current)?;
        let sys_va = core.map_system_pages(
            &hw,
            current.address(),
            monitored.as_ref().map(DmaBuf::dma_address),
        )?;
        let global = core.objects().take_fence_handle();
        let location = |address| mailbox::FenceLocation {
            space: mailbox::LOCATION_SYSTEM_VA,
            address,
            ..Default::default()
        };
        let kind = if native {
            FenceKind::Default
        } else {
            FenceKind::Monitored
        };
        let pinned: Result = if native {
            fences
                .book()
                .pinned
                .push(global, GFP_KERNEL_ACCOUNT)
                .map_err(Error::from)
        } else {
            Ok(())
        };
        let registered = pinned.and_then(|()| {
            fences.register_with(
                &mut hw,
                global,
                kind,
                location(sys_va),
                location(sys_va + mmu::PAGE_SIZE),
                true,
                mailbox::REGISTER_CROSS_ADAPTER,
            )
        });
        drop(hw);
        let enlisted = match registered {
            Ok(()) => adapter.enlist(self).inspect_err(|_| fences.unregister(global)),
            Err(e) => Err(e),
        };
        if let Err(e) = enlisted {
            fences.book().pinned.retain(|h| *h != global);
            // The device may hold the registration: the slot stays taken, and so does the
            // page's address there.
            core.release_system(sys_va, false);
            current.keep();
            return Err(e);
        }
        // Room reserved above.
        let _ = sides.list.push(
            Side {
                adapter: adapter.clone(),
                global,
                native,
                current,
                monitored,
                sys_va,
                users: 1,
                seen: self.current.read64(0),
                released: 0,
                notifications: 0,
            },
            GFP_KERNEL_ACCOUNT,
        );
        Ok((global, native))
    }

    /// Closes one user on the device of `fences`; the last one unregisters that side (the
    /// hardware must not be locked).
    pub(crate) fn detach(&self, fences: &Fences) {
        let side = {
            let mut sides = self.sides.lock();
            let Some(i) = sides.list.iter().position(|s| s.is_on(fences)) else {
                return;
            };
            sides.list[i].users -= 1;
            if sides.list[i].users > 0 {
                return;
            }
            sides.list.remove(i).ok()
        };
        let Some(side) = side else {
            return;
        };
        side.adapter.delist(self);
        let forgotten = fences.unregister_confirmed(side.global);
        fences.book().pinned.retain(|h| *h != side.global);
        fences.core().release_system(side.sys_va, forgotten);
        if !forgotten {
            // The device may still name the page: its address there stays its.
            side.current.keep();
        }
    }

    /// Adds to `notices` every side whose device has not been told the current CurrentValue,
    /// except the side of `from` (a device whose own paths release its waiters for what it
    /// wrote or just stored); the caller delivers them, one notice per device. That side is not
    /// marked told: if the change was in fact another device's, not yet propagated, that
    /// device's propagation still reaches it. Without memory for the notices nothing is marked
    /// told, so the next propagation tells them.
    ///
    /// `announced`: the change comes from `from`'s fence records and `from` takes part in peer
    /// signals, so its GPU announced its signals into the page of every device taking part
    /// (XAD-15). Such a device is not notified — only its CPU waits are released — and is not
    /// marked told either: the value may in fact be a CPU signal's (which announces nothing),
    /// whose own propagation must still notify it.
    pub(crate) fn propagate(&self, from: Option<&Fences>, announced: bool, notices: &mut Notices) {
        let value = self.current.read64(0);
        let mut sides = self.sides.lock();
        if notices.reserve(sides.list.len()).is_err() {
            return;
        }
        let mut told = false;
        for s in sides.list.iter_mut() {
            if s.seen == value || from.is_some_and(|f| s.is_on(f)) {
                continue;
            }
            let notify = !(announced && s.adapter.peer_signals());
            if !notify && s.released == value {
                continue;
            }
            // Room reserved above.
            let named = notices.add(&s.adapter, s.global, s.native && notify);
            if notify {
                s.seen = value;
                if named || !s.native {
                    s.notifications += 1;
                }
            }
            s.released = value;
            told = true;
        }
        if told {
            sides.propagations += 1;
        }
    }

    /// Maps CurrentValue read/write at `va` of `space` on the device of `fences`.
    ///
    /// # Errors
    ///
    /// `ENODEV`, `ENOMEM`, `EINVAL`.
    pub(crate) fn map_local(&self, fences: &Fences, space: &mut AddressSpace, va: u64) -> Result {
        let address = {
            let sides = self.sides.lock();
            let side = sides.list.iter().find(|s| s.is_on(fences)).ok_or(EINVAL)?;
            side.current.address()
        };
        let core = fences.core();
        let hw = core.hw()?;
        let before = space.mapped_pages();
        let r = space.map_page(hw.dev()?, va, address, true);
        core.add_gpu_pages(before, space.mapped_pages());
        r
    }

    /// Unmaps a local handle's GPU VA `va` from `space`.
    pub(crate) fn unmap_local(&self, fences: &Fences, space: &mut AddressSpace, va: u64) {
        fences.core().unmap_pages(space, va, 1);
    }

    /// MonitoredValue of the side on the device of `fences` (UINT64_MAX for a monitored side).
    pub(crate) fn monitored_value(&self, fences: &Fences) -> u64 {
        let sides = self.sides.lock();
        sides
            .list
            .iter()
            .find(|s| s.is_on(fences))
            .and_then(|s| s.monitored.as_ref())
            .map_or(fence::MONITORED_VALUE_NONE, |m| m.read64(0))
    }

    /// `XAD_INFO` as the device of `fences` sees the fence.
    pub(crate) fn info(&self, fences: &Fences, out: &mut uapi_debug::XadInfo) {
        out.monitored_value = self.monitored_value(fences);
        let sides = self.sides.lock();
        let side = sides.list.iter().find(|s| s.is_on(fences));
        out.native = u32::from(side.is_some_and(|s| s.native));
        out.notifications = side.map_or(0, |s| s.notifications);
        out.current_address = side.map_or(0, |s| s.current.address());
        out.devices = u32::try_from(sides.list.len()).unwrap_or(u32::MAX);
        out.propagations = sides.propagations;
    }
}

/// `NOTIFY_FENCE_CHANGED` of fence `global` on the device of `fences` (XAD-07).
///
/// # Errors
///
/// `ENODEV` (the device is gone), `EIO`, `ETIMEDOUT`.
pub(crate) fn notify_changed(fences: &Fences, global: FenceHandle) -> Result {
    let mut hw = fences.core().hw()?;
    let mut args = mailbox::FenceHandleArgs {
        handle: global.raw(),
        ..Default::default()
    };
    hw.command(Opcode::NotifyFenceChanged, &mut args, &[])
}

/// One device's notice: what one propagation pass owes it (see [`Notices`]).
struct Notice {
    /// The device.
    adapter: Arc<dyn Adapter>,
    /// The native fence its `NOTIFY_FENCE_CHANGED` names, when one of its sides is to be told.
    notify: Option<FenceHandle>,
    /// The fences whose waits there are re-checked.
    fences: KVec<FenceHandle>,
    /// A fence could not be recorded (no memory): every wait there is re-checked.
    every: bool,
}

/// The notices of one propagation pass: the cross-adapter fences whose CurrentValue moved,
/// gathered per device, so that each device gets one notice however many fences moved — at
/// most one `NOTIFY_FENCE_CHANGED` (naming one of them: the device's engines then re-read every
/// queue parked on a cross-adapter fence) and one pass over its CPU waits, eventfd waits, held
/// work and `sync_file` exports. A fence that moves after a pass gathered it is propagated by a
/// later pass (a side is marked told only when a pass gathers it): batching loses no wake-up.
pub(crate) struct Notices {
    /// One per device.
    list: KVec<Notice>,
}

impl Notices {
    /// No notice yet.
    pub(crate) fn new() -> Self {
        Self { list: KVec::new() }
    }

    /// Makes room for `devices` more devices, so that [`Self::add`] of any of them cannot fail.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn reserve(&mut self, devices: usize) -> Result {
        self.list.reserve(devices, GFP_KERNEL)?;
        Ok(())
    }

    /// Adds fence `global` of `adapter`'s device (`notify`: a native side there that must be
    /// told). Whether this fence is the one the device's notification names (the first of the
    /// pass to need one), which the side counts in `XAD_INFO.notifications`.
    ///
    /// Needs room for a device not yet in the pass ([`Self::reserve`]); without it, the fence
    /// is left out.
    pub(crate) fn add(&mut self, adapter: &Arc<dyn Adapter>, global: FenceHandle, notify: bool) -> bool {
        let fences = Arc::as_ptr(adapter.fences());
        let i = match self
            .list
            .iter()
            .position(|n| core::ptr::eq(Arc::as_ptr(n.adapter.fences()), fences))
        {
            Some(i) => i,
            None => {
                let notice = Notice {
                    adapter: adapter.clone(),
                    notify: None,
                    fences: KVec::new(),
                    every: false,
                };
                if self.list.push(notice, GFP_KERNEL).is_err() {
                    return false;
                }
                self.list.len() - 1
            }
        };
        let n = &mut self.list[i];
        if !n.every && n.fences.push(global, GFP_KERNEL).is_err() {
            n.every = true;
        }
        let named = notify && n.notify.is_none();
        if named {
            n.notify = Some(global);
        }
        named
    }

    /// Gives each device its notice.
    pub(crate) fn deliver(self) {
        for n in self.list {
            let fences = (!n.every).then_some(&n.fences[..]);
            n.adapter.changed(n.notify, fences);
        }
    }
}

// SPDX-License-Identifier: GPL-2.0

//! The mailbox on the [`Core`]: [`HwGuard`] ([`Core::hw`]), the hardware locked for one command
//! at a time — the BAR0 block or the command ring, a completion matched to its command by
//! sequence number, the wait for it ([`Core::wait_done`]: the completion interrupt, a
//! command-ring fault, the timeout that wedges the mailbox) — the DMA allocations that need the
//! bound device, the core's start ([`Core::start`]: interrupt ring, system address space) and
//! its system-address-space mappings, which need the locked hardware.

use kernel::{
    device::{Bound, Device},
    prelude::*,
    sync::{
        barrier::{dma_mb, Read},
        lock::{mutex::MutexBackend, Guard},
        CondVarTimeoutResult,
    },
    time::{delay::fsleep, msecs_to_jiffies, Delta, Jiffies},
    transmute::{AsBytes, FromBytes},
};

use super::core::{
    monotonic_ns, status_name, vector_bit, Core, HwState, ENTRY_LAG_POLLS, IRQ_RING_ENTRIES,
    RING_CHECK_MS, SEQ_OFFSET, STATUS_OFFSET,
};
use super::{
    cmdring::CmdRing,
    dmamem::{DmaBuf, PAGE},
    mbseq::{self, Completion},
    pagetable::AddressSpace,
    quarantine,
    regs::{read_reg, write_reg, Bar0},
};
use crate::abi::{
    ids::AddressSpaceId,
    mailbox::{self, Opcode, Status},
    mmu, regs, uapi_debug,
};

/// How a wait for a mailbox completion ended ([`Core::wait_done`]).
enum Waited {
    /// The completion arrived.
    Done,
    /// No completion within the mailbox timeout (`mailbox_timeout_ms`, read as the wait began).
    Timeout {
        /// The timeout (ms).
        after_ms: u32,
    },
    /// The caller's fault check found the command lost (a command-ring fault).
    Fault,
}

impl Core {
    /// Locks the hardware for a sequence of device operations.
    ///
    /// # Errors
    ///
    /// `ENODEV` once the device is unbound.
    pub(crate) fn hw(&self) -> Result<HwGuard<'_>> {
        let state = self.hw.lock();
        if state.hw.is_none() {
            return Err(ENODEV);
        }
        Ok(HwGuard { core: self, state })
    }

    /// Points the device at the interrupt ring and creates the system address space.
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`, `ENOMEM`.
    pub(crate) fn start(&self) -> Result {
        let mut hw = self.hw()?;
        if let Some(doorbell) = self.info.cmd_ring_doorbell {
            let mut ring = CmdRing::new(hw.dev()?, doorbell, self.info.caps.shared_doorbells())?;
            ring.enable(hw.bar()?);
            hw.state.ring = Some(ring);
            dev_info!(
                self.dev,
                "mailbox commands through the command ring (doorbell page {})\n",
                doorbell
            );
        }
        let mut ring = mailbox::SetInterruptRingArgs {
            base_pa: self.ring.dma_address(),
            entries: IRQ_RING_ENTRIES,
            ..Default::default()
        };
        hw.command(Opcode::SetInterruptRing, &mut ring, &[])?;
        if self.info.caps.irq_moderation() {
            let (us, _) = hw.irq_moderation(None)?;
            dev_info!(
                self.dev,
                "interrupt moderation: at most one fence/engine/fault interrupt per vector per {} us\n",
                us
            );
        }

        let space = AddressSpace::new(hw.dev()?, AddressSpaceId::new(0))?;
        let mut args = mailbox::CreateAddressSpaceArgs {
            id: space.id().raw(),
            root_pa: space.root_pa(),
            ..Default::default()
        };
        hw.command(Opcode::CreateAddressSpace, &mut args, &[])?;
        self.objects().set_system(space);
        Ok(())
    }

    /// Maps `buf` read/write at `sys_va` of the system (CMP) address space, a page reserved
    /// and left unmapped by [`Self::map_system`] (the second page of a pair), counting it.
    ///
    /// # Errors
    ///
    /// `ENODEV` (no system address space or device), `ENOMEM`.
    pub(crate) fn map_system_at(&self, hw: &HwGuard<'_>, sys_va: u64, buf: &DmaBuf) -> Result {
        let mut objects = self.objects();
        let system = objects.system()?;
        let before = system.mapped_pages();
        let mapped = system.map_buf(hw.dev()?, sys_va, buf, true);
        self.add_gpu_pages(before, system.mapped_pages());
        mapped
    }

    /// Maps `first` and, if given, `second` read/write at the two pages of a new slot of the
    /// system (CMP) address space (CAP-06, `hw::sysva`), counting them; the system VA of
    /// `first`, for [`Core::release_system`]. Without `second` the second page stays unmapped.
    /// Nothing stays mapped (and the slot is free again) on failure.
    ///
    /// # Errors
    ///
    /// `ENODEV` (no system address space or device), `ENOMEM`, `ENOSPC` (no slot), `EINVAL` (a
    /// buffer of more than one page).
    pub(crate) fn map_system(
        &self,
        hw: &HwGuard<'_>,
        first: &DmaBuf,
        second: Option<&DmaBuf>,
    ) -> Result<u64> {
        // A slot's two pages are one page each.
        if first.pages() != 1 || second.is_some_and(|s| s.pages() != 1) {
            return Err(EINVAL);
        }
        self.map_system_pages(hw, first.dma_address(), second.map(|s| s.dma_address()))
    }

    /// [`Self::map_system`] of single pages given by their bus addresses on this device (a
    /// page shared with other devices, `super::devmap`).
    ///
    /// # Errors
    ///
    /// As [`Self::map_system`].
    pub(crate) fn map_system_pages(
        &self,
        hw: &HwGuard<'_>,
        first: u64,
        second: Option<u64>,
    ) -> Result<u64> {
        let mut objects = self.objects();
        objects.system()?;
        let sys_va = objects.take_system_va()?;
        let system = objects.system()?;
        let before = system.mapped_pages();
        let mapped = system
            .map_page(hw.dev()?, sys_va, first, true)
            .and_then(|()| {
                let Some(second) = second else {
                    return Ok(());
                };
                system
                    .map_page(hw.dev()?, sys_va + mmu::PAGE_SIZE, second, true)
                    .inspect_err(|_| system.unmap_range(sys_va, 1))
            });
        self.add_gpu_pages(before, system.mapped_pages());
        if mapped.is_err() {
            objects.put_system_va(sys_va);
        }
        mapped.map(|()| sys_va)
    }

    /// Sleeps until a mailbox completion is recorded on a vector of `mask`, or `fault` (called
    /// after an interrupt that brought nothing to consume, and every [`RING_CHECK_MS`]) says
    /// the command is lost. Never returns early for a signal (a command in flight owns the
    /// block): a pending signal turns the wait into 1 ms uninterruptible sleeps.
    fn wait_done(&self, mask: u64, mut fault: impl FnMut() -> bool) -> Waited {
        let timeout_ms = crate::bindings::param::mailbox_timeout_ms_param();
        let total: Jiffies = msecs_to_jiffies(timeout_ms);
        let slice: Jiffies = msecs_to_jiffies(RING_CHECK_MS).max(1);
        let mut waited: Jiffies = 0;
        let mut ev = self.events.lock();
        let mut seen = ev.unexplained;
        while ev.done & mask == 0 {
            if ev.unexplained != seen {
                seen = ev.unexplained;
                drop(ev);
                if fault() {
                    return Waited::Fault;
                }
                ev = self.events.lock();
                continue;
            }
            if waited >= total {
                return Waited::Timeout { after_ms: timeout_ms };
            }
            let step = slice.min(total - waited);
            match self.wake.wait_interruptible_timeout(&mut ev, step) {
                CondVarTimeoutResult::Timeout => {
                    waited += step;
                    drop(ev);
                    if fault() {
                        return Waited::Fault;
                    }
                    ev = self.events.lock();
                }
                CondVarTimeoutResult::Woken { jiffies } => waited += step.saturating_sub(jiffies),
                CondVarTimeoutResult::Signal { .. } => {
                    drop(ev);
                    for ms in 0..timeout_ms {
                        fsleep(Delta::from_millis(1));
                        if self.events.lock().done & mask != 0 {
                            return Waited::Done;
                        }
                        if ms % RING_CHECK_MS == RING_CHECK_MS - 1 && fault() {
                            return Waited::Fault;
                        }
                    }
                    return Waited::Timeout { after_ms: timeout_ms };
                }
            }
        }
        Waited::Done
    }
}

/// The hardware, locked: mailbox commands and DMA allocations for the bound device.
pub(crate) struct HwGuard<'a> {
    /// The core.
    pub(in crate::hw) core: &'a Core,
    /// The locked state; `hw` is `Some` (checked by [`Core::hw`]).
    pub(in crate::hw) state: Guard<'a, HwState, MutexBackend>,
}

impl HwGuard<'_> {
    /// The bound device, for DMA allocations.
    ///
    /// # Errors
    ///
    /// `ENODEV` once revoked (cannot happen while the guard is held).
    pub(crate) fn dev(&self) -> Result<&Device<Bound>> {
        let hw = self.state.hw.as_ref().ok_or(ENODEV)?;
        // SAFETY: By the contract of `Core::attach`, the device is valid until `Core::revoke`,
        // which cannot complete while this guard holds the hardware mutex.
        Ok(unsafe { hw.dev.as_ref() })
    }

    /// BAR0.
    pub(super) fn bar(&self) -> Result<&Bar0<'static>> {
        let hw = self.state.hw.as_ref().ok_or(ENODEV)?;
        // SAFETY: As in `dev`: BAR0 stays mapped until `Core::revoke` returns.
        Ok(unsafe { hw.bar.as_ref() })
    }

    /// Hands the block at `addr` to the device: a command-ring entry and its doorbell, or the
    /// three BAR0 mailbox writes; the ring entry's index if the ring was used.
    fn submit_block(&mut self, opcode: Opcode, seq: u16, addr: u64) -> Result<Option<u32>> {
        let hw = self.state.hw.as_ref().ok_or(ENODEV)?;
        // SAFETY: As in `dev`: BAR0 and BAR2 stay mapped until `Core::revoke` returns.
        let bar = unsafe { hw.bar.as_ref() };
        // SAFETY: As above.
        let doorbells = hw.doorbells.map(|d| unsafe { d.as_ref() });
        if let (Some(ring), Some(doorbells)) = (self.state.ring.as_mut(), doorbells) {
            return ring
                .submit(bar, doorbells, opcode as u32, u32::from(seq), addr)
                .map(Some);
        }
        // MMIO writes are ordered after the block's memory writes (`writel` semantics).
        // CAST: the two halves of the 64-bit address, truncation intended.
        write_reg(bar, regs::MB_ARG_LO::default().with_value(addr as u32));
        // CAST: as above.
        write_reg(
            bar,
            regs::MB_ARG_HI::default().with_value((addr >> 32) as u32),
        );
        write_reg(bar, regs::MB_SUBMIT::default().with_seq(u32::from(seq)));
        Ok(None)
    }

    /// `DB_WAKE`: wakes the command processor of a shared-doorbell device, which a ring of
    /// physical doorbell `index` found asleep. Nothing to do once the device is gone.
    pub(crate) fn wake_doorbell(&self, index: u32) {
        if self.state.d3 {
            return;
        }
        if let Ok(bar) = self.bar() {
            write_reg(bar, regs::DB_WAKE::default().with_index(index));
        }
    }

    /// `IRQ_MODERATION` (and `IRQ_MODERATED`): sets the interval to `set` if given, then reads
    /// the interval and the count of interrupts held back.
    ///
    /// # Errors
    ///
    /// `ENODEV` once revoked, `EAGAIN` in D3 (no register access).
    pub(crate) fn irq_moderation(&self, set: Option<u32>) -> Result<(u32, u32)> {
        if self.state.d3 {
            return Err(EAGAIN);
        }
        let bar = self.bar()?;
        if let Some(us) = set {
            write_reg(bar, regs::IRQ_MODERATION::default().with_usecs(us));
        }
        let interval: regs::IRQ_MODERATION = read_reg(bar);
        let held: regs::IRQ_MODERATED = read_reg(bar);
        Ok((interval.usecs(), held.count()))
    }

    /// `LOG_VERBOSE`: turns the device's verbose fence-log entries on or off (LOG-20).
    ///
    /// # Errors
    ///
    /// `ENODEV` once revoked, `EAGAIN` in D3 (no register access).
    pub(crate) fn set_log_verbose(&self, on: bool) -> Result {
        if self.state.d3 {
            return Err(EAGAIN);
        }
        let bar = self.bar()?;
        write_reg(bar, regs::LOG_VERBOSE::default().with_enable(on));
        // Read back: a PCI write may be posted (QEMU's vfio-user client sends BAR writes without
        // awaiting a reply), and work rung through shared doorbell memory can reach the device
        // before it; the read returns only after the write landed, so every wait started after
        // this call sees the switch as set.
        let _: regs::LOG_VERBOSE = read_reg(bar);
        Ok(())
    }

    /// Runs a mailbox command whose block is `args` (a [`mailbox::MailboxHeader`] first, filled
    /// in here) followed by `tail`; results are copied back into `args`.
    ///
    /// # Errors
    ///
    /// `ENOSPC` for [`Status::NoSpace`], `EIO` for another failure status, `ETIMEDOUT`,
    /// `EINVAL` for a block larger than a page, `ENODEV`.
    pub(crate) fn command<T: AsBytes + FromBytes>(
        &mut self,
        opcode: Opcode,
        args: &mut T,
        tail: &[u8],
    ) -> Result {
        match self.mailbox(opcode, args, tail, None)? {
            Status::Ok => Ok(()),
            status => {
                dev_warn!(
                    self.core.dev,
                    "mailbox {}: {}\n",
                    opcode.name(),
                    status.name()
                );
                Err(if status == Status::NoSpace {
                    ENOSPC
                } else {
                    EIO
                })
            }
        }
    }

    /// Runs a mailbox command and returns its status; with `vector`, waits for the completion
    /// on that vector (the self-test), otherwise on any.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT` when no completion arrives (the mailbox is then wedged), `EIO` for an
    /// unknown status, a completion that is not this command's (wedged) or a wedged mailbox,
    /// `EINVAL`, `ENODEV`.
    pub(crate) fn mailbox<T: AsBytes + FromBytes>(
        &mut self,
        opcode: Opcode,
        args: &mut T,
        tail: &[u8],
        vector: Option<u16>,
    ) -> Result<Status> {
        let core = self.core;
        if self.state.wedged {
            dev_dbg!(core.dev, "mailbox {}: refused, wedged\n", opcode.name());
            quarantine::count_mailbox(quarantine::Mailbox::RefusedWedged);
            return Err(EIO);
        }
        if self.state.d3 {
            dev_dbg!(
                core.dev,
                "mailbox {}: refused, the device is in D3\n",
                opcode.name()
            );
            return Err(EAGAIN);
        }
        let len = core::mem::size_of::<T>()
            .checked_add(tail.len())
            .filter(|&l| l <= PAGE)
            .ok_or(EINVAL)?;
        let seq = self.state.seq.wrapping_add(1);
        self.state.seq = seq;

        core.block.write_bytes(0, args.as_bytes());
        core.block.write_bytes(core::mem::size_of::<T>(), tail);
        core.block.write32(0, opcode as u32);
        core.block.write32(4, u32::try_from(len)?);
        core.block.write32(8, u32::from(seq));
        core.block.write32(STATUS_OFFSET, Status::Pending as u32);
        let mask = match vector {
            Some(v) => vector_bit(v),
            None => u64::MAX,
        };
        {
            let mut ev = core.events.lock();
            ev.done = 0;
            ev.mb_pending = true;
            ev.mb_irq_ns = 0;
        }

        let submit_ns = monotonic_ns();
        let entry = match self.submit_block(opcode, seq, core.block.dma_address()) {
            Ok(entry) => entry,
            Err(e) => {
                dev_err!(
                    core.dev,
                    "mailbox {}: submit failed: {:?}\n",
                    opcode.name(),
                    e
                );
                self.wedge();
                return Err(e);
            }
        };

        let written_ns = monotonic_ns();
        let waited = core.wait_done(mask, || entry.is_some() && self.ring_fault().is_some());
        if let Waited::Fault = waited {
            let (count, last) = self.ring_fault().unwrap_or((0, 0));
            dev_err!(
                core.dev,
                "mailbox {} (seq {}): the command ring faulted (CMD_RING_ERROR: {} error(s), last {}): the command is lost, failing it now\n",
                opcode.name(),
                seq,
                count,
                last
            );
            if let Some(ring) = self.state.ring.as_mut() {
                ring.errors_seen = count;
            }
            {
                let mut ev = core.events.lock();
                ev.mb.ring_errors = ev.mb.ring_errors.wrapping_add(1);
                ev.mb.last_ring_error = last;
            }
            self.wedge();
            return Err(EIO);
        }
        if let Waited::Timeout { after_ms } = waited {
            dev_err!(
                core.dev,
                "mailbox {}: no completion within {} ms (status {})\n",
                opcode.name(),
                after_ms,
                status_name(core.block.read32(STATUS_OFFSET))
            );
            quarantine::count_mailbox(quarantine::Mailbox::Timeout);
            self.wedge();
            return Err(ETIMEDOUT);
        }
        let raw = core.block.read32(STATUS_OFFSET);
        // The device writes the payload and the sequence number before the status (release):
        // read them after.
        dma_mb(Read);
        // A ring entry carries its own completion: it must be this command's too.
        if let (Some(index), Some(ring)) = (entry, self.state.ring.as_ref()) {
            // The device writes the block's status before the entry's completion and raises
            // the completion interrupt after both: an interrupt in between (a fence record)
            // shows the block complete first, and the entry follows at once.
            let mut done = ring.done(index).map(|d| d.seq);
            for _ in 0..ENTRY_LAG_POLLS {
                if done.is_some() {
                    break;
                }
                fsleep(Delta::from_micros(10));
                done = ring.done(index).map(|d| d.seq);
            }
            if done != Some(u32::from(seq)) {
                dev_err!(
                    core.dev,
                    "mailbox {} (seq {}): the ring entry completed {:?}\n",
                    opcode.name(),
                    seq,
                    done
                );
                self.wedge();
                return Err(EIO);
            }
        }
        match mbseq::judge(seq, core.block.read32(SEQ_OFFSET), raw) {
            Completion::Ours(_) => {}
            Completion::Stale(other) => {
                dev_err!(
                    core.dev,
                    "mailbox {} (seq {}): the completion is of seq {} (an abandoned command)\n",
                    opcode.name(),
                    seq,
                    other
                );
                quarantine::count_mailbox(quarantine::Mailbox::Mismatch);
                self.wedge();
                return Err(EIO);
            }
            Completion::Pending => {
                dev_err!(
                    core.dev,
                    "mailbox {} (seq {}): completion interrupt with the status still pending\n",
                    opcode.name(),
                    seq
                );
                self.wedge();
                return Err(EIO);
            }
        }
        let done_ns = monotonic_ns();
        {
            let mut ev = core.events.lock();
            let commands = ev.mb.commands.wrapping_add(1);
            ev.mb = uapi_debug::MailboxTiming {
                submit_ns,
                written_ns,
                irq_ns: ev.mb_irq_ns,
                done_ns,
                opcode: opcode as u32,
                path: if entry.is_some() {
                    uapi_debug::MAILBOX_PATH_RING
                } else {
                    uapi_debug::MAILBOX_PATH_BAR0
                },
                commands,
                ..ev.mb
            };
        }
        // Straight into `args`: nothing here may fail once the device has run the command (an
        // allocation failing now would report a command the device carried out as failed, and
        // its caller would give back ids the device still holds).
        core.block.read_bytes(0, args.as_bytes_mut());
        Status::try_from(raw).map_err(|_| EIO)
    }

    /// The bytes the device wrote after the fixed block (`fixed` bytes) of the last command
    /// (a query's entries), read while the hardware is still locked.
    pub(crate) fn read_tail(&self, fixed: usize, out: &mut [u8]) {
        self.core.block.read_bytes(fixed, out);
    }

    /// The objects of the core, for a record taken under the hardware mutex (lock order:
    /// hardware, then objects).
    pub(crate) fn objects(&self) -> Guard<'_, super::objects::Objects, MutexBackend> {
        self.core.objects()
    }

    /// Runs a command whose argument block names one object (`ObjectArgs`).
    ///
    /// # Errors
    ///
    /// As [`Self::command`].
    pub(crate) fn object_command(&mut self, opcode: Opcode, id: u32) -> Result {
        let mut args = mailbox::ObjectArgs {
            id,
            ..Default::default()
        };
        self.command(opcode, &mut args, &[])
    }

    /// A command-ring fault the module has not reported yet: `CMD_RING_ERROR`'s count and last
    /// error when the count moved past the ring's last report. A BAR0 read (process context).
    fn ring_fault(&self) -> Option<(u32, u32)> {
        let ring = self.state.ring.as_ref()?;
        let bar = self.bar().ok()?;
        let e = ring.error(bar);
        (e.count() != ring.errors_seen).then(|| (e.count(), e.last()))
    }

    /// Marks the mailbox out of step with the device: every further command fails with `EIO`
    /// (recovery is a device reset: unbind and bind).
    fn wedge(&mut self) {
        if !self.state.wedged {
            dev_err!(
                self.core.dev,
                "mailbox wedged: every further command fails with EIO until the device is reset (unbind and bind)\n"
            );
        }
        self.state.wedged = true;
        self.core.events.lock().wedged = true;
    }

    /// The sequence number of the last command.
    pub(crate) fn last_seq(&self) -> u16 {
        self.state.seq
    }
}

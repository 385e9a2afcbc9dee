// SPDX-License-Identifier: GPL-2.0

//! The command ring (`CAPS.cmd_ring`, `abi::cmdring`): the driver's half. A mailbox command
//! becomes one ring entry naming the argument block and one store of the new tail to the
//! ring's doorbell page in BAR2, instead of three BAR0 writes; on a shared-doorbell device the
//! store is a plain memory write (no exit), followed by the sleep handshake of
//! `abi::doorbell` (full fence, read the page's sleep word, `DB_WAKE` if the command processor
//! sleeps).
//!
//! Implementation note: commands stay one at a time (the hardware mutex), so the ring holds at
//! most one entry in flight; it exists to take the trapped, non-posted BAR0 writes off every
//! command (QEMU turns posted writes off for a device with a mappable region), not to queue.

use kernel::{
    io::Io,
    pci,
    prelude::*,
    sync::barrier::{dma_mb, mb, Full, Read},
};

use super::{
    dmamem::DmaBuf,
    regs::{read_reg, write_reg, Bar0},
};
use crate::abi::{cmdring, doorbell, pci as ids, regs};

/// Entries of the ring (one page).
// CAST: a page of 32-byte entries.
const ENTRIES: u32 = (ids::DOORBELL_PAGE_SIZE / cmdring::ENTRY_SIZE) as u32;
const _: () = assert!(cmdring::valid_size(ENTRIES));

/// Byte offsets of an entry's fields.
const OPCODE: usize = 0;
/// See [`OPCODE`].
const SEQ: usize = 4;
/// See [`OPCODE`].
const ARG: usize = 8;
/// See [`OPCODE`].
// CAST: below 32.
const STATUS: usize = cmdring::STATUS_OFFSET as usize;
/// See [`OPCODE`].
// CAST: below 32.
const DONE_SEQ: usize = cmdring::DONE_SEQ_OFFSET as usize;

/// The ring's memory and the driver's tail.
pub(crate) struct CmdRing {
    /// The entries.
    mem: DmaBuf,
    /// The ring's doorbell page (`CMD_RING_DOORBELL`).
    doorbell: u32,
    /// Next entry to write (free-running).
    tail: u32,
    /// Whether a ring must be followed by the sleep handshake (`CAPS.shared_doorbells`).
    shared: bool,
    /// `CMD_RING_ERROR.count` when the module last reported a ring fault (0 after enabling:
    /// the device counts from there).
    pub(crate) errors_seen: u32,
}

/// What a completed entry says.
pub(crate) struct Done {
    /// `done_seq`: the sequence number the device completed.
    pub(crate) seq: u32,
}

impl CmdRing {
    /// A ring (not yet programmed) whose doorbell is page `doorbell` of BAR2.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(
        dev: &kernel::device::Device<kernel::device::Bound>,
        doorbell: u32,
        shared: bool,
    ) -> Result<Self> {
        Ok(Self {
            mem: DmaBuf::new(dev, 1)?,
            doorbell,
            tail: 0,
            shared,
            errors_seen: 0,
        })
    }

    /// Programs and enables the ring (after a device reset: the head is zeroed with it).
    pub(crate) fn enable(&mut self, bar: &Bar0<'_>) {
        self.tail = 0;
        self.errors_seen = 0;
        let base = self.mem.dma_address();
        // CAST: the two halves of the 64-bit address, truncation intended.
        write_reg(bar, regs::CMD_RING_BASE_LO::default().with_value(base as u32));
        // CAST: as above.
        write_reg(
            bar,
            regs::CMD_RING_BASE_HI::default().with_value((base >> 32) as u32),
        );
        write_reg(bar, regs::CMD_RING_SIZE::default().with_entries(ENTRIES));
        write_reg(bar, regs::CMD_RING_CTRL::default().with_enable(true));
    }

    /// Byte offset of entry `index` in the ring.
    fn at(index: u32) -> usize {
        // CAST: below a page.
        ((index % ENTRIES) as usize) * (cmdring::ENTRY_SIZE as usize)
    }

    /// Queues the command `opcode` with `seq` whose block is at `arg` and rings the doorbell;
    /// returns the entry's index for [`Self::done`].
    ///
    /// # Errors
    ///
    /// `EIO` if the doorbell page is not inside BAR2 (a device that lied about its layout).
    pub(crate) fn submit(
        &mut self,
        bar0: &Bar0<'_>,
        doorbells: &pci::Bar<'_>,
        opcode: u32,
        seq: u32,
        arg: u64,
    ) -> Result<u32> {
        let index = self.tail;
        let at = Self::at(index);
        self.mem.write32(at + OPCODE, opcode);
        self.mem.write32(at + SEQ, seq);
        // CAST: the two halves of the 64-bit address, truncation intended.
        self.mem.write32(at + ARG, arg as u32);
        // CAST: as above.
        self.mem.write32(at + ARG + 4, (arg >> 32) as u32);
        self.mem.write32(at + STATUS, 0);
        self.mem.write32(at + DONE_SEQ, cmdring::NOT_DONE);
        self.tail = index.wrapping_add(1);
        // CAST: a doorbell index below `DOORBELL_MAX_COUNT + 1`.
        let page = self.doorbell as usize * ids::DOORBELL_PAGE_SIZE as usize;
        // MMIO writes are ordered after the entry's memory writes above (`writeq` semantics).
        doorbells
            .try_write64(u64::from(self.tail), page)
            .map_err(|_| EIO)?;
        if self.shared {
            // The library's half of the sleep handshake (abi::doorbell::asleep_after_ring):
            // store, full fence, read the sleep word.
            mb(Full);
            // CAST: 64.
            let word = doorbells
                .try_read32(page + doorbell::SLEEP_WORD_OFFSET as usize)
                .map_err(|_| EIO)?;
            if word == doorbell::ASLEEP {
                write_reg(bar0, regs::DB_WAKE::default().with_index(self.doorbell));
            }
        }
        Ok(index)
    }

    /// `CMD_RING_ERROR`: the ring-level faults (a bad base, size or tail) the device counted
    /// since the ring was enabled. A trapped BAR0 read: only for a command that is late.
    pub(crate) fn error(&self, bar: &Bar0<'_>) -> regs::CMD_RING_ERROR {
        read_reg(bar)
    }

    /// Entry `index`'s completion, if the device wrote it.
    pub(crate) fn done(&self, index: u32) -> Option<Done> {
        let at = Self::at(index);
        let seq = self.mem.read32(at + DONE_SEQ);
        // The device writes the status before the sequence number (release): read it after.
        dma_mb(Read);
        (seq != cmdring::NOT_DONE).then_some(Done { seq })
    }
}

// SPDX-License-Identifier: GPL-2.0

//! Engine power (F0/F1, `SET_ENGINE_POWER`) for the layers above, with the engines the driver
//! has put in F1 kept under the hardware mutex, so a command that would give an F1 engine work
//! can wake it first; and the device's D3 mark, under the same mutex, which keeps every
//! register access and mailbox command off a device in D3hot.

use kernel::prelude::*;

use super::command::HwGuard;
use crate::abi::mailbox::{self, Opcode};

/// `SET_ENGINE_POWER` state F0.
const F0: u32 = 0;
/// `SET_ENGINE_POWER` state F1.
const F1: u32 = 3;

impl HwGuard<'_> {
    /// Whether the driver put engine `engine` in F1.
    pub(crate) fn engine_in_f1(&self, engine: u32) -> bool {
        self.state.engines_f1 & 1u32.checked_shl(engine).unwrap_or(0) != 0
    }

    /// `SET_ENGINE_POWER` of `engine` to F1 (`f1`) or F0; remembered once the device accepted.
    ///
    /// # Errors
    ///
    /// The mailbox's: `EIO`, `ETIMEDOUT`, `ENODEV`.
    pub(crate) fn set_engine_f1(&mut self, engine: u32, f1: bool) -> Result {
        let bit = 1u32.checked_shl(engine).ok_or(EINVAL)?;
        let mut a = mailbox::PowerArgs {
            target: engine,
            state: if f1 { F1 } else { F0 },
            ..Default::default()
        };
        self.command(Opcode::SetEnginePower, &mut a, &[])?;
        if f1 {
            self.state.engines_f1 |= bit;
        } else {
            self.state.engines_f1 &= !bit;
        }
        Ok(())
    }

    /// Marks the device in D3 (`d3`: from here on nothing touches BAR0 and mailbox commands
    /// fail with `EAGAIN`) or back in D0. The PCI core writes PMCSR itself.
    pub(crate) fn set_d3(&mut self, d3: bool) {
        self.state.d3 = d3;
        // The hard handler's `INT_CLEAR` too, which runs outside the hardware mutex.
        self.core.mark_d3_for_irq(d3);
    }

    /// `KICK_QUEUE` of `queue`: its write index moved (kernel-mode work). Counted, so that an F1
    /// request the device made before it is known to be stale
    /// ([`Self::f1_request_is_current`]).
    ///
    /// # Errors
    ///
    /// The mailbox's: `EIO`, `ETIMEDOUT`, `ENODEV`.
    pub(crate) fn kick_queue(&mut self, queue: u32) -> Result {
        // Counted before it is sent: a kick the device may or may not have run makes the
        // requests before it stale, never the other way round.
        self.state.kicks = self.state.kicks.wrapping_add(1);
        self.object_command(Opcode::KickQueue, queue)
    }

    /// Whether an F1 request the device made after running `device_kicks` `KICK_QUEUE`
    /// commands came after the last kick this driver sent. The module cannot tell which engine
    /// a kernel-mode queue's work runs on, so a request older than any kick may have been made
    /// before that work reached the engine, which then parked it in a wait: entering F1 then
    /// would leave it there (the next kick wakes the engine, but none may come).
    pub(crate) fn f1_request_is_current(&self, device_kicks: u64) -> bool {
        self.state.kicks == device_kicks
    }

    /// Brings every engine in F1 back to F0 (before work the driver cannot place on an
    /// engine: a kernel-mode queue's kick); the engines woken, as a bitmap.
    ///
    /// # Errors
    ///
    /// As [`Self::set_engine_f1`].
    pub(crate) fn wake_engines(&mut self) -> Result<u32> {
        let woken = self.state.engines_f1;
        for engine in (0..u32::BITS).filter(|e| woken & (1 << e) != 0) {
            self.set_engine_f1(engine, false)?;
        }
        Ok(woken)
    }
}

// SPDX-License-Identifier: GPL-2.0

//! Verbose fence logging (LOG-20): the device-wide switch of the optional fence-log entry types,
//! and the processes told of each change.
//!
//! The module is the KMD side here: it holds the switch, writes it to the device
//! (`regs::LOG_VERBOSE`, through [`HwGuard::set_log_verbose`]) and counts its changes. The UMD
//! is told without polling: a file registers an eventfd (`VERBOSE_LOG_WATCH`), which is
//! signalled at every change until the file is closed; the library then reads the switch and
//! reserves the `WAIT_BEGIN` slot of each wait (`packet::FENCE_WAIT_LOG_BEGIN`) while it is on.
//! A wait whose library had not yet seen the change simply misses its verbose entry (on) or
//! has it written empty (off): the mandatory entries never move.
//!
//! Lock order: the hardware mutex, then the switch (whose eventfds are signalled under it, from
//! process context only).

use kernel::{new_mutex, prelude::*, sync::Mutex};

use crate::{bindings::eventfd::EventFd, hw::command::HwGuard};

/// The switch as the module last set it, and its watchers.
struct State {
    /// Verbose logging is on.
    on: bool,
    /// Changes since the module bound the device.
    generation: u64,
    /// The eventfds to signal at a change, by the watching file's identity.
    watchers: KVec<(usize, EventFd)>,
}

/// The verbose-logging switch of one device.
#[pin_data]
pub(crate) struct VerboseLog {
    #[pin]
    state: Mutex<State>,
}

impl VerboseLog {
    /// Off, watched by nobody.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            state <- new_mutex!(State { on: false, generation: 0, watchers: KVec::new() }),
        })
    }

    /// The switch and its change count.
    pub(crate) fn get(&self) -> (bool, u64) {
        let s = self.state.lock();
        (s.on, s.generation)
    }

    /// Sets the switch to `on` on the device, then tells every watcher if it changed. Returns
    /// the switch and its change count after the call.
    ///
    /// # Errors
    ///
    /// Those of the register write (`ENODEV`, `EAGAIN` in D3); the switch is then unchanged.
    pub(crate) fn set(&self, hw: &mut HwGuard<'_>, on: bool) -> Result<(bool, u64)> {
        let mut s = self.state.lock();
        if s.on != on {
            hw.set_log_verbose(on)?;
            s.on = on;
            s.generation += 1;
            for (_, fd) in s.watchers.iter() {
                fd.signal();
            }
        }
        Ok((s.on, s.generation))
    }

    /// Signals `fd` at every later change, for the file `owner` (replacing its earlier watch).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn watch(&self, owner: usize, fd: EventFd) -> Result {
        let mut s = self.state.lock();
        s.watchers.retain(|(o, _)| *o != owner);
        s.watchers.push((owner, fd), GFP_KERNEL)?;
        Ok(())
    }

    /// Drops the watch of the file `owner`, if any (its release).
    pub(crate) fn unwatch(&self, owner: usize) {
        self.state.lock().watchers.retain(|(o, _)| *o != owner);
    }
}

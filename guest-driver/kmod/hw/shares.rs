// SPDX-License-Identifier: GPL-2.0

//! What each process and each user holds on a device ([`Shares`], by [`Share`] kind), against
//! the per-process caps and, for the device's scarce ids, a per-user ceiling; and who a share
//! is charged to ([`ShareOwner`]).
//!
//! A process is its thread-group `struct pid`, held while it holds anything
//! ([`ProcessRef`]): an exec from a non-leader thread keeps it, and a later process that reuses
//! the number is another process, so it starts from nothing. Forked children are processes of
//! their own, each with its own share; the per-user ceiling bounds what one user's processes
//! take together: [`USER_SHARES`] processes' shares of contexts, queues and VRAM fence pages,
//! three quarters of the device's ids (each process's share is a quarter), so a process of
//! another user always finds a share's worth free while one user alone hogs the device. The
//! other kinds (handles, eventfd waits, `sync_file` exports) cost kernel memory, not device
//! ids, and are charged to the memory cgroup of the process that makes them.

use kernel::{prelude::*, task::Kuid};

use crate::bindings::pid::ProcessRef;

/// What a process's share counts.
#[derive(Clone, Copy)]
pub(crate) enum Share {
    /// Device contexts.
    Context = 0,
    /// Hardware queues.
    Queue = 1,
    /// INTRA_GPU fences (one VRAM fence page each).
    VramFence = 2,
    /// Objects under a per-file handle (contexts, allocations, queues, doorbells, fences,
    /// video-memory allocations together).
    Object = 3,
    /// Pending eventfd waits (`WAIT_FENCE_EVENTFD`).
    EventWait = 4,
    /// Pending `sync_file` exports (`EXPORT_SYNC_FILE`).
    SyncExport = 5,
}

impl Share {
    /// Whether it counts the device's scarce ids (contexts, queues, VRAM fence pages), which
    /// the per-user ceiling bounds too.
    pub(crate) fn is_device_id(self) -> bool {
        matches!(self, Self::Context | Self::Queue | Self::VramFence)
    }
}

/// How many kinds [`Share`] has.
const SHARES: usize = 6;

/// How many processes' shares of the device's scarce ids ([`Share::is_device_id`]) one user's
/// processes may hold together.
pub(crate) const USER_SHARES: u32 = 3;

/// Who a share is charged to: the process that opened the file, and its effective user then.
#[derive(Clone)]
pub(crate) struct ShareOwner {
    /// The process.
    pub(crate) process: ProcessRef,
    /// Its effective user when it opened the file.
    pub(crate) user: Kuid,
}

impl ShareOwner {
    /// The calling thread's process and effective user.
    ///
    /// # Errors
    ///
    /// `ESRCH` for an exiting thread ([`ProcessRef::current`]).
    pub(crate) fn current() -> Result<Self> {
        Ok(Self {
            process: ProcessRef::current()?,
            user: Kuid::current_euid(),
        })
    }
}

/// What each process and each user holds on a device.
pub(crate) struct Shares {
    /// By process; an entry (and its reference) goes when its counts are all zero.
    per_process: KVec<(ProcessRef, [u32; SHARES])>,
    /// By user; an entry goes when its counts are all zero.
    per_user: KVec<(Kuid, [u32; SHARES])>,
}

impl Shares {
    /// Nothing held.
    pub(crate) const fn new() -> Self {
        Self {
            per_process: KVec::new(),
            per_user: KVec::new(),
        }
    }

    /// One more `what` for `owner`, unless its process holds `cap` already or, for a device
    /// id, its user holds [`USER_SHARES`] × `cap`.
    ///
    /// # Errors
    ///
    /// `ENOSPC` at the cap or the ceiling, `ENOMEM`.
    pub(crate) fn charge(&mut self, owner: &ShareOwner, what: Share, cap: u32) -> Result {
        let w = what as usize;
        let process = self.per_process.iter().position(|p| p.0 == owner.process);
        let user = self.per_user.iter().position(|u| u.0 == owner.user);
        if process.is_some_and(|i| self.per_process[i].1[w] >= cap) {
            return Err(ENOSPC);
        }
        if what.is_device_id() && user.is_some_and(|i| self.per_user[i].1[w] >= cap.saturating_mul(USER_SHARES)) {
            return Err(ENOSPC);
        }
        // Room for both new entries before either is added, so a failure leaves none.
        self.per_process.reserve(usize::from(process.is_none()), GFP_KERNEL_ACCOUNT)?;
        self.per_user.reserve(usize::from(user.is_none()), GFP_KERNEL_ACCOUNT)?;
        let process = match process {
            Some(i) => i,
            None => {
                self.per_process.push((owner.process.clone(), [0; SHARES]), GFP_KERNEL_ACCOUNT)?;
                self.per_process.len() - 1
            }
        };
        let user = match user {
            Some(i) => i,
            None => {
                self.per_user.push((owner.user, [0; SHARES]), GFP_KERNEL_ACCOUNT)?;
                self.per_user.len() - 1
            }
        };
        self.per_process[process].1[w] += 1;
        self.per_user[user].1[w] += 1;
        Ok(())
    }

    /// One `what` of `owner` is gone.
    pub(crate) fn uncharge(&mut self, owner: &ShareOwner, what: Share) {
        let w = what as usize;
        if let Some(i) = self.per_process.iter().position(|p| p.0 == owner.process) {
            let counts = &mut self.per_process[i].1;
            counts[w] = counts[w].saturating_sub(1);
            if counts.iter().all(|&n| n == 0) {
                drop(self.per_process.remove(i));
            }
        }
        if let Some(i) = self.per_user.iter().position(|u| u.0 == owner.user) {
            let counts = &mut self.per_user[i].1;
            counts[w] = counts[w].saturating_sub(1);
            if counts.iter().all(|&n| n == 0) {
                drop(self.per_user.remove(i));
            }
        }
    }
}

// SPDX-License-Identifier: GPL-2.0

//! Domain layer: hardware queues, and every mailbox sequence about them.
//!
//! - [`build`]: a queue with its progress fence, kernel ring (kernel-mode) and fence logs:
//!   created on the device and destroyed;
//! - [`kring`]: kernel-mode queues' module-owned rings, the GPU waits the module holds on the
//!   CPU and the software signal packets, with the work [`items`] they carry and the packets
//!   the module builds for them;
//! - [`doorbell`]: user-mode queues' doorbells, their physical-doorbell assignment through the
//!   least-recently-used order of [`lru`] (pure), suspend/resume and device loss;
//! - [`watch`]: hang detection, the user-mode queues' progress per engine against the timeout,
//!   with the pure per-engine clock of [`hangclock`];
//! - [`devstate`]: the device's own word on a queue (`QUERY_QUEUE`: whether it holds work, its
//!   read index), the verdict behind every hint a process can write.

pub(crate) mod build;
pub(crate) mod devstate;
pub(crate) mod doorbell;
pub(crate) mod hangclock;
pub(crate) mod items;
pub(crate) mod kring;
pub(crate) mod lru;
pub(crate) mod watch;

// SPDX-License-Identifier: GPL-2.0

//! Domain layer: fences, and every mailbox sequence about them.
//!
//! Bottom up:
//! - [`window`]: the 32-bit-mode comparisons and window checks (pure);
//! - [`book`]: the fence bookkeeping of a device: pending CPU waits (blocking and eventfd),
//!   the MonitoredValues last set in VRAM, the `FENCE_DEBUG` counters;
//! - [`waits`]: [`waits::Fences`], the fence object of a device: registration, CPU waits and
//!   signals, MonitoredValue updates (one or batched);
//! - [`lost`]: the fences lost work was going to signal, as pollable waits and exports see them;
//! - [`eventfd`]: pollable waits (`WAIT_FENCE_EVENTFD`) and their completion;
//! - [`syncfile`]: `sync_file` exports of monitored fence values and their completion;
//! - [`work`], [`log`], [`irqpath`]: the native-fence records the interrupt handler saw, the
//!   fence logs and timeline, and the interrupt paths that read the logs and release waits;
//! - [`opt`] (the optimized DEFAULT fence's MonitoredValue page), [`share`] (shared fences'
//!   global objects), [`object`] (the fences `CREATE_FENCE` makes: fence pages, INTRA_GPU,
//!   MONITORED, local handles on shared fences), [`cross`] (cross-adapter fences: one
//!   CurrentValue page, a registration per device, the propagation of a change, one notice
//!   per other device per propagation pass);
//! - [`peers`]: peer signals (XAD-15): the peer-capable devices' peer-signal pages, exchanged
//!   at bind and unbind, which take the propagation's notification off the GPU-to-GPU path;
//! - [`demote`]: an optimized DEFAULT page's MonitoredValues demoted to system memory under
//!   VRAM pressure (NF-14).
//! - [`verbose`]: the verbose fence-logging switch (LOG-20) and the files watching it.

pub(crate) mod book;
pub(crate) mod cross;
pub(crate) mod demote;
pub(crate) mod eventfd;
pub(crate) mod irqpath;
pub(crate) mod log;
pub(crate) mod lost;
pub(crate) mod object;
pub(crate) mod opt;
pub(crate) mod peers;
pub(crate) mod share;
pub(crate) mod syncfile;
pub(crate) mod verbose;
pub(crate) mod waits;
pub(crate) mod window;
pub(crate) mod work;

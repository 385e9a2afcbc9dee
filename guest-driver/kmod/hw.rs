// SPDX-License-Identifier: GPL-2.0

//! Layer 2, the hardware: everything that talks to the device as a device, and nothing that
//! knows what the objects it creates are for.
//!
//! - [`regs`]: BAR0 register access and the identity and geometry read at probe;
//! - [`bringup`]: PCI enable, MSI-X vectors and their handlers ([`vectors`]), the mailbox
//!   self-test, the interrupt ring and system address space set-up, quiesce on unbind;
//! - [`core`]: the [`core::Core`] every layer above shares: its state, the interrupt ring and
//!   its counters;
//! - [`command`]: the mailbox on the core ([`command::HwGuard`]: one command at a time,
//!   sleeping on the completion interrupt, matched to its command by [`mbseq`]; a timeout
//!   wedges it), the core's start and its system-address-space mappings;
//! - [`objects`]: device-wide ids and the system address space, with the pure id bitmaps of
//!   [`ids`] and the system address space's VA slots ([`sysva`]);
//! - [`dmamem`]: DMA pages, [`dmamap`]: every device's DMA mappings, undone at its unbind at
//!   the latest, [`devmap`]: a page as a device other than its own reaches it; [`pagetable`]:
//!   the GPU page-table writer;
//! - [`shares`]: what each process and each user holds on the device, against the
//!   per-process caps and the per-user ceiling;
//! - [`power`]: engine power commands and the engines in F1;
//! - [`quarantine`]: what the device may still reach after an unconfirmed destroy, kept until
//!   the device is reset, and the module-wide `TEARDOWN_DEBUG` counters.
//!
//! Lock order: the hardware mutex ([`command::HwGuard`]), then [`objects::Objects`], then the
//! interrupt-safe events spinlock.

pub(crate) mod bringup;
pub(crate) mod cmdring;
pub(crate) mod command;
pub(crate) mod core;
pub(crate) mod devmap;
pub(crate) mod dmamap;
pub(crate) mod dmamem;
pub(crate) mod ids;
pub(crate) mod mbseq;
pub(crate) mod objects;
pub(crate) mod pagetable;
pub(crate) mod power;
pub(crate) mod quarantine;
pub(crate) mod regs;
pub(crate) mod shares;
pub(crate) mod sysva;
pub(crate) mod vectors;

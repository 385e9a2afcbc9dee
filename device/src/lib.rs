//! The Belfry virtual GPU: a device model served over vfio-user.
//!
//! Code map (one file per hardware block):
//! - [`vfio_user`]: the protocol server QEMU connects to (socket thread, control plane only).
//! - [`device`]: the device as a whole and the dispatch of region accesses.
//! - [`pci_config`]: configuration space and capabilities.
//! - [`registers`]: the BAR0 register file and mailbox transport.
//! - [`irq`]: interrupt causes, eventfd delivery, counters.
//! - [`doorbell`]: the doorbell BAR and the doorbell source interface.
//! - [`vram`]: device memory.
//! - [`dma`]: guest memory mapped by the client.
//! - [`fatal`]: a device thread that panics ends the process.
//! - [`gpu`]: the GPU behind the registers, reached through its ports only: the command
//!   processor thread (mailbox, doorbells, timers), GPU objects (address spaces, contexts,
//!   queues, fences) and their states, the scheduler, engine executors, packets, fence
//!   operations, interrupt records.
//! - [`mmu`]: the GPU MMU.
//! - [`trace`]: structured tracing.
//! - [`log_limit`]: rate-limited logging of what a guest can cause at will.
//! - [`config`]: the device configuration (command line, trace header, what the blocks read).
//! - [`inject`]: test-only fault injections (the `fault-injection` feature).
//! - [`wire`]: `vm-memory` access to the abi's in-memory layouts.
//! - [`record`]: the input log's recorder, and the turnstile a replay puts in its place.
//! - [`replay`]: a recorded device's input log run through the device model.
//! - [`build_identity`]: which build of the device this is, as an input log names it.
//! - [`threads`]: the numbering of the device's threads in an input log.

#![deny(clippy::cast_possible_truncation)]

pub mod build_identity;
pub mod config;
pub mod device;
pub mod dma;
pub mod doorbell;
pub mod fatal;
pub mod gpu;
pub mod inject;
pub mod irq;
pub mod log_limit;
pub mod mmu;
pub mod pci_config;
pub mod record;
pub mod registers;
pub mod replay;
pub mod threads;
pub mod trace;
pub mod vfio_user;
pub mod vram;
pub mod wire;

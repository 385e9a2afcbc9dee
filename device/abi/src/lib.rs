//! The Belfry contract: the one definition of everything the device, the kernel module and the
//! userspace library agree on.
//!
//! Every file under `src/` except this one is also compiled by the guest kernel (rustc 1.85,
//! edition 2021) through `#[path]` includes, so the rules for those files are:
//! `core` only, no dependencies, no `cfg(feature)`, no `crate::` paths (siblings are reached
//! through `super::`) except to the `#[macro_export]` macros, which sit at the root of whichever
//! crate compiles them, and nothing newer than Rust 1.85.
//!
//! All multi-byte values in registers and guest memory are little-endian.
#![no_std]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod cmdring;
pub mod doorbell;
pub mod engine;
pub mod fence;
pub mod ids;
pub mod ioctl;
pub mod ioctls;
pub mod irq;
pub mod mailbox;
pub mod mmu;
pub mod packet;
pub mod pci;
pub mod peer;
pub mod regs;
pub mod ring;
pub mod uapi;
pub mod uapi_debug;
pub mod uapi_sync;
pub mod vidmem;
pub mod wire_enum;

// SPDX-License-Identifier: GPL-2.0

//! The device contract, shared with the device process and the userspace library.
//!
//! These are the very files of `device/abi/src/` (all of them but `lib.rs`), included by path and
//! laid out as there, so their `super::` paths keep working; compiling all of them here also
//! checks that the contract stays within what the kernel's rustc (1.85) and lints accept. A
//! `#[path]` in this (non-`mod.rs`) file is relative to this file's directory; an inline
//! `mod abi { .. }` in `belfry.rs` would resolve through a nonexistent `abi/` directory instead.
//! The files are `core`-only; their `#[cfg(test)]` blocks are compiled out here.

#[path = "../../device/abi/src/cmdring.rs"]
pub(crate) mod cmdring;
#[path = "../../device/abi/src/doorbell.rs"]
pub(crate) mod doorbell;
#[path = "../../device/abi/src/engine.rs"]
pub(crate) mod engine;
#[path = "../../device/abi/src/fence.rs"]
pub(crate) mod fence;
#[path = "../../device/abi/src/ids.rs"]
pub(crate) mod ids;
#[path = "../../device/abi/src/ioctl.rs"]
pub(crate) mod ioctl;
#[path = "../../device/abi/src/ioctls.rs"]
pub(crate) mod ioctls;
#[path = "../../device/abi/src/irq.rs"]
pub(crate) mod irq;
#[path = "../../device/abi/src/mailbox.rs"]
pub(crate) mod mailbox;
#[path = "../../device/abi/src/mmu.rs"]
pub(crate) mod mmu;
#[path = "../../device/abi/src/packet.rs"]
pub(crate) mod packet;
#[path = "../../device/abi/src/pci.rs"]
pub(crate) mod pci;
#[path = "../../device/abi/src/peer.rs"]
pub(crate) mod peer;
#[path = "../../device/abi/src/regs.rs"]
pub(crate) mod regs;
#[path = "../../device/abi/src/ring.rs"]
pub(crate) mod ring;
#[path = "../../device/abi/src/uapi.rs"]
pub(crate) mod uapi;
#[path = "../../device/abi/src/uapi_debug.rs"]
pub(crate) mod uapi_debug;
#[path = "../../device/abi/src/uapi_sync.rs"]
pub(crate) mod uapi_sync;
#[path = "../../device/abi/src/vidmem.rs"]
pub(crate) mod vidmem;
#[path = "../../device/abi/src/wire_enum.rs"]
pub(crate) mod wire_enum;

use kernel::transmute::{AsBytes, FromBytes};

/// Marks abi structs as plain bytes for the kernel's `FromBytes`/`AsBytes` (mailbox blocks,
/// ioctl arguments).
macro_rules! plain_abi_structs {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: an abi `#[repr(C)]` struct of integers (and nested such structs) with
            // explicit padding fields and no implicit padding (checked by the size assertions of
            // the abi files): every bit pattern is valid and it has no interior mutability.
            unsafe impl FromBytes for $t {}
            // SAFETY: As above: no implicit padding, hence no uninitialised byte.
            unsafe impl AsBytes for $t {}
        )*
    };
}

/// Marks every ioctl argument struct of the abi's one ioctl list (`for_each_ioctl!`).
macro_rules! plain_ioctl_args {
    ($($arg_module:ident::$arg:ident { $($name:ident = $module:ident::$number:ident),+ $(,)? })*) => {
        plain_abi_structs!($($arg_module::$arg),*);
    };
}

crate::for_each_ioctl!(plain_ioctl_args);

/// Marks every struct of the abi's one list of mailbox argument blocks (`for_each_mailbox_block!`).
macro_rules! plain_mailbox_blocks {
    ($($name:ident),*) => {
        plain_abi_structs!($(mailbox::$name),*);
    };
}

crate::for_each_mailbox_block!(plain_mailbox_blocks);

// The structs the module copies as arrays to or from user memory (ioctl arguments point at
// them) and the ring entries it writes.
plain_abi_structs!(
    ring::RingEntry,
    uapi_debug::TimelineEntry,
    uapi_sync::WaitFenceEntry,
    vidmem::PatchLocation,
);

/// Marks every fixed-length packet of the abi's one packet list (`for_each_packet!`).
macro_rules! plain_packets {
    ($($name:ident),*) => {
        plain_abi_structs!($(packet::$name),*);
    };
}

crate::for_each_packet!(plain_packets);

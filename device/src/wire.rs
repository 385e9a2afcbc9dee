//! `vm-memory` access to the abi's in-memory layouts.
//!
//! The abi crate has no dependencies (the kernel compiles it too), so the `ByteValued` impls
//! that let the device read and write its layouts in guest memory live here, on a transparent
//! wrapper. Packets and mailbox argument blocks get theirs from the abi's lists
//! ([`belfry_abi::for_each_packet`], [`belfry_abi::for_each_mailbox_block`]).

use belfry_abi::fence::{LogEntry, LogHeader};
use belfry_abi::irq::{InterruptRecord, InterruptRingHeader};
use belfry_abi::ring::{RingControl, RingEntry};
use vm_memory::ByteValued;

/// An abi layout as read from or written to guest memory.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wire<T>(pub T);

macro_rules! byte_valued {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: the abi declares this type `#[repr(C)]` with explicit padding fields and
            // only integer members (its size is const-asserted there), so every bit pattern is
            // a valid value and there are no implicit padding bytes.
            unsafe impl ByteValued for Wire<$t> {}
        )*
    };
}

byte_valued!(
    belfry_abi::cmdring::Entry,
    RingEntry,
    RingControl,
    LogHeader,
    LogEntry,
    InterruptRecord,
    InterruptRingHeader,
);

/// The mailbox argument blocks: the abi's one list of them, so a block added there can be read
/// from guest memory here without another edit.
macro_rules! blocks_byte_valued {
    ($($name:ident),* $(,)?) => {
        byte_valued!($(belfry_abi::mailbox::$name),*);
    };
}

belfry_abi::for_each_mailbox_block!(blocks_byte_valued);

/// The packets: the abi's one list of fixed-length packets, so a packet added there can be read
/// from a command buffer here without another edit.
macro_rules! packets_byte_valued {
    ($($name:ident),* $(,)?) => {
        byte_valued!($(belfry_abi::packet::$name),*);
    };
}

belfry_abi::for_each_packet!(packets_byte_valued);

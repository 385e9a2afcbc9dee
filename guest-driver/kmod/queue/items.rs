// SPDX-License-Identifier: GPL-2.0

//! The work a kernel-mode queue gives the device ([`Item`]): submissions, GPU waits on native
//! fences, monitored-fence waits the module holds on the CPU ([`HeldWait`]) and software
//! signal packets, with the ring entries each takes and the one packet the module builds for
//! it (a submission's progress signal, a `FENCE_WAIT`, a `NOTIFY`).

use kernel::{sync::Arc, transmute::AsBytes};

use crate::{
    abi::{ids::FenceHandle, packet},
    fence::window,
    hw::dmamem::DmaBuf,
};

/// A queue's progress fence, as its submissions' signals name it.
pub(crate) struct Progress {
    /// GPU VA of its CurrentValue in the queue's address space.
    pub(crate) va: u64,
    /// Its global handle (the signal's log field).
    pub(crate) handle: FenceHandle,
    /// A monitored fence (a device without 64-bit atomics): signaled by
    /// `MONITORED_FENCE_SIGNAL`.
    pub(crate) monitored: bool,
}

/// A packet slot per ring entry (a `FENCE_SIGNAL` and a `FENCE_WAIT` are both 32 bytes).
pub(super) const PACKET_BYTES: usize = core::mem::size_of::<packet::FenceSignal>();
const _: () = assert!(core::mem::size_of::<packet::FenceWait>() == PACKET_BYTES);

/// The bytes of one packet the module builds, at most a packet slot.
pub(super) struct PacketBytes {
    /// The packet, little-endian, from byte 0.
    bytes: [u8; PACKET_BYTES],
    /// Its length in bytes.
    len: usize,
}

impl PacketBytes {
    /// The bytes of `packet` (at most [`PACKET_BYTES`]; the packet structs that reach here
    /// are checked against it at compile time).
    fn of<P: AsBytes>(packet: &P) -> Self {
        let src = packet.as_bytes();
        let len = src.len().min(PACKET_BYTES);
        let mut bytes = [0; PACKET_BYTES];
        bytes[..len].copy_from_slice(&src[..len]);
        Self { bytes, len }
    }

    /// The packet.
    pub(super) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

const _: () = assert!(core::mem::size_of::<packet::MonitoredFenceSignal>() <= PACKET_BYTES);
const _: () = assert!(core::mem::size_of::<packet::Notify>() <= PACKET_BYTES);

/// A monitored fence's value and a value for it: a wait the module holds on the CPU (FEN-15),
/// or the signal of a software signal packet (FEN-10).
#[derive(Clone)]
pub(crate) struct HeldWait {
    /// The page holding the fence value (kept alive while the wait is held).
    pub(crate) page: Arc<DmaBuf>,
    /// Byte offset of the value in it.
    pub(crate) offset: usize,
    /// Value waited for, or to signal.
    pub(crate) value: u64,
    /// 32-bit mode: compare the low halves with wraparound (FEN-07).
    pub(crate) wrap32: bool,
}

impl HeldWait {
    /// Whether the fence has reached the value.
    pub(super) fn reached(&self) -> bool {
        window::reached(self.wrap32, self.page.read64(self.offset), self.value)
    }
}

/// Work a kernel-mode queue has not given to the device yet.
pub(super) enum Item {
    /// A submission: command buffer and the progress value it signals.
    Submit {
        /// GPU VA of the command buffer.
        va: u64,
        /// Its bytes.
        size: u32,
        /// Progress value.
        progress: u64,
        /// Signal-log index of the progress signal (`Logs::note_submit`).
        log_entry: u32,
    },
    /// A GPU wait on a native fence (a `FENCE_WAIT` packet).
    GpuWait {
        /// GPU VA of CurrentValue.
        fence_va: u64,
        /// Value.
        value: u64,
        /// Global fence handle (for the packet's log field).
        handle: FenceHandle,
    },
    /// A wait on a monitored fence, held on the CPU.
    Held(HeldWait),
    /// A software signal packet (FEN-10): a `NOTIFY` carrying the queue's token.
    SoftSignal {
        /// Token, increasing per queue.
        token: u64,
    },
    /// A command buffer with ring-entry `flags` and no packet of the module's: a part of a
    /// split DMA buffer before its last, or a paging buffer (the memory manager, `mm`).
    Raw {
        /// GPU VA of the command buffer.
        va: u64,
        /// Its bytes.
        size: u32,
        /// `ring::RING_FLAG_*`.
        flags: u32,
    },
}

impl Item {
    /// Ring entries the item takes.
    pub(super) fn entries(&self) -> u32 {
        match self {
            Item::Submit { .. } => 2,
            Item::GpuWait { .. } | Item::SoftSignal { .. } | Item::Raw { .. } => 1,
            Item::Held(_) => 0,
        }
    }

    /// The packet the item puts in its packet slot: a submission's signal of its progress
    /// `fence`, a GPU wait, a software signal (none for a held wait).
    pub(super) fn packet(&self, fence: &Progress) -> Option<PacketBytes> {
        match *self {
            Item::Submit {
                progress,
                log_entry,
                ..
            } => Some(if fence.monitored {
                PacketBytes::of(&packet::MonitoredFenceSignal {
                    header: packet::header(packet::Opcode::MonitoredFenceSignal, 6),
                    reserved: 0,
                    fence_va: fence.va,
                    value: progress,
                })
            } else {
                PacketBytes::of(&packet::FenceSignal {
                    header: packet::header(packet::Opcode::FenceSignal, 8),
                    log_entry,
                    fence_va: fence.va,
                    value: progress,
                    log_handle: fence.handle.raw(),
                })
            }),
            Item::GpuWait {
                fence_va,
                value,
                handle,
            } => Some(PacketBytes::of(&packet::FenceWait {
                header: packet::header(packet::Opcode::FenceWait, 8),
                log_entry: packet::NO_LOG,
                fence_va,
                value,
                log_handle: handle.raw(),
            })),
            Item::SoftSignal { token } => Some(PacketBytes::of(&packet::Notify {
                header: packet::header(packet::Opcode::Notify, 4),
                reserved: 0,
                token,
            })),
            Item::Held(_) | Item::Raw { .. } => None,
        }
    }
}

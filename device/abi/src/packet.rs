//! Command packets: what command buffers contain.
//!
//! A command buffer is a sequence of packets, each starting with a [`header`] dword: opcode in
//! bits 7:0, reserved bits 15:8 (zero), length in dwords including the header in bits 31:16.
//! Every packet but `NOP` has a fixed length ([`Opcode::dwords`]); a length that does not match,
//! a reserved bit, an unknown opcode or a packet running past the buffer faults the queue.
//! Every address is a GPU VA in the queue's address space, translated by the GPU MMU.

use core::mem::size_of;

/// Builds a header.
pub const fn header(opcode: Opcode, dwords: u16) -> u32 {
    (opcode as u32) | ((dwords as u32) << 16)
}

/// Opcode of a header.
pub const fn header_opcode(header: u32) -> u32 {
    header & 0xff
}

/// Length in dwords of a header.
pub const fn header_dwords(header: u32) -> u32 {
    header >> 16
}

/// Reserved bits of a header.
pub const fn header_reserved(header: u32) -> u32 {
    (header >> 8) & 0xff
}

/// `log_entry` value meaning "do not log this fence operation".
pub const NO_LOG: u32 = u32::MAX;

/// Packet opcodes.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// Does nothing; any length ≥ 1 (payload skipped).
    Nop = 0x00,
    /// [`WriteData32`].
    WriteData32 = 0x01,
    /// [`WriteData64`].
    WriteData64 = 0x02,
    /// [`WriteTimestamp`].
    WriteTimestamp = 0x03,
    /// [`FenceSignal`].
    FenceSignal = 0x10,
    /// [`FenceWait`].
    FenceWait = 0x11,
    /// [`MonitoredFenceSignal`].
    MonitoredFenceSignal = 0x12,
    /// [`Notify`].
    Notify = 0x13,
    /// [`Copy`].
    Copy = 0x20,
    /// [`Fill`].
    Fill = 0x21,
    /// [`Compute`].
    Compute = 0x30,
    /// [`Jump`].
    Jump = 0x40,
}

impl Opcode {
    /// Fixed length in dwords, header included (`None`: variable, for `NOP`).
    pub const fn dwords(self) -> Option<u32> {
        let bytes = match self {
            Opcode::Nop => return None,
            Opcode::WriteData32 => size_of::<WriteData32>(),
            Opcode::WriteData64 => size_of::<WriteData64>(),
            Opcode::WriteTimestamp => size_of::<WriteTimestamp>(),
            Opcode::FenceSignal => size_of::<FenceSignal>(),
            Opcode::FenceWait => size_of::<FenceWait>(),
            Opcode::MonitoredFenceSignal => size_of::<MonitoredFenceSignal>(),
            Opcode::Notify => size_of::<Notify>(),
            Opcode::Copy => size_of::<Copy>(),
            Opcode::Fill => size_of::<Fill>(),
            Opcode::Compute => size_of::<Compute>(),
            Opcode::Jump => size_of::<Jump>(),
        };
        Some(bytes as u32 / 4)
    }

    /// Whether this packet writes fence memory (refused on engines that cannot).
    pub const fn writes_fence(self) -> bool {
        matches!(self, Opcode::FenceSignal | Opcode::MonitoredFenceSignal)
    }

    /// Name for traces.
    pub const fn name(self) -> &'static str {
        match self {
            Opcode::Nop => "NOP",
            Opcode::WriteData32 => "WRITE_DATA32",
            Opcode::WriteData64 => "WRITE_DATA64",
            Opcode::WriteTimestamp => "WRITE_TIMESTAMP",
            Opcode::FenceSignal => "FENCE_SIGNAL",
            Opcode::FenceWait => "FENCE_WAIT",
            Opcode::MonitoredFenceSignal => "MONITORED_FENCE_SIGNAL",
            Opcode::Notify => "NOTIFY",
            Opcode::Copy => "COPY",
            Opcode::Fill => "FILL",
            Opcode::Compute => "COMPUTE",
            Opcode::Jump => "JUMP",
        }
    }
}

impl TryFrom<u32> for Opcode {
    type Error = u32;
    fn try_from(raw: u32) -> Result<Self, u32> {
        Ok(match raw {
            0x00 => Opcode::Nop,
            0x01 => Opcode::WriteData32,
            0x02 => Opcode::WriteData64,
            0x03 => Opcode::WriteTimestamp,
            0x10 => Opcode::FenceSignal,
            0x11 => Opcode::FenceWait,
            0x12 => Opcode::MonitoredFenceSignal,
            0x13 => Opcode::Notify,
            0x20 => Opcode::Copy,
            0x21 => Opcode::Fill,
            0x30 => Opcode::Compute,
            0x40 => Opcode::Jump,
            other => return Err(other),
        })
    }
}

/// Store a 32-bit value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteData32 {
    /// Header.
    pub header: u32,
    /// Value.
    pub value: u32,
    /// Destination (4-byte aligned).
    pub va: u64,
}
const _: () = assert!(size_of::<WriteData32>() == 16);

/// Store a 64-bit value, single-copy atomic.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteData64 {
    /// Header.
    pub header: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Destination (8-byte aligned).
    pub va: u64,
    /// Value.
    pub value: u64,
}
const _: () = assert!(size_of::<WriteData64>() == 24);

/// Store the 64-bit GPU timestamp.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteTimestamp {
    /// Header.
    pub header: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Destination (8-byte aligned).
    pub va: u64,
}
const _: () = assert!(size_of::<WriteTimestamp>() == 16);

/// Signal a native fence: store `value` to its CurrentValue (64-bit atomic), write the signal
/// log entry, advance the log index, barrier, then interrupt the CPU if the fence's
/// MonitoredValue (found from the fence the driver registered, never from this packet) is
/// below `value`. A VA that is no registered native fence is a plain 64-bit store.
///
/// The log fields (here and in [`FenceWait`]) are Belfry's form of the reference's command
/// telling the GPU to write a payload to a given log entry right after the fence instruction
/// (LOG-05): the library fills them with its queue's next index of the right log (LOG-04).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceSignal {
    /// Header.
    pub header: u32,
    /// Free-running index of the signal-log entry to write, or [`NO_LOG`].
    pub log_entry: u32,
    /// GPU VA of the fence's CurrentValue (8-byte aligned).
    pub fence_va: u64,
    /// Value to signal.
    pub value: u64,
    /// Fence handle recorded in the log entry (the submitter's handle).
    pub log_handle: u64,
}
const _: () = assert!(size_of::<FenceSignal>() == 32);

/// Wait, on the GPU, until the fence's CurrentValue ≥ `value`; the queue yields its engine
/// meanwhile and no CPU is involved. Logged to the wait log when unblocked.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceWait {
    /// Header.
    pub header: u32,
    /// Free-running index of the wait-log entry to write, or [`NO_LOG`].
    pub log_entry: u32,
    /// GPU VA of the fence's CurrentValue (8-byte aligned).
    pub fence_va: u64,
    /// Value to wait for.
    pub value: u64,
    /// Fence handle recorded in the log entry.
    pub log_handle: u64,
}
const _: () = assert!(size_of::<FenceWait>() == 32);

/// Signal a monitored (WDDM 2.0) fence: store `value`, then always raise a
/// monitored-fence-signaled interrupt. Kernel-mode queues only: on a user-mode-submission queue
/// it faults the context (`MONITORED_FENCE_ON_USER_MODE_QUEUE`, NF-21).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MonitoredFenceSignal {
    /// Header.
    pub header: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// GPU VA of the fence value (8-byte aligned).
    pub fence_va: u64,
    /// Value (a 32-bit store of the low half on a device without 64-bit atomics).
    pub value: u64,
}
const _: () = assert!(size_of::<MonitoredFenceSignal>() == 24);

/// Raise a `NOTIFY` interrupt record carrying `token` (e.g. the software fence signal of an
/// engine that cannot write fences: the driver writes the fence when the record arrives).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Notify {
    /// Header.
    pub header: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Token.
    pub token: u64,
}
const _: () = assert!(size_of::<Notify>() == 16);

/// Copy `size` bytes from `src_va` to `dst_va` (ranges must not overlap).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copy {
    /// Header.
    pub header: u32,
    /// Bytes, at most [`TRANSFER_MAX_BYTES`].
    pub size: u32,
    /// Source.
    pub src_va: u64,
    /// Destination.
    pub dst_va: u64,
}
const _: () = assert!(size_of::<Copy>() == 24);

/// Fill `size` bytes (a multiple of 4) at `dst_va` with the 32-bit `value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fill {
    /// Header.
    pub header: u32,
    /// Bytes, a multiple of 4, at most [`TRANSFER_MAX_BYTES`].
    pub size: u32,
    /// Destination.
    pub dst_va: u64,
    /// Pattern.
    pub value: u32,
    /// Reserved, zero.
    pub reserved: u32,
}
const _: () = assert!(size_of::<Fill>() == 24);

/// Element-wise arithmetic over `count` 32-bit elements: `dst[i] = op(a[i], b[i], scalar)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compute {
    /// Header.
    pub header: u32,
    /// [`ComputeOp`].
    pub op: u32,
    /// Elements, at most [`COMPUTE_MAX_ELEMENTS`].
    pub count: u32,
    /// Scalar operand (`f32` bits for float ops).
    pub scalar: u32,
    /// First source.
    pub a_va: u64,
    /// Second source.
    pub b_va: u64,
    /// Destination.
    pub dst_va: u64,
}
const _: () = assert!(size_of::<Compute>() == 40);

/// Continue execution in another command buffer (chaining); the rest of this buffer is skipped.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Jump {
    /// Header.
    pub header: u32,
    /// Size of the target buffer in bytes.
    pub size_bytes: u32,
    /// GPU VA of the target buffer.
    pub va: u64,
}
const _: () = assert!(size_of::<Jump>() == 16);

/// Largest `COPY`/`FILL`.
pub const TRANSFER_MAX_BYTES: u32 = 16 << 20;
/// Largest `COMPUTE`.
pub const COMPUTE_MAX_ELEMENTS: u32 = 1 << 20;

/// Operations of [`Compute`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputeOp {
    /// `a + b` (wrapping `u32`).
    AddU32 = 1,
    /// `a * b` (wrapping `u32`).
    MulU32 = 2,
    /// `scalar * a + b` (`f32`).
    SaxpyF32 = 3,
}

impl TryFrom<u32> for ComputeOp {
    type Error = u32;
    fn try_from(raw: u32) -> Result<Self, u32> {
        match raw {
            1 => Ok(ComputeOp::AddU32),
            2 => Ok(ComputeOp::MulU32),
            3 => Ok(ComputeOp::SaxpyF32),
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_lengths_are_fixed() {
        let h = header(Opcode::FenceSignal, 8);
        assert_eq!((header_opcode(h), header_dwords(h), header_reserved(h)), (0x10, 8, 0));
        assert_eq!(Opcode::FenceSignal.dwords(), Some(8));
        assert_eq!(Opcode::Compute.dwords(), Some(10));
        assert_eq!(Opcode::Nop.dwords(), None);
        for raw in 0..=0xff {
            if let Ok(op) = Opcode::try_from(raw) {
                assert_eq!(op as u32, raw);
            }
        }
    }
}

//! Command packets: what command buffers contain.
//!
//! A command buffer is a sequence of packets, each starting with a [`header`] dword: opcode in
//! bits 7:0, reserved bits 15:8 (zero but for a packet's own flags: [`FENCE_WAIT_LOG_BEGIN`]), length in dwords including the header in bits 31:16.
//! Every packet but `NOP` has a fixed length ([`Opcode::dwords`]); a length that does not match,
//! a reserved bit, an unknown opcode or a packet running past the buffer faults the queue.
//! Every address is a GPU VA in the queue's address space, translated by the GPU MMU.

use core::mem::{offset_of, size_of};

/// The one list of fixed-length packets: calls `$m! { WriteData32, WriteData64, ... }` with the
/// name of every packet but `NOP`. Each name is both the [`Opcode`] variant and the packet
/// struct of this module, so a side that needs one arm, impl or encoder per packet (the
/// device's `ByteValued` marks, the library's encoders and decoder, the module's byte marks,
/// [`validate`]) writes it once over this list instead of keeping a list of its own.
#[macro_export]
macro_rules! for_each_packet {
    ($m:ident) => {
        $m! { WriteData32, WriteData64, WriteTimestamp, FenceSignal, FenceWait, MonitoredFenceSignal, Notify, Copy, Fill, Compute, Jump, BindSlot, SlotCopy }
    };
}

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

/// `FENCE_WAIT` header flag (bit 8), verbose fence logging (LOG-20): the submitter reserved two
/// wait-log entries, `log_entry` for `WAIT_BEGIN` and `log_entry + 1` for `WAIT_UNBLOCKED`.
/// The device writes `WAIT_BEGIN` there when the engine first meets the wait if
/// `regs::LOG_VERBOSE` is on, an empty entry (`fence::LOG_OPERATION_NONE`) if it is off, so
/// the log never holds a stale slot. The only header flag; on any other packet bit 8 is
/// reserved.
pub const FENCE_WAIT_LOG_BEGIN: u32 = 1 << 8;

/// The header flags `opcode` may carry in bits 15:8.
pub const fn header_flags_allowed(opcode: Opcode) -> u32 {
    match opcode {
        Opcode::FenceWait => FENCE_WAIT_LOG_BEGIN,
        _ => 0,
    }
}

crate::wire_enum! {
    /// Packet opcodes.
    pub enum Opcode {
        /// Does nothing; any length ≥ 1 (payload skipped).
        Nop = 0x00 => "NOP",
        /// [`WriteData32`].
        WriteData32 = 0x01 => "WRITE_DATA32",
        /// [`WriteData64`].
        WriteData64 = 0x02 => "WRITE_DATA64",
        /// [`WriteTimestamp`].
        WriteTimestamp = 0x03 => "WRITE_TIMESTAMP",
        /// [`FenceSignal`].
        FenceSignal = 0x10 => "FENCE_SIGNAL",
        /// [`FenceWait`].
        FenceWait = 0x11 => "FENCE_WAIT",
        /// [`MonitoredFenceSignal`].
        MonitoredFenceSignal = 0x12 => "MONITORED_FENCE_SIGNAL",
        /// [`Notify`].
        Notify = 0x13 => "NOTIFY",
        /// [`Copy`](struct@Copy).
        Copy = 0x20 => "COPY",
        /// [`Fill`].
        Fill = 0x21 => "FILL",
        /// [`Compute`].
        Compute = 0x30 => "COMPUTE",
        /// [`Jump`].
        Jump = 0x40 => "JUMP",
        /// [`BindSlot`].
        BindSlot = 0x50 => "BIND_SLOT",
        /// [`SlotCopy`].
        SlotCopy = 0x51 => "SLOT_COPY",
    }
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
            Opcode::BindSlot => size_of::<BindSlot>(),
            Opcode::SlotCopy => size_of::<SlotCopy>(),
        };
        Some(bytes as u32 / 4)
    }

    /// Whether this packet writes fence memory (refused on engines that cannot).
    pub const fn writes_fence(self) -> bool {
        matches!(self, Opcode::FenceSignal | Opcode::MonitoredFenceSignal)
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

/// Bind slot `slot` of the command buffer's resource table to `size` bytes at `va` (`va` and
/// `size` zero: unbind). Bindings are state of one command buffer: every buffer starts with all
/// slots unbound, so the parts of a split DMA buffer bind again what they use after each split
/// point (SPLIT-05). The kernel writes `va` and `size` at the patch location of the
/// allocation-list entry naming this bind (the library leaves them zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindSlot {
    /// Header.
    pub header: u32,
    /// Slot, below the device's `SPLIT_INFO.slots`.
    pub slot: u32,
    /// GPU VA of the bound range (the patch location), 0 to unbind.
    pub va: u64,
    /// Bytes bound, 0 to unbind.
    pub size: u64,
}
const _: () = assert!(size_of::<BindSlot>() == 24);

/// Byte offset of [`BindSlot::va`] in the packet: a patch location is the offset of a bind's
/// `va` in the DMA buffer, `size` follows it.
pub const BIND_SLOT_PATCH_OFFSET: u32 = offset_of!(BindSlot, va) as u32;

/// Copy `size` bytes from `src_offset` in the range bound to `src_slot` to `dst_offset` in the
/// range bound to `dst_slot` (as if through a temporary buffer); an unbound slot or a range past
/// a binding's size faults with `BAD_PACKET`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotCopy {
    /// Header.
    pub header: u32,
    /// Bytes, at most [`TRANSFER_MAX_BYTES`].
    pub size: u32,
    /// Source slot.
    pub src_slot: u32,
    /// Destination slot.
    pub dst_slot: u32,
    /// Offset in the source binding.
    pub src_offset: u64,
    /// Offset in the destination binding.
    pub dst_offset: u64,
}
const _: () = assert!(size_of::<SlotCopy>() == 32);

/// Most slots a device may offer (`SPLIT_INFO.slots`).
pub const BIND_SLOTS_MAX: u32 = 16;

/// Largest `COPY`/`FILL`.
pub const TRANSFER_MAX_BYTES: u32 = 16 << 20;
/// Largest `COMPUTE`.
pub const COMPUTE_MAX_ELEMENTS: u32 = 1 << 20;

crate::wire_enum! {
    /// Operations of [`Compute`].
    pub enum ComputeOp {
        /// `a + b` (wrapping `u32`).
        AddU32 = 1 => "ADD_U32",
        /// `a * b` (wrapping `u32`).
        MulU32 = 2 => "MUL_U32",
        /// `scalar * a + b` (`f32`).
        SaxpyF32 = 3 => "SAXPY_F32",
    }
}

/// Why a packet is refused before it runs. The device faults the queue's context with
/// `BAD_PACKET` for every one of them; the library's `decode` and the module's `SUBMIT` refuse the
/// same packets with these reasons, so the three sides cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// The header's opcode is none of [`Opcode`].
    UnknownOpcode(u32),
    /// Reserved header bits 15:8 are set.
    ReservedHeader,
    /// The length is zero, or not the opcode's fixed length ([`Opcode::dwords`]).
    BadLength,
    /// The packet runs past the end of its buffer.
    Truncated,
    /// A field documented "Reserved, zero" is not zero.
    ReservedField,
    /// An address is not aligned as the packet requires (4 bytes for 32-bit stores and command
    /// buffers, 8 for 64-bit stores and fences).
    Misaligned,
    /// A size or count is above its limit, or not the multiple it must be.
    BadSize,
    /// `COPY`'s source and destination ranges overlap.
    Overlap,
    /// `COMPUTE` names no [`ComputeOp`].
    UnknownComputeOp(u32),
    /// An address range wraps past the end of the GPU VA space.
    AddressOverflow,
}

/// Checks a header dword: a known opcode, reserved bits clear, and a length that is not zero
/// and, for every opcode but `NOP`, the opcode's fixed length. Returns the opcode and the length
/// in dwords (header included).
pub const fn check_header(header: u32) -> Result<(Opcode, u32), PacketError> {
    let op = match Opcode::from_raw(header_opcode(header)) {
        Some(op) => op,
        None => return Err(PacketError::UnknownOpcode(header_opcode(header))),
    };
    if header & 0xff00 & !header_flags_allowed(op) != 0 {
        return Err(PacketError::ReservedHeader);
    }
    let dwords = header_dwords(header);
    let fixed_mismatch = match op.dwords() {
        Some(d) => d != dwords,
        None => false,
    };
    if dwords == 0 || fixed_mismatch {
        return Err(PacketError::BadLength);
    }
    Ok((op, dwords))
}

/// Checks the one packet at the start of `bytes` (little-endian, as in a command buffer): its
/// header ([`check_header`]), that it fits in `bytes`, and its fields (the packet's own
/// `validate`). Returns the opcode and the length in dwords, so a caller walks a buffer by
/// `dwords * 4` bytes at a time.
///
/// Checks only what the packet itself says: whether its addresses are mapped, and whether its
/// engine may write fences, are the device's to decide when it runs.
pub fn validate(bytes: &[u8]) -> Result<(Opcode, u32), PacketError> {
    let header = match read_le::<u32>(bytes, 0) {
        Some(h) => h,
        None => return Err(PacketError::Truncated),
    };
    let (op, dwords) = check_header(header)?;
    // CAST: at most 65535 dwords, far below usize::MAX.
    if bytes.len() < dwords as usize * 4 {
        return Err(PacketError::Truncated);
    }
    macro_rules! validate_fields {
        ($($name:ident),*) => {
            match op {
                Opcode::Nop => Ok(()),
                $(Opcode::$name => match $name::from_le_bytes(bytes) {
                    Some(p) => p.validate(),
                    None => Err(PacketError::Truncated),
                },)*
            }
        };
    }
    for_each_packet!(validate_fields)?;
    Ok((op, dwords))
}

/// A field type of a packet, read little-endian.
trait LeField: Sized {
    fn read(bytes: &[u8], at: usize) -> Option<Self>;
}

impl LeField for u32 {
    fn read(bytes: &[u8], at: usize) -> Option<Self> {
        match bytes.get(at..at.checked_add(4)?) {
            Some(&[a, b, c, d]) => Some(u32::from_le_bytes([a, b, c, d])),
            _ => None,
        }
    }
}

impl LeField for u64 {
    fn read(bytes: &[u8], at: usize) -> Option<Self> {
        let low = u32::read(bytes, at)?;
        let high = u32::read(bytes, at.checked_add(4)?)?;
        Some(u64::from(low) | (u64::from(high) << 32))
    }
}

fn read_le<T: LeField>(bytes: &[u8], at: usize) -> Option<T> {
    T::read(bytes, at)
}

/// `from_le_bytes` for each packet struct: its fields at their `repr(C)` offsets.
macro_rules! packet_from_le_bytes {
    ($($name:ident { $($field:ident),* })*) => {$(
        impl $name {
            /// Reads this packet from the start of `bytes` (little-endian); `None` if `bytes`
            /// is shorter than the packet.
            pub fn from_le_bytes(bytes: &[u8]) -> Option<Self> {
                if bytes.len() < size_of::<Self>() {
                    return None;
                }
                Some(Self { $($field: read_le(bytes, offset_of!($name, $field))?,)* })
            }
        }
    )*};
}

packet_from_le_bytes! {
    WriteData32 { header, value, va }
    WriteData64 { header, reserved, va, value }
    WriteTimestamp { header, reserved, va }
    FenceSignal { header, log_entry, fence_va, value, log_handle }
    FenceWait { header, log_entry, fence_va, value, log_handle }
    MonitoredFenceSignal { header, reserved, fence_va, value }
    Notify { header, reserved, token }
    Copy { header, size, src_va, dst_va }
    Fill { header, size, dst_va, value, reserved }
    Compute { header, op, count, scalar, a_va, b_va, dst_va }
    Jump { header, size_bytes, va }
    BindSlot { header, slot, va, size }
    SlotCopy { header, size, src_slot, dst_slot, src_offset, dst_offset }
}

const fn aligned(va: u64, to: u64) -> Result<(), PacketError> {
    if va % to == 0 {
        Ok(())
    } else {
        Err(PacketError::Misaligned)
    }
}

const fn reserved_zero(value: u32) -> Result<(), PacketError> {
    if value == 0 {
        Ok(())
    } else {
        Err(PacketError::ReservedField)
    }
}

/// Whether `[a, a + len)` and `[b, b + len)` overlap.
const fn overlaps(a: u64, b: u64, len: u64) -> bool {
    len > 0 && a < b.saturating_add(len) && b < a.saturating_add(len)
}

impl WriteData32 {
    /// The packet's own rules: `va` 4-byte aligned.
    pub const fn validate(&self) -> Result<(), PacketError> {
        aligned(self.va, 4)
    }
}

impl WriteData64 {
    /// The packet's own rules: `reserved` zero, `va` 8-byte aligned.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if let Err(e) = reserved_zero(self.reserved) {
            return Err(e);
        }
        aligned(self.va, 8)
    }
}

impl WriteTimestamp {
    /// The packet's own rules: `reserved` zero, `va` 8-byte aligned.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if let Err(e) = reserved_zero(self.reserved) {
            return Err(e);
        }
        aligned(self.va, 8)
    }
}

impl FenceSignal {
    /// The packet's own rules: `fence_va` 8-byte aligned.
    pub const fn validate(&self) -> Result<(), PacketError> {
        aligned(self.fence_va, 8)
    }
}

impl FenceWait {
    /// The packet's own rules: `fence_va` 8-byte aligned.
    pub const fn validate(&self) -> Result<(), PacketError> {
        aligned(self.fence_va, 8)
    }
}

impl MonitoredFenceSignal {
    /// The packet's own rules: `reserved` zero, `fence_va` 8-byte aligned.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if let Err(e) = reserved_zero(self.reserved) {
            return Err(e);
        }
        aligned(self.fence_va, 8)
    }
}

impl Notify {
    /// The packet's own rules: `reserved` zero.
    pub const fn validate(&self) -> Result<(), PacketError> {
        reserved_zero(self.reserved)
    }
}

impl Copy {
    /// The packet's own rules: `size` at most [`TRANSFER_MAX_BYTES`], ranges that neither
    /// overlap nor wrap.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if self.size > TRANSFER_MAX_BYTES {
            return Err(PacketError::BadSize);
        }
        if self.src_va.checked_add(self.size as u64).is_none() || self.dst_va.checked_add(self.size as u64).is_none() {
            return Err(PacketError::AddressOverflow);
        }
        if overlaps(self.src_va, self.dst_va, self.size as u64) {
            return Err(PacketError::Overlap);
        }
        Ok(())
    }
}

impl Fill {
    /// The packet's own rules: `size` a multiple of 4 and at most [`TRANSFER_MAX_BYTES`],
    /// `reserved` zero, a range that does not wrap.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if self.size > TRANSFER_MAX_BYTES || self.size % 4 != 0 {
            return Err(PacketError::BadSize);
        }
        if let Err(e) = reserved_zero(self.reserved) {
            return Err(e);
        }
        if self.dst_va.checked_add(self.size as u64).is_none() {
            return Err(PacketError::AddressOverflow);
        }
        Ok(())
    }
}

impl Compute {
    /// The packet's own rules: a known [`ComputeOp`], `count` at most
    /// [`COMPUTE_MAX_ELEMENTS`], ranges that do not wrap.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if ComputeOp::from_raw(self.op).is_none() {
            return Err(PacketError::UnknownComputeOp(self.op));
        }
        if self.count > COMPUTE_MAX_ELEMENTS {
            return Err(PacketError::BadSize);
        }
        let bytes = self.count as u64 * 4;
        if self.a_va.checked_add(bytes).is_none()
            || self.b_va.checked_add(bytes).is_none()
            || self.dst_va.checked_add(bytes).is_none()
        {
            return Err(PacketError::AddressOverflow);
        }
        Ok(())
    }
}

impl Jump {
    /// The packet's own rules: `size_bytes` a multiple of 4 and at most
    /// [`CMDBUF_MAX_BYTES`](super::ring::CMDBUF_MAX_BYTES), `va` 4-byte aligned, a target range
    /// that does not wrap.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if self.size_bytes % 4 != 0 || self.size_bytes > super::ring::CMDBUF_MAX_BYTES {
            return Err(PacketError::BadSize);
        }
        if let Err(e) = aligned(self.va, 4) {
            return Err(e);
        }
        if self.va.checked_add(self.size_bytes as u64).is_none() {
            return Err(PacketError::AddressOverflow);
        }
        Ok(())
    }
}

impl BindSlot {
    /// The packet's own rules: `slot` below [`BIND_SLOTS_MAX`], `va` and `size` both zero
    /// (unbind) or both not, a range that does not wrap.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if self.slot >= BIND_SLOTS_MAX {
            return Err(PacketError::BadSize);
        }
        if (self.va == 0) != (self.size == 0) {
            return Err(PacketError::ReservedField);
        }
        if self.va.checked_add(self.size).is_none() {
            return Err(PacketError::AddressOverflow);
        }
        Ok(())
    }
}

impl SlotCopy {
    /// The packet's own rules: `size` at most [`TRANSFER_MAX_BYTES`], slots below
    /// [`BIND_SLOTS_MAX`], offsets that do not wrap.
    pub const fn validate(&self) -> Result<(), PacketError> {
        if self.size > TRANSFER_MAX_BYTES || self.src_slot >= BIND_SLOTS_MAX || self.dst_slot >= BIND_SLOTS_MAX {
            return Err(PacketError::BadSize);
        }
        if self.src_offset.checked_add(self.size as u64).is_none()
            || self.dst_offset.checked_add(self.size as u64).is_none()
        {
            return Err(PacketError::AddressOverflow);
        }
        Ok(())
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

    fn encode(words: &[u32]) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (i, w) in words.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    #[test]
    fn the_packet_list_names_every_fixed_length_opcode() {
        macro_rules! opcodes {
            ($($name:ident),*) => { [$(Opcode::$name),*] };
        }
        let listed = for_each_packet!(opcodes);
        for raw in 0..=0xff {
            if let Ok(op) = Opcode::try_from(raw) {
                assert_eq!(listed.contains(&op), op != Opcode::Nop, "{op:?}");
            }
        }
    }

    #[test]
    fn headers_are_checked_before_fields() {
        assert_eq!(check_header(header(Opcode::Nop, 3)), Ok((Opcode::Nop, 3)));
        assert_eq!(check_header(header(Opcode::Nop, 0)), Err(PacketError::BadLength));
        assert_eq!(check_header(header(Opcode::WriteData32, 5)), Err(PacketError::BadLength));
        assert_eq!(check_header(0x7f | (4 << 16)), Err(PacketError::UnknownOpcode(0x7f)));
        assert_eq!(check_header(header(Opcode::WriteData32, 4) | 0x100), Err(PacketError::ReservedHeader));
        assert_eq!(validate(&[1, 0]), Err(PacketError::Truncated));
        let wd32 = encode(&[header(Opcode::WriteData32, 4), 7, 0x1000, 0]);
        assert_eq!(validate(&wd32), Ok((Opcode::WriteData32, 4)));
        assert_eq!(validate(&wd32[..12]), Err(PacketError::Truncated));
    }

    #[test]
    fn fields_follow_each_packets_rules() {
        let h = |op: Opcode| header(op, op.dwords().unwrap() as u16);
        let check = |words: &[u32]| validate(&encode(words)).map(|_| ());
        assert_eq!(check(&[h(Opcode::WriteData32), 7, 0x1002, 0]), Err(PacketError::Misaligned));
        assert_eq!(check(&[h(Opcode::WriteData64), 1, 0x1000, 0, 5, 0]), Err(PacketError::ReservedField));
        assert_eq!(check(&[h(Opcode::WriteData64), 0, 0x1004, 0, 5, 0]), Err(PacketError::Misaligned));
        assert_eq!(check(&[h(Opcode::WriteTimestamp), 1, 0x1000, 0]), Err(PacketError::ReservedField));
        assert_eq!(check(&[h(Opcode::FenceSignal), NO_LOG, 0x1004, 0, 1, 0, 0, 0]), Err(PacketError::Misaligned));
        assert_eq!(check(&[h(Opcode::FenceWait), NO_LOG, 0x1000, 0, 1, 0, 0, 0]), Ok(()));
        assert_eq!(check(&[h(Opcode::MonitoredFenceSignal), 2, 0x1000, 0, 1, 0]), Err(PacketError::ReservedField));
        assert_eq!(check(&[h(Opcode::Notify), 3, 9, 0]), Err(PacketError::ReservedField));
        assert_eq!(check(&[h(Opcode::Copy), 0x100, 0x1000, 0, 0x1080, 0]), Err(PacketError::Overlap));
        assert_eq!(check(&[h(Opcode::Copy), 0x100, 0x1000, 0, 0x1100, 0]), Ok(()));
        assert_eq!(check(&[h(Opcode::Copy), TRANSFER_MAX_BYTES + 1, 0, 0, 0, 1]), Err(PacketError::BadSize));
        assert_eq!(check(&[h(Opcode::Copy), 0x100, 0xffff_ff80, u32::MAX, 0, 0]), Err(PacketError::AddressOverflow));
        assert_eq!(check(&[h(Opcode::Fill), 6, 0x1000, 0, 0, 0]), Err(PacketError::BadSize));
        assert_eq!(check(&[h(Opcode::Fill), 8, 0x1000, 0, 0, 1]), Err(PacketError::ReservedField));
        assert_eq!(check(&[h(Opcode::Compute), 9, 1, 0, 0, 0, 0, 0, 0, 0]), Err(PacketError::UnknownComputeOp(9)));
        assert_eq!(
            check(&[h(Opcode::Compute), 1, COMPUTE_MAX_ELEMENTS + 1, 0, 0, 0, 0, 0, 0, 0]),
            Err(PacketError::BadSize)
        );
        assert_eq!(check(&[h(Opcode::Compute), 3, 16, 0, 0x1000, 0, 0x2000, 0, 0x3000, 0]), Ok(()));
        assert_eq!(check(&[h(Opcode::Jump), 6, 0x1000, 0]), Err(PacketError::BadSize));
        assert_eq!(check(&[h(Opcode::Jump), 8, 0x1002, 0]), Err(PacketError::Misaligned));
        assert_eq!(check(&[h(Opcode::Jump), 8, 0xffff_fffc, u32::MAX]), Err(PacketError::AddressOverflow));
        assert_eq!(check(&[h(Opcode::Jump), 8, 0x1000, 0]), Ok(()));
    }

    #[test]
    fn packets_read_back_what_was_written() {
        let bytes = encode(&[header(Opcode::FenceSignal, 8), 3, 0x2000, 1, 42, 0, 7, 0]);
        let p = FenceSignal::from_le_bytes(&bytes).unwrap();
        assert_eq!((p.log_entry, p.fence_va, p.value, p.log_handle), (3, 0x1_0000_2000, 42, 7));
        assert_eq!(FenceSignal::from_le_bytes(&bytes[..31]), None);
    }
}

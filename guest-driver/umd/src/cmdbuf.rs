//! A typed builder of command buffers over the abi packets, and a decoder of them.
//!
//! The packet list is the abi's (`belfry_abi::for_each_packet!`): the [`Packet`] enum, the
//! builder's encoding and the decoder are generated from it, so a packet added to the abi is
//! one the library builds and decodes. Every packet is built as its `belfry_abi::packet`
//! struct with `packet::header(opcode, dwords)`; its bytes are the struct's own (`#[repr(C)]`,
//! little-endian, no padding: [`crate::sys::packet_bytes`]). Before a packet is added, the
//! abi's `validate` checks it, so the builder refuses exactly the fields the device faults on
//! ([`Error::Packet`]); a few arguments the device would accept but that make no sense (zero
//! sizes and counts, misaligned `COMPUTE` operands) are refused with [`Error::Invalid`].
//! [`decode`] walks a buffer with `packet::validate`, refusing what the device refuses.

use core::mem::size_of;

use belfry_abi::ids::FenceHandle;
use belfry_abi::packet::{self, ComputeOp, Opcode, PacketError};
use belfry_abi::ring::CMDBUF_MAX_BYTES;

use crate::error::{Error, Result};
use crate::fence::{Fence, FenceKind, SignalFloor};
use crate::handle::ContextId;
use crate::sys::{self, WirePacket};

/// What the builder and the decoder need of each abi packet struct.
trait Wire: WirePacket {
    /// Its opcode.
    const OPCODE: Opcode;
    /// The abi's checks of its fields.
    fn validate(&self) -> Result<(), PacketError>;
}

/// Generates, from the abi's packet list, [`Packet`], the [`Wire`] impls and the decoding of one
/// validated packet.
macro_rules! packets {
    ($($name:ident),*) => {
        /// One decoded packet: `NOP`, or an abi packet struct.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Packet {
            /// `NOP` of `dwords` dwords (header included).
            Nop {
                /// Length in dwords.
                dwords: u32,
            },
            $(
                #[doc = concat!("The `", stringify!($name), "` packet.")]
                $name(packet::$name),
            )*
        }

        $(
            impl Wire for packet::$name {
                const OPCODE: Opcode = Opcode::$name;
                fn validate(&self) -> Result<(), PacketError> {
                    packet::$name::validate(self)
                }
            }
        )*

        impl Packet {
            /// The packet of opcode `op` and `dwords` dwords at the start of `bytes`, which
            /// `packet::validate` accepted (so it is long enough).
            fn read(op: Opcode, dwords: u32, bytes: &[u8]) -> Result<Packet, PacketError> {
                Ok(match op {
                    Opcode::Nop => Packet::Nop { dwords },
                    $(Opcode::$name => {
                        Packet::$name(packet::$name::from_le_bytes(bytes).ok_or(PacketError::Truncated)?)
                    })*
                })
            }
        }
    };
}
belfry_abi::for_each_packet!(packets);

/// The header a packet struct of type `T` carries.
const fn header_of<T: Wire>() -> u32 {
    packet::header(T::OPCODE, (size_of::<T>() / 4) as u16)
}

/// Where a fence operation is logged: entry `index` (free-running) of the queue's log buffer,
/// recording `handle` — a slot the caller chooses itself (tests of the logs use it); the
/// library's own packets ([`CommandBuffer::signal_fence`], [`CommandBuffer::wait_fence`], the
/// progress signal) get theirs from the queue at submission, past any caller slot
/// (`crate::logslot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSlot {
    /// Free-running entry index.
    pub index: u32,
    /// Fence handle recorded in the entry (a global handle, [`Fence::log_handle`]).
    pub handle: FenceHandle,
}

/// Why bytes are not a command buffer the device would run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The length is not a multiple of 4.
    #[error("Length {0} is not a multiple of 4")]
    Unaligned(usize),
    /// The packet at a byte offset is one the device refuses (`packet::validate`): unknown
    /// opcode, reserved header bits, wrong length, running past the end, or bad fields.
    #[error("Packet at {offset:#x} refused: {reason:?}")]
    Refused {
        /// Byte offset of the header.
        offset: usize,
        /// Why.
        reason: PacketError,
    },
}

/// Decodes a command buffer into its packets, checking each as the device does
/// (`packet::validate`: header, length, fields).
///
/// # Errors
/// [`DecodeError`] for the first packet the device would refuse.
pub fn decode(bytes: &[u8]) -> Result<Vec<Packet>, DecodeError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(DecodeError::Unaligned(bytes.len()));
    }
    let mut packets = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let refused = |reason| DecodeError::Refused { offset: at, reason };
        let (op, dwords) = packet::validate(rest).map_err(refused)?;
        packets.push(Packet::read(op, dwords, rest).map_err(refused)?);
        at += dwords as usize * 4; // CAST: at most 65535 dwords.
    }
    Ok(packets)
}

fn aligned(va: u64, align: u64, what: &'static str) -> Result<()> {
    if va.is_multiple_of(align) {
        Ok(())
    } else {
        Err(Error::Invalid(what))
    }
}

/// A command buffer under construction: the packets' bytes, little-endian.
///
/// Queues copy the bytes into GPU memory at submission and close user-mode buffers with the
/// progress-fence signal themselves; see [`crate::Queue::submit`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandBuffer {
    bytes: Vec<u8>,
    /// Byte offsets of the fence packets whose log slot the queue assigns at submission.
    log_sites: Vec<u32>,
    /// The context of the fences named through [`CommandBuffer::signal_fence`] and
    /// [`CommandBuffer::wait_fence`], with the first such fence's handle: all must share it, and
    /// a queue of another context refuses the buffer ([`Error::ForeignFence`]).
    fence_context: Option<(ContextId, u32)>,
    /// The GPU signals named through [`CommandBuffer::signal_fence`]: each fence's floor and
    /// the value, checked again and raised when a queue accepts the buffer.
    signals: Vec<(SignalFloor, u32, u64)>,
}

impl CommandBuffer {
    /// An empty command buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes built so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether no packet was added.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Removes every packet.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.log_sites.clear();
    }

    /// Byte offsets of the packets whose log slot the queue assigns at submission
    /// (`crate::logslot`).
    pub fn log_sites(&self) -> &[u32] {
        &self.log_sites
    }

    fn push<T: Wire>(&mut self, p: T) -> Result<&mut Self> {
        p.validate().map_err(|reason| Error::Packet { opcode: T::OPCODE, reason })?;
        if self.bytes.len() + size_of::<T>() > CMDBUF_MAX_BYTES as usize {
            return Err(Error::CommandBufferTooLarge {
                bytes: self.bytes.len() + size_of::<T>(),
                max: CMDBUF_MAX_BYTES as usize,
            });
        }
        self.bytes.extend_from_slice(sys::packet_bytes(&p));
        Ok(self)
    }

    /// `WRITE_DATA32`: store `value` at `va` (4-byte aligned).
    ///
    /// # Errors
    /// [`Error::Packet`] for a misaligned VA; [`Error::CommandBufferTooLarge`].
    pub fn write32(&mut self, va: u64, value: u32) -> Result<&mut Self> {
        self.push(packet::WriteData32 { header: header_of::<packet::WriteData32>(), value, va })
    }

    /// `WRITE_DATA64`: store `value` at `va` (8-byte aligned), single-copy atomic.
    ///
    /// # Errors
    /// As [`CommandBuffer::write32`].
    pub fn write64(&mut self, va: u64, value: u64) -> Result<&mut Self> {
        self.push(packet::WriteData64 { header: header_of::<packet::WriteData64>(), reserved: 0, va, value })
    }

    /// `WRITE_TIMESTAMP`: store the GPU timestamp at `va` (8-byte aligned).
    ///
    /// # Errors
    /// As [`CommandBuffer::write32`].
    pub fn timestamp(&mut self, va: u64) -> Result<&mut Self> {
        self.push(packet::WriteTimestamp { header: header_of::<packet::WriteTimestamp>(), reserved: 0, va })
    }

    /// `FENCE_SIGNAL`: signal the native fence at `fence_va` to `value`, logged at `log`.
    ///
    /// # Errors
    /// As [`CommandBuffer::write32`].
    pub fn fence_signal(&mut self, fence_va: u64, value: u64, log: Option<LogSlot>) -> Result<&mut Self> {
        let (log_entry, log_handle) = log.map_or((packet::NO_LOG, 0), |l| (l.index, l.handle.raw()));
        self.push(packet::FenceSignal {
            header: header_of::<packet::FenceSignal>(),
            log_entry,
            fence_va,
            value,
            log_handle,
        })
    }

    /// `FENCE_SIGNAL` of the native fence at `fence_va` to `value`, whose signal-log entry the
    /// queue assigns at submission (the next of its signal log, LOG-04/05), recording
    /// `log_handle` (the fence's global handle, [`Fence::log_handle`]).
    ///
    /// # Errors
    /// As [`CommandBuffer::write32`].
    pub fn logged_signal(&mut self, fence_va: u64, value: u64, log_handle: FenceHandle) -> Result<&mut Self> {
        let at = self.site()?;
        self.fence_signal(fence_va, value, Some(LogSlot { index: packet::NO_LOG, handle: log_handle }))?;
        self.log_sites.push(at);
        Ok(self)
    }

    /// `FENCE_WAIT` on the native fence at `fence_va` for `value`, whose wait-log entry the
    /// queue assigns at submission, recording `log_handle`; see [`CommandBuffer::logged_signal`].
    ///
    /// # Errors
    /// As [`CommandBuffer::write32`].
    pub fn logged_wait(&mut self, fence_va: u64, value: u64, log_handle: FenceHandle) -> Result<&mut Self> {
        let at = self.site()?;
        self.fence_wait(fence_va, value, Some(LogSlot { index: packet::NO_LOG, handle: log_handle }))?;
        self.log_sites.push(at);
        Ok(self)
    }

    /// GPU signal of `fence` to `value`: for a native fence a `FENCE_SIGNAL`, logged in the
    /// queue's signal log at the entry the queue assigns at submission (LOG-05); for a
    /// monitored fence a `MONITORED_FENCE_SIGNAL`, whose interrupt wakes the CPU waits on it.
    ///
    /// # Errors
    /// [`Error::ForeignFence`] if a fence of another context was named in this buffer before;
    /// [`Error::FenceValueBackwards`] for a value below the fence's CurrentValue, a signal
    /// already submitted through the same [`Fence`] or an earlier signal of it in this buffer;
    /// [`Error::Ioctl`] (`FENCE_INFO`, once per fence), or as [`CommandBuffer::write32`].
    /// [`crate::Queue::submit`] refuses the buffer with [`Error::ForeignFence`] on a queue of
    /// another context than the fence's, and with [`Error::FenceValueBackwards`] when a signal
    /// submitted since it was built went past one of its values.
    pub fn signal_fence(&mut self, fence: &Fence, value: u64) -> Result<&mut Self> {
        self.name_fence(fence)?;
        fence.check_forward(value)?;
        let floor = fence.signal_floor();
        let earlier = self.signals.iter().filter(|s| &s.0 == floor).map(|s| s.2).max().unwrap_or(0);
        if value < earlier {
            return Err(Error::FenceValueBackwards { handle: fence.handle(), value, floor: earlier });
        }
        if fence.kind() == FenceKind::Monitored {
            self.monitored_signal(fence.gpu_va(), value)?;
        } else {
            self.logged_signal(fence.gpu_va(), value, fence.log_handle()?)?;
        }
        self.signals.push((floor.clone(), fence.handle(), value));
        Ok(self)
    }

    /// Before a queue accepts this buffer: refuses it if a signal it names would move its
    /// fence backwards past a signal submitted since it was built.
    ///
    /// # Errors
    /// [`Error::FenceValueBackwards`].
    pub(crate) fn check_signals(&self) -> Result<()> {
        match self.signals.iter().find(|(floor, _, value)| *value < floor.get()) {
            Some((floor, handle, value)) => {
                Err(Error::FenceValueBackwards { handle: *handle, value: *value, floor: floor.get() })
            }
            None => Ok(()),
        }
    }

    /// A queue accepted this buffer: its signals are submitted.
    pub(crate) fn note_signals_submitted(&self) {
        for (floor, _, value) in &self.signals {
            floor.raise(*value);
        }
    }

    /// `FENCE_WAIT` on `fence` for `value`, logged in the queue's wait log at the entry the
    /// queue assigns at submission (LOG-05).
    ///
    /// # Errors
    /// As [`CommandBuffer::signal_fence`].
    pub fn wait_fence(&mut self, fence: &Fence, value: u64) -> Result<&mut Self> {
        self.name_fence(fence)?;
        self.logged_wait(fence.gpu_va(), value, fence.log_handle()?)
    }

    /// Records `fence`'s context as this buffer's, refusing a fence of another context than
    /// the fences named before.
    fn name_fence(&mut self, fence: &Fence) -> Result<()> {
        match self.fence_context {
            Some((ctx, _)) => fence.check_context(ctx),
            None => {
                self.fence_context = Some((fence.context_id(), fence.handle()));
                Ok(())
            }
        }
    }

    /// `Ok` if every fence named in this buffer belongs to `ctx`, else
    /// [`Error::ForeignFence`] naming the first.
    pub(crate) fn check_fence_context(&self, ctx: ContextId) -> Result<()> {
        match self.fence_context {
            Some((own, handle)) if own != ctx => Err(Error::ForeignFence { handle }),
            _ => Ok(()),
        }
    }

    fn site(&self) -> Result<u32> {
        u32::try_from(self.bytes.len()).map_err(|_| Error::Invalid("command buffer offset"))
    }

    /// `FENCE_WAIT`: wait on the GPU until the fence at `fence_va` reaches `value`, logged at
    /// `log` when unblocked.
    ///
    /// # Errors
    /// As [`CommandBuffer::write32`].
    pub fn fence_wait(&mut self, fence_va: u64, value: u64, log: Option<LogSlot>) -> Result<&mut Self> {
        let (log_entry, log_handle) = log.map_or((packet::NO_LOG, 0), |l| (l.index, l.handle.raw()));
        self.push(packet::FenceWait {
            header: header_of::<packet::FenceWait>(),
            log_entry,
            fence_va,
            value,
            log_handle,
        })
    }

    /// `MONITORED_FENCE_SIGNAL`: store `value` at `fence_va` and always interrupt.
    ///
    /// # Errors
    /// As [`CommandBuffer::write32`].
    pub fn monitored_signal(&mut self, fence_va: u64, value: u64) -> Result<&mut Self> {
        self.push(packet::MonitoredFenceSignal {
            header: header_of::<packet::MonitoredFenceSignal>(),
            reserved: 0,
            fence_va,
            value,
        })
    }

    /// `NOTIFY`: raise an interrupt record carrying `token`.
    ///
    /// # Errors
    /// [`Error::CommandBufferTooLarge`].
    pub fn notify(&mut self, token: u64) -> Result<&mut Self> {
        self.push(packet::Notify { header: header_of::<packet::Notify>(), reserved: 0, token })
    }

    /// `COPY`: `size` bytes (at most `TRANSFER_MAX_BYTES`) from `src_va` to `dst_va`; the
    /// ranges must not overlap.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a zero size; [`Error::Packet`] for a size above the limit,
    /// overlapping or wrapping ranges.
    pub fn copy(&mut self, src_va: u64, dst_va: u64, size: u32) -> Result<&mut Self> {
        if size == 0 {
            return Err(Error::Invalid("COPY of zero bytes"));
        }
        self.push(packet::Copy { header: header_of::<packet::Copy>(), size, src_va, dst_va })
    }

    /// `BIND_SLOT`: binds `slot` of the buffer's resource table to `size` bytes at `va` (both
    /// 0: unbind). A split buffer leaves them 0 and names the packet in its patch list
    /// ([`crate::SplitBuffer`]); the module writes the allocation's address there.
    ///
    /// # Errors
    /// [`Error::Packet`] for a slot past `BIND_SLOTS_MAX` or one of `va`, `size` zero.
    pub fn bind_slot(&mut self, slot: u32, va: u64, size: u64) -> Result<&mut Self> {
        self.push(packet::BindSlot { header: header_of::<packet::BindSlot>(), slot, va, size })
    }

    /// `SLOT_COPY`: `size` bytes from `src_offset` in the range bound to `src_slot` to
    /// `dst_offset` in the range bound to `dst_slot`.
    ///
    /// # Errors
    /// [`Error::Packet`] for a slot past `BIND_SLOTS_MAX`, a size above the limit or a wrapping
    /// offset.
    pub fn slot_copy(
        &mut self,
        src_slot: u32,
        src_offset: u64,
        dst_slot: u32,
        dst_offset: u64,
        size: u32,
    ) -> Result<&mut Self> {
        self.push(packet::SlotCopy {
            header: header_of::<packet::SlotCopy>(),
            size,
            src_slot,
            dst_slot,
            src_offset,
            dst_offset,
        })
    }

    /// `FILL`: `size` bytes (a multiple of 4, at most `TRANSFER_MAX_BYTES`) at `dst_va` with
    /// the 32-bit pattern `value`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a zero size; [`Error::Packet`] for a size not a multiple of 4 or
    /// above the limit, or a wrapping range.
    pub fn fill(&mut self, dst_va: u64, size: u32, value: u32) -> Result<&mut Self> {
        if size == 0 {
            return Err(Error::Invalid("FILL of zero bytes"));
        }
        self.push(packet::Fill { header: header_of::<packet::Fill>(), size, dst_va, value, reserved: 0 })
    }

    /// `COMPUTE`: `dst[i] = op(a[i], b[i], scalar)` over `count` 32-bit elements (at most
    /// `COMPUTE_MAX_ELEMENTS`); `scalar` is `f32` bits for float operations.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a zero count or misaligned VAs; [`Error::Packet`] for a count
    /// above the limit or wrapping ranges.
    pub fn compute(
        &mut self,
        op: ComputeOp,
        count: u32,
        scalar: u32,
        a_va: u64,
        b_va: u64,
        dst_va: u64,
    ) -> Result<&mut Self> {
        if count == 0 {
            return Err(Error::Invalid("COMPUTE of zero elements"));
        }
        for va in [a_va, b_va, dst_va] {
            aligned(va, 4, "COMPUTE VA not 4-byte aligned")?;
        }
        self.push(packet::Compute {
            header: header_of::<packet::Compute>(),
            op: op as u32,
            count,
            scalar,
            a_va,
            b_va,
            dst_va,
        })
    }

    /// `JUMP`: continue in the `size_bytes`-byte buffer at `va`; nothing after it runs.
    ///
    /// # Errors
    /// [`Error::Packet`] for a misaligned VA, a size not a multiple of 4 or above
    /// `CMDBUF_MAX_BYTES`, or a wrapping range.
    pub fn jump(&mut self, va: u64, size_bytes: u32) -> Result<&mut Self> {
        self.push(packet::Jump { header: header_of::<packet::Jump>(), size_bytes, va })
    }

    /// `NOP` of `dwords` dwords, header included (payload zero).
    ///
    /// # Errors
    /// [`Error::Invalid`] for zero dwords; [`Error::CommandBufferTooLarge`].
    pub fn nop(&mut self, dwords: u16) -> Result<&mut Self> {
        if dwords == 0 {
            return Err(Error::Invalid("NOP of zero dwords"));
        }
        let bytes = usize::from(dwords) * 4;
        if self.bytes.len() + bytes > CMDBUF_MAX_BYTES as usize {
            return Err(Error::CommandBufferTooLarge {
                bytes: self.bytes.len() + bytes,
                max: CMDBUF_MAX_BYTES as usize,
            });
        }
        self.bytes.extend_from_slice(&packet::header(Opcode::Nop, dwords).to_le_bytes());
        self.bytes.resize(self.bytes.len() + bytes - 4, 0);
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(build: impl FnOnce(&mut CommandBuffer) -> Result<&mut CommandBuffer>) -> Packet {
        let mut cb = CommandBuffer::new();
        build(&mut cb).unwrap();
        let packets = decode(cb.as_bytes()).unwrap();
        assert_eq!(packets.len(), 1);
        packets[0]
    }

    #[test]
    fn every_abi_packet_is_its_own_bytes_and_fills_its_opcode_length() {
        macro_rules! check {
            ($($name:ident),*) => {$(
                let pattern: Vec<u8> = (0..size_of::<packet::$name>()).map(|i| i as u8 + 1).collect();
                let p = packet::$name::from_le_bytes(&pattern).unwrap();
                assert_eq!(sys::packet_bytes(&p), &pattern[..], stringify!($name));
                assert_eq!(Some(pattern.len() as u32 / 4), <packet::$name as Wire>::OPCODE.dwords());
            )*};
        }
        belfry_abi::for_each_packet!(check);
    }

    #[test]
    fn fence_signal_has_the_exact_byte_layout_of_packet_rs() {
        let mut cb = CommandBuffer::new();
        cb.fence_signal(
            0x1122_3344_5566_7788,
            0x0102_0304_0506_0708,
            Some(LogSlot { index: 7, handle: FenceHandle::new(0xaa) }),
        )
        .unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(&[0x10, 0x00, 0x08, 0x00]); // opcode 0x10, reserved 0, 8 dwords
        want.extend_from_slice(&7u32.to_le_bytes());
        want.extend_from_slice(&[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        want.extend_from_slice(&[0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01]);
        want.extend_from_slice(&0xaau64.to_le_bytes());
        assert_eq!(cb.as_bytes(), &want[..]);
    }

    #[test]
    fn every_builder_decodes_to_the_abi_struct_it_built() {
        use packet::*;
        let h = |op: Opcode| header(op, op.dwords().unwrap() as u16);
        assert_eq!(
            one(|c| c.write32(0x1000, 5)),
            Packet::WriteData32(WriteData32 { header: h(Opcode::WriteData32), value: 5, va: 0x1000 })
        );
        assert_eq!(
            one(|c| c.write64(0x1008, u64::MAX)),
            Packet::WriteData64(WriteData64 {
                header: h(Opcode::WriteData64),
                reserved: 0,
                va: 0x1008,
                value: u64::MAX
            })
        );
        assert_eq!(
            one(|c| c.timestamp(0x2000)),
            Packet::WriteTimestamp(WriteTimestamp { header: h(Opcode::WriteTimestamp), reserved: 0, va: 0x2000 })
        );
        assert_eq!(
            one(|c| c.fence_signal(0x3000, 9, None)),
            Packet::FenceSignal(FenceSignal {
                header: h(Opcode::FenceSignal),
                log_entry: NO_LOG,
                fence_va: 0x3000,
                value: 9,
                log_handle: 0
            })
        );
        assert_eq!(
            one(|c| c.fence_wait(0x3000, 10, Some(LogSlot { index: 3, handle: FenceHandle::new(44) }))),
            Packet::FenceWait(FenceWait {
                header: h(Opcode::FenceWait),
                log_entry: 3,
                fence_va: 0x3000,
                value: 10,
                log_handle: 44
            })
        );
        assert_eq!(
            one(|c| c.monitored_signal(0x4000, 11)),
            Packet::MonitoredFenceSignal(MonitoredFenceSignal {
                header: h(Opcode::MonitoredFenceSignal),
                reserved: 0,
                fence_va: 0x4000,
                value: 11
            })
        );
        assert_eq!(one(|c| c.notify(77)), Packet::Notify(Notify { header: h(Opcode::Notify), reserved: 0, token: 77 }));
        assert_eq!(
            one(|c| c.copy(0x1_0000, 0x2_0000, 0x1000)),
            Packet::Copy(Copy { header: h(Opcode::Copy), size: 0x1000, src_va: 0x1_0000, dst_va: 0x2_0000 })
        );
        assert_eq!(
            one(|c| c.fill(0x2_0000, 64, 0xdead_beef)),
            Packet::Fill(Fill { header: h(Opcode::Fill), size: 64, dst_va: 0x2_0000, value: 0xdead_beef, reserved: 0 })
        );
        assert_eq!(
            one(|c| c.compute(ComputeOp::SaxpyF32, 16, 2.0f32.to_bits(), 0x100, 0x200, 0x300)),
            Packet::Compute(Compute {
                header: h(Opcode::Compute),
                op: 3,
                count: 16,
                scalar: 2.0f32.to_bits(),
                a_va: 0x100,
                b_va: 0x200,
                dst_va: 0x300
            })
        );
        assert_eq!(
            one(|c| c.jump(0x5000, 256)),
            Packet::Jump(Jump { header: h(Opcode::Jump), size_bytes: 256, va: 0x5000 })
        );
        assert_eq!(one(|c| c.nop(3)), Packet::Nop { dwords: 3 });
    }

    #[test]
    fn packets_chain_in_order() {
        let mut cb = CommandBuffer::new();
        cb.nop(1).unwrap().fill(0x1000, 8, 1).unwrap().write32(0x1000, 2).unwrap();
        let kinds: Vec<_> = decode(cb.as_bytes()).unwrap().iter().map(core::mem::discriminant).collect();
        assert_eq!(kinds.len(), 3);
        assert_eq!(cb.len(), 4 + 24 + 16);
        assert_eq!(kinds[0], core::mem::discriminant(&Packet::Nop { dwords: 1 }));
    }

    #[test]
    fn arguments_the_device_would_fault_on_are_refused() {
        let mut cb = CommandBuffer::new();
        assert!(cb.write32(0x1002, 0).is_err());
        assert!(cb.write64(0x1004, 0).is_err());
        assert!(cb.fence_signal(0x1004, 1, None).is_err());
        assert!(cb.copy(0x1000, 0x1800, 0x1000).is_err(), "overlap");
        assert!(cb.copy(0x1000, 0x2000, 0).is_err());
        assert!(cb.copy(u64::MAX - 2, 0, 4).is_err(), "wraps");
        assert!(cb.fill(0x1000, 6, 0).is_err());
        assert!(cb.fill(0x1000, packet::TRANSFER_MAX_BYTES + 4, 0).is_err());
        assert!(cb.compute(ComputeOp::AddU32, 0, 0, 0, 0, 0).is_err());
        assert!(cb.compute(ComputeOp::AddU32, packet::COMPUTE_MAX_ELEMENTS + 1, 0, 0, 0, 0).is_err());
        assert!(cb.jump(0x1000, 6).is_err());
        assert!(cb.nop(0).is_err());
        assert!(cb.is_empty());
    }

    #[test]
    fn the_decoder_rejects_what_the_device_faults_on() {
        let mut cb = CommandBuffer::new();
        cb.write32(0x1000, 1).unwrap();
        let mut bytes = cb.as_bytes().to_vec();
        let refused = |offset, reason| Err(DecodeError::Refused { offset, reason });
        assert_eq!(decode(&bytes[..12]), refused(0, PacketError::Truncated));
        assert_eq!(decode(&bytes[..6]), Err(DecodeError::Unaligned(6)));
        bytes[1] = 1; // reserved header bit
        assert_eq!(decode(&bytes), refused(0, PacketError::ReservedHeader));
        bytes[1] = 0;
        bytes[0] = 0x7f;
        assert_eq!(decode(&bytes), refused(0, PacketError::UnknownOpcode(0x7f)));
        // Fields too: a WRITE_DATA32 to a misaligned VA, after a good NOP.
        let mut cb = CommandBuffer::new();
        cb.nop(1).unwrap().write32(0x1000, 1).unwrap();
        let mut bytes = cb.as_bytes().to_vec();
        bytes[12] = 2; // va low byte: 0x1002
        assert_eq!(decode(&bytes), refused(4, PacketError::Misaligned));
    }

    #[test]
    fn the_builder_refuses_what_the_abi_refuses_with_its_reason() {
        let mut cb = CommandBuffer::new();
        let reason = |r: Result<&mut CommandBuffer>| match r {
            Err(Error::Packet { opcode, reason }) => Some((opcode, reason)),
            _ => None,
        };
        assert_eq!(reason(cb.write64(0x1004, 0)), Some((Opcode::WriteData64, PacketError::Misaligned)));
        assert_eq!(reason(cb.copy(0x1000, 0x1800, 0x1000)), Some((Opcode::Copy, PacketError::Overlap)));
        assert_eq!(reason(cb.fill(u64::MAX - 3, 8, 0)), Some((Opcode::Fill, PacketError::AddressOverflow)));
        assert_eq!(reason(cb.jump(0x1000, CMDBUF_MAX_BYTES + 4)), Some((Opcode::Jump, PacketError::BadSize)));
        assert!(cb.is_empty());
    }

    #[test]
    fn buffers_stop_at_the_ring_entry_limit() {
        let mut cb = CommandBuffer::new();
        for _ in 0..(CMDBUF_MAX_BYTES / 0x4_0000) {
            cb.nop(0xffff).unwrap();
        }
        assert!(matches!(cb.nop(0xffff), Err(Error::CommandBufferTooLarge { .. })));
    }
}

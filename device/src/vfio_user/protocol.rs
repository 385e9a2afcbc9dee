//! vfio-user wire format: message header, command numbers and the fixed parts of each payload.
//!
//! Everything is little-endian and packed as in the vfio-user specification. Payload structs
//! that the Linux VFIO uapi already defines (`vfio_region_info`, `vfio_irq_info`,
//! `vfio_irq_set`) are taken from `vfio-bindings`; the vfio-user-only ones are declared here.

use std::mem::size_of;

use vfio_bindings::bindings::vfio::{vfio_irq_info, vfio_region_info};
use vm_memory::ByteValued;

/// Size of the message header.
pub const HEADER_SIZE: usize = size_of::<Header>();
/// Largest data transfer (region read/write payload) we accept, as advertised in VERSION.
pub const MAX_DATA_XFER: u32 = 1 << 20;
/// Largest message we accept: a data transfer plus its fixed part.
pub const MAX_MESSAGE_SIZE: u32 = MAX_DATA_XFER + 4096;
/// Most file descriptors we accept with one message.
/// (QEMU refuses a server that advertises more than 16.)
pub const MAX_MSG_FDS: usize = 16;
/// Most DMA windows a client may map at once: the specification's default, since a guest
/// with an IOMMU maps page by page (each window is a view into its file's one mapping, so the
/// count costs no kernel mappings).
pub const MAX_DMA_MAPS: usize = 65535;
/// The protocol version we speak.
pub const VERSION_MAJOR: u16 = 0;
/// The protocol minor version we speak.
pub const VERSION_MINOR: u16 = 1;

/// Header flag: message type mask (0 = command, 1 = reply).
pub const FLAG_TYPE_MASK: u32 = 0xf;
/// Header type: a command.
pub const FLAG_TYPE_COMMAND: u32 = 0;
/// Header type: a reply.
pub const FLAG_TYPE_REPLY: u32 = 1;
/// Header flag: the sender wants no reply (posted write).
pub const FLAG_NO_REPLY: u32 = 1 << 4;
/// Header flag: the reply carries an error in `error`.
pub const FLAG_ERROR: u32 = 1 << 5;

/// DMA_MAP flag: the device may read.
pub const DMA_FLAG_READ: u32 = 1 << 0;
/// DMA_MAP flag: the device may write.
pub const DMA_FLAG_WRITE: u32 = 1 << 1;
/// DMA_UNMAP flag: unmap everything (address and size zero), as the kernel's
/// `VFIO_DMA_UNMAP_FLAG_ALL`; QEMU sends it when an IOMMU's whole address space goes.
pub const DMA_UNMAP_FLAG_ALL: u32 = 1 << 1;

/// Every message starts with this header.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Chosen by the sender of a command; echoed in the reply.
    pub message_id: u16,
    /// [`Command`] number.
    pub command: u16,
    /// Size of the whole message, header included.
    pub message_size: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// errno of a failed command, in replies with [`FLAG_ERROR`].
    pub error: u32,
}
const _: () = assert!(size_of::<Header>() == 16);
// SAFETY: plain old data, no padding, any bit pattern is valid.
unsafe impl ByteValued for Header {}

/// vfio-user commands.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Version and capability negotiation.
    Version = 1,
    /// Map guest memory for DMA (with an fd).
    DmaMap = 2,
    /// Unmap guest memory.
    DmaUnmap = 3,
    /// Device info.
    DeviceGetInfo = 4,
    /// Region info.
    DeviceGetRegionInfo = 5,
    /// Region I/O fds (ioeventfds).
    DeviceGetRegionIoFds = 6,
    /// IRQ info.
    DeviceGetIrqInfo = 7,
    /// Configure interrupts.
    DeviceSetIrqs = 8,
    /// Read a region.
    RegionRead = 9,
    /// Write a region.
    RegionWrite = 10,
    /// Server reads client memory.
    DmaRead = 11,
    /// Server writes client memory.
    DmaWrite = 12,
    /// Reset the device.
    DeviceReset = 13,
    /// Dirty page tracking (deprecated).
    DirtyPages = 14,
    /// Several posted writes in one message.
    RegionWriteMultiple = 15,
    /// Device features (migration, dirty tracking).
    DeviceFeature = 16,
    /// Migration data read.
    MigDataRead = 17,
    /// Migration data write.
    MigDataWrite = 18,
}

impl Command {
    /// Decodes a command number.
    pub fn from_raw(raw: u16) -> Option<Self> {
        use Command::*;
        Some(match raw {
            1 => Version,
            2 => DmaMap,
            3 => DmaUnmap,
            4 => DeviceGetInfo,
            5 => DeviceGetRegionInfo,
            6 => DeviceGetRegionIoFds,
            7 => DeviceGetIrqInfo,
            8 => DeviceSetIrqs,
            9 => RegionRead,
            10 => RegionWrite,
            11 => DmaRead,
            12 => DmaWrite,
            13 => DeviceReset,
            14 => DirtyPages,
            15 => RegionWriteMultiple,
            16 => DeviceFeature,
            17 => MigDataRead,
            18 => MigDataWrite,
            _ => return None,
        })
    }

    /// Name as in the specification, for traces.
    pub fn name(self) -> &'static str {
        use Command::*;
        match self {
            Version => "VERSION",
            DmaMap => "DMA_MAP",
            DmaUnmap => "DMA_UNMAP",
            DeviceGetInfo => "DEVICE_GET_INFO",
            DeviceGetRegionInfo => "DEVICE_GET_REGION_INFO",
            DeviceGetRegionIoFds => "DEVICE_GET_REGION_IO_FDS",
            DeviceGetIrqInfo => "DEVICE_GET_IRQ_INFO",
            DeviceSetIrqs => "DEVICE_SET_IRQS",
            RegionRead => "REGION_READ",
            RegionWrite => "REGION_WRITE",
            DmaRead => "DMA_READ",
            DmaWrite => "DMA_WRITE",
            DeviceReset => "DEVICE_RESET",
            DirtyPages => "DIRTY_PAGES",
            RegionWriteMultiple => "REGION_WRITE_MULTIPLE",
            DeviceFeature => "DEVICE_FEATURE",
            MigDataRead => "MIG_DATA_READ",
            MigDataWrite => "MIG_DATA_WRITE",
        }
    }
}

/// Fixed part of VERSION (followed by a NUL-terminated JSON capabilities string).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VersionPayload {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
}
// SAFETY: plain old data, no padding.
unsafe impl ByteValued for VersionPayload {}

/// DMA_MAP payload (the fd travels as ancillary data).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DmaMapPayload {
    /// Size of this struct.
    pub argsz: u32,
    /// `DMA_FLAG_*`.
    pub flags: u32,
    /// Offset of the mapping in the fd.
    pub offset: u64,
    /// Guest (IO virtual) address.
    pub address: u64,
    /// Length in bytes.
    pub size: u64,
}
const _: () = assert!(size_of::<DmaMapPayload>() == 32);
// SAFETY: plain old data, no padding.
unsafe impl ByteValued for DmaMapPayload {}

/// DMA_UNMAP payload; the reply echoes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DmaUnmapPayload {
    /// Size of this struct (plus a dirty bitmap, which we do not support).
    pub argsz: u32,
    /// Flags (dirty-bitmap requests; unsupported, must be 0).
    pub flags: u32,
    /// Guest address of a mapped region.
    pub address: u64,
    /// Its size.
    pub size: u64,
}
const _: () = assert!(size_of::<DmaUnmapPayload>() == 24);
// SAFETY: plain old data, no padding.
unsafe impl ByteValued for DmaUnmapPayload {}

/// DEVICE_GET_INFO payload and reply.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceInfoPayload {
    /// Size of this struct.
    pub argsz: u32,
    /// `VFIO_DEVICE_FLAGS_*`.
    pub flags: u32,
    /// Number of regions.
    pub num_regions: u32,
    /// Number of IRQ indexes.
    pub num_irqs: u32,
}
const _: () = assert!(size_of::<DeviceInfoPayload>() == 16);
// SAFETY: plain old data, no padding.
unsafe impl ByteValued for DeviceInfoPayload {}

/// REGION_READ / REGION_WRITE fixed part (followed by data for writes and read replies).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RegionAccessPayload {
    /// Offset in the region.
    pub offset: u64,
    /// Region index.
    pub region: u32,
    /// Bytes to transfer.
    pub count: u32,
}
const _: () = assert!(size_of::<RegionAccessPayload>() == 16);
// SAFETY: plain old data, no padding.
unsafe impl ByteValued for RegionAccessPayload {}

/// DEVICE_SET_IRQS fixed part (`vfio_irq_set` without its flexible data array, which
/// `vfio-bindings` declares as a non-`Copy` field); bools follow it, eventfds travel as fds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IrqSetPayload {
    /// Size of this struct plus data.
    pub argsz: u32,
    /// `VFIO_IRQ_SET_*`.
    pub flags: u32,
    /// IRQ index.
    pub index: u32,
    /// First vector.
    pub start: u32,
    /// Number of vectors.
    pub count: u32,
}
// SAFETY: plain old data, no padding.
unsafe impl ByteValued for IrqSetPayload {}

/// Size of `vfio_region_info` on the wire.
pub const REGION_INFO_SIZE: usize = size_of::<vfio_region_info>();
/// Size of `vfio_irq_info` on the wire.
pub const IRQ_INFO_SIZE: usize = size_of::<vfio_irq_info>();
/// Size of the fixed part of `vfio_irq_set` on the wire.
pub const IRQ_SET_SIZE: usize = size_of::<IrqSetPayload>();
const _: () = assert!(REGION_INFO_SIZE == 32 && IRQ_INFO_SIZE == 16 && IRQ_SET_SIZE == 20);

/// Reads a `T` from the start of `bytes`, if long enough.
pub fn read_struct<T: ByteValued + Default>(bytes: &[u8]) -> Option<T> {
    let mut value = T::default();
    let n = size_of::<T>();
    value.as_mut_slice().copy_from_slice(bytes.get(..n)?);
    Some(value)
}

/// Reads a vfio uapi struct (from `vfio-bindings`, which are not `ByteValued`) from `bytes`.
pub fn read_uapi<T: Copy + Default>(bytes: &[u8]) -> Option<T> {
    let n = size_of::<T>();
    let src = bytes.get(..n)?;
    let mut value = T::default();
    // SAFETY: T is one of the bindgen-generated `#[repr(C)]` vfio uapi structs made only of
    // integers (callers use vfio_region_info, vfio_irq_info, vfio_irq_set), so any bit
    // pattern is valid; `src` holds exactly size_of::<T>() bytes and does not overlap `value`.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (&mut value as *mut T).cast::<u8>(), n) };
    Some(value)
}

/// The bytes of a vfio uapi struct (from `vfio-bindings`), for replies.
pub fn uapi_bytes<T: Copy>(value: &T) -> Vec<u8> {
    let n = size_of::<T>();
    let mut out = vec![0u8; n];
    // SAFETY: T is a bindgen-generated `#[repr(C)]` vfio uapi struct of integers without
    // padding (asserted above for the ones we use); `out` holds exactly n bytes.
    unsafe { std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), out.as_mut_ptr(), n) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_number_round_trips() {
        for raw in 0..=20u16 {
            if let Some(cmd) = Command::from_raw(raw) {
                assert_eq!(cmd as u16, raw);
                assert!(!cmd.name().is_empty());
            } else {
                assert!(raw == 0 || raw > 18);
            }
        }
    }

    #[test]
    fn uapi_structs_round_trip_through_bytes() {
        let info = vfio_region_info { argsz: 32, flags: 3, index: 7, cap_offset: 0, size: 4096, offset: 0 };
        let bytes = uapi_bytes(&info);
        let back: vfio_region_info = read_uapi(&bytes).unwrap();
        assert_eq!((back.index, back.size, back.flags), (7, 4096, 3));
        assert!(read_uapi::<vfio_region_info>(&bytes[..31]).is_none());
    }
}

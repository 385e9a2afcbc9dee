//! The ioctl encoding every part of the userspace interface shares (`uapi`, `uapi_sync`,
//! `vidmem`): the type byte, `_IOWR` numbers and the argument that is just a handle. A module of
//! its own so that the parts import it and `uapi` re-exports it, with no import between parts
//! in both directions.

use core::mem::size_of;

/// ioctl type byte.
pub const IOCTL_TYPE: u32 = b'B' as u32;

/// `_IOWR(IOCTL_TYPE, nr, size)`.
pub const fn iowr(nr: u32, size: usize) -> u32 {
    (3 << 30) | (((size as u32) & 0x3fff) << 16) | (IOCTL_TYPE << 8) | nr
}

/// An ioctl argument that is just a handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handle {
    /// The handle.
    pub handle: u32,
    /// Zero.
    pub pad: u32,
}
const _: () = assert!(size_of::<Handle>() == 8);

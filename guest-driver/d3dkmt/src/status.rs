//! `NTSTATUS` values and how the library's errors map onto them.

use belfry_umd::Error;

use crate::types::NTSTATUS;

/// The operation succeeded.
pub const STATUS_SUCCESS: NTSTATUS = 0;
/// A wait's time ran out.
pub const STATUS_TIMEOUT: NTSTATUS = 0x0000_0102;
/// The operation failed for a reason no other code names.
pub const STATUS_UNSUCCESSFUL: NTSTATUS = 0xC000_0001_u32 as i32;
/// A handle names no object of the kind the call takes.
pub const STATUS_INVALID_HANDLE: NTSTATUS = 0xC000_0008_u32 as i32;
/// An argument is invalid.
pub const STATUS_INVALID_PARAMETER: NTSTATUS = 0xC000_000D_u32 as i32;
/// Memory could not be allocated.
pub const STATUS_NO_MEMORY: NTSTATUS = 0xC000_0017_u32 as i32;
/// The operation is not permitted on this object.
pub const STATUS_ACCESS_DENIED: NTSTATUS = 0xC000_0022_u32 as i32;
/// An output array is too small.
pub const STATUS_BUFFER_TOO_SMALL: NTSTATUS = 0xC000_0023_u32 as i32;
/// A quota or a device limit is exhausted.
pub const STATUS_INSUFFICIENT_RESOURCES: NTSTATUS = 0xC000_009A_u32 as i32;
/// Belfry has no mechanism for the request; nothing was changed.
pub const STATUS_NOT_SUPPORTED: NTSTATUS = 0xC000_00BB_u32 as i32;
/// The device is gone, or the work a wait depends on was lost with its context.
pub const STATUS_DEVICE_REMOVED: NTSTATUS = 0xC000_02B6_u32 as i32;

/// The `NTSTATUS` of a failed library call.
pub fn of_error(error: &Error) -> NTSTATUS {
    match error {
        Error::Invalid(_) | Error::FenceValueBackwards { .. } | Error::ForeignFence { .. } => STATUS_INVALID_PARAMETER,
        Error::ContextLost { .. } | Error::Lost { .. } | Error::QueueGone | Error::FenceGone { .. } => {
            STATUS_DEVICE_REMOVED
        }
        Error::Timeout { .. } => STATUS_TIMEOUT,
        _ => match error.errno() {
            Some(libc::ETIMEDOUT) => STATUS_TIMEOUT,
            Some(libc::EINVAL | libc::ERANGE | libc::EXDEV) => STATUS_INVALID_PARAMETER,
            Some(libc::ENOMEM) => STATUS_NO_MEMORY,
            Some(libc::ENOSPC | libc::EMFILE | libc::ENFILE) => STATUS_INSUFFICIENT_RESOURCES,
            Some(libc::EPERM | libc::EACCES) => STATUS_ACCESS_DENIED,
            Some(libc::EOPNOTSUPP) => STATUS_NOT_SUPPORTED,
            Some(libc::ENODEV | libc::ENOENT | libc::ECANCELED | libc::ENXIO) => STATUS_DEVICE_REMOVED,
            Some(libc::EBADF) => STATUS_INVALID_HANDLE,
            _ => STATUS_UNSUCCESSFUL,
        },
    }
}

/// `STATUS_SUCCESS`, or the status of the error.
pub fn of<T>(result: belfry_umd::Result<T>) -> NTSTATUS {
    match result {
        Ok(_) => STATUS_SUCCESS,
        Err(e) => of_error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_the_documented_ones_and_errors_are_negative() {
        assert_eq!(STATUS_NOT_SUPPORTED as u32, 0xC00000BB);
        assert_eq!(STATUS_INVALID_PARAMETER as u32, 0xC000000D);
        for s in [STATUS_INVALID_HANDLE, STATUS_NOT_SUPPORTED, STATUS_DEVICE_REMOVED, STATUS_UNSUCCESSFUL] {
            assert!(s < 0, "NT_SUCCESS is false for {s:#x}");
        }
        const { assert!(STATUS_TIMEOUT >= 0, "STATUS_TIMEOUT is a success code (NT_SUCCESS)") };
    }

    #[test]
    fn header_defines_the_same_values() {
        let header = include_str!("../include/belfry_d3dkmt.h");
        for (name, value) in [
            ("STATUS_SUCCESS", STATUS_SUCCESS),
            ("STATUS_TIMEOUT", STATUS_TIMEOUT),
            ("STATUS_UNSUCCESSFUL", STATUS_UNSUCCESSFUL),
            ("STATUS_INVALID_HANDLE", STATUS_INVALID_HANDLE),
            ("STATUS_INVALID_PARAMETER", STATUS_INVALID_PARAMETER),
            ("STATUS_NO_MEMORY", STATUS_NO_MEMORY),
            ("STATUS_ACCESS_DENIED", STATUS_ACCESS_DENIED),
            ("STATUS_BUFFER_TOO_SMALL", STATUS_BUFFER_TOO_SMALL),
            ("STATUS_INSUFFICIENT_RESOURCES", STATUS_INSUFFICIENT_RESOURCES),
            ("STATUS_NOT_SUPPORTED", STATUS_NOT_SUPPORTED),
            ("STATUS_DEVICE_REMOVED", STATUS_DEVICE_REMOVED),
        ] {
            let line = format!("#define {name} ((NTSTATUS)0x{:08X})", value as u32);
            assert!(header.lines().any(|l| l == line), "the header lacks '{line}'");
        }
    }

    #[test]
    fn errnos_map_to_their_meanings() {
        let ioctl = |errno| Error::Ioctl { name: "X", error: std::io::Error::from_raw_os_error(errno) };
        assert_eq!(of_error(&ioctl(libc::EOPNOTSUPP)), STATUS_NOT_SUPPORTED);
        assert_eq!(of_error(&ioctl(libc::ETIMEDOUT)), STATUS_TIMEOUT);
        assert_eq!(of_error(&ioctl(libc::EINVAL)), STATUS_INVALID_PARAMETER);
        assert_eq!(of_error(&ioctl(libc::ECANCELED)), STATUS_DEVICE_REMOVED);
    }
}

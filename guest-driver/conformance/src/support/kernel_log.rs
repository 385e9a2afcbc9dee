//! The guest kernel's log (`klogctl`, as `dmesg` reads it): how many warnings it holds, so a
//! test can check that what it asked for made the kernel warn about nothing.
#![allow(unsafe_code)] // klogctl.

use std::io;

/// `SYSLOG_ACTION_READ_ALL`.
const READ_ALL: libc::c_int = 3;
/// `SYSLOG_ACTION_SIZE_BUFFER`.
const SIZE_BUFFER: libc::c_int = 10;

/// The kernel log ring's contents.
///
/// # Errors
/// `klogctl`'s errno (reading it needs `CAP_SYSLOG` or a permissive `dmesg_restrict`).
pub(crate) fn read() -> Result<String, String> {
    // SAFETY: SIZE_BUFFER ignores the buffer arguments.
    let size = unsafe { libc::klogctl(SIZE_BUFFER, core::ptr::null_mut(), 0) };
    if size <= 0 {
        return Err(format!("klogctl(SIZE_BUFFER): {}", io::Error::last_os_error()));
    }
    let mut buf = vec![0u8; size as usize]; // CAST: size > 0.
                                            // SAFETY: `buf` has room for `size` bytes, which klogctl fills at most.
    let n = unsafe { libc::klogctl(READ_ALL, buf.as_mut_ptr().cast(), size) };
    if n < 0 {
        return Err(format!("klogctl(READ_ALL): {}", io::Error::last_os_error()));
    }
    buf.truncate(n as usize); // CAST: n ≥ 0.
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The lines of the log that report a kernel warning or bug (`WARNING:`, `BUG:`), oldest
/// first.
///
/// # Errors
/// As [`read`].
pub(crate) fn warnings() -> Result<Vec<String>, String> {
    Ok(read()?.lines().filter(|l| l.contains("WARNING:") || l.contains("BUG:")).map(str::to_string).collect())
}

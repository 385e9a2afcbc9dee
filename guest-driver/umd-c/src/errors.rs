//! Error codes of the C API (0 or a negative errno) and the calling thread's last error
//! message ([`belfry_last_error`]).

use core::ffi::{c_char, c_int};
use std::cell::RefCell;
use std::ffi::CString;

use belfry_umd::Error;

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// The message of the calling thread's last failed call (`""` if none failed yet): valid
/// until this thread's next failing call. Never NULL.
#[no_mangle]
pub extern "C" fn belfry_last_error() -> *const c_char {
    LAST.with(|m| m.borrow().as_ptr())
}

/// Records `message` as the last error and returns `-errno`.
pub(crate) fn code(errno: i32, message: &str) -> c_int {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|m| *m.borrow_mut() = text);
    -errno
}

/// `-EINVAL` for a bad argument named by `what`.
pub(crate) fn invalid(what: &str) -> c_int {
    code(libc::EINVAL, &format!("Invalid argument: {what}"))
}

/// The code of a library error: its errno, or the errno that says the same.
pub(crate) fn fail(e: &Error) -> c_int {
    code(errno_of(e), &e.to_string())
}

/// The errno a library error stands for.
fn errno_of(e: &Error) -> i32 {
    if let Some(errno) = e.errno() {
        return errno;
    }
    match e {
        Error::Timeout { .. } => libc::ETIMEDOUT,
        Error::Lost { .. } | Error::ContextLost { .. } => libc::ECANCELED,
        Error::FenceGone { .. } => libc::ENOENT,
        Error::ForeignFence { .. } => libc::EXDEV,
        // As the CPU path's refusal of a backwards signal.
        Error::FenceValueBackwards { .. } => libc::EINVAL,
        Error::RetryLimit { .. } => libc::EAGAIN,
        Error::UapiVersion { .. } => libc::EPROTO,
        Error::QueueGone | Error::UnknownStatus(_) => libc::EIO,
        _ => libc::EINVAL,
    }
}

/// Builders of return codes.
pub(crate) struct Code;

impl Code {
    /// 0 for `Ok`, else the error's code.
    pub(crate) fn of(r: belfry_umd::Result<()>) -> c_int {
        r.map_or_else(|e| fail(&e), |()| 0)
    }

    /// 0 if the result was stored, else `-EINVAL` for the NULL out-pointer `what`.
    pub(crate) fn stored(stored: bool, what: &str) -> c_int {
        if stored {
            0
        } else {
            invalid(what)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_fence_is_exdev() {
        assert_eq!(fail(&Error::ForeignFence { handle: 3 }), -libc::EXDEV);
        // SAFETY: `belfry_last_error` never returns NULL and the text lives until the next failure.
        let text = unsafe { std::ffi::CStr::from_ptr(belfry_last_error()) }.to_string_lossy().into_owned();
        assert!(text.contains("Fence 3 belongs to another context"), "{text}");
    }

    #[test]
    fn errors_become_negative_errnos_with_a_message() {
        let e = Error::Ioctl { name: "WAIT_FENCES", error: std::io::Error::from_raw_os_error(libc::ETIMEDOUT) };
        assert_eq!(fail(&e), -libc::ETIMEDOUT);
        // SAFETY: the pointer is valid until this thread's next failing call.
        let text = unsafe { core::ffi::CStr::from_ptr(belfry_last_error()) };
        assert_eq!(text.to_str().unwrap(), "ioctl WAIT_FENCES failed: ETIMEDOUT (Connection timed out)");
        assert_eq!(fail(&Error::ContextLost { value: 3 }), -libc::ECANCELED);
        assert_eq!(fail(&Error::FenceValueBackwards { handle: 1, value: 3, floor: 5 }), -libc::EINVAL);
        assert_eq!(Code::of(Err(Error::Invalid("x"))), -libc::EINVAL);
        assert_eq!(Code::of(Ok(())), 0);
    }
}

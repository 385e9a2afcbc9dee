//! Errno names and texts for error messages: `ETIMEDOUT (Connection timed out)`, so an
//! [`crate::Error::Ioctl`] says why it failed without a reader looking the number up.

use std::io;

/// The symbolic name of `errno` (`"ETIMEDOUT"`), for the errnos the module and the system calls
/// the library makes return; `None` for others.
pub fn name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECANCELED => "ECANCELED",
        _ => return None,
    })
}

/// `NAME (text)` for an error carrying an errno (`ETIMEDOUT (Connection timed out)`), `errno N
/// (text)` for one without a known name, and the error's own text for one without an errno.
pub(crate) fn describe(error: &io::Error) -> String {
    let Some(errno) = error.raw_os_error() else {
        return error.to_string();
    };
    // The text without std's " (os error N)" suffix.
    let text = io::Error::from_raw_os_error(errno).to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    match name(errno) {
        Some(name) => format!("{name} ({text})"),
        None => format!("errno {errno} ({text})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_texts_of_errnos() {
        assert_eq!(name(libc::ETIMEDOUT), Some("ETIMEDOUT"));
        assert_eq!(name(libc::ECANCELED), Some("ECANCELED"));
        assert_eq!(name(4095), None);
        assert_eq!(describe(&io::Error::from_raw_os_error(libc::EPERM)), "EPERM (Operation not permitted)");
        assert_eq!(describe(&io::Error::from_raw_os_error(4095)), "errno 4095 (Unknown error 4095)");
        assert_eq!(describe(&io::Error::other("no errno")), "no errno");
    }
}

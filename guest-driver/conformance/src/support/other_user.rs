//! A process of another user: a device node any user may open, and the switch of a forked
//! child to the user `nobody` — for the limits one user's processes share.
#![allow(unsafe_code)] // mknod, set*id.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::TestResult;

/// The user (`nobody`) a child switches to.
pub(crate) const OTHER_USER: libc::uid_t = 65534;

/// A character-device node for `device` that any user may open (mode 0666), in the temporary
/// directory, removed on drop; the device's own node stays as it is.
pub(crate) struct OpenNode {
    /// The node's path.
    pub(crate) path: PathBuf,
}

impl OpenNode {
    /// Makes the node.
    pub(crate) fn new(device: &Path) -> Result<OpenNode, crate::Error> {
        let meta = std::fs::metadata(device)?;
        ensure!(meta.file_type().is_char_device(), "{} is not a character device", device.display());
        let path = std::env::temp_dir().join(format!("belfry-other-user-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let c = CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: `c` is a valid C string; mknod only reads it.
        let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, meta.rdev()) };
        ensure!(r == 0, "mknod {}: {}", path.display(), std::io::Error::last_os_error());
        let node = OpenNode { path };
        std::fs::set_permissions(&node.path, std::fs::Permissions::from_mode(0o666))?;
        Ok(node)
    }
}

impl Drop for OpenNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Makes the calling (forked) process user and group [`OTHER_USER`], with no supplementary
/// groups and no capabilities.
pub(crate) fn become_other_user() -> TestResult {
    // SAFETY: plain syscalls on the calling process's credentials.
    let r = unsafe {
        if libc::setgroups(0, core::ptr::null()) != 0 {
            -1
        } else if libc::setresgid(OTHER_USER, OTHER_USER, OTHER_USER) != 0 {
            -2
        } else {
            libc::setresuid(OTHER_USER, OTHER_USER, OTHER_USER)
        }
    };
    ensure!(r == 0, "switching to uid {OTHER_USER} (step {r}): {}", std::io::Error::last_os_error());
    Ok(())
}

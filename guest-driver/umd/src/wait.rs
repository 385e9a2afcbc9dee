//! Waits on several values at once ([`wait_any`], [`wait_all`]): fence values and queue
//! progress values of one device file in one `WAIT_FENCES` call, like `vkWaitSemaphores`
//! (with and without `VK_SEMAPHORE_WAIT_ANY_BIT`), `drmSyncobjTimelineWait` and
//! `amdgpu_cs_wait_fences`, until an absolute [`Deadline`].
//!
//! ```no_run
//! use std::time::Duration;
//! use belfry_umd::{wait_any, Deadline, Device, FenceKind};
//!
//! # fn main() -> belfry_umd::Result<()> {
//! let dev = Device::open_index(0)?;
//! let ctx = dev.create_context()?;
//! let a = ctx.create_fence(FenceKind::Default, 0, 0)?;
//! let b = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
//! b.signal(2)?;
//! let first = wait_any(&[a.point(1), b.point(2)], Deadline::after(Duration::from_secs(1)))?;
//! assert_eq!(first, 1);
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use belfry_abi::uapi_sync::{self, WaitFenceEntry};

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::handle::DeviceFile;

/// One value to wait for: a fence's ([`crate::Fence::point`]) or a queue's progress
/// ([`crate::Queue::progress_point`]).
#[derive(Clone, Debug)]
pub struct WaitPoint<'a> {
    pub(crate) file: &'a Arc<DeviceFile>,
    pub(crate) entry: WaitFenceEntry,
}

impl WaitPoint<'_> {
    /// The value waited for.
    pub fn value(&self) -> u64 {
        self.entry.value
    }
}

/// Sleeps until any one of `points` is reached, or `deadline`; returns the lowest index of a
/// point found reached.
///
/// # Errors
/// [`Error::Invalid`] for no points, more than [`uapi_sync::MAX_WAIT_FENCES`] (64), or points
/// of different device files; [`Error::Ioctl`] `WAIT_FENCES` with `ETIMEDOUT` once the deadline
/// passed (a signal does not end the wait: it is restarted with the same deadline),
/// `ECANCELED` when a queue-progress point not reached belongs to a context lost to a GPU
/// fault, `EPERM` for an INTRA_GPU fence, `ERANGE` for a 32-bit-mode value outside the window.
pub fn wait_any(points: &[WaitPoint<'_>], deadline: Deadline) -> Result<usize> {
    wait(points, false, deadline)
}

/// Sleeps until every one of `points` is reached, or `deadline`.
///
/// # Errors
/// As [`wait_any`].
pub fn wait_all(points: &[WaitPoint<'_>], deadline: Deadline) -> Result<()> {
    wait(points, true, deadline).map(|_| ())
}

fn wait(points: &[WaitPoint<'_>], all: bool, deadline: Deadline) -> Result<usize> {
    let file = check(points)?;
    let entries: Vec<WaitFenceEntry> = points.iter().map(|p| p.entry).collect();
    file.wait_fences(&entries, all, deadline)
}

/// The one device file of `points`, checked against the module's limits.
fn check<'a>(points: &[WaitPoint<'a>]) -> Result<&'a Arc<DeviceFile>> {
    let first = points.first().ok_or(Error::Invalid("a wait on no points"))?;
    if points.len() > uapi_sync::MAX_WAIT_FENCES as usize {
        return Err(Error::Invalid("more than MAX_WAIT_FENCES wait points"));
    }
    if points.iter().any(|p| !Arc::ptr_eq(p.file, first.file)) {
        return Err(Error::Invalid("wait points of different device files"));
    }
    Ok(first.file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> (tempfile::NamedTempFile, Arc<DeviceFile>) {
        let t = tempfile::NamedTempFile::new().unwrap();
        let f = Arc::new(DeviceFile::open(t.path().to_path_buf()).unwrap());
        (t, f)
    }

    fn point(file: &Arc<DeviceFile>, handle: u32) -> WaitPoint<'_> {
        WaitPoint { file, entry: WaitFenceEntry { handle, flags: 0, value: 1 } }
    }

    #[test]
    fn points_are_checked_before_the_module_sees_them() {
        let ((_ta, a), (_tb, b)) = (file(), file());
        assert!(matches!(wait_any(&[], Deadline::FOREVER), Err(Error::Invalid(_))));
        let many: Vec<_> = (0..=uapi_sync::MAX_WAIT_FENCES).map(|h| point(&a, h)).collect();
        assert!(matches!(wait_all(&many, Deadline::FOREVER), Err(Error::Invalid(_))));
        let mixed = [point(&a, 1), point(&b, 2)];
        assert!(matches!(wait_any(&mixed, Deadline::FOREVER), Err(Error::Invalid(_))));
        // 64 points of one file reach the ioctl (a plain file answers ENOTTY).
        let err = wait_all(&many[..64], Deadline::FOREVER).unwrap_err();
        assert_eq!((err.ioctl_name(), err.errno()), (Some("WAIT_FENCES"), Some(libc::ENOTTY)));
    }
}

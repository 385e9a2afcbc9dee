//! Verbose fence logging (LOG-20, `VERBOSE_LOG`): the device-wide switch a tool turns on to get
//! the optional fence-log entry types, and how the library learns of it.
//!
//! The module tells the library of every change through an eventfd ([`VerboseLogWatch`]): a
//! wait on it sleeps in `poll` until the switch changes, then reads the switch once. What the
//! library last learnt — at [`Device::open`], from [`Device::verbose_logging`], or from a
//! watch's wake-up — decides its submissions: while on, each wait it logs reserves a
//! `WAIT_BEGIN` entry before its `WAIT_UNBLOCKED` one (`crate::logslot`). Submissions read only
//! that, never the module: the user-mode path stays free of system calls. A submission racing a
//! change logs as the library last knew: at worst one wait without its `WAIT_BEGIN` entry, or
//! with an empty one; the mandatory entries never move.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use belfry_abi::uapi;

use crate::deadline::Deadline;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::handle::DeviceFile;
use crate::sys;

/// `VERBOSE_LOG` with `arg`; the library learns the switch it returns.
fn verbose_log(file: &DeviceFile, mut arg: uapi::VerboseLog) -> Result<bool> {
    file.ioctl(sys::VERBOSE_LOG, &mut arg)?;
    let on = arg.enable == 1;
    file.learn_verbose_log(on);
    Ok(on)
}

impl Device {
    /// Whether verbose fence logging is on (`VERBOSE_LOG`); the library's submissions follow
    /// the answer.
    ///
    /// # Errors
    /// [`Error::Ioctl`]: `EOPNOTSUPP` on a device without it (`CAPS.verbose_log`).
    pub fn verbose_logging(&self) -> Result<bool> {
        verbose_log(&self.file, uapi::VerboseLog::default())
    }

    /// Turns verbose fence logging on or off for the whole device (a tracing tool's call);
    /// every watcher is told. Returns the switch after the call.
    ///
    /// # Errors
    /// [`Error::Ioctl`]: `EPERM` for a process without `CAP_PERFMON` or `CAP_SYS_ADMIN`,
    /// `EOPNOTSUPP` on a device without it.
    pub fn set_verbose_logging(&self, on: bool) -> Result<bool> {
        let arg = uapi::VerboseLog { flags: uapi::VERBOSE_LOG_SET, enable: u32::from(on), ..Default::default() };
        verbose_log(&self.file, arg)
    }

    /// Watches the switch: the module signals the returned eventfd at every change, until this
    /// device file is closed (one watch per device file: a second replaces the first). Any
    /// process may watch.
    ///
    /// # Errors
    /// [`Error::Ioctl`]: creating the eventfd, or `VERBOSE_LOG` (`EOPNOTSUPP`).
    pub fn watch_verbose_logging(&self) -> Result<VerboseLogWatch> {
        let fd = sys::eventfd().map_err(|error| Error::Ioctl { name: "eventfd", error })?;
        let arg =
            uapi::VerboseLog { flags: uapi::VERBOSE_LOG_WATCH, eventfd: fd.as_fd().as_raw_fd(), ..Default::default() };
        verbose_log(&self.file, arg)?;
        Ok(VerboseLogWatch { fd, file: self.file.clone() })
    }
}

/// A watch of the verbose-logging switch ([`Device::watch_verbose_logging`]): an eventfd the
/// module signals at each change, usable with `poll`/`epoll` through [`AsFd`].
#[derive(Debug)]
pub struct VerboseLogWatch {
    fd: OwnedFd,
    file: Arc<DeviceFile>,
}

impl VerboseLogWatch {
    /// Sleeps until the switch changes or `deadline` passes; then the switch as the module
    /// says it now (the library's submissions follow it), or `None` when nothing changed.
    /// Changes since the last call count: one that came before this call returns at once.
    ///
    /// # Errors
    /// `poll`'s or `read`'s errno, or `VERBOSE_LOG`'s, as [`Error::Ioctl`].
    pub fn wait_change(&self, deadline: Deadline) -> Result<Option<bool>> {
        let ready = sys::poll_in(self.fd.as_fd(), deadline).map_err(|error| Error::Ioctl { name: "poll", error })?;
        if !ready {
            return Ok(None);
        }
        sys::eventfd_take(self.fd.as_fd()).map_err(|error| Error::Ioctl { name: "read", error })?;
        verbose_log(&self.file, uapi::VerboseLog::default()).map(Some)
    }
}

impl AsFd for VerboseLogWatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

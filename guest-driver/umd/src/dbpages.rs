//! [`DoorbellPages`]: a caller's own CPU mapping of a user-mode queue's doorbell page and
//! doorbell status page, for a caller that rings and reads them itself (the D3DKMT API's
//! `D3DKMTCreateDoorbell` gives their addresses to the program).

use std::os::fd::BorrowedFd;

use crate::error::{Error, Result};
use crate::sys::{self, Access, Mapping};

/// A second mapping of one doorbell's page (read-write: the doorbell value at offset 0) and
/// status page (read-only: the `DoorbellStatus` at offset 0), unmapped on drop. It names the
/// doorbell that was current when it was made: once the module destroys that doorbell (the
/// queue's destruction, or its re-creation after DISCONNECTED_ABORT) a store to the doorbell
/// page raises `SIGBUS` and the status page keeps reading DISCONNECTED_ABORT; the addresses
/// never name anything else while this value lives.
#[derive(Debug)]
pub struct DoorbellPages {
    doorbell: Mapping,
    status: Mapping,
}

impl DoorbellPages {
    /// Maps the pages at the module's mmap offsets `doorbell` and `status` of `fd`.
    pub(crate) fn map(fd: BorrowedFd<'_>, doorbell: u64, status: u64) -> Result<DoorbellPages> {
        let map = |offset, access, what| {
            Mapping::new(fd, offset, sys::page_size(), access).map_err(|source| Error::Map { what, source })
        };
        Ok(DoorbellPages {
            doorbell: map(doorbell, Access::ReadWrite, "doorbell page")?,
            status: map(status, Access::ReadOnly, "doorbell status page")?,
        })
    }

    /// CPU address of the doorbell value (a 64-bit store of the ring's write index rings it).
    pub fn doorbell_address(&self) -> *mut u64 {
        self.doorbell.address() as *mut u64
    }

    /// CPU address of the doorbell status (a 32-bit `DoorbellStatus`, read-only).
    pub fn status_address(&self) -> *const u32 {
        self.status.address() as *const u32
    }
}

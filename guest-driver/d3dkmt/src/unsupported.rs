//! The calls of the reference texts that Belfry has no mechanism for: each returns
//! `STATUS_NOT_SUPPORTED` and reads nothing (the README's table says why).

use crate::status::STATUS_NOT_SUPPORTED;
use crate::types::{D3DKMT_LOCK2, NTSTATUS};

/// Legacy (WDDM 1.x) DMA-buffer submission with allocation and patch-location lists: Belfry's
/// queues take command buffers by GPU VA, with no paging-buffer patching in this API.
///
/// # Safety
/// Any pointer: it is not read.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTSubmitCommand(_p: *const core::ffi::c_void) -> NTSTATUS {
    STATUS_NOT_SUPPORTED
}

/// CPU mapping of an allocation: this API has no allocations (`D3DKMTCreateAllocation`,
/// which would make them, is not a name of the reference texts); hardware queues own their ring
/// and ring-control memory, and command buffers in Belfry's packet format are the Belfry-shaped
/// API's.
///
/// # Safety
/// Any pointer: it is not read.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTLock2(_p: *mut D3DKMT_LOCK2) -> NTSTATUS {
    STATUS_NOT_SUPPORTED
}

//! What every call does with what a caller hands it, with no device: a NULL argument pointer
//! is `STATUS_INVALID_PARAMETER` and a handle this process never got (0, or one of no object)
//! is `STATUS_INVALID_HANDLE`, before anything else happens (THREAT_MODEL.md, the D3DKMT API).

use crate::adapter::*;
use crate::hwqueue::*;
use crate::status::*;
use crate::sync::*;
use crate::types::*;
use crate::unsupported::*;
use crate::waits::*;

/// A zeroed argument structure: every handle 0 (no object), every pointer NULL.
fn zeroed<T>() -> T {
    // SAFETY: the argument structures are plain integers, raw pointers and unions of them, for
    // which all-zero bytes are a valid value.
    unsafe { core::mem::zeroed() }
}

#[test]
fn null_argument_pointers_are_invalid_parameters() {
    use core::ptr::{null, null_mut};
    // SAFETY: NULL is within every call's contract.
    let results = unsafe {
        [
            ("D3DKMTEnumAdapters2", D3DKMTEnumAdapters2(null_mut())),
            ("D3DKMTOpenAdapterFromLuid", D3DKMTOpenAdapterFromLuid(null_mut())),
            ("D3DKMTCloseAdapter", D3DKMTCloseAdapter(null())),
            ("D3DKMTCreateDevice", D3DKMTCreateDevice(null_mut())),
            ("D3DKMTDestroyDevice", D3DKMTDestroyDevice(null())),
            ("D3DKMTCreateContextVirtual", D3DKMTCreateContextVirtual(null_mut())),
            ("D3DKMTDestroyContext", D3DKMTDestroyContext(null())),
            ("D3DKMTCreateHwQueue", D3DKMTCreateHwQueue(null_mut())),
            ("D3DKMTDestroyHwQueue", D3DKMTDestroyHwQueue(null())),
            ("D3DKMTSubmitCommandToHwQueue", D3DKMTSubmitCommandToHwQueue(null())),
            ("D3DKMTCreateDoorbell", D3DKMTCreateDoorbell(null_mut())),
            ("D3DKMTConnectDoorbell", D3DKMTConnectDoorbell(null_mut())),
            ("D3DKMTDestroyDoorbell", D3DKMTDestroyDoorbell(null_mut())),
            ("D3DKMTNotifyWorkSubmission", D3DKMTNotifyWorkSubmission(null_mut())),
            ("D3DKMTCreateNativeFence", D3DKMTCreateNativeFence(null_mut())),
            ("D3DKMTCreateSynchronizationObject2", D3DKMTCreateSynchronizationObject2(null_mut())),
            ("D3DKMTDestroySynchronizationObject", D3DKMTDestroySynchronizationObject(null())),
            ("D3DKMTShareObjects", D3DKMTShareObjects(1, null(), null_mut(), 0, null_mut())),
            ("D3DKMTOpenNativeFenceFromNTHandle", D3DKMTOpenNativeFenceFromNTHandle(null_mut())),
            ("D3DKMTOpenSyncObjectFromNtHandle2", D3DKMTOpenSyncObjectFromNtHandle2(null_mut())),
            ("D3DKMTWaitForSynchronizationObjectFromCpu", D3DKMTWaitForSynchronizationObjectFromCpu(null())),
            ("D3DKMTSignalSynchronizationObjectFromCpu", D3DKMTSignalSynchronizationObjectFromCpu(null())),
            ("D3DKMTWaitForSynchronizationObjectFromGpu", D3DKMTWaitForSynchronizationObjectFromGpu(null())),
            ("D3DKMTSignalSynchronizationObjectFromGpu", D3DKMTSignalSynchronizationObjectFromGpu(null())),
        ]
    };
    for (name, status) in results {
        assert_eq!(status, STATUS_INVALID_PARAMETER, "{name}(NULL)");
    }
    // SAFETY: as above; these two read nothing.
    let (submit, lock) = unsafe { (D3DKMTSubmitCommand(null()), D3DKMTLock2(null_mut())) };
    assert_eq!((submit, lock), (STATUS_NOT_SUPPORTED, STATUS_NOT_SUPPORTED));
}

#[test]
fn handles_of_no_object_are_invalid_handles() {
    let fence: D3DKMT_HANDLE = 0x7fff_fff0;
    let mut shared: HANDLE = core::ptr::null_mut();
    let mut open_native: D3DKMT_OPENNATIVEFENCEFROMNTHANDLE = zeroed();
    open_native.hNtHandle = 0 as HANDLE;
    let mut open_sync: D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2 = zeroed();
    // SAFETY: every argument is a valid (zeroed) structure or a live local.
    let results = unsafe {
        [
            ("D3DKMTCloseAdapter", D3DKMTCloseAdapter(&zeroed())),
            ("D3DKMTCreateDevice", D3DKMTCreateDevice(&mut zeroed())),
            ("D3DKMTDestroyDevice", D3DKMTDestroyDevice(&zeroed())),
            ("D3DKMTCreateContextVirtual", D3DKMTCreateContextVirtual(&mut zeroed())),
            ("D3DKMTDestroyContext", D3DKMTDestroyContext(&zeroed())),
            ("D3DKMTCreateHwQueue", D3DKMTCreateHwQueue(&mut zeroed())),
            ("D3DKMTDestroyHwQueue", D3DKMTDestroyHwQueue(&zeroed())),
            ("D3DKMTSubmitCommandToHwQueue", D3DKMTSubmitCommandToHwQueue(&zeroed())),
            ("D3DKMTCreateDoorbell", D3DKMTCreateDoorbell(&mut zeroed())),
            ("D3DKMTConnectDoorbell", D3DKMTConnectDoorbell(&mut zeroed())),
            ("D3DKMTDestroyDoorbell", D3DKMTDestroyDoorbell(&mut zeroed())),
            ("D3DKMTNotifyWorkSubmission", D3DKMTNotifyWorkSubmission(&mut zeroed())),
            ("D3DKMTCreateNativeFence", D3DKMTCreateNativeFence(&mut zeroed())),
            ("D3DKMTCreateSynchronizationObject2", D3DKMTCreateSynchronizationObject2(&mut zeroed())),
            ("D3DKMTDestroySynchronizationObject", D3DKMTDestroySynchronizationObject(&zeroed())),
            ("D3DKMTShareObjects", D3DKMTShareObjects(1, &fence, core::ptr::null_mut(), 0, &mut shared)),
            ("D3DKMTOpenNativeFenceFromNTHandle", D3DKMTOpenNativeFenceFromNTHandle(&mut open_native)),
            ("D3DKMTOpenSyncObjectFromNtHandle2", D3DKMTOpenSyncObjectFromNtHandle2(&mut open_sync)),
        ]
    };
    for (name, status) in results {
        assert_eq!(status, STATUS_INVALID_HANDLE, "{name} with a handle of no object");
    }
    assert!(shared.is_null(), "D3DKMTShareObjects wrote a handle for no object");
}

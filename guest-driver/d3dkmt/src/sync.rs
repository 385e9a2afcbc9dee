//! Synchronization objects: native fences (`D3DKMTCreateNativeFence`), monitored fences
//! (`D3DKMTCreateSynchronizationObject2`), their destruction, and sharing between processes
//! through file descriptors where the documentation uses NT handles.

use std::os::fd::{BorrowedFd, IntoRawFd};
use std::sync::Arc;

use belfry_umd::abi::uapi;
use belfry_umd::{Fence, FenceFlags, FenceKind};

use crate::adapter::removed;
use crate::objects::{self, Object};
use crate::status::{self, *};
use crate::types::*;
use crate::{ptr, require};

/// The mapping of `fence` in this process: CurrentValue's CPU (read-only) and GPU addresses.
/// The MonitoredValue's GPU address is not given (0): Belfry's engines raise the CPU
/// interrupt themselves.
fn mapping_of(fence: &Fence, out: &mut D3DDDI_NATIVEFENCEMAPPING) {
    out.CurrentValueCpuVa = cpu_address(fence);
    out.CurrentValueGpuVa = fence.gpu_va();
    out.MonitoredValueGpuVa = 0;
}

/// The library's fence flags for documented synchronization object flags: shared (through
/// `D3DKMTShareObjects`) is Belfry's `SHAREABLE`; cross-adapter fences and the other
/// behaviours are `None` (not supported).
fn fence_flags(flags: u32) -> Option<FenceFlags> {
    let sharing = SYNC_FLAG_SHARED | SYNC_FLAG_NT_SECURITY_SHARING;
    if flags & !sharing != 0 {
        return None;
    }
    Some(if flags & sharing != 0 { FenceFlags::SHAREABLE } else { FenceFlags::empty() })
}

/// Creates a native fence on a device: `D3DDDI_NATIVEFENCE_TYPE_DEFAULT` (CPU and GPU
/// operations) or `_INTRA_GPU` (GPU operations only, no CPU mapping), at
/// `Info.InitialFenceValue`, shareable with `Info.Flags.Shared`/`NtSecuritySharing`; fills
/// `Info.NativeFenceMapping`. Private driver data is not used; `EngineAffinity` is ignored.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_CREATENATIVEFENCE`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTCreateNativeFence(p: *mut D3DKMT_CREATENATIVEFENCE) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    let Some(ctx) = objects::device(args.hDevice) else { return STATUS_INVALID_HANDLE };
    let kind = match args.Info.Type {
        D3DDDI_NATIVEFENCE_TYPE_DEFAULT => FenceKind::Default,
        D3DDDI_NATIVEFENCE_TYPE_INTRA_GPU => FenceKind::IntraGpu,
        _ => return STATUS_INVALID_PARAMETER,
    };
    let Some(flags) = fence_flags(args.Info.Flags.Value) else { return STATUS_NOT_SUPPORTED };
    if args.Flags.Value != 0 {
        return STATUS_INVALID_PARAMETER;
    }
    match ctx.create_fence(kind, flags, args.Info.InitialFenceValue) {
        Ok(fence) => {
            mapping_of(&fence, &mut args.Info.NativeFenceMapping);
            args.hSyncObject = objects::insert(args.hDevice, Object::Fence(Arc::new(fence)));
            STATUS_SUCCESS
        }
        Err(e) => status::of_error(&e),
    }
}

/// Creates a synchronization object on a device. Belfry has monitored fences
/// (`D3DDDI_MONITORED_FENCE`, at `Info.MonitoredFence.InitialFenceValue`, with its CPU and
/// GPU addresses filled in); the other types (mutexes, semaphores, legacy fences, CPU
/// notifications, periodic fences) have no mechanism: `STATUS_NOT_SUPPORTED`. A monitored
/// fence with `Info.Flags.Shared` (or `NtSecuritySharing`) is the module's cross-adapter
/// monitored fence (`FENCE_CROSS_ADAPTER`), the one monitored fence it can export: one
/// CurrentValue page in system memory that every process opening it maps, its MonitoredValue
/// held at 0 (each GPU signal raises the CPU interrupt); `D3DKMTShareObjects` shares it and
/// `D3DKMTOpenSyncObjectFromNtHandle2` opens it.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_CREATESYNCHRONIZATIONOBJECT2`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTCreateSynchronizationObject2(p: *mut D3DKMT_CREATESYNCHRONIZATIONOBJECT2) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    let Some(ctx) = objects::device(args.hDevice) else { return STATUS_INVALID_HANDLE };
    if args.Info.Type != D3DDDI_MONITORED_FENCE {
        return STATUS_NOT_SUPPORTED;
    }
    let Some(flags) = monitored_fence_flags(args.Info.Flags.Value) else { return STATUS_NOT_SUPPORTED };
    // SAFETY: for a monitored fence the caller set the `MonitoredFence` member; any bits are
    // valid integers and the pointer is only written.
    let initial = unsafe { args.Info.u.MonitoredFence.InitialFenceValue };
    match ctx.create_fence(FenceKind::Monitored, flags, initial) {
        Ok(fence) => {
            let monitored = MonitoredFenceInfo {
                InitialFenceValue: initial,
                FenceValueCPUVirtualAddress: cpu_address(&fence),
                FenceValueGPUVirtualAddress: fence.gpu_va(),
                // SAFETY: as above.
                EngineAffinity: unsafe { args.Info.u.MonitoredFence.EngineAffinity },
                Padding: 0,
            };
            args.Info.u.MonitoredFence = monitored;
            args.Info.SharedHandle = 0;
            args.hSyncObject = objects::insert(args.hDevice, Object::Fence(Arc::new(fence)));
            STATUS_SUCCESS
        }
        Err(e) => status::of_error(&e),
    }
}

/// The library's fence flags for a monitored fence's documented flags: shared is the
/// module's cross-adapter monitored fence (the one it exports); the other behaviours are
/// `None` (not supported).
fn monitored_fence_flags(flags: u32) -> Option<FenceFlags> {
    let sharing = SYNC_FLAG_SHARED | SYNC_FLAG_NT_SECURITY_SHARING;
    if flags & !sharing != 0 {
        return None;
    }
    Some(if flags & sharing != 0 { FenceFlags::from(uapi::FENCE_CROSS_ADAPTER) } else { FenceFlags::empty() })
}

/// CurrentValue's read-only CPU address of `fence` in this process (NULL for none).
fn cpu_address(fence: &Fence) -> *mut core::ffi::c_void {
    fence.cpu_address().map_or(core::ptr::null_mut(), |a| a as *mut core::ffi::c_void)
}

/// Destroys a synchronization object (a native or monitored fence). A hardware queue's
/// progress fence goes with its queue: `STATUS_INVALID_HANDLE` here.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_DESTROYSYNCHRONIZATIONOBJECT`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTDestroySynchronizationObject(p: *const D3DKMT_DESTROYSYNCHRONIZATIONOBJECT) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    removed(objects::remove(args.hSyncObject, |o| matches!(o, Object::Fence(_))))
}

/// Shares one object with other processes: on Belfry, a shared native or monitored fence, as
/// a file descriptor (Belfry's NT handle) stored as `(HANDLE)(intptr_t)fd` at
/// `phSharedNtHandle`. The caller owns the descriptor (close it with `close`); passed to
/// another process (fork, `SCM_RIGHTS`), it opens the fence there with
/// `D3DKMTOpenNativeFenceFromNTHandle` or `D3DKMTOpenSyncObjectFromNtHandle2`. Object
/// attributes (names, security) are not supported (must be NULL); `dwDesiredAccess` is not used.
///
/// # Safety
/// `objects` holds `count` handles; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTShareObjects(
    count: u32,
    handles: *const D3DKMT_HANDLE,
    object_attributes: *mut core::ffi::c_void,
    _desired_access: u32,
    out: *mut HANDLE,
) -> NTSTATUS {
    if !object_attributes.is_null() {
        return STATUS_NOT_SUPPORTED;
    }
    // SAFETY: the caller's contract for `handles`.
    let handles = require!(unsafe { ptr::slice(handles, count as usize) });
    // SAFETY: the caller's contract for `out`.
    let out = require!(unsafe { ptr::exclusive(out) });
    let [handle] = handles else { return STATUS_NOT_SUPPORTED };
    let Some(fence) = objects::fence(*handle) else { return STATUS_INVALID_HANDLE };
    match fence.export() {
        Ok(fd) => {
            *out = fd.into_raw_fd() as isize as HANDLE;
            STATUS_SUCCESS
        }
        Err(e) => status::of_error(&e),
    }
}

/// The file descriptor a Belfry NT handle stands for.
fn fd_of(handle: HANDLE) -> Option<i32> {
    i32::try_from(handle as isize).ok().filter(|fd| *fd >= 0)
}

/// Opens, on a device, the native fence a shared handle (a file descriptor from
/// `D3DKMTShareObjects`, maybe of another process) names: a new `hSyncObject` with this
/// process's `NativeFenceMapping`. The descriptor stays the caller's.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_OPENNATIVEFENCEFROMNTHANDLE`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTOpenNativeFenceFromNTHandle(p: *mut D3DKMT_OPENNATIVEFENCEFROMNTHANDLE) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    match import_shared(args.hDevice, args.hNtHandle, args.Flags.Value) {
        Ok(fence) => {
            mapping_of(&fence, &mut args.NativeFenceMapping);
            args.hSyncObject = objects::insert(args.hDevice, Object::Fence(Arc::new(fence)));
            STATUS_SUCCESS
        }
        Err(status) => status,
    }
}

/// The fence that shared handle `handle` (a file descriptor from `D3DKMTShareObjects`) names,
/// opened on device `device` for this process, for the two open calls: `STATUS_INVALID_HANDLE`
/// for a device or descriptor that is none, `STATUS_NOT_SUPPORTED` for flags other than the
/// sharing ones, the module's refusal otherwise. The descriptor stays the caller's.
fn import_shared(device: D3DKMT_HANDLE, handle: HANDLE, flags: u32) -> Result<Fence, NTSTATUS> {
    let ctx = objects::device(device).ok_or(STATUS_INVALID_HANDLE)?;
    let fd = fd_of(handle).ok_or(STATUS_INVALID_HANDLE)?;
    if flags & !(SYNC_FLAG_SHARED | SYNC_FLAG_NT_SECURITY_SHARING) != 0 {
        return Err(STATUS_NOT_SUPPORTED);
    }
    // SAFETY: `fd` is only borrowed for the call; the module checks that it names a fence
    // (`EINVAL`, `EBADF` otherwise).
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    ctx.import_fence(borrowed).map_err(|e| status::of_error(&e))
}

/// Opens, on a device, the synchronization object a shared handle (a file descriptor from
/// `D3DKMTShareObjects`, maybe of another process) names: a shared monitored fence (or a
/// shared native fence), as a new `hSyncObject` of this process with the CPU (read-only) and
/// GPU addresses of its value in `MonitoredFence`. The descriptor stays the caller's. On a
/// device with native fences the module opens a shared monitored fence as a native fence over
/// the same value (XAD-11): the same waits and signals, and user-mode queues take it.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTOpenSyncObjectFromNtHandle2(p: *mut D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    match import_shared(args.hDevice, args.hNtHandle, args.Flags.Value) {
        Ok(fence) => {
            // SAFETY: the `MonitoredFence` member is plain data; `EngineAffinity` is kept.
            let affinity = unsafe { args.u.MonitoredFence.EngineAffinity };
            args.u.MonitoredFence = OpenedMonitoredFence {
                FenceValueCPUVirtualAddress: cpu_address(&fence),
                FenceValueGPUVirtualAddress: fence.gpu_va(),
                EngineAffinity: affinity,
            };
            args.hSyncObject = objects::insert(args.hDevice, Object::Fence(Arc::new(fence)));
            STATUS_SUCCESS
        }
        Err(status) => status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_flags_make_a_shareable_fence_and_others_are_refused() {
        assert_eq!(fence_flags(0), Some(FenceFlags::empty()));
        assert_eq!(fence_flags(SYNC_FLAG_SHARED), Some(FenceFlags::SHAREABLE));
        assert_eq!(fence_flags(SYNC_FLAG_NT_SECURITY_SHARING | SYNC_FLAG_SHARED), Some(FenceFlags::SHAREABLE));
        assert_eq!(fence_flags(1 << 2), None, "cross-adapter");
    }

    #[test]
    fn a_shared_monitored_fence_is_the_module_s_cross_adapter_fence() {
        assert_eq!(monitored_fence_flags(0), Some(FenceFlags::empty()));
        let cross = Some(FenceFlags::from(uapi::FENCE_CROSS_ADAPTER));
        assert_eq!(monitored_fence_flags(SYNC_FLAG_SHARED), cross);
        assert_eq!(monitored_fence_flags(SYNC_FLAG_NT_SECURITY_SHARING | SYNC_FLAG_SHARED), cross);
        assert_eq!(monitored_fence_flags(1 << 2), None, "cross-adapter");
    }

    #[test]
    fn nt_handles_are_descriptors() {
        assert_eq!(fd_of(7 as HANDLE), Some(7));
        assert_eq!(fd_of(-1_isize as HANDLE), None);
        assert_eq!(fd_of(core::ptr::null_mut()), Some(0));
    }
}

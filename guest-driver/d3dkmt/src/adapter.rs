//! Adapters (`/dev/belfry<N>`, LUID `{ N, 0 }`), devices (library contexts) and contexts
//! (kernel-mode queues on an engine).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use belfry_umd::{Device, EngineId, QueueDesc, QueueMode};

use crate::objects::{self, Object, QueueObject, QueueState};
use crate::status::{self, *};
use crate::types::*;
use crate::{ptr, require};

/// The adapter number of `/dev/belfry<N>`.
fn adapter_number(path: &Path) -> Option<u32> {
    path.file_name()?.to_str()?.strip_prefix("belfry")?.parse().ok()
}

/// The device file of adapter number `n`.
fn adapter_path(n: u32) -> PathBuf {
    PathBuf::from(format!("/dev/belfry{n}"))
}

/// Opens adapter `n` and returns its new handle.
fn open_adapter(n: u32) -> Result<D3DKMT_HANDLE, NTSTATUS> {
    let device = Device::open(adapter_path(n)).map_err(|e| status::of_error(&e))?;
    Ok(objects::insert(0, Object::Adapter(Arc::new(device))))
}

/// Lists the adapters: with `pAdapters` NULL, only their number in `NumAdapters`; otherwise
/// opens each (close every `hAdapter` with `D3DKMTCloseAdapter`) and fills `pAdapters`.
/// `STATUS_BUFFER_TOO_SMALL` (with the number needed in `NumAdapters`) if it holds fewer.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_ENUMADAPTERS2` whose `pAdapters` is NULL or holds
/// `NumAdapters` elements.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTEnumAdapters2(p: *mut D3DKMT_ENUMADAPTERS2) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    let mut numbers: Vec<u32> = match Device::enumerate() {
        Ok(paths) => paths.iter().filter_map(|p| adapter_number(p)).collect(),
        Err(e) => return status::of_error(&e),
    };
    numbers.sort_unstable();
    let count = numbers.len() as u32;
    if args.pAdapters.is_null() {
        args.NumAdapters = count;
        return STATUS_SUCCESS;
    }
    if args.NumAdapters < count {
        args.NumAdapters = count;
        return STATUS_BUFFER_TOO_SMALL;
    }
    // SAFETY: the caller's contract: `pAdapters` holds `NumAdapters` ≥ `count` elements.
    let out = require!(unsafe { ptr::slice_mut(args.pAdapters, numbers.len()) });
    let mut opened = Vec::new();
    for &n in &numbers {
        match open_adapter(n) {
            Ok(h) => opened.push(h),
            Err(s) => {
                for h in opened {
                    objects::remove(h, |_| true);
                }
                return s;
            }
        }
    }
    for ((slot, n), h) in out.iter_mut().zip(numbers).zip(opened) {
        *slot = D3DKMT_ADAPTERINFO {
            hAdapter: h,
            AdapterLuid: LUID { LowPart: n, HighPart: 0 },
            NumOfSources: 0,
            bPrecisePresentRegionsPreferred: 0,
        };
    }
    args.NumAdapters = count;
    STATUS_SUCCESS
}

/// Opens the adapter whose LUID is `{ N, 0 }`: `/dev/belfry<N>`.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_OPENADAPTERFROMLUID`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTOpenAdapterFromLuid(p: *mut D3DKMT_OPENADAPTERFROMLUID) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    if args.AdapterLuid.HighPart != 0 {
        return STATUS_INVALID_PARAMETER;
    }
    match open_adapter(args.AdapterLuid.LowPart) {
        Ok(h) => {
            args.hAdapter = h;
            STATUS_SUCCESS
        }
        Err(s) => s,
    }
}

/// Closes an adapter handle and everything created under it.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_CLOSEADAPTER`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTCloseAdapter(p: *const D3DKMT_CLOSEADAPTER) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    removed(objects::remove(args.hAdapter, |o| matches!(o, Object::Adapter(_))))
}

/// `STATUS_SUCCESS` if a destroy call found its object.
pub(crate) fn removed(found: bool) -> NTSTATUS {
    if found {
        STATUS_SUCCESS
    } else {
        STATUS_INVALID_HANDLE
    }
}

/// Creates a device on an adapter: a context of the library (one GPU address space). The
/// legacy (D3D10) command buffer and lists are not used: NULL and 0.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_CREATEDEVICE` whose `hAdapter` member is the one set.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTCreateDevice(p: *mut D3DKMT_CREATEDEVICE) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    // SAFETY: user-mode callers set `hAdapter` (the header's contract); any bit pattern is a u32.
    let adapter = unsafe { args.adapter.hAdapter };
    let Some((Object::Adapter(device), _)) = objects::get(adapter) else { return STATUS_INVALID_HANDLE };
    let ctx = match device.create_context() {
        Ok(ctx) => ctx,
        Err(e) => return status::of_error(&e),
    };
    args.hDevice = objects::insert(adapter, Object::Device(Arc::new(ctx)));
    args.pCommandBuffer = core::ptr::null_mut();
    args.CommandBufferSize = 0;
    args.pAllocationList = core::ptr::null_mut();
    args.AllocationListSize = 0;
    args.pPatchLocationList = core::ptr::null_mut();
    args.PatchLocationListSize = 0;
    STATUS_SUCCESS
}

/// Destroys a device and its contexts, hardware queues and synchronization objects.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_DESTROYDEVICE`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTDestroyDevice(p: *const D3DKMT_DESTROYDEVICE) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    removed(objects::remove(args.hDevice, |o| matches!(o, Object::Device(_))))
}

/// Creates a queue of the library on `ctx` in `mode` on `engine`.
pub(crate) fn new_queue(ctx: &belfry_umd::Context, engine: u32, mode: QueueMode) -> Result<Arc<QueueObject>, NTSTATUS> {
    let desc = QueueDesc::default().with_engine(EngineId::new(engine)).with_mode(mode);
    let queue = ctx.create_queue(&desc).map_err(|e| status::of_error(&e))?;
    let state = QueueState { queue, submitted: Vec::new(), doorbell: None };
    Ok(Arc::new(QueueObject { state: Mutex::new(state), user_mode: mode == QueueMode::UserMode, engine }))
}

/// Creates a context on node (engine) `NodeOrdinal` of a device: a kernel-mode queue there,
/// which `D3DKMTSignalSynchronizationObjectFromGpu`/`WaitForSynchronizationObjectFromGpu` use
/// and under which `D3DKMTCreateHwQueue` creates hardware queues. Private driver data is not
/// used; `EngineAffinity` and `ClientHint` are accepted and ignored (one engine per node).
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_CREATECONTEXTVIRTUAL`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTCreateContextVirtual(p: *mut D3DKMT_CREATECONTEXTVIRTUAL) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    let Some(ctx) = objects::device(args.hDevice) else { return STATUS_INVALID_HANDLE };
    if ctx.caps().engine_count() <= args.NodeOrdinal {
        return STATUS_INVALID_PARAMETER;
    }
    match new_queue(&ctx, args.NodeOrdinal, QueueMode::KernelMode) {
        Ok(q) => {
            args.hContext = objects::insert(args.hDevice, Object::Context(q));
            STATUS_SUCCESS
        }
        Err(s) => s,
    }
}

/// Destroys a context and the hardware queues created under it.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_DESTROYCONTEXT`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTDestroyContext(p: *const D3DKMT_DESTROYCONTEXT) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    removed(objects::remove(args.hContext, |o| matches!(o, Object::Context(_))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_numbers_come_from_device_file_names() {
        assert_eq!(adapter_number(Path::new("/dev/belfry3")), Some(3));
        assert_eq!(adapter_number(Path::new("/dev/belfryx")), None);
        assert_eq!(adapter_path(7), PathBuf::from("/dev/belfry7"));
    }
}

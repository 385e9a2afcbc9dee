//! Hardware queues, their doorbells and submissions. A user-mode hardware queue is a library
//! queue with its own ring and doorbell: `D3DKMTSubmitCommandToHwQueue` writes the ring entry,
//! publishes the last queued progress value and rings the doorbell, reading the doorbell status
//! and acting on it (connect on DISCONNECTED_RETRY, notify on CONNECTED_NOTIFY, re-create on
//! DISCONNECTED_ABORT) as the texts' pseudocode does.

use std::sync::Arc;

use belfry_umd::{CommandBuffer, QueueMode};

use crate::adapter::{new_queue, removed};
use crate::objects::{self, Object};
use crate::status::{self, *};
use crate::types::*;
use crate::{ptr, require};

/// Creates a hardware queue under a context, on the context's engine: user-mode (ring and
/// doorbell) with `Flags.UserModeSubmission`, kernel-mode otherwise. Returns the queue and its
/// progress fence handle (a synchronization object for CPU waits on the
/// `HwQueueProgressFenceId`s of submissions). The progress fence's CPU and GPU addresses are
/// not given (NULL, 0): the library's progress values are not the program's ids. Private
/// driver data is not used.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_CREATEHWQUEUE`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTCreateHwQueue(p: *mut D3DKMT_CREATEHWQUEUE) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    let Some((Object::Context(context), device)) = objects::get(args.hHwContext) else {
        return STATUS_INVALID_HANDLE;
    };
    let Some(ctx) = objects::device(device) else { return STATUS_INVALID_HANDLE };
    let engine = context.engine;
    let mode =
        if args.Flags.Value & HWQUEUE_USER_MODE_SUBMISSION != 0 { QueueMode::UserMode } else { QueueMode::KernelMode };
    let queue = match new_queue(&ctx, engine, mode) {
        Ok(q) => q,
        Err(s) => return s,
    };
    let handle = objects::insert(args.hHwContext, Object::HwQueue(queue));
    args.hHwQueue = handle;
    args.hHwQueueProgressFence = objects::insert(handle, Object::ProgressFence);
    args.HwQueueProgressFenceCPUVirtualAddress = core::ptr::null_mut();
    args.HwQueueProgressFenceGPUVirtualAddress = 0;
    STATUS_SUCCESS
}

/// Destroys a hardware queue, its progress fence and its doorbell.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_DESTROYHWQUEUE`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTDestroyHwQueue(p: *const D3DKMT_DESTROYHWQUEUE) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    removed(objects::remove(args.hHwQueue, |o| matches!(o, Object::HwQueue(_))))
}

/// The user-mode hardware queue `handle` names.
fn user_mode_queue(handle: D3DKMT_HANDLE) -> Result<Arc<crate::objects::QueueObject>, NTSTATUS> {
    match objects::get(handle) {
        Some((Object::HwQueue(q), _)) if q.user_mode => Ok(q),
        Some((Object::HwQueue(_), _)) => Err(STATUS_INVALID_PARAMETER),
        _ => Err(STATUS_INVALID_HANDLE),
    }
}

/// The hardware queue a doorbell handle belongs to.
fn doorbell_queue(handle: D3DKMT_HANDLE) -> Result<Arc<crate::objects::QueueObject>, NTSTATUS> {
    match objects::get(handle) {
        Some((Object::Doorbell, queue)) => user_mode_queue(queue),
        _ => Err(STATUS_INVALID_HANDLE),
    }
}

/// Submits work to a hardware queue with progress id `HwQueueProgressFenceId`, which must be
/// above the queue's previous one. On Belfry the command buffer is empty (`CommandBuffer` 0,
/// `CommandLength` 0): the program has no GPU allocation of this API to put commands in, and
/// a non-empty one returns `STATUS_NOT_SUPPORTED`. The submission still orders: it completes
/// after the queue's earlier work and GPU waits, and its progress id then reads complete.
/// Primaries and private driver data are not used.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_SUBMITCOMMANDTOHWQUEUE`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTSubmitCommandToHwQueue(p: *const D3DKMT_SUBMITCOMMANDTOHWQUEUE) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    let queue = match objects::get(args.hHwQueue) {
        Some((Object::HwQueue(q), _)) => q,
        _ => return STATUS_INVALID_HANDLE,
    };
    if args.CommandBuffer != 0 || args.CommandLength != 0 {
        return STATUS_NOT_SUPPORTED;
    }
    let mut state = queue.lock();
    let id = args.HwQueueProgressFenceId;
    if state.submitted.last().is_some_and(|&(last, _)| id <= last) || id == 0 {
        return STATUS_INVALID_PARAMETER;
    }
    match state.queue.submit(&CommandBuffer::new()) {
        Ok(value) => {
            state.submitted.push((id, value));
            STATUS_SUCCESS
        }
        Err(e) => status::of_error(&e),
    }
}

/// The status page carries the module's status word unchanged, so it must hold the values
/// `include/belfry_d3dkmt.h` gives `D3DDDI_DOORBELL_STATUS`.
const _: () = {
    use belfry_umd::abi::uapi::DoorbellStatus;
    assert!(DoorbellStatus::Connected as u32 == 0);
    assert!(DoorbellStatus::ConnectedNotify as u32 == 1);
    assert!(DoorbellStatus::DisconnectedRetry as u32 == 2);
    assert!(DoorbellStatus::DisconnectedAbort as u32 == 3);
};

/// Gives out the doorbell of a user-mode hardware queue (one per queue; the ring and ring
/// control are the library's own, so `hRingBuffer` and `hRingBufferControl` are not used).
/// The doorbell starts disconnected, as the documentation says. `DoorbellCPUVirtualAddress`
/// and `DoorbellStatusCPUVirtualAddress` are a mapping of the doorbell page and the status
/// page made for the program, valid until the doorbell (or its queue) is destroyed: the
/// program reads the status there and may ring the doorbell again with the value it reads at
/// the doorbell address (the ring's write index, which the library published: no new work).
/// Belfry's doorbell is one 64-bit store, so `DoorbellSecondaryCPUVirtualAddress` is NULL; the
/// LastQueuedValue address is NULL too (the library's progress values are not the program's
/// ids). If a submission re-creates the queue (DISCONNECTED_ABORT), these pages stay those of
/// the destroyed doorbell (status DISCONNECTED_ABORT, a store raises `SIGBUS`): destroy the
/// doorbell and create it again for the new queue's.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_CREATE_DOORBELL`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTCreateDoorbell(p: *mut D3DKMT_CREATE_DOORBELL) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    let queue = match user_mode_queue(args.hHwQueue) {
        Ok(q) => q,
        Err(s) => return s,
    };
    if args.Flags.Value != 0 {
        return STATUS_NOT_SUPPORTED;
    }
    let mut state = queue.lock();
    if state.doorbell.is_some() {
        return STATUS_INVALID_PARAMETER;
    }
    let pages = match state.queue.map_doorbell_pages() {
        Ok(pages) => pages,
        Err(e) => return status::of_error(&e),
    };
    let handle = objects::insert(args.hHwQueue, Object::Doorbell);
    args.hDoorbell = handle;
    args.DoorbellCPUVirtualAddress = pages.doorbell_address().cast();
    args.DoorbellSecondaryCPUVirtualAddress = core::ptr::null_mut();
    args.DoorbellStatusCPUVirtualAddress = pages.status_address().cast_mut().cast();
    args.HwQueueProgressFenceLastQueuedValueCPUVirtualAddress = core::ptr::null_mut();
    state.doorbell = Some((handle, pages));
    STATUS_SUCCESS
}

/// Connects (or reconnects) a doorbell to its hardware queue: the module's `CONNECT_DOORBELL`.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_CONNECT_DOORBELL`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTConnectDoorbell(p: *mut D3DKMT_CONNECT_DOORBELL) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    let queue = match doorbell_queue(args.hDoorbell) {
        Ok(q) => q,
        Err(s) => return s,
    };
    if args.Flags.Value != 0 {
        return STATUS_INVALID_PARAMETER;
    }
    let mut state = queue.lock();
    status::of(state.queue.connect_doorbell())
}

/// Releases a doorbell handle and unmaps the pages whose addresses `D3DKMTCreateDoorbell`
/// gave. The queue keeps its ring and doorbell for its life (the library's queue owns them);
/// `D3DKMTSubmitCommandToHwQueue` goes on working.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_DESTROY_DOORBELL`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTDestroyDoorbell(p: *mut D3DKMT_DESTROY_DOORBELL) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::exclusive(p) });
    let queue = match doorbell_queue(args.hDoorbell) {
        Ok(q) => q,
        Err(s) => return s,
    };
    queue.lock().doorbell = None;
    removed(objects::remove(args.hDoorbell, |o| matches!(o, Object::Doorbell)))
}

/// Tells the module new work was queued on a user-mode hardware queue (`NOTIFY_WORK_SUBMISSION`).
/// `D3DKMTSubmitCommandToHwQueue` already does so whenever the doorbell status reads
/// CONNECTED_NOTIFY after its ring; a further notification is harmless.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_NOTIFY_WORK_SUBMISSION`.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTNotifyWorkSubmission(p: *mut D3DKMT_NOTIFY_WORK_SUBMISSION) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    if args.Flags.Value != 0 {
        return STATUS_INVALID_PARAMETER;
    }
    match user_mode_queue(args.hHwQueue) {
        Ok(q) => status::of(q.lock().queue.notify_work_submission()),
        Err(s) => s,
    }
}

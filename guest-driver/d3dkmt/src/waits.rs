//! Waits and signals of synchronization objects from the CPU and from the GPU (a context's or
//! hardware queue's engine).

use std::os::fd::BorrowedFd;
use std::sync::{Arc, MutexGuard};

use belfry_umd::{wait_all, wait_any, Deadline, Fence, FenceKind, WaitPoint};

use crate::objects::{self, Object, QueueObject, QueueState};
use crate::status::{self, *};
use crate::types::*;
use crate::{ptr, require};

/// What a CPU wait waits on.
enum Target {
    /// A native or monitored fence.
    Fence(Arc<Fence>),
    /// A hardware queue's progress fence.
    Progress(Arc<QueueObject>),
}

/// The object `handle` names for a CPU wait on device `device`.
fn target(handle: D3DKMT_HANDLE, device: D3DKMT_HANDLE) -> Result<Target, NTSTATUS> {
    if objects::owning_device(handle) != Some(device) {
        return Err(STATUS_INVALID_HANDLE);
    }
    match objects::get(handle) {
        Some((Object::Fence(f), _)) => Ok(Target::Fence(f)),
        Some((Object::ProgressFence, queue)) => match objects::get(queue) {
            Some((Object::HwQueue(q), _)) => Ok(Target::Progress(q)),
            _ => Err(STATUS_INVALID_HANDLE),
        },
        _ => Err(STATUS_INVALID_HANDLE),
    }
}

/// The library's progress value that reaching progress id `id` means: that of the first
/// submission whose id is at least `id`. `None` if no submission named such an id yet.
fn progress_value(submitted: &[(u64, u64)], id: u64) -> Option<u64> {
    submitted.iter().find(|(named, _)| *named >= id).map(|(_, value)| *value)
}

/// Waits on the CPU until each object (all, or any with `Flags.WaitAny`) reaches its value in
/// `FenceValueArray`, with no time limit. Objects: native and monitored fences, and hardware
/// queues' progress fences, of `hDevice`; a progress id no submission named yet is
/// `STATUS_INVALID_PARAMETER` (Belfry cannot wait for a submission that does not exist). With
/// `hAsyncEvent` (Belfry: an eventfd, `(HANDLE)(intptr_t)fd`) the call returns at once and the
/// module signals the eventfd when the one fence waited on reaches its value (one object only;
/// several, or a progress fence, `STATUS_NOT_SUPPORTED`). `STATUS_DEVICE_REMOVED` when the work
/// that was to reach a value was lost with its context (a GPU fault or hang).
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU` whose arrays hold
/// `ObjectCount` elements.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTWaitForSynchronizationObjectFromCpu(
    p: *const D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU,
) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    let count = args.ObjectCount as usize;
    // SAFETY: the caller's contract for the arrays.
    let handles = require!(unsafe { ptr::slice(args.ObjectHandleArray, count) });
    // SAFETY: as above.
    let values = require!(unsafe { ptr::slice(args.FenceValueArray, count) });
    if count == 0 || args.Flags.Value & !WAIT_ANY != 0 {
        return STATUS_INVALID_PARAMETER;
    }
    let mut targets = Vec::with_capacity(count);
    for &h in handles {
        match target(h, args.hDevice) {
            Ok(t) => targets.push(t),
            Err(s) => return s,
        }
    }
    if !args.hAsyncEvent.is_null() {
        let (Some(fd), [Target::Fence(fence)]) = (i32::try_from(args.hAsyncEvent as isize).ok(), &targets[..]) else {
            return STATUS_NOT_SUPPORTED;
        };
        // SAFETY: `fd` is only borrowed for the call; the module checks it is an eventfd.
        return status::of(fence.notify(values[0], unsafe { BorrowedFd::borrow_raw(fd) }));
    }
    // One lock per distinct queue, held for the wait (progress points borrow the queue).
    let mut queues: Vec<Arc<QueueObject>> = Vec::new();
    for t in &targets {
        if let Target::Progress(q) = t {
            if !queues.iter().any(|known| Arc::ptr_eq(known, q)) {
                queues.push(q.clone());
            }
        }
    }
    let guards: Vec<MutexGuard<'_, QueueState>> = queues.iter().map(|q| q.lock()).collect();
    let mut points: Vec<WaitPoint<'_>> = Vec::with_capacity(count);
    for (t, &value) in targets.iter().zip(values) {
        match t {
            Target::Fence(f) => points.push(f.point(value)),
            Target::Progress(_) if value == 0 => {
                if args.Flags.Value & WAIT_ANY != 0 {
                    return STATUS_SUCCESS;
                }
            }
            Target::Progress(q) => {
                let i = queues.iter().position(|known| Arc::ptr_eq(known, q)).expect("every queue is locked");
                let Some(v) = progress_value(&guards[i].submitted, value) else { return STATUS_INVALID_PARAMETER };
                points.push(guards[i].queue.progress_point(v));
            }
        }
    }
    if points.is_empty() {
        return STATUS_SUCCESS;
    }
    if args.Flags.Value & WAIT_ANY != 0 {
        status::of(wait_any(&points, Deadline::FOREVER))
    } else {
        status::of(wait_all(&points, Deadline::FOREVER))
    }
}

/// Sets each fence to its value from the CPU (native DEFAULT and monitored fences of
/// `hDevice`). A fence never moves backwards: a value below CurrentValue is
/// `STATUS_INVALID_PARAMETER`. Progress fences are signaled by their queue only
/// (`STATUS_INVALID_PARAMETER`); `Flags` (signal at submission, CPU events, rewinds) have no
/// mechanism: `STATUS_NOT_SUPPORTED`.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU` whose arrays hold
/// `ObjectCount` elements.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTSignalSynchronizationObjectFromCpu(
    p: *const D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU,
) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    let count = args.ObjectCount as usize;
    // SAFETY: the caller's contract for the arrays.
    let handles = require!(unsafe { ptr::slice(args.ObjectHandleArray, count) });
    // SAFETY: as above.
    let values = require!(unsafe { ptr::slice(args.FenceValueArray, count) });
    if args.Flags.Value != 0 {
        return STATUS_NOT_SUPPORTED;
    }
    if count == 0 {
        return STATUS_INVALID_PARAMETER;
    }
    let mut fences = Vec::with_capacity(count);
    for &h in handles {
        match target(h, args.hDevice) {
            Ok(Target::Fence(f)) => fences.push(f),
            Ok(Target::Progress(_)) => return STATUS_INVALID_PARAMETER,
            Err(s) => return s,
        }
    }
    for (f, &v) in fences.iter().zip(values) {
        let s = status::of(f.signal(v));
        if s != STATUS_SUCCESS {
            return s;
        }
    }
    STATUS_SUCCESS
}

/// The queue and fences of a GPU wait or signal: `hContext` names a context or (Belfry's
/// mapping) a hardware queue; the objects are fences of the same device. A user-mode hardware
/// queue takes native fences only (NF-21): a monitored fence there is `STATUS_INVALID_PARAMETER`
/// before anything reaches the GPU (its signal packet would fault the context).
fn gpu_operands(
    context: D3DKMT_HANDLE,
    handles: &[D3DKMT_HANDLE],
) -> Result<(Arc<QueueObject>, Vec<Arc<Fence>>), NTSTATUS> {
    let queue = objects::queue(context).ok_or(STATUS_INVALID_HANDLE)?;
    let device = objects::owning_device(context).ok_or(STATUS_INVALID_HANDLE)?;
    if handles.is_empty() {
        return Err(STATUS_INVALID_PARAMETER);
    }
    let mut fences = Vec::with_capacity(handles.len());
    for &h in handles {
        match target(h, device)? {
            Target::Fence(f) if queue.user_mode && f.kind() == FenceKind::Monitored => {
                return Err(STATUS_INVALID_PARAMETER)
            }
            Target::Fence(f) => fences.push(f),
            Target::Progress(_) => return Err(STATUS_NOT_SUPPORTED),
        }
    }
    Ok((queue, fences))
}

/// Queues `op` (a GPU wait or signal) for each fence of `handles` with its value of `values`, in
/// order, on the hardware queue of `context`; the first failure's status.
fn queue_fence_ops(
    context: D3DKMT_HANDLE,
    handles: &[D3DKMT_HANDLE],
    values: &[u64],
    op: impl Fn(&mut belfry_umd::Queue, &Fence, u64) -> belfry_umd::Result<()>,
) -> NTSTATUS {
    let (queue, fences) = match gpu_operands(context, handles) {
        Ok(x) => x,
        Err(s) => return s,
    };
    let mut state = queue.lock();
    for (f, &v) in fences.iter().zip(values) {
        let s = status::of(op(&mut state.queue, f, v));
        if s != STATUS_SUCCESS {
            return s;
        }
    }
    STATUS_SUCCESS
}

/// Makes the work submitted afterwards to a context or hardware queue wait on the GPU until
/// each fence reaches its value in `MonitoredFenceValueArray` (native and monitored fences; a
/// user-mode hardware queue takes native fences only). Returns at once. Waits on progress
/// fences have no mechanism: `STATUS_NOT_SUPPORTED`.
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU` whose arrays hold
/// `ObjectCount` elements.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTWaitForSynchronizationObjectFromGpu(
    p: *const D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU,
) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    let count = args.ObjectCount as usize;
    // SAFETY: the caller's contract for the arrays.
    let handles = require!(unsafe { ptr::slice(args.ObjectHandleArray, count) });
    // SAFETY: the values of monitored and native fences are the `MonitoredFenceValueArray`
    // member, `ObjectCount` of them (the caller's contract).
    let values = require!(unsafe { ptr::slice(args.u.MonitoredFenceValueArray, count) });
    queue_fence_ops(args.hContext, handles, values, |q, f, v| q.wait_fence(f, v))
}

/// Queues, behind the work submitted so far to a context or hardware queue, a GPU signal of
/// each fence to its value in `MonitoredFenceValueArray` (native and monitored fences; a
/// user-mode hardware queue takes native fences only). Returns at once. A value below what the
/// fence is at or bound for is `STATUS_INVALID_PARAMETER` (fences never move backwards).
///
/// # Safety
/// `p` is NULL or a valid `D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU` whose arrays hold
/// `ObjectCount` elements.
#[no_mangle]
pub unsafe extern "C" fn D3DKMTSignalSynchronizationObjectFromGpu(
    p: *const D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU,
) -> NTSTATUS {
    // SAFETY: the caller's contract for `p`.
    let args = require!(unsafe { ptr::shared(p) });
    let count = args.ObjectCount as usize;
    // SAFETY: the caller's contract for the arrays.
    let handles = require!(unsafe { ptr::slice(args.ObjectHandleArray, count) });
    // SAFETY: as for the GPU wait.
    let values = require!(unsafe { ptr::slice(args.u.MonitoredFenceValueArray, count) });
    queue_fence_ops(args.hContext, handles, values, |q, f, v| q.signal_fence(f, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_ids_map_to_the_first_submission_that_reaches_them() {
        let submitted = [(2, 5), (10, 9)];
        assert_eq!(progress_value(&submitted, 1), Some(5));
        assert_eq!(progress_value(&submitted, 2), Some(5));
        assert_eq!(progress_value(&submitted, 3), Some(9));
        assert_eq!(progress_value(&submitted, 11), None, "no submission named 11 yet");
    }
}

//! The process-wide table of `D3DKMT_HANDLE`s: each handle names one object of this library
//! and the handle it was created under (its parent). Destroying an object destroys what was
//! created under it (a device's contexts, queues and synchronization objects), as Dxgkrnl
//! does. Handles are never reused. Calls copy what they need out of the table (objects are
//! reference-counted) and release its lock before any blocking call.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use belfry_umd::{Context, Device, DoorbellPages, Fence, Queue};

use crate::types::D3DKMT_HANDLE;

/// A queue behind a D3DKMT context (kernel-mode) or hardware queue (user- or kernel-mode),
/// with the progress values the program named.
pub(crate) struct QueueObject {
    /// The queue and its submissions, one caller at a time.
    pub state: Mutex<QueueState>,
    /// User-mode submission (ring and doorbell).
    pub user_mode: bool,
    /// The engine the queue runs on.
    pub engine: u32,
}

/// What a [`QueueObject`] guards.
pub(crate) struct QueueState {
    /// The library's queue.
    pub queue: Queue,
    /// Each submission's `HwQueueProgressFenceId` and the library's progress value for it, in
    /// submission order (both increasing).
    pub submitted: Vec<(u64, u64)>,
    /// The doorbell `D3DKMTCreateDoorbell` gave out, if any: its handle and the mapping of
    /// its pages whose addresses the program holds (unmapped when the doorbell or the queue is
    /// destroyed).
    pub doorbell: Option<(D3DKMT_HANDLE, DoorbellPages)>,
}

impl QueueObject {
    /// Locks the queue (a panic of another caller leaves the state usable: each field is
    /// consistent on its own).
    pub fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a handle names.
#[derive(Clone)]
pub(crate) enum Object {
    /// An adapter: an open `/dev/belfry<N>`.
    Adapter(Arc<Device>),
    /// A D3DKMT device: a context of the library (one GPU address space).
    Device(Arc<Context>),
    /// A D3DKMT context: a kernel-mode queue on its node's engine.
    Context(Arc<QueueObject>),
    /// A hardware queue.
    HwQueue(Arc<QueueObject>),
    /// A hardware queue's progress fence (its parent is the queue).
    ProgressFence,
    /// A hardware queue's doorbell (its parent is the queue).
    Doorbell,
    /// A native or monitored fence.
    Fence(Arc<Fence>),
}

struct Entry {
    parent: D3DKMT_HANDLE,
    object: Object,
}

struct Table {
    next: D3DKMT_HANDLE,
    entries: BTreeMap<D3DKMT_HANDLE, Entry>,
}

static TABLE: Mutex<Table> = Mutex::new(Table { next: 1, entries: BTreeMap::new() });

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Adds `object` under `parent` (0: none) and returns its new handle.
pub(crate) fn insert(parent: D3DKMT_HANDLE, object: Object) -> D3DKMT_HANDLE {
    let mut t = table();
    let handle = t.next;
    t.next = t.next.checked_add(1).expect("2^32 handles in one process");
    t.entries.insert(handle, Entry { parent, object });
    handle
}

/// The object `handle` names and its parent.
pub(crate) fn get(handle: D3DKMT_HANDLE) -> Option<(Object, D3DKMT_HANDLE)> {
    table().entries.get(&handle).map(|e| (e.object.clone(), e.parent))
}

/// Removes `handle` and everything created under it if `is_kind` accepts its object; the
/// objects are released after the table's lock. `false` if there is no such object.
pub(crate) fn remove(handle: D3DKMT_HANDLE, is_kind: impl Fn(&Object) -> bool) -> bool {
    let removed = {
        let mut t = table();
        match t.entries.get(&handle) {
            Some(e) if is_kind(&e.object) => {}
            _ => return false,
        }
        let mut doomed = vec![handle];
        let mut i = 0;
        while i < doomed.len() {
            let parent = doomed[i];
            doomed.extend(t.entries.iter().filter(|(_, e)| e.parent == parent).map(|(h, _)| *h));
            i += 1;
        }
        doomed.iter().filter_map(|h| t.entries.remove(h)).collect::<Vec<_>>()
    };
    // Children first: a queue goes before its context, a context before its device.
    drop(removed.into_iter().rev().collect::<Vec<_>>());
    true
}

/// The device (library context) `handle` names.
pub(crate) fn device(handle: D3DKMT_HANDLE) -> Option<Arc<Context>> {
    match get(handle)?.0 {
        Object::Device(ctx) => Some(ctx),
        _ => None,
    }
}

/// The queue a D3DKMT context or hardware queue handle names.
pub(crate) fn queue(handle: D3DKMT_HANDLE) -> Option<Arc<QueueObject>> {
    match get(handle)?.0 {
        Object::Context(q) | Object::HwQueue(q) => Some(q),
        _ => None,
    }
}

/// The fence `handle` names.
pub(crate) fn fence(handle: D3DKMT_HANDLE) -> Option<Arc<Fence>> {
    match get(handle)?.0 {
        Object::Fence(f) => Some(f),
        _ => None,
    }
}

/// The device `handle` was created under (itself for a device), following its parents.
pub(crate) fn owning_device(mut handle: D3DKMT_HANDLE) -> Option<D3DKMT_HANDLE> {
    let t = table();
    loop {
        let entry = t.entries.get(&handle)?;
        if matches!(entry.object, Object::Device(_)) {
            return Some(handle);
        }
        handle = entry.parent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_a_parent_removes_its_children_and_nothing_else() {
        let root = insert(0, Object::ProgressFence);
        let child = insert(root, Object::Doorbell);
        let grandchild = insert(child, Object::Doorbell);
        let other = insert(0, Object::Doorbell);
        assert!(!remove(root, |o| matches!(o, Object::Doorbell)), "the wrong kind is not removed");
        assert!(get(root).is_some());
        assert!(remove(root, |o| matches!(o, Object::ProgressFence)));
        for h in [root, child, grandchild] {
            assert!(get(h).is_none(), "handle {h} outlived its parent");
        }
        assert!(get(other).is_some(), "an unrelated handle was removed");
        assert!(!remove(root, |_| true), "a removed handle is gone");
        assert!(remove(other, |_| true));
    }

    #[test]
    fn handles_are_never_reused() {
        let a = insert(0, Object::Doorbell);
        assert!(remove(a, |_| true));
        let b = insert(0, Object::Doorbell);
        assert_ne!(a, b);
        assert!(remove(b, |_| true));
    }
}

// SPDX-License-Identifier: GPL-2.0

//! Building and destroying hardware queues ([`HwQueue`]), with every mailbox sequence they
//! need: the progress fence (a native fence, or a monitored one on a device without 64-bit
//! atomics) registered with the device and mapped in the system address space, in the
//! context's address space and read-only at an mmap offset; for a kernel-mode queue the
//! module-owned ring ([`KernelRing`]); the queue itself (`CREATE_QUEUE`); its two fence logs
//! when the device has native fences. Destroying goes the other way, the device first.

use kernel::{prelude::*, sync::Arc};

use super::{
    doorbell::Doorbells,
    items::Progress,
    kring::{Held, KernelRing},
};
use crate::{
    abi::{
        fence,
        ids::{FenceHandle, QueueId},
        mailbox::{self, Opcode},
        mmu, uapi,
    },
    context::Context,
    fence::{log::Logs, waits::Fences},
    hw::{command::HwGuard, dmamem::DmaBuf, objects::Kind, quarantine::Kept},
};

/// `uapi::CreateQueue::flags` bit the module sets (never userspace, whose flags are checked
/// before): the memory manager's paging queue (`mailbox::QUEUE_FLAG_PAGING`).
pub(crate) const PAGING_QUEUE: u32 = 1 << 31;

/// What building and destroying queues needs of the device besides the core.
pub(crate) struct QueueEnv<'a> {
    /// The fences (progress-fence registration; the core).
    pub(crate) fences: &'a Fences,
    /// The fence logs.
    pub(crate) logs: &'a Logs,
    /// The kernel rings' registry.
    pub(crate) held: &'a Held,
    /// The doorbells (context suspend and resume around the memory manager's moves).
    pub(crate) doorbells: &'a Doorbells,
}

/// A queue's progress fence: a native fence whose CurrentValue page is mapped in the system
/// address space, in the process's GPU address space and (read-only) in the process.
pub(crate) struct ProgressFence {
    /// Global handle.
    pub(crate) handle: FenceHandle,
    /// CurrentValue at offset 0.
    pub(crate) current: Arc<DmaBuf>,
    /// MonitoredValue at offset 0 (system address space only).
    monitored: DmaBuf,
    /// VA of `current` (and `monitored` one page after it) in the system address space.
    sys_va: u64,
    /// VA of `current` in the context's address space.
    pub(crate) proc_va: u64,
    /// mmap offset of `current`, in pages.
    pub(crate) pgoff: u64,
    /// Registered with the device.
    registered: bool,
}

/// A hardware queue as the device knows it.
pub(crate) struct HwQueue {
    /// Device queue id, once created on the device.
    pub(crate) id: Option<QueueId>,
    /// GPU VA of the ring.
    ring_va: u64,
    /// GPU VA of the ring control.
    control_va: u64,
    /// Kernel-mode queues: the module's ring and the work held behind GPU waits.
    pub(crate) kring: Option<Arc<KernelRing>>,
    /// The progress fence.
    pub(crate) fence: Option<ProgressFence>,
}

impl HwQueue {
    /// `CREATE_QUEUE` as `a` asks in `ctx`: kernel-mode (a module-owned ring), or user-mode
    /// with the ring and ring control at `user_ring` (GPU VAs); the progress page's mmap offset
    /// is `pgoff`. On failure what was made is destroyed again (the progress page goes to
    /// `retired`, where the caller reserved room); `kept` is set when the device did not confirm
    /// that destruction (the queue is in quarantine: the caller keeps the user ring's memory).
    ///
    /// # Errors
    ///
    /// `ENOSPC` (ids, VA), `EIO` if the device refuses, `ENOMEM`, `ENODEV`, `ETIMEDOUT`.
    pub(crate) fn create(
        env: &QueueEnv<'_>,
        ctx: &mut Context,
        a: &uapi::CreateQueue,
        pgoff: u64,
        user_ring: Option<(u64, u64)>,
        retired: &mut KVec<Arc<DmaBuf>>,
        kept: &mut bool,
    ) -> Result<Self> {
        let core = env.fences.core();
        let mut hw = core.hw()?;
        let mut q = HwQueue {
            id: None,
            ring_va: 0,
            control_va: 0,
            kring: None,
            fence: None,
        };
        let before = ctx.space.mapped_pages();
        let built = build(env, &mut hw, ctx, &mut q, a, pgoff, user_ring);
        core.add_gpu_pages(before, ctx.space.mapped_pages());
        if let Err(e) = built {
            // A queue made on the device whose destruction the device did not confirm is in
            // quarantine: the caller keeps the ring memory it owns too.
            *kept = !destroy(env, Some(&mut hw), ctx, q, retired);
            return Err(e);
        }
        Ok(q)
    }

    /// Destroys the queue on the device (if `hw`) and unmaps and releases its memory; the
    /// progress page goes to `retired` (the caller reserved room). If the device refuses or
    /// does not answer DESTROY_QUEUE, nothing is unmapped or freed: the queue goes to
    /// quarantine (`Objects::quarantine`, until the device is reset). A kernel ring must be closed first (`KernelRing::close`, before `hw` is taken).
    /// Whether the device confirmed (false: the memory its ring lives in must be kept too).
    pub(crate) fn destroy(
        self,
        env: &QueueEnv<'_>,
        hw: Option<&mut HwGuard<'_>>,
        ctx: &mut Context,
        retired: &mut KVec<Arc<DmaBuf>>,
    ) -> bool {
        destroy(env, hw, ctx, self, retired)
    }

    /// The fault of the queue's context as the device reports it (`QUERY_QUEUE`): its
    /// `engine::FaultReason` and faulting GPU VA, `(0, 0)` for none; `None` for a queue not on
    /// the device.
    ///
    /// # Errors
    ///
    /// `EIO` if the device refuses, `ENODEV`, `ETIMEDOUT`.
    pub(crate) fn fault(&self, hw: &mut HwGuard<'_>) -> Result<Option<(u32, u64)>> {
        let Some(id) = self.id else {
            return Ok(None);
        };
        let mut args = mailbox::QueryQueueArgs {
            id: id.raw(),
            ..Default::default()
        };
        hw.command(Opcode::QueryQueue, &mut args, &[])?;
        Ok(Some((args.fault_reason, args.fault_address)))
    }
}

/// Creates on the device what `q` needs: progress fence, kernel ring (kernel-mode), the queue.
/// On error `q` holds what was made, for [`destroy`].
fn build(
    env: &QueueEnv<'_>,
    hw: &mut HwGuard<'_>,
    ctx: &mut Context,
    q: &mut HwQueue,
    a: &uapi::CreateQueue,
    pgoff: u64,
    user_ring: Option<(u64, u64)>,
) -> Result {
    let core = env.fences.core();
    // The progress fence.
    let current = Arc::new(DmaBuf::new(hw.dev()?, 1)?, GFP_KERNEL_ACCOUNT)?;
    let monitored = DmaBuf::new(hw.dev()?, 1)?;
    monitored.write64(0, fence::MONITORED_VALUE_NONE);
    let handle = core.objects().take_fence_handle();
    let proc_va = ctx.reserve_va(1)?;
    let sys_va = core.map_system(hw, &current, Some(&monitored))?;
    q.fence = Some(ProgressFence {
        handle,
        current: current.clone(),
        monitored,
        sys_va,
        proc_va: 0,
        pgoff,
        registered: false,
    });
    ctx.space.map_buf(hw.dev()?, proc_va, &current, true)?;
    let f = q.fence.as_mut().ok_or(EINVAL)?;
    f.proc_va = proc_va;
    // A device without 64-bit atomics has no native fences (N14), nor has one started with
    // `--no-native-fences`: there the progress fence is a monitored fence (every signal
    // interrupts; 32-bit values without 64-bit atomics).
    let kind = if core.monitored_progress() {
        fence::FenceKind::Monitored
    } else {
        fence::FenceKind::Default
    };
    let location = |address| mailbox::FenceLocation {
        space: mailbox::LOCATION_SYSTEM_VA,
        address,
        ..Default::default()
    };
    // Not counted in `FENCE_DEBUG.registered_fences` (a `CREATE_FENCE` count).
    env.fences.register(
        hw,
        handle,
        kind,
        location(sys_va),
        location(sys_va + mmu::PAGE_SIZE),
        false,
    )?;
    f.registered = true;

    // The queue id comes first: a kernel ring is made for its queue, since naming the queue
    // later would take the ring's lock under the hardware mutex, against the lock order.
    let id = core.objects().take_queue_id().ok_or(ENOSPC)?;
    let progress = Progress {
        va: proc_va,
        handle,
        monitored: kind == fence::FenceKind::Monitored,
    };
    if let Err(e) = make_ring(env, hw, ctx, q, a, id, user_ring, progress) {
        core.objects().put_queue_id(id);
        return Err(e);
    }

    // The queue.
    let mut cq = mailbox::CreateQueueArgs {
        id: id.raw(),
        context: ctx.id().raw(),
        engine: a.engine,
        priority: a.priority,
        flags: if q.kring.is_none() {
            mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION
        } else if a.flags & PAGING_QUEUE != 0 {
            mailbox::QUEUE_FLAG_PAGING
        } else {
            0
        },
        ring_entries: a.ring_entries,
        ring_va: q.ring_va,
        ring_control_va: q.control_va,
        ..Default::default()
    };
    if let Err(e) = hw.command(Opcode::CreateQueue, &mut cq, &[]) {
        core.objects().put_queue_id(id);
        return Err(e);
    }
    q.id = Some(id);
    core.objects().count(Kind::Queue, true);
    if core.info().caps.native_fence() {
        env.logs.attach(hw, id, ctx.id(), handle)?;
    }
    Ok(())
}

/// The ring of queue `id`: the user's (`user_ring`: ring and control VAs) or a new kernel
/// ring with its three ranges mapped. On error `q` holds what was made, for [`destroy`].
#[allow(clippy::too_many_arguments)]
fn make_ring(
    env: &QueueEnv<'_>,
    hw: &mut HwGuard<'_>,
    ctx: &mut Context,
    q: &mut HwQueue,
    a: &uapi::CreateQueue,
    id: QueueId,
    user_ring: Option<(u64, u64)>,
    progress: Progress,
) -> Result {
    if let Some((ring_va, control_va)) = user_ring {
        q.ring_va = ring_va;
        q.control_va = control_va;
        return Ok(());
    }
    let (ring_pages, packet_pages) = KernelRing::pages(a.ring_entries);
    let ring_va = ctx.reserve_va(ring_pages)?;
    let control_va = ctx.reserve_va(1)?;
    let packets_va = ctx.reserve_va(packet_pages)?;
    let kring = KernelRing::new(
        hw.dev()?,
        env.held,
        id,
        ctx.id(),
        a.ring_entries,
        packets_va,
        progress,
    )?;
    // From here `destroy` unmaps all three ranges (unmapping a hole is harmless).
    q.ring_va = ring_va;
    q.control_va = control_va;
    q.kring = Some(kring.clone());
    ctx.space.map_buf(hw.dev()?, ring_va, &kring.ring, false)?;
    ctx.space
        .map_buf(hw.dev()?, control_va, &kring.control, true)?;
    ctx.space
        .map_buf(hw.dev()?, packets_va, &kring.packets, false)
}

/// See [`HwQueue::destroy`].
fn destroy(
    env: &QueueEnv<'_>,
    mut hw: Option<&mut HwGuard<'_>>,
    ctx: &mut Context,
    q: HwQueue,
    retired: &mut KVec<Arc<DmaBuf>>,
) -> bool {
    let core = env.fences.core();
    let before = ctx.space.mapped_pages();
    if let Some(kring) = &q.kring {
        env.held.forget(kring);
    }
    if let Some(id) = q.id {
        // Completes once no engine executes the queue. A queue the device would not destroy
        // keeps its id, so it is never handed out twice.
        let destroyed = match hw.as_deref_mut() {
            Some(hw) => hw.object_command(Opcode::DestroyQueue, id.raw()).is_ok(),
            // Unbound: the unbind revokes the core before it resets the device, so the queue
            // waits in quarantine, which goes with the core (after the reset).
            None => false,
        };
        env.logs.detach(hw.as_deref_mut(), id, destroyed);
        let mut objects = core.objects();
        objects.count(Kind::Queue, false);
        if !destroyed {
            // The device may still run the queue: its ring, ring control, packets and progress
            // pages stay mapped and allocated (quarantine) until the device is reset; freed at
            // once after a reset made it forget the queue.
            if !objects.device_forgot() {
                pr_warn!(
                    "queue {}: the device did not confirm its destruction; its ring and progress pages are kept until the device is reset\n",
                    id.raw()
                );
            }
            objects.quarantine(Kept::Queue, q);
            return false;
        }
        objects.put_queue_id(id);
    }
    if let Some(kring) = &q.kring {
        ctx.space.unmap_range(q.ring_va, kring.ring.pages());
        ctx.space.unmap_range(q.control_va, 1);
        ctx.space
            .unmap_range(kring.packets_va, kring.packets.pages());
    }
    if let Some(f) = q.fence {
        // Unbound (no hardware guard): as for the queue above, the device is reset after the
        // core is revoked, so until then it may still write the fence.
        let unregistered = !f.registered
            || hw.is_some_and(|hw| Fences::unregister_uncounted(hw, f.handle));
        if f.proc_va != 0 {
            ctx.space.unmap_range(f.proc_va, 1);
        }
        if !unregistered {
            // The device may still signal the progress fence: its CurrentValue and
            // MonitoredValue pages stay allocated and mapped in the system address space
            // (quarantine) until the device is reset.
            let mut objects = core.objects();
            if !objects.device_forgot() {
                pr_warn!(
                    "a queue's progress fence {:#x}: the device did not confirm its unregistration; its pages are kept until the device is reset\n",
                    f.handle.raw()
                );
            }
            objects.quarantine(Kept::FencePage, (f.current, f.monitored));
            drop(objects);
            core.add_gpu_pages(before, ctx.space.mapped_pages());
            return true;
        }
        core.release_system(f.sys_va, true);
        drop(f.monitored);
        // `reserve` was called by every caller with a queue to destroy; if the push still
        // fails, the page is freed now, which only a (buggy) mapping could observe.
        let _ = retired.push(f.current, GFP_KERNEL);
    }
    core.add_gpu_pages(before, ctx.space.mapped_pages());
    true
}

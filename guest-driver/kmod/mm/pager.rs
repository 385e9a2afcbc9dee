// SPDX-License-Identifier: GPL-2.0

//! The paging engine of the memory manager: a kernel context of its own with a kernel-mode
//! queue on the copy engine flagged as the paging queue (`mailbox::QUEUE_FLAG_PAGING`, so a
//! device without context save runs it between the parts of a split buffer, SPLIT-04), and a
//! page of paging buffers. Every allocation that prefers VRAM is mapped twice in the paging
//! context: its backing at `sys_va`, and a window at `vram_va` whose entries point at its VRAM
//! range while it is resident. A page-in is one `COPY` `sys_va → vram_va`, a page-out the
//! reverse, run and waited for (the ring's read index) before the caller retargets anything.

use kernel::{
    prelude::*,
    sync::Arc,
    time::{delay::fsleep, Delta},
};

use super::alloc::{Ptes, VidAlloc};
use crate::{
    abi::{engine, ids::ContextId, packet, uapi},
    bindings::signal::fatal_signal_pending,
    context::Context,
    hw::{core::Core, dmamem::DmaBuf, quarantine::Kept},
    queue::{
        build::{HwQueue, QueueEnv, PAGING_QUEUE},
        kring::{Held, KernelRing},
    },
};

/// How long the memory manager waits for one command buffer (a part or a paging buffer).
pub(crate) const RUN_TIMEOUT_MS: u32 = 10_000;

/// An allocation's two mappings in the paging context.
pub(crate) struct PagingMap {
    /// Its backing.
    pub(crate) sys_va: u64,
    /// The window onto its VRAM range.
    pub(crate) vram_va: u64,
    /// The window's leaf entries.
    pub(crate) window: Ptes,
}

/// The paging context, queue and buffer page.
pub(crate) struct Pager {
    ctx: Context,
    /// The paging queue (kept for the device's life; its ring is `ring`).
    _queue: HwQueue,
    ring: Arc<KernelRing>,
    cmd: DmaBuf,
    cmd_va: u64,
}

impl Pager {
    /// Creates the paging context and queue.
    ///
    /// # Errors
    ///
    /// Those of `Context::create` and `HwQueue::create`.
    pub(crate) fn new(env: &QueueEnv<'_>) -> Result<Self> {
        let core = env.fences.core();
        // Room for a failed queue's progress page, taken before the context exists: from
        // `Context::create` on, every way out destroys the context (dropped, it would stay on
        // the device and in the live counts, its ids taken, until the device is reset).
        let mut retired = KVec::new();
        retired.reserve(1, GFP_KERNEL_ACCOUNT)?;
        let mut ctx = Context::create(core)?;
        let a = uapi::CreateQueue {
            engine: engine::ENGINE_COPY,
            priority: engine::PRIORITY_MAX,
            ring_entries: 16,
            flags: PAGING_QUEUE,
            ..Default::default()
        };
        let pgoff = core.objects().new_pgoff(1);
        let queue = match HwQueue::create(env, &mut ctx, &a, pgoff, None, &mut retired, &mut false) {
            Ok(q) => q,
            Err(e) => {
                ctx.destroy(core);
                return Err(e);
            }
        };
        let Some(ring) = queue.kring.clone() else {
            queue.destroy(env, core.hw().ok().as_mut(), &mut ctx, &mut retired);
            ctx.destroy(core);
            return Err(EINVAL);
        };
        let (cmd, cmd_va) = match Self::cmd_page(core, &mut ctx) {
            Ok(c) => c,
            Err(e) => {
                ring.close(env.held);
                queue.destroy(env, core.hw().ok().as_mut(), &mut ctx, &mut retired);
                ctx.destroy(core);
                return Err(e);
            }
        };
        Ok(Self {
            ctx,
            _queue: queue,
            ring,
            cmd,
            cmd_va,
        })
    }

    /// Destroys the paging queue, its command page and the paging context, once the memory
    /// manager maps no allocation there: the device keeps no object for a device with no video
    /// allocation left. A queue or context the device did not confirm destroyed goes to
    /// quarantine (the command page with the queue that may still read it) until the device is
    /// reset.
    pub(crate) fn destroy(self, env: &QueueEnv<'_>) {
        let core = env.fences.core();
        let Self {
            mut ctx,
            _queue: queue,
            ring,
            cmd,
            cmd_va: _,
        } = self;
        let mut retired = KVec::new();
        // Without room the progress page is freed at once, which only a mapping could observe,
        // and the paging queue's pages are never mapped by a process.
        let _ = retired.reserve(1, GFP_KERNEL);
        ring.close(env.held);
        let destroyed = queue.destroy(env, core.hw().ok().as_mut(), &mut ctx, &mut retired);
        if destroyed {
            drop(cmd);
        } else {
            core.objects().quarantine(Kept::QueuePage, cmd);
        }
        ctx.destroy(core);
    }

    /// The paging context's device id.
    pub(crate) fn context_id(&self) -> ContextId {
        self.ctx.id()
    }

    fn cmd_page(core: &Core, ctx: &mut Context) -> Result<(DmaBuf, u64)> {
        let hw = core.hw()?;
        let cmd = DmaBuf::new(hw.dev()?, 1)?;
        let va = ctx.reserve_va(1)?;
        // Counted as the queue's pages are: the context's destruction uncounts every page
        // still mapped in it.
        let before = ctx.space.mapped_pages();
        let mapped = ctx.space.map_buf(hw.dev()?, va, &cmd, false);
        core.add_gpu_pages(before, ctx.space.mapped_pages());
        mapped?;
        Ok((cmd, va))
    }

    /// Maps `a` in the paging context: its backing and a window (onto the backing until the
    /// allocation is placed).
    ///
    /// # Errors
    ///
    /// `ENOSPC` (VA), `ENOMEM`, `ENODEV`; nothing stays mapped.
    pub(crate) fn map(&mut self, core: &Core, a: &VidAlloc) -> Result<PagingMap> {
        let hw = core.hw()?;
        let dev = hw.dev()?;
        let pages = a.pages();
        let sys_va = self.ctx.reserve_va(pages)?;
        let vram_va = self.ctx.reserve_va(pages)?;
        if let Err(e) = a.map(dev, &mut self.ctx.space, sys_va) {
            self.ctx.space.unmap_range(sys_va, pages);
            return Err(e);
        }
        match a.map(dev, &mut self.ctx.space, vram_va) {
            Ok(window) => Ok(PagingMap {
                sys_va,
                vram_va,
                window,
            }),
            Err(e) => {
                self.ctx.space.unmap_range(sys_va, pages);
                self.ctx.space.unmap_range(vram_va, pages);
                Err(e)
            }
        }
    }

    /// Unmaps what [`Self::map`] mapped for an allocation of `pages` pages.
    pub(crate) fn unmap(&mut self, m: &PagingMap, pages: usize) {
        self.ctx.space.unmap_range(m.sys_va, pages);
        self.ctx.space.unmap_range(m.vram_va, pages);
    }

    /// Runs one paging buffer: `COPY` of `size` bytes from `src` to `dst` (paging-context VAs),
    /// and waits until it has run.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT`, and those of `KernelRing::submit_raw`.
    pub(crate) fn copy(&self, held: &Held, src: u64, dst: u64, size: u64) -> Result {
        let p = packet::Copy {
            header: packet::header(packet::Opcode::Copy, 6),
            size: u32::try_from(size)?,
            src_va: src,
            dst_va: dst,
        };
        packet::validate(kernel::transmute::AsBytes::as_bytes(&p)).map_err(|_| EINVAL)?;
        self.cmd.write_bytes(0, kernel::transmute::AsBytes::as_bytes(&p));
        // CAST: a 24-byte packet.
        let end = self.ring.submit_raw(held, self.cmd_va, core::mem::size_of_val(&p) as u32, 0)?;
        wait_ring(held.core(), &self.ring, end)
    }
}

/// Waits until the paging queue's `ring` has executed up to index `end` (by the device's own
/// read index, `KernelRing::done`): `ETIMEDOUT` after [`RUN_TIMEOUT_MS`]. Not ended by a signal:
/// a paging buffer left queued would still write its destination, a VRAM range the memory
/// manager may have given to another allocation by then.
///
/// # Errors
///
/// As above, and the errors of asking the device.
fn wait_ring(core: &Core, ring: &KernelRing, end: u32) -> Result {
    wait(core, ring, end, None, false)
}

/// Waits until a queue's `ring` has executed a split part up to index `end`: `EIO` once `lost`
/// (a context fault check) says the work can no longer run, `EINTR` once the caller is killed
/// (its contexts are suspended as its file is released), `ETIMEDOUT` after [`RUN_TIMEOUT_MS`].
///
/// # Errors
///
/// As above, and the errors of asking the device.
pub(crate) fn wait_part(core: &Core, ring: &KernelRing, end: u32, lost: &dyn Fn() -> bool) -> Result {
    wait(core, ring, end, Some(lost), true)
}

fn wait(
    core: &Core,
    ring: &KernelRing,
    end: u32,
    lost: Option<&dyn Fn() -> bool>,
    killable: bool,
) -> Result {
    for _ in 0..RUN_TIMEOUT_MS {
        if ring.done(core, end)? {
            return Ok(());
        }
        if lost.is_some_and(|f| f()) {
            return Err(EIO);
        }
        if killable && fatal_signal_pending() {
            return Err(EINTR);
        }
        fsleep(Delta::from_millis(1));
    }
    Err(ETIMEDOUT)
}

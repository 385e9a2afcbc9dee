//! Systematic fault injection (no rule family): each memory allocation the module makes while it
//! creates an object is failed in turn, one run per allocation, through the kernel's per-task
//! `fail-nth` (the way syzkaller drives it), and after each failure the module must still be
//! sound: the same call without a failure succeeds (no id or device object was lost to the
//! failure) and every object goes when the file closes. The debug kernel has the kernel's fault
//! injection; the distro kernel does not (a SKIP marked as the kernel's).

use std::path::Path;

use belfry_abi::uapi;

use crate::harness::fail_inject::NthFailure;
use crate::harness::raw::{errno_name, live_objects, RawDev};
use crate::support::work::live_objects_return;
use crate::{skip_kernel_lacks, Test, TestResult};

/// The most allocations one creation is expected to make; a creation still making allocations
/// past it fails the test (its error paths would go untested).
const MAX_ALLOCATIONS: u32 = 128;

/// What a creation needs before it runs: a context, and the ring pages of a user-mode queue.
struct Setup {
    dev: RawDev,
    ctx: u32,
    ring: (u32, u32),
}

/// One creation under test, on a fresh file with its [`Setup`] made.
type Creation = fn(&Setup) -> Result<(), i32>;

/// The creations, by name: what a process does to get each kind of object.
const CREATIONS: [(&str, Creation); 8] = [
    ("CREATE_CONTEXT", |s| s.dev.create_context().map(drop)),
    ("ALLOC", |s| s.dev.alloc(s.ctx, 4096).map(drop)),
    ("CREATE_QUEUE (kernel-mode)", |s| s.dev.create_queue(s.ctx, None, 16).map(drop)),
    ("CREATE_QUEUE (user-mode) and CREATE_DOORBELL", |s| {
        let q = s.dev.create_queue(s.ctx, Some(s.ring), 16)?;
        s.dev.create_doorbell(q.handle).map(drop)
    }),
    ("CREATE_FENCE (DEFAULT)", |s| {
        let a = uapi::CreateFence { context: s.ctx, kind: uapi::FENCE_KIND_DEFAULT, ..Default::default() };
        s.dev.create_fence(a).map(drop)
    }),
    ("CREATE_FENCE (MONITORED)", |s| {
        let a = uapi::CreateFence { context: s.ctx, kind: uapi::FENCE_KIND_MONITORED, ..Default::default() };
        s.dev.create_fence(a).map(drop)
    }),
    // The device's only allocations preferring VRAM: each also makes the memory manager's
    // paging context and queue, which go with the allocation.
    ("CREATE_ALLOCATION (VRAM, with the paging context and queue)", |s| {
        s.dev.create_allocation(s.ctx, uapi::SEGMENT_VRAM, uapi::SEGMENT_SYSTEM, 4096).map(drop)
    }),
    ("CREATE_QUEUE (user-mode, ring in VRAM)", |s| s.dev.create_vram_ring_queue(s.ctx, 16).map(drop)),
];

/// A fresh file with a context and two ring pages.
fn setup(path: &Path) -> Result<Setup, crate::Error> {
    let dev = RawDev::open(path)?;
    let ctx = dev.create_context().map_err(errno_name)?;
    let ring = dev.alloc(ctx, 4096).map_err(errno_name)?.handle;
    let control = dev.alloc(ctx, 4096).map_err(errno_name)?.handle;
    Ok(Setup { dev, ctx, ring: (ring, control) })
}

/// Every allocation the module makes (with its code on the stack: `kmalloc`, the kernel's caches
/// and whole pages, its own or the kernel's C on its behalf) while a process creates a context,
/// an allocation, a kernel-mode queue, a user-mode queue with its doorbell, a DEFAULT and a
/// MONITORED fence, an allocation preferring VRAM and a user-mode queue with its ring in VRAM
/// (each the device's only one, so the memory manager makes its paging context and queue for
/// it) is failed in turn, one creation per allocation: each such creation fails
/// with an errno or recovers and succeeds, the same creation without a failure then succeeds on
/// the same file (no id or device object was lost: a command the device carried out is never
/// reported as failed), and once the file is closed the module's live objects are back where
/// they were.
fn each_failed_allocation_of_a_creation_leaves_the_module_sound(path: &Path) -> TestResult {
    let nth = match NthFailure::set_up() {
        Ok(nth) => nth,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return skip_kernel_lacks(format!("fault injection ({e})"))
        }
        Err(e) => return Err(e.into()),
    };
    let probe = RawDev::open(path)?;
    let baseline = live_objects(&probe.debug_stats().map_err(errno_name)?);
    let mut report = Vec::new();
    for (what, create) in CREATIONS {
        let mut failed_with = Vec::new();
        let mut n = 1;
        loop {
            let s = setup(path)?;
            let (result, injected) = nth.fail(n, || create(&s))?;
            if !injected {
                result.map_err(|e| format!("{what} failed with {} with no failure injected", errno_name(e)))?;
                break;
            }
            if let Err(errno) = result {
                failed_with.push(errno);
            }
            create(&s).map_err(|e| {
                format!(
                    "{what} after its allocation {n} failed: the same call without a failure failed with {}",
                    errno_name(e)
                )
            })?;
            drop(s);
            live_objects_return(&probe, baseline).map_err(|now| {
                format!(
                    "{what} with its allocation {n} failed, then the file closed: live objects (contexts, queues, allocations, doorbells, GPU pages) {now:?}, before {baseline:?}"
                )
            })?;
            n += 1;
            ensure!(n <= MAX_ALLOCATIONS, "{what} made more than {MAX_ALLOCATIONS} allocations");
        }
        let errnos: std::collections::BTreeSet<String> = failed_with.iter().map(|&e| errno_name(e)).collect();
        report.push(format!("{what}: {} allocations, {} failed calls ({errnos:?})", n - 1, failed_with.len()));
    }
    println!("fail-nth: {}", report.join("; "));
    Ok(())
}

pub(crate) fn all() -> Vec<Test> {
    vec![test_entry!(each_failed_allocation_of_a_creation_leaves_the_module_sound, Default, [])]
}

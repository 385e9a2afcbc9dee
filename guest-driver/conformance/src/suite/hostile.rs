//! Hostile processes (no rule family): what one process does
//! to its own objects must not reach another process's mappings, and no request may make the
//! kernel warn.

use std::path::Path;

use belfry_abi::mailbox::{MAX_CONTEXTS, MAX_QUEUES};
use belfry_abi::packet::TRANSFER_MAX_BYTES;
use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_abi::uapi_sync;
use std::os::fd::AsFd;

use belfry_umd::{CommandBuffer, Device, FenceFlags, FenceKind};

use crate::harness::channel::{Channel, Side};
use crate::harness::proc::{self, Signal};
use crate::harness::raw::{errno_name, RawDev};
use crate::support::binding::Rebinding;
use crate::support::fixture::{open_context, Fixture};
use crate::support::work::{expect_u32, kernel_queue, live_objects, live_objects_return, user_queue, write32};
use crate::support::{expect_errno, oops_or_warning_taint, wait_until, WAIT};
use crate::support::{kernel_log, meminfo};
use crate::{chain, Test, TestResult};

/// Size of the allocation a doorbell zap must not reach: 1024 pages, so every mmap offset the
/// module hands out early lies inside its page range if the mapping loses its own offset.
const LARGE: u64 = 4 << 20;

/// Isolation of mappings: while process B connects and disconnects (and so zaps) doorbells it
/// created before A's 4 MiB allocation, on two physical doorbells (LRU victimization), every
/// page of A's mapping still reads what A stored, and the mapping keeps its own mmap offset.
fn doorbell_zaps_leave_another_process_allocation_mapped(path: &Path) -> TestResult {
    let ch = Channel::new(WAIT)?;
    let child = proc::spawn("process B", || {
        let dev = Device::open(path)?;
        let ctx = dev.create_context()?;
        let mut queues = (0..3).map(|_| user_queue(&ctx)).collect::<Result<Vec<_>, _>>()?;
        ch.send(Side::Child, 1, None)?;
        ch.recv(Side::Child)?;
        for _ in 0..2 {
            for q in &mut queues {
                q.connect_doorbell()?;
            }
            for q in &mut queues {
                q.disconnect_doorbell(DoorbellStatus::DisconnectedRetry)?;
            }
        }
        ch.send(Side::Child, 2, None)?;
        Ok(())
    })?;
    ch.recv(Side::Parent)?;
    let raw = RawDev::open(path)?;
    let ctx = raw.create_context().map_err(errno_name)?;
    let alloc = raw.alloc(ctx, LARGE).map_err(errno_name)?;
    // CAST: 4 MiB fits in usize.
    let map = raw.map(alloc.mmap_offset, LARGE as usize).map_err(errno_name)?;
    map.stamp_pages(0xB0D1);
    ch.send(Side::Parent, 1, None)?;
    ch.recv(Side::Parent)?;
    child.join()?;
    map.check_stamps(0xB0D1).map_err(|e| format!("A's allocation after B's doorbell connects and disconnects: {e}"))?;
    let shown = map.maps_offset()?;
    ensure!(
        shown == alloc.mmap_offset,
        "A's mapping shows file offset {shown:#x} in /proc/self/maps, not its mmap offset {:#x}",
        alloc.mmap_offset
    );
    Ok(())
}

/// No kernel warning from a size: ALLOC of `QUERY_CAPS.max_allocation` succeeds, the GPU
/// fills all of it (FILL packets), the CPU reads the fill at its first, middle and last word,
/// and the kernel log gains no WARNING or BUG line.
fn the_largest_allocation_is_served_and_filled_without_a_kernel_warning(path: &Path) -> TestResult {
    const VALUE: u32 = 0x5EED_F111;
    let before = kernel_log::warnings()?;
    let (dev, ctx) = open_context(path)?;
    let max = dev.caps().raw.max_allocation;
    let alloc = ctx.alloc(max, 0);
    let after = kernel_log::warnings()?;
    ensure!(
        after.len() == before.len(),
        "ALLOC of max_allocation {max:#x} made the kernel warn: {:?}",
        &after[before.len().min(after.len())..]
    );
    let buf = alloc.map_err(|e| format!("ALLOC of max_allocation {max:#x}: {}", chain(&e)))?;
    let mut q = user_queue(&ctx)?;
    let mut cb = CommandBuffer::new();
    let step = u64::from(TRANSFER_MAX_BYTES);
    for offset in (0..max).step_by(usize::try_from(step)?) {
        // CAST: at most TRANSFER_MAX_BYTES, a u32.
        cb.fill(buf.va_at(offset)?, (max - offset).min(step) as u32, VALUE)?;
    }
    let v = q.submit(&cb)?;
    q.wait(v, WAIT)?;
    for offset in [0, max / 2, max - 4] {
        expect_u32(&buf, offset, VALUE, "the GPU's fill")?;
    }
    let end = kernel_log::warnings()?;
    ensure!(end.len() == before.len(), "the kernel warned: {:?}", &end[before.len().min(end.len())..]);
    Ok(())
}

/// Takes objects with `create` until it is refused: how many it got and the errno, or `None`
/// if it got more than `limit`.
fn take_until_refused(limit: u32, mut create: impl FnMut() -> Result<(), i32>) -> (u32, Option<i32>) {
    let mut taken = 0;
    while taken <= limit {
        match create() {
            Ok(()) => taken += 1,
            Err(e) => return (taken, Some(e)),
        }
    }
    (taken, None)
}

/// Files [`one_process_cannot_take_every_context_or_queue_id_across_its_files`] opens.
const HOG_FILES: usize = 5;

/// Per-process bounds: a process creating contexts until refused, round-robin over
/// [`HOG_FILES`] files of its own, is refused (ENOSPC) before it holds every context id of the
/// device — no more than one process's share across all its files — and another process then
/// still creates a context; the same for queues and INTRA_GPU fences (VRAM fence pages), one
/// context per file kept.
fn one_process_cannot_take_every_context_or_queue_id_across_its_files(path: &Path) -> TestResult {
    let hogs = (0..HOG_FILES).map(|_| RawDev::open(path)).collect::<Result<Vec<_>, _>>()?;
    let firsts = hogs.iter().map(|h| h.create_context().map_err(errno_name)).collect::<Result<Vec<_>, _>>()?;
    let mut turn = 0;
    let (more, refused) = take_until_refused(MAX_CONTEXTS, || {
        turn += 1;
        hogs[turn % HOG_FILES].create_context().map(drop)
    });
    let contexts = more + u32::try_from(HOG_FILES).unwrap_or(0);
    ensure!(
        refused == Some(libc::ENOSPC),
        "CREATE_CONTEXT after {contexts} over {HOG_FILES} files of one process: {:?}, expected ENOSPC",
        refused.map(errno_name)
    );
    ensure!(
        contexts <= MAX_CONTEXTS / 4,
        "one process created {contexts} contexts over {HOG_FILES} files: more than its share ({})",
        MAX_CONTEXTS / 4
    );
    let other = |what: &'static str| {
        proc::spawn("another process", move || {
            let raw = RawDev::open(path)?;
            let ctx = raw
                .create_context()
                .map_err(|e| format!("another process's CREATE_CONTEXT after {what}: {}", errno_name(e)))?;
            raw.create_queue(ctx, None, 16)
                .map_err(|e| format!("another process's CREATE_QUEUE after {what}: {}", errno_name(e)))?;
            raw.create_fence(intra_gpu(ctx))
                .map_err(|e| format!("another process's INTRA_GPU CREATE_FENCE after {what}: {}", errno_name(e)))?;
            Ok(())
        })
    };
    other("one process took its contexts")?.join()?;
    let mut turn = 0;
    let (queues, refused) = take_until_refused(MAX_QUEUES, || {
        turn += 1;
        let i = turn % HOG_FILES;
        hogs[i].create_queue(firsts[i], None, 16).map(drop)
    });
    ensure!(
        refused == Some(libc::ENOSPC),
        "CREATE_QUEUE after {queues} over {HOG_FILES} files of one process: {:?}, expected ENOSPC",
        refused.map(errno_name)
    );
    ensure!(
        queues <= MAX_QUEUES / 4,
        "one process created {queues} queues over {HOG_FILES} files: more than its share ({})",
        MAX_QUEUES / 4
    );
    other("one process took its queues")?.join()?;
    let mut turn = 0;
    let (fences, refused) = take_until_refused(VRAM_FENCE_PAGES, || {
        turn += 1;
        let i = turn % HOG_FILES;
        hogs[i].create_fence(intra_gpu(firsts[i])).map(drop)
    });
    ensure!(
        refused == Some(libc::ENOSPC),
        "INTRA_GPU CREATE_FENCE after {fences} over {HOG_FILES} files of one process: {:?}, expected ENOSPC",
        refused.map(errno_name)
    );
    ensure!(
        fences <= VRAM_FENCE_PAGES / 4,
        "one process created {fences} INTRA_GPU fences (VRAM fence pages) over {HOG_FILES} files: more than its share ({})",
        VRAM_FENCE_PAGES / 4
    );
    other("one process took its VRAM fence pages")?.join()?;
    Ok(())
}

/// The device's VRAM fence pages (one per INTRA_GPU fence).
const VRAM_FENCE_PAGES: u32 = 256;

/// Per-process bounds, not per file: a child process opening [`HOG_FILES`]
/// files is refused (`ENOSPC`) at exactly `MAX_OBJECTS_PER_PROCESS` objects (4 KiB ALLOCs
/// round-robin, one context per file), `MAX_FENCE_EVENT_WAITS_PER_PROCESS` eventfd waits and
/// `MAX_SYNC_EXPORTS_PER_PROCESS` `sync_file` exports (where the kernel has `sync_file`) across
/// all its files, not that many per file. The counts are given back on destroy (a FREE, a
/// destroyed fence: exactly as many more are served) and on release (a new file after the old
/// ones closed takes the whole share again); while the child holds every wait and export it may,
/// another process still registers a wait and exports.
fn one_process_cannot_multiply_its_objects_eventfd_waits_or_sync_exports_by_opening_files(path: &Path) -> TestResult {
    let ch = Channel::new(HOG_PHASE)?;
    let child = proc::spawn("a process with many files", || {
        hog_objects(path)?;
        let held = hog_waits_and_exports(path)?;
        ch.send(Side::Child, 1, None)?;
        ch.recv(Side::Child)?;
        drop(held);
        Ok(())
    })?;
    let other = ch.recv(Side::Parent).and_then(|_| {
        let (dev, ctx) = open_context(path)?;
        let f = ctx.create_fence(FenceKind::Default, 0, 0)?;
        let event = f
            .event(1)
            .map_err(|e| format!("another process's WAIT_FENCE_EVENTFD while one holds its share: {}", chain(&e)))?;
        if dev.caps().sync_file_export() {
            let m = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
            m.export_sync_file(1)
                .map_err(|e| format!("another process's EXPORT_SYNC_FILE while one holds its share: {}", chain(&e)))?;
        }
        drop(event);
        Ok(())
    });
    let _ = ch.send(Side::Parent, 1, None);
    child.join()?;
    other
}

/// How long the parent of [`one_process_cannot_multiply_its_objects_eventfd_waits_or_sync_exports_by_opening_files`]
/// waits for its child to take a whole per-process share (thousands of ioctls): a bound on a
/// work phase, not a deadline under test. The debug kernel (KASAN, kmemleak, `init_on_free=1`)
/// under TCG took longer than [`WAIT`] for it.
const HOG_PHASE: std::time::Duration = std::time::Duration::from_secs(180);

/// A umd error's errno (`EIO` if it carries none), for [`take_until_refused`].
fn umd_errno(e: &belfry_umd::Error) -> i32 {
    e.errno().unwrap_or(libc::EIO)
}

/// [`one_process_cannot_multiply_its_objects_eventfd_waits_or_sync_exports_by_opening_files`]'s
/// objects: ALLOCs round-robin over [`HOG_FILES`] files until refused, a FREE and one more
/// ALLOC, then the files closed and a new one filled again.
fn hog_objects(path: &Path) -> TestResult {
    const MAX: u32 = uapi::MAX_OBJECTS_PER_PROCESS;
    let files = u32::try_from(HOG_FILES)?;
    let hogs = (0..HOG_FILES).map(|_| RawDev::open(path)).collect::<Result<Vec<_>, _>>()?;
    let firsts = hogs.iter().map(|h| h.create_context().map_err(errno_name)).collect::<Result<Vec<_>, _>>()?;
    let mut allocs = Vec::new();
    let mut turn = 0;
    let (more, refused) = take_until_refused(MAX, || {
        turn += 1;
        let i = turn % HOG_FILES;
        hogs[i].alloc(firsts[i], 4096).map(|a| allocs.push((i, a.handle)))
    });
    let objects = more + files;
    ensure!(
        refused == Some(libc::ENOSPC) && objects == MAX,
        "one process held {objects} objects over {HOG_FILES} files, then ALLOC: {:?}; expected ENOSPC at {MAX} (per process)",
        refused.map(errno_name)
    );
    let (i, handle) = allocs.pop().ok_or("no allocation made")?;
    hogs[i].handle_op(uapi::IOCTL_FREE, handle).map_err(errno_name)?;
    let j = (i + 1) % HOG_FILES;
    hogs[j].alloc(firsts[j], 4096).map_err(|e| {
        format!("ALLOC in another file after a FREE at the cap: {}; the freed object still counts", errno_name(e))
    })?;
    drop(hogs);
    let raw = RawDev::open(path)?;
    let ctx = raw.create_context().map_err(|e| {
        format!(
            "CREATE_CONTEXT in a new file after closing the full ones: {}; their objects still count",
            errno_name(e)
        )
    })?;
    let (more, refused) = take_until_refused(MAX, || raw.alloc(ctx, 4096).map(drop));
    ensure!(
        refused == Some(libc::ENOSPC) && more + 1 == MAX,
        "a new file, after the process closed its full ones, held {} objects, then ALLOC: {:?}; expected ENOSPC at {MAX}",
        more + 1,
        refused.map(errno_name)
    );
    Ok(())
}

/// What [`hog_waits_and_exports`] holds: devices, fences, eventfd waits, `sync_file`s.
type Held = (Vec<Device>, Vec<belfry_umd::Fence>, Vec<belfry_umd::FenceEvent>, Vec<std::os::fd::OwnedFd>);

/// [`one_process_cannot_multiply_its_objects_eventfd_waits_or_sync_exports_by_opening_files`]'s
/// waits and exports: registered round-robin on one fence per file of [`HOG_FILES`] until
/// refused, then file 0's fence destroyed and exactly its count served again; what it holds at
/// the end.
fn hog_waits_and_exports(path: &Path) -> Result<Held, crate::Error> {
    let devs = (0..HOG_FILES).map(|_| Device::open(path)).collect::<Result<Vec<_>, _>>()?;
    let ctxs = devs.iter().map(Device::create_context).collect::<Result<Vec<_>, _>>()?;
    let (mut fences, mut events, mut syncs) = (Vec::new(), Vec::new(), Vec::new());
    let mut kinds = vec![(FenceKind::Default, "WAIT_FENCE_EVENTFD", uapi::MAX_FENCE_EVENT_WAITS_PER_PROCESS)];
    if devs[0].caps().sync_file_export() {
        kinds.push((FenceKind::Monitored, "EXPORT_SYNC_FILE", uapi_sync::MAX_SYNC_EXPORTS_PER_PROCESS));
    } else {
        println!("sync_file exports: this kernel has no sync_file: only eventfd waits checked");
    }
    let mut value = 0;
    for (kind, what, max) in kinds {
        let mut fs = ctxs.iter().map(|c| c.create_fence(kind, 0, 0).map(Some)).collect::<Result<Vec<_>, _>>()?;
        let per_file: [std::cell::Cell<u32>; HOG_FILES] = Default::default();
        let mut take = |first: usize, limit: u32, fs: &[Option<belfry_umd::Fence>]| {
            let mut turn = 0;
            take_until_refused(limit, || {
                let i = first + turn % (HOG_FILES - first);
                turn += 1;
                value += 1;
                let f = fs[i].as_ref().ok_or(libc::EBADF)?;
                let r = if kind == FenceKind::Default {
                    f.event(value).map(|e| events.push(e))
                } else {
                    f.export_sync_file(value).map(|s| syncs.push(s))
                };
                r.map(|()| per_file[i].set(per_file[i].get() + 1)).map_err(|e| umd_errno(&e))
            })
        };
        let (taken, refused) = take(0, max, &fs);
        ensure!(
            refused == Some(libc::ENOSPC) && taken == max,
            "{what} after {taken} over {HOG_FILES} files of one process: {:?}; expected ENOSPC at {max} (per process)",
            refused.map(errno_name)
        );
        // Destroying file 0's fence gives back exactly its waits or exports.
        let freed = per_file[0].get();
        drop(fs[0].take());
        let (again, refused) = take(1, max, &fs);
        ensure!(
            refused == Some(libc::ENOSPC) && again == freed,
            "{what} after destroying a fence with {freed} of them: {again} more, then {:?}; expected ENOSPC after {freed}",
            refused.map(errno_name)
        );
        fences.extend(fs.into_iter().flatten());
    }
    Ok((devs, fences, events, syncs))
}

/// A `CREATE_FENCE` argument for an INTRA_GPU fence in context `ctx`.
fn intra_gpu(ctx: u32) -> uapi::CreateFence {
    uapi::CreateFence { context: ctx, kind: uapi::FENCE_KIND_INTRA_GPU, ..Default::default() }
}

/// Freed memory is not hoarded: an allocation still mapped stays readable after `FREE` (until
/// its `munmap`), and 48 allocations of 4 MiB, each mapped, unmapped and freed in turn, leave
/// the guest's MemAvailable within 64 MiB of where it was, the file still open.
fn freed_allocations_are_released_with_their_last_mapping(path: &Path) -> TestResult {
    const ROUNDS: u64 = 48;
    let raw = RawDev::open(path)?;
    let ctx = raw.create_context().map_err(errno_name)?;
    let kept = raw.alloc(ctx, 4096).map_err(errno_name)?;
    let map = raw.map(kept.mmap_offset, 4096).map_err(errno_name)?;
    map.stamp_pages(0xF4EE);
    raw.handle_op(uapi::IOCTL_FREE, kept.handle).map_err(errno_name)?;
    map.check_stamps(0xF4EE).map_err(|e| format!("a mapping after FREE of its allocation: {e}"))?;
    drop(map);
    let before = meminfo::available()?;
    for round in 0..ROUNDS {
        let a = raw.alloc(ctx, LARGE).map_err(|e| format!("ALLOC in round {round}: {}", errno_name(e)))?;
        // CAST: 4 MiB fits in usize.
        drop(raw.map(a.mmap_offset, LARGE as usize).map_err(errno_name)?);
        raw.handle_op(uapi::IOCTL_FREE, a.handle).map_err(errno_name)?;
    }
    let after = meminfo::available()?;
    let lost = before.saturating_sub(after);
    ensure!(
        lost < 64 << 20,
        "MemAvailable fell by {} MiB after {ROUNDS} rounds of 4 MiB ALLOC, mmap, munmap, FREE (file still open)",
        lost >> 20
    );
    Ok(())
}

/// The cgroup v2 hierarchy, mounted there if the guest has not.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The memory cgroup [`allocations_are_charged_to_the_process_memory_cgroup`] makes.
const CGROUP: &str = "/sys/fs/cgroup/belfry-memcg";
/// Its `memory.max`.
const CGROUP_MAX: u64 = 24 << 20;

/// Whether the kernel has cgroup v2 at all (both suite kernels do; the debug kernel's fragment
/// sets `CONFIG_CGROUPS` and `CONFIG_MEMCG` for this test).
fn has_cgroup2() -> Result<bool, crate::Error> {
    Ok(std::fs::read_to_string("/proc/filesystems")?.lines().any(|l| l.split_whitespace().last() == Some("cgroup2")))
}

/// The cgroup v2 hierarchy with the memory controller enabled for its children: mounted at
/// [`CGROUP_ROOT`] if it is not.
fn memory_cgroups() -> TestResult {
    let controllers = format!("{CGROUP_ROOT}/cgroup.controllers");
    if !Path::new(&controllers).exists() {
        let (src, dst, fs) = (c"cgroup2", c"/sys/fs/cgroup", c"cgroup2");
        // SAFETY: NUL-terminated strings; no data.
        let r = unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
        ensure!(r == 0, "mount -t cgroup2 {CGROUP_ROOT}: {}", std::io::Error::last_os_error());
    }
    let have = std::fs::read_to_string(&controllers)?;
    ensure!(have.split_whitespace().any(|c| c == "memory"), "the guest kernel has no memory cgroup controller: {have}");
    std::fs::write(format!("{CGROUP_ROOT}/cgroup.subtree_control"), "+memory")
        .map_err(|e| format!("enabling the memory controller: {e}"))?;
    Ok(())
}

/// A cgroup file's number.
fn cgroup_value(name: &str) -> Result<u64, crate::Error> {
    let text = std::fs::read_to_string(format!("{CGROUP}/{name}"))?;
    Ok(text.trim().parse::<u64>().map_err(|e| format!("{CGROUP}/{name} {text:?}: {e}"))?)
}

/// Allocations are charged to the process (`GFP_KERNEL_ACCOUNT`): a child in a memory cgroup
/// with `memory.max` of 24 MiB sees `memory.current` grow by at least the 4 MiB of each ALLOC,
/// and its ALLOCs are refused with `ENOMEM` before they hold more than the limit; the kernel
/// warns about nothing, and afterwards another process still allocates and the cgroup goes.
/// On a kernel without cgroup v2 it is SKIP (both suite kernels, distro and debug, have memory
/// cgroups).
#[allow(unsafe_code)] // mount(2).
fn allocations_are_charged_to_the_process_memory_cgroup(path: &Path) -> TestResult {
    if !has_cgroup2()? {
        // Both suite kernels have memory cgroups: belfry-rules fails a SKIP no kernel passed.
        return crate::skip_kernel_lacks("cgroup v2 (CONFIG_CGROUPS, CONFIG_MEMCG): nothing to charge to");
    }
    memory_cgroups()?;
    let _ = std::fs::remove_dir(CGROUP);
    std::fs::create_dir(CGROUP).map_err(|e| format!("mkdir {CGROUP}: {e}"))?;
    let warnings_before = kernel_log::warnings()?.len();
    let run = (|| -> TestResult {
        std::fs::write(format!("{CGROUP}/memory.max"), CGROUP_MAX.to_string())?;
        let child = proc::spawn("a process in a memory cgroup", move || {
            std::fs::write(format!("{CGROUP}/cgroup.procs"), std::process::id().to_string())?;
            let raw = RawDev::open(path)?;
            let ctx = raw.create_context().map_err(errno_name)?;
            let before = cgroup_value("memory.current")?;
            let mut kept =
                vec![raw.alloc(ctx, LARGE).map_err(|e| format!("the first 4 MiB ALLOC: {}", errno_name(e)))?];
            let grown = cgroup_value("memory.current")?.saturating_sub(before);
            ensure!(
                grown >= LARGE,
                "memory.current grew by {} KiB after a 4 MiB ALLOC: the allocation is not charged to the process",
                grown >> 10
            );
            let limit = u32::try_from(4 * CGROUP_MAX / LARGE).unwrap_or(u32::MAX);
            let (more, refused) = take_until_refused(limit, || raw.alloc(ctx, LARGE).map(|a| kept.push(a)));
            let held = u64::from(more + 1) * LARGE;
            println!(
                "memory cgroup: {} ALLOCs of 4 MiB served under memory.max {} MiB, then {:?}; memory.current {} MiB",
                more + 1,
                CGROUP_MAX >> 20,
                refused.map(errno_name),
                cgroup_value("memory.current")? >> 20
            );
            ensure!(
                refused == Some(libc::ENOMEM),
                "{} ALLOCs of 4 MiB ({} MiB) under memory.max {} MiB, then {:?}: expected ENOMEM at the limit",
                more + 1,
                held >> 20,
                CGROUP_MAX >> 20,
                refused.map(errno_name)
            );
            ensure!(held <= CGROUP_MAX, "{} MiB allocated under memory.max {} MiB", held >> 20, CGROUP_MAX >> 20);
            Ok(())
        })?;
        child.join()?;
        let warnings = kernel_log::warnings()?;
        ensure!(warnings.len() == warnings_before, "the kernel warned: {:?}", &warnings[warnings_before..]);
        let raw = RawDev::open(path)?;
        let ctx = raw.create_context().map_err(errno_name)?;
        raw.alloc(ctx, LARGE).map_err(|e| format!("another process's 4 MiB ALLOC afterwards: {}", errno_name(e)))?;
        Ok(())
    })();
    let removed = wait_until(WAIT, || std::fs::remove_dir(CGROUP).is_ok());
    run?;
    ensure!(removed, "rmdir {CGROUP} after its process exited: still busy");
    Ok(())
}

/// Processes killed together in each round of [`a_kill_storm_leaves_the_survivors_working`].
const STORM_VICTIMS: u32 = 6;
/// Rounds of [`a_kill_storm_leaves_the_survivors_working`].
const STORM_ROUNDS: u32 = 3;
/// Longest one submission of the surviving process may take while the storms run.
const SURVIVOR_LATENCY: std::time::Duration = std::time::Duration::from_secs(3);

/// A victim of the kill storm: user-mode and kernel-mode queues with work queued (64 KiB fills),
/// a kernel-mode wait on a monitored fence nobody signals with work held behind it, a CPU wait
/// registered on a fence (`FenceEvent`), and a shareable fence imported into a second file.
fn storm_victim(path: &Path, ready: &Signal) -> TestResult {
    let built = (|| -> Result<_, crate::Error> {
        let Fixture { dev, ctx, buf, q: mut um } = Fixture::connected(path)?;
        let mut km = kernel_queue(&ctx)?;
        let mut cb = CommandBuffer::new();
        cb.fill(buf.gpu_va(), u32::try_from(buf.size())?, 0x5707)?;
        for _ in 0..4 {
            um.submit(&cb)?;
            km.submit(&cb)?;
        }
        let held = ctx.create_fence(FenceKind::Monitored, FenceFlags::empty(), 0)?;
        km.wait_fence(&held, 1)?;
        km.submit(&cb)?;
        let shared = ctx.create_fence(FenceKind::Default, FenceFlags::SHAREABLE, 0)?;
        let event = shared.event(7)?;
        let other = Device::open(path)?;
        let other_ctx = other.create_context()?;
        let imported = other_ctx.import_fence(shared.export()?.as_fd())?;
        Ok((dev, ctx, buf, um, km, held, shared, event, other, other_ctx, imported))
    })();
    ready.post(1); // Also on failure, so the parent never blocks.
    let kept = built?;
    std::thread::sleep(std::time::Duration::from_secs(60)); // Killed here.
    drop(kept);
    Ok(())
}

/// A kill storm (IGT `gem_ctx_persistence` style): in each of [`STORM_ROUNDS`] rounds,
/// [`STORM_VICTIMS`] processes holding queued work on both queue kinds, a held monitored wait
/// with work behind it, a registered CPU wait and a fence shared across files are SIGKILLed
/// together while another process submits and waits without pause. The survivor's work all
/// completes, none of its submissions takes longer than [`SURVIVOR_LATENCY`], the module's
/// live objects return to where they were, and the kernel warns about nothing.
fn a_kill_storm_leaves_the_survivors_working(path: &Path) -> TestResult {
    let probe = RawDev::open(path)?;
    let baseline = live_objects(&probe.debug_stats().map_err(errno_name)?);
    let warnings_before = kernel_log::warnings()?.len();
    let (started, stop) = (Signal::new()?, Signal::new()?);
    let (started_ref, stop_ref) = (&started, &stop);
    let survivor = proc::spawn("the surviving process", move || {
        let fixture = Fixture::connected(path);
        started_ref.post(1); // Also on failure, so the parent never blocks.
        let Fixture { buf, mut q, .. } = fixture?;
        let (mut n, mut worst) = (0u32, std::time::Duration::ZERO);
        while !stop_ref.try_take() {
            let t = std::time::Instant::now();
            let v = write32(&mut q, buf.gpu_va(), n)?;
            q.wait(v, WAIT)?;
            worst = worst.max(t.elapsed());
            n += 1;
        }
        expect_u32(&buf, 0, n.wrapping_sub(1), "the survivor's last write")?;
        println!("kill storm: the survivor ran {n} submissions, the slowest in {} ms", worst.as_millis());
        ensure!(n > 0, "the survivor ran no submission during the storms");
        ensure!(worst <= SURVIVOR_LATENCY, "a survivor's submission took {} ms during the storms", worst.as_millis());
        Ok(())
    })?;
    started.take()?;
    for round in 0..STORM_ROUNDS {
        let ready = Signal::new()?;
        let ready_ref = &ready;
        let mut victims = Vec::new();
        for _ in 0..STORM_VICTIMS {
            victims.push(proc::spawn("a kill-storm victim", move || storm_victim(path, ready_ref))?);
        }
        for _ in 0..STORM_VICTIMS {
            ready.take()?;
        }
        let during = live_objects(&probe.debug_stats().map_err(errno_name)?);
        ensure!(during[1] > baseline[1], "round {round}: the victims' queues are not counted: {during:?}");
        // All of them first, then reaped: their teardowns run together (one at a time, each
        // reaped before the next was killed, they left the second vCPU idle).
        for v in &victims {
            v.send_kill();
        }
        for v in victims {
            v.kill().map_err(|e| format!("round {round}: {e}"))?;
        }
    }
    stop.post(1);
    survivor.join()?;
    live_objects_return(&probe, baseline).map_err(|now| {
        format!("after the storms: counts (contexts, queues, allocations, doorbells, GPU pages) {now:?}, baseline {baseline:?}")
    })?;
    let warnings = kernel_log::warnings()?;
    ensure!(warnings.len() == warnings_before, "the kernel warned: {:?}", &warnings[warnings_before..]);
    Ok(())
}

/// A process stores through its mapping of a doorbell it destroyed, `connected` or never
/// connected (the page touched before the destruction, so its page-table entry is there): in a
/// child, which must die of `SIGBUS`. A store that returns landed in a page the module no longer
/// holds (the doorbell's dummy page, freed with it).
fn store_after_destroy_signal(path: &Path, connected: bool) -> Result<Option<i32>, crate::Error> {
    let label = if connected {
        "a process storing into its destroyed doorbell"
    } else {
        "a process storing into its destroyed, never connected doorbell"
    };
    let child = proc::spawn(label, move || {
        let raw = RawDev::open(path)?;
        let ctx = raw.create_context().map_err(errno_name)?;
        let ring = raw.alloc(ctx, 4096).map_err(errno_name)?;
        let control = raw.alloc(ctx, 4096).map_err(errno_name)?;
        let q = raw.create_queue(ctx, Some((ring.handle, control.handle)), 16).map_err(errno_name)?;
        let db = raw.create_doorbell(q.handle).map_err(errno_name)?;
        let map = raw.map(db.doorbell_offset, 4096).map_err(|e| format!("mmap of the doorbell: {}", errno_name(e)))?;
        if connected {
            raw.handle_op(uapi::IOCTL_CONNECT_DOORBELL, db.handle).map_err(errno_name)?;
            // Faults the BAR page in without ringing (the ring is empty).
            map.bytes()?;
        } else {
            map.store_u64(0, 0xD00D_0001);
        }
        raw.handle_op(uapi::IOCTL_DESTROY_DOORBELL, db.handle).map_err(errno_name)?;
        // One word: where the module is wrong, it lands in a page someone else may own now.
        map.store_u64(0, 0xDEAD_D00D_DEAD_D00D);
        Err("the store through the destroyed doorbell's mapping returned".into())
    })?;
    child.end_signal()
}

/// A destroyed doorbell's mapping shows no page: a store through it raises `SIGBUS`, whether the
/// doorbell was connected (its mapping showed the BAR page, then the dummy page) or never
/// connected (it showed the dummy page only), so no store can land in the dummy page the module
/// frees with the doorbell. The module's promise (THREAT_MODEL: a mapping never names a page
/// its owner no longer holds); no rule id.
fn a_destroyed_doorbell_mapping_raises_sigbus_connected_or_not(path: &Path) -> TestResult {
    for connected in [true, false] {
        let what = if connected { "connected" } else { "never connected" };
        match store_after_destroy_signal(path, connected)? {
            Some(libc::SIGBUS) => {}
            Some(sig) => {
                return Err(format!("a store into a destroyed {what} doorbell raised signal {sig}, not SIGBUS").into())
            }
            None => {
                return Err(format!(
                    "a store into a destroyed {what} doorbell did not raise SIGBUS: the process exited (if its \
                     store returned, it landed in a page the doorbell no longer has; its reason is on stderr)"
                )
                .into())
            }
        }
    }
    Ok(())
}

/// Rounds of [`a_ring_in_vram_mapping_is_revoked_at_unbind`].
const VRAM_UNPLUG_ROUNDS: u32 = 2;

/// A process's mapping of its ring in VRAM goes with the binding, in a loop of unbind and bind:
/// after the re-bind, `mmap` on the old file is `ENODEV`, and a store through the old mapping
/// raises `SIGBUS` (the process dies of it) rather than reaching the VRAM BAR page, where the
/// new binding placed another process's ring (the first ring of a fresh binding, at the offset
/// the old ring had when VRAM held nothing else): that ring reads byte for byte what it read
/// before the old process's stores. The device-lost reprobe unbinds through the same path. The
/// module's promise (THREAT_MODEL); no rule id.
fn a_ring_in_vram_mapping_is_revoked_at_unbind(path: &Path) -> TestResult {
    let binding = Rebinding::new(path)?;
    for round in 0..VRAM_UNPLUG_ROUNDS {
        let (ready, rebound) = (Signal::new()?, Signal::new()?);
        let (ready_ref, rebound_ref) = (&ready, &rebound);
        let child = proc::spawn("a process whose ring in VRAM is unplugged", move || {
            let built = (|| -> Result<_, crate::Error> {
                let raw = RawDev::open(path)?;
                let ctx = raw.create_context().map_err(errno_name)?;
                let q = raw
                    .create_vram_ring_queue(ctx, 16)
                    .map_err(|e| format!("CREATE_QUEUE in VRAM: {}", errno_name(e)))?;
                let ring =
                    raw.map(q.ring_mmap_offset, 4096).map_err(|e| format!("mmap of the ring: {}", errno_name(e)))?;
                ring.stamp_pages(0x0DE0 + round);
                ring.check_stamps(0x0DE0 + round).map_err(|e| format!("the ring in VRAM before the unbind: {e}"))?;
                Ok((raw, q, ring))
            })();
            ready_ref.post(1);
            let (raw, q, ring) = built?;
            rebound_ref.take()?; // Unbound and bound again, the new process's ring made.
            match raw.map(q.ring_mmap_offset, 4096) {
                Err(libc::ENODEV) => {}
                other => {
                    let got = other.map(|_| ()).map_err(errno_name);
                    return Err(format!(
                        "mmap of the ring on the old file after the re-bind: {got:?}, expected ENODEV"
                    )
                    .into());
                }
            }
            for at in (0..4096).step_by(8) {
                ring.store_u64(at, 0xBAD0_0000_0000_0000 | at as u64); // CAST: below 4096.
            }
            Err("every store through the ring mapping of the old binding returned".into())
        })?;
        ready.take()?;
        let unbound = binding.unbind();
        let bound = binding.bind();
        let fresh = (|| -> Result<_, crate::Error> {
            unbound.map_err(|e| format!("round {round}: {e}"))?;
            bound.map_err(|e| format!("round {round}: {e}"))?;
            let raw = RawDev::open(path)?;
            let ctx = raw.create_context().map_err(errno_name)?;
            let q =
                raw.create_vram_ring_queue(ctx, 16).map_err(|e| format!("CREATE_QUEUE in VRAM: {}", errno_name(e)))?;
            let ring = raw.map(q.ring_mmap_offset, 4096).map_err(|e| format!("mmap of the ring: {}", errno_name(e)))?;
            let before = ring.bytes()?;
            Ok((raw, ring, before))
        })();
        rebound.post(1);
        let signal = child.end_signal()?;
        let (_raw, ring, before) = fresh?;
        let after = ring.bytes()?;
        let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        ensure!(
            changed == 0,
            "round {round}: the old process's stores through its unplugged ring mapping changed {changed} bytes of \
             the new process's ring in VRAM (the old process ended with signal {signal:?})"
        );
        ensure!(
            signal == Some(libc::SIGBUS),
            "round {round}: a store through a ring-in-VRAM mapping of the old binding ended its process with {signal:?}, \
             not SIGBUS (its reason, if it exited, is on stderr)"
        );
    }
    Ok(())
}

/// Rounds of [`unplug_with_users_in_a_loop_leaves_the_kernel_sound`].
const UNPLUG_ROUNDS: u32 = 4;

/// Unplug with users, in a loop: in each round a process holds a context, a user-mode queue
/// with its doorbell connected, a kernel-mode queue, and a mapped allocation of another file,
/// and a thread submits and waits without pause while the device is unbound and bound again.
/// Only after the new binding does the process probe its old mapping (through the kernel: the
/// old bytes or EFAULT, never a signal) and close everything, late. Each round the submitting
/// thread stops with an error, the old files' SUBMIT and CREATE_CONTEXT fail with ENODEV (they
/// never reach the new binding), the process exits cleanly and the re-bound device runs work;
/// no oops or warning taints the kernel, and across the rounds MemAvailable falls by less than
/// 16 MiB (without KASAN). On the debug kernel KASAN, lockdep and kmemleak watch the same teardowns.
fn unplug_with_users_in_a_loop_leaves_the_kernel_sound(path: &Path) -> TestResult {
    const MAPPED: usize = 64 << 10;
    let binding = Rebinding::new(path)?;
    let taint = oops_or_warning_taint()?;
    let before = meminfo::available()?;
    for round in 0..UNPLUG_ROUNDS {
        let (ready, rebound) = (Signal::new()?, Signal::new()?);
        let (ready_ref, rebound_ref) = (&ready, &rebound);
        let child = proc::spawn("a process whose device is unplugged", move || {
            let built = (|| -> Result<_, crate::Error> {
                let Fixture { dev, ctx, buf, q: mut um } = Fixture::connected(path)?;
                let v = write32(&mut um, buf.gpu_va(), round)?;
                um.wait(v, WAIT)?;
                let km = kernel_queue(&ctx)?;
                let raw = RawDev::open(path)?;
                let raw_ctx = raw.create_context().map_err(errno_name)?;
                let a = raw.alloc(raw_ctx, MAPPED as u64).map_err(errno_name)?;
                let map = raw.map(a.mmap_offset, MAPPED).map_err(errno_name)?;
                map.stamp_pages(0x0AB0 + round);
                Ok((dev, ctx, buf, um, km, raw, map))
            })();
            let (dev, ctx, buf, mut um, mut km, raw, map) = match built {
                Ok(b) => b,
                Err(e) => {
                    ready_ref.post(1);
                    return Err(e);
                }
            };
            let va = buf.gpu_va();
            let submitter = std::thread::spawn(move || {
                let mut done = 0u32;
                loop {
                    if let Err(e) = write32(&mut um, va, done).and_then(|v| um.wait(v, WAIT)) {
                        return (done, e.to_string());
                    }
                    done += 1;
                }
            });
            ready_ref.post(1);
            rebound_ref.take()?; // Unbound and bound again by now.
            let (done, stopped) = submitter.join().map_err(|_| "the submitting thread panicked")?;
            println!("unplug round {round}: {done} submissions before the unbind; then: {stopped}");
            expect_errno(write32(&mut km, va, 1), libc::ENODEV, "the old file's SUBMIT after the re-bind")?;
            expect_errno(dev.create_context(), libc::ENODEV, "the old file's CREATE_CONTEXT after the re-bind")?;
            // The bytes or EFAULT: either is sound; a signal would end this process.
            let _ = map.check_stamps(0x0AB0 + round);
            drop((map, raw, km, buf, ctx, dev));
            Ok(())
        })?;
        ready.take()?;
        std::thread::sleep(std::time::Duration::from_millis(20));
        let unbound = binding.unbind();
        let bound = binding.bind();
        rebound.post(1);
        let joined = child.join();
        unbound.map_err(|e| format!("round {round}: {e}"))?;
        bound.map_err(|e| format!("round {round}: {e}"))?;
        joined.map_err(|e| format!("round {round}: {e}"))?;
        let dev = Device::open(path)?;
        let ctx = dev.create_context()?;
        let buf = ctx.alloc(4096, 0)?;
        let mut q = user_queue(&ctx)?;
        let v = write32(&mut q, buf.gpu_va(), 0xB1ED + round)?;
        q.wait(v, WAIT)?;
        expect_u32(&buf, 0, 0xB1ED + round, &format!("work after re-binding in round {round}"))?;
        let now = oops_or_warning_taint()?;
        ensure!(now == taint, "round {round}: the kernel is tainted by an oops or a warning ({taint:#x} -> {now:#x})");
    }
    if !meminfo::kmemleak_runs() {
        let lost = before.saturating_sub(meminfo::available()?);
        ensure!(lost < 16 << 20, "MemAvailable fell by {} MiB over {UNPLUG_ROUNDS} unplug rounds", lost >> 20);
    }
    Ok(())
}

/// Operations of the fuzzing process in the suite (each child killed mid-way attempts 200 more).
const FUZZ_OPERATIONS: u64 = 4000;

/// The ioctl and mmap fuzzer (`fuzz/`: every ioctl with learned handles, offsets and boundary
/// values, bad argument pointers, mmaps at learned and random offsets read and written
/// through the kernel, random stores into rings and doorbells, files opened and closed, and
/// children SIGKILLed mid-call) runs [`FUZZ_OPERATIONS`] operations in a child with a fresh
/// seed: it never wedges, the kernel warns about nothing, every object it made is gone once
/// its processes are, and the device still runs work (`fuzz::session`).
fn random_ioctls_mmaps_and_kills_leave_the_module_sound(path: &Path) -> TestResult {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64;
    let config = crate::fuzz::Config {
        seed,
        iterations: FUZZ_OPERATIONS,
        child_iterations: 200,
        fork_every: 100,
        threads: 1,
        split_stalls: false,
    };
    let stats = crate::fuzz::session(path, &config)?;
    // `VERBOSE_LOG` is among the ioctls: the switch it may have turned on is device-wide and
    // would change the wait logs of the tests after this one.
    belfry_umd::Device::open(path)?.set_verbose_logging(false)?;
    println!(
        "fuzz: seed {seed}: {} ioctls ({} accepted: {:?}), {} mmaps ({} mapped), {} children killed, {} mapped \
         doorbells destroyed and stored into",
        stats.ioctls,
        stats.accepted,
        stats.accepted_by_name(),
        stats.mmaps,
        stats.mapped,
        stats.kills,
        stats.destroyed_doorbells
    );
    Ok(())
}

/// Threads of the concurrent fuzzer in the suite.
const CONCURRENT_THREADS: u32 = 4;
/// Operations of each of its threads.
const CONCURRENT_OPERATIONS: u64 = 250;

/// The concurrent ioctl and mmap fuzzer (`fuzz/concurrent.rs`): [`CONCURRENT_THREADS`] threads
/// share four files and sixteen mapping slots, so ioctls race the close of their file, stores
/// race the unmap (whole or one page) and the destroy of the doorbell they go to, mmaps race
/// each other, and forked children copy the busy process, fuzz the copies and are killed; with
/// a fresh seed (printed; `belfry-ioctl-fuzz --threads 4 --seed N` replays its choices): no store
/// through a destroyed doorbell's mapping lands, no child crashes, the kernel warns about
/// nothing, every object is gone once the process is, and the device still runs work
/// (`fuzz::session`). Split submissions stall behind a fence another thread signals, through
/// the submitting file or another (`--split-stalls`).
fn concurrent_ioctls_mmaps_closes_and_forks_leave_the_module_sound(path: &Path) -> TestResult {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64;
    let config = crate::fuzz::Config {
        seed,
        iterations: CONCURRENT_OPERATIONS,
        child_iterations: 0,
        fork_every: 200,
        threads: CONCURRENT_THREADS,
        split_stalls: true,
    };
    let start = std::time::Instant::now();
    let stats = crate::fuzz::session(path, &config)?;
    belfry_umd::Device::open(path)?.set_verbose_logging(false)?;
    println!(
        "concurrent fuzz: seed {seed}: {CONCURRENT_THREADS} threads x {CONCURRENT_OPERATIONS} operations in {:.1} s: {}",
        start.elapsed().as_secs_f64(),
        stats.summary()
    );
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(doorbell_zaps_leave_another_process_allocation_mapped, TwoDoorbells, []),
        test_entry!(the_largest_allocation_is_served_and_filled_without_a_kernel_warning, Default, []),
        test_entry!(one_process_cannot_take_every_context_or_queue_id_across_its_files, Default, []),
        test_entry!(
            one_process_cannot_multiply_its_objects_eventfd_waits_or_sync_exports_by_opening_files,
            Default,
            []
        ),
        test_entry!(freed_allocations_are_released_with_their_last_mapping, Default, []),
        test_entry!(random_ioctls_mmaps_and_kills_leave_the_module_sound, Default, []),
        test_entry!(concurrent_ioctls_mmaps_closes_and_forks_leave_the_module_sound, Default, []),
        test_entry!(a_destroyed_doorbell_mapping_raises_sigbus_connected_or_not, Default, []),
        test_entry!(a_ring_in_vram_mapping_is_revoked_at_unbind, Default, []),
        test_entry!(unplug_with_users_in_a_loop_leaves_the_kernel_sound, Default, []),
        test_entry!(a_kill_storm_leaves_the_survivors_working, Default, []),
        test_entry!(allocations_are_charged_to_the_process_memory_cgroup, Default, []),
    ]
}

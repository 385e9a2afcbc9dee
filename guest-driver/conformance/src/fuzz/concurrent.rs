//! The concurrent fuzzer: [`Config::threads`] threads of one process share its device files and
//! mappings, so every operation races the others on the same objects: an ioctl on a file another
//! thread is closing, a store (through the kernel) into a doorbell or ring another thread is
//! unmapping or destroying, an mmap into a range another thread is replacing, a fork while
//! threads hold mappings, and a split submission waiting on the GPU while the others allocate.
//!
//! The shared state is lock-free and never lets a store reach memory the fuzzer did not map
//! from the device: mappings live in fixed slots of one range reserved at the start
//! (`PROT_NONE`); a mapping is made where the kernel chooses and moved into its slot
//! (`mremap`), and unmapped by placing an
//! inaccessible reservation over it (the kernel unmaps the device mapping as `munmap` does, and
//! the range never goes back to the allocator). Stores and loads go through the kernel (a pipe's
//! `read` into the slot, its `write` from it), so a slot without a page answers `EFAULT`, never
//! a signal. Files live in a table of descriptors that a closing thread swaps out before it
//! closes, so each is closed once.
//!
//! Two holes a review reproduced from user space are actions of their own: a mapped doorbell
//! destroyed while the other threads store into it (every store after the destroy must find no
//! page), and a split submission stalled behind a fence that only another thread signals
//! (through the submitting file or another), while the other threads make allocations and close
//! files (neither the memory manager's lock nor the submitting file's may be held across the
//! wait). The stalled submission's parts sit at one split point (equal split
//! offsets).
//!
//! Forked children copy the mappings and descriptors of a busy process, fuzz them with raw
//! system calls only (no allocation: another thread may have held the allocator's lock at the
//! fork), unmap for real, and are SIGKILLed after a random delay.
#![allow(unsafe_code)] // ioctl, mmap, fork and pthread_kill on values this file owns.

use std::ffi::CString;
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use belfry_abi::{ioctls, uapi};
use belfry_umd::{Device, FenceKind};

use crate::support::held_split::held_split;

use super::{
    counted_call, drain, kill_and_reap, makes_objects, pick_ioctl, random_fence, store_through_kernel, AlarmHandler,
    Config, Pool, Progress, Stats, MAX_IOCTLS,
};

/// Device files the threads share.
const FILES: usize = 4;
/// Mapping slots the threads share.
const SLOTS: usize = 16;
/// Pages of one slot: room for the largest mapping the fuzzer makes.
const SLOT_PAGES: usize = 1024;
/// Bytes of one slot.
const SLOT_BYTES: usize = SLOT_PAGES * 4096;
/// Handles and offsets the threads share (the newest replace the oldest).
const SHARED_VALUES: usize = 64;
/// Operations of a forked child before it exits (it is killed sooner, mostly).
const CHILD_OPERATIONS: u32 = 64;
/// Words of a forked child's ioctl argument: the largest size an ioctl code can encode.
const CHILD_ARG_WORDS: usize = 0x4000 / 8;
/// How often the ticker interrupts every thread's blocking call.
const TICK: Duration = Duration::from_millis(50);

/// A mapping slot: the bytes of its fixed range now mapped from the device (0: none), and a
/// count of its changes with the changes in progress, so a thread can tell that the mapping it
/// made is still the one there across a store.
struct Slot {
    len: AtomicUsize,
    writable: AtomicBool,
    /// Changes (mmaps and unmaps) finished.
    changes: AtomicU64,
    /// Changes in progress.
    changing: AtomicU32,
}

impl Slot {
    /// Runs `change` (an mmap or unmap of the slot) counted; with the change count it leaves if
    /// no other change finished meanwhile (else the slot may hold another thread's mapping).
    fn change<T>(&self, change: impl FnOnce() -> T) -> (T, Option<u64>) {
        let before = self.changes.load(Ordering::SeqCst);
        self.changing.fetch_add(1, Ordering::SeqCst);
        let r = change();
        let after = self.changes.fetch_add(1, Ordering::SeqCst);
        self.changing.fetch_sub(1, Ordering::SeqCst);
        (r, (after == before).then_some(after + 1))
    }

    /// The change count if no change is in progress.
    fn settled(&self) -> Option<u64> {
        let n = self.changes.load(Ordering::SeqCst);
        (self.changing.load(Ordering::SeqCst) == 0).then_some(n)
    }
}

/// What the threads share.
struct Board {
    path: CString,
    /// Descriptors of device files (-1: none).
    files: [AtomicI32; FILES],
    /// The reserved range of every slot.
    base: usize,
    slots: [Slot; SLOTS],
    /// Handles any thread learned (0: none yet).
    handles: [AtomicU32; SHARED_VALUES],
    /// mmap offsets any thread learned (0: none yet).
    offsets: [AtomicU64; SHARED_VALUES],
    /// Where the next learned value goes.
    cursor: AtomicUsize,
    /// A split submission is stalled (one at a time: each holds a kernel-mode queue).
    stalling: AtomicBool,
    progress: *const Progress,
}

// SAFETY: `progress` points at a `Progress` (atomics) that outlives every thread of the run;
// the rest are atomics and a C string that is only read.
unsafe impl Sync for Board {}

impl Board {
    fn slot_ptr(&self, slot: usize) -> *mut libc::c_void {
        (self.base + slot * SLOT_BYTES) as *mut libc::c_void
    }

    fn progress(&self) -> &Progress {
        // SAFETY: see `Sync` above.
        unsafe { &*self.progress }
    }

    fn learn(&self, words: &[u64]) {
        for &w in words {
            let i = self.cursor.fetch_add(1, Ordering::Relaxed) % SHARED_VALUES;
            let half = w as u32;
            if half != 0 && half < 1 << 20 {
                self.handles[i].store(half, Ordering::Relaxed);
            }
            if w != 0 && w & 0xfff == 0 && w < 1 << 48 {
                self.offsets[i].store(w, Ordering::Relaxed);
            }
        }
    }

    /// A file descriptor: mostly a shared device file's (which may be closed by now).
    fn fd(&self, rng: &mut fastrand::Rng) -> i32 {
        let fd = self.files[rng.usize(0..FILES)].load(Ordering::Relaxed);
        if fd >= 0 {
            fd
        } else {
            self.files.iter().map(|f| f.load(Ordering::Relaxed)).find(|&f| f >= 0).unwrap_or(-1)
        }
    }
}

/// Runs the concurrent fuzzer on `board.path`: `config.threads` workers of `config.iterations`
/// operations each, and a forked child now and then (`config.fork_every`).
pub(super) fn run(path: CString, config: &Config, progress: &Progress) -> Result<Stats, String> {
    let len = SLOTS * SLOT_BYTES;
    let reserve = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: a fresh inaccessible reservation chosen by the kernel, unmapped at the end.
    let base = unsafe { libc::mmap(core::ptr::null_mut(), len, libc::PROT_NONE, reserve, -1, 0) };
    if base == libc::MAP_FAILED {
        return Err(format!("mmap of the slot range: {}", std::io::Error::last_os_error()));
    }
    let board = Board {
        path,
        files: core::array::from_fn(|_| AtomicI32::new(-1)),
        base: base as usize,
        slots: core::array::from_fn(|_| Slot {
            len: AtomicUsize::new(0),
            writable: AtomicBool::new(false),
            changes: AtomicU64::new(0),
            changing: AtomicU32::new(0),
        }),
        handles: core::array::from_fn(|_| AtomicU32::new(0)),
        offsets: core::array::from_fn(|_| AtomicU64::new(0)),
        cursor: AtomicUsize::new(0),
        stalling: AtomicBool::new(false),
        progress,
    };
    for (i, f) in board.files.iter().enumerate() {
        // The workers need one open file: the first open is retried while it fails for want of
        // memory (`--fail-inject` fails the test's allocations at random), so a run under
        // injection fuzzes instead of ending at its first open. The others are reopened as the
        // workers go.
        let attempts = if i == 0 { FIRST_OPEN_ATTEMPTS } else { 1 };
        f.store(open_device(&board.path, attempts), Ordering::Relaxed);
    }
    let result = if board.files[0].load(Ordering::Relaxed) < 0 {
        Err(format!("open {:?}: {}", board.path, std::io::Error::last_os_error()))
    } else {
        run_threads(&board, config)
    };
    for f in &board.files {
        let fd = f.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: a descriptor of the table, swapped out and closed once.
            unsafe { libc::close(fd) };
        }
    }
    // SAFETY: the range reserved above, with whatever mappings its slots hold.
    unsafe { libc::munmap(base, len) };
    result
}

/// How many times the first open is tried while it fails with `ENOMEM`.
const FIRST_OPEN_ATTEMPTS: u32 = 32;

/// Opens `path` read-write, up to `attempts` times while the open fails with `ENOMEM`; the
/// descriptor, or -1 with `errno` set by the last try.
fn open_device(path: &CString, attempts: u32) -> i32 {
    let mut fd = -1;
    for _ in 0..attempts.max(1) {
        // SAFETY: `path` is a valid C string.
        fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOMEM) {
            break;
        }
    }
    fd
}

fn run_threads(board: &Board, config: &Config) -> Result<Stats, String> {
    // The ticker sends SIGALRM to each worker, so every blocking wait returns.
    let _handler = AlarmHandler::install()?;
    let stop = AtomicBool::new(false);
    let threads: Vec<AtomicU64> = (0..config.threads).map(|_| AtomicU64::new(0)).collect();
    let stats = std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(TICK);
                for t in &threads {
                    let id = t.load(Ordering::Relaxed);
                    if id != 0 {
                        // SAFETY: `id` is a worker's `pthread_t`, set while it runs and cleared
                        // (under the same scope) before it ends.
                        unsafe { libc::pthread_kill(id as libc::pthread_t, libc::SIGALRM) };
                    }
                }
            }
        });
        let workers: Vec<_> = (0..config.threads)
            .map(|i| {
                let me = &threads[i as usize];
                s.spawn(move || {
                    // SAFETY: the calling thread's own id.
                    me.store(unsafe { libc::pthread_self() } as u64, Ordering::Relaxed);
                    let seed = config.seed.wrapping_add(u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    let stats = Worker::new(board, seed, config.split_stalls).run(config);
                    me.store(0, Ordering::Relaxed);
                    stats
                })
            })
            .collect();
        let mut total = Stats::default();
        let mut died = None;
        for w in workers {
            match w.join() {
                Ok(s) => total.add(&s),
                Err(_) => died = Some("a fuzzing thread panicked".to_string()),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let _ = ticker.join();
        died.map_or(Ok(total), Err)
    })?;
    Ok(stats)
}

/// One thread's state.
struct Worker<'b> {
    board: &'b Board,
    rng: fastrand::Rng,
    pool: Pool,
    stats: Stats,
    /// A pipe: bytes written here are read into slots, slots are written here.
    pipe: [i32; 2],
    scratch: Vec<u64>,
    /// Whether [`Self::stall_a_split_submission`] runs ([`Config::split_stalls`]).
    split_stalls: bool,
}

impl<'b> Worker<'b> {
    fn new(board: &'b Board, seed: u64, split_stalls: bool) -> Self {
        let mut pipe = [-1; 2];
        // SAFETY: `pipe` has room for two descriptors.
        unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        Worker {
            board,
            rng: fastrand::Rng::with_seed(seed),
            pool: Pool::default(),
            stats: Stats::default(),
            pipe,
            scratch: vec![0; 1 << 17],
            split_stalls,
        }
    }

    fn run(mut self, config: &Config) -> Stats {
        for _ in 0..config.iterations {
            self.board.progress().ops.fetch_add(1, Ordering::Relaxed);
            if config.fork_every > 0 && self.rng.u64(0..config.fork_every) == 0 {
                self.fork_and_kill();
            } else {
                self.step();
            }
        }
        for fd in self.pipe {
            // SAFETY: this worker's pipe, closed once.
            unsafe { libc::close(fd) };
        }
        self.stats
    }

    fn step(&mut self) {
        match self.rng.u32(0..1000) {
            0..=39 => {
                self.construct();
            }
            40..=589 => self.ioctl(),
            590..=709 => self.mmap(),
            710..=859 => self.poke(),
            860..=909 => self.unmap(),
            910..=939 => self.close_file(),
            940..=969 => self.open_file(),
            970..=989 => self.destroy_a_doorbell_in_use(),
            _ => self.stall_a_split_submission(),
        }
    }

    fn learn(&mut self, words: &[u64]) {
        self.pool.harvest(words);
        self.board.learn(words);
    }

    /// Brings a few values other threads learned into this thread's pool.
    fn borrow_shared(&mut self) {
        for _ in 0..4 {
            let i = self.rng.usize(0..SHARED_VALUES);
            let h = self.board.handles[i].load(Ordering::Relaxed);
            let o = self.board.offsets[i].load(Ordering::Relaxed);
            self.pool.harvest(&[u64::from(h), o]);
        }
    }

    /// A random ioctl on a shared file with an argument built from the pool.
    fn ioctl(&mut self) {
        if self.rng.u32(0..4) == 0 {
            self.borrow_shared();
        }
        let (which, name, code, size) = pick_ioctl(&mut self.rng);
        let mut arg = vec![0u64; size.div_ceil(8).max(1)];
        self.pool.fill(&mut self.rng, &mut arg, size, self.scratch.as_mut_ptr() as u64);
        let fd = self.board.fd(&mut self.rng);
        self.board.progress().last_ioctl.store(u64::from(code), Ordering::Relaxed);
        self.stats.ioctls += 1;
        // SAFETY: `arg` has room for `size` bytes; the descriptor may be closed or reused by
        // another device file meanwhile, which the kernel answers like any other.
        if unsafe { libc::ioctl(fd, code as _, arg.as_mut_ptr()) } == 0 {
            self.stats.accepted += 1;
            self.stats.accepted_by[which] += 1;
            if makes_objects(name) {
                self.learn(&arg[..size.div_ceil(8)]);
            }
        }
    }

    /// A well-formed ioctl, counted and learned from.
    fn call<T>(&mut self, fd: i32, code: u32, arg: &mut T) -> bool {
        let Some(words) = counted_call(&mut self.stats, fd, code, arg) else { return false };
        self.learn(&words);
        true
    }

    /// A context, two allocations, a user-mode queue with a doorbell mapped into a slot and
    /// connected, and a fence, on a shared file: the others find live objects of every kind.
    /// Returns the doorbell (its file, handle, slot, and the slot's change count once it was
    /// mapped there) when it got that far.
    fn construct(&mut self) -> Option<(i32, u32, usize, Option<u64>)> {
        let fd = self.board.fd(&mut self.rng);
        let mut ctx = uapi::CreateContext::default();
        if !self.call(fd, uapi::IOCTL_CREATE_CONTEXT, &mut ctx) {
            return None;
        }
        let mut fence = random_fence(&mut self.rng, ctx.handle);
        self.call(fd, uapi::IOCTL_CREATE_FENCE, &mut fence);
        let mut allocs = [uapi::Alloc { context: ctx.handle, size: 4096, ..Default::default() }; 2];
        for a in &mut allocs {
            if !self.call(fd, uapi::IOCTL_ALLOC, a) {
                return None;
            }
        }
        let mut q = uapi::CreateQueue {
            context: ctx.handle,
            engine: self.rng.u32(0..2),
            priority: 1,
            flags: uapi::QUEUE_USER_MODE_SUBMISSION,
            ring: allocs[0].handle,
            ring_entries: 64,
            ring_control: allocs[1].handle,
            ..Default::default()
        };
        if !self.call(fd, uapi::IOCTL_CREATE_QUEUE, &mut q) {
            return None;
        }
        let mut db = uapi::CreateDoorbell { queue: q.handle, ..Default::default() };
        if !self.call(fd, uapi::IOCTL_CREATE_DOORBELL, &mut db) {
            return None;
        }
        let slot = self.rng.usize(0..SLOTS);
        let mapped = self.map_into(slot, fd, db.doorbell_offset, 4096, true);
        if self.rng.u32(0..4) != 0 {
            self.call(fd, uapi::IOCTL_CONNECT_DOORBELL, &mut uapi::Handle { handle: db.handle, pad: 0 });
        }
        Some((fd, db.handle, slot, mapped))
    }

    /// A doorbell mapped and stored into by other threads, destroyed by this one: a store
    /// through that mapping after the destroy must find no page.
    fn destroy_a_doorbell_in_use(&mut self) {
        let Some((fd, handle, slot, Some(mapped))) = self.construct() else { return };
        // Give the other threads a moment with it (they store into random slots).
        for _ in 0..self.rng.u32(0..4) {
            std::thread::yield_now();
        }
        if self.call(fd, uapi::IOCTL_DESTROY_DOORBELL, &mut uapi::Handle { handle, pad: 0 }) {
            self.stats.destroyed_doorbells += 1;
            // Judged only if no other thread changed the slot since the doorbell was mapped
            // there, before and after the store: then the store went to the doorbell's mapping.
            let s = &self.board.slots[slot];
            if s.settled() == Some(mapped)
                && store_through_kernel(self.pipe, self.board.slot_ptr(slot), 0xA5)
                && s.settled() == Some(mapped)
            {
                self.stats.stores_after_destroy += 1;
            }
        }
    }

    /// A split submission whose part waits on a fence that a helper thread signals after a
    /// random delay, through the submitting file itself or through a second file (the fence
    /// imported there), binding two VRAM allocations at one split point, on a kernel-mode queue
    /// of its own file, while the other threads allocate and close files.
    fn stall_a_split_submission(&mut self) {
        if !self.split_stalls || self.board.stalling.swap(true, Ordering::Acquire) {
            return self.ioctl();
        }
        let delay = Duration::from_micros(u64::from(self.rng.u32(0..30_000)));
        let through_another_file = self.rng.bool();
        let path = std::ffi::OsStr::from_bytes(self.board.path.as_bytes());
        let stalled = (|| -> belfry_umd::Result<()> {
            let dev = Device::open(path)?;
            let ctx = dev.create_context()?;
            let fence = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 0)?;
            let imported = match through_another_file {
                true => Some(Device::open(path)?.create_context()?.import_fence(fence.export()?.as_fd())?),
                false => None,
            };
            let signaller = imported.as_ref().unwrap_or(&fence);
            let mut held = held_split(&dev, &ctx, &fence)?;
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(delay);
                    let _ = signaller.signal(1);
                });
                held.queue.submit(&held.buffer).map(|_| ())
            })
        })();
        self.stats.split_stalls += 1;
        if stalled.is_ok() {
            self.stats.split_stalls_completed += 1;
        }
        self.board.stalling.store(false, Ordering::Release);
    }

    /// Maps `len` bytes of `fd` at `offset` into `slot`, replacing what it held; the slot's
    /// change count after the mapping, if it succeeded.
    fn map_into(&mut self, slot: usize, fd: i32, offset: u64, len: usize, writable: bool) -> Option<u64> {
        self.stats.mmaps += 1;
        let off = libc::off_t::try_from(offset).ok()?;
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        let at = self.board.slot_ptr(slot);
        let s = &self.board.slots[slot];
        let (ok, count) = s.change(|| {
            // Mapped where the kernel chooses first, so a refusal (the common case) leaves the
            // slot as it was, then moved into the slot: a failed MAP_FIXED mmap may unmap the
            // range first and leave a gap any thread's next mmap (a stack, an allocation) could
            // take, where this fuzzer would then store.
            // SAFETY: a new shared mapping chosen by the kernel.
            let p = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, off) };
            if p == libc::MAP_FAILED {
                return false;
            }
            let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
            // SAFETY: moves the mapping made above into `at .. + len`, in the reserved range of
            // `slot`: whatever was mapped there is the fuzzer's own, and it is replaced.
            if unsafe { libc::mremap(p, len, len, flags, at) } == libc::MAP_FAILED {
                // SAFETY: the mapping made above, which stayed where it was.
                unsafe { libc::munmap(p, len) };
                let reserve = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE;
                // SAFETY: the move may have unmapped the slot's range: reserve it again at once
                // (NOREPLACE leaves any mapping still there alone).
                unsafe { libc::mmap(at, len, libc::PROT_NONE, reserve, -1, 0) };
                return false;
            }
            s.writable.store(writable, Ordering::Relaxed);
            s.len.store(len, Ordering::Relaxed);
            true
        });
        if !ok {
            return None;
        }
        self.stats.mapped += 1;
        count
    }

    /// A random mmap of a shared file at a learned or random offset into a random slot.
    fn mmap(&mut self) {
        let fd = self.board.fd(&mut self.rng);
        if self.rng.u32(0..2) == 0 {
            self.borrow_shared();
        }
        let pages = *self.rng.choice(&[1usize, 1, 2, 4, 16, SLOT_PAGES]).unwrap_or(&1);
        let offset = self.pool.offset(&mut self.rng);
        let (slot, writable) = (self.rng.usize(0..SLOTS), self.rng.bool());
        self.map_into(slot, fd, offset, pages * 4096, writable);
        self.poke_slot(slot);
    }

    /// Unmaps a slot, or one page of it (which splits the mapping).
    fn unmap(&mut self) {
        let slot = self.rng.usize(0..SLOTS);
        let len = self.board.slots[slot].len.load(Ordering::Relaxed);
        let (at, bytes) = if len > 4096 && self.rng.bool() {
            (self.rng.usize(0..len / 4096) * 4096, 4096)
        } else {
            self.board.slots[slot].len.store(0, Ordering::Relaxed);
            (0, SLOT_BYTES)
        };
        let reserve = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED;
        // SAFETY: `at .. + bytes` lies in the reserved range of `slot`.
        let ptr = unsafe { self.board.slot_ptr(slot).cast::<u8>().add(at) };
        self.board.slots[slot].change(|| {
            // SAFETY: the reservation replaces (and so unmaps) whatever device mapping was in
            // the slot's range.
            unsafe { libc::mmap(ptr.cast(), bytes, libc::PROT_NONE, reserve, -1, 0) }
        });
        self.stats.unmaps += 1;
    }

    fn poke(&mut self) {
        let slot = self.rng.usize(0..SLOTS);
        self.poke_slot(slot);
    }

    /// Reads part of a slot through the kernel and, if it was mapped writable, stores random
    /// bytes there; a slot without a page answers `EFAULT`.
    fn poke_slot(&mut self, slot: usize) {
        let s = &self.board.slots[slot];
        let len = s.len.load(Ordering::Relaxed).max(4096);
        let at = self.rng.usize(0..len / 8) * 8;
        let n = self.rng.usize(1..=64.min(len - at));
        // SAFETY: `at + n` lies inside the slot's reserved range.
        let ptr = unsafe { self.board.slot_ptr(slot).cast::<u8>().add(at) };
        // SAFETY: the kernel copies from the slot (EFAULT where it shows no page) into our pipe.
        unsafe { libc::write(self.pipe[1], ptr.cast(), n) };
        drain(self.pipe[0]);
        if s.writable.load(Ordering::Relaxed) {
            let bytes: Vec<u8> = (0..n).map(|_| self.pool.byte(&mut self.rng)).collect();
            // SAFETY: `bytes` is a valid buffer; the pipe is this worker's and non-blocking.
            unsafe { libc::write(self.pipe[1], bytes.as_ptr().cast(), n) };
            // SAFETY: the kernel copies into the slot (EFAULT where it cannot).
            unsafe { libc::read(self.pipe[0], ptr.cast(), n) };
            drain(self.pipe[0]);
        }
    }

    /// Closes a shared file, maybe while another thread is inside an ioctl on it.
    fn close_file(&mut self) {
        let i = self.rng.usize(0..FILES);
        let open = self.board.files.iter().filter(|f| f.load(Ordering::Relaxed) >= 0).count();
        if open <= 1 {
            return;
        }
        let fd = self.board.files[i].swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: swapped out of the table, so closed once.
            unsafe { libc::close(fd) };
            self.stats.closes += 1;
        }
    }

    /// Opens the device into an empty entry of the file table.
    fn open_file(&mut self) {
        let i = self.rng.usize(0..FILES);
        if self.board.files[i].load(Ordering::Relaxed) >= 0 {
            return;
        }
        let fd = open_device(&self.board.path, 1);
        if fd >= 0 && self.board.files[i].compare_exchange(-1, fd, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            // SAFETY: our own new descriptor, which lost the race for the entry.
            unsafe { libc::close(fd) };
        }
    }

    /// Forks a child that fuzzes the copied mappings and files with raw system calls, and kills
    /// it after a random delay.
    fn fork_and_kill(&mut self) {
        let seed = self.rng.u64(..);
        let delay = Duration::from_micros(u64::from(self.rng.u32(0..10_000)));
        let mut handles = [0u32; 16];
        for h in &mut handles {
            *h = self.board.handles[self.rng.usize(0..SHARED_VALUES)].load(Ordering::Relaxed);
        }
        // SAFETY: the child calls only async-signal-safe system calls on values it copied
        // (`child`), and `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return;
        }
        if pid == 0 {
            child(self.board, self.pipe, seed, &handles);
        }
        std::thread::sleep(delay);
        let status = kill_and_reap(pid);
        self.stats.kills += 1;
        if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) != libc::SIGKILL {
            self.stats.child_crashes += 1;
        }
    }
}

/// A forked child: [`CHILD_OPERATIONS`] raw stores, loads, ioctls (handles from `handles`),
/// real unmaps and closes on what it inherited, then `_exit`. Allocates nothing.
fn child(board: &Board, pipe: [i32; 2], seed: u64, handles: &[u32; 16]) -> ! {
    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..CHILD_OPERATIONS {
        let slot = rng.usize(0..SLOTS);
        let p = board.slot_ptr(slot);
        match rng.u32(0..10) {
            0..=3 => {
                store_through_kernel(pipe, p, rng.u8(..));
            }
            4..=7 => {
                let (_, code) = ioctls::ALL[rng.usize(0..ioctls::ALL.len().min(MAX_IOCTLS))];
                let mut arg = [0u64; CHILD_ARG_WORDS];
                for w in arg.iter_mut().take(8) {
                    *w = match rng.u32(0..3) {
                        0 => 0,
                        1 => u64::from(handles[rng.usize(0..16)]),
                        _ => rng.u64(..),
                    };
                }
                // SAFETY: `arg` has room for any argument (the size field is 14 bits); a wild
                // value is the module's to refuse.
                unsafe { libc::ioctl(board.fd(&mut rng), code as _, arg.as_mut_ptr()) };
            }
            8 => {
                // SAFETY: the child's own copy of the slot; it does not allocate, so nothing
                // can reuse the range.
                unsafe { libc::munmap(p, SLOT_BYTES) };
            }
            _ => {
                let fd = board.files[rng.usize(0..FILES)].load(Ordering::Relaxed);
                // SAFETY: the child's copy of the descriptor.
                unsafe { libc::close(fd) };
            }
        }
    }
    // SAFETY: ends the child without running the parent's destructors.
    unsafe { libc::_exit(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzzer's own soundness, without the module: on `/dev/zero` (whose mappings are
    /// shared memory), threads mapping, unmapping and storing into slots while others fork never
    /// crash the process or a child.
    #[test]
    fn the_threads_and_their_children_run_on_any_file_without_crashing() {
        let config =
            Config { seed: 7, iterations: 3000, child_iterations: 0, fork_every: 50, threads: 4, split_stalls: true };
        let progress = Progress::default();
        let stats = run(CString::new("/dev/zero").unwrap(), &config, &progress).unwrap();
        assert!(stats.kills > 0 && stats.mapped > 0 && stats.unmaps > 0, "{stats:?}");
        assert_eq!(stats.child_crashes, 0, "{stats:?}");
    }
}

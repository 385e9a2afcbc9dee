//! A syzkaller-style fuzzer of the module's user interface (its ioctls and mmaps):
//! random sequences of every ioctl of [`ioctls::ALL`] with random and boundary arguments,
//! handles and mmap offsets harvested from earlier answers (this file's and other files'), mmaps
//! at random offsets whose pages are then read and written through the kernel, random stores
//! into whatever was mapped (rings and doorbells included, so the device executes garbage),
//! mapped doorbells destroyed and then stored into, file opens and closes, and children that
//! fuzz the same files and are SIGKILLed at a random moment. With [`Config::threads`] above 1
//! the operations run in threads that share the files and mappings ([`concurrent`]), racing
//! each other and forks.
//!
//! Blocking calls cannot wedge it: a 20 ms interval timer interrupts every wait (its handler is
//! installed without `SA_RESTART`). The fuzzer itself checks nothing but its own progress and
//! counts stores into a destroyed doorbell's mapping that landed; the
//! suite's test (`suite/hostile.rs`) and the `belfry-ioctl-fuzz` binary judge the kernel log,
//! the module's object counts and the device afterwards.
#![allow(unsafe_code)] // ioctl, mmap, fork, kill, setitimer and sigaction on values this file owns.

mod concurrent;
mod forked;
mod session;
mod values;

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use belfry_abi::{ioctls, uapi};

pub use forked::run_forked;
pub use session::session;
pub use values::Pool;

/// What a run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// Seed of the pseudo-random sequence (printed, so a failure can be replayed).
    pub seed: u64,
    /// Operations of the main process.
    pub iterations: u64,
    /// Operations each forked child attempts before it is killed.
    pub child_iterations: u64,
    /// One operation in this many forks a child that is SIGKILLed mid-way (0: never).
    pub fork_every: u64,
    /// Threads sharing the files and mappings, each running `iterations` operations (0 or 1:
    /// the single-threaded fuzzer).
    pub threads: u32,
    /// Whether the concurrent fuzzer's threads stall split submissions behind a fence another
    /// file signals (one at a time).
    pub split_stalls: bool,
}

/// What a run did.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Stats {
    /// ioctls issued, and those the module accepted.
    pub ioctls: u64,
    /// ioctls that returned 0.
    pub accepted: u64,
    /// mmaps attempted, and those that succeeded.
    pub mmaps: u64,
    /// mmaps that succeeded.
    pub mapped: u64,
    /// Children forked and killed.
    pub kills: u64,
    /// Mapped doorbells destroyed and then stored into through the kernel.
    pub destroyed_doorbells: u64,
    /// Of those stores, the ones that landed (the session requires 0: the mapping of a
    /// destroyed doorbell shows no page).
    pub stores_after_destroy: u64,
    /// Mappings unmapped, whole or one page (the concurrent fuzzer's).
    pub unmaps: u64,
    /// Shared files closed, maybe under another thread's ioctl (the concurrent fuzzer's).
    pub closes: u64,
    /// Split submissions stalled behind a fence another thread signals, and those that
    /// completed (the concurrent fuzzer's).
    pub split_stalls: u64,
    /// Of those, the ones that completed.
    pub split_stalls_completed: u64,
    /// Forked children that died of a signal other than the SIGKILL that ends them (the
    /// session requires 0: they make raw system calls only).
    pub child_crashes: u64,
    /// Accepted ioctls by position in [`ioctls::ALL`].
    pub accepted_by: [u64; MAX_IOCTLS],
}

/// Room for this many ioctls in [`Stats::accepted_by`].
pub const MAX_IOCTLS: usize = 64;

impl Default for Stats {
    fn default() -> Self {
        Stats {
            ioctls: 0,
            accepted: 0,
            mmaps: 0,
            mapped: 0,
            kills: 0,
            destroyed_doorbells: 0,
            stores_after_destroy: 0,
            unmaps: 0,
            closes: 0,
            split_stalls: 0,
            split_stalls_completed: 0,
            child_crashes: 0,
            accepted_by: [0; MAX_IOCTLS],
        }
    }
}

impl Stats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Stats) {
        self.ioctls += other.ioctls;
        self.accepted += other.accepted;
        self.mmaps += other.mmaps;
        self.mapped += other.mapped;
        self.kills += other.kills;
        self.destroyed_doorbells += other.destroyed_doorbells;
        self.stores_after_destroy += other.stores_after_destroy;
        self.unmaps += other.unmaps;
        self.closes += other.closes;
        self.split_stalls += other.split_stalls;
        self.split_stalls_completed += other.split_stalls_completed;
        self.child_crashes += other.child_crashes;
        for (a, b) in self.accepted_by.iter_mut().zip(other.accepted_by) {
            *a += b;
        }
    }

    /// The counts a run's report prints: ioctls (accepted), mmaps (mapped), unmaps, closes,
    /// children killed, doorbells destroyed under stores and split submissions stalled
    /// (completed), as one line.
    pub fn summary(&self) -> String {
        format!(
            "{} ioctls ({} accepted), {} mmaps ({} mapped), {} unmaps, {} closes, {} children killed, {} doorbells \
             destroyed under stores, {} split submissions stalled ({} completed)",
            self.ioctls,
            self.accepted,
            self.mmaps,
            self.mapped,
            self.unmaps,
            self.closes,
            self.kills,
            self.destroyed_doorbells,
            self.split_stalls,
            self.split_stalls_completed
        )
    }

    /// The accepted ioctls by name, most first.
    pub fn accepted_by_name(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<_> =
            ioctls::ALL.iter().zip(self.accepted_by).filter(|(_, n)| *n > 0).map(|((name, _), n)| (*name, n)).collect();
        v.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        v
    }
}

/// Progress shared with a watcher (e.g. the parent of a forked fuzzer): the operation count
/// and the last ioctl code, so a wedge names where it happened.
#[derive(Debug, Default)]
#[repr(C)]
pub struct Progress {
    /// Operations begun.
    pub ops: AtomicU64,
    /// The last ioctl code issued (0: none yet).
    pub last_ioctl: AtomicU64,
}

/// Most device files one process keeps open.
const MAX_FILES: usize = 4;
/// Most live mappings one process keeps.
const MAX_MAPPINGS: usize = 32;

/// A live mapping.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
    writable: bool,
}

/// One fuzzing process's state.
struct Fuzzer<'a> {
    path: CString,
    rng: fastrand::Rng,
    /// What every file answered (for calls with another file's handles).
    pool: Pool,
    /// What each open file answered: its own handles, which its calls mostly use.
    local: std::collections::HashMap<i32, Pool>,
    files: Vec<i32>,
    maps: Vec<Mapping>,
    stats: Stats,
    progress: &'a Progress,
    /// A pipe: bytes written here are read into mappings, mappings are written here.
    pipe: [i32; 2],
    /// A user buffer whose address stands in for pointer fields.
    scratch: Vec<u64>,
}

/// Runs the fuzzer on `path` as `config` says and returns what it did. Leaves every file and
/// mapping it made closed, every child reaped and the interval timer off.
///
/// # Errors
/// Only a failure to set the run up (open, pipe, timer): what the module answers is never an
/// error here.
pub fn run(path: &Path, config: &Config, progress: &Progress) -> Result<Stats, String> {
    let path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // A fuzzer running as root may set any interrupt moderation interval (`IRQ_MODERATION`):
    // the device's is put back at the end through a file of its own, so later users see the
    // device as it was.
    // SAFETY: `path` is a valid C string.
    let keeper = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if keeper < 0 {
        return Err(format!("open {path:?}: {}", std::io::Error::last_os_error()));
    }
    let mut moderation = uapi::IrqModeration::default();
    // SAFETY: `moderation` has the argument's size; the fd is the fuzzer's own.
    let moderated = unsafe { libc::ioctl(keeper, uapi::IOCTL_IRQ_MODERATION as _, &raw mut moderation) } == 0;
    let stats =
        if config.threads > 1 { concurrent::run(path, config, progress) } else { run_single(path, config, progress) };
    if moderated {
        let mut set = uapi::IrqModeration {
            flags: uapi::IRQ_MODERATION_SET,
            interval_us: moderation.interval_us,
            ..Default::default()
        };
        // SAFETY: as above.
        unsafe { libc::ioctl(keeper, uapi::IOCTL_IRQ_MODERATION as _, &raw mut set) };
    }
    // SAFETY: opened above, closed once.
    unsafe { libc::close(keeper) };
    stats
}

/// The single-threaded fuzzer of [`run`].
fn run_single(path: CString, config: &Config, progress: &Progress) -> Result<Stats, String> {
    let _timer = IntervalTimer::start()?;
    let mut f = Fuzzer::new(path, config.seed, progress)?;
    f.open_file();
    if f.files.is_empty() {
        return Err(format!("open {:?}: {}", f.path, std::io::Error::last_os_error()));
    }
    for _ in 0..config.iterations {
        if config.fork_every > 0 && f.rng.u64(0..config.fork_every) == 0 {
            f.fork_and_kill(config.child_iterations);
        } else {
            f.step();
        }
    }
    Ok(f.finish())
}

impl<'a> Fuzzer<'a> {
    fn new(path: CString, seed: u64, progress: &'a Progress) -> Result<Self, String> {
        let mut pipe = [0; 2];
        // SAFETY: `pipe` has room for two descriptors.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
        }
        Ok(Fuzzer {
            path,
            rng: fastrand::Rng::with_seed(seed),
            pool: Pool::default(),
            local: std::collections::HashMap::new(),
            files: Vec::new(),
            maps: Vec::new(),
            stats: Stats::default(),
            progress,
            pipe,
            // 1 MiB: more than any out-array the module writes (READ_TIMELINE: 256 entries), and
            // big enough that the allocator maps it on its own, away from the heap.
            scratch: vec![0; 1 << 17],
        })
    }

    /// One random operation.
    fn step(&mut self) {
        self.progress.ops.fetch_add(1, Ordering::Relaxed);
        match self.rng.u32(0..1000) {
            0..=39 => self.construct(),
            40..=699 => self.ioctl(),
            700..=829 => self.mmap(),
            830..=939 => self.poke(),
            940..=984 => self.unmap(),
            985..=994 => self.open_file(),
            _ => self.close_file(),
        }
    }

    fn fd(&mut self) -> i32 {
        if self.files.is_empty() || self.rng.u32(0..50) == 0 {
            // Sometimes a descriptor that is not a device file at all.
            return *self.rng.choice(&[-1, 0, self.pipe[0], 1 << 20]).unwrap_or(&-1);
        }
        self.files[self.rng.usize(0..self.files.len())]
    }

    fn open_file(&mut self) {
        if self.files.len() >= MAX_FILES {
            return;
        }
        // SAFETY: `path` is a valid C string.
        let fd = unsafe { libc::open(self.path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd >= 0 {
            self.files.push(fd);
            self.pool.add_fd(fd);
            self.local.insert(fd, Pool::default());
        }
    }

    fn close_file(&mut self) {
        if self.files.len() > 1 {
            let fd = self.files.swap_remove(self.rng.usize(0..self.files.len()));
            self.local.remove(&fd);
            // SAFETY: `fd` was opened by this fuzzer and is closed once.
            unsafe { libc::close(fd) };
        }
    }

    /// A random ioctl with an argument built from the pool; harvests what it returns.
    fn ioctl(&mut self) {
        let (which, name, code, size) = pick_ioctl(&mut self.rng);
        let mut arg = vec![0u64; size.div_ceil(8).max(1)];
        let scratch = self.scratch.as_mut_ptr() as u64;
        let fd = self.fd();
        let pool = match self.local.get(&fd) {
            Some(own) if self.rng.u32(0..10) < 9 => own,
            _ => &self.pool,
        };
        pool.fill(&mut self.rng, &mut arg, size, scratch);
        self.progress.last_ioctl.store(u64::from(code), Ordering::Relaxed);
        self.stats.ioctls += 1;
        // A bad pointer now and then instead of the argument.
        let ptr = match self.rng.u32(0..40) {
            0 => core::ptr::null_mut(),
            1 => 0xffff_8000_0000_0000_u64 as *mut libc::c_void,
            2 => 0x10 as *mut libc::c_void,
            _ => arg.as_mut_ptr().cast(),
        };
        // SAFETY: `ptr` is either `arg` (room for `size` bytes) or an address the kernel must
        // refuse with EFAULT; nothing in this process depends on memory it could reach.
        let r = unsafe { libc::ioctl(fd, code as _, ptr) };
        if r == 0 {
            self.stats.accepted += 1;
            self.stats.accepted_by[which] += 1;
            // Learn only from calls that make objects: their answers hold handles and mmap
            // offsets, where counters (QUERY_CAPS, DEBUG_STATS) would drown them.
            if makes_objects(name) {
                self.pool.harvest(&arg[..size.div_ceil(8)]);
                if let Some(own) = self.local.get_mut(&fd) {
                    own.harvest(&arg[..size.div_ceil(8)]);
                }
            }
        }
    }

    /// A resource constructor (as syzkaller has): a well-formed chain of context, ring and
    /// ring-control allocations, a user- or kernel-mode queue, a doorbell (connected) and a
    /// fence of a random kind on a random file, so the random calls find live objects of every
    /// type. Each answer is learned; the chain stops at the first refusal.
    fn construct(&mut self) {
        let fd = self.fd();
        let mut ctx = uapi::CreateContext::default();
        if !self.call(fd, uapi::IOCTL_CREATE_CONTEXT, &mut ctx) {
            return;
        }
        let mut allocs = [uapi::Alloc { context: ctx.handle, size: 4096, ..Default::default() }; 2];
        for a in &mut allocs {
            if !self.call(fd, uapi::IOCTL_ALLOC, a) {
                return;
            }
        }
        let user_mode = self.rng.bool();
        let mut q = uapi::CreateQueue {
            context: ctx.handle,
            engine: self.rng.u32(0..2),
            priority: 1,
            flags: if user_mode { uapi::QUEUE_USER_MODE_SUBMISSION } else { 0 },
            ring: if user_mode { allocs[0].handle } else { 0 },
            ring_entries: 64,
            ring_control: if user_mode { allocs[1].handle } else { 0 },
            ..Default::default()
        };
        if self.call(fd, uapi::IOCTL_CREATE_QUEUE, &mut q) && user_mode {
            let mut db = uapi::CreateDoorbell { queue: q.handle, ..Default::default() };
            if self.call(fd, uapi::IOCTL_CREATE_DOORBELL, &mut db) {
                if self.rng.u32(0..4) == 0 {
                    self.destroy_mapped_doorbell(fd, &db);
                } else {
                    self.call(fd, uapi::IOCTL_CONNECT_DOORBELL, &mut uapi::Handle { handle: db.handle, pad: 0 });
                }
            }
        }
        let mut fence = random_fence(&mut self.rng, ctx.handle);
        self.call(fd, uapi::IOCTL_CREATE_FENCE, &mut fence);
    }

    /// Maps doorbell `db` of `fd`, maybe connects it and stores into it, destroys it, then
    /// stores into the old mapping through the kernel: that store must find no page (`EFAULT`);
    /// one that lands is counted in [`Stats::stores_after_destroy`].
    fn destroy_mapped_doorbell(&mut self, fd: i32, db: &uapi::CreateDoorbell) {
        let Ok(off) = libc::off_t::try_from(db.doorbell_offset) else { return };
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a new shared one-page mapping chosen by the kernel, unmapped below.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), 4096, prot, libc::MAP_SHARED, fd, off) };
        if p == libc::MAP_FAILED {
            return;
        }
        let mut handle = uapi::Handle { handle: db.handle, pad: 0 };
        if self.rng.bool() {
            self.call(fd, uapi::IOCTL_CONNECT_DOORBELL, &mut handle);
        }
        if self.rng.bool() {
            store_through_kernel(self.pipe, p, 0xA5);
        }
        if self.call(fd, uapi::IOCTL_DESTROY_DOORBELL, &mut handle) {
            self.stats.destroyed_doorbells += 1;
            if store_through_kernel(self.pipe, p, 0xA5) {
                self.stats.stores_after_destroy += 1;
            }
        }
        // SAFETY: the mapping made above, unmapped once.
        unsafe { libc::munmap(p, 4096) };
    }

    /// A well-formed ioctl of [`Self::construct`], counted and learned from like the others.
    fn call<T>(&mut self, fd: i32, code: u32, arg: &mut T) -> bool {
        let Some(answer) = counted_call(&mut self.stats, fd, code, arg) else { return false };
        self.pool.harvest(&answer);
        if let Some(own) = self.local.get_mut(&fd) {
            own.harvest(&answer);
        }
        true
    }

    /// A random mmap of a device file; its pages are read and written through the kernel.
    fn mmap(&mut self) {
        if self.maps.len() >= MAX_MAPPINGS {
            self.unmap();
        }
        let fd = self.fd();
        let pages = *self.rng.choice(&[1usize, 1, 2, 4, 16, 1024]).unwrap_or(&1);
        let len = pages * 4096;
        let writable = self.rng.bool();
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        let offset = match self.local.get(&fd) {
            Some(own) if self.rng.u32(0..10) < 8 => own.offset(&mut self.rng),
            _ => self.pool.offset(&mut self.rng),
        };
        self.stats.mmaps += 1;
        let Ok(off) = libc::off_t::try_from(offset) else { return };
        // SAFETY: a new shared mapping chosen by the kernel, unmapped by `unmap`/`finish`.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, off) };
        if p == libc::MAP_FAILED {
            return;
        }
        self.stats.mapped += 1;
        self.maps.push(Mapping { ptr: p, len, writable });
        self.poke();
    }

    /// Reads a random mapping through the kernel (`write` of it into the pipe, EFAULT where a
    /// page cannot fault in) and stores random bytes into a writable one (`read` from the pipe).
    fn poke(&mut self) {
        if self.maps.is_empty() {
            return;
        }
        let m = &self.maps[self.rng.usize(0..self.maps.len())];
        let at = self.rng.usize(0..m.len / 8) * 8;
        let n = self.rng.usize(1..=64.min(m.len - at));
        // SAFETY: `ptr + at .. + n` lies inside the live mapping; the kernel copies from it and
        // reports a fault as EFAULT rather than a signal.
        let (ptr, writable) = (unsafe { m.ptr.cast::<u8>().add(at) }, m.writable);
        // SAFETY: as above; the pipe is non-blocking and ours.
        unsafe { libc::write(self.pipe[1], ptr.cast(), n) };
        drain(self.pipe[0]);
        if writable {
            let bytes: Vec<u8> = (0..n).map(|_| self.pool.byte(&mut self.rng)).collect();
            // SAFETY: `bytes` is a valid buffer of `n` bytes.
            unsafe { libc::write(self.pipe[1], bytes.as_ptr().cast(), n) };
            // SAFETY: the kernel copies into the mapping (EFAULT where it cannot).
            unsafe { libc::read(self.pipe[0], ptr.cast(), n) };
        }
    }

    fn unmap(&mut self) {
        if !self.maps.is_empty() {
            let m = self.maps.swap_remove(self.rng.usize(0..self.maps.len()));
            // SAFETY: `m` is a live mapping of this fuzzer, unmapped once.
            unsafe { libc::munmap(m.ptr, m.len) };
        }
    }

    /// Forks a child that fuzzes the same files (and opens its own) and SIGKILLs it after a
    /// random delay, or once it finished `iterations`.
    fn fork_and_kill(&mut self, iterations: u64) {
        let seed = self.rng.u64(..);
        let delay_us = self.rng.u32(0..20_000);
        // SAFETY: the fuzzer runs single-threaded; the child only fuzzes and `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return;
        }
        if pid == 0 {
            self.rng.seed(seed);
            for _ in 0..iterations {
                self.step();
            }
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        std::thread::sleep(std::time::Duration::from_micros(u64::from(delay_us)));
        kill_and_reap(pid);
        self.stats.kills += 1;
    }

    fn finish(mut self) -> Stats {
        while !self.maps.is_empty() {
            self.unmap();
        }
        for fd in self.files.drain(..).chain(self.pipe) {
            // SAFETY: descriptors of this fuzzer, closed once.
            unsafe { libc::close(fd) };
        }
        self.stats.clone()
    }
}

/// Whether ioctl `name` makes objects (its answer holds handles and mmap offsets).
fn makes_objects(name: &str) -> bool {
    ["CREATE", "ALLOC", "IMPORT", "EXPORT"].iter().any(|p| name.starts_with(p))
}

/// A random ioctl of [`ioctls::ALL`] (of its first [`MAX_IOCTLS`]) for a fuzzer to issue, a
/// third of the time one that makes objects, so later calls find handles to use: its position,
/// name, code and the argument size its code encodes.
fn pick_ioctl(rng: &mut fastrand::Rng) -> (usize, &'static str, u32, usize) {
    let count = ioctls::ALL.len().min(MAX_IOCTLS);
    let which = if rng.u32(0..3) == 0 {
        let makers: Vec<usize> = (0..count).filter(|&i| makes_objects(ioctls::ALL[i].0)).collect();
        makers[rng.usize(0..makers.len())]
    } else {
        rng.usize(0..count)
    };
    let (name, code) = ioctls::ALL[which];
    (which, name, code, ((code >> 16) & 0x3fff) as usize)
}

/// The argument of a well-formed `CREATE_FENCE` in `context`: a fence of a random kind
/// (`FENCE_KIND_DEFAULT`, `_INTRA_GPU` or `_MONITORED`), shareable half the time.
fn random_fence(rng: &mut fastrand::Rng, context: u32) -> uapi::CreateFence {
    uapi::CreateFence {
        context,
        kind: rng.u32(1..=3),
        flags: if rng.bool() { uapi::FENCE_SHAREABLE } else { 0 },
        ..Default::default()
    }
}

/// Issues the well-formed ioctl `code` on `fd` with `arg` (the uapi struct whose size `code`
/// encodes), counted in `stats` (issued; accepted, by position in [`ioctls::ALL`]); the answer
/// as [`le_words`] if the module accepted it, for the caller to learn from.
fn counted_call<T>(stats: &mut Stats, fd: i32, code: u32, arg: &mut T) -> Option<Vec<u64>> {
    stats.ioctls += 1;
    // SAFETY: `arg` is the uapi struct whose size `code` encodes.
    if unsafe { libc::ioctl(fd, code as _, core::ptr::from_mut(arg)) } != 0 {
        return None;
    }
    stats.accepted += 1;
    if let Some(i) = ioctls::ALL.iter().take(MAX_IOCTLS).position(|&(_, c)| c == code) {
        stats.accepted_by[i] += 1;
    }
    // SAFETY: uapi structs are `repr(C)` structs of integers without padding: every byte of
    // `arg` is initialized.
    let bytes = unsafe { core::slice::from_raw_parts(core::ptr::from_ref(arg).cast::<u8>(), size_of::<T>()) };
    Some(le_words(bytes))
}

/// `bytes` as little-endian 64-bit words, the last one padded with zero bytes.
fn le_words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

/// Stores 8 bytes of `byte` at `p` through the kernel (`read` from `pipe`, a non-blocking pipe
/// of the caller's); whether they landed (where `p` shows no page the kernel answers `EFAULT`).
fn store_through_kernel(pipe: [i32; 2], p: *mut libc::c_void, byte: u8) -> bool {
    drain(pipe[0]);
    let bytes = [byte; 8];
    // SAFETY: `bytes` is a valid buffer of 8 bytes; the pipe is non-blocking and the caller's.
    unsafe { libc::write(pipe[1], bytes.as_ptr().cast(), 8) };
    // SAFETY: the kernel copies into `p` (EFAULT where it shows no page).
    let n = unsafe { libc::read(pipe[0], p, 8) };
    drain(pipe[0]);
    n == 8
}

/// Reads whatever waits in `fd`, the read end of a non-blocking pipe of the caller's.
fn drain(fd: i32) {
    let mut sink = [0u8; 256];
    // SAFETY: reads into a valid buffer from a non-blocking pipe of the caller's.
    while unsafe { libc::read(fd, sink.as_mut_ptr().cast(), sink.len()) } > 0 {}
}

/// SIGKILLs child `pid` and reaps it, retrying the wait across a timer's `EINTR`; its wait
/// status.
fn kill_and_reap(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    // SAFETY: `pid` is the caller's child; killed, then reaped.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        while libc::waitpid(pid, &mut status, 0) < 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
    }
    status
}

/// `ITIMER_REAL` every 20 ms with an [`AlarmHandler`], so every blocking wait returns; both
/// restored on drop (the timer first).
struct IntervalTimer {
    _handler: AlarmHandler,
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// A SIGALRM handler that does nothing and does not restart system calls, so a blocking wait
/// that SIGALRM interrupts returns; the old one restored on drop.
struct AlarmHandler {
    old: libc::sigaction,
}

impl AlarmHandler {
    fn install() -> Result<Self, String> {
        // SAFETY: zeroed `sigaction` is a valid "no flags, empty mask" value.
        let mut new: libc::sigaction = unsafe { core::mem::zeroed() };
        new.sa_sigaction = on_alarm as extern "C" fn(libc::c_int) as usize;
        // SAFETY: zeroed `sigaction` is valid storage for the old action.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: valid pointers to both actions.
        if unsafe { libc::sigaction(libc::SIGALRM, &new, &mut old) } != 0 {
            return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
        }
        Ok(AlarmHandler { old })
    }
}

impl Drop for AlarmHandler {
    fn drop(&mut self) {
        // SAFETY: restores what `install` replaced.
        unsafe { libc::sigaction(libc::SIGALRM, &self.old, core::ptr::null_mut()) };
    }
}

impl IntervalTimer {
    fn start() -> Result<Self, String> {
        let handler = AlarmHandler::install()?;
        let every = libc::timeval { tv_sec: 0, tv_usec: 20_000 };
        let timer = libc::itimerval { it_interval: every, it_value: every };
        // SAFETY: a valid `itimerval`; the old value is not wanted.
        unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, core::ptr::null_mut()) };
        Ok(IntervalTimer { _handler: handler })
    }
}

impl Drop for IntervalTimer {
    fn drop(&mut self) {
        let off = libc::itimerval {
            it_interval: libc::timeval { tv_sec: 0, tv_usec: 0 },
            it_value: libc::timeval { tv_sec: 0, tv_usec: 0 },
        };
        // SAFETY: valid arguments; stops what `start` started (the handler is restored after).
        unsafe { libc::setitimer(libc::ITIMER_REAL, &off, core::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn le_words_reads_little_endian_words_and_pads_the_last() {
        assert_eq!(le_words(&[1, 0, 0, 0, 0, 0, 0, 2, 3, 4]), vec![0x0200_0000_0000_0001, 0x0403]);
        assert!(le_words(&[]).is_empty());
    }
}

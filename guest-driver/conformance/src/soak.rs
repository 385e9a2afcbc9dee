//! The soak (`belfry-soak`, run by `cargo belfry soak --minutes N`): a mixed workload across
//! processes for a set time, with bounds checked while it runs and after.
//!
//! [`Config::workers`] forked processes each loop until the deadline over four kinds of round,
//! picked at random: user-mode submissions through a connected doorbell, kernel-mode
//! submissions, an allocation mapped, stamped, checked and freed, and a process killed with
//! SIGKILL while it submits. Every round opens its own device file, so files, contexts, queues,
//! doorbells and mappings are made and torn down thousands of times.
//!
//! Every [`SAMPLE`] the parent prints the guest's MemAvailable and the module's live objects.
//! The verdict: every worker finished its rounds without an error; the kernel warned about
//! nothing; once the workers are gone the live objects are back to where they were; the guest's
//! MemAvailable ended within [`MEM_BOUND`] of its first sample, taken once the workers had run
//! for [`SAMPLE`] (a leak grows with the rounds after it; the fall before it is the kernel's
//! caches filling once — slab, page lists — as the first processes fork; without KASAN, whose quarantine
//! holds freed memory back: there kmemleak, read by the guest script, is the leak check) and
//! the live objects never exceeded what the workers can hold at once; and the device still runs
//! work. The host side (device RSS, trace size) is judged by the launcher.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use belfry_abi::uapi;

use crate::harness::proc;
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::Fixture;
use crate::support::work::{expect_u32, live_objects, write32};
use crate::support::{kernel_log, meminfo, WAIT};
use crate::Error;

/// How often the parent samples memory and objects.
pub const SAMPLE: Duration = Duration::from_secs(10);
/// How far the guest's MemAvailable may fall from the soak's first sample to its end.
pub const MEM_BOUND: u64 = 32 << 20;
/// Most live objects of one kind (contexts, queues, allocations, doorbells) one worker holds at
/// once: a round's fixture, a killed child's and an allocation's.
const PER_WORKER: u64 = 4;
/// Submissions per submitting round.
const SUBMISSIONS: u32 = 16;
/// Bytes of a round's allocation.
const ALLOCATION: usize = 1 << 20;

/// What to soak and for how long.
#[derive(Debug, Clone)]
pub struct Config {
    /// The device file.
    pub device: PathBuf,
    /// How long the workers run.
    pub duration: Duration,
    /// Worker processes.
    pub workers: u32,
    /// Seed of the workers' choices (each worker adds its index).
    pub seed: u64,
}

/// What a soak did and saw.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Samples taken: (seconds since start, MemAvailable bytes, live objects).
    pub samples: Vec<(u64, u64, [u64; 5])>,
    /// MemAvailable before the workers started and after they ended.
    pub mem_before: u64,
    /// See `mem_before`.
    pub mem_after: u64,
}

/// One round of user-mode (`kernel_mode` false) or kernel-mode submissions, each value checked.
fn submit_round(path: &Path, kernel_mode: bool, tag: u32) -> Result<(), Error> {
    let mut fx = if kernel_mode { Fixture::kernel_mode(path)? } else { Fixture::connected(path)? };
    let mut last = 0;
    for i in 0..SUBMISSIONS {
        last = write32(&mut fx.q, fx.buf.va_at(u64::from(i % 16) * 4)?, tag.wrapping_add(i))?;
    }
    fx.q.wait(last, WAIT)?;
    expect_u32(&fx.buf, u64::from((SUBMISSIONS - 1) % 16) * 4, tag.wrapping_add(SUBMISSIONS - 1), "a soak round")?;
    Ok(())
}

/// One round of an allocation mapped, stamped, checked through the kernel and freed.
fn allocation_round(path: &Path, tag: u32) -> Result<(), Error> {
    let raw = RawDev::open(path)?;
    let ctx = raw.create_context().map_err(errno_name)?;
    let a = raw.alloc(ctx, ALLOCATION as u64).map_err(errno_name)?;
    let map = raw.map(a.mmap_offset, ALLOCATION).map_err(errno_name)?;
    map.stamp_pages(tag);
    map.check_stamps(tag)?;
    drop(map);
    raw.handle_op(uapi::IOCTL_FREE, a.handle).map_err(errno_name)?;
    Ok(())
}

/// One round of a process SIGKILLed `after` into submitting without pause.
fn kill_round(path: &Path, after: Duration) -> Result<(), Error> {
    let victim = proc::spawn("a soak process killed mid-work", || loop {
        submit_round(path, false, 0x50A4)?;
    })?;
    std::thread::sleep(after);
    victim.kill()
}

/// A worker: random rounds until `deadline`; the number of rounds of each kind.
fn worker(path: &Path, seed: u64, deadline: Instant) -> Result<[u64; 4], Error> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut rounds = [0u64; 4];
    while Instant::now() < deadline {
        let kind = rng.usize(..4);
        let tag = rng.u32(..);
        match kind {
            0 => submit_round(path, false, tag),
            1 => submit_round(path, true, tag),
            2 => allocation_round(path, tag),
            _ => kill_round(path, Duration::from_millis(rng.u64(1..40))),
        }
        .map_err(|e| {
            format!("round {} (kind {kind}, seed {seed}): {}", rounds.iter().sum::<u64>(), crate::chain(e.as_ref()))
        })?;
        rounds[kind] += 1;
    }
    println!(
        "belfry-soak: worker {seed}: {} user-mode, {} kernel-mode, {} allocation and {} kill rounds",
        rounds[0], rounds[1], rounds[2], rounds[3]
    );
    Ok(rounds)
}

/// Runs the soak and checks its bounds.
///
/// # Errors
/// A worker failed, the kernel warned, objects were left or exceeded what the workers can hold,
/// MemAvailable fell by [`MEM_BOUND`] or more, or the device no longer runs work.
pub fn run(config: &Config) -> Result<Report, Error> {
    let path = config.device.as_path();
    let warnings_before = kernel_log::warnings()?.len();
    let probe = RawDev::open(path)?;
    let before = live_objects(&probe.debug_stats().map_err(errno_name)?);
    let mut report = Report { mem_before: meminfo::available()?, ..Report::default() };
    let start = Instant::now();
    let deadline = start + config.duration;
    let mut workers = Vec::new();
    for index in 0..config.workers {
        let seed = config.seed.wrapping_add(u64::from(index));
        workers.push(proc::spawn("a soak worker", move || worker(path, seed, deadline).map(drop))?);
    }
    let ceiling = u64::from(config.workers) * PER_WORKER;
    let mut next = start;
    while Instant::now() < deadline {
        next += SAMPLE;
        std::thread::sleep(next.min(deadline).saturating_duration_since(Instant::now()));
        let objects = live_objects(&probe.debug_stats().map_err(errno_name)?);
        let mem = meminfo::available()?;
        let t = start.elapsed().as_secs();
        println!(
            "belfry-soak: {t} s: MemAvailable {} MiB, live contexts/queues/allocations/doorbells/GPU pages {objects:?}",
            mem >> 20
        );
        report.samples.push((t, mem, objects));
        let over = objects[..4].iter().zip(&before[..4]).any(|(now, was)| now.saturating_sub(*was) > ceiling);
        ensure!(!over, "{t} s: live objects {objects:?} exceed what {} workers can hold (at most {ceiling} of each kind above {before:?})", config.workers);
    }
    let mut failures = Vec::new();
    for w in workers {
        if let Err(e) = w.join() {
            failures.push(crate::chain(e.as_ref()));
        }
    }
    ensure!(failures.is_empty(), "{} worker(s) failed (reasons on stderr): {}", failures.len(), failures.join("; "));
    let settle = Instant::now() + WAIT;
    loop {
        let now = probe.debug_stats().map_err(errno_name)?;
        if now.terminations_draining == 0 && live_objects(&now) == before {
            break;
        }
        ensure!(Instant::now() < settle, "objects left after the soak: {:?}, before: {before:?}", live_objects(&now));
        std::thread::sleep(Duration::from_millis(50));
    }
    let warnings = kernel_log::warnings()?;
    ensure!(warnings.len() == warnings_before, "the kernel warned: {:?}", &warnings[warnings_before..]);
    report.mem_after = meminfo::available()?;
    // The baseline is the first sample: the workers' first rounds fill the kernel's caches once.
    let warm = report.samples.first().map_or(report.mem_before, |s| s.1);
    let fell = warm.saturating_sub(report.mem_after);
    if !meminfo::kmemleak_runs() {
        ensure!(
            fell < MEM_BOUND,
            "MemAvailable fell by {} MiB from the first sample to the end of the soak (bound {} MiB; {} MiB before \
             the workers started)",
            fell >> 20,
            MEM_BOUND >> 20,
            report.mem_before >> 20
        );
    }
    submit_round(path, false, 0x50A5)?;
    Ok(report)
}

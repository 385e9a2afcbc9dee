//! A fuzzing session with its verdict: the fuzzer runs in a forked child ([`run_forked`]), no
//! store through the mapping of a doorbell it destroyed may have landed, then the module must be
//! as it was — no kernel warning, no object left behind once the fuzzing
//! processes are gone — and the device must still run work.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{run_forked, Config, Stats};
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::Fixture;
use crate::support::work::{expect_u32, live_objects, write32};
use crate::support::{kernel_log, WAIT};
use crate::Error;

/// How long the fuzzer may run per 1,000 operations (of all its threads) before it counts as
/// wedged.
const DEADLINE_PER_1000: Duration = Duration::from_secs(60);

/// Fuzzes `path` as `config` says and checks the module afterwards.
///
/// # Errors
/// The fuzzer wedged or died, the kernel warned, objects were left, or the device no longer
/// runs work; each message names the seed.
pub fn session(path: &Path, config: &Config) -> Result<Stats, Error> {
    let seed = config.seed;
    let warnings_before = kernel_log::warnings()?.len();
    let probe = RawDev::open(path)?;
    let before = live_objects(&probe.debug_stats().map_err(errno_name)?);
    let operations = config.iterations.saturating_mul(u64::from(config.threads.max(1)));
    let deadline = DEADLINE_PER_1000 * u32::try_from(operations.div_ceil(1000)).unwrap_or(u32::MAX);
    let stats = run_forked(path, config, deadline)?;
    ensure!(
        stats.accepted > 0 && stats.mapped > 0,
        "seed {seed}: the fuzzer reached too little: {} ioctls, accepted {:?}; {} mmaps, {} mapped",
        stats.ioctls,
        stats.accepted_by_name(),
        stats.mmaps,
        stats.mapped
    );
    ensure!(
        stats.stores_after_destroy == 0,
        "seed {seed}: {} of {} stores through the mapping of a destroyed doorbell landed (it must show no page)",
        stats.stores_after_destroy,
        stats.destroyed_doorbells
    );
    ensure!(
        stats.child_crashes == 0,
        "seed {seed}: {} forked children died of a signal other than the SIGKILL that ends them",
        stats.child_crashes
    );
    let settle = Instant::now() + WAIT;
    loop {
        let now = probe.debug_stats().map_err(errno_name)?;
        if now.terminations_draining == 0 && live_objects(&now) == before {
            break;
        }
        ensure!(
            Instant::now() < settle,
            "seed {seed}: objects left after the fuzzing processes ended (contexts, queues, allocations, \
             doorbells, GPU pages): {:?}, before: {before:?}",
            live_objects(&now)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let warnings = kernel_log::warnings()?;
    ensure!(warnings.len() == warnings_before, "seed {seed}: the kernel warned: {:?}", &warnings[warnings_before..]);
    let mut fx = Fixture::connected(path)?;
    let done = write32(&mut fx.q, fx.buf.gpu_va(), 0x00f0_22ed)?;
    fx.q.wait(done, WAIT)?;
    expect_u32(&fx.buf, 0, 0x00f0_22ed, "work submitted after the fuzzing")?;
    Ok(stats)
}

//! The in-guest conformance suite: tests that prove the rules of `docs/RULES.md`
//! through the real module and device.
//!
//! Code map:
//! - [`harness`]: what runs the suite — the registry's types ([`Test`], [`Needs`]), the runner
//!   ([`run`]: device selection from `QUERY_CAPS`, one line per test, the JSON results), rule
//!   [`coverage`], forked processes ([`proc`]), a socket [`channel`] between them, and raw
//!   ioctls ([`raw`]) for what the library refuses to do;
//! - `suite/`: the tests, one file per rule family, named by the rule-id prefix it proves
//!   (`db.rs` proves DB-xx, `fen.rs` FEN-xx, ...; a test citing several families lives with
//!   its main one), plus `isolation.rs` for the process-isolation tests no family names;
//!   `suite/mod.rs` assembles the [`registry`];
//! - [`fuzz`]: the ioctl and mmap fuzzer (random calls with learned handles and offsets, forks
//!   killed mid-way), run by a `hostile.rs` test and by `belfry-ioctl-fuzz` for longer runs;
//! - `support/`: what tests share — the `Fixture` (`support/fixture.rs`: device,
//!   context, allocation, user-mode queue and doorbell in one call), queue and work helpers,
//!   fence and fence-log helpers, module-parameter rebinding, sleeping-wait probes.
//!
//! Each test's doc comment says what it proves in a `proves:` line (which `build.rs` collects
//! for the coverage report); its registry entry repeats the ids, and a unit test checks that
//! they agree.

/// The registry entry of test function `$f`, which needs a device of configuration
/// `Needs::$needs` and proves the rule ids listed (each suite file's `all()` lists its tests).
macro_rules! test_entry {
    ($f:ident, $needs:ident, [$($id:literal),*]) => {
        $crate::Test {
            name: stringify!($f),
            ids: &[$($id),*],
            needs: $crate::Needs::$needs,
            run: $f,
            resources: $crate::harness::resources::declared(stringify!($f)),
            module: module_path!(),
        }
    };
}

/// Fails the test with a formatted reason unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+).into());
        }
    };
}

pub mod fuzz;
pub mod harness;
pub mod soak;
mod suite;
mod support;

pub use harness::registry::{selected, skip_kernel_lacks, Error, Needs, Skip, Test, TestResult};
pub use harness::runner::{chain, incomplete, probe_devices, run, Outcome, Record, Repeat, Report, ITERATION};
pub use harness::{channel, coverage, exec_probe, fail_inject, isolated, proc, raw, resources, runner, shard};

/// Every test, in the order they run.
pub fn registry() -> Vec<Test> {
    suite::all()
}

//! Which build of the device this is, as an input log names it (`record::config_json`): the
//! crate's version, the hash of the sources it was built from (`build.rs`) and whether the
//! test-only fault injections are compiled in. A replay checks it first (`crate::replay`): a
//! log replayed by another build diverges where the builds differ, not where the recorded run
//! went wrong.

/// This build: `belfry-device VERSION (sources HASH)`, `…, with fault injection)` when built
/// with the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
pub const BUILD: &str =
    concat!("belfry-device ", env!("CARGO_PKG_VERSION"), " (sources ", env!("BELFRY_DEVICE_SOURCES"), ")");

/// This build: `belfry-device VERSION (sources HASH)`, `…, with fault injection)` when built
/// with the `fault-injection` feature.
#[cfg(feature = "fault-injection")]
pub const BUILD: &str = concat!(
    "belfry-device ",
    env!("CARGO_PKG_VERSION"),
    " (sources ",
    env!("BELFRY_DEVICE_SOURCES"),
    ", with fault injection)"
);

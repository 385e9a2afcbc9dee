//! The header record that starts a trace file: format version, producer, level and limit,
//! the host clocks at time zero and the device configuration (`DeviceConfig`, serialized).

use serde::Serialize;

use super::TraceLevel;
use crate::config::DeviceConfig;

/// Host clocks at the trace's time zero.
#[derive(Serialize)]
pub(super) struct HeaderClock {
    /// `CLOCK_MONOTONIC` in nanoseconds (the same on every device of one host: it aligns them).
    pub(super) monotonic_ns: u64,
    /// Wall-clock time in nanoseconds since the Unix epoch.
    pub(super) unix_ns: u64,
}

/// The first record of a trace file.
#[derive(Serialize)]
pub(super) struct Header<'a> {
    pub(super) t_ns: u64,
    pub(super) dev: &'a str,
    pub(super) event: &'static str,
    pub(super) format: &'static str,
    pub(super) version: u32,
    pub(super) producer: String,
    pub(super) abi_version: [u32; 2],
    pub(super) level: TraceLevel,
    pub(super) limit_bytes: u64,
    pub(super) clock: HeaderClock,
    /// The device's configuration itself (`DeviceConfig` is serialized, not copied field by
    /// field: every device flag is in the header).
    pub(super) device: &'a DeviceConfig,
}

pub(super) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

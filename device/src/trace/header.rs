//! The header record that starts a trace file (`belfry_trace_schema::Header`): format version,
//! producer, level and limit, the host clocks at time zero and the device configuration
//! (`DeviceConfig`, serialized).

use std::time::SystemTime;

use belfry_trace_schema::{Event, Header, HeaderClock, Record, FORMAT_VERSION};

use super::TraceSettings;
use crate::config::DeviceConfig;

/// The header record of device `config`'s trace written with `settings`, at time zero.
pub(super) fn record(config: &DeviceConfig, settings: TraceSettings) -> Record {
    let header = Header {
        format: "belfry-trace".into(),
        version: FORMAT_VERSION,
        producer: format!("belfry-device {}", env!("CARGO_PKG_VERSION")),
        abi_version: [belfry_abi::regs::VERSION_MAJOR, belfry_abi::regs::VERSION_MINOR],
        level: settings.level,
        limit_bytes: settings.limit_bytes,
        clock: HeaderClock {
            monotonic_ns: monotonic_ns(),
            unix_ns: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                .unwrap_or(0),
        },
        // The device's configuration itself (`DeviceConfig` is serialized, not copied field by
        // field: every device flag is in the header).
        device: serde_json::to_value(config).unwrap_or_default(),
    };
    Record { t_ns: 0, dev: config.name.clone(), event: Event::Header(header) }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

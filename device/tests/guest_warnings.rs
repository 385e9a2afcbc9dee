//! The warnings a guest can cause at will are rate-limited: a process hammering a doorbell
//! page at an offset that names no doorbell (the store a mapped doorbell page allows anywhere
//! in its 4 KiB) adds a logarithmic number of lines to the device's log, each with the count so
//! far, while every store is still counted and refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use belfry_abi::pci;
use belfry_device::config::DeviceConfig;
use belfry_device::device::Device;
use belfry_device::trace::Tracer;

/// The device's log lines at warn level, as the process's logger receives them.
struct Capture {
    lines: Mutex<Vec<String>>,
    warnings: AtomicU64,
}

impl log::Log for Capture {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            self.warnings.fetch_add(1, Ordering::Relaxed);
            self.lines.lock().unwrap().push(record.args().to_string());
        }
    }

    fn flush(&self) {}
}

#[test]
fn stores_at_non_doorbell_offsets_log_rate_limited_lines_with_their_count() {
    let capture: &'static Capture =
        Box::leak(Box::new(Capture { lines: Mutex::new(Vec::new()), warnings: AtomicU64::new(0) }));
    log::set_logger(capture).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let config = DeviceConfig::from_flags(["--name", "belfry9"]).unwrap();
    let device = Device::new(config, Arc::new(Tracer::new("belfry9"))).unwrap();
    const STORES: u64 = 10_000;
    for i in 0..STORES {
        // Inside doorbell page 1, past its doorbell word.
        let offset = pci::DOORBELL_PAGE_SIZE + 8 + (i % 64) * 8;
        device.region_write(pci::DOORBELL_BAR, offset, &i.to_le_bytes()).unwrap();
    }
    let lines = capture.lines.lock().unwrap().clone();
    let ours: Vec<&String> = lines.iter().filter(|l| l.contains("ignored doorbell BAR write")).collect();
    assert_eq!(ours.len(), 14, "the 1st, 2nd, 4th, … 8192nd store: {ours:#?}");
    assert_eq!(capture.warnings.load(Ordering::Relaxed), 14, "nothing else warned: {lines:#?}");
    assert!(ours[13].ends_with("(8192 so far)"), "{}", ours[13]);
    let limiter = &device.warnings.doorbell_offset;
    assert_eq!((limiter.seen(), limiter.logged()), (STORES, 14));
    assert_eq!(device.doorbells.value(1), 0, "no store rang the doorbell");
}

//! What each `--trace-level` costs in device throughput: a measurement, not a check (ignored by
//! default). Run it with an optimised device:
//!
//! ```sh
//! cargo test --release -p belfry-device --test trace_overhead -- --ignored --nocapture
//! ```
//!
//! Two workloads per level, each on a user-mode queue rung through its doorbell: *packets*
//! (batches of 15 command buffers of 256 `WRITE_DATA32` packets; packets per second) and
//! *submissions* (one single-packet buffer per doorbell write, waited for; round trips per
//! second). The results are in docs/BENCHMARKS.md, "Trace levels".

mod common;

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_abi::mailbox::Status;
use belfry_abi::pci;
use common::gpu::*;

const PACKETS_PER_BUFFER: usize = 256;
const PACKET_BATCHES: usize = 150;
const ROUND_TRIPS: usize = 5000;
/// Runs per level; the median is reported.
const RUNS: usize = 3;

/// Busy-waits (yielding) until `q`'s read index reaches its write index.
fn drain_now(g: &Gpu, q: &QueueRef) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while g.read_index(q) != q.write_index {
        assert!(Instant::now() < deadline, "queue {} did not drain", q.id);
        std::thread::yield_now();
    }
}

/// Appends a ring entry for the buffer at `va` of `bytes` and publishes the write index.
fn append(g: &Gpu, q: &mut QueueRef, va: u64, bytes: usize) {
    let slot = u64::from(q.write_index % q.entries);
    let entry = belfry_abi::ring::RingEntry { cmdbuf_va: va, size_bytes: bytes as u32, flags: 0 };
    g.ram.write_all_at(&to_bytes(&entry), q.ring_pa + slot * 16).unwrap();
    q.write_index = q.write_index.wrapping_add(1);
    g.ram.write_all_at(&q.write_index.to_le_bytes(), q.control_pa).unwrap();
}

fn ring(g: &mut Gpu, q: &QueueRef) {
    g.c.write32(pci::DOORBELL_BAR, pci::doorbell_offset(q.doorbell.unwrap()) as u32, q.write_index);
}

/// (packets per second, round trips per second, trace bytes) at `level`.
fn measure(level: &str) -> (f64, f64, u64) {
    let mut g = Gpu::start(&["--trace-level", level]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 0), Status::Ok);
    let (dst, _) = g.buffer(p, 1);
    let big: Vec<u8> =
        (0..PACKETS_PER_BUFFER).flat_map(|i| pk::write32(dst + (i as u64 % 512) * 4, i as u32)).collect();
    let (big_va, big_pa) = g.buffer(p, (big.len() as u64).div_ceil(4096));
    g.ram.write_all_at(&big, big_pa).unwrap();
    let small = pk::write32(dst, 1);
    let (small_va, small_pa) = g.buffer(p, 1);
    g.ram.write_all_at(&small, small_pa).unwrap();

    let batch = q.entries as usize - 1;
    let started = Instant::now();
    for _ in 0..PACKET_BATCHES {
        for _ in 0..batch {
            append(&g, &mut q, big_va, big.len());
        }
        ring(&mut g, &q);
        drain_now(&g, &q);
    }
    let packets = (PACKET_BATCHES * batch * PACKETS_PER_BUFFER) as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    for _ in 0..ROUND_TRIPS {
        append(&g, &mut q, small_va, small.len());
        ring(&mut g, &q);
        drain_now(&g, &q);
    }
    let trips = ROUND_TRIPS as f64 / started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(200));
    let bytes = std::fs::metadata(&g.dev.trace).map(|m| m.len()).unwrap_or(0);
    (packets, trips, bytes)
}

#[test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn trace_level_cost() {
    println!(
        "{:<10} {:>14} {:>18} {:>12}   (median of {RUNS} runs)",
        "level", "packets/s", "round trips/s", "trace MiB"
    );
    for level in ["control", "commands", "packets"] {
        let runs: Vec<(f64, f64, u64)> = (0..RUNS).map(|_| measure(level)).collect();
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let packets = median(runs.iter().map(|r| r.0).collect());
        let trips = median(runs.iter().map(|r| r.1).collect());
        let bytes = runs.iter().map(|r| r.2).max().unwrap_or(0);
        println!("{level:<10} {packets:>14.0} {trips:>18.0} {:>12.1}", bytes as f64 / (1 << 20) as f64);
    }
}

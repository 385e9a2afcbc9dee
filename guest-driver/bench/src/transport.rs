//! The doorbell transports side by side, with `--shared-device N`: the figures that
//! depend on how a ring reaches the device, on the trapped device (`--device`) and the shared
//! one, in one guest.
//!
//! - One ring's guest cost: [`belfry_umd::Queue::ring_again`] N times (a trapped posted write
//!   against a store to shared memory), and the same for a register write of QEMU's `edu`
//!   device when the guest has one (`cargo belfry exec --edu`), through its sysfs `resource0`.
//! - Submit → progress visible, user- and kernel-mode (a shared BAR makes QEMU's BAR0 writes
//!   non-posted, which kernel-mode submission pays), small submissions per second, GPU signal →
//!   sleeping CPU waiter, and the GPU-side against CPU-mediated wait ratio.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use belfry_umd::{CommandBuffer, Device, QueueDesc, QueueMode};

use crate::{fence_wait, fences, latency, mailbox, micros, throughput, wake_path, BoxError};

/// Nanoseconds per ring of an idle queue's doorbell, over `n` rings.
fn ring_ns(dev: &Device, n: u32) -> Result<f64, BoxError> {
    let ctx = dev.create_context()?;
    let target = ctx.alloc(4096, 0)?;
    let mut queue = ctx.create_queue(&QueueDesc::default())?;
    queue.connect_doorbell()?;
    let mut cmds = CommandBuffer::new();
    cmds.write32(target.gpu_va(), 1)?;
    let v = queue.submit(&cmds)?;
    queue.wait(v, Duration::from_secs(10))?;
    let start = Instant::now();
    for _ in 0..n {
        queue.ring_again();
    }
    Ok(start.elapsed().as_secs_f64() * 1e9 / f64::from(n))
}

/// The sysfs directory of QEMU's `edu` device (`1234:11e8`), if the guest has one.
fn edu_device() -> Option<std::path::PathBuf> {
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    std::fs::read_dir("/sys/bus/pci/devices").ok()?.flatten().map(|e| e.path()).find(|p| {
        read(p.join("vendor")).as_deref() == Some("0x1234") && read(p.join("device")).as_deref() == Some("0x11e8")
    })
}

/// Nanoseconds per 32-bit write to the `edu` device's liveness register (BAR0 + 4), over `n`
/// writes; `None` without an `edu` device.
fn edu_write_ns(n: u32) -> Result<Option<f64>, BoxError> {
    let Some(dir) = edu_device() else { return Ok(None) };
    let file = OpenOptions::new().read(true).write(true).open(dir.join("resource0"))?;
    // SAFETY: a fresh shared mapping of one page of the BAR file; checked for failure below and
    // unmapped before returning; nothing else refers to it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(format!("mmap of {}/resource0: {}", dir.display(), std::io::Error::last_os_error()).into());
    }
    let reg = map.cast::<u8>().wrapping_add(4).cast::<u32>();
    let start = Instant::now();
    for i in 0..n {
        // SAFETY: `reg` is 4-byte aligned inside the mapped page, which stays mapped until the
        // munmap below.
        unsafe { reg.write_volatile(i) };
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / f64::from(n);
    // SAFETY: `map` is the mapping made above, of 4096 bytes, no longer used.
    unsafe { libc::munmap(map, 4096) };
    Ok(Some(ns))
}

/// The transport-dependent figures of one device.
fn figures(dev: &Device, n: u32) -> Result<serde_json::Value, BoxError> {
    let pair = |(median, p99): (Duration, Duration)| serde_json::json!({"median": micros(median), "p99": micros(p99)});
    let ring = ring_ns(dev, n)?;
    let um = latency(dev, QueueMode::UserMode, n)?;
    let km = latency(dev, QueueMode::KernelMode, n)?;
    let um_tp = throughput(dev, QueueMode::UserMode, n)?;
    let wake = fences::sleeping_wake(dev, n)?;
    let wait = fence_wait::run(dev, n)?;
    let wp = wake_path::run(dev, n)?;
    let stages: Vec<serde_json::Value> = wake_path::STAGES
        .iter()
        .zip(&wp.stages)
        .map(|(name, &s)| {
            let mut v = pair(s);
            v["stage"] = serde_json::json!(name);
            v
        })
        .collect();
    let (mb, path) = mailbox::round_trip(dev, n)?;
    let mb: Vec<serde_json::Value> = mailbox::STAGES
        .iter()
        .zip(&mb)
        .map(|(name, &s)| {
            let mut v = pair(s);
            v["stage"] = serde_json::json!(name);
            v
        })
        .collect();
    let spin: Vec<serde_json::Value> = mailbox::spin(dev, n.min(200), &SPINS)?
        .into_iter()
        .map(|(us, lat, hits)| {
            let mut v = pair(lat);
            v["spin_us"] = serde_json::json!(us);
            v["spin_hits"] = serde_json::json!(hits);
            v
        })
        .collect();
    Ok(serde_json::json!({
        "mailbox_path": mailbox::path_name(path),
        "mailbox_us": mb,
        "submit_then_wait_us": spin,
        "wake_path_same_cpu": wp.same_cpu,
        "ring_ns": ring,
        "user_mode_latency_us": pair(um),
        "kernel_mode_latency_us": pair(km),
        "user_mode_submissions_per_second": um_tp,
        "signal_to_sleeping_waiter_us": pair(wake),
        "cpu_over_gpu_wait_latency": wait["cpu_over_gpu_wait_latency"],
        "wake_path_us": stages,
        "wake_path_threaded": wp.threaded,
    }))
}

/// The `wait_spin_us` values compared (0: no spin; 10: the default; 100).
const SPINS: [u32; 3] = [0, 10, 100];

/// Measures both devices and prints them side by side; returns the figures.
pub(crate) fn run(trapped: &Device, shared: &Device, n: u32) -> Result<serde_json::Value, BoxError> {
    if !shared.caps().bits().shared_doorbells() || trapped.caps().bits().shared_doorbells() {
        return Err("--shared-device must have shared doorbells and --device trapped ones".into());
    }
    let t = figures(trapped, n)?;
    let s = figures(shared, n)?;
    let edu = edu_write_ns(n)?;
    println!("doorbell transports ({n} per figure):           trapped        shared");
    let row = |what: &str, key: &str, sub: Option<&str>| {
        let get = |v: &serde_json::Value| {
            let v = &v[key];
            sub.map_or(v, |s| &v[s]).as_f64().unwrap_or(f64::NAN)
        };
        println!("{what:<46} {:>9.2} {:>13.2}", get(&t), get(&s));
    };
    row("one ring, guest cost (ns)", "ring_ns", None);
    row("user-mode submit → progress, median (µs)", "user_mode_latency_us", Some("median"));
    row("user-mode submit → progress, p99 (µs)", "user_mode_latency_us", Some("p99"));
    row("kernel-mode submit → progress, median (µs)", "kernel_mode_latency_us", Some("median"));
    row("kernel-mode submit → progress, p99 (µs)", "kernel_mode_latency_us", Some("p99"));
    row("user-mode small submissions per second", "user_mode_submissions_per_second", None);
    row("GPU signal → sleeping CPU waiter, median (µs)", "signal_to_sleeping_waiter_us", Some("median"));
    row("GPU signal → sleeping CPU waiter, p99 (µs)", "signal_to_sleeping_waiter_us", Some("p99"));
    row("CPU-mediated / GPU-side wait latency (x)", "cpu_over_gpu_wait_latency", None);
    println!("GPU signal → sleeping waiter, by stage (µs, median / p99):");
    stage_rows(&t, &s, "wake_path_us", &wake_path::STAGES);
    println!(
        "  samples released by the threaded handler: {} trapped, {} shared; of them the waiter woke on the handler's CPU: {}, {}",
        t["wake_path_threaded"], s["wake_path_threaded"], t["wake_path_same_cpu"], s["wake_path_same_cpu"]
    );
    println!(
        "mailbox round trip, one UPDATE_CURRENT_VALUES (µs, median / p99): {} trapped, {} shared",
        t["mailbox_path"], s["mailbox_path"]
    );
    stage_rows(&t, &s, "mailbox_us", &mailbox::STAGES);
    println!("submit → CPU wait issued at once returns, by wait_spin_us (µs, median / p99, waits the spin ended):");
    for (i, spin_us) in SPINS.iter().enumerate() {
        let get = |v: &serde_json::Value, k: &str| v["submit_then_wait_us"][i][k].as_f64().unwrap_or(f64::NAN);
        let hits = |v: &serde_json::Value| v["submit_then_wait_us"][i]["spin_hits"].as_u64().unwrap_or(0);
        println!(
            "  wait_spin_us {:<33} {:>7.1} / {:<8.1} {:>3} {:>7.1} / {:<8.1} {:>3}",
            spin_us,
            get(&t, "median"),
            get(&t, "p99"),
            hits(&t),
            get(&s, "median"),
            get(&s, "p99"),
            hits(&s)
        );
    }
    match edu {
        Some(ns) => println!("QEMU edu register write, guest cost (ns): {ns:.2}"),
        None => println!("QEMU edu register write: no edu device (cargo belfry exec --edu)"),
    }
    Ok(serde_json::json!({"trapped": t, "shared": s, "edu_write_ns": edu}))
}

/// One row per stage of `key` (an array of `{median, p99}` in each transport's figures):
/// trapped `t`, then shared `s`.
fn stage_rows(t: &serde_json::Value, s: &serde_json::Value, key: &str, stages: &[&str]) {
    for (i, name) in stages.iter().enumerate() {
        let get = |v: &serde_json::Value, k: &str| v[key][i][k].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {name:<46} {:>7.1} / {:<8.1} {:>7.1} / {:<8.1}",
            get(t, "median"),
            get(t, "p99"),
            get(s, "median"),
            get(s, "p99")
        );
    }
}

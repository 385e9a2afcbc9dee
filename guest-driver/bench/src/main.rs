//! `belfry-bench`: in-guest benchmarks that print figures measured in one run.
//!
//! - Submission latency, for the same packet, from `submit` until the CPU sees the queue's
//!   progress value (polling its read-only CurrentValue mapping): user-mode (ring + doorbell)
//!   against kernel-mode (`SUBMIT` ioctl), median and p99 over N submissions, and their ratio.
//! - Small-submission throughput: N submissions back to back, then one wait.
//! - Copy bandwidth: the device's COPY packet against `memcpy` in the guest.
//! - Fences ([`fences`]): signal → CPU wake, interrupts per 1,000 signals with and without a
//!   waiter, fence operations per second.
//! - GPU-side wait against CPU-mediated (monitored fence, module-held work) wait latency,
//!   end to end and on the GPU's clock (`fence_wait.rs`).
//! - With `--peer-device N`: cross-adapter fences against same-device ones — release latency
//!   of a GPU wait and interrupts per 1,000 signals (`cross_adapter.rs`); with
//!   `--peer-signals-device N` as well, the same wait without and with peer signals (XAD-15).
//!
//! - Engine power and recovery ([`power`]): the F1 → F0 wake a submission sees against the same
//!   submission to an awake engine; hang detection time against the module's timeout.
//! - Device power ([`dstate`], `--d3-only`): the module's D3 entry and exit times and a
//!   submission to a device in D3, with runtime PM allowed through sysfs meanwhile.
//! - With `--shared-device N`, the doorbell transports side by side (`transport.rs`), with the
//!   sleeping waiter's wake-up split into stages (`wake_path.rs`).
//!
//! - With `--irq-form-devices A,B` ([`irq_forms`]): the native-fence interrupt forms side by
//!   side — fence value reads and log entries per interrupt, handler time and wake latency.
//!
//! - Split under VRAM pressure ([`split`], `--split-device N`): the same buffer unsplit on
//!   `--device` and split on a 16 MiB device — parts, bytes paged, time and their ratio.
//!
//! - Verbose fence logging ([`verbose_log`], `--verbose-log-only`): a logged wait's submission
//!   with the switch off and on.
//!
//! - Demotion under local-memory pressure ([`demotion`], `--demotion-only`, NF-14/NF-18): a
//!   fence's figure in VRAM and demoted, and today's form (refused) under the same pressure.
//!
//! - `--repeat N` ([`repeat`]): the headline figures N times, interleaved, as ranges.
//!
//! Nothing here asserts a duration: figures vary with the host, and TCG is slow.

use std::time::{Duration, Instant};

use belfry_umd::{CommandBuffer, Device, EngineId, Queue, QueueDesc, QueueMode};
use clap::Parser;

mod cross_adapter;
mod demotion;
mod dstate;
mod fence_wait;
mod fences;
mod irq_forms;
mod mailbox;
mod power;
mod repeat;
mod split;
mod transport;
mod verbose_log;
mod waiter;
mod wake_path;

/// Belfry in-guest benchmarks.
#[derive(Debug, Parser)]
struct Args {
    /// Device index (/dev/belfryN).
    #[arg(long, default_value_t = 0)]
    device: u32,
    /// Submissions per latency and throughput measurement (at least 1000 for the reported
    /// figures).
    #[arg(long, default_value_t = 1000)]
    submissions: u32,
    /// Bytes per COPY and memcpy.
    #[arg(long, default_value_t = 1 << 20)]
    copy_bytes: u32,
    /// Copies per bandwidth measurement.
    #[arg(long, default_value_t = 16)]
    copies: u32,
    /// F1 round trips and hang detections per timeout (each F1 waits about a second).
    #[arg(long, default_value_t = 5)]
    power_runs: u32,
    /// A second native device (/dev/belfryN) for the cross-adapter figures.
    #[arg(long)]
    peer_device: Option<u32>,
    /// A device with peer signals (`--peer-signals`) like `--device`: also measure the
    /// cross-adapter wait on `--device` signalled from this one (peer signals) against
    /// `--peer-device` (which has none) and the same-device wait (XAD-15).
    #[arg(long, value_name = "N")]
    peer_signals_device: Option<u32>,
    /// With `--peer-signals-device`: only park a GPU wait on a cross-adapter fence for this
    /// many seconds, then release it (the device CPU of a parked wait, under `devcpu.py`).
    #[arg(long, value_name = "SECONDS")]
    park_seconds: Option<u64>,
    /// Only the cross-adapter figures (needs `--peer-device`).
    #[arg(long)]
    cross_adapter_only: bool,
    /// A device with shared doorbells (`--doorbell-transport shared`): also measure the
    /// doorbell transports side by side, `--device` (trapped) against this one.
    #[arg(long, value_name = "N")]
    shared_device: Option<u32>,
    /// Only the side-by-side transport figures (with `--shared-device`).
    #[arg(long)]
    transports_only: bool,
    /// A device with little VRAM (the suite's `--vram-size 16M` device) for the split figures.
    #[arg(long)]
    split_device: Option<u32>,
    /// Runs per split figure.
    #[arg(long, default_value_t = 5)]
    split_runs: u32,
    /// Only the split figures.
    #[arg(long)]
    split_only: bool,
    /// D3 round trips for the device power figures (runtime PM allowed meanwhile).
    #[arg(long, default_value_t = 5)]
    d3_runs: u32,
    /// Only the device power (D3) figures.
    #[arg(long)]
    d3_only: bool,
    /// Devices to compare native-fence interrupt forms on (the suite's per-queue and
    /// queue-array devices, say), comma-separated: these figures alone are printed.
    #[arg(long, value_delimiter = ',', value_name = "N,N")]
    irq_form_devices: Vec<u32>,
    /// Only the ring-placement figures: user-mode submit → progress with the ring and ring
    /// control in system memory and in VRAM (`QUEUE_RING_IN_VRAM`: every CPU store to them a
    /// trapped BAR access).
    #[arg(long)]
    vram_ring_only: bool,
    /// Only the demotion figures (NF-14, NF-18; `demotion.rs`): the module's `demote_fences`
    /// and `fence_vram_pages` are changed meanwhile and put back.
    #[arg(long)]
    demotion_only: bool,
    /// Only verbose fence logging's cost (`verbose_log.rs`): a logged wait's submission with
    /// verbose logging off and on.
    #[arg(long)]
    verbose_log_only: bool,
    /// Only the headline figures (submission latency per mode, the two waits on both clocks),
    /// ROUNDS times with the variants interleaved, shown as ranges (`repeat.rs`).
    #[arg(long, value_name = "ROUNDS")]
    repeat: Option<u32>,
}

/// Prints the device power (D3) figures of `runs` round trips of device `index`.
fn print_d3(dev: &Device, index: u32, runs: u32) -> Result<(), BoxError> {
    let d3 = dstate::run(dev, index, runs)?;
    let stat = |d: &[Duration]| {
        let mut v = d.to_vec();
        v.sort_unstable();
        let median = v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e3);
        (median, v.last().map_or(0.0, |d| d.as_secs_f64() * 1e3))
    };
    for (name, samples) in [
        ("D3 entry (module: contexts suspended, doorbells disconnected, PMCSR D3hot)", &d3.entry),
        ("D3 exit (module: PMCSR D0, config restored)", &d3.exit),
        ("submission → work done on a device in D3 (reconnect resumes it)", &d3.submit_from_d3),
    ] {
        let (median, max) = stat(samples);
        println!("{name}: median {median:.2} ms, max {max:.2} ms ({} runs)", samples.len());
    }
    Ok(())
}

type BoxError = Box<dyn std::error::Error>;

/// Median and 99th percentile of `samples` (sorted in place).
fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99))
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `a / b` as a ratio of durations (a zero `b` counts as 1 ns, so the ratio stays finite).
fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// Latency of one WRITE_DATA32 submission until its progress value is visible, per mode.
fn latency(dev: &Device, mode: QueueMode, n: u32) -> Result<(Duration, Duration), BoxError> {
    latency_of(dev, &QueueDesc::default().with_mode(mode), n)
}

/// [`latency`] of a queue of `desc`.
fn latency_of(dev: &Device, desc: &QueueDesc, n: u32) -> Result<(Duration, Duration), BoxError> {
    let mode = desc.mode;
    let ctx = dev.create_context()?;
    let target = ctx.alloc(4096, 0)?;
    let mut queue = ctx.create_queue(desc)?;
    if mode == QueueMode::UserMode {
        queue.connect_doorbell()?;
    }
    let mut cmds = CommandBuffer::new();
    cmds.write32(target.gpu_va(), 0x5eed)?;
    for _ in 0..20 {
        let v = queue.submit(&cmds)?;
        queue.wait(v, Duration::from_secs(10))?;
    }
    timed_submissions(&mut queue, &cmds, n, &format!("{mode:?}"))
}

/// Median and p99 of `n` submissions of `cmds` to `queue`, each from `submit` until the CPU
/// sees its progress value (spinning, 10 s at most; `label` names the case in the error).
fn timed_submissions(
    queue: &mut Queue,
    cmds: &CommandBuffer,
    n: u32,
    label: &str,
) -> Result<(Duration, Duration), BoxError> {
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let start = Instant::now();
        let value = queue.submit(cmds)?;
        while queue.completed() < value {
            std::hint::spin_loop();
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("{label}: progress value {value} not reached in 10 s").into());
            }
        }
        samples.push(start.elapsed());
    }
    Ok(percentiles(&mut samples))
}

/// Submissions per second for `n` back-to-back small submissions.
fn throughput(dev: &Device, mode: QueueMode, n: u32) -> Result<f64, BoxError> {
    let ctx = dev.create_context()?;
    let target = ctx.alloc(4096, 0)?;
    let mut queue = ctx.create_queue(&QueueDesc::default().with_mode(mode).with_ring_entries(64))?;
    if mode == QueueMode::UserMode {
        queue.connect_doorbell()?;
    }
    let mut cmds = CommandBuffer::new();
    cmds.write32(target.gpu_va(), 1)?;
    let start = Instant::now();
    let mut last = 0;
    for _ in 0..n {
        last = queue.submit(&cmds)?;
    }
    queue.wait(last, Duration::from_secs(60))?;
    Ok(f64::from(n) / start.elapsed().as_secs_f64())
}

/// Device COPY bandwidth and guest memcpy bandwidth, in MiB/s.
fn bandwidth(dev: &Device, bytes: u32, copies: u32) -> Result<(f64, f64), BoxError> {
    let ctx = dev.create_context()?;
    let mut src = ctx.alloc(u64::from(bytes), 0)?;
    let dst = ctx.alloc(u64::from(bytes), 0)?;
    src.fill(0, u64::from(bytes), 0xa5)?;
    let mut queue = ctx.create_queue(&QueueDesc::default().with_engine(EngineId::new(1)).with_slot_bytes(4096))?;
    queue.connect_doorbell()?;
    let mut cmds = CommandBuffer::new();
    cmds.copy(src.gpu_va(), dst.gpu_va(), bytes)?;
    let v = queue.submit(&cmds)?;
    queue.wait(v, Duration::from_secs(30))?;
    let start = Instant::now();
    let mut last = 0;
    for _ in 0..copies {
        last = queue.submit(&cmds)?;
    }
    queue.wait(last, Duration::from_secs(120))?;
    let device = f64::from(bytes) * f64::from(copies) / start.elapsed().as_secs_f64() / (1 << 20) as f64;
    let mut check = [0u8; 16];
    dst.read(u64::from(bytes) - 16, &mut check)?;
    if check != [0xa5; 16] {
        return Err("the device copy did not copy".into());
    }

    let a = vec![0xa5u8; bytes as usize];
    let mut b = vec![0u8; bytes as usize];
    let start = Instant::now();
    for i in 0..copies {
        b.copy_from_slice(&a);
        std::hint::black_box(&mut b);
        b[0] = i as u8;
    }
    let memcpy = f64::from(bytes) * f64::from(copies) / start.elapsed().as_secs_f64() / (1 << 20) as f64;
    Ok((device, memcpy))
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let dev = Device::open_index(args.device)?;
    let n = args.submissions;
    if !args.irq_form_devices.is_empty() {
        println!("belfry-bench: {n} signals with a sleeping waiter per device; per 1,000 signals (per interrupt)");
        println!("| form (device) | interrupts | records | fence value reads | log entries read | scans / fallbacks | handler start → wake-up call, median / p99 (samples) | submit → waiter in user space, median / p99 |");
        println!("|---|---|---|---|---|---|---|---|");
        let mut all = Vec::new();
        for &index in &args.irq_form_devices {
            let f = irq_forms::run(index, n)?;
            irq_forms::print(&f);
            all.push(irq_forms::json(&f));
        }
        println!("BELFRY-BENCH {}", serde_json::json!({"submissions": n, "irq_forms": all}));
        return Ok(());
    }
    if let (Some(secs), Some(q)) = (args.park_seconds, args.peer_signals_device) {
        return cross_adapter::park(&dev, &Device::open_index(q)?, secs);
    }
    if args.demotion_only {
        let figures = demotion::run(args.device, n)?;
        println!("BELFRY-BENCH {}", serde_json::json!({"submissions": n, "demotion": figures}));
        return Ok(());
    }
    let transports = match args.shared_device {
        Some(shared) => Some(transport::run(&dev, &Device::open_index(shared)?, n)?),
        None => None,
    };
    if args.transports_only {
        println!("BELFRY-BENCH {}", serde_json::json!({"submissions": n, "transports": transports}));
        return Ok(());
    }
    println!("belfry-bench: device {}, {n} submissions per figure (TCG guest: absolute figures are slow)", args.device);
    let cross = match args.peer_device {
        Some(p) => Some(cross_adapter::run(&dev, &Device::open_index(p)?, n)?),
        None if args.cross_adapter_only => return Err("--cross-adapter-only needs --peer-device".into()),
        None => None,
    };
    let peer_signals = match (args.peer_device, args.peer_signals_device) {
        (Some(p), Some(q)) => {
            Some(cross_adapter::run_peer_signals(&dev, &Device::open_index(p)?, &Device::open_index(q)?, n)?)
        }
        (None, Some(_)) => return Err("--peer-signals-device needs --peer-device".into()),
        _ => None,
    };
    if args.cross_adapter_only {
        println!(
            "BELFRY-BENCH {}",
            serde_json::json!({"submissions": n, "cross_adapter": cross, "peer_signals": peer_signals})
        );
        return Ok(());
    }
    if args.d3_only {
        return print_d3(&dev, args.device, args.d3_runs);
    }
    if let Some(rounds) = args.repeat {
        return repeat::run(&dev, n, rounds);
    }
    if args.verbose_log_only {
        return verbose_log::run(&dev, n);
    }
    if args.vram_ring_only {
        let (sys_med, sys_p99) = latency(&dev, QueueMode::UserMode, n)?;
        let (vram_med, vram_p99) = latency_of(&dev, &QueueDesc::default().with_ring_in_vram(true), n)?;
        for (name, med, p99) in [("system memory", sys_med, sys_p99), ("VRAM (BAR4)", vram_med, vram_p99)] {
            println!(
                "submit → progress visible, user-mode, ring in {name:13}: median {:9.1} µs  p99 {:9.1} µs",
                micros(med),
                micros(p99)
            );
        }
        println!("VRAM / system median: {:.2}x", vram_med.as_secs_f64() / sys_med.as_secs_f64());
        return Ok(());
    }
    if let Some(small) = args.split_device {
        let whole = split::run(args.device, args.split_runs)?;
        let cut = split::run(small, args.split_runs)?;
        for (name, f) in [("unsplit (device VRAM fits all)", &whole), ("split under pressure", &cut)] {
            println!(
                "3 × 8 MiB VRAM copy chain, {name}: {} part(s), paged in {} MiB, out {} MiB, median {:.1} ms",
                f.parts,
                f.paged_in >> 20,
                f.paged_out >> 20,
                f.median.as_secs_f64() * 1e3
            );
        }
        println!("split / unsplit time: {:.2}x", cut.median.as_secs_f64() / whole.median.as_secs_f64());
        if args.split_only {
            return Ok(());
        }
    }

    let (um_med, um_p99) = latency(&dev, QueueMode::UserMode, n)?;
    let (km_med, km_p99) = latency(&dev, QueueMode::KernelMode, n)?;
    println!(
        "submit → progress visible, user-mode   (doorbell): median {:9.1} µs  p99 {:9.1} µs",
        micros(um_med),
        micros(um_p99)
    );
    println!(
        "submit → progress visible, kernel-mode (ioctl):    median {:9.1} µs  p99 {:9.1} µs",
        micros(km_med),
        micros(km_p99)
    );
    let ratio = km_med.as_secs_f64() / um_med.as_secs_f64();
    println!("kernel-mode / user-mode median latency: {ratio:.2}x");

    let um_tp = throughput(&dev, QueueMode::UserMode, n)?;
    let km_tp = throughput(&dev, QueueMode::KernelMode, n)?;
    println!("small submissions per second: user-mode {um_tp:.0}, kernel-mode {km_tp:.0} ({:.2}x)", um_tp / km_tp);

    let (device_bw, memcpy_bw) = bandwidth(&dev, args.copy_bytes, args.copies)?;
    println!(
        "copy bandwidth ({} KiB × {}): device COPY {device_bw:.0} MiB/s, guest memcpy {memcpy_bw:.0} MiB/s ({:.3}x)",
        args.copy_bytes >> 10,
        args.copies,
        device_bw / memcpy_bw
    );
    let f = fences::run(&dev, n)?;
    let us =
        |(median, p99): (Duration, Duration)| format!("median {:9.1} µs  p99 {:9.1} µs", micros(median), micros(p99));
    println!("GPU signal → CPU sees it, native fence, sleeping waiter: {}", us(f.native_wake));
    println!("GPU signal → CPU sees it, native fence, polling the map: {}", us(f.native_poll));
    println!("GPU signal → CPU sees it, monitored fence, sleeping:     {}", us(f.monitored_wake));
    println!(
        "native-fence interrupts per 1000 GPU signals: {:.0} without a waiter, {:.0} with a CPU waiter on each",
        f.interrupts_without_waiter, f.interrupts_with_waiter
    );
    println!(
        "fence operations per second: CPU signal {:.0}, satisfied CPU wait {:.0}, GPU signal {:.0}",
        f.cpu_signals_per_second, f.cpu_waits_per_second, f.gpu_signals_per_second
    );
    let wake = power::wake(&dev, args.power_runs)?;
    let ms = |d: &[Duration]| d.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>();
    let median_ms = |d: &[Duration]| {
        let mut v = d.to_vec();
        v.sort_unstable();
        v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "submission → work done, engine in F1 (reconnect, F0, work): median {:.2} ms; engine awake: median {:.2} ms ({} runs)",
        median_ms(&wake.from_f1),
        median_ms(&wake.awake),
        wake.from_f1.len()
    );
    let hangs = power::hang_detection(&dev, &[300, 600, 1200], args.power_runs)?;
    for (t, samples) in &hangs {
        println!(
            "looping queue → its wait ends ContextLost, hang_timeout_ms {t}: median {:.0} ms, max {:.0} ms ({} runs)",
            median_ms(samples),
            ms(samples).into_iter().fold(0.0, f64::max),
            samples.len()
        );
    }
    let pair = |(median, p99): (Duration, Duration)| serde_json::json!({"median": micros(median), "p99": micros(p99)});
    let fence_wait = fence_wait::run(&dev, n)?;
    let figures = serde_json::json!({
        "submissions": n,
        "user_mode_latency_us": {"median": micros(um_med), "p99": micros(um_p99)},
        "kernel_mode_latency_us": {"median": micros(km_med), "p99": micros(km_p99)},
        "kernel_over_user_latency": ratio,
        "submissions_per_second": {"user_mode": um_tp, "kernel_mode": km_tp},
        "copy_mib_per_second": {"device": device_bw, "guest_memcpy": memcpy_bw},
        "signal_to_cpu_us": {
            "native_sleeping": pair(f.native_wake),
            "native_polling": pair(f.native_poll),
            "monitored_sleeping": pair(f.monitored_wake),
        },
        "native_interrupts_per_1000_signals": {"without_waiter": f.interrupts_without_waiter, "with_waiter": f.interrupts_with_waiter},
        "fence_ops_per_second": {"cpu_signal": f.cpu_signals_per_second, "cpu_wait_satisfied": f.cpu_waits_per_second, "gpu_signal": f.gpu_signals_per_second},
        "fence_wait": fence_wait,
        "f1_wake_ms": {"from_f1": ms(&wake.from_f1), "awake": ms(&wake.awake)},
        "hang_detection_ms": hangs.iter().map(|(t, s)| serde_json::json!({"timeout_ms": t, "samples": ms(s)})).collect::<Vec<_>>(),
        "cross_adapter": cross,
        "peer_signals": peer_signals,
        "transports": transports,
    });
    println!("BELFRY-BENCH {figures}");
    Ok(())
}

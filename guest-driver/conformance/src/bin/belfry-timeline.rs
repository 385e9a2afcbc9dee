//! `belfry-timeline`: prints the kernel module's fence timeline of each Belfry device — every
//! fence operation the module read from the queues' wait and signal logs (signal executed,
//! wait unblocked, with their GPU timestamps) and every logged operation a kernel-mode
//! submission queued (with its CPU time), and what guest threads did (CPU waits and wakes, CPU
//! signals, eventfd completions, doorbell status changes, submissions; `log_index` is then the
//! thread id, `observed_gpu` the process id, `end_gpu` the detail) — one line per event, oldest
//! first. With `--verbose on|off` it turns verbose fence logging (LOG-20: `WAIT_BEGIN`
//! entries) on or off on each device first (`CAP_PERFMON` or `CAP_SYS_ADMIN`).

use std::path::PathBuf;
use std::process::ExitCode;

use belfry_umd::abi::uapi_debug;
use belfry_umd::{Device, Timeline};
use clap::Parser;

/// Print the fence timeline the Belfry kernel module keeps for each device.
#[derive(Debug, Parser)]
#[command(name = "belfry-timeline", version, about)]
struct Cli {
    /// Devices (default: every /dev/belfry0..7 that opens).
    #[arg(value_name = "DEVICE")]
    devices: Vec<PathBuf>,
    /// Turn verbose fence logging on or off first (the library of every process using the
    /// device is told; needs CAP_PERFMON or CAP_SYS_ADMIN).
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    verbose: Option<String>,
}

/// The name of a `TIMELINE_*` operation.
fn operation(op: u32) -> &'static str {
    match op {
        uapi_debug::TIMELINE_WAIT_QUEUED => "wait-queued",
        uapi_debug::TIMELINE_SIGNAL_QUEUED => "signal-queued",
        uapi_debug::TIMELINE_SIGNAL_EXECUTED => "signal-executed",
        uapi_debug::TIMELINE_WAIT_UNBLOCKED => "wait-unblocked",
        uapi_debug::TIMELINE_WAIT_BEGIN => "wait-begin",
        uapi_debug::TIMELINE_LOST => "lost",
        uapi_debug::TIMELINE_CPU_WAIT_START => "cpu-wait-start",
        uapi_debug::TIMELINE_CPU_WAIT_END => "cpu-wait-end",
        uapi_debug::TIMELINE_CPU_SIGNAL => "cpu-signal",
        uapi_debug::TIMELINE_EVENTFD_SIGNALED => "eventfd-signaled",
        uapi_debug::TIMELINE_DOORBELL => "doorbell",
        uapi_debug::TIMELINE_SUBMIT => "submit",
        _ => "unknown",
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let devices: Vec<PathBuf> = if cli.devices.is_empty() {
        belfry_conformance::probe_devices(&[]).into_iter().map(|(path, _)| path).collect()
    } else {
        cli.devices
    };
    let mut status = ExitCode::SUCCESS;
    for path in devices {
        let verbose = cli.verbose.as_deref().map(|v| v == "on");
        let events = Device::open(&path).and_then(|dev| {
            if let Some(on) = verbose {
                dev.set_verbose_logging(on)?;
            }
            let mut timeline = Timeline::new();
            timeline.read(&dev).map(|events| (events, timeline.lost()))
        });
        let (events, lost) = match events {
            Ok(e) => e,
            Err(e) => {
                eprintln!("belfry-timeline: {}: {e}", path.display());
                status = ExitCode::FAILURE;
                continue;
            }
        };
        println!("# {}: {} event(s), {lost} older one(s) no longer kept", path.display(), events.len());
        println!("# seq queue operation fence value log_index cpu_ns observed_gpu end_gpu");
        for e in events {
            println!(
                "{} {} {} {:#x} {} {} {} {} {}",
                e.seq,
                e.queue,
                operation(e.operation),
                e.fence,
                e.value,
                e.log_index,
                e.cpu_ns,
                e.observed_gpu,
                e.end_gpu
            );
        }
    }
    status
}

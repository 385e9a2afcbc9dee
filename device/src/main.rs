//! `belfry-device`: the Belfry virtual GPU as a vfio-user server process.
//!
//! Follows the vfio-user specification's Backend Program Conventions: `--socket-path=PATH`
//! (create and listen) or `--fd=FDNUM` (an inherited, connected socket).
#![deny(clippy::cast_possible_truncation)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use belfry_device::config::{parse_size, DeviceConfig};
use belfry_device::device::Device;
use belfry_device::gpu::cmp::CommandProcessor;
use belfry_device::record::{self, Recorder};
use belfry_device::trace::{Compression, Event, TraceLevel, TraceSettings, Tracer};
use belfry_device::vfio_user::{serve_connection, server, Listener};
use clap::Parser;

/// The Belfry virtual GPU, served over vfio-user to QEMU's `vfio-user-pci` device.
///
/// Start it, then start QEMU with guest RAM as a shareable memfd and
/// `-device '{"driver":"vfio-user-pci","socket":{"type":"unix","path":"PATH"}}'`.
/// Logs go to stderr, filtered by RUST_LOG (default: info; `RUST_LOG=belfry::trace=debug`
/// prints every trace record).
#[derive(Debug, Parser)]
#[command(name = "belfry-device", version)]
struct Args {
    /// Create a UNIX socket at PATH and serve the client that connects to it. A stale socket
    /// file left by a dead server is replaced; a live one is an error.
    #[arg(long, value_name = "PATH", conflicts_with = "fd", required_unless_present = "fd")]
    socket_path: Option<PathBuf>,

    /// Serve an already connected socket inherited as file descriptor FDNUM.
    #[arg(long, value_name = "FDNUM")]
    fd: Option<i32>,

    /// After the client disconnects, wait for the next one instead of exiting
    /// (only with --socket-path).
    #[arg(long, requires = "socket_path")]
    persist: bool,

    /// Write every trace record (vfio-user messages, decoded register accesses, doorbells,
    /// mailbox commands, interrupts) to FILE as JSON lines (gzip-compressed unless
    /// `--trace-compression none`).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,

    /// How the trace file is stored: `gzip` (JSON lines, gzip-compressed) or `none` (plain
    /// JSON lines). `belfry-trace` reads both.
    #[arg(long, default_value = "gzip", value_name = "COMPRESSION")]
    trace_compression: Compression,

    /// What the trace file records: `control` (mailbox, interrupts, fences, faults, states),
    /// `commands` (also doorbells, register accesses, vfio-user messages) or `packets` (also
    /// every executed packet).
    #[arg(long, default_value = "packets", value_name = "LEVEL")]
    trace_level: TraceLevel,

    /// Size limit of the trace file (K/M/G suffix; 0: none): past it events are only counted,
    /// and a `dropped` record with the counts closes the file.
    #[arg(long, default_value = "1G", value_name = "SIZE", value_parser = parse_size)]
    trace_limit: u64,

    /// Record every input that crosses the device's boundary (vfio-user messages with their
    /// fds' identity, guest-memory reads, clock reads, doorbell values, the order the GPU's
    /// threads took its lock) to FILE, an input log (gzip unless `--trace-compression none`)
    /// that `belfry-trace inputs` reads.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,

    /// The device: its name, the GPU, the transport and test-only injections.
    #[command(flatten)]
    config: DeviceConfig,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let words: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    if let Some(refusal) = belfry_device::inject::refuse_unbuilt(&words) {
        log::error!("{refusal}");
        return ExitCode::from(2);
    }
    let args = Args::parse_from(argv);
    belfry_device::fatal::end_process_on_panic(&args.config.name);
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let config = Arc::new(args.config);
    config.validate().map_err(|e| e.to_string())?;
    let settings = TraceSettings {
        level: args.trace_level,
        limit_bytes: args.trace_limit,
        compression: args.trace_compression,
        ..TraceSettings::default()
    };
    let tracer = match &args.trace {
        Some(path) => Tracer::with_file(&config, path, settings)
            .map_err(|e| format!("Cannot create trace file {}: {e}", path.display()))?,
        None => Tracer::new(&config.name),
    };
    let device = Arc::new(Device::new(config, Arc::new(tracer)).map_err(|e| format!("Cannot create device: {e}"))?);
    let recorder = match &args.record {
        Some(path) => {
            let traced = device.tracer.enabled().then_some(args.trace_level);
            let json = record::config_json(&device.config, traced).map_err(|e| e.to_string())?;
            let recorder = Recorder::create(path, args.trace_compression, &json)
                .map_err(|e| format!("Cannot create input log {}: {e}", path.display()))?;
            let recorder = Arc::new(recorder);
            device.record_to(&recorder);
            Some(recorder)
        }
        None => None,
    };
    device.tracer.emit(Event::Clock { gpu_ns: device.regs.timestamp() });
    let cmp =
        CommandProcessor::start(device.gpu.clone()).map_err(|e| format!("Cannot start command processor: {e}"))?;
    if device.config.inject.any() {
        log::warn!("{}: test-only injected faults: {:?}", device.config.name, device.config.inject);
    }
    let result = match (&args.socket_path, args.fd) {
        (Some(path), _) => {
            let listener = Listener::bind(path).map_err(|e| e.to_string())?;
            log::info!("{}: listening on {}", device.config.name, path.display());
            listener.serve(&device, args.persist).map_err(|e| e.to_string())
        }
        (None, Some(fd)) => {
            let stream = server::stream_from_fd(fd).map_err(|e| e.to_string())?;
            serve_connection(&device, stream);
            Ok(())
        }
        (None, None) => Err("Either --socket-path or --fd is required".into()),
    };
    cmp.stop();
    device.tracer.sync();
    if let (Some(recorder), Some(path)) = (recorder, &args.record) {
        log::info!("{}: input log {}: {} records", device.config.name, path.display(), recorder.finish());
    }
    log::info!("{}: peak RSS {} KiB", device.config.name, peak_rss_kib());
    result
}

/// The process's peak resident set size (`getrusage`'s `ru_maxrss`), in KiB; 0 if unknown.
/// `cargo belfry soak` bounds it.
fn peak_rss_kib() -> i64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0 {
        usage.ru_maxrss
    } else {
        0
    }
}

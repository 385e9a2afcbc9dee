//! `belfry-device`: the Belfry virtual GPU as a vfio-user server process.
//!
//! Follows the vfio-user specification's Backend Program Conventions: `--socket-path=PATH`
//! (create and listen) or `--fd=FDNUM` (an inherited, connected socket).
#![deny(clippy::cast_possible_truncation)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use belfry_device::config::{parse_size, DeviceConfig, DoorbellModel, DoorbellTransport, Fault, InterruptForm};
use belfry_device::device::Device;
use belfry_device::gpu::cmp::CommandProcessor;
use belfry_device::trace::{Event, TraceLevel, TraceSettings, Tracer};
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
    /// mailbox commands, interrupts) to FILE as JSON lines.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,

    /// What the trace file records: `control` (mailbox, interrupts, fences, faults, states),
    /// `commands` (also doorbells, register accesses, vfio-user messages) or `packets` (also
    /// every executed packet).
    #[arg(long, value_enum, default_value = "packets", value_name = "LEVEL")]
    trace_level: TraceLevel,

    /// Size limit of the trace file (K/M/G suffix; 0: none): past it events are only counted,
    /// and a `dropped` record with the counts closes the file.
    #[arg(long, default_value = "1G", value_name = "SIZE")]
    trace_limit: String,

    /// Number of physical doorbells (1..=1024), one 4 KiB page each in BAR2.
    #[arg(long, default_value_t = 16, value_name = "N")]
    doorbells: u32,

    /// Number of MSI-X vectors (1..=64).
    #[arg(long, default_value_t = 4, value_name = "N")]
    msix_vectors: u16,

    /// Device memory (VRAM) size: a power of two from 1M to 4G, with an optional K/M/G suffix.
    #[arg(long, default_value = "64M", value_name = "SIZE")]
    vram_size: String,

    /// Name used in log lines and trace records.
    #[arg(long, default_value = "belfry0", value_name = "NAME")]
    name: String,

    /// Inject a fault (repeatable): `bad-identity` makes the identity register read wrong;
    /// `no-interrupts` drops every interrupt. Test-only, shown in the TEST_INJECTIONS register:
    /// `skip-monitored-barrier` drops the barrier of MonitoredValue updates so a racing signal
    /// can lose its interrupt; `no-catch-up-record`: an update finding CurrentValue already past
    /// posts no record; `spurious-fence-records`: an update finding no interrupt due posts a
    /// record anyway; `slow-monitored-updates`: each update is applied 1 s after it is accepted;
    /// `no-fence-interrupts`: native- and monitored-fence-signaled records are dropped;
    /// `engine-panic`: an engine panics on a NOTIFY with the token 0xdead0e0edead0e0e.
    #[arg(long, value_enum, value_name = "FAULT")]
    inject: Vec<Fault>,

    /// Doorbell model: one doorbell per queue, or one global doorbell whose value is a hint.
    #[arg(long, value_enum, default_value = "dedicated")]
    doorbell_model: DoorbellModel,

    /// Form of native-fence interrupt records: the exact fences, scan-all (a device that cannot
    /// tell), or per-queue (the optimized form, advertised as a capability).
    #[arg(long, value_enum, default_value = "exact")]
    interrupt_form: InterruptForm,

    /// The device cannot update 64-bit values atomically: no native fences; monitored fences
    /// are written 32 bits wide and the driver handles wraparound.
    #[arg(long)]
    no_64bit_atomics: bool,

    /// A GPU without native fences: capabilities say so, queues are kernel-mode only, and it
    /// signals and waits on monitored fences only (the non-native adapter of cross-adapter
    /// scenarios 2a and 2b).
    #[arg(long)]
    no_native_fences: bool,

    /// An engine (0 compute, 1 copy) that cannot write fences itself (repeatable): fence packets
    /// on it fault, and the driver uses NOTIFY for a software signal instead.
    #[arg(long, value_name = "ENGINE")]
    engine_without_fence_writes: Vec<u32>,

    /// A command buffer executing longer than this, fence waits excluded, hangs its queue.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    hang_timeout_ms: u64,

    /// An engine idle this long asks the driver for the F1 power state.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    idle_f1_ms: u64,

    /// Accept guest RAM fds that are not sealed against shrinking (F_SEAL_SHRINK), such as a
    /// memory-backend-file that cannot be sealed. A client that then shrinks the file makes the
    /// device's next access to it raise SIGBUS and end the process. QEMU's memory-backend-memfd
    /// seals by default and needs no flag.
    #[arg(long)]
    allow_unsealed_ram: bool,

    /// How rings reach the command processor: `trapped` (every ring is a vfio-user write) or
    /// `shared` (the doorbell BAR is memory shared with QEMU, which the command processor polls
    /// and sleeps on; dedicated doorbell model only). A shared BAR turns off QEMU's posted
    /// writes for the device, so every BAR0 write waits for its reply.
    #[arg(long, value_enum, default_value = "trapped")]
    doorbell_transport: DoorbellTransport,

    /// Shared doorbells: how long the command processor polls after its last activity before
    /// it sleeps (0..=1000000 us).
    #[arg(long, default_value_t = 2000, value_name = "US")]
    doorbell_poll_us: u64,

    /// The device cannot save and restore a context in the middle of a command buffer
    /// (reported in CAPS): a started command buffer runs to its end, and the parts of a split
    /// DMA buffer run back to back with only paging queues between them.
    #[arg(long)]
    no_context_save: bool,

    /// VRAM contents are lost across D3hot (reported in CAPS): the return to D0 overwrites all
    /// of VRAM with a fixed pattern, so the driver must evict what it keeps there first.
    #[arg(long)]
    vram_lost_in_d3: bool,

    /// Slots of the BIND_SLOT resource table a command buffer may bind (1..=16), reported as
    /// SPLIT_INFO.slots (MaxAllocationListSlotId).
    #[arg(long, default_value_t = 16, value_name = "N")]
    bind_slots: u32,

    /// No command ring (CAPS bit 16 clear): the driver sends every mailbox command through
    /// BAR0 writes. May be repeated (a run passing it to every device keeps the suite's
    /// device that already has it).
    #[arg(long, overrides_with = "no_cmd_ring")]
    no_cmd_ring: bool,

    /// Interrupt moderation: a vector's fence, NOTIFY, engine-state and fault interrupts are
    /// raised at most once per this many microseconds (0..=100000; 0: off), the records written
    /// meanwhile waiting in the interrupt ring for the next one. Mailbox completions are never
    /// held back. The driver may change it (register IRQ_MODERATION); a reset restores this.
    #[arg(long, default_value_t = belfry_abi::regs::DEFAULT_IRQ_MODERATION_US, value_name = "US")]
    irq_moderation_us: u32,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    belfry_device::fatal::end_process_on_panic(&args.name);
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let config = DeviceConfig {
        name: args.name.clone(),
        doorbells: args.doorbells,
        msix_vectors: args.msix_vectors,
        vram_size: parse_size(&args.vram_size).map_err(|e| e.to_string())?,
        faults: args.inject.clone(),
        doorbell_model: args.doorbell_model,
        interrupt_form: args.interrupt_form,
        no_64bit_atomics: args.no_64bit_atomics,
        no_native_fences: args.no_native_fences,
        engines_without_fence_writes: args.engine_without_fence_writes.clone(),
        hang_timeout_ms: args.hang_timeout_ms,
        idle_f1_ms: args.idle_f1_ms,
        allow_unsealed_ram: args.allow_unsealed_ram,
        doorbell_transport: args.doorbell_transport,
        doorbell_poll_us: args.doorbell_poll_us,
        no_context_save: args.no_context_save,
        vram_lost_in_d3: args.vram_lost_in_d3,
        bind_slots: args.bind_slots,
        no_cmd_ring: args.no_cmd_ring,
        irq_moderation_us: args.irq_moderation_us,
    };
    config.validate().map_err(|e| e.to_string())?;
    let settings = TraceSettings {
        level: args.trace_level,
        limit_bytes: parse_size(&args.trace_limit).map_err(|e| e.to_string())?,
    };
    let tracer = match &args.trace {
        Some(path) => Tracer::with_file(&config, path, settings)
            .map_err(|e| format!("Cannot create trace file {}: {e}", path.display()))?,
        None => Tracer::new(&config.name),
    };
    let device = Arc::new(Device::new(config, Arc::new(tracer)).map_err(|e| format!("Cannot create device: {e}"))?);
    device.tracer.emit(Event::Clock { gpu_ns: device.regs.timestamp() });
    let cmp =
        CommandProcessor::start(device.gpu.clone()).map_err(|e| format!("Cannot start command processor: {e}"))?;
    if !device.config.faults.is_empty() {
        log::warn!("{}: injected faults: {:?}", device.config.name, device.config.faults);
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

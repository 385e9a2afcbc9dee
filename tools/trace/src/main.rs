//! `belfry-trace`: the command line of the Belfry trace tool.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use belfry_trace::lines::Skipped;
use belfry_trace::model::Model;
use belfry_trace::run::Run;
use belfry_trace::show::{Filter, Style};
use belfry_trace::{inputs, perfetto, replay, show, stats};
use clap::{Parser, Subcommand, ValueEnum};

/// Read Belfry device traces and the module's fence timeline: decoded, summarised, or as a
/// Perfetto timeline. INPUT is a run directory of `cargo belfry` (target/belfry-runs/…) or
/// one or more `device<I>.trace.jsonl.gz` (or plain `.jsonl`) files.
#[derive(Debug, Parser)]
#[command(name = "belfry-trace", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct Inputs {
    /// Run directories or trace files.
    #[arg(value_name = "INPUT", required = true)]
    inputs: Vec<PathBuf>,
    /// The module's fence timeline (default: timeline.txt of a run directory).
    #[arg(long, value_name = "FILE")]
    timeline: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Colour {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One decoded line per event, devices and guest on the run's clock (seconds).
    Show {
        #[command(flatten)]
        inputs: Inputs,
        /// Only these devices (name or index; repeatable).
        #[arg(long = "device", value_name = "DEV")]
        devices: Vec<String>,
        /// Only events concerning these contexts.
        #[arg(long = "context", value_name = "ID")]
        contexts: Vec<u32>,
        /// Only events concerning these hardware queues.
        #[arg(long = "queue", value_name = "ID")]
        queues: Vec<u32>,
        /// Only events concerning these fence handles (hex with 0x, or decimal).
        #[arg(long = "fence", value_name = "HANDLE", value_parser = parse_u64)]
        fences: Vec<u64>,
        /// Only events concerning these doorbells.
        #[arg(long = "doorbell", value_name = "INDEX")]
        doorbells: Vec<u32>,
        /// Only these event kinds (comma-separated or repeated; `guest` for the module's
        /// timeline): header clock limit_reached dropped connection message reg_read
        /// reg_write doorbell doorbell_wake mailbox mailbox_block interrupt dma set_irqs reset
        /// packet fence_decision fence_registered fence_monitored_moved fence_storage_moved lost_signals fence_backwards fault queue_state
        /// engine_state record
        /// power_state guest.
        #[arg(long = "kind", value_name = "KIND", value_delimiter = ',')]
        kinds: Vec<String>,
        /// From this run time (seconds).
        #[arg(long, value_name = "SECONDS")]
        from: Option<f64>,
        /// Up to this run time (seconds).
        #[arg(long, value_name = "SECONDS")]
        to: Option<f64>,
        /// Keep printing events appended to the trace files (Ctrl-C to stop).
        #[arg(long, short = 'f')]
        follow: bool,
        /// Colour the lines: on a terminal only (auto), always, never.
        #[arg(long, value_enum, default_value = "auto")]
        colour: Colour,
    },
    /// Per device: submission latency per queue, packets by opcode, interrupts by cause,
    /// faults, mailbox commands and their latency, per-fence signals, waits and interrupts.
    Stats {
        #[command(flatten)]
        inputs: Inputs,
    },
    /// Write a Perfetto trace (open it at ui.perfetto.dev, or with trace_processor).
    Perfetto {
        #[command(flatten)]
        inputs: Inputs,
        /// Output file (default: trace.perfetto.gz in the run directory, else ./trace.perfetto.gz; gzip when the name ends in .gz).
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Read a recorded run's input log (`cargo belfry … --record`, `belfry-device --record`)
    /// through: records and bytes by kind, threads; exits non-zero, naming the record number,
    /// if the log is torn or corrupt.
    Inputs {
        #[command(flatten)]
        log: InputLog,
        /// Print every record, decoded.
        #[arg(long)]
        list: bool,
    },
    /// Run a recorded device's input log again through the device model, without QEMU or a
    /// guest: the recorded inputs in their recorded order, every reply and interrupt compared
    /// with the recording; exits non-zero at the first divergence, naming its record number.
    Replay {
        #[command(flatten)]
        log: InputLog,
        /// Print the GPU's queues, contexts and fences where the replay stopped.
        #[arg(long)]
        dump: bool,
        /// A record no thread of the replay reaches for this many seconds is a divergence.
        #[arg(long, default_value_t = 10, value_name = "SECONDS")]
        stall: u64,
        /// Write the replaying device's trace (at the recorded level) to FILE.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Replay a log that another build of the device recorded (refused otherwise: the
        /// replay would diverge where the builds differ).
        #[arg(long)]
        allow_other_build: bool,
    },
}

/// Which input log a command reads, and how far.
#[derive(Debug, clap::Args)]
struct InputLog {
    /// A run directory or an input log file.
    #[arg(value_name = "INPUT")]
    input: PathBuf,
    /// The device whose log to use in a run directory.
    #[arg(long, default_value_t = 0, value_name = "N")]
    device: usize,
    /// Stop after this record number.
    #[arg(long, value_name = "RECORD")]
    until: Option<u64>,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s}: {e}"))
}

fn seconds_to_ns(s: f64) -> u64 {
    (s * 1e9).max(0.0) as u64
}

fn load(inputs: &Inputs) -> Result<Run, String> {
    let run = Run::load(&inputs.inputs, inputs.timeline.as_deref())?;
    for d in &run.devices {
        if d.version() > belfry_trace::record::KNOWN_VERSION {
            eprintln!(
                "belfry-trace: {} is format v{}, newer than this tool (v{}): unknown records are skipped",
                d.path.display(),
                d.version(),
                belfry_trace::record::KNOWN_VERSION
            );
        }
        report_skipped(&d.path, "trace records", &d.skipped);
    }
    if let Some(t) = &run.timeline_path {
        report_skipped(t, "timeline events", &run.timeline_skipped);
    }
    Ok(run)
}

/// Names the lines of `path` that were skipped (the first few, with why).
fn report_skipped(path: &std::path::Path, what: &str, skipped: &Skipped) {
    if skipped.count == 0 {
        return;
    }
    eprintln!("belfry-trace: {}: {} line(s) were not {what}, skipped", path.display(), skipped.count);
    for (line, why) in &skipped.first {
        eprintln!("belfry-trace: {}:{line}: {why}", path.display());
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Show { inputs, devices, contexts, queues, fences, doorbells, kinds, from, to, follow, colour } => {
            if let Some(k) = kinds.iter().find(|k| *k != "guest" && !belfry_trace::record::KINDS.contains(&k.as_str()))
            {
                return Err(format!("unknown kind {k}: one of {}, guest", belfry_trace::record::KINDS.join(" ")));
            }
            let run = load(&inputs)?;
            let filter = Filter {
                devices,
                contexts,
                queues,
                fences,
                doorbells,
                kinds,
                from_ns: from.map(seconds_to_ns),
                to_ns: to.map(seconds_to_ns),
            };
            let colour = match colour {
                Colour::Auto => std::io::stdout().is_terminal(),
                Colour::Always => true,
                Colour::Never => false,
            };
            show::show(run, &filter, Style { colour }, follow).map_err(|e| e.to_string())
        }
        Command::Stats { inputs } => {
            let run = load(&inputs)?;
            let models: Vec<Model> = run.devices.iter().map(Model::build).collect();
            print!("{}", stats::report(&run, &models));
            Ok(())
        }
        Command::Inputs { log: InputLog { input, device, until }, list } => {
            let path = inputs::log_path(&input, device)?;
            let mut out = std::io::stdout().lock();
            let mut open = true;
            let summary = inputs::read(&path, until, |sequence, entry| {
                if list {
                    open = writeln!(out, "{}", inputs::line(sequence, entry)).is_ok();
                }
                open
            })?;
            if !open {
                return Ok(()); // closed pipe (`| head`)
            }
            let _ = write!(out, "{}", inputs::report(&path, &summary));
            match summary.error {
                Some(e) => Err(format!("{}: {e}", path.display())),
                None => Ok(()),
            }
        }
        Command::Replay { log: InputLog { input, device, until }, dump, stall, trace, allow_other_build } => {
            let path = inputs::log_path(&input, device)?;
            let settings = belfry_device::replay::Settings {
                until,
                stall: Duration::from_secs(stall),
                dump,
                trace,
                allow_other_build,
            };
            let found = belfry_device::replay::run(&path, &settings)?;
            let (text, matched) = replay::report(&path, &found);
            print!("{text}");
            let _ = std::io::stdout().flush();
            if matched {
                Ok(())
            } else {
                Err("the replay diverged from the recording".into())
            }
        }
        Command::Perfetto { inputs, output } => {
            let run = load(&inputs)?;
            let models: Vec<Model> = run.devices.iter().map(Model::build).collect();
            let trace = perfetto::build(&run, &models);
            let output = output.unwrap_or_else(|| match inputs.inputs.as_slice() {
                [dir] if dir.is_dir() => dir.join(perfetto::RUN_FILE),
                _ => PathBuf::from(perfetto::RUN_FILE),
            });
            let size = perfetto::write(&output, &perfetto::encode(&trace))?;
            println!(
                "{}: {} packets, {} KiB; open it at https://ui.perfetto.dev (Open trace file)",
                output.display(),
                trace.packet.len(),
                size / 1024
            );
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("belfry-trace: {e}");
            ExitCode::FAILURE
        }
    }
}

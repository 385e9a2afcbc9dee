//! `belfry-trace inputs`: an input log (`belfry-device --record`) read through, checked and
//! summarised — records and bytes by kind, the threads that recorded, the connections and fds
//! seen — or listed record by record (`--list`), up to a record number (`--until`). A log that
//! cannot be read further is reported with its record number and byte offset.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use belfry_trace_schema::file::Compression;
use belfry_trace_schema::input_log::{self, Entry, LogError, KIND_NAMES};

/// The input log of device `index` in run directory `input`, or `input` itself if it is a file.
pub fn log_path(input: &Path, index: usize) -> Result<PathBuf, String> {
    if !input.is_dir() {
        return Ok(input.to_path_buf());
    }
    [Compression::Gzip, Compression::None]
        .iter()
        .map(|&c| input.join(input_log::device_file_name(index, c)))
        .find(|p| p.exists())
        .ok_or_else(|| format!("{}: no input log of device {index} (was the run recorded, --record?)", input.display()))
}

/// What a log holds, as far as it reads.
#[derive(Debug, Default)]
pub struct Summary {
    /// The device's configuration (JSON).
    pub config: String,
    /// Records and payload bytes by kind byte.
    pub kinds: BTreeMap<u8, (u64, u64)>,
    /// Records by recording thread.
    pub threads: BTreeMap<u16, u64>,
    /// Records read.
    pub records: u64,
    /// Why reading stopped early, if it did.
    pub error: Option<LogError>,
}

/// Reads the log at `path` up to record `until` (inclusive), calling `each` on every record
/// until it returns false.
pub fn read(path: &Path, until: Option<u64>, mut each: impl FnMut(u64, &Entry) -> bool) -> Result<Summary, String> {
    let reader = input_log::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut summary = Summary::default();
    for result in reader {
        let (sequence, entry) = match result {
            Ok(r) => r,
            Err(e) => {
                summary.error = Some(e);
                break;
            }
        };
        if until.is_some_and(|u| sequence > u) {
            break;
        }
        let (bytes, thread) = payload(&entry);
        let k = summary.kinds.entry(entry.kind()).or_default();
        k.0 += 1;
        k.1 += bytes;
        if let Some(t) = thread {
            *summary.threads.entry(t).or_default() += 1;
        }
        if let Entry::Config { json } = &entry {
            summary.config.clone_from(json);
        }
        summary.records += 1;
        if !each(sequence, &entry) {
            break;
        }
    }
    Ok(summary)
}

/// A record's variable bytes and its thread, if it names one.
fn payload(entry: &Entry) -> (u64, Option<u16>) {
    match entry {
        Entry::Config { json } => (json.len() as u64, None),
        Entry::Message { bytes, .. } | Entry::Reply { bytes } => (bytes.len() as u64, None),
        Entry::GuestRead { thread, bytes, .. } | Entry::GuestWrite { thread, bytes, .. } => {
            (bytes.len() as u64, Some(*thread))
        }
        Entry::VramRead { thread, bytes, .. } => (bytes.len() as u64, Some(*thread)),
        Entry::Clock { thread, .. } | Entry::Ticket { thread } | Entry::Interrupt { thread, .. } => (0, Some(*thread)),
        Entry::Thread { name, .. } => (name.len() as u64, None),
        Entry::Wake { thread, tokens } => (tokens.len() as u64, Some(*thread)),
        Entry::Rung { thread, doorbells } => (doorbells.len() as u64 * 12, Some(*thread)),
        Entry::Doorbell { .. } | Entry::InterruptFd { .. } | Entry::Departure { .. } => (0, None),
    }
}

/// One record as a line.
pub fn line(sequence: u64, entry: &Entry) -> String {
    let body = match entry {
        Entry::Config { json } => json.clone(),
        Entry::Message { connection, fds, bytes } => {
            let fds: Vec<String> = fds.iter().map(|f| format!("{:?}:{}:{}", f.kind, f.dev, f.ino)).collect();
            format!("connection {connection} {} fds [{}] {}", vfio_header(bytes), fds.join(" "), hex(bytes, 16))
        }
        Entry::Reply { bytes } => format!("{} {}", vfio_header(bytes), hex(bytes, 16)),
        Entry::GuestRead { thread, address, bytes } | Entry::GuestWrite { thread, address, bytes } => {
            format!("thread {thread} {address:#x} {} bytes {}", bytes.len(), hex(bytes, 16))
        }
        Entry::VramRead { thread, offset, bytes } => {
            format!("thread {thread} vram {offset:#x} {} bytes {}", bytes.len(), hex(bytes, 16))
        }
        Entry::Doorbell { index, value } => format!("doorbell {index} value {value}"),
        Entry::InterruptFd { vector, result } => format!("vector {vector} result {result}"),
        Entry::Interrupt { thread, vector, result } => format!("thread {thread} vector {vector} result {result}"),
        Entry::Departure { connection } => format!("connection {connection}"),
        Entry::Clock { thread, ns } => format!("thread {thread} {ns} ns"),
        Entry::Ticket { thread } => format!("thread {thread}"),
        Entry::Thread { thread, name } => format!("thread {thread} is {name:?}"),
        Entry::Wake { thread, tokens } => format!("thread {thread} tokens {tokens:?}"),
        Entry::Rung { thread, doorbells } => format!("thread {thread} (index, value) {doorbells:?}"),
    };
    format!("{sequence:>10} {:<12} {body}", entry.kind_name())
}

/// The vfio-user header of a message or reply: id, command, size, flags.
fn vfio_header(bytes: &[u8]) -> String {
    let word =
        |at: usize, n: usize| bytes.get(at..at + n).map(|b| b.iter().rev().fold(0u64, |a, &x| a << 8 | u64::from(x)));
    match (word(0, 2), word(2, 2), word(4, 4), word(8, 4)) {
        (Some(id), Some(command), Some(size), Some(flags)) => {
            format!("id {id} command {command} size {size} flags {flags:#x}")
        }
        _ => format!("({} bytes, no whole header)", bytes.len()),
    }
}

fn hex(bytes: &[u8], most: usize) -> String {
    let mut s = String::new();
    for b in bytes.iter().take(most) {
        let _ = write!(s, "{b:02x}");
    }
    if bytes.len() > most {
        s.push('…');
    }
    s
}

/// The summary as text.
pub fn report(path: &Path, summary: &Summary) -> String {
    let mut out = String::new();
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    let _ = writeln!(out, "{}: {} records, {size} bytes on disk", path.display(), summary.records);
    let _ = writeln!(out, "device: {}", summary.config);
    for (kind, (count, bytes)) in &summary.kinds {
        let name = KIND_NAMES.get(usize::from(*kind)).map_or("?", |k| k.1);
        let _ = writeln!(out, "  {name:<12} {count:>10} records {bytes:>12} payload bytes");
    }
    let threads: Vec<String> = summary.threads.iter().map(|(t, n)| format!("{t}:{n}")).collect();
    let _ = writeln!(out, "threads (records): {}", threads.join(" "));
    if let Some(e) = &summary.error {
        let _ = writeln!(out, "stopped: {e}");
    }
    out
}

//! Replay (`belfry-trace replay`): the device model run again from a recorded input log
//! (`--record`), without QEMU or a guest. The device is built from the log's configuration;
//! a client thread sends the recorded vfio-user messages over a socket pair, with fds standing
//! in for the recorded ones (a memfd per guest-memory file, an eventfd per anonymous inode);
//! every block that recorded an input passes the [`Turnstile`] instead, which hands the
//! device's threads the log's records in the log's order — guest-memory bytes (written into
//! the stand-in memory before the read), clock values, doorbell values, the GPU objects' lock
//! — and compares each output the log holds (replies, interrupt eventfd writes) with the
//! device's, stopping at the first difference.
//!
//! What a replay checks is what the log holds: the device's guest-memory writes are not
//! compared (the log does not record them), and the inputs it lacks (docs/TRACE.md, "The input
//! log") can make a replay stall; a stall is reported as a divergence like a differing output.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use belfry_trace_schema::input_log::{self, Entry, FdIdentity, FdKind};
use vm_memory::ByteValued;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use crate::build_identity::BUILD;
use crate::config::DeviceConfig;
use crate::device::Device;
use crate::gpu::cmp::CommandProcessor;
use crate::record::{BUILD_FIELD, TRACE_LEVEL_FIELD};
use crate::trace::{Event, TraceLevel, TraceSettings, Tracer};
use crate::vfio_user::protocol::{read_struct, Command, DmaMapPayload, Header, FLAG_NO_REPLY, HEADER_SIZE};
use crate::vfio_user::serve_connection;

pub use crate::record::{describe, Divergence, Outcome, Turnstile};

/// How to replay.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Stop after this record number.
    pub until: Option<u64>,
    /// A record no thread reaches for this long is a divergence.
    pub stall: Duration,
    /// Dump the GPU's objects (queues, contexts, fences) where the replay stopped.
    pub dump: bool,
    /// Where the replay writes its trace (at the recorded level; none if the recorded device
    /// traced nothing); `None`: a temporary file, removed at the end.
    pub trace: Option<std::path::PathBuf>,
    /// Replay a log that another build recorded (refused otherwise, before the replay starts).
    pub allow_other_build: bool,
}

/// What a replay found.
#[derive(Debug)]
pub struct Report {
    /// How it ended.
    pub outcome: Outcome,
    /// Records passed.
    pub passed: usize,
    /// Records in the log (after the configuration and the threads' names).
    pub records: usize,
    /// Lock tickets after the last client left (the device's own stop) that the replay did
    /// not hand out in order: the log's last records, when nothing but tickets is left.
    pub released: usize,
    /// How long it took.
    pub elapsed: Duration,
    /// The GPU's objects where it stopped (`Settings::dump`).
    pub dump: Option<String>,
    /// The build that recorded the log, when it is not this one (`Settings::allow_other_build`).
    pub other_build: Option<String>,
}

/// Replays the input log at `path`.
pub fn run(path: &Path, settings: &Settings) -> Result<Report, String> {
    let started = Instant::now();
    let mut entries = Vec::new();
    for result in input_log::open(path).map_err(|e| format!("{}: {e}", path.display()))? {
        entries.push(result.map_err(|e| format!("{}: {e}", path.display()))?);
    }
    let Some((_, Entry::Config { json })) = entries.first() else {
        return Err(format!("{}: the log has no configuration", path.display()));
    };
    let bad = |e: serde_json::Error| format!("{}: the recorded configuration: {e}", path.display());
    let mut json: serde_json::Value = serde_json::from_str(json).map_err(bad)?;
    let traced: Option<TraceLevel> = match json.as_object_mut().and_then(|o| o.remove(TRACE_LEVEL_FIELD)) {
        Some(level) => serde_json::from_value(level).map_err(bad)?,
        None => None,
    };
    let recorded_by = json.as_object_mut().and_then(|o| o.remove(BUILD_FIELD));
    let other_build = match recorded_by.as_ref().map(|b| b.as_str()) {
        Some(Some(build)) if build == BUILD => None,
        Some(Some(build)) => Some(build.to_owned()),
        _ => Some(UNNAMED_BUILD.to_owned()),
    };
    if let (Some(other), false) = (&other_build, settings.allow_other_build) {
        return Err(other_build_refused(path, other));
    }
    let config: DeviceConfig = serde_json::from_value(json).map_err(bad)?;
    config.validate().map_err(|e| format!("the recorded configuration: {e}"))?;
    let log: Vec<(u64, Entry)> = entries.drain(1..).collect();
    let connections = connections(&log)?;

    let name = config.name.clone();
    // Tracing reads guest memory: the replay traces at the recorded level, into a file of
    // its own (`Settings::trace`, else a temporary one).
    let scratch = std::env::temp_dir().join(format!("belfry-replay-{}.trace.gz", std::process::id()));
    let trace_path = settings.trace.clone().unwrap_or_else(|| scratch.clone());
    let tracer = match traced {
        Some(level) => Tracer::with_file(&config, &trace_path, TraceSettings { level, ..TraceSettings::default() })
            .map_err(|e| format!("Cannot create the replay's trace {}: {e}", trace_path.display()))?,
        None => Tracer::new(&config.name),
    };
    let tracer = Arc::new(tracer);
    let device = Arc::new(Device::new(config, tracer).map_err(|e| format!("Cannot create the device: {e}"))?);
    let turnstile = Arc::new(Turnstile::new(log, &name, settings.until));
    device.replay_through(&turnstile);
    // The recording's main thread read the clock, started the GPU and served the
    // connections; one thread does the same here, the client on another.
    let (d, t) = (device.clone(), turnstile.clone());
    let serving = std::thread::Builder::new()
        .name("replay-device".into())
        .spawn(move || {
            d.tracer.emit(Event::Clock { gpu_ns: d.regs.timestamp() });
            let cmp = match CommandProcessor::start(d.gpu.clone()) {
                Ok(cmp) => cmp,
                Err(e) => return Err(format!("Cannot start the GPU: {e}")),
            };
            for messages in connections {
                serve(&d, messages);
            }
            t.release_tail();
            cmp.stop();
            t.device_stopped();
            Ok(())
        })
        .map_err(|e| format!("Cannot start the replay's device thread: {e}"))?;

    let outcome = turnstile.outcome(settings.stall);
    let (passed, records, released) = turnstile.progress();
    let dump = (settings.dump && outcome != Outcome::Finished).then(|| device.gpu.dump());
    if outcome == Outcome::Finished {
        serving.join().map_err(|_| "the replay's device thread panicked".to_string())??;
    }
    // Otherwise the device's threads stay where the replay stopped them; the caller exits.
    device.tracer.sync();
    if settings.trace.is_none() {
        let _ = std::fs::remove_file(&scratch);
    }
    Ok(Report { outcome, passed, records, released, elapsed: started.elapsed(), dump, other_build })
}

/// What a log recorded before logs named their build says it was recorded by.
pub const UNNAMED_BUILD: &str = "a build that did not name itself (an earlier belfry-device)";

/// Why a log that `other` recorded is not replayed by this build.
pub fn other_build_refused(path: &Path, other: &str) -> String {
    format!(
        "{}: recorded by {other}, not by this build, {BUILD}: a replay by another build diverges where \
         the builds differ, not where the recorded run went wrong. Replay it with a belfry-trace built \
         from the sources that recorded it, or pass --allow-other-build to try anyway",
        path.display()
    )
}

/// One connection's messages: the bytes to send, and the stand-in fds to send with each.
type Connection = Vec<(Vec<u8>, Vec<OwnedFd>)>;

/// The log's messages by connection, each with stand-ins for its fds: one memfd per recorded
/// guest-memory file (as large as its largest `DMA_MAP` needs, sealed against shrinking as
/// QEMU's are), one eventfd per recorded anonymous inode, `/dev/null` for anything else.
fn connections(log: &[(u64, Entry)]) -> Result<Vec<Connection>, String> {
    let mut sizes: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for (_, entry) in log {
        if let Entry::Message { fds, bytes, .. } = entry {
            if let (Some(fd), Some(map)) = (fds.first(), dma_map(bytes)) {
                let end = map.offset.saturating_add(map.size);
                let size = sizes.entry((fd.dev, fd.ino)).or_default();
                *size = (*size).max(end);
            }
        }
    }
    let mut stand_ins: BTreeMap<(u64, u64), Arc<OwnedFd>> = BTreeMap::new();
    let mut out: Vec<Connection> = Vec::new();
    for (_, entry) in log {
        let Entry::Message { connection, fds, bytes } = entry else { continue };
        let index = *connection as usize;
        if index >= out.len() {
            out.resize_with(index + 1, Vec::new);
        }
        let mut sent = Vec::new();
        for fd in fds {
            let stand_in = match stand_ins.get(&(fd.dev, fd.ino)) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(stand_in(fd, sizes.get(&(fd.dev, fd.ino)).copied().unwrap_or(0))?);
                    stand_ins.insert((fd.dev, fd.ino), s.clone());
                    s
                }
            };
            sent.push(stand_in.try_clone().map_err(|e| format!("dup: {e}"))?);
        }
        out[index].push((bytes.clone(), sent));
    }
    Ok(out)
}

/// A `DMA_MAP` message's payload.
fn dma_map(bytes: &[u8]) -> Option<DmaMapPayload> {
    let header: Header = read_struct(bytes)?;
    if Command::from_raw(header.command) != Some(Command::DmaMap) {
        return None;
    }
    read_struct(bytes.get(HEADER_SIZE..)?)
}

/// A file standing in for a recorded fd.
fn stand_in(fd: &FdIdentity, size: u64) -> Result<OwnedFd, String> {
    let fail = |what: &str| format!("Cannot make a stand-in {what}: {}", std::io::Error::last_os_error());
    match fd.kind {
        FdKind::File => {
            // SAFETY: a NUL-terminated name and valid flags.
            let raw = unsafe {
                libc::memfd_create(c"belfry-replay-ram".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
            };
            if raw < 0 {
                return Err(fail("memfd"));
            }
            // SAFETY: memfd_create returned a new descriptor we own.
            let file = unsafe { File::from_raw_fd(raw) };
            file.set_len(size).map_err(|e| format!("Cannot size the stand-in memfd: {e}"))?;
            // SAFETY: fcntl on a descriptor we own; F_ADD_SEALS only adds seals.
            if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
                return Err(fail("memfd seal"));
            }
            Ok(file.into())
        }
        FdKind::Anonymous => {
            // SAFETY: eventfd with valid flags.
            let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if raw < 0 {
                return Err(fail("eventfd"));
            }
            // SAFETY: eventfd returned a new descriptor we own.
            Ok(unsafe { OwnedFd::from_raw_fd(raw) })
        }
        FdKind::Other => File::open("/dev/null").map(Into::into).map_err(|e| format!("/dev/null: {e}")),
    }
}

/// Serves one recorded connection on the calling thread: the device's server on one end of
/// a socket pair, the recorded messages sent on the other by a client thread, each reply read
/// (the turnstile compares it).
fn serve(device: &Arc<Device>, messages: Connection) {
    let Ok((client, server)) = UnixStream::pair() else { return };
    let Ok(sending) = std::thread::Builder::new().name("replay-client".into()).spawn(move || send(client, &messages))
    else {
        return;
    };
    serve_connection(device, server);
    let _ = sending.join();
}

/// Sends `messages` and reads their replies, then closes the connection.
fn send(mut client: UnixStream, messages: &Connection) {
    for (bytes, fds) in messages {
        let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let sent = if raw.is_empty() {
            client.write_all(bytes)
        } else {
            client
                .send_with_fds(&[&bytes[..]], &raw)
                .map_err(std::io::Error::from)
                .and_then(|n| client.write_all(&bytes[n..]))
        };
        if sent.is_err() {
            return;
        }
        let posted = read_struct::<Header>(bytes).is_some_and(|h| h.flags & FLAG_NO_REPLY != 0);
        if !posted && read_reply(&mut client).is_err() {
            return;
        }
    }
}

/// Reads one reply (header and payload; an fd sent with it is closed by the read).
fn read_reply(client: &mut UnixStream) -> std::io::Result<()> {
    let mut header = Header::default();
    client.read_exact(header.as_mut_slice())?;
    let mut payload = vec![0u8; (header.message_size as usize).saturating_sub(HEADER_SIZE)];
    client.read_exact(&mut payload)
}

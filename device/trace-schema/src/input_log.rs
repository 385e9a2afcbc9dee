//! The input log (`device<I>.record`, gzip by default): what crossed a device's boundary, in a
//! compact, versioned binary file of length-prefixed records, each with the next number of one
//! sequence the whole device shares.
//!
//! ```text
//! file    = MAGIC (8 bytes) version (u16 LE) record*
//! record  = length (u32 LE, of what follows) sequence (u64 LE) kind (u8) payload
//! ```
//!
//! The first record is always [`Entry::Config`] (the device's configuration as JSON, the trace
//! header's `device` record). The kinds are listed by [`KIND_NAMES`]; a payload's last byte
//! string runs to the end of its record. The file is untrusted input: [`LogReader`] bounds every
//! length, checks the sequence, and reports anything else as a [`LogError`] naming the record
//! number and byte offset, never a panic. A log cut short (a device killed while writing)
//! reads up to its last whole record and then reports the torn one.
//!
//! Hand-written rather than derived by a serialization crate: the layout is the contract between
//! a device and a later tool, every field's width is explicit, and decoding untrusted bytes
//! stays a few bounded reads with no allocation larger than the record's checked length.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;

use crate::file::{Compression, GZIP_MAGIC};

/// The first eight bytes of every (decompressed) input log.
pub const MAGIC: [u8; 8] = *b"BFRYINPT";

/// The format version this crate writes and reads.
pub const VERSION: u16 = 3;

/// The oldest format version this crate reads (1: no [`Entry::Thread`] records).
pub const OLDEST_VERSION: u16 = 1;

/// The longest record accepted (a vfio-user message is at most 1 MiB, a DMA read a page walk's
/// or a packet's bytes): a longer length is garbage, not an allocation.
pub const MAX_RECORD_BYTES: u32 = 16 << 20;

/// The most fds one vfio-user message carries (the protocol's `MAX_MSG_FDS`).
pub const MAX_FDS: usize = 16;

/// The most tokens one [`Entry::Wake`] holds (the command processor's epoll reports at most 8).
pub const MAX_WAKE_TOKENS: usize = 8;

/// The file name a device's input log gets in a run directory.
pub fn device_file_name(index: usize, compression: Compression) -> String {
    match compression {
        Compression::Gzip => format!("device{index}.record.gz"),
        Compression::None => format!("device{index}.record"),
    }
}

/// What kind of file an fd sent with a vfio-user message was (its identity is `dev`/`ino`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdKind {
    /// A regular file or memfd (guest memory).
    File,
    /// An eventfd or another anonymous inode.
    Anonymous,
    /// A pipe, socket, directory or device node.
    Other,
}

/// One fd sent with a vfio-user message: what it was and which file (`fstat`'s `st_dev`,
/// `st_ino`), so a replay can tell two messages naming one file from two naming two files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdIdentity {
    /// Its kind.
    pub kind: FdKind,
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// One record of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The device's configuration, as the trace header's `device` JSON.
    Config {
        /// JSON text.
        json: String,
    },
    /// A vfio-user message as received: header and body bytes, and the fds sent with it.
    Message {
        /// Which connection of the device's life (0, 1, … with `--persist`).
        connection: u32,
        /// The fds' identities, in the order received.
        fds: Vec<FdIdentity>,
        /// Header and body.
        bytes: Vec<u8>,
    },
    /// The reply the device sent to a message (an output): header and payload bytes.
    Reply {
        /// Header and payload.
        bytes: Vec<u8>,
    },
    /// Bytes the device read from guest memory.
    GuestRead {
        /// The reading thread (see [`Entry::Ticket`]).
        thread: u16,
        /// Guest physical (IOVA) address.
        address: u64,
        /// What was read.
        bytes: Vec<u8>,
    },
    /// Bytes the device wrote to guest memory (an output).
    GuestWrite {
        /// The writing thread.
        thread: u16,
        /// Guest physical (IOVA) address.
        address: u64,
        /// What was written.
        bytes: Vec<u8>,
    },
    /// Bytes the device read from VRAM the guest can store into.
    VramRead {
        /// The reading thread.
        thread: u16,
        /// Offset in VRAM.
        offset: u64,
        /// What was read.
        bytes: Vec<u8>,
    },
    /// A doorbell value as the command processor read it.
    Doorbell {
        /// Doorbell index.
        index: u32,
        /// The value read.
        value: u64,
    },
    /// The result of writing an interrupt eventfd (0 or a negative errno), with no thread
    /// (versions 1 and 2; read, no longer written).
    InterruptFd {
        /// MSI-X vector.
        vector: u16,
        /// 0 or `-errno`.
        result: i32,
    },
    /// The result of writing an interrupt eventfd (0 or a negative errno) by a thread (version
    /// 3): which thread raised an interrupt follows from decisions the log orders (a raise goes
    /// out at once, or the moderation thread releases it), so a replay holds each thread to its
    /// own.
    Interrupt {
        /// The writing thread.
        thread: u16,
        /// MSI-X vector.
        vector: u16,
        /// 0 or `-errno`.
        result: i32,
    },
    /// A client's connection ended (version 3): the device found the end of its stream and
    /// starts the departure (resets the function, drops its eventfds and mappings). A replay
    /// starts it here, not when its own client, which sends every message without waiting on
    /// the device's other threads, closes the stream.
    Departure {
        /// The connection (0, 1, … as they started).
        connection: u32,
    },
    /// A clock or timer read.
    Clock {
        /// The reading thread.
        thread: u16,
        /// The value read (GPU nanoseconds).
        ns: u64,
    },
    /// A thread took an ordered lock (the GPU objects', the record ring's) or made an ordered
    /// access (a register another thread also reads or writes, VRAM): the order a replay
    /// hands them out in.
    Ticket {
        /// The thread.
        thread: u16,
    },
    /// A thread's name, recorded before its first record (version 2): a replay matches the
    /// device's named threads (`belfry0-cmp`, `belfry0-compute`, …) to its own by name.
    Thread {
        /// The thread's number in the log.
        thread: u16,
        /// Its name (empty if it has none).
        name: String,
    },
    /// What one look at the trapped doorbells found (version 2): every doorbell rung since
    /// the previous look, with its value (none: nothing rung), so a replay takes the same.
    Rung {
        /// The looking thread.
        thread: u16,
        /// `(index, value)` of each doorbell rung.
        doorbells: Vec<(u32, u64)>,
    },
    /// A wake-up of the command processor's wait (version 2): the tokens its epoll reported,
    /// in order (none: the wait timed out), so a replay runs the same turns of its loop.
    Wake {
        /// The waiting thread.
        thread: u16,
        /// The tokens' numbers (`Kill` 0, `Reset` 1, `Mailbox` 2, `Doorbell` 3), at most 8.
        tokens: Vec<u8>,
    },
}

/// Each kind's byte and name, in byte order.
pub const KIND_NAMES: [(u8, &str); 15] = [
    (0, "config"),
    (1, "message"),
    (2, "reply"),
    (3, "guest_read"),
    (4, "guest_write"),
    (5, "vram_read"),
    (6, "doorbell"),
    (7, "interrupt_fd"),
    (8, "clock"),
    (9, "ticket"),
    (10, "thread"),
    (11, "wake"),
    (12, "rung"),
    (13, "interrupt"),
    (14, "departure"),
];

impl Entry {
    /// The kind's byte.
    pub fn kind(&self) -> u8 {
        match self {
            Entry::Config { .. } => 0,
            Entry::Message { .. } => 1,
            Entry::Reply { .. } => 2,
            Entry::GuestRead { .. } => 3,
            Entry::GuestWrite { .. } => 4,
            Entry::VramRead { .. } => 5,
            Entry::Doorbell { .. } => 6,
            Entry::InterruptFd { .. } => 7,
            Entry::Clock { .. } => 8,
            Entry::Ticket { .. } => 9,
            Entry::Thread { .. } => 10,
            Entry::Wake { .. } => 11,
            Entry::Rung { .. } => 12,
            Entry::Interrupt { .. } => 13,
            Entry::Departure { .. } => 14,
        }
    }

    /// The kind's name.
    pub fn kind_name(&self) -> &'static str {
        KIND_NAMES[usize::from(self.kind())].1
    }

    /// Whether the device produced it (a replay compares outputs, and feeds the rest).
    pub fn is_output(&self) -> bool {
        matches!(self, Entry::Reply { .. } | Entry::GuestWrite { .. })
    }

    fn encode_payload(&self, out: &mut Vec<u8>) {
        match self {
            Entry::Config { json } => out.extend_from_slice(json.as_bytes()),
            Entry::Message { connection, fds, bytes } => {
                out.extend_from_slice(&connection.to_le_bytes());
                // At most MAX_FDS (the writer refuses more), so the count fits a byte.
                out.push(u8::try_from(fds.len()).unwrap_or(u8::MAX));
                for fd in fds {
                    out.push(match fd.kind {
                        FdKind::File => 0,
                        FdKind::Anonymous => 1,
                        FdKind::Other => 2,
                    });
                    out.extend_from_slice(&fd.dev.to_le_bytes());
                    out.extend_from_slice(&fd.ino.to_le_bytes());
                }
                out.extend_from_slice(bytes);
            }
            Entry::Reply { bytes } => out.extend_from_slice(bytes),
            Entry::GuestRead { thread, address, bytes } | Entry::GuestWrite { thread, address, bytes } => {
                out.extend_from_slice(&thread.to_le_bytes());
                out.extend_from_slice(&address.to_le_bytes());
                out.extend_from_slice(bytes);
            }
            Entry::VramRead { thread, offset, bytes } => {
                out.extend_from_slice(&thread.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(bytes);
            }
            Entry::Doorbell { index, value } => {
                out.extend_from_slice(&index.to_le_bytes());
                out.extend_from_slice(&value.to_le_bytes());
            }
            Entry::InterruptFd { vector, result } => {
                out.extend_from_slice(&vector.to_le_bytes());
                out.extend_from_slice(&result.to_le_bytes());
            }
            Entry::Departure { connection } => out.extend_from_slice(&connection.to_le_bytes()),
            Entry::Interrupt { thread, vector, result } => {
                out.extend_from_slice(&thread.to_le_bytes());
                out.extend_from_slice(&vector.to_le_bytes());
                out.extend_from_slice(&result.to_le_bytes());
            }
            Entry::Clock { thread, ns } => {
                out.extend_from_slice(&thread.to_le_bytes());
                out.extend_from_slice(&ns.to_le_bytes());
            }
            Entry::Ticket { thread } => out.extend_from_slice(&thread.to_le_bytes()),
            Entry::Thread { thread, name } => {
                out.extend_from_slice(&thread.to_le_bytes());
                out.extend_from_slice(name.as_bytes());
            }
            Entry::Wake { thread, tokens } => {
                out.extend_from_slice(&thread.to_le_bytes());
                out.extend_from_slice(tokens);
            }
            Entry::Rung { thread, doorbells } => {
                out.extend_from_slice(&thread.to_le_bytes());
                for (index, value) in doorbells {
                    out.extend_from_slice(&index.to_le_bytes());
                    out.extend_from_slice(&value.to_le_bytes());
                }
            }
        }
    }

    fn decode_payload(kind: u8, payload: &[u8]) -> Result<Entry, Problem> {
        let mut p = Fields { rest: payload };
        let entry = match kind {
            0 => Entry::Config {
                json: String::from_utf8(p.rest().to_vec()).map_err(|_| Problem::Malformed("config is not UTF-8"))?,
            },
            1 => {
                let connection = p.u32()?;
                let count = usize::from(p.u8()?);
                if count > MAX_FDS {
                    return Err(Problem::Malformed("more fds than a message carries"));
                }
                let mut fds = Vec::with_capacity(count);
                for _ in 0..count {
                    let kind = match p.u8()? {
                        0 => FdKind::File,
                        1 => FdKind::Anonymous,
                        2 => FdKind::Other,
                        _ => return Err(Problem::Malformed("unknown fd kind")),
                    };
                    fds.push(FdIdentity { kind, dev: p.u64()?, ino: p.u64()? });
                }
                Entry::Message { connection, fds, bytes: p.rest().to_vec() }
            }
            2 => Entry::Reply { bytes: p.rest().to_vec() },
            3 => Entry::GuestRead { thread: p.u16()?, address: p.u64()?, bytes: p.rest().to_vec() },
            4 => Entry::GuestWrite { thread: p.u16()?, address: p.u64()?, bytes: p.rest().to_vec() },
            5 => Entry::VramRead { thread: p.u16()?, offset: p.u64()?, bytes: p.rest().to_vec() },
            6 => Entry::Doorbell { index: p.u32()?, value: p.u64()? },
            7 => Entry::InterruptFd { vector: p.u16()?, result: p.i32()? },
            8 => Entry::Clock { thread: p.u16()?, ns: p.u64()? },
            9 => Entry::Ticket { thread: p.u16()? },
            10 => Entry::Thread {
                thread: p.u16()?,
                name: String::from_utf8(p.rest().to_vec())
                    .map_err(|_| Problem::Malformed("thread name is not UTF-8"))?,
            },
            11 => {
                let thread = p.u16()?;
                let tokens = p.rest().to_vec();
                if tokens.len() > MAX_WAKE_TOKENS {
                    return Err(Problem::Malformed("more tokens than a wake-up reports"));
                }
                Entry::Wake { thread, tokens }
            }
            12 => {
                let thread = p.u16()?;
                if !p.rest.len().is_multiple_of(12) {
                    return Err(Problem::Malformed("a rung doorbell is not 12 bytes"));
                }
                let mut doorbells = Vec::with_capacity(p.rest.len() / 12);
                while !p.rest.is_empty() {
                    doorbells.push((p.u32()?, p.u64()?));
                }
                Entry::Rung { thread, doorbells }
            }
            13 => Entry::Interrupt { thread: p.u16()?, vector: p.u16()?, result: p.i32()? },
            14 => Entry::Departure { connection: p.u32()? },
            other => return Err(Problem::UnknownKind(other)),
        };
        if !p.rest.is_empty() {
            return Err(Problem::Malformed("bytes left after the record's fields"));
        }
        Ok(entry)
    }
}

/// A payload read field by field, each read bounded by what is left.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Problem> {
        let (head, tail) =
            self.rest.split_first_chunk::<N>().ok_or(Problem::Malformed("record shorter than its fields"))?;
        self.rest = tail;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, Problem> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, Problem> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, Problem> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn i32(&mut self) -> Result<i32, Problem> {
        Ok(i32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, Problem> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }
}

/// What is wrong with a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The file does not start with [`MAGIC`].
    NotALog,
    /// A format version this reader does not know.
    Version(u16),
    /// The file ends inside a record (or inside the file header).
    Truncated,
    /// A record's length is below its fixed part or above [`MAX_RECORD_BYTES`].
    Length(u32),
    /// A kind byte no version of the format defines.
    UnknownKind(u8),
    /// A record's sequence number is not the next one.
    Sequence {
        /// The number due.
        expected: u64,
        /// The number found.
        found: u64,
    },
    /// The first record is not the configuration.
    NoConfig,
    /// A record's fields do not decode.
    Malformed(&'static str),
    /// Reading failed.
    Io(String),
}

/// A log that cannot be read further: what is wrong and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogError {
    /// The number of the record being read (0 is the configuration).
    pub record: u64,
    /// Its byte offset in the (decompressed) file.
    pub offset: u64,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "input log record {} (byte {}): ", self.record, self.offset)?;
        match &self.problem {
            Problem::NotALog => write!(f, "not a Belfry input log (no {:?} magic)", String::from_utf8_lossy(&MAGIC)),
            Problem::Version(v) => write!(f, "format version {v}, this reader knows {OLDEST_VERSION} to {VERSION}"),
            Problem::Truncated => write!(f, "the file ends inside the record (torn or truncated)"),
            Problem::Length(n) => write!(f, "record length {n} outside 9..={MAX_RECORD_BYTES}"),
            Problem::UnknownKind(k) => write!(f, "unknown record kind {k}"),
            Problem::Sequence { expected, found } => write!(f, "sequence number {found}, expected {expected}"),
            Problem::NoConfig => write!(f, "the first record is not the device configuration"),
            Problem::Malformed(why) => write!(f, "malformed: {why}"),
            Problem::Io(e) => write!(f, "read error: {e}"),
        }
    }
}

impl std::error::Error for LogError {}

/// Where a log's bytes go.
enum Sink {
    Gzip(GzEncoder<BufWriter<File>>),
    Plain(BufWriter<File>),
    Other(Box<dyn Write + Send>),
}

impl Sink {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Sink::Gzip(w) => w,
            Sink::Plain(w) => w,
            Sink::Other(w) => w,
        }
    }
}

/// Writes a log: the file header, then records numbered in the order given.
pub struct LogWriter {
    out: Sink,
    next: u64,
    buf: Vec<u8>,
}

impl LogWriter {
    /// A log on `out`, its header written, starting with the configuration record.
    pub fn new(out: Box<dyn Write + Send>, config_json: &str) -> io::Result<LogWriter> {
        LogWriter::on(Sink::Other(out), config_json)
    }

    fn on(mut out: Sink, config_json: &str) -> io::Result<LogWriter> {
        out.writer().write_all(&MAGIC)?;
        out.writer().write_all(&VERSION.to_le_bytes())?;
        let mut w = LogWriter { out, next: 0, buf: Vec::new() };
        w.append(&Entry::Config { json: config_json.to_owned() })?;
        Ok(w)
    }

    /// A log file at `path`, gzip-compressed (deflate level 1) or plain.
    pub fn create(path: &Path, compression: Compression, config_json: &str) -> io::Result<LogWriter> {
        let file = BufWriter::with_capacity(1 << 16, File::create(path)?);
        let out = match compression {
            Compression::Gzip => Sink::Gzip(GzEncoder::new(file, flate2::Compression::fast())),
            Compression::None => Sink::Plain(file),
        };
        LogWriter::on(out, config_json)
    }

    /// Appends `entry` with the next sequence number, which it returns.
    pub fn append(&mut self, entry: &Entry) -> io::Result<u64> {
        if let Entry::Message { fds, .. } = entry {
            if fds.len() > MAX_FDS {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "more fds than a message carries"));
            }
        }
        self.buf.clear();
        self.buf.extend_from_slice(&[0; 4]);
        self.buf.extend_from_slice(&self.next.to_le_bytes());
        self.buf.push(entry.kind());
        entry.encode_payload(&mut self.buf);
        let length = u32::try_from(self.buf.len() - 4)
            .ok()
            .filter(|&n| n <= MAX_RECORD_BYTES)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "record above MAX_RECORD_BYTES"))?;
        self.buf[..4].copy_from_slice(&length.to_le_bytes());
        self.out.writer().write_all(&self.buf)?;
        self.next += 1;
        Ok(self.next - 1)
    }

    /// How many records were written.
    pub fn records(&self) -> u64 {
        self.next
    }

    /// Writes out what is buffered (a gzip stream stays open: a reader reads up to here).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.writer().flush()
    }

    /// Ends the log: a gzip stream gets its trailer, and everything is written out.
    pub fn finish(self) -> io::Result<()> {
        match self.out {
            Sink::Gzip(w) => w.finish()?.flush(),
            Sink::Plain(mut w) => w.flush(),
            Sink::Other(mut w) => w.flush(),
        }
    }
}

/// Reads a log record by record.
pub struct LogReader<R> {
    input: R,
    offset: u64,
    next: u64,
    failed: bool,
}

/// Opens a log file, gzip or plain (told apart by the gzip magic bytes).
pub fn open(path: &Path) -> Result<LogReader<Box<dyn Read>>, LogError> {
    let io_error = |e: io::Error| LogError { record: 0, offset: 0, problem: Problem::Io(e.to_string()) };
    let mut file = BufReader::new(File::open(path).map_err(io_error)?);
    let mut magic = [0u8; 2];
    let gzip = matches!(file.read(&mut magic), Ok(2)) && magic == GZIP_MAGIC;
    let file = BufReader::new(File::open(path).map_err(io_error)?);
    let input: Box<dyn Read> = if gzip { Box::new(MultiGzDecoder::new(file)) } else { Box::new(file) };
    LogReader::new(input)
}

impl<R: Read> LogReader<R> {
    /// Checks the file header of `input` and reads from the first record on.
    pub fn new(mut input: R) -> Result<LogReader<R>, LogError> {
        let at_start = |problem| LogError { record: 0, offset: 0, problem };
        let mut head = [0u8; 10];
        let n = read_full(&mut input, &mut head).map_err(|e| at_start(Problem::Io(e.to_string())))?;
        let compared = n.min(MAGIC.len());
        if head[..compared] != MAGIC[..compared] {
            return Err(at_start(Problem::NotALog));
        }
        if n < head.len() {
            return Err(at_start(Problem::Truncated));
        }
        let version = u16::from_le_bytes([head[8], head[9]]);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(at_start(Problem::Version(version)));
        }
        Ok(LogReader { input, offset: 10, next: 0, failed: false })
    }

    /// The next record and its sequence number; `None` at a clean end; after an error, `None`.
    pub fn next_entry(&mut self) -> Option<Result<(u64, Entry), LogError>> {
        if self.failed {
            return None;
        }
        let result = self.read_one().transpose()?;
        if result.is_err() {
            self.failed = true;
        }
        Some(result)
    }

    fn read_one(&mut self) -> Result<Option<(u64, Entry)>, LogError> {
        let record_offset = self.offset;
        let fail = |problem| LogError { record: self.next, offset: record_offset, problem };
        let mut length = [0u8; 4];
        match read_full(&mut self.input, &mut length) {
            Ok(0) => return Ok(None),
            Ok(4) => {}
            Ok(_) => return Err(fail(Problem::Truncated)),
            Err(e) => return Err(fail(Problem::Io(e.to_string()))),
        }
        let length = u32::from_le_bytes(length);
        if !(9..=MAX_RECORD_BYTES).contains(&length) {
            return Err(fail(Problem::Length(length)));
        }
        let mut body = vec![0u8; length as usize];
        match read_full(&mut self.input, &mut body) {
            Ok(n) if n == body.len() => {}
            Ok(_) => return Err(fail(Problem::Truncated)),
            Err(e) => return Err(fail(Problem::Io(e.to_string()))),
        }
        let (sequence, rest) = body.split_first_chunk::<8>().ok_or_else(|| fail(Problem::Truncated))?;
        let sequence = u64::from_le_bytes(*sequence);
        if sequence != self.next {
            return Err(fail(Problem::Sequence { expected: self.next, found: sequence }));
        }
        let (&kind, payload) = rest.split_first().ok_or_else(|| fail(Problem::Truncated))?;
        if self.next == 0 && kind != 0 {
            return Err(fail(Problem::NoConfig));
        }
        let entry = Entry::decode_payload(kind, payload).map_err(fail)?;
        self.offset += 4 + u64::from(length);
        self.next += 1;
        Ok(Some((sequence, entry)))
    }
}

impl<R: Read> Iterator for LogReader<R> {
    type Item = Result<(u64, Entry), LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry()
    }
}

/// Reads until `buf` is full or the input ends; how many bytes came.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A gzip stream cut short ends the input like a plain file cut short.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

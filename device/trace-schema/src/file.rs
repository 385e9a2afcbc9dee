//! How a trace file is stored: one JSON record a line, compressed with gzip by default
//! ([`Compression::Gzip`]) or plain ([`Compression::None`]). [`Writer`] writes either;
//! [`open`] reads either, told apart by the gzip magic bytes rather than the file's name.
//!
//! A trace is read while its device still writes it (`belfry-trace show --follow`, the device's
//! tests) and may end torn (a device killed before it finished the stream), so the reader
//! ([`GzipLines`]) decompresses as far as the bytes written so far go, keeps its state at the
//! end of the file and goes on when the file grows; a missing gzip trailer is no error.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::str::FromStr;

use flate2::write::GzEncoder;
use flate2::{Decompress, FlushDecompress, Status};

/// The first two bytes of every gzip member.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The file name a device trace gets in a run directory, by compression
/// (`device<I>.trace.jsonl.gz`, or `device<I>.trace.jsonl` plain).
pub fn device_file_name(index: usize, compression: Compression) -> String {
    match compression {
        Compression::Gzip => format!("device{index}.trace.jsonl.gz"),
        Compression::None => format!("device{index}.trace.jsonl"),
    }
}

/// How a trace file's lines are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// gzip (deflate level 1: the trace writer shares the device's CPUs; see `docs/DESIGN.md`).
    #[default]
    Gzip,
    /// Plain JSON lines.
    None,
}

impl FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "gzip" => Ok(Compression::Gzip),
            "none" => Ok(Compression::None),
            other => Err(format!("unknown trace compression {other:?} (gzip or none)")),
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compression::Gzip => "gzip",
            Compression::None => "none",
        })
    }
}

/// The writing end of a trace file. `flush` makes everything written so far readable (a gzip
/// sync flush); [`Writer::finish`] ends the file (the gzip trailer).
pub struct Writer {
    out: Out,
}

enum Out {
    Plain(BufWriter<File>),
    Gzip(GzEncoder<BufWriter<File>>),
}

impl Writer {
    /// `path`, created or truncated, written with `compression`.
    pub fn create(path: &Path, compression: Compression) -> io::Result<Writer> {
        let file = BufWriter::with_capacity(1 << 16, File::create(path)?);
        let out = match compression {
            Compression::None => Out::Plain(file),
            Compression::Gzip => Out::Gzip(GzEncoder::new(file, flate2::Compression::fast())),
        };
        Ok(Writer { out })
    }

    /// Ends the file: the gzip trailer, then everything flushed.
    pub fn finish(self) -> io::Result<()> {
        match self.out {
            Out::Plain(mut f) => f.flush(),
            Out::Gzip(gz) => gz.finish()?.flush(),
        }
    }
}

impl Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.out {
            Out::Plain(f) => f.write(buf),
            Out::Gzip(gz) => gz.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.out {
            Out::Plain(f) => f.flush(),
            Out::Gzip(gz) => gz.flush(),
        }
    }
}

/// A trace file opened for reading: its decompressed bytes, whichever its form.
pub type Reader = BufReader<Box<dyn Read + Send>>;

/// Opens the trace file at `path`, plain or gzip (by its first bytes).
pub fn open(path: &Path) -> io::Result<Reader> {
    let mut file = BufReader::new(File::open(path)?);
    let gzip = file.fill_buf()?.starts_with(&GZIP_MAGIC);
    let inner: Box<dyn Read + Send> = if gzip { Box::new(GzipLines::new(file)) } else { Box::new(file) };
    Ok(BufReader::with_capacity(1 << 16, inner))
}

/// Whether the file at `path` is gzip-compressed.
pub fn is_gzip(path: &Path) -> io::Result<bool> {
    let mut magic = [0u8; 2];
    let mut file = File::open(path)?;
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got == magic.len() && magic == GZIP_MAGIC)
}

/// Where [`GzipLines`] is in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Reading a member's header (bytes kept until it is whole).
    Header,
    /// Inflating a member's body.
    Body,
    /// Skipping a member's 8-byte trailer (bytes left).
    Trailer(usize),
}

/// A gzip reader for files that may still grow or end torn: at the end of the bytes there are,
/// `read` returns 0 and keeps its place, and a later `read` goes on from there. Members follow
/// one another (as `cat a.gz b.gz` makes); CRCs are not checked (a trace is read for what it
/// says, and a torn one has none).
pub struct GzipLines<R> {
    inner: R,
    stage: Stage,
    header: Vec<u8>,
    inflate: Decompress,
}

impl<R: BufRead> GzipLines<R> {
    /// Reads the gzip stream of `inner`.
    pub fn new(inner: R) -> Self {
        GzipLines { inner, stage: Stage::Header, header: Vec::new(), inflate: Decompress::new(false) }
    }
}

/// The length of the gzip member header at the start of `h` once it is whole (RFC 1952 2.3),
/// `Ok(None)` while more bytes are needed.
fn header_length(h: &[u8]) -> io::Result<Option<usize>> {
    const FHCRC: u8 = 1 << 1;
    const FEXTRA: u8 = 1 << 2;
    const FNAME: u8 = 1 << 3;
    const FCOMMENT: u8 = 1 << 4;
    if h.len() < 10 {
        return Ok(None);
    }
    if h[..2] != GZIP_MAGIC || h[2] != 8 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a gzip member (bad magic or method)"));
    }
    let flags = h[3];
    let mut at = 10;
    if flags & FEXTRA != 0 {
        let Some(len) = h.get(at..at + 2) else { return Ok(None) };
        at += 2 + usize::from(u16::from_le_bytes([len[0], len[1]]));
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            let Some(end) = h.get(at..).and_then(|rest| rest.iter().position(|&b| b == 0)) else {
                return Ok(None);
            };
            at += end + 1;
        }
    }
    if flags & FHCRC != 0 {
        at += 2;
    }
    Ok((h.len() >= at).then_some(at))
}

impl<R: BufRead> Read for GzipLines<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            let input = self.inner.fill_buf()?;
            // The inflater may still hold output for bytes it took earlier: a body is asked even
            // at the end of the input.
            if input.is_empty() && self.stage != Stage::Body {
                return Ok(0);
            }
            match self.stage {
                Stage::Header => {
                    // Byte by byte: a header is a few bytes, and what follows it is the body.
                    let byte = input[0];
                    self.inner.consume(1);
                    self.header.push(byte);
                    if let Some(len) = header_length(&self.header)? {
                        debug_assert_eq!(len, self.header.len());
                        self.header.clear();
                        self.inflate.reset(false);
                        self.stage = Stage::Body;
                    }
                }
                Stage::Trailer(left) => {
                    let n = left.min(input.len());
                    self.inner.consume(n);
                    self.stage = if n == left { Stage::Header } else { Stage::Trailer(left - n) };
                }
                Stage::Body => {
                    let (in_before, out_before) = (self.inflate.total_in(), self.inflate.total_out());
                    let status = self
                        .inflate
                        .decompress(input, out, FlushDecompress::None)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    let consumed = (self.inflate.total_in() - in_before) as usize;
                    let produced = (self.inflate.total_out() - out_before) as usize;
                    self.inner.consume(consumed);
                    if status == Status::StreamEnd {
                        self.stage = Stage::Trailer(8);
                    }
                    if produced > 0 {
                        return Ok(produced);
                    }
                    if consumed == 0 && status != Status::StreamEnd {
                        // Nothing more can come out of the bytes there are: wait for more.
                        return Ok(0);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

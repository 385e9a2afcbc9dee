//! Loading what the tool reads: a run directory of `cargo belfry` (`device<I>.trace.jsonl.gz`
//! or plain `device<I>.trace.jsonl`, and the guest's `timeline.txt`) or trace files named one by
//! one, put on one clock. A trace file is read gzip or plain by its first bytes.
//!
//! Run time: each device's `t_ns` counts from its own tracer's start; the header's
//! `CLOCK_MONOTONIC` at that start aligns the devices of one host, and the earliest start is
//! the run's zero. Files without a header (format version 1) start at zero.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use belfry_trace_schema::file;

use crate::lines::{Line, Lines, Skipped, MAX_LINE_BYTES};
use crate::record::{self, signed, Event, Header, Record, MAX_DEVICE_INDEX};
use crate::timeline::{self, GuestEvent};

/// One device's trace.
#[derive(Debug)]
pub struct DeviceTrace {
    /// Device index (from `device<I>.trace.jsonl`, else the position on the command line).
    pub index: usize,
    /// Device name (from the header or the records).
    pub name: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// The header, for version 2 on.
    pub header: Option<Header>,
    /// Every record, in file order.
    pub records: Vec<Record>,
    /// Lines that were not records.
    pub skipped: Skipped,
    /// Bytes read so far (for `--follow`).
    pub read_bytes: u64,
    /// Lines read so far (the number of the last one).
    pub read_lines: u64,
    /// Added to `t_ns` to give run time.
    pub run_offset_ns: u64,
    /// `gpu_ns - t_ns` from the `clock` record (GPU time to trace time), if there is one.
    pub gpu_minus_trace: Option<i64>,
    /// A gzip file's reader, kept between reads.
    gzip: Option<GzipFollow>,
}

/// The reader of a gzip trace, kept open between reads (a gzip stream cannot be entered at an
/// offset), with the torn last line it already gave, read again before what follows it.
struct GzipFollow {
    reader: file::Reader,
    torn: Vec<u8>,
}

impl std::fmt::Debug for GzipFollow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GzipFollow").field("torn", &self.torn.len()).finish_non_exhaustive()
    }
}

impl DeviceTrace {
    /// Device `index` read from `path`, with no records yet ([`DeviceTrace::read_more`] reads
    /// them).
    pub fn empty(path: &Path, index: usize) -> DeviceTrace {
        DeviceTrace {
            index,
            name: format!("device{index}"),
            path: path.to_path_buf(),
            header: None,
            records: Vec::new(),
            skipped: Skipped::default(),
            read_bytes: 0,
            read_lines: 0,
            run_offset_ns: 0,
            gpu_minus_trace: None,
            gzip: None,
        }
    }

    /// Reads `path` as device `index`.
    pub fn read(path: &Path, index: usize) -> std::io::Result<DeviceTrace> {
        let mut d = DeviceTrace::empty(path, index);
        d.read_more()?;
        Ok(d)
    }

    /// Reads records appended to the file since the last read (whole lines only); returns how
    /// many.
    pub fn read_more(&mut self) -> std::io::Result<usize> {
        use std::io::{Seek, SeekFrom};
        if self.gzip.is_none() && self.read_bytes == 0 && file::is_gzip(&self.path)? {
            self.gzip = Some(GzipFollow { reader: file::open(&self.path)?, torn: Vec::new() });
        }
        if let Some(mut gzip) = self.gzip.take() {
            let before = std::io::Cursor::new(std::mem::take(&mut gzip.torn));
            let read = self.read_lines_keeping_torn(std::io::Read::chain(before, &mut gzip.reader));
            if let Ok((_, Some(torn))) = &read {
                gzip.torn = torn.clone().into_bytes();
            }
            self.gzip = Some(gzip);
            return read.map(|(n, _)| n);
        }
        let mut f = std::fs::File::open(&self.path)?;
        f.seek(SeekFrom::Start(self.read_bytes))?;
        self.read_lines_from(std::io::BufReader::new(f))
    }

    /// Reads the whole lines of `input` as the continuation of the file (a last line without
    /// its newline is left for the next read: a live file's torn end); returns how many
    /// records were added. Lines that are not records are noted in `skipped`.
    pub fn read_lines_from(&mut self, input: impl BufRead) -> std::io::Result<usize> {
        self.read_lines_keeping_torn(input).map(|(n, _)| n)
    }

    /// [`DeviceTrace::read_lines_from`], also giving the torn last line's text, if any.
    fn read_lines_keeping_torn(&mut self, input: impl BufRead) -> std::io::Result<(usize, Option<String>)> {
        let mut lines = Lines::new(input, self.read_lines.saturating_add(1));
        let mut batch = Vec::new();
        let mut torn = None;
        while let Some(numbered) = lines.next_line()? {
            if !numbered.terminated {
                if let Line::Text(text) = numbered.line {
                    torn = Some(text);
                }
                break;
            }
            self.read_bytes = self.read_bytes.saturating_add(numbered.bytes);
            self.read_lines = numbered.number;
            match numbered.line {
                Line::Text(text) if text.trim().is_empty() => {}
                Line::Text(text) => match record::parse_line(&text) {
                    Ok(r) => batch.push(r),
                    Err(why) => self.skipped.note(numbered.number, why),
                },
                Line::TooLong(length) => self.skipped.note(
                    numbered.number,
                    format!("a line of {length} bytes, over the {MAX_LINE_BYTES}-byte limit of a record"),
                ),
            }
        }
        // Version 2 files are in time order; version 1 writers could interleave threads'
        // records slightly out of it.
        batch.sort_by_key(|r| r.t_ns);
        let n = batch.len();
        for r in batch {
            self.add(r);
        }
        Ok((n, torn))
    }

    fn add(&mut self, r: Record) {
        if !r.dev.is_empty() && self.records.is_empty() {
            self.name = r.dev.clone();
        }
        match &r.event {
            Event::Header(h) => self.header = Some(h.clone()),
            Event::Clock { gpu_ns } if self.gpu_minus_trace.is_none() => {
                self.gpu_minus_trace = difference(*gpu_ns, r.t_ns);
            }
            _ => {}
        }
        self.records.push(r);
    }

    /// The trace time of GPU time `gpu_ns` (the same when there is no `clock` record: both
    /// clocks start within microseconds of each other in the device process).
    pub fn gpu_to_trace(&self, gpu_ns: u64) -> i64 {
        signed(gpu_ns).saturating_sub(self.gpu_minus_trace.unwrap_or(0))
    }

    /// Run time of a record time.
    pub fn run_ns(&self, t_ns: u64) -> u64 {
        self.run_offset_ns.saturating_add(t_ns)
    }

    /// The format version (1 when there is no header).
    pub fn version(&self) -> u32 {
        self.header.as_ref().map_or(1, |h| h.version)
    }
}

/// `a - b` as a signed number (`None` if it does not fit).
pub fn difference(a: u64, b: u64) -> Option<i64> {
    i64::try_from(i128::from(a) - i128::from(b)).ok()
}

/// Everything read for one invocation.
#[derive(Debug, Default)]
pub struct Run {
    /// The device traces, by index.
    pub devices: Vec<DeviceTrace>,
    /// The guest's fence timeline (empty without one).
    pub guest: Vec<GuestEvent>,
    /// Where the timeline came from.
    pub timeline_path: Option<PathBuf>,
    /// Lines of the timeline that were not events.
    pub timeline_skipped: Skipped,
}

/// The device index in a name like `device3.trace.jsonl` (up to [`MAX_DEVICE_INDEX`]).
fn index_of(path: &Path) -> Option<usize> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("device")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().filter(|&i| i <= MAX_DEVICE_INDEX)
}

/// Why the directory `dir` gives no trace: none is in it, or it is a run across several guests
/// (`cargo belfry conformance --guests`), whose traces are each in its guest's `guest<K>/`.
fn no_traces(dir: &Path) -> String {
    let mut guests: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .filter(|n| {
                    n.strip_prefix("guest").is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
                })
                .collect()
        })
        .unwrap_or_default();
    if guests.is_empty() {
        return format!("{}: no device<I>.trace.jsonl(.gz) in this directory", dir.display());
    }
    guests.sort();
    format!(
        "{}: a run across guests keeps each guest's traces in its own directory: give one of {}",
        dir.display(),
        guests.iter().map(|g| dir.join(g).display().to_string()).collect::<Vec<_>>().join(", ")
    )
}

impl Run {
    /// Reads `inputs` (run directories or trace files) and, if given, an explicit timeline.
    pub fn load(inputs: &[PathBuf], timeline_path: Option<&Path>) -> Result<Run, String> {
        let mut files: Vec<(usize, PathBuf)> = Vec::new();
        let mut run = Run::default();
        for (position, input) in inputs.iter().enumerate() {
            if input.is_dir() {
                let entries = std::fs::read_dir(input).map_err(|e| format!("{}: {e}", input.display()))?;
                let mut found: Vec<(usize, PathBuf)> = entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        let name = p.to_string_lossy();
                        name.ends_with(".trace.jsonl") || name.ends_with(".trace.jsonl.gz")
                    })
                    .filter_map(|p| index_of(&p).map(|i| (i, p)))
                    .collect();
                if found.is_empty() {
                    return Err(no_traces(input));
                }
                found.sort();
                files.extend(found);
                let t = input.join("timeline.txt");
                if t.exists() && run.timeline_path.is_none() {
                    run.timeline_path = Some(t);
                }
            } else {
                files.push((index_of(input).unwrap_or(position), input.clone()));
            }
        }
        if let Some(t) = timeline_path {
            run.timeline_path = Some(t.to_path_buf());
        }
        for (index, path) in files {
            run.devices.push(DeviceTrace::read(&path, index).map_err(|e| format!("{}: {e}", path.display()))?);
        }
        if let Some(t) = &run.timeline_path {
            let read = timeline::read(t).map_err(|e| format!("{}: {e}", t.display()))?;
            (run.guest, run.timeline_skipped) = (read.events, read.skipped);
        }
        run.align();
        Ok(run)
    }

    /// Sets each device's run offset from the headers' monotonic clocks.
    pub fn align(&mut self) {
        let start = |d: &DeviceTrace| d.header.as_ref().map(|h| h.clock.monotonic_ns).filter(|&m| m != 0);
        let zero = self.devices.iter().filter_map(start).min();
        for d in &mut self.devices {
            d.run_offset_ns = match (start(d), zero) {
                (Some(s), Some(z)) => s.saturating_sub(z),
                _ => 0,
            };
        }
    }

    /// The device with index `index`.
    pub fn device(&self, index: usize) -> Option<&DeviceTrace> {
        self.devices.iter().find(|d| d.index == index)
    }

    /// Run time of a guest event (`None` when it cannot be placed).
    pub fn guest_run_ns(&self, e: &GuestEvent, cpu_offsets: &[(usize, i64)]) -> Option<u64> {
        let d = self.device(e.device)?;
        let trace_ns = match e.gpu_time() {
            Some(g) => d.gpu_to_trace(g),
            None if e.cpu_ns != 0 => {
                let offset = cpu_offsets.iter().find(|(i, _)| *i == e.device)?.1;
                signed(e.cpu_ns).checked_add(offset)?
            }
            None => return None,
        };
        u64::try_from(signed(d.run_offset_ns).checked_add(trace_ns)?).ok()
    }

    /// When the module bound device `d` last before its timeline starts: the module's CPU clock
    /// starts at bind (in probe, about 10 ms before its `SELF_TEST` commands); the first
    /// self-test of the last bind before the first GPU-timed timeline event (a device can be
    /// unbound and bound again), else the first mailbox command.
    pub fn bind_time(&self, d: &DeviceTrace) -> Option<i64> {
        let first_gpu = self.guest.iter().filter(|e| e.device == d.index).filter_map(|e| e.gpu_time()).min();
        let limit = first_gpu.map_or(i64::MAX, |g| d.gpu_to_trace(g));
        let self_tests: Vec<i64> = d
            .records
            .iter()
            .filter(|r| signed(r.t_ns) <= limit)
            .filter(|r| matches!(&r.event, Event::Mailbox { opcode: Some(op), .. } if op == "SELF_TEST"))
            .map(|r| signed(r.t_ns))
            .collect();
        // The first self-test of the last bind (a bind tests every vector within milliseconds).
        let bind =
            self_tests
                .iter()
                .rev()
                .reduce(|later, earlier| if later.saturating_sub(*earlier) < 100_000_000 { earlier } else { later });
        bind.copied()
            .or_else(|| d.records.iter().find(|r| matches!(r.event, Event::Mailbox { .. })).map(|r| signed(r.t_ns)))
    }

    /// Per device, the offset putting guest CPU times on its trace clock: the causal bound of
    /// [`timeline::cpu_offset`], else [`Run::bind_time`].
    pub fn cpu_offsets(&self) -> Vec<(usize, i64)> {
        self.devices
            .iter()
            .filter_map(|d| {
                let bound = timeline::cpu_offset(&self.guest, d.index, |g| d.gpu_to_trace(g));
                bound.or_else(|| self.bind_time(d)).map(|o| (d.index, o))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_across_guests_is_pointed_at_its_guests_directories() {
        let dir = tempfile::tempdir().unwrap();
        let Err(err) = Run::load(&[dir.path().to_path_buf()], None) else { panic!("no traces, yet loaded") };
        assert!(err.ends_with("no device<I>.trace.jsonl(.gz) in this directory"), "{err}");
        for g in ["guest2", "guest1", "guestbook"] {
            std::fs::create_dir(dir.path().join(g)).unwrap();
        }
        let Err(err) = Run::load(&[dir.path().to_path_buf()], None) else { panic!("no traces, yet loaded") };
        let want =
            format!("give one of {}, {}", dir.path().join("guest1").display(), dir.path().join("guest2").display());
        assert!(err.ends_with(&want), "{err}");
    }

    #[test]
    fn devices_are_aligned_on_their_monotonic_start() {
        let dir = tempfile::tempdir().unwrap();
        let header =
            |m: u64| format!(r#"{{"t_ns":0,"dev":"b","event":"header","version":2,"clock":{{"monotonic_ns":{m}}}}}"#);
        std::fs::write(dir.path().join("device0.trace.jsonl"), header(5000) + "\n").unwrap();
        let second = header(3000) + "\n" + r#"{"t_ns":10,"dev":"b1","event":"clock","gpu_ns":40}"# + "\n";
        std::fs::write(dir.path().join("device1.trace.jsonl"), second).unwrap();
        std::fs::write(dir.path().join("timeline.txt"), "# /dev/belfry1: 0 event(s)\n").unwrap();
        let run = Run::load(&[dir.path().to_path_buf()], None).unwrap();
        assert_eq!(run.devices.len(), 2);
        assert_eq!(run.device(0).unwrap().run_offset_ns, 2000);
        assert_eq!(run.device(1).unwrap().run_offset_ns, 0);
        assert_eq!(run.device(1).unwrap().gpu_to_trace(100), 70);
        assert!(run.timeline_path.is_some());
    }

    #[test]
    fn without_pairs_the_guest_cpu_clock_starts_at_the_last_bind() {
        let dir = tempfile::tempdir().unwrap();
        let test =
            |t: u64| format!(r#"{{"t_ns":{t},"event":"mailbox","phase":"complete","opcode":"SELF_TEST","seq":1}}"#);
        let lines =
            [test(1_000_000_000), test(1_001_000_000), test(5_000_000_000), test(5_002_000_000), test(7_000_000_000)];
        std::fs::write(dir.path().join("device0.trace.jsonl"), lines.join("\n") + "\n").unwrap();
        std::fs::write(dir.path().join("timeline.txt"), "1 0 signal-executed 0x1 1 0 0 0 6000000000\n").unwrap();
        let run = Run::load(&[dir.path().to_path_buf()], None).unwrap();
        assert_eq!(run.cpu_offsets(), vec![(0, 5_000_000_000)]);
    }

    #[test]
    fn a_torn_last_line_is_read_once_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"t_ns\":1,\"event\":\"reset\",\"source\":\"register\"}\n{\"t_ns\":2,\"ev").unwrap();
        let mut d = DeviceTrace::read(&path, 0).unwrap();
        assert_eq!((d.records.len(), d.skipped.count), (1, 0));
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(f, "ent\":\"reset\",\"source\":\"connection\"}}").unwrap();
        assert_eq!(d.read_more().unwrap(), 1);
        assert_eq!(d.records[1].t_ns, 2);
    }

    #[test]
    fn a_gzip_trace_beside_a_plain_one_is_read_and_followed_across_a_torn_line() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let doorbell = |v: u32| format!(r#"{{"t_ns":{v},"dev":"b","event":"doorbell","index":1,"value":{v}}}"#);
        std::fs::write(dir.path().join("device1.trace.jsonl"), doorbell(1) + "\n").unwrap();
        let gz = dir.path().join("device0.trace.jsonl.gz");
        let mut w = file::Writer::create(&gz, file::Compression::Gzip).unwrap();
        w.write_all((doorbell(2) + "\n").as_bytes()).unwrap();
        w.flush().unwrap();
        let mut run = Run::load(&[dir.path().to_path_buf()], None).unwrap();
        assert_eq!(run.devices.iter().map(|d| (d.index, d.records.len())).collect::<Vec<_>>(), [(0, 1), (1, 1)]);
        let d = &mut run.devices[0];
        let third = doorbell(3);
        let (head, tail) = third.split_at(20);
        w.write_all(head.as_bytes()).unwrap();
        w.flush().unwrap();
        assert_eq!(d.read_more().unwrap(), 0, "a torn line waits");
        w.write_all(format!("{tail}\n{}\n", doorbell(4)).as_bytes()).unwrap();
        w.finish().unwrap();
        assert_eq!(d.read_more().unwrap(), 2, "the torn line is read whole once it ends");
        assert!(matches!(d.records[1].event, Event::Doorbell { value: 3, .. }));
        assert_eq!(d.skipped.count, 0);
    }
}

//! Tests of the tracer: the header, levels, the size limit, time order and the event tags.

use super::*;

fn config() -> DeviceConfig {
    DeviceConfig::from_flags(["--name", "belfry7"]).unwrap()
}

/// The decompressed text of the trace file at `path`.
fn text(path: &Path) -> String {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut belfry_trace_schema::file::open(path).unwrap(), &mut text).unwrap();
    text
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    text(path).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn events_are_written_as_tagged_json_lines_after_a_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
    tracer.emit(Event::Doorbell { index: 3, value: 9 });
    tracer.emit(Event::Reset { source: ResetSource::Register });
    tracer.sync();
    let lines = lines(&path);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["event"], "header");
    assert_eq!(lines[0]["version"], FORMAT_VERSION);
    assert_eq!(lines[0]["level"], "packets");
    assert_eq!(lines[0]["device"]["name"], "belfry7");
    assert_eq!(lines[0]["device"]["doorbell_model"], "dedicated");
    assert!(lines[0]["clock"]["monotonic_ns"].as_u64().unwrap() > 0);
    assert_eq!(lines[1]["event"], "doorbell");
    assert_eq!(lines[1]["index"], 3);
    assert_eq!(lines[1]["dev"], "belfry7");
    assert_eq!(lines[2]["source"], "register");
    assert!(lines[2]["t_ns"].as_u64() >= lines[1]["t_ns"].as_u64());
}

/// The header's `device` record is the device's `DeviceConfig` itself: every device flag is a
/// key of it, and it reads back as the very configuration. A field added to the configuration
/// (a flag) cannot be missing from the header, and this test fails until it is given a
/// non-default value below.
#[test]
fn the_header_records_every_device_flag_and_reads_back_as_the_configuration() {
    use clap::Args as _;
    // Every flag away from its default (not a valid device: the header records what it is given).
    let config = DeviceConfig::from_flags([
        "--name=belfry7",
        "--doorbells=8",
        "--msix-vectors=2",
        "--intx",
        "--vram-size=16M",
        "--doorbell-model=global",
        "--interrupt-form=per-queue",
        "--no-64bit-atomics",
        "--no-native-fences",
        "--engine-without-fence-writes=1",
        "--hang-timeout-ms=300",
        "--idle-f1-ms=40",
        "--no-context-save",
        "--vram-lost-in-d3",
        "--peer-signals",
        "--bind-slots=8",
        "--no-cmd-ring",
        "--irq-moderation-us=7",
        "--doorbell-transport=shared",
        "--doorbell-poll-us=9",
        "--allow-unsealed-ram",
        "--inject=no-fence-interrupts",
        "--inject=mailbox-stall",
    ])
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    drop(Tracer::with_file(&config, &path, TraceSettings::default()).unwrap());
    let device = lines(&path)[0]["device"].clone();

    let flags: Vec<String> = DeviceConfig::augment_args(clap::Command::new("belfry-device"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    let mut keys: Vec<String> = device.as_object().unwrap().keys().cloned().collect();
    let mut sorted_flags = flags.clone();
    keys.sort();
    sorted_flags.sort();
    assert_eq!(keys, sorted_flags, "the header's device keys are the device flags");
    let default = serde_json::to_value(DeviceConfig::default()).unwrap();
    for flag in &flags {
        assert_ne!(device[flag], default[flag], "give {flag} a non-default value in this test");
    }
    let read: DeviceConfig = serde_json::from_value(device).unwrap();
    assert_eq!(read, config, "the header reads back as the configuration");
}

#[test]
fn the_file_is_in_time_order_whichever_thread_emits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let tracer = &tracer;
            s.spawn(move || {
                for i in 0..2000 {
                    tracer.emit(Event::Doorbell { index: t, value: i });
                }
            });
        }
    });
    drop(tracer);
    let times: Vec<u64> = lines(&path).iter().map(|l| l["t_ns"].as_u64().unwrap()).collect();
    assert_eq!(times.len(), 8001);
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "out of order");
}

#[test]
fn the_level_keeps_out_events_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let settings = TraceSettings { level: TraceLevel::Control, ..TraceSettings::default() };
    let tracer = Tracer::with_file(&config(), &path, settings).unwrap();
    assert!(!tracer.wants(TraceLevel::Packets));
    tracer.emit(Event::Packet { queue: 1, engine: 0, opcode: "NOP".into(), va: 0x1000, bytes: String::new() });
    tracer.emit(Event::Doorbell { index: 3, value: 9 });
    tracer.emit(Event::Fault { context: 1, queue: 1, reason: "BAD_PACKET".into(), address: 0, walk: vec![] });
    tracer.sync();
    let kinds: Vec<_> = lines(&path).iter().map(|l| l["event"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["header", "fault"]);
}

#[test]
fn past_the_limit_events_are_counted_and_the_count_closes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let settings = TraceSettings { level: TraceLevel::Packets, limit_bytes: 300, ..TraceSettings::default() };
    let tracer = Tracer::with_file(&config(), &path, settings).unwrap();
    for i in 0..10 {
        tracer.emit(Event::Doorbell { index: i, value: 1 });
    }
    tracer.emit(Event::Reset { source: ResetSource::Register });
    drop(tracer);
    let lines = lines(&path);
    let kinds: Vec<_> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    let kept = kinds.iter().filter(|k| **k == "doorbell").count();
    assert!((1..10).contains(&kept), "{kinds:?}");
    let body: usize = text(&path).lines().skip(1).take(kept).map(|l| l.len() + 1).sum();
    assert!(body <= 300);
    assert_eq!(kinds[kept + 1], "limit_reached");
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "dropped");
    assert_eq!(last["records"], 11 - kept as u64);
    assert_eq!(last["by_event"]["doorbell"], 10 - kept as u64);
    assert_eq!(last["by_event"]["reset"], 1);
}

#[test]
fn a_file_within_its_limit_has_no_dropped_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
    tracer.emit(Event::Clock { gpu_ns: 5 });
    drop(tracer);
    let kinds: Vec<_> = lines(&path).iter().map(|l| l["event"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["header", "clock"]);
}

#[test]
fn a_mailbox_block_is_recorded_whole_as_hex() {
    use vm_memory::GuestMemoryMmap;
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 16)]).unwrap();
    let args = mailbox::DoorbellArgs {
        header: mailbox::MailboxHeader {
            opcode: mailbox::Opcode::ConnectDoorbell as u32,
            length: 24,
            seq: 7,
            status: 1,
        },
        queue: 5,
        doorbell: 2,
    };
    let words = [args.header.opcode, args.header.length, 7, 1, 5, 2, 0xdead_beef];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write_slice(&bytes, GuestAddress(0x800)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
    mailbox_block(&tracer, &mem, 7, 0x800);
    mailbox_block(&tracer, &mem, 8, 1 << 20);
    drop(tracer);
    let lines = lines(&path);
    assert_eq!(lines.len(), 2, "an unreadable block is not recorded");
    assert_eq!(lines[1]["event"], "mailbox_block");
    assert_eq!(lines[1]["seq"], 7);
    let hex: String = bytes[..24].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(lines[1]["bytes"], hex);
}

#[test]
fn every_event_kind_is_read_back_by_the_schema_as_the_device_wrote_it() {
    use belfry_trace_schema::{examples, Record};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl.gz");
    let tracer = Tracer::with_file(&config(), &path, TraceSettings::default()).unwrap();
    // The tracer writes its own kinds itself (the header here, the limit's records below).
    let own = ["header", "limit_reached", "dropped"];
    let events: Vec<Event> = examples::every_kind().into_iter().filter(|e| !own.contains(&e.kind())).collect();
    for event in &events {
        tracer.emit(event.clone());
    }
    drop(tracer);
    let records: Vec<Record> = text(&path).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let Event::Header(header) = &records[0].event else { panic!("no header: {:?}", records[0]) };
    assert_eq!(
        (header.version, header.level, records[0].dev.as_str()),
        (FORMAT_VERSION, TraceLevel::Packets, "belfry7")
    );
    assert_eq!(header.device["name"], "belfry7");
    let back: Vec<Event> = records[1..].iter().map(|r| r.event.clone()).collect();
    assert_eq!(back, events, "every kind, every field, as emitted");
    assert!(records.iter().all(|r| r.dev == "belfry7"));
}

#[test]
fn the_tracers_own_records_are_read_back_by_the_schema() {
    use belfry_trace_schema::Record;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl.gz");
    let settings = TraceSettings { limit_bytes: 100, ..TraceSettings::default() };
    let tracer = Tracer::with_file(&config(), &path, settings).unwrap();
    for value in 0..5 {
        tracer.emit(Event::Doorbell { index: 1, value });
    }
    drop(tracer);
    let records: Vec<Record> = text(&path).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(records.iter().any(|r| r.event == Event::LimitReached { limit_bytes: 100 }), "{records:?}");
    let Event::Dropped { reason, records: n, by_event, .. } = &records.last().unwrap().event else { panic!() };
    assert_eq!((reason.as_ref(), *n), ("limit", by_event["doorbell"]));
}

/// A writer that cannot keep up: the trace file is a FIFO nobody reads until the events are
/// emitted, so the writer thread blocks once the pipe is full.
#[test]
fn a_full_writer_queue_drops_and_counts_events_instead_of_growing() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the result is checked.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // Opened first, without blocking, so the tracer's open for writing finds a reader.
    let reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&path).unwrap();
    const QUEUE: usize = 16;
    const EVENTS: u64 = 20_000;
    let settings = TraceSettings { queue_records: QUEUE, ..TraceSettings::default() };
    let tracer = Tracer::with_file(&config(), &path, settings).unwrap();
    for i in 0..EVENTS {
        tracer.emit(Event::Doorbell { index: 1, value: i });
    }
    // Now read (blocking) while the tracer closes.
    // SAFETY: fcntl on a descriptor this test owns.
    assert_eq!(unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&reader), libc::F_SETFL, 0) }, 0);
    let drain = std::thread::spawn(move || {
        let mut text = String::new();
        let mut gzip = belfry_trace_schema::file::GzipLines::new(std::io::BufReader::new(reader));
        std::io::Read::read_to_string(&mut gzip, &mut text).unwrap();
        text
    });
    drop(tracer);
    let text = drain.join().unwrap();
    let records: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let written = records.iter().filter(|r| r["event"] == "doorbell").count() as u64;
    let behind: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["event"] == "dropped" && r["reason"] == "writer_behind").collect();
    let dropped: u64 = behind.iter().map(|r| r["records"].as_u64().unwrap()).sum();
    assert!(!behind.is_empty(), "a writer that cannot keep up drops events: {written} written");
    assert_eq!(written + dropped, EVENTS, "every event is written or counted");
    let by_kind: u64 = behind.iter().map(|r| r["by_event"]["doorbell"].as_u64().unwrap()).sum();
    assert_eq!(by_kind, dropped);
    // The values written are in order, and each gap is announced by the records before it.
    let mut expected = 0;
    let mut announced = 0;
    for r in &records[1..] {
        match r["event"].as_str().unwrap() {
            "doorbell" => {
                let value = r["value"].as_u64().unwrap();
                assert_eq!(value, expected + announced, "a gap without its dropped record");
                expected = value + 1;
                announced = 0;
            }
            // A dropped record may take the queue's last room and the event behind it start
            // a new gap: two records in a row, announcing one gap between them.
            _ => announced += r["records"].as_u64().unwrap(),
        }
    }
}

/// The writer gives way to the device's threads: batch policy (woken by an emitter, it does not
/// preempt it) and a slice longer than theirs (a device thread that wakes preempts it).
#[test]
fn the_writer_runs_as_a_batch_thread_with_a_long_slice() {
    let dir = tempfile::tempdir().unwrap();
    let tracer = Tracer::with_file(&config(), &dir.path().join("t.jsonl"), TraceSettings::default()).unwrap();
    // Once the writer answered, it has set its own scheduling.
    tracer.sync();
    let writers: Vec<u64> = std::fs::read_dir("/proc/thread-self/..")
        .unwrap()
        .filter_map(|task| {
            let task = task.ok()?.path();
            let comm = std::fs::read_to_string(task.join("comm")).ok()?;
            (comm.trim() == "belfry-trace").then(|| task.file_name()?.to_str()?.parse().ok())?
        })
        .collect();
    assert!(!writers.is_empty(), "no writer thread");
    for tid in writers {
        // SAFETY: sched_attr is plain data; zeroed is a valid value.
        let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
        // SAFETY: sched_getattr writes at most `SCHED_ATTR_SIZE` bytes into `attr`.
        let r = unsafe {
            libc::syscall(libc::SYS_sched_getattr, tid, &mut attr as *mut libc::sched_attr, SCHED_ATTR_SIZE, 0u32)
        };
        assert_eq!(r, 0, "sched_getattr of thread {tid}: {}", std::io::Error::last_os_error());
        assert_eq!(i32::try_from(attr.sched_policy).unwrap(), libc::SCHED_BATCH, "thread {tid}'s policy");
        let slice = attr.sched_runtime;
        // Kernels before 6.12 have no custom slice and report 0.
        assert!(slice == 0 || u128::from(slice) == WRITER_SLICE.as_nanos(), "thread {tid}'s slice: {slice} ns");
    }
}

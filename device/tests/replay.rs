//! Replay: a device driven like a driver would, recorded (`--record`), runs again from its
//! input log without a client (`belfry_device::replay`) — every reply and interrupt the
//! same — and a log with one input byte altered stops at the first divergence, named by its
//! record number with both sides decoded.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_abi::mailbox::{self, Opcode, Status};
use belfry_abi::packet::NO_LOG;
use belfry_abi::{irq, regs};
use belfry_device::replay::{self, Outcome, Settings};
use belfry_trace_schema::file::Compression;
use belfry_trace_schema::input_log::{self, Entry, LogWriter};
use common::gpu::*;
use common::read_u32;

/// Records a session (a queue connected, a packet written and run) into `log`.
fn record_a_session(log: &Path) {
    let mut g = Gpu::start(&["--record", log.to_str().unwrap()]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 3), Status::Ok);
    let (dst, dst_pa) = g.buffer(p, 1);
    g.submit(&mut q, &pk::write32(dst, 0x5eed_f00d));
    g.drain(&q);
    assert_eq!(read_u32(&g.ram, dst_pa), 0x5eed_f00d);
    leave(g);
}

/// Records a session whose fence interrupts come faster than the moderation interval (1 ms):
/// a queue signals a fence past its MonitoredValue eight times a round, each signal a record
/// and a raise, with pauses of 0 to 1.2 ms between rounds, so the throttle holds raises (its
/// thread releasing them at the interval's end) and lets others go at once. The driver reads
/// `IRQ_MODERATED` at the end (a reply the replay must match). Returns that count.
fn record_a_moderated_session(log: &Path) -> u32 {
    let mut g = Gpu::start(&["--record", log.to_str().unwrap(), "--irq-moderation-us", "1000"]);
    let p = g.process(1, 1);
    let f = g.native_fence(0x51, p);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 3), Status::Ok);
    assert_eq!(g.update_monitored(&[(f.handle, 0)]), Status::Ok);
    let mut value = 0;
    for round in 0..24u64 {
        let signals: Vec<u8> = (0..8)
            .flat_map(|_| {
                value += 1;
                pk::signal(f.va, value, NO_LOG)
            })
            .collect();
        g.submit(&mut q, &signals);
        g.drain(&q);
        g.new_records();
        std::thread::sleep(Duration::from_micros(300 * (round % 5)));
    }
    // Past the interval every held raise is out.
    std::thread::sleep(Duration::from_millis(5));
    g.interrupts(irq::VECTOR_FENCE);
    let held = g.c.read32(0, regs::IRQ_MODERATED::OFFSET);
    leave(g);
    held
}

/// Records a session in which a queue's buffer jumps to itself until the engine's watchdog
/// (100 ms of busy time) calls it hung, while another queue on the engine runs: how many
/// loops the engine ran before it gave up is the recorded run's, timed by its clock.
fn record_a_hung_session(log: &Path) {
    let mut g = Gpu::start(&["--record", log.to_str().unwrap(), "--hang-timeout-ms", "100"]);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut bad = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    let mut good = g.queue(2, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut bad, 0), Status::Ok);
    assert_eq!(g.connect(&mut good, 1), Status::Ok);
    let (loop_va, loop_pa) = g.buffer(p, 1);
    g.ram.write_all_at(&[pk::nop(4), pk::jump(loop_va, 32)].concat(), loop_pa).unwrap();
    g.submit(&mut bad, &pk::jump(loop_va, 32));
    g.submit(&mut good, &pk::write32(out, 7));
    g.drain(&good);
    assert_eq!(read_u32(&g.ram, out_pa), 7);
    g.wait_for("hang record", || g.interrupts(irq::VECTOR_ENGINE) > 0);
    leave(g);
}

/// Records a session in which an engine writes interrupt records (NOTIFY packets, past the
/// ring's size) while the driver drains the ring and acknowledges with `INT_CLEAR`, whose
/// flush of the records the device owes takes the ring's lock as each record's write does:
/// who took that lock when is the recorded run's.
fn record_a_session_acknowledging_records_while_they_are_written(log: &Path) {
    let mut g = Gpu::start(&["--record", log.to_str().unwrap()]);
    let p = g.process(1, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, false);
    for round in 0..8u64 {
        let notifies: Vec<u8> = (1..=200).flat_map(|i| pk::notify(round * 1000 + i)).collect();
        g.submit(&mut q, &notifies);
        while g.read_index(&q) != q.write_index {
            g.new_records();
            g.c.write32(0, regs::INT_CLEAR::OFFSET, irq::cause::ALL);
        }
    }
    leave(g);
}

/// Records a session in which a queue is parked on a wait for a fence registered cross-adapter
/// (re-read at a pick only after the GPU's epoch moved) while the driver's commands move the
/// epoch from the command processor's thread as the engine polls: which picks re-read the
/// fence is the recorded run's. The fence is then written and notified, and the wait ends.
fn record_a_session_polling_a_cross_adapter_wait(log: &Path) {
    let mut g = Gpu::start(&["--record", log.to_str().unwrap()]);
    let p = g.process(1, 1);
    let f = g.native_fence_flagged(0x61, p, mailbox::REGISTER_CROSS_ADAPTER);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 0), Status::Ok);
    g.submit(&mut q, &pk::wait(f.va, 1, NO_LOG));
    let notify = |g: &mut Gpu| {
        let mut args = to_bytes(&mailbox::FenceHandleArgs { handle: f.handle, ..Default::default() });
        assert_eq!(g.mailbox(Opcode::NotifyFenceChanged, &mut args), Status::Ok);
    };
    for _ in 0..200 {
        notify(&mut g);
        std::thread::sleep(Duration::from_micros(700));
    }
    g.write_u64(f.current_pa, 1);
    notify(&mut g);
    g.drain(&q);
    leave(g);
}

/// Records a session in which an engine signals a fence whose CurrentValue and MonitoredValue
/// are in VRAM while the driver raises its MonitoredValue through the command processor: each
/// side stores its value and looks at the other's (the engine's interrupt decision, the
/// update's catch of an earlier signal), and which store each look saw is the recorded run's.
fn record_a_session_racing_fence_values_in_vram(log: &Path) {
    let mut g = Gpu::start(&["--record", log.to_str().unwrap()]);
    let p = g.process(1, 1);
    let (va, at) = (0x9000_0000u64, 0x10000u64);
    g.map(p.root, va, at, belfry_abi::mmu::PTE_WRITABLE | belfry_abi::mmu::PTE_VRAM);
    let vram = |address| mailbox::FenceLocation { space: mailbox::LOCATION_VRAM, address, ..Default::default() };
    let mut a = to_bytes(&mailbox::RegisterFenceArgs {
        handle: 0x71,
        kind: belfry_abi::fence::FenceKind::Default as u32,
        current_value: vram(at),
        monitored_value: vram(at + 8),
        ..Default::default()
    });
    g.ok(Opcode::RegisterFence, &mut a);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 0), Status::Ok);
    for round in 0..4u64 {
        let signals: Vec<u8> = (1..=100).flat_map(|i| pk::signal(va, round * 100 + i, NO_LOG)).collect();
        g.submit(&mut q, &signals);
        for step in 0..25u64 {
            assert_eq!(g.update_monitored(&[(0x71, round * 100 + step * 4)]), Status::Ok);
            g.new_records();
        }
        g.drain(&q);
    }
    leave(g);
}

/// The client leaves; the device, which exits once its last client has gone, ends its log.
fn leave(g: Gpu) {
    let Gpu { dev: mut device, c, .. } = g;
    drop(c);
    let status = device.wait_exit(Duration::from_secs(30)).expect("the device exits when its client leaves");
    assert!(status.success(), "{status}");
}

/// Records a session with `record` into a fresh log, replays it to its end ten times and
/// returns what `record` returned.
fn record_and_replay_ten_times<T>(record: impl FnOnce(&Path) -> T) -> T {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("device0.record.gz");
    let recorded = record(&log);
    common::in_process::replays_to_its_end(&log, 10);
    recorded
}

fn entries(log: &Path) -> Vec<(u64, Entry)> {
    input_log::open(log).unwrap().collect::<Result<_, _>>().expect("the log reads to its end")
}

/// `entries` written as a log at `path`.
fn write_log(path: &Path, entries: &[(u64, Entry)]) {
    let Entry::Config { json } = &entries[0].1 else { panic!("no config") };
    let mut writer = LogWriter::create(path, Compression::None, json).unwrap();
    for (_, entry) in &entries[1..] {
        writer.append(entry).unwrap();
    }
    writer.finish().unwrap();
}

fn settings() -> Settings {
    // The stall bound only ends a replay that went astray; a matching one never waits on it.
    Settings { until: None, stall: Duration::from_secs(20), dump: true, trace: None, allow_other_build: false }
}

#[test]
fn a_recorded_session_replays_without_divergence_and_an_altered_input_byte_is_named_by_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("device0.record.gz");
    record_a_session(&log);

    for _ in 0..10 {
        let report = replay::run(&log, &settings()).unwrap();
        assert_eq!(report.outcome, Outcome::Finished, "{report:#?}");
        assert_eq!(report.passed + report.released, report.records, "{report:#?}");
    }

    // One byte of one input altered: the offset of the first region read (a message), whose
    // reply echoes it, and which reads another register.
    let mut altered = entries(&log);
    let (read_at, _) = altered
        .iter()
        .find(|(_, e)| matches!(e, Entry::Message { bytes, .. } if bytes[2..4] == 9u16.to_le_bytes()))
        .expect("a REGION_READ")
        .clone();
    let Entry::Message { bytes, .. } = &mut altered[read_at as usize].1 else { unreachable!() };
    bytes[16] ^= 0x04;
    let reply_at = altered[read_at as usize..]
        .iter()
        .find(|(_, e)| matches!(e, Entry::Reply { .. }))
        .map(|(s, _)| *s)
        .expect("its reply");
    let altered_log = dir.path().join("altered.record");
    write_log(&altered_log, &altered);

    let report = replay::run(&altered_log, &settings()).unwrap();
    let Outcome::Diverged(d) = &report.outcome else { panic!("no divergence: {report:#?}") };
    // The first record the replay leaves is the read's: its reply, or before it the ticket
    // that orders a read of the mailbox status with the command processor's completion (the
    // altered read reads another register and takes none).
    assert!(
        d.record > read_at && d.record <= reply_at,
        "{d:#?} (the message is record {read_at}, its reply {reply_at})"
    );
    assert!(d.reason.contains("reply differs") || d.reason.contains("does something else"), "{d:#?}");
    assert!(d.replayed[0].contains("REGION_READ"), "{d:#?}");
}

/// The interrupt throttle decides on the clock and is released by its own thread: both are in
/// the log (a clock record per raise and per pass, each decision a lock ticket), so a replay
/// holds and releases the raises the run did — every interrupt eventfd write, and the
/// `IRQ_MODERATED` count the driver read, the same — ten times out of ten.
#[test]
fn a_session_whose_interrupts_the_throttle_held_replays_its_holds_and_releases() {
    let held = record_and_replay_ten_times(record_a_moderated_session);
    assert!(held > 0, "the session's raises came faster than the interval: {held} held");
}

/// An engine's watchdog decides on its clock: the busy time it adds is a clock input, so a
/// replay gives up on the looping buffer after the loops the run made, however fast it runs —
/// ten times out of ten.
#[test]
fn a_session_with_a_hung_queue_replays_the_loops_the_watchdog_allowed() {
    record_and_replay_ten_times(record_a_hung_session);
}

/// The interrupt record ring's lock is taken in the log's order: an engine writing a record and
/// the driver's `INT_CLEAR` flush, each reading the driver's read index under it, replay as
/// recorded — ten times out of ten, none stalled with the lock held by a thread waiting for
/// its read's turn.
#[test]
fn records_written_while_the_driver_acknowledges_replay_in_the_lock_order_recorded() {
    record_and_replay_ten_times(record_a_session_acknowledging_records_while_they_are_written);
}

/// The GPU's epoch moves under the object lock: an engine polling a parked wait on a
/// cross-adapter fence re-reads it at the picks the run's engine did, whatever the command
/// processor's commands that move the epoch do meanwhile — ten times out of ten.
#[test]
fn a_parked_cross_adapter_wait_is_re_read_at_the_picks_recorded() {
    record_and_replay_ten_times(record_a_session_polling_a_cross_adapter_wait);
}

/// Every VRAM access is ordered in the log: an engine's signals of a fence in VRAM and the
/// command processor's MonitoredValue updates of it see each other's stores as they did in the
/// run, so the same interrupts are raised — ten times out of ten.
#[test]
fn fence_values_in_vram_raced_by_signals_and_updates_replay_as_recorded() {
    record_and_replay_ten_times(record_a_session_racing_fence_values_in_vram);
}

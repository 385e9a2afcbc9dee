//! Forged words (no rule family): the words a process can write for the device — a user-mode
//! queue's LastQueuedValue page, a kernel-mode queue's ring control, mapped in its context —
//! never decide for the module. The hang watchdog, the engine's F1, the device's D3 and
//! `SUBMIT_SPLIT`'s wait judge by what the device itself holds and has run.

use std::path::Path;
use std::time::Duration;

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_abi::packet::{self, Opcode};
use belfry_abi::ring::{READ_INDEX_OFFSET, WRITE_INDEX_OFFSET};
use belfry_abi::uapi;
use belfry_umd::{Allocation, CommandBuffer};

use crate::harness::proc::{self, Signal};
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::Fixture;
use crate::support::param::ModuleParam;
use crate::support::power::RuntimePmAllowed;
use crate::support::WAIT;
use crate::{Test, TestResult};

/// The module's hang timeout while B runs long buffers: 1 s, half the 2-second TDR default (no
/// rule fixes its length here: what is tested is whose work keeps the clock running), set so
/// that another test's value cannot change what is tested. The watchdog looks every quarter of
/// it, so a clock kept running is caught within 1.25 s.
const TDR_MS: u32 = 1000;
/// How long each of B's command buffers runs: half a second under the timeout (the margin the
/// 2-second default had, for a late wake-up of the test on a loaded guest) and under the
/// device's own 2-second watchdog.
const LONG_BUFFER: Duration = Duration::from_millis(500);
/// B's idle time after each buffer: with it, a clock kept running by a false claim passes the
/// timeout without progress (IDLE_AFTER + LONG_BUFFER, 1.5 s, past the 1.25 s by which the
/// watchdog catches it).
const IDLE_AFTER: Duration = Duration::from_millis(1000);
/// B's long buffers: two, so that from the first one's end through the second (IDLE_AFTER,
/// then LONG_BUFFER) the engine makes no progress for longer than the timeout, the window in
/// which a clock kept running by A's claim would reset it; more rounds repeat that window, they
/// prove nothing more.
const ROUNDS: usize = 2;
/// The autosuspend delay of the runtime-PM check (ms).
const AUTOSUSPEND_MS: u32 = 50;

/// Bytes of a `JUMP`.
const JUMP_BYTES: u32 = 16;

/// A command buffer that runs until [`end_spin`]: at offset `at` of `buf` a `JUMP` to itself
/// that covers `len` bytes (what follows it runs once the spin ends); returns the buffer to
/// submit, a `JUMP` into it. A `JUMP` skips the rest of the submitted buffer, so what the spin
/// leads to must signal what the submission is waited on by.
fn spin(buf: &mut Allocation, at: u64, len: u32) -> Result<CommandBuffer, crate::Error> {
    let mut jump = CommandBuffer::new();
    jump.jump(buf.va_at(at)?, len)?;
    buf.write(at, jump.as_bytes())?;
    Ok(jump)
}

/// The first byte of a 4-dword `NOP`: the headers of a `JUMP` and a 4-dword `NOP` differ only in
/// their low byte (the opcode), so storing this one byte turns the one packet into the other
/// whole, whenever the engine reads it.
fn nop_byte() -> u8 {
    packet::header(Opcode::Nop, 4).to_le_bytes()[0]
}

/// Ends the spin at offset `at` of `buf` ([`spin`]).
fn end_spin(buf: &mut Allocation, at: u64) -> Result<(), crate::Error> {
    buf.write(at, &[nop_byte()])?;
    Ok(())
}

/// Process A's part: a user-mode queue on the compute engine with its doorbell connected and
/// nothing submitted, whose LastQueuedValue A sets to its progress + 1 — a claim of work the
/// device never got. Kept until `done`; `ready` is posted either way.
fn forge_last_queued_value(path: &Path, ready: &Signal, done: &Signal) -> TestResult {
    let forged = (|| -> Result<_, crate::Error> {
        let raw = RawDev::open(path)?;
        let ctx = raw.create_context().map_err(errno_name)?;
        let ring = raw.alloc(ctx, 4096).map_err(errno_name)?;
        let control = raw.alloc(ctx, 4096).map_err(errno_name)?;
        let q =
            raw.create_queue_on(ctx, ENGINE_COMPUTE, Some((ring.handle, control.handle)), 16).map_err(errno_name)?;
        let db = raw.create_doorbell(q.handle).map_err(errno_name)?;
        raw.handle_op(uapi::IOCTL_CONNECT_DOORBELL, db.handle).map_err(errno_name)?;
        let progress = raw.peek_u64(q.progress_mmap_offset).map_err(errno_name)?;
        let last_queued = raw.map(db.last_queued_offset, 4096).map_err(errno_name)?;
        last_queued.store_u64(0, progress + 1);
        Ok((raw, last_queued))
    })();
    ready.post(1);
    let _kept = forged?;
    done.take()?;
    Ok(())
}

/// Process B's part: [`ROUNDS`] buffers of [`LONG_BUFFER`] on its user-mode queue on the compute
/// engine, each followed by [`IDLE_AFTER`] idle; then, everything idle but A's claim, runtime PM
/// allowed. No engine reset, no hang, no lost context; the device runtime-suspends.
fn long_buffers_then_suspend(path: &Path) -> TestResult {
    let _timeout = ModuleParam::set("hang_timeout_ms", TDR_MS)?;
    let Fixture { dev, ctx: _ctx, mut buf, mut q } = Fixture::connected(path)?;
    let before = dev.recovery_debug()?;
    let counts = |s: &belfry_abi::uapi_debug::RecoveryDebug| (s.engine_resets, s.hangs_by_timeout, s.contexts_lost);
    let signal_bytes = core::mem::size_of::<packet::FenceSignal>() as u32;
    for round in 0..ROUNDS {
        let jump = spin(&mut buf, 0, JUMP_BYTES + signal_bytes)?;
        let v = q.submit(&jump)?;
        let mut tail = CommandBuffer::new();
        tail.fence_signal(q.progress_fence_va(), v, None)?;
        buf.write(u64::from(JUMP_BYTES), tail.as_bytes())?;
        std::thread::sleep(LONG_BUFFER);
        end_spin(&mut buf, 0)?;
        if let Err(e) = q.wait(v, WAIT) {
            let now = dev.recovery_debug().map(|s| counts(&s));
            return Err(format!(
                "B's {} ms buffer {round}: {e} ((engine resets, hangs by timeout, contexts lost): {:?} → {now:?})",
                LONG_BUFFER.as_millis(),
                counts(&before)
            )
            .into());
        }
        std::thread::sleep(IDLE_AFTER);
    }
    let after = dev.recovery_debug()?;
    ensure!(
        counts(&after) == counts(&before),
        "A's false LastQueuedValue moved (engine resets, hangs by timeout, contexts lost) {:?} → {:?}",
        counts(&before),
        counts(&after)
    );
    let power = dev.device_power()?;
    let pm = RuntimePmAllowed::new(path, AUTOSUSPEND_MS)?;
    let suspended = pm.wait_suspended(WAIT);
    let status = pm.status();
    drop(pm);
    let now = dev.device_power()?;
    ensure!(
        suspended,
        "runtime_status {status} 10 s after runtime PM was allowed with only A's false claim of work \
         (D3 entries refused {} → {})",
        power.refused,
        now.refused
    );
    Ok(())
}

/// Process A writes its user-mode queue's LastQueuedValue as progress + 1 with nothing
/// submitted, while process B runs 0.5 s buffers with idle time between them on the same engine
/// under a 1-second timeout: no engine is reset (the claim keeps no hang clock running, so
/// B's buffers are not blamed either), and once all is idle the device still runtime-suspends
/// (the claim refuses no F1 or D3). The module's promise (THREAT_MODEL: the module judges from
/// the device's own state); no rule id.
fn a_forged_last_queued_value_neither_resets_the_engine_nor_keeps_the_device_awake(path: &Path) -> TestResult {
    // A's exit waits out the close drain for the work it claimed, which never comes.
    let _drain = crate::support::param::unfinishable_work_close_drain()?;
    let (ready, done) = (Signal::new()?, Signal::new()?);
    let (ready_ref, done_ref) = (&ready, &done);
    let forger = proc::spawn("process A, claiming work it never submitted", move || {
        forge_last_queued_value(path, ready_ref, done_ref)
    })?;
    ready.take()?;
    let b = long_buffers_then_suspend(path);
    done.post(1);
    let a = forger.join();
    b?;
    a
}

/// Pages from a kernel-mode queue's progress-fence VA to its ring-control VA, as a process can
/// work out from `CREATE_QUEUE`: the module reserves the progress page, the ring's pages (one
/// for 16 entries), then the ring control, each followed by a guard page. The test checks it
/// (the page must hold the ring's write index) before relying on it.
const CONTROL_AFTER_PROGRESS: u64 = 4 * 4096;
/// Offsets in the test's two-page allocation: the spin, and the word its end writes.
const SPIN_AT: usize = 2048;
/// See [`SPIN_AT`].
const MARKER_AT: usize = 4096 + 64;
/// What the spin's end writes.
const MARKER: u32 = 0x5EED_0001;
/// The read index the buffer stores into its ring control: far from every real index.
const FORGED_READ_INDEX: u32 = 0x4000_0000;
/// How long the spin runs after the forged store.
const SPIN_FOR: Duration = Duration::from_millis(300);

/// A kernel-mode queue's buffer stores a forged read index into its own ring control (mapped
/// writable in its context, where the device writes the read index), then spins for 300 ms and
/// writes a marker: `SUBMIT_SPLIT`, which returns once its work has run, returns only after
/// the marker was written — the module waits for the device's own read index, not the word
/// the buffer overwrote. The module's promise (THREAT_MODEL); no rule id.
fn a_forged_ring_read_index_does_not_end_a_split_submission_early(path: &Path) -> TestResult {
    let raw = RawDev::open(path)?;
    let ctx = raw.create_context().map_err(errno_name)?;
    let buf = raw.alloc(ctx, 2 * 4096).map_err(errno_name)?;
    let q = raw.create_queue(ctx, None, 16).map_err(errno_name)?;
    let map = raw.map(buf.mmap_offset, 2 * 4096).map_err(errno_name)?;
    let control = q.progress_fence_va + CONTROL_AFTER_PROGRESS;
    // Where the ring control is: its write index, copied out by the first submission, is 2
    // (that buffer's entry and its progress signal's).
    let mut probe = CommandBuffer::new();
    probe.copy(control + WRITE_INDEX_OFFSET, buf.gpu_va + 4096, 4)?;
    map.store(0, probe.as_bytes());
    raw.submit_split(q.handle, buf.handle, probe.len() as u32, 1).map_err(errno_name)?;
    let write = map.load_u32(4096);
    ensure!(
        write == 2,
        "the page {CONTROL_AFTER_PROGRESS:#x} past the progress fence holds {write}, not the ring's write index 2"
    );
    // The spin (a JUMP to itself, then the marker) and the buffer that forges and enters it.
    let spin_va = buf.gpu_va + SPIN_AT as u64;
    let mut looping = CommandBuffer::new();
    looping.jump(spin_va, 2 * JUMP_BYTES)?.write32(buf.gpu_va + MARKER_AT as u64, MARKER)?;
    map.store(SPIN_AT, looping.as_bytes());
    let mut forge = CommandBuffer::new();
    forge.write32(control + READ_INDEX_OFFSET, FORGED_READ_INDEX)?.jump(spin_va, 2 * JUMP_BYTES)?;
    map.store(0, forge.as_bytes());
    let (mapped_tx, mapped_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| -> TestResult {
        let raw = &raw;
        let ender = s.spawn(move || -> Result<(), String> {
            // Mapped and touched before the submission, which holds the file's state.
            let mine = raw.map(buf.mmap_offset, 2 * 4096).map_err(errno_name)?;
            let _ = mine.load_u32(SPIN_AT);
            let _ = mapped_tx.send(());
            std::thread::sleep(SPIN_FOR);
            mine.store(SPIN_AT, &[nop_byte()]);
            Ok(())
        });
        mapped_rx.recv().map_err(|_| "the thread ending the spin did not map the buffer")?;
        let submitted = raw.submit_split(q.handle, buf.handle, forge.len() as u32, 2);
        let marker = map.load_u32(MARKER_AT);
        let ended = ender.join().map_err(|_| "the thread ending the spin panicked")?;
        submitted.map_err(|e| format!("SUBMIT_SPLIT of the forging buffer: {}", errno_name(e)))?;
        ended?;
        ensure!(
            marker == MARKER,
            "SUBMIT_SPLIT returned before its buffer ran: the word its end writes read {marker:#x}, not {MARKER:#x} \
             (the buffer had forged its ring control's read index)"
        );
        Ok(())
    })
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(a_forged_last_queued_value_neither_resets_the_engine_nor_keeps_the_device_awake, Default, []),
        test_entry!(a_forged_ring_read_index_does_not_end_a_split_submission_early, Default, []),
    ]
}

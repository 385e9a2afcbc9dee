//! PWR-xx: D-state transitions (RULES.md § D-state transitions). Each test allows runtime PM on
//! its device through sysfs ([`RuntimePmAllowed`]), waits for `runtime_status` = `suspended`
//! without calling into the module, and checks the order of the module's power steps
//! (`POWER_DEBUG`), its `DEVICE_POWER` counters and the work and data on either side.

use std::path::Path;

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_abi::uapi::{self, DoorbellStatus};
use belfry_abi::uapi_debug;
use belfry_umd::{FenceKind, QueueDesc, Segment, SplitBuffer, SplitQueue, VideoAllocation};

use super::eng::steps_since;
use crate::harness::proc;
use crate::harness::raw::{errno_name, RawDev};
use crate::support::fixture::{open_context, Fixture};
use crate::support::param::ModuleParam;
use crate::support::power::{system_sleep, RuntimePmAllowed};
use crate::support::work::{expect_status, expect_u32, held_write, notify_ran, write32};
use crate::support::{HOLD, WAIT};
use crate::{Test, TestResult};

/// The autosuspend delay the tests set (ms).
const DELAY_MS: u32 = 50;

/// The index of the first step `code` at or after `from` in `steps`, with its low byte.
fn find(steps: &[(u8, u8)], from: usize, code: u8) -> Option<(usize, u8)> {
    steps.iter().enumerate().skip(from).find(|(_, s)| s.0 == code).map(|(i, s)| (i, s.1))
}

/// The steps `want` in that order in `steps` (others may come between); the low byte of each.
fn in_order(steps: &[(u8, u8)], want: &[u8]) -> Result<Vec<u8>, crate::Error> {
    let mut at = 0;
    let mut lows = Vec::new();
    for &code in want {
        let (i, low) = find(steps, at, code).ok_or_else(|| {
            format!("steps {steps:?} (code, count): no step {code} after index {at}; expected {want:?} in order")
        })?;
        lows.push(low);
        at = i + 1;
    }
    Ok(lows)
}

/// Waits for the device to suspend; fails with its status otherwise.
fn expect_suspended(pm: &RuntimePmAllowed) -> TestResult {
    ensure!(
        pm.wait_suspended(WAIT),
        "runtime_status {} 10 s after runtime PM was allowed on an idle device",
        pm.status()
    );
    let state = pm.power_state();
    ensure!(state == "D3hot", "runtime-suspended, but the PCI power state is {state}");
    Ok(())
}

/// proves: PWR-01, PWR-02 — allowed to, an idle device runtime-suspends to D3hot: first every
/// running context is suspended, then every connected doorbell is disconnected — its status
/// page reads DISCONNECTED_RETRY while the device is in D3 — and only then the device enters
/// D3 (the module's steps, in that order, each counting at least one object).
fn an_idle_device_suspends_its_contexts_then_disconnects_its_doorbells_then_enters_d3(path: &Path) -> TestResult {
    let Fixture { dev, ctx: _ctx, buf, mut q } = Fixture::connected(path)?;
    let v = write32(&mut q, buf.gpu_va(), 0xD0)?;
    q.wait(v, WAIT)?;
    expect_status(&q, DoorbellStatus::Connected, "the doorbell before D3")?;
    let (before, power) = (dev.power_debug()?, dev.device_power()?);
    let pm = RuntimePmAllowed::new(path, DELAY_MS)?;
    expect_suspended(&pm)?;
    // Read from the status page: no ioctl, the device stays in D3.
    expect_status(&q, DoorbellStatus::DisconnectedRetry, "the doorbell in D3")?;
    ensure!(pm.status() == "suspended", "reading the doorbell status resumed the device");
    let after = dev.power_debug()?;
    let now = dev.device_power()?;
    drop(pm);
    ensure!(now.suspends > power.suspends, "DEVICE_POWER counted no suspend: {now:?}");
    let steps = steps_since(&before, &after);
    let order =
        [uapi_debug::POWER_STEP_D3_SUSPEND_CONTEXTS, uapi_debug::POWER_STEP_D3_DISCONNECT, uapi_debug::POWER_STEP_D3];
    let lows = in_order(&steps, &order)?;
    ensure!(
        lows[0] >= 1 && lows[1] >= 1,
        "steps {steps:?}: D3 entry suspended {} context(s) and disconnected {} doorbell(s)",
        lows[0],
        lows[1]
    );
    Ok(())
}

/// One queue's part of the D3 exit test: before D3 it writes `value` at offset 4; in D3 its
/// doorbell reads DISCONNECTED_RETRY, and a submission of `value + 1` at offset 0 reconnects
/// and runs, with the data written before D3 intact. `in_d3` returns once the device is in D3.
fn queue_across_d3(fx: &mut Fixture, value: u32, in_d3: impl FnOnce() -> TestResult) -> TestResult {
    let v = write32(&mut fx.q, fx.buf.gpu_va() + 4, value)?;
    fx.q.wait(v, WAIT)?;
    in_d3()?;
    expect_status(&fx.q, DoorbellStatus::DisconnectedRetry, "a doorbell in D3")?;
    let reconnects = fx.q.stats().reconnects;
    let v = write32(&mut fx.q, fx.buf.gpu_va(), value + 1)?;
    fx.q.wait(v, WAIT)?;
    expect_u32(&fx.buf, 0, value + 1, "work submitted in D3")?;
    ensure!(fx.q.stats().reconnects > reconnects, "the submission in D3 did not reconnect");
    expect_u32(&fx.buf, 4, value, "data written before D3")
}

/// A user-mode queue in each of two processes, each made by `fixture`, across one D3 cycle
/// ([`queue_across_d3`]): once the other process is ready this one allows runtime PM and sees the
/// device suspend; both queues' work must run. The power steps recorded meanwhile.
fn two_processes_across_d3(
    path: &Path,
    fixture: fn(&Path) -> Result<Fixture, crate::Error>,
) -> Result<Vec<(u8, u8)>, crate::Error> {
    let (ready, go) = (proc::Signal::new()?, proc::Signal::new()?);
    let child = proc::spawn("second process", || {
        let mut b = fixture(path)?;
        queue_across_d3(&mut b, 0xB0, || {
            ready.post(1);
            go.take()?;
            Ok(())
        })
    })?;
    let mut a = fixture(path)?;
    let before = a.dev.power_debug()?;
    let mut pm = None;
    let mine = queue_across_d3(&mut a, 0xA0, || {
        ready.take()?;
        let allowed = RuntimePmAllowed::new(path, DELAY_MS)?;
        expect_suspended(&allowed)?;
        pm = Some(allowed);
        Ok(())
    });
    go.post(1);
    let theirs = child.join();
    mine?;
    theirs?;
    let after = a.dev.power_debug()?;
    drop(pm);
    let steps = steps_since(&before, &after);
    Ok(steps)
}

/// proves: PWR-03, PWR-04 — queues of two processes on a device in D3: each submission finds
/// its doorbell disconnected and reconnects, the connect brings the device back to D0 first,
/// the contexts (both processes') are resumed only after that connect, and the work of both
/// queues runs with the data written before D3 intact.
fn a_submission_in_d3_reconnects_resumes_the_device_and_both_queues_run(path: &Path) -> TestResult {
    let steps = two_processes_across_d3(path, Fixture::connected)?;
    let order = [
        uapi_debug::POWER_STEP_D3,
        uapi_debug::POWER_STEP_D0,
        uapi_debug::POWER_STEP_CONNECT,
        uapi_debug::POWER_STEP_D0_RESUME_CONTEXTS,
    ];
    let lows = in_order(&steps, &order)?;
    ensure!(lows[3] >= 2, "steps {steps:?}: D3 exit resumed {} context(s), expected both processes'", lows[3]);
    // The first D3 exit: its first context resume comes after its connect (the device may
    // suspend again between the two processes' submissions).
    let d3 = find(&steps, 0, uapi_debug::POWER_STEP_D3).map_or(0, |s| s.0);
    let d0 = find(&steps, d3, uapi_debug::POWER_STEP_D0).map_or(0, |s| s.0);
    let connect = find(&steps, d0, uapi_debug::POWER_STEP_CONNECT).map_or(usize::MAX, |s| s.0);
    let resumed = find(&steps, d0, uapi_debug::POWER_STEP_D0_RESUME_CONTEXTS).map_or(0, |s| s.0);
    ensure!(connect < resumed, "steps {steps:?}: the contexts resumed before the connect");
    Ok(())
}

/// Bytes of the VRAM test's allocations.
const VRAM_BYTES: u64 = 64 << 10;

/// proves: PWR-02, PWR-04 — on a device that loses VRAM in D3hot, D3 entry evicts the
/// allocation resident in VRAM after the contexts are suspended and the doorbells disconnected,
/// and before D3; D3 exit makes it resident again after D0; its data survives (without the
/// eviction it reads as the device's lost-VRAM pattern).
fn d3_with_vram_lost_evicts_vram_allocations_last_and_restores_them_after_d0(path: &Path) -> TestResult {
    let (dev, ctx) = open_context(path)?;
    let data: Vec<u8> = (0..(VRAM_BYTES / 4) as u32).flat_map(|i| (i ^ 0x5a5a_0000).to_le_bytes()).collect();
    let input = VideoAllocation::new(&ctx, VRAM_BYTES, Segment::System)?;
    let vram = VideoAllocation::new(&ctx, VRAM_BYTES, Segment::Vram)?;
    input.write(0, &data)?;
    let mut q = SplitQueue::new(&ctx, ENGINE_COMPUTE)?;
    let mut b = SplitBuffer::new(dev.mm_stats()?.slots);
    b.bind_all(&[(0, &input), (1, &vram)])?;
    b.slot_copy(0, 0, 1, 0, VRAM_BYTES as u32)?;
    b.finish()?;
    q.submit(&b)?;
    ensure!(dev.mm_stats()?.resident_vram >= VRAM_BYTES, "the allocation is not resident in VRAM");
    let (before, power) = (dev.power_debug()?, dev.device_power()?);
    let pm = RuntimePmAllowed::new(path, DELAY_MS)?;
    expect_suspended(&pm)?;
    pm.pin_d0()?;
    let after = dev.power_debug()?;
    let now = dev.device_power()?;
    let resident = dev.mm_stats()?.resident_vram;
    drop(pm);
    let mut got = vec![0u8; VRAM_BYTES as usize];
    vram.read(0, &mut got)?;
    if let Some(at) = got.iter().zip(&data).position(|(g, w)| g != w) {
        let word = u64::from_le_bytes(got[at & !7..(at & !7) + 8].try_into().unwrap_or([0; 8]));
        return Err(format!("the VRAM allocation differs after D3 at byte {at:#x} (word {word:#x})").into());
    }
    let steps = steps_since(&before, &after);
    let order = [
        uapi_debug::POWER_STEP_D3_SUSPEND_CONTEXTS,
        uapi_debug::POWER_STEP_D3_DISCONNECT,
        uapi_debug::POWER_STEP_D3_EVICT,
        uapi_debug::POWER_STEP_D3,
        uapi_debug::POWER_STEP_D0,
        uapi_debug::POWER_STEP_D0_RESTORE,
    ];
    let lows = in_order(&steps, &order)?;
    ensure!(lows[2] >= 1 && lows[5] >= 1, "steps {steps:?}: evicted {}, restored {}", lows[2], lows[5]);
    ensure!(now.evicted > power.evicted && now.restored > power.restored, "DEVICE_POWER {now:?}");
    ensure!(resident >= VRAM_BYTES, "after D3 exit {resident} bytes are resident in VRAM");
    Ok(())
}

/// A fixture whose user-mode queue has its ring and ring control in VRAM
/// (`QUEUE_RING_IN_VRAM`), its doorbell connected.
fn vram_ring_fixture(path: &Path) -> Result<Fixture, crate::Error> {
    let mut fx = Fixture::with_queue(path, &QueueDesc::default().with_ring_in_vram(true))?;
    fx.q.connect_doorbell()?;
    Ok(fx)
}

/// The D3 round trip of a VRAM-losing device with rings in VRAM, in order: contexts suspended,
/// doorbells disconnected, rings then allocations evicted, D3, D0, rings restored.
const VRAM_RING_D3_CYCLE: [u8; 7] = [
    uapi_debug::POWER_STEP_D3_SUSPEND_CONTEXTS,
    uapi_debug::POWER_STEP_D3_DISCONNECT,
    uapi_debug::POWER_STEP_D3_EVICT_RINGS,
    uapi_debug::POWER_STEP_D3_EVICT,
    uapi_debug::POWER_STEP_D3,
    uapi_debug::POWER_STEP_D0,
    uapi_debug::POWER_STEP_D0_RESTORE_RINGS,
];

/// proves: PWR-02, PWR-04, RING-05 — on a device that loses VRAM in D3hot, user-mode queues of
/// two processes whose rings and ring controls live in VRAM (`QUEUE_RING_IN_VRAM`, written by the
/// CPU through the VRAM BAR) keep working across D3: D3 entry evicts the four ring allocations
/// after the contexts are suspended and the doorbells disconnected and before D3, moving the
/// processes' ring mappings to system memory (the submission made in D3 is written there: the
/// ring's CPU address stays valid across the move, N11); D3
/// exit makes them resident again after D0 and before the doorbells reconnect; the work written
/// before D3 and the work submitted in D3 both ran, the data intact.
fn d3_with_vram_lost_evicts_rings_in_vram_and_their_queues_keep_working(path: &Path) -> TestResult {
    let steps = two_processes_across_d3(path, vram_ring_fixture)?;
    let order: Vec<u8> = VRAM_RING_D3_CYCLE
        .into_iter()
        .chain([uapi_debug::POWER_STEP_D0_RESTORE, uapi_debug::POWER_STEP_CONNECT])
        .collect();
    let lows = in_order(&steps, &order)?;
    ensure!(
        lows[2] >= 4 && lows[6] >= 4,
        "steps {steps:?}: D3 entry evicted {} ring allocation(s), D3 exit restored {}; expected both queues' rings and ring controls (4)",
        lows[2],
        lows[6]
    );
    Ok(())
}

/// proves: PWR-01, PWR-02 — a system sleep (suspend-to-idle, woken by the launcher's key press)
/// on a device that loses VRAM in D3hot, with a user-mode queue whose ring lives in VRAM and
/// work submitted just before the sleep: the module's system-sleep callback lets the work
/// finish, then runs the D3 entry steps in order — contexts suspended, doorbells disconnected
/// (unless the idle engine's F1 already had; the status page reads DISCONNECTED_RETRY after the
/// wake), the ring allocations evicted from
/// VRAM — before D3hot; the system resume brings the device back to D0 and restores them. After
/// the wake the work submitted before the sleep has run, the queue reconnects and runs new work,
/// and a native fence it signals releases a CPU wait. Device power stays pinned on (`control` =
/// `on`), so no runtime suspend takes part: the steps are the system sleep's.
fn a_system_sleep_runs_the_d3_steps_and_the_queue_and_fences_keep_working(path: &Path) -> TestResult {
    let mut fx = vram_ring_fixture(path)?;
    let v = write32(&mut fx.q, fx.buf.gpu_va() + 4, 0x5104)?;
    fx.q.wait(v, WAIT)?;
    let fence = fx.ctx.create_fence(FenceKind::Default, 0, 0)?;
    // Submitted, not waited for: the sleep waits for it.
    let before_sleep = write32(&mut fx.q, fx.buf.gpu_va() + 8, 0x5108)?;
    let (before, power) = (fx.dev.power_debug()?, fx.dev.device_power()?);
    let reconnects = fx.q.stats().reconnects;
    system_sleep("pwr")?;
    // Read from the status page: no ioctl yet.
    expect_status(&fx.q, DoorbellStatus::DisconnectedRetry, "the doorbell after the system sleep")?;
    let after = fx.dev.power_debug()?;
    let now = fx.dev.device_power()?;
    let steps = steps_since(&before, &after);
    let order: Vec<u8> = [uapi_debug::POWER_STEP_SYSTEM_SUSPEND]
        .into_iter()
        .chain(VRAM_RING_D3_CYCLE)
        .chain([uapi_debug::POWER_STEP_SYSTEM_RESUME])
        .collect();
    let lows = in_order(&steps, &order)?;
    // The work submitted before the sleep may finish before D3 entry — before the sleep begins,
    // or while the sleep waits for pending work (a loaded host) — and the device put the idle
    // engine in F1 (ENG-04), which disconnects the doorbell: then D3 entry finds none
    // connected. Either way the doorbell is disconnected when the device enters D3.
    let sleep_at = find(&steps, 0, uapi_debug::POWER_STEP_SYSTEM_SUSPEND).map_or(0, |(i, _)| i);
    let d3_disconnect_at = find(&steps, sleep_at, uapi_debug::POWER_STEP_D3_DISCONNECT).map_or(sleep_at, |(i, _)| i);
    let idle_disconnect = steps[..d3_disconnect_at].iter().any(|s| s.0 == uapi_debug::POWER_STEP_F1_DISCONNECT);
    ensure!(
        lows[1] >= 1 && (lows[2] >= 1 || idle_disconnect) && lows[3] >= 2 && lows[7] >= 2 && lows[8] == 1,
        "steps {steps:?}: the sleep suspended {} context(s), disconnected {} doorbell(s) (the idle engine's F1 before it: {}), evicted {} ring allocation(s), restored {}, resumed to D0 at once: {}",
        lows[1],
        lows[2],
        idle_disconnect,
        lows[3],
        lows[7],
        lows[8]
    );
    ensure!(
        now.suspends > power.suspends && now.resumes > power.resumes && now.d3 == 0,
        "DEVICE_POWER after the sleep: {now:?} (before: {power:?})"
    );
    fx.q.wait(before_sleep, WAIT)?;
    expect_u32(&fx.buf, 8, 0x5108, "work submitted just before the sleep")?;
    expect_u32(&fx.buf, 4, 0x5104, "data written before the sleep")?;
    fx.q.signal_fence(&fence, 1)?;
    let v = write32(&mut fx.q, fx.buf.gpu_va(), 0x5100)?;
    fx.q.wait(v, WAIT)?;
    fence.wait(1, WAIT)?;
    expect_u32(&fx.buf, 0, 0x5100, "work submitted after the sleep")?;
    ensure!(fx.q.stats().reconnects > reconnects, "the first submission after the sleep did not reconnect");
    Ok(())
}

/// The module's wait for pending work before it refuses a system sleep, in
/// [`pending_work_that_cannot_finish_refuses_a_system_sleep`] (ms).
const REFUSED_SLEEP_DRAIN_MS: u32 = 300;

/// A system sleep while a user-mode queue's work waits on a fence nobody signals is refused
/// after the module's wait for pending work (`system_sleep_drain_ms`, 5 s by default, set to
/// [`REFUSED_SLEEP_DRAIN_MS`] for the test: the work can never finish, so the wait's length is
/// not what is tested): the write of
/// `freeze` fails with `EBUSY`, `DEVICE_POWER` counts the refusal and no suspend, the steps show
/// the system suspend waiting and then refusing, the system stays awake; once the fence is
/// signalled the work runs. The module's own policy (a GPU driver's suspend drains its queues
/// rather than cut work off): no rule id.
fn pending_work_that_cannot_finish_refuses_a_system_sleep(path: &Path) -> TestResult {
    let Fixture { dev, ctx, buf, mut q } = Fixture::connected(path)?;
    let (fence, last) = held_write(&ctx, &mut q, &buf, 0xE2)?;
    let _drain = ModuleParam::set("system_sleep_drain_ms", REFUSED_SLEEP_DRAIN_MS)?;
    let (before, power) = (dev.power_debug()?, dev.device_power()?);
    let refused = match system_sleep("busy") {
        Ok(()) => return Err("the system slept with work pending that could not finish".into()),
        Err(e) => e.to_string(),
    };
    let (after, now) = (dev.power_debug()?, dev.device_power()?);
    ensure!(refused.to_ascii_lowercase().contains("busy"), "the sleep failed, but not with EBUSY: {refused}");
    ensure!(
        now.refused > power.refused && now.suspends == power.suspends,
        "DEVICE_POWER after the refused sleep: {now:?} (before: {power:?})"
    );
    let steps = steps_since(&before, &after);
    let lows = in_order(&steps, &[uapi_debug::POWER_STEP_SYSTEM_SUSPEND, uapi_debug::POWER_STEP_D3_REFUSED])?;
    ensure!(lows[0] == 1, "steps {steps:?}: the system suspend did not wait for the pending work");
    ensure!(find(&steps, 0, uapi_debug::POWER_STEP_D3).is_none(), "steps {steps:?}: the device went to D3");
    fence.signal(1)?;
    q.wait(last, WAIT)?;
    expect_u32(&buf, 0, 0xE2, "the work held behind the fence")
}

/// A ring in VRAM is the process's while its queue lives and goes with it: stores through the
/// ring mapping (the VRAM BAR page) read back, and after `DESTROY_QUEUE` the mapping shows no
/// page any more (read through the kernel: `EFAULT`, where a load would raise `SIGBUS`), so it
/// cannot reach the VRAM range handed out next. The module's promise (THREAT_MODEL); no rule id.
fn a_ring_in_vram_mapping_goes_with_its_queue(path: &Path) -> TestResult {
    let raw = RawDev::open(path)?;
    let ctx = raw.create_context().map_err(|e| format!("CREATE_CONTEXT: {}", errno_name(e)))?;
    let q = raw.create_vram_ring_queue(ctx, 16).map_err(|e| format!("CREATE_QUEUE in VRAM: {}", errno_name(e)))?;
    let ring = raw.map(q.ring_mmap_offset, 4096).map_err(|e| format!("mmap of the ring: {}", errno_name(e)))?;
    ring.stamp_pages(0x5a);
    ring.check_stamps(0x5a).map_err(|e| format!("the ring in VRAM while its queue exists: {e}"))?;
    raw.handle_op(uapi::IOCTL_DESTROY_QUEUE, q.handle).map_err(|e| format!("DESTROY_QUEUE: {}", errno_name(e)))?;
    ensure!(ring.check_stamps(0x5a).is_err(), "the ring mapping still reads its page after DESTROY_QUEUE");
    Ok(())
}

/// A device with submitted user-mode work stays in D0 (the suspend is refused, and counted,
/// while the work waits on a fence nobody signalled), and once the work ran it suspends. The
/// module's own idle policy: no rule id.
fn pending_work_keeps_the_device_in_d0_and_it_suspends_once_idle(path: &Path) -> TestResult {
    let Fixture { dev, ctx, buf, mut q } = Fixture::connected(path)?;
    let (fence, last) = held_write(&ctx, &mut q, &buf, 0xE0)?;
    let power = dev.device_power()?;
    let pm = RuntimePmAllowed::new(path, DELAY_MS)?;
    std::thread::sleep(HOLD);
    ensure!(pm.status() == "active", "runtime_status {} with work pending", pm.status());
    let refused = dev.device_power()?.refused;
    ensure!(refused > power.refused, "no refused suspend counted while work was pending");
    fence.signal(1)?;
    q.wait(last, WAIT)?;
    expect_u32(&buf, 0, 0xE0, "the work held behind the fence")?;
    expect_suspended(&pm)?;
    Ok(())
}

/// A device whose kernel-mode queue has work on its ring that has not executed (a
/// `FENCE_WAIT` on a native fence nobody signalled, and a write behind it) stays in D0: the
/// suspend is refused and counted; once the fence is signalled and the work ran it suspends.
/// The module's own idle policy: no rule id.
fn kernel_mode_work_on_a_ring_keeps_the_device_in_d0_and_it_suspends_once_idle(path: &Path) -> TestResult {
    let Fixture { dev, ctx, buf, mut q } = Fixture::kernel_mode(path)?;
    let (fence, last) = held_write(&ctx, &mut q, &buf, 0xE1)?;
    let power = dev.device_power()?;
    let pm = RuntimePmAllowed::new(path, DELAY_MS)?;
    std::thread::sleep(HOLD);
    ensure!(pm.status() == "active", "runtime_status {} with kernel-mode work on a ring", pm.status());
    let refused = dev.device_power()?.refused;
    ensure!(refused > power.refused, "no refused suspend counted while kernel-mode work was on a ring");
    fence.signal(1)?;
    q.wait(last, WAIT)?;
    expect_u32(&buf, 0, 0xE1, "the work behind the GPU wait")?;
    expect_suspended(&pm)?;
    Ok(())
}

/// The autosuspend delay of [`a_submission_rung_as_d3_entry_starts_is_never_stranded`] (ms):
/// each round sleeps about that long, and what the rounds sweep is the instant D3 entry starts
/// relative to it (the timer's slack is a quarter of it), not its length.
const D3_RACE_DELAY_MS: u32 = 20;

/// Rounds of the submit loop across D3 entry: each takes the autosuspend delay and more (about
/// 60 ms on the distro kernel). With D3 entry's doorbell quiesce removed the race stranded a
/// submission in round 9, 3, 3 and 12 of four runs (about one round in seven), so 50 rounds miss
/// it about 3 times in 10,000 runs; `--repeat N` runs more.
const D3_RACE_ROUNDS: u64 = 50;

/// How long after the autosuspend delay a round's submission comes, at most (µs): the rounds
/// sweep the submission across the instant the module starts D3 entry (the autosuspend timer's
/// slack, a quarter of [`D3_RACE_DELAY_MS`], included), so some rings land while it looks for
/// pending work.
const D3_RACE_SPREAD_US: u64 = 7_000;

/// The sleep of round `round` before its submission: from 5 ms before the autosuspend delay
/// ends to [`D3_RACE_SPREAD_US`] after, in steps that are not a multiple of the timer tick.
fn d3_race_sleep(round: u64) -> std::time::Duration {
    let before_us = 5_000;
    let offset_us = round.wrapping_mul(7_919) % (before_us + D3_RACE_SPREAD_US);
    std::time::Duration::from_micros(u64::from(D3_RACE_DELAY_MS) * 1_000 - before_us + offset_us)
}

/// How long D3 entry sleeps between its look for pending work and the contexts' suspension in
/// [`a_submission_rung_as_d3_entry_starts_is_never_stranded`] (ms; the test-only
/// `test_d3_look_delay_ms` on the `mailbox-stall` device).
const D3_LOOK_DELAY_MS: u32 = 10;

/// proves: PWR-01, PWR-03 — a submission rung while D3 entry starts is never stranded: in each
/// round a process registers a pollable wait (`WAIT_FENCE_EVENTFD`, the round's last ioctl,
/// which restarts the [`D3_RACE_DELAY_MS`] autosuspend delay), then, without another ioctl, signals the fence
/// from its user-mode queue around the moment the device suspends (before, while the module
/// looks for pending work, during the contexts' suspension, or in D3), and polls the eventfd.
/// Every round's wait must end within [`WAIT`] (the device has nothing else to do): a ring the
/// module's look for pending work missed, in a context it then suspended, would run only at the
/// process's next ioctl, which the poll never makes. The window is microseconds wide, so the
/// test widens it on the `mailbox-stall` device: the module sleeps [`D3_LOOK_DELAY_MS`] between
/// its look and the suspension (`test_d3_look_delay_ms`), and the device's engines look for
/// work `SLOW_ENGINE_PICKUP_MS` after each wake-up (`SLOW_ENGINE_PICKUP_TOKEN`), so a ring in
/// the window is still on its runlist when its context is suspended.
fn a_submission_rung_as_d3_entry_starts_is_never_stranded(path: &Path) -> TestResult {
    let Fixture { dev, ctx, buf: _buf, mut q } = Fixture::connected(path)?;
    let fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let _look = ModuleParam::set("test_d3_look_delay_ms", D3_LOOK_DELAY_MS)?;
    notify_ran(&mut q, belfry_abi::regs::SLOW_ENGINE_PICKUP_TOKEN)?;
    let rounds = d3_race_rounds(&dev, &fence, &mut q, path);
    notify_ran(&mut q, belfry_abi::regs::FAST_ENGINE_PICKUP_TOKEN)?;
    rounds
}

/// The rounds of [`a_submission_rung_as_d3_entry_starts_is_never_stranded`].
fn d3_race_rounds(
    dev: &belfry_umd::Device,
    fence: &belfry_umd::Fence,
    q: &mut belfry_umd::Queue,
    path: &Path,
) -> TestResult {
    let power = dev.device_power()?;
    let pm = RuntimePmAllowed::new(path, D3_RACE_DELAY_MS)?;
    for round in 1..=D3_RACE_ROUNDS {
        let event = fence.event(round)?;
        std::thread::sleep(d3_race_sleep(round));
        q.signal_fence(fence, round)?;
        if !event.wait(WAIT)? {
            let db = q.doorbell_status();
            let (status, state) = (pm.status(), pm.power_state());
            return Err(format!(
                "round {round} of {D3_RACE_ROUNDS}: the pollable wait for the fence's value {round} \
                 was still pending {WAIT:?} after its submission (runtime_status {status}, {state}, \
                 doorbell {db:?}): the submission was stranded"
            )
            .into());
        }
    }
    let now = dev.device_power()?;
    drop(pm);
    let suspends = now.suspends - power.suspends;
    ensure!(suspends > 0, "no D3 entry in {D3_RACE_ROUNDS} rounds: {now:?}");
    let (refused, stats) = (now.refused - power.refused, q.stats());
    println!(
        "{D3_RACE_ROUNDS} rounds: {suspends} suspend(s), {refused} refused; the submissions \
         reconnected {} and notified {} time(s)",
        stats.reconnects, stats.notifies
    );
    Ok(())
}

/// The tests of this file, in the order they run.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            an_idle_device_suspends_its_contexts_then_disconnects_its_doorbells_then_enters_d3,
            Default,
            ["PWR-01", "PWR-02"]
        ),
        test_entry!(
            a_submission_in_d3_reconnects_resumes_the_device_and_both_queues_run,
            Default,
            ["PWR-03", "PWR-04"]
        ),
        test_entry!(a_submission_rung_as_d3_entry_starts_is_never_stranded, MailboxStall, ["PWR-01", "PWR-03"]),
        test_entry!(pending_work_keeps_the_device_in_d0_and_it_suspends_once_idle, Default, []),
        test_entry!(kernel_mode_work_on_a_ring_keeps_the_device_in_d0_and_it_suspends_once_idle, Default, []),
        test_entry!(a_ring_in_vram_mapping_goes_with_its_queue, Default, []),
        test_entry!(
            d3_with_vram_lost_evicts_vram_allocations_last_and_restores_them_after_d0,
            VramLostInD3,
            ["PWR-02", "PWR-04"]
        ),
        test_entry!(
            d3_with_vram_lost_evicts_rings_in_vram_and_their_queues_keep_working,
            VramLostInD3,
            ["PWR-02", "PWR-04", "RING-05"]
        ),
        test_entry!(
            a_system_sleep_runs_the_d3_steps_and_the_queue_and_fences_keep_working,
            VramLostInD3,
            ["PWR-01", "PWR-02"]
        ),
        test_entry!(pending_work_that_cannot_finish_refuses_a_system_sleep, Default, []),
    ]
}

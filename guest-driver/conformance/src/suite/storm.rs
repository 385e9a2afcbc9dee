//! Interrupt storms (no rule family: a NOTIFY storm): the device's interrupt
//! moderation (`CAPS.irq_moderation`, `IRQ_MODERATION`) bounds the interrupts one process's
//! NOTIFY packets raise, another process's fence signals still reach their CPU waiters within a
//! bound, and every record the storm produced is either handled or counted as dropped
//! (`IRQ_DEBUG.ring_overflows`), with a rate-limited log line; a storm that ends with the ring
//! full still delivers another process's software signal (the device's owed records go out at
//! the module's `INT_CLEAR` after its drain).

use std::path::Path;
use std::time::{Duration, Instant};

use belfry_abi::regs;
use belfry_umd::{CommandBuffer, Device, EngineId, FenceFlags, FenceKind, QueueDesc, QueueMode};

use crate::harness::proc::{self, Signal};
use crate::support::fixture::Fixture;
use crate::support::kernel_log;
use crate::support::WAIT;
use crate::{Test, TestResult};

/// The moderation interval the storm runs under: long enough that the interrupts it allows are
/// far fewer than an unmoderated storm raises (hundreds in a quarter second under TCG).
const STORM_US: u32 = 5_000;
/// NOTIFY packets per command buffer (16 bytes each, a 4 KiB ring slot with the library's
/// progress signal), and command buffers in the storm.
const PER_BUFFER: u32 = 250;
/// See [`PER_BUFFER`].
const BUFFERS: u32 = 80;
/// The longest another process's GPU signal → CPU wait may take during the storm.
const VICTIM_LATENCY: Duration = Duration::from_secs(2);
/// The module's shortest time between two "interrupt ring full" lines.
const OVERFLOW_LOG_INTERVAL: Duration = Duration::from_secs(5);
/// What the module's rate-limited line says.
const OVERFLOW_LINE: &str = "interrupt ring full: the device dropped";

/// Interrupts of `path`'s device on its vector `suffix` (`mb`, `v1`, ...) as `/proc/interrupts`
/// counts them, all CPUs together.
fn vector_interrupts(path: &Path, suffix: &str) -> Result<u64, crate::Error> {
    let dev = path.file_name().and_then(|n| n.to_str()).ok_or("device path without a name")?;
    let name = format!(" {dev}-{suffix}");
    let text = std::fs::read_to_string("/proc/interrupts")?;
    let line = text
        .lines()
        .find(|l| l.trim_end().ends_with(&name))
        .ok_or_else(|| format!("no{name} line in /proc/interrupts"))?;
    let counts = line.split(':').nth(1).ok_or("a /proc/interrupts line without a colon")?;
    Ok(counts.split_whitespace().map_while(|w| w.parse::<u64>().ok()).sum())
}

/// Puts the device's moderation interval back when dropped (a failed test included).
struct Restore<'a>(&'a Device, u32);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let _ = self.0.irq_moderation(Some(self.1));
    }
}

/// Opens the device at `path`, which must advertise interrupt moderation (CAPS bit 18); returns
/// it with its moderation interval in µs (to restore with [`Restore`]).
fn open_moderated(path: &Path) -> Result<(Device, u32), crate::Error> {
    let dev = Device::open(path)?;
    ensure!(
        regs::CAPS(dev.caps().raw.caps).irq_moderation(),
        "CAPS {:#x} does not advertise interrupt moderation (bit 18)",
        dev.caps().raw.caps
    );
    let was = dev.irq_moderation(None).map_err(|e| format!("IRQ_MODERATION (read): {e}"))?;
    Ok((dev, was.interval_us))
}

/// One command buffer of the storms: [`PER_BUFFER`] NOTIFYs, tokens 0 and on.
fn notify_buffer() -> Result<CommandBuffer, crate::Error> {
    let mut cb = CommandBuffer::new();
    for i in 0..PER_BUFFER {
        cb.notify(u64::from(i))?;
    }
    Ok(cb)
}

/// The other process: signals a DEFAULT fence from its user-mode queue and waits on the CPU
/// for each value until `stop`; fails if one signal took longer than [`VICTIM_LATENCY`].
fn victim(path: &Path, started: &Signal, stop: &Signal) -> TestResult {
    let Fixture { ctx, mut q, .. } = Fixture::connected(path)?;
    let fence = ctx.create_fence(FenceKind::Default, FenceFlags::empty(), 0)?;
    started.post(1);
    let (mut n, mut worst) = (0u64, Duration::ZERO);
    while !stop.try_take() {
        n += 1;
        let t = Instant::now();
        q.signal_fence(&fence, n)?;
        fence.wait(n, WAIT).map_err(|e| format!("the other process's signal {n}: {e}"))?;
        worst = worst.max(t.elapsed());
    }
    println!("NOTIFY storm: the other process's {n} signals, the slowest in {} ms", worst.as_millis());
    ensure!(n > 1, "the other process signalled only {n} time(s) during the storm");
    ensure!(worst <= VICTIM_LATENCY, "a signal of the other process took {} ms during the storm", worst.as_millis());
    Ok(())
}

/// A NOTIFY storm under moderation: the device advertises moderation and its default interval;
/// with the interval set to [`STORM_US`], one process's 20,000 NOTIFYs (and another process's
/// fence signals meanwhile) raise at most one fence-vector interrupt per interval (plus one);
/// the other process's signals each reach its CPU wait within [`VICTIM_LATENCY`]; every NOTIFY
/// record is either handled by the module or counted as dropped (`IRQ_DEBUG.ring_overflows`,
/// as `DEBUG_STATS` and `IRQ_MODERATION` report it), drops are logged at most once per
/// [`OVERFLOW_LOG_INTERVAL`], and setting the interval needs `CAP_SYS_ADMIN`.
fn a_notify_storm_is_moderated_and_loses_no_record_silently(path: &Path) -> TestResult {
    let (dev, was) = open_moderated(path)?;
    ensure!(
        was == regs::DEFAULT_IRQ_MODERATION_US,
        "the device's interval is {was} us, its default is {} us",
        regs::DEFAULT_IRQ_MODERATION_US
    );
    let _restore = Restore(&dev, was);
    let unprivileged = proc::spawn("a process without CAP_SYS_ADMIN", move || {
        super::privilege::drop_capability(super::privilege::CAP_SYS_ADMIN)?;
        let d = Device::open(path)?;
        match d.irq_moderation(Some(0)) {
            Err(e) if e.errno() == Some(libc::EPERM) => Ok(()),
            other => Err(format!("IRQ_MODERATION set without CAP_SYS_ADMIN: {other:?}, expected EPERM").into()),
        }
    })?;
    unprivileged.join()?;
    let set = dev.irq_moderation(Some(STORM_US)).map_err(|e| format!("IRQ_MODERATION (set): {e}"))?;
    ensure!(set.interval_us == STORM_US, "IRQ_MODERATION set {STORM_US} us, reads {} us", set.interval_us);

    let Fixture { buf: _buf, mut q, .. } = Fixture::connected(path)?;
    let cb = notify_buffer()?;
    let (started, stop) = (Signal::new()?, Signal::new()?);
    let (started_ref, stop_ref) = (&started, &stop);
    let other = proc::spawn("the other process", move || victim(path, started_ref, stop_ref))?;
    started.take()?;

    let log_before = kernel_log::read()?.matches(OVERFLOW_LINE).count();
    let (stats0, irq0, mod0) = (dev.debug_stats()?, dev.irq_debug()?, dev.irq_moderation(None)?);
    let v0 = vector_interrupts(path, "v1")?;
    let t0 = Instant::now();
    let ran = (|| -> Result<Duration, crate::Error> {
        let mut last = 0;
        for _ in 0..BUFFERS {
            last = q.submit(&cb)?;
        }
        q.wait(last, WAIT)?;
        Ok(t0.elapsed())
    })();
    // The other process keeps signalling for a while after the storm (its latency bound covers
    // the storm's tail), then the held interrupt of the last interval has gone out. It is
    // stopped whatever the storm's outcome, so no process keeps the device open.
    std::thread::sleep(Duration::from_millis(200));
    stop.post(1);
    let joined = other.join();
    let storm = ran?;
    joined?;
    std::thread::sleep(Duration::from_micros(u64::from(STORM_US) * 4));
    let v1 = vector_interrupts(path, "v1")?;
    let window = t0.elapsed();
    let (stats1, irq1, mod1) = (dev.debug_stats()?, dev.irq_debug()?, dev.irq_moderation(None)?);
    let log_after = kernel_log::read()?.matches(OVERFLOW_LINE).count();

    let notifies = u64::from(PER_BUFFER * BUFFERS);
    let interrupts = v1 - v0;
    let allowed = u64::try_from(window.as_micros()).unwrap_or(u64::MAX) / u64::from(STORM_US) + 2;
    // NOTIFY records count under MONITORED_FENCE (index 2); the other process's are native.
    let handled = stats1.interrupts_by_cause[2] - stats0.interrupts_by_cause[2];
    let dropped = u64::from(irq1.ring_overflows.wrapping_sub(irq0.ring_overflows));
    println!(
        "NOTIFY storm: {notifies} NOTIFYs in {} ms; fence-vector interrupts {interrupts} in {} ms (at most {allowed}); \
         records handled {handled}, dropped {dropped}; held back by the device {}; overflow log lines {}",
        storm.as_millis(),
        window.as_millis(),
        mod1.moderated.wrapping_sub(mod0.moderated),
        log_after - log_before
    );
    ensure!(
        interrupts <= allowed,
        "{interrupts} fence-vector interrupts in {} ms under a {STORM_US} us moderation: at most {allowed}",
        window.as_millis()
    );
    ensure!(
        handled + dropped >= notifies,
        "{notifies} NOTIFYs ran, but the module handled {handled} records and reports {dropped} dropped: \
         {} lost silently",
        notifies - handled - dropped
    );
    ensure!(handled <= notifies, "{handled} NOTIFY records handled for {notifies} NOTIFYs");
    ensure!(
        stats1.ring_overflows == irq1.ring_overflows && mod1.ring_overflows == irq1.ring_overflows,
        "overflows: DEBUG_STATS {}, IRQ_DEBUG {}, IRQ_MODERATION {}",
        stats1.ring_overflows,
        irq1.ring_overflows,
        mod1.ring_overflows
    );
    let lines = log_after - log_before;
    let most = usize::try_from(window.as_secs() / OVERFLOW_LOG_INTERVAL.as_secs()).unwrap_or(usize::MAX) + 1;
    ensure!(dropped == 0 || lines >= 1, "{dropped} records dropped and no \"{OVERFLOW_LINE}\" line in the kernel log");
    ensure!(lines <= most, "{lines} \"{OVERFLOW_LINE}\" lines in {} s: at most {most}", window.as_secs());
    Ok(())
}

/// The moderation interval of [`a_storm_that_ends_with_the_ring_full_still_completes_another_process_software_signal`]:
/// the longest, so the module drains the ring at most every 100 ms (mailbox interrupts aside)
/// and the storm, a few milliseconds of device time, leaves it full.
const FULL_US: u32 = regs::MAX_IRQ_MODERATION_US;
/// Command buffers of [`PER_BUFFER`] NOTIFYs in that storm: 2,000 records, the ring's 64 many
/// times over.
const FULL_BUFFERS: u32 = 8;
/// The longest the other process's software signal may stay pending, from its release: many
/// intervals of [`FULL_US`] (it needs two). With both engines held busy the device writes no
/// unrelated record meanwhile (no idle F1 report), so without the owed records' delivery it
/// stays pending for good.
const AFTER_STORM: Duration = Duration::from_secs(3);

/// The other process: a kernel-mode queue on the copy engine waits on the GPU for its `gate`
/// fence, then carries a software signal packet (`QUEUE_SIGNAL_FENCE`) of a monitored fence. Once
/// `go` comes (the storm is queued), a low-priority user-mode queue on the storm's engine signals
/// `gate` from the GPU: strict priority runs it after the whole storm, so the software signal's
/// NOTIFY runs right after the storm's last one, on a full ring. The process then waits on the
/// CPU for the monitored fence for [`AFTER_STORM`]. `ready` is posted once everything is set up
/// (or the setup failed).
fn software_signaller(path: &Path, ready: &Signal, go: &Signal) -> TestResult {
    let setup = || -> Result<_, crate::Error> {
        let dev = Device::open(path)?;
        let ctx = dev.create_context()?;
        let gate = ctx.create_fence(FenceKind::Default, FenceFlags::empty(), 0)?;
        let f = ctx.create_fence(FenceKind::Monitored, FenceFlags::empty(), 0)?;
        let desc = QueueDesc::default().with_engine(EngineId::new(1)).with_mode(QueueMode::KernelMode);
        let mut kq = ctx.create_queue(&desc)?;
        kq.wait_fence(&gate, 1)?;
        kq.software_signal(&f, 1)?;
        let mut uq = ctx.create_queue(&QueueDesc::default().with_priority(0))?;
        uq.connect_doorbell()?;
        let mut cb = CommandBuffer::new();
        cb.signal_fence(&gate, 1)?;
        Ok((dev, ctx, gate, f, kq, uq, cb))
    };
    let made = setup();
    ready.post(1);
    let (_dev, _ctx, _gate, f, _kq, mut uq, cb) = made?;
    go.take()?;
    uq.submit(&cb)?;
    let t = Instant::now();
    f.wait(1, AFTER_STORM).map_err(|e| {
        format!(
            "the software signal (QUEUE_SIGNAL_FENCE) released behind the storm was still pending {} ms later: its \
             NOTIFY ran on a full interrupt ring and the device never delivered the token ({e})",
            t.elapsed().as_millis()
        )
    })?;
    println!(
        "NOTIFY storm ending full: the other process's software signal completed {} ms after its release",
        t.elapsed().as_millis()
    );
    Ok(())
}

/// A NOTIFY storm that ends with the interrupt ring full, while another process has a
/// kernel-mode software signal (`QUEUE_SIGNAL_FENCE`) in flight: under the longest moderation
/// interval one process's storm of 2,000 NOTIFYs fills the ring, and the other process's software
/// signal packet runs right after the storm (see [`software_signaller`]), so its NOTIFY record is
/// dropped and its token latched in the device. Nothing runs after it: both engines are held busy
/// by kernel-mode queues waiting on the GPU for a fence no CPU waits for (no idle F1 report, no
/// record). The module's drain of the ring at the end of the interval, acknowledged with
/// `INT_CLEAR`, must bring the owed scan-all record and the token, so the other process's CPU
/// wait on the fence returns within [`AFTER_STORM`].
fn a_storm_that_ends_with_the_ring_full_still_completes_another_process_software_signal(path: &Path) -> TestResult {
    let (dev, was) = open_moderated(path)?;
    let _restore = Restore(&dev, was);
    dev.irq_moderation(Some(FULL_US)).map_err(|e| format!("IRQ_MODERATION (set): {e}"))?;

    let Fixture { ctx, buf: _buf, mut q, .. } = Fixture::connected(path)?;
    // Both engines held busy after the storm: no idle report (an unrelated record) in the window.
    let hold = ctx.create_fence(FenceKind::Default, FenceFlags::empty(), 0)?;
    let mut holders = Vec::new();
    for engine in 0..2 {
        let desc = QueueDesc::default().with_engine(EngineId::new(engine)).with_mode(QueueMode::KernelMode);
        let mut h = ctx.create_queue(&desc)?;
        h.wait_fence(&hold, 1)?;
        holders.push(h);
    }
    let cb = notify_buffer()?;
    let (ready, go) = (Signal::new()?, Signal::new()?);
    let (ready_ref, go_ref) = (&ready, &go);
    let other = proc::spawn("the process with a software signal", move || software_signaller(path, ready_ref, go_ref))?;
    ready.take()?;
    let irq0 = dev.irq_debug()?;
    let storm = (|| -> Result<u64, crate::Error> {
        let mut last = 0;
        for _ in 0..FULL_BUFFERS {
            last = q.submit(&cb)?;
        }
        Ok(last)
    })();
    go.post(1);
    // The verdict is the other process's; it ends by itself within AFTER_STORM of its release.
    let joined = other.join();
    let irq1 = dev.irq_debug()?;
    let released = hold.signal(1);
    let last = storm?;
    q.wait(last, WAIT)?;
    released?;
    let dropped = irq1.ring_overflows.wrapping_sub(irq0.ring_overflows);
    println!(
        "NOTIFY storm ending full: {} NOTIFYs under a {FULL_US} us moderation, {dropped} records dropped",
        FULL_BUFFERS * PER_BUFFER
    );
    joined?;
    ensure!(dropped > 0, "the storm dropped no record: the ring never filled, the test proved nothing");
    Ok(())
}

pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(a_notify_storm_is_moderated_and_loses_no_record_silently, Default, []),
        test_entry!(a_storm_that_ends_with_the_ring_full_still_completes_another_process_software_signal, Default, []),
    ]
}

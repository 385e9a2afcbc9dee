//! Interrupt delivery: the cause block (`INT_RAWSTAT`/`INT_CLEAR`/`INT_MASK`/`INT_STATUS`) and
//! the eventfds QEMU hands over with `DEVICE_SET_IRQS`.
//!
//! Delivery goes through the [`InterruptSink`] trait so tests can count interrupts without
//! eventfds. [`EventfdInterrupts`] is the real sink: MSI-X vectors when the client configured
//! them, INTx otherwise. Every trigger is counted per vector and traced with its cause.
//!
//! The client's fds are not trusted: `DEVICE_SET_IRQS` accepts eventfds only ([`adopt_eventfd`]
//! refuses a pipe, a file or a socket, which could block or be filled), makes them non-blocking
//! (a saturated counter then loses nothing — the eventfd is already signalled — instead of
//! stalling the signalling thread), and a trigger writes outside every lock (the table lock is
//! held only to clone the fd's handle).
//!
//! Record-carrying causes are moderated ([`moderation`]): a vector is raised at most once per
//! `IRQ_MODERATION` interval, the held causes going out when it ends.
//!
//! Whether a raise writes an eventfd depends on state other threads change: the mask and the
//! pending causes (register writes, resets) and the eventfd table (`DEVICE_SET_IRQS`, the
//! client's departure). In an input log every read and change of that state is a lock ticket
//! written together with it ([`RecordSlot::ordered`]), so a replay makes each decision against
//! what the recorded device found, whichever thread the host runs first. The moderation
//! throttle's decisions are such accesses too, and the clock it decides on is an input (a
//! `clock` record per raise and per pass of the moderation thread): a replay holds and
//! releases the same raises at the same points of the log.

mod moderation;

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

pub use moderation::{Admit, Throttle, MODERATED};

use belfry_abi::irq;
use belfry_trace_schema::input_log::Entry;
use thiserror::Error;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_ACTION_UNMASK,
    VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK,
    VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX,
    VFIO_PCI_REQ_IRQ_INDEX,
};

use crate::record::{self, ticket, RecordSlot};
use crate::trace::{Delivery, Event, Tracer};

/// Where interrupts go. Implementations must be cheap and never block for long: the command
/// processor calls them on its hot path.
pub trait InterruptSink: Send + Sync {
    /// Raises `vector` for `cause`; returns how it was delivered (for the trace).
    fn trigger(&self, vector: u16, cause: u32) -> Delivery;
}

/// A `DEVICE_SET_IRQS` request that cannot be honoured.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SetIrqsError {
    /// Unknown or unsupported IRQ index.
    #[error("IRQ index {0} is not supported")]
    Index(u32),
    /// `start + count` beyond the index's vector count.
    #[error("Vectors {start}..{end} exceed the {max} vectors of index {index}")]
    Range {
        /// IRQ index.
        index: u32,
        /// First vector.
        start: u32,
        /// One past the last vector.
        end: u64,
        /// Vectors available.
        max: u32,
    },
    /// Not exactly one data type and one action, or an unknown flag.
    #[error("Flags {0:#x} do not name one data type and one action")]
    Flags(u32),
    /// The number of fds does not match `count`.
    #[error("Expected {expected} eventfds (or none), got {got}")]
    FdCount {
        /// `count`.
        expected: u32,
        /// fds received.
        got: usize,
    },
    /// An fd that is not an eventfd.
    #[error("Interrupt fd {position} is not an eventfd ({what})")]
    NotEventfd {
        /// Its position among the fds of the request.
        position: usize,
        /// What it is.
        what: String,
    },
    /// A `DATA_BOOL` request without one byte per vector.
    #[error("Expected {expected} bytes of boolean data, got {got}")]
    BoolData {
        /// `count`.
        expected: u32,
        /// Bytes present.
        got: usize,
    },
}

impl SetIrqsError {
    /// The errno this error is reported with.
    pub fn errno(&self) -> i32 {
        libc::EINVAL
    }
}

/// What `fd` is, as `/proc/self/fd` names it (`anon_inode:[eventfd]`, `pipe:[..]`, a path).
fn fd_kind(fd: &OwnedFd) -> String {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_or_else(|e| format!("unknown: {e}"), |p| p.to_string_lossy().into_owned())
}

/// Accepts `fd` as an interrupt fd only if it is an eventfd, and makes it non-blocking
/// (`O_NONBLOCK` on the open file, which the client shares; QEMU's event notifiers are
/// non-blocking already). On refusal returns what the fd is instead.
pub fn adopt_eventfd(fd: OwnedFd) -> Result<OwnedFd, String> {
    let kind = fd_kind(&fd);
    if kind != "anon_inode:[eventfd]" {
        return Err(kind);
    }
    // SAFETY: fcntl on an fd we own; F_GETFL/F_SETFL only read and set its status flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(format!("eventfd whose flags cannot be set: {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// Adopts every fd of a request ([`adopt_eventfd`]), or names the first one refused.
fn adopt_all(fds: Vec<OwnedFd>) -> Result<Vec<Arc<OwnedFd>>, SetIrqsError> {
    fds.into_iter()
        .enumerate()
        .map(|(position, fd)| {
            adopt_eventfd(fd).map(Arc::new).map_err(|what| SetIrqsError::NotEventfd { position, what })
        })
        .collect()
}

/// Name of a VFIO PCI IRQ index, for traces.
pub fn index_name(index: u32) -> &'static str {
    match index {
        VFIO_PCI_INTX_IRQ_INDEX => "intx",
        VFIO_PCI_MSI_IRQ_INDEX => "msi",
        VFIO_PCI_MSIX_IRQ_INDEX => "msix",
        VFIO_PCI_ERR_IRQ_INDEX => "err",
        VFIO_PCI_REQ_IRQ_INDEX => "req",
        _ => "unknown",
    }
}

/// Interrupt eventfds received from the client, with per-vector counters.
pub struct EventfdInterrupts {
    msix: Mutex<Vec<Option<Arc<OwnedFd>>>>,
    /// The function has an interrupt pin (INTA#): the INTx index offers one interrupt.
    has_intx: bool,
    intx: Mutex<Option<Arc<OwnedFd>>>,
    intx_masked: AtomicU32,
    counts: Vec<AtomicU64>,
    suppressed: bool,
    /// The input recorder, if the device records: each MSI-X eventfd write and its result,
    /// and each look at and change of the eventfd table (a ticket).
    pub recording: RecordSlot,
}

/// Where a trigger goes, as the eventfd table says.
enum Target {
    /// MSI-X is configured: the vector's eventfd, if it has one.
    Msix(Option<Arc<OwnedFd>>),
    /// No MSI-X vector has an eventfd: INTx.
    Intx,
}

impl EventfdInterrupts {
    /// Sink for `vectors` MSI-X vectors and, if `has_intx`, an INTx interrupt; `suppressed`
    /// drops every trigger (fault injection).
    pub fn new(vectors: u16, has_intx: bool, suppressed: bool) -> Self {
        EventfdInterrupts {
            has_intx,
            msix: Mutex::new((0..vectors).map(|_| None).collect()),
            intx: Mutex::new(None),
            intx_masked: AtomicU32::new(0),
            counts: (0..vectors).map(|_| AtomicU64::new(0)).collect(),
            suppressed,
            recording: RecordSlot::default(),
        }
    }

    /// Number of vectors the IRQ index offers (what `DEVICE_GET_IRQ_INFO` reports).
    pub fn vector_count(&self, index: u32) -> u32 {
        match index {
            VFIO_PCI_INTX_IRQ_INDEX => u32::from(self.has_intx),
            VFIO_PCI_MSIX_IRQ_INDEX => u32::try_from(self.counts.len()).unwrap_or(u32::MAX),
            _ => 0,
        }
    }

    /// Interrupts delivered so far on `vector`.
    pub fn count(&self, vector: u16) -> u64 {
        self.counts.get(usize::from(vector)).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Drops every eventfd (client disconnect or reset of the IRQ configuration).
    pub fn clear(&self) {
        self.recording.ordered(ticket, || {
            if let Ok(mut v) = self.msix.lock() {
                v.iter_mut().for_each(|fd| *fd = None);
            }
            if let Ok(mut i) = self.intx.lock() {
                *i = None;
            }
        });
    }

    /// Applies a `DEVICE_SET_IRQS` request. `data` is the payload after the fixed part.
    pub fn set_irqs(
        &self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        data: &[u8],
        fds: Vec<OwnedFd>,
    ) -> Result<(), SetIrqsError> {
        let max = self.vector_count(index);
        if max == 0 {
            return Err(SetIrqsError::Index(index));
        }
        let data_type = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        let action = flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
        let known = VFIO_IRQ_SET_DATA_TYPE_MASK | VFIO_IRQ_SET_ACTION_TYPE_MASK;
        if data_type.count_ones() != 1 || action.count_ones() != 1 || flags & !known != 0 {
            return Err(SetIrqsError::Flags(flags));
        }
        let end = u64::from(start) + u64::from(count);
        // count == 0 with DATA_NONE|TRIGGER means "disable all vectors of this index".
        let disable_all = count == 0 && data_type == VFIO_IRQ_SET_DATA_NONE;
        if !disable_all && (count == 0 || end > u64::from(max)) {
            return Err(SetIrqsError::Range { index, start, end, max });
        }
        let (Ok(first), Ok(past)) = (usize::try_from(start), usize::try_from(end)) else {
            return Err(SetIrqsError::Range { index, start, end, max });
        };
        match (data_type, action) {
            (VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER) => {
                // QEMU sends no fds to disable vectors (it cannot pass -1 over SCM_RIGHTS).
                if !fds.is_empty() && fds.len() != count as usize {
                    return Err(SetIrqsError::FdCount { expected: count, got: fds.len() });
                }
                let mut fds = adopt_all(fds)?.into_iter();
                self.recording.ordered(ticket, || {
                    if index == VFIO_PCI_INTX_IRQ_INDEX {
                        *self.intx.lock().unwrap_or_else(|e| e.into_inner()) = fds.next();
                    } else {
                        let mut table = self.msix.lock().unwrap_or_else(|e| e.into_inner());
                        for slot in &mut table[first..past] {
                            *slot = fds.next();
                        }
                    }
                });
                Ok(())
            }
            (VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_ACTION_TRIGGER) if disable_all => {
                self.recording.ordered(ticket, || {
                    if index == VFIO_PCI_INTX_IRQ_INDEX {
                        *self.intx.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    } else {
                        self.msix.lock().unwrap_or_else(|e| e.into_inner()).iter_mut().for_each(|f| *f = None);
                    }
                });
                Ok(())
            }
            (VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_ACTION_TRIGGER) => {
                // Loopback: trigger the named vectors now.
                if data_type == VFIO_IRQ_SET_DATA_BOOL && data.len() < count as usize {
                    return Err(SetIrqsError::BoolData { expected: count, got: data.len() });
                }
                for (i, v) in (first..past).enumerate() {
                    let fire = data_type == VFIO_IRQ_SET_DATA_NONE || data[i] != 0;
                    if fire {
                        if index == VFIO_PCI_INTX_IRQ_INDEX {
                            self.signal_intx();
                        } else if let Ok(v) = u16::try_from(v) {
                            self.signal_msix(v);
                        }
                    }
                }
                Ok(())
            }
            (_, VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK) => {
                // Only INTx is maskable through vfio; MSI-X masking is QEMU's table emulation.
                if index != VFIO_PCI_INTX_IRQ_INDEX || data_type == VFIO_IRQ_SET_DATA_EVENTFD {
                    return Err(SetIrqsError::Flags(flags));
                }
                let masked = u32::from(action == VFIO_IRQ_SET_ACTION_MASK);
                self.intx_masked.store(masked, Ordering::Release);
                Ok(())
            }
            _ => Err(SetIrqsError::Flags(flags)),
        }
    }

    fn signal_msix(&self, vector: u16) -> Delivery {
        let fd = self.recording.ordered(ticket, || self.msix_eventfd(vector));
        self.write_msix(vector, fd)
    }

    /// The eventfd of MSI-X `vector`, if it has one.
    fn msix_eventfd(&self, vector: u16) -> Option<Arc<OwnedFd>> {
        self.msix.lock().unwrap_or_else(|e| e.into_inner()).get(usize::from(vector)).cloned().flatten()
    }

    /// Where a trigger of `vector` goes (ordered in an input log with the table's changes).
    fn target(&self, vector: u16) -> Target {
        self.recording.ordered(ticket, || {
            let table = self.msix.lock().unwrap_or_else(|e| e.into_inner());
            if table.iter().any(Option::is_some) {
                Target::Msix(table.get(usize::from(vector)).cloned().flatten())
            } else {
                Target::Intx
            }
        })
    }

    /// Signals MSI-X `vector` through `fd` (the table's eventfd, looked up before), recording
    /// the write and its result.
    fn write_msix(&self, vector: u16, fd: Option<Arc<OwnedFd>>) -> Delivery {
        match fd {
            Some(fd) => {
                let result = write_eventfd(&fd);
                self.recording.note(|| Entry::Interrupt { thread: record::thread_number(), vector, result });
                if let Some(c) = self.counts.get(usize::from(vector)) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                Delivery::Msix
            }
            None => Delivery::NoEventfd,
        }
    }

    fn signal_intx(&self) -> Delivery {
        if self.intx_masked.load(Ordering::Acquire) != 0 {
            return Delivery::Masked;
        }
        let fd = self.intx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match fd {
            Some(fd) => {
                write_eventfd(&fd);
                if let Some(c) = self.counts.first() {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                Delivery::Intx
            }
            None => Delivery::NoEventfd,
        }
    }
}

/// Signals `fd`: 0, or `-errno` of the write.
fn write_eventfd(fd: &OwnedFd) -> i32 {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an fd we own. The fd is a non-blocking eventfd
    // (`adopt_eventfd`): a failure (EAGAIN when the counter saturates) loses nothing because
    // the eventfd is already signalled.
    let written = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    if written < 0 {
        -std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
    } else {
        0
    }
}

impl InterruptSink for EventfdInterrupts {
    fn trigger(&self, vector: u16, _cause: u32) -> Delivery {
        if self.suppressed {
            return Delivery::Suppressed;
        }
        match self.target(vector) {
            Target::Msix(fd) => self.write_msix(vector, fd),
            Target::Intx => self.signal_intx(),
        }
    }
}

/// The interrupt cause block of BAR0, with the interrupt moderation of its vectors.
pub struct InterruptBlock {
    rawstat: AtomicU32,
    mask: AtomicU32,
    vectors: u16,
    sink: Arc<dyn InterruptSink>,
    /// `--irq-moderation-us`: the interval after a reset.
    default_moderation_us: u32,
    throttle: Mutex<Throttle>,
    /// Wakes the moderation thread when a raise is held or the interval changes.
    held: Condvar,
    /// Bumped (under `throttle`) at each held raise and interval change: the moderation thread
    /// sleeps only while it is unchanged since it decided.
    changes: AtomicU64,
    /// The moderation thread runs ([`Self::start_moderation`]); until then nothing is held.
    moderating: AtomicBool,
    /// The moderation thread is asked to end (set under `throttle`, see [`ModerationThread`]).
    stopping: AtomicBool,
    epoch: Instant,
    /// The input recorder, if the device records: each raise's look at the mask and each read
    /// and change of `INT_RAWSTAT` and `INT_MASK` by a register access or a reset (a ticket).
    pub recording: RecordSlot,
}

/// What a raise found when it looked at the mask and the moderation interval.
enum Raise {
    /// The cause is masked: pending in `INT_RAWSTAT` only.
    Masked,
    /// Held until the vector's moderation interval ends.
    Held,
    /// Delivered now.
    Now,
}

/// The running moderation thread of an [`InterruptBlock`]: dropping it ends the thread and
/// waits for it, so no thread (nor the tracer it holds) outlives the device that started it.
pub struct ModerationThread {
    block: Weak<InterruptBlock>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ModerationThread {
    fn drop(&mut self) {
        if let Some(b) = self.block.upgrade() {
            // Set under the lock the thread holds while it checks the flag and starts to wait: it
            // either sees the flag or is already waiting when the notification comes.
            let guard = b.throttle();
            b.stopping.store(true, Ordering::Release);
            drop(guard);
            b.held.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl InterruptBlock {
    /// A block delivering through `sink` with `vectors` MSI-X vectors, unmoderated until
    /// [`Self::start_moderation`].
    pub fn new(sink: Arc<dyn InterruptSink>, vectors: u16) -> Self {
        Self::moderated(sink, vectors, 0)
    }

    /// A block whose record causes are moderated at `us` microseconds after each reset, once
    /// [`Self::start_moderation`] started its thread.
    pub fn moderated(sink: Arc<dyn InterruptSink>, vectors: u16, us: u32) -> Self {
        InterruptBlock {
            rawstat: AtomicU32::new(0),
            mask: AtomicU32::new(0),
            vectors,
            sink,
            default_moderation_us: us,
            throttle: Mutex::new(Throttle::new(vectors, us)),
            held: Condvar::new(),
            changes: AtomicU64::new(0),
            moderating: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            epoch: Instant::now(),
            recording: RecordSlot::default(),
        }
    }

    /// Starts the thread that raises held vectors when their interval ends (named
    /// `<name>-irqmod`); it ends when the returned handle is dropped (or the block is).
    pub fn start_moderation(self: &Arc<Self>, tracer: Arc<Tracer>, name: &str) -> std::io::Result<ModerationThread> {
        let weak = Arc::downgrade(self);
        let thread = std::thread::Builder::new()
            .name(format!("{name}-irqmod"))
            .spawn(move || moderation_thread(&weak, &tracer))?;
        self.moderating.store(true, Ordering::Release);
        Ok(ModerationThread { block: Arc::downgrade(self), thread: Some(thread) })
    }

    /// Nanoseconds since the block was made, as an input of the input log (a `clock`
    /// record), and whether the value is the log's (a replay before the log's end).
    fn now_ns(&self) -> (u64, bool) {
        let ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        match self.recording.clock(ns) {
            Some(recorded) => (recorded, true),
            None => (ns, false),
        }
    }

    /// Sleeps (the moderation thread) for at most `timeout` while [`Self::changes`] is still
    /// `seen` and no stop is asked; whether it still is (a timeout, not a change).
    fn sleep_unless_changed(&self, timeout: Duration, seen: u64) -> bool {
        let unchanged =
            |_: &mut Throttle| self.changes.load(Ordering::Acquire) == seen && !self.stopping.load(Ordering::Acquire);
        let (mut t, _) =
            self.held.wait_timeout_while(self.throttle(), timeout, unchanged).unwrap_or_else(|e| e.into_inner());
        unchanged(&mut t)
    }

    /// Bumps [`Self::changes`] (the caller holds `throttle`) and wakes the moderation thread.
    fn throttle_changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.held.notify_all();
    }

    fn throttle(&self) -> std::sync::MutexGuard<'_, Throttle> {
        self.throttle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `IRQ_MODERATION`: the interval in microseconds.
    pub fn moderation_us(&self) -> u32 {
        self.recording.ordered(ticket, || self.throttle().interval_us())
    }

    /// A write of `IRQ_MODERATION` (clamped to `MAX_IRQ_MODERATION_US`).
    pub fn set_moderation_us(&self, us: u32) {
        self.recording.ordered(ticket, || {
            let mut t = self.throttle();
            t.set_interval_us(us.min(belfry_abi::regs::MAX_IRQ_MODERATION_US));
            self.throttle_changed();
        });
    }

    /// `IRQ_MODERATED`: raises held back since reset.
    pub fn moderated_count(&self) -> u32 {
        self.recording.ordered(ticket, || self.throttle().held)
    }

    /// `INT_RAWSTAT` as a register read finds it.
    pub fn rawstat(&self) -> u32 {
        self.recording.ordered(ticket, || self.rawstat.load(Ordering::Acquire))
    }

    /// `INT_MASK` as a register read finds it.
    pub fn mask(&self) -> u32 {
        self.recording.ordered(ticket, || self.mask.load(Ordering::Acquire))
    }

    /// `INT_STATUS` as a register read finds it.
    pub fn status(&self) -> u32 {
        self.recording.ordered(ticket, || self.rawstat.load(Ordering::Acquire) & self.mask.load(Ordering::Acquire))
    }

    /// A write of `INT_CLEAR`.
    pub fn clear(&self, bits: u32) {
        self.recording.ordered(ticket, || self.rawstat.fetch_and(!bits, Ordering::AcqRel));
    }

    /// A write of `INT_MASK`: causes pending and newly enabled are delivered now.
    pub fn set_mask(&self, mask: u32, tracer: &Tracer) {
        let newly = self.recording.ordered(ticket, || {
            let old = self.mask.swap(mask & irq::cause::ALL, Ordering::AcqRel);
            mask & !old & self.rawstat.load(Ordering::Acquire)
        });
        for bit in (0..32).map(|b| 1u32 << b).filter(|b| newly & b != 0) {
            self.deliver(bit, irq::vector_for(bit, self.vectors), tracer);
        }
    }

    /// Raises `cause` on its default vector, or on `vector` when given. A record cause raised
    /// sooner than the moderation interval after the vector's last interrupt is held
    /// (traced as `moderated`) and goes out when the interval ends.
    pub fn raise(&self, cause: u32, vector: Option<u16>, tracer: &Tracer) {
        let vector = vector.unwrap_or_else(|| irq::vector_for(cause, self.vectors));
        // Read before the ticket: an input is its own record.
        let now = self.moderating.load(Ordering::Acquire).then(|| self.now_ns().0);
        let raise = self.recording.ordered(ticket, || {
            self.rawstat.fetch_or(cause, Ordering::AcqRel);
            if self.mask.load(Ordering::Acquire) & cause == 0 {
                return Raise::Masked;
            }
            if let Some(now) = now {
                let mut t = self.throttle();
                if let Admit::Held(_) = t.admit(vector, cause, now) {
                    self.throttle_changed();
                    return Raise::Held;
                }
            }
            Raise::Now
        });
        match raise {
            Raise::Masked => tracer.emit(Event::Interrupt { vector, cause, delivery: Delivery::Masked }),
            Raise::Held => {
                tracer.emit(Event::Interrupt { vector, cause, delivery: Delivery::Moderated });
            }
            Raise::Now => self.deliver(cause, vector, tracer),
        }
    }

    fn deliver(&self, cause: u32, vector: u16, tracer: &Tracer) {
        let delivery = self.sink.trigger(vector, cause);
        if !matches!(delivery, Delivery::Msix | Delivery::Intx) {
            log::warn!("interrupt cause {cause:#x} on vector {vector} not delivered: {delivery}");
        }
        tracer.emit(Event::Interrupt { vector, cause, delivery });
    }

    /// Power-on state: nothing pending, everything masked, the moderation interval back to
    /// the device's default.
    pub fn reset(&self) {
        self.recording.ordered(ticket, || {
            self.rawstat.store(0, Ordering::Release);
            self.mask.store(0, Ordering::Release);
            self.throttle().reset(self.default_moderation_us);
        });
    }
}

/// The moderation thread: sleeps until the earliest held vector is due, then raises it with
/// the causes held (those still enabled; a masked one stays in `INT_RAWSTAT` for `INT_MASK`).
///
/// Whether it passes (reads the clock and decides) follows from what the log orders: after a
/// pass that left a raise held it passes again (once the raise is due, or at once when a
/// change calls for it); after one that left nothing held it waits for a change (a held raise
/// or an interval write, counted in `changes`, which only grows), so an idle device's thread
/// records nothing. Each pass's clock is an input and its decision a ticket, so a replay takes
/// the recorded passes' decisions in the log's order; it does not sleep after a pass whose
/// clock came from the log (the log paces it).
fn moderation_thread(block: &Weak<InterruptBlock>, tracer: &Tracer) {
    /// How often an idle thread checks that its block still exists.
    const IDLE: Duration = Duration::from_millis(100);
    let mut seen = 0;
    let mut holding = false;
    loop {
        let Some(b) = block.upgrade() else { return };
        if !holding && b.sleep_unless_changed(IDLE, seen) {
            continue;
        }
        if b.stopping.load(Ordering::Acquire) {
            return;
        }
        let (now, replayed) = b.now_ns();
        let (due, wait) = b.recording.ordered(ticket, || {
            let mut t = b.throttle();
            seen = b.changes.load(Ordering::Acquire);
            let mask = b.mask.load(Ordering::Acquire);
            let due: Vec<(u16, u32)> =
                t.take_due(now).into_iter().map(|(vector, causes)| (vector, causes & mask)).collect();
            let wait = t.next_due().map(|d| Duration::from_nanos(d.saturating_sub(now)).min(IDLE));
            (due, wait)
        });
        holding = wait.is_some();
        if let (true, Some(wait), false) = (due.is_empty(), wait, replayed) {
            // Until the held vector is due, or a change calls for an earlier pass.
            b.sleep_unless_changed(wait, seen);
        }
        for (vector, enabled) in due {
            if enabled != 0 {
                b.deliver(enabled, vector, tracer);
            }
        }
    }
}

/// An interrupt sink for unit tests: records every `(vector, cause)` it is asked to deliver.
#[cfg(test)]
#[derive(Default)]
pub struct RecordingSink(pub Mutex<Vec<(u16, u32)>>);

#[cfg(test)]
impl RecordingSink {
    /// The causes delivered so far, in order.
    pub fn causes(&self) -> Vec<u32> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|&(_, c)| c).collect()
    }
}

#[cfg(test)]
impl InterruptSink for RecordingSink {
    fn trigger(&self, vector: u16, cause: u32) -> Delivery {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push((vector, cause));
        Delivery::Msix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Recorder = RecordingSink;

    #[test]
    fn masked_causes_wait_until_unmasked() {
        let rec = Arc::new(Recorder::default());
        let block = InterruptBlock::new(rec.clone(), 4);
        let t = Tracer::new("t");
        block.raise(irq::cause::FAULT, None, &t);
        assert!(rec.0.lock().unwrap().is_empty());
        assert_eq!(block.rawstat(), irq::cause::FAULT);
        assert_eq!(block.status(), 0);
        block.set_mask(irq::cause::ALL, &t);
        assert_eq!(*rec.0.lock().unwrap(), vec![(irq::VECTOR_FAULT, irq::cause::FAULT)]);
        block.clear(irq::cause::FAULT);
        assert_eq!(block.status(), 0);
        block.raise(irq::cause::MAILBOX, Some(2), &t);
        assert_eq!(rec.0.lock().unwrap().last(), Some(&(2, irq::cause::MAILBOX)));
    }

    #[test]
    fn set_irqs_validates_and_counts() {
        let irqs = EventfdInterrupts::new(4, true, false);
        let efd = vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK).unwrap();
        // SAFETY: dup returns a fresh descriptor (checked) that only `owned` will own.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(libc::dup(efd.as_raw_fd())) };
        let set = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        assert!(matches!(
            irqs.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 3, 2, &[], vec![]),
            Err(SetIrqsError::Range { .. })
        ));
        assert!(matches!(irqs.set_irqs(VFIO_PCI_MSI_IRQ_INDEX, set, 0, 1, &[], vec![]), Err(SetIrqsError::Index(1))));
        assert!(matches!(irqs.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, 0, 0, 1, &[], vec![]), Err(SetIrqsError::Flags(0))));
        irqs.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 1, 1, &[], vec![owned]).unwrap();
        assert_eq!(irqs.trigger(1, irq::cause::MAILBOX), Delivery::Msix);
        assert_eq!(irqs.trigger(0, irq::cause::MAILBOX), Delivery::NoEventfd);
        assert_eq!(efd.read().unwrap(), 1);
        assert_eq!(irqs.count(1), 1);
        let loopback = VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_TRIGGER;
        irqs.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, loopback, 1, 1, &[1], vec![]).unwrap();
        assert_eq!(irqs.count(1), 2);
        let disable = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
        irqs.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, disable, 0, 0, &[], vec![]).unwrap();
        assert_eq!(irqs.trigger(1, irq::cause::MAILBOX), Delivery::NoEventfd);
    }

    #[test]
    fn a_raise_storm_is_delivered_once_per_interval_and_the_last_one_is_not_lost() {
        let rec = Arc::new(Recorder::default());
        let block = Arc::new(InterruptBlock::moderated(rec.clone(), 4, 2000));
        let t = Arc::new(Tracer::new("t"));
        let _thread = block.start_moderation(t.clone(), "t").unwrap();
        block.set_mask(irq::cause::ALL, &t);
        let start = Instant::now();
        let mut raises = 0u32;
        while start.elapsed() < Duration::from_millis(50) {
            block.raise(irq::cause::NATIVE_FENCE, None, &t);
            raises += 1;
            std::thread::sleep(Duration::from_micros(20));
        }
        let elapsed = start.elapsed();
        // The held raises go out when the last interval ends.
        std::thread::sleep(Duration::from_millis(30));
        let delivered = rec.causes().len() as u128;
        let allowed = elapsed.as_micros() / 2000 + 2;
        assert!(delivered <= allowed, "{delivered} interrupts for {raises} raises in {elapsed:?}: at most {allowed}");
        assert!(delivered >= 2, "the held raises were delivered at the interval's end: {delivered}");
        let held = u128::from(block.moderated_count());
        assert!(
            held + delivered >= u128::from(raises),
            "every raise delivered or held: {held} + {delivered} < {raises}"
        );
        // A mailbox completion is never held; IRQ_MODERATION 0 turns moderation off.
        let before = rec.causes().len();
        block.raise(irq::cause::MAILBOX, None, &t);
        block.set_moderation_us(0);
        block.raise(irq::cause::NATIVE_FENCE, None, &t);
        block.raise(irq::cause::NATIVE_FENCE, None, &t);
        assert_eq!(rec.causes().len(), before + 3);
        block.reset();
        assert_eq!(block.moderation_us(), 2000, "a reset restores the device's interval");
    }

    #[test]
    fn a_function_without_an_interrupt_pin_offers_and_takes_no_intx() {
        let set = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        let efd = || {
            let e = vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK).unwrap();
            // SAFETY: dup returns a fresh descriptor (checked) that only the OwnedFd will own.
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(libc::dup(e.as_raw_fd())) }
        };
        let msix_only = EventfdInterrupts::new(4, false, false);
        assert_eq!(msix_only.vector_count(VFIO_PCI_INTX_IRQ_INDEX), 0);
        assert!(matches!(
            msix_only.set_irqs(VFIO_PCI_INTX_IRQ_INDEX, set, 0, 1, &[], vec![efd()]),
            Err(SetIrqsError::Index(VFIO_PCI_INTX_IRQ_INDEX))
        ));
        let with_pin = EventfdInterrupts::new(4, true, false);
        assert_eq!(with_pin.vector_count(VFIO_PCI_INTX_IRQ_INDEX), 1);
        with_pin.set_irqs(VFIO_PCI_INTX_IRQ_INDEX, set, 0, 1, &[], vec![efd()]).unwrap();
    }

    #[test]
    fn suppressed_sink_delivers_nothing() {
        let irqs = EventfdInterrupts::new(1, true, true);
        assert_eq!(irqs.trigger(0, irq::cause::MAILBOX), Delivery::Suppressed);
        assert_eq!(irqs.count(0), 0);
    }
}

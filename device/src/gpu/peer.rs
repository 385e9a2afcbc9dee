//! Peer signals (`--peer-signals`, `CAPS.peer_signals`, XAD-15): the device side of
//! [`belfry_abi::peer`].
//!
//! - `SET_PEER_SIGNALS` ([`set_pages`]) gives the device its own peer-signal page and the other
//!   peer-capable devices' pages.
//! - An engine's `FENCE_SIGNAL` of a fence registered cross-adapter produces a payload (the
//!   fence's CurrentValue bus address and the value) into every peer's page ([`announce`]),
//!   after storing CurrentValue.
//! - The producer then wakes the page's consumer ([`wake`]: a futex on the page's claim word,
//!   which every device process maps).
//! - The poller thread ([`Poller`]) consumes the device's own page and sleeps on its claim word
//!   until a producer wakes it (at most [`IDLE_WAIT`]; on [`Gpu::changed`] while the device
//!   has no page or is in D3hot), so a payload is consumed as soon as it is written, and a
//!   device nobody signals costs nothing. A payload naming a fence registered cross-adapter
//!   here marks it
//!   ([`Fence::peer_named`](super::objects::Fence::peer_named)) and wakes the engines without
//!   moving the epoch: their next pick re-reads only the waits on the fences named
//!   (`engine::is_ready`). An overflow moves the epoch instead, so every parked cross-adapter
//!   wait is re-read, as a `NOTIFY_FENCE_CHANGED` would.
//!
//! The pages are guest RAM, which every device process maps, so a payload is a DMA write into
//! guest memory; the producers' claim is an atomic fetch-add on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use belfry_abi::mailbox::{PeerSignalsArgs, Status, MAX_PEER_PAGES};
use belfry_abi::mmu;
use belfry_abi::peer::{self, Consumed, Payload, PeerPage};
use vm_memory::{GuestAddress, GuestMemory, Permissions, VolatileMemory};

use super::objects::{Objects, PeerPages};
use super::shared::Gpu;
use crate::mmu::Phys;

mod wake;

pub use wake::Woke;

/// How soon the poller looks again at a slot claimed but not yet written.
pub const PEER_POLL: Duration = Duration::from_micros(25);
/// How long a claimed slot may stay unwritten before the consumer gives up on it.
const PENDING_LIMIT: Duration = Duration::from_millis(1);
/// The longest sleep on the page's claim word without a wake-up (a fallback: a producer's
/// wake-up, a new `SET_PEER_SIGNALS` and the GPU's kill end it at once).
pub const IDLE_WAIT: Duration = Duration::from_millis(50);
/// How long the poller sleeps on [`Gpu::changed`] while the device has no page or is in D3hot.
const IDLE_POLL: Duration = Duration::from_millis(50);

/// A peer-signal page in guest memory at `base`.
struct GuestPage<'a, M: GuestMemory> {
    mem: &'a M,
    base: u64,
}

impl<M: GuestMemory> GuestPage<'_, M> {
    /// Runs `f` on the u64 at `offset` as an atomic (`None` outside guest memory).
    fn with<R>(&self, offset: u64, f: impl FnOnce(&AtomicU64) -> R) -> Option<R> {
        let slice =
            self.mem.get_slices(GuestAddress(self.base + offset), 8, Permissions::ReadWrite).ok()?.next()?.ok()?;
        slice.get_atomic_ref::<AtomicU64>(0).ok().map(f)
    }
}

impl<M: GuestMemory> PeerPage for GuestPage<'_, M> {
    fn claim(&self) -> u64 {
        self.with(peer::CLAIM_OFFSET, |a| a.fetch_add(1, Ordering::SeqCst)).unwrap_or(0)
    }
    fn load(&self, offset: u64) -> u64 {
        self.with(offset, |a| a.load(Ordering::Acquire)).unwrap_or(0)
    }
    fn store(&self, offset: u64, value: u64) {
        self.with(offset, |a| a.store(value, Ordering::Release));
    }
    fn take_overflow(&self) -> u64 {
        self.with(peer::OVERFLOW_OFFSET, |a| a.swap(0, Ordering::SeqCst)).unwrap_or(0)
    }
    fn wake(&self) {
        self.word(wake::wake);
    }
}

impl<M: GuestMemory> GuestPage<'_, M> {
    /// Runs `f` on the claim index as an atomic, without recording a read (the futex calls
    /// only key its address; `None` outside guest memory).
    fn word<R>(&self, f: impl FnOnce(&AtomicU64) -> R) -> Option<R> {
        let slice = self
            .mem
            .get_slices(GuestAddress(self.base + peer::CLAIM_OFFSET), 8, Permissions::Write)
            .ok()?
            .next()?
            .ok()?;
        slice.get_atomic_ref::<AtomicU64>(0).ok().map(f)
    }
}

/// Wakes the consumer of the device's own page, if it has one (a new page, the GPU's kill).
pub fn wake_consumer(gpu: &Gpu) {
    let own = gpu.peer_pages.read().unwrap_or_else(|e| e.into_inner()).own;
    if let Some(base) = own {
        let guard = gpu.ports.ram.memory();
        GuestPage { mem: &guard, base }.wake();
    }
}

/// `SET_PEER_SIGNALS`: page-aligned pages in guest RAM, the own page not among the peers.
pub fn set_pages<M: GuestMemory>(gpu: &Gpu, mem: &M, a: PeerSignalsArgs) -> Result<(), (Status, String)> {
    let bad = |why: String| Err((Status::BadArgument, why));
    if !gpu.ports.regs.caps().peer_signals() {
        return bad("this device has no peer signals (--peer-signals)".into());
    }
    let count = usize::try_from(a.peer_count).unwrap_or(usize::MAX);
    if count > MAX_PEER_PAGES || a.reserved != 0 {
        return bad(format!("{} peer pages (at most {MAX_PEER_PAGES}), reserved {:#x}", a.peer_count, a.reserved));
    }
    let peers = &a.peers[..count];
    let in_ram = |page: u64| {
        page.is_multiple_of(mmu::PAGE_SIZE)
            && usize::try_from(peer::PAGE_BYTES)
                .is_ok_and(|len| mem.check_range(GuestAddress(page), len, Permissions::ReadWrite))
    };
    if a.own_page == 0 {
        wake_consumer(gpu);
        *gpu.peer_pages.write().unwrap_or_else(|e| e.into_inner()) = PeerPages::default();
        return Ok(());
    }
    if let Some(&p) = std::iter::once(&a.own_page).chain(peers).find(|&&p| !in_ram(p)) {
        return Err((Status::BadAddress, format!("peer-signal page {p:#x} is not a page of guest RAM")));
    }
    if peers.contains(&a.own_page) {
        return bad(format!("the own page {:#x} is among the peers", a.own_page));
    }
    wake_consumer(gpu);
    *gpu.peer_pages.write().unwrap_or_else(|e| e.into_inner()) =
        PeerPages { own: Some(a.own_page), peers: peers.to_vec() };
    gpu.changed.notify_all();
    Ok(())
}

/// An engine signalled the cross-adapter fence whose CurrentValue is at `current` to `value`
/// (CurrentValue already stored): the payload goes into every peer's page, and each page's
/// consumer is woken.
pub fn announce<M: GuestMemory>(gpu: &Gpu, mem: &M, current: Phys, value: u64) {
    let Phys::Guest(address) = current else { return };
    let pages = gpu.peer_pages.read().unwrap_or_else(|e| e.into_inner());
    for &base in &pages.peers {
        peer::produce(&GuestPage { mem, base }, Payload { address, value });
    }
}

/// The consumer's state between passes.
#[derive(Debug, Default)]
pub struct Consumer {
    pending_since: Option<Instant>,
    /// The claim index the last pass left the page empty at (the consumer may sleep until it
    /// moves); `None`: a claimed slot was not written yet, or the pass stopped early.
    empty_at: Option<u64>,
}

impl Consumer {
    /// One pass over the device's own page: marks the fences the payloads name and wakes the
    /// engines (an overflow: every parked cross-adapter wait); how many payloads named a fence
    /// registered cross-adapter here.
    pub fn drain(&mut self, gpu: &Gpu) -> usize {
        let pages = gpu.peer_pages.read().unwrap_or_else(|e| e.into_inner());
        let Some(base) = pages.own else { return 0 };
        let guard = gpu.ports.ram.memory();
        let page = GuestPage { mem: &guard, base };
        let mut payloads = Vec::new();
        let mut overflow = false;
        self.empty_at = None;
        for _ in 0..=peer::SLOTS {
            let give_up = self.pending_since.is_some_and(|t| t.elapsed() >= PENDING_LIMIT);
            match peer::consume(&page, give_up) {
                Consumed::Empty => {
                    // The claim index `consume` found equal to this.
                    self.empty_at = Some(page.load(peer::CONSUMED_OFFSET));
                    break;
                }
                Consumed::Pending => {
                    self.pending_since.get_or_insert_with(Instant::now);
                    break;
                }
                Consumed::Payload(p) => {
                    self.pending_since = None;
                    payloads.push(p);
                }
                Consumed::Overflow => {
                    self.pending_since = None;
                    overflow = true;
                }
            }
        }
        drop(guard);
        drop(pages);
        if payloads.is_empty() && !overflow {
            return 0;
        }
        let mut o = gpu.lock();
        let named = payloads.iter().filter(|p| mark(&mut o, p.address)).count();
        if overflow {
            drop(o);
            gpu.notify();
        } else if named > 0 {
            gpu.wake_engines(o);
        }
        named
    }

    /// Sleeps until the own page may hold something new: on its claim word while the last
    /// pass left it empty (at most [`IDLE_WAIT`]), [`PEER_POLL`] while a claimed slot is not
    /// written yet (its producer's wake-up may have come before this sleep).
    pub fn rest(&self, gpu: &Gpu) {
        self.rest_at_most(gpu, IDLE_WAIT);
    }

    /// [`rest`](Self::rest) with the sleep on the claim word bounded by `timeout`; why that
    /// sleep ended (`None`: there was none).
    pub fn rest_at_most(&self, gpu: &Gpu, timeout: Duration) -> Option<Woke> {
        let Some(claimed) = self.empty_at else {
            std::thread::sleep(PEER_POLL);
            return None;
        };
        let own = gpu.peer_pages.read().unwrap_or_else(|e| e.into_inner()).own;
        // The address only: no snapshot of guest memory is held while asleep (`wake.rs`).
        let address = GuestPage { mem: &gpu.ports.ram.memory(), base: own? }.word(wake::word)?;
        Some(wake::sleep(address, claimed, timeout))
    }
}

/// Marks the cross-adapter fence whose CurrentValue is at `address` as named by a peer signal.
fn mark(o: &mut Objects, address: u64) -> bool {
    let Some(&handle) = o.fence_at.get(&Phys::Guest(address)) else { return false };
    let seq = o.peer_seq + 1;
    match o.fences.get_mut(&handle) {
        Some(f) if f.cross_adapter => {
            f.peer_named = seq;
            o.peer_seq = seq;
            true
        }
        _ => false,
    }
}

/// The poller thread of a device with peer signals.
pub struct Poller {
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    /// Starts the poller of `gpu` (stops with the GPU's `kill`).
    pub fn start(gpu: Arc<Gpu>) -> std::io::Result<Self> {
        let name = format!("{}-peer", gpu.ports.config.name);
        let thread = std::thread::Builder::new().name(name).spawn(move || run(&gpu))?;
        Ok(Poller { thread: Some(thread) })
    }

    /// Waits for the thread (after the GPU's `kill`).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(gpu: &Gpu) {
    let mut consumer = Consumer::default();
    // A replay orders the threads by the log: the turn is the wait, not a wake-up.
    let replay = gpu.ports.recording.is_replay();
    let mut objects = gpu.lock();
    loop {
        if objects.kill {
            return;
        }
        let configured = gpu.peer_pages.read().is_ok_and(|p| p.own.is_some());
        if !configured || objects.d3 {
            objects = gpu.wait_timeout(objects, IDLE_POLL);
            continue;
        }
        drop(objects);
        consumer.drain(gpu);
        if !replay {
            consumer.rest(gpu);
        }
        objects = gpu.lock();
    }
}

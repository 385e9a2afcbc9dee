//! Doorbell rings against the mailbox commands that move doorbells, in the interleavings a
//! loaded host produces: the device is served in-process on a socket pair, its engines run, and
//! the test steps its command processor (`gpu::cmp::handle`), running each mailbox command as soon as
//! it is submitted but handling a doorbell wake-up only when the test says. That makes
//! deterministic the order in which epoll can report the wake-ups of a busy command processor:
//! a mailbox wake-up before the wake-up of a ring the socket thread recorded earlier.
//!
//! Each test's doc names the rule ids of docs/RULES.md it proves (`proves:`);
//! `ci/rules` lists them.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use belfry_abi::cmdring::{self, Entry};
use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_abi::ids::QueueId;
use belfry_abi::mailbox::{self, Opcode, Status};
use belfry_abi::{pci, regs};
use belfry_device::config::DeviceConfig;
use belfry_device::device::Device;
use belfry_device::gpu::cmp::{self, Token};
use belfry_device::gpu::engine::{Engines, INLINE_PACKETS};
use belfry_device::gpu::state::QueueState;
use belfry_device::gpu::Gpu as DeviceGpu;
use belfry_device::trace::Tracer;
use belfry_device::vfio_user::server::serve_connection;
use common::gpu::*;
use common::read_u32;
use common::RawClient;
use std::os::unix::fs::FileExt;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

/// A device served in-process whose command processor the test steps.
struct Stepped {
    device: Arc<Device>,
    engines: Option<Engines>,
    stop: Arc<AtomicBool>,
    server_end: UnixStream,
    threads: Vec<JoinHandle<()>>,
}

impl Stepped {
    /// Starts a device with `config`; returns it and a client connected to it.
    fn start(config: DeviceConfig) -> (Stepped, RawClient) {
        let (mut dev, client) = Self::start_without_engines(config);
        dev.start_engines();
        (dev, client)
    }

    /// The same with no engine threads until [`Self::start_engines`].
    fn start_without_engines(config: DeviceConfig) -> (Stepped, RawClient) {
        let device = Arc::new(Device::new(config, Arc::new(Tracer::new("belfry0"))).unwrap());
        let (client, server) = UnixStream::pair().unwrap();
        let server_end = server.try_clone().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let serving = device.clone();
        let stepping = device.gpu.clone();
        let stopped = stop.clone();
        let threads = vec![
            std::thread::spawn(move || serve_connection(&serving, server)),
            std::thread::spawn(move || run_mailbox(&stepping, &stopped)),
        ];
        (Stepped { device, engines: None, stop, server_end, threads }, RawClient::over(client))
    }

    /// Starts the engine threads.
    fn start_engines(&mut self) {
        self.engines = Some(Engines::start(self.device.gpu.clone()).unwrap());
    }

    /// The command processor handles the doorbell wake-up now.
    fn wake_doorbells(&self) {
        assert!(cmp::handle(&self.device.gpu, Token::Doorbell));
    }

    /// Waits until queue `id` has no kick pending and no engine runs it (a connect's kick has
    /// been taken and its ring re-read).
    fn wait_quiet(&self, id: u32) {
        let quiet = || {
            let o = self.device.gpu.lock();
            let id = QueueId::new(id);
            !matches!(o.queues[&id].state, QueueState::Ready { .. }) && !o.is_running(id)
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !quiet() {
            assert!(std::time::Instant::now() < deadline, "queue {id} never went quiet");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// The command processor's mailbox half: each command runs once its wake-up arrives.
fn run_mailbox(gpu: &DeviceGpu, stop: &AtomicBool) {
    let epoll = Epoll::new().unwrap();
    let event = EpollEvent::new(EventSet::IN, Token::Mailbox as u64);
    epoll.ctl(ControlOperation::Add, gpu.ports.wake.mailbox.as_raw_fd(), event).unwrap();
    let mut events = [EpollEvent::default(); 1];
    while !stop.load(Ordering::Acquire) {
        if epoll.wait(10, &mut events).unwrap_or(0) > 0 {
            cmp::handle(gpu, Token::Mailbox);
        }
    }
}

impl Drop for Stepped {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.server_end.shutdown(std::net::Shutdown::Both);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(e) = self.engines.take() {
            e.stop();
        }
    }
}

/// Two user-mode queues of one process on a two-doorbell device, the victim connected to
/// physical doorbell 0 and quiet, and a one-page buffer for their writes.
struct Victimization {
    g: Gpu<Stepped>,
    out: u64,
    out_pa: u64,
    victim: QueueRef,
    next: QueueRef,
}

impl Victimization {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// The same on a device with the extra `flags`.
    fn start_with(flags: &[&str]) -> Self {
        let flags = ["--doorbells", "2"].iter().chain(flags);
        let (dev, client) = Stepped::start(DeviceConfig::from_flags(flags).unwrap());
        let mut g = Gpu::attach(dev, client);
        let p = g.process(1, 1);
        let (out, out_pa) = g.buffer(p, 1);
        let mut victim = g.queue(1, p, ENGINE_COMPUTE, 1, true);
        let next = g.queue(2, p, ENGINE_COMPUTE, 1, true);
        assert_eq!(g.connect(&mut victim, 0), Status::Ok);
        g.dev.wait_quiet(victim.id);
        Self { g, out, out_pa, victim, next }
    }

    /// After the doorbells were woken: the victim's write of 0x1111 landed, and the new owner of
    /// doorbell 0 runs its own work (0x2222).
    fn finish(g: &mut Gpu<Stepped>, out: u64, out_pa: u64, victim: &QueueRef, next: &mut QueueRef) {
        g.drain(victim);
        assert_eq!(read_u32(&g.ram, out_pa), 0x1111, "the victim's work");
        g.dev.wait_quiet(next.id);
        g.submit(next, &pk::write32(out + 4, 0x2222));
        g.dev.wake_doorbells();
        g.drain(next);
        assert_eq!(read_u32(&g.ram, out_pa + 4), 0x2222, "the new owner's work");
    }
}

/// proves: VIC-02 — a ring that reached the device before the module disconnected its queue
/// (the library read CONNECTED after ringing, so it never rings again) runs that queue's work;
/// the other queue, connected to the physical doorbell next, runs its own. Trapped doorbells:
/// the socket thread kicked the ring as it came, and the command processor's doorbell wake-up
/// finds nothing.
#[test]
fn a_ring_recorded_before_a_disconnect_runs_the_victims_work() {
    a_ring_before_a_disconnect_runs_the_victims_work(Victimization::start());
}

/// proves: VIC-02 — the same on shared doorbells, where the command processor takes every
/// ring: it handles the ring's wake-up only after the physical doorbell was disconnected and
/// connected to another queue, and the mailbox command's drain kicked the victim first.
#[test]
fn a_ring_recorded_before_a_disconnect_runs_the_victims_work_on_shared_doorbells() {
    a_ring_before_a_disconnect_runs_the_victims_work(Victimization::start_with(&["--doorbell-transport", "shared"]));
}

/// A trapped queue doorbell's ring runs its work with the command processor not woken at all:
/// the socket thread that received the write kicked the queue, and its engine took it from
/// there (the stepped command processor here handles mailbox commands only).
#[test]
fn a_trapped_ring_reaches_its_engine_without_the_command_processor() {
    let Victimization { mut g, out, out_pa, mut victim, .. } = Victimization::start();
    g.submit(&mut victim, &pk::write32(out, 0x1111));
    g.drain(&victim);
    assert_eq!(read_u32(&g.ram, out_pa), 0x1111, "the queue's work");
}

/// A device with no engine thread yet, one process with a one-page buffer and a user-mode
/// queue connected to trapped doorbell 0.
fn no_engine_thread_yet() -> (Gpu<Stepped>, u64, u64, QueueRef) {
    let flags = ["--doorbells", "2"];
    let (dev, client) = Stepped::start_without_engines(DeviceConfig::from_flags(flags).unwrap());
    let mut g = Gpu::attach(dev, client);
    let p = g.process(1, 1);
    let (out, out_pa) = g.buffer(p, 1);
    let mut q = g.queue(1, p, ENGINE_COMPUTE, 1, true);
    assert_eq!(g.connect(&mut q, 0), Status::Ok);
    (g, out, out_pa, q)
}

/// A trapped ring whose engine runs nothing runs the engine's first slice on the socket thread
/// that received the write, at most `INLINE_PACKETS` packets: with no engine thread at all, a
/// one-packet buffer runs; a buffer of twice that many writes stops after its first slice, and
/// the engine's thread, once there, runs the rest.
#[test]
fn a_trapped_ring_to_an_idle_engine_runs_its_first_slice_on_the_socket_thread() {
    let (mut g, out, out_pa, mut q) = no_engine_thread_yet();
    g.submit(&mut q, &pk::write32(out, 0x1111));
    g.drain(&q);
    assert_eq!(read_u32(&g.ram, out_pa), 0x1111, "the ring's one packet ran with no engine thread");
    let writes = 2 * INLINE_PACKETS as u32;
    let packets: Vec<u8> = (0..writes).flat_map(|i| pk::write32(out + 4 + 4 * u64::from(i), i + 1)).collect();
    g.submit(&mut q, &packets);
    let written =
        |g: &Gpu<Stepped>| (0..writes).filter(|&i| read_u32(&g.ram, out_pa + 4 + 4 * u64::from(i)) != 0).count();
    g.wait_for("the first slice's writes", || written(&g) > 0);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let first = written(&g);
    assert!(
        first < INLINE_PACKETS,
        "{first} writes ran on the socket thread, at most {INLINE_PACKETS} packets a slice"
    );
    g.dev.start_engines();
    g.drain(&q);
    assert_eq!(written(&g), writes as usize, "the engine's thread ran the rest");
}

/// The socket thread's slice ends before a packet that moves bulk data (up to 16 MiB each),
/// which the engine's own thread runs: the socket thread is soon back to the client's next
/// message. With no engine thread, a write before a `FILL` lands, the fill and the write after
/// it do not; the engine's thread, once there, runs both.
#[test]
fn the_socket_threads_slice_leaves_bulk_packets_to_the_engine() {
    let (mut g, out, out_pa, mut q) = no_engine_thread_yet();
    let mut packets = pk::write32(out, 0x1111);
    packets.extend(pk::fill(out + 64, 0x5a5a_5a5a, 64));
    packets.extend(pk::write32(out + 4, 0x2222));
    g.submit(&mut q, &packets);
    g.wait_for("the write before the fill", || read_u32(&g.ram, out_pa) == 0x1111);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(read_u32(&g.ram, out_pa + 64), 0, "the fill ran on the socket thread");
    assert_eq!(read_u32(&g.ram, out_pa + 4), 0, "the write after the fill ran on the socket thread");
    g.dev.start_engines();
    g.drain(&q);
    assert_eq!(read_u32(&g.ram, out_pa + 64), 0x5a5a_5a5a, "the engine's thread ran the fill");
    assert_eq!(read_u32(&g.ram, out_pa + 4), 0x2222, "and the write after it");
}

fn a_ring_before_a_disconnect_runs_the_victims_work(v: Victimization) {
    let Victimization { mut g, out, out_pa, mut victim, mut next } = v;
    // The device has the ring; the command processor has not looked at its doorbells yet...
    g.submit(&mut victim, &pk::write32(out, 0x1111));
    // ...when the module victimizes the queue and gives its doorbell to another.
    let mut a = to_bytes(&mailbox::DoorbellArgs { queue: victim.id, doorbell: 0, ..Default::default() });
    g.ok(Opcode::DisconnectDoorbell, &mut a);
    victim.doorbell = None;
    assert_eq!(g.connect(&mut next, 0), Status::Ok);
    g.dev.wake_doorbells();
    Victimization::finish(&mut g, out, out_pa, &victim, &mut next);
}

/// Whether thread `tid` of this process sleeps (state `S` in `/proc/self/task/TID/stat`).
fn sleeping(tid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
}

/// The command ring of a stepped device: entries at `base`, `tail` free-running.
struct CmdRing {
    base: u64,
    tail: u32,
    doorbell: u32,
}

impl CmdRing {
    const SIZE: u32 = 8;

    fn enable(g: &mut Gpu<Stepped>) -> CmdRing {
        let base = g.alloc(1);
        g.c.write32(pci::REGS_BAR, regs::CMD_RING_BASE_LO::OFFSET, base as u32);
        g.c.write32(pci::REGS_BAR, regs::CMD_RING_BASE_HI::OFFSET, (base >> 32) as u32);
        g.c.write32(pci::REGS_BAR, regs::CMD_RING_SIZE::OFFSET, Self::SIZE);
        g.c.write32(pci::REGS_BAR, regs::CMD_RING_CTRL::OFFSET, regs::CMD_RING_CTRL::default().with_enable(true).0);
        let doorbell = regs::CMD_RING_DOORBELL(g.c.read32(pci::REGS_BAR, regs::CMD_RING_DOORBELL::OFFSET)).index();
        CmdRing { base, tail: 0, doorbell }
    }

    /// Writes `opcode`'s block `args` (header filled here) at a fresh page and an entry naming
    /// it; the entry's address.
    fn put<T: Copy>(&mut self, g: &mut Gpu<Stepped>, opcode: Opcode, args: &T) -> u64 {
        let block = g.alloc(1);
        let mut bytes = to_bytes(args);
        let seq = 1000 + self.tail;
        let header = mailbox::MailboxHeader {
            opcode: opcode as u32,
            length: bytes.len() as u32,
            seq: 0,
            status: Status::Pending as u32,
        };
        bytes[..16].copy_from_slice(&to_bytes(&header));
        g.ram.write_all_at(&bytes, block).unwrap();
        let at = cmdring::entry_address(self.base, Self::SIZE, self.tail).unwrap();
        let e = Entry { opcode: opcode as u32, seq, arg: block, status: 0, done_seq: cmdring::NOT_DONE, reserved: 0 };
        g.ram.write_all_at(&to_bytes(&e), at).unwrap();
        self.tail = self.tail.wrapping_add(1);
        at
    }

    /// Stores the tail to the ring's doorbell page.
    fn ring(&self, g: &mut Gpu<Stepped>) {
        g.c.write32(pci::DOORBELL_BAR, pci::doorbell_offset(self.doorbell) as u32, self.tail);
    }

    /// Stores the tail to the ring's doorbell page as a posted write: nothing waits for it.
    fn post(&self, g: &mut Gpu<Stepped>) {
        g.c.post_write32(pci::DOORBELL_BAR, pci::doorbell_offset(self.doorbell) as u32, self.tail);
    }
}

/// The command ring keeps the BAR0 mailbox's ordering against queue doorbells: a
/// queue's ring that reached the device while the command processor was busy in the command
/// ring, before the module queued `DISCONNECT_DOORBELL` and a `CONNECT_DOORBELL` of another
/// queue on the same physical doorbell, runs the victim's work: the socket thread kicks the
/// ring before it reads the command ring's next doorbell write. Deterministic: the test holds
/// the device's object lock while the command processor (its own thread, stepped) has taken the
/// ring's doorbell and waits for that lock at the ring's first entry; only then are the victim's
/// ring and the command ring's second doorbell write posted (as QEMU posts them: the socket
/// thread, its kick waiting for the same lock, answers nothing meanwhile).
#[test]
fn a_ring_recorded_while_the_command_ring_runs_is_kicked_before_the_next_command() {
    let Victimization { mut g, out, out_pa, mut victim, mut next } = Victimization::start();
    let mut ring = CmdRing::enable(&mut g);
    let first =
        ring.put(&mut g, Opcode::SelfTest, &mailbox::SelfTestArgs { vector: 0, cookie: 1, ..Default::default() });
    ring.ring(&mut g);

    let gpu = g.dev.device.gpu.clone();
    let held = gpu.lock();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let stepping = gpu.clone();
    let cmp = std::thread::spawn(move || {
        // `/proc/thread-self` links to `PID/task/TID`.
        let me = std::fs::read_link("/proc/thread-self").unwrap();
        tid_tx.send(me.file_name().unwrap().to_string_lossy().parse::<i32>().unwrap()).unwrap();
        assert!(cmp::handle(&stepping, Token::Doorbell));
    });
    let tid = tid_rx.recv().unwrap();
    // The command processor took the ring's doorbell and now waits for the lock at entry 0.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !sleeping(tid) {
        assert!(std::time::Instant::now() < deadline, "the command processor never blocked in the ring");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // The library rings the victim's doorbell...
    g.enqueue(&mut victim, &pk::write32(out, 0x1111));
    g.c.post_write32(pci::DOORBELL_BAR, pci::doorbell_offset(0) as u32, victim.write_index);
    // ...then the module victimizes the queue and gives its doorbell to another, through the ring.
    let disconnect = mailbox::DoorbellArgs { queue: victim.id, doorbell: 0, ..Default::default() };
    let d_at = ring.put(&mut g, Opcode::DisconnectDoorbell, &disconnect);
    let connect = mailbox::DoorbellArgs { queue: next.id, doorbell: 0, ..Default::default() };
    let c_at = ring.put(&mut g, Opcode::ConnectDoorbell, &connect);
    ring.post(&mut g);
    victim.doorbell = None;
    drop(held);
    cmp.join().unwrap();
    // A read is answered after the posted writes before it: the socket thread has handled both.
    g.c.read32(pci::REGS_BAR, regs::STATUS::OFFSET);
    // The command processor runs the entries the ring's second write added.
    g.dev.wake_doorbells();
    for (at, what) in [(first, "SELF_TEST"), (d_at, "DISCONNECT_DOORBELL"), (c_at, "CONNECT_DOORBELL")] {
        assert_ne!(read_u32(&g.ram, at + cmdring::DONE_SEQ_OFFSET), cmdring::NOT_DONE, "{what} did not complete");
        assert_eq!(read_u32(&g.ram, at + cmdring::STATUS_OFFSET), Status::Ok as u32, "{what}");
    }
    next.doorbell = Some(0);
    // Whatever the command processor left for its next wake-up goes to the doorbells' owners now.
    g.dev.wake_doorbells();
    Victimization::finish(&mut g, out, out_pa, &victim, &mut next);
}

//! A driver-in-a-test for the command processor: guest RAM as a memfd, page tables, address
//! spaces, contexts, queues, rings, command buffers, fences and the interrupt ring, all built
//! byte by byte the way the kernel module will, and programmed through the mailbox.
#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use belfry_abi::fence::{LogEntry, LogHeader, LOG_ENTRIES};
use belfry_abi::irq::{self, InterruptRecord};
use belfry_abi::mailbox::{self, Opcode, Status};
use belfry_abi::mmu;
use belfry_abi::packet::{self, Opcode as P};
use belfry_abi::{pci, regs};
use vfio_bindings::bindings::vfio::{VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_MSIX_IRQ_INDEX};
use vmm_sys_util::eventfd::EventFd;

use super::*;

pub const RAM_SIZE: u64 = 64 << 20;
const MAILBOX_PA: u64 = 0x1000;
const IRQ_RING_PA: u64 = 0x2000;
pub const IRQ_RING_ENTRIES: u32 = 64;
const FIRST_FREE_PA: u64 = 0x10000;
pub const SYSTEM_AS: u32 = 0;

/// Reads a `#[repr(C)]` abi struct of plain integers from bytes.
pub fn from_bytes<T: Copy + Default>(bytes: &[u8]) -> T {
    assert!(bytes.len() >= std::mem::size_of::<T>());
    let mut v = T::default();
    // SAFETY: T is an abi layout of integers only (any bit pattern valid); sizes checked.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut v as *mut T).cast::<u8>(), std::mem::size_of::<T>()) };
    v
}

/// The bytes of a `#[repr(C)]` abi struct.
pub fn to_bytes<T: Copy>(v: &T) -> Vec<u8> {
    let mut out = vec![0u8; std::mem::size_of::<T>()];
    // SAFETY: T is an abi layout without implicit padding; `out` has exactly its size.
    unsafe { std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), out.as_mut_ptr(), out.len()) };
    out
}

/// A process as the driver sees it: an address space and a context.
#[derive(Clone, Copy, Debug)]
pub struct Process {
    pub space: u32,
    pub context: u32,
    pub root: u64,
}

/// A hardware queue and its ring.
#[derive(Clone, Copy, Debug)]
pub struct QueueRef {
    pub id: u32,
    pub process: Process,
    pub ring_pa: u64,
    pub control_pa: u64,
    pub entries: u32,
    pub write_index: u32,
    pub doorbell: Option<u32>,
    pub user_mode: bool,
}

/// A registered native fence, mapped in the system address space and in a process.
#[derive(Clone, Copy, Debug)]
pub struct FenceRef {
    pub handle: u64,
    pub current_pa: u64,
    pub monitored_pa: u64,
    /// CurrentValue's VA in the process the fence was made for.
    pub va: u64,
}

/// Sets or clears bus mastering (with memory decoding) in the PCI command register, as the
/// guest driver's `pci_set_master` does.
pub fn set_bus_master(c: &mut RawClient, on: bool) {
    let command: u16 = if on { 0x6 } else { 0x2 };
    c.region_write(vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX, 4, &command.to_le_bytes()).unwrap();
}

/// `D` holds the device: the `belfry-device` process, or a test's in-process device.
pub struct Gpu<D = DeviceProcess> {
    pub dev: D,
    pub c: RawClient,
    pub ram: File,
    pub vectors: Vec<EventFd>,
    next_pa: u64,
    seq: u32,
    next_va: u64,
    pub system_root: u64,
    record_read: u32,
}

impl Gpu {
    pub fn start(flags: &[&str]) -> Gpu {
        Gpu::on(DeviceProcess::start(flags))
    }

    /// Like [`Gpu::start`], with the device's messages kept ([`DeviceProcess::log_text`]).
    pub fn start_logged(flags: &[&str]) -> Gpu {
        Gpu::on(DeviceProcess::start_logged(flags))
    }

    fn on(dev: DeviceProcess) -> Gpu {
        let c = RawClient::connect(&dev.socket);
        Gpu::attach(dev, c)
    }
}

impl<D> Gpu<D> {
    /// Negotiates over `c`, a client of the device `dev` holds, maps guest RAM, wires the
    /// interrupts, enables the device and points it at its interrupt ring and system address space.
    pub fn attach(dev: D, mut c: RawClient) -> Gpu<D> {
        c.negotiate();
        set_bus_master(&mut c, true);
        let ram = memfd(RAM_SIZE);
        assert!(!c.dma_map(0, RAM_SIZE, &[ram.as_raw_fd()]).is_error());
        let vectors: Vec<EventFd> = (0..irq::VECTOR_COUNT).map(|_| eventfd()).collect();
        let fds: Vec<_> = vectors.iter().map(|e| e.as_raw_fd()).collect();
        let set = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        assert!(!c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, set, 0, fds.len() as u32, &fds).is_error());
        c.write32(pci::REGS_BAR, regs::CONTROL::OFFSET, regs::CONTROL::default().with_enable(true).0);
        c.write32(pci::REGS_BAR, regs::INT_MASK::OFFSET, irq::cause::ALL);
        let mut g = Gpu {
            dev,
            c,
            ram,
            vectors,
            next_pa: FIRST_FREE_PA,
            seq: 0,
            next_va: 0x10_0000,
            system_root: 0,
            record_read: 0,
        };
        let mut ring = to_bytes(&mailbox::SetInterruptRingArgs {
            base_pa: IRQ_RING_PA,
            entries: IRQ_RING_ENTRIES,
            ..Default::default()
        });
        g.ok(Opcode::SetInterruptRing, &mut ring);
        g.system_root = g.alloc(1);
        let mut a =
            to_bytes(&mailbox::CreateAddressSpaceArgs { id: SYSTEM_AS, root_pa: g.system_root, ..Default::default() });
        g.ok(Opcode::CreateAddressSpace, &mut a);
        g
    }

    /// Allocates `pages` zeroed pages of guest RAM.
    pub fn alloc(&mut self, pages: u64) -> u64 {
        let pa = self.next_pa;
        self.next_pa += pages * mmu::PAGE_SIZE;
        assert!(self.next_pa <= RAM_SIZE, "test guest RAM exhausted");
        self.ram.write_all_at(&vec![0u8; (pages * mmu::PAGE_SIZE) as usize], pa).unwrap();
        pa
    }

    pub fn read_u64(&self, pa: u64) -> u64 {
        let mut b = [0u8; 8];
        self.ram.read_exact_at(&mut b, pa).unwrap();
        u64::from_le_bytes(b)
    }

    pub fn write_u64(&self, pa: u64, v: u64) {
        self.ram.write_all_at(&v.to_le_bytes(), pa).unwrap();
    }

    pub fn read_bytes(&self, pa: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.ram.read_exact_at(&mut b, pa).unwrap();
        b
    }

    /// Maps the page at `pa` at `va` in the address space rooted at `root`.
    pub fn map(&mut self, root: u64, va: u64, pa: u64, flags: u64) {
        let mut table = root;
        for level in (1..mmu::LEVELS).rev() {
            let at = table + mmu::table_index(mmu::GpuVa(va), level) * 8;
            let e = self.read_u64(at);
            table = if e & mmu::PTE_PRESENT == 0 {
                let t = self.alloc(1);
                self.write_u64(at, mmu::entry(t, mmu::PTE_PRESENT));
                t
            } else {
                e & mmu::PTE_ADDR_MASK
            };
        }
        let at = table + mmu::table_index(mmu::GpuVa(va), 0) * 8;
        self.write_u64(at, mmu::entry(pa, flags | mmu::PTE_PRESENT));
    }

    /// Writes a mailbox command's block and points the device at it; submitting is the
    /// caller's (`MB_SUBMIT` with the returned value).
    fn prepare_mailbox(&mut self, opcode: Opcode, block: &mut [u8]) -> u32 {
        self.seq += 1;
        let len = block.len() as u32;
        block[0..4].copy_from_slice(&(opcode as u32).to_le_bytes());
        block[4..8].copy_from_slice(&len.to_le_bytes());
        block[8..12].copy_from_slice(&self.seq.to_le_bytes());
        block[12..16].copy_from_slice(&0u32.to_le_bytes());
        self.ram.write_all_at(block, MAILBOX_PA).unwrap();
        self.c.write32(0, regs::MB_ARG_LO::OFFSET, MAILBOX_PA as u32);
        self.c.write32(0, regs::MB_ARG_HI::OFFSET, 0);
        self.seq & 0xffff
    }

    /// Submits a mailbox command with a posted write and waits for nothing: for a command
    /// whose work may end the device before it answers (the connection is not used again).
    pub fn post_mailbox(&mut self, opcode: Opcode, block: &mut [u8]) {
        let submit = self.prepare_mailbox(opcode, block);
        self.c.post_write32(0, regs::MB_SUBMIT::OFFSET, submit);
    }

    /// How many mailbox commands the client has submitted.
    pub fn commands_submitted(&self) -> u32 {
        self.seq
    }

    /// Waits until the mailbox vector has counted an interrupt for every command submitted (its
    /// eventfd read by nothing else before): the device has raised the last one, after its
    /// completion. A client that then leaves cannot race the device's work for that command.
    pub fn wait_for_every_mailbox_interrupt(&self) {
        let commands = u64::from(self.seq);
        let mut raised = 0;
        while raised < commands {
            let more = wait_eventfd(&self.vectors[usize::from(irq::VECTOR_MAILBOX)], Duration::from_secs(10));
            assert!(more > 0, "{raised} mailbox interrupts for {commands} commands: the last one never came");
            raised += more;
        }
    }

    /// Submits a mailbox command and returns at once: the caller watches for its completion.
    pub fn submit_mailbox(&mut self, opcode: Opcode, block: &mut [u8]) {
        let submit = self.prepare_mailbox(opcode, block);
        self.c.write32(0, regs::MB_SUBMIT::OFFSET, submit);
    }

    /// Runs a mailbox command; returns its status (the block is updated in place with results).
    pub fn mailbox(&mut self, opcode: Opcode, block: &mut [u8]) -> Status {
        let submit = self.prepare_mailbox(opcode, block);
        self.c.write32(0, regs::MB_SUBMIT::OFFSET, submit);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = read_u32(&self.ram, MAILBOX_PA + 12);
            if status != Status::Pending as u32 {
                self.ram.read_exact_at(block, MAILBOX_PA).unwrap();
                // Let MB_STATUS settle so the next submit is not dropped as busy.
                while regs::MB_STATUS(self.c.read32(0, regs::MB_STATUS::OFFSET)).busy() {}
                return Status::try_from(status).expect("valid status");
            }
            assert!(Instant::now() < deadline, "mailbox {opcode:?} never completed");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Runs a command that must succeed.
    pub fn ok(&mut self, opcode: Opcode, block: &mut [u8]) {
        let s = self.mailbox(opcode, block);
        assert_eq!(s, Status::Ok, "{opcode:?}");
    }

    /// Creates an address space and a context for a process.
    pub fn process(&mut self, space: u32, context: u32) -> Process {
        let root = self.alloc(1);
        let mut a = to_bytes(&mailbox::CreateAddressSpaceArgs { id: space, root_pa: root, ..Default::default() });
        self.ok(Opcode::CreateAddressSpace, &mut a);
        let mut c = to_bytes(&mailbox::CreateContextArgs { id: context, address_space: space, ..Default::default() });
        self.ok(Opcode::CreateContext, &mut c);
        Process { space, context, root }
    }

    /// Allocates `pages` and maps them at a fresh VA in `p`; returns (va, pa).
    pub fn buffer(&mut self, p: Process, pages: u64) -> (u64, u64) {
        let pa = self.alloc(pages);
        let va = self.next_va;
        self.next_va += (pages + 1) * mmu::PAGE_SIZE;
        for i in 0..pages {
            self.map(p.root, va + i * mmu::PAGE_SIZE, pa + i * mmu::PAGE_SIZE, mmu::PTE_WRITABLE);
        }
        (va, pa)
    }

    /// Creates a queue with a 16-entry ring in `p`.
    pub fn queue(&mut self, id: u32, p: Process, engine: u32, priority: u32, user_mode: bool) -> QueueRef {
        let (ring_va, ring_pa) = self.buffer(p, 1);
        let (control_va, control_pa) = self.buffer(p, 1);
        let flags = if user_mode { mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION } else { 0 };
        let mut a = to_bytes(&mailbox::CreateQueueArgs {
            id,
            context: p.context,
            engine,
            priority,
            flags,
            ring_entries: 16,
            ring_va,
            ring_control_va: control_va,
            ..Default::default()
        });
        self.ok(Opcode::CreateQueue, &mut a);
        QueueRef { id, process: p, ring_pa, control_pa, entries: 16, write_index: 0, doorbell: None, user_mode }
    }

    pub fn connect(&mut self, q: &mut QueueRef, doorbell: u32) -> Status {
        let mut a = to_bytes(&mailbox::DoorbellArgs { queue: q.id, doorbell, ..Default::default() });
        let s = self.mailbox(Opcode::ConnectDoorbell, &mut a);
        if s == Status::Ok {
            q.doorbell = Some(doorbell);
        }
        s
    }

    /// Writes `packets` into a new command buffer, appends it to the ring and publishes the
    /// write index, without telling the device.
    pub fn enqueue(&mut self, q: &mut QueueRef, packets: &[u8]) -> u64 {
        let pages = (packets.len() as u64).div_ceil(mmu::PAGE_SIZE).max(1);
        let (va, pa) = self.buffer(q.process, pages);
        self.ram.write_all_at(packets, pa).unwrap();
        let slot = u64::from(q.write_index % q.entries);
        let entry = belfry_abi::ring::RingEntry { cmdbuf_va: va, size_bytes: packets.len() as u32, flags: 0 };
        self.ram.write_all_at(&to_bytes(&entry), q.ring_pa + slot * 16).unwrap();
        q.write_index = q.write_index.wrapping_add(1);
        self.ram.write_all_at(&q.write_index.to_le_bytes(), q.control_pa).unwrap();
        va
    }

    /// Tells the device about new work: the doorbell for a user-mode queue, KICK_QUEUE otherwise.
    pub fn notify(&mut self, q: &QueueRef) {
        match q.doorbell {
            Some(d) => self.c.write32(pci::DOORBELL_BAR, pci::doorbell_offset(d) as u32, q.write_index),
            None => {
                let mut a = to_bytes(&mailbox::ObjectArgs { id: q.id, ..Default::default() });
                self.ok(Opcode::KickQueue, &mut a);
            }
        }
    }

    pub fn submit(&mut self, q: &mut QueueRef, packets: &[u8]) -> u64 {
        let va = self.enqueue(q, packets);
        self.notify(q);
        va
    }

    /// The device's read index of `q`, from ring control.
    pub fn read_index(&self, q: &QueueRef) -> u32 {
        read_u32(&self.ram, q.control_pa + belfry_abi::ring::READ_INDEX_OFFSET)
    }

    /// Waits until `q` has executed everything submitted.
    pub fn drain(&self, q: &QueueRef) {
        self.wait_for(&format!("queue {} to drain", q.id), || self.read_index(q) == q.write_index);
    }

    pub fn wait_for(&self, what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Registers a native fence whose values live in guest RAM, mapped in the system address
    /// space (CMP) and CurrentValue also in process `p`; MonitoredValue starts at UINT64_MAX.
    pub fn native_fence(&mut self, handle: u64, p: Process) -> FenceRef {
        self.native_fence_flagged(handle, p, 0)
    }

    /// [`native_fence`](Self::native_fence) registered with `REGISTER_*` `flags`
    /// (`REGISTER_CROSS_ADAPTER`: its waits re-read only after the GPU's epoch moved).
    pub fn native_fence_flagged(&mut self, handle: u64, p: Process, flags: u32) -> FenceRef {
        // CurrentValue's page is mapped into the process; MonitoredValue's page only into the
        // system address space, so the process cannot write it.
        let page = self.alloc(2);
        let sys_va = 0x4000_0000 + handle * 0x2000;
        self.map(self.system_root, sys_va, page, mmu::PTE_WRITABLE);
        self.map(self.system_root, sys_va + 0x1000, page + 0x1000, mmu::PTE_WRITABLE);
        let current_pa = page;
        let monitored_pa = page + 0x1000;
        self.write_u64(monitored_pa, u64::MAX);
        let va = self.next_va;
        self.next_va += 2 * mmu::PAGE_SIZE;
        self.map(p.root, va, page, mmu::PTE_WRITABLE);
        let mut a = to_bytes(&mailbox::RegisterFenceArgs {
            handle,
            kind: belfry_abi::fence::FenceKind::Default as u32,
            flags,
            current_value: mailbox::FenceLocation {
                space: mailbox::LOCATION_SYSTEM_VA,
                address: sys_va,
                ..Default::default()
            },
            monitored_value: mailbox::FenceLocation {
                space: mailbox::LOCATION_SYSTEM_VA,
                address: sys_va + 0x1000,
                ..Default::default()
            },
            ..Default::default()
        });
        self.ok(Opcode::RegisterFence, &mut a);
        FenceRef { handle, current_pa, monitored_pa, va }
    }

    /// Maps an existing fence's CurrentValue page into another process.
    pub fn share_fence(&mut self, f: &FenceRef, p: Process) -> u64 {
        let va = self.next_va;
        self.next_va += 2 * mmu::PAGE_SIZE;
        self.map(p.root, va, f.current_pa & !(mmu::PAGE_SIZE - 1), mmu::PTE_WRITABLE);
        va + (f.current_pa & (mmu::PAGE_SIZE - 1))
    }

    /// Sets MonitoredValues through the CMP (batched).
    pub fn update_monitored(&mut self, values: &[(u64, u64)]) -> Status {
        let mut block = to_bytes(&mailbox::FenceValuesArgs { count: values.len() as u32, ..Default::default() });
        for &(handle, value) in values {
            block.extend_from_slice(&to_bytes(&mailbox::FenceValue { handle, value }));
        }
        self.mailbox(Opcode::UpdateMonitoredValues, &mut block)
    }

    /// Sets a queue's log buffer (allocated and mapped in the system address space).
    pub fn log_buffer(&mut self, q: &QueueRef, kind: belfry_abi::fence::LogKind) -> u64 {
        let pa = self.alloc(1);
        let va = 0x8000_0000 + u64::from(q.id) * 0x10000 + kind as u64 * 0x1000;
        self.map(self.system_root, va, pa, mmu::PTE_WRITABLE);
        let mut a = to_bytes(&mailbox::SetLogBufferArgs { queue: q.id, kind: kind as u32, va, ..Default::default() });
        self.ok(Opcode::SetLogBuffer, &mut a);
        pa
    }

    /// Writes `LOG_VERBOSE`, as the module's `VERBOSE_LOG` does.
    pub fn set_log_verbose(&mut self, on: bool) {
        self.c.write32(0, regs::LOG_VERBOSE::OFFSET, regs::LOG_VERBOSE::default().with_enable(on).0);
    }

    pub fn log_header(&self, pa: u64) -> LogHeader {
        from_bytes(&self.read_bytes(pa, 64))
    }

    pub fn log_entry(&self, pa: u64, index: u32) -> LogEntry {
        from_bytes(&self.read_bytes(pa + belfry_abi::fence::log_entry_offset(index), 48))
    }

    /// Interrupt records written since the last call.
    pub fn new_records(&mut self) -> Vec<InterruptRecord> {
        let write = read_u32(&self.ram, IRQ_RING_PA);
        let mut out = Vec::new();
        while self.record_read != write {
            let slot = u64::from(self.record_read % IRQ_RING_ENTRIES);
            out.push(from_bytes(&self.read_bytes(IRQ_RING_PA + irq::RECORDS_OFFSET + slot * 48, 48)));
            self.record_read = self.record_read.wrapping_add(1);
        }
        self.ram.write_all_at(&self.record_read.to_le_bytes(), IRQ_RING_PA + irq::READ_INDEX_OFFSET).unwrap();
        out
    }

    /// The interrupt ring's write index (records the device has written, free-running).
    pub fn record_write_index(&self) -> u32 {
        read_u32(&self.ram, IRQ_RING_PA + irq::WRITE_INDEX_OFFSET)
    }

    /// Ring overflow counter.
    pub fn record_overflows(&self) -> u32 {
        read_u32(&self.ram, IRQ_RING_PA + 8)
    }

    /// Interrupts delivered on `vector` since the last call (non-blocking).
    pub fn interrupts(&self, vector: u16) -> u64 {
        wait_eventfd(&self.vectors[vector as usize], Duration::ZERO)
    }

    pub fn query(&mut self, queue: u32) -> mailbox::QueryQueueArgs {
        let mut a = to_bytes(&mailbox::QueryQueueArgs { id: queue, ..Default::default() });
        self.ok(Opcode::QueryQueue, &mut a);
        from_bytes(&a)
    }

    /// Polls QUERY_QUEUE until `pred` holds.
    pub fn wait_query(&mut self, what: &str, queue: u32, pred: impl Fn(&mailbox::QueryQueueArgs) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = self.query(queue);
            if pred(&st) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {st:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn object(&mut self, opcode: Opcode, id: u32) -> Status {
        let mut a = to_bytes(&mailbox::ObjectArgs { id, ..Default::default() });
        self.mailbox(opcode, &mut a)
    }
}

/// Packet builders.
pub mod pk {
    use super::*;

    fn with_header<T: Copy>(op: P, mut body: T, set: impl FnOnce(&mut T, u32)) -> Vec<u8> {
        let dwords = op.dwords().unwrap() as u16;
        set(&mut body, packet::header(op, dwords));
        to_bytes(&body)
    }

    pub fn nop(dwords: u16) -> Vec<u8> {
        let mut v = packet::header(P::Nop, dwords).to_le_bytes().to_vec();
        v.resize(dwords as usize * 4, 0xee);
        v
    }
    pub fn write32(va: u64, value: u32) -> Vec<u8> {
        with_header(P::WriteData32, packet::WriteData32 { va, value, ..Default::default() }, |p, h| p.header = h)
    }
    pub fn write64(va: u64, value: u64) -> Vec<u8> {
        with_header(P::WriteData64, packet::WriteData64 { va, value, ..Default::default() }, |p, h| p.header = h)
    }
    pub fn timestamp(va: u64) -> Vec<u8> {
        with_header(P::WriteTimestamp, packet::WriteTimestamp { va, ..Default::default() }, |p, h| p.header = h)
    }
    pub fn signal(fence_va: u64, value: u64, log_entry: u32) -> Vec<u8> {
        let p =
            packet::FenceSignal { fence_va, value, log_entry, log_handle: 0xf00d_0000 + value, ..Default::default() };
        with_header(P::FenceSignal, p, |p, h| p.header = h)
    }
    /// A signal logged at `log_entry` under `log_handle` (the fence's own handle, or not).
    pub fn signal_as(fence_va: u64, value: u64, log_entry: u32, log_handle: u64) -> Vec<u8> {
        let p = packet::FenceSignal { fence_va, value, log_entry, log_handle, ..Default::default() };
        with_header(P::FenceSignal, p, |p, h| p.header = h)
    }
    pub fn wait(fence_va: u64, value: u64, log_entry: u32) -> Vec<u8> {
        let p = packet::FenceWait { fence_va, value, log_entry, log_handle: 0xbeef_0000 + value, ..Default::default() };
        with_header(P::FenceWait, p, |p, h| p.header = h)
    }
    /// A wait reserving two entries, `log_entry` for `WAIT_BEGIN` and the next one for
    /// `WAIT_UNBLOCKED` (`packet::FENCE_WAIT_LOG_BEGIN`).
    pub fn wait_verbose(fence_va: u64, value: u64, log_entry: u32) -> Vec<u8> {
        let p = packet::FenceWait { fence_va, value, log_entry, log_handle: 0xbeef_0000 + value, ..Default::default() };
        with_header(P::FenceWait, p, |p, h| p.header = h | packet::FENCE_WAIT_LOG_BEGIN)
    }
    pub fn monitored_signal(fence_va: u64, value: u64) -> Vec<u8> {
        with_header(
            P::MonitoredFenceSignal,
            packet::MonitoredFenceSignal { fence_va, value, ..Default::default() },
            |p, h| p.header = h,
        )
    }
    pub fn notify(token: u64) -> Vec<u8> {
        with_header(P::Notify, packet::Notify { token, ..Default::default() }, |p, h| p.header = h)
    }
    pub fn copy(src_va: u64, dst_va: u64, size: u32) -> Vec<u8> {
        with_header(P::Copy, packet::Copy { src_va, dst_va, size, ..Default::default() }, |p, h| p.header = h)
    }
    pub fn fill(dst_va: u64, value: u32, size: u32) -> Vec<u8> {
        with_header(P::Fill, packet::Fill { dst_va, value, size, ..Default::default() }, |p, h| p.header = h)
    }
    pub fn compute(op: packet::ComputeOp, a_va: u64, b_va: u64, dst_va: u64, count: u32, scalar: u32) -> Vec<u8> {
        let p = packet::Compute { op: op as u32, count, scalar, a_va, b_va, dst_va, ..Default::default() };
        with_header(P::Compute, p, |p, h| p.header = h)
    }
    pub fn jump(va: u64, size_bytes: u32) -> Vec<u8> {
        with_header(P::Jump, packet::Jump { va, size_bytes, ..Default::default() }, |p, h| p.header = h)
    }
}

pub fn log_entries() -> u32 {
    LOG_ENTRIES
}

//! Unit tests of the GPU, run on the test thread against anonymous guest memory
//! (`GuestMemoryMmap`) and a recording interrupt sink — no process, socket or engine thread.
//!
//! A [`Rig`] builds a [`Gpu`] through its ports, writes page tables, creates objects through
//! the mailbox commands, submits command buffers to a queue's ring and runs the engine one
//! slice at a time (`engine::step`).

mod cmp;
mod commands;
mod engine;
mod peer;
mod records;
mod storage;
mod trace;
mod wakeups;
mod xad;

use std::sync::Arc;

use belfry_abi::engine::ENGINE_COMPUTE;
use belfry_abi::ids::{ContextId, EngineId, QueueId};
use belfry_abi::irq;
use belfry_abi::mailbox::{self, MailboxHeader, Opcode, Status};
use belfry_abi::mmu::{self, GpuVa};
use belfry_abi::packet;
use belfry_abi::ring::RingEntry;
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemoryMmap};

use super::ports::{CmpWake, Ports};
use super::state::{ContextState, QueueState};
use super::Gpu;
use crate::config::DeviceConfig;
use crate::dma::GuestRam;
use crate::doorbell::{DoorbellSource, TrappedDoorbells};
use crate::irq::{InterruptBlock, RecordingSink};
use crate::registers::RegisterFile;
use crate::trace::Tracer;
use crate::vram::Vram;
use crate::wire::Wire;

/// Guest RAM size.
const RAM: u64 = 8 << 20;
/// The mailbox argument block.
pub const ARGS: u64 = 0x1000;
/// The interrupt ring (64 entries).
pub const IRQ_RING: u64 = 0x3000;
/// Interrupt ring entries.
pub const IRQ_ENTRIES: u32 = 64;
const SYSTEM_ROOT: u64 = 0x6000;
const PROCESS_ROOT: u64 = 0x7000;
const FIRST_TABLE: u64 = 0x10000;
/// The data pages: `DATA_VA` maps to `DATA_PA` in both address spaces.
pub const DATA_VA: u64 = 0x4000_0000;
/// See [`DATA_VA`].
pub const DATA_PA: u64 = 0x100000;
const DATA_PAGES: u64 = 64;
const RING_VA: u64 = DATA_VA;
const CONTROL_VA: u64 = DATA_VA + 0x1000;
const CMDBUF_VA: u64 = DATA_VA + 0x2000;
/// Free data for tests: VA and PA of page 16 onwards.
pub const FREE_VA: u64 = DATA_VA + 0x10000;
/// See [`FREE_VA`].
pub const FREE_PA: u64 = DATA_PA + 0x10000;
/// How much higher a second rig on the same guest memory ([`Rig::beside`]) lays itself out.
pub const SECOND_RIG_SHIFT: u64 = 4 << 20;
/// A VA past the data pages, free for a test's own mappings.
pub const EXTRA_VA: u64 = DATA_VA + DATA_PAGES * 0x1000;
/// The engine the rig's queues run on.
pub const ENGINE: EngineId = EngineId::new(ENGINE_COMPUTE);
/// The rig's context.
pub const CONTEXT: ContextId = ContextId::new(1);

/// The bytes of an abi layout.
pub fn bytes<T: Copy>(v: T) -> Vec<u8>
where
    Wire<T>: ByteValued,
{
    Wire(v).as_slice().to_vec()
}

/// The mailbox argument block of `op` with `args`, its header filled in.
pub fn block<T: Copy>(op: Opcode, args: T) -> Vec<u8>
where
    Wire<T>: ByteValued,
{
    with_header(op, bytes(args))
}

/// `block` with its mailbox header filled in for `op`.
fn with_header(op: Opcode, mut block: Vec<u8>) -> Vec<u8> {
    let length = u32::try_from(block.len()).unwrap();
    block[..16].copy_from_slice(&bytes(MailboxHeader { opcode: op as u32, length, seq: 1, status: 0 }));
    block
}

/// The packet `p` with its header set.
pub fn pk<T: Copy>(op: packet::Opcode, p: T) -> Vec<u8>
where
    Wire<T>: ByteValued,
{
    let mut b = bytes(p);
    let dwords = u16::try_from(b.len() / 4).unwrap();
    b[..4].copy_from_slice(&packet::header(op, dwords).to_le_bytes());
    b
}

/// A GPU on anonymous memory, its recording sink, and one queue's ring.
pub struct Rig {
    pub gpu: Arc<Gpu>,
    pub sink: Arc<RecordingSink>,
    /// The doorbells behind the GPU's doorbell port (ring them here).
    pub doorbells: Arc<TrappedDoorbells>,
    next_table: u64,
    write_index: u32,
    cmdbuf: u64,
    /// Added to every guest physical address of the rig's own layout (page tables, data,
    /// interrupt ring): 0, or [`SECOND_RIG_SHIFT`] for a second GPU on the same guest memory.
    shift: u64,
}

impl Rig {
    /// A GPU configured by `config`, nothing created.
    pub fn bare(config: DeviceConfig) -> Rig {
        Rig::bare_traced(config, Arc::new(Tracer::new("t")))
    }

    /// [`Rig::bare`] tracing to `tracer`.
    pub fn bare_traced(config: DeviceConfig, tracer: Arc<Tracer>) -> Rig {
        let memory = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), usize::try_from(RAM).unwrap())]).unwrap();
        Rig::bare_on(config, tracer, Arc::new(GuestRam::with_memory(memory)), 0)
    }

    /// A bare GPU on `ram`, its layout shifted by `shift`.
    fn bare_on(config: DeviceConfig, tracer: Arc<Tracer>, ram: Arc<GuestRam>, shift: u64) -> Rig {
        let sink = Arc::new(RecordingSink::default());
        let interrupts = InterruptBlock::new(sink.clone(), config.gpu.msix_vectors);
        interrupts.set_mask(irq::cause::ALL, &tracer);
        let regs = RegisterFile::new(&config);
        regs.write(belfry_abi::regs::CONTROL::OFFSET, 1);
        let doorbells = Arc::new(TrappedDoorbells::new(config.gpu.doorbell_pages()).unwrap());
        let ports = Ports {
            recording: Default::default(),
            config: Arc::new(config),
            ram,
            vram: Arc::new(Vram::new(1 << 20).unwrap()),
            interrupts: Arc::new(interrupts),
            regs: Arc::new(regs),
            doorbells: doorbells.clone(),
            wake: Arc::new(CmpWake::new().unwrap()),
            tracer,
        };
        Rig {
            gpu: Arc::new(Gpu::new(ports)),
            sink,
            doorbells,
            next_table: FIRST_TABLE + shift,
            write_index: 0,
            cmdbuf: CMDBUF_VA,
            shift,
        }
    }

    /// A GPU with the system address space, a process (address space 1, context 1), the
    /// interrupt ring, and kernel-mode queue 1 on the compute engine.
    pub fn new(config: DeviceConfig) -> Rig {
        Rig::new_traced(config, Arc::new(Tracer::new("t")))
    }

    /// [`Rig::new`] tracing to `tracer`.
    pub fn new_traced(config: DeviceConfig, tracer: Arc<Tracer>) -> Rig {
        Rig::populate(Rig::bare_traced(config, tracer))
    }

    /// A second GPU configured by `config` on `first`'s guest memory, set up as [`Rig::new`]
    /// does with its layout [`SECOND_RIG_SHIFT`] higher (its `FREE_VA` is at
    /// `FREE_PA + SECOND_RIG_SHIFT`). Mailbox argument blocks are shared: run commands on
    /// one rig at a time.
    pub fn beside(first: &Rig, config: DeviceConfig) -> Rig {
        let ram = first.gpu.ports.ram.clone();
        Rig::populate(Rig::bare_on(config, Arc::new(Tracer::new("t2")), ram, SECOND_RIG_SHIFT))
    }

    /// The address spaces, context, interrupt ring and queue 1 of [`Rig::new`].
    fn populate(mut rig: Rig) -> Rig {
        let shift = rig.shift;
        for root in [SYSTEM_ROOT + shift, PROCESS_ROOT + shift] {
            for page in 0..DATA_PAGES {
                rig.map(root, DATA_VA + page * 0x1000, DATA_PA + shift + page * 0x1000);
            }
        }
        for (id, root) in [(0, SYSTEM_ROOT + shift), (1, PROCESS_ROOT + shift)] {
            rig.ok(
                Opcode::CreateAddressSpace,
                mailbox::CreateAddressSpaceArgs { id, root_pa: root, ..Default::default() },
            );
        }
        rig.ok(Opcode::CreateContext, mailbox::CreateContextArgs { id: 1, address_space: 1, ..Default::default() });
        rig.ok(
            Opcode::SetInterruptRing,
            mailbox::SetInterruptRingArgs { base_pa: IRQ_RING + shift, entries: IRQ_ENTRIES, ..Default::default() },
        );
        rig.create_queue(1, 0);
        rig
    }

    /// Creates queue `id` (flags `flags`) on the rig's ring.
    pub fn create_queue(&self, id: u32, flags: u32) {
        let args = mailbox::CreateQueueArgs {
            id,
            context: CONTEXT.raw(),
            engine: ENGINE.raw(),
            flags,
            ring_entries: 16,
            ring_va: RING_VA,
            ring_control_va: CONTROL_VA,
            ..Default::default()
        };
        self.ok(Opcode::CreateQueue, args);
    }

    /// Maps the page at `va` to `pa` (writable) in both of the rig's address spaces.
    pub fn map_both(&mut self, va: u64, pa: u64) {
        for root in [SYSTEM_ROOT + self.shift, PROCESS_ROOT + self.shift] {
            self.map(root, va, pa);
        }
    }

    /// Maps the page at `va` to `pa` (writable) in the rig's process address space, replacing
    /// what was mapped there.
    pub fn map_process(&mut self, va: u64, pa: u64) {
        self.map(PROCESS_ROOT + self.shift, va, pa);
    }

    /// Maps the device-memory page at VRAM offset `offset` at `va` (writable) in the rig's
    /// process address space, replacing what was mapped there.
    pub fn map_process_vram(&mut self, va: u64, offset: u64) {
        let root = PROCESS_ROOT + self.shift;
        self.map(root, va, offset);
        let mut table = root;
        for level in (1..mmu::LEVELS).rev() {
            table = self.read_u64(table + mmu::table_index(GpuVa(va), level) * 8) & mmu::PTE_ADDR_MASK;
        }
        let at = table + mmu::table_index(GpuVa(va), 0) * 8;
        let flags = mmu::PTE_PRESENT | mmu::PTE_WRITABLE | mmu::PTE_VRAM;
        self.write(at, &mmu::entry(offset, flags).to_le_bytes());
    }

    /// Maps the page at `va` to `pa` (writable) in the tables rooted at `root`.
    pub fn map(&mut self, root: u64, va: u64, pa: u64) {
        let mut table = root;
        for level in (1..mmu::LEVELS).rev() {
            let at = table + mmu::table_index(GpuVa(va), level) * 8;
            let e = self.read_u64(at);
            table = if e & mmu::PTE_PRESENT == 0 {
                let t = self.next_table;
                self.next_table += 0x1000;
                self.write(at, &mmu::entry(t, mmu::PTE_PRESENT).to_le_bytes());
                t
            } else {
                e & mmu::PTE_ADDR_MASK
            };
        }
        let at = table + mmu::table_index(GpuVa(va), 0) * 8;
        self.write(at, &mmu::entry(pa, mmu::PTE_PRESENT | mmu::PTE_WRITABLE).to_le_bytes());
    }

    /// Writes guest memory.
    pub fn write(&self, pa: u64, data: &[u8]) {
        self.gpu.ports.ram.memory().write_slice(data, GuestAddress(pa)).unwrap();
    }

    /// Reads a u32 of guest memory.
    pub fn read_u32(&self, pa: u64) -> u32 {
        self.gpu.ports.ram.memory().read_obj(GuestAddress(pa)).unwrap()
    }

    /// Reads a u64 of guest memory.
    pub fn read_u64(&self, pa: u64) -> u64 {
        self.gpu.ports.ram.memory().read_obj(GuestAddress(pa)).unwrap()
    }

    /// Runs mailbox command `op` with arguments `args` (header filled in); its result.
    pub fn command<T: Copy>(&self, op: Opcode, args: T) -> Result<(), (Status, String)>
    where
        Wire<T>: ByteValued,
    {
        self.command_bytes(op, bytes(args))
    }

    /// Runs mailbox command `op` with the argument block `block` (header filled in).
    pub fn command_bytes(&self, op: Opcode, block: Vec<u8>) -> Result<(), (Status, String)> {
        let block = with_header(op, block);
        let length = u32::try_from(block.len()).unwrap();
        self.write(ARGS, &block);
        crate::gpu::commands::execute(&self.gpu, &self.gpu.ports.ram.memory(), op, GuestAddress(ARGS), length)
    }

    /// Runs a command that must succeed.
    pub fn ok<T: Copy>(&self, op: Opcode, args: T)
    where
        Wire<T>: ByteValued,
    {
        if let Err(e) = self.command(op, args) {
            panic!("{op:?}: {e:?}");
        }
    }

    /// The status of a command that must fail.
    pub fn fails<T: Copy>(&self, op: Opcode, args: T) -> Status
    where
        Wire<T>: ByteValued,
    {
        self.command(op, args).expect_err("the command must fail").0
    }

    /// Appends one command buffer of `packets` to the ring (not kicked).
    pub fn push(&mut self, packets: &[u8]) {
        let pa = self.cmdbuf - DATA_VA + DATA_PA + self.shift;
        self.write(pa, packets);
        let size_bytes = u32::try_from(packets.len()).unwrap();
        let slot = u64::from(self.write_index % 16);
        self.write(
            DATA_PA + self.shift + slot * 16,
            &bytes(RingEntry { cmdbuf_va: self.cmdbuf, size_bytes, flags: 0 }),
        );
        self.cmdbuf += u64::from(size_bytes.next_multiple_of(64));
        self.write_index += 1;
        self.write(DATA_PA + self.shift + 0x1000, &self.write_index.to_le_bytes());
    }

    /// GPU VA of the next command buffer [`Rig::push`] writes.
    pub fn next_cmdbuf_va(&self) -> u64 {
        self.cmdbuf
    }

    /// Appends `packets` and kicks queue 1.
    pub fn submit(&mut self, packets: &[u8]) {
        self.push(packets);
        self.ok(Opcode::KickQueue, mailbox::ObjectArgs { id: 1, ..Default::default() });
    }

    /// Runs slices of the rig's engine until nothing is ready; how many ran.
    pub fn run(&self) -> usize {
        (0..1000).take_while(|_| crate::gpu::engine::step(&self.gpu, ENGINE)).count()
    }

    /// The device's read index of queue 1's ring (as published to the ring control).
    pub fn read_index(&self) -> u32 {
        self.read_u32(DATA_PA + self.shift + 0x1000 + belfry_abi::ring::READ_INDEX_OFFSET)
    }

    /// Queue `id`'s state.
    pub fn queue_state(&self, id: u32) -> QueueState {
        self.gpu.lock().queues[&QueueId::new(id)].state
    }

    /// The rig's context's state.
    pub fn context_state(&self) -> ContextState {
        self.gpu.lock().contexts[&CONTEXT].state
    }

    /// Interrupt records written so far.
    pub fn records(&self) -> Vec<irq::InterruptRecord> {
        let written = self.read_u32(IRQ_RING + self.shift + irq::WRITE_INDEX_OFFSET);
        (0..written)
            .map(|i| {
                let at = IRQ_RING + self.shift + irq::record_offset(i, IRQ_ENTRIES);
                self.gpu.ports.ram.memory().read_obj::<Wire<irq::InterruptRecord>>(GuestAddress(at)).unwrap().0
            })
            .collect()
    }
}

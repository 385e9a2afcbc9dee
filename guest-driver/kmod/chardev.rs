// SPDX-License-Identifier: GPL-2.0

//! The character device front end: one misc device, `/dev/belfry<N>`, per bound device, with the
//! ioctls of `abi::uapi` and `mmap` of allocations and progress-fence pages.
//!
//! Each open file owns what it creates (contexts, allocations, queues); handles are per file, so
//! another process's handles name nothing here. Every argument is validated before anything
//! changes (errno conventions in `uapi.rs`). `release` is process termination
//! ([`drain_or_suspend`]: disconnect and drain, or mark in error and suspend), then destroys the
//! file's objects in a safe order: doorbells, queues (device first, then their memory),
//! allocations, fences, contexts. Memory that a process may still have mapped (allocations,
//! progress pages) is kept until `release`: a mapping holds a reference to the file, so by then
//! no mapping remains.
//!
//! Device programming goes through [`Core`]; this file only decides what to ask of it.

use kernel::{
    device::Device,
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::VmaNew,
    new_mutex,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

use crate::{
    abi::{
        engine, fence,
        mailbox::{self, Opcode},
        mmu,
        ring,
        uapi::{self, DoorbellStatus},
    },
    caps::NativeFenceFeature,
    dmamem::{DmaBuf, PAGE},
    doorbell::{self, Doorbell},
    fenceshare::GlobalFence,
    fencewait,
    ffi::{self, FileMapping},
    gpucore::{Core, HwGuard, Kind},
    kring::{self, HeldWait, KernelRing},
    optfence::{self, MonitoredPage},
    pagetable::AddressSpace,
    term::{self, TermStats},
    MAX_DEVICES,
};

/// Names of the misc devices, by device slot (`MiscDeviceOptions` wants a `&'static CStr`).
static NAMES: [&CStr; MAX_DEVICES] = [
    c"belfry0", c"belfry1", c"belfry2", c"belfry3", c"belfry4", c"belfry5", c"belfry6", c"belfry7",
];

/// Largest allocation (`QUERY_CAPS.max_allocation`).
const MAX_ALLOCATION: u64 = 64 << 20;
/// Most objects (contexts, allocations, queues together) one file may hold.
const MAX_OBJECTS_PER_FILE: usize = 1024;
/// How long `release` waits for a queue's last queued progress value before taking the
/// abnormal path (suspend the context, then destroy).
const CLOSE_DRAIN_TIMEOUT_MS: u32 = 2000;
/// Packing stride of non-shared fence values (`QUERY_CAPS.fence_stride`, NF-07).
const FENCE_STRIDE: usize = 64;
/// Fence slots in one page.
const FENCE_SLOTS: usize = PAGE / FENCE_STRIDE;
/// Byte offset of an INTRA_GPU fence's MonitoredValue in its VRAM page (CurrentValue at 0).
const VRAM_MONITORED_OFFSET: u64 = 2048;
/// First GPU VA handed out in a context's address space.
const USER_VA_BASE: u64 = 0x1_0000_0000;
/// End of the GPU VA range handed out (half the 48-bit space).
const USER_VA_END: u64 = 1 << 47;


/// Reads the ioctl argument at `arg`.
fn read_arg<T: FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(UserPtr::from_addr(arg), core::mem::size_of::<T>())
        .reader()
        .read::<T>()
}

/// Writes the ioctl argument back to `arg`.
fn write_arg<T: AsBytes>(arg: usize, value: &T) -> Result {
    UserSlice::new(UserPtr::from_addr(arg), core::mem::size_of::<T>())
        .writer()
        .write(value)
}

/// Bytes of `pages` pages.
fn page_bytes(pages: usize) -> u64 {
    // CAST: page counts are bounded by `MAX_ALLOCATION` / ring sizes; `usize` fits `u64`.
    (pages * PAGE) as u64
}

/// The misc device of one bound Belfry device.
///
/// # Invariants
///
/// Every `MiscDeviceRegistration<BelfryFile>` is the `misc` field of a `Registration` (only
/// [`Registration::new`] creates one), which is what [`Registration::from_misc`] relies on.
#[pin_data]
pub(crate) struct Registration {
    /// The registered misc device; deregistered when dropped.
    #[pin]
    misc: MiscDeviceRegistration<BelfryFile>,
    /// The device slot `N` of `/dev/belfry<N>`.
    index: usize,
    /// The driver core the files program the device through.
    core: Arc<Core>,
    /// The native-fence feature as negotiated at probe (CAP-01).
    feature: NativeFenceFeature,
    /// Termination statistics of the device.
    term: Arc<TermStats>,
}

impl Registration {
    /// Registers `/dev/belfry<index>` for `core`.
    ///
    /// # Errors
    ///
    /// `EINVAL` if `index` is not below `MAX_DEVICES`, or the error of `misc_register`.
    pub(crate) fn new(index: usize, core: Arc<Core>) -> impl PinInit<Self, Error> {
        pin_init::pin_init_scope(move || {
            let name = *NAMES.get(index).ok_or(EINVAL)?;
            let term = TermStats::new()?;
            Ok(try_pin_init!(Self {
                core,
                index,
                feature: NativeFenceFeature::negotiate(),
                term,
                misc <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
            }? Error))
        })
    }

    /// The registration that `misc` is the `misc` field of.
    fn from_misc(misc: &MiscDeviceRegistration<BelfryFile>) -> &Self {
        // SAFETY: By the type invariant, `misc` is the `misc` field of a `Registration`, so
        // stepping back by the field's offset stays in the same allocation and yields a valid
        // `Registration` that lives at least as long as `misc`.
        unsafe { &*kernel::container_of!(core::ptr::from_ref(misc).cast_mut(), Registration, misc) }
    }
}

/// A context: a device context with its own GPU address space.
struct Context {
    /// Per-file handle.
    handle: u32,
    /// Device context id.
    id: u32,
    /// Its address space.
    space: AddressSpace,
    /// Next free GPU VA.
    next_va: u64,
    /// Pages of DEFAULT fence values; kept (possibly empty) until the context is destroyed, so
    /// indices into it stay valid.
    fence_pages: KVec<FencePage>,
}

/// A page of DEFAULT-fence CurrentValues (slots of [`FENCE_STRIDE`] bytes) and the matching
/// page of MonitoredValues. CurrentValue: system address space, the context's address space
/// (read/write) and the process (read-only); MonitoredValue: system address space only, or
/// VRAM (the optimized form, NF-13, `optfence`).
struct FencePage {
    /// CurrentValues.
    current: Arc<DmaBuf>,
    /// MonitoredValues, same slot offsets.
    monitored: MonitoredPage,
    /// VA of `current` in the system address space (`monitored` one page after it).
    sys_va: u64,
    /// VA of `current` in the context's address space.
    proc_va: u64,
    /// mmap offset of `current`, in pages.
    pgoff: u64,
    /// Slots in use (bit n: byte offset n × stride).
    used: u64,
    /// Holds one shareable fence and nothing else (NF-08).
    shared: bool,
}

/// Where a fence's values live.
enum FenceStorage {
    /// DEFAULT: slot `slot` of page `page` of its context.
    System {
        /// Index in `Context::fence_pages`.
        page: usize,
        /// Slot in the page.
        slot: usize,
        /// The CurrentValue page (for waits after the file lock is dropped).
        current: Arc<DmaBuf>,
    },
    /// INTRA_GPU: a VRAM page (CurrentValue at 0), mapped at `gpu_va` only.
    Vram {
        /// VRAM byte offset of the page.
        offset: u64,
        /// Its GPU VA in the context's address space.
        gpu_va: u64,
    },
    /// A local handle on a shared DEFAULT fence (`fenceshare`): CurrentValue at 0 of the
    /// global object's page, mapped at `proc_va` of the context and read-only at `pgoff`.
    Shared {
        /// The global object (one reference).
        obj: Arc<GlobalFence>,
        /// GPU VA of CurrentValue in the context's address space.
        proc_va: u64,
        /// mmap offset of the CurrentValue page, in pages.
        pgoff: u64,
    },
}

/// A fence created by `CREATE_FENCE`.
struct Fence {
    /// Per-file handle.
    handle: u32,
    /// Handle of its context.
    context: u32,
    /// Global handle (device and interrupt records).
    global: u64,
    /// Registered with the device.
    registered: bool,
    /// Its kind.
    kind: fence::FenceKind,
    /// Its values.
    storage: FenceStorage,
}

impl Context {
    /// Reserves `pages` pages (and a guard page) of GPU VA.
    fn reserve_va(&mut self, pages: usize) -> Result<u64> {
        let va = self.next_va;
        let end = va
            .checked_add(page_bytes(pages + 1))
            .filter(|&e| e <= USER_VA_END)
            .ok_or(ENOSPC)?;
        self.next_va = end;
        Ok(va)
    }
}

/// An allocation: DMA-coherent pages mapped in a context and mmappable.
struct Allocation {
    /// Per-file handle.
    handle: u32,
    /// Handle of the context whose address space maps it.
    context: u32,
    /// The memory.
    buf: Arc<DmaBuf>,
    /// Its GPU VA.
    gpu_va: u64,
    /// Its mmap offset, in pages.
    pgoff: u64,
    /// `ALLOC_GPU_READ_ONLY`.
    gpu_read_only: bool,
}

/// A queue's progress fence: a native fence whose CurrentValue page is mapped in the system
/// address space, in the process's GPU address space and (read-only) in the process.
struct ProgressFence {
    /// Global handle.
    handle: u64,
    /// CurrentValue at offset 0.
    current: Arc<DmaBuf>,
    /// MonitoredValue at offset 0 (system address space only).
    monitored: DmaBuf,
    /// VA of `current` (and `monitored` one page after it) in the system address space.
    sys_va: u64,
    /// VA of `current` in the context's address space.
    proc_va: u64,
    /// mmap offset of `current`, in pages.
    pgoff: u64,
    /// Registered with the device.
    registered: bool,
}

/// A hardware queue.
struct Queue {
    /// Per-file handle.
    handle: u32,
    /// Handle of its context.
    context: u32,
    /// Device queue id, once created on the device.
    id: Option<u32>,
    /// GPU VA of the ring and of the ring control.
    ring_va: u64,
    /// GPU VA of the ring control.
    control_va: u64,
    /// Kernel-mode queues: the module's ring and the work held behind GPU waits.
    kring: Option<Arc<KernelRing>>,
    /// User-mode queues: the ring and ring-control allocations (handles), kept while the queue
    /// exists (`FREE` refuses them with `EBUSY`).
    user_allocs: Option<(u32, u32)>,
    /// The progress fence.
    fence: Option<ProgressFence>,
    /// Kernel-mode queues: the highest progress value submitted.
    last_submitted: u64,
}

/// A doorbell of one of this file's user-mode queues.
struct FileDoorbell {
    /// Per-file handle.
    handle: u32,
    /// Handle of its queue.
    queue: u32,
    /// The doorbell.
    db: Arc<Doorbell>,
}

/// What one open file owns.
struct FileState {
    /// Next handle.
    next_handle: u32,
    /// Contexts.
    contexts: KVec<Context>,
    /// Allocations.
    allocs: KVec<Allocation>,
    /// Queues.
    queues: KVec<Queue>,
    /// Doorbells.
    doorbells: KVec<FileDoorbell>,
    /// Fences.
    fences: KVec<Fence>,
    /// Memory freed by the process but possibly still mapped by it; released with the file.
    retired: KVec<Arc<DmaBuf>>,
}

impl FileState {
    /// A new handle, or `ENOSPC` when the file holds too many objects.
    fn new_handle(&mut self) -> Result<u32> {
        let held = self.contexts.len()
            + self.allocs.len()
            + self.queues.len()
            + self.doorbells.len()
            + self.fences.len();
        if held >= MAX_OBJECTS_PER_FILE {
            return Err(ENOSPC);
        }
        let handle = self.next_handle;
        self.next_handle = self.next_handle.checked_add(1).ok_or(ENOSPC)?;
        Ok(handle)
    }

    /// Index of context `handle`.
    fn context(&self, handle: u32) -> Result<usize> {
        index_of(&self.contexts, handle, |c| c.handle)
    }

    /// Index of allocation `handle`.
    fn alloc(&self, handle: u32) -> Result<usize> {
        index_of(&self.allocs, handle, |a| a.handle)
    }

    /// Index of doorbell `handle`.
    fn doorbell(&self, handle: u32) -> Result<usize> {
        index_of(&self.doorbells, handle, |d| d.handle)
    }

    /// Index of fence `handle`.
    fn fence(&self, handle: u32) -> Result<usize> {
        index_of(&self.fences, handle, |f| f.handle)
    }

    /// Index of queue `handle`.
    fn queue(&self, handle: u32) -> Result<usize> {
        index_of(&self.queues, handle, |q| q.handle)
    }
}

/// Index of the object that `handle` names among `items` (whose handles `key` reads); handle 0
/// names nothing.
fn index_of<T>(items: &[T], handle: u32, key: impl Fn(&T) -> u32) -> Result<usize> {
    items
        .iter()
        .position(|x| handle != 0 && key(x) == handle)
        .ok_or(ENOENT)
}

/// An open file of `/dev/belfry<N>`.
#[pin_data]
pub(crate) struct BelfryFile {
    /// The misc device, for messages.
    dev: ARef<Device>,
    /// The device slot `N`.
    index: usize,
    /// The driver core.
    core: Arc<Core>,
    /// The device's native-fence feature (negotiated at probe).
    feature: NativeFenceFeature,
    /// The device's termination statistics.
    term: Arc<TermStats>,
    /// ioctls made through this file.
    ioctls: Atomic<u64>,
    /// The file's page-cache mapping, for moving doorbell mappings.
    mapping: Option<FileMapping>,
    /// What this file owns.
    #[pin]
    state: Mutex<FileState>,
}

#[vtable]
impl MiscDevice for BelfryFile {
    type Ptr = Pin<KBox<Self>>;

    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let reg = Registration::from_misc(misc);
        let dev = ARef::from(misc.device());
        dev_dbg!(dev, "belfry{}: open\n", reg.index);
        KBox::try_pin_init(
            try_pin_init!(Self {
                dev,
                index: reg.index,
                core: reg.core.clone(),
                feature: reg.feature,
                term: reg.term.clone(),
                ioctls: Atomic::new(0),
                mapping: FileMapping::of(file),
                state <- new_mutex!(FileState {
                    next_handle: 1,
                    contexts: KVec::new(),
                    allocs: KVec::new(),
                    queues: KVec::new(),
                    doorbells: KVec::new(),
                    fences: KVec::new(),
                    retired: KVec::new(),
                }),
            }? Error),
            GFP_KERNEL,
        )
    }

    fn release(this: Pin<KBox<Self>>, _file: &File) {
        dev_dbg!(this.dev, "belfry{}: release\n", this.index);
        let core = &*this.core;
        fencewait::drop_waits(core, this.owner(), None);
        let mut st = this.state.lock();
        let st = &mut *st;
        let with_queues = !st.queues.is_empty();
        let mut rec = term::Record::default();
        let normal = drain_or_suspend(core, st, &this.term, &mut rec);
        // Held work is dropped (its context is suspended if it never ran) before the hardware
        // mutex is taken (lock order, see `kring`).
        for kring in st.queues.iter().filter_map(|q| q.kring.as_ref()) {
            kring.close(core);
        }
        if with_queues {
            rec.step(core, uapi::TERM_STEP_DESTROY);
        }
        {
            let mut hw = core.hw().ok();
            while let Some(d) = st.doorbells.pop() {
                doorbell::destroy(core, hw.as_mut(), &d.db);
            }
            while let Some(q) = st.queues.pop() {
                let Ok(c) = st.context(q.context) else {
                    continue;
                };
                destroy_queue(core, hw.as_mut(), &mut st.contexts[c], q, &mut st.retired);
            }
        }
        while let Some(a) = st.allocs.pop() {
            if let Ok(c) = st.context(a.context) {
                unmap_alloc(core, &mut st.contexts[c], &a);
            }
        }
        while let Some(f) = st.fences.pop() {
            if let Ok(c) = st.context(f.context) {
                destroy_fence(core, &mut st.contexts[c], f);
            }
        }
        while let Some(mut ctx) = st.contexts.pop() {
            release_fence_pages(core, &mut ctx, &mut st.retired);
            destroy_context(core, ctx);
        }
        st.retired.clear();
        if with_queues {
            this.term.publish(rec, normal);
        }
    }

    fn mmap(this: Pin<&BelfryFile>, _file: &File, vma: &VmaNew) -> Result {
        // Only shared mappings: a private (copy-on-write) one would not reach the device, and
        // `vmf_insert_pfn` refuses (BUG_ON) a VM_PFNMAP copy-on-write mapping.
        if vma.flags() & kernel::mm::virt::flags::MAYSHARE == 0 {
            return Err(EINVAL);
        }
        let pgoff = ffi::vma_pgoff(vma);
        let st = this.state.lock();
        let (buf, read_only) = if let Some(a) = st.allocs.iter().find(|a| a.pgoff == pgoff) {
            (a.buf.clone(), false)
        } else if let Some(d) = st.doorbells.iter().find(|d| d.db.pgoffs.contains(&pgoff)) {
            if pgoff == d.db.pgoffs[0] {
                return ffi::doorbell_mmap(vma, d.db.clone());
            }
            if pgoff == d.db.pgoffs[1] {
                (d.db.status.clone(), true)
            } else {
                (d.db.last_queued.clone(), false)
            }
        } else if let Some(f) = st
            .queues
            .iter()
            .filter_map(|q| q.fence.as_ref())
            .find(|f| f.pgoff == pgoff)
        {
            (f.current.clone(), true)
        } else if let Some(p) = st
            .contexts
            .iter()
            .flat_map(|c| c.fence_pages.iter())
            .find(|p| p.pgoff == pgoff)
        {
            // CurrentValue: read-only for the process (FEN-03, NF-03).
            (p.current.clone(), true)
        } else if let Some(current) = st.fences.iter().find_map(|f| match &f.storage {
            FenceStorage::Shared { obj, pgoff: p, .. } if *p == pgoff => Some(obj.current().clone()),
            _ => None,
        }) {
            (current, true)
        } else {
            return Err(EINVAL);
        };
        if read_only {
            if vma.writable() {
                return Err(EPERM);
            }
            vma.try_clear_maywrite()?;
        }
        vma.set_dontcopy();
        vma.set_dontexpand();
        ffi::dma_mmap(this.core.device(), vma, &buf)
    }

    fn ioctl(this: Pin<&BelfryFile>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        this.ioctls.add(1, Relaxed);
        let this = this.get_ref();
        match cmd {
            uapi::IOCTL_QUERY_CAPS => write_arg(arg, &this.query_caps())?,
            uapi::IOCTL_DEBUG_STATS => write_arg(arg, &this.debug_stats())?,
            uapi::IOCTL_CREATE_CONTEXT => {
                let mut a: uapi::CreateContext = read_arg(arg)?;
                if a.flags != 0 {
                    return Err(EINVAL);
                }
                a.handle = this.create_context()?;
                if let Err(e) = write_arg(arg, &a) {
                    let _ = this.destroy_context(a.handle);
                    return Err(e);
                }
            }
            uapi::IOCTL_DESTROY_CONTEXT => this.destroy_context(read_handle(arg)?)?,
            uapi::IOCTL_ALLOC => {
                let mut a: uapi::Alloc = read_arg(arg)?;
                this.alloc(&mut a)?;
                if let Err(e) = write_arg(arg, &a) {
                    let _ = this.free(a.handle);
                    return Err(e);
                }
            }
            uapi::IOCTL_FREE => this.free(read_handle(arg)?)?,
            uapi::IOCTL_CREATE_QUEUE => {
                let mut a: uapi::CreateQueue = read_arg(arg)?;
                this.create_queue(&mut a)?;
                if let Err(e) = write_arg(arg, &a) {
                    let _ = this.destroy_queue(a.handle);
                    return Err(e);
                }
            }
            uapi::IOCTL_DESTROY_QUEUE => this.destroy_queue(read_handle(arg)?)?,
            uapi::IOCTL_SUBMIT => this.submit(&read_arg(arg)?)?,
            uapi::IOCTL_QUEUE_WAIT_FENCE => this.queue_fence_op(&read_arg(arg)?, false)?,
            uapi::IOCTL_QUEUE_SIGNAL_FENCE => this.queue_fence_op(&read_arg(arg)?, true)?,
            uapi::IOCTL_WAIT_PROGRESS => this.wait_progress(&read_arg(arg)?)?,
            uapi::IOCTL_CREATE_DOORBELL => {
                let mut a: uapi::CreateDoorbell = read_arg(arg)?;
                this.create_doorbell(&mut a)?;
                if let Err(e) = write_arg(arg, &a) {
                    let _ = this.destroy_doorbell(a.handle);
                    return Err(e);
                }
            }
            uapi::IOCTL_SUSPEND_CONTEXT | uapi::IOCTL_RESUME_CONTEXT => {
                let handle = read_handle(arg)?;
                let id = {
                    let st = this.state.lock();
                    st.contexts[st.context(handle)?].id
                };
                let suspend = cmd == uapi::IOCTL_SUSPEND_CONTEXT;
                doorbell::suspend_context(&this.core, &mut this.core.hw()?, id, suspend)?;
            }
            uapi::IOCTL_DESTROY_DOORBELL => this.destroy_doorbell(read_handle(arg)?)?,
            uapi::IOCTL_DISCONNECT_DOORBELL => this.disconnect_doorbell(&read_arg(arg)?)?,
            uapi::IOCTL_CONNECT_DOORBELL => {
                let db = this.find_doorbell(read_handle(arg)?)?;
                doorbell::connect(&this.core, &db)?;
            }
            uapi::IOCTL_CREATE_FENCE => {
                let mut a: uapi::CreateFence = read_arg(arg)?;
                this.create_fence(&mut a)?;
                if let Err(e) = write_arg(arg, &a) {
                    let _ = this.destroy_fence(a.handle);
                    return Err(e);
                }
            }
            uapi::IOCTL_DESTROY_FENCE => this.destroy_fence(read_handle(arg)?)?,
            uapi::IOCTL_SIGNAL_FENCE => this.signal_fence(&read_arg(arg)?)?,
            uapi::IOCTL_WAIT_FENCE => this.wait_fence(&read_arg(arg)?)?,
            uapi::IOCTL_FENCE_INFO => {
                let mut a: uapi::FenceInfo = read_arg(arg)?;
                this.fence_info(&mut a)?;
                write_arg(arg, &a)?;
            }
            uapi::IOCTL_EXPORT_FENCE => this.export_fence(arg)?,
            uapi::IOCTL_IMPORT_FENCE => {
                let mut a: uapi::ImportFence = read_arg(arg)?;
                this.import_fence(&mut a)?;
                if let Err(e) = write_arg(arg, &a) {
                    let _ = this.destroy_fence(a.handle);
                    return Err(e);
                }
            }
            uapi::IOCTL_WAIT_FENCE_EVENTFD => this.wait_fence_eventfd(&read_arg(arg)?)?,
            uapi::IOCTL_FENCE_DEBUG => write_arg(arg, &this.fence_debug())?,
            uapi::IOCTL_NOTIFY_WORK => {
                let db = this.find_doorbell(read_handle(arg)?)?;
                doorbell::notify(&this.core, &db);
            }
            uapi::IOCTL_READ_TIMELINE => {
                let mut a: uapi::ReadTimeline = read_arg(arg)?;
                crate::fencelog::read_timeline(&this.core, &mut a)?;
                write_arg(arg, &a)?;
            }
            uapi::IOCTL_IRQ_DEBUG => write_arg(arg, &crate::fencelog::irq_debug(&this.core))?,
            _ => return Err(ENOTTY),
        }
        Ok(0)
    }
}

/// Reads a [`uapi::Handle`] argument.
fn read_handle(arg: usize) -> Result<u32> {
    let h: uapi::Handle = read_arg(arg)?;
    if h.pad != 0 {
        return Err(EINVAL);
    }
    Ok(h.handle)
}

impl BelfryFile {
    /// `QUERY_CAPS`.
    fn query_caps(&self) -> uapi::QueryCaps {
        let info = self.core.info();
        let mut caps = uapi::QueryCaps {
            uapi_version: uapi::UAPI_VERSION,
            caps: info.caps.0,
            doorbell_count: info.doorbells,
            // CAST: a page.
            doorbell_size: PAGE as u32,
            engine_count: info.engines,
            user_mode_submission_engines: info.user_mode_engines,
            fence_write_engines: info.fence_write_engines,
            // CAST: 64.
            fence_stride: FENCE_STRIDE as u32,
            vram_size: info.vram_size,
            max_allocation: MAX_ALLOCATION,
            test_injections: info.test_injections.0,
            ..Default::default()
        };
        self.feature.fill(info.caps, &mut caps);
        caps
    }

    /// `DEBUG_STATS`.
    fn debug_stats(&self) -> uapi::DebugStats {
        let mut s = uapi::DebugStats::default();
        self.core.stats(|ev| {
            s.interrupts_by_cause = ev.by_cause;
            s.faults = ev.faults;
            s.gpu_pages = ev.gpu_pages;
        });
        let counts = self.core.objects().counts;
        s.contexts = counts[Kind::Context as usize];
        s.queues = counts[Kind::Queue as usize];
        s.allocations = counts[Kind::Allocation as usize];
        s.doorbells = counts[Kind::Doorbell as usize];
        s.ioctls_by_caller = self.ioctls.load(Relaxed);
        s.system_gpu_pages = self
            .core
            .objects()
            .system()
            .map_or(0, |sys| sys.mapped_pages());
        self.term.fill(&mut s);
        s
    }

    /// `CREATE_CONTEXT`: a device context with a fresh address space.
    fn create_context(&self) -> Result<u32> {
        let core = &*self.core;
        let mut st = self.state.lock();
        let handle = st.new_handle()?;
        st.contexts.reserve(1, GFP_KERNEL)?;
        let (space_id, ctx_id) = core.objects().take_context_ids().ok_or(ENOSPC)?;
        let created = (|| -> Result<AddressSpace> {
            let mut hw = core.hw()?;
            let space = AddressSpace::new(hw.dev()?, space_id)?;
            let mut a = mailbox::CreateAddressSpaceArgs {
                id: space_id,
                root_pa: space.root_pa(),
                ..Default::default()
            };
            hw.command(Opcode::CreateAddressSpace, &mut a, &[])?;
            let mut c = mailbox::CreateContextArgs {
                id: ctx_id,
                address_space: space_id,
                ..Default::default()
            };
            if let Err(e) = hw.command(Opcode::CreateContext, &mut c, &[]) {
                object_command(&mut hw, Opcode::DestroyAddressSpace, space_id);
                return Err(e);
            }
            Ok(space)
        })();
        let space = match created {
            Ok(space) => space,
            Err(e) => {
                core.objects().put_context_ids(space_id, ctx_id);
                return Err(e);
            }
        };
        st.contexts.push(
            Context {
                handle,
                id: ctx_id,
                space,
                next_va: USER_VA_BASE,
                fence_pages: KVec::new(),
            },
            GFP_KERNEL,
        )?;
        core.objects().count(Kind::Context, true);
        Ok(handle)
    }

    /// `DESTROY_CONTEXT`: `EBUSY` while allocations or queues use it.
    fn destroy_context(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let c = st.context(handle)?;
        if st.allocs.iter().any(|a| a.context == handle)
            || st.queues.iter().any(|q| q.context == handle)
            || st.fences.iter().any(|f| f.context == handle)
        {
            return Err(EBUSY);
        }
        let pages = st.contexts[c].fence_pages.len();
        st.retired.reserve(pages, GFP_KERNEL)?;
        let st = &mut *st;
        let mut ctx = st.contexts.remove(c).map_err(|_| EINVAL)?;
        release_fence_pages(&self.core, &mut ctx, &mut st.retired);
        destroy_context(&self.core, ctx);
        Ok(())
    }

    /// `ALLOC`.
    fn alloc(&self, a: &mut uapi::Alloc) -> Result {
        if a.pad != 0
            || a.flags & !uapi::ALLOC_GPU_READ_ONLY != 0
            || a.size == 0
            || a.size > MAX_ALLOCATION
        {
            return Err(EINVAL);
        }
        let pages = usize::try_from(a.size.div_ceil(mmu::PAGE_SIZE))?;
        let gpu_read_only = a.flags & uapi::ALLOC_GPU_READ_ONLY != 0;
        let core = &*self.core;
        let mut st = self.state.lock();
        let c = st.context(a.context)?;
        let handle = st.new_handle()?;
        st.allocs.reserve(1, GFP_KERNEL)?;
        let ctx = &mut st.contexts[c];
        let va = ctx.reserve_va(pages)?;
        let buf = {
            let hw = core.hw()?;
            let buf = Arc::new(DmaBuf::new(hw.dev()?, pages)?, GFP_KERNEL)?;
            let before = ctx.space.mapped_pages();
            ctx.space.map_buf(hw.dev()?, va, &buf, !gpu_read_only)?;
            core.add_gpu_pages(before, ctx.space.mapped_pages());
            buf
        };
        let pgoff = core.objects().new_pgoff(pages);
        st.allocs.push(
            Allocation {
                handle,
                context: a.context,
                buf,
                gpu_va: va,
                pgoff,
                gpu_read_only,
            },
            GFP_KERNEL,
        )?;
        core.objects().count(Kind::Allocation, true);
        a.handle = handle;
        a.gpu_va = va;
        a.mmap_offset = pgoff << mmu::PAGE_SHIFT;
        Ok(())
    }

    /// `FREE`: `EBUSY` while a queue uses the allocation as its ring or ring control.
    fn free(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let st = &mut *st;
        let i = st.alloc(handle)?;
        if st
            .queues
            .iter()
            .any(|q| matches!(q.user_allocs, Some((r, c)) if r == handle || c == handle))
        {
            return Err(EBUSY);
        }
        st.retired.reserve(1, GFP_KERNEL)?;
        let a = st.allocs.remove(i).map_err(|_| EINVAL)?;
        if let Ok(c) = st.context(a.context) {
            unmap_alloc(&self.core, &mut st.contexts[c], &a);
        }
        st.retired.push(a.buf, GFP_KERNEL)?;
        Ok(())
    }

    /// `CREATE_QUEUE`.
    fn create_queue(&self, a: &mut uapi::CreateQueue) -> Result {
        let info = self.core.info();
        let user_mode = a.flags & uapi::QUEUE_USER_MODE_SUBMISSION != 0;
        // A user-mode queue's progress fence is a native fence (CAP-08).
        if user_mode && !self.feature.enabled() {
            return Err(EOPNOTSUPP);
        }
        if a.flags & !uapi::QUEUE_USER_MODE_SUBMISSION != 0
            || a.engine >= info.engines
            || a.priority > engine::PRIORITY_MAX
            || !ring::is_valid_size(a.ring_entries)
            || (user_mode && (info.user_mode_engines >> a.engine) & 1 == 0)
            // NF-21: user-mode queues synchronize through native fences only.
            || (user_mode && !info.caps.native_fence())
            || (!user_mode && (a.ring != 0 || a.ring_control != 0))
        {
            return Err(EINVAL);
        }
        let core = &*self.core;
        let mut st = self.state.lock();
        let st = &mut *st;
        let c = st.context(a.context)?;
        // A faulted context refuses new queues (uapi: the library re-creates the context).
        if core.objects().is_faulted(st.contexts[c].id) {
            return Err(EIO);
        }
        let user_allocs = if user_mode {
            let r = &st.allocs[st.alloc(a.ring)?];
            let k = &st.allocs[st.alloc(a.ring_control)?];
            let ring_bytes = u64::from(a.ring_entries) * 16;
            if r.context != a.context
                || k.context != a.context
                || a.ring == a.ring_control
                || page_bytes(r.buf.pages()) < ring_bytes
                || k.gpu_read_only
            {
                return Err(EINVAL);
            }
            Some((r.handle, k.handle, r.gpu_va, k.gpu_va))
        } else {
            None
        };
        let handle = st.new_handle()?;
        st.queues.reserve(1, GFP_KERNEL)?;
        st.retired.reserve(1, GFP_KERNEL)?;
        let pgoff = core.objects().new_pgoff(1);
        let ctx = &mut st.contexts[c];
        let mut hw = core.hw()?;
        let mut q = Queue {
            handle,
            context: a.context,
            id: None,
            ring_va: 0,
            control_va: 0,
            kring: None,
            user_allocs: user_allocs.map(|(r, k, _, _)| (r, k)),
            fence: None,
            last_submitted: 0,
        };
        let before = ctx.space.mapped_pages();
        let built = build_queue(core, &mut hw, ctx, &mut q, a, pgoff, user_allocs);
        core.add_gpu_pages(before, ctx.space.mapped_pages());
        if let Err(e) = built {
            destroy_queue(core, Some(&mut hw), ctx, q, &mut st.retired);
            return Err(e);
        }
        a.handle = handle;
        if let Some(f) = &q.fence {
            a.progress_fence_va = f.proc_va;
            a.progress_mmap_offset = f.pgoff << mmu::PAGE_SHIFT;
            a.progress_log_handle = f.handle;
        }
        st.queues.push(q, GFP_KERNEL)?;
        Ok(())
    }

    /// `DESTROY_QUEUE`: `EBUSY` while the queue has a doorbell.
    fn destroy_queue(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let st = &mut *st;
        let i = st.queue(handle)?;
        if st.doorbells.iter().any(|d| d.queue == handle) {
            return Err(EBUSY);
        }
        st.retired.reserve(1, GFP_KERNEL)?;
        let q = st.queues.remove(i).map_err(|_| EINVAL)?;
        let c = st.context(q.context)?;
        if let Some(kring) = &q.kring {
            kring.close(&self.core);
        }
        let mut hw = self.core.hw().ok();
        destroy_queue(
            &self.core,
            hw.as_mut(),
            &mut st.contexts[c],
            q,
            &mut st.retired,
        );
        Ok(())
    }

    /// `SUBMIT`: the command buffer and a FENCE_SIGNAL of the progress value on the queue's
    /// kernel ring, then `KICK_QUEUE`; held by the module behind a monitored-fence GPU wait
    /// (`kring`).
    fn submit(&self, s: &uapi::Submit) -> Result {
        let mut st = self.state.lock();
        let st = &mut *st;
        let qi = st.queue(s.queue)?;
        let ai = st.alloc(s.cmdbuf)?;
        let alloc = &st.allocs[ai];
        let q = &mut st.queues[qi];
        let Some(kring) = q.kring.as_ref() else {
            return Err(EPERM);
        };
        let end = u64::from(s.offset) + u64::from(s.size);
        if alloc.context != q.context
            || s.offset % 4 != 0
            || s.size % 4 != 0
            || s.size == 0
            || s.size > ring::CMDBUF_MAX_BYTES
            || end > page_bytes(alloc.buf.pages())
        {
            return Err(EINVAL);
        }
        let id = q.id.ok_or(EINVAL)?;
        // Its logged fence packets are queued now (timeline); the progress signal the ring adds
        // is logged at the index this returns.
        let log_entry = crate::fencelog::note_submit(
            &self.core,
            id,
            &alloc.buf,
            s.offset,
            s.size,
            q.fence.as_ref().map_or(0, |f| f.handle),
            s.progress_value,
        );
        kring
            .submit(
                &self.core,
                alloc.gpu_va + u64::from(s.offset),
                s.size,
                s.progress_value,
                log_entry,
            )
            .inspect_err(|_| crate::fencelog::unnote_submit(&self.core, id, log_entry))?;
        // Held work counts as queued: `release` waits for it too.
        q.last_submitted = q.last_submitted.max(s.progress_value);
        Ok(())
    }

    /// `QUEUE_WAIT_FENCE` (`signal` false): a GPU wait of a kernel-mode queue, recorded
    /// without blocking (FEN-13): a FENCE_WAIT packet for a native fence, work held by the
    /// module for a monitored one (FEN-14, FEN-15). `QUEUE_SIGNAL_FENCE` (`signal`): the
    /// software signal packet of a monitored fence (FEN-10). `EPERM` on a user-mode queue
    /// (NF-21).
    fn queue_fence_op(&self, w: &uapi::QueueFenceOp, signal: bool) -> Result {
        let st = self.state.lock();
        let q = &st.queues[st.queue(w.queue)?];
        let f = &st.fences[st.fence(w.fence)?];
        let Some(kring) = q.kring.as_ref() else {
            return Err(EPERM);
        };
        if f.context != q.context {
            return Err(EINVAL);
        }
        let core = &*self.core;
        match (&f.storage, f.kind) {
            (FenceStorage::System { slot, current, .. }, fence::FenceKind::Monitored) => {
                let offset = *slot * FENCE_STRIDE;
                let wrap32 = core.wrap32();
                kring::check_window(wrap32, current.read64(offset), w.value, signal)?;
                let op = HeldWait {
                    page: current.clone(),
                    offset,
                    value: w.value,
                    wrap32,
                };
                if signal {
                    kring.soft_signal(core, op)
                } else {
                    kring.hold(core, op)
                }
            }
            _ if signal => Err(EINVAL),
            (FenceStorage::System { page, slot, .. }, _) => {
                let p = st.contexts[st.context(f.context)?]
                    .fence_pages
                    .get(*page)
                    .ok_or(EINVAL)?;
                // CAST: below a page.
                let va = p.proc_va + (*slot * FENCE_STRIDE) as u64;
                kring.gpu_wait(core, va, w.value, f.global)
            }
            (FenceStorage::Vram { gpu_va, .. }, _) => {
                kring.gpu_wait(core, *gpu_va, w.value, f.global)
            }
            (FenceStorage::Shared { proc_va, .. }, _) => {
                kring.gpu_wait(core, *proc_va, w.value, f.global)
            }
        }
    }

    /// `CREATE_DOORBELL`: for a user-mode queue without one (`EPERM` for a kernel-mode queue,
    /// `EBUSY` if it has one); disconnected until `CONNECT_DOORBELL`.
    fn create_doorbell(&self, a: &mut uapi::CreateDoorbell) -> Result {
        let core = &*self.core;
        let mapping = self.mapping.ok_or(EINVAL)?;
        let mut st = self.state.lock();
        let q = &st.queues[st.queue(a.queue)?];
        if q.kring.is_some() {
            return Err(EPERM);
        }
        let id = q.id.ok_or(EINVAL)?;
        let context_id = st.contexts[st.context(q.context)?].id;
        if st.doorbells.iter().any(|d| d.queue == a.queue) {
            return Err(EBUSY);
        }
        let handle = st.new_handle()?;
        st.doorbells.reserve(1, GFP_KERNEL)?;
        let db = {
            let hw = core.hw()?;
            let mut objects = core.objects();
            Doorbell::new(&hw, &mut objects, id, context_id, mapping)?
        };
        a.handle = handle;
        a.doorbell_offset = db.pgoffs[0] << mmu::PAGE_SHIFT;
        a.status_offset = db.pgoffs[1] << mmu::PAGE_SHIFT;
        a.last_queued_offset = db.pgoffs[2] << mmu::PAGE_SHIFT;
        st.doorbells.push(
            FileDoorbell {
                handle,
                queue: a.queue,
                db,
            },
            GFP_KERNEL,
        )?;
        Ok(())
    }

    /// `DESTROY_DOORBELL`: disconnects it; its pages stay until the file is released.
    fn destroy_doorbell(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let i = st.doorbell(handle)?;
        st.retired.reserve(2, GFP_KERNEL)?;
        let d = st.doorbells.remove(i).map_err(|_| EINVAL)?;
        let mut hw = self.core.hw().ok();
        doorbell::destroy(&self.core, hw.as_mut(), &d.db);
        st.retired.push(d.db.status.clone(), GFP_KERNEL)?;
        st.retired.push(d.db.last_queued.clone(), GFP_KERNEL)?;
        Ok(())
    }

    /// `DISCONNECT_DOORBELL` (DB-17): `EINVAL` unless the status is RETRY or ABORT.
    fn disconnect_doorbell(&self, a: &uapi::DisconnectDoorbell) -> Result {
        let status = match DoorbellStatus::try_from(a.status) {
            Ok(s @ (DoorbellStatus::DisconnectedRetry | DoorbellStatus::DisconnectedAbort)) => s,
            _ => return Err(EINVAL),
        };
        let db = self.find_doorbell(a.handle)?;
        doorbell::disconnect(&self.core, &mut self.core.hw()?, &db, status);
        Ok(())
    }

    /// The doorbell `handle` of this file.
    fn find_doorbell(&self, handle: u32) -> Result<Arc<Doorbell>> {
        let st = self.state.lock();
        Ok(st.doorbells[st.doorbell(handle)?].db.clone())
    }

    /// `WAIT_PROGRESS`.
    fn wait_progress(&self, w: &uapi::WaitProgress) -> Result {
        if w.pad != 0 {
            return Err(EINVAL);
        }
        let (handle, current) = {
            let st = self.state.lock();
            let q = &st.queues[st.queue(w.queue)?];
            let f = q.fence.as_ref().ok_or(EINVAL)?;
            (f.handle, f.current.clone())
        };
        let monitored = self.core.wrap32();
        self.core.wait_fence(
            handle,
            monitored,
            &current,
            0,
            w.value,
            timeout_ms(w.timeout_ns),
        )
    }

    /// `CREATE_FENCE`: DEFAULT (values in system memory, packed unless shareable), INTRA_GPU
    /// (values in VRAM, no CPU mapping) or MONITORED (one value in a page of its own, no
    /// MonitoredValue; 32-bit values in the No64BitAtomics mode).
    fn create_fence(&self, a: &mut uapi::CreateFence) -> Result {
        let caps = self.core.info().caps;
        let shareable = a.flags & uapi::FENCE_SHAREABLE != 0;
        // The native-fence paths are closed while the feature is off (CAP-08).
        let native = matches!(a.kind, uapi::FENCE_KIND_DEFAULT | uapi::FENCE_KIND_INTRA_GPU);
        if native && !self.feature.enabled() {
            return Err(EOPNOTSUPP);
        }
        let kind = match a.kind {
            uapi::FENCE_KIND_DEFAULT if caps.native_fence() => fence::FenceKind::Default,
            // NF-17: an INTRA_GPU fence cannot be shared.
            uapi::FENCE_KIND_INTRA_GPU if caps.intra_gpu_fence() && !shareable => {
                fence::FenceKind::IntraGpu
            }
            uapi::FENCE_KIND_MONITORED if caps.monitored_fence() => fence::FenceKind::Monitored,
            _ => return Err(EINVAL),
        };
        // The 32-bit mode: values are 32-bit (FEN-08 rule in `uapi.rs`).
        if kind == fence::FenceKind::Monitored
            && caps.no_64bit_atomics()
            && a.initial_value > u64::from(u32::MAX)
        {
            return Err(ERANGE);
        }
        if a.pad != 0 || a.flags & !uapi::FENCE_SHAREABLE != 0 {
            return Err(EINVAL);
        }
        if kind == fence::FenceKind::Default && shareable {
            // A global object and the creator's local handle on it (SHR-01).
            self.state.lock().context(a.context)?;
            let obj = GlobalFence::new(&self.core, a.initial_value)?;
            (a.handle, a.gpu_va, a.mmap_offset) = self.open_local(a.context, obj)?;
            a.page_offset = 0;
            return Ok(());
        }
        let core = &*self.core;
        let mut st = self.state.lock();
        let st = &mut *st;
        let c = st.context(a.context)?;
        let handle = st.new_handle()?;
        st.fences.reserve(1, GFP_KERNEL)?;
        let ctx = &mut st.contexts[c];
        let global = core.objects().take_fence_handle();
        let mut hw = core.hw()?;
        let before = ctx.space.mapped_pages();
        let made = if kind == fence::FenceKind::IntraGpu {
            intra_gpu_fence(core, &mut hw, ctx, global)
        } else {
            default_fence(core, &mut hw, ctx, kind, shareable, global, a.initial_value)
        };
        core.add_gpu_pages(before, ctx.space.mapped_pages());
        let (storage, registered) = made?;
        let mut f = Fence {
            handle,
            context: a.context,
            global,
            registered,
            kind,
            storage,
        };
        drop(hw);
        if !f.registered {
            destroy_fence(core, ctx, f);
            return Err(EIO);
        }
        if let FenceStorage::System { page, .. } = &f.storage {
            // An optimized DEFAULT fence: its MonitoredValue in VRAM is set through the device.
            let init = match ctx.fence_pages.get(*page) {
                Some(p) => p.monitored.init(core, global),
                None => Err(EINVAL),
            };
            if let Err(e) = init {
                destroy_fence(core, ctx, f);
                return Err(e);
            }
        }
        if kind == fence::FenceKind::IntraGpu {
            // VRAM keeps what an earlier fence left: set both values through the device.
            let set = core
                .set_fence_values(Opcode::UpdateMonitoredValues, global, fence::MONITORED_VALUE_NONE)
                .and_then(|()| {
                    core.set_fence_values(Opcode::UpdateCurrentValues, global, a.initial_value)
                });
            if let Err(e) = set {
                destroy_fence(core, ctx, f);
                return Err(e);
            }
        }
        match &f.storage {
            FenceStorage::System { page, slot, .. } => {
                let p = &ctx.fence_pages[*page];
                let off = *slot * FENCE_STRIDE;
                // CAST: below a page.
                a.gpu_va = p.proc_va + off as u64;
                a.mmap_offset = p.pgoff << mmu::PAGE_SHIFT;
                // CAST: as above.
                a.page_offset = off as u32;
            }
            FenceStorage::Vram { gpu_va, .. } => {
                a.gpu_va = *gpu_va;
                a.mmap_offset = 0;
                a.page_offset = 0;
            }
            FenceStorage::Shared { .. } => return Err(EINVAL),
        }
        a.handle = handle;
        f.registered = true;
        st.fences.push(f, GFP_KERNEL)?;
        Ok(())
    }

    /// `DESTROY_FENCE`: the one destroy of every kind (NF-20). Its eventfd waits are dropped;
    /// a local handle on a shared fence keeps its CurrentValue page until the file is released
    /// (the process may still map it).
    fn destroy_fence(&self, handle: u32) -> Result {
        let mut st = self.state.lock();
        let st = &mut *st;
        let i = st.fence(handle)?;
        let c = st.context(st.fences[i].context)?;
        st.retired.reserve(1, GFP_KERNEL)?;
        fencewait::drop_waits(&self.core, self.owner(), Some(handle));
        let f = st.fences.remove(i).map_err(|_| EINVAL)?;
        if let FenceStorage::Shared { obj, .. } = &f.storage {
            // Room reserved above.
            let _ = st.retired.push(obj.current().clone(), GFP_KERNEL);
        }
        destroy_fence(&self.core, &mut st.contexts[c], f);
        Ok(())
    }

    /// This file's identity, for the eventfd waits it registers.
    fn owner(&self) -> usize {
        core::ptr::from_ref(self).addr()
    }

    /// Opens a local handle on `obj` in context `context`: mapped at a new GPU VA of the
    /// context and at a new mmap offset. Returns the handle, the GPU VA and the mmap offset.
    fn open_local(&self, context: u32, obj: Arc<GlobalFence>) -> Result<(u32, u64, u64)> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let c = st.context(context)?;
        let handle = st.new_handle()?;
        st.fences.reserve(1, GFP_KERNEL)?;
        let ctx = &mut st.contexts[c];
        let proc_va = ctx.reserve_va(1)?;
        obj.map_local(&mut ctx.space, proc_va)?;
        let pgoff = {
            let mut objects = self.core.objects();
            objects.fences.local_handles += 1;
            objects.new_pgoff(1)
        };
        let global = obj.global();
        st.fences.push(
            Fence {
                handle,
                context,
                global,
                registered: false,
                kind: fence::FenceKind::Default,
                storage: FenceStorage::Shared {
                    obj,
                    proc_va,
                    pgoff,
                },
            },
            GFP_KERNEL,
        )?;
        Ok((handle, proc_va, pgoff << mmu::PAGE_SHIFT))
    }

    /// `EXPORT_FENCE`: an fd holding a reference to a shared fence's global object (SHR-05).
    fn export_fence(&self, arg: usize) -> Result {
        let mut a: uapi::ExportFence = read_arg(arg)?;
        let obj = {
            let st = self.state.lock();
            match &st.fences[st.fence(a.handle)?].storage {
                FenceStorage::Shared { obj, .. } => obj.clone(),
                _ => return Err(EINVAL),
            }
        };
        let fd = kernel::fs::file::FileDescriptorReservation::get_unused_fd_flags(
            kernel::fs::file::flags::O_CLOEXEC,
        )?;
        let file = ffi::fence_file(obj)?;
        a.fd = i32::try_from(fd.reserved_fd())?;
        write_arg(arg, &a)?;
        fd.fd_install(file);
        Ok(())
    }

    /// `IMPORT_FENCE`: a local handle on the global object an exported fd names (SHR-02).
    fn import_fence(&self, a: &mut uapi::ImportFence) -> Result {
        if a.pad != 0 || a.pad2 != 0 {
            return Err(EINVAL);
        }
        let obj = ffi::fence_of_fd(a.fd)?;
        if !obj.is_on(&self.core) {
            return Err(EXDEV);
        }
        (a.handle, a.gpu_va, a.mmap_offset) = self.open_local(a.context, obj)?;
        a.page_offset = 0;
        Ok(())
    }

    /// `WAIT_FENCE_EVENTFD`: registered under the file lock, so the handle cannot go away
    /// meanwhile.
    fn wait_fence_eventfd(&self, w: &uapi::FenceEventWait) -> Result {
        let st = self.state.lock();
        let (global, monitored, current, offset) = cpu_fence_of(&st, w.handle)?;
        fencewait::wait_eventfd(
            &self.core,
            self.owner(),
            w.handle,
            global,
            !monitored,
            current,
            offset,
            w.value,
            w.eventfd,
        )
    }

    /// `FENCE_DEBUG`.
    fn fence_debug(&self) -> uapi::FenceDebug {
        let mut out = uapi::FenceDebug::default();
        let objects = self.core.objects();
        objects.fences.debug(&mut out);
        out.cpu_waits = objects.cpu_waits();
        out
    }

    /// The global handle, whether it is a monitored fence and its CurrentValue place, for a
    /// CPU operation on fence `handle`; `EPERM` for an INTRA_GPU fence (NF-16).
    fn cpu_fence(&self, handle: u32) -> Result<(u64, bool, Arc<DmaBuf>, usize)> {
        cpu_fence_of(&self.state.lock(), handle)
    }

    /// `SIGNAL_FENCE`: CPU signal through the device (a monitored fence: a CPU store to its
    /// value page), then the waits it satisfies complete.
    fn signal_fence(&self, op: &uapi::FenceOp) -> Result {
        if op.pad != 0 {
            return Err(EINVAL);
        }
        let (global, monitored, current, offset) = self.cpu_fence(op.handle)?;
        if monitored {
            let wrap32 = self.core.wrap32();
            kring::check_window(wrap32, current.read64(offset), op.value, true)?;
            self.core.signal_monitored(&current, offset, op.value);
        } else {
            self.core.signal_fence(global, op.value)?;
        }
        fencewait::complete(&self.core);
        Ok(())
    }

    /// `WAIT_FENCE`: the CPU-wait machinery of `WAIT_PROGRESS`.
    fn wait_fence(&self, op: &uapi::FenceOp) -> Result {
        if op.pad != 0 {
            return Err(EINVAL);
        }
        let (global, monitored, current, offset) = self.cpu_fence(op.handle)?;
        let wrap32 = monitored && self.core.wrap32();
        kring::check_window(wrap32, current.read64(offset), op.value, false)?;
        self.core.wait_fence(
            global,
            monitored,
            &current,
            offset,
            op.value,
            timeout_ms(op.timeout_ns),
        )
    }

    /// `FENCE_INFO`: values as the module sees them (INTRA_GPU: CurrentValue 0, unreadable by
    /// the CPU; MonitoredValue UINT64_MAX, since no CPU wait is possible; MONITORED:
    /// MonitoredValue UINT64_MAX, since it has none).
    fn fence_info(&self, a: &mut uapi::FenceInfo) -> Result {
        let st = self.state.lock();
        let f = &st.fences[st.fence(a.handle)?];
        let ctx = &st.contexts[st.context(f.context)?];
        match &f.storage {
            FenceStorage::System { page, slot, .. } => {
                let p = ctx.fence_pages.get(*page).ok_or(EINVAL)?;
                a.current_value = p.current.read64(*slot * FENCE_STRIDE);
                a.current_segment = uapi::FENCE_SEGMENT_SYSTEM;
                let off = *slot * FENCE_STRIDE;
                (a.monitored_value, a.monitored_segment) = match f.kind {
                    fence::FenceKind::Monitored => (fence::MONITORED_VALUE_NONE, 0),
                    _ => (p.monitored.value(&self.core, f.global, off), p.monitored.segment()),
                };
            }
            FenceStorage::Vram { .. } => {
                a.current_value = 0;
                a.monitored_value = fence::MONITORED_VALUE_NONE;
                a.current_segment = uapi::FENCE_SEGMENT_VRAM;
                a.monitored_segment = uapi::FENCE_SEGMENT_VRAM;
            }
            FenceStorage::Shared { obj, .. } => {
                a.current_value = obj.current().read64(0);
                a.monitored_value = obj.monitored_value();
                a.current_segment = uapi::FENCE_SEGMENT_SYSTEM;
                a.monitored_segment = uapi::FENCE_SEGMENT_SYSTEM;
            }
        }
        a.global_handle = f.global;
        a.pending_waits = self.core.objects().pending_waits(f.global);
        Ok(())
    }
}

/// The global handle, whether it is a monitored fence and its CurrentValue place, for a CPU
/// operation on fence `handle` of `st`; `EPERM` for an INTRA_GPU fence (NF-16).
fn cpu_fence_of(st: &FileState, handle: u32) -> Result<(u64, bool, Arc<DmaBuf>, usize)> {
    let f = &st.fences[st.fence(handle)?];
    let monitored = f.kind == fence::FenceKind::Monitored;
    match &f.storage {
        FenceStorage::System { slot, current, .. } => {
            Ok((f.global, monitored, current.clone(), *slot * FENCE_STRIDE))
        }
        FenceStorage::Shared { obj, .. } => Ok((f.global, false, obj.current().clone(), 0)),
        FenceStorage::Vram { .. } => Err(EPERM),
    }
}

/// Milliseconds of a uapi nanosecond timeout, rounded up.
fn timeout_ms(ns: u64) -> u32 {
    u32::try_from(ns.div_ceil(1_000_000)).unwrap_or(u32::MAX)
}

/// A DEFAULT fence in a slot of one of `ctx`'s fence pages (a new page when none has room, or
/// a page of its own when `shareable`), registered as `global`; whether it got registered.
/// A MONITORED fence (`kind`) always gets a page of its own (its one value page) and is
/// registered with that value only (the device ignores its MonitoredValue place).
fn default_fence(
    core: &Core,
    hw: &mut HwGuard<'_>,
    ctx: &mut Context,
    kind: fence::FenceKind,
    shareable: bool,
    global: u64,
    initial: u64,
) -> Result<(FenceStorage, bool)> {
    let shareable = shareable || kind == fence::FenceKind::Monitored;
    let found = ctx.fence_pages.iter().position(|p| {
        if shareable {
            p.shared && p.used == 0
        } else {
            !p.shared && p.used != u64::MAX
        }
    });
    let page = match found {
        Some(i) => i,
        None => {
            new_fence_page(core, hw, ctx, shareable)?;
            ctx.fence_pages.len() - 1
        }
    };
    let p = ctx.fence_pages.get_mut(page).ok_or(EINVAL)?;
    // CAST: `trailing_ones` of a `u64` is at most 64.
    let slot = p.used.trailing_ones() as usize;
    if slot >= FENCE_SLOTS {
        return Err(ENOSPC);
    }
    p.used |= 1 << slot;
    let off = slot * FENCE_STRIDE;
    p.current.write64(off, initial);
    // Nobody waits yet: no signal may interrupt (MV-02, MV-06).
    p.monitored.clear(off);
    // CAST: below a page.
    let sys = p.sys_va + off as u64;
    let monitored = p.monitored.location(p.sys_va + mmu::PAGE_SIZE, off);
    let storage = FenceStorage::System {
        page,
        slot,
        current: p.current.clone(),
    };
    let registered = fencewait::register(
        core,
        hw,
        global,
        kind,
        mailbox::FenceLocation {
            space: mailbox::LOCATION_SYSTEM_VA,
            address: sys,
            ..Default::default()
        },
        monitored,
    )
    .is_ok();
    Ok((storage, registered))
}

/// Appends a fence page to `ctx`: mapped in the system address space (both pages; only
/// CurrentValue when the MonitoredValues are in VRAM, `optfence`), in the context's address
/// space and at a new mmap offset (CurrentValue only). A page of non-shared fences is optimized
/// when the device offers it (NF-13).
fn new_fence_page(core: &Core, hw: &mut HwGuard<'_>, ctx: &mut Context, shared: bool) -> Result {
    ctx.fence_pages.reserve(1, GFP_KERNEL)?;
    let current = Arc::new(DmaBuf::new(hw.dev()?, 1)?, GFP_KERNEL)?;
    let optimized = !shared && core.info().caps.optimized_default_fence();
    let monitored = MonitoredPage::new(core, hw, optimized)?;
    let mapped = ctx.reserve_va(1).and_then(|proc_va| {
        ctx.space.map_buf(hw.dev()?, proc_va, &current, true)?;
        let mut objects = core.objects();
        core.map_fence_values(hw, &mut objects, &current, monitored.system())
            .map(|sys_va| (proc_va, sys_va, objects.new_pgoff(1)))
            .inspect_err(|_| ctx.space.unmap_range(proc_va, 1))
    });
    let (proc_va, sys_va, pgoff) = match mapped {
        Ok(m) => m,
        Err(e) => {
            monitored.release(core);
            return Err(e);
        }
    };
    ctx.fence_pages.push(
        FencePage {
            current,
            monitored,
            sys_va,
            proc_va,
            pgoff,
            used: 0,
            shared,
        },
        GFP_KERNEL,
    )?;
    Ok(())
}

/// An INTRA_GPU fence: a VRAM page mapped (PTE_VRAM) at a new GPU VA of `ctx`, registered as
/// `global` with both values in VRAM; whether it got registered.
fn intra_gpu_fence(
    core: &Core,
    hw: &mut HwGuard<'_>,
    ctx: &mut Context,
    global: u64,
) -> Result<(FenceStorage, bool)> {
    let offset = optfence::take_vram_page(core).ok_or(ENOSPC)?;
    let mapped = ctx.reserve_va(1).and_then(|va| {
        ctx.space
            .map_vram_page(hw.dev()?, va, offset, true)
            .map(|()| va)
    });
    let gpu_va = match mapped {
        Ok(va) => va,
        Err(e) => {
            core.objects().put_vram_fence_page(offset);
            return Err(e);
        }
    };
    let registered = fencewait::register(
        core,
        hw,
        global,
        fence::FenceKind::IntraGpu,
        mailbox::FenceLocation {
            space: mailbox::LOCATION_VRAM,
            address: offset,
            ..Default::default()
        },
        mailbox::FenceLocation {
            space: mailbox::LOCATION_VRAM,
            address: offset + VRAM_MONITORED_OFFSET,
            ..Default::default()
        },
    )
    .is_ok();
    Ok((FenceStorage::Vram { offset, gpu_va }, registered))
}

/// Unregisters `f` and gives back its slot (DEFAULT) or its VRAM page and GPU VA (INTRA_GPU);
/// a local handle on a shared fence is unmapped from its context and drops its reference, the
/// last one destroying the global object (SHR-03, SHR-04). The hardware must not be locked.
fn destroy_fence(core: &Core, ctx: &mut Context, f: Fence) {
    if f.registered {
        fencewait::unregister(core, f.global);
    }
    match f.storage {
        FenceStorage::Shared { obj, proc_va, .. } => {
            obj.unmap_local(&mut ctx.space, proc_va);
            {
                let mut objects = core.objects();
                objects.fences.local_handles = objects.fences.local_handles.saturating_sub(1);
            }
            drop(obj);
        }
        FenceStorage::System { page, slot, .. } => {
            if let Some(p) = ctx.fence_pages.get_mut(page) {
                p.used &= !(1 << slot);
            }
        }
        FenceStorage::Vram { offset, gpu_va } => {
            let before = ctx.space.mapped_pages();
            ctx.space.unmap_range(gpu_va, 1);
            core.add_gpu_pages(before, ctx.space.mapped_pages());
            core.objects().put_vram_fence_page(offset);
        }
    }
}

/// Unmaps `ctx`'s fence pages; the CurrentValue pages go to `retired` (the process may have
/// them mapped).
fn release_fence_pages(core: &Core, ctx: &mut Context, retired: &mut KVec<Arc<DmaBuf>>) {
    while let Some(p) = ctx.fence_pages.pop() {
        let before = ctx.space.mapped_pages();
        ctx.space.unmap_range(p.proc_va, 1);
        core.add_gpu_pages(before, ctx.space.mapped_pages());
        let mut objects = core.objects();
        if let Ok(system) = objects.system() {
            let before = system.mapped_pages();
            system.unmap_range(p.sys_va, 2);
            core.add_gpu_pages(before, system.mapped_pages());
        }
        drop(objects);
        p.monitored.release(core);
        // As in `destroy_queue`: callers reserved room.
        let _ = retired.push(p.current, GFP_KERNEL);
    }
}

/// Process termination, before `release` destroys the file's objects; whether it took the
/// normal path. Every step goes to `rec` (`DEBUG_STATS`).
///
/// Normal (TERM-01..03): every doorbell is disconnected first (DISCONNECTED_ABORT), then the
/// release waits (at most [`CLOSE_DRAIN_TIMEOUT_MS`] in all, interruptibly) until every queue
/// reached its last queued progress value (kernel-mode: the highest submitted; user-mode: the
/// doorbell's LastQueuedValue), so the work queued before the exit finishes; the ring
/// allocations stay mapped meanwhile. Abnormal, a process killed by a signal (TERM-04, TERM-05):
/// its doorbells are marked in error (DISCONNECTED_ABORT for good), the contexts of its queues
/// are suspended, and only then are the doorbells disconnected. A drain that does not finish
/// (timeout, a signal, a faulted context) ends the same way: mark, then suspend the contexts of
/// the queues that did not get there.
fn drain_or_suspend(
    core: &Core,
    st: &mut FileState,
    stats: &TermStats,
    rec: &mut term::Record,
) -> bool {
    if st.queues.is_empty() {
        return true;
    }
    if ffi::killed_by_signal() {
        let mut all = KVec::<u32>::new();
        for q in st.queues.iter() {
            add_context(st, q, &mut all);
        }
        mark_and_suspend(core, st, rec, all);
        rec.step(core, uapi::TERM_STEP_DISCONNECT);
        disconnect_all(core, st);
        return false;
    }
    rec.step(core, uapi::TERM_STEP_DISCONNECT);
    disconnect_all(core, st);
    stats.draining(true);
    let stuck = drain(core, st, rec);
    stats.draining(false);
    if stuck.is_empty() {
        rec.step(core, uapi::TERM_STEP_WAIT_SATISFIED);
        return true;
    }
    rec.step(core, uapi::TERM_STEP_WAIT_TIMED_OUT);
    mark_and_suspend(core, st, rec, stuck);
    false
}

/// Waits for every queue's last queued progress value; the device ids of the contexts of the
/// queues that did not get there.
fn drain(core: &Core, st: &FileState, rec: &mut term::Record) -> KVec<u32> {
    let mut budget = CLOSE_DRAIN_TIMEOUT_MS;
    let mut stuck = KVec::<u32>::new();
    for q in st.queues.iter() {
        let Some(f) = q.fence.as_ref() else {
            continue;
        };
        let target = match st.doorbells.iter().find(|d| d.queue == q.handle) {
            Some(d) => d.db.last_queued.read64(0),
            None => q.last_submitted,
        };
        if crate::kring::reached(core.wrap32(), f.current.read64(0), target) {
            continue;
        }
        rec.waited += 1;
        let start = kernel::time::Instant::<kernel::time::Monotonic>::now();
        let drained = budget > 0
            && core
                .wait_fence(f.handle, core.wrap32(), &f.current, 0, target, budget)
                .is_ok();
        let spent = u32::try_from(start.elapsed().as_millis()).unwrap_or(u32::MAX);
        budget = budget.saturating_sub(spent);
        if !drained {
            rec.timed_out += 1;
            add_context(st, q, &mut stuck);
        }
    }
    stuck
}

/// Adds the device id of `q`'s context to `ids` (once).
fn add_context(st: &FileState, q: &Queue, ids: &mut KVec<u32>) {
    if let Ok(c) = st.context(q.context) {
        let id = st.contexts[c].id;
        if !ids.contains(&id) {
            // Out of memory: that context is not suspended; its queues are destroyed anyway.
            let _ = ids.push(id, GFP_KERNEL);
        }
    }
}

/// The abnormal steps: the process's doorbells are marked in error, then `contexts` suspended.
fn mark_and_suspend(core: &Core, st: &FileState, rec: &mut term::Record, contexts: KVec<u32>) {
    rec.step(core, uapi::TERM_STEP_MARK_ERROR);
    for d in st.doorbells.iter() {
        doorbell::mark_error(&d.db);
    }
    rec.step(core, uapi::TERM_STEP_SUSPEND);
    if let Ok(mut hw) = core.hw() {
        for id in contexts {
            dev_dbg!(
                core.device(),
                "close with unfinished work: suspending context {}\n",
                id
            );
            let _ = doorbell::suspend_context(core, &mut hw, id, true);
        }
    }
}

/// Disconnects every doorbell of the file (DISCONNECTED_ABORT).
fn disconnect_all(core: &Core, st: &FileState) {
    if let Ok(mut hw) = core.hw() {
        for d in st.doorbells.iter() {
            doorbell::disconnect(core, &mut hw, &d.db, DoorbellStatus::DisconnectedAbort);
        }
    }
}

/// Creates on the device what `q` needs: progress fence, kernel ring (kernel-mode), the queue.
/// On error `q` holds what was made, for [`destroy_queue`].
fn build_queue(
    core: &Core,
    hw: &mut HwGuard<'_>,
    ctx: &mut Context,
    q: &mut Queue,
    a: &uapi::CreateQueue,
    pgoff: u64,
    user_allocs: Option<(u32, u32, u64, u64)>,
) -> Result {
    // The progress fence.
    let current = Arc::new(DmaBuf::new(hw.dev()?, 1)?, GFP_KERNEL)?;
    let monitored = DmaBuf::new(hw.dev()?, 1)?;
    monitored.write64(0, fence::MONITORED_VALUE_NONE);
    let (handle, sys_va) = {
        let mut objects = core.objects();
        let handle = objects.take_fence_handle();
        let sys_va = objects.system_va(2);
        let system = objects.system()?;
        let before = system.mapped_pages();
        system.map_buf(hw.dev()?, sys_va, &current, true)?;
        if let Err(e) = system.map_buf(hw.dev()?, sys_va + mmu::PAGE_SIZE, &monitored, true) {
            system.unmap_range(sys_va, 1);
            return Err(e);
        }
        core.add_gpu_pages(before, system.mapped_pages());
        (handle, sys_va)
    };
    let proc_va = ctx.reserve_va(1)?;
    q.fence = Some(ProgressFence {
        handle,
        current: current.clone(),
        monitored,
        sys_va,
        proc_va: 0,
        pgoff,
        registered: false,
    });
    ctx.space.map_buf(hw.dev()?, proc_va, &current, true)?;
    let f = q.fence.as_mut().ok_or(EINVAL)?;
    f.proc_va = proc_va;
    // A device without 64-bit atomics has no native fences (N14): there the progress fence is
    // a monitored fence (32-bit values, every signal interrupts).
    let kind = if core.wrap32() {
        fence::FenceKind::Monitored
    } else {
        fence::FenceKind::Default
    };
    let mut reg = mailbox::RegisterFenceArgs {
        handle,
        kind: kind as u32,
        current_value: mailbox::FenceLocation {
            space: mailbox::LOCATION_SYSTEM_VA,
            address: sys_va,
            ..Default::default()
        },
        monitored_value: mailbox::FenceLocation {
            space: mailbox::LOCATION_SYSTEM_VA,
            address: sys_va + mmu::PAGE_SIZE,
            ..Default::default()
        },
        ..Default::default()
    };
    hw.command(Opcode::RegisterFence, &mut reg, &[])?;
    f.registered = true;

    // The ring.
    if let Some((_, _, ring_va, control_va)) = user_allocs {
        q.ring_va = ring_va;
        q.control_va = control_va;
    } else {
        let (ring_pages, packet_pages) = KernelRing::pages(a.ring_entries);
        let ring_va = ctx.reserve_va(ring_pages)?;
        let control_va = ctx.reserve_va(1)?;
        let packets_va = ctx.reserve_va(packet_pages)?;
        let monitored = kind == fence::FenceKind::Monitored;
        let kring = KernelRing::new(
            hw.dev()?,
            a.ring_entries,
            packets_va,
            proc_va,
            handle,
            monitored,
        )?;
        // From here `destroy_queue` unmaps all three ranges (unmapping a hole is harmless).
        q.ring_va = ring_va;
        q.control_va = control_va;
        q.kring = Some(kring.clone());
        ctx.space.map_buf(hw.dev()?, ring_va, &kring.ring, false)?;
        ctx.space
            .map_buf(hw.dev()?, control_va, &kring.control, true)?;
        ctx.space
            .map_buf(hw.dev()?, packets_va, &kring.packets, false)?;
    }

    // The queue.
    let id = core.objects().take_queue_id().ok_or(ENOSPC)?;
    let mut cq = mailbox::CreateQueueArgs {
        id,
        context: ctx.id,
        engine: a.engine,
        priority: a.priority,
        flags: if q.kring.is_none() {
            mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION
        } else {
            0
        },
        ring_entries: a.ring_entries,
        ring_va: q.ring_va,
        ring_control_va: q.control_va,
        ..Default::default()
    };
    if let Err(e) = hw.command(Opcode::CreateQueue, &mut cq, &[]) {
        core.objects().put_queue_id(id);
        return Err(e);
    }
    q.id = Some(id);
    if let Some(kring) = &q.kring {
        kring.set_id(core, id);
    }
    core.objects().count(Kind::Queue, true);
    if core.info().caps.native_fence() {
        crate::fencelog::attach(core, hw, id)?;
    }
    Ok(())
}

/// Destroys `q` on the device (if `hw`) and unmaps and releases its memory; the progress page
/// goes to `retired` (the process may have it mapped).
fn destroy_queue(
    core: &Core,
    mut hw: Option<&mut HwGuard<'_>>,
    ctx: &mut Context,
    q: Queue,
    retired: &mut KVec<Arc<DmaBuf>>,
) {
    let before = ctx.space.mapped_pages();
    if let Some(id) = q.id {
        // Completes once no engine executes the queue. A queue the device would not destroy
        // keeps its id, so it is never handed out twice.
        let destroyed = match hw.as_deref_mut() {
            Some(hw) => object_command_checked(hw, Opcode::DestroyQueue, id).is_ok(),
            None => true,
        };
        crate::fencelog::detach(core, hw.as_deref_mut(), id, destroyed);
        let mut objects = core.objects();
        if destroyed {
            objects.put_queue_id(id);
        }
        objects.count(Kind::Queue, false);
    }
    if let Some(kring) = &q.kring {
        ctx.space.unmap_range(q.ring_va, kring.ring.pages());
        ctx.space.unmap_range(q.control_va, 1);
        ctx.space
            .unmap_range(kring.packets_va, kring.packets.pages());
    }
    if let Some(f) = q.fence {
        if f.registered {
            if let Some(hw) = hw {
                let mut args = mailbox::FenceHandleArgs {
                    handle: f.handle,
                    ..Default::default()
                };
                let _ = hw.command(Opcode::UnregisterFence, &mut args, &[]);
            }
        }
        if f.proc_va != 0 {
            ctx.space.unmap_range(f.proc_va, 1);
        }
        let mut objects = core.objects();
        if let Ok(system) = objects.system() {
            let before = system.mapped_pages();
            system.unmap_range(f.sys_va, 2);
            core.add_gpu_pages(before, system.mapped_pages());
        }
        drop(objects);
        drop(f.monitored);
        // `reserve` was called by every caller with a queue to destroy; if the push still
        // fails, the page is freed now, which only a (buggy) mapping could observe.
        let _ = retired.push(f.current, GFP_KERNEL);
    }
    core.add_gpu_pages(before, ctx.space.mapped_pages());
}

/// Unmaps allocation `a` from `ctx` and counts it gone.
fn unmap_alloc(core: &Core, ctx: &mut Context, a: &Allocation) {
    let before = ctx.space.mapped_pages();
    ctx.space.unmap_range(a.gpu_va, a.buf.pages());
    core.add_gpu_pages(before, ctx.space.mapped_pages());
    core.objects().count(Kind::Allocation, false);
}

/// Destroys `ctx` and its address space on the device, then frees its page tables.
fn destroy_context(core: &Core, ctx: Context) {
    if let Ok(mut hw) = core.hw() {
        object_command(&mut hw, Opcode::DestroyContext, ctx.id);
        object_command(&mut hw, Opcode::DestroyAddressSpace, ctx.space.id());
    }
    core.add_gpu_pages(ctx.space.mapped_pages(), 0);
    let mut objects = core.objects();
    objects.put_context_ids(ctx.space.id(), ctx.id);
    objects.count(Kind::Context, false);
}

/// Runs a command naming one object; failures are logged by [`HwGuard::command`].
fn object_command(hw: &mut HwGuard<'_>, opcode: Opcode, id: u32) {
    let _ = object_command_checked(hw, opcode, id);
}

/// Runs a command naming one object.
fn object_command_checked(hw: &mut HwGuard<'_>, opcode: Opcode, id: u32) -> Result {
    let mut args = mailbox::ObjectArgs {
        id,
        ..Default::default()
    };
    hw.command(opcode, &mut args, &[])
}

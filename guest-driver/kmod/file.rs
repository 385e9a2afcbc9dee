// SPDX-License-Identifier: GPL-2.0

//! Layer 5, the front end: one misc device, `/dev/belfry<N>`, per bound device, with the ioctls
//! of `abi::uapi` and `mmap` of allocations, fence pages, progress pages and doorbell pages.
//!
//! The front end validates arguments (errno conventions in `uapi.rs`: every argument is checked
//! before anything changes) and keeps the per-file bookkeeping ([`state`]); every device
//! sequence is the domain layer's. One file per ioctl family: [`context`] (contexts, memory),
//! [`queue`] (queues, submission, GPU waits, progress waits), [`doorbell`], [`fence`], [`info`]
//! (capabilities, statistics, timeline); [`release`] is process termination. The device-wide
//! debug reads ([`DEVICE_WIDE_DEBUG`]) need `CAP_PERFMON` or `CAP_SYS_ADMIN`, as the whole
//! timeline does: they describe every process's work. Each open file
//! owns what it creates; memory a process may still have mapped (allocations, progress pages)
//! is kept until `release`: a mapping holds a reference to the file, so by then no mapping
//! remains.
//!
//! How to add an ioctl: its number and argument struct go in `device/abi/src/uapi.rs` (or
//! `uapi_debug.rs`) and its row in the abi's `for_each_ioctl!` list; its body is a `BelfryFile` method in the
//! family file, which checks the argument, finds the file's objects by handle and calls the
//! domain layer; a creating ioctl goes through [`args::create_copy_out`] with its destroy
//! method; the dispatch below gets one line.

mod args;
mod context;
mod doorbell;
mod fence;
mod info;
mod mm;
mod queue;
mod release;
mod state;

use kernel::{
    device::Device,
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::VmaNew,
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

use self::{
    args::{create_copy_out, read_arg, read_handle, write_arg},
    state::{BelfryFile, FileState},
};
use crate::{
    abi::{uapi, uapi_debug, uapi_sync},
    bindings::{
        cap,
        mm::{map_pages, vma_pgoff, FileMapping},
        pfnmap, vmaref,
    },
    caps::NativeFenceFeature,
    gpu::Gpu,
    hw::shares::ShareOwner,
    power::DevicePower,
    term::TermStats,
    MAX_DEVICES,
};

/// The debug ioctls that read device-wide state — counters (`DEBUG_STATS`, `FENCE_DEBUG`,
/// `IRQ_DEBUG`), timing stamps (`WAKE_PATH`, `MAILBOX_TIMING`), recovery and power steps
/// (`RECOVERY_DEBUG`, `POWER_DEBUG`, `DEVICE_POWER`), the module-wide teardown counters
/// (`TEARDOWN_DEBUG`): `EPERM` for a caller without `CAP_PERFMON` or `CAP_SYS_ADMIN`
/// ([`cap::perfmon_capable`]). `MM_STATS` keeps its device facts for everyone
/// (`BelfryFile::mm_stats`).
const DEVICE_WIDE_DEBUG: [u32; 9] = [
    uapi_debug::IOCTL_DEBUG_STATS,
    uapi_debug::IOCTL_FENCE_DEBUG,
    uapi_debug::IOCTL_IRQ_DEBUG,
    uapi_debug::IOCTL_WAKE_PATH,
    uapi_debug::IOCTL_MAILBOX_TIMING,
    uapi_debug::IOCTL_RECOVERY_DEBUG,
    uapi_debug::IOCTL_POWER_DEBUG,
    uapi_debug::IOCTL_DEVICE_POWER,
    uapi_debug::IOCTL_TEARDOWN_DEBUG,
];

/// Names of the misc devices, by device slot (`MiscDeviceOptions` wants a `&'static CStr`).
static NAMES: [&CStr; MAX_DEVICES] = [
    c"belfry0", c"belfry1", c"belfry2", c"belfry3", c"belfry4", c"belfry5", c"belfry6", c"belfry7",
    c"belfry8", c"belfry9", c"belfry10", c"belfry11", c"belfry12", c"belfry13", c"belfry14", c"belfry15",
];

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
    /// The device's domain objects, which the files program the device through.
    gpu: Gpu,
    /// The device's power.
    power: Arc<DevicePower>,
    /// The native-fence feature as negotiated at probe (CAP-01).
    feature: NativeFenceFeature,
    /// Termination statistics of the device.
    term: Arc<TermStats>,
}

impl Registration {
    /// Registers `/dev/belfry<index>` for `gpu`.
    ///
    /// # Errors
    ///
    /// `EINVAL` if `index` is not below `MAX_DEVICES`, or the error of `misc_register`.
    pub(crate) fn new(index: usize, gpu: Gpu, power: Arc<DevicePower>) -> impl PinInit<Self, Error> {
        pin_init::pin_init_scope(move || {
            let name = *NAMES.get(index).ok_or(EINVAL)?;
            let term = TermStats::new()?;
            Ok(try_pin_init!(Self {
                gpu,
                power,
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

#[vtable]
impl MiscDevice for BelfryFile {
    type Ptr = Pin<KBox<Self>>;

    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let reg = Registration::from_misc(misc);
        let dev: ARef<Device> = ARef::from(misc.device());
        // A dead binding (a function reset or a silent mailbox took it; its reprobe has not
        // unbound it yet) gives no file: every ioctl on one would answer `ENODEV`, and an
        // opener retrying gets the new binding.
        if reg.gpu.core.is_revoked() || reg.gpu.core.is_wedged() {
            return Err(ENODEV);
        }
        dev_dbg!(dev, "belfry{}: open\n", reg.index);
        KBox::try_pin_init(
            try_pin_init!(Self {
                dev,
                index: reg.index,
                gpu: reg.gpu.clone(),
                power: reg.power.clone(),
                feature: reg.feature,
                term: reg.term.clone(),
                ioctls: Atomic::new(0),
                mapping: FileMapping::of(file),
                opener: ARef::from(kernel::current!().group_leader()),
                share_owner: ShareOwner::current()?,
                state <- new_mutex!(FileState::new()),
                split_done <- new_condvar!(),
            }? Error),
            GFP_KERNEL,
        )
    }

    fn release(this: Pin<KBox<Self>>, _file: &File) {
        dev_dbg!(this.dev, "belfry{}: release\n", this.index);
        // Termination programs the device: in D0 (if the resume fails, it fails like an
        // unbound device's, with the mailbox refusing).
        let power = this.power.clone();
        let busy = power.busy(false);
        this.terminate();
        drop(busy);
    }

    fn mmap(this: Pin<&BelfryFile>, _file: &File, vma: &VmaNew) -> Result {
        // Only shared mappings: a private (copy-on-write) one would not reach the device, and
        // `vmf_insert_pfn` refuses (BUG_ON) a VM_PFNMAP copy-on-write mapping.
        if vma.flags() & kernel::mm::virt::flags::MAYSHARE == 0 {
            return Err(EINVAL);
        }
        // A file of a gone binding maps nothing (unbind revokes the core, then every pfn
        // mapping; a mapping made between the two shows what the revoked target shows).
        if this.gpu.core.is_revoked() {
            return Err(ENODEV);
        }
        let pgoff = vma_pgoff(vma);
        let st = this.state.lock();
        // A ring in VRAM: a pfn mapping that follows the allocation (BAR page or system page).
        if let Some(v) = st
            .queues
            .iter()
            .flat_map(|q| q.vram_ring.iter())
            .filter_map(|(_, a)| a.cpu_view())
            .find(|v| v.pgoff == pgoff)
        {
            return pfnmap::map(vma, v.target.clone());
        }
        let (buf, read_only) = if let Some(a) = st.allocs.iter().find(|a| a.pgoff == pgoff) {
            (a.buf.clone(), false)
        } else if let Some(d) = st.doorbells.iter().find(|d| d.db.pgoffs.contains(&pgoff)) {
            if pgoff == d.db.pgoffs[0] {
                return pfnmap::map(vma, d.db.target.clone());
            }
            if pgoff == d.db.pgoffs[1] {
                (d.db.status.clone(), true)
            } else {
                (d.db.last_queued.clone(), false)
            }
        } else if let Some(f) = st
            .queues
            .iter()
            .filter_map(|q| q.hwq.fence.as_ref())
            .find(|f| f.pgoff == pgoff)
        {
            (f.current.clone(), true)
        } else if let Some(current) = st.contexts.iter().find_map(|c| c.fence_pages.find(pgoff)) {
            // CurrentValue: read-only for the process (FEN-03, NF-03).
            (current.clone(), true)
        } else if let Some(current) = st.fences.iter().find_map(|f| f.fence.shared_page(pgoff)) {
            (current.clone(), true)
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
        // SAFETY: `buf`'s pages are kept alive by the mapping's own reference (below) until
        // every copy of the mapping is gone; the mapping is shared (checked above).
        unsafe { map_pages(vma, &buf.region()) }?;
        // SAFETY: The VMA is mapped and nothing fails after this; a `remap_pfn_range` mapping has
        // no `vm_ops` or `vm_private_data` of its own.
        unsafe { vmaref::hold(vma, buf) };
        Ok(())
    }

    fn ioctl(this: Pin<&BelfryFile>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        this.ioctls.add(1, Relaxed);
        let this = this.get_ref();
        // The device-wide debug reads are refused before they could wake the device.
        if DEVICE_WIDE_DEBUG.contains(&cmd) && !cap::perfmon_capable() {
            return Err(EPERM);
        }
        // Every ioctl holds the device in D0 (resuming it from D3 first: PWR-03, PWR-04).
        let _busy = this.power.busy(cmd == uapi::IOCTL_CONNECT_DOORBELL)?;
        match cmd {
            uapi::IOCTL_QUERY_CAPS => write_arg(arg, &this.query_caps())?,
            uapi_debug::IOCTL_DEBUG_STATS => write_arg(arg, &this.debug_stats())?,
            uapi::IOCTL_CREATE_CONTEXT => create_copy_out(
                arg,
                |a: &mut uapi::CreateContext| this.create_context(a),
                |a| a.handle,
                |h| this.destroy_context(h),
            )?,
            uapi::IOCTL_DESTROY_CONTEXT => this.destroy_context(read_handle(arg)?)?,
            uapi::IOCTL_ALLOC => create_copy_out(
                arg,
                |a: &mut uapi::Alloc| this.alloc(a),
                |a| a.handle,
                |h| this.free(h),
            )?,
            uapi::IOCTL_FREE => this.free(read_handle(arg)?)?,
            uapi::IOCTL_CREATE_QUEUE => create_copy_out(
                arg,
                |a: &mut uapi::CreateQueue| this.create_queue(a),
                |a| a.handle,
                |h| this.destroy_queue(h),
            )?,
            uapi::IOCTL_DESTROY_QUEUE => this.destroy_queue(read_handle(arg)?)?,
            uapi::IOCTL_SUBMIT => this.submit(&read_arg(arg)?)?,
            uapi::IOCTL_QUEUE_WAIT_FENCE => this.queue_fence_op(&read_arg(arg)?, false)?,
            uapi::IOCTL_QUEUE_SIGNAL_FENCE => this.queue_fence_op(&read_arg(arg)?, true)?,
            uapi::IOCTL_WAIT_PROGRESS => this.wait_progress(&read_arg(arg)?)?,
            uapi::IOCTL_CREATE_DOORBELL => create_copy_out(
                arg,
                |a: &mut uapi::CreateDoorbell| this.create_doorbell(a),
                |a| a.handle,
                |h| this.destroy_doorbell(h),
            )?,
            uapi::IOCTL_SUSPEND_CONTEXT => this.suspend_context(read_handle(arg)?, true)?,
            uapi::IOCTL_RESUME_CONTEXT => this.suspend_context(read_handle(arg)?, false)?,
            uapi::IOCTL_DESTROY_DOORBELL => this.destroy_doorbell(read_handle(arg)?)?,
            uapi::IOCTL_DISCONNECT_DOORBELL => this.disconnect_doorbell(&read_arg(arg)?)?,
            uapi::IOCTL_CONNECT_DOORBELL => this.connect_doorbell(read_handle(arg)?)?,
            uapi::IOCTL_CREATE_FENCE => create_copy_out(
                arg,
                |a: &mut uapi::CreateFence| this.create_fence(a),
                |a| a.handle,
                |h| this.destroy_fence(h),
            )?,
            uapi::IOCTL_DESTROY_FENCE => this.destroy_fence(read_handle(arg)?)?,
            uapi::IOCTL_SIGNAL_FENCE => this.signal_fence(&read_arg(arg)?)?,
            uapi::IOCTL_WAIT_FENCE => this.wait_fence(&read_arg(arg)?)?,
            uapi_debug::IOCTL_FENCE_INFO => {
                let mut a: uapi_debug::FenceInfo = read_arg(arg)?;
                this.fence_info(&mut a)?;
                write_arg(arg, &a)?;
            }
            uapi::IOCTL_EXPORT_FENCE => this.export_fence(arg)?,
            uapi::IOCTL_IMPORT_FENCE => create_copy_out(
                arg,
                |a: &mut uapi::ImportFence| this.import_fence(a),
                |a| a.handle,
                |h| this.destroy_fence(h),
            )?,
            uapi::IOCTL_WAIT_FENCE_EVENTFD => this.wait_fence_eventfd(&read_arg(arg)?)?,
            uapi::IOCTL_CANCEL_FENCE_EVENTFD => this.cancel_fence_eventfd(&read_arg(arg)?)?,
            uapi_debug::IOCTL_FENCE_DEBUG => write_arg(arg, &this.fence_debug())?,
            uapi_debug::IOCTL_XAD_INFO => {
                let mut a: uapi_debug::XadInfo = read_arg(arg)?;
                this.xad_info(&mut a)?;
                write_arg(arg, &a)?;
            }
            uapi::IOCTL_NOTIFY_WORK => this.notify_work(read_handle(arg)?)?,
            uapi_debug::IOCTL_READ_TIMELINE => {
                let mut a: uapi_debug::ReadTimeline = read_arg(arg)?;
                this.read_timeline(&mut a)?;
                write_arg(arg, &a)?;
            }
            uapi_debug::IOCTL_IRQ_DEBUG => write_arg(arg, &this.irq_debug())?,
            uapi::IOCTL_IRQ_MODERATION => {
                let mut a: uapi::IrqModeration = read_arg(arg)?;
                this.irq_moderation(&mut a)?;
                write_arg(arg, &a)?;
            }
            uapi::IOCTL_VERBOSE_LOG => {
                let mut a: uapi::VerboseLog = read_arg(arg)?;
                this.verbose_log(&mut a)?;
                write_arg(arg, &a)?;
            }
            uapi_debug::IOCTL_WAKE_PATH => write_arg(arg, &this.gpu.core.wake_path())?,
            uapi_debug::IOCTL_MAILBOX_TIMING => write_arg(arg, &this.gpu.core.mailbox_timing())?,
            uapi_debug::IOCTL_RECOVERY_DEBUG => write_arg(arg, &this.recovery_debug())?,
            uapi_debug::IOCTL_POWER_DEBUG => write_arg(arg, &this.power_debug())?,
            uapi_debug::IOCTL_DEVICE_POWER => write_arg(arg, &this.power.stats())?,
            uapi_sync::IOCTL_WAIT_FENCES => this.wait_fences(arg)?,
            uapi_sync::IOCTL_EXPORT_SYNC_FILE => this.export_sync_file(arg)?,
            uapi_sync::IOCTL_CONTEXT_STATUS => {
                let mut a: uapi_sync::ContextStatus = read_arg(arg)?;
                this.context_status(&mut a)?;
                write_arg(arg, &a)?;
            }
            uapi::IOCTL_CREATE_ALLOCATION => create_copy_out(
                arg,
                |a: &mut uapi::CreateAllocation| this.create_allocation(a),
                |a| a.handle,
                |h| this.destroy_allocation(h),
            )?,
            uapi::IOCTL_DESTROY_ALLOCATION => this.destroy_allocation(read_handle(arg)?)?,
            uapi::IOCTL_ALLOCATION_RW => this.allocation_rw(&read_arg(arg)?)?,
            uapi::IOCTL_SUBMIT_SPLIT => {
                let mut s: uapi::SubmitSplit = read_arg(arg)?;
                this.submit_split(&mut s)?;
                write_arg(arg, &s)?
            }
            uapi::IOCTL_MM_STATS => write_arg(arg, &this.mm_stats())?,
            uapi_debug::IOCTL_TEARDOWN_DEBUG => write_arg(arg, &crate::hw::quarantine::stats())?,
            _ => return Err(ENOTTY),
        }
        Ok(0)
    }
}

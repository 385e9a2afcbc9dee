// SPDX-License-Identifier: GPL-2.0

//! The raw `kernel::bindings` uses of the driver, kept in this one file.
//!
//! Each fills a gap of the Linux 7.3 Rust abstractions:
//! - [`pci_device_id`]: `pci::DeviceId::from_id` takes a `pci::Vendor`, and 7.3's `pci::Vendor`
//!   has no public constructor for an id outside its list (QEMU's `0x1234` is not in it);
//! - [`EnabledDevice`]: `pci::Device::enable_device_mem` has no counterpart, so nothing would
//!   ever call `pci_disable_device` (which also turns bus mastering off) on unbind;
//! - [`clear_master`]: `pci::Device::set_master` has no counterpart either;
//! - [`vma_pgoff`] and [`dma_mmap`]: `VmaNew` exposes no `vm_pgoff`, and 7.3 has no safe way to
//!   map DMA-coherent memory into a process (`vm_insert_page` wants a `struct page` the
//!   coherent allocation does not promise); `dma_mmap_attrs` is the DMA API's own way;
//! - [`doorbell_mmap`], [`FileMapping`], [`kernel_pfn`]: 7.3 has no `vm_operations_struct`
//!   fault hook, no `unmap_mapping_range` and no pfn insertion (`vm_insert_page` on a VM_PFNMAP
//!   mapping hits a BUG_ON). Doorbell mappings are VM_PFNMAP|VM_IO with a raw `fault` handler
//!   inserting the BAR page's or the dummy page's pfn; connect/disconnect zap the doorbell's
//!   offset so the next access faults again (`../shared/design/GUEST-BRINGUP.md`);
//! - [`native_fences_param`]: 7.3's `module!` parameters are set once and never appear in
//!   sysfs (`perm: 0`); the `native_fences` switch must be writable at
//!   `/sys/module/belfry/parameters/native_fences`, so it is a raw `kernel_param` with the C
//!   `param_ops_bool` and mode 0644;
//! - [`killed_by_signal`]: 7.3's `Task` does not expose `PF_SIGNALED`;
//!   offset so the next access faults again (`../shared/design/GUEST-BRINGUP.md`).
//! - [`fence_file`] and [`fence_of_fd`]: 7.3 has no anonymous-inode file abstraction (the
//!   `anon_inode_getfile` binding is not generated either): an exported shared fence is an
//!   `anon_inode:belfry-fence` file whose `private_data` is one counted reference to its
//!   [`GlobalFence`], given back by our own `release`;
//! - [`EventFd`]: 7.3 has no eventfd abstraction (`eventfd_ctx_fdget`, `eventfd_signal_mask`,
//!   `eventfd_ctx_put`).

use core::{cell::UnsafeCell, mem::ManuallyDrop, ptr::NonNull};

use kernel::{
    bindings,
    device::{Bound, Core, Device},
    error::to_result,
    fs::{file::LocalFile, File},
    mm::virt::VmaNew,
    pci,
    prelude::*,
    sync::{aref::ARef, Arc},
};

use crate::{dmamem::DmaBuf, doorbell::Doorbell, fenceshare::GlobalFence};

/// Equivalent of C's `PCI_DEVICE(vendor, device)`: matches `vendor:device`, any subsystem.
pub(crate) const fn pci_device_id(vendor: u16, device: u16) -> pci::DeviceId {
    /// `PCI_ANY_ID`.
    const ANY: u32 = !0;
    let raw = bindings::pci_device_id {
        // CAST: `u16` to `u32` is lossless; `From` is not usable in a `const fn`.
        vendor: vendor as u32,
        // CAST: as above.
        device: device as u32,
        subvendor: ANY,
        subdevice: ANY,
        class: 0,
        class_mask: 0,
        driver_data: 0,
        override_only: 0,
    };
    // SAFETY: `pci::DeviceId` is a `#[repr(transparent)]` wrapper of `bindings::pci_device_id`
    // that adds no invariant (its `RawDeviceId` implementation promises that layout
    // compatibility), and `raw` is exactly what `pci::DeviceId::from_id` builds for a `Vendor`.
    unsafe { core::mem::transmute::<bindings::pci_device_id, pci::DeviceId>(raw) }
}

/// The raw `struct pci_dev` of `pdev`.
fn raw(pdev: &pci::Device<Bound>) -> *mut bindings::pci_dev {
    // CAST: `pci::Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::pci_dev>`
    // (itself transparent); the PCI abstraction casts the same way in its probe callback. The
    // abstraction's own `as_raw()` is private to the `kernel` crate.
    core::ptr::from_ref(pdev)
        .cast::<bindings::pci_dev>()
        .cast_mut()
}

/// A PCI device enabled with `enable_device_mem`; dropping it disables the device again.
pub(crate) struct EnabledDevice<'bound>(&'bound pci::Device<Bound>);

impl<'bound> EnabledDevice<'bound> {
    /// Enables the memory resources of `pdev`.
    ///
    /// # Errors
    ///
    /// The error of `pci_enable_device_mem`.
    pub(crate) fn new(pdev: &'bound pci::Device<Core<'_>>) -> Result<Self> {
        pdev.enable_device_mem()?;
        Ok(Self(pdev))
    }
}

impl Drop for EnabledDevice<'_> {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a valid, bound PCI device that `Self::new` enabled, and this runs
        // once per successful enable.
        unsafe { bindings::pci_disable_device(raw(self.0)) };
    }
}

/// Turns bus mastering off for `pdev`.
pub(crate) fn clear_master(pdev: &pci::Device<Bound>) {
    // SAFETY: `pdev` is a valid, bound PCI device.
    unsafe { bindings::pci_clear_master(raw(pdev)) };
}

/// The mmap offset of `vma`, in pages.
pub(crate) fn vma_pgoff(vma: &VmaNew) -> u64 {
    // SAFETY: `vma.as_ptr()` is the valid `vm_area_struct` being set up by this mmap call, under
    // the mmap lock; reading a plain field is fine.
    let pgoff = unsafe { (*vma.as_ptr()).vm_pgoff };
    // CAST: `c_ulong` is 64 bits on x86-64.
    pgoff as u64
}

/// Maps the first `vma.end() - vma.start()` bytes of `buf` into `vma` with `dma_mmap_attrs`.
///
/// # Errors
///
/// `EINVAL` if the mapping is larger than `buf`, or the error of `dma_mmap_attrs`.
pub(crate) fn dma_mmap(dev: &Device, vma: &VmaNew, buf: &DmaBuf) -> Result {
    let size = vma.end().checked_sub(vma.start()).ok_or(EINVAL)?;
    if size == 0 || size > buf.size() {
        return Err(EINVAL);
    }
    let raw_vma = vma.as_ptr();
    // CAST: `Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::device>` (itself
    // transparent); its own `as_raw()` is private to the `kernel` crate.
    let raw_dev = core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut();
    // SAFETY: `raw_vma` is being set up under the mmap lock. `dma_mmap_attrs` reads `vm_pgoff` as
    // a page offset into the buffer; the module's offset has served its purpose (finding `buf`),
    // so it is reset to 0 first, as DRM's DMA helpers do.
    unsafe { (*raw_vma).vm_pgoff = 0 };
    // SAFETY: `raw_dev` is the device `buf` was allocated for; `buf.cpu_ptr()`,
    // `buf.dma_address()` and `buf.size()` describe that coherent allocation exactly; `raw_vma`
    // is a VMA being set up (no larger than the buffer, checked above). The caller keeps `buf`
    // alive until the file is released, after every mapping of it is gone.
    let ret = unsafe {
        bindings::dma_mmap_attrs(
            raw_dev,
            raw_vma,
            buf.cpu_ptr().cast(),
            buf.dma_address(),
            buf.size(),
            0,
        )
    };
    to_result(ret)
}

/// The page-cache mapping of an open file of a Belfry misc device (`file->f_mapping`: the
/// device inode's, shared by every file of that device), for `unmap_mapping_range`.
#[derive(Clone, Copy)]
pub(crate) struct FileMapping(NonNull<bindings::address_space>);

// SAFETY: An `address_space` may be used from any thread; `FileMapping` only hands it to
// `unmap_mapping_range`, which takes the locks it needs.
unsafe impl Send for FileMapping {}
// SAFETY: As above: no unsynchronised access through a shared `FileMapping`.
unsafe impl Sync for FileMapping {}

impl FileMapping {
    /// The mapping of `file`.
    pub(crate) fn of(file: &File) -> Option<Self> {
        // SAFETY: `file.as_ptr()` is a valid, open `struct file`; `f_mapping` is set at open and
        // not changed afterwards for a character device.
        NonNull::new(unsafe { (*file.as_ptr()).f_mapping }).map(Self)
    }

    /// Zaps every user mapping of the pages `[pgoff, pgoff + pages)`, so the next access faults.
    ///
    /// # Safety
    ///
    /// A file of the device must still be open (it keeps the inode, and so the mapping, alive).
    pub(crate) unsafe fn zap(self, pgoff: u64, pages: u64) {
        let (Ok(start), Ok(len)) = (
            bindings::loff_t::try_from(pgoff << PAGE_SHIFT),
            bindings::loff_t::try_from(pages << PAGE_SHIFT),
        ) else {
            return;
        };
        // SAFETY: The mapping is alive (caller); `start`/`len` are a byte range of it.
        unsafe { bindings::unmap_mapping_range(self.0.as_ptr(), start, len, 1) };
    }
}

/// log2 of the page size.
const PAGE_SHIFT: u32 = 12;

/// The page frame number of the kernel (direct-map) address `ptr`.
pub(crate) fn kernel_pfn(ptr: *mut u8) -> u64 {
    // SAFETY: `slow_virt_to_phys` walks the kernel page tables for any kernel virtual address;
    // callers pass the address of memory they own (a `DmaBuf`).
    unsafe { bindings::slow_virt_to_phys(ptr.cast()) >> PAGE_SHIFT }
}

/// The `vm_operations_struct` of doorbell mappings, shareable between threads.
struct DoorbellVmOps(bindings::vm_operations_struct);

// SAFETY: The table is immutable and holds only function pointers (and null fields).
unsafe impl Sync for DoorbellVmOps {}

/// Doorbell mappings: `open`/`close` count references to the [`Doorbell`] in `vm_private_data`;
/// `fault` inserts the page the doorbell currently shows.
static DOORBELL_VM_OPS: DoorbellVmOps = DoorbellVmOps(bindings::vm_operations_struct {
    open: Some(doorbell_vm_open),
    close: Some(doorbell_vm_close),
    fault: Some(doorbell_vm_fault),
    // SAFETY: Every other field is an optional function pointer, a plain pointer or an integer,
    // for all of which all-zeroes (`None`/null/0) is valid and means "not provided".
    ..unsafe { core::mem::zeroed() }
});

/// `vm_operations_struct::open`: a VMA copy holds one more reference.
///
/// # Safety
///
/// Called by the mm core with a doorbell VMA (one set up by [`doorbell_mmap`]).
unsafe extern "C" fn doorbell_vm_open(vma: *mut bindings::vm_area_struct) {
    // SAFETY: `vma` is a doorbell VMA: its `vm_private_data` came from `Arc::into_raw` in
    // `doorbell_mmap` (or a previous `open`), and that reference is still counted.
    let db = ManuallyDrop::new(unsafe { Arc::from_raw((*vma).vm_private_data.cast::<Doorbell>()) });
    let _ = Arc::into_raw(Arc::clone(&db));
}

/// `vm_operations_struct::close`: drops the VMA's reference.
///
/// # Safety
///
/// Called by the mm core, once per doorbell VMA, when it goes away.
unsafe extern "C" fn doorbell_vm_close(vma: *mut bindings::vm_area_struct) {
    // SAFETY: As in `doorbell_vm_open`; this gives back the VMA's reference exactly once.
    drop(unsafe { Arc::from_raw((*vma).vm_private_data.cast::<Doorbell>()) });
}

/// `vm_operations_struct::fault`: maps the doorbell's current page (the BAR page while
/// connected, its dummy page otherwise).
///
/// # Safety
///
/// Called by the mm core with a fault on a doorbell VMA, under the mmap lock.
unsafe extern "C" fn doorbell_vm_fault(vmf: *mut bindings::vm_fault) -> bindings::vm_fault_t {
    // SAFETY: `vmf` is the fault being handled; its VMA is a doorbell VMA (see `doorbell_vm_open`
    // for `vm_private_data`), alive for the duration of the fault.
    let (vma, address) = unsafe { ((*vmf).__bindgen_anon_1.vma, (*vmf).__bindgen_anon_1.address) };
    // SAFETY: As above; the VMA holds a reference, so the doorbell outlives this borrow.
    let db = unsafe { &*(*vma).vm_private_data.cast::<Doorbell>() };
    db.with_pfn(|pfn| {
        // CAST: a pfn fits `c_ulong` (64 bits on x86-64).
        let pfn = pfn as usize;
        // SAFETY: `vma` is a VM_PFNMAP VMA being faulted under the mmap lock; `address` lies in
        // it (one page). The pfn is the doorbell's BAR page or its own dummy page, both alive
        // while the doorbell (referenced by the VMA) is.
        unsafe { bindings::vmf_insert_pfn(vma, address & !0xfff, pfn) }
    })
}

/// Sets `vma` up as a doorbell mapping of `db`: VM_PFNMAP | VM_IO, one page, pages inserted on
/// fault. `vm_pgoff` is kept, so `FileMapping::zap` of the doorbell's offset reaches it.
///
/// # Errors
///
/// `EINVAL` unless the mapping is exactly one page.
pub(crate) fn doorbell_mmap(vma: &VmaNew, db: Arc<Doorbell>) -> Result {
    if vma.end().checked_sub(vma.start()) != Some(4096) {
        return Err(EINVAL);
    }
    vma.set_io();
    vma.set_dontexpand();
    vma.set_dontcopy();
    vma.set_dontdump();
    let raw = vma.as_ptr();
    // SAFETY: `raw` is a VMA under initial setup (not yet visible to other threads). VM_PFNMAP
    // says it maps raw pfns, which the fault handler inserts with `vmf_insert_pfn`; `vm_ops` is
    // a `'static` table and `vm_private_data` carries one counted reference to `db`, given back
    // by `close`.
    unsafe {
        (*raw).__bindgen_anon_2.vm_flags |= bindings::VM_PFNMAP as bindings::vm_flags_t;
        (*raw).vm_ops = &DOORBELL_VM_OPS.0;
        (*raw).vm_private_data = Arc::into_raw(db).cast_mut().cast();
    }
    Ok(())
}

/// A C `bool` written by the kernel's `param_ops_bool` (at load and through sysfs).
struct ParamBool(UnsafeCell<bool>);

// SAFETY: The kernel writes the value (one byte, 0 or 1) under its parameter lock; the driver
// only reads it with volatile one-byte loads, which cannot tear.
unsafe impl Sync for ParamBool {}

/// Storage of the `native_fences` module parameter; on by default.
static NATIVE_FENCES: ParamBool = ParamBool(UnsafeCell::new(true));

/// The `native_fences` parameter: `bool`, mode 0644 (root may write it through sysfs).
#[link_section = "__param"]
#[used]
static NATIVE_FENCES_PARAM: kernel::module_param::KernelParam =
    kernel::module_param::KernelParam::new(bindings::kernel_param {
        name: kernel::str::as_char_ptr_in_const_context(c"native_fences"),
        // The module's own `struct module`, built by the kernel at load time and freed after
        // the module's parameters are gone (only its address is taken).
        mod_: &raw mut bindings::__this_module,
        // The kernel's immutable `param_ops_bool` (only its address is taken).
        ops: &raw const bindings::param_ops_bool,
        perm: 0o644,
        level: -1,
        flags: 0,
        __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 {
            arg: NATIVE_FENCES.0.get().cast(),
        },
    });

/// The current value of the `native_fences` module parameter.
pub(crate) fn native_fences_param() -> bool {
    // SAFETY: `NATIVE_FENCES` is a valid, aligned `bool` for the module's lifetime; the kernel
    // stores only `true` or `false` into it (see `ParamBool`).
    unsafe { core::ptr::read_volatile(NATIVE_FENCES.0.get()) }
}

/// Whether the current task is exiting because a signal killed it (`PF_SIGNALED`).
pub(crate) fn killed_by_signal() -> bool {
    // SAFETY: `get_current` returns the running task, which stays valid while it runs this
    // code; `flags` is only read.
    let flags = unsafe { (*bindings::get_current()).flags };
    flags & bindings::PF_SIGNALED != 0
}

extern "C" {
    /// `anon_inode_getfile` (`include/linux/anon_inodes.h`, `EXPORT_SYMBOL_GPL`); bindgen does
    /// not generate it for 7.3 (`anon_inodes.h` is not in the binding helper header). The
    /// structs are passed as `void *` (the bindgen structs are not FFI-safe by rustc's lint).
    fn anon_inode_getfile(
        name: *const kernel::ffi::c_char,
        fops: *const kernel::ffi::c_void,
        private: *mut kernel::ffi::c_void,
        flags: kernel::ffi::c_int,
    ) -> *mut kernel::ffi::c_void;
}

/// The `file_operations` of exported fence files, shareable between threads.
struct FenceFops(bindings::file_operations);

// SAFETY: The table is immutable and holds only function pointers, the module pointer and
// null fields.
unsafe impl Sync for FenceFops {}

/// Exported fence files: `release` gives back the file's reference to its [`GlobalFence`];
/// `owner` keeps the module loaded while one is open.
static FENCE_FOPS: FenceFops = FenceFops(bindings::file_operations {
    owner: kernel::module::this_module::<crate::LocalModule>().as_ptr(),
    release: Some(fence_file_release),
    // SAFETY: Every other field is an optional function pointer or an integer, for which
    // all-zeroes (`None`/0) is valid and means "not provided".
    ..unsafe { core::mem::zeroed() }
});

/// `file_operations::release` of an exported fence file.
///
/// # Safety
///
/// Called by the VFS once, when the last reference to a file made by [`fence_file`] goes.
unsafe extern "C" fn fence_file_release(
    _inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> kernel::ffi::c_int {
    // SAFETY: `private_data` of a fence file came from `Arc::into_raw` in `fence_file`; this
    // gives that reference back exactly once.
    drop(unsafe { Arc::from_raw((*file).private_data.cast::<GlobalFence>()) });
    0
}

/// A new `anon_inode:belfry-fence` file holding `fence` (read-only, close-on-exec when
/// installed with `O_CLOEXEC`).
///
/// # Errors
///
/// The error of `anon_inode_getfile` (`ENOMEM`, `ENFILE`).
pub(crate) fn fence_file(fence: Arc<GlobalFence>) -> Result<ARef<File>> {
    let private = Arc::into_raw(fence).cast_mut();
    // SAFETY: The name is a NUL-terminated `'static` string, `FENCE_FOPS` a `'static` table;
    // `private` carries one counted reference, owned by the file from here on (its `release`
    // drops it) or given back below on failure.
    let raw = unsafe {
        anon_inode_getfile(
            c"belfry-fence".as_char_ptr(),
            core::ptr::from_ref(&FENCE_FOPS.0).cast(),
            private.cast(),
            // CAST: a small flag constant.
            bindings::O_RDONLY as kernel::ffi::c_int,
        )
    };
    let raw = raw.cast::<bindings::file>();
    match kernel::error::from_err_ptr(raw).ok().and_then(NonNull::new) {
        // SAFETY: `anon_inode_getfile` returned a new file with one reference, which the
        // `ARef` takes over; no `fdget_pos` can be active on a file nobody else has seen.
        Some(file) => Ok(unsafe { ARef::from_raw(file.cast::<File>()) }),
        None => {
            // SAFETY: The file was not made, so the reference is still ours.
            drop(unsafe { Arc::from_raw(private) });
            Err(kernel::error::from_err_ptr(raw).err().unwrap_or(ENOMEM))
        }
    }
}

/// The global fence an exported fence file `fd` of the calling process names, as a new
/// reference.
///
/// # Errors
///
/// `EBADF` for a closed fd, `EINVAL` for a file that is not a Belfry fence file.
pub(crate) fn fence_of_fd(fd: i32) -> Result<Arc<GlobalFence>> {
    let fd = u32::try_from(fd).map_err(|_| EBADF)?;
    let file = LocalFile::fget(fd)?;
    let raw = file.as_ptr();
    // SAFETY: `file` holds a reference, so `raw` is a valid open file; `f_op` is set at open
    // and not changed afterwards.
    if !core::ptr::eq(unsafe { (*raw).f_op }, &FENCE_FOPS.0) {
        return Err(EINVAL);
    }
    // SAFETY: A file with our `f_op` was made by `fence_file`: `private_data` is a counted
    // reference to a `GlobalFence`, alive while the file is (held by `file` here). Cloning it
    // takes a new reference; the file's own stays with the file.
    let fence = ManuallyDrop::new(unsafe { Arc::from_raw((*raw).private_data.cast::<GlobalFence>()) });
    Ok(Arc::clone(&fence))
}

/// A reference to an eventfd's context (`struct eventfd_ctx`), put on drop.
pub(crate) struct EventFd(NonNull<bindings::eventfd_ctx>);

// SAFETY: An eventfd context is reference counted and its signal takes its own lock: it may be
// signaled and put from any thread.
unsafe impl Send for EventFd {}
// SAFETY: As above: `signal` through a shared reference is synchronised by the context's lock.
unsafe impl Sync for EventFd {}

impl EventFd {
    /// The eventfd `fd` of the calling process.
    ///
    /// # Errors
    ///
    /// `EBADF` for a closed fd, `EINVAL` for a file that is not an eventfd.
    pub(crate) fn get(fd: i32) -> Result<Self> {
        // SAFETY: `eventfd_ctx_fdget` accepts any integer and returns a counted reference or an
        // error pointer.
        let raw = kernel::error::from_err_ptr(unsafe { bindings::eventfd_ctx_fdget(fd) })?;
        NonNull::new(raw).map(Self).ok_or(EINVAL)
    }

    /// Adds 1 to the eventfd's counter, waking its pollers. Process context or interrupt
    /// thread; must not run from an eventfd wake-up callback (the kernel warns and skips it).
    pub(crate) fn signal(&self) {
        // SAFETY: `self.0` is a counted reference to a live eventfd context.
        unsafe { bindings::eventfd_signal_mask(self.0.as_ptr(), 0) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: Gives back the reference taken in `get`, once.
        unsafe { bindings::eventfd_ctx_put(self.0.as_ptr()) };
    }
}

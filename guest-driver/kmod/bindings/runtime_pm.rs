// SPDX-License-Identifier: GPL-2.0

//! Linux runtime PM for a PCI driver written against the 7.3 Rust abstractions, which have no
//! PM hooks (`pci::Driver` has no `dev_pm_ops`, and the `kernel` crate no `pm_runtime_*`).
//!
//! Hooks: a PM domain of the driver's own ([`PmDomain`]), the way `vga_switcheroo` hooks the
//! runtime PM of a GPU it does not drive: its `dev_pm_ops` are a copy of the PCI bus's (so
//! system sleep and everything else stays the PCI core's), with the three runtime callbacks
//! replaced by ours, which call the owner's [`RuntimePower`] around the bus's own callbacks (the
//! PCI core's `pci_save_state`, D3hot through PMCSR and the config-space restore). A PM domain
//! replaces the bus's callbacks for the device, and the device's PM core calls them instead.
//!
//! References ([`RuntimePm`]): `pm_runtime_get_sync` / `pm_runtime_put_autosuspend` and
//! `pm_request_autosuspend` are `static inline` in C, so this file calls the exported
//! functions they wrap (`__pm_runtime_resume`, `__pm_runtime_suspend`) with the same flags.
//!
//! System sleep (suspend-to-idle, suspend-to-RAM): the domain's `suspend` and `resume` are
//! wrapped too, as `DEFINE_RUNTIME_DEV_PM_OPS` drivers do with `pm_runtime_force_suspend`:
//! `suspend` lets the owner wait for its pending work ([`RuntimePower::system_suspend`]),
//! disables runtime PM and runs the runtime-suspend callback above (the owner's D3 entry and the
//! PCI core's D3hot; nothing if the device is runtime-suspended already) — not the bus's own
//! `suspend`, which would disable the device —; `resume` runs the bus's `resume`, then the runtime resume above if `suspend` ran
//! the runtime suspend, enables runtime PM again and tells the owner
//! ([`RuntimePower::system_resume`]).
//! Hibernation's callbacks (`freeze`, `thaw`, `poweroff`, `restore`) stay the bus's.
//!
//! The PCI core leaves runtime PM *forbidden* for a new PCI device (`power/control` = `on`);
//! user space (or udev) allows it by writing `auto`, and `power/autosuspend_delay_ms` sets the
//! delay, both standard sysfs files.

use core::{
    ffi::c_int,
    ptr,
    sync::atomic::{AtomicBool, Ordering},
};

use kernel::{
    bindings,
    device::{Core, Device},
    pci,
    prelude::*,
    sync::aref::ARef,
    types::Opaque,
};

/// What the owner of a device does around the PCI core's runtime suspend and resume.
pub(crate) trait RuntimePower: Send + Sync + 'static {
    /// Before the PCI core saves the config space and puts the device in D3hot; an error
    /// (`EBUSY`: work pending; any other is reported to the PM core as `EBUSY`, a refusal for
    /// now) keeps the device in D0 and skips the bus.
    fn suspend(&self) -> Result;
    /// After the PCI core put the device in D3hot (`Ok`) or failed to (`Err`: the device
    /// stays in D0 and the owner must undo [`Self::suspend`]).
    fn suspended(&self, result: Result);
    /// Before the PCI core brings the device back to D0.
    fn resuming(&self);
    /// After the PCI core brought the device back to D0 and restored its config space.
    fn resume(&self) -> Result;
    /// A system sleep begins (user space is frozen): wait, bounded, for the device to become
    /// idle; an error refuses the system sleep. The runtime suspend follows.
    fn system_suspend(&self) -> Result;
    /// The system woke (`resumed`: the device was brought back to D0 now; otherwise it stays in
    /// D3 until runtime PM resumes it).
    fn system_resume(&self, resumed: bool);
}

/// The raw `struct device` of `dev`.
fn raw(dev: &Device) -> *mut bindings::device {
    // CAST: `Device` is a `#[repr(transparent)]` wrapper of `Opaque<bindings::device>` (itself
    // transparent); its own `as_raw()` is private to the `kernel` crate.
    ptr::from_ref(dev).cast::<bindings::device>().cast_mut()
}

/// A PM domain of one device: the C structure the device points at, and the owner its
/// callbacks call.
#[repr(C)]
struct Domain<T: RuntimePower> {
    /// The `struct dev_pm_domain` the device's `pm_domain` points at.
    raw: Opaque<bindings::dev_pm_domain>,
    /// The bus's operations (the PCI core's), which ours call.
    bus: *const bindings::dev_pm_ops,
    /// The owner.
    owner: T,
    /// [`system_suspend`] put the device in D3 (it was not runtime-suspended): the system
    /// resume takes it back to D0.
    slept: AtomicBool,
}

// SAFETY: `bus` points at the PCI bus type's static, immutable operations; the rest is the
// owner's (`Send + Sync`) and a C structure only the PM core reads.
unsafe impl<T: RuntimePower> Send for Domain<T> {}
// SAFETY: As above.
unsafe impl<T: RuntimePower> Sync for Domain<T> {}

/// The domain whose `raw` field `dev`'s `pm_domain` points at.
///
/// # Safety
///
/// `dev` must be a device whose PM domain a live [`PmDomain<T>`] set.
unsafe fn domain<'a, T: RuntimePower>(dev: *mut bindings::device) -> &'a Domain<T> {
    // SAFETY: By the caller's contract `pm_domain` points at the `raw` field of a live
    // `Domain<T>` (`Opaque` is transparent), which lives until `PmDomain::drop` cleared the
    // pointer, and the PM core calls no callback after that (see `PmDomain::drop`).
    unsafe {
        let pd = (*dev).pm_domain.cast::<Opaque<bindings::dev_pm_domain>>();
        &*kernel::container_of!(pd, Domain<T>, raw)
    }
}

/// `runtime_suspend` of the domain: the owner's suspend, then the bus's.
///
/// # Safety
///
/// Called by the PM core for a device whose PM domain a live [`PmDomain<T>`] set.
unsafe extern "C" fn runtime_suspend<T: RuntimePower>(dev: *mut bindings::device) -> c_int {
    // SAFETY: The PM core calls this only for the device whose domain we set.
    let d = unsafe { domain::<T>(dev) };
    if let Err(e) = d.owner.suspend() {
        // Any refusal of the owner's keeps the device in D0 for now, never for good: the PM core
        // keeps an error other than `EBUSY` or `EAGAIN` of a suspend callback as the device's
        // `runtime_error`, which fails every later runtime resume (`EINVAL`) — of this binding
        // and of every later one — until runtime PM is set up anew. A binding a function reset
        // or a silent mailbox took refuses so (`ENODEV`, `EIO`) until its reprobe.
        return if e == EAGAIN { e.to_errno() } else { EBUSY.to_errno() };
    }
    // SAFETY: `d.bus` is the PCI bus's operations (static); `dev` is the device they serve.
    let ret = match unsafe { (*d.bus).runtime_suspend } {
        // SAFETY: As above: the PCI core's callback for this PCI device.
        Some(f) => unsafe { f(dev) },
        None => 0,
    };
    d.owner.suspended(if ret == 0 { Ok(()) } else { Err(Error::from_errno(ret)) });
    ret
}

/// `runtime_resume` of the domain: the bus's resume (D0, config space), then the owner's.
///
/// # Safety
///
/// As for [`runtime_suspend`].
unsafe extern "C" fn runtime_resume<T: RuntimePower>(dev: *mut bindings::device) -> c_int {
    // SAFETY: The PM core calls this only for the device whose domain we set.
    let d = unsafe { domain::<T>(dev) };
    d.owner.resuming();
    // SAFETY: As in `runtime_suspend`.
    if let Some(f) = unsafe { (*d.bus).runtime_resume } {
        // SAFETY: As in `runtime_suspend`.
        let ret = unsafe { f(dev) };
        if ret != 0 {
            return ret;
        }
    }
    match d.owner.resume() {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// The bus's (PCI core's) system-sleep callback `pick(bus)`, run on `dev` (0 without one).
///
/// # Safety
///
/// `bus` is the PCI bus's operations and `dev` the PCI device they serve.
unsafe fn bus_call(
    bus: *const bindings::dev_pm_ops,
    dev: *mut bindings::device,
    pick: fn(&bindings::dev_pm_ops) -> Option<unsafe extern "C" fn(*mut bindings::device) -> c_int>,
) -> c_int {
    // SAFETY: By the caller's contract `bus` points at the PCI core's static operations.
    match pick(unsafe { &*bus }) {
        // SAFETY: The PCI core's callback for this PCI device.
        Some(f) => unsafe { f(dev) },
        None => 0,
    }
}

/// `suspend` of the domain (system sleep): the owner's wait for idle, runtime PM disabled, our
/// runtime suspend (the owner's D3 entry and the PCI core's D3hot) unless the device is
/// runtime-suspended already.
///
/// Not `pm_runtime_force_suspend`: the PCI core's `prepare` sets `power.strict_midlayer`, with
/// which that function calls only a driver's own runtime callback (`driver.pm`, which a 7.3 Rust
/// PCI driver has not), never the domain's; so this does what it does with ours.
///
/// # Safety
///
/// As for [`runtime_suspend`].
unsafe extern "C" fn system_suspend<T: RuntimePower>(dev: *mut bindings::device) -> c_int {
    // SAFETY: The PM core calls this only for the device whose domain we set.
    let d = unsafe { domain::<T>(dev) };
    if let Err(e) = d.owner.system_suspend() {
        return e.to_errno();
    }
    // SAFETY: `dev` is valid. With runtime PM disabled (after any request in flight) its
    // status stays as read, and no runtime callback runs but ours below.
    let already = unsafe {
        bindings::__pm_runtime_disable(dev, true);
        (*dev).power.runtime_status == bindings::rpm_status_RPM_SUSPENDED
    };
    if !already {
        // SAFETY: As above: the domain's own runtime suspend, run as the PM core would.
        let ret = unsafe { runtime_suspend::<T>(dev) };
        if ret != 0 {
            // SAFETY: As above; undoes the disable.
            unsafe { bindings::pm_runtime_enable(dev) };
            return ret;
        }
    }
    d.slept.store(!already, Ordering::Relaxed);
    // The bus's `suspend` is not called: for a driver without PM callbacks the PCI core's
    // default disables the device (bus mastering off, which the device honours by dropping
    // DMA), and the config space the suspend's noirq phase saves then restores it so, behind
    // the runtime resume, which needs DMA. A driver with PM callbacks gets no such disable.
    0
}

/// The second half of [`system_resume`]: our runtime resume if [`system_suspend`] suspended
/// the device, runtime PM enabled again, the owner told.
///
/// # Safety
///
/// As for [`runtime_suspend`], after [`system_suspend`] succeeded for `dev`.
unsafe fn wake<T: RuntimePower>(d: &Domain<T>, dev: *mut bindings::device) -> c_int {
    let slept = d.slept.swap(false, Ordering::Relaxed);
    let ret = if slept {
        // SAFETY: Runtime PM is disabled (by `system_suspend`): our runtime resume runs alone.
        unsafe { runtime_resume::<T>(dev) }
    } else {
        0
    };
    // SAFETY: `dev` is valid; undoes `system_suspend`'s disable.
    unsafe { bindings::pm_runtime_enable(dev) };
    d.owner.system_resume(slept && ret == 0);
    ret
}

/// `resume` of the domain (system sleep): the bus's, then our runtime resume if
/// [`system_suspend`] suspended the device (one runtime-suspended before the sleep stays so,
/// for runtime PM to resume), then the owner's.
///
/// # Safety
///
/// As for [`runtime_suspend`].
unsafe extern "C" fn system_resume<T: RuntimePower>(dev: *mut bindings::device) -> c_int {
    // SAFETY: The PM core calls this only for the device whose domain we set.
    let d = unsafe { domain::<T>(dev) };
    // SAFETY: As in `runtime_suspend`.
    let bus = unsafe { bus_call(d.bus, dev, |ops| ops.resume) };
    // SAFETY: The PM core calls `resume` only after our `suspend` succeeded.
    let ret = unsafe { wake::<T>(d, dev) };
    if bus != 0 {
        bus
    } else {
        ret
    }
}

/// `runtime_idle` of the domain: always go on to the (auto)suspend, whose callback decides.
/// (The PCI core's idle callback answers `ENOSYS` for a driver without `dev_pm_ops`.)
///
/// # Safety
///
/// None needed (it reads nothing); `unsafe` for the C function-pointer type.
unsafe extern "C" fn runtime_idle(_dev: *mut bindings::device) -> c_int {
    0
}

/// The PM domain of one bound PCI device; dropping it detaches it (the device must be bound
/// and resumed then: the PCI core's `remove` path holds it in D0).
pub(crate) struct PmDomain<T: RuntimePower> {
    /// The device.
    dev: ARef<Device>,
    /// The domain the device points at (boxed: its address is what the device holds; only the
    /// PM core reads it, through that pointer).
    _domain: Pin<KBox<Domain<T>>>,
}

impl<T: RuntimePower> PmDomain<T> {
    /// Sets the runtime PM hooks of `pdev` (during probe, with the device lock held and the PCI
    /// core's probe reference keeping it in D0), enables autosuspend with `delay_ms`, and
    /// drops the probe's runtime PM reference (the PCI core's `power/control=on` still pins D0
    /// until user space writes `auto`).
    ///
    /// # Errors
    ///
    /// `ENOMEM`; `ENODEV` for a device without bus PM operations.
    pub(crate) fn attach(pdev: &pci::Device<Core<'_>>, owner: T, delay_ms: i32) -> Result<Self> {
        let generic: &Device = pdev.as_ref();
        let dev = raw(generic);
        // SAFETY: `dev` is a valid, bound PCI device; its bus is the PCI bus type (static).
        let bus = unsafe { (*(*dev).bus).pm };
        if bus.is_null() {
            return Err(ENODEV);
        }
        // SAFETY: `bus` is non-null and points at the PCI core's static `dev_pm_ops`.
        let mut ops: bindings::dev_pm_ops = unsafe { ptr::read(bus) };
        ops.runtime_suspend = Some(runtime_suspend::<T>);
        ops.runtime_resume = Some(runtime_resume::<T>);
        ops.runtime_idle = Some(runtime_idle);
        ops.suspend = Some(system_suspend::<T>);
        ops.resume = Some(system_resume::<T>);
        let domain = KBox::pin(
            Domain {
                raw: Opaque::new(bindings::dev_pm_domain {
                    ops,
                    ..Default::default()
                }),
                bus,
                owner,
                slept: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: Probe runs with the device lock held and the device not yet bound (so no PM
        // callback runs concurrently and `dev_pm_domain_set`'s condition holds); the domain is
        // boxed and outlives the pointer (`Drop` clears it). `dev_pm_domain_set` itself is not
        // among the 7.3 Rust bindings, and what it adds (`device_pm_check_callbacks`) matters
        // only for a device with no callbacks at all, which a PCI device never is.
        unsafe { (*dev).pm_domain = domain.raw.get() };
        // SAFETY: `dev` is valid; these take the device's power lock themselves.
        unsafe {
            bindings::pm_runtime_set_autosuspend_delay(dev, delay_ms);
            bindings::__pm_runtime_use_autosuspend(dev, true);
            // `pm_runtime_put_autosuspend`: the reference the PCI core took before probe.
            bindings::__pm_runtime_suspend(dev, RPM_PUT_AUTO);
        }
        Ok(Self {
            dev: generic.into(),
            _domain: domain,
        })
    }
}

impl<T: RuntimePower> Drop for PmDomain<T> {
    fn drop(&mut self) {
        let dev = raw(&self.dev);
        // SAFETY: `dev` is valid (counted reference). `pm_runtime_get_sync` takes back the
        // reference `attach` dropped (the PCI core's `remove` puts it after the driver's), and
        // the barrier waits for any callback in flight; the PCI core's `remove` path already
        // resumed the device and holds a reference, so none starts after.
        unsafe {
            bindings::__pm_runtime_resume(dev, RPM_GET);
            bindings::pm_runtime_barrier(dev);
            bindings::__pm_runtime_use_autosuspend(dev, false);
            // No callback runs (above) and the device lock is held (remove): the PCI core's
            // own callbacks serve the device again from here.
            (*dev).pm_domain = ptr::null_mut();
        }
    }
}

/// `RPM_GET_PUT` (a usage-count reference taken or dropped).
// CAST: the flags are small constants.
const RPM_GET: c_int = bindings::RPM_GET_PUT as c_int;
/// `pm_runtime_put_autosuspend`'s flags.
// CAST: as above.
const RPM_PUT_AUTO: c_int = (bindings::RPM_GET_PUT | bindings::RPM_ASYNC | bindings::RPM_AUTO) as c_int;
/// `pm_request_autosuspend`'s flags.
// CAST: as above.
const RPM_REQUEST_AUTO: c_int = (bindings::RPM_ASYNC | bindings::RPM_AUTO) as c_int;

/// Runtime PM references of one device (valid with or without a [`PmDomain`]).
pub(crate) struct RuntimePm {
    /// The device.
    dev: ARef<Device>,
}

impl RuntimePm {
    /// The runtime PM of `dev`.
    pub(crate) fn new(dev: &Device) -> Self {
        Self { dev: dev.into() }
    }

    /// `pm_runtime_resume_and_get`: a reference holding the device in D0 (resuming it first if
    /// it is suspended; the caller sleeps meanwhile).
    ///
    /// # Errors
    ///
    /// The resume's error (the reference is not taken then).
    pub(crate) fn get(&self) -> Result<RpmRef<'_>> {
        let dev = raw(&self.dev);
        // SAFETY: `dev` is valid (counted reference).
        let ret = unsafe { bindings::__pm_runtime_resume(dev, RPM_GET) };
        if ret < 0 {
            // SAFETY: As above; gives back the usage count the failed call took.
            unsafe { bindings::__pm_runtime_suspend(dev, RPM_PUT_AUTO) };
            return Err(Error::from_errno(ret));
        }
        Ok(RpmRef(self))
    }

    /// `pm_request_autosuspend`: suspend once idle for the autosuspend delay (nothing while a
    /// reference is held or runtime PM is forbidden).
    pub(crate) fn request_autosuspend(&self) {
        // SAFETY: `dev` is valid (counted reference).
        unsafe { bindings::__pm_runtime_suspend(raw(&self.dev), RPM_REQUEST_AUTO) };
    }
}

/// A runtime PM reference ([`RuntimePm::get`]): dropping it marks the device busy now and lets
/// it autosuspend after the delay (`pm_runtime_put_autosuspend`).
pub(crate) struct RpmRef<'a>(&'a RuntimePm);

impl Drop for RpmRef<'_> {
    fn drop(&mut self) {
        let dev = raw(&self.0.dev);
        // SAFETY: `dev` is valid; `last_busy` is a plain word the PM core reads with
        // `READ_ONCE` (`pm_runtime_mark_last_busy` is a `WRITE_ONCE` of it); then the reference
        // `get` took is dropped.
        unsafe {
            ptr::write_volatile(ptr::addr_of_mut!((*dev).power.last_busy), bindings::ktime_get_mono_fast_ns());
            bindings::__pm_runtime_suspend(dev, RPM_PUT_AUTO);
        }
    }
}

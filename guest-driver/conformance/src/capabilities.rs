//! Native-fence capabilities and the feature switch: the module parameter `native_fences`
//! (`/sys/module/belfry/parameters/native_fences`), read at probe and cached per device, and
//! what `QUERY_CAPS` says with it on and off. The switch and the binding are restored even when
//! a test fails ([`Rebinding`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use belfry_abi::uapi;
use belfry_umd::{Device, FenceKind, QueueDesc, QueueMode};

use crate::{ensure, wait_until, Test, TestResult};

const WAIT: Duration = Duration::from_secs(10);
const PARAM: &str = "/sys/module/belfry/parameters/native_fences";
const DRIVER: &str = "/sys/bus/pci/drivers/belfry";

fn write_sysfs(path: &str, value: &str) -> TestResult {
    std::fs::write(path, value).map_err(|e| format!("writing {value:?} to {path}: {e}"))?;
    Ok(())
}

fn read_param() -> Result<bool, crate::Error> {
    let text = std::fs::read_to_string(PARAM).map_err(|e| format!("{PARAM}: {e}"))?;
    Ok(text.trim() == "Y")
}

fn set_param(on: bool) -> TestResult {
    write_sysfs(PARAM, if on { "Y" } else { "N" })
}

/// The PCI address of the device behind `/dev/belfry<N>`: the device whose MSI-X vectors
/// include the one `/proc/interrupts` names `belfry<N>-mb`.
pub(crate) fn pci_address(path: &Path) -> Result<String, crate::Error> {
    let dev = path.file_name().and_then(|n| n.to_str()).ok_or("device path without a name")?;
    let interrupts = std::fs::read_to_string("/proc/interrupts")?;
    let irq = interrupts
        .lines()
        .find(|l| l.trim_end().ends_with(&format!(" {dev}-mb")))
        .and_then(|l| l.split(':').next())
        .map(|n| n.trim().to_string())
        .ok_or_else(|| format!("no {dev}-mb line in /proc/interrupts"))?;
    for entry in std::fs::read_dir(DRIVER)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.contains(':') && Path::new(&format!("/sys/bus/pci/devices/{name}/msi_irqs/{irq}")).exists() {
            return Ok(name);
        }
    }
    Err(format!("no device bound to {DRIVER} has IRQ {irq} ({dev}-mb)").into())
}

/// One device unbound and bound again through the driver's sysfs files; on drop (a failed
/// test included) the switch goes back to its old value and the device is bound again.
pub(crate) struct Rebinding {
    address: String,
    path: PathBuf,
    param_was: bool,
}

impl Rebinding {
    /// Prepares to rebind the device of `path`.
    pub(crate) fn new(path: &Path) -> Result<Rebinding, crate::Error> {
        Ok(Rebinding { address: pci_address(path)?, path: path.to_path_buf(), param_was: read_param()? })
    }

    fn bound(&self) -> bool {
        Path::new(&format!("{DRIVER}/{}", self.address)).exists()
    }

    /// Unbinds the device (the module's probe-time state goes with it).
    pub(crate) fn unbind(&self) -> TestResult {
        write_sysfs(&format!("{DRIVER}/unbind"), &self.address)?;
        ensure!(!self.bound(), "{} still bound after unbind", self.address);
        Ok(())
    }

    /// Binds the device again and waits for its device file.
    pub(crate) fn bind(&self) -> TestResult {
        write_sysfs(&format!("{DRIVER}/bind"), &self.address)?;
        let back = wait_until(WAIT, || self.bound() && Device::open(&self.path).is_ok());
        ensure!(back, "{} did not come back as {} after bind", self.address, self.path.display());
        Ok(())
    }

    /// Unbinds and binds the device.
    pub(crate) fn rebind(&self) -> TestResult {
        self.unbind()?;
        self.bind()
    }
}

impl Drop for Rebinding {
    fn drop(&mut self) {
        let restored = read_param().is_ok_and(|on| on == self.param_was);
        if !restored {
            let _ = set_param(self.param_was);
        }
        if !self.bound() {
            let _ = write_sysfs(&format!("{DRIVER}/bind"), &self.address);
        } else if !restored {
            // The device negotiated with the switch the test left: negotiate again.
            let _ = write_sysfs(&format!("{DRIVER}/unbind"), &self.address);
            let _ = write_sysfs(&format!("{DRIVER}/bind"), &self.address);
        }
        let _ = wait_until(WAIT, || Device::open(&self.path).is_ok());
    }
}

/// The native-fence answer of `QUERY_CAPS`: (version, NATIVE_GPU_FENCE_SUPPORTED,
/// MAP_TO_GPU_SYSTEM_PROCESS, segments).
fn native_caps(dev: &Device) -> (u32, bool, bool, u32) {
    let c = dev.caps();
    (c.native_fence_caps_version(), c.native_gpu_fence_supported(), c.map_to_gpu_system_process(), c.fence_segments())
}

fn errno_of<T>(r: belfry_umd::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.errno())
}

/// Native fences, user-mode and kernel-mode queues work as the switch says.
fn expect_native_paths(path: &Path, on: bool) -> TestResult {
    let dev = Device::open(path)?;
    let ctx = dev.create_context()?;
    let buf = ctx.alloc(4096, 0)?;
    let refused = (!on).then_some(libc::EOPNOTSUPP);
    let default = ctx.create_fence(FenceKind::Default, 0, 0);
    ensure!(errno_of(default) == refused, "DEFAULT fence with the switch {on}: expected errno {refused:?}");
    let intra = ctx.create_fence(FenceKind::IntraGpu, 0, 0);
    ensure!(errno_of(intra) == refused, "INTRA_GPU fence with the switch {on}: expected errno {refused:?}");
    let user = ctx.create_queue(&QueueDesc::default());
    ensure!(errno_of(user) == refused, "user-mode queue with the switch {on}: expected errno {refused:?}");
    // Monitored fences and kernel-mode queues do not depend on the feature.
    let monitored = ctx.create_fence(FenceKind::Monitored, 0, 0)?;
    monitored.signal(3)?;
    ensure!(monitored.value() == Some(3), "monitored fence value {:?} after a CPU signal of 3", monitored.value());
    let mut km = ctx.create_queue(&QueueDesc { mode: QueueMode::KernelMode, ..QueueDesc::default() })?;
    let mut cb = belfry_umd::CommandBuffer::new();
    cb.write32(buf.gpu_va(), 0x0CA9_0001 + u32::from(on))?;
    let v = km.submit(&cb)?;
    km.wait(v, WAIT)?;
    let got = buf.read_u32(0)?;
    ensure!(got == 0x0CA9_0001 + u32::from(on), "kernel-mode queue work wrote {got:#x}");
    Ok(())
}

/// proves: CAP-01, CAP-02, CAP-03, CAP-05, CAP-07, CAP-08 — the switch is read at probe and
/// cached with the negotiated version 1: flipping it changes nothing until the device is
/// re-bound. On: version 1, NATIVE_GPU_FENCE_SUPPORTED (the device has CAPS.native_fence),
/// MAP_TO_GPU_SYSTEM_PROCESS, the system and VRAM segments and the 64-byte stride, and the
/// native paths work. Off: version 0, no native bit although the device still has
/// CAPS.native_fence, no segments, and DEFAULT/INTRA_GPU fences and user-mode queues are
/// refused with EOPNOTSUPP while monitored fences and kernel-mode queues keep working.
fn native_fence_switch_is_read_at_probe_and_gates_native_fences(path: &Path) -> TestResult {
    let binding = Rebinding::new(path)?;
    if !binding.param_was {
        set_param(true)?;
        binding.rebind()?;
    }
    let on = Device::open(path)?;
    let bits = on.caps().bits();
    let segments = uapi::FENCE_SEGMENT_SYSTEM | if bits.intra_gpu_fence() { uapi::FENCE_SEGMENT_VRAM } else { 0 };
    ensure!(bits.native_fence(), "the device has no CAPS.native_fence");
    let want_on = (uapi::NATIVE_FENCE_CAPS_VERSION, true, true, segments);
    ensure!(native_caps(&on) == want_on, "switch on: {:?}, expected {want_on:?}", native_caps(&on));
    ensure!(on.caps().raw.fence_stride == 64, "fence stride {}", on.caps().raw.fence_stride);
    drop(on);
    expect_native_paths(path, true)?;

    set_param(false)?;
    let cached = Device::open(path)?;
    ensure!(native_caps(&cached) == want_on, "switch flipped off, not re-bound: {:?}", native_caps(&cached));
    drop(cached);
    expect_native_paths(path, true)?;

    binding.rebind()?;
    let off = Device::open(path)?;
    ensure!(off.caps().bits().native_fence(), "CAPS.native_fence went away with the switch");
    ensure!(native_caps(&off) == (0, false, false, 0), "switch off after re-binding: {:?}", native_caps(&off));
    drop(off);
    expect_native_paths(path, false)?;

    set_param(true)?;
    let still_off = Device::open(path)?;
    ensure!(
        native_caps(&still_off) == (0, false, false, 0),
        "switch back on, not re-bound: {:?}",
        native_caps(&still_off)
    );
    drop(still_off);
    binding.rebind()?;
    let back = Device::open(path)?;
    ensure!(native_caps(&back) == want_on, "switch on after re-binding: {:?}", native_caps(&back));
    drop(back);
    expect_native_paths(path, true)
}

/// Pages mapped in the system (CMP) address space.
fn system_pages(dev: &Device) -> Result<u64, crate::Error> {
    Ok(dev.debug_stats()?.system_gpu_pages)
}

/// proves: CAP-06 — with MAP_TO_GPU_SYSTEM_PROCESS, the values of native fences are mapped in
/// the system (CMP) address space: the first DEFAULT fence of a context maps two system pages
/// (CurrentValue and MonitoredValue; one where the device offers the optimized form, whose
/// MonitoredValues are in VRAM, NF-13), a fence packed beside it none, a shareable fence two
/// more, and destroying the context unmaps them. Those system addresses are what the device was
/// given: the shareable fence's MonitoredValue page is mapped nowhere else, yet a GPU signal
/// interrupts exactly when a CPU waiter set it (no interrupt for the fences nobody waits on)
/// and the waiter wakes.
fn native_fence_values_are_mapped_in_the_system_address_space(path: &Path) -> TestResult {
    let dev = Device::open(path)?;
    ensure!(dev.caps().map_to_gpu_system_process(), "QUERY_CAPS without MAP_TO_GPU_SYSTEM_PROCESS");
    let base = system_pages(&dev)?;
    let ctx = dev.create_context()?;
    let mut q = ctx.create_queue(&QueueDesc { mode: QueueMode::KernelMode, ..QueueDesc::default() })?;
    let with_queue = system_pages(&dev)?;
    let packed_fence = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let first = system_pages(&dev)?;
    // The optimized form (the default device) keeps the page's MonitoredValues in VRAM.
    let expect = if dev.caps().bits().optimized_default_fence() { 1 } else { 2 };
    ensure!(first == with_queue + expect, "first fence page: {with_queue} -> {first} system pages, expected +{expect}");
    let quiet = ctx.create_fence(FenceKind::Default, 0, 0)?;
    let packed = system_pages(&dev)?;
    ensure!(packed == first, "a packed fence: {first} -> {packed} system pages, expected +0");
    let waited = ctx.create_fence(FenceKind::Default, uapi::FENCE_SHAREABLE, 0)?;
    let own = system_pages(&dev)?;
    ensure!(own == packed + 2, "a shareable fence: {packed} -> {own} system pages, expected +2");

    let interrupts = |dev: &Device| -> Result<u64, crate::Error> { Ok(dev.debug_stats()?.interrupts_by_cause[1]) };
    let signal = |q: &mut belfry_umd::Queue, f: &belfry_umd::Fence, value: u64| -> TestResult {
        let mut cb = belfry_umd::CommandBuffer::new();
        cb.fence_signal(f.gpu_va(), value, None)?;
        let v = q.submit(&cb)?;
        // Polled: a WAIT_PROGRESS would arm the progress fence's own interrupt.
        ensure!(wait_until(WAIT, || q.completed() >= v), "the signal of {value} did not complete");
        Ok(())
    };
    let before = interrupts(&dev)?;
    signal(&mut q, &quiet, 1)?;
    signal(&mut q, &packed_fence, 1)?;
    let unwatched = interrupts(&dev)?;
    ensure!(unwatched == before, "signals of fences nobody waits on raised {} interrupt(s)", unwatched - before);
    std::thread::scope(|s| -> TestResult {
        let waiter = s.spawn(|| waited.wait(5, WAIT));
        let armed = wait_until(WAIT, || waited.info().is_ok_and(|i| i.pending_waits == 1 && i.monitored_value == 4));
        let i = waited.info()?;
        ensure!(
            armed,
            "{} pending wait(s), MonitoredValue {:#x}; expected 1 and 4",
            i.pending_waits,
            i.monitored_value
        );
        signal(&mut q, &waited, 5)?;
        waiter.join().map_err(|_| "waiter panicked")??;
        Ok(())
    })?;
    ensure!(interrupts(&dev)? > unwatched, "the signal the waiter watched raised no interrupt");
    drop((waited, quiet, packed_fence, q));
    drop(ctx);
    let after = system_pages(&dev)?;
    ensure!(after == base, "{after} system pages after the context went, {base} before it");
    Ok(())
}

/// Every test of this file.
pub(crate) fn all() -> Vec<Test> {
    vec![
        test_entry!(
            native_fence_switch_is_read_at_probe_and_gates_native_fences,
            Default,
            ["CAP-01", "CAP-02", "CAP-03", "CAP-05", "CAP-07", "CAP-08"]
        ),
        test_entry!(native_fence_values_are_mapped_in_the_system_address_space, Default, ["CAP-06"]),
    ]
}

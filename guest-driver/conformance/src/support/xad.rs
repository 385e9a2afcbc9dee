//! Cross-adapter helpers: the second device of a two-device test ([`peer`], or
//! [`peer_signals_partner`] between two devices with peer signals), one side of a
//! fence on one device with its queues ([`End`]), and the four wait/signal combinations of the
//! reference's tables ([`combination`]).

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use belfry_abi::uapi;
use belfry_abi::uapi_debug;
use belfry_umd::{Allocation, CommandBuffer, Context, Device, Fence, FenceKind, Queue};

use crate::support::fences::{expect_pending, gpu_signal};
use crate::support::work::{kernel_queue, user_queue};
use crate::support::{wait_until, HOLD, WAIT};
use crate::TestResult;

/// The default native device beside `path` (native and cross-adapter fences, exact records,
/// no peer signals, no test-only fault): device 0 of the suite's layout.
///
/// # Errors
/// None attached.
pub(crate) fn peer(path: &Path) -> Result<(PathBuf, Device), crate::Error> {
    beside(path, false).ok_or_else(|| format!("no native default device beside {}", path.display()).into())
}

/// The other device with peer signals beside `path` (XAD-15), as [`peer`] otherwise.
///
/// # Errors
/// None attached.
pub(crate) fn peer_signals_partner(path: &Path) -> Result<(PathBuf, Device), crate::Error> {
    beside(path, true).ok_or_else(|| format!("no other device with peer signals beside {}", path.display()).into())
}

/// The first native cross-adapter device beside `path` whose peer signals are `peer_signals`.
fn beside(path: &Path, peer_signals: bool) -> Option<(PathBuf, Device)> {
    for n in 0..16 {
        let other = PathBuf::from(format!("/dev/belfry{n}"));
        if other == path {
            continue;
        }
        let Ok(dev) = Device::open(&other) else { continue };
        let bits = dev.caps().bits();
        if dev.caps().test_injections().0 == 0
            && bits.native_fence()
            && bits.cross_adapter_fence()
            && bits.fence_handle_records()
            && bits.peer_signals() == peer_signals
        {
            return Some((other, dev));
        }
    }
    None
}

/// One device's end of a cross-adapter fence: a context, the fence's local handle there, a
/// queue (user-mode on a native device, kernel-mode on one without native fences) and a buffer
/// for the markers GPU work writes after a GPU wait.
pub(crate) struct End {
    /// The device.
    pub(crate) dev: Device,
    /// Its context.
    pub(crate) ctx: Context,
    /// The fence's local handle.
    pub(crate) fence: Fence,
    /// A queue of the context.
    pub(crate) q: Queue,
    /// Markers.
    pub(crate) buf: Allocation,
}

impl End {
    /// Creates a cross-adapter fence of `kind` (initial 0) on `dev`.
    pub(crate) fn create(dev: Device, kind: FenceKind) -> Result<End, crate::Error> {
        let ctx = dev.create_context()?;
        let fence = ctx.create_fence(kind, uapi::FENCE_CROSS_ADAPTER, 0)?;
        End::with(dev, ctx, fence)
    }

    /// Opens `other`'s fence on `dev` through its exported fd.
    pub(crate) fn open(dev: Device, other: &End) -> Result<End, crate::Error> {
        let ctx = dev.create_context()?;
        let fd = other.fence.export()?;
        let fence = ctx.import_fence(fd.as_fd())?;
        End::with(dev, ctx, fence)
    }

    fn with(dev: Device, ctx: Context, fence: Fence) -> Result<End, crate::Error> {
        let q = if dev.caps().bits().user_mode_submission() { user_queue(&ctx)? } else { kernel_queue(&ctx)? };
        let buf = ctx.alloc(4096, 0)?;
        Ok(End { dev, ctx, fence, q, buf })
    }

    /// Whether this device has native fences.
    pub(crate) fn native(&self) -> bool {
        self.dev.caps().bits().native_fence()
    }

    /// `XAD_INFO` here.
    pub(crate) fn info(&self) -> Result<uapi_debug::XadInfo, crate::Error> {
        Ok(self.fence.xad_info()?)
    }

    /// A GPU wait for `value` followed by a write of `marker` at `offset` of the buffer: a
    /// `FENCE_WAIT` in the stream on a native device, the module-held wait of a kernel-mode
    /// queue otherwise (XAD-12). Checked to be held for [`HOLD`].
    pub(crate) fn gpu_wait(&mut self, value: u64, offset: u64, marker: u32) -> TestResult {
        self.queue_gpu_wait(value, offset, marker)?;
        std::thread::sleep(HOLD);
        self.expect_held(value, offset, marker)
    }

    /// [`End::gpu_wait`] without its hold: the caller gives the device [`HOLD`], then calls
    /// [`End::expect_held`].
    pub(crate) fn queue_gpu_wait(&mut self, value: u64, offset: u64, marker: u32) -> TestResult {
        let mut cb = CommandBuffer::new();
        if self.native() {
            cb.wait_fence(&self.fence, value)?;
        } else {
            self.q.wait_fence(&self.fence, value)?;
        }
        cb.write32(self.buf.va_at(offset)?, marker)?;
        self.q.submit(&cb)?;
        Ok(())
    }

    /// Fails if the work behind the GPU wait for `value` ([`End::queue_gpu_wait`]) ran.
    pub(crate) fn expect_held(&self, value: u64, offset: u64, marker: u32) -> TestResult {
        ensure!(self.buf.read_u32(offset)? != marker, "the work behind the GPU wait for {value} ran early");
        Ok(())
    }

    /// Fails unless the work behind [`End::gpu_wait`] ran within [`WAIT`].
    pub(crate) fn expect_marker(&self, offset: u64, marker: u32, what: &str) -> TestResult {
        let ok = wait_until(WAIT, || self.buf.read_u32(offset).is_ok_and(|m| m == marker));
        ensure!(ok, "{what}: the GPU wait was not released");
        Ok(())
    }

    /// A GPU signal of `value`: a `FENCE_SIGNAL` on a native device, the module's software
    /// signal packet on one without native fences (XAD-13).
    pub(crate) fn gpu_signal(&mut self, value: u64) -> TestResult {
        if self.native() {
            gpu_signal(&mut self.q, &self.fence, value)?;
        } else {
            self.q.software_signal(&self.fence, value)?;
        }
        Ok(())
    }
}

/// One cell of the wait/signal tables: `waiter` waits for `value` on the GPU (`gpu_wait`) or
/// the CPU, then `signaller` signals it from the GPU (`gpu_signal`) or the CPU; the wait must
/// end. A CPU wait is a blocking `WAIT_FENCE` in a thread, pending before the signal.
pub(crate) fn combination(
    waiter: &mut End,
    signaller: &mut End,
    value: u64,
    gpu_wait: bool,
    gpu_signal: bool,
) -> TestResult {
    let what = format!(
        "{} wait on {} for {value}, {} signal on {}",
        if gpu_wait { "GPU" } else { "CPU" },
        waiter.dev.path().display(),
        if gpu_signal { "GPU" } else { "CPU" },
        signaller.dev.path().display()
    );
    let offset = (value % 512) * 8;
    // CAST: a marker of the value's low bits.
    let marker = 0x5a00_0000 | (value as u32 & 0xffff);
    std::thread::scope(|s| -> TestResult {
        let cpu = if gpu_wait {
            waiter.gpu_wait(value, offset, marker)?;
            None
        } else {
            let f = &waiter.fence;
            let t = s.spawn(move || f.wait(value, WAIT));
            expect_pending(&waiter.fence, 1)?;
            Some(t)
        };
        if gpu_signal {
            signaller.gpu_signal(value)?;
        } else {
            signaller.fence.signal(value)?;
        }
        match cpu {
            Some(t) => {
                let r = t.join().map_err(|_| format!("{what}: the waiting thread panicked"))?;
                r.map_err(|e| format!("{what}: {e}"))?;
            }
            None => waiter.expect_marker(offset, marker, &what)?,
        }
        Ok(())
    })
}

/// Every cell of the table with `waiter` waiting and `signaller` signalling, values from
/// `first` up.
pub(crate) fn table(waiter: &mut End, signaller: &mut End, first: u64) -> Result<u64, crate::Error> {
    let mut value = first;
    for (gpu_wait, gpu_signal) in [(true, true), (true, false), (false, true), (false, false)] {
        combination(waiter, signaller, value, gpu_wait, gpu_signal)?;
        value += 1;
    }
    Ok(value)
}

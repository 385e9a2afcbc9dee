//! What the tests share: the [`fixture`], and helpers by theme — [`work`] (queues, writes,
//! doorbell-status and data expectations, object counts), [`fences`] (fence signals, interrupt
//! counts, shared-fence counts, fence placement), [`fencelog`] (warm queues, gated signals,
//! interrupt-path counters), [`sleeping`] (CPU waits that must sleep until an interrupt) and
//! [`binding`] (the module parameter and device rebinding through sysfs), [`gone`] (CPU waits
//! outstanding while their device goes), [`power`] (runtime
//! PM allowed through the device's sysfs `power/` files), [`reload`] (the module unloaded and
//! loaded again with every device back at its old device file) and [`xad`]
//! (cross-adapter fences: the second device, a fence's end on a device, the wait/signal
//! tables), [`held_split`] (a split submission held on the GPU behind a fence), [`d3dkmt`] (running the D3DKMT API's guest programs).

use std::time::{Duration, Instant};

use crate::harness::raw;
use crate::{chain, TestResult};

pub(crate) mod binding;
pub(crate) mod d3dkmt;
pub(crate) mod fencelog;
pub(crate) mod fences;
pub(crate) mod fixture;
pub(crate) mod gone;
pub(crate) mod held_split;
pub(crate) mod kernel_log;
pub(crate) mod meminfo;
pub(crate) mod other_user;
pub(crate) mod param;
pub(crate) mod power;
pub(crate) mod reload;
pub(crate) mod sleeping;
pub(crate) mod work;
pub(crate) mod xad;

/// Bound of every wait and poll of the suite.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Bound of a device's return after the module declared it lost (unbind, reprobe, bring-up
/// with its self-test): a bring-up under KASAN and TCG on a loaded 2-core machine took over 30 s.
pub(crate) const REPROBE: Duration = Duration::from_secs(90);

/// How long work that must not run is given to run anyway.
pub(crate) const HOLD: Duration = Duration::from_millis(300);

/// The kernel's taint bits for an oops (`D`) and a warning (`W`).
pub(crate) fn oops_or_warning_taint() -> Result<u64, crate::Error> {
    let text = std::fs::read_to_string("/proc/sys/kernel/tainted")?;
    Ok(text.trim().parse::<u64>()? & ((1 << 7) | (1 << 9)))
}

/// Fails unless `r` failed with `errno` (an ioctl's errno through the library).
pub(crate) fn expect_errno<T>(r: belfry_umd::Result<T>, errno: i32, what: &str) -> TestResult {
    match r {
        Err(e) if e.errno() == Some(errno) => Ok(()),
        Err(e) => Err(format!("{what}: {}, expected {}", chain(&e), raw::errno_name(errno)).into()),
        Ok(_) => Err(format!("{what}: succeeded, expected {}", raw::errno_name(errno)).into()),
    }
}

/// Fails unless `r` is the library's refusal of a fence of another context or device file
/// ([`belfry_umd::Error::ForeignFence`]).
pub(crate) fn expect_foreign_fence<T: std::fmt::Debug>(r: belfry_umd::Result<T>, what: &str) -> TestResult {
    match r {
        Err(belfry_umd::Error::ForeignFence { .. }) => Ok(()),
        other => Err(format!("{what}: {other:?}, expected ForeignFence").into()),
    }
}

/// Polls `cond` every millisecond until it holds or `timeout` passes; whether it held.
pub(crate) fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

// SPDX-License-Identifier: GPL-2.0

//! Module parameters and task flags: 7.3's `module!` parameters are set once and never appear
//! in sysfs (`perm: 0`); the `native_fences` switch must be writable at
//! `/sys/module/belfry/parameters/native_fences`, so it is a raw `kernel_param` with the C
//! `param_ops_bool` and mode 0644, and so are the OS capability switches
//! `os_optimized_default_fences` and `os_intra_gpu_fences`, and `demote_fences`;
//! `hang_timeout_ms`, `mailbox_timeout_ms`, `close_drain_timeout_ms`, `system_sleep_drain_ms`,
//! `wait_spin_us`, `fence_vram_pages` and the test-only `test_reprobe_delay_ms` and
//! `test_d3_look_delay_ms` likewise with `param_ops_uint`. 7.3's `Task` does not expose `PF_SIGNALED` either.

use core::cell::UnsafeCell;

use kernel::{bindings, task::Task};

/// The `__param` entry of a module parameter of this module named `$name` (a C string), mode
/// 0644 (root may write it through sysfs), handled by the kernel's immutable `$ops` (only its
/// address is taken) and stored in `$store` (a `ParamBool`/`ParamUint`). It names the module's
/// own `struct module`, built by the kernel at load time and freed after the module's
/// parameters are gone (only its address is taken).
macro_rules! sysfs_param {
    ($name:expr, $ops:ident, $store:ident) => {
        kernel::module_param::KernelParam::new(bindings::kernel_param {
            name: kernel::str::as_char_ptr_in_const_context($name),
            mod_: &raw mut bindings::__this_module,
            ops: &raw const bindings::$ops,
            perm: 0o644,
            level: -1,
            flags: 0,
            __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 {
                arg: $store.0.get().cast(),
            },
        })
    };
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
    sysfs_param!(c"native_fences", param_ops_bool, NATIVE_FENCES);

impl ParamBool {
    /// The parameter's current value.
    fn get(&self) -> bool {
        // SAFETY: The storage is a valid, aligned `bool` for the module's lifetime; the kernel
        // stores only `true` or `false` into it (see `ParamBool`).
        unsafe { core::ptr::read_volatile(self.0.get()) }
    }
}

/// The current value of the `native_fences` module parameter.
pub(crate) fn native_fences_param() -> bool {
    NATIVE_FENCES.get()
}

/// Storage of the `os_optimized_default_fences` module parameter; on by default.
static OS_OPTIMIZED_DEFAULT_FENCES: ParamBool = ParamBool(UnsafeCell::new(true));

/// The `os_optimized_default_fences` parameter: `bool`, mode 0644. Plays the OS capability
/// SupportOptimizedDefaultFenceType (CAP-04), read by each device at probe.
#[link_section = "__param"]
#[used]
static OS_OPTIMIZED_DEFAULT_FENCES_PARAM: kernel::module_param::KernelParam =
    sysfs_param!(c"os_optimized_default_fences", param_ops_bool, OS_OPTIMIZED_DEFAULT_FENCES);

/// The current value of the `os_optimized_default_fences` module parameter.
pub(crate) fn os_optimized_default_fences_param() -> bool {
    OS_OPTIMIZED_DEFAULT_FENCES.get()
}

/// Storage of the `os_intra_gpu_fences` module parameter; on by default.
static OS_INTRA_GPU_FENCES: ParamBool = ParamBool(UnsafeCell::new(true));

/// The `os_intra_gpu_fences` parameter: `bool`, mode 0644. Plays the OS capability
/// SupportIntraGpuFenceType (CAP-04), read by each device at probe.
#[link_section = "__param"]
#[used]
static OS_INTRA_GPU_FENCES_PARAM: kernel::module_param::KernelParam =
    sysfs_param!(c"os_intra_gpu_fences", param_ops_bool, OS_INTRA_GPU_FENCES);

/// The current value of the `os_intra_gpu_fences` module parameter.
pub(crate) fn os_intra_gpu_fences_param() -> bool {
    OS_INTRA_GPU_FENCES.get()
}

/// Storage of the `demote_fences` module parameter; off by default.
static DEMOTE_FENCES: ParamBool = ParamBool(UnsafeCell::new(false));

/// The `demote_fences` parameter: `bool`, mode 0644. When on, an INTRA_GPU fence that finds no
/// VRAM fence page free takes one from its process's optimized DEFAULT fences, whose
/// MonitoredValues are demoted to system memory (NF-14), or, with none left, from its
/// process's oldest INTRA_GPU fence still in VRAM, whose storage is demoted (NF-18).
#[link_section = "__param"]
#[used]
static DEMOTE_FENCES_PARAM: kernel::module_param::KernelParam =
    sysfs_param!(c"demote_fences", param_ops_bool, DEMOTE_FENCES);

/// The current value of the `demote_fences` module parameter.
pub(crate) fn demote_fences_param() -> bool {
    DEMOTE_FENCES.get()
}

/// A C `unsigned int` written by the kernel's `param_ops_uint` (at load and through sysfs).
struct ParamUint(UnsafeCell<u32>);

// SAFETY: The kernel writes the value (an aligned 32-bit store) under its parameter lock; the
// driver only reads it with volatile 32-bit loads, which cannot tear.
unsafe impl Sync for ParamUint {}

impl ParamUint {
    /// The parameter's current value.
    fn get(&self) -> u32 {
        // SAFETY: The storage is a valid, aligned `u32` for the module's lifetime, written only
        // by the kernel's parameter code (see `ParamUint`).
        unsafe { core::ptr::read_volatile(self.0.get()) }
    }
}

/// A `uint` module parameter of mode 0644: its storage (`default` at load), its `__param`
/// entry (documented by the doc comments given) and `getter`, which returns the current value
/// through `limit` (a `fn(u32) -> u32`: the bounds the driver holds the value to).
macro_rules! uint_param {
    ($(#[$doc:meta])* $name:literal, $storage:ident, $entry:ident, default $default:expr, $getter:ident, $limit:expr) => {
        static $storage: ParamUint = ParamUint(UnsafeCell::new($default));

        $(#[$doc])*
        #[link_section = "__param"]
        #[used]
        static $entry: kernel::module_param::KernelParam = sysfs_param!($name, param_ops_uint, $storage);

        /// The parameter's current value, within its bounds (see its entry).
        pub(crate) fn $getter() -> u32 {
            let limit: fn(u32) -> u32 = $limit;
            limit($storage.get())
        }
    };
}

/// No bounds beyond a `u32`'s.
fn any(value: u32) -> u32 {
    value
}

/// At most 60 s (a wait in milliseconds).
fn at_most_a_minute(value: u32) -> u32 {
    value.min(60_000)
}

uint_param!(
    /// `hang_timeout_ms`: 2000 (the 2-second TDR timeout) by default; root may write it through
    /// sysfs, tests shorten it.
    c"hang_timeout_ms", HANG_TIMEOUT_MS, HANG_TIMEOUT_MS_PARAM, default 2000, hang_timeout_ms_param, any
);

uint_param!(
    /// `mailbox_timeout_ms`: 5000 by default. How long a mailbox command may take before the
    /// module gives up on it and wedges the mailbox, at least [`MIN_MAILBOX_TIMEOUT_MS`] and at
    /// most 60 s; the tests of a device that stops answering shorten it for their duration.
    c"mailbox_timeout_ms", MAILBOX_TIMEOUT_MS, MAILBOX_TIMEOUT_MS_PARAM, default 5000, mailbox_timeout_ms_param,
    |ms| ms.clamp(MIN_MAILBOX_TIMEOUT_MS, 60_000)
);

/// The shortest mailbox timeout `mailbox_timeout_ms` may set (ms): far above a command's round
/// trip on the slowest kernel this module runs on.
const MIN_MAILBOX_TIMEOUT_MS: u32 = 500;

uint_param!(
    /// `close_drain_timeout_ms`: 2000 by default, at most 60 s. How long the release of a file
    /// waits for its queues' last queued work before it takes the abnormal path; the tests of
    /// work that can never finish shorten it for their duration.
    c"close_drain_timeout_ms", CLOSE_DRAIN_TIMEOUT_MS, CLOSE_DRAIN_TIMEOUT_MS_PARAM, default 2000,
    close_drain_timeout_ms_param, at_most_a_minute
);

uint_param!(
    /// `system_sleep_drain_ms`: 5000 by default, at most 60 s. How long a system sleep waits
    /// for a device's pending work before the module refuses it (a GPU driver's suspend waits
    /// for its queues to drain; work that cannot finish, such as a queue waiting on a fence
    /// only a frozen process would signal, refuses the sleep instead of being cut off); the
    /// test of a refused sleep shortens it for its duration.
    c"system_sleep_drain_ms", SYSTEM_SLEEP_DRAIN_MS, SYSTEM_SLEEP_DRAIN_MS_PARAM, default 5000,
    system_sleep_drain_ms_param, at_most_a_minute
);

uint_param!(
    /// `wait_spin_us`: 10 by default. How long a CPU wait spins on CurrentValue before it arms
    /// an interrupt and sleeps (i915's request busy-wait is 8 µs); 0 turns the spin off, the
    /// benchmark compares values.
    c"wait_spin_us", WAIT_SPIN_US, WAIT_SPIN_US_PARAM, default 10, wait_spin_us_param, any
);

uint_param!(
    /// `fence_vram_pages`: 256 (all of them) by default. How many of the VRAM pages set aside
    /// for fence values (the first ones, at most 256) new fences may take; lowering it at run
    /// time leaves the pages already taken where they are and puts local memory under pressure.
    c"fence_vram_pages", FENCE_VRAM_PAGES, FENCE_VRAM_PAGES_PARAM, default 256, fence_vram_pages_param, any
);

uint_param!(
    /// `test_reprobe_delay_ms`: 0 by default, at most 60 s. Test-only: how long a device-lost
    /// reprobe of a device with test-only faults sleeps before it runs (the window in which a
    /// test unloads the module); ignored for every other device.
    c"test_reprobe_delay_ms", TEST_REPROBE_DELAY_MS, TEST_REPROBE_DELAY_MS_PARAM, default 0,
    test_reprobe_delay_ms_param, at_most_a_minute
);

uint_param!(
    /// `test_d3_look_delay_ms`: 0 by default, at most 1 s. Test-only: how long D3 entry on a
    /// device with test-only faults sleeps between its look for pending work and the suspension
    /// of the contexts (the window in which a test rings a doorbell); ignored for every other
    /// device.
    c"test_d3_look_delay_ms", TEST_D3_LOOK_DELAY_MS, TEST_D3_LOOK_DELAY_MS_PARAM, default 0,
    test_d3_look_delay_ms_param, |ms| ms.min(1_000)
);

uint_param!(
    /// `test_f1_entry_delay_ms`: 0 by default, at most 60 s. Test-only: how long F1 entry on a
    /// device with test-only faults sleeps after the module took the device's request and before
    /// it looks at the engine (the window in which a test kicks kernel-mode work); ignored for
    /// every other device.
    c"test_f1_entry_delay_ms", TEST_F1_ENTRY_DELAY_MS, TEST_F1_ENTRY_DELAY_MS_PARAM, default 0,
    test_f1_entry_delay_ms_param, at_most_a_minute
);

/// Whether `task` exited (or is exiting) because a signal killed it (`PF_SIGNALED`, which the
/// kernel sets on a task as it takes a fatal signal and never clears).
pub(crate) fn killed_by_signal(task: &Task) -> bool {
    // SAFETY: `task` is a valid task for the call (a reference, or an `ARef` keeping an exited
    // task's `task_struct` alive); `flags` is only read.
    let flags = unsafe { (*task.as_ptr()).flags };
    flags & bindings::PF_SIGNALED != 0
}

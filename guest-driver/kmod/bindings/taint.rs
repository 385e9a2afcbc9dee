// SPDX-License-Identifier: GPL-2.0

//! Kernel taint (`add_taint`), which the Linux 7.3 Rust abstractions do not wrap.

use kernel::bindings;

/// Taints the kernel with `TAINT_TEST` ('N' in `/proc/sys/kernel/tainted` and oops reports),
/// as KUnit does when its tests run: the kernel has run test-only code. Lockdep stays on.
pub(crate) fn taint_test() {
    // SAFETY: `add_taint` only sets a bit of the global taint mask (and may print once); it is
    // callable from any process context.
    unsafe { bindings::add_taint(bindings::TAINT_TEST, bindings::lockdep_ok_LOCKDEP_STILL_OK) };
}

// SPDX-License-Identifier: GPL-2.0

//! Capability checks of the current task (`capable`), which the Linux 7.3 Rust abstractions do
//! not wrap.

use kernel::bindings;

/// A capability the module checks.
#[derive(Clone, Copy)]
pub(crate) enum Cap {
    /// `CAP_SYS_NICE`: raise scheduling priority (here: queue priorities above normal).
    SysNice,
    /// `CAP_PERFMON`: observe other processes' performance data (here: the device timeline).
    Perfmon,
    /// `CAP_SYS_ADMIN`: what `CAP_PERFMON` allows, for kernels and tools predating it.
    SysAdmin,
}

/// Whether the current task has `cap` in its user namespace's initial set (`capable`: the
/// check is recorded by the audit and LSM hooks as a use of the capability).
pub(crate) fn capable(cap: Cap) -> bool {
    let raw = match cap {
        Cap::SysNice => bindings::CAP_SYS_NICE,
        Cap::Perfmon => bindings::CAP_PERFMON,
        Cap::SysAdmin => bindings::CAP_SYS_ADMIN,
    };
    // CAST: capability numbers are below 64.
    // SAFETY: `capable` only reads the current task's credentials.
    unsafe { bindings::capable(raw as core::ffi::c_int) }
}

/// Whether the current task may observe other processes' activity, as `perfmon_capable`
/// decides it (`CAP_PERFMON` or `CAP_SYS_ADMIN`).
pub(crate) fn perfmon_capable() -> bool {
    capable(Cap::Perfmon) || capable(Cap::SysAdmin)
}

// SPDX-License-Identifier: GPL-2.0

//! The native-fence feature switch: the module parameter `native_fences` (bool, default on,
//! writable at `/sys/module/belfry/parameters/native_fences`) plays the OS's feature switch.
//!
//! Each device reads it once, at probe, and caches the answer with the negotiated native-fence
//! capabilities version (CAP-01, CAP-03): writing the parameter later changes nothing until the
//! device is unbound and bound again. What `QUERY_CAPS` derives from it (CAP-02, CAP-05,
//! CAP-07): NATIVE_GPU_FENCE_SUPPORTED only when the switch was on and the device has
//! `CAPS.native_fence`; the fence-value segments and MAP_TO_GPU_SYSTEM_PROCESS (every native
//! fence's values are mapped in the system address space and registered at those addresses).
//! With the switch off the native-fence paths refuse with `EOPNOTSUPP` (CAP-08), and so do
//! user-mode queues, whose progress fences are native fences.
//!
//! The OS capabilities version 1 (CAP-04) are two more switches, `os_optimized_default_fences`
//! and `os_intra_gpu_fences` (bool, default on), read with the device's registers at probe
//! (`hw::regs::DeviceInfo`): a type the OS does not support is taken out of the device's
//! `CAPS` for this driver, reported to the device in `OS_CAPS` (which then refuses to register
//! such a fence) and to the library in `QUERY_CAPS.flags`; `CREATE_FENCE` of INTRA_GPU is
//! refused with `EOPNOTSUPP`, and DEFAULT fences are never given the optimized form.

use crate::{
    abi::{regs, uapi},
    bindings::param,
};

/// What one device negotiated at probe.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NativeFenceFeature {
    /// The switch was on.
    enabled: bool,
    /// The negotiated capabilities version (0 when off).
    version: u32,
}

impl NativeFenceFeature {
    /// Reads the switch now (at probe) and negotiates the version this module speaks.
    pub(crate) fn negotiate() -> Self {
        let enabled = param::native_fences_param();
        Self {
            enabled,
            version: if enabled {
                uapi::NATIVE_FENCE_CAPS_VERSION
            } else {
                0
            },
        }
    }

    /// Whether the native-fence paths (and user-mode queues) are open.
    pub(crate) fn enabled(self) -> bool {
        self.enabled
    }

    /// Fills the native-fence part of `QUERY_CAPS` for a device with `caps` (without the fence
    /// types the OS does not support) and the OS capabilities `os` read at its probe (CAP-04).
    pub(crate) fn fill(self, caps: regs::CAPS, os: regs::OS_CAPS, q: &mut uapi::QueryCaps) {
        q.native_fence_caps_version = self.version;
        q.flags = 0;
        q.fence_segments = 0;
        if !self.enabled {
            return;
        }
        if os.optimized_default_fence() {
            q.flags |= uapi::CAPS_FLAG_OS_OPTIMIZED_DEFAULT_FENCE;
        }
        if os.intra_gpu_fence() {
            q.flags |= uapi::CAPS_FLAG_OS_INTRA_GPU_FENCE;
        }
        if caps.native_fence() {
            q.flags |= uapi::CAPS_FLAG_NATIVE_GPU_FENCE_SUPPORTED
                | uapi::CAPS_FLAG_MAP_TO_GPU_SYSTEM_PROCESS;
            q.fence_segments |= uapi::FENCE_SEGMENT_SYSTEM;
        }
        if caps.intra_gpu_fence() {
            q.fence_segments |= uapi::FENCE_SEGMENT_VRAM;
        }
    }
}

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

    /// Fills the native-fence part of `QUERY_CAPS` for a device with `caps`.
    pub(crate) fn fill(self, caps: regs::CAPS, q: &mut uapi::QueryCaps) {
        q.native_fence_caps_version = self.version;
        q.flags = 0;
        q.fence_segments = 0;
        if !self.enabled {
            return;
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

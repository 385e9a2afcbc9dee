//! What the module and the device offer ([`Caps`], the module's `QUERY_CAPS` answer).

use belfry_abi::ids::EngineId;
use belfry_abi::{regs, uapi, uapi_sync};

/// What the module and the device offer (`QUERY_CAPS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// The module's answer, as is.
    pub raw: uapi::QueryCaps,
}

impl Caps {
    /// The device's capability bits, masked by module parameters.
    pub fn bits(&self) -> regs::CAPS {
        regs::CAPS(self.raw.caps)
    }

    /// The test-only faults the device was started with (zero on a normal device).
    pub fn test_injections(&self) -> regs::TEST_INJECTIONS {
        regs::TEST_INJECTIONS(self.raw.test_injections)
    }

    /// Whether queues on `engine` may use user-mode submission (CAP-11).
    pub fn user_mode_submission(&self, engine: EngineId) -> bool {
        let engine = engine.raw();
        self.bits().user_mode_submission() && engine < 32 && self.raw.user_mode_submission_engines & (1 << engine) != 0
    }

    /// Device memory (VRAM) in bytes.
    pub fn vram_size(&self) -> u64 {
        self.raw.vram_size
    }

    /// Physical doorbells.
    pub fn doorbell_count(&self) -> u32 {
        self.raw.doorbell_count
    }

    /// Engines.
    pub fn engine_count(&self) -> u32 {
        self.raw.engine_count
    }

    /// Whether native GPU fences (DEFAULT, INTRA_GPU) and user-mode queues are available
    /// (CAP-07): the module's feature switch was on when the device was bound and the device
    /// supports them.
    pub fn native_gpu_fence_supported(&self) -> bool {
        self.raw.flags & uapi::CAPS_FLAG_NATIVE_GPU_FENCE_SUPPORTED != 0
    }

    /// The native-fence capabilities version the module negotiated (0: feature off).
    pub fn native_fence_caps_version(&self) -> u32 {
        self.raw.native_fence_caps_version
    }

    /// Whether native fence values are mapped in the system (CMP) address space (CAP-06).
    pub fn map_to_gpu_system_process(&self) -> bool {
        self.raw.flags & uapi::CAPS_FLAG_MAP_TO_GPU_SYSTEM_PROCESS != 0
    }

    /// Whether [`crate::Fence::export_sync_file`] works: the guest kernel has `sync_file`
    /// (`CONFIG_SYNC_FILE`) and the device has monitored fences.
    pub fn sync_file_export(&self) -> bool {
        self.raw.flags & uapi_sync::CAPS_FLAG_SYNC_FILE_EXPORT != 0
    }

    /// Whether the OS supports optimized DEFAULT fences (CAP-04: SupportOptimizedDefaultFenceType
    /// of the OS capabilities version 1, as the module read it when the device was bound).
    pub fn os_optimized_default_fence(&self) -> bool {
        self.raw.flags & uapi::CAPS_FLAG_OS_OPTIMIZED_DEFAULT_FENCE != 0
    }

    /// Whether the OS supports INTRA_GPU fences (CAP-04: SupportIntraGpuFenceType); without it
    /// creating one fails with `EOPNOTSUPP`.
    pub fn os_intra_gpu_fence(&self) -> bool {
        self.raw.flags & uapi::CAPS_FLAG_OS_INTRA_GPU_FENCE != 0
    }

    /// `uapi::FENCE_SEGMENT_*` bits: where fence values live (CAP-05).
    pub fn fence_segments(&self) -> u32 {
        self.raw.fence_segments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_mode_submission_needs_the_cap_bit_and_the_engine_bit() {
        let mut caps = Caps { raw: uapi::QueryCaps { user_mode_submission_engines: 0b10, ..Default::default() } };
        assert!(!caps.user_mode_submission(EngineId::new(1)));
        caps.raw.caps = regs::CAPS::default().with_user_mode_submission(true).0;
        let engine = EngineId::new;
        assert!(caps.user_mode_submission(engine(1)) && !caps.user_mode_submission(engine(0)));
        assert!(!caps.user_mode_submission(engine(40)));
    }
}

//! Device enumeration and capability queries: which `/dev/belfry<N>` exist, and what an open
//! device offers, one value per `BELFRY_CAP_*` key (a key list grows without changing the
//! call).

use core::ffi::{c_char, c_int};

use belfry_umd::{Device, EngineId};

use crate::errors::{code, fail, invalid, Code};
use crate::{ptr, BelfryDevice};

/// `belfry_device_query` key: device memory (VRAM) in bytes.
pub const BELFRY_CAP_VRAM_SIZE: u32 = 1;
/// `belfry_device_query` key: the number of engines (engine ids 0..count-1).
pub const BELFRY_CAP_ENGINE_COUNT: u32 = 2;
/// `belfry_device_query` key: the number of doorbells.
pub const BELFRY_CAP_DOORBELL_COUNT: u32 = 3;
/// `belfry_device_query` key: the engines that take user-mode queues, as a bit mask (bit N:
/// engine N).
pub const BELFRY_CAP_USER_MODE_ENGINES: u32 = 4;
/// `belfry_device_query` key: 1 when native GPU fences (DEFAULT, INTRA_GPU kinds) are
/// supported, else 0.
pub const BELFRY_CAP_NATIVE_FENCES: u32 = 5;
/// `belfry_device_query` key: the native fence capability version.
pub const BELFRY_CAP_NATIVE_FENCE_VERSION: u32 = 6;
/// `belfry_device_query` key: 1 when `belfry_fence_export_sync_file` is available, else 0.
pub const BELFRY_CAP_SYNC_FILE_EXPORT: u32 = 7;
/// `belfry_device_query` key: the fence memory segments the device offers (a bit mask of the
/// uapi's segments).
pub const BELFRY_CAP_FENCE_SEGMENTS: u32 = 8;
/// `belfry_device_query` key: 1 when the device maps system memory to the GPU per process
/// (`MAP_TO_GPU_SYSTEM_PROCESS`), else 0.
pub const BELFRY_CAP_MAP_TO_GPU_SYSTEM_PROCESS: u32 = 9;
/// `belfry_device_query` key: the device's capability bits (docs/PROTOCOL.md, `CAPS`).
pub const BELFRY_CAP_BITS: u32 = 10;
/// `belfry_device_query` key: 1 when the OS supports optimized DEFAULT fences (CAP-04), else 0.
pub const BELFRY_CAP_OS_OPTIMIZED_DEFAULT_FENCE: u32 = 11;
/// `belfry_device_query` key: 1 when the OS supports INTRA_GPU fences (CAP-04), else 0.
pub const BELFRY_CAP_OS_INTRA_GPU_FENCE: u32 = 12;

/// Stores, at `*value`, what the open device `dev` offers for `cap` (a `BELFRY_CAP_*` key).
/// `-EINVAL` for an unknown key.
///
/// # Safety
/// `dev` is NULL or a live device; `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_device_query(dev: *const BelfryDevice, cap: u32, value: *mut u64) -> c_int {
    // SAFETY: the caller's contract for `dev`.
    let Some(dev) = (unsafe { ptr::shared(dev) }) else { return invalid("belfry_device_query: dev") };
    let caps = dev.0.caps();
    let answer = match cap {
        BELFRY_CAP_VRAM_SIZE => caps.vram_size(),
        BELFRY_CAP_ENGINE_COUNT => caps.engine_count().into(),
        BELFRY_CAP_DOORBELL_COUNT => caps.doorbell_count().into(),
        BELFRY_CAP_USER_MODE_ENGINES => (0..caps.engine_count().min(32))
            .filter(|&e| caps.user_mode_submission(EngineId::new(e)))
            .map(|e| 1u64 << e)
            .sum(),
        BELFRY_CAP_NATIVE_FENCES => caps.native_gpu_fence_supported().into(),
        BELFRY_CAP_NATIVE_FENCE_VERSION => caps.native_fence_caps_version().into(),
        BELFRY_CAP_SYNC_FILE_EXPORT => caps.sync_file_export().into(),
        BELFRY_CAP_FENCE_SEGMENTS => caps.fence_segments().into(),
        BELFRY_CAP_MAP_TO_GPU_SYSTEM_PROCESS => caps.map_to_gpu_system_process().into(),
        BELFRY_CAP_BITS => caps.bits().0.into(),
        BELFRY_CAP_OS_OPTIMIZED_DEFAULT_FENCE => caps.os_optimized_default_fence().into(),
        BELFRY_CAP_OS_INTRA_GPU_FENCE => caps.os_intra_gpu_fence().into(),
        _ => return invalid("belfry_device_query: unknown cap"),
    };
    // SAFETY: the caller's contract for `value`.
    Code::stored(unsafe { ptr::write(value, answer) }, "belfry_device_query: value")
}

/// Stores the path of the `index`th Belfry device of the system (by `/dev/belfry<N>` number)
/// in `path`, `len` bytes with the terminating NUL. `-ENOENT` past the last device (index
/// 0..n-1 enumerate them all), `-ERANGE` when `len` is too small.
///
/// # Safety
/// `path` is NULL or points at `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn belfry_device_enumerate(index: u32, path: *mut c_char, len: u32) -> c_int {
    // SAFETY: the caller's contract for `path`.
    let Some(out) = (unsafe { ptr::slice_mut(path.cast::<u8>(), len as usize) }) else {
        return invalid("belfry_device_enumerate: path");
    };
    let devices = match Device::enumerate() {
        Ok(devices) => devices,
        Err(e) => return fail(&e),
    };
    let Some(found) = devices.get(index as usize) else {
        return code(libc::ENOENT, &format!("belfry_device_enumerate: {} devices, no index {index}", devices.len()));
    };
    let bytes = found.as_os_str().as_encoded_bytes();
    if bytes.len() >= out.len() {
        return code(libc::ERANGE, "belfry_device_enumerate: path buffer too small");
    }
    out[..bytes.len()].copy_from_slice(bytes);
    out[bytes.len()] = 0;
    0
}

/// Opens `/dev/belfry<n>` and stores it at `*out` (as `belfry_device_open`).
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn belfry_device_open_index(n: u32, out: *mut *mut BelfryDevice) -> c_int {
    match Device::open_index(n) {
        // SAFETY: the caller's contract for `out`.
        Ok(dev) => Code::stored(unsafe { ptr::give(out, BelfryDevice(dev)) }, "belfry_device_open_index: out"),
        Err(e) => fail(&e),
    }
}

//! `libbelfry_d3dkmt`: the D3DKMT-shaped C API of Belfry. Programs written to the WDDM 3.2
//! documentation of user-mode submission and native fences (`D3DKMTCreateHwQueue`,
//! `D3DKMTCreateDoorbell`, `D3DKMTCreateNativeFence`, the waits and signals from the CPU and the
//! GPU, ...) build against the hand-written header `include/belfry_d3dkmt.h` and run on
//! Belfry's device over the user-mode driver library, [`belfry_umd`]. Built as a `cdylib`
//! (`libbelfry_d3dkmt.so`) and a `staticlib` (`libbelfry_d3dkmt.a`); `belfry-d3dkmt.pc` is its
//! pkg-config file. The README's table lists every D3DKMT name of the reference texts:
//! implemented, partly, or not supported (`STATUS_NOT_SUPPORTED`, never a faked success).
//!
//! Code map: `types.rs` the documented structures (layouts checked against the header's
//! static assertions); `status.rs` `NTSTATUS` values and the library's errors mapped onto them;
//! `objects.rs` the process-wide `D3DKMT_HANDLE` table; `adapter.rs` adapters, devices and
//! contexts; `hwqueue.rs` hardware queues, doorbells and submissions; `sync.rs` native and
//! monitored fences and their sharing through file descriptors; `waits.rs` waits and signals
//! from the CPU and the GPU; `unsupported.rs` the calls with no Belfry mechanism; `caller_tests.rs` what every call
//! does with NULL pointers and handles of no object; the
//! caller's pointers become references through `belfry-umd-c`'s `ptr.rs`, compiled here too.

mod adapter;
#[cfg(test)]
mod caller_tests;
mod hwqueue;
mod objects;
/// The caller's pointers as references and slices: the conversions of the library's other C
/// API, one file for both (this API converts no handles, boxes or strings through it).
#[allow(dead_code)]
#[path = "../../umd-c/src/ptr.rs"]
mod ptr;
mod status;
mod sync;
mod types;
mod unsupported;
mod waits;

/// The referent of an argument pointer, or `STATUS_INVALID_PARAMETER` from the calling
/// function for NULL.
#[macro_export]
#[doc(hidden)]
macro_rules! require {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return $crate::status::STATUS_INVALID_PARAMETER,
        }
    };
}

//! The structures of `include/belfry_d3dkmt.h` in Rust, field for field (`#[repr(C)]`, the
//! documented names). Bitfield structures are their `Value` (`u32`); unions are Rust unions
//! of the members this library reads or writes. The `layouts_match_the_header` test checks
//! every size and offset the header's static assertions pin.

#![allow(non_snake_case, non_camel_case_types, missing_docs, clippy::upper_case_acronyms)]

use core::ffi::c_void;

/// `D3DKMT_HANDLE`: a process-wide handle of this library, 0 for none.
pub type D3DKMT_HANDLE = u32;
/// `NTSTATUS`.
pub type NTSTATUS = i32;
/// `HANDLE`: on Belfry, a file descriptor as `(HANDLE)(intptr_t)fd` where the documentation
/// uses an NT handle.
pub type HANDLE = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LUID {
    pub LowPart: u32,
    pub HighPart: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct D3DKMT_ADAPTERINFO {
    pub hAdapter: D3DKMT_HANDLE,
    pub AdapterLuid: LUID,
    pub NumOfSources: u32,
    pub bPrecisePresentRegionsPreferred: i32,
}

#[repr(C)]
pub struct D3DKMT_ENUMADAPTERS2 {
    pub NumAdapters: u32,
    pub pAdapters: *mut D3DKMT_ADAPTERINFO,
}

#[repr(C)]
pub struct D3DKMT_OPENADAPTERFROMLUID {
    pub AdapterLuid: LUID,
    pub hAdapter: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_CLOSEADAPTER {
    pub hAdapter: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_CREATEDEVICEFLAGS {
    pub Value: u32,
}

#[repr(C)]
pub struct D3DDDI_PATCHLOCATIONLIST {
    pub AllocationIndex: u32,
    pub Value: u32,
    pub DriverId: u32,
    pub AllocationOffset: u32,
    pub PatchOffset: u32,
    pub SplitOffset: u32,
}

#[repr(C)]
pub union D3DKMT_CREATEDEVICE_ADAPTER {
    pub hAdapter: D3DKMT_HANDLE,
    pub pAdapter: *mut c_void,
}

#[repr(C)]
pub struct D3DKMT_CREATEDEVICE {
    pub adapter: D3DKMT_CREATEDEVICE_ADAPTER,
    pub Flags: D3DKMT_CREATEDEVICEFLAGS,
    pub hDevice: D3DKMT_HANDLE,
    pub pCommandBuffer: *mut c_void,
    pub CommandBufferSize: u32,
    pub pAllocationList: *mut c_void,
    pub AllocationListSize: u32,
    pub pPatchLocationList: *mut D3DDDI_PATCHLOCATIONLIST,
    pub PatchLocationListSize: u32,
}

#[repr(C)]
pub struct D3DKMT_DESTROYDEVICE {
    pub hDevice: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DDDI_CREATECONTEXTFLAGS {
    pub Value: u32,
}

#[repr(C)]
pub struct D3DKMT_CREATECONTEXTVIRTUAL {
    pub hDevice: D3DKMT_HANDLE,
    pub NodeOrdinal: u32,
    pub EngineAffinity: u32,
    pub Flags: D3DDDI_CREATECONTEXTFLAGS,
    pub pPrivateDriverData: *mut c_void,
    pub PrivateDriverDataSize: u32,
    pub ClientHint: u32,
    pub hContext: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_DESTROYCONTEXT {
    pub hContext: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DDDI_CREATEHWQUEUEFLAGS {
    pub Value: u32,
}

/// `D3DDDI_CREATEHWQUEUEFLAGS::UserModeSubmission`.
pub const HWQUEUE_USER_MODE_SUBMISSION: u32 = 1 << 4;

#[repr(C)]
pub struct D3DKMT_CREATEHWQUEUE {
    pub hHwContext: D3DKMT_HANDLE,
    pub Flags: D3DDDI_CREATEHWQUEUEFLAGS,
    pub PrivateDriverDataSize: u32,
    pub pPrivateDriverData: *mut c_void,
    pub hHwQueue: D3DKMT_HANDLE,
    pub hHwQueueProgressFence: D3DKMT_HANDLE,
    pub HwQueueProgressFenceCPUVirtualAddress: *mut c_void,
    pub HwQueueProgressFenceGPUVirtualAddress: u64,
}

#[repr(C)]
pub struct D3DKMT_DESTROYHWQUEUE {
    pub hHwQueue: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_SUBMITCOMMANDTOHWQUEUE {
    pub hHwQueue: D3DKMT_HANDLE,
    pub HwQueueProgressFenceId: u64,
    pub CommandBuffer: u64,
    pub CommandLength: u32,
    pub PrivateDriverDataSize: u32,
    pub pPrivateDriverData: *mut c_void,
    pub NumPrimaries: u32,
    pub WrittenPrimaries: *const D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_CREATE_DOORBELL_FLAGS {
    pub Value: u32,
}

#[repr(C)]
pub struct D3DKMT_CREATE_DOORBELL {
    pub hHwQueue: D3DKMT_HANDLE,
    pub hRingBuffer: D3DKMT_HANDLE,
    pub hRingBufferControl: D3DKMT_HANDLE,
    pub Flags: D3DKMT_CREATE_DOORBELL_FLAGS,
    pub PrivateDriverDataSize: u32,
    pub PrivateDriverData: *mut c_void,
    pub DoorbellCPUVirtualAddress: *mut c_void,
    pub DoorbellSecondaryCPUVirtualAddress: *mut c_void,
    pub DoorbellStatusCPUVirtualAddress: *mut c_void,
    pub HwQueueProgressFenceLastQueuedValueCPUVirtualAddress: *mut c_void,
    pub hDoorbell: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_CONNECT_DOORBELL_FLAGS {
    pub Value: u32,
}

#[repr(C)]
pub struct D3DKMT_CONNECT_DOORBELL {
    pub hDoorbell: D3DKMT_HANDLE,
    pub Flags: D3DKMT_CONNECT_DOORBELL_FLAGS,
}

#[repr(C)]
pub struct D3DKMT_DESTROY_DOORBELL {
    pub hDoorbell: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS {
    pub Value: u32,
}

#[repr(C)]
pub struct D3DKMT_NOTIFY_WORK_SUBMISSION {
    pub hHwQueue: D3DKMT_HANDLE,
    pub Flags: D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS,
}

#[repr(C)]
pub struct D3DDDICB_LOCK2FLAGS {
    pub Value: u32,
}

#[repr(C)]
pub struct D3DKMT_LOCK2 {
    pub hDevice: D3DKMT_HANDLE,
    pub hAllocation: D3DKMT_HANDLE,
    pub Flags: D3DDDICB_LOCK2FLAGS,
    pub pData: *mut c_void,
}

/// `D3DDDI_SYNCHRONIZATIONOBJECT_TYPE::D3DDDI_MONITORED_FENCE`.
pub const D3DDDI_MONITORED_FENCE: u32 = 5;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS {
    pub Value: u32,
}

/// `D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS::Shared`.
pub const SYNC_FLAG_SHARED: u32 = 1 << 0;
/// `D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS::NtSecuritySharing`.
pub const SYNC_FLAG_NT_SECURITY_SHARING: u32 = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MonitoredFenceInfo {
    pub InitialFenceValue: u64,
    pub FenceValueCPUVirtualAddress: *mut c_void,
    pub FenceValueGPUVirtualAddress: u64,
    pub EngineAffinity: u32,
    pub Padding: u32,
}

#[repr(C)]
pub union SyncObjectInfo2Union {
    pub MonitoredFence: MonitoredFenceInfo,
    pub Reserved: [u64; 8],
}

#[repr(C)]
pub struct D3DDDI_SYNCHRONIZATIONOBJECTINFO2 {
    pub Type: u32,
    pub Flags: D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS,
    pub u: SyncObjectInfo2Union,
    pub SharedHandle: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_CREATESYNCHRONIZATIONOBJECT2 {
    pub hDevice: D3DKMT_HANDLE,
    pub Info: D3DDDI_SYNCHRONIZATIONOBJECTINFO2,
    pub hSyncObject: D3DKMT_HANDLE,
}

#[repr(C)]
pub struct D3DKMT_DESTROYSYNCHRONIZATIONOBJECT {
    pub hSyncObject: D3DKMT_HANDLE,
}

/// `D3DDDI_NATIVEFENCE_TYPE_DEFAULT`.
pub const D3DDDI_NATIVEFENCE_TYPE_DEFAULT: u32 = 0;
/// `D3DDDI_NATIVEFENCE_TYPE_INTRA_GPU`.
pub const D3DDDI_NATIVEFENCE_TYPE_INTRA_GPU: u32 = 1;
/// `D3DDDI_NATIVE_FENCE_PDD_SIZE`.
pub const D3DDDI_NATIVE_FENCE_PDD_SIZE: usize = 64;

#[repr(C)]
pub struct D3DDDI_NATIVEFENCEMAPPING {
    pub CurrentValueCpuVa: *mut c_void,
    pub CurrentValueGpuVa: u64,
    pub MonitoredValueGpuVa: u64,
    pub Reserved: [u8; 32],
}

#[repr(C)]
pub struct D3DDDI_NATIVEFENCEINFO {
    pub InitialFenceValue: u64,
    pub EngineAffinity: u32,
    pub Type: u32,
    pub Flags: D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS,
    pub NativeFenceMapping: D3DDDI_NATIVEFENCEMAPPING,
    pub Reserved: [u8; 28],
}

#[repr(C)]
pub struct D3DKMT_CREATENATIVEFENCE_FLAGS {
    pub Value: u32,
}

#[repr(C)]
pub struct D3DKMT_CREATENATIVEFENCE {
    pub hDevice: D3DKMT_HANDLE,
    pub hSyncObject: D3DKMT_HANDLE,
    pub PrivateDriverData: [u8; D3DDDI_NATIVE_FENCE_PDD_SIZE],
    pub Info: D3DDDI_NATIVEFENCEINFO,
    pub Flags: D3DKMT_CREATENATIVEFENCE_FLAGS,
    pub Reserved: [u8; 28],
}

#[repr(C)]
pub struct D3DKMT_OPENNATIVEFENCEFROMNTHANDLE {
    pub hNtHandle: HANDLE,
    pub hDevice: D3DKMT_HANDLE,
    pub EngineAffinity: u32,
    pub Flags: D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS,
    pub hSyncObject: D3DKMT_HANDLE,
    pub NativeFenceMapping: D3DDDI_NATIVEFENCEMAPPING,
    pub PrivateDriverData: [u8; D3DDDI_NATIVE_FENCE_PDD_SIZE],
    pub Reserved: [u8; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct OpenedMonitoredFence {
    pub FenceValueCPUVirtualAddress: *mut c_void,
    pub FenceValueGPUVirtualAddress: u64,
    pub EngineAffinity: u32,
}

#[repr(C)]
pub union OpenSyncObject2Union {
    pub MonitoredFence: OpenedMonitoredFence,
    pub Reserved: [u64; 8],
}

#[repr(C)]
pub struct D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2 {
    pub hNtHandle: HANDLE,
    pub hDevice: D3DKMT_HANDLE,
    pub Flags: D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS,
    pub hSyncObject: D3DKMT_HANDLE,
    pub u: OpenSyncObject2Union,
}

#[repr(C)]
pub struct D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS {
    pub Value: u32,
}

/// `D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS::WaitAny`.
pub const WAIT_ANY: u32 = 1;

#[repr(C)]
pub struct D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU {
    pub hDevice: D3DKMT_HANDLE,
    pub ObjectCount: u32,
    pub ObjectHandleArray: *const D3DKMT_HANDLE,
    pub FenceValueArray: *const u64,
    pub hAsyncEvent: HANDLE,
    pub Flags: D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS,
}

#[repr(C)]
pub struct D3DDDICB_SIGNALFLAGS {
    pub Value: u32,
}

#[repr(C)]
pub struct D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU {
    pub hDevice: D3DKMT_HANDLE,
    pub ObjectCount: u32,
    pub ObjectHandleArray: *const D3DKMT_HANDLE,
    pub FenceValueArray: *const u64,
    pub Flags: D3DDDICB_SIGNALFLAGS,
}

#[repr(C)]
pub union GpuWaitValues {
    pub MonitoredFenceValueArray: *const u64,
    pub FenceValue: u64,
    pub Reserved: [u64; 8],
}

#[repr(C)]
pub struct D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU {
    pub hContext: D3DKMT_HANDLE,
    pub ObjectCount: u32,
    pub ObjectHandleArray: *const D3DKMT_HANDLE,
    pub u: GpuWaitValues,
}

#[repr(C)]
pub union GpuSignalValues {
    pub MonitoredFenceValueArray: *const u64,
    pub Reserved: [u64; 8],
}

#[repr(C)]
pub struct D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU {
    pub hContext: D3DKMT_HANDLE,
    pub ObjectCount: u32,
    pub ObjectHandleArray: *const D3DKMT_HANDLE,
    pub u: GpuSignalValues,
}

/// Declared for the layout check: no call of this API takes it.
#[repr(C)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct D3DKMT_WDDM_3_1_CAPS {
    pub Value: u32,
}

/// Size and field offsets of each structure above by its C name, the fields as the header's
/// static assertions name them (`MonitoredFence.EngineAffinity` for a member of an unnamed
/// union): what `layouts_match_the_header` compares with the header.
macro_rules! layout_table {
    ($($ty:ident { $($cname:literal => $($path:ident).+),* $(,)? })*) => {
        #[cfg(test)]
        pub(crate) fn size_of_type(name: &str) -> Option<usize> {
            match name {
                $(stringify!($ty) => Some(core::mem::size_of::<$ty>()),)*
                _ => None,
            }
        }
        #[cfg(test)]
        pub(crate) fn offset_of_field(ty: &str, field: &str) -> Option<usize> {
            match (ty, field) {
                $($((stringify!($ty), $cname) => Some(core::mem::offset_of!($ty, $($path).+)),)*)*
                _ => None,
            }
        }
    };
}

layout_table! {
    LUID { "LowPart" => LowPart, "HighPart" => HighPart }
    D3DKMT_ADAPTERINFO { "hAdapter" => hAdapter, "AdapterLuid" => AdapterLuid, "NumOfSources" => NumOfSources,
        "bPrecisePresentRegionsPreferred" => bPrecisePresentRegionsPreferred }
    D3DKMT_ENUMADAPTERS2 { "NumAdapters" => NumAdapters, "pAdapters" => pAdapters }
    D3DKMT_OPENADAPTERFROMLUID { "AdapterLuid" => AdapterLuid, "hAdapter" => hAdapter }
    D3DKMT_CLOSEADAPTER { "hAdapter" => hAdapter }
    D3DKMT_CREATEDEVICEFLAGS {}
    D3DDDI_PATCHLOCATIONLIST { "AllocationIndex" => AllocationIndex, "Value" => Value, "DriverId" => DriverId,
        "AllocationOffset" => AllocationOffset, "PatchOffset" => PatchOffset, "SplitOffset" => SplitOffset }
    D3DKMT_CREATEDEVICE { "hAdapter" => adapter.hAdapter, "pAdapter" => adapter.pAdapter, "Flags" => Flags,
        "hDevice" => hDevice, "pCommandBuffer" => pCommandBuffer, "CommandBufferSize" => CommandBufferSize,
        "pAllocationList" => pAllocationList, "AllocationListSize" => AllocationListSize,
        "pPatchLocationList" => pPatchLocationList, "PatchLocationListSize" => PatchLocationListSize }
    D3DKMT_DESTROYDEVICE { "hDevice" => hDevice }
    D3DDDI_CREATECONTEXTFLAGS { "Value" => Value }
    D3DKMT_CREATECONTEXTVIRTUAL { "hDevice" => hDevice, "NodeOrdinal" => NodeOrdinal, "EngineAffinity" => EngineAffinity,
        "Flags" => Flags, "pPrivateDriverData" => pPrivateDriverData, "PrivateDriverDataSize" => PrivateDriverDataSize,
        "ClientHint" => ClientHint, "hContext" => hContext }
    D3DKMT_DESTROYCONTEXT { "hContext" => hContext }
    D3DDDI_CREATEHWQUEUEFLAGS { "Value" => Value }
    D3DKMT_CREATEHWQUEUE { "hHwContext" => hHwContext, "Flags" => Flags, "PrivateDriverDataSize" => PrivateDriverDataSize,
        "pPrivateDriverData" => pPrivateDriverData, "hHwQueue" => hHwQueue, "hHwQueueProgressFence" => hHwQueueProgressFence,
        "HwQueueProgressFenceCPUVirtualAddress" => HwQueueProgressFenceCPUVirtualAddress,
        "HwQueueProgressFenceGPUVirtualAddress" => HwQueueProgressFenceGPUVirtualAddress }
    D3DKMT_DESTROYHWQUEUE { "hHwQueue" => hHwQueue }
    D3DKMT_SUBMITCOMMANDTOHWQUEUE { "hHwQueue" => hHwQueue, "HwQueueProgressFenceId" => HwQueueProgressFenceId,
        "CommandBuffer" => CommandBuffer, "CommandLength" => CommandLength, "PrivateDriverDataSize" => PrivateDriverDataSize,
        "pPrivateDriverData" => pPrivateDriverData, "NumPrimaries" => NumPrimaries, "WrittenPrimaries" => WrittenPrimaries }
    D3DKMT_CREATE_DOORBELL_FLAGS { "Value" => Value }
    D3DKMT_CREATE_DOORBELL { "hHwQueue" => hHwQueue, "hRingBuffer" => hRingBuffer, "hRingBufferControl" => hRingBufferControl,
        "Flags" => Flags, "PrivateDriverDataSize" => PrivateDriverDataSize, "PrivateDriverData" => PrivateDriverData,
        "DoorbellCPUVirtualAddress" => DoorbellCPUVirtualAddress,
        "DoorbellSecondaryCPUVirtualAddress" => DoorbellSecondaryCPUVirtualAddress,
        "DoorbellStatusCPUVirtualAddress" => DoorbellStatusCPUVirtualAddress,
        "HwQueueProgressFenceLastQueuedValueCPUVirtualAddress" => HwQueueProgressFenceLastQueuedValueCPUVirtualAddress,
        "hDoorbell" => hDoorbell }
    D3DKMT_CONNECT_DOORBELL_FLAGS { "Value" => Value }
    D3DKMT_CONNECT_DOORBELL { "hDoorbell" => hDoorbell, "Flags" => Flags }
    D3DKMT_DESTROY_DOORBELL { "hDoorbell" => hDoorbell }
    D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS { "Value" => Value }
    D3DKMT_NOTIFY_WORK_SUBMISSION { "hHwQueue" => hHwQueue, "Flags" => Flags }
    D3DDDICB_LOCK2FLAGS { "Value" => Value }
    D3DKMT_LOCK2 { "hDevice" => hDevice, "hAllocation" => hAllocation, "Flags" => Flags, "pData" => pData }
    D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS { "Value" => Value }
    D3DDDI_SYNCHRONIZATIONOBJECTINFO2 { "Type" => Type, "Flags" => Flags,
        "MonitoredFence.InitialFenceValue" => u.MonitoredFence.InitialFenceValue,
        "MonitoredFence.FenceValueCPUVirtualAddress" => u.MonitoredFence.FenceValueCPUVirtualAddress,
        "MonitoredFence.FenceValueGPUVirtualAddress" => u.MonitoredFence.FenceValueGPUVirtualAddress,
        "MonitoredFence.EngineAffinity" => u.MonitoredFence.EngineAffinity, "SharedHandle" => SharedHandle }
    D3DKMT_CREATESYNCHRONIZATIONOBJECT2 { "hDevice" => hDevice, "Info" => Info, "hSyncObject" => hSyncObject }
    D3DKMT_DESTROYSYNCHRONIZATIONOBJECT { "hSyncObject" => hSyncObject }
    D3DDDI_NATIVEFENCEMAPPING { "CurrentValueCpuVa" => CurrentValueCpuVa, "CurrentValueGpuVa" => CurrentValueGpuVa,
        "MonitoredValueGpuVa" => MonitoredValueGpuVa, "Reserved" => Reserved }
    D3DDDI_NATIVEFENCEINFO { "InitialFenceValue" => InitialFenceValue, "EngineAffinity" => EngineAffinity, "Type" => Type,
        "Flags" => Flags, "NativeFenceMapping" => NativeFenceMapping, "Reserved" => Reserved }
    D3DKMT_CREATENATIVEFENCE_FLAGS { "Value" => Value }
    D3DKMT_CREATENATIVEFENCE { "hDevice" => hDevice, "hSyncObject" => hSyncObject, "PrivateDriverData" => PrivateDriverData,
        "Info" => Info, "Flags" => Flags, "Reserved" => Reserved }
    D3DKMT_OPENNATIVEFENCEFROMNTHANDLE { "hNtHandle" => hNtHandle, "hDevice" => hDevice, "EngineAffinity" => EngineAffinity,
        "Flags" => Flags, "hSyncObject" => hSyncObject, "NativeFenceMapping" => NativeFenceMapping,
        "PrivateDriverData" => PrivateDriverData, "Reserved" => Reserved }
    D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2 { "hNtHandle" => hNtHandle, "hDevice" => hDevice, "Flags" => Flags,
        "hSyncObject" => hSyncObject,
        "MonitoredFence.FenceValueCPUVirtualAddress" => u.MonitoredFence.FenceValueCPUVirtualAddress,
        "MonitoredFence.FenceValueGPUVirtualAddress" => u.MonitoredFence.FenceValueGPUVirtualAddress,
        "MonitoredFence.EngineAffinity" => u.MonitoredFence.EngineAffinity }
    D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS { "Value" => Value }
    D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU { "hDevice" => hDevice, "ObjectCount" => ObjectCount,
        "ObjectHandleArray" => ObjectHandleArray, "FenceValueArray" => FenceValueArray, "hAsyncEvent" => hAsyncEvent,
        "Flags" => Flags }
    D3DDDICB_SIGNALFLAGS { "Value" => Value }
    D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU { "hDevice" => hDevice, "ObjectCount" => ObjectCount,
        "ObjectHandleArray" => ObjectHandleArray, "FenceValueArray" => FenceValueArray, "Flags" => Flags }
    D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU { "hContext" => hContext, "ObjectCount" => ObjectCount,
        "ObjectHandleArray" => ObjectHandleArray, "MonitoredFenceValueArray" => u.MonitoredFenceValueArray,
        "FenceValue" => u.FenceValue }
    D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU { "hContext" => hContext, "ObjectCount" => ObjectCount,
        "ObjectHandleArray" => ObjectHandleArray, "MonitoredFenceValueArray" => u.MonitoredFenceValueArray }
    D3DKMT_WDDM_3_1_CAPS { "Value" => Value }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `sizeof`/`offsetof` the header asserts, with its number.
    fn header_assertions() -> Vec<(String, Option<String>, usize)> {
        let header = include_str!("../include/belfry_d3dkmt.h");
        let mut out = Vec::new();
        for line in header.lines().filter(|l| l.starts_with("BELFRY_LAYOUT_ASSERT(")) {
            let inner = &line["BELFRY_LAYOUT_ASSERT(".len()..];
            let (lhs, rest) = inner.split_once(" == ").expect("an assertion compares with ==");
            let (n, _) = rest.split_once(',').expect("an assertion has a message");
            let n: usize = n.trim().parse().expect("a number");
            if let Some(ty) = lhs.strip_prefix("sizeof(").and_then(|s| s.strip_suffix(')')) {
                out.push((ty.to_string(), None, n));
            } else if let Some(args) = lhs.strip_prefix("offsetof(").and_then(|s| s.strip_suffix(')')) {
                let (ty, field) = args.split_once(", ").expect("offsetof(T, F)");
                out.push((ty.to_string(), Some(field.to_string()), n));
            } else {
                panic!("unknown assertion {line}");
            }
        }
        out
    }

    #[test]
    fn layouts_match_the_header() {
        let asserted = header_assertions();
        assert!(asserted.len() > 150, "the header asserts {} layouts", asserted.len());
        for (ty, field, n) in asserted {
            let rust = match &field {
                None => size_of_type(&ty),
                Some(f) => offset_of_field(&ty, f),
            };
            let what = format!("{ty}{}", field.as_ref().map(|f| format!(".{f}")).unwrap_or_default());
            assert_eq!(rust, Some(n), "{what}: the header asserts {n}, Rust has {rust:?}");
        }
    }
}

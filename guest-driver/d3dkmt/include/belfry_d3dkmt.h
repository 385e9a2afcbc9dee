/*
 * belfry_d3dkmt.h: the D3DKMT-shaped C API of Belfry (libbelfry_d3dkmt).
 *
 * The functions, structures, field names and types of the D3DKMT user-mode interface of the
 * WDDM 3.2 user-mode submission and native fence model, as Microsoft documents them, on Linux
 * over Belfry's user-mode driver library. Layouts are those of the documented declarations on
 * LP64 (x86_64): pointers are 8 bytes, D3DKMT_ALIGN64 members 8-aligned; the _Static_assert
 * lines at the end pin every size and offset.
 *
 * Results are NTSTATUS values with their documented meanings. What Belfry has no mechanism for
 * returns STATUS_NOT_SUPPORTED and changes nothing (the crate's README lists every name).
 *
 * Belfry's mappings (not in the Windows documentation):
 *  - an adapter is one /dev/belfry<N>; its LUID is { LowPart = N, HighPart = 0 };
 *  - a HANDLE standing for an NT handle (D3DKMTShareObjects, D3DKMTOpenNativeFenceFromNTHandle)
 *    is a file descriptor: (HANDLE)(intptr_t)fd. The caller owns it and closes it with close();
 *  - a D3DKMT device is a Belfry context (one GPU address space); a D3DKMT context
 *    (D3DKMTCreateContextVirtual) is a kernel-mode queue on engine NodeOrdinal; a hardware
 *    queue (D3DKMTCreateHwQueue) is a Belfry queue on its context's engine, user-mode
 *    (ring and doorbell) when Flags.UserModeSubmission is set, kernel-mode otherwise.
 * Handles are process-wide, from any thread; calls on one object are serialized.
 */
#ifndef BELFRY_D3DKMT_H
#define BELFRY_D3DKMT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t NTSTATUS;
typedef uint8_t BYTE;
typedef uint32_t UINT;
typedef uint32_t ULONG;
typedef uint32_t DWORD;
typedef int32_t LONG;
typedef int32_t BOOL;
typedef uint64_t UINT64;
typedef void VOID;
typedef void *HANDLE;
typedef UINT D3DKMT_HANDLE;
typedef UINT64 D3DGPU_VIRTUAL_ADDRESS;

#define D3DKMT_ALIGN64 __attribute__((aligned(8)))

#define NT_SUCCESS(Status) (((NTSTATUS)(Status)) >= 0)

#define STATUS_SUCCESS ((NTSTATUS)0x00000000)
#define STATUS_TIMEOUT ((NTSTATUS)0x00000102)
#define STATUS_UNSUCCESSFUL ((NTSTATUS)0xC0000001)
#define STATUS_INVALID_HANDLE ((NTSTATUS)0xC0000008)
#define STATUS_INVALID_PARAMETER ((NTSTATUS)0xC000000D)
#define STATUS_NO_MEMORY ((NTSTATUS)0xC0000017)
#define STATUS_ACCESS_DENIED ((NTSTATUS)0xC0000022)
#define STATUS_BUFFER_TOO_SMALL ((NTSTATUS)0xC0000023)
#define STATUS_INSUFFICIENT_RESOURCES ((NTSTATUS)0xC000009A)
#define STATUS_NOT_SUPPORTED ((NTSTATUS)0xC00000BB)
#define STATUS_DEVICE_REMOVED ((NTSTATUS)0xC00002B6)

typedef struct _LUID {
    DWORD LowPart;
    LONG HighPart;
} LUID;

/* ------------------------------------------------------------------ adapters and devices */

typedef struct _D3DKMT_ADAPTERINFO {
    D3DKMT_HANDLE hAdapter;
    LUID AdapterLuid;
    ULONG NumOfSources;
    BOOL bPrecisePresentRegionsPreferred;
} D3DKMT_ADAPTERINFO;

typedef struct _D3DKMT_ENUMADAPTERS2 {
    ULONG NumAdapters;
    D3DKMT_ADAPTERINFO *pAdapters;
} D3DKMT_ENUMADAPTERS2;

typedef struct _D3DKMT_OPENADAPTERFROMLUID {
    LUID AdapterLuid;
    D3DKMT_HANDLE hAdapter;
} D3DKMT_OPENADAPTERFROMLUID;

typedef struct _D3DKMT_CLOSEADAPTER {
    D3DKMT_HANDLE hAdapter;
} D3DKMT_CLOSEADAPTER;

typedef struct _D3DKMT_CREATEDEVICEFLAGS {
    UINT LegacyMode : 1;
    UINT RequestVSync : 1;
    UINT DisableGpuTimeout : 1;
    UINT Reserved : 29;
} D3DKMT_CREATEDEVICEFLAGS;

typedef struct _D3DDDI_ALLOCATIONLIST D3DDDI_ALLOCATIONLIST;

typedef struct _D3DDDI_PATCHLOCATIONLIST {
    UINT AllocationIndex;
    union {
        struct {
            UINT SlotId : 24;
            UINT Reserved : 8;
        };
        UINT Value;
    };
    UINT DriverId;
    UINT AllocationOffset;
    UINT PatchOffset;
    UINT SplitOffset;
} D3DDDI_PATCHLOCATIONLIST;

typedef struct _D3DKMT_CREATEDEVICE {
    union {
        D3DKMT_HANDLE hAdapter;
        VOID *pAdapter;
    };
    D3DKMT_CREATEDEVICEFLAGS Flags;
    D3DKMT_HANDLE hDevice;
    VOID *pCommandBuffer;
    UINT CommandBufferSize;
    D3DDDI_ALLOCATIONLIST *pAllocationList;
    UINT AllocationListSize;
    D3DDDI_PATCHLOCATIONLIST *pPatchLocationList;
    UINT PatchLocationListSize;
} D3DKMT_CREATEDEVICE;

typedef struct _D3DKMT_DESTROYDEVICE {
    D3DKMT_HANDLE hDevice;
} D3DKMT_DESTROYDEVICE;

/* ------------------------------------------------------------------ contexts and hardware queues */

typedef enum _D3DKMT_CLIENTHINT {
    D3DKMT_CLIENTHINT_UNKNOWN = 0,
    D3DKMT_CLIENTHINT_OPENGL = 1,
    D3DKMT_CLIENTHINT_OPENCL = 3,
    D3DKMT_CLIENTHINT_VULKAN = 4,
    D3DKMT_CLIENTHINT_DX12 = 12
} D3DKMT_CLIENTHINT;

typedef struct _D3DDDI_CREATECONTEXTFLAGS {
    union {
        struct {
            UINT NullRendering : 1;
            UINT InitialData : 1;
            UINT DisableGpuTimeout : 1;
            UINT SynchronizationOnly : 1;
            UINT HwQueueSupported : 1;
            UINT NoKmdAccess : 1;
            UINT Reserved : 26;
        };
        UINT Value;
    };
} D3DDDI_CREATECONTEXTFLAGS;

typedef struct _D3DKMT_CREATECONTEXTVIRTUAL {
    D3DKMT_HANDLE hDevice;
    UINT NodeOrdinal;
    UINT EngineAffinity;
    D3DDDI_CREATECONTEXTFLAGS Flags;
    VOID *pPrivateDriverData;
    UINT PrivateDriverDataSize;
    D3DKMT_CLIENTHINT ClientHint;
    D3DKMT_HANDLE hContext;
} D3DKMT_CREATECONTEXTVIRTUAL;

typedef struct _D3DKMT_DESTROYCONTEXT {
    D3DKMT_HANDLE hContext;
} D3DKMT_DESTROYCONTEXT;

typedef struct _D3DDDI_CREATEHWQUEUEFLAGS {
    union {
        struct {
            UINT DisableGpuTimeout : 1;
            UINT NoBroadcastSignal : 1;
            UINT NoBroadcastWait : 1;
            UINT NoKmdAccess : 1;
            UINT UserModeSubmission : 1;
            UINT NativeProgressFence : 1;
            UINT Reserved : 26;
        };
        UINT Value;
    };
} D3DDDI_CREATEHWQUEUEFLAGS;

typedef struct _D3DKMT_CREATEHWQUEUE {
    D3DKMT_HANDLE hHwContext;
    D3DDDI_CREATEHWQUEUEFLAGS Flags;
    UINT PrivateDriverDataSize;
    VOID *pPrivateDriverData;
    D3DKMT_HANDLE hHwQueue;
    D3DKMT_HANDLE hHwQueueProgressFence;
    VOID *HwQueueProgressFenceCPUVirtualAddress;
    D3DKMT_ALIGN64 D3DGPU_VIRTUAL_ADDRESS HwQueueProgressFenceGPUVirtualAddress;
} D3DKMT_CREATEHWQUEUE;

typedef struct _D3DKMT_DESTROYHWQUEUE {
    D3DKMT_HANDLE hHwQueue;
} D3DKMT_DESTROYHWQUEUE;

typedef struct _D3DKMT_SUBMITCOMMANDTOHWQUEUE {
    D3DKMT_HANDLE hHwQueue;
    D3DKMT_ALIGN64 UINT64 HwQueueProgressFenceId;
    D3DKMT_ALIGN64 D3DGPU_VIRTUAL_ADDRESS CommandBuffer;
    UINT CommandLength;
    UINT PrivateDriverDataSize;
    VOID *pPrivateDriverData;
    UINT NumPrimaries;
    const D3DKMT_HANDLE *WrittenPrimaries;
} D3DKMT_SUBMITCOMMANDTOHWQUEUE;

/* Legacy (WDDM 1.x) DMA-buffer submission: declared so programs naming it compile. */
typedef struct _D3DKMT_SUBMITCOMMAND D3DKMT_SUBMITCOMMAND;

/* ------------------------------------------------------------------ doorbells */

typedef enum _D3DDDI_DOORBELL_STATUS {
    D3DDDI_DOORBELL_STATUS_CONNECTED = 0,
    D3DDDI_DOORBELL_STATUS_CONNECTED_NOTIFY = 1,
    D3DDDI_DOORBELL_STATUS_DISCONNECTED_RETRY = 2,
    D3DDDI_DOORBELL_STATUS_DISCONNECTED_ABORT = 3
} D3DDDI_DOORBELL_STATUS;
/* The names of the reference page of the enumeration (D3DDDI_DOORBELLSTATUS). */
typedef D3DDDI_DOORBELL_STATUS D3DDDI_DOORBELLSTATUS;
#define D3DDDI_DOORBELLSTATUS_CONNECTED D3DDDI_DOORBELL_STATUS_CONNECTED
#define D3DDDI_DOORBELLSTATUS_CONNECTED_NOTIFY_KMD D3DDDI_DOORBELL_STATUS_CONNECTED_NOTIFY
#define D3DDDI_DOORBELLSTATUS_DISCONNECTED_RETRY D3DDDI_DOORBELL_STATUS_DISCONNECTED_RETRY
#define D3DDDI_DOORBELLSTATUS_DISCONNECTED_ABORT D3DDDI_DOORBELL_STATUS_DISCONNECTED_ABORT
/* The status page at D3DKMT_CREATE_DOORBELL's DoorbellStatusCPUVirtualAddress holds one of these
 * values as a 32-bit word: read it and compare it with them. */

typedef struct _D3DKMT_CREATE_DOORBELL_FLAGS {
    union {
        struct {
            UINT ResizeRingBufferOperation : 1;
            UINT Reserved : 31;
        };
        UINT Value;
    };
} D3DKMT_CREATE_DOORBELL_FLAGS;

typedef struct _D3DKMT_CREATE_DOORBELL {
    D3DKMT_HANDLE hHwQueue;
    D3DKMT_HANDLE hRingBuffer;
    D3DKMT_HANDLE hRingBufferControl;
    D3DKMT_CREATE_DOORBELL_FLAGS Flags;
    UINT PrivateDriverDataSize;
    VOID *PrivateDriverData;
    VOID *DoorbellCPUVirtualAddress;
    VOID *DoorbellSecondaryCPUVirtualAddress;
    VOID *DoorbellStatusCPUVirtualAddress;
    VOID *HwQueueProgressFenceLastQueuedValueCPUVirtualAddress;
    D3DKMT_HANDLE hDoorbell;
} D3DKMT_CREATE_DOORBELL;

typedef struct _D3DKMT_CONNECT_DOORBELL_FLAGS {
    union {
        struct {
            UINT Reserved : 32;
        };
        UINT Value;
    };
} D3DKMT_CONNECT_DOORBELL_FLAGS;

typedef struct _D3DKMT_CONNECT_DOORBELL {
    D3DKMT_HANDLE hDoorbell;
    D3DKMT_CONNECT_DOORBELL_FLAGS Flags;
} D3DKMT_CONNECT_DOORBELL;

typedef struct _D3DKMT_DESTROY_DOORBELL {
    D3DKMT_HANDLE hDoorbell;
} D3DKMT_DESTROY_DOORBELL;

typedef struct _D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS {
    union {
        struct {
            UINT Reserved : 32;
        };
        UINT Value;
    };
} D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS;

typedef struct _D3DKMT_NOTIFY_WORK_SUBMISSION {
    D3DKMT_HANDLE hHwQueue;
    D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS Flags;
} D3DKMT_NOTIFY_WORK_SUBMISSION;

/* ------------------------------------------------------------------ allocations */

typedef struct _D3DDDICB_LOCK2FLAGS {
    union {
        struct {
            UINT Reserved : 32;
        };
        UINT Value;
    };
} D3DDDICB_LOCK2FLAGS;

typedef struct _D3DKMT_LOCK2 {
    D3DKMT_HANDLE hDevice;
    D3DKMT_HANDLE hAllocation;
    D3DDDICB_LOCK2FLAGS Flags;
    VOID *pData;
} D3DKMT_LOCK2;

/* ------------------------------------------------------------------ synchronization objects */

typedef enum _D3DDDI_SYNCHRONIZATIONOBJECT_TYPE {
    D3DDDI_SYNCHRONIZATION_MUTEX = 1,
    D3DDDI_SEMAPHORE = 2,
    D3DDDI_FENCE = 3,
    D3DDDI_CPU_NOTIFICATION = 4,
    D3DDDI_MONITORED_FENCE = 5,
    D3DDDI_PERIODIC_MONITORED_FENCE = 6,
    D3DDDI_SYNCHRONIZATION_TYPE_LIMIT
} D3DDDI_SYNCHRONIZATIONOBJECT_TYPE;

typedef struct _D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS {
    union {
        struct {
            UINT Shared : 1;
            UINT NtSecuritySharing : 1;
            UINT CrossAdapter : 1;
            UINT TopOfPipeline : 1;
            UINT NoSignal : 1;
            UINT NoWait : 1;
            UINT NoSignalMaxValueOnTdr : 1;
            UINT NoGPUAccess : 1;
            UINT SignalByKmd : 1;
            UINT Reserved : 22;
            UINT D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS_RESERVED0 : 1;
        };
        UINT Value;
    };
} D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS;

typedef struct _D3DDDI_SYNCHRONIZATIONOBJECTINFO2 {
    D3DDDI_SYNCHRONIZATIONOBJECT_TYPE Type;
    D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS Flags;
    union {
        struct {
            BOOL InitialState;
        } SynchronizationMutex;
        struct {
            UINT MaxCount;
            UINT InitialCount;
        } Semaphore;
        struct {
            D3DKMT_ALIGN64 UINT64 FenceValue;
        } Fence;
        struct {
            HANDLE Event;
        } CPUNotification;
        struct {
            D3DKMT_ALIGN64 UINT64 InitialFenceValue;
            VOID *FenceValueCPUVirtualAddress;
            D3DKMT_ALIGN64 D3DGPU_VIRTUAL_ADDRESS FenceValueGPUVirtualAddress;
            UINT EngineAffinity;
            UINT Padding;
        } MonitoredFence;
        struct {
            D3DKMT_HANDLE hAdapter;
            UINT VidPnTargetId;
            D3DKMT_ALIGN64 UINT64 Time;
            VOID *FenceValueCPUVirtualAddress;
            D3DKMT_ALIGN64 D3DGPU_VIRTUAL_ADDRESS FenceValueGPUVirtualAddress;
            UINT EngineAffinity;
            UINT Padding;
        } PeriodicMonitoredFence;
        struct {
            D3DKMT_ALIGN64 UINT64 Reserved[8];
        } Reserved;
    };
    D3DKMT_HANDLE SharedHandle;
} D3DDDI_SYNCHRONIZATIONOBJECTINFO2;

typedef struct _D3DKMT_CREATESYNCHRONIZATIONOBJECT2 {
    D3DKMT_HANDLE hDevice;
    D3DDDI_SYNCHRONIZATIONOBJECTINFO2 Info;
    D3DKMT_HANDLE hSyncObject;
} D3DKMT_CREATESYNCHRONIZATIONOBJECT2;

/* The user-mode driver's callback argument (runtime to UMD), declared so programs naming it
 * compile: Belfry has no runtime between the program and this library. */
typedef struct _D3DDDICB_CREATESYNCHRONIZATIONOBJECT2 D3DDDICB_CREATESYNCHRONIZATIONOBJECT2;

typedef struct _D3DKMT_DESTROYSYNCHRONIZATIONOBJECT {
    D3DKMT_HANDLE hSyncObject;
} D3DKMT_DESTROYSYNCHRONIZATIONOBJECT;

typedef enum _D3DDDI_NATIVEFENCE_TYPE {
    D3DDDI_NATIVEFENCE_TYPE_DEFAULT = 0,
    D3DDDI_NATIVEFENCE_TYPE_INTRA_GPU = 1
} D3DDDI_NATIVEFENCE_TYPE;

#define D3DDDI_NATIVE_FENCE_PDD_SIZE 64

typedef struct _D3DDDI_NATIVEFENCEMAPPING {
    VOID *CurrentValueCpuVa;
    D3DKMT_ALIGN64 D3DGPU_VIRTUAL_ADDRESS CurrentValueGpuVa;
    D3DKMT_ALIGN64 D3DGPU_VIRTUAL_ADDRESS MonitoredValueGpuVa;
    D3DKMT_ALIGN64 BYTE Reserved[32];
} D3DDDI_NATIVEFENCEMAPPING;

typedef struct _D3DDDI_NATIVEFENCEINFO {
    D3DKMT_ALIGN64 UINT64 InitialFenceValue;
    UINT EngineAffinity;
    D3DDDI_NATIVEFENCE_TYPE Type;
    D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS Flags;
    D3DDDI_NATIVEFENCEMAPPING NativeFenceMapping;
    D3DKMT_ALIGN64 BYTE Reserved[28];
} D3DDDI_NATIVEFENCEINFO;

typedef struct _D3DKMT_CREATENATIVEFENCE_FLAGS {
    union {
        struct {
            UINT Reserved : 32;
        };
        UINT Value;
    };
} D3DKMT_CREATENATIVEFENCE_FLAGS;

typedef struct _D3DKMT_CREATENATIVEFENCE {
    D3DKMT_HANDLE hDevice;
    D3DKMT_HANDLE hSyncObject;
    BYTE PrivateDriverData[D3DDDI_NATIVE_FENCE_PDD_SIZE];
    D3DDDI_NATIVEFENCEINFO Info;
    D3DKMT_CREATENATIVEFENCE_FLAGS Flags;
    BYTE Reserved[28];
} D3DKMT_CREATENATIVEFENCE;

typedef struct _D3DKMT_OPENNATIVEFENCEFROMNTHANDLE {
    HANDLE hNtHandle;
    D3DKMT_HANDLE hDevice;
    UINT EngineAffinity;
    D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS Flags;
    D3DKMT_HANDLE hSyncObject;
    D3DDDI_NATIVEFENCEMAPPING NativeFenceMapping;
    BYTE PrivateDriverData[D3DDDI_NATIVE_FENCE_PDD_SIZE];
    BYTE Reserved[32];
} D3DKMT_OPENNATIVEFENCEFROMNTHANDLE;

typedef struct _D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2 {
    HANDLE hNtHandle;
    D3DKMT_HANDLE hDevice;
    D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS Flags;
    D3DKMT_HANDLE hSyncObject;
    union {
        struct {
            VOID *FenceValueCPUVirtualAddress;
            D3DKMT_ALIGN64 D3DGPU_VIRTUAL_ADDRESS FenceValueGPUVirtualAddress;
            UINT EngineAffinity;
        } MonitoredFence;
        D3DKMT_ALIGN64 UINT64 Reserved[8];
    };
} D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2;

typedef struct _D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS {
    union {
        struct {
            UINT WaitAny : 1;
            UINT Reserved : 31;
        };
        UINT Value;
    };
} D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS;

typedef struct _D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU {
    D3DKMT_HANDLE hDevice;
    UINT ObjectCount;
    const D3DKMT_HANDLE *ObjectHandleArray;
    const UINT64 *FenceValueArray;
    HANDLE hAsyncEvent;
    D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS Flags;
} D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU;

typedef struct _D3DDDICB_SIGNALFLAGS {
    union {
        struct {
            UINT SignalAtSubmission : 1;
            UINT EnqueueCpuEvent : 1;
            UINT AllowFenceRewind : 1;
            UINT Reserved : 28;
            UINT DXGK_SIGNAL_FLAG_INTERNAL0 : 1;
        };
        UINT Value;
    };
} D3DDDICB_SIGNALFLAGS;

typedef struct _D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU {
    D3DKMT_HANDLE hDevice;
    UINT ObjectCount;
    const D3DKMT_HANDLE *ObjectHandleArray;
    const UINT64 *FenceValueArray;
    D3DDDICB_SIGNALFLAGS Flags;
} D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU;

typedef struct _D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU {
    D3DKMT_HANDLE hContext;
    UINT ObjectCount;
    const D3DKMT_HANDLE *ObjectHandleArray;
    union {
        const UINT64 *MonitoredFenceValueArray;
        D3DKMT_ALIGN64 UINT64 FenceValue;
        D3DKMT_ALIGN64 UINT64 Reserved[8];
    };
} D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU;

typedef struct _D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU {
    D3DKMT_HANDLE hContext;
    UINT ObjectCount;
    const D3DKMT_HANDLE *ObjectHandleArray;
    union {
        const UINT64 *MonitoredFenceValueArray;
        D3DKMT_ALIGN64 UINT64 Reserved[8];
    };
} D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU;

/* Capabilities of the WDDM 3.1 model, declared so programs naming them compile. */
typedef struct _D3DKMT_WDDM_3_1_CAPS {
    union {
        struct {
            UINT NativeGpuFenceSupported : 1;
            UINT Reserved : 31;
        };
        UINT Value;
    };
} D3DKMT_WDDM_3_1_CAPS;

/* ------------------------------------------------------------------ functions */

NTSTATUS D3DKMTEnumAdapters2(D3DKMT_ENUMADAPTERS2 *pData);
NTSTATUS D3DKMTOpenAdapterFromLuid(D3DKMT_OPENADAPTERFROMLUID *pData);
NTSTATUS D3DKMTCloseAdapter(const D3DKMT_CLOSEADAPTER *pData);
NTSTATUS D3DKMTCreateDevice(D3DKMT_CREATEDEVICE *pData);
NTSTATUS D3DKMTDestroyDevice(const D3DKMT_DESTROYDEVICE *pData);
NTSTATUS D3DKMTCreateContextVirtual(D3DKMT_CREATECONTEXTVIRTUAL *pData);
NTSTATUS D3DKMTDestroyContext(const D3DKMT_DESTROYCONTEXT *pData);
NTSTATUS D3DKMTCreateHwQueue(D3DKMT_CREATEHWQUEUE *pData);
NTSTATUS D3DKMTDestroyHwQueue(const D3DKMT_DESTROYHWQUEUE *pData);
NTSTATUS D3DKMTSubmitCommandToHwQueue(const D3DKMT_SUBMITCOMMANDTOHWQUEUE *pData);
NTSTATUS D3DKMTSubmitCommand(const D3DKMT_SUBMITCOMMAND *pData);
NTSTATUS D3DKMTCreateDoorbell(D3DKMT_CREATE_DOORBELL *pData);
NTSTATUS D3DKMTConnectDoorbell(D3DKMT_CONNECT_DOORBELL *pData);
NTSTATUS D3DKMTDestroyDoorbell(D3DKMT_DESTROY_DOORBELL *pData);
NTSTATUS D3DKMTNotifyWorkSubmission(D3DKMT_NOTIFY_WORK_SUBMISSION *pData);
NTSTATUS D3DKMTLock2(D3DKMT_LOCK2 *pData);
NTSTATUS D3DKMTCreateNativeFence(D3DKMT_CREATENATIVEFENCE *pData);
NTSTATUS D3DKMTCreateSynchronizationObject2(D3DKMT_CREATESYNCHRONIZATIONOBJECT2 *pData);
NTSTATUS D3DKMTDestroySynchronizationObject(const D3DKMT_DESTROYSYNCHRONIZATIONOBJECT *pData);
NTSTATUS D3DKMTShareObjects(UINT cObjects, const D3DKMT_HANDLE *hObjects, VOID *pObjectAttributes,
                            DWORD dwDesiredAccess, HANDLE *phSharedNtHandle);
NTSTATUS D3DKMTOpenNativeFenceFromNTHandle(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE *pData);
NTSTATUS D3DKMTOpenSyncObjectFromNtHandle2(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2 *pData);
NTSTATUS D3DKMTWaitForSynchronizationObjectFromCpu(const D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU *pData);
NTSTATUS D3DKMTSignalSynchronizationObjectFromCpu(const D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU *pData);
NTSTATUS D3DKMTWaitForSynchronizationObjectFromGpu(const D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU *pData);
NTSTATUS D3DKMTSignalSynchronizationObjectFromGpu(const D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU *pData);

/* ------------------------------------------------------------------ layouts (LP64) */
/* BELFRY_LAYOUTS_BEGIN */
#if defined(__cplusplus)
#define BELFRY_LAYOUT_ASSERT(cond, what) static_assert(cond, what)
#else
#define BELFRY_LAYOUT_ASSERT(cond, what) _Static_assert(cond, what)
#endif
BELFRY_LAYOUT_ASSERT(sizeof(LUID) == 8, "size of LUID");
BELFRY_LAYOUT_ASSERT(offsetof(LUID, LowPart) == 0, "offset of LUID.LowPart");
BELFRY_LAYOUT_ASSERT(offsetof(LUID, HighPart) == 4, "offset of LUID.HighPart");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_ADAPTERINFO) == 20, "size of D3DKMT_ADAPTERINFO");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_ADAPTERINFO, hAdapter) == 0, "offset of D3DKMT_ADAPTERINFO.hAdapter");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_ADAPTERINFO, AdapterLuid) == 4, "offset of D3DKMT_ADAPTERINFO.AdapterLuid");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_ADAPTERINFO, NumOfSources) == 12, "offset of D3DKMT_ADAPTERINFO.NumOfSources");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_ADAPTERINFO, bPrecisePresentRegionsPreferred) == 16, "offset of D3DKMT_ADAPTERINFO.bPrecisePresentRegionsPreferred");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_ENUMADAPTERS2) == 16, "size of D3DKMT_ENUMADAPTERS2");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_ENUMADAPTERS2, NumAdapters) == 0, "offset of D3DKMT_ENUMADAPTERS2.NumAdapters");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_ENUMADAPTERS2, pAdapters) == 8, "offset of D3DKMT_ENUMADAPTERS2.pAdapters");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_OPENADAPTERFROMLUID) == 12, "size of D3DKMT_OPENADAPTERFROMLUID");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENADAPTERFROMLUID, AdapterLuid) == 0, "offset of D3DKMT_OPENADAPTERFROMLUID.AdapterLuid");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENADAPTERFROMLUID, hAdapter) == 8, "offset of D3DKMT_OPENADAPTERFROMLUID.hAdapter");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CLOSEADAPTER) == 4, "size of D3DKMT_CLOSEADAPTER");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CLOSEADAPTER, hAdapter) == 0, "offset of D3DKMT_CLOSEADAPTER.hAdapter");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATEDEVICEFLAGS) == 4, "size of D3DKMT_CREATEDEVICEFLAGS");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDI_PATCHLOCATIONLIST) == 24, "size of D3DDDI_PATCHLOCATIONLIST");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_PATCHLOCATIONLIST, AllocationIndex) == 0, "offset of D3DDDI_PATCHLOCATIONLIST.AllocationIndex");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_PATCHLOCATIONLIST, Value) == 4, "offset of D3DDDI_PATCHLOCATIONLIST.Value");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_PATCHLOCATIONLIST, DriverId) == 8, "offset of D3DDDI_PATCHLOCATIONLIST.DriverId");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_PATCHLOCATIONLIST, AllocationOffset) == 12, "offset of D3DDDI_PATCHLOCATIONLIST.AllocationOffset");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_PATCHLOCATIONLIST, PatchOffset) == 16, "offset of D3DDDI_PATCHLOCATIONLIST.PatchOffset");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_PATCHLOCATIONLIST, SplitOffset) == 20, "offset of D3DDDI_PATCHLOCATIONLIST.SplitOffset");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATEDEVICE) == 64, "size of D3DKMT_CREATEDEVICE");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, hAdapter) == 0, "offset of D3DKMT_CREATEDEVICE.hAdapter");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, pAdapter) == 0, "offset of D3DKMT_CREATEDEVICE.pAdapter");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, Flags) == 8, "offset of D3DKMT_CREATEDEVICE.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, hDevice) == 12, "offset of D3DKMT_CREATEDEVICE.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, pCommandBuffer) == 16, "offset of D3DKMT_CREATEDEVICE.pCommandBuffer");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, CommandBufferSize) == 24, "offset of D3DKMT_CREATEDEVICE.CommandBufferSize");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, pAllocationList) == 32, "offset of D3DKMT_CREATEDEVICE.pAllocationList");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, AllocationListSize) == 40, "offset of D3DKMT_CREATEDEVICE.AllocationListSize");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, pPatchLocationList) == 48, "offset of D3DKMT_CREATEDEVICE.pPatchLocationList");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEDEVICE, PatchLocationListSize) == 56, "offset of D3DKMT_CREATEDEVICE.PatchLocationListSize");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_DESTROYDEVICE) == 4, "size of D3DKMT_DESTROYDEVICE");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_DESTROYDEVICE, hDevice) == 0, "offset of D3DKMT_DESTROYDEVICE.hDevice");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDI_CREATECONTEXTFLAGS) == 4, "size of D3DDDI_CREATECONTEXTFLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_CREATECONTEXTFLAGS, Value) == 0, "offset of D3DDDI_CREATECONTEXTFLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATECONTEXTVIRTUAL) == 40, "size of D3DKMT_CREATECONTEXTVIRTUAL");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATECONTEXTVIRTUAL, hDevice) == 0, "offset of D3DKMT_CREATECONTEXTVIRTUAL.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATECONTEXTVIRTUAL, NodeOrdinal) == 4, "offset of D3DKMT_CREATECONTEXTVIRTUAL.NodeOrdinal");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATECONTEXTVIRTUAL, EngineAffinity) == 8, "offset of D3DKMT_CREATECONTEXTVIRTUAL.EngineAffinity");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATECONTEXTVIRTUAL, Flags) == 12, "offset of D3DKMT_CREATECONTEXTVIRTUAL.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATECONTEXTVIRTUAL, pPrivateDriverData) == 16, "offset of D3DKMT_CREATECONTEXTVIRTUAL.pPrivateDriverData");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATECONTEXTVIRTUAL, PrivateDriverDataSize) == 24, "offset of D3DKMT_CREATECONTEXTVIRTUAL.PrivateDriverDataSize");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATECONTEXTVIRTUAL, ClientHint) == 28, "offset of D3DKMT_CREATECONTEXTVIRTUAL.ClientHint");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATECONTEXTVIRTUAL, hContext) == 32, "offset of D3DKMT_CREATECONTEXTVIRTUAL.hContext");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_DESTROYCONTEXT) == 4, "size of D3DKMT_DESTROYCONTEXT");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_DESTROYCONTEXT, hContext) == 0, "offset of D3DKMT_DESTROYCONTEXT.hContext");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDI_CREATEHWQUEUEFLAGS) == 4, "size of D3DDDI_CREATEHWQUEUEFLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_CREATEHWQUEUEFLAGS, Value) == 0, "offset of D3DDDI_CREATEHWQUEUEFLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATEHWQUEUE) == 48, "size of D3DKMT_CREATEHWQUEUE");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEHWQUEUE, hHwContext) == 0, "offset of D3DKMT_CREATEHWQUEUE.hHwContext");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEHWQUEUE, Flags) == 4, "offset of D3DKMT_CREATEHWQUEUE.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEHWQUEUE, PrivateDriverDataSize) == 8, "offset of D3DKMT_CREATEHWQUEUE.PrivateDriverDataSize");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEHWQUEUE, pPrivateDriverData) == 16, "offset of D3DKMT_CREATEHWQUEUE.pPrivateDriverData");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEHWQUEUE, hHwQueue) == 24, "offset of D3DKMT_CREATEHWQUEUE.hHwQueue");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEHWQUEUE, hHwQueueProgressFence) == 28, "offset of D3DKMT_CREATEHWQUEUE.hHwQueueProgressFence");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEHWQUEUE, HwQueueProgressFenceCPUVirtualAddress) == 32, "offset of D3DKMT_CREATEHWQUEUE.HwQueueProgressFenceCPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATEHWQUEUE, HwQueueProgressFenceGPUVirtualAddress) == 40, "offset of D3DKMT_CREATEHWQUEUE.HwQueueProgressFenceGPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_DESTROYHWQUEUE) == 4, "size of D3DKMT_DESTROYHWQUEUE");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_DESTROYHWQUEUE, hHwQueue) == 0, "offset of D3DKMT_DESTROYHWQUEUE.hHwQueue");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_SUBMITCOMMANDTOHWQUEUE) == 56, "size of D3DKMT_SUBMITCOMMANDTOHWQUEUE");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SUBMITCOMMANDTOHWQUEUE, hHwQueue) == 0, "offset of D3DKMT_SUBMITCOMMANDTOHWQUEUE.hHwQueue");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SUBMITCOMMANDTOHWQUEUE, HwQueueProgressFenceId) == 8, "offset of D3DKMT_SUBMITCOMMANDTOHWQUEUE.HwQueueProgressFenceId");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SUBMITCOMMANDTOHWQUEUE, CommandBuffer) == 16, "offset of D3DKMT_SUBMITCOMMANDTOHWQUEUE.CommandBuffer");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SUBMITCOMMANDTOHWQUEUE, CommandLength) == 24, "offset of D3DKMT_SUBMITCOMMANDTOHWQUEUE.CommandLength");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SUBMITCOMMANDTOHWQUEUE, PrivateDriverDataSize) == 28, "offset of D3DKMT_SUBMITCOMMANDTOHWQUEUE.PrivateDriverDataSize");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SUBMITCOMMANDTOHWQUEUE, pPrivateDriverData) == 32, "offset of D3DKMT_SUBMITCOMMANDTOHWQUEUE.pPrivateDriverData");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SUBMITCOMMANDTOHWQUEUE, NumPrimaries) == 40, "offset of D3DKMT_SUBMITCOMMANDTOHWQUEUE.NumPrimaries");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SUBMITCOMMANDTOHWQUEUE, WrittenPrimaries) == 48, "offset of D3DKMT_SUBMITCOMMANDTOHWQUEUE.WrittenPrimaries");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATE_DOORBELL_FLAGS) == 4, "size of D3DKMT_CREATE_DOORBELL_FLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL_FLAGS, Value) == 0, "offset of D3DKMT_CREATE_DOORBELL_FLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATE_DOORBELL) == 72, "size of D3DKMT_CREATE_DOORBELL");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, hHwQueue) == 0, "offset of D3DKMT_CREATE_DOORBELL.hHwQueue");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, hRingBuffer) == 4, "offset of D3DKMT_CREATE_DOORBELL.hRingBuffer");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, hRingBufferControl) == 8, "offset of D3DKMT_CREATE_DOORBELL.hRingBufferControl");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, Flags) == 12, "offset of D3DKMT_CREATE_DOORBELL.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, PrivateDriverDataSize) == 16, "offset of D3DKMT_CREATE_DOORBELL.PrivateDriverDataSize");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, PrivateDriverData) == 24, "offset of D3DKMT_CREATE_DOORBELL.PrivateDriverData");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, DoorbellCPUVirtualAddress) == 32, "offset of D3DKMT_CREATE_DOORBELL.DoorbellCPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, DoorbellSecondaryCPUVirtualAddress) == 40, "offset of D3DKMT_CREATE_DOORBELL.DoorbellSecondaryCPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, DoorbellStatusCPUVirtualAddress) == 48, "offset of D3DKMT_CREATE_DOORBELL.DoorbellStatusCPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, HwQueueProgressFenceLastQueuedValueCPUVirtualAddress) == 56, "offset of D3DKMT_CREATE_DOORBELL.HwQueueProgressFenceLastQueuedValueCPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATE_DOORBELL, hDoorbell) == 64, "offset of D3DKMT_CREATE_DOORBELL.hDoorbell");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CONNECT_DOORBELL_FLAGS) == 4, "size of D3DKMT_CONNECT_DOORBELL_FLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CONNECT_DOORBELL_FLAGS, Value) == 0, "offset of D3DKMT_CONNECT_DOORBELL_FLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CONNECT_DOORBELL) == 8, "size of D3DKMT_CONNECT_DOORBELL");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CONNECT_DOORBELL, hDoorbell) == 0, "offset of D3DKMT_CONNECT_DOORBELL.hDoorbell");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CONNECT_DOORBELL, Flags) == 4, "offset of D3DKMT_CONNECT_DOORBELL.Flags");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_DESTROY_DOORBELL) == 4, "size of D3DKMT_DESTROY_DOORBELL");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_DESTROY_DOORBELL, hDoorbell) == 0, "offset of D3DKMT_DESTROY_DOORBELL.hDoorbell");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS) == 4, "size of D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS, Value) == 0, "offset of D3DKMT_NOTIFY_WORK_SUBMISSION_FLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_NOTIFY_WORK_SUBMISSION) == 8, "size of D3DKMT_NOTIFY_WORK_SUBMISSION");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_NOTIFY_WORK_SUBMISSION, hHwQueue) == 0, "offset of D3DKMT_NOTIFY_WORK_SUBMISSION.hHwQueue");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_NOTIFY_WORK_SUBMISSION, Flags) == 4, "offset of D3DKMT_NOTIFY_WORK_SUBMISSION.Flags");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDICB_LOCK2FLAGS) == 4, "size of D3DDDICB_LOCK2FLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDICB_LOCK2FLAGS, Value) == 0, "offset of D3DDDICB_LOCK2FLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_LOCK2) == 24, "size of D3DKMT_LOCK2");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_LOCK2, hDevice) == 0, "offset of D3DKMT_LOCK2.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_LOCK2, hAllocation) == 4, "offset of D3DKMT_LOCK2.hAllocation");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_LOCK2, Flags) == 8, "offset of D3DKMT_LOCK2.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_LOCK2, pData) == 16, "offset of D3DKMT_LOCK2.pData");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS) == 4, "size of D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS, Value) == 0, "offset of D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDI_SYNCHRONIZATIONOBJECTINFO2) == 80, "size of D3DDDI_SYNCHRONIZATIONOBJECTINFO2");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_SYNCHRONIZATIONOBJECTINFO2, Type) == 0, "offset of D3DDDI_SYNCHRONIZATIONOBJECTINFO2.Type");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_SYNCHRONIZATIONOBJECTINFO2, Flags) == 4, "offset of D3DDDI_SYNCHRONIZATIONOBJECTINFO2.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_SYNCHRONIZATIONOBJECTINFO2, MonitoredFence.InitialFenceValue) == 8, "offset of D3DDDI_SYNCHRONIZATIONOBJECTINFO2.MonitoredFence.InitialFenceValue");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_SYNCHRONIZATIONOBJECTINFO2, MonitoredFence.FenceValueCPUVirtualAddress) == 16, "offset of D3DDDI_SYNCHRONIZATIONOBJECTINFO2.MonitoredFence.FenceValueCPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_SYNCHRONIZATIONOBJECTINFO2, MonitoredFence.FenceValueGPUVirtualAddress) == 24, "offset of D3DDDI_SYNCHRONIZATIONOBJECTINFO2.MonitoredFence.FenceValueGPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_SYNCHRONIZATIONOBJECTINFO2, MonitoredFence.EngineAffinity) == 32, "offset of D3DDDI_SYNCHRONIZATIONOBJECTINFO2.MonitoredFence.EngineAffinity");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_SYNCHRONIZATIONOBJECTINFO2, SharedHandle) == 72, "offset of D3DDDI_SYNCHRONIZATIONOBJECTINFO2.SharedHandle");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATESYNCHRONIZATIONOBJECT2) == 96, "size of D3DKMT_CREATESYNCHRONIZATIONOBJECT2");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATESYNCHRONIZATIONOBJECT2, hDevice) == 0, "offset of D3DKMT_CREATESYNCHRONIZATIONOBJECT2.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATESYNCHRONIZATIONOBJECT2, Info) == 8, "offset of D3DKMT_CREATESYNCHRONIZATIONOBJECT2.Info");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATESYNCHRONIZATIONOBJECT2, hSyncObject) == 88, "offset of D3DKMT_CREATESYNCHRONIZATIONOBJECT2.hSyncObject");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_DESTROYSYNCHRONIZATIONOBJECT) == 4, "size of D3DKMT_DESTROYSYNCHRONIZATIONOBJECT");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_DESTROYSYNCHRONIZATIONOBJECT, hSyncObject) == 0, "offset of D3DKMT_DESTROYSYNCHRONIZATIONOBJECT.hSyncObject");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDI_NATIVEFENCEMAPPING) == 56, "size of D3DDDI_NATIVEFENCEMAPPING");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEMAPPING, CurrentValueCpuVa) == 0, "offset of D3DDDI_NATIVEFENCEMAPPING.CurrentValueCpuVa");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEMAPPING, CurrentValueGpuVa) == 8, "offset of D3DDDI_NATIVEFENCEMAPPING.CurrentValueGpuVa");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEMAPPING, MonitoredValueGpuVa) == 16, "offset of D3DDDI_NATIVEFENCEMAPPING.MonitoredValueGpuVa");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEMAPPING, Reserved) == 24, "offset of D3DDDI_NATIVEFENCEMAPPING.Reserved");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDI_NATIVEFENCEINFO) == 112, "size of D3DDDI_NATIVEFENCEINFO");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEINFO, InitialFenceValue) == 0, "offset of D3DDDI_NATIVEFENCEINFO.InitialFenceValue");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEINFO, EngineAffinity) == 8, "offset of D3DDDI_NATIVEFENCEINFO.EngineAffinity");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEINFO, Type) == 12, "offset of D3DDDI_NATIVEFENCEINFO.Type");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEINFO, Flags) == 16, "offset of D3DDDI_NATIVEFENCEINFO.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEINFO, NativeFenceMapping) == 24, "offset of D3DDDI_NATIVEFENCEINFO.NativeFenceMapping");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_NATIVEFENCEINFO, Reserved) == 80, "offset of D3DDDI_NATIVEFENCEINFO.Reserved");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATENATIVEFENCE_FLAGS) == 4, "size of D3DKMT_CREATENATIVEFENCE_FLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATENATIVEFENCE_FLAGS, Value) == 0, "offset of D3DKMT_CREATENATIVEFENCE_FLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_CREATENATIVEFENCE) == 216, "size of D3DKMT_CREATENATIVEFENCE");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATENATIVEFENCE, hDevice) == 0, "offset of D3DKMT_CREATENATIVEFENCE.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATENATIVEFENCE, hSyncObject) == 4, "offset of D3DKMT_CREATENATIVEFENCE.hSyncObject");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATENATIVEFENCE, PrivateDriverData) == 8, "offset of D3DKMT_CREATENATIVEFENCE.PrivateDriverData");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATENATIVEFENCE, Info) == 72, "offset of D3DKMT_CREATENATIVEFENCE.Info");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATENATIVEFENCE, Flags) == 184, "offset of D3DKMT_CREATENATIVEFENCE.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_CREATENATIVEFENCE, Reserved) == 188, "offset of D3DKMT_CREATENATIVEFENCE.Reserved");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE) == 176, "size of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE, hNtHandle) == 0, "offset of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE.hNtHandle");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE, hDevice) == 8, "offset of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE, EngineAffinity) == 12, "offset of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE.EngineAffinity");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE, Flags) == 16, "offset of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE, hSyncObject) == 20, "offset of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE.hSyncObject");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE, NativeFenceMapping) == 24, "offset of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE.NativeFenceMapping");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE, PrivateDriverData) == 80, "offset of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE.PrivateDriverData");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENNATIVEFENCEFROMNTHANDLE, Reserved) == 144, "offset of D3DKMT_OPENNATIVEFENCEFROMNTHANDLE.Reserved");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2) == 88, "size of D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2, hNtHandle) == 0, "offset of D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2.hNtHandle");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2, hDevice) == 8, "offset of D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2, Flags) == 12, "offset of D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2.Flags");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2, hSyncObject) == 16, "offset of D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2.hSyncObject");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2, MonitoredFence.FenceValueCPUVirtualAddress) == 24, "offset of D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2.MonitoredFence.FenceValueCPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2, MonitoredFence.FenceValueGPUVirtualAddress) == 32, "offset of D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2.MonitoredFence.FenceValueGPUVirtualAddress");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2, MonitoredFence.EngineAffinity) == 40, "offset of D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2.MonitoredFence.EngineAffinity");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS) == 4, "size of D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS, Value) == 0, "offset of D3DDDI_WAITFORSYNCHRONIZATIONOBJECTFROMCPU_FLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU) == 40, "size of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU, hDevice) == 0, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU, ObjectCount) == 4, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU.ObjectCount");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU, ObjectHandleArray) == 8, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU.ObjectHandleArray");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU, FenceValueArray) == 16, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU.FenceValueArray");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU, hAsyncEvent) == 24, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU.hAsyncEvent");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU, Flags) == 32, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU.Flags");
BELFRY_LAYOUT_ASSERT(sizeof(D3DDDICB_SIGNALFLAGS) == 4, "size of D3DDDICB_SIGNALFLAGS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DDDICB_SIGNALFLAGS, Value) == 0, "offset of D3DDDICB_SIGNALFLAGS.Value");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU) == 32, "size of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU, hDevice) == 0, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU.hDevice");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU, ObjectCount) == 4, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU.ObjectCount");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU, ObjectHandleArray) == 8, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU.ObjectHandleArray");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU, FenceValueArray) == 16, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU.FenceValueArray");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU, Flags) == 24, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU.Flags");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU) == 80, "size of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU, hContext) == 0, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU.hContext");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU, ObjectCount) == 4, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU.ObjectCount");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU, ObjectHandleArray) == 8, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU.ObjectHandleArray");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU, MonitoredFenceValueArray) == 16, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU.MonitoredFenceValueArray");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU, FenceValue) == 16, "offset of D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU.FenceValue");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU) == 80, "size of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU, hContext) == 0, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU.hContext");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU, ObjectCount) == 4, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU.ObjectCount");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU, ObjectHandleArray) == 8, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU.ObjectHandleArray");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU, MonitoredFenceValueArray) == 16, "offset of D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU.MonitoredFenceValueArray");
BELFRY_LAYOUT_ASSERT(sizeof(D3DKMT_WDDM_3_1_CAPS) == 4, "size of D3DKMT_WDDM_3_1_CAPS");
BELFRY_LAYOUT_ASSERT(offsetof(D3DKMT_WDDM_3_1_CAPS, Value) == 0, "offset of D3DKMT_WDDM_3_1_CAPS.Value");
/* BELFRY_LAYOUTS_END */

#ifdef __cplusplus
}
#endif

#endif /* BELFRY_D3DKMT_H */

/*
 * Rule checks of RULES.md through the D3DKMT API: the same behaviours the suite proves through
 * the library, through this second front door. Usage: belfry-d3dkmt-rules CHECK LUID, where
 * LUID is the adapter's LowPart (N of /dev/belfry<N>) and CHECK one of:
 *
 *   fen-02      FEN-02, FEN-16: on a monitored fence, every pairing of a CPU or GPU signal with
 *               a CPU or GPU wait (GPU operations on contexts), the CPU signal visible at once;
 *   nf-intra    NF-15, NF-16, NF-17: an INTRA_GPU native fence has no CPU mapping, refuses CPU
 *               signals and waits (STATUS_ACCESS_DENIED) and sharing, and works GPU to GPU;
 *   nf-destroy  NF-20: D3DKMTDestroySynchronizationObject destroys native and monitored fences
 *               (their handles then STATUS_INVALID_HANDLE), and a destroyed device takes its
 *               fences with it;
 *   nf-21       NF-21, NF-01: user-mode hardware queues refuse GPU waits and signals of a
 *               monitored fence; a native fence's GPU wait on one is released by another
 *               queue's GPU signal;
 *   doorbell    DB-07, DB-09, DB-10, DB-11, DB-12: D3DKMTCreateDoorbell gives the doorbell's and
 *               its status's CPU addresses (no secondary, no LastQueuedValue); the status reads
 *               DISCONNECTED_RETRY before the connect, a store to the disconnected doorbell
 *               does not fault, the status reads CONNECTED after it; the program's own ring
 *               with the write index it reads there (then the status read, the notification on
 *               CONNECTED_NOTIFY) adds no work and the queue goes on; after
 *               D3DKMTDestroyDoorbell the queue still runs submissions.
 *
 * Prints "ok <step>" per step and "<CHECK>: all ok" at the end; exits 1 at the first step that
 * does not hold, naming it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "belfry_d3dkmt.h"

static const char *check = "?";

static void fail(const char *what, NTSTATUS status) {
    fprintf(stderr, "%s: %s (NTSTATUS 0x%08" PRIX32 ")\n", check, what, (uint32_t)status);
    exit(1);
}

/* `call` returns `expected`. */
#define EXPECT(call, expected)                                                                \
    do {                                                                                      \
        NTSTATUS status_ = (call);                                                            \
        if (status_ != (expected)) {                                                          \
            fail(#call " did not return " #expected, status_);                                \
        }                                                                                     \
    } while (0)
#define CHECK(call) EXPECT(call, STATUS_SUCCESS)

struct gpu {
    D3DKMT_HANDLE hAdapter, hDevice;
};

static struct gpu open_gpu(UINT luid) {
    struct gpu gpu;
    D3DKMT_OPENADAPTERFROMLUID open;
    memset(&open, 0, sizeof(open));
    open.AdapterLuid.LowPart = luid;
    CHECK(D3DKMTOpenAdapterFromLuid(&open));
    gpu.hAdapter = open.hAdapter;
    D3DKMT_CREATEDEVICE device;
    memset(&device, 0, sizeof(device));
    device.hAdapter = gpu.hAdapter;
    CHECK(D3DKMTCreateDevice(&device));
    gpu.hDevice = device.hDevice;
    return gpu;
}

static void close_gpu(struct gpu *gpu) {
    D3DKMT_DESTROYDEVICE destroy = {gpu->hDevice};
    CHECK(D3DKMTDestroyDevice(&destroy));
    D3DKMT_CLOSEADAPTER close = {gpu->hAdapter};
    CHECK(D3DKMTCloseAdapter(&close));
}

static D3DKMT_HANDLE create_context(struct gpu *gpu) {
    D3DKMT_CREATECONTEXTVIRTUAL context;
    memset(&context, 0, sizeof(context));
    context.hDevice = gpu->hDevice;
    CHECK(D3DKMTCreateContextVirtual(&context));
    return context.hContext;
}

static D3DKMT_CREATEHWQUEUE create_user_queue(D3DKMT_HANDLE hContext) {
    D3DKMT_CREATEHWQUEUE queue;
    memset(&queue, 0, sizeof(queue));
    queue.hHwContext = hContext;
    queue.Flags.UserModeSubmission = 1;
    CHECK(D3DKMTCreateHwQueue(&queue));
    return queue;
}

static NTSTATUS submit(D3DKMT_HANDLE hHwQueue, UINT64 id) {
    D3DKMT_SUBMITCOMMANDTOHWQUEUE submission;
    memset(&submission, 0, sizeof(submission));
    submission.hHwQueue = hHwQueue;
    submission.HwQueueProgressFenceId = id;
    return D3DKMTSubmitCommandToHwQueue(&submission);
}

/* A monitored fence at 0, with its read-only CPU mapping at *cpu. */
static D3DKMT_HANDLE monitored_fence(struct gpu *gpu, const volatile UINT64 **cpu) {
    D3DKMT_CREATESYNCHRONIZATIONOBJECT2 create;
    memset(&create, 0, sizeof(create));
    create.hDevice = gpu->hDevice;
    create.Info.Type = D3DDDI_MONITORED_FENCE;
    create.Info.MonitoredFence.InitialFenceValue = 0;
    CHECK(D3DKMTCreateSynchronizationObject2(&create));
    if (create.Info.MonitoredFence.FenceValueCPUVirtualAddress == NULL ||
        create.Info.MonitoredFence.FenceValueGPUVirtualAddress == 0) {
        fail("a monitored fence lacks its CPU or GPU address", STATUS_SUCCESS);
    }
    if (cpu != NULL) {
        *cpu = (const volatile UINT64 *)create.Info.MonitoredFence.FenceValueCPUVirtualAddress;
    }
    return create.hSyncObject;
}

static D3DKMT_CREATENATIVEFENCE native_fence(struct gpu *gpu, D3DDDI_NATIVEFENCE_TYPE type, UINT shared) {
    D3DKMT_CREATENATIVEFENCE fence;
    memset(&fence, 0, sizeof(fence));
    fence.hDevice = gpu->hDevice;
    fence.Info.Type = type;
    fence.Info.Flags.Shared = shared;
    return fence;
}

static NTSTATUS cpu_signal(struct gpu *gpu, D3DKMT_HANDLE fence, UINT64 value) {
    D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU signal;
    memset(&signal, 0, sizeof(signal));
    signal.hDevice = gpu->hDevice;
    signal.ObjectCount = 1;
    signal.ObjectHandleArray = &fence;
    signal.FenceValueArray = &value;
    return D3DKMTSignalSynchronizationObjectFromCpu(&signal);
}

static NTSTATUS cpu_wait(struct gpu *gpu, D3DKMT_HANDLE fence, UINT64 value) {
    D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU wait;
    memset(&wait, 0, sizeof(wait));
    wait.hDevice = gpu->hDevice;
    wait.ObjectCount = 1;
    wait.ObjectHandleArray = &fence;
    wait.FenceValueArray = &value;
    return D3DKMTWaitForSynchronizationObjectFromCpu(&wait);
}

static NTSTATUS gpu_wait(D3DKMT_HANDLE hContext, D3DKMT_HANDLE fence, UINT64 value) {
    D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU wait;
    memset(&wait, 0, sizeof(wait));
    wait.hContext = hContext;
    wait.ObjectCount = 1;
    wait.ObjectHandleArray = &fence;
    wait.MonitoredFenceValueArray = &value;
    return D3DKMTWaitForSynchronizationObjectFromGpu(&wait);
}

static NTSTATUS gpu_signal(D3DKMT_HANDLE hContext, D3DKMT_HANDLE fence, UINT64 value) {
    D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU signal;
    memset(&signal, 0, sizeof(signal));
    signal.hContext = hContext;
    signal.ObjectCount = 1;
    signal.ObjectHandleArray = &fence;
    signal.MonitoredFenceValueArray = &value;
    return D3DKMTSignalSynchronizationObjectFromGpu(&signal);
}

static void fen_02(UINT luid) {
    struct gpu gpu = open_gpu(luid);
    D3DKMT_HANDLE a = create_context(&gpu), b = create_context(&gpu);
    const volatile UINT64 *f_value, *g_value, *h_value;
    D3DKMT_HANDLE f = monitored_fence(&gpu, &f_value);
    D3DKMT_HANDLE g = monitored_fence(&gpu, &g_value);
    D3DKMT_HANDLE h = monitored_fence(&gpu, &h_value);

    CHECK(cpu_signal(&gpu, f, 1));
    if (*f_value != 1) {
        fail("a CPU signal was not visible through the CPU mapping at once", STATUS_SUCCESS);
    }
    CHECK(cpu_wait(&gpu, f, 1));
    printf("ok cpu-signal-cpu-wait\n");

    /* Context A waits on the GPU for F = 2, then signals G = 1: G stays 0 until the CPU
     * signals F = 2. */
    CHECK(gpu_wait(a, f, 2));
    CHECK(gpu_signal(a, g, 1));
    if (*g_value != 0) {
        fail("work behind a GPU wait ran before its fence was signaled", STATUS_SUCCESS);
    }
    CHECK(cpu_signal(&gpu, f, 2));
    CHECK(cpu_wait(&gpu, g, 1));
    printf("ok cpu-signal-gpu-wait\n");
    printf("ok gpu-signal-cpu-wait\n");

    /* Context B waits on the GPU for G = 2 and signals H = 1; context A signals G = 2. */
    CHECK(gpu_wait(b, g, 2));
    CHECK(gpu_signal(b, h, 1));
    CHECK(gpu_signal(a, g, 2));
    CHECK(cpu_wait(&gpu, h, 1));
    if (*h_value < 1 || *g_value < 2) {
        fail("the CPU wait returned before the GPU signals landed", STATUS_SUCCESS);
    }
    printf("ok gpu-signal-gpu-wait\n");
    close_gpu(&gpu);
}

static void nf_intra(UINT luid) {
    struct gpu gpu = open_gpu(luid);
    D3DKMT_CREATENATIVEFENCE shared = native_fence(&gpu, D3DDDI_NATIVEFENCE_TYPE_INTRA_GPU, 1);
    NTSTATUS status = D3DKMTCreateNativeFence(&shared);
    if (NT_SUCCESS(status)) {
        fail("a shareable INTRA_GPU fence was created", status);
    }
    printf("ok sharing-refused\n");

    D3DKMT_CREATENATIVEFENCE fence = native_fence(&gpu, D3DDDI_NATIVEFENCE_TYPE_INTRA_GPU, 0);
    CHECK(D3DKMTCreateNativeFence(&fence));
    if (fence.Info.NativeFenceMapping.CurrentValueCpuVa != NULL) {
        fail("an INTRA_GPU fence has a CPU mapping", STATUS_SUCCESS);
    }
    if (fence.Info.NativeFenceMapping.CurrentValueGpuVa == 0) {
        fail("an INTRA_GPU fence has no GPU address", STATUS_SUCCESS);
    }
    printf("ok no-cpu-mapping\n");
    EXPECT(cpu_signal(&gpu, fence.hSyncObject, 1), STATUS_ACCESS_DENIED);
    printf("ok cpu-signal-refused\n");
    EXPECT(cpu_wait(&gpu, fence.hSyncObject, 1), STATUS_ACCESS_DENIED);
    printf("ok cpu-wait-refused\n");

    D3DKMT_HANDLE context = create_context(&gpu);
    D3DKMT_CREATEHWQUEUE first = create_user_queue(context), second = create_user_queue(context);
    CHECK(gpu_wait(second.hHwQueue, fence.hSyncObject, 1));
    CHECK(submit(second.hHwQueue, 1));
    CHECK(gpu_signal(first.hHwQueue, fence.hSyncObject, 1));
    CHECK(cpu_wait(&gpu, second.hHwQueueProgressFence, 1));
    printf("ok gpu-signal-gpu-wait\n");
    close_gpu(&gpu);
}

static void nf_destroy(UINT luid) {
    struct gpu gpu = open_gpu(luid);
    D3DKMT_CREATENATIVEFENCE native = native_fence(&gpu, D3DDDI_NATIVEFENCE_TYPE_DEFAULT, 0);
    CHECK(D3DKMTCreateNativeFence(&native));
    D3DKMT_HANDLE monitored = monitored_fence(&gpu, NULL);
    D3DKMT_HANDLE handles[2] = {native.hSyncObject, monitored};
    for (int i = 0; i < 2; i++) {
        D3DKMT_DESTROYSYNCHRONIZATIONOBJECT destroy = {handles[i]};
        CHECK(D3DKMTDestroySynchronizationObject(&destroy));
        EXPECT(cpu_signal(&gpu, handles[i], 1), STATUS_INVALID_HANDLE);
        EXPECT(D3DKMTDestroySynchronizationObject(&destroy), STATUS_INVALID_HANDLE);
    }
    printf("ok destroyed\n");

    D3DKMT_CREATENATIVEFENCE orphan = native_fence(&gpu, D3DDDI_NATIVEFENCE_TYPE_DEFAULT, 0);
    CHECK(D3DKMTCreateNativeFence(&orphan));
    D3DKMT_DESTROYDEVICE destroy_device = {gpu.hDevice};
    CHECK(D3DKMTDestroyDevice(&destroy_device));
    D3DKMT_DESTROYSYNCHRONIZATIONOBJECT destroy = {orphan.hSyncObject};
    EXPECT(D3DKMTDestroySynchronizationObject(&destroy), STATUS_INVALID_HANDLE);
    printf("ok destroyed-with-device\n");
    D3DKMT_CLOSEADAPTER close = {gpu.hAdapter};
    CHECK(D3DKMTCloseAdapter(&close));
}

static void nf_21(UINT luid) {
    struct gpu gpu = open_gpu(luid);
    D3DKMT_HANDLE context = create_context(&gpu);
    D3DKMT_CREATEHWQUEUE first = create_user_queue(context), second = create_user_queue(context);
    D3DKMT_HANDLE monitored = monitored_fence(&gpu, NULL);
    NTSTATUS status = gpu_wait(first.hHwQueue, monitored, 1);
    if (NT_SUCCESS(status)) {
        fail("a user-mode queue took a GPU wait on a monitored fence", status);
    }
    status = gpu_signal(first.hHwQueue, monitored, 1);
    if (NT_SUCCESS(status)) {
        fail("a user-mode queue took a GPU signal of a monitored fence", status);
    }
    printf("ok monitored-refused\n");

    D3DKMT_CREATENATIVEFENCE native = native_fence(&gpu, D3DDDI_NATIVEFENCE_TYPE_DEFAULT, 0);
    CHECK(D3DKMTCreateNativeFence(&native));
    const volatile UINT64 *value = (const volatile UINT64 *)native.Info.NativeFenceMapping.CurrentValueCpuVa;
    CHECK(gpu_wait(second.hHwQueue, native.hSyncObject, 1));
    CHECK(submit(second.hHwQueue, 1));
    CHECK(gpu_signal(first.hHwQueue, native.hSyncObject, 1));
    CHECK(cpu_wait(&gpu, second.hHwQueueProgressFence, 1));
    if (*value < 1) {
        fail("the waiting queue's work completed before the fence was signaled", STATUS_SUCCESS);
    }
    printf("ok native-gpu-wait-released\n");
    close_gpu(&gpu);
}

/* The raw 32-bit doorbell status at `address`, compared as documented with the
 * D3DDDI_DOORBELL_STATUS values (no translation). */
static UINT doorbell_status(const VOID *address) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return *(const volatile UINT *)address;
}

static void doorbell(UINT luid) {
    struct gpu gpu = open_gpu(luid);
    D3DKMT_HANDLE context = create_context(&gpu);
    D3DKMT_CREATEHWQUEUE queue = create_user_queue(context);
    D3DKMT_CREATE_DOORBELL create;
    memset(&create, 0, sizeof(create));
    create.hHwQueue = queue.hHwQueue;
    CHECK(D3DKMTCreateDoorbell(&create));
    if (create.DoorbellCPUVirtualAddress == NULL || create.DoorbellStatusCPUVirtualAddress == NULL) {
        fail("D3DKMTCreateDoorbell gave no doorbell or status CPU address", STATUS_SUCCESS);
    }
    if (create.DoorbellSecondaryCPUVirtualAddress != NULL ||
        create.HwQueueProgressFenceLastQueuedValueCPUVirtualAddress != NULL) {
        fail("D3DKMTCreateDoorbell gave a secondary or LastQueuedValue address", STATUS_SUCCESS);
    }
    volatile UINT64 *bell = (volatile UINT64 *)create.DoorbellCPUVirtualAddress;
    printf("ok addresses\n");

    UINT created = doorbell_status(create.DoorbellStatusCPUVirtualAddress);
    if (created != D3DDDI_DOORBELL_STATUS_DISCONNECTED_RETRY) {
        fprintf(stderr, "status %u\n", created);
        fail("a new doorbell's status is not DISCONNECTED_RETRY", STATUS_SUCCESS);
    }
    *bell = 0;
    if (doorbell_status(create.DoorbellStatusCPUVirtualAddress) != D3DDDI_DOORBELL_STATUS_DISCONNECTED_RETRY) {
        fail("a store to the disconnected doorbell changed its status", STATUS_SUCCESS);
    }
    printf("ok disconnected-store\n");

    D3DKMT_CONNECT_DOORBELL connect;
    memset(&connect, 0, sizeof(connect));
    connect.hDoorbell = create.hDoorbell;
    CHECK(D3DKMTConnectDoorbell(&connect));
    UINT connected = doorbell_status(create.DoorbellStatusCPUVirtualAddress);
    if (connected != D3DDDI_DOORBELL_STATUS_CONNECTED) {
        fprintf(stderr, "status %u\n", connected);
        fail("the connected doorbell's status is not CONNECTED", STATUS_SUCCESS);
    }
    printf("ok connected\n");

    CHECK(submit(queue.hHwQueue, 1));
    CHECK(cpu_wait(&gpu, queue.hHwQueueProgressFence, 1));
    UINT64 write_index = *bell;
    if (write_index == 0) {
        fail("the doorbell reads no write index after a submission", STATUS_SUCCESS);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *bell = write_index;
    UINT status = doorbell_status(create.DoorbellStatusCPUVirtualAddress);
    if (status == D3DDDI_DOORBELL_STATUS_CONNECTED_NOTIFY) {
        D3DKMT_NOTIFY_WORK_SUBMISSION notify;
        memset(&notify, 0, sizeof(notify));
        notify.hHwQueue = queue.hHwQueue;
        CHECK(D3DKMTNotifyWorkSubmission(&notify));
    } else if (status != D3DDDI_DOORBELL_STATUS_CONNECTED) {
        fail("the status after the program's ring is not CONNECTED or CONNECTED_NOTIFY", STATUS_SUCCESS);
    }
    CHECK(submit(queue.hHwQueue, 2));
    CHECK(cpu_wait(&gpu, queue.hHwQueueProgressFence, 2));
    printf("ok program-ring write-index %" PRIu64 "\n", (uint64_t)write_index);

    D3DKMT_DESTROY_DOORBELL destroy;
    memset(&destroy, 0, sizeof(destroy));
    destroy.hDoorbell = create.hDoorbell;
    CHECK(D3DKMTDestroyDoorbell(&destroy));
    CHECK(submit(queue.hHwQueue, 3));
    CHECK(cpu_wait(&gpu, queue.hHwQueueProgressFence, 3));
    printf("ok destroyed\n");
    close_gpu(&gpu);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: belfry-d3dkmt-rules fen-02|nf-intra|nf-destroy|nf-21|doorbell LUID\n");
        return 2;
    }
    check = argv[1];
    UINT luid = (UINT)strtoul(argv[2], NULL, 10);
    if (strcmp(check, "fen-02") == 0) {
        fen_02(luid);
    } else if (strcmp(check, "nf-intra") == 0) {
        nf_intra(luid);
    } else if (strcmp(check, "nf-destroy") == 0) {
        nf_destroy(luid);
    } else if (strcmp(check, "nf-21") == 0) {
        nf_21(luid);
    } else if (strcmp(check, "doorbell") == 0) {
        doorbell(luid);
    } else {
        fprintf(stderr, "belfry-d3dkmt-rules: unknown check %s\n", check);
        return 2;
    }
    printf("%s: all ok\n", check);
    return 0;
}

/*
 * User-mode work submission through a doorbell, with a native fence waited on by the CPU and
 * by the GPU of another hardware queue, written to the D3DKMT documentation:
 *
 *   1. open the first adapter, create a device and a context on node 0;
 *   2. create two hardware queues with D3DDDI_CREATEHWQUEUEFLAGS::UserModeSubmission, a
 *      doorbell for each (D3DKMTCreateDoorbell) and connect it (D3DKMTConnectDoorbell);
 *   3. create a native fence (D3DDDI_NATIVEFENCE_TYPE_DEFAULT) at 0;
 *   4. queue B waits on the GPU for the fence to reach 1, then gets a submission (progress 1);
 *   5. queue A signals the fence to 1 from the GPU and gets a submission (progress 1);
 *   6. the CPU waits for the fence to reach 1, and for queue B's progress fence to reach 1:
 *      B's submission ran only once A's signal did;
 *   7. everything is destroyed.
 *
 * Prints "ok <step>" per step and "d3dkmt-doorbell: all ok" at the end; exits 1 at the first
 * failed call, naming it and its NTSTATUS.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "belfry_d3dkmt.h"

#define CHECK(call)                                                                           \
    do {                                                                                      \
        NTSTATUS status_ = (call);                                                            \
        if (!NT_SUCCESS(status_) || status_ == STATUS_TIMEOUT) {                              \
            fprintf(stderr, "d3dkmt-doorbell: %s failed: 0x%08" PRIX32 "\n", #call, (uint32_t)status_); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static void fail(const char *what) {
    fprintf(stderr, "d3dkmt-doorbell: %s\n", what);
    exit(1);
}

/* A user-mode hardware queue on hContext with its doorbell connected. */
static void create_queue(D3DKMT_HANDLE hContext, D3DKMT_CREATEHWQUEUE *queue, D3DKMT_CREATE_DOORBELL *doorbell) {
    memset(queue, 0, sizeof(*queue));
    queue->hHwContext = hContext;
    queue->Flags.UserModeSubmission = 1;
    CHECK(D3DKMTCreateHwQueue(queue));

    memset(doorbell, 0, sizeof(*doorbell));
    doorbell->hHwQueue = queue->hHwQueue;
    doorbell->Flags.Value = 0;
    CHECK(D3DKMTCreateDoorbell(doorbell));

    D3DKMT_CONNECT_DOORBELL connect;
    memset(&connect, 0, sizeof(connect));
    connect.hDoorbell = doorbell->hDoorbell;
    CHECK(D3DKMTConnectDoorbell(&connect));
}

/* Submits an (empty) command buffer whose completion signals progress value `id`. */
static void submit(D3DKMT_HANDLE hHwQueue, UINT64 id) {
    D3DKMT_SUBMITCOMMANDTOHWQUEUE submission;
    memset(&submission, 0, sizeof(submission));
    submission.hHwQueue = hHwQueue;
    submission.HwQueueProgressFenceId = id;
    CHECK(D3DKMTSubmitCommandToHwQueue(&submission));
}

int main(void) {
    D3DKMT_ADAPTERINFO adapters[16];
    D3DKMT_ENUMADAPTERS2 enumerate;
    memset(&enumerate, 0, sizeof(enumerate));
    enumerate.NumAdapters = 16;
    enumerate.pAdapters = adapters;
    CHECK(D3DKMTEnumAdapters2(&enumerate));
    if (enumerate.NumAdapters == 0) {
        fail("no adapter");
    }
    D3DKMT_HANDLE hAdapter = adapters[0].hAdapter;
    for (ULONG i = 1; i < enumerate.NumAdapters; i++) {
        D3DKMT_CLOSEADAPTER close = {adapters[i].hAdapter};
        CHECK(D3DKMTCloseAdapter(&close));
    }
    printf("ok adapter (LUID %" PRIu32 ":%" PRId32 ")\n", adapters[0].AdapterLuid.LowPart,
           adapters[0].AdapterLuid.HighPart);

    D3DKMT_CREATEDEVICE device;
    memset(&device, 0, sizeof(device));
    device.hAdapter = hAdapter;
    CHECK(D3DKMTCreateDevice(&device));

    D3DKMT_CREATECONTEXTVIRTUAL context;
    memset(&context, 0, sizeof(context));
    context.hDevice = device.hDevice;
    context.NodeOrdinal = 0;
    context.Flags.HwQueueSupported = 1;
    context.ClientHint = D3DKMT_CLIENTHINT_DX12;
    CHECK(D3DKMTCreateContextVirtual(&context));
    printf("ok device\n");

    D3DKMT_CREATEHWQUEUE queue_a, queue_b;
    D3DKMT_CREATE_DOORBELL doorbell_a, doorbell_b;
    create_queue(context.hContext, &queue_a, &doorbell_a);
    create_queue(context.hContext, &queue_b, &doorbell_b);
    printf("ok doorbells\n");

    D3DKMT_CREATENATIVEFENCE fence;
    memset(&fence, 0, sizeof(fence));
    fence.hDevice = device.hDevice;
    fence.Info.InitialFenceValue = 0;
    fence.Info.Type = D3DDDI_NATIVEFENCE_TYPE_DEFAULT;
    CHECK(D3DKMTCreateNativeFence(&fence));
    if (fence.Info.NativeFenceMapping.CurrentValueCpuVa == NULL || fence.Info.NativeFenceMapping.CurrentValueGpuVa == 0) {
        fail("the native fence has no CPU or GPU mapping");
    }
    const volatile UINT64 *current = (const volatile UINT64 *)fence.Info.NativeFenceMapping.CurrentValueCpuVa;
    printf("ok native-fence (CurrentValue %" PRIu64 ")\n", (uint64_t)*current);

    /* Queue B: wait on the GPU for the fence to reach 1, then work. */
    UINT64 one = 1;
    D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMGPU gpu_wait;
    memset(&gpu_wait, 0, sizeof(gpu_wait));
    gpu_wait.hContext = queue_b.hHwQueue;
    gpu_wait.ObjectCount = 1;
    gpu_wait.ObjectHandleArray = &fence.hSyncObject;
    gpu_wait.MonitoredFenceValueArray = &one;
    CHECK(D3DKMTWaitForSynchronizationObjectFromGpu(&gpu_wait));
    submit(queue_b.hHwQueue, 1);

    /* Queue A: signal the fence to 1 from the GPU, then work. */
    D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU gpu_signal;
    memset(&gpu_signal, 0, sizeof(gpu_signal));
    gpu_signal.hContext = queue_a.hHwQueue;
    gpu_signal.ObjectCount = 1;
    gpu_signal.ObjectHandleArray = &fence.hSyncObject;
    gpu_signal.MonitoredFenceValueArray = &one;
    CHECK(D3DKMTSignalSynchronizationObjectFromGpu(&gpu_signal));
    submit(queue_a.hHwQueue, 1);
    printf("ok submitted\n");

    /* The CPU waits for the fence, then for queue B's progress. */
    D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU cpu_wait;
    memset(&cpu_wait, 0, sizeof(cpu_wait));
    cpu_wait.hDevice = device.hDevice;
    cpu_wait.ObjectCount = 1;
    cpu_wait.ObjectHandleArray = &fence.hSyncObject;
    cpu_wait.FenceValueArray = &one;
    CHECK(D3DKMTWaitForSynchronizationObjectFromCpu(&cpu_wait));
    if (*current < 1) {
        fail("the CPU wait returned before CurrentValue reached 1");
    }
    printf("ok cpu-wait (CurrentValue %" PRIu64 ")\n", (uint64_t)*current);

    D3DKMT_HANDLE progress[2] = {queue_b.hHwQueueProgressFence, queue_a.hHwQueueProgressFence};
    UINT64 ids[2] = {1, 1};
    cpu_wait.ObjectCount = 2;
    cpu_wait.ObjectHandleArray = progress;
    cpu_wait.FenceValueArray = ids;
    CHECK(D3DKMTWaitForSynchronizationObjectFromCpu(&cpu_wait));
    printf("ok gpu-wait (queue B ran after queue A's signal)\n");

    /* A second round: the CPU signals, queue B's GPU wait sees it. */
    UINT64 two = 2;
    gpu_wait.MonitoredFenceValueArray = &two;
    CHECK(D3DKMTWaitForSynchronizationObjectFromGpu(&gpu_wait));
    submit(queue_b.hHwQueue, 2);
    D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMCPU cpu_signal;
    memset(&cpu_signal, 0, sizeof(cpu_signal));
    cpu_signal.hDevice = device.hDevice;
    cpu_signal.ObjectCount = 1;
    cpu_signal.ObjectHandleArray = &fence.hSyncObject;
    cpu_signal.FenceValueArray = &two;
    CHECK(D3DKMTSignalSynchronizationObjectFromCpu(&cpu_signal));
    cpu_wait.ObjectCount = 1;
    cpu_wait.ObjectHandleArray = &queue_b.hHwQueueProgressFence;
    cpu_wait.FenceValueArray = &two;
    CHECK(D3DKMTWaitForSynchronizationObjectFromCpu(&cpu_wait));
    printf("ok cpu-signal\n");

    D3DKMT_NOTIFY_WORK_SUBMISSION notify;
    memset(&notify, 0, sizeof(notify));
    notify.hHwQueue = queue_a.hHwQueue;
    CHECK(D3DKMTNotifyWorkSubmission(&notify));
    printf("ok notify\n");

    D3DKMT_DESTROYSYNCHRONIZATIONOBJECT destroy_fence = {fence.hSyncObject};
    CHECK(D3DKMTDestroySynchronizationObject(&destroy_fence));
    D3DKMT_DESTROY_DOORBELL destroy_doorbell_a = {doorbell_a.hDoorbell};
    D3DKMT_DESTROY_DOORBELL destroy_doorbell_b = {doorbell_b.hDoorbell};
    CHECK(D3DKMTDestroyDoorbell(&destroy_doorbell_a));
    CHECK(D3DKMTDestroyDoorbell(&destroy_doorbell_b));
    D3DKMT_DESTROYHWQUEUE destroy_a = {queue_a.hHwQueue};
    D3DKMT_DESTROYHWQUEUE destroy_b = {queue_b.hHwQueue};
    CHECK(D3DKMTDestroyHwQueue(&destroy_a));
    CHECK(D3DKMTDestroyHwQueue(&destroy_b));
    D3DKMT_DESTROYCONTEXT destroy_context = {context.hContext};
    CHECK(D3DKMTDestroyContext(&destroy_context));
    D3DKMT_DESTROYDEVICE destroy_device = {device.hDevice};
    CHECK(D3DKMTDestroyDevice(&destroy_device));
    D3DKMT_CLOSEADAPTER close = {hAdapter};
    CHECK(D3DKMTCloseAdapter(&close));
    printf("ok destroyed\n");
    printf("d3dkmt-doorbell: all ok\n");
    return 0;
}

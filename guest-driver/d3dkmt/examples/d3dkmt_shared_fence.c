/*
 * A monitored fence shared between two processes and waited on by both, written to the D3DKMT
 * documentation (Belfry's NT handle is a file descriptor: (HANDLE)(intptr_t)fd):
 *
 *   1. the parent creates a shared monitored fence (D3DKMTCreateSynchronizationObject2,
 *      D3DDDI_MONITORED_FENCE, D3DDDI_SYNCHRONIZATIONOBJECT_FLAGS::Shared) and shares it
 *      (D3DKMTShareObjects), then forks;
 *   2. the child opens its own adapter, device and context, opens the fence from the shared
 *      handle (D3DKMTOpenSyncObjectFromNtHandle2), waits on the CPU for 1, then signals 2 from
 *      the GPU of its context;
 *   3. the parent signals 1 from the GPU of its context and waits on the CPU for 2 (the
 *      child's GPU signal), then for the child to exit with 0.
 *
 * Prints "ok <step>" per step and "d3dkmt-shared-fence: all ok" at the end; exits 1 at the
 * first failed call, naming it and its NTSTATUS.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "belfry_d3dkmt.h"

static const char *who = "parent";

#define CHECK(call)                                                                           \
    do {                                                                                      \
        NTSTATUS status_ = (call);                                                            \
        if (!NT_SUCCESS(status_) || status_ == STATUS_TIMEOUT) {                              \
            fprintf(stderr, "d3dkmt-shared-fence (%s): %s failed: 0x%08" PRIX32 "\n", who, #call, \
                    (uint32_t)status_);                                                       \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* A device and a context on node 0 of the first adapter. */
struct gpu {
    D3DKMT_HANDLE hAdapter, hDevice, hContext;
};

static struct gpu open_gpu(void) {
    struct gpu gpu;
    D3DKMT_OPENADAPTERFROMLUID open;
    memset(&open, 0, sizeof(open));
    D3DKMT_ADAPTERINFO adapters[16];
    D3DKMT_ENUMADAPTERS2 enumerate = {16, adapters};
    CHECK(D3DKMTEnumAdapters2(&enumerate));
    if (enumerate.NumAdapters == 0) {
        fprintf(stderr, "d3dkmt-shared-fence (%s): no adapter\n", who);
        exit(1);
    }
    open.AdapterLuid = adapters[0].AdapterLuid;
    for (ULONG i = 0; i < enumerate.NumAdapters; i++) {
        D3DKMT_CLOSEADAPTER close = {adapters[i].hAdapter};
        CHECK(D3DKMTCloseAdapter(&close));
    }
    CHECK(D3DKMTOpenAdapterFromLuid(&open));
    gpu.hAdapter = open.hAdapter;

    D3DKMT_CREATEDEVICE device;
    memset(&device, 0, sizeof(device));
    device.hAdapter = gpu.hAdapter;
    CHECK(D3DKMTCreateDevice(&device));
    gpu.hDevice = device.hDevice;

    D3DKMT_CREATECONTEXTVIRTUAL context;
    memset(&context, 0, sizeof(context));
    context.hDevice = gpu.hDevice;
    context.NodeOrdinal = 0;
    CHECK(D3DKMTCreateContextVirtual(&context));
    gpu.hContext = context.hContext;
    return gpu;
}

static void close_gpu(struct gpu *gpu) {
    D3DKMT_DESTROYDEVICE destroy = {gpu->hDevice};
    CHECK(D3DKMTDestroyDevice(&destroy));
    D3DKMT_CLOSEADAPTER close = {gpu->hAdapter};
    CHECK(D3DKMTCloseAdapter(&close));
}

/* Signals `fence` to `value` from the GPU of `gpu`'s context (monitored fences are signaled
 * through contexts: a user-mode hardware queue takes native fences only). */
static void gpu_signal(struct gpu *gpu, D3DKMT_HANDLE fence, UINT64 value) {
    D3DKMT_SIGNALSYNCHRONIZATIONOBJECTFROMGPU signal;
    memset(&signal, 0, sizeof(signal));
    signal.hContext = gpu->hContext;
    signal.ObjectCount = 1;
    signal.ObjectHandleArray = &fence;
    signal.MonitoredFenceValueArray = &value;
    CHECK(D3DKMTSignalSynchronizationObjectFromGpu(&signal));
}

static void cpu_wait(D3DKMT_HANDLE hDevice, D3DKMT_HANDLE fence, UINT64 value) {
    D3DKMT_WAITFORSYNCHRONIZATIONOBJECTFROMCPU wait;
    memset(&wait, 0, sizeof(wait));
    wait.hDevice = hDevice;
    wait.ObjectCount = 1;
    wait.ObjectHandleArray = &fence;
    wait.FenceValueArray = &value;
    CHECK(D3DKMTWaitForSynchronizationObjectFromCpu(&wait));
}

static int child(HANDLE shared) {
    who = "child";
    struct gpu gpu = open_gpu();
    D3DKMT_OPENSYNCOBJECTFROMNTHANDLE2 open;
    memset(&open, 0, sizeof(open));
    open.hNtHandle = shared;
    open.hDevice = gpu.hDevice;
    CHECK(D3DKMTOpenSyncObjectFromNtHandle2(&open));
    close((int)(intptr_t)shared);
    const volatile UINT64 *current = (const volatile UINT64 *)open.MonitoredFence.FenceValueCPUVirtualAddress;
    if (current == NULL || open.MonitoredFence.FenceValueGPUVirtualAddress == 0) {
        fprintf(stderr, "d3dkmt-shared-fence (child): the opened fence lacks its CPU or GPU address\n");
        return 1;
    }
    printf("ok child-open\n");

    cpu_wait(gpu.hDevice, open.hSyncObject, 1);
    if (*current < 1) {
        fprintf(stderr, "d3dkmt-shared-fence (child): the wait returned at CurrentValue %" PRIu64 "\n",
                (uint64_t)*current);
        return 1;
    }
    printf("ok child-wait (the parent's GPU signal, CurrentValue %" PRIu64 ")\n", (uint64_t)*current);

    gpu_signal(&gpu, open.hSyncObject, 2);
    cpu_wait(gpu.hDevice, open.hSyncObject, 2);
    printf("ok child-signal\n");

    D3DKMT_DESTROYSYNCHRONIZATIONOBJECT destroy = {open.hSyncObject};
    CHECK(D3DKMTDestroySynchronizationObject(&destroy));
    close_gpu(&gpu);
    return 0;
}

int main(void) {
    struct gpu gpu = open_gpu();
    D3DKMT_CREATESYNCHRONIZATIONOBJECT2 fence;
    memset(&fence, 0, sizeof(fence));
    fence.hDevice = gpu.hDevice;
    fence.Info.Type = D3DDDI_MONITORED_FENCE;
    fence.Info.Flags.Shared = 1;
    fence.Info.Flags.NtSecuritySharing = 1;
    fence.Info.MonitoredFence.InitialFenceValue = 0;
    CHECK(D3DKMTCreateSynchronizationObject2(&fence));
    const volatile UINT64 *value = (const volatile UINT64 *)fence.Info.MonitoredFence.FenceValueCPUVirtualAddress;
    if (value == NULL || fence.Info.MonitoredFence.FenceValueGPUVirtualAddress == 0) {
        fprintf(stderr, "d3dkmt-shared-fence: the monitored fence lacks its CPU or GPU address\n");
        return 1;
    }

    HANDLE shared = NULL;
    CHECK(D3DKMTShareObjects(1, &fence.hSyncObject, NULL, 0, &shared));
    printf("ok shared (descriptor %d)\n", (int)(intptr_t)shared);

    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("d3dkmt-shared-fence: fork");
        return 1;
    }
    if (pid == 0) {
        int code = child(shared);
        fflush(stdout);
        _exit(code);
    }
    close((int)(intptr_t)shared);

    gpu_signal(&gpu, fence.hSyncObject, 1);
    printf("ok parent-signal\n");
    cpu_wait(gpu.hDevice, fence.hSyncObject, 2);
    if (*value < 2) {
        fprintf(stderr, "d3dkmt-shared-fence: the wait returned at %" PRIu64 "\n", (uint64_t)*value);
        return 1;
    }
    printf("ok parent-wait (the child's GPU signal)\n");

    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "d3dkmt-shared-fence: the child failed (status 0x%x)\n", status);
        return 1;
    }
    D3DKMT_DESTROYSYNCHRONIZATIONOBJECT destroy = {fence.hSyncObject};
    CHECK(D3DKMTDestroySynchronizationObject(&destroy));
    close_gpu(&gpu);
    printf("d3dkmt-shared-fence: all ok\n");
    return 0;
}

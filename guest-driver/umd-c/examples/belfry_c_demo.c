/* SPDX-License-Identifier: Apache-2.0 */
/*
 * belfry-c-demo: the C API of Belfry's user-mode driver library, end to end, as a C test
 * program would use it. Built with the provisioning root's gcc against libbelfry_umd_c.a and
 * run in the guest by the conformance suite (suite/umd.rs), which checks its output and exit
 * status.
 *
 *   belfry-c-demo /dev/belfry0
 *
 * Steps, each printing "ok <step>" when it passed:
 *   submit   a user-mode submission (ring and doorbell) writes a word the CPU reads back;
 *   gpu-wait a submission waits on the GPU for a fence the CPU signals later: its write lands
 *            only after the signal;
 *   cpu-wait the CPU waits for a value the GPU signals, then times out on one nobody signals
 *            (absolute deadline);
 *   wait-any one wait on two fences returns the one that was signalled;
 *   shared   a shareable fence exported as an fd to a forked child process, which imports it,
 *            waits for the parent's signal and signals back;
 *   query    the device is found by enumeration and its capabilities read;
 *   monitored a thread sleeping in belfry_fence_wait on a MONITORED fence is woken by the GPU's
 *            signal of it (belfry_cmdbuf_signal_fence on a kernel-mode queue: monitored fences
 *            are the kernel-mode model), which runs after the thread slept;
 *   pollable a pollable wait's descriptor is not readable before the GPU signals the fence and
 *            is readable (poll(2)) after;
 *   vidmem   video memory (VRAM preferred) written by the CPU, copied by the GPU through a
 *            split buffer into another, read back by the CPU;
 *   engine   a kernel-mode queue on the last engine with its own ring and slot sizes copies a
 *            buffer.
 * Exit status 0 when every step passed, 1 otherwise (the reason on stderr).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "belfry_umd.h"

#define SECOND 1000000000ull

static int fail(const char *step, const char *what, int rc)
{
	fprintf(stderr, "belfry-c-demo: %s: %s: %d (%s): %s\n", step, what, rc, strerror(-rc),
		belfry_last_error());
	return 1;
}

#define CHECK(step, call)                                  \
	do {                                                   \
		int rc_ = (call);                                  \
		if (rc_ != 0)                                      \
			return fail(step, #call, rc_);                 \
	} while (0)

#define EXPECT(step, cond)                                                      \
	do {                                                                        \
		if (!(cond)) {                                                          \
			fprintf(stderr, "belfry-c-demo: %s: expected %s\n", step, #cond); \
			return 1;                                                           \
		}                                                                       \
	} while (0)

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* The child of the "shared" step: its own device file and context; imports the fence, waits
 * for 7 from the parent, signals 8. */
static int child(const char *path, int fd)
{
	BelfryDevice *dev;
	BelfryContext *ctx;
	BelfryFence *f;
	CHECK("shared/child", belfry_device_open(path, &dev));
	CHECK("shared/child", belfry_context_create(dev, &ctx));
	CHECK("shared/child", belfry_fence_import(ctx, fd, &f));
	CHECK("shared/child", belfry_fence_wait(f, 7, belfry_monotonic_ns() + 10 * SECOND));
	CHECK("shared/child", belfry_fence_signal(f, 8));
	belfry_fence_destroy(f);
	belfry_context_destroy(ctx);
	belfry_device_close(dev);
	return 0;
}

/* The sleeping thread of the "monitored" step. */
struct monitored_wait {
	BelfryFence *fence;
	int rc;
};

static void *wait_monitored(void *arg)
{
	struct monitored_wait *w = arg;
	w->rc = belfry_fence_wait(w->fence, 1, belfry_monotonic_ns() + 20 * SECOND);
	return NULL;
}

/* query: the device at `path` is among the enumerated ones; engine count and VRAM size. */
static int query(const char *path, BelfryDevice *dev, uint64_t *engines)
{
	char found[64];
	uint32_t i;
	int rc, listed = 0;
	uint64_t vram, user_engines;

	for (i = 0; (rc = belfry_device_enumerate(i, found, sizeof(found))) == 0; i++)
		listed |= strcmp(found, path) == 0;
	EXPECT("query", rc == -ENOENT);
	EXPECT("query", listed);
	CHECK("query", belfry_device_query(dev, BELFRY_CAP_ENGINE_COUNT, engines));
	CHECK("query", belfry_device_query(dev, BELFRY_CAP_VRAM_SIZE, &vram));
	CHECK("query", belfry_device_query(dev, BELFRY_CAP_USER_MODE_ENGINES, &user_engines));
	EXPECT("query", *engines >= 1 && (user_engines & 1));
	EXPECT("query", belfry_device_query(dev, 0xFFFF, &vram) == -EINVAL);
	EXPECT("query", belfry_api_version() == BELFRY_UMD_API_VERSION);
	printf("ok query (%u devices, %" PRIu64 " engines, %" PRIu64 " MiB VRAM)\n", i, *engines, vram >> 20);
	return 0;
}

/* monitored: a thread sleeps in belfry_fence_wait for 1; the GPU signals 1 once the CPU
 * opened a gate, which it does after the thread went to sleep. */
static int monitored(BelfryContext *ctx, BelfryQueue *q, BelfryFence *m)
{
	BelfryFence *gate;
	BelfryCommandBuffer *cb;
	struct monitored_wait w;
	pthread_t thread;
	uint64_t done;

	CHECK("monitored", belfry_fence_create(ctx, BELFRY_FENCE_KIND_DEFAULT, 0, 0, &gate));
	cb = belfry_cmdbuf_create();
	CHECK("monitored", belfry_cmdbuf_wait_fence(cb, gate, 1));
	CHECK("monitored", belfry_cmdbuf_signal_fence(cb, m, 1));
	CHECK("monitored", belfry_queue_submit(q, cb, &done));
	w.fence = m;
	w.rc = 1;
	EXPECT("monitored", pthread_create(&thread, NULL, wait_monitored, &w) == 0);
	sleep_ms(500); /* the thread is asleep in the wait (the gate keeps the signal back) */
	CHECK("monitored", belfry_fence_signal(gate, 1));
	EXPECT("monitored", pthread_join(thread, NULL) == 0);
	CHECK("monitored", w.rc);
	CHECK("monitored", belfry_queue_wait(q, done, belfry_monotonic_ns() + 10 * SECOND));
	belfry_cmdbuf_destroy(cb);
	belfry_fence_destroy(gate);
	printf("ok monitored\n");
	return 0;
}

/* pollable: an event for 2 on the monitored fence, readable only after the GPU signals 2. */
static int pollable(BelfryQueue *q, BelfryFence *m)
{
	BelfryFenceEvent *ev;
	BelfryCommandBuffer *cb;
	struct pollfd pfd;
	uint64_t done, count;

	CHECK("pollable", belfry_fence_event_create(m, 2, &ev));
	pfd.fd = belfry_fence_event_fd(ev);
	pfd.events = POLLIN;
	pfd.revents = 0;
	EXPECT("pollable", pfd.fd >= 0);
	EXPECT("pollable", poll(&pfd, 1, 0) == 0);
	EXPECT("pollable", belfry_fence_event_wait(ev, belfry_monotonic_ns()) == -ETIMEDOUT);
	cb = belfry_cmdbuf_create();
	CHECK("pollable", belfry_cmdbuf_signal_fence(cb, m, 2));
	CHECK("pollable", belfry_queue_submit(q, cb, &done));
	EXPECT("pollable", poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN));
	CHECK("pollable", belfry_fence_event_wait(ev, 0));
	CHECK("pollable", belfry_fence_event_take(ev, &count));
	EXPECT("pollable", count >= 1);
	CHECK("pollable", belfry_queue_wait(q, done, belfry_monotonic_ns() + 10 * SECOND));
	belfry_cmdbuf_destroy(cb);
	belfry_fence_event_destroy(ev);
	printf("ok pollable\n");
	return 0;
}

/* vidmem: CPU writes a VRAM-preferring allocation, the GPU copies it into another through a
 * split buffer (the module patches the bound addresses in), the CPU reads the copy back. */
static int vidmem(BelfryContext *ctx)
{
	static const char text[] = "video memory, copied by the GPU";
	char back[sizeof(text)];
	BelfryVideoAllocation *src, *dst;
	BelfrySplitBuffer *sb;
	BelfrySplitQueue *sq;
	uint32_t parts = 0;

	CHECK("vidmem", belfry_vidmem_create(ctx, 4096, BELFRY_SEGMENT_VRAM, &src));
	CHECK("vidmem", belfry_vidmem_create(ctx, 4096, BELFRY_SEGMENT_VRAM, &dst));
	EXPECT("vidmem", belfry_vidmem_size(src) == 4096 && belfry_vidmem_gpu_va(src) != 0);
	CHECK("vidmem", belfry_vidmem_write(src, 0, text, sizeof(text)));
	CHECK("vidmem", belfry_split_queue_create(ctx, 0, &sq));
	sb = belfry_split_create(4);
	EXPECT("vidmem", sb != NULL);
	CHECK("vidmem", belfry_split_bind(sb, 0, src));
	CHECK("vidmem", belfry_split_bind(sb, 1, dst));
	CHECK("vidmem", belfry_split_slot_copy(sb, 0, 0, 1, 0, sizeof(text)));
	CHECK("vidmem", belfry_split_finish(sb));
	CHECK("vidmem", belfry_split_submit(sq, sb, &parts));
	EXPECT("vidmem", parts >= 1);
	memset(back, 0, sizeof(back));
	CHECK("vidmem", belfry_vidmem_read(dst, 0, back, sizeof(back)));
	EXPECT("vidmem", memcmp(back, text, sizeof(text)) == 0);
	belfry_split_destroy(sb);
	belfry_split_queue_destroy(sq);
	belfry_vidmem_destroy(dst);
	belfry_vidmem_destroy(src);
	printf("ok vidmem (%u parts)\n", parts);
	return 0;
}

/* engine: a kernel-mode queue on the last engine, 32 slots of 8 KiB, copies 64 bytes. */
static int engine(BelfryContext *ctx, uint64_t engines)
{
	BelfryAllocation *a;
	BelfryQueue *q;
	BelfryCommandBuffer *cb;
	uint64_t va, done, completed;
	uint32_t word;

	CHECK("engine", belfry_alloc_create(ctx, 4096, &a));
	va = belfry_alloc_gpu_va(a);
	CHECK("engine", belfry_alloc_write_u32(a, 0, 0x5EED));
	CHECK("engine", belfry_queue_create_ex(ctx, BELFRY_QUEUE_KERNEL_MODE, (uint32_t)(engines - 1), 1, 32, 8192, 0, &q));
	EXPECT("engine", belfry_queue_create_ex(ctx, BELFRY_QUEUE_KERNEL_MODE, 0, 1, 3, 0, 0, &q) == -EINVAL);
	cb = belfry_cmdbuf_create();
	CHECK("engine", belfry_cmdbuf_copy(cb, va, va + 2048, 64));
	CHECK("engine", belfry_queue_submit(q, cb, &done));
	CHECK("engine", belfry_queue_wait(q, done, belfry_monotonic_ns() + 10 * SECOND));
	CHECK("engine", belfry_queue_completed(q, &completed));
	EXPECT("engine", completed >= done);
	CHECK("engine", belfry_alloc_read_u32(a, 2048, &word));
	EXPECT("engine", word == 0x5EED);
	belfry_cmdbuf_destroy(cb);
	belfry_queue_destroy(q);
	belfry_alloc_destroy(a);
	printf("ok engine (engine %" PRIu64 ")\n", engines - 1);
	return 0;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "/dev/belfry0";
	BelfryDevice *dev;
	BelfryContext *ctx;
	BelfryAllocation *buf;
	BelfryQueue *q;
	BelfryCommandBuffer *cb;
	uint64_t va, done, v;
	uint32_t word, first;

	CHECK("open", belfry_device_open(path, &dev));
	CHECK("open", belfry_context_create(dev, &ctx));
	CHECK("open", belfry_alloc_create(ctx, 4096, &buf));
	CHECK("open", belfry_queue_create(ctx, BELFRY_QUEUE_USER_MODE, &q));
	va = belfry_alloc_gpu_va(buf);

	/* submit */
	cb = belfry_cmdbuf_create();
	CHECK("submit", belfry_cmdbuf_write32(cb, va, 0xC0FFEE));
	CHECK("submit", belfry_queue_submit(q, cb, &done));
	CHECK("submit", belfry_queue_wait(q, done, belfry_monotonic_ns() + 10 * SECOND));
	CHECK("submit", belfry_alloc_read_u32(buf, 0, &word));
	EXPECT("submit", word == 0xC0FFEE);
	belfry_cmdbuf_destroy(cb);
	printf("ok submit (progress %" PRIu64 ")\n", done);

	/* gpu-wait */
	BelfryFence *gate;
	CHECK("gpu-wait", belfry_fence_create(ctx, BELFRY_FENCE_KIND_DEFAULT, 0, 0, &gate));
	cb = belfry_cmdbuf_create();
	CHECK("gpu-wait", belfry_cmdbuf_wait_fence(cb, gate, 1));
	CHECK("gpu-wait", belfry_cmdbuf_write32(cb, va + 4, 0xBEEF));
	CHECK("gpu-wait", belfry_queue_submit(q, cb, &done));
	sleep_ms(200);
	CHECK("gpu-wait", belfry_alloc_read_u32(buf, 4, &word));
	EXPECT("gpu-wait", word == 0);
	CHECK("gpu-wait", belfry_fence_signal(gate, 1));
	CHECK("gpu-wait", belfry_queue_wait(q, done, belfry_monotonic_ns() + 10 * SECOND));
	CHECK("gpu-wait", belfry_alloc_read_u32(buf, 4, &word));
	EXPECT("gpu-wait", word == 0xBEEF);
	belfry_cmdbuf_destroy(cb);
	printf("ok gpu-wait\n");

	/* cpu-wait */
	BelfryFence *f;
	CHECK("cpu-wait", belfry_fence_create(ctx, BELFRY_FENCE_KIND_DEFAULT, 0, 0, &f));
	cb = belfry_cmdbuf_create();
	CHECK("cpu-wait", belfry_cmdbuf_signal_fence(cb, f, 5));
	CHECK("cpu-wait", belfry_queue_submit(q, cb, &done));
	CHECK("cpu-wait", belfry_fence_wait(f, 5, belfry_monotonic_ns() + 10 * SECOND));
	CHECK("cpu-wait", belfry_fence_value(f, &v));
	EXPECT("cpu-wait", v == 5);
	uint64_t deadline = belfry_monotonic_ns() + SECOND / 10;
	EXPECT("cpu-wait", belfry_fence_wait(f, 6, deadline) == -ETIMEDOUT);
	EXPECT("cpu-wait", belfry_monotonic_ns() >= deadline);
	belfry_cmdbuf_destroy(cb);
	printf("ok cpu-wait\n");

	/* wait-any */
	const BelfryFence *both[2] = { gate, f };
	const uint64_t values[2] = { 100, 5 };
	CHECK("wait-any", belfry_wait_fences(both, values, 2, 0, belfry_monotonic_ns() + SECOND, &first));
	EXPECT("wait-any", first == 1);
	EXPECT("wait-any", belfry_wait_fences(both, values, 2, BELFRY_WAIT_ALL, 0, NULL) == -ETIMEDOUT);
	printf("ok wait-any\n");

	/* shared */
	BelfryFence *s;
	int fd, status;
	CHECK("shared", belfry_fence_create(ctx, BELFRY_FENCE_KIND_DEFAULT, BELFRY_FENCE_SHAREABLE, 0, &s));
	CHECK("shared", belfry_fence_export(s, &fd));
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return fail("shared", "fork", -errno);
	if (pid == 0)
		_exit(child(path, fd));
	belfry_fd_close(fd);
	CHECK("shared", belfry_fence_signal(s, 7));
	CHECK("shared", belfry_fence_wait(s, 8, belfry_monotonic_ns() + 10 * SECOND));
	EXPECT("shared", waitpid(pid, &status, 0) == pid);
	EXPECT("shared", WIFEXITED(status) && WEXITSTATUS(status) == 0);
	printf("ok shared\n");

	uint64_t engines;
	BelfryFence *m;
	if (query(path, dev, &engines) != 0)
		return 1;
	BelfryQueue *kq;
	CHECK("monitored", belfry_fence_create(ctx, BELFRY_FENCE_KIND_MONITORED, 0, 0, &m));
	CHECK("monitored", belfry_queue_create(ctx, BELFRY_QUEUE_KERNEL_MODE, &kq));
	if (monitored(ctx, kq, m) != 0 || pollable(kq, m) != 0 || vidmem(ctx) != 0 || engine(ctx, engines) != 0)
		return 1;
	belfry_queue_destroy(kq);
	belfry_fence_destroy(m);

	belfry_fence_destroy(s);
	belfry_fence_destroy(f);
	belfry_fence_destroy(gate);
	belfry_queue_destroy(q);
	belfry_alloc_destroy(buf);
	belfry_context_destroy(ctx);
	belfry_device_close(dev);
	printf("belfry-c-demo: all ok\n");
	return 0;
}

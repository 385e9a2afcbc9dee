/* SPDX-License-Identifier: Apache-2.0 */
/*
 * belfry-c-demo: the C API of Belfry's user-mode driver library, end to end, as a C test
 * program would use it. Built with the provisioning root's gcc against libbelfry_umd_c.a and
 * run in the guest by the conformance suite (suite/umd_c.rs), which checks its output and exit
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
 *            waits for the parent's signal and signals back.
 * Exit status 0 when every step passed, 1 otherwise (the reason on stderr).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
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
	CHECK("submit", belfry_queue_wait(q, done, 10 * SECOND));
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
	CHECK("gpu-wait", belfry_queue_wait(q, done, 10 * SECOND));
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

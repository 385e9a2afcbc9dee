// SPDX-License-Identifier: GPL-2.0-only
/*
 * Belfry virtual GPU driver for the VFIO selftests.
 *
 * The driver region holds everything the device reads: a GPU address space
 * (four levels of page tables), the ring and ring-control page of one
 * kernel-mode hardware queue, two one-packet command buffers (a COPY and a
 * FENCE_SIGNAL), the fence value they signal and the mailbox argument block.
 * A memcpy maps the source and destination IOVAs into two windows of the
 * address space, queues @count copies followed by the fence signal, and kicks
 * the queue through the mailbox; it is complete when the fence holds the
 * value the signal writes. The queue faults on an unmapped IOVA: the device
 * raises the FAULT cause and the driver resets the device and builds the
 * queue again. send_msi() is the mailbox SELF_TEST command, which raises the
 * vector it names.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <linux/errno.h>
#include <linux/io.h>
#include <linux/pci_regs.h>
#include <linux/sizes.h>

#include <libvfio.h>

#include "registers.h"

#define BELFRY_RING_ENTRIES		2048
#define BELFRY_MAX_MEMCPY_COUNT		(BELFRY_RING_ENTRIES / 2)
#define BELFRY_MAX_MEMCPY_SIZE		SZ_1M
#define BELFRY_MAILBOX_TIMEOUT_S	10

/* The driver's object ids: it is the only user of the device. */
#define BELFRY_ADDRESS_SPACE_ID		1
#define BELFRY_CONTEXT_ID		1
#define BELFRY_QUEUE_ID			1

/* GPU VAs: one page table (2 MiB) each. */
#define BELFRY_SELF_VA			(2ul * SZ_2M)
#define BELFRY_SRC_VA			(3ul * SZ_2M)
#define BELFRY_DST_VA			(4ul * SZ_2M)

#define BELFRY_PT_INDEX(va)		(((va) >> 21) & (BELFRY_PT_ENTRIES - 1))

struct belfry_state {
	u64 root[BELFRY_PT_ENTRIES] __attribute__((aligned(BELFRY_PAGE_SIZE)));
	u64 pdpt[BELFRY_PT_ENTRIES] __attribute__((aligned(BELFRY_PAGE_SIZE)));
	u64 pd[BELFRY_PT_ENTRIES] __attribute__((aligned(BELFRY_PAGE_SIZE)));
	u64 pt_self[BELFRY_PT_ENTRIES] __attribute__((aligned(BELFRY_PAGE_SIZE)));
	u64 pt_src[BELFRY_PT_ENTRIES] __attribute__((aligned(BELFRY_PAGE_SIZE)));
	u64 pt_dst[BELFRY_PT_ENTRIES] __attribute__((aligned(BELFRY_PAGE_SIZE)));

	struct belfry_ring_entry ring[BELFRY_RING_ENTRIES]
		__attribute__((aligned(BELFRY_PAGE_SIZE)));
	struct belfry_ring_control control
		__attribute__((aligned(BELFRY_PAGE_SIZE)));

	struct belfry_packet_copy copy __attribute__((aligned(64)));
	struct belfry_packet_fence_signal signal __attribute__((aligned(64)));
	u64 fence __attribute__((aligned(64)));

	union {
		struct belfry_mb_header header;
		struct belfry_mb_self_test self_test;
		struct belfry_mb_object object;
		struct belfry_mb_create_address_space create_address_space;
		struct belfry_mb_create_context create_context;
		struct belfry_mb_create_queue create_queue;
	} mailbox __attribute__((aligned(64)));

	/* Driver-side bookkeeping (the device never reads it). */
	u32 engine;
	u16 seq;
	u32 write_index;
	u64 fence_target;
};

static inline struct belfry_state *to_belfry_state(struct vfio_pci_device *device)
{
	return device->driver.region.vaddr;
}

static inline void *belfry_bar0(struct vfio_pci_device *device)
{
	return device->bars[BELFRY_REGS_BAR].vaddr;
}

static u64 belfry_self_va(struct belfry_state *belfry, void *field)
{
	return BELFRY_SELF_VA + ((char *)field - (char *)belfry);
}

static int belfry_probe(struct vfio_pci_device *device)
{
	if (!vfio_pci_device_match(device, PCI_VENDOR_ID_BELFRY,
				   PCI_DEVICE_ID_BELFRY_GPU))
		return -EINVAL;

	VFIO_ASSERT_NOT_NULL(belfry_bar0(device));

	if (readl(belfry_bar0(device) + BELFRY_MAGIC) != BELFRY_MAGIC_VALUE) {
		dev_err(device, "belfry: bad magic 0x%x\n",
			readl(belfry_bar0(device) + BELFRY_MAGIC));
		return -EINVAL;
	}
	return 0;
}

static double belfry_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * Runs the command in the mailbox block and returns its status. One command
 * is in flight at a time: the next is submitted only once MB_STATUS reports
 * this one's sequence number and no longer busy.
 */
static u32 belfry_mailbox(struct vfio_pci_device *device, u32 opcode, u32 length)
{
	struct belfry_state *belfry = to_belfry_state(device);
	void *bar0 = belfry_bar0(device);
	iova_t block = to_iova(device, &belfry->mailbox);
	double deadline = belfry_now() + BELFRY_MAILBOX_TIMEOUT_S;
	u32 status;

	belfry->mailbox.header.opcode = opcode;
	belfry->mailbox.header.length = length;
	belfry->mailbox.header.seq = 0;
	WRITE_ONCE(belfry->mailbox.header.status, BELFRY_MB_PENDING);

	belfry->seq++;
	writel((u32)block, bar0 + BELFRY_MB_ARG_LO);
	writel((u32)(block >> 32), bar0 + BELFRY_MB_ARG_HI);
	writel(belfry->seq, bar0 + BELFRY_MB_SUBMIT);

	for (;;) {
		status = readl(bar0 + BELFRY_MB_STATUS);
		if (!(status & BELFRY_MB_STATUS_BUSY) &&
		    BELFRY_MB_STATUS_SEQ(status) == belfry->seq)
			break;
		VFIO_ASSERT_LT(belfry_now(), deadline,
			       "belfry: mailbox command %u: no completion\n",
			       opcode);
	}
	return READ_ONCE(belfry->mailbox.header.status);
}

static void belfry_mailbox_ok(struct vfio_pci_device *device, u32 opcode,
			      u32 length)
{
	u32 status = belfry_mailbox(device, opcode, length);

	VFIO_ASSERT_EQ(status, BELFRY_MB_OK,
		       "belfry: mailbox command %u failed\n", opcode);
}

static u64 belfry_table_entry(struct vfio_pci_device *device, void *table)
{
	return (to_iova(device, table) & BELFRY_PTE_ADDR_MASK) |
	       BELFRY_PTE_PRESENT;
}

/* Maps [iova, iova + size) at the start of the window @pt maps (+ page offset). */
static u64 belfry_map_window(u64 *pt, u64 window_va, iova_t iova, u64 size,
			     bool writable)
{
	iova_t first = iova & ~(BELFRY_PAGE_SIZE - 1);
	u64 pages = (iova + size - first + BELFRY_PAGE_SIZE - 1) / BELFRY_PAGE_SIZE;
	u64 flags = BELFRY_PTE_PRESENT | (writable ? BELFRY_PTE_WRITABLE : 0);
	u64 i;

	VFIO_ASSERT_LE(pages, BELFRY_PT_ENTRIES);

	memset(pt, 0, BELFRY_PT_ENTRIES * sizeof(*pt));
	for (i = 0; i < pages; i++)
		pt[i] = ((first + i * BELFRY_PAGE_SIZE) & BELFRY_PTE_ADDR_MASK) | flags;

	return window_va + (iova - first);
}

static void belfry_build_address_space(struct vfio_pci_device *device)
{
	struct belfry_state *belfry = to_belfry_state(device);
	u64 pages = (sizeof(*belfry) + BELFRY_PAGE_SIZE - 1) / BELFRY_PAGE_SIZE;
	u64 i;

	VFIO_ASSERT_LE(pages, BELFRY_PT_ENTRIES);

	memset(belfry->root, 0, sizeof(belfry->root));
	memset(belfry->pdpt, 0, sizeof(belfry->pdpt));
	memset(belfry->pd, 0, sizeof(belfry->pd));
	memset(belfry->pt_src, 0, sizeof(belfry->pt_src));
	memset(belfry->pt_dst, 0, sizeof(belfry->pt_dst));

	/* All three windows lie in the first GiB: one PDPT and one PD entry. */
	belfry->root[0] = belfry_table_entry(device, belfry->pdpt);
	belfry->pdpt[0] = belfry_table_entry(device, belfry->pd);
	belfry->pd[BELFRY_PT_INDEX(BELFRY_SELF_VA)] =
		belfry_table_entry(device, belfry->pt_self);
	belfry->pd[BELFRY_PT_INDEX(BELFRY_SRC_VA)] =
		belfry_table_entry(device, belfry->pt_src);
	belfry->pd[BELFRY_PT_INDEX(BELFRY_DST_VA)] =
		belfry_table_entry(device, belfry->pt_dst);

	memset(belfry->pt_self, 0, sizeof(belfry->pt_self));
	for (i = 0; i < pages; i++)
		belfry->pt_self[i] =
			belfry_table_entry(device, (char *)belfry + i * BELFRY_PAGE_SIZE) |
			BELFRY_PTE_WRITABLE;
}

/* Resets the device and builds its one queue: what init() and an error recovery do. */
static void belfry_setup(struct vfio_pci_device *device)
{
	struct belfry_state *belfry = to_belfry_state(device);
	void *bar0 = belfry_bar0(device);
	u32 engines;

	writel(BELFRY_CONTROL_RESET, bar0 + BELFRY_CONTROL);
	writel(BELFRY_CONTROL_ENABLE, bar0 + BELFRY_CONTROL);
	VFIO_ASSERT_TRUE(readl(bar0 + BELFRY_STATUS) & BELFRY_STATUS_READY);

	/*
	 * Every mailbox command raises the MAILBOX cause: on vector 0, but for
	 * SELF_TEST on the vector it names (driver.msi, never 0).
	 */
	writel(BELFRY_CAUSE_MAILBOX, bar0 + BELFRY_INT_MASK);

	/* The copy engine if it can write fences, otherwise the compute engine. */
	engines = readl(bar0 + BELFRY_ENGINE_INFO);
	VFIO_ASSERT_GT(BELFRY_ENGINE_INFO_COUNT(engines), BELFRY_ENGINE_COPY);
	if (BELFRY_ENGINE_INFO_FENCE_WRITE(engines) & (1u << BELFRY_ENGINE_COPY))
		belfry->engine = BELFRY_ENGINE_COPY;
	else
		belfry->engine = BELFRY_ENGINE_COMPUTE;
	VFIO_ASSERT_TRUE(BELFRY_ENGINE_INFO_FENCE_WRITE(engines) & (1u << belfry->engine),
			 "belfry: no engine writes fences\n");

	belfry->seq = 0;
	belfry->write_index = 0;
	belfry->fence_target = 0;
	WRITE_ONCE(belfry->fence, 0);
	memset(&belfry->control, 0, sizeof(belfry->control));
	belfry_build_address_space(device);

	belfry->mailbox.create_address_space.id = BELFRY_ADDRESS_SPACE_ID;
	belfry->mailbox.create_address_space.reserved = 0;
	belfry->mailbox.create_address_space.root_pa = to_iova(device, belfry->root);
	belfry_mailbox_ok(device, BELFRY_MB_CREATE_ADDRESS_SPACE,
			  sizeof(belfry->mailbox.create_address_space));

	belfry->mailbox.create_context.id = BELFRY_CONTEXT_ID;
	belfry->mailbox.create_context.address_space = BELFRY_ADDRESS_SPACE_ID;
	belfry_mailbox_ok(device, BELFRY_MB_CREATE_CONTEXT,
			  sizeof(belfry->mailbox.create_context));

	belfry->mailbox.create_queue = (struct belfry_mb_create_queue) {
		.id = BELFRY_QUEUE_ID,
		.context = BELFRY_CONTEXT_ID,
		.engine = belfry->engine,
		.priority = 0,
		.flags = 0,
		.ring_entries = BELFRY_RING_ENTRIES,
		.ring_va = belfry_self_va(belfry, belfry->ring),
		.ring_control_va = belfry_self_va(belfry, &belfry->control),
	};
	belfry_mailbox_ok(device, BELFRY_MB_CREATE_QUEUE,
			  sizeof(belfry->mailbox.create_queue));
}

static void belfry_init(struct vfio_pci_device *device)
{
	struct belfry_state *belfry = to_belfry_state(device);
	u32 vectors;

	VFIO_ASSERT_GE(device->driver.region.size, sizeof(*belfry));

	vfio_pci_config_writew(device, PCI_COMMAND,
			       PCI_COMMAND_MEMORY |
			       PCI_COMMAND_MASTER |
			       PCI_COMMAND_INTX_DISABLE);

	vectors = BELFRY_MSIX_INFO_VECTORS(readl(belfry_bar0(device) + BELFRY_MSIX_INFO));
	VFIO_ASSERT_GE(vectors, 2);
	vfio_pci_msix_enable(device, 0, vectors);

	belfry_setup(device);

	device->driver.msi = 1;
	device->driver.max_memcpy_size = BELFRY_MAX_MEMCPY_SIZE;
	device->driver.max_memcpy_count = BELFRY_MAX_MEMCPY_COUNT;
}

static void belfry_remove(struct vfio_pci_device *device)
{
	writel(BELFRY_CONTROL_RESET, belfry_bar0(device) + BELFRY_CONTROL);
	vfio_pci_msix_disable(device);
}

static void belfry_memcpy_start(struct vfio_pci_device *device,
				iova_t src, iova_t dst, u64 size, u64 count)
{
	struct belfry_state *belfry = to_belfry_state(device);
	void *bar0 = belfry_bar0(device);
	u32 index = belfry->write_index;
	u64 i;

	VFIO_ASSERT_LE(size, BELFRY_MAX_MEMCPY_SIZE);
	VFIO_ASSERT_GE(count, 1);
	VFIO_ASSERT_LE(count, BELFRY_MAX_MEMCPY_COUNT);

	belfry->copy = (struct belfry_packet_copy) {
		.header = BELFRY_PACKET_HEADER(BELFRY_PACKET_COPY,
					       sizeof(belfry->copy) / 4),
		.size = size,
		.src_va = belfry_map_window(belfry->pt_src, BELFRY_SRC_VA,
					    src, size, false),
		.dst_va = belfry_map_window(belfry->pt_dst, BELFRY_DST_VA,
					    dst, size, true),
	};
	belfry->signal = (struct belfry_packet_fence_signal) {
		.header = BELFRY_PACKET_HEADER(BELFRY_PACKET_FENCE_SIGNAL,
					       sizeof(belfry->signal) / 4),
		.log_entry = BELFRY_NO_LOG,
		.fence_va = belfry_self_va(belfry, &belfry->fence),
		.value = ++belfry->fence_target,
		.log_handle = 0,
	};

	/* Each copy its own command buffer, then the fence signal. */
	for (i = 0; i < count; i++, index++)
		belfry->ring[index % BELFRY_RING_ENTRIES] = (struct belfry_ring_entry) {
			.cmdbuf_va = belfry_self_va(belfry, &belfry->copy),
			.size_bytes = sizeof(belfry->copy),
		};
	belfry->ring[index % BELFRY_RING_ENTRIES] = (struct belfry_ring_entry) {
		.cmdbuf_va = belfry_self_va(belfry, &belfry->signal),
		.size_bytes = sizeof(belfry->signal),
	};
	belfry->write_index = ++index;

	writel(BELFRY_CAUSE_FAULT, bar0 + BELFRY_INT_CLEAR);
	__sync_synchronize();
	WRITE_ONCE(belfry->control.write_index, belfry->write_index);

	belfry->mailbox.object.id = BELFRY_QUEUE_ID;
	belfry->mailbox.object.reserved = 0;
	belfry_mailbox_ok(device, BELFRY_MB_KICK_QUEUE,
			  sizeof(belfry->mailbox.object));
}

static int belfry_memcpy_wait(struct vfio_pci_device *device)
{
	struct belfry_state *belfry = to_belfry_state(device);
	void *bar0 = belfry_bar0(device);

	for (;;) {
		if ((s64)(READ_ONCE(belfry->fence) - belfry->fence_target) >= 0)
			return 0;

		/* The queue faulted (an unmapped IOVA): it runs nothing more. */
		if (readl(bar0 + BELFRY_INT_RAWSTAT) & BELFRY_CAUSE_FAULT)
			break;
	}

	/* A fault stopped the copies: the signal may still have run first. */
	if ((s64)(READ_ONCE(belfry->fence) - belfry->fence_target) >= 0)
		return 0;

	dev_err(device, "belfry: the queue faulted during the memcpy\n");
	belfry_setup(device);
	return -1;
}

static void belfry_send_msi(struct vfio_pci_device *device)
{
	struct belfry_state *belfry = to_belfry_state(device);
	u32 cookie = 0x5eed0000u | belfry->seq;

	belfry->mailbox.self_test = (struct belfry_mb_self_test) {
		.vector = device->driver.msi,
		.cookie = cookie,
	};
	belfry_mailbox_ok(device, BELFRY_MB_SELF_TEST,
			  sizeof(belfry->mailbox.self_test));
	VFIO_ASSERT_EQ(READ_ONCE(belfry->mailbox.self_test.response),
		       ((cookie << 8) | (cookie >> 24)) ^ 0xbe11be11u);
}

const struct vfio_pci_driver_ops belfry_ops = {
	.name = "belfry",
	.probe = belfry_probe,
	.init = belfry_init,
	.remove = belfry_remove,
	.memcpy_start = belfry_memcpy_start,
	.memcpy_wait = belfry_memcpy_wait,
	.send_msi = belfry_send_msi,
};

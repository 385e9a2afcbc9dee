/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Belfry virtual GPU: the registers, mailbox commands, packets and page-table
 * format the vfio_pci_driver_test plugin uses. Values as the device's ABI
 * defines them (its PROTOCOL description); everything is little-endian.
 */
#ifndef SELFTESTS_VFIO_LIB_DRIVERS_BELFRY_REGISTERS_H
#define SELFTESTS_VFIO_LIB_DRIVERS_BELFRY_REGISTERS_H

#include <linux/types.h>

#define PCI_VENDOR_ID_BELFRY		0x1234
#define PCI_DEVICE_ID_BELFRY_GPU	0xbe11

/* BAR0: 32-bit registers. */
#define BELFRY_REGS_BAR			0
#define BELFRY_MAGIC			0x000
#define  BELFRY_MAGIC_VALUE		0x464c4542	/* "BELF" */
#define BELFRY_ENGINE_INFO		0x010
#define  BELFRY_ENGINE_INFO_COUNT(v)	((v) & 0xff)
#define  BELFRY_ENGINE_INFO_FENCE_WRITE(v) (((v) >> 16) & 0xff)
#define BELFRY_MSIX_INFO		0x014
#define  BELFRY_MSIX_INFO_VECTORS(v)	((v) & 0xffff)
#define BELFRY_CONTROL			0x020
#define  BELFRY_CONTROL_ENABLE		(1u << 0)
#define  BELFRY_CONTROL_RESET		(1u << 1)
#define BELFRY_STATUS			0x024
#define  BELFRY_STATUS_READY		(1u << 0)
#define BELFRY_INT_RAWSTAT		0x030
#define BELFRY_INT_CLEAR		0x034
#define BELFRY_INT_MASK			0x038
#define  BELFRY_CAUSE_MAILBOX		(1u << 0)
#define  BELFRY_CAUSE_FAULT		(1u << 4)
#define BELFRY_MB_ARG_LO		0x080
#define BELFRY_MB_ARG_HI		0x084
#define BELFRY_MB_SUBMIT		0x088
#define BELFRY_MB_STATUS		0x08c
#define  BELFRY_MB_STATUS_SEQ(v)	((v) & 0xffff)
#define  BELFRY_MB_STATUS_BUSY		(1u << 31)

/* Engines. */
#define BELFRY_ENGINE_COMPUTE		0
#define BELFRY_ENGINE_COPY		1

/* Mailbox: an argument block in memory, 8-byte aligned. */
#define BELFRY_MB_SELF_TEST		1
#define BELFRY_MB_CREATE_ADDRESS_SPACE	2
#define BELFRY_MB_CREATE_CONTEXT	4
#define BELFRY_MB_CREATE_QUEUE		6
#define BELFRY_MB_KICK_QUEUE		20

#define BELFRY_MB_PENDING		0
#define BELFRY_MB_OK			1

struct belfry_mb_header {
	u32 opcode;
	u32 length;	/* bytes, header included */
	u32 seq;	/* written by the device */
	u32 status;	/* written by the device, last */
};

struct belfry_mb_self_test {
	struct belfry_mb_header header;
	u32 vector;
	u32 cookie;
	u32 response;
	u32 reserved;
};

struct belfry_mb_object {
	struct belfry_mb_header header;
	u32 id;
	u32 reserved;
};

struct belfry_mb_create_address_space {
	struct belfry_mb_header header;
	u32 id;
	u32 reserved;
	u64 root_pa;
};

struct belfry_mb_create_context {
	struct belfry_mb_header header;
	u32 id;
	u32 address_space;
};

struct belfry_mb_create_queue {
	struct belfry_mb_header header;
	u32 id;
	u32 context;
	u32 engine;
	u32 priority;
	u32 flags;	/* 0: a kernel-mode queue, told of work by KICK_QUEUE */
	u32 ring_entries;
	u64 ring_va;
	u64 ring_control_va;
};

/* Hardware-queue ring: entries in the queue's GPU address space. */
struct belfry_ring_entry {
	u64 cmdbuf_va;
	u32 size_bytes;
	u32 flags;
};

struct belfry_ring_control {
	u32 write_index;	/* written by the driver */
	u32 reserved0[15];
	u32 read_index;		/* written by the device */
	u32 reserved1[15];
};

/* Packets: a header dword (opcode 7:0, length in dwords 31:16). */
#define BELFRY_PACKET_HEADER(op, dwords) ((u32)(op) | (u32)(dwords) << 16)
#define BELFRY_PACKET_FENCE_SIGNAL	0x10
#define BELFRY_PACKET_COPY		0x20
#define BELFRY_NO_LOG			0xffffffffu
#define BELFRY_TRANSFER_MAX_BYTES	(16u << 20)

struct belfry_packet_copy {
	u32 header;
	u32 size;
	u64 src_va;
	u64 dst_va;
};

struct belfry_packet_fence_signal {
	u32 header;
	u32 log_entry;
	u64 fence_va;
	u64 value;
	u64 log_handle;
};

/* GPU MMU: four levels of 512 entries, 4 KiB pages, 48-bit VA. */
#define BELFRY_PAGE_SIZE		4096ul
#define BELFRY_PTE_PRESENT		(1ull << 0)
#define BELFRY_PTE_WRITABLE		(1ull << 1)
#define BELFRY_PTE_ADDR_MASK		0x000ffffffffff000ull
#define BELFRY_PT_ENTRIES		512

#endif /* SELFTESTS_VFIO_LIB_DRIVERS_BELFRY_REGISTERS_H */

//! The VFIO selftests' Belfry driver plugin carries its own copy of the definitions it shares
//! with the device (`qemu-integration/selftests/belfry/registers.h`, kernel style, no Belfry
//! headers): every value and layout there is checked against the abi crate.

use std::collections::HashMap;
use std::mem::{offset_of, size_of};

use belfry_abi::mailbox::{self, Opcode, Status};
use belfry_abi::packet::{self, Opcode as PacketOpcode};
use belfry_abi::{engine, irq, mmu, pci, regs, ring};

const HEADER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../qemu-integration/selftests/belfry/registers.h");

/// `#define NAME VALUE` lines whose value is one number: decimal or hex, maybe `u`/`l`
/// suffixed, or `(A << B)` of two such.
fn defines(text: &str) -> HashMap<String, u64> {
    let number = |s: &str| -> Option<u64> {
        let s = s.trim_end_matches(['u', 'l', 'U', 'L']);
        match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        }
    };
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("#define") else { continue };
        let rest = rest.split("/*").next().unwrap_or_default();
        let mut words = rest.split_whitespace();
        let Some(name) = words.next().filter(|n| !n.contains('(')) else { continue };
        let value: String = words.collect();
        let value = value.strip_prefix('(').and_then(|v| v.strip_suffix(')')).unwrap_or(&value);
        let parsed = match value.split_once("<<") {
            Some((base, shift)) => number(base).zip(number(shift)).map(|(b, s)| b << s),
            None => number(value),
        };
        if let Some(v) = parsed {
            out.insert(name.to_string(), v);
        }
    }
    out
}

#[test]
fn the_plugins_definitions_are_the_abis() {
    let text = std::fs::read_to_string(HEADER).expect("the plugin's registers.h");
    let d = defines(&text);
    let expect = |name: &str, value: u64| {
        assert_eq!(d.get(name).copied(), Some(value), "{name} in registers.h");
    };
    expect("PCI_VENDOR_ID_BELFRY", pci::VENDOR_ID.into());
    expect("PCI_DEVICE_ID_BELFRY_GPU", pci::DEVICE_ID.into());
    expect("BELFRY_REGS_BAR", pci::REGS_BAR.into());
    expect("BELFRY_MAGIC", regs::MAGIC::OFFSET.into());
    expect("BELFRY_MAGIC_VALUE", regs::MAGIC_VALUE.into());
    expect("BELFRY_ENGINE_INFO", regs::ENGINE_INFO::OFFSET.into());
    expect("BELFRY_MSIX_INFO", regs::MSIX_INFO::OFFSET.into());
    expect("BELFRY_CONTROL", regs::CONTROL::OFFSET.into());
    expect("BELFRY_CONTROL_ENABLE", regs::CONTROL::default().with_enable(true).0.into());
    expect("BELFRY_CONTROL_RESET", regs::CONTROL::default().with_reset(true).0.into());
    expect("BELFRY_STATUS", regs::STATUS::OFFSET.into());
    expect("BELFRY_STATUS_READY", regs::STATUS::default().with_ready(true).0.into());
    expect("BELFRY_INT_RAWSTAT", regs::INT_RAWSTAT::OFFSET.into());
    expect("BELFRY_INT_CLEAR", regs::INT_CLEAR::OFFSET.into());
    expect("BELFRY_INT_MASK", regs::INT_MASK::OFFSET.into());
    expect("BELFRY_CAUSE_MAILBOX", irq::cause::MAILBOX.into());
    expect("BELFRY_CAUSE_FAULT", irq::cause::FAULT.into());
    expect("BELFRY_MB_ARG_LO", regs::MB_ARG_LO::OFFSET.into());
    expect("BELFRY_MB_ARG_HI", regs::MB_ARG_HI::OFFSET.into());
    expect("BELFRY_MB_SUBMIT", regs::MB_SUBMIT::OFFSET.into());
    expect("BELFRY_MB_STATUS", regs::MB_STATUS::OFFSET.into());
    expect("BELFRY_MB_STATUS_BUSY", regs::MB_STATUS::default().with_busy(true).0.into());
    expect("BELFRY_ENGINE_COMPUTE", engine::ENGINE_COMPUTE.into());
    expect("BELFRY_ENGINE_COPY", engine::ENGINE_COPY.into());
    expect("BELFRY_MB_SELF_TEST", Opcode::SelfTest as u64);
    expect("BELFRY_MB_CREATE_ADDRESS_SPACE", Opcode::CreateAddressSpace as u64);
    expect("BELFRY_MB_CREATE_CONTEXT", Opcode::CreateContext as u64);
    expect("BELFRY_MB_CREATE_QUEUE", Opcode::CreateQueue as u64);
    expect("BELFRY_MB_KICK_QUEUE", Opcode::KickQueue as u64);
    expect("BELFRY_MB_PENDING", Status::Pending as u64);
    expect("BELFRY_MB_OK", Status::Ok as u64);
    expect("BELFRY_PACKET_FENCE_SIGNAL", PacketOpcode::FenceSignal as u64);
    expect("BELFRY_PACKET_COPY", PacketOpcode::Copy as u64);
    expect("BELFRY_NO_LOG", packet::NO_LOG.into());
    expect("BELFRY_TRANSFER_MAX_BYTES", packet::TRANSFER_MAX_BYTES.into());
    expect("BELFRY_PAGE_SIZE", mmu::PAGE_SIZE);
    expect("BELFRY_PTE_PRESENT", mmu::PTE_PRESENT);
    expect("BELFRY_PTE_WRITABLE", mmu::PTE_WRITABLE);
    expect("BELFRY_PTE_ADDR_MASK", mmu::PTE_ADDR_MASK);
    expect("BELFRY_PT_ENTRIES", mmu::ENTRIES_PER_TABLE);
}

/// The plugin's structs, field by field in the order registers.h declares them, have the
/// abi's offsets and sizes (the C layout of u32/u64 fields in declaration order).
#[test]
fn the_plugins_layouts_are_the_abis() {
    assert_eq!(size_of::<mailbox::MailboxHeader>(), 16);
    assert_eq!([offset_of!(mailbox::SelfTestArgs, vector), offset_of!(mailbox::SelfTestArgs, response)], [16, 24]);
    assert_eq!(size_of::<mailbox::SelfTestArgs>(), 32);
    assert_eq!(size_of::<mailbox::ObjectArgs>(), 24);
    assert_eq!(offset_of!(mailbox::CreateAddressSpaceArgs, root_pa), 24);
    assert_eq!(
        [offset_of!(mailbox::CreateContextArgs, id), offset_of!(mailbox::CreateContextArgs, address_space)],
        [16, 20]
    );
    assert_eq!(
        [
            offset_of!(mailbox::CreateQueueArgs, id),
            offset_of!(mailbox::CreateQueueArgs, context),
            offset_of!(mailbox::CreateQueueArgs, engine),
            offset_of!(mailbox::CreateQueueArgs, priority),
            offset_of!(mailbox::CreateQueueArgs, flags),
            offset_of!(mailbox::CreateQueueArgs, ring_entries),
            offset_of!(mailbox::CreateQueueArgs, ring_va),
            offset_of!(mailbox::CreateQueueArgs, ring_control_va),
        ],
        [16, 20, 24, 28, 32, 36, 40, 48]
    );
    assert_eq!(size_of::<mailbox::CreateQueueArgs>(), 56);
    assert_eq!(size_of::<ring::RingEntry>(), 16);
    assert_eq!(
        [offset_of!(ring::RingControl, write_index) as u64, offset_of!(ring::RingControl, read_index) as u64],
        [ring::WRITE_INDEX_OFFSET, ring::READ_INDEX_OFFSET]
    );
    assert_eq!(
        [offset_of!(packet::Copy, size), offset_of!(packet::Copy, src_va), offset_of!(packet::Copy, dst_va)],
        [4, 8, 16]
    );
    assert_eq!(size_of::<packet::Copy>(), 24);
    assert_eq!(
        [
            offset_of!(packet::FenceSignal, log_entry),
            offset_of!(packet::FenceSignal, fence_va),
            offset_of!(packet::FenceSignal, value),
            offset_of!(packet::FenceSignal, log_handle)
        ],
        [4, 8, 16, 24]
    );
    assert_eq!(packet::header(PacketOpcode::Copy, 6), PacketOpcode::Copy as u32 | 6 << 16);
    assert_eq!(mailbox::self_test_response(0x5eed_0001), 0x5eed_0001u32.rotate_left(8) ^ 0xbe11_be11);
}

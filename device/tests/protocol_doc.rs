//! docs/PROTOCOL.md is checked against the abi crate: the tables between the `generated`
//! markers are produced here from the register map, interrupt causes, mailbox opcodes, fault
//! reasons and PCI constants. A mismatch fails with the expected text; `BELFRY_BLESS=1` rewrites the file.

use std::fmt::Write;

use belfry_abi::engine::FaultReason;
use belfry_abi::mailbox::{Opcode, Status};
use belfry_abi::packet::Opcode as PacketOpcode;
use belfry_abi::regs::{Access, REGISTER_MAP};
use belfry_abi::{irq, pci};

const BEGIN: &str = "<!-- generated from device/abi by device/tests/protocol_doc.rs: begin -->";
const END: &str = "<!-- generated: end -->";

fn generated() -> String {
    let mut s = String::new();
    writeln!(s, "### PCI identity and BARs\n").unwrap();
    writeln!(s, "| item | value |\n|---|---|").unwrap();
    writeln!(s, "| vendor:device | `{:04x}:{:04x}` |", pci::VENDOR_ID, pci::DEVICE_ID).unwrap();
    writeln!(s, "| class | `{:06x}` (3D controller) |", pci::CLASS_CODE).unwrap();
    writeln!(s, "| revision | `{:02x}` |", pci::REVISION_ID).unwrap();
    writeln!(
        s,
        "| BAR{} registers | {} KiB, 32-bit, MSI-X table at `{:#x}`, PBA at `{:#x}` |",
        pci::REGS_BAR,
        pci::REGS_BAR_SIZE >> 10,
        pci::MSIX_TABLE_OFFSET,
        pci::MSIX_PBA_OFFSET
    )
    .unwrap();
    writeln!(
        s,
        "| BAR{} doorbells | one {}-byte page per doorbell, rounded up to a power of two |",
        pci::DOORBELL_BAR,
        pci::DOORBELL_PAGE_SIZE
    )
    .unwrap();
    writeln!(
        s,
        "| BAR{} VRAM | 64-bit prefetchable, {} MiB to {} GiB |",
        pci::VRAM_BAR,
        pci::VRAM_MIN_SIZE >> 20,
        pci::VRAM_MAX_SIZE >> 30
    )
    .unwrap();
    writeln!(
        s,
        "| capabilities | PM at `{:#x}`, MSI-X at `{:#x}`, PCI Express at `{:#x}` |\n",
        pci::CAP_PM_OFFSET,
        pci::CAP_MSIX_OFFSET,
        pci::CAP_PCIE_OFFSET
    )
    .unwrap();

    writeln!(s, "### BAR0 registers\n").unwrap();
    writeln!(s, "| offset | name | access | fields | description |\n|---|---|---|---|---|").unwrap();
    for r in REGISTER_MAP {
        let access = match r.access {
            Access::ReadOnly => "RO",
            Access::ReadWrite => "RW",
            Access::WriteOnly => "WO",
            Access::WriteOneToClear => "W1C",
        };
        let fields: Vec<String> = r.fields.iter().map(|f| format!("{}:{} `{}`", f.hi, f.lo, f.name)).collect();
        let doc = r.doc.lines().map(str::trim).collect::<Vec<_>>().join(" ").replace('|', "\\|");
        writeln!(s, "| `{:#05x}` | `{}` | {} | {} | {} |", r.offset, r.name, access, fields.join(", "), doc).unwrap();
    }

    writeln!(s, "\n### Interrupt causes and vectors\n").unwrap();
    writeln!(s, "| cause bit | name | default vector |\n|---|---|---|").unwrap();
    for (bit, name) in [
        (irq::cause::MAILBOX, "MAILBOX"),
        (irq::cause::NATIVE_FENCE, "NATIVE_FENCE"),
        (irq::cause::MONITORED_FENCE, "MONITORED_FENCE"),
        (irq::cause::ENGINE_STATE, "ENGINE_STATE"),
        (irq::cause::FAULT, "FAULT"),
    ] {
        writeln!(s, "| `{bit:#04x}` | {name} | {} |", irq::vector_for(bit, irq::VECTOR_COUNT)).unwrap();
    }

    writeln!(s, "\n### Mailbox opcodes and statuses\n").unwrap();
    writeln!(s, "| opcode | name | block bytes |\n|---|---|---|").unwrap();
    for raw in 0..256u32 {
        if let Ok(op) = Opcode::try_from(raw) {
            writeln!(s, "| {raw} | `{}` | {} |", op.name(), op.block_len()).unwrap();
        }
    }
    writeln!(s, "\n### Packets\n").unwrap();
    writeln!(s, "| opcode | name | dwords |\n|---|---|---|").unwrap();
    for raw in 0..256u32 {
        if let Ok(op) = PacketOpcode::try_from(raw) {
            let dwords = op.dwords().map_or("any ≥ 1".to_string(), |d| d.to_string());
            writeln!(s, "| `{raw:#04x}` | `{}` | {dwords} |", op.name()).unwrap();
        }
    }
    writeln!(s, "\n### Layouts\n").unwrap();
    writeln!(s, "| layout | bytes |\n|---|---|").unwrap();
    for (name, size) in [
        ("ring entry", std::mem::size_of::<belfry_abi::ring::RingEntry>()),
        ("ring control", std::mem::size_of::<belfry_abi::ring::RingControl>()),
        ("fence log header", std::mem::size_of::<belfry_abi::fence::LogHeader>()),
        ("fence log entry", std::mem::size_of::<belfry_abi::fence::LogEntry>()),
        ("interrupt ring header", std::mem::size_of::<belfry_abi::irq::InterruptRingHeader>()),
        ("interrupt record", std::mem::size_of::<belfry_abi::irq::InterruptRecord>()),
    ] {
        writeln!(s, "| {name} | {size} |").unwrap();
    }
    writeln!(s, "| fence log entries per 4 KiB buffer | {} |", belfry_abi::fence::LOG_ENTRIES).unwrap();
    writeln!(s, "| peer-signal slot | {} |", belfry_abi::peer::SLOT_BYTES).unwrap();
    writeln!(s, "| peer-signal slots per 4 KiB page | {} |", belfry_abi::peer::SLOTS).unwrap();
    writeln!(s, "\n| status | name |\n|---|---|").unwrap();
    for raw in 0..256u32 {
        if let Ok(st) = Status::try_from(raw) {
            writeln!(s, "| {raw} | `{}` |", st.name()).unwrap();
        }
    }
    writeln!(s, "\n### Context fault reasons\n").unwrap();
    writeln!(s, "| reason | name |\n|---|---|").unwrap();
    for &reason in FaultReason::ALL {
        writeln!(s, "| {} | `{}` |", reason as u32, reason.name()).unwrap();
    }
    s
}

#[test]
fn protocol_doc_matches_the_abi() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md");
    let doc = std::fs::read_to_string(path).expect("docs/PROTOCOL.md exists");
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/PROTOCOL.md lacks the generated markers");
    };
    let current = &doc[b + BEGIN.len()..e];
    let expected = format!("\n{}", generated());
    if current != expected {
        if std::env::var_os("BELFRY_BLESS").is_some() {
            let new = format!("{}{}{}{}", &doc[..b], BEGIN, expected, &doc[e..]);
            std::fs::write(path, new).unwrap();
            return;
        }
        panic!("docs/PROTOCOL.md is out of date with device/abi; run BELFRY_BLESS=1 cargo test -p belfry-device --test protocol_doc\nexpected:\n{expected}");
    }
}

//! Decoding with the abi's own types: mailbox argument blocks (from `mailbox_block` records),
//! packet opcodes, interrupt causes and interrupt-record kinds.

use belfry_abi::engine::{engine_name, ENGINE_COUNT};
use belfry_abi::fence::{FenceKind, LogKind};
use belfry_abi::irq::{self, RecordKind};
use belfry_abi::mailbox::{self, MailboxHeader, Opcode, Status};
use belfry_abi::packet;

/// The structs of mailbox argument blocks: `repr(C)` structs of plain integers, every bit
/// pattern valid.
trait Plain: Copy + Default {}

/// Marks every struct of the abi's one list of argument-block structs (`for_each_mailbox_block!`).
macro_rules! plain_blocks {
    ($($name:ident),*) => {
        $(impl Plain for mailbox::$name {})*
    };
}
belfry_abi::for_each_mailbox_block!(plain_blocks);

/// The `T` at the start of `bytes`, if they are long enough.
fn read<T: Plain>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < size_of::<T>() {
        return None;
    }
    // SAFETY: `bytes` holds at least size_of::<T>() readable bytes (checked above), the read is
    // unaligned, and `T: Plain` is a repr(C) struct of integers for which any bytes are valid.
    Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Bytes of a lowercase (or uppercase) hex string; `None` if it is not hex.
pub fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

/// A decoded mailbox argument block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The command, if the opcode is known.
    pub opcode: Option<Opcode>,
    /// The status in the block's header (after the command ran).
    pub status: Option<Status>,
    /// What it means to the model: objects and bindings it creates or names.
    pub effect: Effect,
    /// Its fields, `name=value`, in the struct's order (header excluded).
    pub fields: Vec<(&'static str, String)>,
}

/// What a command block says about the device's objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Effect {
    /// Nothing the model tracks.
    #[default]
    None,
    /// `CREATE_QUEUE`.
    CreateQueue {
        /// Queue id.
        queue: u32,
        /// Context.
        context: u32,
        /// Engine.
        engine: u32,
        /// Priority.
        priority: u32,
        /// User-mode submission (doorbell) queue.
        user_mode: bool,
    },
    /// `DESTROY_QUEUE`.
    DestroyQueue(u32),
    /// `CONNECT_DOORBELL`.
    Connect {
        /// Queue.
        queue: u32,
        /// Physical doorbell.
        doorbell: u32,
    },
    /// `DISCONNECT_DOORBELL`.
    Disconnect {
        /// Queue.
        queue: u32,
        /// Physical doorbell.
        doorbell: u32,
    },
    /// `KICK_QUEUE`: kernel-mode submission.
    Kick(u32),
    /// `SUSPEND_CONTEXT` / `RESUME_CONTEXT`.
    Suspend {
        /// Context.
        context: u32,
        /// Suspended (true) or resumed.
        suspended: bool,
    },
    /// `UPDATE_MONITORED_VALUES` / `UPDATE_CURRENT_VALUES`: (handle, value) pairs.
    FenceValues {
        /// MonitoredValue (true) or CurrentValue updates.
        monitored: bool,
        /// Entries.
        values: Vec<(u64, u64)>,
    },
    /// `REGISTER_FENCE`.
    RegisterFence(u64),
}

impl Block {
    /// Queues the block names.
    pub fn queue(&self) -> Option<u32> {
        match self.effect {
            Effect::CreateQueue { queue, .. }
            | Effect::DestroyQueue(queue)
            | Effect::Connect { queue, .. }
            | Effect::Disconnect { queue, .. }
            | Effect::Kick(queue) => Some(queue),
            _ => None,
        }
    }

    /// Fence handles the block names.
    pub fn fences(&self) -> Vec<u64> {
        match &self.effect {
            Effect::FenceValues { values, .. } => values.iter().map(|v| v.0).collect(),
            Effect::RegisterFence(h) => vec![*h],
            _ => Vec::new(),
        }
    }
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// Decodes an argument block (the `bytes` of a `mailbox_block` record).
pub fn mailbox_block(bytes: &[u8]) -> Option<Block> {
    let header: MailboxHeader = read(bytes)?;
    let opcode = Opcode::try_from(header.opcode).ok();
    let status = Status::try_from(header.status).ok();
    let mut effect = Effect::None;
    let mut fields: Vec<(&'static str, String)>;
    match opcode {
        Some(Opcode::SelfTest) => {
            let a: mailbox::SelfTestArgs = read(bytes)?;
            fields = vec![
                ("vector", a.vector.to_string()),
                ("cookie", hex(a.cookie.into())),
                ("response", hex(a.response.into())),
            ];
        }
        Some(Opcode::CreateAddressSpace) => {
            let a: mailbox::CreateAddressSpaceArgs = read(bytes)?;
            fields = vec![("id", a.id.to_string()), ("root_pa", hex(a.root_pa))];
        }
        Some(Opcode::CreateContext) => {
            let a: mailbox::CreateContextArgs = read(bytes)?;
            fields = vec![("id", a.id.to_string()), ("address_space", a.address_space.to_string())];
        }
        Some(Opcode::CreateQueue) => {
            let a: mailbox::CreateQueueArgs = read(bytes)?;
            let user_mode = a.flags & mailbox::QUEUE_FLAG_USER_MODE_SUBMISSION != 0;
            fields = vec![
                ("id", a.id.to_string()),
                ("context", a.context.to_string()),
                ("engine", engine_label(a.engine)),
                ("priority", a.priority.to_string()),
                ("submission", if user_mode { "user-mode".into() } else { "kernel-mode".into() }),
                ("ring_entries", a.ring_entries.to_string()),
                ("ring_va", hex(a.ring_va)),
                ("ring_control_va", hex(a.ring_control_va)),
            ];
            effect = Effect::CreateQueue {
                queue: a.id,
                context: a.context,
                engine: a.engine,
                priority: a.priority,
                user_mode,
            };
        }
        Some(
            op @ (Opcode::DestroyAddressSpace
            | Opcode::DestroyContext
            | Opcode::DestroyQueue
            | Opcode::SuspendContext
            | Opcode::ResumeContext
            | Opcode::FlushLogs
            | Opcode::KickQueue),
        ) => {
            let a: mailbox::ObjectArgs = read(bytes)?;
            fields = vec![("id", a.id.to_string())];
            effect = match op {
                Opcode::DestroyQueue => Effect::DestroyQueue(a.id),
                Opcode::KickQueue => Effect::Kick(a.id),
                Opcode::SuspendContext => Effect::Suspend { context: a.id, suspended: true },
                Opcode::ResumeContext => Effect::Suspend { context: a.id, suspended: false },
                _ => Effect::None,
            };
        }
        Some(Opcode::RegisterFence) => {
            let a: mailbox::RegisterFenceArgs = read(bytes)?;
            let kind = match FenceKind::try_from(a.kind) {
                Ok(k) => format!("{k:?}"),
                Err(e) => format!("?{}", e.raw),
            };
            fields = vec![
                ("handle", hex(a.handle)),
                ("kind", kind),
                ("current", location(a.current_value)),
                ("monitored", location(a.monitored_value)),
            ];
            if a.flags & mailbox::REGISTER_CROSS_ADAPTER != 0 {
                fields.push(("cross_adapter", "yes".into()));
            }
            effect = Effect::RegisterFence(a.handle);
        }
        Some(Opcode::SetPeerSignals) => {
            let a: mailbox::PeerSignalsArgs = read(bytes)?;
            fields = vec![("own_page", hex(a.own_page))];
            let count = (a.peer_count as usize).min(mailbox::MAX_PEER_PAGES);
            fields.extend(a.peers[..count].iter().map(|&p| ("peer_page", hex(p))));
        }
        Some(Opcode::UnregisterFence | Opcode::NotifyFenceChanged) => {
            let a: mailbox::FenceHandleArgs = read(bytes)?;
            fields = vec![("handle", hex(a.handle))];
        }
        Some(op @ (Opcode::UpdateMonitoredValues | Opcode::UpdateCurrentValues)) => {
            let a: mailbox::FenceValuesArgs = read(bytes)?;
            let entries = &bytes[size_of::<mailbox::FenceValuesArgs>()..];
            let values: Vec<(u64, u64)> = entries
                .chunks_exact(size_of::<mailbox::FenceValue>())
                .take(a.count as usize)
                .filter_map(read::<mailbox::FenceValue>)
                .map(|v| (v.handle, v.value))
                .collect();
            fields = vec![("count", a.count.to_string())];
            fields.extend(values.iter().map(|(h, v)| ("fence", format!("{h:#x}={v}"))));
            effect = Effect::FenceValues { monitored: op == Opcode::UpdateMonitoredValues, values };
        }
        Some(op @ (Opcode::ConnectDoorbell | Opcode::DisconnectDoorbell)) => {
            let a: mailbox::DoorbellArgs = read(bytes)?;
            fields = vec![("queue", a.queue.to_string()), ("doorbell", a.doorbell.to_string())];
            effect = if op == Opcode::ConnectDoorbell {
                Effect::Connect { queue: a.queue, doorbell: a.doorbell }
            } else {
                Effect::Disconnect { queue: a.queue, doorbell: a.doorbell }
            };
        }
        Some(Opcode::SetLogBuffer) => {
            let a: mailbox::SetLogBufferArgs = read(bytes)?;
            let kind = match LogKind::try_from(a.kind) {
                Ok(k) => format!("{k:?}"),
                Err(e) => format!("?{}", e.raw),
            };
            fields = vec![("queue", a.queue.to_string()), ("kind", kind), ("va", hex(a.va))];
        }
        Some(op @ (Opcode::SetEnginePower | Opcode::SetDevicePower)) => {
            let a: mailbox::PowerArgs = read(bytes)?;
            // 0 = F0/D0, 3 = F1/D3hot.
            let state = match (op, a.state) {
                (Opcode::SetEnginePower, 0) => "F0".to_string(),
                (Opcode::SetEnginePower, 3) => "F1".to_string(),
                (_, 0) => "D0".to_string(),
                (_, 3) => "D3hot".to_string(),
                (_, other) => format!("?{other}"),
            };
            fields = if op == Opcode::SetEnginePower {
                vec![("engine", engine_label(a.target)), ("state", state)]
            } else {
                vec![("state", state)]
            };
        }
        Some(Opcode::SetInterruptRing) => {
            let a: mailbox::SetInterruptRingArgs = read(bytes)?;
            fields = vec![("base_pa", hex(a.base_pa)), ("entries", a.entries.to_string())];
        }
        Some(Opcode::QueryQueue) => {
            let a: mailbox::QueryQueueArgs = read(bytes)?;
            fields = vec![
                ("id", a.id.to_string()),
                ("state", a.state.to_string()),
                ("read_index", a.read_index.to_string()),
                ("fault_reason", a.fault_reason.to_string()),
                ("fault_address", hex(a.fault_address)),
                ("doorbell", if a.doorbell == irq::NONE { "none".into() } else { a.doorbell.to_string() }),
            ];
        }
        Some(Opcode::ResetEngine) => {
            let a: mailbox::ResetEngineArgs = read(bytes)?;
            let id = |v: u32| if v == irq::NONE { "none".into() } else { v.to_string() };
            fields = vec![
                ("engine", engine_label(a.engine)),
                ("min_busy_ms", a.min_busy_ms.to_string()),
                ("guilty_queue", id(a.guilty_queue)),
                ("guilty_context", id(a.guilty_context)),
            ];
        }
        Some(Opcode::QueryLostSignals) => {
            let a: mailbox::LostSignalsArgs = read(bytes)?;
            fields = vec![
                ("context", a.context.to_string()),
                ("capacity", a.capacity.to_string()),
                ("count", a.count.to_string()),
                ("total", a.total.to_string()),
            ];
        }
        Some(Opcode::MoveMonitoredValue) => {
            let a: mailbox::MoveMonitoredArgs = read(bytes)?;
            fields = vec![("handle", hex(a.handle)), ("monitored", location(a.monitored_value))];
        }
        Some(Opcode::MoveFenceStorage) => {
            let a: mailbox::MoveFenceStorageArgs = read(bytes)?;
            fields = vec![
                ("handle", hex(a.handle)),
                ("current", location(a.current_value)),
                ("monitored", location(a.monitored_value)),
            ];
        }
        None => fields = vec![("opcode", header.opcode.to_string()), ("length", header.length.to_string())],
    }
    Some(Block { opcode, status, effect, fields })
}

fn location(l: mailbox::FenceLocation) -> String {
    match l.space {
        mailbox::LOCATION_SYSTEM_VA => format!("va:{:#x}", l.address),
        mailbox::LOCATION_VRAM => format!("vram:{:#x}", l.address),
        other => format!("?{other}:{:#x}", l.address),
    }
}

/// `0 (compute)` for engine 0, and so on.
pub fn engine_label(engine: u32) -> String {
    if engine < ENGINE_COUNT {
        format!("{engine} ({})", engine_name(engine))
    } else {
        engine.to_string()
    }
}

/// The packet opcode of a trace's opcode name.
pub fn packet_opcode(name: &str) -> Option<packet::Opcode> {
    packet::Opcode::ALL.iter().copied().find(|op| op.name() == name)
}

/// The operands of packet `opcode` from its recorded `bytes` (hex), decoded with the abi's
/// packet structs (`from_le_bytes` over `for_each_packet!`): `name=value` with addresses and
/// handles in hex, the header and reserved fields left out; empty without (enough) bytes.
pub fn packet_fields(opcode: &str, bytes: &str) -> Vec<String> {
    let (Some(op), Some(raw)) = (packet_opcode(opcode), hex_bytes(bytes)) else { return Vec::new() };
    macro_rules! debug_of {
        ($($name:ident),*) => {
            match op {
                $(packet::Opcode::$name => packet::$name::from_le_bytes(&raw).map(|p| format!("{p:?}")),)*
                packet::Opcode::Nop => None,
            }
        };
    }
    let Some(text) = belfry_abi::for_each_packet!(debug_of) else { return Vec::new() };
    let inner = text.split_once('{').and_then(|(_, rest)| rest.rsplit_once('}')).map_or("", |(body, _)| body);
    inner
        .split(',')
        .filter_map(|field| {
            let (name, value) = field.split_once(':')?;
            let (name, value) = (name.trim(), value.trim());
            if name == "header" || name == "reserved" {
                return None;
            }
            let number: u64 = value.parse().ok()?;
            let shown = if name == "log_entry" && number == u64::from(packet::NO_LOG) {
                "none".to_string()
            } else if name.ends_with("va") || name.ends_with("handle") {
                format!("{number:#x}")
            } else {
                number.to_string()
            };
            Some(format!("{name}={shown}"))
        })
        .collect()
}

/// Whether the packet named `name` signals a fence or the CPU (ends a submission's useful work).
pub fn packet_signals(name: &str) -> bool {
    matches!(
        packet_opcode(name),
        Some(packet::Opcode::FenceSignal | packet::Opcode::MonitoredFenceSignal | packet::Opcode::Notify)
    )
}

/// Names of the cause bits in `cause` (`MAILBOX|NATIVE_FENCE`).
pub fn cause_names(cause: u32) -> String {
    const NAMES: [(u32, &str); 5] = [
        (irq::cause::MAILBOX, "MAILBOX"),
        (irq::cause::NATIVE_FENCE, "NATIVE_FENCE"),
        (irq::cause::MONITORED_FENCE, "MONITORED_FENCE"),
        (irq::cause::ENGINE_STATE, "ENGINE_STATE"),
        (irq::cause::FAULT, "FAULT"),
    ];
    let mut parts: Vec<String> = NAMES.iter().filter(|(bit, _)| cause & bit != 0).map(|(_, n)| n.to_string()).collect();
    let unknown = cause & !irq::cause::ALL;
    if unknown != 0 {
        parts.push(format!("{unknown:#x}"));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join("|")
    }
}

/// Name of an interrupt-record kind.
pub fn record_kind(kind: u32) -> String {
    match RecordKind::try_from(kind) {
        Ok(k) => format!("{k:?}"),
        Err(_) => format!("kind {kind}"),
    }
}

/// The queues a queue-array record names (`irq::queue_array`), comma-separated; `None` for
/// any other record.
pub fn queue_array(record: &irq::InterruptRecord) -> Option<String> {
    let (words, n) = irq::queue_array(record)?;
    Some(words.iter().take(n).map(u32::to_string).collect::<Vec<_>>().join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn connect_doorbell_blocks_decode_to_their_binding() {
        let b = bytes_of(&[Opcode::ConnectDoorbell as u32, 24, 9, Status::Ok as u32, 5, 2]);
        let block = mailbox_block(&b).unwrap();
        assert_eq!(block.opcode, Some(Opcode::ConnectDoorbell));
        assert_eq!(block.status, Some(Status::Ok));
        assert_eq!(block.effect, Effect::Connect { queue: 5, doorbell: 2 });
        assert_eq!(block.queue(), Some(5));
    }

    #[test]
    fn create_queue_and_fence_batches_decode() {
        let mut w = vec![Opcode::CreateQueue as u32, 56, 1, 1, 7, 3, 1, 2, 1, 64];
        w.extend([0x1000, 0, 0x2000, 0]);
        let block = mailbox_block(&bytes_of(&w)).unwrap();
        assert_eq!(block.effect, Effect::CreateQueue { queue: 7, context: 3, engine: 1, priority: 2, user_mode: true });
        assert!(block.fields.contains(&("ring_va", "0x1000".into())));
        let w = [Opcode::UpdateMonitoredValues as u32, 56, 2, 1, 2, 0, 0xaa, 0, 5, 0, 0xbb, 0, 6, 0];
        let block = mailbox_block(&bytes_of(&w)).unwrap();
        assert_eq!(block.effect, Effect::FenceValues { monitored: true, values: vec![(0xaa, 5), (0xbb, 6)] });
        assert_eq!(block.fences(), vec![0xaa, 0xbb]);
        let block = mailbox_block(&bytes_of(&[Opcode::SetEnginePower as u32, 24, 3, 1, 1, 3])).unwrap();
        assert_eq!(block.fields, vec![("engine", "1 (copy)".to_string()), ("state", "F1".to_string())]);
    }

    #[test]
    fn short_or_non_hex_blocks_are_refused() {
        assert_eq!(mailbox_block(&bytes_of(&[Opcode::CreateQueue as u32, 56, 1, 1, 7])), None);
        assert_eq!(hex_bytes("0a1"), None);
        assert_eq!(hex_bytes("zz"), None);
        assert_eq!(hex_bytes("0aff"), Some(vec![0x0a, 0xff]));
    }

    #[test]
    fn names_come_from_the_abi() {
        assert_eq!(cause_names(irq::cause::MAILBOX | irq::cause::FAULT), "MAILBOX|FAULT");
        assert_eq!(cause_names(1 << 20), "0x100000");
        assert_eq!(record_kind(RecordKind::ContextFault as u32), "ContextFault");
        let array = irq::queue_array_record(0, &[7, 2]).unwrap();
        assert_eq!(queue_array(&array).as_deref(), Some("7,2"));
        let per_queue = irq::InterruptRecord { kind: 1, queue: 7, detail: irq::DETAIL_PER_QUEUE, ..Default::default() };
        assert_eq!(queue_array(&per_queue), None);
        assert_eq!(packet_opcode("FENCE_SIGNAL"), Some(packet::Opcode::FenceSignal));
        assert!(packet_signals("NOTIFY") && !packet_signals("COPY"));
    }

    #[test]
    fn packet_operands_decode_from_their_bytes() {
        let words = [packet::header(packet::Opcode::FenceSignal, 8), u32::MAX, 0x1000, 1, 7, 0, 0x77, 0];
        let hex: String = bytes_of(&words).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            packet_fields("FENCE_SIGNAL", &hex),
            ["log_entry=none", "fence_va=0x100001000", "value=7", "log_handle=0x77"]
        );
        assert!(packet_fields("FENCE_SIGNAL", &hex[..16]).is_empty(), "too short");
        assert!(packet_fields("NOP", "00000100").is_empty());
        assert!(packet_fields("COPY", "").is_empty());
    }
}

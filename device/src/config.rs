//! Device configuration: what one `belfry-device` instance offers, chosen by command-line flags.

use belfry_abi::{irq, pci};
use thiserror::Error;

/// A fault a test can inject into the device, to prove that the driver and launcher notice it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The identity register (`MAGIC`) reads a wrong value.
    BadIdentity,
    /// The device never raises an interrupt (every trigger is dropped and traced).
    NoInterrupts,
    /// Test-only: the CMP's MonitoredValue update drops the barrier between writing
    /// MonitoredValue and reading CurrentValue (it reads first, then writes, with a widened
    /// window), to show that the stress test catches the lost wake-up this allows.
    SkipMonitoredBarrier,
    /// Test-only: a MonitoredValue update that finds CurrentValue already past the new
    /// MonitoredValue posts no record, so only the driver's re-read of CurrentValue after the
    /// update catches a signal that raced it (RACE-06).
    NoCatchUpRecord,
    /// Test-only: a MonitoredValue update that finds no interrupt due posts a native-fence
    /// record naming the fence anyway: a spurious interrupt that must release no wait (RACE-07).
    SpuriousFenceRecords,
    /// Test-only: the CMP applies each MonitoredValue update `SLOW_MONITORED_UPDATE_MS` after
    /// accepting it, so a test can signal inside the window deterministically.
    SlowMonitoredUpdates,
    /// Test-only: native-fence-signaled and monitored-fence-signaled interrupt records are
    /// dropped (traced as suppressed) while every other record and the mailbox work, so a test
    /// can show that CPU waits sleep until an interrupt rather than poll.
    NoFenceInterrupts,
    /// Test-only: the engine executing a NOTIFY packet whose token is [`ENGINE_PANIC_TOKEN`]
    /// panics, so a test can show that a device thread that dies ends the process.
    EnginePanic,
    /// Test-only: the engine executing a NOTIFY packet whose token is
    /// `regs::MAILBOX_STALL_TOKEN` makes the mailbox stop answering (submissions are dropped,
    /// traced) until the device is reset: the driver's device-lost path.
    MailboxStall,
}

/// The NOTIFY token that panics an engine under [`Fault::EnginePanic`].
pub const ENGINE_PANIC_TOKEN: u64 = 0xdead_0e0e_dead_0e0e;

/// Doorbell model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DoorbellModel {
    /// One doorbell per hardware queue.
    Dedicated,
    /// One doorbell for all queues; its value is only a hint.
    Global,
}

/// How doorbell rings reach the command processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DoorbellTransport {
    /// Every ring is a trapped BAR write (a vfio-user `REGION_WRITE`) that wakes the CMP.
    Trapped,
    /// The doorbell BAR is memory shared with QEMU (an mmappable region backed by a memfd): a
    /// ring is a store the CMP polls for, and sleeps after `doorbell_poll_us` without one,
    /// publishing its sleep in each doorbell page (`belfry_abi::doorbell`). Dedicated model only.
    Shared,
}

/// The form of native-fence-signaled interrupt records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InterruptForm {
    /// The exact signaled fences (one record per fence).
    Exact,
    /// A device that cannot tell: NULL fence, scan all (and legacy) waits.
    ScanAll,
    /// The optimized form: the queue whose log to read (advertised as a capability).
    PerQueue,
}

/// Configuration of one device instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Name used to prefix log lines and trace records (e.g. `belfry0`).
    pub name: String,
    /// Number of physical doorbells.
    pub doorbells: u32,
    /// Number of MSI-X vectors.
    pub msix_vectors: u16,
    /// Device memory size in bytes.
    pub vram_size: u64,
    /// Injected faults.
    pub faults: Vec<Fault>,
    /// Doorbell model.
    pub doorbell_model: DoorbellModel,
    /// Native-fence interrupt record form.
    pub interrupt_form: InterruptForm,
    /// The device cannot update 64-bit values atomically (no native fences; 32-bit monitored fences).
    pub no_64bit_atomics: bool,
    /// No native fences (`--no-native-fences`): monitored fences and kernel-mode queues only.
    pub no_native_fences: bool,
    /// Engines that cannot write fences themselves.
    pub engines_without_fence_writes: Vec<u32>,
    /// A command buffer executing longer than this (not counting fence waits) hangs its queue.
    pub hang_timeout_ms: u64,
    /// An engine idle this long asks the driver for F1.
    pub idle_f1_ms: u64,
    /// Accept DMA fds not sealed against shrinking (a client that shrinks one then crashes
    /// the device with SIGBUS).
    pub allow_unsealed_ram: bool,
    /// How rings reach the command processor.
    pub doorbell_transport: DoorbellTransport,
    /// Shared doorbells: how long the CMP polls after its last activity before it sleeps.
    pub doorbell_poll_us: u64,
    /// The device cannot save and restore a context mid-buffer (`CAPS.no_context_save`): a
    /// command buffer runs to its end once started, and the parts of a split DMA buffer run back
    /// to back with only paging queues between them.
    pub no_context_save: bool,
    /// VRAM contents are lost across D3hot (`CAPS.vram_lost_in_d3`): the return to D0
    /// overwrites all of VRAM with [`crate::vram::LOST_PATTERN`].
    pub vram_lost_in_d3: bool,
    /// Slots of the `BIND_SLOT` resource table (`SPLIT_INFO.slots`, MaxAllocationListSlotId).
    pub bind_slots: u32,
    /// No command ring (`CAPS.cmd_ring` clear): mailbox commands only through BAR0.
    pub no_cmd_ring: bool,
    /// Interrupt moderation (`IRQ_MODERATION` after reset): at most one interrupt per vector
    /// per this many microseconds for record-carrying causes; 0 turns it off.
    pub irq_moderation_us: u32,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            name: "belfry0".into(),
            doorbells: 16,
            msix_vectors: irq::VECTOR_COUNT,
            vram_size: 64 << 20,
            faults: Vec::new(),
            doorbell_model: DoorbellModel::Dedicated,
            interrupt_form: InterruptForm::Exact,
            no_64bit_atomics: false,
            no_native_fences: false,
            engines_without_fence_writes: Vec::new(),
            hang_timeout_ms: 2000,
            idle_f1_ms: 1000,
            allow_unsealed_ram: false,
            doorbell_transport: DoorbellTransport::Trapped,
            doorbell_poll_us: 2000,
            no_context_save: false,
            vram_lost_in_d3: false,
            bind_slots: belfry_abi::packet::BIND_SLOTS_MAX,
            no_cmd_ring: false,
            irq_moderation_us: belfry_abi::regs::DEFAULT_IRQ_MODERATION_US,
        }
    }
}

/// A configuration value out of range.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Doorbell count out of range.
    #[error("Doorbell count {0} is outside 1..={max}", max = pci::DOORBELL_MAX_COUNT)]
    Doorbells(u32),
    /// MSI-X vector count out of range.
    #[error("MSI-X vector count {0} is outside 1..={max}", max = pci::MSIX_MAX_VECTORS)]
    MsixVectors(u16),
    /// VRAM size out of range or not a power of two.
    #[error(
        "VRAM size {0} is not a power of two in {min}..={max} bytes",
        min = pci::VRAM_MIN_SIZE,
        max = pci::VRAM_MAX_SIZE
    )]
    VramSize(u64),
    /// An engine index out of range.
    #[error("Engine {0} does not exist (engines: 0 compute, 1 copy)")]
    Engine(u32),
    /// A timeout of zero.
    #[error("Timeouts must be at least 1 ms")]
    Timeout,
    /// Shared doorbells need the dedicated model: a page shared by every process could let one
    /// hide another's ring by writing the old value back.
    #[error("--doorbell-transport shared needs --doorbell-model dedicated")]
    SharedGlobalDoorbell,
    /// A poll budget above one second.
    #[error("Doorbell poll budget {0} us is above {max} us", max = MAX_DOORBELL_POLL_US)]
    DoorbellPoll(u64),
    /// A bind-slot count out of range.
    #[error("Bind slot count {0} is outside 1..={max}", max = belfry_abi::packet::BIND_SLOTS_MAX)]
    BindSlots(u32),
    /// An interrupt moderation interval above the contract's maximum.
    #[error("Interrupt moderation {0} us is above {max} us", max = belfry_abi::regs::MAX_IRQ_MODERATION_US)]
    IrqModeration(u32),
    /// A size string that does not parse.
    #[error("Cannot parse size {0:?}: expected a number with an optional K, M or G suffix")]
    SizeSyntax(String),
}

impl DeviceConfig {
    /// Checks every value against the limits of the contract.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.doorbells == 0 || self.doorbells > pci::DOORBELL_MAX_COUNT {
            return Err(ConfigError::Doorbells(self.doorbells));
        }
        if self.msix_vectors == 0 || self.msix_vectors > pci::MSIX_MAX_VECTORS {
            return Err(ConfigError::MsixVectors(self.msix_vectors));
        }
        if !self.vram_size.is_power_of_two() || !(pci::VRAM_MIN_SIZE..=pci::VRAM_MAX_SIZE).contains(&self.vram_size) {
            return Err(ConfigError::VramSize(self.vram_size));
        }
        if let Some(&e) = self.engines_without_fence_writes.iter().find(|&&e| e >= belfry_abi::engine::ENGINE_COUNT) {
            return Err(ConfigError::Engine(e));
        }
        if self.bind_slots == 0 || self.bind_slots > belfry_abi::packet::BIND_SLOTS_MAX {
            return Err(ConfigError::BindSlots(self.bind_slots));
        }
        if self.hang_timeout_ms == 0 || self.idle_f1_ms == 0 {
            return Err(ConfigError::Timeout);
        }
        if self.doorbell_transport == DoorbellTransport::Shared && self.doorbell_model == DoorbellModel::Global {
            return Err(ConfigError::SharedGlobalDoorbell);
        }
        if self.doorbell_poll_us > MAX_DOORBELL_POLL_US {
            return Err(ConfigError::DoorbellPoll(self.doorbell_poll_us));
        }
        if self.irq_moderation_us > belfry_abi::regs::MAX_IRQ_MODERATION_US {
            return Err(ConfigError::IrqModeration(self.irq_moderation_us));
        }
        Ok(())
    }

    /// Doorbells queues may be connected to (`DOORBELL_INFO.count`).
    pub fn queue_doorbells(&self) -> u32 {
        if self.doorbell_model == DoorbellModel::Global {
            1
        } else {
            self.doorbells
        }
    }

    /// The command ring's doorbell page, if the device has the ring: the page after the
    /// queues' doorbells (`cmdring::doorbell_index`).
    pub fn cmd_ring_doorbell(&self) -> Option<u32> {
        (!self.no_cmd_ring).then(|| belfry_abi::cmdring::doorbell_index(self.queue_doorbells()))
    }

    /// Pages of the doorbell BAR: the queues' doorbells and, with the command ring, its page.
    pub fn doorbell_pages(&self) -> u32 {
        match self.cmd_ring_doorbell() {
            Some(ring) => self.doorbells.max(ring + 1),
            None => self.doorbells,
        }
    }

    /// Whether `fault` is injected.
    pub fn has_fault(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }

    /// The `TEST_INJECTIONS` register: the test-only faults, for the driver to report.
    pub fn test_injections(&self) -> belfry_abi::regs::TEST_INJECTIONS {
        belfry_abi::regs::TEST_INJECTIONS::default()
            .with_skip_monitored_barrier(self.has_fault(Fault::SkipMonitoredBarrier))
            .with_no_catch_up_record(self.has_fault(Fault::NoCatchUpRecord))
            .with_spurious_fence_records(self.has_fault(Fault::SpuriousFenceRecords))
            .with_slow_monitored_updates(self.has_fault(Fault::SlowMonitoredUpdates))
            .with_no_fence_interrupts(self.has_fault(Fault::NoFenceInterrupts))
            .with_mailbox_stall(self.has_fault(Fault::MailboxStall))
    }
}

/// Largest `--doorbell-poll-us`.
pub const MAX_DOORBELL_POLL_US: u64 = 1_000_000;

/// Parses a size such as `4096`, `64K`, `64M` or `1G` (binary units).
pub fn parse_size(text: &str) -> Result<u64, ConfigError> {
    let err = || ConfigError::SizeSyntax(text.to_string());
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| err())?;
    n.checked_mul(1u64 << shift).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("M").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let ok = DeviceConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        let bad = DeviceConfig { doorbells: 0, ..ok.clone() };
        assert_eq!(bad.validate(), Err(ConfigError::Doorbells(0)));
        let bad = DeviceConfig { msix_vectors: 65, ..ok.clone() };
        assert_eq!(bad.validate(), Err(ConfigError::MsixVectors(65)));
        let bad = DeviceConfig { vram_size: 3 << 20, ..ok.clone() };
        assert_eq!(bad.validate(), Err(ConfigError::VramSize(3 << 20)));
        let shared = DeviceConfig { doorbell_transport: DoorbellTransport::Shared, ..ok.clone() };
        assert_eq!(shared.validate(), Ok(()));
        let bad = DeviceConfig { doorbell_model: DoorbellModel::Global, ..shared.clone() };
        assert_eq!(bad.validate(), Err(ConfigError::SharedGlobalDoorbell));
        let bad = DeviceConfig { doorbell_poll_us: 2_000_000, ..shared };
        assert_eq!(bad.validate(), Err(ConfigError::DoorbellPoll(2_000_000)));
    }
}

//! Device configuration, written once: what one `belfry-device` instance offers.
//!
//! [`DeviceConfig`] is at the same time the device's command-line flags (it derives
//! `clap::Args`, flattened into `main.rs`'s arguments, one group per part), the `device` record
//! of the trace header (it derives serde; `trace/tests.rs` proves that every flag appears there
//! and round-trips) and what the blocks read: the GPU holds it behind the same `Arc` as the
//! device (`gpu::ports::Ports::config`) and reads [`GpuConfig`] and the injections; the
//! doorbell BAR and guest memory read [`TransportConfig`]. Its defaults are the flags' defaults
//! ([`DeviceConfig::from_flags`] with none).

use belfry_abi::{irq, pci};
use clap::Parser as _;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::inject::Injections;

/// Doorbell model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DoorbellModel {
    /// One doorbell per hardware queue.
    Dedicated,
    /// One doorbell for all queues; its value is only a hint.
    Global,
}

/// How doorbell rings reach the command processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DoorbellTransport {
    /// Every ring is a trapped BAR write (a vfio-user `REGION_WRITE`) that wakes the CMP.
    Trapped,
    /// The doorbell BAR is memory shared with QEMU (an mmappable region backed by a memfd): a
    /// ring is a store the CMP polls for, and sleeps after `doorbell_poll_us` without one,
    /// publishing its sleep in each doorbell page (`belfry_abi::doorbell`). Dedicated model only.
    Shared,
}

/// The form of native-fence-signaled interrupt records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptForm {
    /// The exact signaled fences (one record per fence).
    Exact,
    /// A device that cannot tell: NULL fence, scan all (and legacy) waits.
    ScanAll,
    /// The optimized form: the queue whose log to read (advertised as a capability).
    PerQueue,
    /// The future form: one record names every queue whose signal log holds entries no record
    /// named yet (`belfry_abi::irq::queue_array_record`; advertised as a capability).
    QueueArray,
}

/// Configuration of one device instance: its name and three parts.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
pub struct DeviceConfig {
    /// Name used in log lines and trace records.
    #[arg(long, default_value = "belfry0", value_name = "NAME")]
    pub name: String,
    /// The GPU: geometry, capabilities and timeouts.
    #[command(flatten, next_help_heading = "The GPU")]
    #[serde(flatten)]
    pub gpu: GpuConfig,
    /// How the device meets its client (QEMU): doorbell transport and guest memory.
    #[command(flatten, next_help_heading = "The transport")]
    #[serde(flatten)]
    pub transport: TransportConfig,
    /// Test-only fault injections (empty without the `fault-injection` feature).
    #[command(flatten, next_help_heading = "Test-only fault injection")]
    #[serde(flatten)]
    pub inject: Injections,
}

/// The GPU's part of the configuration: what its registers report and its blocks obey.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
pub struct GpuConfig {
    /// Number of physical doorbells (1..=1024), one 4 KiB page each in BAR2.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub doorbells: u32,
    /// Number of MSI-X vectors (1..=64).
    #[arg(long, default_value_t = irq::VECTOR_COUNT, value_name = "N")]
    pub msix_vectors: u16,
    /// The function also offers a legacy INTx interrupt (Interrupt Pin INTA#). Without it the
    /// function is MSI-X only (Interrupt Pin 0, no INTx interrupt), as PCI Express allows: a
    /// guest then routes no legacy interrupt line when it enables the device (on Linux, no
    /// ACPI interrupt-link evaluation at probe and remove).
    #[arg(long)]
    pub intx: bool,
    /// Device memory (VRAM) size: a power of two from 1M to 4G, with an optional K/M/G suffix.
    #[arg(long, default_value = "64M", value_name = "SIZE", value_parser = parse_size)]
    pub vram_size: u64,
    /// Doorbell model: one doorbell per queue, or one global doorbell whose value is a hint.
    #[arg(long, value_enum, default_value = "dedicated")]
    pub doorbell_model: DoorbellModel,
    /// Form of native-fence interrupt records: the exact fences, scan-all (a device that cannot
    /// tell), per-queue (the optimized form, advertised as a capability) or queue-array (the
    /// queues whose signal logs hold new entries, advertised as a capability).
    #[arg(long, value_enum, default_value = "exact")]
    pub interrupt_form: InterruptForm,
    /// The device cannot update 64-bit values atomically: no native fences; monitored fences
    /// are written 32 bits wide and the driver handles wraparound.
    #[arg(long)]
    pub no_64bit_atomics: bool,
    /// A GPU without native fences: capabilities say so, queues are kernel-mode only, and it
    /// signals and waits on monitored fences only (the non-native adapter of cross-adapter
    /// scenarios 2a and 2b).
    #[arg(long)]
    pub no_native_fences: bool,
    /// An engine (0 compute, 1 copy) that cannot write fences itself (repeatable): fence packets
    /// on it fault, and the driver uses NOTIFY for a software signal instead.
    #[arg(long = "engine-without-fence-writes", value_name = "ENGINE")]
    pub engines_without_fence_writes: Vec<u32>,
    /// A command buffer executing longer than this, fence waits excluded, hangs its queue.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub hang_timeout_ms: u64,
    /// An engine idle this long asks the driver for the F1 power state.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub idle_f1_ms: u64,
    /// The device cannot save and restore a context in the middle of a command buffer
    /// (reported in CAPS): a started command buffer runs to its end, and the parts of a split
    /// DMA buffer run back to back with only paging queues between them.
    #[arg(long)]
    pub no_context_save: bool,
    /// VRAM contents are lost across D3hot (reported in CAPS): the return to D0 overwrites all
    /// of VRAM with a fixed pattern ([`crate::vram::LOST_PATTERN`]), so the driver must evict
    /// what it keeps there first.
    #[arg(long)]
    pub vram_lost_in_d3: bool,
    /// Peer signals (reported in CAPS, XAD-15): once the driver gives the device peer-signal
    /// pages (`SET_PEER_SIGNALS`), its signals of cross-adapter fences write a payload into the
    /// other devices' pages, and it polls its own while a queue waits on a cross-adapter fence.
    /// Needs native fences.
    #[arg(long)]
    pub peer_signals: bool,
    /// Slots of the BIND_SLOT resource table a command buffer may bind (1..=16), reported as
    /// SPLIT_INFO.slots (MaxAllocationListSlotId).
    #[arg(long, default_value_t = belfry_abi::packet::BIND_SLOTS_MAX, value_name = "N")]
    pub bind_slots: u32,
    /// No command ring (CAPS bit 16 clear): the driver sends every mailbox command through
    /// BAR0 writes. May be repeated (a run passing it to every device keeps the suite's
    /// device that already has it).
    #[arg(long, overrides_with = "no_cmd_ring")]
    pub no_cmd_ring: bool,
    /// Interrupt moderation: a vector's fence, NOTIFY, engine-state and fault interrupts are
    /// raised at most once per this many microseconds (0..=100000; 0: off), the records written
    /// meanwhile waiting in the interrupt ring for the next one. Mailbox completions are never
    /// held back. The driver may change it (register IRQ_MODERATION); a reset restores this.
    #[arg(long, default_value_t = belfry_abi::regs::DEFAULT_IRQ_MODERATION_US, value_name = "US")]
    pub irq_moderation_us: u32,
}

/// The transport's part of the configuration: how rings and guest memory reach the device.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
pub struct TransportConfig {
    /// How rings reach the command processor: `trapped` (every ring is a vfio-user write) or
    /// `shared` (the doorbell BAR is memory shared with QEMU, which the command processor polls
    /// and sleeps on; dedicated doorbell model only). A shared BAR turns off QEMU's posted
    /// writes for the device, so every BAR0 write waits for its reply.
    #[arg(long, value_enum, default_value = "trapped")]
    pub doorbell_transport: DoorbellTransport,
    /// Shared doorbells: how long the command processor polls after its last activity before
    /// it sleeps (0..=1000000 us).
    #[arg(long, default_value_t = 2000, value_name = "US")]
    pub doorbell_poll_us: u64,
    /// Accept guest RAM fds that are not sealed against shrinking (F_SEAL_SHRINK), such as a
    /// memory-backend-file that cannot be sealed. A client that then shrinks the file makes the
    /// device's next access to it raise SIGBUS and end the process. QEMU's memory-backend-memfd
    /// seals by default and needs no flag.
    #[arg(long)]
    pub allow_unsealed_ram: bool,
}

/// The device flags alone, as a command line of their own ([`DeviceConfig::from_flags`]).
#[derive(clap::Parser)]
#[command(name = "belfry-device")]
struct Flags {
    #[command(flatten)]
    config: DeviceConfig,
}

impl DeviceConfig {
    /// The configuration that device flags `flags` (`--doorbells 2 …`, no program name) choose,
    /// each flag not given at its default.
    pub fn from_flags<I, T>(flags: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let argv = std::iter::once(std::ffi::OsString::from("belfry-device")).chain(flags.into_iter().map(Into::into));
        Flags::try_parse_from(argv).map(|f| f.config)
    }
}

impl Default for DeviceConfig {
    /// Every flag at its default.
    fn default() -> Self {
        match DeviceConfig::from_flags::<_, &str>([]) {
            Ok(config) => config,
            // The flags' defaults are constants; `defaults_are_the_flags_defaults` parses them.
            Err(e) => unreachable!("the device flags' defaults do not parse: {e}"),
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
        let (gpu, transport) = (&self.gpu, &self.transport);
        if gpu.doorbells == 0 || gpu.doorbells > pci::DOORBELL_MAX_COUNT {
            return Err(ConfigError::Doorbells(gpu.doorbells));
        }
        if gpu.msix_vectors == 0 || gpu.msix_vectors > pci::MSIX_MAX_VECTORS {
            return Err(ConfigError::MsixVectors(gpu.msix_vectors));
        }
        if !gpu.vram_size.is_power_of_two() || !(pci::VRAM_MIN_SIZE..=pci::VRAM_MAX_SIZE).contains(&gpu.vram_size) {
            return Err(ConfigError::VramSize(gpu.vram_size));
        }
        if let Some(&e) = gpu.engines_without_fence_writes.iter().find(|&&e| e >= belfry_abi::engine::ENGINE_COUNT) {
            return Err(ConfigError::Engine(e));
        }
        if gpu.bind_slots == 0 || gpu.bind_slots > belfry_abi::packet::BIND_SLOTS_MAX {
            return Err(ConfigError::BindSlots(gpu.bind_slots));
        }
        if gpu.hang_timeout_ms == 0 || gpu.idle_f1_ms == 0 {
            return Err(ConfigError::Timeout);
        }
        if transport.doorbell_transport == DoorbellTransport::Shared && gpu.doorbell_model == DoorbellModel::Global {
            return Err(ConfigError::SharedGlobalDoorbell);
        }
        if transport.doorbell_poll_us > MAX_DOORBELL_POLL_US {
            return Err(ConfigError::DoorbellPoll(transport.doorbell_poll_us));
        }
        if gpu.irq_moderation_us > belfry_abi::regs::MAX_IRQ_MODERATION_US {
            return Err(ConfigError::IrqModeration(gpu.irq_moderation_us));
        }
        Ok(())
    }
}

impl GpuConfig {
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
    fn defaults_are_the_flags_defaults() {
        let config = DeviceConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!((config.name.as_str(), config.gpu.doorbells, config.gpu.vram_size), ("belfry0", 16, 64 << 20));
        assert_eq!(config.gpu.cmd_ring_doorbell(), Some(16));
        assert!(!config.inject.any());
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let flags = |f: &[&str]| DeviceConfig::from_flags(f).unwrap().validate();
        assert_eq!(flags(&[]), Ok(()));
        assert_eq!(flags(&["--doorbells", "0"]), Err(ConfigError::Doorbells(0)));
        assert_eq!(flags(&["--msix-vectors", "65"]), Err(ConfigError::MsixVectors(65)));
        assert_eq!(flags(&["--vram-size", "3M"]), Err(ConfigError::VramSize(3 << 20)));
        assert_eq!(flags(&["--engine-without-fence-writes", "2"]), Err(ConfigError::Engine(2)));
        assert_eq!(flags(&["--doorbell-transport", "shared"]), Ok(()));
        let global = ["--doorbell-transport", "shared", "--doorbell-model", "global"];
        assert_eq!(flags(&global), Err(ConfigError::SharedGlobalDoorbell));
        let poll = ["--doorbell-transport", "shared", "--doorbell-poll-us", "2000000"];
        assert_eq!(flags(&poll), Err(ConfigError::DoorbellPoll(2_000_000)));
        assert!(DeviceConfig::from_flags(["--vram-size", "lots"]).is_err(), "a size that does not parse");
    }
}

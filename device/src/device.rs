//! The device: every hardware block of one Belfry GPU, and the dispatch of region accesses
//! (configuration space and BARs) to them.
//!
//! A [`Device`] is shared (`Arc`) by the vfio-user socket thread, which calls
//! [`Device::region_read`]/[`Device::region_write`]/[`Device::reset`]. The command processor and
//! engine threads run in [`crate::gpu`] and never see the device: they get its blocks (shared
//! through `Arc`s) as the GPU's [`Ports`]. The socket thread never waits for the command
//! processor: it only stores into atomics and writes eventfds.

use std::sync::{Arc, Mutex};

use crate::config::{DeviceConfig, DoorbellTransport};
use crate::dma::GuestRam;
use crate::doorbell::shared::SharedDoorbells;
use crate::doorbell::{DoorbellSource, Ring, TrappedDoorbells};
use crate::gpu::ports::{CmpWake, Ports};
use crate::gpu::Gpu;
use crate::irq::{EventfdInterrupts, InterruptBlock, ModerationThread};
use crate::log_limit::LogLimiter;
use crate::pci_config::{ConfigEffect, ConfigSpace};
use crate::record::Turnstile;
use crate::record::{RecordSlot, Recorder};
use crate::registers::{RegisterFile, WriteEffect};
use crate::trace::{Event, MailboxPhase, ResetSource, Tracer};
use crate::vram::Vram;
use belfry_abi::pci;
use belfry_abi::regs;
use thiserror::Error;
use vfio_bindings::bindings::vfio::{
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};

/// A region access that cannot be served.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RegionError {
    /// The region index does not exist or has size 0.
    #[error("Region {0} does not exist")]
    NoRegion(u32),
    /// The access reaches past the region's end.
    #[error("Access {offset:#x}+{count} is outside region {region} ({size} bytes)")]
    OutOfRange {
        /// Region index.
        region: u32,
        /// Offset.
        offset: u64,
        /// Bytes.
        count: usize,
        /// Region size.
        size: u64,
    },
}

impl RegionError {
    /// The errno this error is reported with.
    pub fn errno(&self) -> i32 {
        libc::EINVAL
    }
}

/// The rate limits ([`LogLimiter`]) of the warnings a guest can cause at will, one per kind.
#[derive(Debug, Default)]
pub struct GuestWarnings {
    /// A doorbell BAR store that names no doorbell (an offset inside a page, a bad size).
    pub doorbell_offset: LogLimiter,
    /// A BAR0 access that is not a register access (size or alignment).
    pub bar0_access: LogLimiter,
    /// A write to a read-only or unknown register.
    pub ignored_register: LogLimiter,
    /// A mailbox submit in D3hot.
    pub mailbox_in_d3: LogLimiter,
}

/// One Belfry GPU.
pub struct Device {
    /// Its configuration, shared with the GPU (`Ports::config`).
    pub config: Arc<DeviceConfig>,
    /// Its tracer.
    pub tracer: Arc<Tracer>,
    /// Guest memory mapped for DMA.
    pub ram: Arc<GuestRam>,
    /// Interrupt eventfds and counters.
    pub irqs: Arc<EventfdInterrupts>,
    /// The interrupt cause block.
    pub interrupts: Arc<InterruptBlock>,
    /// BAR0 registers.
    pub regs: Arc<RegisterFile>,
    /// The doorbell BAR.
    pub doorbells: Arc<dyn DoorbellSource>,
    /// Device memory.
    pub vram: Arc<Vram>,
    /// Configuration space.
    pub pci: Mutex<ConfigSpace>,
    /// Command-processor wake-ups.
    pub wake: Arc<CmpWake>,
    /// The GPU: command processor, engines and GPU objects (start it with
    /// [`crate::gpu::cmp::CommandProcessor::start`]).
    pub gpu: Arc<Gpu>,
    msix_storage: Mutex<Vec<u8>>,
    /// The rate limits of the warnings a guest can cause at will.
    pub warnings: GuestWarnings,
    /// The input recorder, if the device records: vfio-user messages and replies.
    pub recording: RecordSlot,
    /// The interrupt moderation thread, ended and joined with the device.
    _moderation: ModerationThread,
}

impl Device {
    /// Builds a device from a validated configuration.
    pub fn new(config: impl Into<Arc<DeviceConfig>>, tracer: Arc<Tracer>) -> std::io::Result<Self> {
        let config: Arc<DeviceConfig> = config.into();
        let gpu = &config.gpu;
        let irqs = Arc::new(EventfdInterrupts::new(gpu.msix_vectors, gpu.intx, config.inject.no_interrupts()));
        let doorbell_bar = pci::doorbell_bar_size(gpu.doorbell_pages());
        let msix_bytes = usize::try_from(pci::REGS_BAR_SIZE - u64::from(pci::MSIX_TABLE_OFFSET))
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let doorbells: Arc<dyn DoorbellSource> = match config.transport.doorbell_transport {
            DoorbellTransport::Trapped => {
                Arc::new(TrappedDoorbells::kicked_by_the_writer(gpu.doorbell_pages(), gpu.cmd_ring_doorbell())?)
            }
            DoorbellTransport::Shared => Arc::new(SharedDoorbells::new(
                &config.name,
                gpu.doorbell_pages(),
                std::time::Duration::from_micros(config.transport.doorbell_poll_us),
            )?),
        };
        let interrupts = Arc::new(InterruptBlock::moderated(irqs.clone(), gpu.msix_vectors, gpu.irq_moderation_us));
        let moderation = interrupts.start_moderation(tracer.clone(), &config.name)?;
        let ports = Ports {
            config: config.clone(),
            ram: Arc::new(GuestRam::new(config.transport.allow_unsealed_ram)),
            vram: Arc::new(Vram::new(gpu.vram_size)?),
            interrupts,
            regs: Arc::new(RegisterFile::new(&config)),
            doorbells: doorbells.clone(),
            wake: Arc::new(CmpWake::new()?),
            tracer: tracer.clone(),
            recording: RecordSlot::default(),
        };
        Ok(Device {
            interrupts: ports.interrupts.clone(),
            regs: ports.regs.clone(),
            doorbells,
            vram: ports.vram.clone(),
            pci: Mutex::new(ConfigSpace::new(gpu.msix_vectors, gpu.intx, doorbell_bar, gpu.vram_size)),
            wake: ports.wake.clone(),
            ram: ports.ram.clone(),
            gpu: Arc::new(Gpu::new(ports)),
            msix_storage: Mutex::new(vec![0; msix_bytes]),
            warnings: GuestWarnings::default(),
            _moderation: moderation,
            recording: RecordSlot::default(),
            irqs,
            tracer,
            config,
        })
    }

    /// Records every input into `recorder` from now on: the vfio-user messages and replies,
    /// guest-memory reads, clock reads, doorbell values taken, MSI-X eventfd writes, the
    /// objects' lock order and the order of the accesses to the interrupt state (before the
    /// command processor starts, so the log has all of them).
    pub fn record_to(&self, recorder: &Arc<Recorder>) {
        for slot in self.record_slots() {
            slot.set(recorder);
        }
    }

    /// Replays a log through `turnstile` from now on: every block that records an input
    /// waits for its turn in the log instead (see [`crate::replay`]).
    pub fn replay_through(&self, turnstile: &Arc<Turnstile>) {
        for slot in self.record_slots() {
            slot.replay(turnstile);
        }
    }

    /// Every block's recording slot: the device's own, the interrupt eventfds', the interrupt
    /// block's, guest memory's, the registers' and the GPU's.
    fn record_slots(&self) -> [&RecordSlot; 7] {
        [
            &self.recording,
            &self.irqs.recording,
            &self.interrupts.recording,
            &self.ram.recording,
            &self.regs.recording,
            &self.gpu.ports.recording,
            &self.gpu.ports.vram.recording,
        ]
    }

    /// Size and `VFIO_REGION_INFO_FLAG_*` of region `index`; `None` past the last region.
    pub fn region_info(&self, index: u32) -> Option<(u64, u32)> {
        let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        let size = match index {
            i if i == pci::REGS_BAR => pci::REGS_BAR_SIZE,
            i if i == pci::DOORBELL_BAR => pci::doorbell_bar_size(self.config.gpu.doorbell_pages()),
            i if i == pci::VRAM_BAR => self.config.gpu.vram_size,
            VFIO_PCI_CONFIG_REGION_INDEX => pci::CONFIG_SPACE_SIZE as u64,
            i if i < VFIO_PCI_NUM_REGIONS => 0,
            _ => return None,
        };
        let mmap = if index == pci::DOORBELL_BAR && self.doorbells.region_fd().is_some() {
            VFIO_REGION_INFO_FLAG_MMAP
        } else {
            0
        };
        Some((size, if size == 0 { 0 } else { rw | mmap }))
    }

    /// The fd the client maps region `index` from, at offset 0 (the shared doorbell BAR).
    pub fn region_fd(&self, index: u32) -> Option<std::os::fd::BorrowedFd<'_>> {
        (index == pci::DOORBELL_BAR).then(|| self.doorbells.region_fd()).flatten()
    }

    fn check(&self, region: u32, offset: u64, count: usize) -> Result<(), RegionError> {
        let (size, _) = self.region_info(region).filter(|(s, _)| *s > 0).ok_or(RegionError::NoRegion(region))?;
        let end = offset.checked_add(count as u64);
        if count == 0 || end.is_none_or(|e| e > size) {
            return Err(RegionError::OutOfRange { region, offset, count, size });
        }
        Ok(())
    }

    /// Serves a read of `buf.len()` bytes at `offset` in `region`.
    pub fn region_read(&self, region: u32, offset: u64, buf: &mut [u8]) -> Result<(), RegionError> {
        self.check(region, offset, buf.len())?;
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => {
                let cs = self.pci.lock().unwrap_or_else(|e| e.into_inner());
                cs.read(offset, buf).ok_or(RegionError::NoRegion(region))?;
                self.trace_read("config", offset, buf);
            }
            r if r == pci::REGS_BAR => self.bar0_read(offset, buf),
            r if r == pci::DOORBELL_BAR => {
                buf.fill(0);
                if let Some(index) = self.doorbells.index_at(offset, buf.len()) {
                    let v = self.doorbells.value(index).to_le_bytes();
                    buf.copy_from_slice(&v[..buf.len()]);
                }
                self.trace_read("doorbell", offset, buf);
            }
            r if r == pci::VRAM_BAR => {
                self.vram.read(offset, buf).ok_or(RegionError::NoRegion(region))?;
            }
            _ => return Err(RegionError::NoRegion(region)),
        }
        Ok(())
    }

    /// Serves a write of `data` at `offset` in `region`.
    pub fn region_write(&self, region: u32, offset: u64, data: &[u8]) -> Result<(), RegionError> {
        self.check(region, offset, data.len())?;
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => {
                let effects = {
                    let mut cs = self.pci.lock().unwrap_or_else(|e| e.into_inner());
                    cs.write(offset, data).ok_or(RegionError::NoRegion(region))?
                };
                self.trace_write("config", offset, data, None);
                for effect in effects {
                    match effect {
                        ConfigEffect::PowerState(state) => {
                            // D3hot for real: engines start nothing; doorbells latch; the
                            // mailbox and the command ring execute nothing (PWR-01).
                            self.regs.set_pci_d3hot(state == 3);
                            self.gpu.set_d3(state == 3);
                            if state == 0 && self.config.gpu.vram_lost_in_d3 {
                                // Back from D3hot: VRAM was not kept powered.
                                self.vram.lose();
                                log::info!("{}: D0 with VRAM lost", self.config.name);
                            }
                            self.regs.set_power_state(state);
                            self.tracer.emit(Event::PowerState { state });
                            if state == 0 && self.regs.cmd_ring_latched() {
                                // The command ring rang in D3hot: its entries run now.
                                let _ = self.wake.mailbox.write(1);
                            }
                        }
                        ConfigEffect::BusMaster(on) => {
                            // Clearing returns once no DMA is in flight; engines pick no work
                            // while it is clear and are woken when it is set.
                            self.ram.set_bus_master(on);
                            log::info!("{}: bus mastering {}", self.config.name, if on { "on" } else { "off" });
                            self.gpu.notify();
                        }
                        ConfigEffect::FunctionReset => {
                            // Function Level Reset: the function's state goes back to power-on,
                            // as a reset through the register does (the MSI-X table included);
                            // DMA mappings and interrupt eventfds belong to the connection.
                            self.msix_storage.lock().unwrap_or_else(|e| e.into_inner()).fill(0);
                            self.reset(ResetSource::FunctionLevel);
                            log::info!("{}: function level reset", self.config.name);
                        }
                    }
                }
            }
            r if r == pci::REGS_BAR => self.bar0_write(offset, data),
            r if r == pci::DOORBELL_BAR => match self.doorbells.index_at(offset, data.len()) {
                Some(index) => {
                    let value = le_value(data);
                    self.tracer.emit(Event::Doorbell { index, value });
                    if self.doorbells.ring(index, value) == Ring::Caller {
                        crate::gpu::cmp::kick_at_the_ring(&self.gpu, index, value);
                    }
                }
                None => {
                    crate::warn_limited!(
                        self.warnings.doorbell_offset,
                        "{}: ignored doorbell BAR write at {offset:#x} ({} bytes)",
                        self.config.name,
                        data.len()
                    );
                    self.trace_write("doorbell", offset, data, None);
                }
            },
            r if r == pci::VRAM_BAR => {
                self.vram.write(offset, data).ok_or(RegionError::NoRegion(region))?;
            }
            _ => return Err(RegionError::NoRegion(region)),
        }
        Ok(())
    }

    fn msix_range(offset: u64, len: usize) -> Option<usize> {
        let start = u64::from(pci::MSIX_TABLE_OFFSET);
        let end = offset.checked_add(u64::try_from(len).ok()?)?;
        if offset < start || end > pci::REGS_BAR_SIZE {
            return None;
        }
        usize::try_from(offset - start).ok()
    }

    fn bar0_read(&self, offset: u64, buf: &mut [u8]) {
        if let Some(at) = Self::msix_range(offset, buf.len()) {
            // QEMU emulates the MSI-X table itself; this serves raw clients consistently.
            let table = self.msix_storage.lock().unwrap_or_else(|e| e.into_inner());
            buf.copy_from_slice(&table[at..at + buf.len()]);
            return;
        }
        buf.fill(0);
        match (buf.len(), offset % 4, u32::try_from(offset)) {
            (4, 0, Ok(reg)) => {
                let v = self.regs.read(reg, &self.interrupts);
                buf.copy_from_slice(&v.to_le_bytes());
            }
            (8, 0, Ok(reg)) => {
                let lo = self.regs.read(reg, &self.interrupts);
                let hi = self.regs.read(reg + 4, &self.interrupts);
                buf.copy_from_slice(&(u64::from(hi) << 32 | u64::from(lo)).to_le_bytes());
            }
            _ => crate::warn_limited!(
                self.warnings.bar0_access,
                "{}: BAR0 read of {} bytes at {offset:#x} is not a register access",
                self.config.name,
                buf.len()
            ),
        }
        self.trace_read("bar0", offset, buf);
    }

    fn bar0_write(&self, offset: u64, data: &[u8]) {
        if let Some(at) = Self::msix_range(offset, data.len()) {
            let mut table = self.msix_storage.lock().unwrap_or_else(|e| e.into_inner());
            table[at..at + data.len()].copy_from_slice(data);
            return;
        }
        let value = le_value(data);
        let (lo, hi) = ((value & 0xffff_ffff) as u32, (value >> 32) as u32);
        let words: &[(u32, u32)] = match (data.len(), offset % 4, u32::try_from(offset)) {
            (4, 0, Ok(reg)) => &[(reg, lo)],
            (8, 0, Ok(reg)) => &[(reg, lo), (reg + 4, hi)],
            _ => {
                crate::warn_limited!(
                    self.warnings.bar0_access,
                    "{}: BAR0 write of {} bytes at {offset:#x} ignored",
                    self.config.name,
                    data.len()
                );
                &[]
            }
        };
        for &(off, v) in words {
            let fields = self.decode_fields(off, v);
            self.trace_write("bar0", u64::from(off), &v.to_le_bytes(), Some(fields));
            self.apply(self.regs.write(off, v), off);
        }
    }

    fn apply(&self, effect: WriteEffect, offset: u32) {
        match effect {
            WriteEffect::None => {}
            WriteEffect::Reset => self.reset(ResetSource::Register),
            WriteEffect::MailboxSubmitted(req) => {
                self.tracer.emit(Event::Mailbox {
                    phase: MailboxPhase::Submit,
                    opcode: None,
                    seq: req.seq,
                    address: req.address,
                    status: None,
                    detail: None,
                });
                let _ = self.wake.mailbox.write(1);
            }
            WriteEffect::MailboxBusy(seq) => {
                log::warn!("{}: mailbox submit {seq} while busy: dropped", self.config.name);
                self.tracer.emit(Event::Mailbox {
                    phase: MailboxPhase::Dropped,
                    opcode: None,
                    seq,
                    address: 0,
                    status: Some("BUSY".into()),
                    detail: Some("a command is already in flight".into()),
                });
            }
            WriteEffect::MailboxIgnoredD3(seq) => {
                crate::warn_limited!(
                    self.warnings.mailbox_in_d3,
                    "{}: mailbox submit {seq} in D3hot ignored",
                    self.config.name
                );
                self.tracer.emit(Event::Mailbox {
                    phase: MailboxPhase::Dropped,
                    opcode: None,
                    seq,
                    address: 0,
                    status: Some("D3HOT".into()),
                    detail: Some("the device is in D3hot: it executes nothing".into()),
                });
            }
            WriteEffect::DoorbellWake(index) => {
                self.tracer.emit(Event::Doorbell { index, value: 0 });
                self.doorbells.wake();
            }
            WriteEffect::CmdRingEnabled(index) => self.doorbells.connected(index),
            WriteEffect::IntClear(bits) => {
                // The driver acknowledges after advancing its read index of the interrupt ring:
                // what the device owes it (scan-all, latched NOTIFY tokens) goes out now.
                self.interrupts.clear(bits);
                self.gpu.interrupts_acknowledged();
            }
            WriteEffect::IntMask(mask) => self.interrupts.set_mask(mask, &self.tracer),
            WriteEffect::IrqModeration(us) => self.interrupts.set_moderation_us(us),
            WriteEffect::Ignored => {
                crate::warn_limited!(
                    self.warnings.ignored_register,
                    "{}: write to read-only or unknown register {offset:#x} ignored",
                    self.config.name
                );
            }
        }
    }

    /// Resets the device to its power-on state. DMA mappings and interrupt eventfds belong to
    /// the connection and survive; the command processor drops in-flight work, and the reset
    /// completes only once no device access begun before it is in flight.
    pub fn reset(&self, source: ResetSource) {
        self.regs.reset();
        self.interrupts.reset();
        self.doorbells.reset();
        // The peer-signal consumer, asleep on the page the reset forgets, looks again.
        crate::gpu::peer::wake_consumer(&self.gpu);
        self.gpu.reset();
        self.ram.quiesce();
        self.pci.lock().unwrap_or_else(|e| e.into_inner()).reset_power_state();
        self.tracer.emit(Event::Reset { source });
        let _ = self.wake.reset.write(1);
    }

    /// The client went away: reset, forget its memory and eventfds.
    pub fn disconnect(&self) {
        self.reset(ResetSource::Connection);
        self.ram.clear();
        self.irqs.clear();
    }

    fn decode_fields(&self, offset: u32, value: u32) -> Vec<String> {
        regs::lookup(offset)
            .map(|r| {
                if r.fields.len() == 1 {
                    return Vec::new();
                }
                r.fields.iter().map(|f| format!("{}={:#x}", f.name, f.extract(value))).collect()
            })
            .unwrap_or_default()
    }

    fn trace_read(&self, region: &'static str, offset: u64, buf: &[u8]) {
        if self.tracer.enabled() {
            let name = (region == "bar0")
                .then(|| u32::try_from(offset).ok().and_then(regs::lookup))
                .flatten()
                .map(|r| r.name.into());
            self.tracer.emit(Event::RegRead {
                region: region.into(),
                offset,
                size: buf.len(),
                name,
                value: le_value(buf),
            });
        }
    }

    fn trace_write(&self, region: &'static str, offset: u64, data: &[u8], fields: Option<Vec<String>>) {
        if self.tracer.enabled() {
            let name = (region == "bar0")
                .then(|| u32::try_from(offset).ok().and_then(regs::lookup))
                .flatten()
                .map(|r| r.name.into());
            self.tracer.emit(Event::RegWrite {
                region: region.into(),
                offset,
                size: data.len(),
                name,
                value: le_value(data),
                fields: fields.unwrap_or_default(),
            });
        }
    }
}

/// Little-endian value of up to 8 bytes (longer accesses are traced by their first 8).
fn le_value(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use belfry_abi::regs::{SCRATCH, VERSION};
    use vfio_bindings::bindings::vfio::VFIO_PCI_BAR0_REGION_INDEX;

    fn device() -> Device {
        Device::new(DeviceConfig::default(), Arc::new(Tracer::new("t"))).unwrap()
    }

    #[test]
    fn reset_completes_only_once_no_access_is_in_flight() {
        let d = device();
        let ram = d.ram.clone();
        assert!(crate::dma::tests::waits_for_access_in_flight(&ram, || d.reset(ResetSource::Register)));
    }

    /// A PM capability write to D3hot stops execution (the GPU is in D3: no engine starts a
    /// slice, rung doorbells only latch) and D0 resumes it.
    #[test]
    fn the_pm_capability_puts_the_gpu_in_d3hot_and_back() {
        use vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
        let d = device();
        let pmcsr = u64::from(pci::CAP_PM_OFFSET) + 4;
        d.region_write(VFIO_PCI_CONFIG_REGION_INDEX, pmcsr, &[3, 0]).unwrap();
        assert!(d.gpu.is_d3(), "D3hot through PMCSR");
        d.region_write(VFIO_PCI_CONFIG_REGION_INDEX, pmcsr, &[0, 0]).unwrap();
        assert!(!d.gpu.is_d3(), "back to D0");
    }

    /// `--vram-lost-in-d3`: VRAM written before D3hot reads as the lost pattern after D0
    /// (the pattern everywhere); without the flag it is kept.
    #[test]
    fn vram_is_lost_across_d3hot_only_with_the_flag() {
        use vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
        let pmcsr = u64::from(pci::CAP_PM_OFFSET) + 4;
        for lost in [false, true] {
            let mut config = DeviceConfig::from_flags(["--vram-size", "1M"]).unwrap();
            config.gpu.vram_lost_in_d3 = lost;
            let d = Device::new(config, Arc::new(Tracer::new("t"))).unwrap();
            let mut caps = [0u8; 4];
            d.region_read(VFIO_PCI_BAR0_REGION_INDEX, u64::from(belfry_abi::regs::CAPS::OFFSET), &mut caps).unwrap();
            assert_eq!(belfry_abi::regs::CAPS(u32::from_le_bytes(caps)).vram_lost_in_d3(), lost);
            d.region_write(pci::VRAM_BAR, 4096, &[0x5a; 8]).unwrap();
            d.region_write(VFIO_PCI_CONFIG_REGION_INDEX, pmcsr, &[3, 0]).unwrap();
            d.region_write(VFIO_PCI_CONFIG_REGION_INDEX, pmcsr, &[0, 0]).unwrap();
            let (mut at, mut end) = ([0u8; 8], [0u8; 8]);
            d.region_read(pci::VRAM_BAR, 4096, &mut at).unwrap();
            d.region_read(pci::VRAM_BAR, (1 << 20) - 8, &mut end).unwrap();
            if lost {
                assert_eq!(u64::from_le_bytes(at), crate::vram::LOST_PATTERN);
                assert_eq!(u64::from_le_bytes(end), crate::vram::LOST_PATTERN);
            } else {
                assert_eq!(at, [0x5a; 8], "VRAM kept across D3hot");
            }
        }
    }

    #[test]
    fn regions_have_the_contract_sizes() {
        let d = device();
        assert_eq!(d.region_info(VFIO_PCI_BAR0_REGION_INDEX).unwrap().0, pci::REGS_BAR_SIZE);
        assert_eq!(
            d.region_info(pci::DOORBELL_BAR).unwrap().0,
            128 << 10,
            "17 pages: 16 doorbells and the command ring's"
        );
        assert_eq!(d.region_info(1), Some((0, 0)));
        assert_eq!(d.region_info(VFIO_PCI_NUM_REGIONS), None);
    }

    #[test]
    fn accesses_past_the_end_are_refused() {
        let d = device();
        let mut b = [0u8; 8];
        assert!(matches!(d.region_read(0, pci::REGS_BAR_SIZE - 4, &mut b), Err(RegionError::OutOfRange { .. })));
        assert_eq!(d.region_read(1, 0, &mut b), Err(RegionError::NoRegion(1)));
        assert!(d.region_write(VFIO_PCI_CONFIG_REGION_INDEX, u64::MAX, &b).is_err());
        assert!(d.region_read(0, 0, &mut []).is_err());
    }

    #[test]
    fn registers_read_back_through_the_bar() {
        let d = device();
        d.region_write(0, u64::from(SCRATCH::OFFSET), &0x1234_5678u32.to_le_bytes()).unwrap();
        let mut b = [0u8; 4];
        d.region_read(0, u64::from(SCRATCH::OFFSET), &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0x1234_5678);
        d.region_read(0, u64::from(VERSION::OFFSET), &mut b).unwrap();
        assert_eq!(VERSION(u32::from_le_bytes(b)).major(), regs::VERSION_MAJOR);
        let mut odd = [0u8; 2];
        d.region_read(0, 1, &mut odd).unwrap();
        assert_eq!(odd, [0, 0], "unaligned access reads zero");
    }
}

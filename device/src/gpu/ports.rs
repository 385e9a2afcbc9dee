//! The GPU's ports: the narrow view of the rest of the device that everything under `gpu/`
//! works through — guest memory, VRAM, the interrupt cause block, the register file (GPU clock,
//! power-state register, mailbox transport), the doorbells, the command processor's wake-ups,
//! the tracer, and the part of the configuration the GPU reads (its name and injected faults
//! included).
//!
//! `gpu/` never sees the whole device: `device.rs` builds the ports from its blocks (shared
//! through `Arc`s) and hands them to [`Gpu::new`](super::shared::Gpu::new); a unit test builds
//! them from anonymous guest memory and a recording interrupt sink.

use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

use crate::config::{DeviceConfig, DoorbellModel, Fault, InterruptForm};
use crate::dma::GuestRam;
use crate::doorbell::DoorbellSource;
use crate::irq::InterruptBlock;
use crate::registers::RegisterFile;
use crate::trace::Tracer;
use crate::vram::Vram;

/// Eventfds that wake the command processor.
pub struct CmpWake {
    /// The process is shutting down.
    pub kill: EventFd,
    /// The device was reset.
    pub reset: EventFd,
    /// A mailbox command was submitted.
    pub mailbox: EventFd,
}

impl CmpWake {
    /// Three fresh non-blocking eventfds.
    pub fn new() -> std::io::Result<Self> {
        Ok(CmpWake {
            kill: EventFd::new(libc::EFD_NONBLOCK)?,
            reset: EventFd::new(libc::EFD_NONBLOCK)?,
            mailbox: EventFd::new(libc::EFD_NONBLOCK)?,
        })
    }
}

/// The configuration the GPU reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuConfig {
    /// The device's name, prefixed to log lines.
    pub name: String,
    /// Number of physical doorbells.
    pub doorbells: u32,
    /// Number of MSI-X vectors.
    pub msix_vectors: u16,
    /// Doorbell model.
    pub doorbell_model: DoorbellModel,
    /// Native-fence interrupt record form.
    pub interrupt_form: InterruptForm,
    /// No 64-bit atomics: no native fences, 32-bit monitored-fence stores.
    pub no_64bit_atomics: bool,
    /// No native fences: monitored fences and kernel-mode queues only.
    pub no_native_fences: bool,
    /// Engines that cannot write fences themselves.
    pub engines_without_fence_writes: Vec<u32>,
    /// A command buffer executing longer than this (fence waits excluded) hangs its queue.
    pub hang_timeout_ms: u64,
    /// An engine idle this long asks the driver for F1.
    pub idle_f1_ms: u64,
    /// Injected faults.
    pub faults: Vec<Fault>,
    /// No context save: command buffers and split parts run back to back.
    pub no_context_save: bool,
    /// Slots of the `BIND_SLOT` resource table.
    pub bind_slots: u32,
    /// The command ring's doorbell page, if the device has the ring.
    pub cmd_ring_doorbell: Option<u32>,
}

impl GpuConfig {
    /// Whether `fault` is injected.
    pub fn has_fault(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }
}

impl From<&DeviceConfig> for GpuConfig {
    fn from(c: &DeviceConfig) -> Self {
        GpuConfig {
            name: c.name.clone(),
            doorbells: c.doorbells,
            msix_vectors: c.msix_vectors,
            doorbell_model: c.doorbell_model,
            interrupt_form: c.interrupt_form,
            no_64bit_atomics: c.no_64bit_atomics,
            no_native_fences: c.no_native_fences,
            engines_without_fence_writes: c.engines_without_fence_writes.clone(),
            hang_timeout_ms: c.hang_timeout_ms,
            idle_f1_ms: c.idle_f1_ms,
            faults: c.faults.clone(),
            no_context_save: c.no_context_save,
            bind_slots: c.bind_slots,
            cmd_ring_doorbell: c.cmd_ring_doorbell(),
        }
    }
}

/// Everything outside `gpu/` that the GPU uses.
pub struct Ports {
    /// What the GPU reads of the configuration.
    pub config: GpuConfig,
    /// Guest memory mapped for DMA.
    pub ram: Arc<GuestRam>,
    /// Device memory.
    pub vram: Arc<Vram>,
    /// The interrupt cause block (and through it the interrupt sink).
    pub interrupts: Arc<InterruptBlock>,
    /// The register file: the GPU clock (`timestamp`), the power-state register and the mailbox
    /// transport (`pending_mailbox`, `complete_mailbox`, `enabled`).
    pub regs: Arc<RegisterFile>,
    /// Where rung doorbells are learnt.
    pub doorbells: Arc<dyn DoorbellSource>,
    /// The command processor's wake-ups.
    pub wake: Arc<CmpWake>,
    /// Structured tracing.
    pub tracer: Arc<Tracer>,
}

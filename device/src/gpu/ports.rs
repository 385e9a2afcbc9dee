//! The GPU's ports: the narrow view of the rest of the device that everything under `gpu/`
//! works through — guest memory, VRAM, the interrupt cause block, the register file (GPU clock,
//! power-state register, mailbox transport), the doorbells, the command processor's wake-ups,
//! the tracer, the input recorder, and the device's configuration (shared, of which the GPU reads its name, its GPU
//! part and the injections).
//!
//! `gpu/` never sees the whole device: `device.rs` builds the ports from its blocks (shared
//! through `Arc`s) and hands them to [`Gpu::new`](super::shared::Gpu::new); a unit test builds
//! them from anonymous guest memory and a recording interrupt sink.

use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

use crate::config::DeviceConfig;
use crate::dma::GuestRam;
use crate::doorbell::DoorbellSource;
use crate::irq::InterruptBlock;
use crate::record::RecordSlot;
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

/// Everything outside `gpu/` that the GPU uses.
pub struct Ports {
    /// The device's configuration, shared with the device (not a copy): `gpu/` reads its
    /// name, its GPU part (`config.gpu`) and its test-only injections (`config.inject`).
    pub config: Arc<DeviceConfig>,
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
    /// The input recorder, if the device records: the doorbell values the command processor
    /// takes and each acquisition of the objects' lock.
    pub recording: RecordSlot,
}

//! The BAR0 register file: identity, capabilities, control, timestamp and mailbox registers.
//!
//! Registers are atomics so the vfio-user socket thread (which serves guest accesses) and the
//! command processor (which completes mailbox commands) share them without locks; the socket
//! thread never waits on the command processor. The interrupt block lives in
//! [`crate::irq::InterruptBlock`]; this file decodes its offsets and forwards.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use belfry_abi::mailbox::Status;
use belfry_abi::regs::{self, *};
use belfry_abi::{irq, pci};

use crate::config::DeviceConfig;
use crate::record::{self, RecordSlot};

/// A mailbox command taken by the command processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MailboxRequest {
    /// Guest physical address of the argument block.
    pub address: u64,
    /// Sequence number from `MB_SUBMIT`.
    pub seq: u32,
    /// Reset generation at submit time; a completion from an older generation is dropped.
    pub generation: u64,
}

/// What a register write asks the rest of the device to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteEffect {
    /// Nothing beyond the register update.
    None,
    /// `CONTROL.reset` was written.
    Reset,
    /// A mailbox command was submitted: wake the command processor.
    MailboxSubmitted(MailboxRequest),
    /// `MB_SUBMIT` while a command was in flight: dropped.
    MailboxBusy(u32),
    /// `MB_SUBMIT` (this sequence number) in D3hot: ignored, as a real function's memory space
    /// is off in D3hot (PWR-01: the device executes nothing there).
    MailboxIgnoredD3(u32),
    /// `DB_WAKE` was written (with this doorbell index): wake a sleeping command processor.
    DoorbellWake(u32),
    /// `INT_CLEAR` was written with these bits.
    IntClear(u32),
    /// `INT_MASK` was written with this value.
    IntMask(u32),
    /// `IRQ_MODERATION` was written with this interval (µs).
    IrqModeration(u32),
    /// `CMD_RING_CTRL.enable` was set (the head is zeroed): the ring's doorbell (this index)
    /// starts from zero.
    CmdRingEnabled(u32),
    /// Write to a read-only or undeclared offset: ignored.
    Ignored,
}

/// The register file.
pub struct RegisterFile {
    caps: CAPS,
    doorbell_info: DOORBELL_INFO,
    engine_info: ENGINE_INFO,
    msix_info: MSIX_INFO,
    test_injections: TEST_INJECTIONS,
    split_info: SPLIT_INFO,
    vram_size: u64,
    bad_identity: bool,
    start: Instant,
    last_timestamp: AtomicU64,
    /// The input recorder, if the device records: every GPU clock read.
    pub recording: RecordSlot,
    control: AtomicU32,
    scratch: AtomicU32,
    /// `OS_CAPS` as the driver wrote it (CAP-04).
    os_caps: AtomicU32,
    power_state: AtomicU32,
    /// The PM capability's PMCSR says D3hot (not `SET_DEVICE_POWER`'s D3, which the mailbox
    /// itself must be able to undo).
    pci_d3hot: AtomicBool,
    /// The command ring's doorbell rang in D3hot: its entries run on the return to D0.
    cmd_ring_latched: AtomicBool,
    timestamp_hi_latch: AtomicU32,
    mb_arg_lo: AtomicU32,
    mb_arg_hi: AtomicU32,
    mb_status: AtomicU32,
    mb_pending: AtomicU64,
    mb_pending_seq: AtomicU32,
    generation: AtomicU64,
    cmd_ring_doorbell: Option<u32>,
    cmd_base_lo: AtomicU32,
    cmd_base_hi: AtomicU32,
    cmd_size: AtomicU32,
    cmd_ctrl: AtomicU32,
    cmd_head: AtomicU32,
    cmd_error: AtomicU32,
    /// `LOG_VERBOSE.enable` (LOG-20).
    log_verbose: AtomicBool,
}

/// The command ring as programmed (`CMD_RING_*`), for the command processor; nothing checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdRing {
    /// `CMD_RING_BASE`.
    pub base: u64,
    /// `CMD_RING_SIZE.entries`.
    pub size: u32,
    /// `CMD_RING_HEAD`.
    pub head: u32,
    /// The ring's doorbell page.
    pub doorbell: u32,
}

impl RegisterFile {
    /// Registers of a device configured by `config`.
    pub fn new(config: &DeviceConfig) -> Self {
        use crate::config::{DoorbellModel, DoorbellTransport, InterruptForm};
        let gpu = &config.gpu;
        let global = gpu.doorbell_model == DoorbellModel::Global;
        let native = !gpu.no_64bit_atomics && !gpu.no_native_fences;
        let caps = CAPS::default()
            .with_dedicated_doorbells(!global)
            .with_global_doorbell(global)
            .with_native_fence(native)
            .with_monitored_fence(true)
            .with_no_64bit_atomics(gpu.no_64bit_atomics)
            .with_optimized_default_fence(native)
            .with_intra_gpu_fence(native)
            .with_cross_adapter_fence(native)
            .with_optimized_interrupt(gpu.interrupt_form == InterruptForm::PerQueue)
            .with_fence_handle_records(gpu.interrupt_form == InterruptForm::Exact)
            .with_queue_array_interrupt(gpu.interrupt_form == InterruptForm::QueueArray)
            .with_map_to_gpu_system_process(true)
            .with_user_mode_submission(!gpu.no_native_fences)
            .with_shared_doorbells(config.transport.doorbell_transport == DoorbellTransport::Shared)
            .with_no_context_save(gpu.no_context_save)
            .with_cmd_ring(gpu.cmd_ring_doorbell().is_some())
            .with_vram_lost_in_d3(gpu.vram_lost_in_d3)
            .with_irq_moderation(true)
            .with_verbose_log(true)
            .with_peer_signals(native && gpu.peer_signals)
            .with_fence_storage_move(native);
        let all_engines = (1u32 << belfry_abi::engine::ENGINE_COUNT) - 1;
        let no_fence_writes = gpu.engines_without_fence_writes.iter().fold(0u32, |m, e| m | (1 << e));
        RegisterFile {
            caps,
            doorbell_info: DOORBELL_INFO::default()
                .with_count(gpu.queue_doorbells())
                .with_page_shift(pci::DOORBELL_PAGE_SIZE.trailing_zeros()),
            engine_info: ENGINE_INFO::default()
                .with_count(belfry_abi::engine::ENGINE_COUNT)
                .with_user_mode_submission_mask(if gpu.no_native_fences { 0 } else { all_engines })
                .with_fence_write_mask(all_engines & !no_fence_writes),
            msix_info: MSIX_INFO::default().with_vectors(u32::from(gpu.msix_vectors)),
            test_injections: config.inject.register(),
            split_info: SPLIT_INFO::default().with_slots(gpu.bind_slots),
            vram_size: gpu.vram_size,
            bad_identity: config.inject.bad_identity(),
            start: Instant::now(),
            recording: RecordSlot::default(),
            last_timestamp: AtomicU64::new(0),
            control: AtomicU32::new(0),
            scratch: AtomicU32::new(0),
            os_caps: AtomicU32::new(0),
            power_state: AtomicU32::new(0),
            pci_d3hot: AtomicBool::new(false),
            cmd_ring_latched: AtomicBool::new(false),
            timestamp_hi_latch: AtomicU32::new(0),
            mb_arg_lo: AtomicU32::new(0),
            mb_arg_hi: AtomicU32::new(0),
            mb_status: AtomicU32::new(0),
            mb_pending: AtomicU64::new(0),
            mb_pending_seq: AtomicU32::new(0),
            generation: AtomicU64::new(0),
            cmd_ring_doorbell: gpu.cmd_ring_doorbell(),
            cmd_base_lo: AtomicU32::new(0),
            cmd_base_hi: AtomicU32::new(0),
            cmd_size: AtomicU32::new(0),
            cmd_ctrl: AtomicU32::new(0),
            cmd_head: AtomicU32::new(0),
            cmd_error: AtomicU32::new(0),
            log_verbose: AtomicBool::new(false),
        }
    }

    /// The GPU timestamp: nanoseconds since the device started, strictly increasing across
    /// every read (two reads in the same nanosecond get consecutive values), so ordered work
    /// always carries ordered timestamps.
    pub fn timestamp(&self) -> u64 {
        let ns = self.next_timestamp();
        self.recording.clock(ns).unwrap_or(ns)
    }

    /// How long ago `since` was, as an input of the input log: recorded as a `clock` record of
    /// its nanoseconds and, replaying, the recorded value, so a decision taken on it (the idle
    /// engines' F1 check) is the recorded one.
    pub fn elapsed_since(&self, since: Instant) -> std::time::Duration {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        std::time::Duration::from_nanos(self.recording.clock(ns).unwrap_or(ns))
    }

    fn next_timestamp(&self) -> u64 {
        let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let prev = self.last_timestamp.fetch_max(now, Ordering::AcqRel);
        if now > prev {
            now
        } else {
            self.last_timestamp.fetch_add(1, Ordering::AcqRel) + 1
        }
    }

    /// Whether `CONTROL.enable` is set.
    pub fn enabled(&self) -> bool {
        CONTROL(self.control.load(Ordering::Acquire)).enable()
    }

    /// The capability bits this device advertises.
    pub fn caps(&self) -> CAPS {
        CAPS(self.caps.0)
    }

    /// Whether the OS supports fences of `kind` (`monitored_in_vram`: an optimized DEFAULT
    /// fence), as the driver reported in `OS_CAPS` (CAP-04); every kind while it reported no
    /// table (version 0). A table of a version this device does not know supports none of the
    /// optional types.
    pub fn os_supports(&self, kind: belfry_abi::fence::FenceKind, monitored_in_vram: bool) -> bool {
        use belfry_abi::fence::FenceKind;
        let os = OS_CAPS(self.os_caps.load(Ordering::Acquire));
        if os.version() == 0 {
            return true;
        }
        let known = os.version() == regs::OS_CAPS_VERSION;
        match kind {
            FenceKind::IntraGpu => known && os.intra_gpu_fence(),
            FenceKind::Default if monitored_in_vram => known && os.optimized_default_fence(),
            _ => true,
        }
    }

    /// Current reset generation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Reads the register at `offset` (a 4-byte aligned BAR0 offset). `irq` supplies the
    /// interrupt block's registers.
    pub fn read(&self, offset: u32, irq: &crate::irq::InterruptBlock) -> u32 {
        match offset {
            MAGIC::OFFSET if self.bad_identity => !regs::MAGIC_VALUE,
            MAGIC::OFFSET => regs::MAGIC_VALUE,
            VERSION::OFFSET => VERSION::default().with_major(regs::VERSION_MAJOR).with_minor(regs::VERSION_MINOR).0,
            CAPS::OFFSET => self.caps.0,
            DOORBELL_INFO::OFFSET => self.doorbell_info.0,
            ENGINE_INFO::OFFSET => self.engine_info.0,
            MSIX_INFO::OFFSET => self.msix_info.0,
            TEST_INJECTIONS::OFFSET => self.test_injections.0,
            SPLIT_INFO::OFFSET => self.split_info.0,
            VRAM_SIZE_LO::OFFSET => (self.vram_size & 0xffff_ffff) as u32,
            VRAM_SIZE_HI::OFFSET => (self.vram_size >> 32) as u32,
            CONTROL::OFFSET => self.control.load(Ordering::Acquire),
            STATUS::OFFSET => {
                STATUS::default()
                    .with_ready(self.enabled())
                    .with_mailbox_busy(MB_STATUS(self.mailbox_status()).busy())
                    .with_power_state(self.power_state.load(Ordering::Acquire))
                    .0
            }
            SCRATCH::OFFSET => self.scratch.load(Ordering::Acquire),
            OS_CAPS::OFFSET => self.os_caps.load(Ordering::Acquire),
            INT_RAWSTAT::OFFSET => irq.rawstat(),
            INT_MASK::OFFSET => irq.mask(),
            INT_STATUS::OFFSET => irq.status(),
            TIMESTAMP_LO::OFFSET => {
                let ts = self.timestamp();
                self.timestamp_hi_latch.store((ts >> 32) as u32, Ordering::Release);
                (ts & 0xffff_ffff) as u32
            }
            TIMESTAMP_HI::OFFSET => self.timestamp_hi_latch.load(Ordering::Acquire),
            TIMESTAMP_FREQ::OFFSET => regs::TIMESTAMP_FREQUENCY_HZ,
            MB_ARG_LO::OFFSET => self.mb_arg_lo.load(Ordering::Acquire),
            MB_ARG_HI::OFFSET => self.mb_arg_hi.load(Ordering::Acquire),
            MB_STATUS::OFFSET => self.mailbox_status(),
            CMD_RING_BASE_LO::OFFSET if self.cmd_ring_doorbell.is_some() => self.cmd_base_lo.load(Ordering::Acquire),
            CMD_RING_BASE_HI::OFFSET if self.cmd_ring_doorbell.is_some() => self.cmd_base_hi.load(Ordering::Acquire),
            CMD_RING_SIZE::OFFSET if self.cmd_ring_doorbell.is_some() => self.cmd_size.load(Ordering::Acquire),
            CMD_RING_CTRL::OFFSET if self.cmd_ring_doorbell.is_some() => self.cmd_ctrl.load(Ordering::Acquire),
            CMD_RING_DOORBELL::OFFSET => self.cmd_ring_doorbell.unwrap_or(0),
            CMD_RING_HEAD::OFFSET => self.cmd_head.load(Ordering::Acquire),
            CMD_RING_ERROR::OFFSET => self.cmd_error.load(Ordering::Acquire),
            IRQ_MODERATION::OFFSET => irq.moderation_us(),
            IRQ_MODERATED::OFFSET => irq.moderated_count(),
            LOG_VERBOSE::OFFSET => LOG_VERBOSE::default().with_enable(self.log_verbose()).0,
            // Write-only registers and undeclared offsets read as zero.
            _ => 0,
        }
    }

    /// Writes `value` to the register at `offset` and says what else must happen.
    pub fn write(&self, offset: u32, value: u32) -> WriteEffect {
        match offset {
            CONTROL::OFFSET => {
                let v = CONTROL(value);
                self.control.store(v.with_reset(false).0 & CONTROL::default().with_enable(true).0, Ordering::Release);
                if v.reset() {
                    WriteEffect::Reset
                } else {
                    WriteEffect::None
                }
            }
            SCRATCH::OFFSET => {
                self.scratch.store(value, Ordering::Release);
                WriteEffect::None
            }
            OS_CAPS::OFFSET => {
                let v = OS_CAPS(value);
                let kept = OS_CAPS::default()
                    .with_version(v.version())
                    .with_optimized_default_fence(v.optimized_default_fence())
                    .with_intra_gpu_fence(v.intra_gpu_fence());
                self.os_caps.store(kept.0, Ordering::Release);
                WriteEffect::None
            }
            INT_CLEAR::OFFSET => WriteEffect::IntClear(value & irq::cause::ALL),
            INT_MASK::OFFSET => WriteEffect::IntMask(value),
            IRQ_MODERATION::OFFSET => WriteEffect::IrqModeration(IRQ_MODERATION(value).usecs()),
            LOG_VERBOSE::OFFSET => {
                self.log_verbose.store(LOG_VERBOSE(value).enable(), Ordering::Release);
                WriteEffect::None
            }
            MB_ARG_LO::OFFSET => {
                self.mb_arg_lo.store(value, Ordering::Release);
                WriteEffect::None
            }
            MB_ARG_HI::OFFSET => {
                self.mb_arg_hi.store(value, Ordering::Release);
                WriteEffect::None
            }
            MB_SUBMIT::OFFSET if self.pci_d3hot() => WriteEffect::MailboxIgnoredD3(MB_SUBMIT(value).seq()),
            MB_SUBMIT::OFFSET => self.submit(MB_SUBMIT(value).seq()),
            DB_WAKE::OFFSET => WriteEffect::DoorbellWake(DB_WAKE(value).index()),
            CMD_RING_BASE_LO::OFFSET | CMD_RING_BASE_HI::OFFSET | CMD_RING_SIZE::OFFSET | CMD_RING_CTRL::OFFSET => {
                self.write_cmd_ring(offset, value)
            }
            _ => WriteEffect::Ignored,
        }
    }

    fn write_cmd_ring(&self, offset: u32, value: u32) -> WriteEffect {
        let Some(doorbell) = self.cmd_ring_doorbell else { return WriteEffect::Ignored };
        self.recording.ordered(record::ticket, || self.store_cmd_ring(doorbell, offset, value))
    }

    fn store_cmd_ring(&self, doorbell: u32, offset: u32, value: u32) -> WriteEffect {
        match offset {
            CMD_RING_BASE_LO::OFFSET => self.cmd_base_lo.store(value, Ordering::Release),
            CMD_RING_BASE_HI::OFFSET => self.cmd_base_hi.store(value, Ordering::Release),
            CMD_RING_SIZE::OFFSET => self.cmd_size.store(CMD_RING_SIZE(value).entries(), Ordering::Release),
            _ => {
                let enable = CMD_RING_CTRL(value).enable();
                let was =
                    CMD_RING_CTRL(self.cmd_ctrl.swap(CMD_RING_CTRL::default().with_enable(enable).0, Ordering::AcqRel));
                if enable && !was.enable() {
                    self.cmd_head.store(0, Ordering::Release);
                    self.cmd_error.store(0, Ordering::Release);
                    return WriteEffect::CmdRingEnabled(doorbell);
                }
            }
        }
        WriteEffect::None
    }

    /// The command ring, if the device has one and it is enabled. The command processor's
    /// look, the driver's writes of the ring's registers and the reset are ordered in an input
    /// log (a ticket each), so a replay's processor finds the ring the recorded one did.
    pub fn cmd_ring(&self) -> Option<CmdRing> {
        let doorbell = self.cmd_ring_doorbell?;
        self.recording.ordered(record::ticket, || {
            CMD_RING_CTRL(self.cmd_ctrl.load(Ordering::Acquire)).enable().then(|| CmdRing {
                base: u64::from(self.cmd_base_hi.load(Ordering::Acquire)) << 32
                    | u64::from(self.cmd_base_lo.load(Ordering::Acquire)),
                size: self.cmd_size.load(Ordering::Acquire),
                head: self.cmd_head.load(Ordering::Acquire),
                doorbell,
            })
        })
    }

    /// The command processor consumed the ring up to `head`.
    pub fn set_cmd_head(&self, head: u32) {
        self.cmd_head.store(head, Ordering::Release);
    }

    /// Counts a ring-level error (`CMD_RING_ERROR`).
    pub fn cmd_ring_error(&self, error: belfry_abi::cmdring::RingError) {
        let old = CMD_RING_ERROR(self.cmd_error.load(Ordering::Acquire));
        let new = old.with_count(old.count().saturating_add(1).min(0xffff)).with_last(error as u32);
        self.cmd_error.store(new.0, Ordering::Release);
    }

    fn submit(&self, seq: u32) -> WriteEffect {
        let busy = MB_STATUS::default().with_busy(true).0;
        let prev = self.mb_status.fetch_or(busy, Ordering::AcqRel);
        if MB_STATUS(prev).busy() {
            return WriteEffect::MailboxBusy(seq);
        }
        let address =
            u64::from(self.mb_arg_hi.load(Ordering::Acquire)) << 32 | u64::from(self.mb_arg_lo.load(Ordering::Acquire));
        self.mb_pending.store(address, Ordering::Release);
        self.mb_pending_seq.store(seq, Ordering::Release);
        WriteEffect::MailboxSubmitted(MailboxRequest { address, seq, generation: self.generation() })
    }

    /// The command in flight, if any (for the command processor).
    pub fn pending_mailbox(&self) -> Option<MailboxRequest> {
        MB_STATUS(self.mb_status.load(Ordering::Acquire)).busy().then(|| MailboxRequest {
            address: self.mb_pending.load(Ordering::Acquire),
            seq: self.mb_pending_seq.load(Ordering::Acquire),
            generation: self.generation(),
        })
    }

    /// Completes the command in flight with `status`; false if a reset intervened.
    pub fn complete_mailbox(&self, request: MailboxRequest, status: Status) -> bool {
        if request.generation != self.generation() {
            return false;
        }
        let v = MB_STATUS::default().with_seq(request.seq).with_status(status as u32);
        self.recording.ordered(record::ticket, || self.mb_status.store(v.0, Ordering::Release));
        true
    }

    /// `MB_STATUS` as a register read finds it. The command processor's completion and this
    /// load are ordered in an input log (a ticket each), so a replay's client reads the status
    /// the recorded one did rather than whichever side of the completion it comes on.
    fn mailbox_status(&self) -> u32 {
        self.recording.ordered(record::ticket, || self.mb_status.load(Ordering::Acquire))
    }

    /// Records the PM capability's power state (D3hot or not): in D3hot `MB_SUBMIT` is ignored
    /// and the command ring does not run.
    pub fn set_pci_d3hot(&self, d3hot: bool) {
        self.pci_d3hot.store(d3hot, Ordering::Release);
    }

    /// Whether the PM capability's PMCSR says D3hot.
    pub fn pci_d3hot(&self) -> bool {
        self.pci_d3hot.load(Ordering::Acquire)
    }

    /// Notes that the command ring's doorbell rang in D3hot.
    pub fn latch_cmd_ring(&self) {
        self.cmd_ring_latched.store(true, Ordering::Release);
    }

    /// Whether the command ring's doorbell rang in D3hot and has not run since.
    pub fn cmd_ring_latched(&self) -> bool {
        self.cmd_ring_latched.load(Ordering::Acquire)
    }

    /// Takes the command-ring latch once the device is out of D3hot; whether it was set.
    pub fn take_cmd_ring_latch(&self) -> bool {
        !self.pci_d3hot() && self.cmd_ring_latched.swap(false, Ordering::AcqRel)
    }

    /// Records the PCI power state for `STATUS.power_state`.
    pub fn set_power_state(&self, state: u8) {
        self.power_state.store(u32::from(state), Ordering::Release);
    }

    /// Power-on values; bumps the generation so in-flight mailbox work is dropped.
    pub fn reset(&self) {
        self.recording.ordered(record::ticket, || self.store_power_on());
    }

    fn store_power_on(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        for r in [
            &self.control,
            &self.scratch,
            &self.os_caps,
            &self.mb_arg_lo,
            &self.mb_arg_hi,
            &self.mb_status,
            &self.power_state,
            &self.cmd_base_lo,
            &self.cmd_base_hi,
            &self.cmd_size,
            &self.cmd_ctrl,
            &self.cmd_head,
            &self.cmd_error,
        ] {
            r.store(0, Ordering::Release);
        }
        self.cmd_ring_latched.store(false, Ordering::Release);
        self.log_verbose.store(false, Ordering::Release);
    }

    /// Whether the driver has verbose fence logging on (`LOG_VERBOSE`, LOG-20).
    pub fn log_verbose(&self) -> bool {
        self.log_verbose.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::irq::{InterruptBlock, InterruptSink};
    use std::sync::Arc;

    struct Nothing;
    impl InterruptSink for Nothing {
        fn trigger(&self, _: u16, _: u32) -> crate::trace::Delivery {
            crate::trace::Delivery::Msix
        }
    }

    fn setup(config: DeviceConfig) -> (RegisterFile, InterruptBlock) {
        (RegisterFile::new(&config), InterruptBlock::new(Arc::new(Nothing), 4))
    }

    #[test]
    fn identity_registers_follow_the_configuration() {
        let (r, irq) = setup(DeviceConfig::from_flags(["--doorbells", "5", "--vram-size", "1G"]).unwrap());
        assert_eq!(r.read(MAGIC::OFFSET, &irq), regs::MAGIC_VALUE);
        assert_eq!(DOORBELL_INFO(r.read(DOORBELL_INFO::OFFSET, &irq)).count(), 5);
        assert_eq!(DOORBELL_INFO(r.read(DOORBELL_INFO::OFFSET, &irq)).page_shift(), 12);
        assert_eq!(r.read(VRAM_SIZE_LO::OFFSET, &irq), 1 << 30);
        let (bad, irq) = setup(DeviceConfig::from_flags(["--doorbells", "5", "--inject", "bad-identity"]).unwrap());
        assert_ne!(bad.read(MAGIC::OFFSET, &irq), regs::MAGIC_VALUE);
    }

    #[test]
    fn timestamp_halves_do_not_tear_and_never_go_back() {
        let (r, irq) = setup(DeviceConfig::default());
        let mut last = 0u64;
        for _ in 0..1000 {
            let lo = r.read(TIMESTAMP_LO::OFFSET, &irq);
            let hi = r.read(TIMESTAMP_HI::OFFSET, &irq);
            let ts = u64::from(hi) << 32 | u64::from(lo);
            assert!(ts > last, "strictly increasing");
            last = ts;
        }
    }

    #[test]
    fn mailbox_submit_is_exclusive_and_reset_drops_completion() {
        let (r, irq) = setup(DeviceConfig::default());
        r.write(MB_ARG_LO::OFFSET, 0x1000);
        r.write(MB_ARG_HI::OFFSET, 0x1);
        let WriteEffect::MailboxSubmitted(req) = r.write(MB_SUBMIT::OFFSET, 7) else { panic!() };
        assert_eq!(req.address, 0x1_0000_1000);
        assert_eq!(r.write(MB_SUBMIT::OFFSET, 8), WriteEffect::MailboxBusy(8));
        assert!(STATUS(r.read(STATUS::OFFSET, &irq)).mailbox_busy());
        assert!(r.complete_mailbox(req, Status::Ok));
        let st = MB_STATUS(r.read(MB_STATUS::OFFSET, &irq));
        assert_eq!((st.busy(), st.seq(), st.status()), (false, 7, Status::Ok as u32));
        let WriteEffect::MailboxSubmitted(req) = r.write(MB_SUBMIT::OFFSET, 9) else { panic!() };
        r.reset();
        assert!(!r.complete_mailbox(req, Status::Ok));
        assert_eq!(r.read(MB_STATUS::OFFSET, &irq), 0);
    }

    #[test]
    fn control_keeps_enable_and_reports_reset() {
        let (r, irq) = setup(DeviceConfig::default());
        assert_eq!(r.write(CONTROL::OFFSET, CONTROL::default().with_enable(true).0), WriteEffect::None);
        assert!(r.enabled());
        assert_eq!(r.write(CONTROL::OFFSET, 0xffff_ffff), WriteEffect::Reset);
        assert_eq!(r.read(CONTROL::OFFSET, &irq), 1, "reset bit reads as 0, unknown bits dropped");
        assert_eq!(r.write(MAGIC::OFFSET, 0), WriteEffect::Ignored);
    }
}

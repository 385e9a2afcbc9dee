// SPDX-License-Identifier: GPL-2.0

//! Layer 4: the interrupt handlers, one per MSI-X vector (named by `hw::vectors`), orchestrating
//! the domain layer.
//!
//! The hard handler never reads a register (a trapped BAR read costs 30-84 µs under TCG): the
//! core recognises a mailbox completion by the `status` word the device wrote into the mailbox
//! block in guest memory and consumes the interrupt ring; the records that concern the domain
//! are handed to it here (native-fence records become work for the thread, `NOTIFY` records
//! advance their queue's software-signal token); the causes seen are acknowledged with one
//! write to `INT_CLEAR`, which the core makes under its events lock and never on a device
//! marked D3 (an interrupt raised before D3 entry can arrive after the mark). Work that sleeps runs in the handler's thread, in this order: timeout
//! recovery of the engines the device reported Hung, the F1 requests of idle engines, device
//! loss for faulted contexts (doorbells), the native-fence paths (which read and flush the
//! fence logs), the eventfd waits, the release of held kernel-mode work, and the `sync_file`
//! exports of the monitored fences that moved.

use kernel::{
    irq::{IrqReturn, ThreadedHandler, ThreadedIrqReturn},
    sync::Arc,
};

use crate::{
    abi::{engine::EngineState, ids::QueueId, irq::RecordKind, regs},
    fence::{eventfd, irqpath, syncfile},
    gpu::Gpu,
    hw::{bringup::Hw, core::Record},
    xad::Change,
};

/// The handler of one MSI-X vector.
pub(crate) struct VectorHandler<'bound> {
    /// Registers of the device (for `INT_CLEAR`).
    hw: Arc<Hw<'bound>>,
    /// The domain objects.
    gpu: Gpu,
    /// The vector this handler serves.
    vector: u16,
}

impl<'bound> VectorHandler<'bound> {
    /// The handler of `vector`.
    pub(crate) fn new(hw: Arc<Hw<'bound>>, gpu: Gpu, vector: u16) -> Self {
        Self { hw, gpu, vector }
    }
}

/// Hands interrupt-ring record `r` to the domain (hard handler).
fn dispatch(gpu: &Gpu, r: &Record<'_>) {
    let kind = r.kind();
    if kind == RecordKind::NativeFenceSignaled as u32 {
        gpu.logs
            .note(|w| w.native(r.fence(), r.queue(), r.value(), r.address(), r.detail()));
    } else if kind == RecordKind::MonitoredFenceSignaled as u32 || kind == RecordKind::Notify as u32
    {
        gpu.logs.note(|w| w.monitored = true);
        if kind == RecordKind::Notify as u32 {
            // A software signal packet ran (FEN-10): the thread writes its fence.
            gpu.held.notified(QueueId::new(r.queue()), r.value());
        }
    } else if kind == RecordKind::EngineState as u32 && r.detail() == EngineState::Hung as u32 {
        // The device's watchdog stopped a queue (ENG-02): timeout recovery in the thread.
        gpu.watch.note_device_hang(r.engine());
    } else if kind == RecordKind::EngineState as u32
        && r.detail() == EngineState::TransitionToF1 as u32
    {
        // An idle engine asks for F1 (ENG-02, ENG-03): doorbells, then F1, in the thread.
        gpu.watch.note_f1_request(r.engine(), r.value());
    }
}

impl ThreadedHandler for VectorHandler<'_> {
    fn handle(&self) -> ThreadedIrqReturn {
        // Every Belfry cause may arrive on this vector (a device with few vectors folds causes
        // onto vector 0): the core looks at the mailbox block and the interrupt ring, both in
        // memory. MSI-X vectors are never shared, so the interrupt is ours either way.
        let core = self.hw.core();
        let faults = core.handle_interrupt(
            self.vector,
            |r| dispatch(&self.gpu, r),
            |clear| self.hw.write(regs::INT_CLEAR::default().with_causes(clear)),
        );
        // Fence work covers fence records (monitored-fence and NOTIFY records among them, which
        // release work held behind monitored-fence waits, FEN-12, FEN-15).
        if faults || self.gpu.logs.work_pending() || self.gpu.watch.thread_work_pending() {
            ThreadedIrqReturn::WakeThread
        } else {
            ThreadedIrqReturn::Handled
        }
    }

    /// Process context, after a context-fault or fence record: the faulted contexts' doorbells
    /// go to DISCONNECTED_ABORT (device loss for that context, DB-16); the fence records' paths
    /// read the fence logs (flushing them, which sleeps on the mailbox) and release the CPU
    /// waits they find satisfied (`irqpath`); the eventfd waits their fences satisfy are
    /// signaled (`eventfd`, FEN-18); held kernel-mode work whose monitored-fence wait is now
    /// reached goes to the device (`kring`, FEN-15).
    fn handle_threaded(&self) -> IrqReturn {
        let gpu = &self.gpu;
        self.hw.core().note_thread();
        // Engines the device reported Hung: reset, the guilty context lost (ENG-06, DB-16).
        let hung = gpu.watch.take_device_hangs();
        for engine in (0..u32::BITS).filter(|e| hung & (1 << e) != 0) {
            gpu.watch.count(|s| s.hangs_by_device += 1);
            // Failures are logged by the mailbox.
            let _ = gpu.recover_engine(engine, 0);
        }
        // Engines asking for F1 (ENG-04): their doorbells disconnected, then F1.
        let idle = gpu.watch.take_f1_requests();
        for engine in (0..u32::BITS).filter(|e| idle & (1 << e) != 0) {
            // Failures are logged by the mailbox.
            let _ = gpu.enter_f1(engine, gpu.watch.f1_request_kicks(engine));
        }
        let faults = gpu.fences.fault_count();
        let lost = gpu.doorbells.process_faults();
        // The waits on a faulted context's work end now (ECANCELED), not at their timeout,
        // and so do those on fences its unexecuted work was going to signal.
        gpu.fences.wake_after_faults(faults);
        gpu.end_lost_waits(&lost);
        let fence_work = irqpath::process(&gpu.logs, &gpu.fences);
        // MV-07 (2): the MonitoredValues of the fences whose waits were just released, after
        // the wake-up and off the released waiters' way back.
        gpu.fences.rearm_released();
        eventfd::complete(&gpu.fences, &gpu.logs);
        // Held work or software signals: a cross-adapter value may have been written from the
        // CPU here, which this device's own GPU waiters must be told too (XAD-13, XAD-14).
        let software = gpu.held.waiting();
        gpu.held.release();
        // Monitored fences the records (or the software signals just written) moved: their
        // `sync_file` exports.
        syncfile::complete(&gpu.fences);
        // Every signal of a cross-adapter fence interrupts with a fence record (XAD-05): the
        // other devices learn it here (XAD-07). A run without fence records (an engine's F1
        // request, a hang) saw no value move: propagating then would tell a device of a value
        // it wrote itself, a notification nothing needs.
        if fence_work || software {
            let change = if software {
                Change::SoftwareSignal
            } else {
                Change::FenceRecords
            };
            gpu.xad.propagate(change);
        }
        IrqReturn::Handled
    }
}

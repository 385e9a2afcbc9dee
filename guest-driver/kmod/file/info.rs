// SPDX-License-Identifier: GPL-2.0

//! Information ioctls: `QUERY_CAPS`, `DEBUG_STATS`, `FENCE_DEBUG`, `RECOVERY_DEBUG`,
//! `READ_TIMELINE`'s and `MM_STATS`'s visibility (the timeline's events and `IRQ_DEBUG` are the
//! fence logs' own, `fence::log`), `IRQ_MODERATION`, `VERBOSE_LOG` (the switch is
//! `fence::verbose`'s).

use kernel::{prelude::*, sync::atomic::Relaxed};

use super::{context::MAX_ALLOCATION, state::BelfryFile};
use crate::{
    abi::{uapi, uapi_debug, uapi_sync},
    bindings::{cap, eventfd::EventFd, pid::ProcessRef},
    fence::object::FENCE_STRIDE,
    hw::{dmamem::PAGE, objects::Kind},
};

impl BelfryFile {
    /// `QUERY_CAPS`.
    pub(super) fn query_caps(&self) -> uapi::QueryCaps {
        let info = self.gpu.core.info();
        let mut caps = uapi::QueryCaps {
            uapi_version: uapi::UAPI_VERSION,
            caps: info.caps.0,
            doorbell_count: info.doorbells,
            // CAST: a page.
            doorbell_size: PAGE as u32,
            engine_count: info.engines,
            user_mode_submission_engines: info.user_mode_engines,
            fence_write_engines: info.fence_write_engines,
            // CAST: 64.
            fence_stride: FENCE_STRIDE as u32,
            vram_size: info.vram_size,
            max_allocation: MAX_ALLOCATION,
            test_injections: info.test_injections.0,
            ..Default::default()
        };
        self.feature.fill(info.caps, info.os_caps, &mut caps);
        if crate::fence::syncfile::SUPPORTED && info.caps.monitored_fence() {
            caps.flags |= uapi_sync::CAPS_FLAG_SYNC_FILE_EXPORT;
        }
        caps
    }

    /// `DEBUG_STATS`.
    pub(super) fn debug_stats(&self) -> uapi_debug::DebugStats {
        let core = &self.gpu.core;
        let mut s = uapi_debug::DebugStats::default();
        core.stats(|ev| {
            s.interrupts_by_cause = ev.by_cause;
            s.faults = ev.faults;
            s.gpu_pages = ev.gpu_pages;
            s.ring_overflows = ev.overflows;
        });
        let counts = core.objects().counts;
        s.contexts = counts[Kind::Context as usize];
        s.queues = counts[Kind::Queue as usize];
        s.allocations = counts[Kind::Allocation as usize];
        s.doorbells = counts[Kind::Doorbell as usize];
        s.ioctls_by_caller = self.ioctls.load(Relaxed);
        let mut objects = core.objects();
        // CAST: saturating; counts of the module's own objects.
        s.system_va_slots = u32::try_from(objects.system_va_extent()).unwrap_or(u32::MAX);
        if let Ok(sys) = objects.system() {
            s.system_gpu_pages = sys.mapped_pages();
            s.system_page_tables = u32::try_from(sys.table_count()).unwrap_or(u32::MAX);
        }
        drop(objects);
        self.term.fill(&mut s);
        s
    }

    /// `IRQ_DEBUG`: the fence logs' counters and the interrupt ring's overflows.
    pub(super) fn irq_debug(&self) -> uapi_debug::IrqDebug {
        let mut s = self.gpu.logs.irq_debug();
        self.gpu.core.stats(|ev| s.ring_overflows = ev.overflows);
        s
    }

    /// `IRQ_MODERATION`: reads the device's interrupt moderation, or sets it (`CAP_SYS_ADMIN`).
    ///
    /// # Errors
    ///
    /// `EINVAL` for unknown flags or an interval above the maximum, `EPERM` to set without
    /// `CAP_SYS_ADMIN`, `EOPNOTSUPP` on a device without moderation, `ENODEV`, `EAGAIN`.
    pub(super) fn irq_moderation(&self, a: &mut uapi::IrqModeration) -> Result {
        if a.flags & !uapi::IRQ_MODERATION_SET != 0 {
            return Err(EINVAL);
        }
        let core = &self.gpu.core;
        if !core.info().caps.irq_moderation() {
            return Err(EOPNOTSUPP);
        }
        let set = if a.flags & uapi::IRQ_MODERATION_SET != 0 {
            if a.interval_us > crate::abi::regs::MAX_IRQ_MODERATION_US {
                return Err(EINVAL);
            }
            if !cap::capable(cap::Cap::SysAdmin) {
                return Err(EPERM);
            }
            Some(a.interval_us)
        } else {
            None
        };
        let (interval, held) = core.hw()?.irq_moderation(set)?;
        a.interval_us = interval;
        a.moderated = held;
        core.stats(|ev| a.ring_overflows = ev.overflows);
        Ok(())
    }

    /// `MM_STATS`: the memory manager's counters for a caller that may observe other processes
    /// ([`cap::perfmon_capable`]); any other caller gets the device's facts only
    /// (`vram_managed`, `slots`, which the library needs) and zero for the rest — what is
    /// resident, evicted, paged, submitted and demoted describes every process's allocations and work.
    pub(super) fn mm_stats(&self) -> uapi::MmStats {
        let mut all = self.gpu.mm.stats();
        all.fence_demotions = self.gpu.core.objects().fence_demotions;
        if cap::perfmon_capable() {
            return all;
        }
        uapi::MmStats { vram_managed: all.vram_managed, slots: all.slots, ..Default::default() }
    }

    /// `VERBOSE_LOG` (LOG-20): reads the verbose fence-logging switch, watches it with an
    /// eventfd, sets it (`CAP_PERFMON` or `CAP_SYS_ADMIN`, like the device-wide debug reads).
    ///
    /// # Errors
    ///
    /// `EINVAL` for unknown flags, a nonzero pad, an `enable` other than 0 or 1 or a watch fd
    /// that is no eventfd (`EBADF` for a closed one), `EPERM` to set without the capability,
    /// `EOPNOTSUPP` on a device without `CAPS.verbose_log`, `ENODEV`, `EAGAIN`, `ENOMEM`.
    pub(super) fn verbose_log(&self, a: &mut uapi::VerboseLog) -> Result {
        if a.flags & !(uapi::VERBOSE_LOG_SET | uapi::VERBOSE_LOG_WATCH) != 0 || a.pad != 0 {
            return Err(EINVAL);
        }
        if !self.gpu.core.info().caps.verbose_log() {
            return Err(EOPNOTSUPP);
        }
        let set = a.flags & uapi::VERBOSE_LOG_SET != 0;
        if set && a.enable > 1 {
            return Err(EINVAL);
        }
        if set && !cap::perfmon_capable() {
            return Err(EPERM);
        }
        if a.flags & uapi::VERBOSE_LOG_WATCH != 0 {
            let fd = EventFd::get(a.eventfd)?;
            self.gpu.verbose.watch(self.owner(), fd)?;
        }
        let (on, generation) = if set {
            let mut hw = self.gpu.core.hw()?;
            self.gpu.verbose.set(&mut hw, a.enable == 1)?
        } else {
            self.gpu.verbose.get()
        };
        a.enable = u32::from(on);
        a.generation = generation;
        Ok(())
    }

    /// `READ_TIMELINE`: every event for a caller that may observe other processes
    /// ([`cap::perfmon_capable`]); for any other caller only its own: log events of its file's
    /// queues and the thread events of its process — the same `struct pid`, not the same
    /// number, so a process that reuses a dead one's pid sees none of its events (the
    /// device-wide timeline would show other processes' fence handles, values and timing).
    ///
    /// # Errors
    ///
    /// `ESRCH` for an exiting caller, as `Logs::read_timeline`.
    pub(super) fn read_timeline(&self, a: &mut uapi_debug::ReadTimeline) -> Result {
        if cap::perfmon_capable() {
            return self.gpu.logs.read_timeline(a, |_, _| true);
        }
        let mut own = KVec::new();
        for id in self.state.lock().queues.iter().filter_map(|q| q.hwq.id) {
            own.push(id.raw(), GFP_KERNEL)?;
        }
        let me = ProcessRef::current()?;
        self.gpu.logs.read_timeline(a, |e, process| {
            if uapi_debug::is_thread_event(e.operation) {
                process == Some(&me)
            } else {
                own.contains(&e.queue)
            }
        })
    }

    /// `RECOVERY_DEBUG`: the device's hang and recovery counters, the timeout now, and the
    /// module-wide device-lost and function-reset counts.
    pub(super) fn recovery_debug(&self) -> uapi_debug::RecoveryDebug {
        let mut s = self.gpu.watch.stats();
        s.timeout_ms = crate::bindings::param::hang_timeout_ms_param();
        s.device_lost = crate::hang::device_lost_count();
        s.function_resets = crate::hang::function_reset_count();
        s
    }

    /// `POWER_DEBUG`.
    pub(super) fn power_debug(&self) -> uapi_debug::PowerDebug {
        self.gpu.watch.power()
    }

    /// `FENCE_DEBUG`.
    pub(super) fn fence_debug(&self) -> uapi_debug::FenceDebug {
        let mut out = uapi_debug::FenceDebug::default();
        self.gpu.fences.book().debug(&mut out);
        out
    }
}

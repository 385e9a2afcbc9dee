//! The module's fence timeline and interrupt-path counters: `READ_TIMELINE`, `IRQ_DEBUG` and
//! the device's interrupt moderation (`IRQ_MODERATION`).
//!
//! The timeline is device-wide: the module turns the fence logs of every hardware queue into
//! events (signal executed, wait unblocked, with their GPU timestamps) and adds the CPU time at
//! which kernel-mode submissions queued logged fence operations. [`Timeline`] reads it from a
//! cursor, so successive reads return each event once. A process with `CAP_PERFMON` or
//! `CAP_SYS_ADMIN` reads every event; any other reads only its own (its process's thread events
//! and its file's queues' log events).

use belfry_abi::uapi;
use belfry_abi::uapi_debug;

use crate::device::Device;
use crate::error::Result;
use crate::sys;

/// A reader of the device's fence timeline.
#[derive(Debug, Default)]
pub struct Timeline {
    cursor: u64,
    lost: u64,
}

impl Timeline {
    /// A reader from the oldest event the module still keeps.
    pub fn new() -> Timeline {
        Timeline::default()
    }

    /// A reader from the next event the module will record: earlier events are skipped.
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] (`READ_TIMELINE`).
    pub fn from_now(dev: &Device) -> Result<Timeline> {
        let mut t = Timeline::new();
        while !t.read(dev)?.is_empty() {}
        t.lost = 0;
        Ok(t)
    }

    /// Every event since the last read (the module first collects the queues' new log entries).
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] (`READ_TIMELINE`).
    pub fn read(&mut self, dev: &Device) -> Result<Vec<uapi_debug::TimelineEntry>> {
        let mut all = Vec::new();
        loop {
            let mut buf = vec![uapi_debug::TimelineEntry::default(); uapi_debug::TIMELINE_MAX_READ as usize];
            let mut arg = uapi_debug::ReadTimeline {
                entries: buf.as_mut_ptr() as u64,
                capacity: uapi_debug::TIMELINE_MAX_READ,
                cursor: self.cursor,
                ..Default::default()
            };
            dev.file.ioctl(sys::READ_TIMELINE, &mut arg)?;
            self.cursor = arg.cursor;
            self.lost += arg.lost;
            buf.truncate(arg.count as usize);
            let full = arg.count == uapi_debug::TIMELINE_MAX_READ;
            all.extend(buf);
            if !full {
                return Ok(all);
            }
        }
    }

    /// Events the module dropped before this reader got to them.
    pub fn lost(&self) -> u64 {
        self.lost
    }
}

impl Device {
    /// The device's interrupt moderation (`IRQ_MODERATION`): the interval, the interrupts held
    /// back and the interrupt-ring overflows; with `set`, the interval is set first (needs
    /// `CAP_SYS_ADMIN`).
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`]: `EPERM`, `EINVAL` above `regs::MAX_IRQ_MODERATION_US`,
    /// `EOPNOTSUPP` on a device without moderation.
    pub fn irq_moderation(&self, set: Option<u32>) -> Result<uapi::IrqModeration> {
        let mut arg = uapi::IrqModeration {
            flags: if set.is_some() { uapi::IRQ_MODERATION_SET } else { 0 },
            interval_us: set.unwrap_or(0),
            ..Default::default()
        };
        self.file.ioctl(sys::IRQ_MODERATION, &mut arg)?;
        Ok(arg)
    }

    /// When the guest-side stages of the last interrupt-driven wake-up ran (`WAKE_PATH`).
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] (`EPERM` for a process without `CAP_PERFMON` or
    /// `CAP_SYS_ADMIN`: the figures are the whole device's).
    pub fn wake_path(&self) -> Result<uapi_debug::WakePath> {
        let mut arg = uapi_debug::WakePath::default();
        self.file.ioctl(sys::WAKE_PATH, &mut arg)?;
        Ok(arg)
    }

    /// The round trip of the module's last mailbox command and its mailbox counters
    /// (`MAILBOX_TIMING`).
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] (`EPERM` for a process without `CAP_PERFMON` or
    /// `CAP_SYS_ADMIN`: the figures are the whole device's).
    pub fn mailbox_timing(&self) -> Result<uapi_debug::MailboxTiming> {
        let mut arg = uapi_debug::MailboxTiming::default();
        self.file.ioctl(sys::MAILBOX_TIMING, &mut arg)?;
        Ok(arg)
    }

    /// The module's native-fence interrupt-path and fence-log counters (`IRQ_DEBUG`).
    ///
    /// # Errors
    /// [`crate::Error::Ioctl`] (`EPERM` for a process without `CAP_PERFMON` or
    /// `CAP_SYS_ADMIN`: the figures are the whole device's).
    pub fn irq_debug(&self) -> Result<uapi_debug::IrqDebug> {
        let mut arg = uapi_debug::IrqDebug::default();
        self.file.ioctl(sys::IRQ_DEBUG, &mut arg)?;
        Ok(arg)
    }
}

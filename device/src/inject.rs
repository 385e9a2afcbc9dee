//! Test-only fault injections (`--inject FAULT`): faults a test asks for to prove that the
//! driver, the suite or the launcher notices them.
//!
//! They exist only in a device built with the `fault-injection` cargo feature. A release build
//! (`cargo build --release -p belfry-device`) leaves it off: [`Injections`] is then empty, every
//! query below is a constant (`false`, `None`, an empty register), so no injection path is
//! compiled into the device at all, and a command line asking for one is refused
//! ([`refuse_unbuilt`]). `cargo belfry` turns the feature on only for a run whose device flags
//! ask for an injection, and the crate's own tests turn it on for themselves (a
//! dev-dependency on this crate with the feature).
//!
//! The device asks through named queries ([`Injections::drops_fence_interrupts`],
//! [`Injections::on_notify`]…) at the one place each fault acts; every injection it carries is
//! shown in the `TEST_INJECTIONS` register ([`Injections::register`]), which the module logs
//! (and taints the kernel for) when it binds such a device.

use std::time::Duration;

use belfry_abi::regs;

/// A fault a test can inject into the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The identity register (`MAGIC`) reads a wrong value.
    BadIdentity,
    /// The device never raises an interrupt (every trigger is dropped and traced).
    NoInterrupts,
    /// The CMP's MonitoredValue update drops the barrier between writing MonitoredValue and
    /// reading CurrentValue (it reads first, then writes, with a widened window), to show that
    /// the stress test catches the lost wake-up this allows.
    SkipMonitoredBarrier,
    /// A MonitoredValue update that finds CurrentValue already past the new MonitoredValue
    /// posts no record, so only the driver's re-read of CurrentValue after the update catches
    /// a signal that raced it (RACE-06).
    NoCatchUpRecord,
    /// A MonitoredValue update that finds no interrupt due posts a native-fence record naming
    /// the fence anyway: a spurious interrupt that must release no wait (RACE-07).
    SpuriousFenceRecords,
    /// A NOTIFY packet with `regs::HOLD_MONITORED_UPDATE_TOKEN` makes the CMP hold the next
    /// MonitoredValue update it accepts until the CurrentValue of each fence it names changed,
    /// at most `regs::SLOW_MONITORED_UPDATE_MS`, so a test can signal inside the window
    /// deterministically.
    SlowMonitoredUpdates,
    /// Native-fence-signaled and monitored-fence-signaled interrupt records are dropped
    /// (traced as suppressed) while every other record and the mailbox work, so a test can show
    /// that CPU waits sleep until an interrupt rather than poll.
    NoFenceInterrupts,
    /// The engine executing a NOTIFY packet whose token is [`ENGINE_PANIC_TOKEN`] panics, so a
    /// test can show that a device thread that dies ends the process.
    EnginePanic,
    /// A NOTIFY packet with `regs::MAILBOX_STALL_TOKEN` makes the mailbox stop answering
    /// (submissions are dropped, traced) until the device is reset: the driver's device-lost
    /// path; with `regs::MAILBOX_STALE_SEQ_TOKEN` the next command is answered with the
    /// previous sequence number; with `regs::CMD_RING_FAULT_TOKEN` the next command-ring entry
    /// is a ring fault; with `regs::SLOW_ENGINE_PICKUP_TOKEN` (until
    /// `regs::FAST_ENGINE_PICKUP_TOKEN`) every engine waits `regs::SLOW_ENGINE_PICKUP_MS`
    /// after each wake-up before it looks for work.
    MailboxStall,
}

/// The NOTIFY token that panics an engine under [`Fault::EnginePanic`].
pub const ENGINE_PANIC_TOKEN: u64 = 0xdead_0e0e_dead_0e0e;

/// What an injected fault does to a NOTIFY packet ([`Injections::on_notify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotifyFault {
    /// The engine thread panics ([`Fault::EnginePanic`]).
    EnginePanic,
    /// The mailbox stops answering until a reset.
    MailboxStall,
    /// The next mailbox command is answered, unrun, with the previous sequence number.
    StaleSequence,
    /// The next command-ring entry read is a ring fault.
    CommandRingFault,
    /// The engines' pick-up after a wake-up is slow (`true`) or back to normal (`false`).
    SlowEnginePickup(bool),
    /// The next MonitoredValue update is held until its fences were signalled.
    HoldMonitoredUpdate,
}

/// The injections one device was started with: its `--inject` flags (a group of the device's
/// command line and of the trace header's `device` record, `crate::config::DeviceConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args, serde::Serialize, serde::Deserialize)]
pub struct Injections {
    /// Inject a test-only fault (repeatable; needs a device built with the `fault-injection`
    /// feature). Each is shown in the TEST_INJECTIONS register: `bad-identity` makes the
    /// identity register read wrong; `no-interrupts` drops every interrupt;
    /// `skip-monitored-barrier` drops the barrier of MonitoredValue updates so a racing signal
    /// can lose its interrupt; `no-catch-up-record`: an update finding CurrentValue already
    /// past posts no record; `spurious-fence-records`: an update finding no interrupt due posts
    /// a record anyway; `slow-monitored-updates`: a NOTIFY token holds the next update until
    /// its fences were signalled (at most 1 s); `no-fence-interrupts`: native- and monitored-fence-signaled records are
    /// dropped; `engine-panic`: an engine panics on a NOTIFY with the token 0xdead0e0edead0e0e;
    /// `mailbox-stall`: NOTIFY tokens stall the mailbox, answer a stale sequence number or
    /// fault the command ring.
    #[cfg(feature = "fault-injection")]
    #[arg(long = "inject", value_enum, value_name = "FAULT")]
    pub faults: Vec<Fault>,
}

impl Injections {
    /// These faults (with the feature; without it, none).
    #[cfg(feature = "fault-injection")]
    pub fn new(faults: Vec<Fault>) -> Self {
        Injections { faults }
    }

    /// Whether `fault` is injected.
    #[inline(always)]
    fn has(&self, fault: Fault) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.faults.contains(&fault);
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = fault;
            false
        }
    }

    /// Whether any fault is injected.
    pub fn any(&self) -> bool {
        self.register().0 != 0
    }

    /// The `TEST_INJECTIONS` register: every injected fault, for the driver to report.
    pub fn register(&self) -> regs::TEST_INJECTIONS {
        regs::TEST_INJECTIONS::default()
            .with_skip_monitored_barrier(self.has(Fault::SkipMonitoredBarrier))
            .with_no_catch_up_record(self.has(Fault::NoCatchUpRecord))
            .with_spurious_fence_records(self.has(Fault::SpuriousFenceRecords))
            .with_slow_monitored_updates(self.has(Fault::SlowMonitoredUpdates))
            .with_no_fence_interrupts(self.has(Fault::NoFenceInterrupts))
            .with_mailbox_stall(self.has(Fault::MailboxStall))
            .with_engine_panic(self.has(Fault::EnginePanic))
            .with_no_interrupts(self.has(Fault::NoInterrupts))
            .with_bad_identity(self.has(Fault::BadIdentity))
    }

    /// The identity register reads a wrong value.
    pub fn bad_identity(&self) -> bool {
        self.has(Fault::BadIdentity)
    }

    /// No interrupt is ever raised.
    pub fn no_interrupts(&self) -> bool {
        self.has(Fault::NoInterrupts)
    }

    /// How long the CMP holds a MonitoredValue update armed by
    /// [`NotifyFault::HoldMonitoredUpdate`] at most.
    #[inline]
    pub fn monitored_update_delay(&self) -> Option<Duration> {
        self.has(Fault::SlowMonitoredUpdates).then(|| Duration::from_millis(regs::SLOW_MONITORED_UPDATE_MS))
    }

    /// The MonitoredValue update reads CurrentValue before it writes MonitoredValue, without
    /// the barrier.
    #[inline]
    pub fn skips_monitored_barrier(&self) -> bool {
        self.has(Fault::SkipMonitoredBarrier)
    }

    /// Whether a MonitoredValue update posts its native-fence record, given whether an
    /// interrupt is due (`interrupt_due` itself without an injection).
    #[inline]
    pub fn posts_monitored_record(&self, interrupt_due: bool) -> bool {
        if interrupt_due {
            !self.has(Fault::NoCatchUpRecord)
        } else {
            self.has(Fault::SpuriousFenceRecords)
        }
    }

    /// Fence-signaled interrupt records are dropped (and nothing owed is flushed).
    #[inline]
    pub fn drops_fence_interrupts(&self) -> bool {
        self.has(Fault::NoFenceInterrupts)
    }

    /// What a NOTIFY packet with `token` does beyond its record, if an injection gives the
    /// token a meaning.
    #[inline]
    pub fn on_notify(&self, token: u64) -> Option<NotifyFault> {
        match token {
            ENGINE_PANIC_TOKEN if self.has(Fault::EnginePanic) => Some(NotifyFault::EnginePanic),
            regs::MAILBOX_STALL_TOKEN if self.has(Fault::MailboxStall) => Some(NotifyFault::MailboxStall),
            regs::MAILBOX_STALE_SEQ_TOKEN if self.has(Fault::MailboxStall) => Some(NotifyFault::StaleSequence),
            regs::CMD_RING_FAULT_TOKEN if self.has(Fault::MailboxStall) => Some(NotifyFault::CommandRingFault),
            regs::SLOW_ENGINE_PICKUP_TOKEN if self.has(Fault::MailboxStall) => {
                Some(NotifyFault::SlowEnginePickup(true))
            }
            regs::FAST_ENGINE_PICKUP_TOKEN if self.has(Fault::MailboxStall) => {
                Some(NotifyFault::SlowEnginePickup(false))
            }
            regs::HOLD_MONITORED_UPDATE_TOKEN if self.has(Fault::SlowMonitoredUpdates) => {
                Some(NotifyFault::HoldMonitoredUpdate)
            }
            _ => None,
        }
    }
}

/// Without the `fault-injection` feature: the error for a command line that asks for an
/// injection (`--inject`), which this build cannot give; `None` otherwise (and always with
/// the feature, whose parser takes the flag).
pub fn refuse_unbuilt<S: AsRef<str>>(args: &[S]) -> Option<String> {
    let asks = args.iter().any(|a| a.as_ref() == "--inject" || a.as_ref().starts_with("--inject="));
    (asks && !cfg!(feature = "fault-injection")).then(|| {
        "--inject: this belfry-device was built without test-only fault injection; build it with \
         `cargo build -p belfry-device --features fault-injection` (cargo belfry does so for a run \
         whose device flags inject a fault)"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_is_shown_in_its_own_register_bit() {
        use clap::ValueEnum as _;
        let mut seen = 0u32;
        for &fault in Fault::value_variants() {
            let bits = Injections::new(vec![fault]).register().0;
            assert_eq!(bits.count_ones(), 1, "{fault:?} shows as one bit, not {bits:#x}");
            assert_eq!(seen & bits, 0, "{fault:?} shares its bit");
            seen |= bits;
        }
        assert!(!Injections::default().any());
    }

    #[test]
    fn notify_tokens_act_only_with_their_injection() {
        let none = Injections::default();
        let stall = Injections::new(vec![Fault::MailboxStall]);
        let panic = Injections::new(vec![Fault::EnginePanic]);
        assert_eq!(none.on_notify(ENGINE_PANIC_TOKEN), None);
        assert_eq!(stall.on_notify(ENGINE_PANIC_TOKEN), None);
        assert_eq!(panic.on_notify(ENGINE_PANIC_TOKEN), Some(NotifyFault::EnginePanic));
        assert_eq!(stall.on_notify(regs::MAILBOX_STALL_TOKEN), Some(NotifyFault::MailboxStall));
        assert_eq!(stall.on_notify(regs::MAILBOX_STALE_SEQ_TOKEN), Some(NotifyFault::StaleSequence));
        assert_eq!(stall.on_notify(regs::CMD_RING_FAULT_TOKEN), Some(NotifyFault::CommandRingFault));
        assert_eq!(stall.on_notify(regs::SLOW_ENGINE_PICKUP_TOKEN), Some(NotifyFault::SlowEnginePickup(true)));
        assert_eq!(stall.on_notify(regs::FAST_ENGINE_PICKUP_TOKEN), Some(NotifyFault::SlowEnginePickup(false)));
        assert_eq!(none.on_notify(regs::SLOW_ENGINE_PICKUP_TOKEN), None);
        let slow = Injections::new(vec![Fault::SlowMonitoredUpdates]);
        assert_eq!(slow.on_notify(regs::HOLD_MONITORED_UPDATE_TOKEN), Some(NotifyFault::HoldMonitoredUpdate));
        assert_eq!(stall.on_notify(regs::HOLD_MONITORED_UPDATE_TOKEN), None);
        assert_eq!(stall.on_notify(7), None);
        assert!(none.posts_monitored_record(true) && !none.posts_monitored_record(false));
    }
}

//! Waking a guest from suspend-to-idle (s2idle, `echo freeze > /sys/power/state`): a key press
//! through QEMU's monitor (QMP `send-key` on its unix socket), driven by console lines.
//!
//! The guest side (the conformance suite's system-sleep test) enables the i8042 keyboard port
//! as a wakeup source (`/sys/bus/serio/devices/serio0/power/wakeup` = `enabled`), prints
//! [`SLEEP_MARKER`] on the console and writes `freeze`; once it is back it prints
//! [`AWAKE_MARKER`]. The launcher presses a key [`FIRST_PRESS`] after the first line and every
//! [`PRESS_EVERY`] until the second (at most [`MAX_PRESSES`]): a press that lands before the
//! kernel armed its wakeup interrupts is an ordinary key press, lost, so one press is not
//! enough. A press after the guest is awake is a key nobody reads.
//!
//! Measured on these machines (2026-11-27, QEMU 11.1.3 TCG q35, distro kernel 7.3.4): a key
//! press (`send-key`) or a byte on the console's serial input with ttyS0's `power/wakeup`
//! enabled wakes s2idle within ~50 ms; QMP `system_wakeup` is refused ("guest is not in
//! suspended state": QEMU only wakes its own S3 run state), `system_powerdown` (an ACPI power
//! button event) wakes nothing (the distro kernel's `button` driver is a module the initramfs
//! lacks), and the RTC alarm does not fire during s2idle. The key press is used rather than a
//! serial byte because it leaves the console's input alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::boot::qmp::Qmp;

/// The console line (its start) with which the guest asks to be woken.
pub const SLEEP_MARKER: &str = "BELFRY-SLEEP";
/// The console line (its start) with which the guest says it is awake.
pub const AWAKE_MARKER: &str = "BELFRY-AWAKE";
/// From the sleep line to the first press.
pub const FIRST_PRESS: Duration = Duration::from_millis(500);
/// Between presses while the guest is not awake.
pub const PRESS_EVERY: Duration = Duration::from_secs(1);
/// Presses per sleep at most.
pub const MAX_PRESSES: u32 = 120;

/// When to press, from the console lines (pure: the caller passes the time).
#[derive(Debug, Default)]
pub struct WakePlan {
    /// The next press, while the guest sleeps.
    next: Option<Instant>,
    /// Presses for the current sleep.
    presses: u32,
    /// Sleeps asked for, all run.
    pub sleeps: u32,
    /// Presses made, all run.
    pub total_presses: u32,
}

impl WakePlan {
    /// Looks at one guest console line.
    pub fn line(&mut self, text: &str, now: Instant) {
        let text = text.trim_start();
        if text.starts_with(SLEEP_MARKER) {
            self.next = Some(now + FIRST_PRESS);
            self.presses = 0;
            self.sleeps += 1;
        } else if text.starts_with(AWAKE_MARKER) {
            self.next = None;
        }
    }

    /// Whether to press now (and then plans the next press).
    pub fn due(&mut self, now: Instant) -> bool {
        match self.next {
            Some(at) if now >= at => {
                self.presses += 1;
                self.total_presses += 1;
                self.next = (self.presses < MAX_PRESSES).then_some(now + PRESS_EVERY);
                true
            }
            _ => false,
        }
    }
}

/// The launcher's waker of one run: the plan and, once needed, the QMP connection.
pub struct Waker {
    socket: PathBuf,
    qmp: Option<Qmp>,
    /// When to press.
    pub plan: WakePlan,
    /// The last QMP failure, reported once per kind.
    last_error: Option<String>,
}

impl Waker {
    /// A waker pressing keys through the QMP socket `socket`.
    pub fn new(socket: PathBuf) -> Self {
        Self { socket, qmp: None, plan: WakePlan::default(), last_error: None }
    }

    /// Presses a key if one is due; a failure is printed (once per message) and retried at the
    /// next press.
    pub fn tick(&mut self, now: Instant) {
        if !self.plan.due(now) {
            return;
        }
        let result = match self.qmp.as_mut() {
            Some(qmp) => qmp.press_key(),
            None => Qmp::connect(&self.socket).and_then(|mut qmp| {
                let pressed = qmp.press_key();
                self.qmp = Some(qmp);
                pressed
            }),
        };
        if let Err(e) = result {
            self.qmp = None;
            let message = e.to_string();
            if self.last_error.as_deref() != Some(&message) {
                eprintln!("belfry: wake: {message}");
                self.last_error = Some(message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presses_start_after_the_sleep_line_repeat_and_stop_once_awake() {
        let t = Instant::now();
        let mut plan = WakePlan::default();
        assert!(!plan.due(t + Duration::from_secs(5)), "no press before a sleep line");
        plan.line("belfry-guest: BELFRY-SLEEP 1", t);
        assert!(!plan.due(t), "no press before the guest had time to sleep");
        plan.line("  BELFRY-SLEEP 1", t);
        assert_eq!(plan.sleeps, 1, "a line with the marker later in it is not a request");
        assert!(!plan.due(t + FIRST_PRESS / 2));
        assert!(plan.due(t + FIRST_PRESS));
        assert!(!plan.due(t + FIRST_PRESS), "one press per interval");
        assert!(plan.due(t + FIRST_PRESS + PRESS_EVERY));
        plan.line("BELFRY-AWAKE 1", t + FIRST_PRESS + PRESS_EVERY);
        assert!(!plan.due(t + Duration::from_secs(60)), "no press once awake");
        assert_eq!(plan.total_presses, 2);
    }

    #[test]
    fn presses_end_after_the_maximum() {
        let t = Instant::now();
        let mut plan = WakePlan::default();
        plan.line("BELFRY-SLEEP", t);
        let presses = (0..MAX_PRESSES * 2).filter(|i| plan.due(t + FIRST_PRESS + PRESS_EVERY * *i)).count();
        assert_eq!(presses, MAX_PRESSES as usize);
    }
}

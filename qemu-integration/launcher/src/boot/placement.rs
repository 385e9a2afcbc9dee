//! `--placement`: where the guest and the devices run on the host's CPUs.
//!
//! A real GPU is separate silicon; here the guest's vCPUs, every device's command processor and
//! engine threads and the rest of the host share the same cores, and a woken device thread can
//! wait a whole time slice (about 1.4 ms on 2 CPUs) behind a vCPU. `device-core` gives the
//! devices a core of their own: QEMU (every thread, so every vCPU) is pinned to the other CPUs
//! and given one vCPU per CPU it has, the device processes are pinned to the last CPU, and they
//! ask for a short EEVDF slice (`sched_setattr` with `sched_runtime`, which a fair-class task may
//! set without privilege on Linux 6.12 and later), so a device thread that wakes preempts its
//! siblings quickly. A real-time class is not used: a command processor that polls shared
//! doorbells under `SCHED_FIFO` would starve its own engine threads on the one core it has.
//!
//! The pinning is done between fork and exec ([`pin`]), so every thread a process starts later
//! inherits it; [`probe_slice`] finds beforehand what the kernel grants.

use std::process::Command;
use std::time::Duration;

use crate::sys::{self, set_slice, slice_of};

pub use crate::sys::available_cpus;

/// Where the guest and the devices run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Placement {
    /// Everything shares every CPU, as the host schedules it (the default).
    #[default]
    Shared,
    /// The devices on the last CPU with a short slice; QEMU and the guest's vCPUs on the others.
    DeviceCore,
}

/// The slice the device processes ask for under `device-core`: the shortest EEVDF allows.
pub const DEVICE_SLICE: Duration = Duration::from_micros(100);

/// How a device process is pinned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinning {
    /// Its CPUs.
    pub cpus: Vec<usize>,
    /// The slice it asks for (none where the probe found it refused).
    pub slice: Option<Duration>,
}

/// CPUs for the guest and for the devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSplit {
    /// QEMU's CPUs (one vCPU each).
    pub guest: Vec<usize>,
    /// The devices' CPUs.
    pub devices: Vec<usize>,
}

impl CpuSplit {
    /// Splits `available` (the launcher's own affinity): the last CPU for the devices, the rest
    /// for the guest.
    ///
    /// # Errors
    /// Fewer than two CPUs: there is no core to give away.
    pub fn of(available: &[usize]) -> Result<Self, String> {
        match available {
            [guest @ .., device] if !guest.is_empty() => Ok(Self { guest: guest.to_vec(), devices: vec![*device] }),
            _ => Err(format!("--placement device-core needs at least 2 CPUs; this process may run on {available:?}")),
        }
    }

    /// Virtual CPUs for the guest: one per guest CPU, at most `max`.
    pub fn vcpus(&self, max: u32) -> u32 {
        u32::try_from(self.guest.len()).unwrap_or(max).clamp(1, max)
    }

    /// One line for the run's output.
    pub fn describe(&self, slice: &SliceGrant) -> String {
        format!(
            "device-core — QEMU on CPU {} ({} vCPU), devices on CPU {} with {}",
            list(&self.guest),
            self.guest.len(),
            list(&self.devices),
            slice
        )
    }
}

/// What the host grants the devices' threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SliceGrant {
    /// `sched_setattr` set this slice.
    Short(Duration),
    /// The kernel refused it (too old a kernel, or a policy forbids it): the default slice.
    Refused(String),
}

impl std::fmt::Display for SliceGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Short(slice) => write!(f, "a {} µs EEVDF slice (sched_setattr)", slice.as_micros()),
            Self::Refused(why) => write!(f, "the default slice (sched_setattr refused a short one: {why})"),
        }
    }
}

fn list(cpus: &[usize]) -> String {
    cpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// Whether this host grants `slice`: a throwaway thread asks for it on itself.
pub fn probe_slice(slice: Duration) -> SliceGrant {
    let asked = std::thread::spawn(move || set_slice(0, slice).and_then(|()| slice_of(0)));
    match asked.join() {
        Ok(Ok(granted)) if granted == u64::try_from(slice.as_nanos()).unwrap_or(0) => SliceGrant::Short(slice),
        Ok(Ok(granted)) => SliceGrant::Refused(format!("asked {} ns, the kernel keeps {granted} ns", slice.as_nanos())),
        Ok(Err(e)) => SliceGrant::Refused(e.to_string()),
        Err(_) => SliceGrant::Refused("the probe thread panicked".into()),
    }
}

/// Pins the process `command` starts to `cpus` and, with `slice`, asks for that slice, between
/// fork and exec; every thread it starts inherits both. A refused slice is not an error (the
/// run says what [`probe_slice`] found); a refused affinity is.
pub fn pin(command: &mut Command, cpus: &[usize], slice: Option<Duration>) {
    sys::pin_before_exec(command, cpus, slice);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::available_cpus;

    #[test]
    fn the_last_cpu_goes_to_the_devices() {
        let split = CpuSplit::of(&[0, 1]).unwrap();
        assert_eq!(split, CpuSplit { guest: vec![0], devices: vec![1] });
        assert_eq!(split.vcpus(2), 1);
        let split = CpuSplit::of(&[0, 2, 5, 7]).unwrap();
        assert_eq!((split.guest, split.devices), (vec![0, 2, 5], vec![7]));
        assert!(CpuSplit::of(&[3]).unwrap_err().contains("at least 2 CPUs"));
        assert!(CpuSplit::of(&[]).is_err());
    }

    #[test]
    fn a_pinned_child_runs_only_on_its_cpu() {
        // Serialized with the tests that reap or count this process's children.
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let available = available_cpus().unwrap();
        let cpu = *available.last().unwrap();
        let mut command = Command::new("sh");
        command.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
        pin(&mut command, &[cpu], Some(DEVICE_SLICE));
        let out = command.output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.split_whitespace().last(), Some(cpu.to_string().as_str()), "{text}");
    }

    #[test]
    fn a_granted_slice_is_what_the_pinned_child_runs_with() {
        // Either grant is a valid answer of a host; what must hold is that where the probe
        // found the slice granted, a child pinned with it runs with it.
        let SliceGrant::Short(slice) = probe_slice(DEVICE_SLICE) else { return };
        let _serial = crate::sys::PROCESSES.lock().unwrap_or_else(|e| e.into_inner());
        let mut command = Command::new("sleep");
        command.arg("5");
        pin(&mut command, &available_cpus().unwrap(), Some(slice));
        let mut child = command.spawn().unwrap();
        let granted = slice_of(libc::pid_t::try_from(child.id()).unwrap());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(granted.unwrap(), 100_000);
    }
}

//! The conformance suite's device layout, written once for the suite and the launcher.
//!
//! [`Needs`] names each device configuration a test of the suite can need, with the
//! `belfry-device` flags that give it ([`Needs::flags`]); [`LAYOUT`] is the devices a default
//! `cargo belfry conformance` run attaches, in order. The launcher starts device `i` with
//! `LAYOUT[i].flags()` (or, under `--filter`, only the entries its selected tests need); the
//! suite lists each test with its configuration's flags and, in the guest, picks for each test
//! the device whose capabilities match (`harness::registry` of `belfry-conformance`).

/// The device configuration a test needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// A dedicated-model device with at least 4 physical doorbells (the default is 16).
    Default,
    /// A dedicated-model device with exactly 2 physical doorbells (`--doorbells 2`).
    TwoDoorbells,
    /// A global-model device (`--doorbell-model global`).
    GlobalDoorbell,
    /// A device without 64-bit atomics: monitored fences in 32-bit wraparound mode, no native
    /// fences (`--no-64bit-atomics`).
    No64BitAtomics,
    /// A device posting the optimized per-queue native-fence records (`--interrupt-form per-queue`).
    PerQueueInterrupts,
    /// A device posting NULL native-fence records: scan all waits (`--interrupt-form scan-all`).
    ScanAllInterrupts,
    /// A device posting queue-array native-fence records: each names the queues whose signal
    /// logs hold new entries (`--interrupt-form queue-array`).
    QueueArrayInterrupts,
    /// A default device with the test-only MonitoredValue-update faults `slow-monitored-updates`,
    /// `no-catch-up-record` and `spurious-fence-records` (its `TEST_INJECTIONS` register), whose
    /// engines never ask for F1 (`--idle-f1-ms` an hour): the engine-state interrupt of an idle
    /// engine would make the module look at every pending wait, so a wait whose signal raced
    /// its update would end without the re-read after the update that the race tests require.
    RacyMonitoredUpdates,
    /// A default device with the test-only fault `no-fence-interrupts` alone: fence-signaled
    /// interrupt records are dropped (its `TEST_INJECTIONS` register).
    NoFenceInterrupts,
    /// A default device with the test-only fault `mailbox-stall` alone: a NOTIFY with
    /// `regs::MAILBOX_STALL_TOKEN` makes its mailbox stop answering until a reset (the
    /// device-lost path; its `TEST_INJECTIONS` register).
    MailboxStall,
    /// Two native devices (cross-adapter fences, XAD scenario 1): the test runs on the
    /// per-queue-interrupt device and finds the default device 0 beside it, so the layout has
    /// no device of its own for it.
    TwoNativeDevices,
    /// A device without native fences (`--no-native-fences`: monitored fences and kernel-mode
    /// queues only); cross-adapter scenarios 2a/2b find the native default device beside it.
    NoNativeFences,
    /// A default device whose doorbells are shared memory the command processor polls and
    /// sleeps on (`--doorbell-transport shared`, `CAPS.shared_doorbells`). It also takes part in
    /// peer signals (`--peer-signals`), as the [`Needs::PeerSignals`] device's companion: the
    /// layout has no room for a device of its own for that (the module binds at most 16).
    SharedDoorbells,
    /// A default device with peer signals (`--peer-signals`, `CAPS.peer_signals`, XAD-15): its
    /// tests find the other peer-capable device of the layout ([`Needs::companion`]) beside it,
    /// and the default device 0 for the non-peer comparison.
    PeerSignals,
    /// A default device with 16 MiB of VRAM that cannot save a context mid-buffer and has 8
    /// resource-table slots (`--vram-size 16M --no-context-save --bind-slots 8`): three 8 MiB
    /// allocations do not fit at once.
    SmallVramNoContextSave,
    /// A default device without the command ring (`--no-cmd-ring`, `CAPS.cmd_ring` clear): the
    /// module sends every mailbox command through BAR0 writes.
    Bar0Mailbox,
    /// A default device that loses its VRAM contents in D3hot (`--vram-lost-in-d3`,
    /// `CAPS.vram_lost_in_d3`).
    VramLostInD3,
}

/// How the suite's listing names the configuration without extra flags.
pub const DEFAULT_FLAGS: &str = "default flags";

impl Needs {
    /// The `belfry-device` flags that give this configuration (empty: every flag at its
    /// default).
    pub const fn flags(self) -> &'static str {
        match self {
            Needs::Default => "",
            Needs::TwoDoorbells => "--doorbells 2",
            Needs::GlobalDoorbell => "--doorbell-model global",
            Needs::No64BitAtomics => "--no-64bit-atomics",
            Needs::PerQueueInterrupts | Needs::TwoNativeDevices => "--interrupt-form per-queue",
            Needs::ScanAllInterrupts => "--interrupt-form scan-all",
            Needs::QueueArrayInterrupts => "--interrupt-form queue-array",
            Needs::RacyMonitoredUpdates => {
                "--inject slow-monitored-updates --inject no-catch-up-record --inject spurious-fence-records \
                 --idle-f1-ms 3600000"
            }
            Needs::NoFenceInterrupts => "--inject no-fence-interrupts",
            Needs::MailboxStall => "--inject mailbox-stall",
            Needs::NoNativeFences => "--no-native-fences",
            Needs::SharedDoorbells => "--doorbell-transport shared --peer-signals",
            Needs::PeerSignals => "--peer-signals",
            Needs::SmallVramNoContextSave => "--vram-size 16M --no-context-save --bind-slots 8",
            Needs::Bar0Mailbox => "--no-cmd-ring",
            Needs::VramLostInD3 => "--vram-lost-in-d3",
        }
    }

    /// The flags as the suite lists them: [`Needs::flags`], or [`DEFAULT_FLAGS`].
    pub const fn listed(self) -> &'static str {
        match self {
            Needs::Default => DEFAULT_FLAGS,
            other => other.flags(),
        }
    }

    /// The other device a test of this configuration needs beside it and device 0, if any:
    /// the launcher attaches it too when a filter selects such a test.
    pub const fn companion(self) -> Option<Needs> {
        match self {
            Needs::PeerSignals => Some(Needs::SharedDoorbells),
            _ => None,
        }
    }

    /// The configuration of a device started with `flags`, among the layout's.
    pub fn of_flags(flags: &str) -> Option<Needs> {
        LAYOUT.iter().copied().find(|n| n.flags() == flags)
    }

    /// What a run lacks when no attached device offers this configuration (a SKIP's reason).
    pub fn missing(self) -> String {
        match self {
            Needs::PeerSignals => format!(
                "needs two devices with peer signals: one with {} beside one with {}",
                self.flags(),
                Needs::SharedDoorbells.flags()
            ),
            Needs::TwoNativeDevices => format!(
                "needs two native devices with cross-adapter fences: one with {} beside the default device",
                self.flags()
            ),
            _ => format!("needs a device with {}", self.listed()),
        }
    }
}

/// The devices of a default `cargo belfry conformance` run, device 0 first: one per device
/// configuration the suite's tests need ([`Needs::TwoNativeDevices`] uses devices 0 and 4,
/// [`Needs::PeerSignals`] devices 15 and 10). Sixteen: the module's limit.
pub const LAYOUT: [Needs; 16] = [
    Needs::Default,
    Needs::TwoDoorbells,
    Needs::GlobalDoorbell,
    Needs::No64BitAtomics,
    Needs::PerQueueInterrupts,
    Needs::ScanAllInterrupts,
    Needs::RacyMonitoredUpdates,
    Needs::NoFenceInterrupts,
    Needs::MailboxStall,
    Needs::NoNativeFences,
    Needs::SharedDoorbells,
    Needs::SmallVramNoContextSave,
    Needs::Bar0Mailbox,
    Needs::VramLostInD3,
    Needs::QueueArrayInterrupts,
    Needs::PeerSignals,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_has_one_device_of_distinct_flags() {
        for (i, a) in LAYOUT.iter().enumerate() {
            for b in &LAYOUT[i + 1..] {
                assert_ne!(a.flags(), b.flags(), "{a:?} and {b:?} would be the same device");
            }
        }
        assert_eq!(LAYOUT[0], Needs::Default, "device 0 has the default flags");
        // TwoNativeDevices is the one configuration served by two devices of the layout.
        assert!(LAYOUT.contains(&Needs::PerQueueInterrupts) && !LAYOUT.contains(&Needs::TwoNativeDevices));
        assert_eq!(Needs::Default.listed(), DEFAULT_FLAGS);
        for n in LAYOUT {
            if let Some(c) = n.companion() {
                assert!(LAYOUT.contains(&c), "{n:?}'s companion {c:?} is in the layout");
            }
        }
        assert_eq!(Needs::of_flags("--peer-signals"), Some(Needs::PeerSignals));
    }
}

//! The registry's types: a test ([`Test`]: name, proven rule ids, the device configuration it
//! [`Needs`], its function), its result ([`Skip`] when its kernel lacks a feature), and the
//! name-or-rule-id filter ([`selected`]).

use std::path::Path;

use belfry_umd::Caps;

/// Error of a test: its reason.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// Result of a test.
pub type TestResult = Result<(), Error>;

/// The error of a test that cannot run on this kernel (it lacks a feature the test needs): the
/// runner reports it as SKIP with the reason, never as a pass. Such a SKIP does not fail the
/// run by itself, but another kernel's run must pass the test: `belfry-rules` checks that
/// across the runs `ci/test` gives it.
#[derive(Debug)]
pub struct Skip(pub String);

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Skip {}

/// Ends a test as SKIP: this kernel lacks `feature` (say which config option), which another
/// suite kernel has.
pub fn skip_kernel_lacks(feature: impl Into<String>) -> TestResult {
    Err(Box::new(Skip(format!("this kernel lacks {}", feature.into()))))
}

/// The device configuration a test needs; the runner picks the attached device whose
/// capabilities match.
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
    /// A default device with the test-only MonitoredValue-update faults `slow-monitored-updates`,
    /// `no-catch-up-record` and `spurious-fence-records` (its `TEST_INJECTIONS` register).
    RacyMonitoredUpdates,
    /// A default device with the test-only fault `no-fence-interrupts` alone: fence-signaled
    /// interrupt records are dropped (its `TEST_INJECTIONS` register).
    NoFenceInterrupts,
    /// A default device with the test-only fault `mailbox-stall` alone: a NOTIFY with
    /// `regs::MAILBOX_STALL_TOKEN` makes its mailbox stop answering until a reset (the
    /// device-lost path; its `TEST_INJECTIONS` register).
    MailboxStall,
    /// Two native devices (cross-adapter fences, XAD scenario 1): the test runs on the
    /// per-queue-interrupt device and finds the default device 0 beside it
    /// (`support::xad::peer`), so no device is added for it.
    TwoNativeDevices,
    /// A device without native fences (`--no-native-fences`: monitored fences and kernel-mode
    /// queues only); cross-adapter scenarios 2a/2b find the native default device beside it.
    NoNativeFences,
    /// A default device whose doorbells are shared memory the command processor polls and
    /// sleeps on (`--doorbell-transport shared`, `CAPS.shared_doorbells`).
    SharedDoorbells,
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

impl Needs {
    /// The device flags that give this configuration.
    pub fn flags(self) -> &'static str {
        match self {
            Needs::Default => "default flags",
            Needs::TwoDoorbells => "--doorbells 2",
            Needs::GlobalDoorbell => "--doorbell-model global",
            Needs::No64BitAtomics => "--no-64bit-atomics",
            Needs::PerQueueInterrupts => "--interrupt-form per-queue",
            Needs::ScanAllInterrupts => "--interrupt-form scan-all",
            Needs::RacyMonitoredUpdates => {
                "--inject slow-monitored-updates --inject no-catch-up-record --inject spurious-fence-records"
            }
            Needs::NoFenceInterrupts => "--inject no-fence-interrupts",
            Needs::MailboxStall => "--inject mailbox-stall",
            Needs::TwoNativeDevices => Needs::PerQueueInterrupts.flags(),
            Needs::NoNativeFences => "--no-native-fences",
            Needs::SharedDoorbells => "--doorbell-transport shared",
            Needs::SmallVramNoContextSave => "--vram-size 16M --no-context-save --bind-slots 8",
            Needs::Bar0Mailbox => "--no-cmd-ring",
            Needs::VramLostInD3 => "--vram-lost-in-d3",
        }
    }

    /// What a run lacks when no attached device offers this configuration (a SKIP's reason).
    pub fn missing(self) -> String {
        match self {
            Needs::TwoNativeDevices => format!(
                "needs two native devices with cross-adapter fences: one with {} beside the default device",
                self.flags()
            ),
            _ => format!("needs a device with {}", self.flags()),
        }
    }

    /// Whether a device with `caps` offers this configuration. A device started with test-only
    /// faults serves only the tests that need exactly those.
    pub fn matches(self, caps: &Caps) -> bool {
        let injected = caps.test_injections();
        if self == Needs::RacyMonitoredUpdates {
            let racy = injected.slow_monitored_updates()
                && injected.no_catch_up_record()
                && injected.spurious_fence_records()
                && !injected.skip_monitored_barrier();
            return racy && Needs::Default.matches_bits(caps);
        }
        if self == Needs::NoFenceInterrupts {
            let only = belfry_abi::regs::TEST_INJECTIONS::default().with_no_fence_interrupts(true);
            return injected == only && Needs::Default.matches_bits(caps);
        }
        if self == Needs::MailboxStall {
            let only = belfry_abi::regs::TEST_INJECTIONS::default().with_mailbox_stall(true);
            return injected == only && Needs::Default.matches_bits(caps);
        }
        injected.0 == 0 && self.matches_bits(caps)
    }

    /// [`Self::matches`] on the capability bits and geometry alone.
    fn matches_bits(self, caps: &Caps) -> bool {
        let bits = caps.bits();
        let usm = bits.user_mode_submission();
        // The default device: 64-bit atomics and exact (fence-handle) interrupt records.
        let default_fences = bits.native_fence() && !bits.no_64bit_atomics() && bits.fence_handle_records();
        // Every configuration but SharedDoorbells is a trapped-doorbell device.
        if bits.shared_doorbells() != (self == Needs::SharedDoorbells) {
            return false;
        }
        // Only its own tests run on the device that loses VRAM in D3.
        if bits.vram_lost_in_d3() != (self == Needs::VramLostInD3) {
            return false;
        }
        match self {
            Needs::Default | Needs::SharedDoorbells | Needs::Bar0Mailbox => {
                let ring_ok = self != Needs::Bar0Mailbox || !bits.cmd_ring();
                ring_ok
                    && usm
                    && default_fences
                    && !bits.no_context_save()
                    && bits.dedicated_doorbells()
                    && !bits.global_doorbell()
                    && caps.doorbell_count() >= 4
            }
            Needs::TwoDoorbells => {
                usm && bits.dedicated_doorbells() && !bits.global_doorbell() && caps.doorbell_count() == 2
            }
            Needs::GlobalDoorbell => usm && bits.global_doorbell(),
            Needs::No64BitAtomics => bits.no_64bit_atomics(),
            Needs::PerQueueInterrupts => bits.native_fence() && bits.optimized_interrupt(),
            Needs::ScanAllInterrupts => {
                bits.native_fence() && !bits.fence_handle_records() && !bits.optimized_interrupt()
            }
            Needs::TwoNativeDevices => Needs::PerQueueInterrupts.matches_bits(caps) && bits.cross_adapter_fence(),
            Needs::NoNativeFences => !bits.native_fence() && !bits.no_64bit_atomics() && bits.monitored_fence() && !usm,
            Needs::SmallVramNoContextSave => {
                usm && default_fences && bits.no_context_save() && caps.vram_size() == 16 << 20
            }
            Needs::VramLostInD3 => usm && default_fences && !bits.no_context_save(),
            Needs::RacyMonitoredUpdates | Needs::NoFenceInterrupts | Needs::MailboxStall => false,
        }
    }
}

/// One conformance test.
#[derive(Clone, Copy, Debug)]
pub struct Test {
    /// What it proves, as a sentence in snake case.
    pub name: &'static str,
    /// Rule ids it proves (each would fail the test if its behaviour were removed).
    pub ids: &'static [&'static str],
    /// The device configuration it needs.
    pub needs: Needs,
    /// The test, given the device path.
    pub run: fn(&Path) -> TestResult,
    /// The module path of the suite file that registers it (`belfry_conformance::suite::hostile`).
    pub module: &'static str,
}

impl Test {
    /// The suite file that registers it, without `.rs` (`hostile`): a filter names it.
    pub fn file(&self) -> &'static str {
        self.module.rsplit("::").next().unwrap_or(self.module)
    }
}

/// Whether `test` is selected by `filters` (empty: all; else any filter is a substring of the
/// name, or equals one of its rule ids or its suite file, case-insensitively).
pub fn selected(test: &Test, filters: &[String]) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| {
            let f = f.to_ascii_lowercase();
            test.name.contains(&f)
                || test.ids.iter().any(|id| id.eq_ignore_ascii_case(&f))
                || test.file().eq_ignore_ascii_case(&f)
        })
}

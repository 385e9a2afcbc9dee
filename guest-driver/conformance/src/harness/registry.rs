//! The registry's types: a test ([`Test`]: name, proven rule ids, the device configuration it
//! [`Needs`], its function, the [`Resources`] it holds), its result ([`Skip`] when its kernel lacks a feature), and the
//! name-or-rule-id filter ([`selected`]).

use std::path::Path;

use belfry_umd::Caps;

use crate::harness::resources::Resources;

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

pub use belfry_suite_layout::Needs;

/// Which attached device serves a [`Needs`]: the runner picks the device whose capabilities
/// match (the flags of each configuration, and the launcher's layout, are
/// `belfry_suite_layout`'s).
pub trait DeviceMatch {
    /// Whether a device with `caps` offers this configuration.
    fn matches(self, caps: &Caps) -> bool;
}

impl DeviceMatch for Needs {
    /// A device started with test-only faults serves only the tests that need exactly those.
    fn matches(self, caps: &Caps) -> bool {
        let injected = caps.test_injections();
        if self == Needs::RacyMonitoredUpdates {
            let racy = injected.slow_monitored_updates()
                && injected.no_catch_up_record()
                && injected.spurious_fence_records()
                && !injected.skip_monitored_barrier();
            return racy && matches_bits(Needs::Default, caps);
        }
        if self == Needs::NoFenceInterrupts {
            let only = belfry_abi::regs::TEST_INJECTIONS::default().with_no_fence_interrupts(true);
            return injected == only && matches_bits(Needs::Default, caps);
        }
        if self == Needs::MailboxStall {
            let only = belfry_abi::regs::TEST_INJECTIONS::default().with_mailbox_stall(true);
            return injected == only && matches_bits(Needs::Default, caps);
        }
        injected.0 == 0 && matches_bits(self, caps)
    }
}

/// [`DeviceMatch::matches`] on the capability bits and geometry alone.
fn matches_bits(need: Needs, caps: &Caps) -> bool {
    let bits = caps.bits();
    let usm = bits.user_mode_submission();
    // The default device: 64-bit atomics and exact (fence-handle) interrupt records.
    let default_fences = bits.native_fence() && !bits.no_64bit_atomics() && bits.fence_handle_records();
    // Every configuration but SharedDoorbells is a trapped-doorbell device.
    if bits.shared_doorbells() != (need == Needs::SharedDoorbells) {
        return false;
    }
    // Only the peer-signal tests and the shared-doorbell ones run on a device with peer signals.
    if bits.peer_signals() && !matches!(need, Needs::PeerSignals | Needs::SharedDoorbells) {
        return false;
    }
    // Only its own tests run on the device that loses VRAM in D3.
    if bits.vram_lost_in_d3() != (need == Needs::VramLostInD3) {
        return false;
    }
    match need {
        Needs::Default | Needs::SharedDoorbells | Needs::Bar0Mailbox | Needs::PeerSignals => {
            let ring_ok = need != Needs::Bar0Mailbox || !bits.cmd_ring();
            let peer_ok = need != Needs::PeerSignals || (bits.peer_signals() && bits.cross_adapter_fence());
            ring_ok
                && peer_ok
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
            bits.native_fence()
                && !bits.fence_handle_records()
                && !bits.optimized_interrupt()
                && !bits.queue_array_interrupt()
        }
        Needs::QueueArrayInterrupts => bits.native_fence() && bits.queue_array_interrupt(),
        Needs::TwoNativeDevices => matches_bits(Needs::PerQueueInterrupts, caps) && bits.cross_adapter_fence(),
        Needs::NoNativeFences => !bits.native_fence() && !bits.no_64bit_atomics() && bits.monitored_fence() && !usm,
        Needs::SmallVramNoContextSave => {
            usm && default_fences && bits.no_context_save() && caps.vram_size() == 16 << 20
        }
        Needs::VramLostInD3 => usm && default_fences && !bits.no_context_save(),
        Needs::RacyMonitoredUpdates | Needs::NoFenceInterrupts | Needs::MailboxStall => false,
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
    /// What it holds while it runs: whether it may run beside other tests
    /// ([`resources::declared`](crate::harness::resources::declared)).
    pub resources: Resources,
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

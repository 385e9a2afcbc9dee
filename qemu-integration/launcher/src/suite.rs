//! The in-guest conformance suite as the launcher sees it: its package, the timeline tool it
//! carries, and the devices a default `conformance` run attaches for it.

/// The in-guest conformance suite's package (and binary).
pub const SUITE_PACKAGE: &str = "belfry-conformance";
/// The suite package's tool that prints the module's fence timeline after the suite.
pub const TIMELINE_BINARY: &str = "belfry-timeline";
/// Flags of devices 1.. of a default `conformance` run (device 0 has default flags): the
/// configurations the suite's tests need.
pub const SUITE_DEVICE_FLAGS: [&str; 13] = [
    "--doorbells 2",
    "--doorbell-model global",
    "--no-64bit-atomics",
    "--interrupt-form per-queue",
    "--interrupt-form scan-all",
    "--inject slow-monitored-updates --inject no-catch-up-record --inject spurious-fence-records",
    "--inject no-fence-interrupts",
    "--inject mailbox-stall",
    "--no-native-fences",
    "--doorbell-transport shared",
    "--vram-size 16M --no-context-save --bind-slots 8",
    "--no-cmd-ring",
    "--vram-lost-in-d3",
];

//! The in-guest conformance suite as the launcher sees it: its package, the timeline tool it
//! carries, and the devices a default `conformance` run attaches for it.

/// The in-guest conformance suite's package (and binary).
pub const SUITE_PACKAGE: &str = "belfry-conformance";
/// The suite package's tool that prints the module's fence timeline after the suite.
pub const TIMELINE_BINARY: &str = "belfry-timeline";
/// Flags of devices 1.. of a default `conformance` run (device 0 has default flags): the
/// configurations the suite's tests need, from the layout the suite shares
/// (`belfry_suite_layout::LAYOUT`).
pub fn suite_device_flags() -> Vec<&'static str> {
    belfry_suite_layout::LAYOUT[1..].iter().map(|n| n.flags()).collect()
}

//! The in-guest conformance suite: tests that prove the rules of `../shared/design/RULES.md`
//! through the real module and device.

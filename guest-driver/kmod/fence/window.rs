// SPDX-License-Identifier: GPL-2.0

//! Monitored-fence comparisons of the 32-bit mode (`CAPS.no_64bit_atomics`, FEN-07, FEN-08):
//! monitored values are 32-bit, comparisons wrap, and a value outside the window is refused
//! (the rule is in `uapi.rs` at `QueueFenceOp`). Pure `core` code on the abi's helpers, compiled
//! into the module and into the host crate `belfry-kmod-host`, whose tests run it.

use crate::abi::fence;

/// Whether a monitored fence value `current` satisfies a wait for `value`; in the 32-bit mode
/// (`wrap32`) only the low halves count, compared across wraparound.
pub(crate) fn reached(wrap32: bool, current: u64, value: u64) -> bool {
    if wrap32 {
        // CAST: the 32-bit mode keeps the low halves, truncation intended.
        fence::is_signaled32(current as u32, value as u32)
    } else {
        fence::is_signaled(current, value)
    }
}

/// Whether `value` is acceptable for a signal (`signal`) or a wait on a fence whose value is
/// `current`: always outside the 32-bit mode; in it, not for a value above 0xFFFF_FFFF (or a
/// `current` above it), and only for a signal at or ahead of `current` by at most the window,
/// or a wait reached or within it. The module refuses the rest with `ERANGE`.
pub(crate) fn in_window(wrap32: bool, current: u64, value: u64, signal: bool) -> bool {
    if !wrap32 {
        return true;
    }
    let (Ok(current), Ok(low)) = (u32::try_from(current), u32::try_from(value)) else {
        return false;
    };
    fence::in_window32(current, low) || (!signal && fence::is_signaled32(current, low))
}

/// Whether a CPU signal of `value` keeps a fence whose value is `current` from moving
/// backwards: at or above it outside the 32-bit mode (a lower value is refused, Vulkan
/// VUID-VkSemaphoreSignalInfo-value-03258; the current value again is a no-op); in the 32-bit
/// mode ([`in_window`] decides, with `ERANGE`) always.
pub(crate) fn forward(wrap32: bool, current: u64, value: u64) -> bool {
    wrap32 || value >= current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_never_move_a_sixty_four_bit_fence_backwards() {
        assert!(forward(false, 5, 6));
        assert!(forward(false, 5, 5));
        assert!(!forward(false, 5, 3));
        assert!(!forward(false, u64::MAX, 0));
        // The 32-bit mode leaves it to the window rule.
        assert!(forward(true, 5, 3));
    }

    #[test]
    fn sixty_four_bit_mode_compares_plainly() {
        assert!(reached(false, 5, 5));
        assert!(reached(false, 6, 5));
        assert!(!reached(false, 4, 5));
        // No wraparound outside the 32-bit mode.
        assert!(!reached(false, 1, u64::MAX));
        assert!(in_window(false, 0, u64::MAX, true));
    }

    #[test]
    fn thirty_two_bit_mode_compares_low_halves_across_wraparound() {
        assert!(reached(true, 0x1_0000_0005, 5));
        assert!(reached(true, 2, 0xFFFF_FFFF));
        assert!(!reached(true, 0xFFFF_FFFF, 2));
    }

    #[test]
    fn thirty_two_bit_window() {
        // A signal ahead of the current value by at most the window.
        assert!(in_window(true, 10, 11, true));
        assert!(in_window(true, 10, 10, true));
        // A signal behind is refused; a wait behind (already reached) is not.
        assert!(!in_window(true, 10, 9, true));
        assert!(in_window(true, 10, 9, false));
        // Values above 32 bits are refused.
        assert!(!in_window(true, 10, 0x1_0000_0000, false));
        assert!(!in_window(true, 0x1_0000_0000, 1, false));
        // Past the window ahead.
        assert!(!in_window(true, 0, 0x8000_0001, true));
    }
}

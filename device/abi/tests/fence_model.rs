//! Model check (loom) of the native-fence interrupt protocol, over `belfry_abi::fence`'s own
//! functions, in every interleaving and store-buffer outcome the C11 model allows:
//!
//! - the engine's `FENCE_SIGNAL` of V: store CurrentValue, full fence, read MonitoredValue,
//!   interrupt when `needs_interrupt(V, MonitoredValue)`;
//! - a CPU wait for W, registered by the CMP's `UPDATE_MONITORED_VALUES`: store MonitoredValue
//!   = `monitored_value_for(Some(W))`, full fence, read CurrentValue, interrupt when
//!   `needs_interrupt`; then the module's re-read of CurrentValue (RACE-06);
//! - the interrupt handler, after both: reads CurrentValue and releases the wait if reached.
//!
//! The property, for every (V, W): the wait is released exactly when `is_signaled(V, W)` — no
//! lost wake-up, no early release. The 32-bit mode (`CAPS.no_64bit_atomics`) is the same with a
//! monitored fence whose low half the engine stores (and always interrupts for), compared by
//! `is_signaled32` across the wraparound.
//!
//! Four seeded mutations each make the checker find a counterexample (`should_panic`): the
//! engine's fence dropped, the CMP's fence dropped, MonitoredValue off by one (W instead of
//! W − 1), and the 32-bit comparison made unaware of the wraparound.
//! `cargo test -p belfry-abi --test fence_model` runs them all.

use belfry_abi::fence;
use loom::sync::atomic::{fence as full_fence, AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;

/// One version of the protocol: the abi's functions and fences, or a mutation of one of them.
#[derive(Clone, Copy)]
struct Protocol {
    monitored_value_for: fn(Option<u64>) -> u64,
    needs_interrupt: fn(u64, u64) -> bool,
    /// The module's check of a value it read against the wait (the 32-bit mode compares the low
    /// halves).
    reached: fn(u64, u64) -> bool,
    engine_fence: bool,
    cmp_fence: bool,
}

/// The protocol as the device and the module run it.
const REAL: Protocol = Protocol {
    monitored_value_for: fence::monitored_value_for,
    needs_interrupt: fence::needs_interrupt,
    reached: fence::is_signaled,
    engine_fence: true,
    cmp_fence: true,
};

/// The 32-bit mode's comparison, as `fence/window.rs` of the module makes it.
fn reached32(current: u64, wait: u64) -> bool {
    // CAST: the 32-bit mode keeps the low halves, truncation intended.
    fence::is_signaled32(current as u32, wait as u32)
}

/// One fence's two words in memory both sides reach.
struct FenceWords {
    current: AtomicU64,
    monitored: AtomicU64,
}

/// Explores every execution of one signal of `value` against one wait for `wait` on a native
/// fence whose CurrentValue starts at `start`; panics when the wait's release is wrong.
fn check_native(p: Protocol, start: u64, value: u64, wait: u64) {
    loom::model(move || {
        let words = Arc::new(FenceWords {
            current: AtomicU64::new(start),
            monitored: AtomicU64::new(fence::MONITORED_VALUE_NONE),
        });
        let interrupted = Arc::new(AtomicBool::new(false));
        let engine = {
            let (words, interrupted) = (words.clone(), interrupted.clone());
            loom::thread::spawn(move || {
                words.current.store(value, Ordering::Release);
                if p.engine_fence {
                    full_fence(Ordering::SeqCst);
                }
                let monitored = words.monitored.load(Ordering::Acquire);
                if (p.needs_interrupt)(value, monitored) {
                    interrupted.store(true, Ordering::Release);
                }
            })
        };
        // The waiter: the CMP's update, then the module's re-read when the mailbox completes.
        let monitored = (p.monitored_value_for)(Some(wait));
        words.monitored.store(monitored, Ordering::Release);
        if p.cmp_fence {
            full_fence(Ordering::SeqCst);
        }
        let seen = words.current.load(Ordering::Acquire);
        if (p.needs_interrupt)(seen, monitored) {
            interrupted.store(true, Ordering::Release);
        }
        let reread = (p.reached)(words.current.load(Ordering::Acquire), wait);
        engine.join().unwrap();
        let handler = interrupted.load(Ordering::Acquire) && (p.reached)(words.current.load(Ordering::Acquire), wait);
        let released = reread || handler;
        let signaled = fence::is_signaled(value.max(start), wait);
        assert!(released || !signaled, "lost wake-up: signal {value} satisfies the wait for {wait}, nobody woke it");
        assert!(signaled || !released, "early release: the wait for {wait} released at {value}");
    });
}

/// Explores one signal of `value` on a 32-bit monitored fence (the engine stores the low half
/// and always interrupts) against a wait for `wait`; the fence's value starts at `start`.
fn check_narrow(reached: fn(u64, u64) -> bool, start: u64, value: u64, wait: u64) {
    loom::model(move || {
        let current = Arc::new(AtomicU64::new(start & 0xffff_ffff));
        let interrupted = Arc::new(AtomicBool::new(false));
        let engine = {
            let (current, interrupted) = (current.clone(), interrupted.clone());
            loom::thread::spawn(move || {
                current.store(value & 0xffff_ffff, Ordering::SeqCst);
                interrupted.store(true, Ordering::SeqCst);
            })
        };
        let reread = reached(current.load(Ordering::SeqCst), wait);
        engine.join().unwrap();
        let handler = interrupted.load(Ordering::SeqCst) && reached(current.load(Ordering::SeqCst), wait);
        let released = reread || handler;
        let signaled = fence::is_signaled(value.max(start), wait);
        assert!(released || !signaled, "lost wake-up: signal {value:#x} satisfies the wait for {wait:#x}");
        assert!(signaled || !released, "early release: the wait for {wait:#x} released at {value:#x}");
    });
}

/// The (start, signal, wait) cases: a signal to exactly the wait, above it, below it, and
/// waits already reached before the signal.
const CASES: [(u64, u64, u64); 4] = [(0, 5, 5), (0, 6, 5), (0, 4, 5), (5, 6, 3)];

/// 32-bit cases around the wraparound: a signal past it satisfying a wait past it, a signal
/// before it that must not satisfy a wait past it, and one exactly at it.
const NARROW: [(u64, u64, u64); 3] = [
    (0xffff_fff0, 0x1_0000_0002, 0x1_0000_0001),
    (0xffff_fff0, 0xffff_fff8, 0x1_0000_0001),
    (0xffff_fffe, 0x1_0000_0000, 0x1_0000_0000),
];

#[test]
fn no_lost_wake_up_and_no_early_release() {
    for (start, value, wait) in CASES {
        check_native(REAL, start, value, wait);
    }
}

#[test]
fn the_thirty_two_bit_mode_releases_across_the_wraparound() {
    for (start, value, wait) in NARROW {
        check_narrow(reached32, start, value, wait);
    }
}

#[test]
#[should_panic(expected = "lost wake-up")]
fn without_the_engines_fence_a_wake_up_is_lost() {
    check_native(Protocol { engine_fence: false, ..REAL }, 0, 5, 5);
}

#[test]
#[should_panic(expected = "lost wake-up")]
fn without_the_cmps_fence_a_wake_up_is_lost() {
    check_native(Protocol { cmp_fence: false, ..REAL }, 0, 5, 5);
}

/// MonitoredValue = W: a signal of exactly W does not exceed it.
fn monitored_off_by_one(lowest: Option<u64>) -> u64 {
    lowest.unwrap_or(fence::MONITORED_VALUE_NONE)
}

#[test]
#[should_panic(expected = "lost wake-up")]
fn a_monitored_value_off_by_one_loses_the_signal_of_exactly_the_wait() {
    check_native(Protocol { monitored_value_for: monitored_off_by_one, ..REAL }, 0, 5, 5);
}

/// The low halves compared as plain numbers.
fn reached_ignoring_the_wrap(current: u64, wait: u64) -> bool {
    current >= wait & 0xffff_ffff
}

#[test]
#[should_panic(expected = "early release")]
fn a_comparison_unaware_of_the_wraparound_releases_early() {
    for (start, value, wait) in NARROW {
        check_narrow(reached_ignoring_the_wrap, start, value, wait);
    }
}

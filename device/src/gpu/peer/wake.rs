//! The peer-signal page's sleep and wake-up: the consumer sleeps on the low 32 bits of its
//! page's claim index (`belfry_abi::peer::CLAIM_OFFSET`) and a producer wakes it after writing a
//! payload — a Linux futex on guest RAM.
//!
//! Guest RAM is a shared mapping of one memfd in every device process (`dma.rs`), so the futex
//! is a shared one (no `FUTEX_PRIVATE_FLAG`): the kernel keys it by the memfd's page, and a
//! producer in another process wakes the consumer as a GPU's write into a peer's doorbell
//! memory would. The word only wakes: the guest may write it at will, which costs a spurious
//! wake-up or a sleep ended by its timeout, never a payload (the consumer's pass reads the
//! page itself).
//!
//! The consumer sleeps on an address, not a borrowed word: it holds no snapshot of guest
//! memory while asleep (a snapshot held would delay every `DMA_UNMAP`'s quiesce). The kernel
//! checks the address: one unmapped meanwhile fails the wait with `EFAULT`, which is one more
//! pass.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The futex word of a claim index: its low 32 bits (this host is little-endian).
pub fn word(claim: &AtomicU64) -> *const u32 {
    claim.as_ptr().cast::<u32>().cast_const()
}

/// The futex word's value for the claim index `claimed`: its low 32 bits.
fn low_half(claimed: u64) -> u32 {
    u32::try_from(claimed & u64::from(u32::MAX)).unwrap_or(0)
}

/// Why a [`sleep`] ended. Every outcome means "look at the page again", so none is an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// A [`wake`] (or a spurious wake-up).
    Woken,
    /// The word no longer held the claim when the sleep began: something was claimed.
    Changed,
    /// The timeout passed.
    TimedOut,
    /// A signal, or an address the kernel could not read.
    Other,
}

/// Sleeps while the futex word at `address` holds the low 32 bits of `claimed` (and at most
/// `timeout`): until a producer's [`wake`], a change of the word, a signal or the timeout.
pub fn sleep(address: *const u32, claimed: u64, timeout: Duration) -> Woke {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: FUTEX_WAIT reads the 4 bytes at `address` in the kernel, which checks the
    // address (EFAULT if unmapped) — no Rust reference to them is made; `ts` outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_futex, address, libc::FUTEX_WAIT, low_half(claimed), &raw const ts) };
    if r == 0 {
        return Woke::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Woke::Changed,
        Some(libc::ETIMEDOUT) => Woke::TimedOut,
        _ => Woke::Other,
    }
}

/// Wakes the consumer sleeping on the claim index `claim` (if one is).
pub fn wake(claim: &AtomicU64) {
    // SAFETY: FUTEX_WAKE only keys the address (a live, aligned word `claim` borrows); it
    // neither reads nor writes the memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word(claim), libc::FUTEX_WAKE, 1);
    }
}

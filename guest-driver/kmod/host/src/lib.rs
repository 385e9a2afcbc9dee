//! The pure parts of the Belfry kernel module (`guest-driver/kmod`), compiled on the host so
//! their unit tests run with `cargo test`.
//!
//! kbuild cannot link cargo crates, and these files are written for the kernel crate's
//! `core`-only world: they use nothing of the `kernel` crate and reach the contract as
//! `crate::abi::…`, as in the module. This crate includes the very files by `#[path]` (as the
//! module includes the abi) and gives them a `crate::abi` that is the abi crate itself, so the
//! module and its host tests cannot drift apart. The tests live in the files, next to the code.
//!
//! - `hw/ids.rs`: the id bitmaps, range cursors and slot layouts (address spaces, contexts, queues, VRAM
//!   fence pages, mmap offsets, system VA);
//! - `hw/mbseq.rs`: matching a mailbox completion to its command by sequence number;
//! - `queue/lru.rs`: the physical-doorbell slots and their least-recently-used order;
//! - `fence/window.rs`: the 32-bit-mode fence comparisons and window checks;
//! - `fence/work.rs`: how the native-fence records of one interrupt batch are kept for the
//!   interrupt thread;
//! - `queue/hangclock.rs`: the per-engine hang clock of the hang watchdog.
//! - `mm/place.rs`: first-fit VRAM placement and the least-recently-used eviction victim.

/// The device contract, under the name the module's files use.
mod abi {
    pub(crate) use belfry_abi::{fence, ids, irq, mailbox, packet};
}

/// `guest-driver/kmod/hw/ids.rs`.
#[path = "../../hw/ids.rs"]
#[cfg_attr(not(test), allow(dead_code))]
mod ids;

/// `guest-driver/kmod/hw/mbseq.rs`.
#[path = "../../hw/mbseq.rs"]
#[cfg_attr(not(test), allow(dead_code))]
mod mbseq;

/// `guest-driver/kmod/queue/lru.rs`.
#[path = "../../queue/lru.rs"]
#[cfg_attr(not(test), allow(dead_code))]
mod lru;

/// `guest-driver/kmod/fence/window.rs`.
#[path = "../../fence/window.rs"]
#[cfg_attr(not(test), allow(dead_code))]
mod window;

/// `guest-driver/kmod/fence/work.rs`.
#[path = "../../fence/work.rs"]
#[cfg_attr(not(test), allow(dead_code))]
mod work;

/// `guest-driver/kmod/queue/hangclock.rs`.
#[path = "../../queue/hangclock.rs"]
#[cfg_attr(not(test), allow(dead_code))]
mod hangclock;
/// `guest-driver/kmod/mm/place.rs`.
#[path = "../../mm/place.rs"]
#[cfg_attr(not(test), allow(dead_code))]
mod place;

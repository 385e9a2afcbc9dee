//! The numbering of the device's threads in an input log: each thread's number is the order in
//! which it first asked for one, the same when recording and when replaying.

use std::sync::atomic::{AtomicU16, Ordering};

/// The calling thread's number in the log (0, 1, … in the order threads first record).
pub fn thread_number() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    thread_local! {
        static NUMBER: u16 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

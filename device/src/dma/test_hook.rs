//! Test-only: a function run while the device records, after a read of guest memory has been
//! copied into the input log and before the access returns, on the reading thread — where a
//! test lands what races the read: a guest store (the access must use the bytes the log
//! holds), or a client's register access while the device thread is held there. Compiled only
//! with the `fault-injection` feature; without it the call is empty.

/// What the hook is given: the read's guest address and length.
#[cfg(feature = "fault-injection")]
pub type Hook = Box<dyn FnMut(u64, usize) + Send>;

#[cfg(feature = "fault-injection")]
static AFTER_RECORDED_READ: std::sync::Mutex<Option<Hook>> = std::sync::Mutex::new(None);

/// Runs `hook` after every recorded read of guest memory in this process from now on (`None`:
/// no longer).
#[cfg(feature = "fault-injection")]
pub fn set_after_recorded_read(hook: Option<Hook>) {
    *AFTER_RECORDED_READ.lock().unwrap_or_else(|e| e.into_inner()) = hook;
}

/// Called after a recorded read of `count` bytes at `address` was copied into the log.
#[inline]
pub fn after_recorded_read(address: u64, count: usize) {
    #[cfg(feature = "fault-injection")]
    if let Some(hook) = AFTER_RECORDED_READ.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        hook(address, count);
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = (address, count);
}

//! The only `unsafe` of the C API besides the exported functions' signatures: turning the
//! caller's pointers into references, boxes and values, each under the contract the header
//! states (a handle pointer comes from the matching `*_create`/`*_open` call of this library
//! and was not destroyed; an out-pointer points at writable memory of its type). The D3DKMT
//! API (`guest-driver/d3dkmt`) compiles this file too, for its references and slices.

use core::ffi::{c_char, CStr};

/// `p` as a shared reference, `None` for NULL.
///
/// # Safety
/// A non-NULL `p` points at a live `T` that no one mutates for `'a`.
pub(crate) unsafe fn shared<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: the caller's contract: NULL or a live, unaliased-for-writes `T`.
    unsafe { p.as_ref() }
}

/// `p` as an exclusive reference, `None` for NULL.
///
/// # Safety
/// A non-NULL `p` points at a live `T` that nothing else accesses for `'a`.
pub(crate) unsafe fn exclusive<'a, T>(p: *mut T) -> Option<&'a mut T> {
    // SAFETY: the caller's contract: NULL or a live `T` accessed only through this reference.
    unsafe { p.as_mut() }
}

/// Stores `value` at `out`; `false` for NULL.
///
/// # Safety
/// A non-NULL `out` points at writable memory for a `T` (it need not be initialized).
pub(crate) unsafe fn write<T>(out: *mut T, value: T) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: non-NULL and writable for a `T` by the caller's contract; `write` does not read
    // or drop the old contents.
    unsafe { out.write(value) };
    true
}

/// Hands `value` to the caller as a pointer it must give back to [`take`] (the `*_destroy`
/// functions); stores it at `out`, or drops it and returns `false` for a NULL `out`.
///
/// # Safety
/// As [`write`].
pub(crate) unsafe fn give<T>(out: *mut *mut T, value: T) -> bool {
    let p = Box::into_raw(Box::new(value));
    // SAFETY: the caller's contract for `out`.
    if unsafe { write(out, p) } {
        return true;
    }
    // SAFETY: `p` came from `Box::into_raw` just above and was not handed out.
    drop(unsafe { Box::from_raw(p) });
    false
}

/// Takes back (and drops) what [`give`] handed out; nothing for NULL.
///
/// # Safety
/// A non-NULL `p` came from [`give`] and was not taken back before; the caller does not use
/// it afterwards.
pub(crate) unsafe fn take<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller's contract: a pointer from `Box::into_raw`, taken back once.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// A C string as UTF-8, `None` for NULL or invalid UTF-8.
///
/// # Safety
/// A non-NULL `s` points at a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn string<'a>(s: *const c_char) -> Option<&'a str> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_str().ok()
}

/// `count` elements at `p` as a slice (empty for a count of 0, `None` for NULL otherwise).
///
/// # Safety
/// A non-NULL `p` points at `count` initialized `T`s that live, unmutated, for `'a`.
pub(crate) unsafe fn slice<'a, T>(p: *const T, count: usize) -> Option<&'a [T]> {
    if count == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, `count` initialized elements by the caller's contract.
    Some(unsafe { core::slice::from_raw_parts(p, count) })
}

/// `count` writable elements at `p` as a slice (empty for a count of 0, `None` for NULL
/// otherwise).
///
/// # Safety
/// A non-NULL `p` points at `count` `T`s, writable and used by nothing else for `'a`.
pub(crate) unsafe fn slice_mut<'a, T>(p: *mut T, count: usize) -> Option<&'a mut [T]> {
    if count == 0 {
        return Some(&mut []);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, `count` writable elements used by nothing else, by the caller's contract.
    Some(unsafe { core::slice::from_raw_parts_mut(p, count) })
}

//! The caller's pointers as references and slices, each under the contract the header states
//! for every call: a non-NULL argument pointer points at a live, writable structure of its
//! type, and an array pointer at `count` readable elements.

/// `p` as an exclusive reference, `None` for NULL.
///
/// # Safety
/// A non-NULL `p` points at a live `T` that nothing else accesses during the call.
pub(crate) unsafe fn exclusive<'a, T>(p: *mut T) -> Option<&'a mut T> {
    // SAFETY: the caller's contract: NULL or a live `T` accessed only through this reference.
    unsafe { p.as_mut() }
}

/// `p` as a shared reference, `None` for NULL.
///
/// # Safety
/// A non-NULL `p` points at a live `T` that no one mutates during the call.
pub(crate) unsafe fn shared<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: the caller's contract: NULL or a live `T`.
    unsafe { p.as_ref() }
}

/// `count` elements at `p`; `None` for NULL with a nonzero count, an empty slice for 0.
///
/// # Safety
/// A non-NULL `p` points at `count` readable `T`s that no one mutates during the call.
pub(crate) unsafe fn slice<'a, T>(p: *const T, count: usize) -> Option<&'a [T]> {
    if count == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, `count` readable elements by the caller's contract.
    Some(unsafe { core::slice::from_raw_parts(p, count) })
}

/// `count` writable elements at `p`; `None` for NULL with a nonzero count.
///
/// # Safety
/// A non-NULL `p` points at `count` writable `T`s that nothing else accesses during the call.
pub(crate) unsafe fn slice_mut<'a, T>(p: *mut T, count: usize) -> Option<&'a mut [T]> {
    if count == 0 {
        return Some(&mut []);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, `count` writable elements accessed only here, by the caller's contract.
    Some(unsafe { core::slice::from_raw_parts_mut(p, count) })
}

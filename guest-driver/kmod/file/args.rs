// SPDX-License-Identifier: GPL-2.0

//! ioctl arguments: reading and writing them, and the one shape every creating ioctl has —
//! create, copy the result out, and destroy again what was created if the copy-out fails (so
//! the process never holds an object it was not told about).

use kernel::{
    prelude::*,
    time::{ClockSource, Monotonic},
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

use crate::{
    abi::{uapi, uapi_sync},
    fence::waits::FOREVER_MS,
};

/// Reads the ioctl argument at `arg`.
///
/// # Errors
///
/// `EFAULT`.
pub(crate) fn read_arg<T: FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(UserPtr::from_addr(arg), core::mem::size_of::<T>())
        .reader()
        .read::<T>()
}

/// Writes the ioctl argument back to `arg`.
///
/// # Errors
///
/// `EFAULT`.
pub(crate) fn write_arg<T: AsBytes>(arg: usize, value: &T) -> Result {
    UserSlice::new(UserPtr::from_addr(arg), core::mem::size_of::<T>())
        .writer()
        .write(value)
}

/// Reads a [`uapi::Handle`] argument.
///
/// # Errors
///
/// `EFAULT`, `EINVAL` for a non-zero `pad`.
pub(crate) fn read_handle(arg: usize) -> Result<u32> {
    let h: uapi::Handle = read_arg(arg)?;
    if h.pad != 0 {
        return Err(EINVAL);
    }
    Ok(h.handle)
}

/// A creating ioctl: reads the argument at `arg`, lets `create` fill it in (and make the
/// object), writes it back; if the write fails, `destroy` gets the handle `handle` reads from
/// the argument, and the write's error is returned.
///
/// # Errors
///
/// The error of reading the argument, of `create`, or of writing the argument back.
pub(crate) fn create_copy_out<T: FromBytes + AsBytes>(
    arg: usize,
    create: impl FnOnce(&mut T) -> Result,
    handle: impl FnOnce(&T) -> u32,
    destroy: impl FnOnce(u32) -> Result,
) -> Result {
    let mut a: T = read_arg(arg)?;
    create(&mut a)?;
    if let Err(e) = write_arg(arg, &a) {
        // Best effort: the object was just made by this file and is destroyed the same way
        // its destroy ioctl would.
        let _ = destroy(handle(&a));
        return Err(e);
    }
    Ok(())
}

/// Milliseconds of a uapi nanosecond timeout, rounded up.
pub(crate) fn timeout_ms(ns: u64) -> u32 {
    u32::try_from(ns.div_ceil(1_000_000)).unwrap_or(u32::MAX)
}

/// Milliseconds from now until the absolute `CLOCK_MONOTONIC` deadline `deadline_ns`,
/// rounded up: 0 once it has passed, [`FOREVER_MS`] for [`uapi_sync::DEADLINE_FOREVER`] (a
/// deadline further than `FOREVER_MS` − 1 ms away waits that long, then times out).
pub(crate) fn deadline_ms(deadline_ns: u64) -> u32 {
    if deadline_ns == uapi_sync::DEADLINE_FOREVER {
        return FOREVER_MS;
    }
    // `CLOCK_MONOTONIC`, the clock of `clock_gettime(CLOCK_MONOTONIC)`; never negative.
    let now = u64::try_from(<Monotonic as ClockSource>::ktime_get()).unwrap_or(0);
    let left = deadline_ns.saturating_sub(now);
    u32::try_from(left.div_ceil(1_000_000)).map_or(FOREVER_MS - 1, |ms| ms.min(FOREVER_MS - 1))
}

// SPDX-License-Identifier: GPL-2.0

//! Anonymous-inode files holding an object: 7.3 has no anonymous-inode file abstraction (the
//! `anon_inode_getfile` binding is not generated either). A file made by [`new_file`] is an
//! `anon_inode:<name>` file whose `private_data` is a [`Holder`]: one counted reference to an
//! `Arc<T>`, its type and how to give it back; our own `release` gives it back, and our `poll`
//! reports no event (a file without `poll` would claim to be ready). [`object_of_fd`]
//! finds the object again from a file descriptor, if the file is ours and holds a `T`.

use core::{any::TypeId, ptr::NonNull};

use kernel::{
    bindings,
    fs::{file::LocalFile, File},
    prelude::*,
    sync::{aref::ARef, Arc},
};

extern "C" {
    /// `anon_inode_getfile` (`include/linux/anon_inodes.h`, `EXPORT_SYMBOL_GPL`); bindgen does
    /// not generate it for 7.3 (`anon_inodes.h` is not in the binding helper header). The
    /// structs are passed as `void *` (the bindgen structs are not FFI-safe by rustc's lint).
    fn anon_inode_getfile(
        name: *const kernel::ffi::c_char,
        fops: *const kernel::ffi::c_void,
        private: *mut kernel::ffi::c_void,
        flags: kernel::ffi::c_int,
    ) -> *mut kernel::ffi::c_void;
}

/// What `private_data` of one of our files points to.
struct Holder {
    /// The type of the object.
    type_id: TypeId,
    /// The object, from `Arc::<T>::into_raw`.
    object: *const (),
    /// Gives the reference in `object` back (`Arc::<T>::from_raw` and drop).
    put: unsafe fn(*const ()),
}

/// Gives back a reference made by `Arc::<T>::into_raw`.
///
/// # Safety
///
/// `object` came from `Arc::<T>::into_raw` and that reference is still counted; this gives it
/// back, so it must be called once.
unsafe fn put_arc<T>(object: *const ()) {
    // SAFETY: The caller's contract.
    drop(unsafe { Arc::from_raw(object.cast::<T>()) });
}

/// The `file_operations` of our files, shareable between threads.
struct AnonFops(bindings::file_operations);

// SAFETY: The table is immutable and holds only function pointers, the module pointer and
// null fields.
unsafe impl Sync for AnonFops {}

/// Our files: `release` gives back the file's reference to its object; `poll` says "not
/// ready" ([`anon_file_poll`]); `owner` keeps the module loaded while one is open.
static ANON_FOPS: AnonFops = AnonFops(bindings::file_operations {
    owner: kernel::module::this_module::<crate::LocalModule>().as_ptr(),
    release: Some(anon_file_release),
    poll: Some(anon_file_poll),
    // SAFETY: Every other field is an optional function pointer or an integer, for which
    // all-zeroes (`None`/0) is valid and means "not provided".
    ..unsafe { core::mem::zeroed() }
});

/// `file_operations::release` of our files.
///
/// # Safety
///
/// Called by the VFS once, when the last reference to a file made by [`new_file`] goes.
unsafe extern "C" fn anon_file_release(
    _inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> kernel::ffi::c_int {
    // SAFETY: `private_data` of our file came from `KBox::into_raw` in `new_file`; this takes
    // it back exactly once.
    let holder = unsafe { KBox::from_raw((*file).private_data.cast::<Holder>()) };
    // SAFETY: `holder.put` matches the type `holder.object` was made from, and the file's
    // reference is given back once, here.
    unsafe { (holder.put)(holder.object) };
    0
}

/// `file_operations::poll` of our files: no event, ever, and no wait queue to be woken on.
///
/// A file without `poll` would report `DEFAULT_POLLMASK` (readable and writable) at once,
/// which for a fence fd reads as "signaled" when nothing is. Our files hold objects that have
/// no event of their own (an exported fence names a whole timeline, not a point that could be
/// signaled), so poll reports nothing and a poller sleeps until its timeout; a pollable wait
/// on a fence value is `WAIT_FENCE_EVENTFD`. Not `EPOLLERR`: that would make an epoll loop
/// spin on a file that is not broken.
///
/// # Safety
///
/// Called by the VFS on one of our files; neither argument is used.
unsafe extern "C" fn anon_file_poll(
    _file: *mut bindings::file,
    _table: *mut bindings::poll_table_struct,
) -> bindings::__poll_t {
    0
}

/// A new read-only `anon_inode:<name>` file holding `object` (close-on-exec when installed
/// with `O_CLOEXEC`).
///
/// # Errors
///
/// `ENOMEM`, or the error of `anon_inode_getfile` (`ENFILE`).
pub(crate) fn new_file<T: Send + Sync + 'static>(
    name: &'static CStr,
    object: Arc<T>,
) -> Result<ARef<File>> {
    let object = Arc::into_raw(object).cast::<()>();
    let holder = Holder {
        type_id: TypeId::of::<T>(),
        object,
        put: put_arc::<T>,
    };
    let holder = match KBox::new(holder, GFP_KERNEL_ACCOUNT) {
        Ok(holder) => holder,
        Err(e) => {
            // SAFETY: `object` came from `Arc::<T>::into_raw` just above and is given back once.
            unsafe { put_arc::<T>(object) };
            return Err(e.into());
        }
    };
    let private = KBox::into_raw(holder);
    // SAFETY: The name is a NUL-terminated `'static` string, `ANON_FOPS` a `'static` table;
    // `private` carries the holder, owned by the file from here on (its `release` frees it) or
    // taken back below on failure.
    let raw = unsafe {
        anon_inode_getfile(
            name.as_char_ptr(),
            core::ptr::from_ref(&ANON_FOPS.0).cast(),
            private.cast(),
            // CAST: a small flag constant.
            bindings::O_RDONLY as kernel::ffi::c_int,
        )
    };
    let raw = raw.cast::<bindings::file>();
    match kernel::error::from_err_ptr(raw).ok().and_then(NonNull::new) {
        // SAFETY: `anon_inode_getfile` returned a new file with one reference, which the
        // `ARef` takes over; no `fdget_pos` can be active on a file nobody else has seen.
        Some(file) => Ok(unsafe { ARef::from_raw(file.cast::<File>()) }),
        None => {
            // SAFETY: The file was not made, so the holder and its reference are still ours.
            let holder = unsafe { KBox::from_raw(private) };
            // SAFETY: As in `anon_file_release`.
            unsafe { (holder.put)(holder.object) };
            Err(kernel::error::from_err_ptr(raw).err().unwrap_or(ENOMEM))
        }
    }
}

/// The object of type `T` the file `fd` of the calling process holds, as a new reference.
///
/// # Errors
///
/// `EBADF` for a closed fd, `EINVAL` for a file that is not one of ours or holds another type.
pub(crate) fn object_of_fd<T: Send + Sync + 'static>(fd: i32) -> Result<Arc<T>> {
    let fd = u32::try_from(fd).map_err(|_| EBADF)?;
    let file = LocalFile::fget(fd)?;
    let raw = file.as_ptr();
    // SAFETY: `file` holds a reference, so `raw` is a valid open file; `f_op` is set at open
    // and not changed afterwards.
    if !core::ptr::eq(unsafe { (*raw).f_op }, &ANON_FOPS.0) {
        return Err(EINVAL);
    }
    // SAFETY: A file with our `f_op` was made by `new_file`: `private_data` is its holder,
    // alive while the file is (held by `file` here).
    let holder = unsafe { &*(*raw).private_data.cast::<Holder>() };
    if holder.type_id != TypeId::of::<T>() {
        return Err(EINVAL);
    }
    // SAFETY: The holder's object came from `Arc::<T>::into_raw` (same type, checked above) and
    // its reference is counted while the file lives. Cloning takes a new reference; the file's
    // own stays with the file.
    let object = core::mem::ManuallyDrop::new(unsafe { Arc::from_raw(holder.object.cast::<T>()) });
    Ok(Arc::clone(&object))
}

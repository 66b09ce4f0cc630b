//! Handles at the C boundary, in the manner of rustls-ffi's `Castable`:
//! each C handle type declares, once, which Rust value it stands for, and
//! the helpers below do the NULL check, the cast and the borrow, so that an
//! exported function is its logic only.
//!
//! Every owned handle is a `Box` of its [`Castable::RustType`] turned into
//! a raw pointer by [`to_boxed_mut_ptr`] and given back exactly once to
//! [`free_box`] (by a `_free` function, which accepts NULL). A *borrowed*
//! handle ([`to_const_ptr`]) points at a value that another handle owns
//! (a lease of a `mistri_listing`): C receives it as a `const` pointer,
//! reads it with the same getters, and never frees it (passing it to a
//! `_free`, which takes a non-`const` pointer, is a compiler diagnostic).
//! The C type itself is opaque (`_private: [u8; 0]`): C only ever holds
//! the pointer, and this crate never builds a value of the C type.
//!
//! In an exported function:
//! - `try_ref_from_ptr!(locks)` borrows the value behind a `*const` handle
//!   (NULL: `MISTRI_NULL_ARGUMENT` naming the argument);
//! - `try_mut_from_ptr!(builder)` borrows it mutably from a `*mut` handle.
//!
//! The borrows are sound because of each function's `# Safety` contract:
//! handle arguments are NULL or live handles of their type, not freed
//! during the call, and (for `try_mut_from_ptr!`) not used by another
//! thread during it.

use crate::status::Failure;

/// A C handle type and the Rust value it stands for.
pub(crate) trait Castable {
    /// The value a handle of this type points at.
    type RustType;
}

/// Moves `value` to the heap and returns it as a handle for C.
pub(crate) fn to_boxed_mut_ptr<C: Castable>(value: C::RustType) -> *mut C {
    Box::into_raw(Box::new(value)).cast()
}

/// A borrowed handle for C to `value`, which stays owned by whatever holds
/// it (valid as long as that owner lives and does not move or drop it).
pub(crate) fn to_const_ptr<C: Castable>(value: &C::RustType) -> *const C {
    (value as *const C::RustType).cast()
}

/// Borrows the value behind `ptr`, or fails naming `what` if it is NULL.
///
/// # Safety
/// `ptr` is NULL or was made by [`to_boxed_mut_ptr`] or [`to_const_ptr`]
/// for this `C`, is not freed (nor its owner) during `'a`, and is not
/// borrowed mutably meanwhile.
pub(crate) unsafe fn try_ref<'a, C: Castable>(
    ptr: *const C,
    what: &'static str,
) -> Result<&'a C::RustType, Failure> {
    // SAFETY: forwarded from this function's contract; the pointer came
    // from a `Box<C::RustType>` or a `&C::RustType`, so it is aligned and
    // initialised for it.
    unsafe { ptr.cast::<C::RustType>().as_ref() }.ok_or(Failure::Null(what))
}

/// Borrows the value behind `ptr` mutably, or fails if it is NULL.
///
/// # Safety
/// As [`try_ref`], and no other reference to the value exists during `'a`.
pub(crate) unsafe fn try_mut<'a, C: Castable>(
    ptr: *mut C,
    what: &'static str,
) -> Result<&'a mut C::RustType, Failure> {
    // SAFETY: forwarded from this function's contract.
    unsafe { ptr.cast::<C::RustType>().as_mut() }.ok_or(Failure::Null(what))
}

/// Drops the value behind a handle. NULL is ignored.
///
/// # Safety
/// `ptr` is NULL or was made by [`to_boxed_mut_ptr`] for this `C`, is not
/// in use by any other thread, and is never used again.
pub(crate) unsafe fn free_box<C: Castable>(ptr: *mut C) {
    if !ptr.is_null() {
        // SAFETY: made by `Box::into_raw` in `to_boxed_mut_ptr`; given back
        // exactly once per this function's contract.
        drop(unsafe { Box::from_raw(ptr.cast::<C::RustType>()) });
    }
}

/// `try_ref_from_ptr!(arg)`: `&RustType` behind the handle argument `arg`,
/// or `return`s `MISTRI_NULL_ARGUMENT` naming `arg`. Only in an exported
/// function whose `# Safety` section makes `arg` NULL or a live handle.
macro_rules! try_ref_from_ptr {
    ($ptr:ident) => {{
        let ptr = $ptr;
        // SAFETY: the exported function's contract: `ptr` is NULL or a live
        // handle of its type, not freed during the call.
        unsafe { $crate::handle::try_ref(ptr, stringify!($ptr)) }?
    }};
}
pub(crate) use try_ref_from_ptr;

/// `try_mut_from_ptr!(arg)`: `&mut RustType` behind the handle argument
/// `arg`, or `return`s `MISTRI_NULL_ARGUMENT`. Only for handles whose doc
/// says they must not be used from two threads at once.
macro_rules! try_mut_from_ptr {
    ($ptr:ident) => {{
        let ptr = $ptr;
        // SAFETY: the exported function's contract: `ptr` is NULL or a live
        // handle of its type that no other thread uses during the call.
        unsafe { $crate::handle::try_mut(ptr, stringify!($ptr)) }?
    }};
}
pub(crate) use try_mut_from_ptr;

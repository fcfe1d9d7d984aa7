//! Every pointer from C is checked here before it becomes a reference: NULL, alignment for its
//! type, a length whose bytes fit the address space, and (for the `txl_*` structs) the magic word
//! their setup function wrote. Nothing is read or written before these pass.

use core::ffi::c_int;
use core::mem::{align_of, size_of};
use core::ptr;

use crate::status::{
    TXL_ERR_MISALIGNED, TXL_ERR_NOT_INITIALIZED, TXL_ERR_NULL, TXL_ERR_OVERLAP, TXL_ERR_SIZE_OVERFLOW,
};

/// The addresses `[start, end)` a buffer covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// The bytes of `values`.
    pub fn of<T>(values: &[T]) -> Span {
        let start = values.as_ptr() as usize;
        Span {
            start,
            end: start + core::mem::size_of_val(values),
        }
    }

    /// The bytes of one `T` at `at`.
    pub fn of_one<T>(at: *const T) -> Span {
        let start = at as usize;
        Span {
            start,
            end: start.saturating_add(size_of::<T>()),
        }
    }

    /// Whether the two share a byte.
    fn overlaps(self, other: Span) -> bool {
        self.start < self.end && other.start < other.end && self.start < other.end && other.start < self.end
    }
}

/// `TXL_ERR_OVERLAP` unless every pair of `spans` is disjoint.
pub fn disjoint(spans: &[Span]) -> Result<(), c_int> {
    for (i, a) in spans.iter().enumerate() {
        if spans[i + 1..].iter().any(|b| a.overlaps(*b)) {
            return Err(TXL_ERR_OVERLAP);
        }
    }
    Ok(())
}

/// The span of `len` values of `T` at `at`, if `at` is not NULL, is aligned for `T`, and the
/// bytes fit the address space (and `isize`, as a slice needs). Overlaps are checked on these,
/// before any reference to the bytes exists.
pub fn span<T>(at: *const T, len: usize) -> Result<Span, c_int> {
    if at.is_null() {
        return Err(TXL_ERR_NULL);
    }
    if !at.is_aligned() {
        return Err(TXL_ERR_MISALIGNED);
    }
    let bytes = len
        .checked_mul(size_of::<T>())
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .ok_or(TXL_ERR_SIZE_OVERFLOW)?;
    let start = at as usize;
    let end = start.checked_add(bytes).ok_or(TXL_ERR_SIZE_OVERFLOW)?;
    Ok(Span { start, end })
}

/// `len` values of `T` at `at`, checked (NULL, alignment, a length that fits the address space).
///
/// # Safety
/// Where the checks pass, `at` must point to `len` initialized values that nothing writes
/// while the slice lives (the C caller's contract).
pub unsafe fn slice<'a, T>(at: *const T, len: usize) -> Result<&'a [T], c_int> {
    span(at, len)?;
    // SAFETY: not NULL, aligned, the bytes fit `isize` and the address space (checked above);
    // the memory is the caller's, as this function's contract says.
    Ok(unsafe { core::slice::from_raw_parts(at, len) })
}

/// `len` values of `T` at `at` to write, checked (NULL, alignment, a length that fits the address space).
///
/// # Safety
/// Where the checks pass, `at` must point to `len` values that nothing else reads or writes
/// while the slice lives (the C caller's contract).
pub unsafe fn slice_mut<'a, T>(at: *mut T, len: usize) -> Result<&'a mut [T], c_int> {
    span(at, len)?;
    // SAFETY: as in `slice`, and the caller hands the memory over for the call.
    Ok(unsafe { core::slice::from_raw_parts_mut(at, len) })
}

/// A caller's struct of `u64` words (`txl_model`, ...) seen as what its setup function put in
/// it: a magic word, then the value.
#[repr(C)]
#[derive(Debug)]
pub struct Slot<T> {
    magic: u64,
    value: T,
}

/// Whether a `Slot<T>` fits in the storage `S` (checked at compile time for each struct).
pub const fn fits<S, T>() -> bool {
    size_of::<Slot<T>>() <= size_of::<S>() && align_of::<Slot<T>>() <= align_of::<S>()
}

/// The slot at `at`, if `at` is not NULL and is aligned.
fn slot_at<S, T>(at: *const S) -> Result<*const Slot<T>, c_int> {
    if at.is_null() {
        return Err(TXL_ERR_NULL);
    }
    let slot = at.cast::<Slot<T>>();
    if !slot.is_aligned() {
        return Err(TXL_ERR_MISALIGNED);
    }
    Ok(slot)
}

/// The value in the struct at `at`, if its magic word is `magic`.
///
/// # Safety
/// `S` must hold a `Slot<T>` ([`fits`]); where the checks pass, `at` must point to an `S` of the
/// caller's that nothing writes while the reference lives.
pub unsafe fn get<'a, S, T>(at: *const S, magic: u64) -> Result<&'a T, c_int> {
    let slot = slot_at::<S, T>(at)?;
    // SAFETY: `slot` is not NULL, aligned, and points to the caller's storage of a `Slot<T>`;
    // the magic word is read as plain bytes (volatile: storage that was never set up is read as
    // it is, and refused).
    let found = unsafe { ptr::addr_of!((*slot).magic).read_volatile() };
    if found != magic {
        return Err(TXL_ERR_NOT_INITIALIZED);
    }
    // SAFETY: the magic word says that the setup function wrote a `T` here.
    Ok(unsafe { &(*slot).value })
}

/// The value in the struct at `at` to change, if its magic word is `magic`.
///
/// # Safety
/// As [`get`], and nothing else reads or writes the struct while the reference lives.
pub unsafe fn get_mut<'a, S, T>(at: *mut S, magic: u64) -> Result<&'a mut T, c_int> {
    let slot = slot_at::<S, T>(at)?.cast_mut();
    // SAFETY: as in `get`.
    let found = unsafe { ptr::addr_of!((*slot).magic).read_volatile() };
    if found != magic {
        return Err(TXL_ERR_NOT_INITIALIZED);
    }
    // SAFETY: as in `get`; the caller hands the struct over for the call.
    Ok(unsafe { &mut (*slot).value })
}

/// Marks the struct at `at` as not set up (its magic word 0), so that a failed setup leaves
/// nothing usable behind.
///
/// # Safety
/// `S` must hold a `Slot<T>`; where the checks pass, `at` must point to an `S` of the caller's.
pub unsafe fn clear<S, T>(at: *mut S) -> Result<(), c_int> {
    let slot = slot_at::<S, T>(at)?.cast_mut();
    // SAFETY: not NULL, aligned, the caller's storage of a `Slot<T>`.
    unsafe { ptr::addr_of_mut!((*slot).magic).write_volatile(0) };
    Ok(())
}

/// Writes `value` into the struct at `at` with the magic word `magic`.
///
/// # Safety
/// As [`clear`].
pub unsafe fn put<S, T>(at: *mut S, magic: u64, value: T) -> Result<(), c_int> {
    let slot = slot_at::<S, T>(at)?.cast_mut();
    // SAFETY: not NULL, aligned, the caller's storage of a `Slot<T>`; what was there is
    // overwritten without being dropped (the values kept here own nothing).
    unsafe { slot.write(Slot { magic, value }) };
    Ok(())
}

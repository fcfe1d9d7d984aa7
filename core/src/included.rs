//! What this build of the crate includes: the weight precisions, memory dtypes and arithmetic
//! that its cargo features name (all of them by default).
//!
//! A firmware that runs one kind of image leaves the rest out (`default-features = false`,
//! then e.g. `features = ["weights-int8", "memory-f32"]`). Each branch that serves something
//! left out is guarded by one of these constants, so the compiler removes it and its kernels
//! are not linked; [`Image::parse`](crate::Image::parse) and
//! [`Session::new`](crate::Session::new) refuse an image or options that need it with
//! [`Error::LeftOut`](crate::Error::LeftOut), so no guarded branch is ever reached with data. (A [`Matrix`] of a
//! left-out precision built by hand through the public API computes nothing: its products
//! leave the outputs as they were.)
//!
//! [`Matrix`]: crate::weights::Matrix

/// f32 weight matrices (feature `weights-f32`).
pub const WEIGHTS_F32: bool = cfg!(feature = "weights-f32");
/// f16 weight matrices (feature `weights-f16`).
pub const WEIGHTS_F16: bool = cfg!(feature = "weights-f16");
/// int8 weight matrices (feature `weights-int8`).
pub const WEIGHTS_INT8: bool = cfg!(feature = "weights-int8");
/// int4 weight matrices (feature `weights-int4`).
pub const WEIGHTS_INT4: bool = cfg!(feature = "weights-int4");
/// Recurrence memory in f32 (feature `memory-f32`).
pub const MEMORY_F32: bool = cfg!(feature = "memory-f32");
/// Recurrence memory in f16 (feature `memory-f16`).
pub const MEMORY_F16: bool = cfg!(feature = "memory-f16");
/// Recurrence memory in int8 (feature `memory-int8`).
pub const MEMORY_INT8: bool = cfg!(feature = "memory-int8");
/// Integer-only arithmetic (feature `integer`).
pub const INTEGER: bool = cfg!(feature = "integer");
/// Weights quantized to int8 or int4 (their inputs are quantized to int8).
pub(crate) const WEIGHTS_QUANTIZED: bool = WEIGHTS_INT8 || WEIGHTS_INT4;

#[cfg(not(any(
    feature = "weights-f32",
    feature = "weights-f16",
    feature = "weights-int8",
    feature = "weights-int4"
)))]
compile_error!("txl-core needs at least one weight precision: a feature `weights-f32`, `weights-f16`, `weights-int8` or `weights-int4`");

#[cfg(not(any(feature = "memory-f32", feature = "memory-f16", feature = "memory-int8")))]
compile_error!(
    "txl-core needs at least one memory dtype: a feature `memory-f32`, `memory-f16` or `memory-int8`"
);

/// The branch for a weight precision or memory dtype this build leaves out: nothing is
/// computed or stored. `Image::parse` and `Session::new` refuse what needs it, so only a
/// [`Matrix`](crate::weights::Matrix) built by hand through the public API gets here.
#[inline(always)]
pub(crate) fn left_out() {}

//! `txl_model`: a model image parsed in place, what it holds, and the sizes a session of it
//! needs.

use core::ffi::{c_int, c_void};

use txl_core::image::Arithmetic;
use txl_core::{MemDtype, Model, PositionKeys, Session, SessionOptions};

use crate::checked::{self, fits, Span};
use crate::options::txl_options;
use crate::status::{code, of_error, TXL_ERR_INTEGER_OPTIONS};

/// Words (`uint64_t`) of a `txl_model` where pointers have 64 bits.
#[cfg(target_pointer_width = "64")]
pub const TXL_MODEL_WORDS: usize = 96;
/// Words (`uint64_t`) of a `txl_model` where pointers have 32 bits.
#[cfg(not(target_pointer_width = "64"))]
pub const TXL_MODEL_WORDS: usize = 64;

/// A parsed model: the caller's storage, filled by [`txl_model_parse`].
#[repr(C)]
#[derive(Debug)]
pub struct txl_model {
    opaque: [u64; TXL_MODEL_WORDS],
}

const _: () = assert!(
    fits::<txl_model, Model<'static>>(),
    "TXL_MODEL_WORDS is too small"
);

/// Marks a `txl_model` that [`txl_model_parse`] filled: "txlmodel".
const MAGIC: u64 = u64::from_le_bytes(*b"txlmodel");

/// What a model is (`txl_core::Config`, and the image's arithmetic).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct txl_model_info {
    /// Vocabulary size: token ids are `0..n_token`, a row of log-probabilities has `n_token`.
    pub n_token: u32,
    /// Decoder layers.
    pub n_layer: u32,
    /// Residual width.
    pub d_model: u32,
    /// Attention heads.
    pub n_head: u32,
    /// Width of one head.
    pub d_head: u32,
    /// Feed-forward width.
    pub d_inner: u32,
    /// 1: an integer image (activations in fixed point); 0: a float image.
    pub integer: u32,
    /// Bytes of the image.
    pub image_bytes: usize,
}

/// The parsed model in `model`, if [`txl_model_parse`] filled it.
///
/// # Safety
/// As [`checked::get`].
pub(crate) unsafe fn model_ref<'a>(model: *const txl_model) -> Result<&'a Model<'static>, c_int> {
    // SAFETY: `txl_model` holds a `Slot<Model>` (asserted above); the rest is the caller's.
    unsafe { checked::get::<txl_model, Model<'static>>(model, MAGIC) }
}

/// The session options `txl score` runs a model with when given none: the model's `tgt_len`,
/// `mem_len`, `clamp_len` and `same_length`, an empty memory at the start, position keys per
/// session, and the memory in f32 (int8 for an integer image, which needs it).
pub(crate) fn default_options(model: &Model<'_>) -> SessionOptions {
    let options = SessionOptions::from_config(model.config());
    match model.image().arithmetic() {
        Arithmetic::Integer { .. } => SessionOptions {
            mem_dtype: MemDtype::Int8,
            ..options
        },
        Arithmetic::Float => options,
    }
}

/// `TXL_ERR_INTEGER_OPTIONS` for options an integer image cannot run with (as
/// `txl_core::Session::new` refuses them), so that the sizes are refused too.
pub(crate) fn check_arithmetic(model: &Model<'_>, options: &SessionOptions) -> Result<(), c_int> {
    let integer = matches!(model.image().arithmetic(), Arithmetic::Integer { .. });
    if integer
        && (options.mem_dtype != MemDtype::Int8 || options.position_keys == PositionKeys::FoldedIntoQuery)
    {
        return Err(TXL_ERR_INTEGER_OPTIONS);
    }
    Ok(())
}

/// Parses the image of `image_bytes` bytes at `image` (16-byte aligned) into `model`, checking
/// everything about it once (its CRC-32 included): nothing is copied, the image must stay where
/// it is while the model or a session of it is used. A pointer refused changes nothing; an image
/// refused leaves `model` not set up.
///
/// # Safety
/// `model` must point to a `txl_model`, `image` to `image_bytes` readable bytes that do not
/// change while the model is used (both checked for NULL and alignment).
#[no_mangle]
pub unsafe extern "C" fn txl_model_parse(
    model: *mut txl_model,
    image: *const c_void,
    image_bytes: usize,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { parse(model, image, image_bytes) })
}

unsafe fn parse(model: *mut txl_model, image: *const c_void, image_bytes: usize) -> Result<(), c_int> {
    let image_span = checked::span(image.cast::<u8>(), image_bytes)?;
    checked::disjoint(&[image_span, Span::of_one(model)])?;
    // Every pointer checked: from here on a failure leaves the model not set up.
    // SAFETY: `txl_model` holds a `Slot<Model>`; the caller's contract.
    unsafe { checked::clear::<txl_model, Model<'static>>(model)? };
    // SAFETY: the caller's contract: the bytes stay, unchanged, while the model is used.
    let bytes: &'static [u8] = unsafe { checked::slice(image.cast::<u8>(), image_bytes)? };
    let parsed = Model::parse(bytes).map_err(of_error)?;
    // SAFETY: as above.
    unsafe { checked::put(model, MAGIC, parsed) }
}

/// Writes what `model` is to `info`.
///
/// # Safety
/// `model` must point to a `txl_model`, `info` to a `txl_model_info` (both checked).
#[no_mangle]
pub unsafe extern "C" fn txl_model_get_info(model: *const txl_model, info: *mut txl_model_info) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { model_info(model, info) })
}

unsafe fn model_info(model: *const txl_model, info: *mut txl_model_info) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    unsafe { write_out(model, info, |model| Ok(info_of(model))) }
}

/// What `model` is.
fn info_of(model: &Model<'_>) -> txl_model_info {
    let c = model.config();
    txl_model_info {
        n_token: c.n_token,
        n_layer: c.n_layer,
        d_model: c.d_model,
        n_head: c.n_head,
        d_head: c.d_head,
        d_inner: c.d_inner,
        integer: u32::from(matches!(model.image().arithmetic(), Arithmetic::Integer { .. })),
        image_bytes: model.image().bytes().len(),
    }
}

/// Writes `value(model)` to the one `T` at `out`, which must overlap neither the model's storage
/// nor its image.
///
/// # Safety
/// `model` must point to a `txl_model`, `out` to a `T` (each checked).
unsafe fn write_out<T>(
    model: *const txl_model,
    out: *mut T,
    value: impl FnOnce(&Model<'static>) -> Result<T, c_int>,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let parsed = unsafe { model_ref(model)? };
    let out_span = checked::span(out, 1)?;
    checked::disjoint(&[out_span, Span::of_one(model), Span::of(parsed.image().bytes())])?;
    let written = value(parsed)?;
    // SAFETY: the caller's contract; it overlaps nothing this function reads.
    let slot = unsafe { checked::slice_mut(out, 1)? };
    slot[0] = written;
    Ok(())
}

/// Writes to `options` the options `txl score` runs `model` with when given none: the model's
/// `tgt_len`, `mem_len`, `clamp_len` and `same_length`, `TXL_MEM_INIT_EMPTY`,
/// `TXL_POSITION_KEYS_SESSION`, and `TXL_MEM_DTYPE_F32` (`TXL_MEM_DTYPE_INT8` for an integer image).
///
/// # Safety
/// `model` must point to a `txl_model`, `options` to a `txl_options` (both checked).
#[no_mangle]
pub unsafe extern "C" fn txl_model_default_options(
    model: *const txl_model,
    options: *mut txl_options,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { model_default_options(model, options) })
}

unsafe fn model_default_options(model: *const txl_model, options: *mut txl_options) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    unsafe {
        write_out(model, options, |model| {
            Ok(txl_options::from_core(&default_options(model)))
        })
    }
}

/// The options at `options`, checked.
///
/// # Safety
/// `options` must point to a `txl_options` (checked for NULL and alignment).
pub(crate) unsafe fn read_options(options: *const txl_options) -> Result<SessionOptions, c_int> {
    // SAFETY: the caller's contract.
    let options = unsafe { checked::slice(options, 1)? };
    options[0].to_core()
}

/// Writes to `bytes` the exact size of the arena a session of `model` with `options` needs
/// (`txl_core::Session::arena_bytes`).
///
/// # Safety
/// `model` must point to a `txl_model`, `options` to a `txl_options`, `bytes` to a `size_t`
/// (each checked).
#[no_mangle]
pub unsafe extern "C" fn txl_arena_bytes(
    model: *const txl_model,
    options: *const txl_options,
    bytes: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { sizes(model, options, bytes, Session::arena_bytes) })
}

/// Writes to `bytes` the most bytes `txl_session_save_state` writes for a session of `model`
/// with `options` (a full memory: `txl_core::Session::state_bytes_for`).
///
/// # Safety
/// As [`txl_arena_bytes`].
#[no_mangle]
pub unsafe extern "C" fn txl_state_bytes(
    model: *const txl_model,
    options: *const txl_options,
    bytes: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { sizes(model, options, bytes, Session::state_bytes_for) })
}

unsafe fn sizes(
    model: *const txl_model,
    options: *const txl_options,
    bytes: *mut usize,
    size: fn(&Model<'_>, &SessionOptions) -> Result<usize, txl_core::Error>,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let options = unsafe { read_options(options)? };
    // SAFETY: the caller's contract.
    unsafe {
        write_out(model, bytes, |model| {
            check_arithmetic(model, &options)?;
            size(model, &options).map_err(of_error)
        })
    }
}

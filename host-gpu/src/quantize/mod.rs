//! The quantizer: f32 image in, f16, int8 or int4 image out, with a report of what it cost.
//!
//! int8 is per-row symmetric with the clipping range searched per row ([`int8`]), computed on
//! the device as W8A8 (activations quantized per token). With calibration text, activation
//! smoothing (SmoothQuant: migrate per-channel activation range into the weights, strength
//! `alpha`) is tried and kept only where it lowers the measured bits per token, and a
//! sensitivity pass can keep the tensors whose quantization costs most in f16.
//!
//! With calibration text, int8 rows can also be rounded with their errors compensated
//! ([`gptq`]: GPTQ, weighed by the Gram matrix of each matrix's inputs, [`inputs`]) instead of
//! to the nearest grid point; [`Method`] says which, or lets the measured bits per token on
//! the calibration text choose per tensor.
//!
//! int4 ([`int4`]) has a scale per row and a multiplier per group of columns, is computed as
//! W4A8, and goes to the linear layers ([`Target::Int4`], the embedding and output layers in
//! int8) or to every matrix ([`Target::Int4All`]); the same rounding methods apply.
//!
//! [`MixedPrecision`] mixes precisions by measurement: each matrix quantized alone costs some
//! calibration bits per token, and the costliest int4 matrices stay int8 (`auto_keep_int8`), or
//! matrices go up a precision, the largest gain per byte first, until the image would exceed a
//! byte budget ([`quantize_mixed`]).

#[cfg(feature = "reference")]
pub mod calibrate;

#[cfg(feature = "reference")]
pub mod compare;

pub mod gptq;
pub mod int4;
pub mod int8;

#[cfg(feature = "reference")]
pub mod inputs;

mod options;
mod report;
#[cfg(feature = "reference")]
mod search;
mod source;

pub use options::{
    glob_match, Method, MixedPrecision, QuantizeOptions, Smoothing, Target, VectorDtype, AUTO_FIT_SHARE,
};
pub use report::{PrecisionReport, Quantized, Report, RoundingReport, TensorReport};
#[cfg(feature = "reference")]
pub use search::{quantize, quantize_mixed};
pub use source::{quantize_weights, quantize_weights_grouped};

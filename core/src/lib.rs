//! # txl-core: Transformer-XL inference for microcontrollers
//!
//! This crate runs a trained Transformer-XL language model (Dai et al., 2019; the `attn_type = 0`
//! model of the original code) on anything from a Cortex-M4 to a server, with no operating
//! system, no heap and no panics on input.
//!
//! ## What it does
//! - Reads a model image in place ([`Model::parse`] over a `&[u8]`, e.g. a `&'static [u8]` in
//!   flash): every bound, shape and the CRC are checked once, so the forward pass reads
//!   weights with no further checks. The format is documented in `core/FORMAT.md`.
//! - Runs the forward pass of the paper: adaptive input embedding, relative multi-head
//!   attention with the content bias `u` (`r_w_bias`) and position bias `v` (`r_r_bias`)
//!   computed directly per (query, key distance) pair, causal and `same_length` masks,
//!   `clamp_len`, post- or pre-LayerNorm, the ReLU feed-forward, and the full or adaptive
//!   log-softmax. See [`Session::forward`]; the code in `session/forward.rs` reads top to
//!   bottom like the paper.
//! - Keeps the recurrence memory as a ring buffer of each layer's cached keys and values, so
//!   no position's projections are ever computed twice; the cache is f32, f16, or int8 with a
//!   scale per position and head ([`MemDtype`]).
//! - Saves and restores that memory, the model's whole state between segments
//!   ([`Session::save_state`], [`Session::restore_state`], [`Session::state_bytes`]): a device
//!   keeps it across a reset or deep sleep and continues bit for bit; a state from another model
//!   or other options, or a damaged one, is refused ([`StateError`]) and changes nothing.
//! - Computes with each weight matrix in the precision the image stores it: f32, f16 (widened,
//!   f32 accumulation) or int8 with per-row scales as W8A8 (activations quantized per token,
//!   i32 accumulation); see [`weights`]. LayerNorm, softmax and residuals stay f32. The
//!   portable kernels ([`kernels::portable`]) are the reference any faster kernel must match;
//!   [`kernels`] chooses among them by operation.
//!
//! ## How memory works
//! Everything a session needs lives in one caller-provided arena. [`Session::arena_bytes`]
//! says exactly how many bytes before anything runs; [`Session::new`] carves the arena into
//! the memory ring buffers, the activations and the scratch rows, and fails with
//! [`Error::ArenaTooSmall`] if it is short. The forward pass never allocates.
//!
//! ## What it refuses to do
//! - Allocate: there is no `alloc` in the inference path. The optional `alloc` feature adds
//!   what host tools need around it: the image writer, an owned aligned buffer
//!   (`AlignedBytes`, allocated fallibly) and whole-text `scoring`.
//! - Panic on input: a truncated or corrupt image, a short arena, an out-of-range token id or
//!   a too-long segment come back as an [`Error`]. A panic on input is a bug.
//! - Approximate silently: the f32 math is exact (`libm`'s `expf`, `sqrtf`, `sin`, `cos`), and the
//!   only approximations are the ones the image, the options or the opt-in `fast-math` feature
//!   ask for (f16 / int8; micromath's `exp`). Faster kernels (`cortex-m-dsp`, `cortex-m-mve`,
//!   AVX, AVX2, F16C, AVX-512, VNNI and AMX with `std` on x86-64, NEON (and SDOT with `std`)
//!   on aarch64) keep the portable code's order of rounding: the same bits.
//!
//! ## Example
//! ```
//! # fn demo(image_bytes: &[u8]) -> Result<(), txl_core::Error> {
//! use txl_core::{Model, Session, SessionOptions};
//!
//! let model = Model::parse(image_bytes)?;
//! let options = SessionOptions::from_config(model.config());
//! let mut arena = vec![0u128; Session::arena_bytes(&model, &options)? / 16];
//! let mut session = Session::new(&model, bytemuck::cast_slice_mut(&mut arena), options)?;
//! session.forward(&[72, 101, 108], |position, log_probs| {
//!     let _ = (position, log_probs); // ln p(next token | tokens so far), one row per position
//! })?;
//! # Ok(()) }
//! ```
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
// `unsafe` lives only in the kernels (SIMD intrinsics and Cortex-M instructions) and in the
// host's aligned buffer (a zeroed allocation).
#![deny(unsafe_code)]

#[cfg(target_endian = "big")]
compile_error!("txl-core reads little-endian model images in place; big-endian targets are not supported");

#[cfg(all(feature = "cortex-m-dsp", not(target_arch = "arm")))]
compile_error!("the `cortex-m-dsp` feature is for Arm Cortex-M targets with the DSP extension");

#[cfg(feature = "alloc")]
extern crate alloc;

#[cfg(feature = "alloc")]
#[allow(unsafe_code)]
mod aligned;
pub mod arena;
pub(crate) mod attention;
pub mod config;
mod crc32;
pub mod digest;
pub(crate) mod embedding;
pub mod error;
pub mod fixed_point;
pub mod image;
pub mod included;
pub mod int8_attention;
pub mod integer;
#[allow(unsafe_code)]
pub mod kernels;
pub mod macs;
pub mod matrix;
pub(crate) mod memory;
pub mod model;
pub mod options;
pub(crate) mod output;
pub(crate) mod position;
#[cfg(feature = "alloc")]
pub mod random_model;
pub mod rng;
pub mod sampling;
#[cfg(feature = "alloc")]
pub mod scoring;
pub mod session;
pub mod tensors;
#[cfg(all(test, feature = "std"))]
pub(crate) mod test_skips;
pub mod vector;
pub mod vocab;
pub mod weights;

#[cfg(feature = "alloc")]
pub use aligned::AlignedBytes;
pub use attention::AttentionShape;
pub use config::Config;
pub use crc32::crc32;
pub use error::{ArithmeticError, ConfigError, Error, StateError};
pub use image::Image;
pub use model::Model;
pub use options::{MemDtype, MemInit, OptionWord, PositionKeys, SessionOptions, UnknownWord};
pub use session::{Linear, Probe, Session};
pub use vocab::{VocabError, Vocabulary};

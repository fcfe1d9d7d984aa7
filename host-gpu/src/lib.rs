//! # txl-host-gpu: an independent full-precision Transformer-XL reference, and the quantizer
//!
//! Every quantized or device result of txl is checked against a forward pass that is
//! trustworthy and fast enough for a real checkpoint (WT103: 18 layers, d_model 1024,
//! mem_len 1600, 245K test tokens). This crate is that pass, on three backends:
//!
//! | [`Backend`] | precision | where | what for |
//! |---|---|---|---|
//! | `Cpu64` | f64 | any CPU | the golden reference (agrees with Hugging Face's float64 to 1e-13) |
//! | `Cpu32` | f32 | any CPU | what an f32 implementation should reach |
//! | `Cuda` | f32 | NVIDIA GPU | calibrating and evaluating real checkpoints |
//!
//! ## Independent of the core
//! It shares only the model image reader and the config type with `txl-core`; none of the
//! core's arithmetic. The structure differs on purpose, so that a bug in either shows up as a
//! difference between them:
//! - it works on a batch of independent streams at once, each with its own memory
//!   ([`Reference::score_batch`]); rows of all streams go through one GEMM per weight;
//! - attention is three products per head and stream (`(Q+u) K^T`, `(Q+v) R^T` over every
//!   distance, `P V`), the relative shift being an index into the second;
//! - the masks are Hugging Face's `triu` / `tril` definitions, evaluated per (query, key);
//! - the position embeddings use `inv_freq` rounded exactly as PyTorch stores it.
//!
//! ## CUDA without CUDA
//! The CUDA libraries are loaded at run time, so the crate builds and its CPU backends run on
//! machines with no CUDA at all. [`cuda_available`] checks for the driver (one for CUDA 13 or
//! newer), a device and cuBLAS before anything touches them and reports their absence as
//! [`Error::NoGpu`]. The kernels (`src/cuda/kernels.cu`) are compiled by NVRTC at run time;
//! [`compile_kernels`] needs only `libnvrtc`, not a GPU, so CI compiles them on machines
//! without one.
//!
//! ## Calibration statistics
//! [`Reference::statistics`] runs calibration text through any backend and returns what the
//! quantizer needs ([`Statistics`]): each linear layer's per-column input ranges and, when
//! asked, the Gram matrices `XᵀX` of its inputs, summed in f64 (on CUDA by cuBLAS's
//! double-precision products, on the device).
//!
//! ## Example
//! ```
//! use txl_core::{Config, Model, SessionOptions};
//! use txl_host_gpu::{random_image, Backend, RandomInit, Reference};
//!
//! let config = Config {
//!     n_token: 50, d_model: 16, d_embed: 16, n_head: 2, d_head: 8, d_inner: 32, n_layer: 2,
//!     cutoffs: [0; 8], n_cutoffs: 0, div_val: 1, tie_weight: true, tie_projs: 0,
//!     pre_lnorm: false, untie_r: true, layer_norm_epsilon: 1e-5,
//!     tgt_len: 4, mem_len: 6, clamp_len: 0, same_length: false,
//! };
//! let image = random_image(&config, 1, RandomInit::default())?;
//! let aligned = txl_core::AlignedBytes::copy_from(&image)?; // Model::parse wants 16-byte alignment
//! let model = Model::parse(aligned.bytes())?;
//! let mut reference = Reference::new(&model, Backend::Cpu64)?;
//! let options = SessionOptions::from_config(model.config());
//! let streams: [&[u32]; 2] = [&[1, 2, 3, 4, 5, 6, 7], &[9, 8, 7]];
//! let scores = reference.score_batch(&streams, &options, 0, |_| {})?;
//! assert_eq!(scores[0].logp.len(), 6);
//! assert!(scores[1].logp.iter().all(|&lp| lp < 0.0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "reference")]
mod cpu;
#[cfg(feature = "reference")]
mod cuda;
#[cfg(feature = "reference")]
mod engine;
mod error;
#[cfg(feature = "reference")]
mod eval;
mod gram;
#[cfg(feature = "reference")]
pub mod integer;
pub mod quantize;
mod random;
#[cfg(feature = "reference")]
mod real;
#[cfg(feature = "reference")]
mod reference;
#[cfg(feature = "reference")]
mod statistics;
#[cfg(feature = "reference")]
mod weights;

#[cfg(feature = "reference")]
#[doc(hidden)]
pub use cuda::CudaLimits;
#[cfg(feature = "reference")]
pub use cuda::{
    compile_kernels, cuda_available, nvrtc_available, CompiledKernels, GpuInfo, KERNEL_NAMES, KERNEL_SOURCE,
    MIN_DRIVER_VERSION,
};
pub use error::Error;
#[cfg(feature = "reference")]
pub use eval::{eval, split_streams, EvalReport};
pub use random::{random_image, small_config, RandomInit};
#[cfg(feature = "reference")]
pub use reference::{Backend, Reference, StreamScores};
#[cfg(feature = "reference")]
pub use statistics::Statistics;
#[cfg(feature = "reference")]
pub use weights::{inv_freq, position_embeddings};

//! Cortex-M kernels, chosen at compile time (feature `cortex-m-dsp`, or an Arm target without
//! it). Each gives the portable kernels' bits.
//!
//! - `base.rs`: the cores without the DSP extension (Armv7-M: Cortex-M3; Armv6-M: M0, M0+):
//!   int8 rows four at a time.
//! - `dsp.rs`: the DSP extension (Armv7E-M: Cortex-M4, M7; Armv8-M Mainline with DSP: M33,
//!   M55): int8 and int4 rows and the int8 attention's sums with `SMLAD`.
//! - `dsp_integer.rs`: the DSP extension without Helium: the integer arithmetic's per-value
//!   passes, a rescale a `SMMULR`.
//! - `dsp_scores.rs`: the DSP extension without Helium: the integer attention's scores, a run
//!   of keys read where they lie (the memory's ring, the position tables by distance).
//! - `fpu.rs`: the single-precision FPU (target ABI `eabihf`): f32 and f16 rows four at a time,
//!   weighted rows, f16 widened by `VCVTB`/`VCVTT`.
//! - `helium.rs`: Helium, the M-profile Vector Extension (Cortex-M55, M85; feature
//!   `cortex-m-mve`): int8 and int4 rows sixteen columns an instruction, the int8 quantization
//!   and scaling four values an instruction, the attention's int8 sums.
//! - `helium_integer.rs`: Helium for the integer image's glue outside the attention: the int8
//!   memory's power-of-two quantization, the feed-forward's bias passes, the output's biases.

#[cfg(any(all(target_arch = "arm", not(feature = "cortex-m-dsp")), test))]
pub mod base;
#[cfg(feature = "cortex-m-dsp")]
pub mod dsp;
#[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
pub mod dsp_integer;
#[cfg(all(feature = "cortex-m-dsp", not(feature = "cortex-m-mve")))]
pub mod dsp_scores;
#[cfg(target_abi = "eabihf")]
pub mod fpu;
#[cfg(feature = "cortex-m-mve")]
pub mod helium;
#[cfg(feature = "cortex-m-mve")]
pub mod helium_integer;

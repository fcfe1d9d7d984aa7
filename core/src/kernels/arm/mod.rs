//! Cortex-M kernels, chosen at compile time (feature `cortex-m-dsp`). Each gives the portable
//! kernels' bits.
//!
//! - `dsp.rs`: the DSP extension (Armv7E-M: Cortex-M4, M7; Armv8-M Mainline with DSP: M33,
//!   M55): int8 and int4 rows and the int8 attention's sums with `SMLAD`.
//! - `fpu.rs`: the single-precision FPU (target ABI `eabihf`): f32 and f16 rows four at a time,
//!   weighted rows, f16 widened by `VCVTB`/`VCVTT`.
//! - `helium.rs`: Helium, the M-profile Vector Extension (Cortex-M55, M85; feature
//!   `cortex-m-mve`): int8 rows sixteen columns an instruction.

pub mod dsp;
#[cfg(target_abi = "eabihf")]
pub mod fpu;
#[cfg(feature = "cortex-m-mve")]
pub mod helium;

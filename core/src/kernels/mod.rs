//! Numeric kernels. `scalar` is the reference every faster kernel must match.
//!
//! Each kernel states its shapes: `W (rows, cols) @ x (cols) -> y (rows)`. Slices are taken
//! at the lengths the shapes say; callers pass buffers of exactly those lengths.

pub mod scalar;

pub mod fast_math;

#[cfg(feature = "cortex-m-dsp")]
pub mod cortex_m;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub mod x86;

pub use scalar::*;

/// `sum a[i] * b[i]` in i32: the Cortex-M DSP kernel with the `cortex-m-dsp` feature, AVX2 on
/// x86-64 with the `std` feature when the CPU has it, else the scalar one. All give the same bits.
#[inline]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(feature = "cortex-m-dsp")]
    return cortex_m::dot_i8(a, b);
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if x86::has_avx2() {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { x86::dot_i8(a, b) };
    }
    #[cfg(not(feature = "cortex-m-dsp"))]
    return scalar::dot_i8(a, b);
}

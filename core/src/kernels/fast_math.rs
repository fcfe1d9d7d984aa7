//! The `exp` of the softmaxes: `libm::expf` (exact), or with the `fast-math` feature
//! `micromath`'s approximation.
//!
//! micromath's `exp` splits `x / ln 2` into an integer and a fraction and sums four terms of the
//! Taylor series of `e^y` on the fraction (`|y| < ln 2`). For the inputs a softmax gives it
//! (`x - max(x) <= 0`) it overestimates by up to [`EXP_MAX_RELATIVE_ERROR`] (2.4e-3 measured,
//! at `y` near `-ln 2`; 3.7e-4 on average) and is exact at 0, so the largest score still
//! weighs 1 before the normalisation. It is plain f32 and integer code, so the host and a
//! Cortex-M give the same bits.
//!
//! Only `exp` is replaced: it runs once per visible key and head in the attention and once per
//! vocabulary entry in the output. `ln` runs once per output row and `sqrt` once per LayerNorm,
//! too rarely to matter for speed, and micromath's `sqrt` (up to 6% off) would visibly change
//! the LayerNorm's output; both stay exact.
//!
//! ```
//! use txl_core::kernels::fast_math::{softmax_exp, EXP_MAX_RELATIVE_ERROR};
//!
//! let exact = libm::expf(-2.5);
//! assert!((softmax_exp(-2.5) - exact).abs() <= EXP_MAX_RELATIVE_ERROR * exact);
//! assert_eq!(softmax_exp(0.0), 1.0);
//! ```

/// Whether this build uses the approximation (the `fast-math` feature).
pub const FAST_MATH: bool = cfg!(feature = "fast-math");

/// Largest relative error of [`softmax_exp`] for inputs in `[-87, 0]` with `fast-math` (0.0 is
/// exact, -87 is near the smallest normal result). Below that the result is 0 or a subnormal,
/// within `f32::MIN_POSITIVE` of the exact value. Without the feature the error is `libm`'s,
/// under 1 ulp.
pub const EXP_MAX_RELATIVE_ERROR: f32 = if FAST_MATH { 2.5e-3 } else { 1.2e-7 };

/// `e^x` for a softmax, whose inputs are `<= 0`: exact, or micromath's with `fast-math`.
#[inline]
pub fn softmax_exp(x: f32) -> f32 {
    #[cfg(feature = "fast-math")]
    return micromath::F32(x).exp().0;
    #[cfg(not(feature = "fast-math"))]
    return libm::expf(x);
}

pub mod expf {
    //! `libm`'s `expf`, as the vector kernels compute it lane by lane (`x86_64/avx.rs` eight lanes,
    //! `x86_64/avx512.rs` sixteen): its constants bit for bit and the thresholds of its paths, so
    //! that both give its bits.
    //!
    //! For `x <= 0`: `k` is `trunc(x / ln 2 - 1/2)` beyond [`THREE_HALVES_LN2`], `-1` beyond
    //! [`HALF_LN2`], else 0; `r = (x - k ln2_hi) - k ln2_lo`; `c = r - r² (P1 + r² P2)`; `y = 1 + ((r
    //! c / (2 - c) - k ln2_lo) + (x - k ln2_hi))`; then `y · 2^k` as `scalbnf` takes it (below
    //! `2^-126` first times [`DEEP_SCALE`]). `|x| <=` [`TINY`] gives `1 + x`, `x <=`
    //! [`-UNDERFLOW`](UNDERFLOW) gives 0, and a NaN or `x >` [`TINY`] goes to `libm` itself.

    /// `ln 2`'s high part.
    pub const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
    /// `ln 2`'s low part.
    pub const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
    /// `1 / ln 2`.
    pub const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b);
    /// The polynomial's first coefficient.
    pub const P1: f32 = f32::from_bits(0x3e2a_aa8f);
    /// The polynomial's second coefficient.
    pub const P2: f32 = f32::from_bits(0xbb35_5215);
    /// `2^-14`: at or below it in magnitude `expf(x)` is `1 + x`; above it (positive) another
    /// path.
    pub const TINY: u32 = 0x3900_0000;
    /// `1.5 ln 2`: beyond it `k` is the rounded quotient.
    pub const THREE_HALVES_LN2: u32 = 0x3f85_1592;
    /// `0.5 ln 2`: beyond it (and up to [`THREE_HALVES_LN2`]) `k` is `-1`.
    pub const HALF_LN2: u32 = 0x3eb1_7218;
    /// `103.972084`: at or below its negative the result is 0.
    pub const UNDERFLOW: u32 = 0x42cf_f1b5;
    /// `2^-102`, the first factor of a subnormal result's scaling.
    pub const DEEP_SCALE: u32 = 0x0c80_0000;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 61st f32 from -0 down to -87 (about 17 million values, each exponent range
    /// evenly), a million evenly spaced values, then the range whose results are subnormal or
    /// 0, and -inf. Far fewer under Miri.
    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn exp_stays_within_its_stated_error_where_a_softmax_uses_it() {
        let (stride, steps) = if cfg!(miri) {
            (1_000_003, 1_000)
        } else {
            (61, 1_000_000)
        };
        let mut bits = (-0.0f32).to_bits();
        while f32::from_bits(bits) >= -87.0 {
            let x = f32::from_bits(bits);
            let exact = libm::exp(f64::from(x));
            let relative = (f64::from(softmax_exp(x)) - exact).abs() / exact;
            assert!(
                relative <= f64::from(EXP_MAX_RELATIVE_ERROR),
                "exp({x}): {} vs {exact}, relative error {relative:e}",
                softmax_exp(x)
            );
            bits += stride;
        }
        // Evenly spaced too: the error depends on where x / ln 2 falls between integers.
        for i in 0..=steps {
            let x = -87.0 * i as f32 / steps as f32;
            let exact = libm::exp(f64::from(x));
            let relative = (f64::from(softmax_exp(x)) - exact).abs() / exact;
            assert!(
                relative <= f64::from(EXP_MAX_RELATIVE_ERROR),
                "exp({x}): relative error {relative:e}"
            );
        }
        for i in 0..=steps / 100 {
            let x = -87.0 - 100.0 * i as f32 / (steps / 100) as f32;
            let exact = libm::exp(f64::from(x));
            let absolute = (f64::from(softmax_exp(x)) - exact).abs();
            assert!(
                absolute <= f64::from(f32::MIN_POSITIVE),
                "exp({x}): {absolute:e} off"
            );
        }
        assert_eq!(softmax_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(softmax_exp(0.0), 1.0);
        assert_eq!(softmax_exp(-0.0), 1.0);
    }
}

//! A linear layer's input and output scales in the integer arithmetic: the input quantized to
//! int8 with one [`Scale16`] step per position, each output row `Σ w q` rescaled by its row's
//! scale times that step ([`Scale16::times`], [`Rescale::apply`]), so a row costs two 32-bit
//! products and no 64-bit arithmetic. The core's session and the reference crate share these
//! definitions.

use crate::fixed_point::{round_shift, Rescale, Scale16};

/// How a linear layer's input becomes int8 (`round(x · 127 / m)` for `m = max|x|`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int8Steps {
    /// `127 / m`, as applied to each value after `cut`.
    pub to_int8: Rescale,
    /// The rounding shift that first brings the values to 30 bits (0 for values below `2^30`).
    pub cut: i32,
    /// What one int8 step is worth in the values' units: `m / 127`.
    pub step: Scale16,
}

impl Int8Steps {
    /// For values whose largest magnitude is `largest`; `None` for 0 (every value is 0). Two
    /// 32-bit divisions on the largest value's 16 leading bits.
    pub fn new(largest: u64) -> Option<Int8Steps> {
        if largest == 0 {
            return None;
        }
        let cut = (64 - largest.leading_zeros()).saturating_sub(30) as i32;
        let m = round_shift(largest as i64, cut) as u32; // (0, 2^30]
        let drop = (32 - m.leading_zeros()).saturating_sub(16) as i32;
        // m16 in (0, 2^16): 127 / m = (127 · 2^24 / m16) · 2^-(24 + drop), and
        // m / 127 = (m16 · 2^15 / 127) · 2^(drop - 15)
        let m16 = m >> drop;
        let to_int8 = Scale16::of_wide(((127u32 << 24) / m16) as u64, -(24 + drop)).rescale();
        let step = Scale16::of_wide(((m16 << 15) / 127) as u64, drop - 15 + cut);
        Some(Int8Steps { to_int8, cut, step })
    }

    /// `v` (a value of those `largest` was taken from) in int8 steps, within `±127`.
    #[inline]
    pub fn quantize(&self, v: i64) -> i8 {
        let v = if self.cut == 0 {
            v as i32
        } else {
            round_shift(v, self.cut) as i32
        };
        self.to_int8.apply(v).clamp(-127, 127) as i8
    }
}

/// A row's `i64` sum (an int4 row's) rescaled: first cut to 31 bits (a rounding shift), the rescale
/// multiplied by what the cut divided.
#[inline]
pub fn rescale_wide(rescale: Rescale, acc: i64) -> i32 {
    let cut = (64 - acc.unsigned_abs().leading_zeros() as i32 - 31).max(0);
    rescale.times_pow2(cut).apply(round_shift(acc, cut) as i32)
}

/// The largest exponent among the activation scales' [`Scale16`]s (0 if none is positive):
/// [`act_rescale`] scales each column against it.
pub fn act_top(scales: impl Iterator<Item = Scale16>) -> i32 {
    scales
        .filter(|s| s.mantissa != 0)
        .map(|s| s.exponent)
        .max()
        .unwrap_or(0)
}

/// What turns column `x` of an input into `x · a · 2^-(top + ACT_SHIFT)` for its activation
/// scale `a` (`top` from [`act_top`]): a shift of at least 17, so every product stays within
/// 31 bits and takes [`Rescale::apply`]'s 32-bit path.
#[inline]
pub fn act_rescale(a: Scale16, top: i32) -> Rescale {
    a.rescale().times_pow2(-(top + ACT_SHIFT))
}

/// The power of two [`act_rescale`] divides every column by beyond `2^top` (the input's step
/// is multiplied back by `2^(top + ACT_SHIFT)`).
pub const ACT_SHIFT: i32 = 18;

/// For activation scales that are all powers of two `2^p` (positive normal `f32`s with no
/// fraction bits, as `txl quantize --integer` smooths), the largest one's biased exponent
/// (`p + 127`); `None` if any is not one. [`act_top`] of such scales is that exponent less 142.
pub fn pow2_act_top(scales: &[f32]) -> Option<u32> {
    let mut top = 0;
    for a in scales {
        let bits = a.to_bits();
        // sign 0, no fraction bits, a biased exponent in 1..=254
        if bits & 0x807F_FFFF != 0 || bits.wrapping_sub(0x0080_0000) >= 0x7F00_0000 {
            return None;
        }
        top = top.max(bits >> 23);
    }
    Some(top)
}

/// [`act_rescale`]`(a, top).apply(x)` for `a = 2^p` of scales whose [`pow2_act_top`] is
/// `biased_top`, as a rounding shift by `3 + biased_top - (p + 127)` (at least 3): the
/// rescale's mantissa is `2^14`, its shift `17 + biased_top - (p + 127)`. The same value. The
/// rounding shift by `s` as `⌊(⌊x / 2^(s-1)⌋ + 1) / 2⌋` (`round_shift_i32`'s value without its
/// bit test; `⌊x / 2^(s-1)⌋ + 1` cannot overflow as `s ≥ 3`), 0 from `s = 32` on: there
/// `s - 1` taken as 31, which gives 0 too (`⌊x / 2^31⌋` is 0 or -1), without a branch.
#[inline(always)]
pub fn act_shift(x: i32, a: f32, biased_top: u32) -> i32 {
    let s1 = (biased_top + 2).wrapping_sub(a.to_bits() >> 23);
    ((x >> s1.min(31)) + 1) >> 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn int8_steps_quantize_against_the_largest_value() {
        let mut rng = Rng::new(5);
        for _ in 0..20_000 {
            let bits = 1 + rng.next_u64() % 45;
            let largest = 1 + rng.next_u64() % (1u64 << bits);
            let steps = Int8Steps::new(largest).unwrap();
            // the largest value is 127 steps (or one less after the 15-bit rescale's rounding)
            let top = steps.quantize(largest as i64);
            assert!((126..=127).contains(&top), "{largest}: {top}");
            assert_eq!(steps.quantize(-(largest as i64)), -top);
            // one step is worth largest / 127 within 2^-14
            let step = steps.step.mantissa as f64 * 2f64.powi(steps.step.exponent);
            let want = largest as f64 / 127.0;
            assert!((step / want - 1.0).abs() < 2e-4, "{largest}: {step} vs {want}");
            // a value's int8 steps times the step give the value back within a step
            let v = (rng.next_u64() % (largest + 1)) as i64;
            let q = steps.quantize(v) as f64;
            assert!(
                (q * step - v as f64).abs() <= step * 0.51 + 1.0,
                "{largest}: {v} -> {q}"
            );
        }
        assert_eq!(Int8Steps::new(0), None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn power_of_two_scales_shift_as_their_rescales_do() {
        let mut rng = Rng::new(41);
        for case in 0..2_000 {
            // powers of two from 2^-60 to 2^40, spreads wide enough to reach shifts past 31
            let n = 1 + case % 9;
            let scales: alloc::vec::Vec<f32> = (0..n)
                .map(|_| libm::exp2f((rng.next_u64() % 101) as f32 - 60.0))
                .collect();
            let biased = pow2_act_top(&scales).unwrap();
            let top = act_top(scales.iter().map(|&a| Scale16::of_f32(a)));
            assert_eq!(top, biased as i32 - 142);
            for &a in &scales {
                for x in [
                    0,
                    1,
                    -1,
                    7,
                    -7,
                    1 << 30,
                    i32::MAX,
                    i32::MIN,
                    rng.next_u64() as i32,
                ] {
                    let want = act_rescale(Scale16::of_f32(a), top).apply(x);
                    assert_eq!(act_shift(x, a, biased), want, "{a} {x} {scales:?}");
                }
            }
        }
        // anything else is not
        for odd in [3.0f32, 0.0, -2.0, f32::INFINITY, f32::NAN, 1e-40, 1.5] {
            assert_eq!(pow2_act_top(&[1.0, odd, 4.0]), None, "{odd}");
        }
        assert_eq!(pow2_act_top(&[0.5, 8.0]), Some(130));
    }

    #[test]
    fn act_rescales_keep_products_within_31_bits() {
        let scales = [0.5f32, 3.0e-3, 17.0, 0.0].map(Scale16::of_f32);
        let top = act_top(scales.iter().copied());
        assert_eq!(top, Scale16::of_f32(17.0).exponent);
        for a in scales {
            let r = act_rescale(a, top);
            assert!(a.mantissa == 0 || r.shift >= 17, "{r:?}");
            let x = i32::MAX;
            let want = x as f64 * a.mantissa as f64 * 2f64.powi(a.exponent - top - ACT_SHIFT);
            assert!((r.apply(x) as f64 - want).abs() <= want * 1e-4 + 1.0);
        }
    }
}

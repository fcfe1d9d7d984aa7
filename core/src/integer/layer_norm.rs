//! LayerNorm in integers: `y = (x - mean) / sqrt(var + eps) · gain + bias` on a `Q(frac)` row.

use crate::fixed_point::{round_shift, round_shift_i32, Scale16, ScaledByBits};
use crate::kernels;

/// A gain as LayerNorm takes it: its magnitude to 16 significant bits and its sign.
pub type SignedScale = (Scale16, bool);

/// `value`'s magnitude as a [`Scale16`] (from its bits) and whether it is negative.
pub fn signed_scale(value: f32) -> SignedScale {
    let bits = value.to_bits();
    (
        Scale16::of_f32(f32::from_bits(bits & 0x7FFF_FFFF)),
        bits >> 31 != 0,
    )
}

/// A LayerNorm's parameters in fixed point.
#[derive(Clone, Copy, Debug)]
pub struct LayerNormParams<'a> {
    /// The gains ([`signed_scale`]).
    pub gain: &'a [SignedScale],
    /// The biases in `Q(frac)`.
    pub bias: &'a [i32],
    /// Epsilon in `Q(2 frac)`.
    pub epsilon: u64,
}

/// [`layer_norm_with`] of the gains and biases in `params`.
pub fn layer_norm(x: &[i32], params: &LayerNormParams<'_>, frac: u32, out: &mut [i32]) {
    let (gain, bias) = (params.gain, params.bias);
    let n = x.len().min(gain.len()).min(bias.len());
    layer_norm_with(&x[..n], |i| gain[i], |i| bias[i], params.epsilon, frac, out);
}

/// `out = LayerNorm(x)` for one row of `n = x.len()` values in `Q(frac)` (`1 ≤ n ≤ 2^14`,
/// `gain`, `bias` and `out` of that length), output in `Q(frac)` too, saturated. Every step is
/// 32-bit arithmetic but the sums and three divisions per row:
///
/// 1. the mean `m = round(Σ x · 2^k / n)` (halves up) with the most fraction bits `k ≤ 16` that
///    keep each `x · 2^k` below `2^30`, and the deviations `d = x · 2^k - m`;
/// 2. `d` cut to 16 bits for the variance, `c = round(d / 2^s)` with `|c| ≤ 2^15`;
/// 3. `V = floor(Σ c² · 2^16 / n) + eps · 2^(16 - 2s + 2k)` (`Σ c² ≤ n · 2^30`, so `Σ c² · 2^16`
///    fits `u64`), which is `(var + eps) 2^(16 - 2s + 2k)` in `Q(2 frac)` units, and
///    `σ' = isqrt(V)`, which is `σ 2^(frac + 8 - s + k)`;
/// 4. `1 / σ'` times `2^(frac + 8 - s)` as a [`Scale16`] (one 32-bit division of `2^31` by
///    `σ'`'s 16 leading bits); `σ' = 0` (a constant row and no epsilon) gives `y = bias`;
/// 5. `y = round(d · |gain| / σ) · sign(gain) + bias`, the gain's 16-bit scale times `1 / σ`
///    as one [`Rescale`](crate::fixed_point::Rescale) (15 bits) applied to `d`.
///
/// The 16-bit variance gives `σ` to about `2^-15` relative, the 15-bit rescale `y - bias` to
/// about `2^-15`; everything else is exact or rounded in the last place.
pub fn layer_norm_with(
    x: &[i32],
    gain: impl Fn(usize) -> SignedScale,
    bias: impl Fn(usize) -> i32,
    epsilon: u64,
    frac: u32,
    out: &mut [i32],
) {
    let Some(stats) = Statistics::of(x, epsilon, frac) else {
        for (i, y) in out.iter_mut().enumerate().take(x.len()) {
            *y = bias(i);
        }
        return;
    };
    for (i, (y, &v)) in out.iter_mut().zip(x).enumerate() {
        let (g, negative) = gain(i);
        let scaled = g.times(stats.inverse).apply(stats.deviation(v));
        let scaled = if negative { scaled.saturating_neg() } else { scaled };
        *y = scaled.saturating_add(bias(i));
    }
}

/// [`layer_norm_with`] of gains given as `f32` bits (`gain_bits(i)`, the value
/// [`signed_scale`] takes): the same values, each gain's product with `1 / σ` made as
/// [`ScaledByBits`] makes it.
pub fn layer_norm_of_bits(
    x: &[i32],
    gain_bits: impl Fn(usize) -> u32,
    bias: impl Fn(usize) -> i32,
    epsilon: u64,
    frac: u32,
    out: &mut [i32],
) {
    let Some(stats) = Statistics::of(x, epsilon, frac) else {
        for (i, y) in out.iter_mut().enumerate().take(x.len()) {
            *y = bias(i);
        }
        return;
    };
    let inverse = ScaledByBits::new(stats.inverse);
    let n = x.len().min(out.len());
    let (x, out) = (&x[..n], &mut out[..n]);
    let finish = signed_plus_bias;
    if !stats.narrow {
        let deviation = |i: usize| stats.deviation(x[i]);
        let magnitude = |i: usize| gain_bits(i) & 0x7FFF_FFFF;
        inverse.apply_each_with(n, magnitude, deviation, |i, _, scaled| {
            out[i] = finish(gain_bits(i), scaled, bias(i));
        });
        return;
    }
    // every `x · 2^k` below 2^30 and the mean too: the deviations without saturation; where a
    // gain's rescale took the fast path (`|scaled| ≤ 2^29`) and the bias is within `±2^30`,
    // the sign and the bias without saturation
    let (k, mean) = (stats.k, stats.mean);
    let deviation = |i: usize| (x[i] << k) - mean;
    let magnitude = |i: usize| gain_bits(i) & 0x7FFF_FFFF;
    inverse.apply_each_with(n, magnitude, deviation, |i, fast, scaled| {
        let (bits, b) = (gain_bits(i), bias(i));
        let sign = (bits as i32) >> 31;
        out[i] = if fast && b.wrapping_add(1 << 30) >= 0 {
            ((scaled ^ sign) - sign) + b
        } else {
            finish(bits, scaled, b)
        };
    });
}

/// [`layer_norm_of_bits`] of gains (their `f32` bits) and biases given as slices (as long as
/// `x`): the same values, the usual value in straight-line code.
pub fn layer_norm_of_bit_slices(
    x: &[i32],
    gains: &[u32],
    biases: &[i32],
    epsilon: u64,
    frac: u32,
    out: &mut [i32],
) {
    layer_norm_of_bounded_slices(x, (gains, None), biases, epsilon, frac, out)
}

/// [`layer_norm_of_bit_slices`] where `exponents`, if given, holds the smallest and largest
/// biased exponent of the gains' magnitudes (`(bits & 0x7FFF_FFFF) >> 23`), or bounds around
/// them: a kernel may then take the row without a check a value. The same values.
pub fn layer_norm_of_bounded_slices(
    x: &[i32],
    (gains, exponents): (&[u32], Option<(i32, i32)>),
    biases: &[i32],
    epsilon: u64,
    frac: u32,
    out: &mut [i32],
) {
    let n = x.len().min(gains.len()).min(biases.len()).min(out.len());
    let (x, gains, biases, out) = (&x[..n], &gains[..n], &biases[..n], &mut out[..n]);
    let stats = match Statistics::of(x, epsilon, frac) {
        Some(stats) if stats.narrow => stats,
        _ => return layer_norm_of_bits(x, |i| gains[i], |i| biases[i], epsilon, frac, out),
    };
    // every `x · 2^k` below 2^30 and the mean too: the deviations without saturation; where a
    // gain's rescale took the fast path (`|scaled| ≤ 2^29`) and the bias is within `±2^30`,
    // the sign and the bias without saturation
    let (k, mean) = (stats.k, stats.mean);
    // a kernel's four values an instruction where there is one, the same bits
    let rows = ScaledByBits::new(stats.inverse).row_parameters();
    if let (true, Some(rows)) = (kernels::INTEGER_LAYER_NORM, rows) {
        let inverse = ScaledByBits::new(stats.inverse);
        let apply = |bits: u32, v: i32| inverse.apply_out_of_line(bits, v);
        let finish = signed_plus_bias;
        let deviations = (k, mean);
        let bounds = exponents.map(|e| (e, stats.largest));
        if kernels::layer_norm_i32(x, gains, biases, out, deviations, rows, bounds, apply, finish) {
            return;
        }
    }
    let items = x
        .iter()
        .zip(gains)
        .zip(biases)
        .zip(out.iter_mut())
        .map(|(((&v, &bits), &b), o)| (bits & 0x7FFF_FFFF, (v << k) - mean, (bits, b, o)));
    ScaledByBits::new(stats.inverse).apply_each_of(items, |(bits, b, o), fast, scaled| {
        *o = if fast && b.wrapping_add(1 << 30) >= 0 {
            let sign = (bits as i32) >> 31;
            ((scaled ^ sign) - sign) + b
        } else {
            let scaled = if bits >> 31 != 0 {
                scaled.saturating_neg()
            } else {
                scaled
            };
            scaled.saturating_add(b)
        };
    });
}

/// A row's mean and `1 / σ` as [`layer_norm_with`] makes them (steps 1 to 4).
struct Statistics {
    /// The fraction bits more the mean and deviations have.
    k: u32,
    mean: i32,
    inverse: Scale16,
    /// Whether every `x · 2^k` is below `2^30` in magnitude (as the mean then is): no
    /// deviation saturates.
    narrow: bool,
    /// The largest deviation's magnitude.
    largest: u32,
}

impl Statistics {
    /// `None` for an empty row, or `σ' = 0` (a constant row and no epsilon: `y = bias`).
    fn of(x: &[i32], epsilon: u64, frac: u32) -> Option<Statistics> {
        let n = x.len() as i64;
        let &first = x.first()?;
        // the sum, the smallest and the largest value in one pass (a kernel's where there is
        // one)
        let (sum, low, high) = match kernels::sum_range_i32(x) {
            Some(found) => found,
            None => {
                let (mut low, mut high) = (first, first);
                let sum = if x.len() <= 1 << 14 {
                    // the sum in two 32-bit halves, `Σ (v >> 16)` within 2^29 and `Σ (v & 0xFFFF)`
                    // within 2^30 for up to 2^14 values: the same sum
                    let (mut upper, mut lower) = (0i32, 0i32);
                    for &v in x {
                        upper += v >> 16;
                        lower += v & 0xFFFF;
                        if v > high {
                            high = v;
                        } else if v < low {
                            low = v;
                        }
                    }
                    ((upper as i64) << 16) + lower as i64
                } else {
                    let mut sum = 0i64;
                    for &v in x {
                        sum += v as i64;
                        low = low.min(v);
                        high = high.max(v);
                    }
                    sum
                };
                (sum, low, high)
            }
        };
        // k fraction bits more for the mean, as many as keep every `x · 2^k` below 2^30 (at
        // most 16)
        let top = low.unsigned_abs().max(high.unsigned_abs());
        let k = top.leading_zeros().saturating_sub(2).min(16);
        // a row of a power of two values divides by a shift (the same quotient, rounded down)
        let divide = |v: i64| match (n as u64).is_power_of_two() {
            true => v >> n.trailing_zeros(),
            false => v.div_euclid(n),
        };
        let mean = divide((sum << k) + n / 2) as i32; // |Σ x · 2^k| ≤ n · 2^30
        let narrow = (top as u64) << k < 1 << 30;
        let stats = Statistics {
            k,
            mean,
            inverse: Scale16::ZERO,
            narrow,
            largest: 0,
        };
        // the deviation grows with the value (`x · 2^k` is exact), so its largest magnitude is
        // the smallest value's or the largest's
        let largest = stats
            .deviation(low)
            .unsigned_abs()
            .max(stats.deviation(high).unsigned_abs());
        let s = (32 - largest.leading_zeros()).saturating_sub(15);
        let squares: u64 = if narrow && s > 0 {
            // no saturation; the rounding shift as `⌊(⌊d / 2^(s-1)⌋ + 1) / 2⌋` (the same
            // value, and `⌊d / 2^(s-1)⌋ + 1` cannot overflow)
            kernels::squares_i32(x, k, mean, s).unwrap_or_else(|| {
                let s1 = s - 1;
                x.iter()
                    .map(|&v| {
                        let c = ((((v << k) - mean) >> s1) + 1) >> 1; // |c| ≤ 2^15
                        (c * c) as u32 as u64
                    })
                    .sum()
            })
        } else {
            x.iter()
                .map(|&v| {
                    let c = round_shift_i32(stats.deviation(v), s); // |c| ≤ 2^15
                    (c * c) as u32 as u64
                })
                .sum()
        };
        let epsilon = round_shift(epsilon.min(1 << 61) as i64, 2 * (s as i32 - k as i32) - 16) as u64;
        let variance = match (n as u64).is_power_of_two() {
            true => (squares << 16) >> n.trailing_zeros(),
            false => (squares << 16) / n as u64,
        };
        let variance = variance.saturating_add(epsilon);
        // `σ' = isqrt(V)` (below 2^31) keeps its top 16 bits: `σ' >> drop` for `drop =
        // bits(σ') - 16` (0 for fewer), `bits(σ')` being `⌈bits(V) / 2⌉`. That is
        // `isqrt(V >> 2 drop)`, a root of 32 bits at most (the same value: `⌊√⌊V / 4^d⌋⌋ =
        // ⌊⌊√V⌋ / 2^d⌋`), zero only for `V = 0`.
        let drop = ((65 - variance.leading_zeros()) / 2).saturating_sub(16);
        let top = isqrt_u32((variance >> (2 * drop)) as u32);
        if top == 0 {
            return None;
        }
        let exponent = frac as i32 + 8 - s as i32 - 31 - drop as i32;
        let inverse = Scale16::of_wide(((1u32 << 31) / top) as u64, exponent);
        Some(Statistics {
            inverse,
            largest,
            ..stats
        })
    }

    /// `x · 2^k - mean`, saturated.
    #[inline]
    fn deviation(&self, v: i32) -> i32 {
        (v << self.k).saturating_sub(self.mean)
    }
}

/// `⌊√v⌋`: [`isqrt`](crate::fixed_point::isqrt) in 32-bit arithmetic, by Newton's steps where
/// the core divides in one instruction ([`crate::fixed_point::HARDWARE_DIVIDE`]), else a digit
/// at a time (Armv6-M, whose division is a library call). The same root.
#[inline]
fn isqrt_u32(v: u32) -> u32 {
    if crate::fixed_point::HARDWARE_DIVIDE {
        isqrt_u32_newton(v)
    } else {
        isqrt_u32_by_digits(v)
    }
}

/// [`isqrt_u32`] by Newton's steps from `2^⌈bits(v) / 2⌉` (at least the root, as
/// `v < 2^bits(v)`): `x' = ⌊(x + ⌊v / x⌋) / 2⌋` falls while `x` is above `⌊√v⌋` and stops
/// there (`x' ≥ ⌊√v⌋` for every `x ≥ 1`, the mean of `x` and `v / x` being at least `√v`, and
/// `x' < x` exactly while `x > ⌊√v⌋`, as `⌊v / x⌋ < x` then): five steps or so (a division
/// each) for the digit-by-digit method's sixteen. Every sum stays below `2^17`.
fn isqrt_u32_newton(v: u32) -> u32 {
    if v == 0 {
        return 0;
    }
    let mut x = 1u32 << ((33 - v.leading_zeros()) / 2);
    loop {
        let next = (x + v / x) >> 1;
        if next >= x {
            return x;
        }
        x = next;
    }
}

/// [`isqrt_u32`] a bit of the root a step, from `v`'s leading pair of bits on.
fn isqrt_u32_by_digits(v: u32) -> u32 {
    if v == 0 {
        return 0;
    }
    let (mut remainder, mut root) = (v, 0u32);
    let mut bit = 1u32 << ((31 - v.leading_zeros()) & !1);
    while bit != 0 {
        if remainder >= root + bit {
            remainder -= root + bit;
            root = (root >> 1) + bit;
        } else {
            root >>= 1;
        }
        bit >>= 2;
    }
    root
}

/// A rescaled deviation given the sign of its gain (`bits`, the gain's `f32` bits) plus the
/// bias, saturated at each step.
#[inline(always)]
fn signed_plus_bias(bits: u32, scaled: i32, bias: i32) -> i32 {
    let scaled = if bits >> 31 != 0 {
        scaled.saturating_neg()
    } else {
        scaled
    };
    scaled.saturating_add(bias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use alloc::vec::Vec;

    /// Newton's root is the digit-by-digit one: for every value below 2^20, around every
    /// square and power of two, at the ends, and for many random values.
    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn the_newton_root_is_the_digit_by_digit_root() {
        for v in 0..1u32 << 20 {
            assert_eq!(isqrt_u32_newton(v), isqrt_u32_by_digits(v), "{v}");
        }
        for r in 0..=1u32 << 16 {
            let square = (r as u64 * r as u64).min(u32::MAX as u64) as u32;
            for v in [square.saturating_sub(1), square, square.saturating_add(1)] {
                assert_eq!(isqrt_u32_newton(v), isqrt_u32_by_digits(v), "{v}");
            }
        }
        for b in 0..32 {
            for v in [
                (1u32 << b) - 1,
                1 << b,
                (1u32 << b) + 1,
                u32::MAX >> b,
                u32::MAX - b,
            ] {
                assert_eq!(isqrt_u32_newton(v), isqrt_u32_by_digits(v), "{v}");
            }
        }
        let mut rng = Rng::new(17);
        for _ in 0..1_000_000 {
            let v = (rng.next_u64() as u32) >> (rng.next_u64() % 32);
            assert_eq!(isqrt_u32_newton(v), isqrt_u32_by_digits(v), "{v}");
        }
    }

    /// The 32-bit root of the top bits is the 64-bit root's top 16 bits, for every bit length.
    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn the_root_of_the_top_bits_is_the_roots_top_bits() {
        use crate::fixed_point::isqrt;
        let mut rng = Rng::new(5);
        for _ in 0..20_000 {
            let bits = rng.next_u64() % 63;
            let v = (rng.next_u64() >> (63 - bits)) + rng.next_u64() % 3;
            let small = v & 0xFFFF_FFFF;
            assert_eq!(isqrt_u32(small as u32), isqrt(small), "{small}");
            for v in [
                v,
                v.saturating_sub(1),
                (v | 1).saturating_mul(v | 1),
                (v % (1 << 31)).pow(2),
            ] {
                let sigma = isqrt(v);
                let drop = (32 - sigma.leading_zeros()).saturating_sub(16);
                let top_drop = ((65 - v.leading_zeros()) / 2).saturating_sub(16);
                assert_eq!(drop, top_drop, "{v}");
                assert_eq!(isqrt_u32((v >> (2 * drop)) as u32), sigma >> drop, "{v}");
            }
        }
    }

    /// Fixed point of `value` in `Q(frac)`, rounded.
    fn fixed(value: f64, frac: u32) -> i32 {
        libm::round(value * libm::exp2(frac as f64)) as i32
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn layer_norm_matches_f64() {
        let mut rng = Rng::new(11);
        let mut worst = 0.0f64;
        for case in 0..300 {
            let n = [1, 2, 3, 16, 128, 500, 1024, 4096][case % 8];
            let frac = [12, 16, 20, 24][case % 4];
            let magnitude = libm::exp2(rng.unit_f64() * 8.0 - 4.0);
            let offset = rng.symmetric_f32() as f64 * magnitude;
            let x: Vec<f64> = (0..n)
                .map(|_| offset + rng.symmetric_f32() as f64 * magnitude)
                .collect();
            let gain: Vec<f64> = (0..n).map(|_| 1.0 + rng.symmetric_f32() as f64 * 0.5).collect();
            let bias: Vec<f64> = (0..n).map(|_| rng.symmetric_f32() as f64 * 0.2).collect();
            let eps = 1e-5;
            let xq: Vec<i32> = x.iter().map(|&v| fixed(v, frac)).collect();
            let gq: Vec<SignedScale> = gain.iter().map(|&v| signed_scale(v as f32)).collect();
            let bq: Vec<i32> = bias.iter().map(|&v| fixed(v, frac)).collect();
            let params = LayerNormParams {
                gain: &gq,
                bias: &bq,
                epsilon: libm::round(eps * libm::exp2(2.0 * frac as f64)) as u64,
            };
            let mut out = alloc::vec![0; n];
            layer_norm(&xq, &params, frac, &mut out);
            // the f64 LayerNorm of the same fixed-point input
            let xr: Vec<f64> = xq.iter().map(|&v| v as f64 / libm::exp2(frac as f64)).collect();
            let mean = xr.iter().sum::<f64>() / n as f64;
            let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            for i in 0..n {
                let g = gain[i] as f32 as f64;
                let b = bq[i] as f64 / libm::exp2(frac as f64);
                let expected = (xr[i] - mean) / libm::sqrt(var + eps) * g + b;
                let got = out[i] as f64 / libm::exp2(frac as f64);
                // 16-bit deviations in the variance (about 2^-15 relative in σ), the gain to 16
                // bits, the 15-bit rescale, the mean rounded, and Q(frac) rounding
                let bound = 1.5e-4 * (expected - b).abs() + 1e-5 + 2.0 * libm::exp2(-(frac as f64));
                let error = (got - expected).abs();
                assert!(error <= bound, "n {n} frac {frac} i {i}: {got} vs {expected}");
                worst = worst.max(error);
            }
        }
        assert!(worst > 0.0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn a_constant_row_gives_the_bias() {
        let x = [5 << 16; 8];
        let gain = [signed_scale(1.0); 8];
        let bias = [3, -3, 0, 7, 1, 2, 3, 4];
        for epsilon in [0, 1 << 10] {
            let params = LayerNormParams {
                gain: &gain,
                bias: &bias,
                epsilon,
            };
            let mut out = [0; 8];
            layer_norm(&x, &params, 16, &mut out);
            assert_eq!(out, bias);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn extreme_rows_saturate_without_overflow() {
        let x = [i32::MAX, i32::MIN, i32::MAX, i32::MIN];
        let gain = [signed_scale(2_147_483_648.0); 4];
        let bias = [i32::MAX; 4];
        let mut out = [0; 4];
        // z = ±1: the largest gain and bias saturate at +1, cancel at -1
        let params = LayerNormParams {
            gain: &gain,
            bias: &bias,
            epsilon: 0,
        };
        layer_norm(&x, &params, 0, &mut out);
        assert_eq!([out[0], out[2]], [i32::MAX, i32::MAX]);
        assert!(out[1].abs() < 1 << 17 && out[3].abs() < 1 << 17, "{out:?}");
        // the largest epsilon there is (taken as 2^61, against a variance of 2^62):
        // z = ±sqrt(2/3)
        let params = LayerNormParams {
            epsilon: u64::MAX,
            ..params
        };
        layer_norm(&x, &params, 0, &mut out);
        let expected = (1.0 - libm::sqrt(2.0 / 3.0)) * i32::MAX as f64;
        assert_eq!([out[0], out[2]], [i32::MAX, i32::MAX]);
        assert!((out[1] as f64 - expected).abs() < expected * 1e-4, "{out:?}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn gains_read_from_bits_give_the_same_rows() {
        let mut rng = Rng::new(23);
        for case in 0..2_000 {
            let n = [1, 2, 5, 64, 128, 300][case % 6];
            let frac = [8, 16, 23, 28][case % 4];
            let spread = rng.below(31) as u32;
            let x: Vec<i32> = (0..n).map(|_| rng.next_u64() as i32 >> spread).collect();
            // usual gains of either sign, and now and then zero, subnormal, huge or not finite
            let gains: Vec<u32> = (0..n)
                .map(|_| match rng.below(20) {
                    0 => [0, 0x8000_0000, 3, 0x7F7F_FFFF, 0x7F80_0000, 0xFFC0_0000][rng.below(6) as usize],
                    _ => (rng.next_u64() as u32 & 0x807F_FFFF) | (110 + rng.below(30) as u32) << 23,
                })
                .collect();
            let bias: Vec<i32> = (0..n).map(|_| rng.next_u64() as i32 >> 8).collect();
            let epsilon = [0, 1, 1 << 20, rng.next_u64() >> 10][case % 4];
            let (mut ours, mut theirs) = (alloc::vec![0; n], alloc::vec![0; n]);
            layer_norm_of_bits(&x, |i| gains[i], |i| bias[i], epsilon, frac, &mut ours);
            let gain = |i: usize| signed_scale(f32::from_bits(gains[i]));
            layer_norm_with(&x, gain, |i| bias[i], epsilon, frac, &mut theirs);
            assert_eq!(ours, theirs, "case {case}");
            layer_norm_of_bit_slices(&x, &gains, &bias, epsilon, frac, &mut ours);
            assert_eq!(ours, theirs, "case {case}");
        }
    }
}

//! LayerNorm in integers: `y = (x - mean) / sqrt(var + eps) · gain + bias` on a `Q(frac)` row.

use crate::fixed_point::{isqrt, round_shift, Multiplier};

/// The format of the normalised row `(x - mean) / σ` inside [`layer_norm`]: `Q20`, so rows of
/// up to `2^14` values (`|z| ≤ sqrt(n) ≤ 2^7`) fit an `i32` with room.
pub const NORMAL_FRAC: u32 = 20;

/// A LayerNorm's parameters in fixed point.
#[derive(Clone, Copy, Debug)]
pub struct LayerNormParams<'a> {
    /// The gain `γ`, `Q(gain_frac)`.
    pub gain: &'a [i32],
    /// The fraction bits of `gain`, `0..=31`.
    pub gain_frac: u32,
    /// The bias `β`, in the output's `Q(frac)`.
    pub bias: &'a [i32],
    /// `eps` in `Q(2 · frac)` (the variance's format), rounded to nearest.
    pub epsilon: u64,
}

/// `out = LayerNorm(x)` for one row of `n = x.len()` values in `Q(frac)` (`1 ≤ n ≤ 2^14`,
/// `gain`, `bias` and `out` of that length), output in `Q(frac)` too, saturated:
///
/// 1. `D = n · x - Σ x`, exactly in `i64` (`n` times the deviation from the mean; `|D| < 2^46`);
/// 2. `D` cut to 16 bits for the variance, `v = round(D / 2^s)` with `|v| ≤ 2^15`, and to 31
///    bits for the normalisation, `w = round(D / 2^t)` with `|w| ≤ 2^30`;
/// 3. `V = floor(Σ v² · 2^16 / n) + eps · n² · 2^(16 - 2s)` (`Σ v² ≤ n · 2^30`, so
///    `Σ v² · 2^16` fits `u64`), which is `n² (var + eps) 2^(16 - 2s)`, and
///    `σ' = isqrt(V)`, which is `n σ 2^(8 - s)`;
/// 4. `z = w · 2^(8 + NORMAL_FRAC) / (σ' · 2^(s - t))`, the normalised value in `Q20`, with one
///    [`Multiplier`] (`|z| < 2^27`); `σ' = 0` (a constant row and no epsilon) gives `z = 0`;
/// 5. `y = round(z · gain / 2^(NORMAL_FRAC + gain_frac - frac)) + bias` (an `i64` product
///    below `2^58`).
///
/// The 16-bit variance gives `σ` to about `2^-15` relative; everything else is exact or
/// rounded in the last place.
pub fn layer_norm(x: &[i32], params: &LayerNormParams<'_>, frac: u32, out: &mut [i32]) {
    let (gain, bias) = (params.gain, params.bias);
    let n = x.len().min(gain.len()).min(bias.len());
    let gains = |i: usize| gain[i];
    let biases = |i: usize| bias[i];
    layer_norm_with(
        &x[..n],
        (gains, params.gain_frac),
        biases,
        params.epsilon,
        frac,
        out,
    );
}

/// [`layer_norm`] with the gain (`Q(gain_frac)`) and bias (`Q(frac)`) of column `i` given by
/// functions, for parameters made from the image's floats as they are read.
pub fn layer_norm_with(
    x: &[i32],
    (gain, gain_frac): (impl Fn(usize) -> i32, u32),
    bias: impl Fn(usize) -> i32,
    epsilon: u64,
    frac: u32,
    out: &mut [i32],
) {
    let n = x.len() as i64;
    if n == 0 {
        return;
    }
    let sum: i64 = x.iter().map(|&v| v as i64).sum();
    let deviation = |v: i32| v as i64 * n - sum;
    let largest = x.iter().map(|&v| deviation(v).unsigned_abs()).max().unwrap_or(0);
    let bits = 64 - largest.leading_zeros();
    let (s, t) = (bits.saturating_sub(15) as i32, bits.saturating_sub(30) as i32);
    let squares: u64 = x
        .iter()
        .map(|&v| {
            let cut = round_shift(deviation(v), s);
            (cut * cut) as u64
        })
        .sum();
    let epsilon =
        (round_shift(epsilon.min(1 << 61) as i64, 2 * s - 16) as u64).saturating_mul((n * n) as u64);
    let variance = ((squares << 16) / n as u64).saturating_add(epsilon);
    let sigma = isqrt(variance) as u64;
    let normalise =
        Multiplier::from_ratio(1 << (8 + NORMAL_FRAC), sigma << (s - t)).unwrap_or(Multiplier::ZERO);
    let shift = (NORMAL_FRAC + gain_frac) as i32 - frac as i32;
    for (i, (y, &v)) in out.iter_mut().zip(x).enumerate() {
        let z = normalise.apply(round_shift(deviation(v), t) as i32) as i64;
        let scaled = round_shift(z * gain(i) as i64, shift);
        *y = (scaled + bias(i) as i64).clamp(i32::MIN as i64, i32::MAX as i64) as i32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use alloc::vec::Vec;

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
            let gain_frac = 28;
            let xq: Vec<i32> = x.iter().map(|&v| fixed(v, frac)).collect();
            let gq: Vec<i32> = gain.iter().map(|&v| fixed(v, gain_frac)).collect();
            let bq: Vec<i32> = bias.iter().map(|&v| fixed(v, frac)).collect();
            let params = LayerNormParams {
                gain: &gq,
                gain_frac,
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
                let g = gq[i] as f64 / libm::exp2(gain_frac as f64);
                let b = bq[i] as f64 / libm::exp2(frac as f64);
                let expected = (xr[i] - mean) / libm::sqrt(var + eps) * g + b;
                let got = out[i] as f64 / libm::exp2(frac as f64);
                // 16-bit deviations in the variance (about 2^-15 relative in σ) and Q(frac)
                // rounding
                let bound = 1e-4 * (expected - b).abs() + 1e-5 + 2.0 * libm::exp2(-(frac as f64));
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
        let gain = [1 << 20; 8];
        let bias = [3, -3, 0, 7, 1, 2, 3, 4];
        for epsilon in [0, 1 << 10] {
            let params = LayerNormParams {
                gain: &gain,
                gain_frac: 20,
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
        let gain = [i32::MAX; 4];
        let bias = [i32::MAX; 4];
        let mut out = [0; 4];
        // z = ±1: the largest gain and bias saturate at +1, cancel at -1
        let params = LayerNormParams {
            gain: &gain,
            gain_frac: 0,
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
}

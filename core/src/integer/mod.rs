//! Integer-only arithmetic on rows: LayerNorm, the attention softmax with 16-bit probabilities
//! and the output log-softmax, on fixed-point rows, with the scalar operations of
//! [`fixed_point`](crate::fixed_point). No floating-point operation runs here, so a core
//! without an FPU needs no software floating point for them, and every core gives the same
//! bits.
//!
//! Rows are `i32` in one format `Q(frac)` (the real value of `v` is `v · 2^-frac`); `frac` is
//! chosen so the largest value a row can hold fits with room to spare.
//!
//! | operation | input | output | how |
//! |---|---|---|---|
//! | [`layer_norm`] | `Q(frac)` | `Q(frac)` | sum in `i64`, the mean rounded; variance of the deviations cut to 16 bits, in `u64`; [`isqrt`](crate::fixed_point::isqrt); `1/σ` and each gain as [`Scale16`](crate::fixed_point::Scale16)s, one 32-bit rescale per value |
//! | [`softmax_q15`] | scores `Q(frac)` nats | probabilities `Q15`, at most `32767` | [`exp_neg`](crate::fixed_point::exp_neg) of each score's distance to the largest, sum in `u64`, one reciprocal |
//! | [`Int8Steps`], [`act_rescale`] | a linear layer's input `Q(frac)` | int8 and one [`Scale16`](crate::fixed_point::Scale16) step; rows rescaled by row scale × step | two 32-bit divisions per input, two 32-bit products per value and per output row |
//! | [`log_softmax`] | logits `Q(frac)` nats | `ln p` in `Q(frac)` | `x - max - ln Σ e^(x - max)` with [`ln`](crate::fixed_point::ln) |

mod layer_norm;
mod linear;
mod softmax;

pub use layer_norm::{
    layer_norm, layer_norm_of_bit_slices, layer_norm_of_bits, layer_norm_of_bounded_slices, layer_norm_with,
    signed_scale, LayerNormParams, SignedScale,
};
pub use linear::{act_rescale, act_shift, act_top, pow2_act_top, rescale_wide, Int8Steps, ACT_SHIFT};
pub use softmax::{
    log_softmax, softmax_exp_in_place, softmax_q15, softmax_q15_in_place, to_exp_input, Normalise,
    PROBABILITY_ONE,
};

/// The smallest `e ≥ 0` with `|round(x / 2^e)| ≤ limit` for every `x` of `row` (`limit ≥ 1`):
/// the power of two of an int8 key, value or position key (`limit` 127), or of a 16-bit query.
pub fn pow2_exponent(row: &[i32], limit: i64) -> i32 {
    let largest = row.iter().map(|&v| v.unsigned_abs()).max().unwrap_or(0);
    pow2_exponent_of(largest as u64, limit)
}

/// The smallest `e ≥ 0` with `round(largest / 2^e) ≤ limit` (`limit ≥ 1`): from the bit
/// lengths, then a step or two up. No `e` below `bits(largest) - bits(limit) - 1` can do, as
/// `largest / 2^e` would reach `2^bits(limit)`.
pub fn pow2_exponent_of(largest: u64, limit: i64) -> i32 {
    if largest < 1 << 31 && (1..=i32::MAX as i64).contains(&limit) {
        // in 32 bits (the same steps): `largest + 2^(e-1)` stays below 2^32, and from
        // `e = 31` on the rounded value is at most 1
        let (largest, limit) = (largest as u32, limit as u32);
        let bits = |v: u32| 32 - v.leading_zeros() as i32;
        let mut e = (bits(largest) - bits(limit) - 1).max(0) as u32;
        while e < 31 && (largest + ((1u32 << e) >> 1)) >> e > limit {
            e += 1;
        }
        return e as i32;
    }
    let bits = |v: u64| 64 - v.leading_zeros() as i32;
    let mut e = (bits(largest) - bits(limit.max(1) as u64) - 1).max(0);
    while crate::fixed_point::round_shift(largest.min(i64::MAX as u64) as i64, e) > limit {
        e += 1;
    }
    e
}

/// The format of the attention scores: `Q20` nats.
pub const SCORE_FRAC: u32 = 20;

/// The score `(content · 2^ce + position · 2^pe) / sqrt(d_head)` in `Q20` nats from the two
/// integer dot products and their powers of two (in `Q(2 frac)` units), `inv_sqrt_d_head`
/// being `1 / sqrt(d_head)` to 15 bits ([`Scale16::rescale`](crate::fixed_point::Scale16)):
/// the sum cut to 31 bits, then one [`Rescale::apply`](crate::fixed_point::Rescale::apply).
pub fn attention_score(
    inv_sqrt_d_head: crate::fixed_point::Rescale,
    frac: u32,
    (content, ce): (i32, i32),
    (position, pe): (i32, i32),
) -> i32 {
    // the usual case in 32 bits: both sums below 2^27 (and, in `attention_score_of_small`,
    // shifted by at most 3, so their sum is below 2^31: the same value as in 64 bits)
    if content.unsigned_abs() < 1 << 27 && position.unsigned_abs() < 1 << 27 {
        return attention_score_of_small(inv_sqrt_d_head, frac, (content, ce), (position, pe));
    }
    let e = ce.min(pe);
    attention_score_wide(inv_sqrt_d_head, frac, (content, ce - e), (position, pe - e), e)
}

/// [`attention_score`] of sums below `2^27` in magnitude (as the caller knows every sum of a
/// row to be): the same value, without the test of the sums' magnitudes.
#[inline(always)]
pub fn attention_score_of_small(
    inv_sqrt_d_head: crate::fixed_point::Rescale,
    frac: u32,
    (content, ce): (i32, i32),
    (position, pe): (i32, i32),
) -> i32 {
    let e = ce.min(pe);
    let (a, b) = (ce - e, pe - e);
    // one of the two is 0, the other at least 0
    if (a | b) as u32 <= 3 {
        let sum = (content << a) + (position << b);
        return inv_sqrt_d_head
            .times_pow2(SCORE_FRAC as i32 + e - 2 * frac as i32)
            .apply(sum);
    }
    attention_score_wide(inv_sqrt_d_head, frac, (content, a), (position, b), e)
}

/// [`attention_score`] of sums that need 64 bits: `content · 2^a + position · 2^b`, then
/// `2^e` more.
#[cold]
#[inline(never)]
fn attention_score_wide(
    inv_sqrt_d_head: crate::fixed_point::Rescale,
    frac: u32,
    (content, a): (i32, i32),
    (position, b): (i32, i32),
    e: i32,
) -> i32 {
    use crate::fixed_point::round_shift;
    let sum = if a < 32 && b < 32 {
        // each below 2^62 in magnitude: no overflow
        ((content as i64) << a) + ((position as i64) << b)
    } else {
        round_shift(content as i64, -a).saturating_add(round_shift(position as i64, -b))
    };
    let (sum, e) = if sum > i32::MIN as i64 && sum <= i32::MAX as i64 {
        (sum as i32, e)
    } else {
        let cut = 64 - sum.unsigned_abs().leading_zeros() as i32 - 31;
        (round_shift(sum, cut) as i32, e + cut)
    };
    inv_sqrt_d_head
        .times_pow2(SCORE_FRAC as i32 + e - 2 * frac as i32)
        .apply(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixed_point::round_shift;

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn scores_are_the_rounded_rescale_of_the_exact_sum() {
        use crate::fixed_point::{Rescale, Scale16};
        let mut rng = crate::rng::Rng::new(37);
        let inv = Scale16::of_f32(0.176_776_7).rescale();
        for case in 0..50_000 {
            // sums near the 32-bit path's limits, and exponents on both sides of its 3
            let bits = [10, 26, 27, 28, 31][case % 5];
            let value = |rng: &mut crate::rng::Rng| {
                let v = (rng.next_u64() % (1u64 << bits)) as i64 - (1i64 << (bits - 1));
                v.clamp(i32::MIN as i64 + 1, i32::MAX as i64) as i32
            };
            let (content, position) = (value(&mut rng), value(&mut rng));
            let (ce, pe) = ((rng.next_u64() % 12) as i32, (rng.next_u64() % 12) as i32);
            let frac = 16;
            let got = attention_score(inv, frac, (content, ce), (position, pe));
            // the exact sum in units of 2^e, cut to 31 bits as the function does
            let e = ce.min(pe);
            let sum = ((content as i64) << (ce - e)) + ((position as i64) << (pe - e));
            let cut = (64 - sum.unsigned_abs().leading_zeros() as i32 - 31).max(0);
            let sum = round_shift(sum, cut) as i32;
            let r: Rescale = inv.times_pow2(SCORE_FRAC as i32 + e + cut - 2 * frac as i32);
            let want =
                round_shift(sum as i64 * r.mantissa as i64, r.shift).clamp(i32::MIN as i64, i32::MAX as i64);
            assert_eq!(got as i64, want, "{content} {ce} {position} {pe}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn pow2_exponents_are_the_smallest_that_fit() {
        for limit in [1i64, 2, 3, 127, 128, 32767, 1 << 20] {
            for largest in (0..4096u64).chain((12..=40).flat_map(|b| [(1u64 << b) - 1, 1 << b, (1 << b) + 1]))
            {
                let e = pow2_exponent_of(largest, limit);
                assert!(round_shift(largest as i64, e) <= limit, "{largest} {limit}");
                assert!(
                    e == 0 || round_shift(largest as i64, e - 1) > limit,
                    "{largest} {limit}"
                );
            }
        }
    }
}

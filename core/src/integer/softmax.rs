//! The softmaxes in integers: attention probabilities in 16 bits, and the output's
//! log-probabilities.

use crate::fixed_point::{exp_neg, ln, mul_wide_u32, round_shift, Multiplier, LN_2_Q31};
use crate::kernels;

/// The probability 1 in [`softmax_q15`]'s `Q15`; the largest it gives is one less.
pub const PROBABILITY_ONE: u32 = 1 << 15;

/// The distance `largest - score` of two `Q(frac)` values as [`exp_neg`]'s `Q24` input:
/// shifted left (saturating) or right (rounded down).
#[inline]
pub fn to_exp_input(largest: i32, score: i32, frac: u32) -> u32 {
    if score >= largest {
        return 0;
    }
    let distance = largest.wrapping_sub(score) as u32; // the exact difference: below 2^32
    if frac <= 24 {
        let left = 24 - frac;
        if distance > u32::MAX >> left {
            u32::MAX
        } else {
            distance << left
        }
    } else {
        distance.checked_shr(frac - 24).unwrap_or(0)
    }
}

/// `probs = softmax(scores)` for scores in `Q(frac)` nats, probabilities in `Q15` (`32768` is
/// 1), each at most `32767` so it fits a signed 16-bit half: `e_j = exp_neg(max - s_j)` in
/// `Q30`, `S = Σ e_j` in `u64` (`S ≥ 2^30`: the largest score's term is `2^30`), then
/// `p_j = round(e_j · 2^15 / S)` with one [`Multiplier::from_ratio`] (rounded down, relative
/// error below `2^-29`). A probability below `2^-16` becomes 0: the step of a 16-bit
/// probability is `2^-15`, against `2^-8` for int8. Empty rows give nothing.
pub fn softmax_q15(scores: &[i32], frac: u32, probs: &mut [u16]) {
    let Some(&largest) = scores.iter().max() else {
        return;
    };
    let mut sum = 0u64;
    for &s in scores {
        sum += exp_neg(to_exp_input(largest, s, frac)) as u64;
    }
    // each e_j again (a u16 row cannot keep a Q30 value until the sum is known), normalised
    let normalise = Multiplier::from_ratio(PROBABILITY_ONE as u64, sum).unwrap_or(Multiplier::ZERO);
    for (&s, p) in scores.iter().zip(probs.iter_mut()) {
        let e = exp_neg(to_exp_input(largest, s, frac));
        *p = normalise.apply(e as i32).min(PROBABILITY_ONE as i32 - 1) as u16;
    }
}

/// [`softmax_q15`] in place: each score becomes its probability (the same values), each
/// `e_j` computed once and kept in the score's place until the sum is known.
pub fn softmax_q15_in_place(scores: &mut [i32], frac: u32) {
    if let Some(normalise) = softmax_exp_in_place(scores, frac) {
        for p in scores.iter_mut() {
            *p = normalise.apply(*p);
        }
    }
}

/// The first half of [`softmax_q15_in_place`]: each score becomes its `e_j`, and what turns
/// an `e_j` into its probability ([`Normalise::apply`]) is returned (`None` for an empty row),
/// so a caller can take the probabilities in a pass of its own.
pub fn softmax_exp_in_place(scores: &mut [i32], frac: u32) -> Option<Normalise> {
    let &largest = scores.iter().max()?;
    let mut sum = 0u64;
    for s in scores.iter_mut() {
        let e = exp_neg(to_exp_input(largest, *s, frac)); // at most 2^30
        sum += e as u64;
        *s = e as i32;
    }
    Some(Normalise::of_sum(sum))
}

/// `e_j · 2^15 / S` of [`softmax_exp_in_place`]'s row, rounded, at most `32767`.
#[derive(Clone, Copy, Debug)]
pub struct Normalise {
    m: u64,
    shift: u32,
    half: u64,
}

impl Normalise {
    /// For a row whose `e_j` (each at most `2^30`) add up to `sum`: `2^15 / sum`.
    #[inline]
    pub fn of_sum(sum: u64) -> Normalise {
        let normalise = ratio_of_sum(sum).unwrap_or(Multiplier::ZERO);
        let (m, shift) = (normalise.mantissa.max(0) as u64, normalise.shift as u32);
        Normalise {
            m,
            shift,
            half: (1u64 << shift) >> 1,
        }
    }

    /// `m` and `t = shift - 32` where the shift is 33 or more: then [`Normalise::apply`] is
    /// `min(round(⌊e m / 2^32⌋ / 2^t), 32767)` (a kernel's form).
    pub fn high_word(self) -> Option<(u32, u32)> {
        (self.shift >= 33).then_some((self.m as u32, self.shift - 32))
    }

    /// `normalise.apply(e)` of an `e` in `0..=2^30`, unsigned (the product is below 2^62, so
    /// no saturation comes before the `min`): one 32 × 32 → 64-bit product a probability.
    #[inline]
    pub fn apply(self, e: i32) -> i32 {
        // `m` is a multiplier's mantissa, below 2^31
        if self.shift >= 33 {
            // `⌊(P + 2^(s-1)) / 2^s⌋ = ⌊(⌊P / 2^32⌋ + 2^(s-33)) / 2^(s-32)⌋` for `s ≥ 33` (the
            // low word only adds a fraction below 1 to a whole numerator): the product's high
            // word alone, which is below 2^29
            return Normalise::apply_high((self.m as u32, self.shift - 32), e);
        }
        let product = mul_wide_u32(e as u32, self.m as u32);
        ((product + self.half) >> self.shift).min(PROBABILITY_ONE as u64 - 1) as i32
    }

    /// [`Normalise::apply`] in [`Normalise::high_word`]'s form `(m, t)`: the product's high
    /// word alone (below 2^29), rounded by `2^t`.
    #[inline(always)]
    pub fn apply_high((m, t): (u32, u32), e: i32) -> i32 {
        let high = (mul_wide_u32(e as u32, m) >> 32) as u32;
        ((high + (1 << (t - 1))) >> t).min(PROBABILITY_ONE - 1) as i32
    }
}

/// [`Multiplier::from_ratio`]`(2^15, sum)` (the same multiplier) with 32-bit divisions alone
/// where `sum` is at least `2^30` (every row's: its largest term is `2^30`).
///
/// `from_ratio` keeps the divisor's 32 leading bits, rounded up, as `d` of `b` bits, and divides
/// `2^(30 + b)` by it: the quotient in `(2^30, 2^31]`, halved where it is `2^31` (`d` a power of
/// two). With `d` shifted to `D` in `[2^31, 2^32)`, that is `⌊2^62 / D⌋`, which two 32-bit
/// divisions give (a 64 by 32-bit division's two 16-bit digits, each corrected by at most
/// two: Knuth's algorithm D, as in Hacker's Delight's `divlu`).
#[inline]
fn ratio_of_sum(sum: u64) -> Option<Multiplier> {
    let bits = 64 - sum.leading_zeros() as i32;
    if bits < 31 {
        return Multiplier::from_ratio(PROBABILITY_ONE as u64, sum);
    }
    let drop = (bits - 32).max(0);
    let d = (sum >> drop) + u64::from(sum & ((1u64 << drop) - 1) != 0);
    if d >> 32 != 0 {
        // rounded up to 2^32
        return Multiplier::from_ratio(PROBABILITY_ONE as u64, sum);
    }
    let d_bits = 64 - d.leading_zeros() as i32;
    let v = (d as u32) << (32 - d_bits); // [2^31, 2^32)
    let quotient = quotient_of_2_62(v);
    // `k = 15 + d_bits`, one less where the quotient was halved
    let (quotient, k) = if quotient >= 1 << 31 {
        (quotient >> 1, 14 + d_bits)
    } else {
        (quotient, 15 + d_bits)
    };
    let mut shift = k + drop;
    let mut quotient = quotient;
    while shift > crate::fixed_point::MAX_SHIFT as i32 {
        quotient >>= 1;
        shift -= 1;
    }
    Some(Multiplier {
        mantissa: quotient as i32,
        shift: shift as u8,
    })
}

/// `⌊2^62 / v⌋` for `v` in `[2^31, 2^32)` (in `(2^30, 2^31]`): the dividend's high word `2^30`
/// is below `v`, so the quotient has two 16-bit digits, each estimated from `v`'s high half
/// and corrected.
#[inline]
fn quotient_of_2_62(v: u32) -> u32 {
    const B: u32 = 1 << 16;
    // v1 in [2^15, 2^16)
    let (v1, v0) = (v >> 16, v & 0xFFFF);
    // the first digit: (2^30 · 2^16) / v, from 2^30 / v1
    let high = 1u32 << 30;
    let q1 = quotient_digit(high, (v1, v0));
    // the remainder `2^30 · 2^16 - q1 · v`, below `v` (modular arithmetic: the true value fits)
    let rest = high.wrapping_mul(B).wrapping_sub(q1.wrapping_mul(v));
    let q0 = quotient_digit(rest, (v1, v0));
    q1 * B + q0
}

/// One 16-bit digit of `⌊n · 2^16 / v⌋` for `n < v` (`v = v1 · 2^16 + v0`, `v1` in
/// `[2^15, 2^16)`): `n / v1`, corrected down at most twice.
#[inline(always)]
fn quotient_digit(n: u32, (v1, v0): (u32, u32)) -> u32 {
    const B: u32 = 1 << 16;
    let (mut q, mut r) = (n / v1, n % v1);
    while q >= B || q * v0 > B * r {
        q -= 1;
        r += v1;
        if r >= B {
            break;
        }
    }
    q
}

/// `x = ln softmax(x)` in place for logits in `Q(frac)` nats (`frac ≤ 30`): `x_i - max - ln S`
/// with `S = Σ exp_neg(max - x_j)` in `Q30` (`u64`), `ln S` from [`ln`] in `Q24` minus
/// `30 · ln 2`, brought to `Q(frac)` (rounded to nearest), the differences saturated. Terms
/// below `2^-31` round to 0, so `ln S` is low by at most `n · 2^-31` (n the row's length); the
/// table's interpolation adds at most `2^-18`.
pub fn log_softmax(x: &mut [i32], frac: u32) {
    let (largest, sum) = match largest_and_sum_by_kernels(x, frac) {
        Some(found) => found,
        None => {
            let Some(&largest) = x.iter().max() else {
                return;
            };
            let sum: u64 = x
                .iter()
                .map(|&v| exp_neg(to_exp_input(largest, v, frac)) as u64)
                .sum();
            (largest, sum)
        }
    };
    let ln_sum = ln_sum(sum, frac);
    // two saturating subtractions in 32 bits, by a kernel where there is one (`x - largest` is
    // at most 0 and `ln_sum` at least 0: a difference saturated at the first step stays
    // saturated at the second, as the clamp makes it)
    if (0..=i32::MAX as i64).contains(&ln_sum) {
        let ln_sum = ln_sum as i32;
        if !kernels::subtract_twice_i32(x, largest, ln_sum) {
            for v in x.iter_mut() {
                *v = v.saturating_sub(largest).saturating_sub(ln_sum);
            }
        }
        return;
    }
    for v in x.iter_mut() {
        let log_p = *v as i64 - largest as i64 - ln_sum;
        *v = log_p.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
    }
}

/// [`log_softmax`]'s largest value and sum of exponentials by the kernels, four values an
/// instruction (a copy of 64 values at a time taking the exponentials); `None` where this
/// build has none, `frac` is above 24, or there are no values.
#[inline]
fn largest_and_sum_by_kernels(x: &[i32], frac: u32) -> Option<(i32, u64)> {
    if !kernels::INTEGER_PASSES || frac > 24 {
        return None;
    }
    let (_, _, largest) = kernels::sum_range_i32(x)?;
    let mut copy = [0i32; 64];
    let mut sum = 0u64;
    for chunk in x.chunks(64) {
        let copy = &mut copy[..chunk.len()];
        copy.copy_from_slice(chunk);
        sum += kernels::exp_scores_i32(copy, largest, frac, &crate::fixed_point::EXP2_TABLE)?;
    }
    Some((largest, sum))
}

/// `ln(S · 2^-30)` in `Q(frac)` of [`log_softmax`]'s sum `S`: in Q24, then `Q(frac)`.
#[inline]
fn ln_sum(sum: u64, frac: u32) -> i64 {
    let ln_sum_q24 = ln(sum) as i64 - ((30 * LN_2_Q31 as i64) >> 7); // 30 · ln2 in Q24
    round_shift(ln_sum_q24, 24 - frac as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use alloc::vec::Vec;

    fn real(v: i32, frac: u32) -> f64 {
        v as f64 / libm::exp2(frac as f64)
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn sums_divide_in_32_bits_as_from_ratio_divides_them() {
        let mut rng = Rng::new(23);
        let edges = (0..64u32).flat_map(|b| {
            let p = 1u64 << b;
            [p - 1, p, p + 1, p | (p >> 1), p.wrapping_sub(1) << 1]
        });
        let random = (0..200_000).map(|i| rng.next_u64() >> (i % 40));
        for sum in
            edges
                .chain(random)
                .chain([0, u64::MAX, (1 << 32) - 1, (1 << 33) - 1, 0xFFFF_FFFF_8000_0000])
        {
            let want = Multiplier::from_ratio(PROBABILITY_ONE as u64, sum);
            assert_eq!(ratio_of_sum(sum), want, "{sum}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn exp_inputs_in_32_bits_equal_the_64_bit_form() {
        let wide = |largest: i32, score: i32, frac: u32| {
            let distance = (largest as i64 - score as i64).max(0) as u64;
            if frac <= 24 {
                (distance << (24 - frac)).min(u32::MAX as u64) as u32
            } else {
                (distance >> (frac - 24).min(63)) as u32
            }
        };
        let mut rng = Rng::new(22);
        for i in 0..200_000 {
            let frac = i % 61;
            let (a, b) = (
                rng.next_u64() as i32 >> (i % 32),
                rng.next_u64() as i32 >> (i % 29),
            );
            for (largest, score) in [(a, b), (b, a), (a, a), (i32::MAX, i32::MIN), (0, i32::MIN)] {
                assert_eq!(
                    to_exp_input(largest, score, frac as u32),
                    wide(largest, score, frac as u32)
                );
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn probabilities_match_f64() {
        let mut rng = Rng::new(21);
        for case in 0..400 {
            let n = [1, 2, 7, 64, 65, 300, 1000, 4096][case % 8];
            let frac = [8, 16, 20, 24, 26][case % 5];
            let spread = libm::exp2(rng.unit_f64() * 6.0 - 2.0);
            let scores: Vec<i32> = (0..n)
                .map(|_| libm::round(rng.symmetric_f32() as f64 * spread * libm::exp2(frac as f64)) as i32)
                .collect();
            let mut probs = alloc::vec![0u16; n];
            softmax_q15(&scores, frac, &mut probs);
            let largest = scores.iter().map(|&s| real(s, frac)).fold(f64::MIN, f64::max);
            let exps: Vec<f64> = scores
                .iter()
                .map(|&s| libm::exp(real(s, frac) - largest))
                .collect();
            let total: f64 = exps.iter().sum();
            let mut mass = 0u32;
            for (j, (&p, e)) in probs.iter().zip(&exps).enumerate() {
                let expected = e / total * 32768.0;
                // the rounding to Q15, the clamp at 32767, and the exps' relative 2^-19
                assert!(
                    (p as f64 - expected).abs() <= 1.0 + expected * 1e-5,
                    "n {n} frac {frac} j {j}: {p} vs {expected}"
                );
                mass += p as u32;
            }
            assert!(
                (mass as f64 - 32768.0).abs() <= n as f64 * 0.5 + 1.0,
                "n {n}: mass {mass}"
            );
            let mut in_place = scores.clone();
            softmax_q15_in_place(&mut in_place, frac);
            assert!(in_place.iter().zip(&probs).all(|(&a, &b)| a == b as i32), "n {n}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn one_score_gets_almost_all_the_mass() {
        let mut probs = [0u16; 3];
        softmax_q15(&[100 << 16, 0, -(100 << 16)], 16, &mut probs);
        assert_eq!(probs, [32767, 0, 0]);
        softmax_q15(&[7, 7, 7], 0, &mut probs);
        assert_eq!(probs, [10923, 10923, 10923]);
        // the extremes of Q30: about 2, -2 and 0 nats; 32768 · e^s / (1 + e^-4 + e^-2)
        softmax_q15(&[i32::MAX, i32::MIN, 0], 30, &mut probs);
        assert_eq!(probs, [28404, 520, 3844]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn log_probabilities_match_f64() {
        let mut rng = Rng::new(22);
        for case in 0..300 {
            let n = [1, 2, 5, 256, 1000, 20000][case % 6];
            let frac = [16, 20, 24, 26][case % 4];
            // logits within ±2^(29 - frac), so their differences fit Q(frac)
            let spread = libm::exp2(rng.unit_f64() * 7.0 - 2.0).min(libm::exp2(29.0 - frac as f64));
            let logits: Vec<i32> = (0..n)
                .map(|_| libm::round(rng.symmetric_f32() as f64 * spread * libm::exp2(frac as f64)) as i32)
                .collect();
            let mut log_p = logits.clone();
            log_softmax(&mut log_p, frac);
            let largest = logits.iter().map(|&s| real(s, frac)).fold(f64::MIN, f64::max);
            let total: f64 = logits.iter().map(|&s| libm::exp(real(s, frac) - largest)).sum();
            let ln_total = libm::log(total);
            for (i, (&got, &logit)) in log_p.iter().zip(&logits).enumerate() {
                let expected = real(logit, frac) - largest - ln_total;
                let bound = n as f64 * libm::exp2(-31.0) + libm::exp2(-18.0) + libm::exp2(-(frac as f64));
                assert!(
                    (real(got, frac) - expected).abs() <= bound,
                    "n {n} frac {frac} i {i}: {} vs {expected}",
                    real(got, frac)
                );
            }
        }
    }
}

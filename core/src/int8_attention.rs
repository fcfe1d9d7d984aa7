//! Attention over int8 memory in integers: the query · key and probability · value products
//! of one head as exact i32 sums, so Cortex-M cores with DSP run them with `SMLAD`/`SMLABB`
//! instead of converting every cached byte to f32.
//!
//! The f32 side of each product is quantized to 16 bits, once per head:
//! ```text
//! query · key_t     = (Σ_c q16[c] · k8_t[c]) · query_step · key_scale_t
//! Σ_t p_t · value_t = (Σ_t p16[t] · v8_t)   · probability_step,  p16 ≈ p_t · value_scale_t / step
//! ```
//! Sixteen bits keep the rounding far below the int8 memory's own (a relative step of 2⁻¹⁵
//! against 2⁻⁷). The steps are chosen so no i32 sum can overflow: every sum has at most
//! [`SUM_LIMIT`] in absolute value, whatever the number of terms. Integer sums are exact in any
//! order, so every kernel gives the same bits.

pub use crate::kernels::portable::{query_words, SIDE_BY_SIDE};
use crate::kernels::{self, Magnitudes};

/// Largest `Σ |a_i|` of the 16-bit side of a sum whose other side is int8 (`|b_i| <= 127`):
/// then `|Σ a_i b_i| <= 127 · SUM_LIMIT <= i32::MAX`.
pub const SUM_LIMIT: f32 = 16_000_000.0; // i32::MAX / 127 is 16,909,320; the rest is rounding slack

/// Largest 16-bit magnitude (the halves `SMLAD` and `SMLABB` multiply are signed 16-bit).
pub const HALF_MAX: f32 = 32767.0;

/// Words of integer scratch attention over int8 memory needs for a head of `d_head`, besides
/// one word per key (which it takes from the position terms once they are used).
pub fn scratch_words(d_head: usize) -> usize {
    d_head.max(query_words(d_head))
}

/// One head's query quantized to 16 bits, widened as the kernels read it: for columns
/// `4g..4g + 4`, word `2g` holds columns `4g` and `4g + 2` and word `2g + 1` columns `4g + 1` and
/// `4g + 3` as signed 16-bit halves (the order `SXTB16` and `SXTB16 ROR #8` put a key word's
/// bytes in); columns past the head are zero.
#[derive(Debug, Clone, Copy)]
pub struct QueryWords<'a> {
    /// The widened 16-bit values, two words per four columns.
    pub words: &'a [u32],
    /// The value of one quantization step.
    pub step: f32,
}

impl<'a> QueryWords<'a> {
    /// Quantizes `query` into `words` ([`query_words`] long at least); `None` when a value is not
    /// finite (then the caller takes the f32 path, which keeps the NaN or infinity).
    pub fn quantize(query: &[f32], words: &'a mut [u32]) -> Option<Self> {
        let max_abs = largest_magnitude(query);
        if !max_abs.is_finite() {
            return None;
        }
        let words = &mut words[..query_words(query.len())];
        // up to 488 columns SUM_LIMIT / columns is above 32786: the top is HALF_MAX
        let top = if query.len() <= 488 {
            HALF_MAX
        } else {
            HALF_MAX.min(libm::floorf(SUM_LIMIT / query.len() as f32))
        };
        let (step, inverse) = usable_steps(max_abs / top, top / max_abs);
        let half = |v: f32| -> u32 { round(v * inverse) as i16 as u16 as u32 };
        if kernels::query_halves(query, words, inverse) {
            return Some(QueryWords { words, step });
        }
        let (groups, rest) = query.as_chunks::<4>();
        let (whole, partial) = words.split_at_mut(2 * groups.len());
        for (pair, four) in whole.chunks_exact_mut(2).zip(groups) {
            let h = four.map(half);
            pair[0] = h[0] | h[2] << 16;
            pair[1] = h[1] | h[3] << 16;
        }
        if let [first, second] = partial {
            // the last, partial group: zeros past the head
            let h: [u32; 4] = core::array::from_fn(|i| rest.get(i).map_or(0, |&v| half(v)));
            *first = h[0] | h[2] << 16;
            *second = h[1] | h[3] << 16;
        }
        Some(QueryWords { words, step })
    }
}

/// The largest `|v|`, or NaN if any `v` is NaN: from the bits of each `|v|` as integers, which
/// order as the magnitudes do (a NaN's above infinity's: [`kernels::magnitude_bits`]).
fn largest_magnitude(values: &[f32]) -> f32 {
    let largest = kernels::magnitude_bits(values);
    if largest > f32::INFINITY.to_bits() {
        f32::NAN
    } else {
        f32::from_bits(largest)
    }
}

/// `(step, inverse)` as given, or `(0, 0)` (every value quantized to zero) when there is nothing
/// to quantize or the values are so small (subnormal) that the inverse overflows: their
/// products are below anything the f32 arithmetic after them would keep.
fn usable_steps(step: f32, inverse: f32) -> (f32, f32) {
    if step > 0.0 && inverse > 0.0 && inverse.is_finite() {
        (step, inverse)
    } else {
        (0.0, 0.0)
    }
}

/// `y` rounded to the nearest integer, halves away from zero, within the 16-bit range (`|y|`
/// is at most `HALF_MAX` and a rounding error by construction; the clamp keeps any input safe).
/// The same bits on every target, which is what matters here.
#[allow(clippy::manual_clamp)] // `f32::clamp` compares (it keeps a NaN): no VMAXNM/VMINNM
fn round(y: f32) -> i32 {
    let v = y + 0.5f32.copysign(y);
    if cfg!(feature = "cortex-m-mve") {
        // the clamp in f32 first, with the FPU's VMAXNM and VMINNM (Armv8.1-M): the same
        // integers for every `y` but NaN (-32767 instead of 0), and `y` is never NaN here (the
        // callers quantize finite values by a finite inverse)
        return v.max(-HALF_MAX).min(HALF_MAX) as i32;
    }
    (v as i32).clamp(-(HALF_MAX as i32), HALF_MAX as i32)
}

/// The weights of a probability · value sum (each probability times its value's scale)
/// quantized to 16 bits, one i32 per key.
#[derive(Debug)]
pub struct ProbabilityWords<'a> {
    /// One 16-bit weight per key.
    pub weights: &'a [i32],
    /// The value of one quantization step.
    pub step: f32,
}

impl<'a> ProbabilityWords<'a> {
    /// Quantizes the weights `w` (`p[t] · value_scale_t`, multiplied by the caller) in place:
    /// their storage then holds them as i32. `None`, with `w` untouched, when a weight is not
    /// finite. Every weight is at most [`HALF_MAX`] steps and all together at most
    /// [`SUM_LIMIT`].
    pub fn quantize_in_place(w: &'a mut [f32]) -> Option<Self> {
        let mut magnitudes = Magnitudes::default();
        for &weight in w.iter() {
            magnitudes.add(weight);
        }
        Self::with_magnitudes(w, magnitudes)
    }

    /// [`ProbabilityWords::quantize_in_place`] for the lists `rows[b][ranges[b]]`, each row zero
    /// outside its range, with the bits of one call per list: `steps[b]` is list `b`'s step, or
    /// `None` (the list untouched). Each list's magnitudes are added in its order, as there
    /// (the zeros around it change neither its largest nor its sum), but sixteen lists' sums go
    /// side by side (the lanes of one register with AVX-512F on x86-64), so no list waits on the
    /// latency of another's chain of additions.
    pub fn quantize_each_in_place(
        rows: &mut [&mut [f32]],
        ranges: &[core::ops::RangeInclusive<usize>],
        steps: &mut [Option<f32>],
    ) {
        let groups = rows.chunks_mut(SIDE_BY_SIDE).zip(ranges.chunks(SIDE_BY_SIDE));
        for ((rows, ranges), steps) in groups.zip(steps.chunks_mut(SIDE_BY_SIDE)) {
            let mut largest = [0.0f32; SIDE_BY_SIDE];
            let mut sums = [0.0f32; SIDE_BY_SIDE];
            kernels::magnitudes_each_f32(rows, &mut largest, &mut sums);
            for (b, ((row, range), step)) in rows.iter_mut().zip(ranges).zip(steps.iter_mut()).enumerate() {
                let magnitudes = Magnitudes {
                    max: largest[b],
                    sum: sums[b],
                };
                *step =
                    ProbabilityWords::with_magnitudes(&mut row[range.clone()], magnitudes).map(|q| q.step);
            }
        }
    }

    /// [`ProbabilityWords::with_magnitudes`] for `keys` weights among `w` (the others zero: they
    /// round to zero), the step as for those alone.
    pub(crate) fn with_magnitudes_of(
        w: &'a mut [f32],
        Magnitudes { max, sum }: Magnitudes,
        keys: usize,
    ) -> Option<Self> {
        // rounding adds at most half a step per key
        let room = SUM_LIMIT - 0.5 * keys as f32;
        if !max.is_finite() || !sum.is_finite() || room <= 0.0 {
            return None;
        }
        let step = (max / HALF_MAX).max(sum / room);
        let (step, inverse) = usable_steps(step, 1.0 / step);
        let weights: &mut [i32] = bytemuck::cast_slice_mut(w);
        let done = kernels::round_weights(weights, inverse);
        for w in weights[done..].iter_mut() {
            *w = round(f32::from_bits(*w as u32) * inverse);
        }
        Some(ProbabilityWords { weights, step })
    }

    /// The rest of [`ProbabilityWords::quantize_in_place`], the weights' magnitudes added up.
    pub(crate) fn with_magnitudes(w: &'a mut [f32], magnitudes: Magnitudes) -> Option<Self> {
        let keys = w.len();
        Self::with_magnitudes_of(w, magnitudes, keys)
    }
}

/// `out[t] = query · key_t` for `t < out.len()`: key `t` is the first `d_head` bytes at
/// `keys[t * stride..]` times its scale, the next of `key_scales`.
pub fn key_dots(
    keys: &[i8],
    stride: usize,
    d_head: usize,
    key_scales: impl Iterator<Item = f32>,
    query: &QueryWords<'_>,
    out: &mut [f32],
) {
    let sums: &mut [i32] = bytemuck::cast_slice_mut(out);
    key_sums(keys, stride, d_head, query, sums);
    for (o, key_scale) in out.iter_mut().zip(key_scales) {
        let sum = o.to_bits() as i32;
        *o = sum as f32 * query.step * key_scale;
    }
}

/// `sums[t] = query · key_t` for `t < sums.len()`, key `t` the first `d_head` bytes at
/// `keys[t * stride..]` ([`kernels::key_sums_i8`]).
pub fn key_sums(keys: &[i8], stride: usize, d_head: usize, query: &QueryWords<'_>, sums: &mut [i32]) {
    kernels::key_sums_i8(keys, stride, d_head, query.words, sums);
}

/// `acc[c] += Σ_t weights[t] · value_t[c]` for `c < acc.len()`, value `t` at
/// `values[t * stride..]` ([`kernels::value_sums_i8`]).
pub fn value_sums(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    kernels::value_sums_i8(values, stride, weights, acc);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::portable::query_half;

    use crate::rng::Rng;

    /// `n` draws from `0..below`, from the stream of `seed`.
    fn pseudo_random(n: usize, seed: u64, below: u64) -> impl Iterator<Item = u64> {
        let mut rng = Rng::new(seed);
        (0..n).map(move |_| rng.below(below))
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn query_words_round_trip_every_column_including_a_partial_group() {
        let query: [f32; 7] = [1.0, -2.0, 0.5, 3.0, -3.0, 0.25, -0.125];
        let mut words = [0u32; 4];
        let q = QueryWords::quantize(&query, &mut words).unwrap();
        assert_eq!(q.step, 3.0 / HALF_MAX);
        for (c, &v) in query.iter().enumerate() {
            let back = query_half(q.words, c) as f32 * q.step;
            assert!((back - v).abs() <= q.step / 2.0, "column {c}: {back} vs {v}");
        }
        // the padding column is zero
        assert_eq!(query_half(q.words, 7), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn non_finite_inputs_take_the_f32_path() {
        let mut words = [0u32; 2];
        assert!(QueryWords::quantize(&[1.0, f32::NAN], &mut words).is_none());
        let mut w = [0.5f32, f32::INFINITY];
        assert!(ProbabilityWords::quantize_in_place(&mut w).is_none());
        assert_eq!(w, [0.5, f32::INFINITY]);
    }

    /// Found by fuzzing: subnormal weights made the step's inverse infinite, and a weight
    /// saturated to `i32::MAX`. Values that small quantize to zero now.
    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn subnormal_values_quantize_to_zero() {
        let tiny = f32::from_bits(1); // the smallest subnormal
        let mut w = [tiny, 0.0, tiny];
        let q = ProbabilityWords::quantize_in_place(&mut w).unwrap();
        assert_eq!((q.weights, q.step), (&[0, 0, 0][..], 0.0));
        let mut words = [0u32; 2];
        let q = QueryWords::quantize(&[tiny, -tiny, 0.0], &mut words).unwrap();
        assert_eq!((q.words, q.step), (&[0, 0][..], 0.0));
        // and a normal value next to them still uses the full range
        let mut w = [1.0f32, tiny];
        let q = ProbabilityWords::quantize_in_place(&mut w).unwrap();
        assert_eq!(q.weights, &[32767, 0][..]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn probability_weights_never_overflow_the_sums() {
        // many keys of equal weight: the sum limit, not the 16-bit one, sets the step
        let mut p = [1.0f32; 4000];
        let w = ProbabilityWords::quantize_in_place(&mut p).unwrap();
        let total: i64 = w.weights.iter().map(|&x| x as i64).sum();
        assert!(total as f32 <= SUM_LIMIT && total * 127 <= i32::MAX as i64);
        assert!(w.weights.iter().all(|&x| x.abs() <= 32767));
    }

    /// The integer products against the same products in f64 from the unquantized f32 side:
    /// each may be off by at most half a 16-bit step per term (plus f32 rounding), at every
    /// head width (whole and partial groups of four) and an odd key count.
    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn integer_products_are_the_f64_products_to_half_a_step() {
        for d_head in [1usize, 3, 4, 8, 13, 32, 64] {
            let stride = d_head + 5;
            let count = 9;
            let keys: alloc::vec::Vec<i8> =
                pseudo_random((count - 1) * stride + d_head, 7 + d_head as u64, 255)
                    .map(|x| (x as i32 - 127) as i8)
                    .collect();
            let key = |t: usize| &keys[t * stride..t * stride + d_head];
            let key_scales: alloc::vec::Vec<f32> = (0..count).map(|t| 0.01 + t as f32 * 0.003).collect();
            let query: alloc::vec::Vec<f32> = pseudo_random(d_head, 3, 2001)
                .map(|x| x as f32 / 1000.0 - 1.0)
                .collect();
            let mut words = alloc::vec![0u32; query_words(d_head)];
            let q = QueryWords::quantize(&query, &mut words).unwrap();
            let mut dots = [0.0f32; 9];
            key_dots(&keys, stride, d_head, key_scales.iter().copied(), &q, &mut dots);
            for (t, &got) in dots.iter().enumerate() {
                let exact: f64 = key(t)
                    .iter()
                    .zip(&query)
                    .map(|(&k, &x)| k as f64 * x as f64)
                    .sum::<f64>()
                    * key_scales[t] as f64;
                let bound = q.step as f64 / 2.0
                    * key(t).iter().map(|&k| (k as f64).abs()).sum::<f64>()
                    * key_scales[t] as f64;
                assert!(
                    (got as f64 - exact).abs() <= bound * 1.001 + 1e-6 * exact.abs(),
                    "d_head {d_head} key {t}: {got} vs {exact}"
                );
            }

            let p: alloc::vec::Vec<f32> = pseudo_random(count, 11, 1000)
                .map(|x| x as f32 / 1000.0)
                .collect();
            let mut w = p.clone();
            let weights = ProbabilityWords::quantize_in_place(&mut w).unwrap();
            let mut acc = alloc::vec![0i32; d_head];
            value_sums(&keys, stride, weights.weights, &mut acc);
            for (c, &sum) in acc.iter().enumerate() {
                let got = sum as f64 * weights.step as f64;
                let exact: f64 = (0..count).map(|t| p[t] as f64 * key(t)[c] as f64).sum();
                let bound =
                    weights.step as f64 / 2.0 * (0..count).map(|t| (key(t)[c] as f64).abs()).sum::<f64>();
                assert!(
                    (got - exact).abs() <= bound * 1.001 + 1e-6 * exact.abs(),
                    "d_head {d_head} column {c}: {got} vs {exact}"
                );
            }
        }
    }
}

//! The forward pass in integers, for images whose arithmetic is
//! [`Arithmetic::Integer`](crate::image::Arithmetic): the sub-layers of `forward.rs` with every
//! activation in one fixed-point format `Q(frac)`, int8 inputs to the linear layers (a
//! [`Multiplier`] per position), int8 keys, values and position keys with a power of two per
//! position and head, 16-bit queries, scores in `Q20` nats, 16-bit probabilities, and the
//! log-softmax in fixed point (`docs/INTEGER.md`). No floating-point operation runs: the
//! parameters come from the image's values by integer operations on their bits, and the
//! log-probabilities become `f32` by [`to_f32`], bit by bit. The reference crate's
//! `IntegerModel` computes the same arithmetic plainly; the two agree bit for bit.
//!
//! The buffers are the float session's, seen as `i32` (the same size and alignment): `hidden`
//! holds `h` in `Q(frac)`, the memory's int8 stores keep each head's exponent in its scale
//! slot, and a table of the position keys holds each distance's `n_head · d_head` int8
//! values (at the memory's stride for its keys) and then each distance's exponent byte per
//! head ([`crate::arena::integer_key_row_bytes`] bytes a distance). One buffer is the
//! integer session's own: each layer's [`LayerParameters`], converted from the image when the
//! session starts.

use super::Session;
use crate::arena::integer_parameter_parts;
use crate::attention::AttentionShape;
use crate::config::{Config, MAX_CLUSTERS};
use crate::fixed_point::{
    cos_turns, f32_of_f16, fixed_of_f32, fixed_of_f32_wide, inverse_sqrt_multiplier, multiplier_of_f32,
    position_frequency, round_shift, round_shift_i32, saturate, sin_turns, sqrt_multiplier, to_f32,
    Multiplier, Rescale, Scale16, ScaledByBits,
};
use crate::image::Arithmetic;
use crate::integer::{
    act_rescale, act_shift, act_top, attention_score, attention_score_of_small, layer_norm_of_bounded_slices,
    log_softmax, pow2_act_top, pow2_exponent, pow2_exponent_of, rescale_wide, Int8Steps, Normalise,
    ACT_SHIFT, SCORE_FRAC,
};
use crate::kernels;
use crate::matrix::split_scratch;
use crate::model::LayerWeights;
use crate::options::PositionKeys;
use crate::vector::Vector;
use crate::weights::{int4_groups, int4_row_bytes, Matrix, MatrixData};

/// The largest multiplier: where a product of multipliers passes `2^31`, results saturate.
const SATURATED: Multiplier = Multiplier {
    mantissa: i32::MAX,
    shift: 0,
};

/// Rows of int4 sums a pass of [`Input::rows`] keeps.
const INT4_ROWS: usize = 16;

fn product(a: Multiplier, b: Multiplier) -> Multiplier {
    a.times(b).unwrap_or(SATURATED)
}

/// `product(scale, scale_of(f32::from_bits(bits))).apply(q)` for an int8 `q`: an embedding
/// column's value, its activation scale of bits `bits`. The usual column (`scale` normalised, a
/// positive normal scale of `multiplier_of_f32`'s first path, the product's shift `s` in
/// `8..=47`) in 32-bit arithmetic: the product's mantissa `m` in two halves, `q · m_hi` and
/// `q · m_lo` exact, `|q m / 2^s| < 2^31`; the same value.
#[inline(always)]
fn embedding_value(scale: Multiplier, bits: u32, q: i32) -> i32 {
    let exponent = (bits >> 23) & 0xFF;
    if scale.mantissa >= 1 << 30 && bits >> 31 == 0 && (95..=156).contains(&exponent) {
        // `Multiplier::times` of two normalised mantissas (the scale's `(2^23 + fraction) · 2^7`,
        // shift `157 - exponent`): the top 31 bits of the product
        let product = scale.mantissa as u64 * ((((1u32 << 23) | (bits & 0x7F_FFFF)) << 7) as u64);
        let drop = 30 + (product >> 61) as i32;
        let s = scale.shift as i32 + 157 - exponent as i32 - drop;
        if (8..=47).contains(&s) {
            let m = (product >> drop) as i32;
            let (high, low) = (q * (m >> 16), q * (m & 0xFFFF)); // below 2^22 and 2^23
                                                                 // `⌊(q m + 2^(s-1)) / 2^s⌋`: `q m_hi 2^16` a multiple of `2^s` (`s ≤ 16`), or the
                                                                 // low product's bits below 2^16 carrying nothing past them (`s > 16`)
            return if s <= 16 {
                (high << (16 - s)) + ((low + (1 << (s - 1))) >> s)
            } else {
                (high + (low >> 16) + (1 << (s - 17))) >> (s - 16)
            };
        }
    }
    product(scale, scale_of(f32::from_bits(bits))).apply(q)
}

#[cfg(test)]
mod embedding_tests {
    use super::*;
    use crate::rng::Rng;

    /// [`embedding_value`] against the product of multipliers applied, for scales and
    /// activation scales of every exponent (zeros, subnormals, negatives, infinities among
    /// them) and every int8 value.
    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn embedding_values_are_the_products_applied() {
        let mut rng = Rng::new(17);
        for round in 0..20_000u32 {
            let r = rng.next_u64();
            let scale = Multiplier {
                mantissa: match round % 8 {
                    0 => (r as u32 >> 1) as i32,
                    1 => i32::MAX,
                    _ => (1 << 30) | (r as i32 & 0x3FFF_FFFF),
                },
                shift: ((r >> 32) % 63) as u8,
            };
            let exponent = match (r >> 40) % 8 {
                0 => (r >> 48) as u32 & 0xFF,
                1 => 50 + (r >> 48) as u32 % 60,
                _ => 80 + (r >> 48) as u32 % 90,
            };
            let sign = if r >> 60 == 0 { 1 << 31 } else { 0 };
            let bits = sign | exponent << 23 | (rng.next_u64() as u32 & 0x7F_FFFF);
            for q in [
                -128,
                -127,
                -1,
                0,
                1,
                2,
                63,
                127,
                (rng.next_u64() % 256) as i32 - 128,
            ] {
                let want = product(scale, scale_of(f32::from_bits(bits))).apply(q);
                assert_eq!(embedding_value(scale, bits, q), want, "{scale:?} {bits:#x} {q}");
            }
        }
    }
}

/// The multiplier an image's scale is ([`Image::parse`](crate::Image::parse) checked that
/// every scale of an integer image is one).
fn scale_of(value: f32) -> Multiplier {
    multiplier_of_f32(value).unwrap_or(SATURATED)
}

/// Element `i` of a vector of the image.
fn element(v: Vector<'_>, i: usize) -> f32 {
    match v {
        Vector::F32(s) => s[i],
        Vector::F16(s) => f32_of_f16(s[i].to_bits()),
    }
}

/// `f(k, v)` for `k < n`, `v` element `first + k` of `b` in `Q(frac)`; the vector's type
/// matched once, not per element.
#[inline(always)]
fn each_fixed(b: Vector<'_>, first: usize, n: usize, frac: u32, mut f: impl FnMut(usize, i32)) {
    match b {
        Vector::F32(s) => {
            for (k, &v) in s[first..first + n].iter().enumerate() {
                f(k, fixed_of_f32(v, frac));
            }
        }
        Vector::F16(s) => {
            for (k, v) in s[first..first + n].iter().enumerate() {
                f(k, fixed_of_f32(f32_of_f16(v.to_bits()), frac));
            }
        }
    }
}

/// `y += b` (element `first + k` of `b` in `Q(frac)` to `y[k]`), saturating.
fn add_bias(y: &mut [i32], b: Vector<'_>, first: usize, frac: u32) {
    let n = y.len();
    match b {
        // a kernel's, where there is one (`fixed_of_f32` of the bits it leaves)
        Vector::F32(s)
            if kernels::add_fixed_f32(y, &s[first..first + n], frac, |bits| {
                fixed_of_f32(f32::from_bits(bits), frac)
            }) => {}
        Vector::F32(s) => {
            for (y, &v) in y.iter_mut().zip(&s[first..first + n]) {
                *y = y.saturating_add(fixed_of_f32(v, frac));
            }
        }
        Vector::F16(s) => {
            for (y, v) in y.iter_mut().zip(&s[first..first + n]) {
                *y = y.saturating_add(fixed_of_f32(f32_of_f16(v.to_bits()), frac));
            }
        }
    }
}

fn add(y: &mut [i32], x: &[i32]) {
    // a kernel's, where there is one
    if kernels::add_saturating_i32(y, x) {
        return;
    }
    for (a, &b) in y.iter_mut().zip(x) {
        *a = a.saturating_add(b);
    }
}

/// `out` = `round(x · 127 / m)`, `m = max|x|`, for `x = value(c)` of each column, returning
/// what one step is worth ([`Int8Steps`]).
fn quantize_int8(value: impl Fn(usize) -> i32, out: &mut [i8]) -> Scale16 {
    let largest = (0..out.len()).map(|c| value(c).unsigned_abs()).max().unwrap_or(0);
    quantize_int8_of(largest, value, out)
}

/// [`quantize_int8`] of values whose largest magnitude `largest` the caller knows.
fn quantize_int8_of(largest: u32, value: impl Fn(usize) -> i32, out: &mut [i8]) -> Scale16 {
    let Some(steps) = Int8Steps::new(largest as u64) else {
        out.fill(0);
        return Scale16::ZERO;
    };
    match (steps.cut, steps.to_int8.prepared()) {
        // values below 2^30 and the usual shift: the loop without a branch per value
        (0, Some(to_int8)) => {
            for (c, q) in out.iter_mut().enumerate() {
                *q = to_int8.apply(value(c)).clamp(-127, 127) as i8;
            }
        }
        _ => {
            for (c, q) in out.iter_mut().enumerate() {
                *q = steps.quantize(value(c) as i64);
            }
        }
    }
    steps.step
}

/// [`quantize_int8`] of the values of `x` (as long as `out`).
fn quantize_slice(x: &[i32], out: &mut [i8]) -> Scale16 {
    let x = &x[..out.len()];
    let largest = x.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0);
    quantize_slice_of(largest, x, out)
}

/// [`quantize_int8_of`] of the values of `x` (as long as `out`), `largest` their largest
/// magnitude.
fn quantize_slice_of(largest: u32, x: &[i32], out: &mut [i8]) -> Scale16 {
    quantize_slice_widened(largest, x, out, &mut []).0
}

/// [`quantize_slice_of`], and `widened` written as [`kernels::widen_input_i8`] makes it of
/// `out` where a kernel does both in one pass ([`PreparedRescale::quantize_widened`]): the step
/// and whether `widened` was written.
///
/// [`PreparedRescale::quantize_widened`]: crate::fixed_point::PreparedRescale::quantize_widened
fn quantize_slice_widened(largest: u32, x: &[i32], out: &mut [i8], widened: &mut [u32]) -> (Scale16, bool) {
    let x = &x[..out.len()];
    if let Some(steps) = Int8Steps::new(largest as u64).filter(|steps| steps.cut == 0) {
        if let Some(to_int8) = steps.to_int8.prepared() {
            if to_int8.quantize_widened(x, out, widened) {
                return (steps.step, true);
            }
            to_int8.quantize_each(x, out, largest);
            return (steps.step, false);
        }
    }
    // (one call of the general form: the firmware's flash)
    (quantize_int8_of(largest, |c| x[c], out), false)
}

/// How a linear layer's input meets its activation scales: none, powers of two (the largest's
/// biased exponent, [`pow2_act_top`]), or others ([`act_top`]).
#[derive(Clone, Copy)]
enum ActTop {
    None,
    Pow2(u32),
    Scaled(i32),
}

impl ActTop {
    fn of(m: &Matrix<'_>) -> ActTop {
        match m.data {
            MatrixData::Int8 {
                act_scales: Some(act),
                ..
            } => {
                let act = &act[..m.cols];
                match pow2_act_top(act) {
                    Some(biased) => ActTop::Pow2(biased),
                    None => ActTop::Scaled(act_top(act.iter().map(|&a| Scale16::of_f32(a)))),
                }
            }
            _ => ActTop::None,
        }
    }

    /// As two words of [`LayerParameters`].
    fn words(self) -> [i32; 2] {
        match self {
            ActTop::None => [0, 0],
            ActTop::Pow2(biased) => [1, biased as i32],
            ActTop::Scaled(top) => [2, top],
        }
    }

    fn of_words([kind, value]: [i32; 2]) -> ActTop {
        match kind {
            1 => ActTop::Pow2(value as u32),
            2 => ActTop::Scaled(value),
            _ => ActTop::None,
        }
    }
}

/// What [`LayerParameters`] keeps of one of a layer's matrices: how its input meets its
/// activation scales, and the smallest and largest biased exponent (the sign bit included) of
/// its rows' scales where its rows have scales of their own (int8), which spare the rows'
/// rescale a pass over them ([`ScaledByBits::apply_each_bounded`]).
#[derive(Clone, Copy)]
struct MatrixParameters {
    act: ActTop,
    exponents: Option<(i32, i32)>,
}

impl MatrixParameters {
    fn of(m: &Matrix<'_>) -> MatrixParameters {
        let exponents = match m.data {
            MatrixData::Int8 { row_scales, .. } => row_scales.get(..m.rows).and_then(|rows| {
                let exponent = |s: &f32| (s.to_bits() as i32) >> 23;
                Some((rows.iter().map(exponent).min()?, rows.iter().map(exponent).max()?))
            }),
            _ => None,
        };
        MatrixParameters {
            act: ActTop::of(m),
            exponents,
        }
    }

    /// As two words of [`LayerParameters`]: [`ActTop::words`], the first with a flag for the
    /// exponents (bit 2) and the two exponents (`-256..=255`) in bits 3 to 12 and 13 to 22.
    fn words(self) -> [i32; 2] {
        let [kind, value] = self.act.words();
        let exponents = match self.exponents {
            Some((low, high)) => 1 << 2 | (low & 0x3FF) << 3 | (high & 0x3FF) << 13,
            None => 0,
        };
        [kind | exponents, value]
    }

    fn of_words([word, value]: [i32; 2]) -> MatrixParameters {
        MatrixParameters {
            act: ActTop::of_words([word & 3, value]),
            exponents: (word & 1 << 2 != 0).then_some(((word << 19) >> 22, (word << 9) >> 22)),
        }
    }
}

/// The input of a linear layer quantized to int8, with what one step of it is worth, and
/// bounds on the exponents of the rows' scales of the matrix it was made for where they are
/// known ([`MatrixParameters`]).
struct Input<'s> {
    xq: &'s [i8],
    widened: &'s [u32],
    step: Scale16,
    exponents: Option<(i32, i32)>,
}

impl<'s> Input<'s> {
    /// `x` (`Q(frac)`, times the matrix's activation scales if it has them) quantized for `m`,
    /// its step times `extra`, in `scratch` ([`crate::matrix::scratch_words`]`(m.cols)`).
    fn new(m: &Matrix<'_>, x: &[i32], extra: Scale16, scratch: &'s mut [u32]) -> Input<'s> {
        let (xq, widened) = split_scratch(scratch, m.cols);
        let x = &x[..m.cols];
        let step = match m.data {
            MatrixData::Int8 {
                act_scales: Some(act),
                ..
            } => {
                let act = &act[..m.cols];
                match pow2_act_top(act) {
                    // powers of two: a shift per value (the same values)
                    Some(biased) => {
                        let value = |c: usize| act_shift(x[c], act[c], biased);
                        quantize_int8(value, xq).times_pow2(biased as i32 - 142 + ACT_SHIFT)
                    }
                    None => {
                        let top = act_top(act.iter().map(|&a| Scale16::of_f32(a)));
                        let value = |c: usize| act_rescale(Scale16::of_f32(act[c]), top).apply(x[c]);
                        quantize_int8(value, xq).times_pow2(top + ACT_SHIFT)
                    }
                }
            }
            // (the slice's form: the same values)
            _ => quantize_slice(x, xq),
        };
        Input::widened_for(m, xq, widened, step.product(extra))
    }

    /// [`Input::new`] of an `x` the caller no longer needs: a matrix's activation scales
    /// (`act`, their [`ActTop`] made once per session) multiply it in place, once per value
    /// (the same int8 values and step).
    fn new_in_place(
        m: &Matrix<'_>,
        parameters: MatrixParameters,
        x: &mut [i32],
        scratch: &'s mut [u32],
    ) -> Input<'s> {
        let (xq, widened) = split_scratch(scratch, m.cols);
        let (step, done) = Input::quantize_in_place(m, parameters.act, x, xq, widened);
        let input = if done {
            Input {
                xq,
                widened,
                step,
                exponents: None,
            }
        } else {
            Input::widened_for(m, xq, widened, step)
        };
        Input {
            exponents: parameters.exponents,
            ..input
        }
    }

    /// [`Input::new`] by way of [`Input::new_in_place`] on a copy of `x` in `copy` (the same
    /// int8 values and step, each activation scale applied once per value), where `copy` holds
    /// the input; else [`Input::new`].
    fn new_copied(
        m: &Matrix<'_>,
        x: &[i32],
        extra: Scale16,
        copy: &mut [i32],
        scratch: &'s mut [u32],
    ) -> Input<'s> {
        let (Some(x), Some(copy)) = (x.get(..m.cols), copy.get_mut(..m.cols)) else {
            return Input::new(m, x, extra, scratch);
        };
        copy.copy_from_slice(x);
        let (xq, widened) = split_scratch(scratch, m.cols);
        let (step, _) = Input::quantize_in_place(m, ActTop::of(m), copy, xq, &mut []);
        Input::widened_for(m, xq, widened, step.product(extra))
    }

    /// [`Input::new_in_place`]'s int8 values of `x` in `xq`, and their step; with activation
    /// scales that are powers of two, `widened` written too where a kernel widens them in the
    /// same pass ([`quantize_slice_widened`]), and whether it did.
    #[inline(always)]
    fn quantize_in_place(
        m: &Matrix<'_>,
        act: ActTop,
        x: &mut [i32],
        xq: &mut [i8],
        widened: &mut [u32],
    ) -> (Scale16, bool) {
        let x = &mut x[..m.cols];
        let scales = match m.data {
            MatrixData::Int8 {
                act_scales: Some(scales),
                ..
            } => &scales[..m.cols],
            _ => &[],
        };
        match act {
            // powers of two: a shift per value (the same values), the largest magnitude found
            // in the same pass
            ActTop::Pow2(biased) if scales.len() == x.len() => {
                let largest = kernels::act_shifts_i32(x, scales, biased).unwrap_or_else(|| {
                    // the smallest and largest value kept
                    let (mut low, mut high) = (0i32, 0i32);
                    for (v, &a) in x.iter_mut().zip(scales) {
                        let y = act_shift(*v, a, biased);
                        *v = y;
                        (low, high) = (low.min(y), high.max(y));
                    }
                    low.unsigned_abs().max(high.unsigned_abs())
                });
                let top = biased as i32 - 142;
                let (step, done) = quantize_slice_widened(largest, x, xq, widened);
                (step.times_pow2(top + ACT_SHIFT), done)
            }
            ActTop::Scaled(top) if scales.len() == x.len() => {
                for (v, &a) in x.iter_mut().zip(scales) {
                    *v = act_rescale(Scale16::of_f32(a), top).apply(*v);
                }
                (quantize_slice(x, xq).times_pow2(top + ACT_SHIFT), false)
            }
            _ => (quantize_slice(x, xq), false),
        }
    }

    fn widened(xq: &'s mut [i8], widened: &'s mut [u32], step: Scale16) -> Input<'s> {
        kernels::widen_input_i8(xq, widened);
        Input {
            xq,
            widened,
            step,
            exponents: None,
        }
    }

    /// [`Input::widened`] for `m`: on RV32 only an int4 matrix reads the widened input (the
    /// int8 kernels read `xq`).
    fn widened_for(m: &Matrix<'_>, xq: &'s mut [i8], widened: &'s mut [u32], step: Scale16) -> Input<'s> {
        if cfg!(target_arch = "riscv32") && !matches!(m.data, MatrixData::Int4 { .. }) {
            return Input {
                xq,
                widened,
                step,
                exponents: None,
            };
        }
        Input::widened(xq, widened, step)
    }

    /// `y[k]` = row `first + k` of `m` times the input, in `Q(frac)`: the exact integer sum
    /// (an int4 row's cut to 31 bits), rescaled by the row's scale times the input's step.
    fn rows(&self, m: &Matrix<'_>, first: usize, y: &mut [i32]) {
        let m = m.row_range(first, first + y.len());
        match m.data {
            MatrixData::Int8 {
                values, row_scales, ..
            } => {
                kernels::row_sums_i8(values, m.cols, self.xq, self.widened, y);
                // an int8 row's sum has 31 bits at most: no cut
                ScaledByBits::new(self.step).apply_each_bounded(row_scales, y, self.exponents);
            }
            MatrixData::Int4 {
                values,
                scale,
                codes,
                group,
            } => {
                let (row_bytes, groups) = (int4_row_bytes(m.cols), int4_groups(m.cols, group));
                let rescale = Scale16::of_f32(scale).times(self.step);
                let mut sums = [0i64; INT4_ROWS];
                for (pass, y) in y.chunks_mut(INT4_ROWS).enumerate() {
                    let (r, n) = (pass * INT4_ROWS, y.len());
                    let values = &values[r * row_bytes..(r + n) * row_bytes];
                    let codes = &codes[r * groups..(r + n) * groups];
                    kernels::row_sums_i4(values, group, codes, self.xq, self.widened, &mut sums[..n]);
                    for (y, &acc) in y.iter_mut().zip(&sums[..n]) {
                        *y = rescale_wide(rescale, acc);
                    }
                }
            }
            // an integer image has int8 and int4 weights alone (`Image::parse`)
            MatrixData::F32(_) | MatrixData::F32Fma(_) | MatrixData::F16(_) => y.fill(0),
        }
    }
}

impl Input<'_> {
    /// [`Input::rows`] of two inputs made for `m`, into `y0` and `y1` (as long): for an int8
    /// matrix the pair's exact sums, each weight read once for both
    /// ([`kernels::row_sums_pair_i8`]: the same sums), each rescaled by its own input's step as
    /// [`Input::rows`] does; else each input on its own. (One copy for every caller: the
    /// firmware's flash.)
    #[inline(never)]
    fn rows_pair(inputs: [&Input<'_>; 2], m: &Matrix<'_>, first: usize, [y0, y1]: [&mut [i32]; 2]) {
        let n = y0.len();
        let pair = m.row_range(first, first + n);
        match pair.data {
            MatrixData::Int8 {
                values, row_scales, ..
            } => {
                let [a, b] = inputs;
                let y1 = &mut y1[..n];
                kernels::row_sums_pair_i8(
                    values,
                    pair.cols,
                    [a.xq, b.xq],
                    [a.widened, b.widened],
                    [&mut *y0, &mut *y1],
                );
                for (input, y) in [(a, y0), (b, y1)] {
                    ScaledByBits::new(input.step).apply_each_bounded(row_scales, y, input.exponents);
                }
            }
            _ => {
                inputs[0].rows(m, first, y0);
                inputs[1].rows(m, first, y1);
            }
        }
    }
}

/// The inputs of one pass of a linear layer: one position's, or two positions' (each quantized
/// with its own step, [`Input::new_in_place`]), whose int8 sums read each weight once for both
/// ([`Input::rows_pair`]).
struct Pass<'s>(Input<'s>, Option<Input<'s>>);

impl<'s> Pass<'s> {
    /// The `count` (1 or 2) rows of `xs` (`m.cols` long each) quantized for `m`, two in the
    /// halves of `scratch` ([`crate::matrix::scratch_words`] of the widest input for each).
    #[inline(never)]
    fn new(
        m: &Matrix<'_>,
        parameters: MatrixParameters,
        xs: &mut [i32],
        scratch: &'s mut [u32],
        count: usize,
    ) -> Pass<'s> {
        if count < 2 {
            return Pass(Input::new_in_place(m, parameters, xs, scratch), None);
        }
        let (x0, x1) = xs.split_at_mut(xs.len() / 2);
        let (scratch0, scratch1) = scratch.split_at_mut(scratch.len() / 2);
        Pass(
            Input::new_in_place(m, parameters, x0, scratch0),
            Some(Input::new_in_place(m, parameters, x1, scratch1)),
        )
    }

    /// [`Input::rows`] of each input, `n` rows of `m` from `first` into its row of `y` (`n`
    /// long each, one after the other).
    fn rows(&self, m: &Matrix<'_>, first: usize, y: &mut [i32], n: usize) {
        match &self.1 {
            None => self.0.rows(m, first, &mut y[..n]),
            Some(second) => {
                let (y0, y1) = y.split_at_mut(n);
                Input::rows_pair([&self.0, second], m, first, [y0, y1]);
            }
        }
    }
}

/// `y = xᵀ W` for the int8 `m` (an output projection): each input times its row's scale (and
/// `2^8`, for precision), quantized to int8, the sums down the columns.
fn vecmat(m: &Matrix<'_>, x: &[i32], scratch: &mut [u32], y: &mut [i32]) {
    let MatrixData::Int8 {
        values, row_scales, ..
    } = m.data
    else {
        return y.fill(0); // (`Image::parse` refuses int4 output projections)
    };
    let (xq, _) = split_scratch(scratch, m.rows);
    // each input times its row's scale and 2^8, in 64 bits
    let wide = |r: usize| {
        let scale = scale_of(row_scales[r]).times_pow2(8).unwrap_or(SATURATED);
        scale.apply_wide(x[r])
    };
    let largest = (0..m.rows).map(|r| wide(r).unsigned_abs()).max().unwrap_or(0);
    let Some(steps) = Int8Steps::new(largest) else {
        return y.fill(0);
    };
    for (r, q) in xq.iter_mut().enumerate() {
        *q = steps.quantize(wide(r));
    }
    kernels::vecmat_sums_i8(xq, values, m.cols, y);
    let rescale = steps.step.times_pow2(-8).rescale();
    for y in y.iter_mut() {
        *y = rescale.apply(*y);
    }
}

/// `out = LayerNorm(x)` with a layer's gains (their `f32` bits, and their magnitudes' smallest
/// and largest exponent) and biases (`Q(frac)`) as [`LayerParameters`] keeps them: each gain's
/// magnitude to 16 bits and its sign. (One copy for every caller: the firmware's flash.)
#[inline(never)]
fn layer_norm(gains: Gains<'_>, biases: &[i32], eps: f32, frac: u32, x: &[i32], out: &mut [i32]) {
    let epsilon = fixed_of_f32_wide(eps, 2 * frac).max(0) as u64;
    let bits: &[u32] = bytemuck::cast_slice(gains.bits);
    layer_norm_of_bounded_slices(x, (bits, Some(gains.exponents)), biases, epsilon, frac, out);
}

/// A LayerNorm's gains as [`LayerParameters`] keeps them: their `f32` bits, and the smallest
/// and largest biased exponent of their magnitudes.
#[derive(Clone, Copy)]
struct Gains<'p> {
    bits: &'p [i32],
    exponents: (i32, i32),
}

impl Gains<'_> {
    /// The smallest and largest biased exponent of the magnitudes of `bits` (`(0, 0)` for none).
    fn exponents_of(bits: &[i32]) -> (i32, i32) {
        let exponent = |&b: &i32| ((b as u32 & 0x7FFF_FFFF) >> 23) as i32;
        let low = bits.iter().map(exponent).min().unwrap_or(0);
        (low, bits.iter().map(exponent).max().unwrap_or(0))
    }
}

/// One layer's parameters in the session's arena, made ready once from the image's values
/// ([`Session::prepare_integer_parameters`]): the LayerNorms' gains as `f32` bits, every bias
/// in `Q(frac)` ([`crate::arena::integer_parameter_words`]).
struct LayerParameters<'p> {
    attn_norm_gain: Gains<'p>,
    attn_norm_bias: &'p [i32],
    ff_norm_gain: Gains<'p>,
    ff_norm_bias: &'p [i32],
    ff1_bias: &'p [i32],
    ff2_bias: &'p [i32],
    /// The content bias `u`, `n_head · d_head`.
    r_w_bias: &'p [i32],
    /// The position bias `v`.
    r_r_bias: &'p [i32],
    /// The activation scales and row scales' exponents of `qkv_net`, `o_net` and the
    /// feed-forward's two matrices.
    acts: [MatrixParameters; 4],
}

/// Layer `layer`'s parameters among `all`.
fn layer_parameters<'p>(all: &'p [i32], config: &Config, layer: usize) -> LayerParameters<'p> {
    let parts = integer_parameter_parts(config);
    let per_layer: usize = parts.iter().sum();
    let mut rest = &all[layer * per_layer..(layer + 1) * per_layer];
    let part: [&[i32]; 9] = core::array::from_fn(|k| {
        let (part, tail) = rest.split_at(parts[k]);
        rest = tail;
        part
    });
    // the four matrices' two words each, then the two LayerNorms' gains' exponents
    let w = part[8];
    LayerParameters {
        attn_norm_gain: Gains {
            bits: part[0],
            exponents: (w[8], w[9]),
        },
        attn_norm_bias: part[1],
        ff_norm_gain: Gains {
            bits: part[2],
            exponents: (w[10], w[11]),
        },
        ff_norm_bias: part[3],
        ff1_bias: part[4],
        ff2_bias: part[5],
        r_w_bias: part[6],
        r_r_bias: part[7],
        acts: core::array::from_fn(|k| MatrixParameters::of_words([w[2 * k], w[2 * k + 1]])),
    }
}

/// One head's 16-bit query `q + b` (`b` the head's bias in `Q(frac)`), as `round(x / 2^e)`
/// within `top`, widened into `words` as the key kernels read it; returns `e`. `qb` (as long
/// as `q`) keeps `q + b`.
fn query_words((q, qb): (&[i32], &mut [i32]), b: &[i32], top: i64, words: &mut [u32]) -> i32 {
    let n = q.len();
    let qb = &mut qb[..n];
    let largest = kernels::query_sums_i32(q, &b[..n], qb).unwrap_or_else(|| {
        let mut largest = 0u32;
        for ((v, &q), &b) in qb.iter_mut().zip(q).zip(&b[..n]) {
            let sum = q.saturating_add(b);
            *v = sum;
            largest = largest.max(sum.unsigned_abs());
        }
        largest
    });
    let e = pow2_exponent_of(largest as u64, top) as u32;
    // columns 4g and 4g + 2 in word 2g, 4g + 1 and 4g + 3 in word 2g + 1 (columns past the
    // head are zero); the rounding shift as `⌊(⌊v / 2^(e-1)⌋ + 1) / 2⌋` (the same value:
    // `|v| < 2^(e + 16)`, so the sum cannot overflow)
    let words = &mut words[..kernels::portable::query_words(n)];
    // whole groups of eight columns by a kernel where there is one, the rest as below
    let octets = kernels::query_pack_i32(qb, words, e);
    let (qb, words) = (&qb[8 * octets..], &mut words[4 * octets..]);
    if e == 0 {
        pack_query_words(qb, words, |v| v as i16 as u16 as u32);
    } else {
        let e1 = e - 1;
        pack_query_words(qb, words, |v| (((v >> e1) + 1) >> 1) as i16 as u16 as u32);
    }
    e as i32
}

/// [`query_words`]' layout of `half(v)` for each `v` of `qb` in `words`.
#[inline(always)]
fn pack_query_words(qb: &[i32], words: &mut [u32], half: impl Fn(i32) -> u32) {
    let (groups, rest) = qb.as_chunks::<4>();
    let (pairs, tail) = words.as_chunks_mut::<2>();
    for (w, g) in pairs.iter_mut().zip(groups) {
        *w = [half(g[0]) | half(g[2]) << 16, half(g[1]) | half(g[3]) << 16];
    }
    if let Some(w) = pairs.get_mut(groups.len()) {
        *w = [0; 2];
        for (c, &v) in rest.iter().enumerate() {
            w[c & 1] |= half(v) << (8 * (c & 2));
        }
    }
    tail.fill(0);
}

/// Each score of `scores` (keys `lo..` of `layer`'s head `head`) from its content sum (there)
/// and its position sum by distance (`positions`, the last one standing for every distance
/// beyond it; the position keys' exponents at `exponents[d * row]`), key `t` at distance
/// `nearest - t` ([`attention_score`]); returns the largest. `wide`: a sum may reach `2^27` in
/// magnitude.
#[inline(never)]
fn head_scores(
    memory: &crate::memory::Memory,
    (layer, head, lo, nearest): (usize, usize, usize, usize),
    scores: &mut [i32],
    [ces, poss, pes]: &mut Gathered<'_>,
    (positions, exponents, row): (&[i32], &[u8], usize),
    (ce, pe): (i32, i32),
    (inv_sqrt_d_head, frac, wide): (Rescale, u32, bool),
) -> i32 {
    let mut largest = i32::MIN;
    if positions.is_empty() || nearest + 1 < scores.len() {
        return largest;
    }
    let far = positions.len() - 1;
    let exponents = &exponents[..=far * row];
    let (ring, heads, mut at) = memory
        .exponent_ring(true, (layer, head), lo, scores.len())
        .unwrap_or((&[0.0], 0, 0));
    // with a kernel that reads the keys where they lie (the ring, the position tables by
    // distance), their scores by the kernel (the same values)
    if kernels::INTEGER_SCORES_ROWS && !wide && heads > 0 {
        // the rescale's shift for `e = 0`
        let shift = inv_sqrt_d_head.shift - SCORE_FRAC as i32 + 2 * frac as i32;
        let rescale = (inv_sqrt_d_head.mantissa, shift);
        let slow = |k: usize, content: i32| {
            let key = ce + ring[(at + k * heads) % ring.len()].to_bits() as i32;
            let d = (nearest - k).min(far);
            let position = (positions[d], pe + exponents[d * row] as i32);
            attention_score_of_small(inv_sqrt_d_head, frac, (content, key), position)
        };
        let keys = (ring, heads, at, ce);
        let table = (positions, exponents, row, pe);
        if let Some(top) = kernels::attention_scores_row_i32(scores, keys, table, nearest, rescale, slow) {
            return top;
        }
    }
    // with a kernel: the keys' powers of two and position sums gathered up to 64 at a time,
    // then their scores by the kernel (the same values)
    let pass = ces.len().min(poss.len()).min(pes.len());
    if kernels::INTEGER_SCORES && !wide && heads > 0 && pass > 0 {
        // the rescale's shift for `e = 0`
        let shift = inv_sqrt_d_head.shift - SCORE_FRAC as i32 + 2 * frac as i32;
        // the ring's exponents walked by slot, the distances one less each key
        let (mut at, mut distance) = (at, nearest);
        for chunk in scores.chunks_mut(pass) {
            let n = chunk.len();
            at = gather_key_exponents(&mut ces[..n], (ring, heads, at), ce);
            distance = gather_positions(
                (&mut poss[..n], &mut pes[..n]),
                (positions, exponents, row),
                distance,
                pe,
            );
            let (ces, poss, pes) = (&ces[..n], &poss[..n], &pes[..n]);
            let slow = |i: usize, content: i32| {
                attention_score_of_small(inv_sqrt_d_head, frac, (content, ces[i]), (poss[i], pes[i]))
            };
            let rescale = (inv_sqrt_d_head.mantissa, shift);
            if let Some(top) = kernels::attention_scores_i32(chunk, (ces, poss, pes), rescale, slow) {
                largest = largest.max(top);
            }
        }
        return largest;
    }
    // key `t`'s distance before the clamp, one less each key
    let mut distance = nearest;
    // the next key's power of two (with the query's) and its position sum and power of two: the
    // ring's exponents walked by index
    let mut next_key = || {
        let ke = ring[at].to_bits() as i32;
        at += heads;
        if at >= ring.len() {
            at -= ring.len();
        }
        let d = distance.min(far);
        distance = distance.wrapping_sub(1); // (past the last key unused)
        (ce + ke, positions[d], pe + exponents[d * row] as i32)
    };
    for score in scores.iter_mut() {
        let (key, position, position_exponent) = next_key();
        let (content, position) = ((*score, key), (position, position_exponent));
        *score = if wide {
            attention_score(inv_sqrt_d_head, frac, content, position)
        } else {
            attention_score_of_small(inv_sqrt_d_head, frac, content, position)
        };
        largest = largest.max(*score);
    }
    largest
}

/// `ces[k] = ce + e_k`, `e_k` the exponent of the `k`-th key from ring index `at` on
/// ([`crate::memory::Memory::exponent_ring`]: `heads` apart, wrapping at the ring's end): the
/// slots in at most two runs, no wrap per key. Returns the ring index of the key after them.
/// (A function of its own: the loop keeps its values in registers.)
#[inline(never)]
fn gather_key_exponents(ces: &mut [i32], (ring, heads, at): (&[f32], usize, usize), ce: i32) -> usize {
    let capacity = ring.len() / heads.max(1);
    let (head, mut slot) = (at % heads.max(1), at / heads.max(1));
    let mut done = 0;
    while done < ces.len() && slot < capacity {
        let run = (capacity - slot).min(ces.len() - done);
        let out = &mut ces[done..done + run];
        // four keys an instruction where there is a kernel
        if !kernels::exponents_strided_i32(out, &ring[slot * heads + head..], heads, ce) {
            let slots = ring[slot * heads..].chunks_exact(heads);
            for (c, exponents) in out.iter_mut().zip(slots) {
                *c = ce + exponents[head].to_bits() as i32;
            }
        }
        done += run;
        slot += run;
        if slot >= capacity {
            slot = 0;
        }
    }
    slot * heads + head
}

/// `poss[k]` and `pes[k]`: the position sum of distance `d = min(distance - k, far)`
/// (`positions[d]`, `far` the last) and its power of two, `pe` plus the table's
/// (`exponents[d · row]`). Returns `distance` less the keys (wrapping). (A function of its
/// own: the loop keeps its values in registers.)
#[inline(never)]
fn gather_positions(
    (poss, pes): (&mut [i32], &mut [i32]),
    (positions, exponents, row): (&[i32], &[u8], usize),
    distance: usize,
    pe: i32,
) -> usize {
    let n = poss.len().min(pes.len());
    let Some(far) = positions.len().checked_sub(1) else {
        return distance.wrapping_sub(n);
    };
    // the keys beyond the farthest distance, all at it
    let clamped = distance.saturating_sub(far).min(n);
    let (p, e) = (positions[far], pe + exponents[far * row] as i32);
    poss[..clamped].fill(p);
    pes[..clamped].fill(e);
    // then one distance less each key, from at most `far` (none below 0 for a key: the
    // caller's keys are at most `distance + 1`)
    let mut d = distance - clamped;
    let outs = (&mut poss[clamped..n], &mut pes[clamped..n]);
    // four keys an instruction where there is a kernel
    if clamped < n && kernels::positions_i32((&mut *outs.0, &mut *outs.1), (positions, exponents, row), d, pe)
    {
        return distance.wrapping_sub(n);
    }
    for (p, e) in outs.0.iter_mut().zip(outs.1) {
        (*p, *e) = (positions[d], pe + exponents[d * row] as i32);
        d = d.wrapping_sub(1); // (past the last key unused)
    }
    distance.wrapping_sub(n)
}

/// Most keys a pass of [`head_scores`]' kernel takes (where there is one).
const GATHERED: usize = 64;

/// The keys' powers of two, position sums and their powers of two that [`head_scores`] gathers
/// for its kernel, as many keys each as a pass takes (none: no pass of the kernel).
type Gathered<'g> = [&'g mut [i32]; 3];

/// [`Gathered`] in `scratch` (the query's scratch for all its heads): up to [`GATHERED`] keys
/// each where there is a kernel, else none. Every value is written before it is read: no
/// clearing.
fn gather_scratch(scratch: &mut [i32]) -> Gathered<'_> {
    let n = if kernels::INTEGER_SCORES {
        (scratch.len() / 3).min(GATHERED)
    } else {
        0
    };
    let (ces, rest) = scratch.split_at_mut(n);
    let (poss, rest) = rest.split_at_mut(n);
    [ces, poss, &mut rest[..n]]
}

/// `scores` (keys `lo..` of `layer`'s head `head`, `largest` the largest of them) as their
/// probabilities ([`softmax_exp_in_place`](crate::integer::softmax_exp_in_place) and
/// [`Normalise::apply`]) divided by the powers of two of their values against the largest
/// among the keys with a probability ([`shift_probability`]), which is returned;
/// `value_exponents` (as long as `scores`) keeps those powers of two.
#[inline(never)]
fn head_probabilities(
    memory: &crate::memory::Memory,
    (layer, head, lo): (usize, usize, usize),
    scores: &mut [i32],
    value_exponents: &mut [i32],
    largest: i32,
) -> i32 {
    // each score's `e_j` and their sum, and for each power of two of the values the largest
    // `e_j` among its keys: a key has a probability where its `e_j` does, and the probability
    // grows with it
    // with a kernel, each score's `e_j` and their sum four scores an instruction, first
    let exps = kernels::exp_scores_i32(scores, largest, SCORE_FRAC, &crate::fixed_point::EXP2_TABLE);
    let n = scores.len().min(value_exponents.len());
    let (scores, value_exponents) = (&mut scores[..n], &mut value_exponents[..n]);
    // the values' powers of two first, by ring slot
    match memory.exponent_ring(false, (layer, head), lo, n) {
        Some((ring, heads, at)) if heads > 0 => {
            gather_key_exponents(value_exponents, (ring, heads, at), 0);
        }
        _ => value_exponents.fill(0),
    }
    // with kernels, the largest power of two among the keys with a probability by passes four
    // keys an instruction (the same one: a key has a probability from some `e_j` on)
    let fast = exps.and_then(|sum| {
        let normalise = Normalise::of_sum(sum);
        let has = |e: u32| normalise.apply(e as i32) > 0;
        kernels::top_exponent_i32(scores, value_exponents, has).map(|e_max| (normalise, e_max))
    });
    let (normalise, e_max) = match fast {
        Some(found) => found,
        None => top_exponent(scores, value_exponents, exps, largest),
    };
    // four keys an instruction where there is a kernel
    if let Some((m, t)) = normalise.high_word() {
        if kernels::probabilities_i32(scores, value_exponents, (m, t), e_max) {
            return e_max;
        }
        // else [`Normalise::apply`]'s high-word form chosen once for the row (the same values)
        for (p, &ve) in scores.iter_mut().zip(value_exponents.iter()) {
            if *p < 1 << 14 {
                *p = 0; // (no probability, as above)
            } else {
                *p = Normalise::apply_high((m, t), *p);
                shift_probability(p, e_max, ve);
            }
        }
        return e_max;
    }
    for (p, &ve) in scores.iter_mut().zip(value_exponents.iter()) {
        if *p < 1 << 14 {
            *p = 0; // (no probability, as above)
        } else {
            *p = normalise.apply(*p);
            shift_probability(p, e_max, ve);
        }
    }
    e_max
}

/// [`head_probabilities`]' normalisation and the largest power of two of the values among the
/// keys with a probability, by a loop over the keys: each score's `e_j` made here where `exps`
/// (their sum) tells that no kernel made them.
#[inline(always)]
fn top_exponent(
    scores: &mut [i32],
    value_exponents: &[i32],
    exps: Option<u64>,
    largest: i32,
) -> (Normalise, i32) {
    let mut sum = exps.unwrap_or(0);
    let mut e_top = [0u32; 32];
    let mut every = 0;
    for (score, &ve) in scores.iter_mut().zip(value_exponents.iter()) {
        let e = if exps.is_some() {
            *score as u32
        } else {
            use crate::{fixed_point::exp_neg, integer::to_exp_input};
            let e = exp_neg(to_exp_input(largest, *score, SCORE_FRAC)); // at most 2^30
            sum += e as u64;
            *score = e as i32;
            e
        };
        // a key of `e_j < 2^14` has no probability (`S ≥ 2^30`, so `e_j · 2^15 / S < 1/2`)
        if e >= 1 << 14 {
            every |= ve;
            let top = &mut e_top[(ve & 31) as usize];
            *top = (*top).max(e);
        }
    }
    let normalise = Normalise::of_sum(sum);
    // the largest power of two of the values among the keys with a probability (exponents
    // are at least 0)
    let e_max = if every & !31 == 0 {
        (0..32)
            .rev()
            .find(|&ve| normalise.apply(e_top[ve] as i32) > 0)
            .unwrap_or(0) as i32
    } else {
        let probabilities = scores.iter().map(|&e| normalise.apply(e));
        let with = probabilities.zip(value_exponents.iter()).filter(|&(p, _)| p > 0);
        with.map(|(_, &ve)| ve).max().unwrap_or(0).max(0)
    };
    (normalise, e_max)
}

/// A probability `p` of a value whose power of two is `ve`, against `e_max`, the largest among
/// the keys with a probability: `p / 2^(e_max - ve)`, rounded (a key of a larger power of two
/// has probability 0).
#[inline(always)]
fn shift_probability(p: &mut i32, e_max: i32, ve: i32) {
    // a probability is below 2^15: shifted by 16 or more it is 0
    let shift = (e_max - ve).clamp(0, 16) as u32;
    // `round_shift_i32` as `⌊(⌊2p / 2^s⌋ + 1) / 2⌋` (the same value, `p` itself for `s = 0`;
    // twice a probability below 2^15 cannot overflow)
    *p = (((*p << 1) >> shift) + 1) >> 1;
}

/// Bytes of a distance in the position keys' tables ([`crate::arena::integer_key_row_bytes`];
/// `Config::validate` keeps it in range).
fn key_row_bytes(config: &Config) -> usize {
    crate::arena::integer_key_row_bytes(config).unwrap_or(usize::MAX)
}

/// Where table `table` of the position keys (tables of `distances` distances) starts in the
/// buffer's bytes, and where its exponents do: its values come first, distance `d`'s
/// `n_head · d_head` int8 values at `d · n_head · d_head` (the memory's stride for its keys),
/// then its exponents, distance `d`'s byte per head at `d · n_head`.
fn position_key_table(config: &Config, distances: usize, table: usize) -> (usize, usize) {
    let start = table * distances * key_row_bytes(config);
    (start, start + distances * config.qkv_width() as usize)
}

/// `row` (one position key, `n_head · d_head` in `Q(frac)`) as int8 `values` per head with a
/// power of two, and the heads' `exponents` (a byte each).
fn store_position_key(row: &[i32], d_head: usize, (values, exponents): (&mut [u8], &mut [u8])) {
    for (head, chunk) in row.chunks_exact(d_head).enumerate() {
        let e = pow2_exponent(chunk, 127);
        for (q, &v) in values[head * d_head..].iter_mut().zip(chunk) {
            *q = round_shift_i32(v, e as u32) as i8 as u8;
        }
        exponents[head] = e as u8;
    }
}

impl Session<'_, '_> {
    /// Positions the next pass of a linear layer takes of the `left` positions of a segment:
    /// two where the session's passes take pairs ([`Pass`]: each weight read once for both),
    /// else one.
    fn pass_positions(&self, left: usize) -> usize {
        if self.per_pass >= 2 && left >= 2 {
            2
        } else {
            1
        }
    }

    /// [`Session::forward_from`] in integers, activations in `Q(frac)`.
    pub(super) fn forward_integer(
        &mut self,
        frac: u32,
        tokens: &[u32],
        first_output: usize,
        targets: &[Option<u32>],
        on_row: impl FnMut(usize, &[f32]),
    ) {
        let shape = self.attention_shape(tokens.len());
        // whether the attention input holds the one position's `h` already (a copy saved)
        let mut held = self.embed_integer(tokens, frac);
        // `1 / sqrt(d_head)`, once for every layer
        let inv_sqrt_d_head = Scale16::of_multiplier(
            inverse_sqrt_multiplier(self.model.config().d_head).unwrap_or(Multiplier::ZERO),
        )
        .rescale();
        for layer in 0..self.model.config().n_layer as usize {
            // the layer's weights, found in the image once for both sub-layers
            let w = self.model.layer(layer);
            // the layer's parameters, found once for both sub-layers: their slice taken out of
            // the state while the sub-layers write its other buffers, and put back after
            let parameters = core::mem::take(&mut self.state.parameters);
            let p = layer_parameters(parameters, self.model.config(), layer);
            let branch_held = self.attention_integer((&w, &p), &shape, (frac, inv_sqrt_d_head), layer, held);
            held = self.feed_forward_integer((&w, &p), shape.qlen, frac, branch_held);
            self.state.parameters = parameters;
        }
        self.output_integer(shape.qlen, first_output, targets, frac, on_row);
        self.memory.commit(shape.qlen);
    }

    /// `h_i = embedding(token_i) · sqrt(d_model)` in `Q(frac)`: the row's int8 values times its
    /// scale (and `sqrt(d_model)` and `2^frac`) as one multiplier, or through the projection.
    /// Returns whether the attention input holds `h` too (one token, no projection; the
    /// attention's post-LN copy of `h` is saved).
    fn embed_integer(&mut self, tokens: &[u32], frac: u32) -> bool {
        let config = *self.model.config();
        let d_model = config.d_model as usize;
        let emb_scale = sqrt_multiplier(config.d_model).unwrap_or(SATURATED);
        let s = &mut self.state;
        let hidden: &mut [i32] = bytemuck::cast_slice_mut(&mut s.hidden[..tokens.len() * d_model]);
        let mut held = false;
        for (&token, h) in tokens.iter().zip(hidden.chunks_exact_mut(d_model)) {
            let (table, index) = config.embedding_row(token);
            let m = self.model.emb_layer(table);
            let MatrixData::Int8 {
                values,
                row_scales,
                act_scales,
            } = m.data
            else {
                h.fill(0); // (`Image::parse` refuses other embedding tables)
                continue;
            };
            let times = if config.has_emb_proj() {
                Multiplier::ONE
            } else {
                emb_scale
            };
            let scale = scale_of(row_scales[index])
                .times(times)
                .and_then(|m| m.times_pow2(frac as i32))
                .unwrap_or(SATURATED);
            // the row in the attention input where it is `h` itself (`d_model` wide)
            let x: &mut [i32] = if config.has_emb_proj() {
                bytemuck::cast_slice_mut(&mut s.embed_row[..m.cols])
            } else {
                bytemuck::cast_slice_mut(&mut s.attn_input[..m.cols])
            };
            let row = &values[index * m.cols..(index + 1) * m.cols];
            match act_scales {
                Some(act) => {
                    // each column's multiplier `scale · act[c]` applied to its value: a kernel's
                    // where there is one and every column is the usual one, else the usual
                    // column in 32-bit arithmetic (the same values)
                    let act = &act[..m.cols];
                    let multiplier = (scale.mantissa as u32, scale.shift as u32);
                    if !kernels::embedding_columns_i32(act, row, x, multiplier) {
                        for (x, (&q, &a)) in x.iter_mut().zip(row.iter().zip(act)) {
                            *x = embedding_value(scale, a.to_bits(), q as i32);
                        }
                    }
                }
                None => {
                    for (x, &q) in x.iter_mut().zip(row) {
                        *x = scale.apply(q as i32);
                    }
                }
            }
            if config.has_emb_proj() {
                let proj = self.model.emb_proj(table);
                Input::new(&proj, x, Scale16::of_multiplier(emb_scale), s.quantized_input).rows(&proj, 0, h);
            } else {
                h.copy_from_slice(x);
                held = tokens.len() == 1;
            }
        }
        held
    }

    /// The attention sub-layer of `layer` in integers: `q, k, v` of each position (the keys
    /// and values into the memory), each head's scores over the keys the mask lets it see,
    /// their 16-bit probabilities, the values' sum, `o_net`, the residual and the LayerNorm.
    /// `held`: the attention input holds the one position's `h` already. Returns whether
    /// `branch` holds the one position's new `h` (post-LN, one position).
    fn attention_integer(
        &mut self,
        (w, p): (&LayerWeights<'_>, &LayerParameters<'_>),
        shape: &AttentionShape,
        (frac, inv_sqrt_d_head): (u32, Rescale),
        layer: usize,
        held: bool,
    ) -> bool {
        // (the model's own, not a copy: borrowed again after the calls that take the session)
        let config = self.model.config();
        let (d_model, width) = (config.d_model as usize, config.qkv_width() as usize);
        let (eps, pre_lnorm) = (config.layer_norm_epsilon, config.pre_lnorm);
        let mut i = 0;
        while i < shape.qlen {
            let count = self.pass_positions(shape.qlen - i);
            let s = &mut self.state;
            let xs: &mut [i32] = bytemuck::cast_slice_mut(&mut s.attn_input[..count * d_model]);
            let hs: &[i32] = bytemuck::cast_slice(&s.hidden[i * d_model..(i + count) * d_model]);
            for (x, h) in xs.chunks_exact_mut(d_model).zip(hs.chunks_exact(d_model)) {
                if pre_lnorm {
                    layer_norm(p.attn_norm_gain, p.attn_norm_bias, eps, frac, h, x);
                } else if !(held && shape.qlen == 1) {
                    x.copy_from_slice(h);
                }
            }
            let inputs = Pass::new(&w.qkv, p.acts[0], xs, s.quantized_input, count);
            let queries: &mut [i32] =
                bytemuck::cast_slice_mut(&mut s.queries[i * width..(i + count) * width]);
            inputs.rows(&w.qkv, 0, queries, width);
            let key_values: &mut [i32] = bytemuck::cast_slice_mut(&mut s.key_value[..count * 2 * width]);
            inputs.rows(&w.qkv, width, key_values, 2 * width);
            // into the memory position by position, in order
            for (k, key_value) in key_values.chunks_exact(2 * width).enumerate() {
                let (key, value) = key_value.split_at(width);
                self.memory.write_pow2(layer, shape.mlen + i + k, key, value);
            }
            i += count;
        }
        let table = match self.options.position_keys {
            PositionKeys::PerSegment => {
                let distances = (shape.mlen + shape.qlen).min(self.options.distances());
                self.position_keys_integer(layer, 0, distances, frac);
                0
            }
            _ => layer,
        };
        // where its values and exponents are, found once for every query
        let table = position_key_table(self.model.config(), self.options.distances(), table);
        for i in 0..shape.qlen {
            self.attend_integer((layer, p), shape, (table, inv_sqrt_d_head), i, frac);
        }
        let mut i = 0;
        while i < shape.qlen {
            let count = self.pass_positions(shape.qlen - i);
            let s = &mut self.state;
            let a: &mut [i32] = bytemuck::cast_slice_mut(&mut s.attn_vec[i * width..(i + count) * width]);
            let os: &mut [i32] = bytemuck::cast_slice_mut(&mut s.branch[..count * d_model]);
            Pass::new(&w.o_net, p.acts[1], a, s.quantized_input, count).rows(&w.o_net, 0, os, d_model);
            let hs: &mut [i32] = bytemuck::cast_slice_mut(&mut s.hidden[i * d_model..(i + count) * d_model]);
            for (o, h) in os.chunks_exact_mut(d_model).zip(hs.chunks_exact_mut(d_model)) {
                add(h, o);
                if !pre_lnorm {
                    layer_norm(p.attn_norm_gain, p.attn_norm_bias, eps, frac, h, o);
                    // by a kernel where there is one (the same values)
                    kernels::copy_i32(h, o);
                }
            }
            i += count;
        }
        !pre_lnorm && shape.qlen == 1
    }

    /// Query `i`'s attention output in `attn_vec`, head by head, the position keys those of the
    /// table at `table` ([`position_key_table`]). The scratch row of scores
    /// holds the content sums, then the scores, then the probabilities by key; the second row
    /// the position sums by distance; then the query's words and then the values' sums. The
    /// head's columns of the output keep `q + u` and `q + v` until its output is written.
    fn attend_integer(
        &mut self,
        (layer, p): (usize, &LayerParameters<'_>),
        shape: &AttentionShape,
        (table, inv_sqrt_d_head): ((usize, usize), Rescale),
        i: usize,
        frac: u32,
    ) {
        // (the model's own, not a copy)
        let config = self.model.config();
        let (width, d_head) = (config.qkv_width() as usize, shape.d_head);
        let n_head = shape.n_head;
        let capacity = self.memory.capacity();
        let top = (32767i64).min(i32::MAX as i64 / 127 / d_head.max(1) as i64);
        let klen = shape.mlen + shape.qlen;
        let s = &mut self.state;
        let keys: &[u8] = bytemuck::cast_slice(&s.position_keys[..]);
        let (keys, exponents) = (&keys[table.0..], &keys[table.1..]);
        let scratch: &mut [i32] = bytemuck::cast_slice_mut(&mut s.scores[..]);
        let (sums, rest) = scratch.split_at_mut(capacity);
        let (second, words) = rest.split_at_mut(capacity);
        let query: &[i32] = bytemuck::cast_slice(&s.queries[i * width..(i + 1) * width]);
        let out: &mut [i32] = bytemuck::cast_slice_mut(&mut s.attn_vec[i * width..(i + 1) * width]);
        // the key and value rows of the projections are in the memory by now: their buffer
        // holds what the scores gather
        let mut gathered = gather_scratch(bytemuck::cast_slice_mut(&mut s.key_value[..]));
        for head in 0..shape.n_head {
            let cols = head * d_head..(head + 1) * d_head;
            let q = &query[cols.clone()];
            let words: &mut [u32] = bytemuck::cast_slice_mut(&mut words[..]);
            let visible = shape.visible_keys(i);
            let (lo, hi) = visible.unwrap_or((0, klen - 1));
            let n = hi + 1 - lo;
            // the values' exponents by key, in the position sums' row once the scores are made
            let e_max = if let Some((lo, hi)) = visible {
                // content sums (q + u) · k_j, then position sums (q + v) · R_d by distance
                let qb = &mut out[cols.clone()];
                let ce = query_words((q, qb), &p.r_w_bias[cols.clone()], top, words);
                self.memory
                    .key_sums_int8(layer, lo, head, words, &mut sums[lo..=hi]);
                let pe = query_words((q, qb), &p.r_r_bias[cols.clone()], top, words);
                let far = (shape.mlen + i - lo).min(shape.max_distance);
                let rows = &keys[head * d_head..far * width + head * d_head + d_head];
                let rows: &[i8] = bytemuck::cast_slice(rows);
                kernels::key_sums_i8(rows, width, d_head, words, &mut second[..=far]);
                // the scores and the largest of them
                let largest = head_scores(
                    &self.memory,
                    (layer, head, lo, shape.mlen + i - lo),
                    &mut sums[lo..=hi],
                    &mut gathered,
                    (&second[..=far], &exponents[head..], n_head),
                    (ce, pe),
                    (inv_sqrt_d_head, frac, top as u64 * 128 * d_head as u64 >= 1 << 27),
                );
                let scores = &mut sums[lo..=hi];
                head_probabilities(&self.memory, (layer, head, lo), scores, &mut second[..n], largest)
            } else {
                // every key masked: uniform over all keys, as Hugging Face does
                let p = ((32768 + klen as u32 / 2) / klen as u32).min(32767);
                sums[lo..=hi].fill(p as i32);
                let value_exponents = &mut second[..n];
                let mut e_max = 0;
                self.memory.each_exponent(false, (layer, head), lo, n, |t, ve| {
                    value_exponents[t] = ve;
                    if p > 0 {
                        e_max = e_max.max(ve);
                    }
                });
                for (p, &ve) in sums[lo..=hi].iter_mut().zip(value_exponents.iter()) {
                    shift_probability(p, e_max, ve);
                }
                e_max
            };
            // (the sums from zeros: no clearing pass)
            let acc: &mut [i32] = bytemuck::cast_slice_mut(&mut words[..d_head]);
            self.memory.value_sums_int8(layer, lo, head, &sums[lo..=hi], acc);
            let shift = 15 - e_max;
            // four values an instruction where there is a kernel (the same values)
            if kernels::shift_sums_i32(acc, &mut out[cols.clone()], -shift) {
                continue;
            }
            if shift >= 0 {
                // a rounding shift right of an `i32` stays within it: no saturation
                for (o, &sum) in out[cols].iter_mut().zip(acc.iter()) {
                    *o = round_shift_i32(sum, shift as u32);
                }
            } else if shift > -32 {
                // a shift left, saturated where the value leaves the `i32` range
                let left = shift.unsigned_abs();
                for (o, &sum) in out[cols].iter_mut().zip(acc.iter()) {
                    let y = sum << left;
                    *o = if y >> left == sum {
                        y
                    } else if sum < 0 {
                        i32::MIN
                    } else {
                        i32::MAX
                    };
                }
            } else {
                for (o, &sum) in out[cols].iter_mut().zip(acc.iter()) {
                    *o = saturate(round_shift(sum as i64, shift));
                }
            }
        }
    }

    /// The feed-forward sub-layer of `layer` in integers, position by position.
    /// `held`: `branch` holds the one position's `h` already. Returns whether the attention
    /// input holds the one position's new `h` (post-LN, one position).
    fn feed_forward_integer(
        &mut self,
        (w, p): (&LayerWeights<'_>, &LayerParameters<'_>),
        qlen: usize,
        frac: u32,
        held: bool,
    ) -> bool {
        let config = self.model.config();
        let (d_model, d_inner) = (config.d_model as usize, config.d_inner as usize);
        let (eps, pre_lnorm) = (config.layer_norm_epsilon, config.pre_lnorm);
        let mut i = 0;
        while i < qlen {
            let count = self.pass_positions(qlen - i);
            let s = &mut self.state;
            // the inputs in `branch` (the residual `h` stays as it is)
            let xs: &mut [i32] = bytemuck::cast_slice_mut(&mut s.branch[..count * d_model]);
            let hs: &[i32] = bytemuck::cast_slice(&s.hidden[i * d_model..(i + count) * d_model]);
            for (x, h) in xs.chunks_exact_mut(d_model).zip(hs.chunks_exact(d_model)) {
                if pre_lnorm {
                    layer_norm(p.ff_norm_gain, p.ff_norm_bias, eps, frac, h, x);
                } else if !(held && qlen == 1) {
                    x.copy_from_slice(h);
                }
            }
            let inner: &mut [i32] = bytemuck::cast_slice_mut(&mut s.ff_inner[..count * d_inner]);
            let inputs = Pass::new(&w.ff1_weight, p.acts[2], xs, s.quantized_input, count);
            inputs.rows(&w.ff1_weight, 0, inner, d_inner);
            // the bias and the ReLU in one pass (a kernel's, where there is one)
            for inner in inner.chunks_exact_mut(d_inner) {
                if !kernels::bias_relu_i32(inner, p.ff1_bias) {
                    for (v, &b) in inner.iter_mut().zip(p.ff1_bias) {
                        *v = v.saturating_add(b).max(0);
                    }
                }
            }
            let outs: &mut [i32] = bytemuck::cast_slice_mut(&mut s.attn_input[..count * d_model]);
            Pass::new(&w.ff2_weight, p.acts[3], inner, s.quantized_input, count).rows(
                &w.ff2_weight,
                0,
                outs,
                d_model,
            );
            let hs: &mut [i32] = bytemuck::cast_slice_mut(&mut s.hidden[i * d_model..(i + count) * d_model]);
            for (k, h) in hs.chunks_exact_mut(d_model).enumerate() {
                let out: &[i32] = bytemuck::cast_slice(&s.attn_input[k * d_model..(k + 1) * d_model]);
                // the bias and the residual in one pass (the same saturating sums, in order; a
                // kernel's, where there is one)
                if !kernels::add_sums_i32(h, out, p.ff2_bias) {
                    for ((h, &o), &b) in h.iter_mut().zip(out.iter()).zip(p.ff2_bias) {
                        *h = h.saturating_add(o.saturating_add(b));
                    }
                }
                if !pre_lnorm {
                    // in the attention input (its first row: the position's output is spent),
                    // which the next layer's attention takes as it is
                    let normed: &mut [i32] = bytemuck::cast_slice_mut(&mut s.attn_input[..d_model]);
                    layer_norm(p.ff_norm_gain, p.ff_norm_bias, eps, frac, h, normed);
                    kernels::copy_i32(h, normed);
                }
            }
            i += count;
        }
        !pre_lnorm && qlen == 1
    }

    /// `ln p` of each position from `first_output` on, in `Q(frac)`: the full or adaptive
    /// log-softmax in integers (only the target's cluster where `targets` names one), handed
    /// to `on_row` as `f32` built from the bits.
    fn output_integer(
        &mut self,
        qlen: usize,
        first_output: usize,
        targets: &[Option<u32>],
        frac: u32,
        mut on_row: impl FnMut(usize, &[f32]),
    ) {
        let config = *self.model.config();
        let (d_model, n_token) = (config.d_model as usize, config.n_token as usize);
        let n_clusters = config.n_clusters();
        for i in first_output..qlen {
            let target = targets.get(i).copied().flatten();
            let s = &mut self.state;
            let h: &[i32] = bytemuck::cast_slice(&s.hidden[i * d_model..(i + 1) * d_model]);
            let row: &mut [i32] = bytemuck::cast_slice_mut(&mut s.log_probs[..n_token]);
            let projected: &mut [i32] = bytemuck::cast_slice_mut(&mut s.embed_row[..]);
            // cluster `c`'s logits (its rows of its table) into row[start..end], from `x`
            let model = &self.model;
            let copy: &mut [i32] = bytemuck::cast_slice_mut(&mut s.branch[..]);
            let logits =
                |cluster: usize, x: &[i32], row: &mut [i32], copy: &mut [i32], scratch: &mut [u32]| {
                    let (start, end) = config.cluster_range(cluster);
                    let (start, end) = (start as usize, end as usize);
                    let table = config.emb_table_of_cluster(cluster);
                    let first = if config.div_val == 1 { start } else { 0 };
                    let weight = model.out_weight(table);
                    let y = &mut row[start..end];
                    Input::new_copied(&weight, x, Scale16::ONE, copy, scratch).rows(&weight, first, y);
                    add_bias(y, model.out_bias(table), first, frac);
                };
            let project = |cluster: usize, projected: &mut [i32], scratch: &mut [u32]| -> usize {
                let proj = model.out_proj(cluster);
                vecmat(&proj, h, scratch, &mut projected[..proj.cols]);
                proj.cols
            };
            let x: &[i32] = if config.has_out_proj() {
                let cols = project(0, projected, s.quantized_input);
                &projected[..cols]
            } else {
                h
            };
            logits(0, x, row, copy, s.quantized_input);
            let shortlist = config.cluster_range(0).1 as usize;
            let mut priors = [0i32; MAX_CLUSTERS];
            if n_clusters > 0 {
                let weight = model.cluster_weight();
                let tails = &mut row[shortlist..shortlist + n_clusters];
                Input::new_copied(&weight, x, Scale16::ONE, copy, s.quantized_input).rows(&weight, 0, tails);
                add_bias(tails, model.cluster_bias(), 0, frac);
            }
            log_softmax(&mut row[..shortlist + n_clusters], frac);
            priors[..n_clusters].copy_from_slice(&row[shortlist..shortlist + n_clusters]);
            for (cluster, &prior) in (1..=n_clusters).zip(&priors) {
                if target.is_some_and(|t| config.cluster_of(t) != cluster) {
                    continue;
                }
                let x: &[i32] = if config.has_out_proj() {
                    let cols = project(cluster, projected, s.quantized_input);
                    &projected[..cols]
                } else {
                    h
                };
                logits(cluster, x, row, copy, s.quantized_input);
                let (start, end) = config.cluster_range(cluster);
                let tail = &mut row[start as usize..end as usize];
                log_softmax(tail, frac);
                for v in tail.iter_mut() {
                    *v = saturate(prior as i64 + *v as i64);
                }
            }
            // ln p as f32, from the bits (no floating-point operation)
            let row = &mut s.log_probs[..n_token];
            let convert = |v: &mut f32| *v = to_f32(v.to_bits() as i32, frac);
            match target {
                Some(t) => convert(&mut row[t as usize]),
                None => row.iter_mut().for_each(convert),
            }
            on_row(i, row);
        }
    }

    /// Table `table` of the position keys for `layer`, distances `0..distances`:
    /// `R_d = W_r pos_emb(d)`, `pos_emb(d)` from the phases `d · f_k` in turns.
    pub(super) fn position_keys_integer(&mut self, layer: usize, table: usize, distances: usize, frac: u32) {
        let config = *self.model.config();
        let (d_model, width) = (config.d_model as usize, config.qkv_width() as usize);
        let r_net = self.model.layer(layer).r_net;
        let all_distances = self.options.distances();
        let s = &mut self.state;
        let half = d_model / 2;
        // the frequencies in turns per position, in the spent attention input
        let frequencies: &mut [i32] = bytemuck::cast_slice_mut(&mut s.attn_input[..half]);
        for (k, f) in frequencies.iter_mut().enumerate() {
            *f = position_frequency(k, d_model) as i32;
        }
        let shift = 30 - frac as i32;
        let keys: &mut [u8] = bytemuck::cast_slice_mut(&mut s.position_keys[..]);
        let (start, at) = position_key_table(&config, all_distances, table);
        let (values, exponents) = keys[start..].split_at_mut(at - start);
        let (d_head, n_head) = (config.d_head as usize, config.n_head as usize);
        for d in 0..distances {
            let pos: &mut [i32] = bytemuck::cast_slice_mut(&mut s.branch[..d_model]);
            pos.fill(0);
            for (k, &f) in frequencies.iter().enumerate() {
                let phase = (f as u32).wrapping_mul(d as u32);
                pos[k] = round_shift(sin_turns(phase) as i64, shift) as i32;
                pos[half + k] = round_shift(cos_turns(phase) as i64, shift) as i32;
            }
            let r: &mut [i32] = bytemuck::cast_slice_mut(&mut s.key_value[..width]);
            Input::new(&r_net, pos, Scale16::ONE, s.quantized_input).rows(&r_net, 0, r);
            let values = &mut values[d * width..(d + 1) * width];
            store_position_key(r, d_head, (values, &mut exponents[d * n_head..(d + 1) * n_head]));
        }
    }

    /// Each layer's [`LayerParameters`] from the image's values, into the arena (integer
    /// arithmetic only; a float session keeps none).
    pub(super) fn prepare_integer_parameters(&mut self) {
        let Arithmetic::Integer { frac } = self.model.image().arithmetic() else {
            return;
        };
        let config = *self.model.config();
        let parts = integer_parameter_parts(&config);
        let per_layer: usize = parts.iter().sum();
        for (layer, all) in self.state.parameters.chunks_exact_mut(per_layer).enumerate() {
            let w = self.model.layer(layer);
            let vectors = [
                (w.attn_norm_weight, false),
                (w.attn_norm_bias, true),
                (w.ff_norm_weight, false),
                (w.ff_norm_bias, true),
                (w.ff1_bias, true),
                (w.ff2_bias, true),
                (w.r_w_bias, true),
                (w.r_r_bias, true),
            ];
            let (all, acts) = all.split_at_mut(per_layer - parts[8]);
            for (k, m) in [&w.qkv, &w.o_net, &w.ff1_weight, &w.ff2_weight]
                .into_iter()
                .enumerate()
            {
                acts[2 * k..2 * k + 2].copy_from_slice(&MatrixParameters::of(m).words());
            }
            let mut rest = &mut *all;
            for ((v, fixed), n) in vectors.into_iter().zip(parts) {
                let (part, tail) = core::mem::take(&mut rest).split_at_mut(n);
                rest = tail;
                match fixed {
                    true => each_fixed(v, 0, n, frac, |k, x| part[k] = x),
                    false => part
                        .iter_mut()
                        .enumerate()
                        .for_each(|(k, x)| *x = element(v, k).to_bits() as i32),
                }
            }
            // the LayerNorms' gains' exponents after the matrices' words
            let (attn, ff) = (&all[..parts[0]], &all[parts[0] + parts[1]..][..parts[2]]);
            for (k, gains) in [attn, ff].into_iter().enumerate() {
                let (low, high) = Gains::exponents_of(gains);
                acts[8 + 2 * k..10 + 2 * k].copy_from_slice(&[low, high]);
            }
        }
    }

    /// Every layer's table of position keys ([`PositionKeys::PerSession`]; per segment, each
    /// layer's is made as its attention runs).
    pub(super) fn compute_position_keys_integer(&mut self, frac: u32) {
        if self.options.position_keys != PositionKeys::PerSession {
            return;
        }
        for layer in 0..self.model.config().n_layer as usize {
            self.position_keys_integer(layer, layer, self.options.distances(), frac);
        }
    }

    /// The memory of `mem_len` all-zero hidden states in integers: each layer's key and value
    /// of `LayerNorm(0)` (pre-LN) or `0`.
    pub(super) fn fill_zero_memory_integer(&mut self, frac: u32) {
        let config = *self.model.config();
        let (d_model, width) = (config.d_model as usize, config.qkv_width() as usize);
        let mem_len = self.options.mem_len as usize;
        let s = &mut self.state;
        for layer in 0..config.n_layer as usize {
            let w = self.model.layer(layer);
            let zero: &mut [i32] = bytemuck::cast_slice_mut(&mut s.branch[..d_model]);
            zero.fill(0);
            let x: &mut [i32] = bytemuck::cast_slice_mut(&mut s.attn_input[..d_model]);
            if config.pre_lnorm {
                let eps = config.layer_norm_epsilon;
                let p = layer_parameters(s.parameters, &config, layer);
                layer_norm(p.attn_norm_gain, p.attn_norm_bias, eps, frac, zero, x);
            } else {
                x.fill(0);
            }
            let key_value: &mut [i32] = bytemuck::cast_slice_mut(&mut s.key_value[..2 * width]);
            Input::new(&w.qkv, x, Scale16::ONE, s.quantized_input).rows(&w.qkv, width, key_value);
            let (key, value) = key_value.split_at(width);
            for position in 0..mem_len {
                self.memory.write_pow2(layer, position, key, value);
            }
        }
        self.memory.set_len(mem_len);
    }
}

//! The portable kernels: plain, safe Rust with exact math (`libm`), the reference every faster
//! kernel must match bit for bit, and what runs where no faster kernel does. The dispatch layer
//! ([`super`]) calls them by the same names.

use half::f16;

/// The multiplier an int4 group's code names: `(16 + code % 16) << (code / 16)`.
#[inline]
pub const fn int4_multiplier(code: u8) -> i32 {
    (16 + (code & 15) as i32) << (code >> 4)
}

/// Bytes of one packed int4 row of `cols` columns: four per block of eight columns.
pub const fn int4_row_bytes(cols: usize) -> usize {
    4 * cols.div_ceil(8)
}

/// Groups of `group` columns in a row of `cols` (the last may be partial).
pub const fn int4_groups(cols: usize, group: usize) -> usize {
    cols.div_ceil(group)
}

/// Column `c` of a packed int4 row (the order is in [`crate::weights`]'s docs).
#[inline]
pub fn int4_value(row: &[u8], c: usize) -> i8 {
    let byte = row[c / 8 * 4 + c % 4];
    let nibble = if c % 8 < 4 { byte << 4 } else { byte & 0xf0 };
    (nibble as i8) >> 4
}

/// Packs `values` (`-8..=7`, one row of `values.len()` columns) into `row`
/// ([`int4_row_bytes`] long) in the order [`int4_value`] reads.
pub fn int4_pack_row(values: &[i8], row: &mut [u8]) {
    row.fill(0);
    for (c, &v) in values.iter().enumerate() {
        let nibble = (v as u8) & 0x0f;
        let at = c / 8 * 4 + c % 4;
        row[at] |= if c % 8 < 4 { nibble } else { nibble << 4 };
    }
}

/// Sum of `a[i] * b[i]` over the shorter of the two, in four interleaved f32 accumulators.
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 4];
    let mut chunks_a = a.chunks_exact(4);
    let mut chunks_b = b.chunks_exact(4);
    for (ca, cb) in (&mut chunks_a).zip(&mut chunks_b) {
        for k in 0..4 {
            acc[k] += ca[k] * cb[k];
        }
    }
    let mut tail = 0.0;
    for (x, y) in chunks_a.remainder().iter().zip(chunks_b.remainder()) {
        tail += x * y;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `W (rows, cols) @ x (cols) -> y (rows)` for f32 weights, `rows = y.len()`, `cols = x.len()`.
pub fn matvec_f32(weight: &[f32], x: &[f32], y: &mut [f32]) {
    let cols = x.len();
    for (out, row) in y.iter_mut().zip(weight.chunks_exact(cols)) {
        *out = dot_f32(row, x);
    }
}

/// Inputs [`vecmat_sums_each_i8`] takes together: each int8 weight it reads meets four inputs.
pub const VECMAT_INPUTS: usize = 4;

/// [`vecmat_sums_i8`] for [`VECMAT_INPUTS`] inputs at once: `sums[k][c] = Σ_r xq[k][r] *
/// values[r][c]` for `c` below the shortest output, each row of `values` read once for all.
#[inline(always)]
pub fn vecmat_sums_each_i8(
    xq: &[&[i8]; VECMAT_INPUTS],
    values: &[i8],
    cols: usize,
    sums: &mut [&mut [i32]; VECMAT_INPUTS],
) {
    const CHUNK: usize = 32;
    let len = sums.iter().map(|s| s.len()).min().unwrap_or(0).min(cols);
    let rows = xq
        .iter()
        .map(|x| x.len())
        .min()
        .unwrap_or(0)
        .min(values.len() / cols.max(1));
    let mut start = 0;
    while start < len {
        let width = CHUNK.min(len - start);
        // the chunk's sums stay in registers while every row passes
        let mut acc = [[0i32; CHUNK]; VECMAT_INPUTS];
        if width == CHUNK {
            for r in 0..rows {
                let a = xq.map(|x| i32::from(x[r]));
                let row: &[i8; CHUNK] = values[r * cols + start..][..CHUNK]
                    .try_into()
                    .unwrap_or(&[0; CHUNK]);
                for (acc, a) in acc.iter_mut().zip(a) {
                    for (sum, &w) in acc.iter_mut().zip(row) {
                        *sum = sum.wrapping_add(a * i32::from(w));
                    }
                }
            }
        } else {
            for r in 0..rows {
                let a = xq.map(|x| i32::from(x[r]));
                let row = &values[r * cols + start..][..width];
                for (acc, a) in acc.iter_mut().zip(a) {
                    for (sum, &w) in acc.iter_mut().zip(row) {
                        *sum = sum.wrapping_add(a * i32::from(w));
                    }
                }
            }
        }
        for (sum, acc) in sums.iter_mut().zip(&acc) {
            sum[start..start + width].copy_from_slice(&acc[..width]);
        }
        start += width;
    }
}

/// `acc[c] = Σ_r xq[r] * values[r][c]` in i32 for `c < acc.len()` (`values (xq.len(), cols)`,
/// `acc.len() <= cols`), a row at a time into the output's words (contiguous; the integer sums
/// are the same in any order). Every addition wraps, as the SIMD builds' do.
#[inline(always)]
pub fn vecmat_sums_i8(xq: &[i8], values: &[i8], cols: usize, acc: &mut [i32]) {
    acc.fill(0);
    for (&a, row) in xq.iter().zip(values.chunks_exact(cols)) {
        let a = i32::from(a);
        for (sum, &w) in acc.iter_mut().zip(row) {
            *sum = sum.wrapping_add(a * i32::from(w));
        }
    }
}

/// `sums[r] = sum over groups g of int4_multiplier(codes[r][g]) * (values[r][g] · xq[g])` for
/// each row `r < sums.len()` of the packed int4 `values (rows, int4_row_bytes(cols))`, `g` the
/// columns `g * group .. (g + 1) * group` (the last group partial when `group` does not divide
/// `cols`): each group's sum in i32, the weighted sum in i64.
pub fn row_sums_i4(values: &[u8], group: usize, codes: &[u8], xq: &[i8], sums: &mut [i64]) {
    let cols = xq.len();
    let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
    for (r, sum) in sums.iter_mut().enumerate() {
        let row = &values[r * row_bytes..(r + 1) * row_bytes];
        let row_codes = &codes[r * groups..(r + 1) * groups];
        *sum = 0;
        for (g, &code) in row_codes.iter().enumerate() {
            let group_sum = int4_range_sum(row, xq, g * group..cols.min((g + 1) * group));
            *sum += int4_multiplier(code) as i64 * group_sum as i64;
        }
    }
}

/// `value as f32` (round to nearest, ties to even), without the software `i64` conversion a
/// 32-bit core calls: a value outside `i32` keeps its top 32 bits, the bits below folded into
/// the lowest (so a tie and a value just past it still round apart), converted as a `u32` and
/// scaled by a power of two (exact).
#[inline]
pub fn i64_to_f32(value: i64) -> f32 {
    if let Ok(small) = i32::try_from(value) {
        return small as f32;
    }
    let magnitude = value.unsigned_abs();
    let shift = 32 - magnitude.leading_zeros();
    let below = magnitude & ((1u64 << shift) - 1);
    let kept = (magnitude >> shift) as u32 | u32::from(below != 0);
    let result = kept as f32 * f32::from_bits((127 + shift) << 23);
    if value < 0 {
        -result
    } else {
        result
    }
}

/// `sum over c in columns of row[c] * xq[c]` for a packed int4 `row`, `columns.start` a multiple
/// of 8 and `columns.end <= xq.len()`.
pub(crate) fn int4_range_sum(row: &[u8], xq: &[i8], columns: core::ops::Range<usize>) -> i32 {
    // blocks of eight columns, the last one maybe partial
    let inputs = xq[columns.clone()].chunks(8);
    let blocks = row[columns.start / 2..].chunks_exact(4);
    let mut sum = 0i32;
    for (block, inputs) in blocks.zip(inputs) {
        let mut padded = [0i8; 8];
        padded[..inputs.len()].copy_from_slice(inputs);
        for (k, &byte) in block.iter().enumerate() {
            let (low, high) = (((byte << 4) as i8) >> 4, (byte as i8) >> 4);
            sum += low as i32 * padded[k] as i32 + high as i32 * padded[k + 4] as i32;
        }
    }
    sum
}

/// Widens an f16 to f32 exactly (normals, subnormals, infinities and NaNs), with integer and one
/// float operation instead of the branches of a general conversion.
#[inline]
pub fn f16_to_f32(half: f16) -> f32 {
    const SHIFTED_EXPONENT: u32 = 0x7c00 << 13; // f16 exponent mask, moved to f32's position
    let bits = half.to_bits() as u32;
    let mut out = (bits & 0x7fff) << 13; // exponent and mantissa
    let exponent = out & SHIFTED_EXPONENT;
    out += (127 - 15) << 23; // rebias the exponent
    if exponent == SHIFTED_EXPONENT {
        out += (128 - 16) << 23; // infinity or NaN: exponent all ones
    } else if exponent == 0 {
        // subnormal: renormalise with one float subtraction (exact)
        out += 1 << 23;
        out = (f32::from_bits(out) - f32::from_bits(113 << 23)).to_bits();
    }
    f32::from_bits(out | (bits & 0x8000) << 16)
}

/// `sum a[i] * b[i]` with f16 weights widened to f32.
#[inline]
pub fn dot_f16(a: &[f16], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let mut chunks_a = a.chunks_exact(4);
    let mut chunks_b = b.chunks_exact(4);
    for (ca, cb) in (&mut chunks_a).zip(&mut chunks_b) {
        for k in 0..4 {
            acc[k] += f16_to_f32(ca[k]) * cb[k];
        }
    }
    let mut tail = 0.0;
    for (x, y) in chunks_a.remainder().iter().zip(chunks_b.remainder()) {
        tail += f16_to_f32(*x) * y;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `sum a[i] * b[i]` in i32 (exact: `Config::validate` bounds the widths).
#[inline]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// `y[r] = (y[r]'s bits as an i32 sum) as f32 * (row_scales[r] * x_scale)` for `r <
/// y.len()`: an int8 product's sums scaled into its outputs.
#[inline]
pub fn scale_sums_i8(y: &mut [f32], row_scales: &[f32], x_scale: f32) {
    for (out, &scale) in y.iter_mut().zip(row_scales) {
        let acc = out.to_bits() as i32;
        *out = acc as f32 * (scale * x_scale);
    }
}

/// Quantizes `x * act_scales` to symmetric int8 in `out`; returns the scale (`max |x| / 127`).
pub fn quantize_i8(x: &[f32], act_scales: Option<&[f32]>, out: &mut [i8]) -> f32 {
    match act_scales {
        None => quantize_with(out, largest_magnitude(x), x.iter().copied()),
        Some(scales) => {
            let scaled = || x.iter().zip(scales).map(|(v, s)| v * s);
            quantize_with(out, max_abs(scaled()), scaled())
        }
    }
}

/// Rounds `values / (max_abs / 127)` into `out`; a zero or non-finite range gives zeros.
///
/// `max_abs` is the largest `|v|` of `values`, so every `|v * (127 / max_abs)|` is below
/// `127 * (1 + 3 * EPSILON) < 127.5` and rounds into `-127..=127` without a clamp. Rounding is
/// `libm::roundf`'s own formula (ties away from zero), so the bits are the same.
pub(crate) fn quantize_with(out: &mut [i8], max_abs: f32, values: impl Iterator<Item = f32>) -> f32 {
    if !(max_abs > 0.0 && max_abs.is_finite()) {
        out.fill(0);
        return 0.0;
    }
    let inverse = 127.0 / max_abs;
    if inverse.is_finite() {
        for (o, v) in out.iter_mut().zip(values) {
            *o = round_in_range(v * inverse) as i8;
        }
    } else {
        // a subnormal range: 127 / max_abs overflows, and the products need the clamp
        for (o, v) in out.iter_mut().zip(values) {
            *o = libm::roundf(v * inverse).clamp(-127.0, 127.0) as i8;
        }
    }
    max_abs / 127.0
}

/// `libm::roundf(y) as i32` for `|y| < 2^31` (NaN gives 0): the same formula, truncating
/// `y + copysign(0.5 - EPSILON / 4, y)`, without the call.
#[inline(always)]
fn round_in_range(y: f32) -> i32 {
    const JUST_BELOW_HALF: f32 = 0.5 - 0.25 * f32::EPSILON;
    let half = if y < 0.0 {
        -JUST_BELOW_HALF
    } else {
        JUST_BELOW_HALF
    };
    (y + half) as i32
}

/// Largest `|v|` of `values` computed on the fly (NaNs ignored; 0 for none), as `f32::max`
/// folds it; [`largest_magnitude`] takes a slice.
#[inline(always)]
pub(crate) fn max_abs(values: impl Iterator<Item = f32>) -> f32 {
    let mut max = 0.0f32;
    for v in values {
        let a = v.abs();
        if a > max {
            max = a;
        }
    }
    max
}

/// `out[c] = 0.0 + sums[c] as f32 * step` for `c < min(sums.len(), out.len())`: integer sums
/// scaled into zeros (a -0.0 product gives 0.0, as added to zero).
pub fn scaled_sums_i32(sums: &[i32], step: f32, out: &mut [f32]) {
    for (o, &sum) in out.iter_mut().zip(sums) {
        *o = 0.0 + sum as f32 * step;
    }
}

/// The int8 attention's weights of a probability · value sum: `w[k] = e[k] * inverse *
/// key_scales[k * heads]` for `k < min(e.len(), w.len())`, each `|w[k]|` taken into
/// `magnitudes` in order (its largest by `>`, NaNs ignored; its sum one at a time).
pub fn value_weights(
    e: &[f32],
    inverse: f32,
    (key_scales, heads): (&[f32], usize),
    w: &mut [f32],
    magnitudes: &mut Magnitudes,
) {
    let key_scales = key_scales.iter().step_by(heads.max(1));
    for ((w, &e), &key_scale) in w.iter_mut().zip(e).zip(key_scales) {
        *w = e * inverse * key_scale;
        let magnitude = w.abs();
        if magnitude > magnitudes.max {
            magnitudes.max = magnitude;
        }
        magnitudes.sum += magnitude;
    }
}

/// The int8 attention's scores of `out.len()` keys from their query · key sums (the i32 bits
/// of `out`): `out[k] = (sum_k as f32 * step * key_scales[k * heads] + term_k) * scale`, `term_k`
/// the one `terms[0]` (`terms.len() == 1`) or `terms[n - 1 - k]` (`terms.len() == n`), and the
/// largest of `max` and the scores (the first of equal ones).
pub fn key_scores_i8(
    out: &mut [f32],
    key_scales: &[f32],
    heads: usize,
    terms: &[f32],
    (step, scale): (f32, f32),
    mut max: f32,
) -> f32 {
    let mut score = |o: &mut f32, key_scale: f32, term: f32| {
        let sum = o.to_bits() as i32;
        *o = (sum as f32 * step * key_scale + term) * scale;
        if *o > max {
            max = *o;
        }
    };
    let key_scales = key_scales.iter().step_by(heads.max(1));
    if let [term] = terms {
        for (o, &key_scale) in out.iter_mut().zip(key_scales) {
            score(o, key_scale, *term);
        }
    } else {
        let terms = terms[..out.len()].iter().rev();
        for ((o, &key_scale), &term) in out.iter_mut().zip(key_scales).zip(terms) {
            score(o, key_scale, term);
        }
    }
    max
}

/// The largest of the bits of `|v|` (the sign cleared) over `values`, as unsigned integers,
/// which order as the magnitudes do (a NaN's above infinity's); 0 for no values: eight running
/// maxima side by side (the largest of a set is the same whatever the order), so the compiler
/// can vectorise the loop.
pub fn magnitude_bits(values: &[f32]) -> u32 {
    let magnitude = |v: &f32| v.to_bits() & 0x7fff_ffff;
    let mut lanes = [0u32; 8];
    let (eights, rest) = values.as_chunks::<8>();
    for eight in eights {
        for (lane, v) in lanes.iter_mut().zip(eight) {
            *lane = (*lane).max(magnitude(v));
        }
    }
    for v in rest {
        lanes[0] = lanes[0].max(magnitude(v));
    }
    lanes.into_iter().fold(0, u32::max)
}

/// The largest `|v|` of `values` (NaNs ignored, as `f32::max` ignores them; 0 for none): four
/// running maxima side by side, in registers at any optimization level (the largest of a set is
/// the same whatever the order). Comparisons, not `f32::max`, which is a call into `fmaxf` on a
/// core without `VMAXNM` (Armv7E-M): the same value.
pub(crate) fn largest_magnitude(values: &[f32]) -> f32 {
    let (mut m0, mut m1, mut m2, mut m3) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let (fours, rest) = values.as_chunks::<4>();
    for &[a, b, c, d] in fours {
        m0 = larger(m0, a.abs());
        m1 = larger(m1, b.abs());
        m2 = larger(m2, c.abs());
        m3 = larger(m3, d.abs());
    }
    for v in rest {
        m0 = larger(m0, v.abs());
    }
    larger(larger(m0, m1), larger(m2, m3))
}

/// `b` if it is larger than `a`, else `a` (so a NaN `b` is ignored): `f32::max` for an `a` that is
/// never NaN, without the call into `fmaxf` that `f32::max` is on Armv7E-M.
#[inline(always)]
fn larger(a: f32, b: f32) -> f32 {
    if b > a {
        b
    } else {
        a
    }
}

/// `y += x`.
pub fn add_assign(y: &mut [f32], x: &[f32]) {
    for (a, b) in y.iter_mut().zip(x) {
        *a += b;
    }
}

/// `out = a + b` (each `a[i] + b[i]`, in that order: [`add_assign`] of a copy of `a`).
pub fn add_f32(out: &mut [f32], a: &[f32], b: &[f32]) {
    for ((o, a), b) in out.iter_mut().zip(a).zip(b) {
        *o = a + b;
    }
}

/// `Σ x`, added in order from `-0.0` (as `Iterator::sum` starts an f32 sum): LayerNorm's first
/// sum.
pub fn sum_f32(x: &[f32]) -> f32 {
    x.iter().fold(-0.0, |sum, v| sum + v)
}

/// `Σ (x - mean)²`, added in order from `-0.0`: LayerNorm's second sum.
pub fn squared_deviations_f32(x: &[f32], mean: f32) -> f32 {
    x.iter().fold(-0.0, |sum, v| sum + (v - mean) * (v - mean))
}

/// LayerNorm's last step, `x = (x - mean) * inv_std * gain + bias`.
pub fn normalize_f32(x: &mut [f32], (mean, inv_std): (f32, f32), gain: &[f32], bias: &[f32]) {
    for ((v, g), b) in x.iter_mut().zip(gain).zip(bias) {
        *v = (*v - mean) * inv_std * g + b;
    }
}

/// `values[i] = exp(values[i] - max)` in place ([`softmax_exp`](crate::kernels::fast_math::softmax_exp)),
/// returning `sum` plus all of them, added in order: a softmax's exponentials and their sum.
pub fn softmax_exps_sum_f32(values: &mut [f32], max: f32, mut sum: f32) -> f32 {
    for v in values.iter_mut() {
        *v = crate::kernels::fast_math::softmax_exp(*v - max);
        sum += *v;
    }
    sum
}

/// `y *= s`.
pub fn scale(y: &mut [f32], s: f32) {
    for a in y.iter_mut() {
        *a *= s;
    }
}

/// In place `max(x, 0)`: positive values stay, everything else (zeros of either sign, negative
/// values, NaN) becomes `+0.0`, on every target.
pub fn relu(x: &mut [f32]) {
    for a in x.iter_mut() {
        *a = larger(0.0, *a);
    }
}

/// Largest element (`-inf` for an empty slice).
pub fn max(x: &[f32]) -> f32 {
    x.iter().copied().fold(f32::NEG_INFINITY, larger)
}

/// Index of the largest element (the first on ties; 0 for an empty slice).
pub fn argmax(x: &[f32]) -> usize {
    x.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |best, (i, &v)| if v > best.1 { (i, v) } else { best },
        )
        .0
}

/// `values[i] = exp(values[i] - max)` for each value, one at a time
/// ([`softmax_exp`](super::fast_math::softmax_exp): `libm`'s `expf`, or micromath's with the
/// `fast-math` feature).
pub fn softmax_exps_f32(values: &mut [f32], max: f32) {
    for v in values.iter_mut() {
        *v = super::fast_math::softmax_exp(*v - max);
    }
}

/// Rows of `cols` elements at `stride` that fit in `len` elements, at most `wanted`.
pub fn rows_that_fit(len: usize, stride: usize, cols: usize, wanted: usize) -> usize {
    if len < cols {
        return 0;
    }
    match (len - cols).checked_div(stride) {
        Some(more) => wanted.min(1 + more),
        None => wanted, // stride 0: every row is the first
    }
}

/// [`matvec_f32`] for f16 weights, each widened exactly ([`dot_f16`] per row).
pub fn matvec_f16(weight: &[f16], x: &[f32], y: &mut [f32]) {
    for (out, row) in y.iter_mut().zip(weight.chunks_exact(x.len())) {
        *out = dot_f16(row, x);
    }
}

/// `out[r] = x · rows[r * stride..][..x.len()]` for `r < out.len()` (f32 rows at a stride: the
/// cached keys of one head): [`dot_f32`] per row.
pub fn dots_strided_f32(rows: &[f32], stride: usize, x: &[f32], out: &mut [f32]) {
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot_f32(x, &rows[r * stride..r * stride + x.len()]);
    }
}

/// [`dots_strided_f32`] for f16 rows: [`dot_f16`] per row.
pub fn dots_strided_f16(rows: &[f16], stride: usize, x: &[f32], out: &mut [f32]) {
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot_f16(&rows[r * stride..r * stride + x.len()], x);
    }
}

/// `out += p[k] * rows[k * stride..][..out.len()]` for each `k < p.len()` in order (the cached
/// values of one head, weighted): per element the products are added in `k` order.
pub fn axpys_strided_f32(rows: &[f32], stride: usize, p: &[f32], out: &mut [f32]) {
    let n = out.len();
    for (k, &weight) in p.iter().enumerate() {
        for (o, v) in out.iter_mut().zip(&rows[k * stride..k * stride + n]) {
            *o += weight * v;
        }
    }
}

/// [`axpys_strided_f32`] for f16 rows, each widened exactly.
pub fn axpys_strided_f16(rows: &[f16], stride: usize, p: &[f32], out: &mut [f32]) {
    let n = out.len();
    for (k, &weight) in p.iter().enumerate() {
        for (o, v) in out.iter_mut().zip(&rows[k * stride..k * stride + n]) {
            *o += weight * f16_to_f32(*v);
        }
    }
}

/// `dst = src` widened exactly to f32 ([`f16_to_f32`]).
pub fn widen_f16(src: &[f16], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16_to_f32(s);
    }
}

/// `sums` in passes of `R` whole rows of `cols` columns of the row-major `values`, `pass` summing
/// one block of `R · cols` bytes (a kernel built for that width): returns the rows summed, the
/// rows after the last whole pass are the caller's (all of them for `cols` 0).
#[inline(always)]
pub fn row_passes<const R: usize>(
    values: &[i8],
    cols: usize,
    sums: &mut [i32],
    mut pass: impl FnMut(&[i8]) -> [i32; R],
) -> usize {
    if cols == 0 {
        return 0;
    }
    let mut done = 0;
    for (out, block) in sums.chunks_exact_mut(R).zip(values.chunks_exact(R * cols)) {
        out.copy_from_slice(&pass(block));
        done += R;
    }
    done
}

/// `sums[r] = values[r] · xq` in i32 for each row `r < sums.len()` of the row-major int8
/// `values (rows, cols)`: [`dot_i8`] per row.
pub fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    for (r, sum) in sums.iter_mut().enumerate() {
        *sum = dot_i8(&values[r * cols..(r + 1) * cols], xq);
    }
}

/// Rows whose LayerNorm sums [`layer_norm_sums_f32`] adds side by side.
pub const LAYER_NORM_ROWS: usize = 16;

/// The LayerNorm sums of a block of up to [`LAYER_NORM_ROWS`] rows of `width` (`width > 0`):
/// `means[b]` row `b`'s sum from `-0.0` in column order divided by `width`, `vars[b]` its sum
/// of squared deviations from `-0.0` in column order (lanes past the block's rows keep what
/// they hold, `means` divided).
pub fn layer_norm_sums_f32(
    block: &[f32],
    width: usize,
    means: &mut [f32; LAYER_NORM_ROWS],
    vars: &mut [f32; LAYER_NORM_ROWS],
) {
    let n = width as f32;
    let rows = block.len() / width;
    for c in 0..width {
        for (b, sum) in means[..rows].iter_mut().enumerate() {
            *sum += block[b * width + c];
        }
    }
    for mean in means.iter_mut() {
        *mean /= n;
    }
    for c in 0..width {
        for (b, (sum, mean)) in vars[..rows].iter_mut().zip(means.iter()).enumerate() {
            let v = block[b * width + c];
            *sum += (v - mean) * (v - mean);
        }
    }
}

// Fast f32 weight products (opt-in, `Model::set_fast_f32`): each row · input summed with
// fused multiply-adds in one fixed order, so the bits are the same on every machine, but not
// those of the exact [`dot_f32`]. The order: one chain per row and input, `sum = fma(w[c],
// x[c], sum)` for each column `c` in turn, starting at `+0.0` (one rounding per column instead of
// the exact order's two). `docs/ARCHITECTURE.md` says why this order.

/// `a * b + c` rounded once.
#[inline]
pub fn fmaf(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(feature = "std")]
    return a.mul_add(b, c);
    #[cfg(not(feature = "std"))]
    return libm::fmaf(a, b, c);
}

/// `row · x` over the shorter of the two, in the fused order of the module docs: the
/// reference every fused kernel matches bit for bit.
pub fn dot_fma_f32(row: &[f32], x: &[f32]) -> f32 {
    row.iter().zip(x).fold(0.0, |sum, (&w, &v)| fmaf(w, v, sum))
}

/// `ys[p] = W xs[p]` for f32 weights `W (rows, cols)` (`rows` the shortest output's length,
/// `cols` the shortest input's), each sum in the fused order ([`dot_fma_f32`] per row and input).
pub fn matmul_fma_f32(weight: &[f32], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    let wanted = ys.iter().map(|y| y.len()).min().unwrap_or(0);
    let rows = weight
        .len()
        .checked_div(cols)
        .map_or(wanted, |fit| wanted.min(fit));
    for (x, y) in xs.iter().zip(ys.iter_mut()) {
        for (r, out) in y[..rows].iter_mut().enumerate() {
            *out = dot_fma_f32(&weight[r * cols..(r + 1) * cols], &x[..cols]);
        }
    }
}

// The int8 attention's sums (`crate::int8_attention`): a head's 16-bit query or probabilities
// against int8 keys or values, exact in i32.

/// Words `crate::int8_attention::QueryWords::quantize` needs for a head of `d_head`.
pub fn query_words(d_head: usize) -> usize {
    2 * d_head.div_ceil(4)
}

/// The 16-bit query value of column `c` from its widened words.
pub(crate) fn query_half(words: &[u32], c: usize) -> i32 {
    let word = words[2 * (c / 4) + (c % 4) % 2];
    let half = if c % 4 >= 2 { word >> 16 } else { word };
    half as u16 as i16 as i32
}

/// `sums[t] = query · key_t` for `t < sums.len()`, key `t` the first `d_head` bytes at
/// `keys[t * stride..]`, the query widened into `words` as `crate::int8_attention::QueryWords`
/// lays it out: the reference every kernel must match.
pub fn key_sums_i8(keys: &[i8], stride: usize, d_head: usize, words: &[u32], sums: &mut [i32]) {
    let groups = d_head / 4;
    let half = |w: u32, high: bool| (if high { w >> 16 } else { w }) as u16 as i16 as i32;
    for (t, sum) in sums.iter_mut().enumerate() {
        let key = &keys[t * stride..t * stride + d_head];
        let mut acc = 0i32;
        // whole groups of four columns: words 2g (columns 4g, 4g + 2) and 2g + 1 (4g + 1, 4g + 3)
        for (k, w) in key.chunks_exact(4).zip(words.chunks_exact(2)).take(groups) {
            let q = [
                half(w[0], false),
                half(w[1], false),
                half(w[0], true),
                half(w[1], true),
            ];
            let dot = (0..4).fold(0i32, |d, i| d.wrapping_add(k[i] as i32 * q[i]));
            acc = acc.wrapping_add(dot);
        }
        key_sums_columns(key, 4 * groups, words, &mut acc);
        *sum = acc;
    }
}

/// Adds `key[c] * query[c]` for the columns `c >= first` of `key` to `sum` (wrapping).
pub fn key_sums_columns(key: &[i8], first: usize, words: &[u32], sum: &mut i32) {
    for (c, &k) in key.iter().enumerate().skip(first) {
        *sum = sum.wrapping_add(k as i32 * query_half(words, c));
    }
}

/// `acc[c] += Σ_t weights[t] · value_t[c]` for `c < acc.len()`, value `t` at
/// `values[t * stride..]`, in plain Rust: the reference every kernel must match.
pub fn value_sums_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    for (t, &weight) in weights.iter().enumerate() {
        let value = &values[t * stride..t * stride + acc.len()];
        for (a, &v) in acc.iter_mut().zip(value) {
            *a = a.wrapping_add(weight.wrapping_mul(v as i32));
        }
    }
}

/// Lists whose magnitudes [`magnitudes_each_f32`] adds side by side (the int8 attention's
/// probabilities, `crate::int8_attention::ProbabilityWords::quantize_each_in_place`).
pub const SIDE_BY_SIDE: usize = 16;

/// The largest magnitude of a list of weights and the sum of all, in the list's order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Magnitudes {
    /// The largest magnitude (a NaN or infinity stays).
    pub max: f32,
    /// The sum of the magnitudes.
    pub sum: f32,
}

impl Magnitudes {
    /// Adds one weight's magnitude.
    pub fn add(&mut self, weight: f32) {
        let weight = weight.abs();
        if weight > self.max || weight.is_nan() {
            self.max = weight; // a NaN or infinity stays and is caught after
        }
        self.sum += weight;
    }
}

/// `largest[b]` and `sums[b]` as [`Magnitudes`] adds them up over `rows[b]` (at most
/// [`SIDE_BY_SIDE`] rows, taken up to the shortest's length), from the values given.
pub fn magnitudes_each_f32(
    rows: &[&mut [f32]],
    largest: &mut [f32; SIDE_BY_SIDE],
    sums: &mut [f32; SIDE_BY_SIDE],
) {
    let len = rows.iter().map(|row| row.len()).min().unwrap_or(0);
    let mut magnitudes: [Magnitudes; SIDE_BY_SIDE] = core::array::from_fn(|b| Magnitudes {
        max: largest[b],
        sum: sums[b],
    });
    for t in 0..len {
        for (m, row) in magnitudes.iter_mut().zip(rows) {
            m.add(row[t]);
        }
    }
    for ((m, largest), sum) in magnitudes.iter().zip(largest.iter_mut()).zip(sums.iter_mut()) {
        (*largest, *sum) = (m.max, m.sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::{vec, vec::Vec};

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn i64_to_f32_rounds_as_the_cast_does() {
        let mut values = vec![0i64, 1, -1, i64::MAX, i64::MIN, i64::MIN + 1];
        for k in 24..63 {
            let p = 1i64 << k;
            for base in [p, p + (p >> 24), p + (p >> 23), 3 * (p >> 1)] {
                // around each rounding boundary: the tie, and one either side of it
                for d in [-2i64, -1, 0, 1, 2] {
                    values.push(base.saturating_add(d));
                    values.push(base.saturating_add(d).saturating_neg());
                }
            }
        }
        for v in [i32::MAX as i64, i32::MIN as i64] {
            values.extend([v - 1, v, v + 1]);
        }
        // random bit patterns shifted right by 0 to 39 bits (all magnitudes), either sign
        let mut rng = crate::rng::Rng::new(1);
        for _ in 0..if cfg!(miri) { 100 } else { 100_000 } {
            let bits = rng.next_u64();
            values.push((bits >> (bits % 40)) as i64 * if bits & 1 == 0 { 1 } else { -1 });
        }
        for v in values {
            assert_eq!(i64_to_f32(v).to_bits(), (v as f32).to_bits(), "{v}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn int4_values_unpack_as_packed_at_every_position() {
        let cols = 21;
        let values: Vec<i8> = (0..cols).map(|c| (c % 16) as i8 - 8).collect();
        let mut row = vec![0u8; int4_row_bytes(cols)];
        int4_pack_row(&values, &mut row);
        for (c, &v) in values.iter().enumerate() {
            assert_eq!(int4_value(&row, c), v, "column {c}");
        }
        // the documented order: byte k of a block holds columns k (low) and k + 4 (high)
        assert_eq!(row[0], ((-8i8 as u8) & 0xf) | (((-4i8) as u8) << 4));
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn f16_widening_is_exact_for_every_value() {
        for bits in 0..=u16::MAX {
            let half = f16::from_bits(bits);
            let (ours, theirs) = (f16_to_f32(half), half.to_f32());
            assert!(
                ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
                "{bits:#06x}: {ours} vs {theirs}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn activations_quantize_symmetrically() {
        let mut q = [0i8; 4];
        let scale = quantize_i8(&[1.0, -0.5, 0.25, 0.0], None, &mut q);
        assert_eq!(q, [127, -64, 32, 0]);
        assert_eq!(scale, 1.0 / 127.0);
        assert_eq!(quantize_i8(&[0.0; 4], None, &mut q), 0.0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn rounding_equals_libm_roundf() {
        let check = |y: f32| {
            let reference = libm::roundf(y) as i32;
            assert_eq!(round_in_range(y), reference, "{y:e} ({:#010x})", y.to_bits());
        };
        for special in [
            f32::NAN,
            0.0,
            -0.0,
            0.5,
            -0.5,
            0.49999997,
            -0.49999997,
            8388607.5,
            2e9,
            -2e9,
        ] {
            check(special);
        }
        // every integer and half-integer in -260..=260, and 64 ulps either side of each
        for k in -260..=260 {
            for base in [k as f32, k as f32 + 0.5] {
                let (mut up, mut down) = (base, base);
                for _ in 0..if cfg!(miri) { 2 } else { 64 } {
                    check(up);
                    check(down);
                    up = f32::from_bits(up.to_bits().wrapping_add(if up >= 0.0 { 1 } else { u32::MAX }));
                    down = f32::from_bits(down.to_bits().wrapping_add(if down > 0.0 { u32::MAX } else { 1 }));
                }
            }
        }
        // and a sweep of the range
        let steps = if cfg!(miri) { 1_000 } else { 2_000_000 };
        for i in 0..steps {
            check(-300.0 + 600.0 * i as f32 / steps as f32);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
    fn quantization_rounds_as_roundf_and_clamps_a_subnormal_range() {
        let x = [
            1.0,
            -0.5,
            0.25,
            0.0,
            0.7,
            -0.003,
            f32::NAN,
            1.0 / 254.0,
            -1.5 / 254.0,
        ];
        let mut q = [0i8; 9];
        let scale = quantize_i8(&x, None, &mut q);
        for (v, q) in x.iter().zip(&q) {
            assert_eq!(*q, libm::roundf(v * 127.0).clamp(-127.0, 127.0) as i8, "{v}");
        }
        assert_eq!(scale, 1.0 / 127.0);
        // max |x| subnormal: 127 / max overflows; the largest still maps to 127
        let tiny = [f32::from_bits(1), -f32::from_bits(1), 0.0];
        let mut q = [0i8; 3];
        quantize_i8(&tiny, None, &mut q);
        assert_eq!(q, [127, -127, 0]);
    }
}

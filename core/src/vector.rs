//! Whole-vector steps on activations, built on the kernels: the image's vectors ([`Vector`]:
//! f32, or f16 widened exactly), LayerNorm, the softmaxes, and adding a vector.

use half::f16;

use crate::kernels;

/// Elements a vector of the image is widened by at a time, on the stack ([`add_vector`],
/// [`layer_norm`]).
pub const VECTOR_CHUNK: usize = 32;

/// A vector of the image (a bias, a LayerNorm gain, `u` or `v`): f32, or f16 that every read
/// widens exactly to f32, so a computation sees the same numbers either way.
#[derive(Clone, Copy, Debug)]
pub enum Vector<'a> {
    /// f32 elements.
    F32(&'a [f32]),
    /// f16 elements.
    F16(&'a [f16]),
}

impl<'a> Vector<'a> {
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            Vector::F32(v) => v.len(),
            Vector::F16(v) => v.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `start..end` as a vector of their own.
    pub fn range(&self, start: usize, end: usize) -> Vector<'a> {
        match self {
            Vector::F32(v) => Vector::F32(&v[start..end]),
            Vector::F16(v) => Vector::F16(&v[start..end]),
        }
    }

    /// Elements `start..start + out.len()`, as f32, into `out` (f16 widened by
    /// [`kernels::widen_f16`]).
    pub fn widen_into(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        match self {
            Vector::F32(v) => out.copy_from_slice(&v[start..end]),
            Vector::F16(v) => kernels::widen_f16(&v[start..end], out),
        }
    }

    /// The elements in order, as f32.
    pub fn iter(&self) -> VectorElements<'a> {
        VectorElements {
            vector: *self,
            next: 0,
        }
    }
}

/// The elements of a [`Vector`], as f32 ([`Vector::iter`]).
#[derive(Clone, Debug)]
pub struct VectorElements<'a> {
    vector: Vector<'a>,
    next: usize,
}

impl Iterator for VectorElements<'_> {
    type Item = f32;

    #[inline]
    fn next(&mut self) -> Option<f32> {
        let at = self.next;
        let value = match self.vector {
            Vector::F32(v) => *v.get(at)?,
            Vector::F16(v) => kernels::f16_to_f32(*v.get(at)?),
        };
        self.next += 1;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.vector.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for VectorElements<'_> {}

/// `y += v` for a vector of the image (`v` at least as long as `y`), f32 or f16 (widened
/// exactly, [`VECTOR_CHUNK`] elements at a time).
pub fn add_vector(y: &mut [f32], v: Vector<'_>) {
    match v {
        Vector::F32(v) => kernels::add_assign(y, v),
        Vector::F16(_) => {
            let mut wide = [0.0f32; VECTOR_CHUNK];
            for (start, chunk) in (0..).step_by(VECTOR_CHUNK).zip(y.chunks_mut(VECTOR_CHUNK)) {
                let wide = &mut wide[..chunk.len()];
                v.widen_into(start, wide);
                kernels::add_assign(chunk, wide);
            }
        }
    }
}

/// `out = x + v` for a vector of the image (`v` and `x` at least as long as `out`): the bits
/// of [`add_vector`] on a copy of `x`, in one pass for an f32 vector.
pub fn add_vector_into(out: &mut [f32], x: &[f32], v: Vector<'_>) {
    match v {
        Vector::F32(v) => kernels::add_f32(out, x, v),
        Vector::F16(_) => {
            out.copy_from_slice(&x[..out.len()]);
            add_vector(out, v);
        }
    }
}

/// LayerNorm: `out = (x - mean) / sqrt(var + eps) * gain + bias`, biased variance, two passes.
pub fn layer_norm(x: &[f32], gain: Vector<'_>, bias: Vector<'_>, eps: f32, out: &mut [f32]) {
    let (mean, inv_std) = moments(x, eps);
    with_f32_vectors(x.len(), gain, bias, |at, gain, bias| {
        let range = at..at + gain.len();
        for (((o, v), g), b) in out[range.clone()].iter_mut().zip(&x[range]).zip(gain).zip(bias) {
            *o = (v - mean) * inv_std * g + b;
        }
    });
}

/// In place LayerNorm (see [`layer_norm`]).
pub fn layer_norm_in_place(x: &mut [f32], gain: Vector<'_>, bias: Vector<'_>, eps: f32) {
    let moments = moments(x, eps);
    normalize(x, moments, gain, bias);
}

/// `x = (x - mean) * inv_std * gain + bias`.
fn normalize(x: &mut [f32], (mean, inv_std): (f32, f32), gain: Vector<'_>, bias: Vector<'_>) {
    with_f32_vectors(x.len(), gain, bias, |at, gain, bias| {
        kernels::normalize_f32(&mut x[at..at + gain.len()], (mean, inv_std), gain, bias);
    });
}

/// LayerNorm's mean and `1 / sqrt(var + eps)` of `x`: each sum from `-0.0` (as `Iterator::sum`
/// starts an f32 sum), in order.
fn moments(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len() as f32;
    let mean = kernels::sum_f32(x) / n;
    let var = kernels::squared_deviations_f32(x, mean) / n;
    (mean, 1.0 / libm::sqrtf(var + eps))
}

/// Rows whose LayerNorm sums [`layer_norm_rows_in_place`] adds side by side.
const ROWS_SIDE_BY_SIDE: usize = kernels::LAYER_NORM_ROWS;

/// Whether [`layer_norm_rows_in_place`] takes its rows one at a time: on 32-bit Arm (Cortex-M
/// cores, in order, where adding the rows side by side hides no latency and only costs the
/// bookkeeping).
const ONE_ROW_AT_A_TIME: bool = cfg!(target_arch = "arm");

/// [`layer_norm_in_place`] of each row of `width` in `x`, with its bits: each row's sums (of
/// its values, then of its squared deviations) are added in its order, as there, but sixteen
/// rows' sums go side by side, so no row waits on the latency of another's chain of additions.
pub fn layer_norm_rows_in_place(x: &mut [f32], width: usize, gain: Vector<'_>, bias: Vector<'_>, eps: f32) {
    if width == 0 {
        return;
    }
    let n = width as f32;
    for block in x.chunks_mut(ROWS_SIDE_BY_SIDE * width) {
        if block.len() == width || ONE_ROW_AT_A_TIME {
            // one row at a time: its sums in order, without the bookkeeping of rows side by
            // side (a third of the instructions on a Cortex-M4F, or a streamed position's one
            // row elsewhere)
            for row in block.chunks_exact_mut(width) {
                layer_norm_in_place(row, gain, bias, eps);
            }
            continue;
        }
        let mut means = [-0.0f32; ROWS_SIDE_BY_SIDE];
        let mut vars = [-0.0f32; ROWS_SIDE_BY_SIDE];
        kernels::layer_norm_sums_f32(block, width, &mut means, &mut vars);
        for ((row, mean), var) in block.chunks_exact_mut(width).zip(means).zip(vars) {
            let inv_std = 1.0 / libm::sqrtf(var / n + eps);
            normalize(row, (mean, inv_std), gain, bias);
        }
    }
}

/// Calls `apply(at, gain, bias)` with elements `at..at + gain.len()` of the two vectors as f32
/// slices, over `0..len`: at once when both are f32, else widened
/// [`VECTOR_CHUNK`] at a time.
fn with_f32_vectors(
    len: usize,
    gain: Vector<'_>,
    bias: Vector<'_>,
    mut apply: impl FnMut(usize, &[f32], &[f32]),
) {
    if let (Vector::F32(gain), Vector::F32(bias)) = (gain, bias) {
        return apply(0, &gain[..len], &bias[..len]);
    }
    let mut wide_gain = [0.0f32; VECTOR_CHUNK];
    let mut wide_bias = [0.0f32; VECTOR_CHUNK];
    for at in (0..len).step_by(VECTOR_CHUNK) {
        let n = VECTOR_CHUNK.min(len - at);
        gain.widen_into(at, &mut wide_gain[..n]);
        bias.widen_into(at, &mut wide_bias[..n]);
        apply(at, &wide_gain[..n], &wide_bias[..n]);
    }
}

/// `ln sum exp(x)`, stable. The `exp`s are micromath's with the `fast-math` feature
/// ([`softmax_exp`](kernels::fast_math::softmax_exp)); the `ln` is always exact.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    let m = kernels::max(x);
    m + libm::logf(sum_exp(x, m))
}

/// `sum exp(x[i] - m)`, added in order from 0. The `exp`s go eight or sixteen at a time where a
/// kernel does them so ([`softmax_exps`](kernels::softmax_exps_f32), on copies 256 at a time: the
/// same bits), else on such copies by [`softmax_exps_sum_f32`](kernels::softmax_exps_sum_f32).
pub fn sum_exp(x: &[f32], m: f32) -> f32 {
    const COPIED: usize = 256;
    let mut sum = 0.0;
    let by_eight = if kernels::SOFTMAX_EXPS { x.len() / 8 * 8 } else { 0 };
    let (eights, rest) = x.split_at(by_eight);
    let mut exps = [0.0f32; COPIED];
    for chunk in eights.chunks(COPIED) {
        let exps = &mut exps[..chunk.len()];
        exps.copy_from_slice(chunk);
        kernels::softmax_exps_f32(exps, m);
        for v in exps.iter() {
            sum += *v;
        }
    }
    // the rest copied 256 at a time too, for the kernel that computes them in place
    for chunk in rest.chunks(COPIED) {
        let exps = &mut exps[..chunk.len()];
        exps.copy_from_slice(chunk);
        sum = kernels::softmax_exps_sum_f32(exps, m, sum);
    }
    sum
}

/// In place `x - ln sum exp(x)`.
pub fn log_softmax(x: &mut [f32]) {
    let lse = log_sum_exp(x);
    for v in x.iter_mut() {
        *v -= lse;
    }
}

/// In place `exp(x) / sum exp(x)`. The `exp`s are micromath's with the `fast-math` feature
/// ([`softmax_exp`](kernels::fast_math::softmax_exp)).
pub fn softmax(x: &mut [f32]) {
    let m = kernels::max(x);
    let mut sum = 0.0;
    // eight or sixteen `exp`s at a time where a kernel does them so (the same bits), then all
    // added in order
    let by_eight = if kernels::SOFTMAX_EXPS { x.len() / 8 * 8 } else { 0 };
    let (eights, rest) = x.split_at_mut(by_eight);
    kernels::softmax_exps_f32(eights, m);
    for v in eights.iter() {
        sum += *v;
    }
    let sum = kernels::softmax_exps_sum_f32(rest, m, sum);
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn log_softmax_normalises() {
        let mut x = [1.0, 2.0, 3.0, -100.0];
        log_softmax(&mut x);
        let total: f32 = x.iter().map(|v| libm::expf(*v)).sum();
        // With `fast-math` the `exp`s inside are off by up to EXP_MAX_RELATIVE_ERROR.
        let tolerance = 1e-6 + crate::kernels::fast_math::EXP_MAX_RELATIVE_ERROR;
        assert!((total - 1.0).abs() < tolerance);
        assert!((x[2] - x[1] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn layer_norm_of_zero_is_the_bias() {
        let mut out = [0.0; 3];
        let (gain, bias) = (Vector::F32(&[2.0; 3]), Vector::F32(&[0.5, -1.0, 3.0]));
        layer_norm(&[0.0; 3], gain, bias, 1e-5, &mut out);
        assert_eq!(out, [0.5, -1.0, 3.0]);
    }

    /// The rows side by side against one `layer_norm_in_place` per row, bit for bit: widths
    /// with and without a whole chunk of the vectors, row counts around a block of sixteen, f32
    /// and f16 gains and biases, and rows of negative zeros, of one value, and with a NaN.
    #[test]
    fn layer_norm_rows_have_the_bits_of_one_row_at_a_time() {
        // hundredths in -20..=20
        let mut rng = crate::rng::Rng::new(9);
        let mut value = || rng.below(4001) as f32 / 100.0 - 20.0;
        let widths: &[usize] = if cfg!(miri) { &[5, 33] } else { &[1, 5, 33, 128] };
        let counts: &[usize] = if cfg!(miri) {
            &[1, 17]
        } else {
            &[1, 2, 15, 16, 17, 40]
        };
        for &width in widths {
            let gain: Vec<f32> = (0..width).map(|_| 1.0 + value() / 40.0).collect();
            let bias: Vec<f32> = (0..width).map(|_| value() / 10.0).collect();
            let gain16: Vec<f16> = gain.iter().map(|&g| f16::from_f32_const(g)).collect();
            let bias16: Vec<f16> = bias.iter().map(|&b| f16::from_f32_const(b)).collect();
            let vectors = [
                (Vector::F32(&gain), Vector::F32(&bias)),
                (Vector::F16(&gain16), Vector::F16(&bias16)),
            ];
            for &rows in counts {
                let mut x: Vec<f32> = (0..rows * width).map(|_| value()).collect();
                for (r, row) in x.chunks_exact_mut(width).enumerate() {
                    match r % 5 {
                        1 => row.fill(-0.0),
                        2 => row.fill(3.25),
                        3 => row[width / 2] = f32::NAN,
                        _ => {}
                    }
                }
                for (gain, bias) in vectors {
                    let mut want = x.clone();
                    for row in want.chunks_exact_mut(width) {
                        layer_norm_in_place(row, gain, bias, 1e-5);
                    }
                    let mut got = x.clone();
                    layer_norm_rows_in_place(&mut got, width, gain, bias, 1e-5);
                    // a NaN's sign and payload are not the arithmetic's to keep (Miri varies
                    // them): every NaN compares as one
                    let bits = |v: &[f32]| {
                        v.iter()
                            .map(|f| {
                                if f.is_nan() {
                                    f32::NAN.to_bits()
                                } else {
                                    f.to_bits()
                                }
                            })
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(bits(&got), bits(&want), "{rows} rows of {width}");
                }
            }
        }
    }
}

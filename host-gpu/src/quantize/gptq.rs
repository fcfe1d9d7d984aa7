//! Error-compensated int8 and int4 rounding (GPTQ): each row is rounded one column at a time, and the
//! rounding error of a column is pushed onto the columns not yet rounded so that the layer's
//! output on the calibration inputs, not the weights themselves, stays close.
//!
//! For a layer `y = W x` and calibration inputs `X` (one row per position), the output error
//! of a quantized `Ŵ` is `Σ_r (w_r - ŵ_r) H (w_r - ŵ_r)ᵀ` with `H = XᵀX` (the [`Gram`] matrix).
//! Rounding column `i` of a row to `q` with the columns after it still free, the best change
//! of the free columns is `-(w_i - q) / [H⁻¹]_ii · [H⁻¹]_{i, i+1..}` (optimal brain surgeon,
//! with `H⁻¹` restricted to the free columns). GPTQ gets every one of those restricted
//! inverses at once from the upper Cholesky factor `U` of `H⁻¹` (`H⁻¹ = UᵀU`): row `i` of `U`
//! divided by `U_ii` is the update, and `U_ii²` the restricted diagonal.
//!
//! Everything here is f64: the Gram matrix, its factors, and the weights while they are being
//! corrected. The scales come from the same clip search as plain rounding ([`int8`],
//! [`int4`]), so the result is an [`Int8Matrix`] or [`Int4Matrix`] the image stores unchanged.
//!
//! [`int8`]: super::int8
//! [`int4`]: super::int4

use super::int4::{self, Int4Matrix};
use super::int8::{self, Int8Matrix};
pub use crate::gram::Gram;

/// Dampening added to the Gram matrix's diagonal, as a fraction of its mean diagonal.
pub const DAMPENING: f64 = 0.01;

/// Lower Cholesky factor `L` of the symmetric `a (n, n)` (`a = L Lᵀ`), or `None` when `a` is
/// not (numerically) positive definite.
fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let dot: f64 = l[i * n..i * n + j]
                .iter()
                .zip(&l[j * n..j * n + j])
                .map(|(a, b)| a * b)
                .sum();
            let v = a[i * n + j] - dot;
            if i == j {
                if !(v > 0.0 && v.is_finite()) {
                    return None;
                }
                l[i * n + i] = v.sqrt();
            } else {
                l[i * n + j] = v / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// `a⁻¹` of the symmetric positive definite `a (n, n)` from its lower Cholesky factor `l`.
fn inverse_from_cholesky(l: &[f64], n: usize) -> Vec<f64> {
    // M = L⁻¹ (lower triangular), column by column: L m_j = e_j
    let mut m = vec![0.0f64; n * n];
    for j in 0..n {
        m[j * n + j] = 1.0 / l[j * n + j];
        for i in j + 1..n {
            let dot: f64 = (j..i).map(|k| l[i * n + k] * m[k * n + j]).sum();
            m[i * n + j] = -dot / l[i * n + i];
        }
    }
    // a⁻¹ = Mᵀ M: [a⁻¹]_ij = sum_{k >= max(i, j)} M_ki M_kj
    let mut inverse = vec![0.0f64; n * n];
    for k in 0..n {
        let row = &m[k * n..k * n + k + 1];
        for i in 0..=k {
            let mki = row[i];
            if mki == 0.0 {
                continue;
            }
            for j in 0..=i {
                inverse[i * n + j] += mki * row[j];
            }
        }
    }
    for i in 0..n {
        for j in 0..i {
            inverse[j * n + i] = inverse[i * n + j];
        }
    }
    inverse
}

/// The upper Cholesky factor `U` of `H⁻¹` (`H⁻¹ = UᵀU`) for the Gram matrix `h (n, n)`,
/// dampened by `dampening` times its mean diagonal. Columns never seen (zero diagonal) get a
/// unit diagonal (they are coupled to no other). If the dampened matrix is still not positive
/// definite the dampening grows tenfold, up to four times; `None` after that.
fn inverse_factor(mut h: Vec<f64>, n: usize, dampening: f64) -> Option<Vec<f64>> {
    for i in 0..n {
        if h[i * n + i] == 0.0 {
            h[i * n + i] = 1.0;
        }
    }
    let mean_diagonal = (0..n).map(|i| h[i * n + i]).sum::<f64>() / n as f64;
    let mut damp = dampening * mean_diagonal;
    for _ in 0..5 {
        let mut dampened = h.clone();
        for i in 0..n {
            dampened[i * n + i] += damp;
        }
        if let Some(l) = cholesky(&dampened, n) {
            let inverse = inverse_from_cholesky(&l, n);
            if let Some(lower) = cholesky(&inverse, n) {
                // U = Lᵀ of H⁻¹ = L Lᵀ
                let mut u = vec![0.0f64; n * n];
                for i in 0..n {
                    for j in 0..=i {
                        u[j * n + i] = lower[i * n + j];
                    }
                }
                return Some(u);
            }
        }
        damp = if damp > 0.0 {
            damp * 10.0
        } else {
            mean_diagonal.max(1.0) * 1e-6
        };
    }
    None
}

/// Quantizes `weight (rows, cols)` like [`int8::quantize`] (same smoothing, same row scales)
/// but rounds each row column by column with the error of every column pushed onto the
/// columns after it through the inverse of `gram` (the inputs' `XᵀX`, `cols` wide), dampened
/// by `dampening` times its mean diagonal (see the module docs). Falls back to plain rounding when
/// `gram` is empty, of the wrong width, or cannot be factored.
pub fn quantize(
    weight: &[f32],
    cols: usize,
    smooth: Option<&[f32]>,
    gram: &Gram,
    dampening: f64,
) -> Int8Matrix {
    let plain = int8::quantize(weight, cols, smooth);
    // The stored row is w[c] * smooth[c] and meets the input x[c] * act[c] (act = 1 / smooth).
    let act = |c: usize| plain.act_scales.as_ref().map_or(1.0, |a| a[c] as f64);
    let stored = |c: usize| smooth.map_or(1.0, |f| f[c] as f64);
    let mut values = vec![0i8; weight.len()];
    let compensated = compensate(weight, cols, &act, &stored, gram, dampening, &mut |r, c, w| {
        let scale = plain.row_scales[r] as f64;
        if scale <= 0.0 {
            return w;
        }
        let q = (w / scale).round().clamp(-127.0, 127.0);
        values[r * cols + c] = q as i8;
        q * scale
    });
    if !compensated {
        return plain;
    }
    Int8Matrix {
        values,
        row_scales: plain.row_scales,
        act_scales: plain.act_scales,
    }
}

/// Quantizes `weight (rows, cols)` to int4 with the row scales and group multipliers of
/// [`int4::quantize`], each row rounded with its errors compensated as in [`quantize`]. Falls
/// back to plain rounding like it.
pub fn quantize_int4(weight: &[f32], cols: usize, group: usize, gram: &Gram, dampening: f64) -> Int4Matrix {
    let plain = int4::quantize(weight, cols, group);
    let mut values = vec![0i8; weight.len()];
    let compensated = compensate(
        weight,
        cols,
        &|_| 1.0,
        &|_| 1.0,
        gram,
        dampening,
        &mut |r, c, w| {
            let step = plain.step(r, c, cols) as f64;
            if step <= 0.0 {
                return w;
            }
            let q = (w / step)
                .round()
                .clamp(-(int4::Q_MAX as f64), int4::Q_MAX as f64);
            values[r * cols + c] = q as i8;
            q * step
        },
    );
    if !compensated {
        return plain;
    }
    Int4Matrix { values, ..plain }
}

/// The error-compensated rounding shared by every grid: each row of `weight (rows, cols)`,
/// stored as `w[c] * stored(c)` and meeting the inputs `x[c] * act(c)`, is rounded column by
/// column by `round(row, column, value) -> the value it stands for`, and each column's error
/// is pushed onto the columns not yet rounded through the inverse of the dampened Gram matrix.
/// The columns go in decreasing order of their inputs' energy (GPTQ's activation order: the
/// columns that matter most are rounded while the most columns are left to absorb their
/// errors). Returns false, rounding nothing, when `gram` is empty, of the wrong width, or
/// cannot be factored.
fn compensate(
    weight: &[f32],
    cols: usize,
    act: &dyn Fn(usize) -> f64,
    stored: &dyn Fn(usize) -> f64,
    gram: &Gram,
    dampening: f64,
    round: &mut dyn FnMut(usize, usize, f64) -> f64,
) -> bool {
    if gram.n != cols || gram.is_empty() {
        return false;
    }
    let n = cols;
    // the Gram matrix of the stored row's inputs is act_i H_ij act_j
    let energy = |c: usize| gram.sum[c * n + c] * act(c) * act(c);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| energy(b).total_cmp(&energy(a)));
    // (n, n) the Gram matrix in that order
    let mut h = vec![0.0f64; n * n];
    for (i, &oi) in order.iter().enumerate() {
        for (j, &oj) in order.iter().enumerate() {
            h[i * n + j] = gram.sum[oi * n + oj] * act(oi) * act(oj);
        }
    }
    let Some(u) = inverse_factor(h, n, dampening) else {
        return false;
    };
    let mut row = vec![0.0f64; n]; // the row as stored, in `order`
    for (r, source) in weight.chunks_exact(n).enumerate() {
        for (w, &c) in row.iter_mut().zip(&order) {
            *w = source[c] as f64 * stored(c);
        }
        for (i, &c) in order.iter().enumerate() {
            let rounded = round(r, c, row[i]);
            // the error over U_ii, onto the later columns along row i of U
            let error = (row[i] - rounded) / u[i * n + i];
            if error != 0.0 {
                for (w, &uij) in row[i + 1..].iter_mut().zip(&u[i * n + i + 1..(i + 1) * n]) {
                    *w -= error * uij;
                }
            }
        }
    }
    true
}

/// The relative output error of `approximation` against `weight` (both `(rows, cols)`) on the
/// inputs whose Gram matrix is `gram`: `Σ_r e_r H e_rᵀ / Σ_r w_r H w_rᵀ`, `e = weight -
/// approximation`, i.e. `‖(W - Ŵ) Xᵀ‖² / ‖W Xᵀ‖²`. `None` for an empty or mismatched `gram`.
pub fn output_error(weight: &[f32], approximation: &[f32], gram: &Gram) -> Option<f64> {
    let n = gram.n;
    if gram.is_empty() || !weight.len().is_multiple_of(n.max(1)) || weight.len() != approximation.len() {
        return None;
    }
    let quadratic = |v: &[f64]| -> f64 {
        gram.sum
            .chunks_exact(n)
            .zip(v)
            .map(|(h_row, &vi)| vi * h_row.iter().zip(v).map(|(h, x)| h * x).sum::<f64>())
            .sum()
    };
    let (mut error, mut signal) = (0.0f64, 0.0f64);
    let mut e = vec![0.0f64; n];
    let mut w = vec![0.0f64; n];
    for (row, approx) in weight.chunks_exact(n).zip(approximation.chunks_exact(n)) {
        for ((e, w), (&a, &b)) in e.iter_mut().zip(w.iter_mut()).zip(row.iter().zip(approx)) {
            *e = a as f64 - b as f64;
            *w = a as f64;
        }
        error += quadratic(&e);
        signal += quadratic(&w);
    }
    Some(error / signal.max(f64::MIN_POSITIVE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use txl_core::rng::Rng;

    fn normal(rng: &mut Rng) -> f64 {
        // Box-Muller on two uniforms in (0, 1)
        let u = (rng.below(1 << 30) as f64 + 0.5) / (1u64 << 30) as f64;
        let v = (rng.below(1 << 30) as f64 + 0.5) / (1u64 << 30) as f64;
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// `rows` inputs `n` wide with correlated channels (a random mixing of independent
    /// normals, some channels much larger than others), as hidden states are.
    fn correlated_inputs(rng: &mut Rng, rows: usize, n: usize) -> Vec<f32> {
        let mixing: Vec<f64> = (0..n * n).map(|_| normal(rng)).collect();
        let gains: Vec<f64> = (0..n).map(|c| if c % 7 == 0 { 8.0 } else { 1.0 }).collect();
        let mut out = Vec::with_capacity(rows * n);
        for _ in 0..rows {
            let z: Vec<f64> = (0..n).map(|_| normal(rng)).collect();
            for c in 0..n {
                let v: f64 = (0..n).map(|k| z[k] * mixing[k * n + c]).sum::<f64>() * 0.2 + z[c];
                out.push((v * gains[c]) as f32);
            }
        }
        out
    }

    fn gram_of(x: &[f32], n: usize) -> Gram {
        let mut gram = Gram::new(n);
        for row in x.chunks_exact(n) {
            gram.add(row);
        }
        gram.symmetrize();
        gram
    }

    #[test]
    fn the_gram_matrix_is_xtx() {
        let mut rng = Rng::new(5);
        let (rows, n) = (37, 70);
        let x = correlated_inputs(&mut rng, rows, n);
        let gram = gram_of(&x, n);
        for i in 0..n {
            for j in 0..n {
                let expected: f64 = (0..rows).map(|r| x[r * n + i] as f64 * x[r * n + j] as f64).sum();
                assert!((gram.sum[i * n + j] - expected).abs() <= 1e-9 * expected.abs().max(1.0));
            }
        }
        assert_eq!(gram.rows, rows);
    }

    #[test]
    fn the_factor_inverts_the_dampened_gram_matrix() {
        let mut rng = Rng::new(9);
        let n = 24;
        let x = correlated_inputs(&mut rng, 50, n);
        let gram = gram_of(&x, n);
        let u = inverse_factor(gram.sum.clone(), n, DAMPENING).unwrap();
        let mean = (0..n).map(|i| gram.sum[i * n + i]).sum::<f64>() / n as f64;
        // (UᵀU) (H + damp I) = I
        for i in 0..n {
            for j in 0..n {
                let product: f64 = (0..n)
                    .map(|k| {
                        let inverse_ik: f64 = (0..n).map(|m| u[m * n + i] * u[m * n + k]).sum();
                        let h = gram.sum[k * n + j] + if k == j { DAMPENING * mean } else { 0.0 };
                        inverse_ik * h
                    })
                    .sum();
                let expected = if i == j { 1.0 } else { 0.0 };
                assert!((product - expected).abs() < 1e-9, "({i}, {j}): {product}");
            }
            for j in 0..i {
                assert_eq!(u[i * n + j], 0.0, "U is upper triangular");
            }
        }
    }

    /// GPTQ's defining property: on the inputs it was given, the layer's output error is lower
    /// than plain rounding's (with the same row scales), though each weight is rounded less
    /// closely.
    #[test]
    fn compensation_lowers_the_output_error_on_the_calibration_inputs() {
        let mut rng = Rng::new(21);
        let (rows, cols) = (48, 96);
        let weight: Vec<f32> = (0..rows * cols)
            .map(|_| (normal(&mut rng) * 0.05) as f32)
            .collect();
        let x = correlated_inputs(&mut rng, 400, cols);
        let gram = gram_of(&x, cols);
        for smooth in [
            None,
            Some((0..cols).map(|c| 0.5 + (c % 5) as f32 * 0.3).collect::<Vec<_>>()),
        ] {
            let plain = int8::quantize(&weight, cols, smooth.as_deref());
            let compensated = quantize(&weight, cols, smooth.as_deref(), &gram, DAMPENING);
            assert_eq!(plain.row_scales, compensated.row_scales);
            assert_eq!(plain.act_scales, compensated.act_scales);
            let plain_error = output_error(&weight, &plain.dequantize(cols), &gram).unwrap();
            let compensated_error = output_error(&weight, &compensated.dequantize(cols), &gram).unwrap();
            assert!(
                compensated_error < 0.8 * plain_error,
                "smooth {}: compensated {compensated_error:e} vs plain {plain_error:e}",
                smooth.is_some()
            );
            // ... and it does so by moving weights off their nearest grid point
            assert_ne!(plain.values, compensated.values);
            let direct = |q: &Int8Matrix| {
                let back = q.dequantize(cols);
                weight
                    .iter()
                    .zip(&back)
                    .map(|(&a, &b)| ((a - b) as f64).powi(2))
                    .sum::<f64>()
            };
            assert!(direct(&compensated) > direct(&plain));
        }
    }

    #[test]
    fn int4_compensation_keeps_the_grid_and_lowers_the_output_error() {
        let mut rng = Rng::new(33);
        let (rows, cols, group) = (32, 96, 32);
        let weight: Vec<f32> = (0..rows * cols)
            .map(|_| (normal(&mut rng) * 0.05) as f32)
            .collect();
        let x = correlated_inputs(&mut rng, 400, cols);
        let gram = gram_of(&x, cols);
        let plain = int4::quantize(&weight, cols, group);
        let compensated = quantize_int4(&weight, cols, group, &gram, DAMPENING);
        assert_eq!(plain.scale, compensated.scale);
        assert_eq!(plain.codes, compensated.codes);
        assert!(compensated.values.iter().all(|v| (-7..=7).contains(v)));
        let plain_error = output_error(&weight, &plain.dequantize(cols), &gram).unwrap();
        let compensated_error = output_error(&weight, &compensated.dequantize(cols), &gram).unwrap();
        assert!(
            compensated_error < 0.8 * plain_error,
            "compensated {compensated_error:e} vs plain {plain_error:e}"
        );
    }

    #[test]
    fn an_empty_or_mismatched_gram_matrix_rounds_plainly() {
        let mut rng = Rng::new(2);
        let weight: Vec<f32> = (0..8 * 16).map(|_| normal(&mut rng) as f32).collect();
        let plain = int8::quantize(&weight, 16, None);
        assert_eq!(quantize(&weight, 16, None, &Gram::new(16), DAMPENING), plain);
        let x = correlated_inputs(&mut rng, 10, 8);
        assert_eq!(quantize(&weight, 16, None, &gram_of(&x, 8), DAMPENING), plain);
    }

    #[test]
    fn unseen_channels_do_not_break_the_factorisation() {
        let mut rng = Rng::new(4);
        let n = 12;
        let mut x = correlated_inputs(&mut rng, 30, n);
        for row in x.chunks_exact_mut(n) {
            row[3] = 0.0;
            row[7] = 0.0;
        }
        let gram = gram_of(&x, n);
        let weight: Vec<f32> = (0..5 * n).map(|_| normal(&mut rng) as f32).collect();
        let q = quantize(&weight, n, None, &gram, DAMPENING);
        let back = q.dequantize(n);
        assert!(back.iter().all(|v| v.is_finite()));
        assert!(
            output_error(&weight, &back, &gram).unwrap()
                < output_error(&weight, &int8::quantize(&weight, n, None).dequantize(n), &gram).unwrap()
        );
    }
}

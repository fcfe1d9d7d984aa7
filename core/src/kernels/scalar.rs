//! Portable f32 kernels with exact math (`libm`).

/// Sum of `a[i] * b[i]` over the shorter of the two, in four interleaved f32 accumulators.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
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

/// `W (rows, cols) @ x (cols) -> y (rows)`, `rows = y.len()`, `cols = x.len()`.
pub fn matvec(weight: &[f32], x: &[f32], y: &mut [f32]) {
    let cols = x.len();
    for (out, row) in y.iter_mut().zip(weight.chunks_exact(cols)) {
        *out = dot(row, x);
    }
}

/// `W (rows, cols) @ x (cols) + b (rows) -> y (rows)`.
pub fn matvec_bias(weight: &[f32], bias: &[f32], x: &[f32], y: &mut [f32]) {
    matvec(weight, x, y);
    for (out, b) in y.iter_mut().zip(bias) {
        *out += b;
    }
}

/// `W^T`: `x (rows) @ W (rows, cols) -> y (cols)`, `rows = x.len()`, `cols = y.len()`.
pub fn vecmat(x: &[f32], weight: &[f32], y: &mut [f32]) {
    let cols = y.len();
    y.fill(0.0);
    for (&xr, row) in x.iter().zip(weight.chunks_exact(cols)) {
        for (out, w) in y.iter_mut().zip(row) {
            *out += xr * w;
        }
    }
}

/// `y += x`.
pub fn add_assign(y: &mut [f32], x: &[f32]) {
    for (a, b) in y.iter_mut().zip(x) {
        *a += b;
    }
}

/// `y *= s`.
pub fn scale(y: &mut [f32], s: f32) {
    for a in y.iter_mut() {
        *a *= s;
    }
}

/// In place `max(x, 0)`.
pub fn relu(x: &mut [f32]) {
    for a in x.iter_mut() {
        *a = a.max(0.0);
    }
}

/// LayerNorm: `out = (x - mean) / sqrt(var + eps) * gain + bias`, biased variance, two passes.
pub fn layer_norm(x: &[f32], gain: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len() as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let inv_std = 1.0 / libm::sqrtf(var + eps);
    for (((o, v), g), b) in out.iter_mut().zip(x).zip(gain).zip(bias) {
        *o = (v - mean) * inv_std * g + b;
    }
}

/// In place LayerNorm (see [`layer_norm`]).
pub fn layer_norm_in_place(x: &mut [f32], gain: &[f32], bias: &[f32], eps: f32) {
    let n = x.len() as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let inv_std = 1.0 / libm::sqrtf(var + eps);
    for ((v, g), b) in x.iter_mut().zip(gain).zip(bias) {
        *v = (*v - mean) * inv_std * g + b;
    }
}

/// Largest element (`-inf` for an empty slice).
pub fn max(x: &[f32]) -> f32 {
    x.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// `ln sum exp(x)`, stable.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    let m = max(x);
    let sum: f32 = x.iter().map(|&v| libm::expf(v - m)).sum();
    m + libm::logf(sum)
}

/// In place `x - ln sum exp(x)`.
pub fn log_softmax(x: &mut [f32]) {
    let lse = log_sum_exp(x);
    for v in x.iter_mut() {
        *v -= lse;
    }
}

/// In place `exp(x) / sum exp(x)`.
pub fn softmax(x: &mut [f32]) {
    let m = max(x);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = libm::expf(*v - m);
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matvec_and_vecmat_agree_with_a_hand_computation() {
        // W = [[1, 2, 3], [4, 5, 6]]
        let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut y = [0.0; 2];
        matvec(&w, &[1.0, 0.5, -1.0], &mut y);
        assert_eq!(y, [1.0 + 1.0 - 3.0, 4.0 + 2.5 - 6.0]);
        let mut z = [0.0; 3];
        vecmat(&[1.0, -1.0], &w, &mut z);
        assert_eq!(z, [-3.0, -3.0, -3.0]);
    }

    #[test]
    fn log_softmax_normalises() {
        let mut x = [1.0, 2.0, 3.0, -100.0];
        log_softmax(&mut x);
        let total: f32 = x.iter().map(|v| libm::expf(*v)).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!((x[2] - x[1] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn layer_norm_of_zero_is_the_bias() {
        let mut out = [0.0; 3];
        layer_norm(&[0.0; 3], &[2.0; 3], &[0.5, -1.0, 3.0], 1e-5, &mut out);
        assert_eq!(out, [0.5, -1.0, 3.0]);
    }
}

//! [`Gram`]: the matrix `XᵀX` of a linear layer's inputs, in f64. The reference collects it on
//! calibration text (`Reference::statistics`); the error-compensated rounding
//! ([`gptq`](crate::quantize::gptq)) weighs its errors with it.

/// `XᵀX` of the rows `x` a linear layer saw, accumulated in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Gram {
    /// Columns of `x` (the layer's input width).
    pub n: usize,
    /// `(n, n)`, symmetric: `sum over rows of x[i] * x[j]`.
    pub sum: Vec<f64>,
    /// Rows accumulated.
    pub rows: usize,
}

impl Gram {
    /// Nothing seen, for inputs `n` wide.
    pub fn new(n: usize) -> Gram {
        Gram {
            n,
            sum: vec![0.0; n * n],
            rows: 0,
        }
    }

    /// Adds one input row (`n` long); only the upper triangle, see [`Gram::symmetrize`].
    pub fn add(&mut self, x: &[f32]) {
        let n = self.n;
        for (i, &xi) in x.iter().enumerate().take(n) {
            if xi == 0.0 {
                continue;
            }
            let xi = xi as f64;
            let row = &mut self.sum[i * n + i..(i + 1) * n];
            for (s, &xj) in row.iter_mut().zip(&x[i..]) {
                *s += xi * xj as f64;
            }
        }
        self.rows += 1;
    }

    /// Copies the upper triangle into the lower one (after the last [`Gram::add`]).
    pub fn symmetrize(&mut self) {
        let n = self.n;
        for i in 0..n {
            for j in 0..i {
                self.sum[i * n + j] = self.sum[j * n + i];
            }
        }
    }

    /// Whether no row (or only zeros) was seen.
    pub fn is_empty(&self) -> bool {
        self.rows == 0 || self.sum.iter().all(|&v| v == 0.0)
    }
}

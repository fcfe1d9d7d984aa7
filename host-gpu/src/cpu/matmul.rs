//! Row-major matrix products on the `gemm` crate, with the shape checks that make its raw
//! pointer interface safe to call.

use gemm::Parallelism;

use crate::real::Real;

/// How the right-hand factor `op(B)` of a product is stored.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Rhs {
    /// `B (k, n)` row-major, rows `ld` apart.
    Plain {
        /// Row stride.
        ld: usize,
    },
    /// `B^T` where `B (n, k)` is row-major with rows `ld` apart: `x @ W^T` of a linear layer
    /// whose weight is `W (d_out, d_in)`.
    Transposed {
        /// Row stride of `B`.
        ld: usize,
    },
}

/// Elements a row-major `(rows, cols)` block with row stride `ld` spans.
fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * ld + cols
    }
}

/// `C (m, n) = A (m, k) @ op(B)`, or `C += ...` when `accumulate`. `A` and `C` are row-major
/// with row strides `lda` and `ldc`; each slice starts at its matrix's first element.
///
/// Panics if a slice is too short for its shape (a bug in the caller, never input).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    lda: usize,
    b: &[T],
    rhs: Rhs,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
) {
    assert!(lda >= k && ldc >= n, "row strides shorter than rows");
    assert!(a.len() >= span(m, k, lda), "A too short for ({m}, {k})");
    assert!(c.len() >= span(m, n, ldc), "C too short for ({m}, {n})");
    let (rhs_rs, rhs_cs) = match rhs {
        Rhs::Plain { ld } => {
            assert!(ld >= n && b.len() >= span(k, n, ld), "B too short for ({k}, {n})");
            (ld as isize, 1)
        }
        Rhs::Transposed { ld } => {
            assert!(ld >= k && b.len() >= span(n, k, ld), "B too short for ({n}, {k})");
            (1, ld as isize)
        }
    };
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for row in c.chunks_mut(ldc).take(m) {
                row[..n].fill(T::ZERO);
            }
        }
        return;
    }
    let parallelism = if m * n * k >= 1 << 18 {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    // SAFETY: the asserts above check that every element the strides reach lies inside `a`,
    // `b` and `c`; `c` is borrowed mutably, so it does not alias `a` or `b`. `T` is f32 or f64.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            accumulate,
            a.as_ptr(),
            1,
            lda as isize,
            b.as_ptr(),
            rhs_cs,
            rhs_rs,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        )
    }
}

/// A linear layer over rows: `y (rows, d_out) = x (rows, d_in) @ W^T (+ bias)`, `W (d_out, d_in)`.
pub(crate) fn linear<T: Real>(x: &[T], d_in: usize, weight: &[T], bias: Option<&[T]>, y: &mut [T]) {
    let d_out = weight.len() / d_in;
    let rows = x.len() / d_in;
    matmul(
        rows,
        d_out,
        d_in,
        x,
        d_in,
        weight,
        Rhs::Transposed { ld: d_in },
        y,
        d_out,
        false,
    );
    if let Some(bias) = bias {
        for row in y.chunks_exact_mut(d_out) {
            for (v, b) in row.iter_mut().zip(bias) {
                *v += *b;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{linear, matmul, Rhs};

    #[test]
    fn products_match_a_hand_computation() {
        // A = [[1, 2], [3, 4]], B = [[5, 6], [7, 8]]
        let a = [1.0f64, 2.0, 3.0, 4.0];
        let b = [5.0f64, 6.0, 7.0, 8.0];
        let mut c = [0.0f64; 4];
        matmul(2, 2, 2, &a, 2, &b, Rhs::Plain { ld: 2 }, &mut c, 2, false);
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        matmul(2, 2, 2, &a, 2, &b, Rhs::Transposed { ld: 2 }, &mut c, 2, false);
        assert_eq!(c, [17.0, 23.0, 39.0, 53.0]);
        matmul(2, 2, 2, &a, 2, &b, Rhs::Transposed { ld: 2 }, &mut c, 2, true);
        assert_eq!(c, [34.0, 46.0, 78.0, 106.0]);
    }

    #[test]
    fn strided_blocks_touch_only_their_elements() {
        // The left 2x2 block of a 2x3 A times the identity, written into the right of a 2x3 C.
        let a = [1.0f32, 2.0, 9.0, 3.0, 4.0, 9.0];
        let eye = [1.0f32, 0.0, 0.0, 1.0];
        let mut c = [-1.0f32; 6];
        matmul(2, 2, 2, &a, 3, &eye, Rhs::Plain { ld: 2 }, &mut c[1..], 3, false);
        assert_eq!(c, [-1.0, 1.0, 2.0, -1.0, 3.0, 4.0]);
        let mut y = [0.0f32; 2];
        linear(&[1.0, 1.0], 2, &[1.0, 2.0, 3.0, 4.0], Some(&[0.5, -0.5]), &mut y);
        assert_eq!(y, [3.5, 6.5]);
    }
}

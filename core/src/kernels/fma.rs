//! Fast f32 weight products (opt-in, [`Model::set_fast_f32`](crate::Model::set_fast_f32)): each
//! row · input summed with fused multiply-adds in one fixed order, so the bits are the same on
//! every machine, but not those of the exact [`dot`](super::scalar::dot).
//!
//! The order: one chain per row and input, `sum = fma(w[c], x[c], sum)` for each column `c` in
//! turn, starting at `+0.0` (one rounding per column instead of the exact order's two).
//! [`dot_fma`] is the portable reference (`fmaf` in software where the CPU has no FMA); the
//! x86-64 kernel (AVX2 with FMA, chosen at run time) and the aarch64 one (NEON) give its bits.
//!
//! Why this order: a chain per row lets a kernel put *different* rows or inputs in a
//! register's lanes and meet each weight with a broadcast, as a matrix product (GEMM) does,
//! instead of summing a row's columns across the lanes and adding the lanes at the end. A
//! step then loads two registers of inputs and six weights for twelve multiply-adds, where a
//! dot product of three rows and two inputs loads five registers for six. Many chains run at
//! once, so their length costs no time.
//!
//! Why fused: the exact order multiplies and then adds, two instructions where an FMA unit
//! does both in one. The fused order differs from the exact one by a few ulps a sum (a
//! relative `~1e-7 * sqrt(cols)` for sums of mixed signs), far below what int8 or f16 weights
//! change; attention, LayerNorm and the softmaxes stay exact.
//!
//! ```
//! use txl_core::kernels::fma::dot_fma;
//!
//! let w: Vec<f32> = (0..40).map(|i| i as f32 * 0.25).collect();
//! let x = vec![2.0f32; 40];
//! assert_eq!(dot_fma(&w, &x), 390.0); // small integers: every order is exact
//! ```

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
pub fn dot_fma(row: &[f32], x: &[f32]) -> f32 {
    row.iter().zip(x).fold(0.0, |sum, (&w, &v)| fmaf(w, v, sum))
}

/// `ys[p] = W xs[p]` for f32 weights `W (rows, cols)` (`rows` the shortest output's length,
/// `cols` the shortest input's), each sum in the fused order ([`dot_fma`]'s bits): with AVX2
/// and FMA on x86-64 (AVX-512 CPUs included) eight inputs or rows a register, each weight or
/// input broadcast (`kernels::x86_fma`); with NEON on aarch64 four inputs a
/// register; else the portable loop.
pub fn matmul_fma_rows(weight: &[f32], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if super::x86_fma::has_avx2_fma() {
            // SAFETY: the CPU has AVX2 and FMA, checked just above.
            return unsafe { super::x86_fma::rows_avx2(weight, cols, xs, ys) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    super::aarch64::rows_fma(weight, cols, xs, ys);
    #[cfg(not(target_arch = "aarch64"))]
    {
        let wanted = ys.iter().map(|y| y.len()).min().unwrap_or(0);
        let rows = weight
            .len()
            .checked_div(cols)
            .map_or(wanted, |fit| wanted.min(fit));
        for (x, y) in xs.iter().zip(ys.iter_mut()) {
            for (r, out) in y[..rows].iter_mut().enumerate() {
                *out = dot_fma(&weight[r * cols..(r + 1) * cols], &x[..cols]);
            }
        }
    }
}

/// [`matmul_fma_rows`] for one input.
#[inline]
pub fn matvec_fma_rows(weight: &[f32], x: &[f32], y: &mut [f32]) {
    matmul_fma_rows(weight, &[x], &mut [y]);
}

#[cfg(test)]
mod tests {
    use super::{dot_fma, matmul_fma_rows};

    /// The order is one chain in column order: a 1 added to 1e8 is lost (f32's spacing there
    /// is 8) before -1e8 cancels the 1e8, so the sum is 0. Any order that adds the 1 last, or
    /// in a lane of its own (as sixteen lanes did), gives 1.
    #[test]
    fn the_fused_order_is_one_chain_in_column_order() {
        let row = [1e8f32, 1.0, -1e8];
        assert_eq!(dot_fma(&row, &[1.0; 3]), 0.0);
        let reversed = [-1e8f32, 1.0, 1e8];
        assert_eq!(dot_fma(&reversed, &[1.0; 3]), 0.0);
        let one_last = [1e8f32, -1e8, 1.0];
        assert_eq!(dot_fma(&one_last, &[1.0; 3]), 1.0);
        // fused: (1 + 2^-23)(1 - 2^-23) = 1 - 2^-46 meets the running sum -1 unrounded, so the
        // sum is -2^-46, where a multiply then an add rounds the product to 1 first and gives 0
        let (a, b) = (1.0 + f32::EPSILON, 1.0 - f32::EPSILON);
        assert_eq!(dot_fma(&[-1.0, a], &[1.0, b]), -1.0 / (1u64 << 46) as f32);
        assert_eq!(crate::kernels::scalar::dot(&[-1.0, a], &[1.0, b]), 0.0);
        // the kernels chosen at run time give the same bits as the reference
        let weight: [f32; 9] = core::array::from_fn(|i| [row, reversed, one_last][i / 3][i % 3]);
        let (mut y0, mut y1) = ([f32::NAN; 3], [f32::NAN; 3]);
        matmul_fma_rows(&weight, &[&[1.0; 3], &[1.0; 3]], &mut [&mut y0, &mut y1]);
        assert_eq!((y0, y1), ([0.0, 0.0, 1.0], [0.0, 0.0, 1.0]));
    }
}

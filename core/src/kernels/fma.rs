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
/// input broadcast ([`x86_fma`](super::x86_fma)); with NEON on aarch64 four inputs a
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

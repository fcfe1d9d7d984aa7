//! Fast f32 weight products (opt-in, [`Model::set_fast_f32`](crate::Model::set_fast_f32)): each
//! row · input summed with fused multiply-adds in sixteen lanes, in one fixed order, so the bits
//! are the same on every machine, but not those of the exact [`dot`](super::scalar::dot).
//!
//! The order: column `c` goes into lane `c % 16` as `lane = fma(w[c], x[c], lane)` (one
//! rounding per column instead of two), lanes starting at `+0.0`; then the lanes are added as a
//! tree, `l + (l + 8)` for `l < 8`, then `l + (l + 4)`, `l + (l + 2)` and `l + (l + 1)`. A
//! 512-bit register is the sixteen lanes; two 256-bit registers are lanes 0–7 and 8–15.
//! [`dot_fma`] is the portable reference (`fmaf` in software where the CPU has no FMA), the
//! x86-64 kernels (AVX-512F, or AVX2 with FMA, chosen at run time) and the aarch64 one (NEON)
//! give its bits.
//!
//! Why: the exact order multiplies and then adds, two instructions where an FMA unit does both
//! in one, so on an FMA-rich CPU the exact kernels peak at half its f32 rate. The fused order
//! differs from the exact one by a few ulps a sum (a relative `~1e-7 * sqrt(cols)`), far below
//! what int8 or f16 weights change; attention, LayerNorm and the softmaxes stay exact.
//!
//! ```
//! use txl_core::kernels::fma::dot_fma;
//!
//! let w: Vec<f32> = (0..40).map(|i| i as f32 * 0.25).collect();
//! let x = vec![2.0f32; 40];
//! assert_eq!(dot_fma(&w, &x), 390.0); // small integers: every order is exact
//! ```

/// Lanes a row is summed in.
pub const LANES: usize = 16;

/// `a * b + c` rounded once.
#[inline]
pub fn fmaf(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(feature = "std")]
    return a.mul_add(b, c);
    #[cfg(not(feature = "std"))]
    return libm::fmaf(a, b, c);
}

/// The sixteen lanes of a row's sum added as the tree of the module docs.
#[inline]
pub fn add_lanes(lanes: &[f32; LANES]) -> f32 {
    let s8: [f32; 8] = core::array::from_fn(|l| lanes[l] + lanes[l + 8]);
    let s4: [f32; 4] = core::array::from_fn(|l| s8[l] + s8[l + 4]);
    let s2 = [s4[0] + s4[2], s4[1] + s4[3]];
    s2[0] + s2[1]
}

/// `row · x` over the shorter of the two, in the fused order of the module docs: the
/// reference every fused kernel matches bit for bit.
pub fn dot_fma(row: &[f32], x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    for (c, (&w, &v)) in row.iter().zip(x).enumerate() {
        let lane = &mut lanes[c % LANES];
        *lane = fmaf(w, v, *lane);
    }
    add_lanes(&lanes)
}

/// `ys[p] = W xs[p]` for f32 weights `W (rows, cols)` (`rows` the shortest output's length,
/// `cols` the shortest input's), each sum in the fused order ([`dot_fma`]'s bits): with
/// AVX-512F on x86-64 sixteen lanes a register, four rows against up to four inputs a pass; with
/// AVX2 and FMA two registers a row, three rows against two inputs a pass; with NEON on aarch64
/// four registers a row, two rows against two inputs a pass; else the portable loop.
pub fn matmul_fma_rows(weight: &[f32], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        if super::avx512::has_avx512f() {
            // SAFETY: the CPU has AVX-512F, checked just above.
            return unsafe { super::x86_fma::rows_avx512(weight, cols, xs, ys) };
        }
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

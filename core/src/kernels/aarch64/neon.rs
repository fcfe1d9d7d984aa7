//! aarch64 kernels with NEON (every aarch64 CPU has it), and for int8 `SDOT` when the CPU has the
//! dot-product extension (checked at run time with the `std` feature). Each gives the scalar
//! kernels' bits, as the x86-64 ones do:
//!
//! - **f32 rows** ([`dots_strided_each_f32`]): one 128-bit register holds one row's four accumulators (the
//!   portable [`dot`](crate::kernels::portable::dot_f32) adds column `c` into accumulator `c % 4`, multiplying
//!   and then adding, no fused multiply-add); eight rows per pass keep eight chains of additions
//!   going, and several inputs share each block of rows.
//! - **Fused f32 rows** ([`matmul_fma_f32`], `--fast-f32`): the fused order's chains
//!   ([`dot_fma_f32`](super::fma::dot_fma_f32)) of four inputs share a register, a lane each; each
//!   weight fuses into them by `FMLA` by element; eight rows a pass.
//! - **Weighted rows** ([`axpys_strided_f32`]): `out[e] += p[k] * rows[k][e]` in `k` order, four elements a
//!   register.
//! - **int8 rows**: four rows per pass share the input; `SDOT` adds four products into each
//!   32-bit lane ([`row_sums_i8_sdot`]), else `SMULL`/`SMULL2` form 16-bit products and `SADALP`
//!   adds them in pairs into 32-bit lanes ([`row_sums_i8_smull`]; `SMLAL` into 16 bits would
//!   overflow on two −128 · −128 products). Integer sums are exact in any order.

use core::arch::aarch64::{
    float32x4_t, int32x4_t, vaddq_f32, vaddvq_s32, vdupq_n_f32, vdupq_n_s32, vfmaq_laneq_f32, vget_low_s8,
    vld1q_f32, vld1q_s8, vmovq_n_f32, vmull_high_s8, vmull_s8, vmulq_f32, vpadalq_s16, vreinterpretq_f32_f64,
    vreinterpretq_f64_f32, vst1q_f32, vtrn1q_f32, vtrn2q_f32, vzip1q_f64, vzip2q_f64,
};

use crate::kernels::portable::{self, rows_that_fit};

/// `outs[p][r] = rows[r * stride..][..cols] · xs[p]` for every input `p` (`cols` the inputs'
/// length), with the bits of `portable::dot_f32` per row and input: eight rows per pass, each block
/// read once for all the inputs. The rows of the shortest output are computed.
pub fn dots_strided_each_f32(rows: &[f32], stride: usize, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
    let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    let wanted = outs.iter().map(|o| o.len()).min().unwrap_or(0);
    let n = rows_that_fit(rows.len(), stride, cols, wanted);
    let mut r = 0;
    while r + 8 <= n {
        for (x, out) in xs.iter().zip(outs.iter_mut()) {
            // SAFETY: rows `r..r + 8` end at `(r + 7) * stride + cols <= rows.len()`, as
            // `r + 8 <= n` and `rows_that_fit` bounds `n`.
            unsafe {
                dots_block::<8>(
                    rows.as_ptr().add(r * stride),
                    stride,
                    &x[..cols],
                    &mut out[r..r + 8],
                )
            };
        }
        r += 8;
    }
    while r < n {
        for (x, out) in xs.iter().zip(outs.iter_mut()) {
            // SAFETY: as above, for row `r`.
            unsafe {
                dots_block::<1>(
                    rows.as_ptr().add(r * stride),
                    stride,
                    &x[..cols],
                    &mut out[r..r + 1],
                )
            };
        }
        r += 1;
    }
}

/// `ROWS` rows from `base` at `stride` · `x`, into `out` (`ROWS` long), one register each.
///
/// # Safety
/// `ROWS` rows of `x.len()` elements must be readable from `base` at `stride`.
#[inline(always)]
unsafe fn dots_block<const ROWS: usize>(base: *const f32, stride: usize, x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    let body = cols / 4 * 4;
    // SAFETY: NEON is part of every aarch64 CPU.
    let mut acc: [float32x4_t; ROWS] = [unsafe { vdupq_n_f32(0.0) }; ROWS];
    let mut c = 0;
    while c < body {
        // SAFETY: `c + 4 <= cols`: four readable columns in `x` and in every row.
        unsafe {
            let xs = vld1q_f32(x.as_ptr().add(c));
            for (i, acc) in acc.iter_mut().enumerate() {
                let w = vld1q_f32(base.add(i * stride + c));
                *acc = vaddq_f32(*acc, vmulq_f32(w, xs));
            }
        }
        c += 4;
    }
    for (i, acc) in acc.iter().enumerate() {
        let mut lanes = [0.0f32; 4];
        // SAFETY: `lanes` has room for four f32.
        unsafe { vst1q_f32(lanes.as_mut_ptr(), *acc) };
        let mut tail = 0.0;
        for (c, x) in x.iter().enumerate().skip(body) {
            // SAFETY: `c < cols`: inside row `i`.
            tail += unsafe { *base.add(i * stride + c) } * x;
        }
        out[i] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail;
    }
}

/// `ys[p] = W xs[p]` for `W (rows, cols)` at a stride of `cols` (`rows` the shortest output's
/// length, as many as `weight` holds; every input at least `cols` long) in the fused order: the
/// bits of [`dot_fma_f32`](super::fma::dot_fma_f32) for every row and input. Four inputs share a
/// register, a lane each (a last group of fewer repeats its first input in the empty lanes and
/// does not store them): each four columns of the group are loaded and transposed in registers
/// (a register per column), then each row's four weights there fuse into the eight rows'
/// accumulators by lane (`FMLA` by element). The columns after the last four continue each
/// chain in the portable step. Every group of inputs meets a block of rows before the next
/// block is read, so a row comes from memory once per call.
pub fn matmul_fma_f32(weight: &[f32], cols: usize, xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    let wanted = ys.iter().map(|y| y.len()).min().unwrap_or(0);
    let rows = rows_that_fit(weight.len(), cols, cols, wanted);
    let inputs = xs.len().min(ys.len());
    let mut r = 0;
    while r < rows {
        let take = if r + 8 <= rows { 8 } else { 1 };
        // SAFETY: rows `r..r + take` end inside `weight` (`rows_that_fit` bounds `rows`).
        let base = unsafe { weight.as_ptr().add(r * cols) };
        // every group of inputs meets the block's rows while they stay in the cache
        let mut p = 0;
        while p < inputs {
            let count = (inputs - p).min(4);
            let group: [&[f32]; 4] = core::array::from_fn(|k| &xs[p + if k < count { k } else { 0 }][..cols]);
            let mut sums = [[0.0f32; 4]; 8];
            // SAFETY: `take` rows of `cols` are readable from `base`, and `cols` from each input.
            unsafe {
                if take == 8 {
                    sums = fused_pass::<8>(base, cols, group);
                } else {
                    sums[0] = fused_pass::<1>(base, cols, group)[0];
                }
            }
            for (i, sums) in sums.iter().enumerate().take(take) {
                for (k, sum) in sums.iter().enumerate().take(count) {
                    ys[p + k][r + i] = *sum;
                }
            }
            p += count;
        }
        r += take;
    }
}

/// `R` rows from `base` (at a stride of `cols`) against four inputs: `sums[i][k]` in the fused
/// order.
///
/// # Safety
/// `R` rows of `cols` f32 must be readable from `base`, and `cols` from each input.
#[inline(always)]
unsafe fn fused_pass<const R: usize>(base: *const f32, cols: usize, xs: [&[f32]; 4]) -> [[f32; 4]; R] {
    use crate::kernels::portable::fmaf;
    // SAFETY: NEON is part of every aarch64 CPU.
    let mut acc = [unsafe { vdupq_n_f32(0.0) }; R];
    let body = cols / 4 * 4;
    let mut c = 0;
    while c < body {
        // SAFETY: `c + 4 <= cols`: four readable columns in each input and each row.
        unsafe {
            let quads: [float32x4_t; 4] = core::array::from_fn(|k| vld1q_f32(xs[k].as_ptr().add(c)));
            let columns = transpose_four(quads);
            for (i, acc) in acc.iter_mut().enumerate() {
                let w = vld1q_f32(base.add(i * cols + c));
                *acc = vfmaq_laneq_f32::<0>(*acc, columns[0], w);
                *acc = vfmaq_laneq_f32::<1>(*acc, columns[1], w);
                *acc = vfmaq_laneq_f32::<2>(*acc, columns[2], w);
                *acc = vfmaq_laneq_f32::<3>(*acc, columns[3], w);
            }
        }
        c += 4;
    }
    let mut sums = [[0.0f32; 4]; R];
    for (i, (sums, acc)) in sums.iter_mut().zip(&acc).enumerate() {
        // SAFETY: `sums` has room for four f32.
        unsafe { vst1q_f32(sums.as_mut_ptr(), *acc) };
        for c in body..cols {
            // SAFETY: `c < cols`: inside row `i`.
            let w = unsafe { *base.add(i * cols + c) };
            for (sum, x) in sums.iter_mut().zip(xs) {
                *sum = fmaf(w, x[c], *sum);
            }
        }
    }
    sums
}

/// The 4 × 4 transpose: lane `j` of `rows[k]` becomes lane `k` of register `j`.
#[inline(always)]
fn transpose_four(rows: [float32x4_t; 4]) -> [float32x4_t; 4] {
    // SAFETY: NEON is part of every aarch64 CPU.
    unsafe {
        // (a0 b0 a2 b2), (a1 b1 a3 b3), (c0 d0 c2 d2), (c1 d1 c3 d3)
        let ab_even = vreinterpretq_f64_f32(vtrn1q_f32(rows[0], rows[1]));
        let ab_odd = vreinterpretq_f64_f32(vtrn2q_f32(rows[0], rows[1]));
        let cd_even = vreinterpretq_f64_f32(vtrn1q_f32(rows[2], rows[3]));
        let cd_odd = vreinterpretq_f64_f32(vtrn2q_f32(rows[2], rows[3]));
        [
            vreinterpretq_f32_f64(vzip1q_f64(ab_even, cd_even)),
            vreinterpretq_f32_f64(vzip1q_f64(ab_odd, cd_odd)),
            vreinterpretq_f32_f64(vzip2q_f64(ab_even, cd_even)),
            vreinterpretq_f32_f64(vzip2q_f64(ab_odd, cd_odd)),
        ]
    }
}

/// `out += p[k] * rows[k * stride..][..out.len()]` for each `k < p.len()` in order: per element
/// the products are rounded and added in `k` order, as in the portable loop. Sixteen elements
/// stay in registers while every `k` passes, then four, then one.
pub fn axpys_strided_f32(rows: &[f32], stride: usize, p: &[f32], out: &mut [f32]) {
    let n = out.len();
    let k_count = rows_that_fit(rows.len(), stride, n, p.len());
    let p = &p[..k_count];
    let mut e = 0;
    while e + 16 <= n {
        // SAFETY: every read is at `k * stride + e + i` with `k < k_count` and `e + i < n`,
        // inside `rows` by `rows_that_fit`; the loads and stores of `out` are inside it.
        unsafe {
            let o = out.as_mut_ptr().add(e);
            let mut acc = [
                vld1q_f32(o),
                vld1q_f32(o.add(4)),
                vld1q_f32(o.add(8)),
                vld1q_f32(o.add(12)),
            ];
            for (k, &weight) in p.iter().enumerate() {
                let w = vmovq_n_f32(weight);
                let row = rows.as_ptr().add(k * stride + e);
                for (i, acc) in acc.iter_mut().enumerate() {
                    *acc = vaddq_f32(*acc, vmulq_f32(w, vld1q_f32(row.add(4 * i))));
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                vst1q_f32(o.add(4 * i), *acc);
            }
        }
        e += 16;
    }
    while e + 4 <= n {
        // SAFETY: as above, for elements `e..e + 4`.
        unsafe {
            let o = out.as_mut_ptr().add(e);
            let mut acc = vld1q_f32(o);
            for (k, &weight) in p.iter().enumerate() {
                let row = rows.as_ptr().add(k * stride + e);
                acc = vaddq_f32(acc, vmulq_f32(vmovq_n_f32(weight), vld1q_f32(row)));
            }
            vst1q_f32(o, acc);
        }
        e += 4;
    }
    for (i, o) in out.iter_mut().enumerate().skip(e) {
        for (k, &weight) in p.iter().enumerate() {
            *o += weight * rows[k * stride + i];
        }
    }
}

/// `sums[r] = values[r * cols..][..cols] · xq` for each `r < sums.len()`, four rows per pass,
/// 16 columns a step, `step(acc, w, x)` adding the products of one step into `acc`'s lanes.
///
/// # Safety
/// `step` must be safe to call on this CPU.
#[inline(always)]
unsafe fn row_sums_with(
    values: &[i8],
    cols: usize,
    xq: &[i8],
    sums: &mut [i32],
    step: impl Fn(int32x4_t, *const i8, *const i8) -> int32x4_t,
) {
    let xq = &xq[..cols];
    let n = rows_that_fit(values.len(), cols, cols, sums.len());
    let body = cols / 16 * 16;
    let mut r = 0;
    while r < n {
        let count = (n - r).min(4);
        // SAFETY: NEON is part of every aarch64 CPU.
        let mut acc = [unsafe { vdupq_n_s32(0) }; 4];
        let mut c = 0;
        while c < body {
            for (i, acc) in acc.iter_mut().enumerate().take(count) {
                // SAFETY: `c + 16 <= cols`, and row `r + i < n` is inside `values`.
                *acc = step(*acc, unsafe { values.as_ptr().add((r + i) * cols + c) }, unsafe {
                    xq.as_ptr().add(c)
                });
            }
            c += 16;
        }
        for (i, acc) in acc.iter().enumerate().take(count) {
            let row = &values[(r + i) * cols..(r + i + 1) * cols];
            // SAFETY: NEON is part of every aarch64 CPU.
            sums[r + i] = unsafe { vaddvq_s32(*acc) } + portable::dot_i8(&row[body..], &xq[body..]);
        }
        r += count;
    }
}

/// `sums[r] = values[r] · xq` in i32 with `SMULL`/`SMULL2` and `SADALP`; equal to
/// `portable::dot_i8` per row.
pub fn row_sums_i8_smull(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    let step = |acc: int32x4_t, w: *const i8, x: *const i8| {
        // SAFETY: the caller (`row_sums_with`) gives 16 readable bytes at each pointer.
        unsafe {
            let (w, x) = (vld1q_s8(w), vld1q_s8(x));
            let low = vmull_s8(vget_low_s8(w), vget_low_s8(x)); // 8 products, exact in i16
            let high = vmull_high_s8(w, x);
            vpadalq_s16(vpadalq_s16(acc, low), high)
        }
    };
    // SAFETY: NEON is part of every aarch64 CPU.
    unsafe { row_sums_with(values, cols, xq, sums, step) }
}

/// `sums[r] = values[r] · xq` in i32 with `SDOT` (four products into each 32-bit lane); equal
/// to `portable::dot_i8` per row.
///
/// # Safety
/// The CPU must have the dot-product extension ([`has_dotprod`](crate::kernels::features::has_dotprod)).
#[target_feature(enable = "dotprod")]
pub unsafe fn row_sums_i8_sdot(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    let step = |acc: int32x4_t, w: *const i8, x: *const i8| {
        // SAFETY: the caller gives 16 readable bytes at each pointer, and the CPU has `SDOT`
        // (this function's contract).
        unsafe {
            let (w, x) = (vld1q_s8(w), vld1q_s8(x));
            let mut acc = acc;
            core::arch::asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {w:v}.16b, {x:v}.16b",
                acc = inout(vreg) acc,
                w = in(vreg) w,
                x = in(vreg) x,
                options(pure, nomem, nostack),
            );
            acc
        }
    };
    // SAFETY: the CPU has `SDOT` (this function's contract).
    unsafe { row_sums_with(values, cols, xq, sums, step) }
}

#[cfg(test)]
mod tests {
    use crate::rng::Rng;

    /// Pseudo-random f32s with the values that test an order of rounding (see the x86 tests).
    fn awkward_floats(count: usize, seed: u32) -> Vec<f32> {
        let mut rng = Rng::new(seed.into());
        (0..count)
            .map(|_| {
                let state = (rng.next_u64() >> 32) as u32;
                match state >> 26 {
                    0 => -0.0,
                    1 => f32::from_bits(state & 0x807f_ffff),
                    2 if state & 0x100 == 0 => f32::INFINITY,
                    3 if state & 0x300 == 0 => f32::NAN,
                    _ => {
                        let mantissa = (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                        mantissa * [1.0, 1e-3, 3e4, 1e-30, 7.0][(state % 5) as usize]
                    }
                }
            })
            .collect()
    }

    fn same_bits(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn neon_f32_rows_equal_the_scalar_dot_per_row_and_input() {
        for cols in [0usize, 1, 3, 4, 5, 7, 8, 33, 128, 130] {
            for extra in [0usize, 3] {
                let stride = cols + extra;
                for n in [0usize, 1, 7, 8, 9, 17] {
                    let rows = awkward_floats(n * stride, (cols * 131 + n) as u32);
                    let inputs: Vec<Vec<f32>> = (0..2)
                        .map(|p| awkward_floats(cols, 7 + p + cols as u32))
                        .collect();
                    let xs: Vec<&[f32]> = inputs.iter().map(|x| x.as_slice()).collect();
                    let mut out = vec![vec![1.5f32; n]; 2];
                    let mut outs: Vec<&mut [f32]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
                    super::dots_strided_each_f32(&rows, stride, &xs, &mut outs);
                    for (p, x) in xs.iter().enumerate() {
                        for r in 0..n {
                            let slow =
                                crate::kernels::portable::dot_f32(&rows[r * stride..r * stride + cols], x);
                            assert!(
                                same_bits(out[p][r], slow),
                                "{n}x{cols} at {stride}, input {p}, row {r}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn neon_fused_rows_equal_the_portable_fused_order() {
        use crate::kernels::portable::dot_fma_f32;
        // a partial step of four, whole steps, and both; eight rows a pass and the rows
        // left; whole and partial groups of four inputs
        for cols in [0usize, 1, 3, 4, 5, 15, 16, 17, 40, 131] {
            for rows in [0usize, 1, 2, 7, 8, 9, 17] {
                for inputs in [1usize, 2, 3, 4, 5, 9] {
                    let weight = awkward_floats(rows * cols, (cols * 31 + rows) as u32);
                    let xs: Vec<Vec<f32>> = (0..inputs)
                        .map(|p| awkward_floats(cols, 11 + p as u32 + cols as u32))
                        .collect();
                    let x_refs: Vec<&[f32]> = xs.iter().map(|x| x.as_slice()).collect();
                    let mut out = vec![vec![1.5f32; rows]; inputs];
                    let mut outs: Vec<&mut [f32]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
                    super::matmul_fma_f32(&weight, cols, &x_refs, &mut outs);
                    for (p, x) in xs.iter().enumerate() {
                        for r in 0..rows {
                            let want = dot_fma_f32(&weight[r * cols..(r + 1) * cols], x);
                            assert!(
                                same_bits(out[p][r], want),
                                "{rows}x{cols}, input {p} of {inputs}, row {r}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn neon_weighted_rows_add_in_the_scalar_order() {
        for n in [0usize, 1, 3, 4, 5, 15, 16, 17, 40] {
            for (keys, extra) in [(0usize, 0usize), (1, 0), (5, 3), (64, 1)] {
                let stride = n + extra;
                let rows = awkward_floats(keys * stride, (n * 17 + keys) as u32);
                let p = awkward_floats(keys, 3 + keys as u32);
                let start = awkward_floats(n, 99);
                let (mut fast, mut slow) = (start.clone(), start);
                super::axpys_strided_f32(&rows, stride, &p, &mut fast);
                for (k, &weight) in p.iter().enumerate() {
                    for (o, v) in slow.iter_mut().zip(&rows[k * stride..k * stride + n]) {
                        *o += weight * v;
                    }
                }
                for (e, (f, s)) in fast.iter().zip(&slow).enumerate() {
                    assert!(same_bits(*f, *s), "{keys} keys of {n}, element {e}");
                }
            }
        }
    }

    #[test]
    fn neon_int8_row_sums_equal_the_scalar_dot_per_row() {
        #[cfg(feature = "std")]
        let sdot = crate::kernels::features::has_dotprod();
        #[cfg(feature = "std")]
        if !sdot {
            crate::test_skips::skipped("SDOT: this CPU has no dot-product extension");
        }
        let mut rng = Rng::new(5);
        let mut next = || (rng.next_u64() >> 56) as i8;
        for cols in [1usize, 15, 16, 17, 33, 128, 250] {
            for n in [0usize, 1, 3, 4, 5, 11] {
                let mut values: Vec<i8> = (0..n * cols).map(|_| next()).collect();
                values.iter_mut().step_by(7).for_each(|v| *v = -128);
                let mut x: Vec<i8> = (0..cols).map(|_| next()).collect();
                x.iter_mut().step_by(3).for_each(|v| *v = -128);
                let slow: Vec<i32> = values
                    .chunks_exact(cols)
                    .map(|row| crate::kernels::portable::dot_i8(row, &x))
                    .collect();
                let mut fast = vec![0i32; n];
                super::row_sums_i8_smull(&values, cols, &x, &mut fast);
                assert_eq!(fast, slow, "SMULL, {n} rows of {cols}");
                #[cfg(feature = "std")]
                if sdot {
                    let mut fast = vec![0i32; n];
                    // SAFETY: the CPU has the dot-product extension, checked at the start.
                    unsafe { super::row_sums_i8_sdot(&values, cols, &x, &mut fast) };
                    assert_eq!(fast, slow, "SDOT, {n} rows of {cols}");
                }
            }
        }
    }
}

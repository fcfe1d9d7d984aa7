//! x86-64 f32 rows with AVX-512F for several inputs at once (a segment's positions), chosen at
//! run time (feature `std`), with the bits of the portable [`dot`](super::scalar::dot).
//!
//! The portable dot product sums a row in four accumulators, column `c` into `c % 4`,
//! multiplying and then adding, and finishes with `(a0 + a1) + (a2 + a3) + tail`. Here one
//! 512-bit register holds those four accumulators of one row for four inputs at once: lanes
//! `4p..4p + 4` are input `p`'s. Each step of four columns puts the four inputs' columns side by
//! side in one register (built once per step and shared by every row of the pass) and
//! broadcasts the row's four weights to all four lane groups straight from memory, so a loaded
//! weight meets four inputs and a built input meets sixteen rows: sixteen multiply-accumulates a
//! multiply and an add, every lane doing the portable additions in the portable order (no fused
//! multiply-add, which would round once instead of twice).

use core::arch::x86_64::*;

use super::rows_that_fit;

/// Whether this CPU has AVX-512F ([`dots_four_inputs`]).
#[inline]
pub fn has_avx512f() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

/// Inputs one register holds, four lanes each.
const INPUTS: usize = 4;

/// Rows a pass takes (sixteen chains of additions in flight, each built input meeting sixteen
/// rows).
const ROWS: usize = 16;

/// `outs[p][r] = rows[r * stride..][..cols] · xs[p]` for every input `p` and row `r`, `cols`
/// the shortest input's length, the rows of the shortest output: the bits of
/// [`scalar::dot`](super::scalar::dot) for each row and input. Inputs go four to a register (a last group of fewer
/// leaves its other lanes at zero and their sums unused); rows sixteen a pass, then one.
///
/// # Safety
/// The CPU must support AVX-512F ([`has_avx512f`]).
#[target_feature(enable = "avx512f")]
pub unsafe fn dots_four_inputs(rows: &[f32], stride: usize, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
    let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    let wanted = outs.iter().map(|o| o.len()).min().unwrap_or(0);
    let n = rows_that_fit(rows.len(), stride, cols, wanted);
    let inputs = xs.len().min(outs.len());
    // the inputs in groups of four; a block of rows meets every group before the next block is
    // read, so each row comes from memory once
    let groups = inputs.div_ceil(INPUTS);
    let group = |g: usize| -> ([&[f32]; INPUTS], usize) {
        let first = g * INPUTS;
        let count = INPUTS.min(inputs - first);
        // a last group of fewer repeats its first input in the other lanes (their sums unused)
        let input = |p: usize| &xs[first + if p < count { p } else { 0 }][..cols];
        (core::array::from_fn(input), count)
    };
    let mut r = 0;
    while r < n {
        let block = if r + ROWS <= n { ROWS } else { 1 };
        for g in 0..groups {
            let (inputs, count) = group(g);
            // SAFETY: rows `r..r + block` end at `(r + block - 1) * stride + cols <=
            // rows.len()` (`rows_that_fit` bounds `n`); the CPU has AVX-512F.
            let base = unsafe { rows.as_ptr().add(r * stride) };
            let outs = &mut outs[g * INPUTS..g * INPUTS + count];
            if block == ROWS {
                // SAFETY: as above.
                let sums = unsafe { pass::<ROWS>(base, stride, cols, &inputs, count) };
                for (p, out) in outs.iter_mut().enumerate() {
                    for (i, sums) in sums.iter().enumerate() {
                        out[r + i] = sums[p];
                    }
                }
            } else {
                // SAFETY: as above.
                let sums = unsafe { pass::<1>(base, stride, cols, &inputs, count) };
                for (p, out) in outs.iter_mut().enumerate() {
                    out[r] = sums[0][p];
                }
            }
        }
        r += block;
    }
}

/// `PASS` rows from `base` at `stride` against the four inputs of `group` (each `cols` long;
/// the first `count` are wanted): `sums[i][p]` = row `i` · input `p`, in the portable order.
///
/// # Safety
/// `PASS` rows of `cols` elements must be readable from `base` at `stride`; the CPU must
/// support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn pass<const PASS: usize>(
    base: *const f32,
    stride: usize,
    cols: usize,
    group: &[&[f32]; INPUTS],
    count: usize,
) -> [[f32; INPUTS]; PASS] {
    let body = cols / 4 * 4;
    let mut acc = [_mm512_setzero_ps(); PASS];
    let mut c = 0;
    while c < body {
        // the four inputs' columns c..c + 4, input p in lanes 4p..4p + 4
        // SAFETY: `c + 4 <= cols`: four readable columns in each input.
        let x = unsafe {
            let x = _mm512_castps128_ps512(_mm_loadu_ps(group[0].as_ptr().add(c)));
            let x = _mm512_insertf32x4::<1>(x, _mm_loadu_ps(group[1].as_ptr().add(c)));
            let x = _mm512_insertf32x4::<2>(x, _mm_loadu_ps(group[2].as_ptr().add(c)));
            _mm512_insertf32x4::<3>(x, _mm_loadu_ps(group[3].as_ptr().add(c)))
        };
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: row `i` has `cols` readable elements and `c + 4 <= cols`.
            let w = unsafe { _mm512_broadcast_f32x4(_mm_loadu_ps(base.add(i * stride + c))) };
            *acc = _mm512_add_ps(*acc, _mm512_mul_ps(w, x));
        }
        c += 4;
    }
    let mut sums = [[0.0f32; INPUTS]; PASS];
    for (i, (acc, sums)) in acc.iter().zip(sums.iter_mut()).enumerate() {
        let mut lanes = [0.0f32; 4 * INPUTS];
        // SAFETY: `lanes` has room for sixteen f32.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *acc) };
        for (p, sum) in sums.iter_mut().enumerate().take(count) {
            let a = &lanes[4 * p..4 * p + 4];
            let mut tail = 0.0;
            for (k, x) in group[p].iter().enumerate().skip(body) {
                // SAFETY: `k < cols`, inside row `i`.
                tail += unsafe { *base.add(i * stride + k) } * x;
            }
            *sum = (a[0] + a[1]) + (a[2] + a[3]) + tail;
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::super::scalar;

    #[test]
    fn avx512_rows_for_several_inputs_equal_the_scalar_dot() {
        if !super::has_avx512f() {
            eprintln!("SKIPPED: this CPU has no AVX-512F");
            return;
        }
        let mut state = 17u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            // values of many magnitudes, so that a different order of additions rounds apart
            let mantissa = (state >> 9) as f32 / (1u32 << 23) as f32 - 0.5;
            mantissa * [1.0f32, 1e-3, 1e3, 7.5][(state & 3) as usize]
        };
        for cols in [0usize, 1, 3, 4, 5, 17, 64, 130] {
            for n in [0usize, 1, 7, 16, 17, 33] {
                for inputs in [1usize, 3, 4, 5, 8, 11, 16] {
                    let stride = cols + 3;
                    let rows: Vec<f32> = (0..n * stride).map(|_| next()).collect();
                    let xs: Vec<Vec<f32>> =
                        (0..inputs).map(|_| (0..cols).map(|_| next()).collect()).collect();
                    let mut outs = vec![vec![f32::NAN; n]; inputs];
                    let x_refs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
                    let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                    // SAFETY: AVX-512F was detected above.
                    unsafe { super::dots_four_inputs(&rows, stride, &x_refs, &mut out_refs) };
                    for (p, (x, out)) in xs.iter().zip(&outs).enumerate() {
                        for (r, got) in out.iter().enumerate() {
                            let want = scalar::dot(&rows[r * stride..r * stride + cols], x);
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "row {r} of {n}, input {p} of {inputs}, {cols} columns"
                            );
                        }
                    }
                }
            }
        }
    }
}

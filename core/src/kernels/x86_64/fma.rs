//! The x86-64 kernel of the fused order ([`super::fma`]): AVX2 with FMA, chosen at run time
//! (feature `std`; AVX-512 CPUs run it too). Each row · input is one chain of fused
//! multiply-adds over the columns in order, so a register's lanes hold eight *chains*, and each
//! step is a broadcast and a multiply-add:
//!
//! - **Five inputs or more** (`inputs_in_lanes`): the inputs are first copied column by
//!   column, eight or sixteen to a row of the copy (once per call, which is cheap next to the
//!   product), so that column `c` of every input of a group is one or two registers. Each
//!   weight is broadcast and multiplies them: six rows against sixteen inputs a pass (twelve
//!   accumulators; a step loads two registers and six weights for twelve multiply-adds), or
//!   twelve rows against eight. The rows are read as they lie, each once per group of inputs,
//!   and from memory once per call.
//! - **Up to four inputs** (`rows_in_lanes`): eight rows a register. Four columns of eight
//!   rows are loaded and transposed in registers, then each input's column is broadcast.
//!
//! Lanes past the last input hold zeros and are not stored, so a group's size does not change
//! the sums of the others.

use core::arch::x86_64::*;

use crate::kernels::portable::dot_fma_f32;
use crate::kernels::portable::rows_that_fit;

/// Inputs from which [`matmul_fma_f32`] puts inputs in the lanes ([`inputs_in_lanes`]); fewer
/// take [`rows_in_lanes`], whose transposes cost less than lanes left empty.
const INPUTS_IN_LANES_LEAST: usize = 5;

std::thread_local! {
    /// [`inputs_in_lanes`]'s copy of a group's inputs, column by column, reused from call to
    /// call.
    static INPUT_COLUMNS: core::cell::RefCell<Vec<f32>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// `ys[p] = W xs[p]` in the fused order with AVX2 and FMA (see
/// [`kernels::matmul_fma_f32`](crate::kernels::matmul_fma_f32)): the inputs in groups of sixteen (a last group of five to
/// eight in one register), and a last one to four against eight rows a register.
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`has_avx2_fma`](crate::kernels::features::has_avx2_fma)).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn matmul_fma_f32(weight: &[f32], cols: usize, xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    let wanted = ys.iter().map(|y| y.len()).min().unwrap_or(0);
    let rows = rows_that_fit(weight.len(), cols, cols, wanted);
    let inputs = xs.len().min(ys.len());
    let mut p = 0;
    while inputs - p >= INPUTS_IN_LANES_LEAST {
        let count = (inputs - p).min(16);
        let (group, outs) = (&xs[p..p + count], &mut ys[p..p + count]);
        INPUT_COLUMNS.with_borrow_mut(|columns| {
            // SAFETY: the CPU has AVX2 and FMA (this function's contract).
            unsafe {
                if count > 8 {
                    inputs_in_lanes::<2, 6>(weight, rows, cols, group, outs, columns)
                } else {
                    inputs_in_lanes::<1, 12>(weight, rows, cols, group, outs, columns)
                }
            }
        });
        p += count;
    }
    let (xs, ys) = (&xs[p..inputs], &mut ys[p..inputs]);
    // SAFETY: the CPU has AVX2 and FMA (this function's contract).
    unsafe {
        match xs.len() {
            1 => rows_in_lanes::<1, 2>(weight, rows, cols, xs, ys),
            2 => rows_in_lanes::<2, 2>(weight, rows, cols, xs, ys),
            3 => rows_in_lanes::<3, 2>(weight, rows, cols, xs, ys),
            4 => rows_in_lanes::<4, 2>(weight, rows, cols, xs, ys),
            _ => {}
        }
    }
}

/// `ys[p] = W xs[p]` for a group of up to `8 * REGS` inputs in the lanes of `REGS` registers:
/// `columns` first holds the inputs column by column (`8 * REGS` floats a column, zeros past
/// the last input), then each pass meets `R` rows with it (`R * REGS` is twelve accumulators),
/// the last rows one a pass.
///
/// # Safety
/// `weight` holds `rows` rows of `cols`; every input holds `cols` and every output `rows`;
/// the CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn inputs_in_lanes<const REGS: usize, const R: usize>(
    weight: &[f32],
    rows: usize,
    cols: usize,
    xs: &[&[f32]],
    ys: &mut [&mut [f32]],
    columns: &mut Vec<f32>,
) {
    let width = 8 * REGS;
    let count = xs.len().min(width);
    columns.clear();
    columns.resize(cols * width, 0.0);
    for (lane, x) in xs.iter().take(count).enumerate() {
        for (column, &value) in columns.chunks_exact_mut(width).zip(&x[..cols]) {
            column[lane] = value;
        }
    }
    let mut r = 0;
    while r < rows {
        // SAFETY: rows `r..r + taken` lie in `weight` (`r + taken <= rows`), and `columns`
        // holds `cols` columns of `width`; the CPU has AVX2 and FMA.
        let taken = unsafe {
            let base = weight.as_ptr().add(r * cols);
            if r + R <= rows {
                store_lanes(&lanes_pass::<REGS, R>(base, cols, columns), r, ys)
            } else {
                store_lanes(&lanes_pass::<REGS, 1>(base, cols, columns), r, ys)
            }
        };
        r += taken;
    }
}

/// Output rows `first..` of each input from a pass's accumulators (`sums[i][j]` lane `l` is
/// row `first + i` of input `8j + l`); returns the rows stored.
#[inline]
#[target_feature(enable = "avx")]
fn store_lanes<const REGS: usize>(sums: &[[__m256; REGS]], first: usize, ys: &mut [&mut [f32]]) -> usize {
    for (i, registers) in sums.iter().enumerate() {
        let mut lanes = [[0.0f32; 8]; REGS];
        for (lanes, &register) in lanes.iter_mut().zip(registers) {
            // SAFETY: `lanes` has room for eight f32.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), register) };
        }
        for (y, &sum) in ys.iter_mut().zip(lanes.as_flattened()) {
            y[first + i] = sum;
        }
    }
    sums.len()
}

/// `R` rows from `base` (at a stride of `cols`) against the inputs in `columns`: per column,
/// the inputs' `REGS` registers are loaded once and each row's weight is broadcast into them.
///
/// # Safety
/// The rows must be readable from `base` and `columns` must hold `cols * 8 * REGS` floats;
/// the CPU must support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn lanes_pass<const REGS: usize, const R: usize>(
    base: *const f32,
    cols: usize,
    columns: &[f32],
) -> [[__m256; REGS]; R] {
    let mut acc = [[_mm256_setzero_ps(); REGS]; R];
    for (c, column) in columns.chunks_exact(8 * REGS).take(cols).enumerate() {
        // SAFETY: the column holds `8 * REGS` floats.
        let x: [__m256; REGS] =
            core::array::from_fn(|j| unsafe { _mm256_loadu_ps(column.as_ptr().add(8 * j)) });
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: column `c < cols` of row `i`, one of the pass's rows.
            let w = unsafe { _mm256_broadcast_ss(&*base.add(i * cols + c)) };
            for (acc, &x) in acc.iter_mut().zip(&x) {
                *acc = _mm256_fmadd_ps(w, x, *acc);
            }
        }
    }
    acc
}

/// `ys[p] = W xs[p]` for `P` (one to four) inputs, eight rows a register ([`row_blocks`]):
/// `B` blocks of eight rows a pass, so that `B * P` chains hide part of a multiply-add's
/// latency (two blocks: one input ran 1.6 times as fast as with one block, and three or four
/// blocks, whose row addresses no longer fit in the registers, ran slower), then one block a
/// pass, then the last rows (fewer than eight) by [`dot_fma_f32`].
///
/// # Safety
/// As [`inputs_in_lanes`]; `xs` and `ys` hold `P` each.
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_in_lanes<const P: usize, const B: usize>(
    weight: &[f32],
    rows: usize,
    cols: usize,
    xs: &[&[f32]],
    ys: &mut [&mut [f32]],
) {
    let xs: [&[f32]; P] = core::array::from_fn(|p| &xs[p][..cols]);
    let mut r = 0;
    while r + 8 <= rows {
        let blocks = if r + 8 * B <= rows { B } else { 1 };
        // SAFETY: rows `r..r + 8 * blocks` lie in `weight`; the CPU has AVX2 and FMA.
        let sums: [[__m256; P]; B] = unsafe {
            let base = weight.as_ptr().add(r * cols);
            if blocks == B {
                row_blocks::<P, B>(base, cols, xs)
            } else {
                let [one] = row_blocks::<P, 1>(base, cols, xs);
                core::array::from_fn(|_| one)
            }
        };
        for (b, sums) in sums.iter().enumerate().take(blocks) {
            let rows = r + 8 * b..r + 8 * b + 8;
            for (y, &sums) in ys.iter_mut().zip(sums) {
                // SAFETY: `y` holds the eight rows.
                unsafe { _mm256_storeu_ps(y[rows.clone()].as_mut_ptr(), sums) };
            }
        }
        r += 8 * blocks;
    }
    for r in r..rows {
        let row = &weight[r * cols..(r + 1) * cols];
        for (y, x) in ys.iter_mut().zip(xs) {
            y[r] = dot_fma_f32(row, x);
        }
    }
}

/// `B` blocks of eight rows from `base` (at a stride of `cols`) against `P` inputs: lane `i` of
/// `sums[b][p]` is row `8b + i` · input `p`. Each four columns of a block's rows are loaded as
/// four registers (rows `i` and `i + 4` in the two halves) and transposed within the halves
/// ([`transpose_quads`]), then each column meets every input's value, broadcast.
///
/// # Safety
/// `8 * B` rows of `cols` must be readable from `base`, `cols` from each input; the CPU must
/// support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_blocks<const P: usize, const B: usize>(
    base: *const f32,
    cols: usize,
    xs: [&[f32]; P],
) -> [[__m256; P]; B] {
    let mut acc = [[_mm256_setzero_ps(); P]; B];
    let body = cols / 4 * 4;
    let mut c = 0;
    while c < body {
        for (b, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `c + 4 <= cols`: four readable columns of each of the block's rows.
            let pairs: [__m256; 4] = core::array::from_fn(|i| unsafe {
                let row = base.add((8 * b + i) * cols + c);
                _mm256_loadu2_m128(row.add(4 * cols), row)
            });
            for (j, column) in transpose_quads(pairs).into_iter().enumerate() {
                for (acc, x) in acc.iter_mut().zip(xs) {
                    // SAFETY: `c + j < cols`, the input's length.
                    let value = unsafe { _mm256_broadcast_ss(x.get_unchecked(c + j)) };
                    *acc = _mm256_fmadd_ps(column, value, *acc);
                }
            }
        }
        c += 4;
    }
    for c in body..cols {
        for (b, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `c < cols`: inside each of the block's rows.
            let column: [f32; 8] = core::array::from_fn(|i| unsafe { *base.add((8 * b + i) * cols + c) });
            // SAFETY: `column` holds eight f32.
            let column = unsafe { _mm256_loadu_ps(column.as_ptr()) };
            for (acc, x) in acc.iter_mut().zip(xs) {
                *acc = _mm256_fmadd_ps(column, _mm256_set1_ps(x[c]), *acc);
            }
        }
    }
    acc
}

/// Two 4 × 4 transposes, one per 128-bit half: `pairs[i]` holds four columns of row `i` (low
/// half) and of row `i + 4` (high half); register `j` of the result holds column `j` of rows
/// 0–3 (low) and 4–7 (high), so lane `i` is row `i`. Eight shuffles for the sixteen lanes,
/// where a full 8 × 8 transpose of registers takes 24 for eight columns.
#[inline]
#[target_feature(enable = "avx")]
fn transpose_quads(pairs: [__m256; 4]) -> [__m256; 4] {
    // rows 0 and 1 interleaved: (r0c0, r1c0, r0c1, r1c1), then columns 2 and 3; rows 2 and 3
    let low_01 = _mm256_unpacklo_ps(pairs[0], pairs[1]);
    let high_01 = _mm256_unpackhi_ps(pairs[0], pairs[1]);
    let low_23 = _mm256_unpacklo_ps(pairs[2], pairs[3]);
    let high_23 = _mm256_unpackhi_ps(pairs[2], pairs[3]);
    [
        _mm256_shuffle_ps::<0x44>(low_01, low_23),
        _mm256_shuffle_ps::<0xee>(low_01, low_23),
        _mm256_shuffle_ps::<0x44>(high_01, high_23),
        _mm256_shuffle_ps::<0xee>(high_01, high_23),
    ]
}

#[cfg(test)]
mod tests {
    use crate::kernels::portable::dot_fma_f32;
    use crate::rng::Rng;

    /// A fused-order kernel: `(weight, cols, xs, ys)`.
    type Kernel = unsafe fn(&[f32], usize, &[&[f32]], &mut [&mut [f32]]);

    /// Runs `kernel` on odd shapes and values of many magnitudes against [`dot_fma_f32`].
    fn equals_the_portable_order(kernel: Kernel) {
        // values of many magnitudes: a mantissa in [-0.5, 0.5) times 1, 1e-3, 1e3 or 7.5
        let mut rng = Rng::new(29);
        let mut next = || {
            let state = (rng.next_u64() >> 32) as u32;
            let mantissa = (state >> 9) as f32 / (1u32 << 23) as f32 - 0.5;
            mantissa * [1.0f32, 1e-3, 1e3, 7.5][(state & 3) as usize]
        };
        // every kernel and its edges: one to four inputs (eight rows a register, then the
        // rows left), five to eight and nine to sixteen in the lanes (twelve or six rows a
        // pass, then one), and several groups; columns in and past the eights
        // (under Miri, which checks every load and store, a few of each: every kernel and a tail)
        let miri = cfg!(miri);
        let all_cols: &[usize] = &[0, 1, 7, 8, 9, 15, 16, 17, 31, 48, 130, 256, 300, 529];
        let all_rows: &[usize] = &[0, 1, 5, 6, 7, 8, 12, 13, 25];
        let all_inputs: &[usize] = &[1, 2, 3, 4, 5, 8, 9, 16, 17, 67];
        let (cols_list, rows_list, inputs_list): (&[usize], &[usize], &[usize]) = if miri {
            (&[0, 1, 9, 33], &[0, 1, 7, 13], &[1, 4, 5, 17])
        } else {
            (all_cols, all_rows, all_inputs)
        };
        for &cols in cols_list {
            for &rows in rows_list {
                for &inputs in inputs_list {
                    let weight: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
                    // each input one element into its buffer: off any alignment
                    let buffers: Vec<Vec<f32>> = (0..inputs)
                        .map(|_| (0..=cols).map(|_| next()).collect())
                        .collect();
                    let xs: Vec<&[f32]> = buffers.iter().map(|x| &x[1..]).collect();
                    let mut ys = vec![vec![f32::NAN; rows]; inputs];
                    let x_refs: Vec<&[f32]> = xs.clone();
                    let mut y_refs: Vec<&mut [f32]> = ys.iter_mut().map(|y| &mut y[..]).collect();
                    // SAFETY: the caller checked the CPU.
                    unsafe { kernel(&weight, cols, &x_refs, &mut y_refs) };
                    for (p, (x, y)) in xs.iter().zip(&ys).enumerate() {
                        for (r, got) in y.iter().enumerate() {
                            let want = dot_fma_f32(&weight[r * cols..(r + 1) * cols], x);
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "row {r} of {rows}, input {p} of {inputs}, {cols} columns"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn avx2_fused_rows_equal_the_portable_order() {
        if !crate::kernels::features::has_avx2_fma() {
            crate::test_skips::skipped("this CPU has no AVX2 with FMA");
            return;
        }
        equals_the_portable_order(super::matmul_fma_f32);
    }
}

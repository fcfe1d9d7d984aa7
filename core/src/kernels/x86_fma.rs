//! x86-64 kernels of the fused order ([`super::fma`]): AVX-512F (one register is a row's
//! sixteen lanes) and AVX2 with FMA (two registers), chosen at run time (feature `std`).
//!
//! Both read the rows in blocks of about 256 KB; a block meets every group of inputs
//! before the next is read, so a row comes from memory once however many positions a segment
//! has, and a group's inputs stay in the first-level cache while the block's rows pass them.
//! Inputs that start off a 64-byte line are first copied onto lines (once per call), so that
//! no register load straddles two lines.
//! The last partial step of sixteen columns loads zeros past the row's end, and
//! `fma(0, 0, lane)` is `lane` (a lane never holds `-0.0`: it starts at `+0.0`, and an exact
//! zero sum rounds to `+0.0`), so it adds nothing.

use core::arch::x86_64::*;

use super::fma::LANES;
use super::rows_that_fit;

/// Bytes of weight rows a block holds (a quarter of a 1 MB second-level cache, an eighth of a
/// 2 MB one).
const BLOCK_BYTES: usize = 256 * 1024;

/// Whether this CPU has AVX2 and FMA ([`rows_avx2`]).
#[inline]
pub fn has_avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// Rows a block of about [`BLOCK_BYTES`] holds, a multiple of `pass`.
fn block_rows(cols: usize, pass: usize) -> usize {
    (BLOCK_BYTES / (cols * 4).max(1)).max(pass) / pass * pass
}

/// The loop both kernels share: rows in blocks, each block against every group of `inputs`
/// inputs, `ROWS` rows a pass then one. `pass(base, xs, count, rows)` returns `sums[i][p]` for
/// the `rows` (`ROWS` or 1) rows from `base` and the first `count` inputs of `xs`.
#[inline(always)]
fn blocked<const ROWS: usize, const INPUTS: usize>(
    weight: &[f32],
    cols: usize,
    xs: &[&[f32]],
    ys: &mut [&mut [f32]],
    mut pass: impl FnMut(*const f32, &[*const f32; INPUTS], usize, usize) -> [[f32; INPUTS]; ROWS],
) {
    let wanted = ys.iter().map(|y| y.len()).min().unwrap_or(0);
    let rows = rows_that_fit(weight.len(), cols, cols, wanted);
    let inputs = xs.len().min(ys.len());
    let block = block_rows(cols, ROWS);
    let mut start = 0;
    while start < rows {
        let end = (start + block).min(rows);
        for first in (0..inputs).step_by(INPUTS) {
            let count = INPUTS.min(inputs - first);
            // a last group of fewer inputs points its other slots at its first (unused)
            let group: [*const f32; INPUTS] =
                core::array::from_fn(|p| xs[first + if p < count { p } else { 0 }].as_ptr());
            let mut r = start;
            while r < end {
                let take = if r + ROWS <= end { ROWS } else { 1 };
                // SAFETY: `r < rows`, and `rows_that_fit` bounds `rows` so that row `r + take -
                // 1` ends inside `weight`.
                let base = unsafe { weight.as_ptr().add(r * cols) };
                let sums = pass(base, &group, count, take);
                for (i, sums) in sums.iter().enumerate().take(take) {
                    for (p, sum) in sums.iter().enumerate().take(count) {
                        ys[first + p][r + i] = *sum;
                    }
                }
                r += take;
            }
        }
        start = end;
    }
}

/// Inputs an AVX-512 pass takes (four rows times four inputs: 16 accumulators of 32 registers,
/// with the four inputs' columns and a row's weights; each step's loads take half the time of
/// its multiply-adds).
const INPUTS_512: usize = 4;

/// `ys[p] = W xs[p]` in the fused order with AVX-512F (see [`super::fma::matmul_fma_rows`]).
///
/// # Safety
/// The CPU must support AVX-512F ([`has_avx512f`](super::avx512::has_avx512f)).
#[target_feature(enable = "avx512f")]
pub unsafe fn rows_avx512(weight: &[f32], cols: usize, xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    on_lines(xs, cols, INPUTS_512, |xs| {
        // SAFETY: the CPU has AVX-512F (this function's contract).
        unsafe { rows_avx512_from(weight, cols, xs, ys) }
    })
}

/// Bytes of a cache line, and of an AVX-512 register.
const LINE_BYTES: usize = 64;

/// Most inputs [`on_lines`] copies (a pass of the session's linear layers).
const MAX_COPIED_INPUTS: usize = super::MAX_POSITIONS_PER_PASS;

std::thread_local! {
    /// [`on_lines`]'s copies, reused from call to call.
    static ALIGNED_INPUTS: core::cell::RefCell<Vec<f32>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// `kernel(xs)`, or, when an input starts off a 64-byte line and there are from `least` to 64
/// of them, `kernel` on copies of their first `cols` columns that each start on a line: a
/// kernel's register loads then never straddle two lines (which costs a second load). The
/// copies are made once per call and hold the same values, so the sums are the same.
#[inline]
fn on_lines<R>(xs: &[&[f32]], cols: usize, least: usize, kernel: impl FnOnce(&[&[f32]]) -> R) -> R {
    let misaligned = xs
        .iter()
        .any(|x| !(x.as_ptr() as usize).is_multiple_of(LINE_BYTES));
    if !(misaligned && cols > 0 && (least..=MAX_COPIED_INPUTS).contains(&xs.len())) {
        return kernel(xs);
    }
    ALIGNED_INPUTS.with_borrow_mut(|buffer| {
        // each copy a whole number of lines, the first on a line boundary
        let stride = cols.div_ceil(LANES) * LANES;
        // (every column a kernel reads is written below; the rest is never read)
        let needed = xs.len() * stride + LANES;
        if buffer.len() < needed {
            buffer.resize(needed, 0.0);
        }
        let skip = buffer.as_ptr().align_offset(LINE_BYTES).min(LANES);
        let copied = &mut buffer[skip..skip + xs.len() * stride];
        for (x, copy) in xs.iter().zip(copied.chunks_exact_mut(stride)) {
            copy[..cols].copy_from_slice(&x[..cols]);
        }
        let copied: &[f32] = copied;
        let aligned: [&[f32]; MAX_COPIED_INPUTS] =
            core::array::from_fn(|p| copied.get(p * stride..p * stride + cols).unwrap_or(&[]));
        kernel(&aligned[..xs.len()])
    })
}

/// [`rows_avx512`] on inputs as they are.
///
/// # Safety
/// As [`rows_avx512`].
#[target_feature(enable = "avx512f")]
unsafe fn rows_avx512_from(weight: &[f32], cols: usize, xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    blocked::<4, INPUTS_512>(weight, cols, xs, ys, |base, group, count, rows| {
        // SAFETY: `blocked` hands `rows` readable rows of `cols` from `base` and inputs of at
        // least `cols`; the CPU has AVX-512F (this function's contract).
        unsafe {
            match (rows, count) {
                (4, 1) => widen(pass_512::<4, 1>(base, cols, group)),
                (4, 2) => widen(pass_512::<4, 2>(base, cols, group)),
                (4, 3) => widen(pass_512::<4, 3>(base, cols, group)),
                (4, _) => widen(pass_512::<4, INPUTS_512>(base, cols, group)),
                (_, 1) => widen(pass_512::<1, 1>(base, cols, group)),
                _ => widen(pass_512::<1, INPUTS_512>(base, cols, group)),
            }
        }
    });
}

/// `sums` of `R` rows and `P` inputs in the `[[f32; INPUTS]; ROWS]` the loop takes.
#[inline(always)]
fn widen<const R: usize, const P: usize, const ROWS: usize, const INPUTS: usize>(
    sums: [[f32; P]; R],
) -> [[f32; INPUTS]; ROWS] {
    let mut out = [[0.0; INPUTS]; ROWS];
    for (o, s) in out.iter_mut().zip(&sums) {
        o[..P].copy_from_slice(s);
    }
    out
}

/// The lanes of `v` added as the fused order's tree: `l + (l + 8)`, `l + (l + 4)`, ...
#[inline]
#[target_feature(enable = "avx512f")]
fn add_lanes_512(v: __m512) -> f32 {
    let low = _mm512_castps512_ps256(v);
    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    add_lanes_256(_mm256_add_ps(low, high))
}

/// The eight lanes `s8` (lane `l` is `l + (l + 8)`) added as the rest of the tree.
#[inline]
#[target_feature(enable = "avx")]
fn add_lanes_256(s8: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2)))
}

/// `R` rows from `base` (each `cols` long, at a stride of `cols`) against the first `P` inputs
/// of `xs`: `sums[i][p]` in the fused order.
///
/// # Safety
/// `R` rows of `cols` elements must be readable from `base`, `cols` from each input; the CPU
/// must support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn pass_512<const R: usize, const P: usize>(
    base: *const f32,
    cols: usize,
    xs: &[*const f32; INPUTS_512],
) -> [[f32; P]; R] {
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    let body = cols / LANES * LANES;
    let mut c = 0;
    while c < body {
        let mut x = [_mm512_setzero_ps(); P];
        for (x, &input) in x.iter_mut().zip(xs) {
            // SAFETY: `c + 16 <= cols`: sixteen readable columns of the input.
            *x = unsafe { _mm512_loadu_ps(input.add(c)) };
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `c + 16 <= cols`, inside row `i`.
            let w = unsafe { _mm512_loadu_ps(base.add(i * cols + c)) };
            for (acc, &x) in acc.iter_mut().zip(&x) {
                *acc = _mm512_fmadd_ps(w, x, *acc);
            }
        }
        c += LANES;
    }
    if c < cols {
        // the columns left, zeros past them
        let mask: __mmask16 = (1u16 << (cols - c)) - 1;
        let mut x = [_mm512_setzero_ps(); P];
        for (x, &input) in x.iter_mut().zip(xs) {
            // SAFETY: the mask's lanes are columns `c..cols` of an input of `cols`.
            *x = unsafe { _mm512_maskz_loadu_ps(mask, input.add(c)) };
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: the mask's lanes are columns `c..cols` of row `i`.
            let w = unsafe { _mm512_maskz_loadu_ps(mask, base.add(i * cols + c)) };
            for (acc, &x) in acc.iter_mut().zip(&x) {
                *acc = _mm512_fmadd_ps(w, x, *acc);
            }
        }
    }
    let mut sums = [[0.0f32; P]; R];
    if R == 4 && P == 4 {
        // all sixteen trees at once: lane `4p + i` of the result is row `i`, input `p`
        let mut lanes = [0.0f32; LANES];
        let flat: [__m512; LANES] = core::array::from_fn(|k| acc[k / P][k % P]);
        // SAFETY: `lanes` has room for sixteen f32.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), add_lanes_of_sixteen(flat)) };
        for (i, sums) in sums.iter_mut().enumerate() {
            for (p, sum) in sums.iter_mut().enumerate() {
                *sum = lanes[4 * p + i];
            }
        }
        return sums;
    }
    for (sums, acc) in sums.iter_mut().zip(&acc) {
        for (sum, &acc) in sums.iter_mut().zip(acc) {
            *sum = add_lanes_512(acc);
        }
    }
    sums
}

/// The fused order's tree for sixteen registers `a[k]` at once, each level adding the pairs
/// [`add_lanes_512`] adds, two registers' worth per instruction: lane `4q + j` of the result
/// is the sum of `a[4j + q]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn add_lanes_of_sixteen(a: [__m512; LANES]) -> __m512 {
    // `l + (l + 8)`: lanes 0–7 of `s8[j]` are `a[2j]`'s, lanes 8–15 `a[2j + 1]`'s
    let s8: [__m512; 8] = core::array::from_fn(|j| {
        let (x, y) = (a[2 * j], a[2 * j + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(x, y),
            _mm512_shuffle_f32x4::<0xee>(x, y),
        )
    });
    // `l + (l + 4)`: quarter `q` of `s4[m]` is `a[4m + q]`'s
    let s4: [__m512; 4] = core::array::from_fn(|m| {
        let (x, y) = (s8[2 * m], s8[2 * m + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(x, y),
            _mm512_shuffle_f32x4::<0xdd>(x, y),
        )
    });
    // `l + (l + 2)`: quarter `q` of `s2[n]` is `a[8n + q]`'s two lanes, then `a[8n + 4 + q]`'s
    let s2: [__m512; 2] = core::array::from_fn(|n| {
        let (x, y) = (_mm512_castps_pd(s4[2 * n]), _mm512_castps_pd(s4[2 * n + 1]));
        _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
            _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)),
        )
    });
    // `l + (l + 1)`: quarter `q` is `a[q]`, `a[4 + q]`, `a[8 + q]`, `a[12 + q]`
    _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(s2[0], s2[1]),
        _mm512_shuffle_ps::<0xdd>(s2[0], s2[1]),
    )
}

/// Inputs an AVX2 pass takes (three rows times two inputs times two registers: 12
/// accumulators of 16 registers; a step takes one half of the lanes at a time, so each
/// register of weights is loaded once for both inputs; three rows ran 8% faster than two at
/// the WikiText-103 shape).
const INPUTS_256: usize = 2;

/// Rows an AVX2 pass takes.
const ROWS_256: usize = 3;

/// `ys[p] = W xs[p]` in the fused order with AVX2 and FMA (see
/// [`super::fma::matmul_fma_rows`]).
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`has_avx2_fma`]).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn rows_avx2(weight: &[f32], cols: usize, xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    on_lines(xs, cols, INPUTS_256, |xs| {
        // SAFETY: the CPU has AVX2 and FMA (this function's contract).
        unsafe { rows_avx2_from(weight, cols, xs, ys) }
    })
}

/// [`rows_avx2`] on inputs as they are.
///
/// # Safety
/// As [`rows_avx2`].
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2_from(weight: &[f32], cols: usize, xs: &[&[f32]], ys: &mut [&mut [f32]]) {
    blocked::<ROWS_256, INPUTS_256>(weight, cols, xs, ys, |base, group, count, rows| {
        // SAFETY: as in `rows_avx512`; the CPU has AVX2 and FMA.
        unsafe {
            match (rows, count) {
                (ROWS_256, 1) => widen(pass_256::<ROWS_256, 1>(base, cols, group)),
                (ROWS_256, _) => widen(pass_256::<ROWS_256, 2>(base, cols, group)),
                (_, 1) => widen(pass_256::<1, 1>(base, cols, group)),
                _ => widen(pass_256::<1, 2>(base, cols, group)),
            }
        }
    });
}

/// Eight `i32` lane masks, all set for the lanes below `left`.
#[inline]
#[target_feature(enable = "avx2")]
fn mask_256(left: usize) -> __m256i {
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(left.min(8) as i32), lanes)
}

/// [`pass_512`] with lanes 0–7 and 8–15 in two 256-bit registers.
///
/// # Safety
/// As [`pass_512`]'s; the CPU must support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn pass_256<const R: usize, const P: usize>(
    base: *const f32,
    cols: usize,
    xs: &[*const f32; INPUTS_256],
) -> [[f32; P]; R] {
    let mut acc = [[[_mm256_setzero_ps(); 2]; P]; R];
    let mut c = 0;
    let body = cols / LANES * LANES;
    while c < body {
        // one half of the sixteen lanes at a time: P inputs' registers and one row's at a time
        // (12 accumulators, two inputs, one row: 15 registers), each row's register loaded
        // once for all the inputs
        for half in 0..2 {
            let at = c + 8 * half;
            let mut x = [_mm256_setzero_ps(); P];
            for (x, &input) in x.iter_mut().zip(xs) {
                // SAFETY: `at + 8 <= cols`.
                *x = unsafe { _mm256_loadu_ps(input.add(at)) };
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `at + 8 <= cols`, inside row `i`.
                let w = unsafe { _mm256_loadu_ps(base.add(i * cols + at)) };
                for (acc, x) in acc.iter_mut().zip(&x) {
                    acc[half] = _mm256_fmadd_ps(w, *x, acc[half]);
                }
            }
        }
        c += LANES;
    }
    if c < cols {
        let left = cols - c;
        let masks = [mask_256(left), mask_256(left.saturating_sub(8))];
        let mut x = [[_mm256_setzero_ps(); 2]; P];
        for (x, &input) in x.iter_mut().zip(xs) {
            for half in 0..2 {
                // SAFETY: the mask's lanes are columns `c + 8 * half..cols` of the input.
                x[half] = unsafe { _mm256_maskload_ps(input.add(c + 8 * half), masks[half]) };
            }
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            let mut w = [_mm256_setzero_ps(); 2];
            for (half, w) in w.iter_mut().enumerate() {
                // SAFETY: the mask's lanes are columns `c + 8 * half..cols` of row `i`.
                *w = unsafe { _mm256_maskload_ps(base.add(i * cols + c + 8 * half), masks[half]) };
            }
            for (acc, x) in acc.iter_mut().zip(&x) {
                acc[0] = _mm256_fmadd_ps(w[0], x[0], acc[0]);
                acc[1] = _mm256_fmadd_ps(w[1], x[1], acc[1]);
            }
        }
    }
    let mut sums = [[0.0f32; P]; R];
    for (sums, acc) in sums.iter_mut().zip(&acc) {
        for (sum, acc) in sums.iter_mut().zip(acc) {
            *sum = add_lanes_256(_mm256_add_ps(acc[0], acc[1]));
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::super::fma::dot_fma;

    /// A fused-order kernel: `(weight, cols, xs, ys)`.
    type Kernel = unsafe fn(&[f32], usize, &[&[f32]], &mut [&mut [f32]]);

    /// Runs `kernel` on odd shapes and values of many magnitudes against [`dot_fma`].
    fn equals_the_portable_order(kernel: Kernel) {
        let mut state = 29u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let mantissa = (state >> 9) as f32 / (1u32 << 23) as f32 - 0.5;
            mantissa * [1.0f32, 1e-3, 1e3, 7.5][(state & 3) as usize]
        };
        // wide rows and many inputs: several blocks of rows, many groups of inputs
        for cols in [0usize, 1, 7, 8, 9, 15, 16, 17, 31, 48, 130, 256, 300, 529] {
            for rows in [0usize, 1, 3, 4, 5, 9, 13] {
                for inputs in [1usize, 2, 3, 6, 7, 13, 67] {
                    let weight: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
                    // each input one element into its buffer: never on a line boundary, so
                    // that the kernels copy them to lines (from a group's inputs to 64)
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
                            let want = dot_fma(&weight[r * cols..(r + 1) * cols], x);
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
    fn avx512_fused_rows_equal_the_portable_order() {
        if !super::super::avx512::has_avx512f() {
            eprintln!("SKIPPED: this CPU has no AVX-512F");
            return;
        }
        equals_the_portable_order(super::rows_avx512);
    }

    #[test]
    fn avx2_fused_rows_equal_the_portable_order() {
        if !super::has_avx2_fma() {
            eprintln!("SKIPPED: this CPU has no AVX2 with FMA");
            return;
        }
        equals_the_portable_order(super::rows_avx2);
    }
}

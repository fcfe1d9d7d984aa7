//! x86-64 kernels with AVX, AVX2 and F16C, chosen at run time (feature `std`: the detection
//! needs the standard library). Each gives the scalar kernels' bits: integer sums are exact in
//! any order, and the float kernels keep every row's (or element's) own order of rounding:
//!
//! - **f32 and f16 rows** ([`dots_strided`]): the portable [`dot`](crate::kernels::portable::dot_f32) sums a row in
//!   four accumulators, column `c` into accumulator `c % 4`, multiplying and then adding (two
//!   roundings, no fused multiply-add), and finishes with `(a0 + a1) + (a2 + a3) + tail`. Here
//!   the four accumulators of a row are four lanes, and one 256-bit register holds two rows;
//!   sixteen rows (eight registers) go per pass over the input, so eight independent chains of
//!   additions keep the adders busy, each lane doing exactly the scalar additions in the scalar
//!   order. f16 weights are widened by `VCVTPH2PS` (exact) on the way in. With two inputs
//!   ([`dots_strided_each`], two positions of a segment) each register of weights meets both, eight rows
//!   per pass into two sets of accumulators. With four inputs or more each block of eight rows
//!   is first copied as those registers (f16 widened once, not once per pass), which every pair
//!   of inputs then reads with one load a register; on rows of 512 columns or more, blocks of six
//!   rows meet four inputs a step instead (`avx_blocks.rs`: one register holds a row's four
//!   accumulators for two inputs).
//! - **Weighted rows** ([`axpys_strided`]): `out[e] += p[k] * rows[k][e]` in `k` order per element,
//!   eight elements a register.
//! - **int8 rows** ([`row_sums_i8`], [`row_sums_pair_i8`]): four weight rows per pass share the
//!   widened input (two inputs share each widened weight in the pair kernel); the input is
//!   quantized eight columns a step ([`quantize_i8`]). CPUs with VNNI take
//!   [`vnni`](super::vnni)'s kernels instead, 32 columns an instruction.
//! - **The softmax's `exp`** ([`softmax_exp8`]): `libm`'s `expf`, step for step, eight lanes.

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

use half::f16;

use super::row_element::{row_tail, RowElement};
use crate::kernels::portable::{self, rows_that_fit};

/// [`portable::vecmat_sums_i8`] compiled for AVX2 (the compiler vectorises its loop).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn vecmat_sums_i8(xq: &[i8], values: &[i8], cols: usize, acc: &mut [i32]) {
    portable::vecmat_sums_i8(xq, values, cols, acc);
}

/// [`portable::vecmat_sums_each_i8`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn vecmat_sums_each_i8(
    xq: &[&[i8]; portable::VECMAT_INPUTS],
    values: &[i8],
    cols: usize,
    sums: &mut [&mut [i32]; portable::VECMAT_INPUTS],
) {
    portable::vecmat_sums_each_i8(xq, values, cols, sums);
}

/// `sum a[i] * b[i]` for `a` and `b` of one length, f16 weights widened by `VCVTPH2PS` (exact):
/// four lanes that are the portable kernel's four accumulators, each product rounded and then
/// added as there, so the bits equal `portable::dot_f16`'s.
///
/// # Safety
/// The CPU must support F16C ([`has_f16c`](crate::kernels::features::has_f16c)).
#[target_feature(enable = "f16c")]
pub unsafe fn dot_f16(a: &[f16], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let body = n / 4 * 4;
    let mut acc = _mm_setzero_ps();
    for (ca, cb) in a[..body].chunks_exact(4).zip(b[..body].chunks_exact(4)) {
        // SAFETY: each chunk is four readable f16 (8 bytes) and four f32; the loads have no
        // alignment requirement.
        let (w, x) = unsafe {
            (
                _mm_cvtph_ps(_mm_loadl_epi64(ca.as_ptr().cast())),
                _mm_loadu_ps(cb.as_ptr()),
            )
        };
        acc = _mm_add_ps(acc, _mm_mul_ps(w, x));
    }
    let mut lanes = [0.0f32; 4];
    // SAFETY: `lanes` has room for four f32.
    unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), acc) };
    let mut tail = 0.0;
    for (w, x) in a[body..n].iter().zip(&b[body..n]) {
        tail += portable::f16_to_f32(*w) * x;
    }
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail
}

/// `sum a[i] * b[i]` in i32, 16 products per step; equal to `portable::dot_i8`.
///
/// # Safety
/// The CPU must support AVX2 ([`has_avx2`](crate::kernels::features::has_avx2)).
#[target_feature(enable = "avx2")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let body = n / 16 * 16;
    let mut acc: __m256i = _mm256_setzero_si256();
    for (ca, cb) in a[..body].chunks_exact(16).zip(b[..body].chunks_exact(16)) {
        // SAFETY: each chunk is 16 readable bytes; `loadu` has no alignment requirement.
        let (va, vb) = unsafe {
            (
                _mm_loadu_si128(ca.as_ptr().cast()),
                _mm_loadu_si128(cb.as_ptr().cast()),
            )
        };
        // widen to i16 (exact, -127..=127 or -128), multiply pairs and add them to i32 lanes
        let products = _mm256_madd_epi16(_mm256_cvtepi8_epi16(va), _mm256_cvtepi8_epi16(vb));
        acc = _mm256_add_epi32(acc, products);
    }
    let halves = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256::<1>(acc));
    let pairs = _mm_add_epi32(halves, _mm_shuffle_epi32::<0b01_00_11_10>(halves));
    let total = _mm_add_epi32(pairs, _mm_shuffle_epi32::<0b10_11_00_01>(pairs));
    _mm_cvtsi128_si32(total) + portable::dot_i8(&a[body..n], &b[body..n])
}

/// `out[r] = rows[r * stride..][..x.len()] · x` for each `r < out.len()`, with the bits of
/// `portable::dot_f32` (f32 rows) or `portable::dot_f16` (f16 rows) for each row: sixteen rows per
/// pass, then two, then one. Rows past the end of `rows` are left as they are, as the portable
/// kernels' `zip` leaves them.
///
/// # Safety
/// The CPU must support AVX and F16C ([`has_avx_f16c`](crate::kernels::features::has_avx_f16c)).
#[target_feature(enable = "avx,f16c")]
pub unsafe fn dots_strided<T: RowElement>(rows: &[T], stride: usize, x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    let n = rows_that_fit(rows.len(), stride, cols, out.len());
    let mut r = 0;
    while r + 16 <= n {
        // SAFETY: rows `r..r + 16` end at `(r + 15) * stride + cols <= rows.len()`, as
        // `r + 16 <= n` and `rows_that_fit` bounds `n`; the CPU has AVX and F16C.
        unsafe { dots_pairs::<T, 8>(rows.as_ptr().add(r * stride), stride, x, &mut out[r..r + 16]) };
        r += 16;
    }
    while r + 2 <= n {
        // SAFETY: as above, for rows `r..r + 2`.
        unsafe { dots_pairs::<T, 1>(rows.as_ptr().add(r * stride), stride, x, &mut out[r..r + 2]) };
        r += 2;
    }
    if r < n {
        // SAFETY: as above, for row `r`.
        out[r] = unsafe { dot_one(rows.as_ptr().add(r * stride), x) };
    }
}

/// `outs[p][r] = rows[r * stride..][..cols] · xs[p]` for every input `p`, `cols` the inputs'
/// length: [`dots_strided`] for each input, with the bits of each. Eight rows at a time meet every
/// input, two inputs per pass (each loaded weight multiplies both), so each block of rows is
/// read from memory once for all the inputs (then from the first-level cache); four inputs or
/// more on rows of 512 columns or more take the block kernel (`avx_blocks.rs`), six rows against
/// four inputs a step. The rows of the shortest output are computed.
///
/// # Safety
/// The CPU must support AVX and F16C ([`has_avx_f16c`](crate::kernels::features::has_avx_f16c)).
#[target_feature(enable = "avx,f16c")]
pub unsafe fn dots_strided_each<T: RowElement>(
    rows: &[T],
    stride: usize,
    xs: &[&[f32]],
    outs: &mut [&mut [f32]],
) {
    let cols = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    let wanted = outs.iter().map(|o| o.len()).min().unwrap_or(0);
    let n = rows_that_fit(rows.len(), stride, cols, wanted);
    let inputs = xs.len().min(outs.len());
    let mut r = 0;
    if takes_blocks(inputs, cols) {
        // SAFETY: the caller's contract (AVX and F16C), with `n` bounded as below; `cols >= 4`.
        r = unsafe {
            super::avx_blocks::dots_strided_each_in_blocks(rows, stride, n, &xs[..inputs], outs, cols)
        };
    } else if inputs >= PACK_LEAST_INPUTS && cols >= 4 {
        r = PACKED_ROWS.with_borrow_mut(|packed| {
            // SAFETY: the caller's contract (AVX and F16C), with `n` bounded as below.
            unsafe { dots_each_packed(rows, stride, n, &xs[..inputs], outs, cols, packed) }
        });
    }
    while r + 8 <= n {
        // SAFETY: rows `r..r + 8` end at `(r + 7) * stride + cols <= rows.len()`, as
        // `r + 8 <= n` and `rows_that_fit` bounds `n`: the offset is inside `rows`.
        let base = unsafe { rows.as_ptr().add(r * stride) };
        let mut p = 0;
        while p + 2 <= inputs {
            let (head, tail) = outs.split_at_mut(p + 1);
            let pair = [&xs[p][..cols], &xs[p + 1][..cols]];
            // SAFETY: eight rows of `cols` are readable from `base` (above); the CPU has AVX
            // and F16C.
            unsafe {
                dots_pairs_two::<T, 4>(
                    base,
                    stride,
                    pair,
                    [&mut head[p][r..r + 8], &mut tail[0][r..r + 8]],
                )
            };
            p += 2;
        }
        if p < inputs {
            // SAFETY: as for the pairs.
            unsafe { dots_pairs::<T, 4>(base, stride, &xs[p][..cols], &mut outs[p][r..r + 8]) };
        }
        r += 8;
    }
    while r + 2 <= n {
        for (x, out) in xs.iter().zip(outs.iter_mut()) {
            // SAFETY: as above, for rows `r..r + 2`.
            unsafe {
                dots_pairs::<T, 1>(
                    rows.as_ptr().add(r * stride),
                    stride,
                    &x[..cols],
                    &mut out[r..r + 2],
                )
            };
        }
        r += 2;
    }
    if r < n {
        for (x, out) in xs.iter().zip(outs.iter_mut()) {
            // SAFETY: as above, for row `r`.
            out[r] = unsafe { dot_one(rows.as_ptr().add(r * stride), &x[..cols]) };
        }
    }
}

/// Whether [`dots_strided_each`] takes the block kernel (`avx_blocks.rs`) for `inputs` inputs of `cols`
/// columns.
#[inline]
pub fn takes_blocks(inputs: usize, cols: usize) -> bool {
    inputs >= BLOCK_LEAST_INPUTS && cols >= BLOCK_LEAST_COLS
}

/// Inputs from which [`dots_strided_each`] takes the blocks' kernel (`avx_blocks.rs`): six rows meet four inputs a step.
const BLOCK_LEAST_INPUTS: usize = 4;

/// Columns from which [`dots_strided_each`] takes the blocks' kernel (`avx_blocks.rs`): on shorter rows (the bundled
/// model's 128 and 256 columns, the attention's cached keys) the panel copy and each block's
/// finish cost more than the block saves (measured with 4 to 128 inputs).
const BLOCK_LEAST_COLS: usize = 512;

/// Inputs from which [`dots_strided_each`] first copies each block of eight rows into
/// [`PACKED_ROWS`]: a copy costs about one pass of the block, and saves every later pass the
/// second load and the lane insertion (or the f16 widening) of each register of two rows.
const PACK_LEAST_INPUTS: usize = 4;

std::thread_local! {
    /// A block of eight rows as [`dots_each_packed`] reads them, reused from call to call.
    static PACKED_ROWS: core::cell::RefCell<Vec<__m256>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// [`dots_strided_each`]'s blocks of eight rows, each first copied into `packed` as the registers
/// [`dots_pairs`] would load (rows `2i` and `2i + 1`'s columns `4q..4q + 4` at
/// `packed[i * quads + q]`, f32 whatever `T` is), then met by every input, two a step, the
/// last one alone. The same products and additions in the same order per row, lane and input,
/// so the same bits. While the inputs meet one block, the next block's rows are asked for, a
/// share with each step, so that its copy does not wait for memory. Returns the rows done (a
/// multiple of eight, at most `n`).
///
/// # Safety
/// Rows `0..n` of `cols` elements must be readable from `rows` at `stride`, every input must
/// hold `cols` elements and every output `n`; the CPU must support AVX and F16C.
#[target_feature(enable = "avx,f16c")]
unsafe fn dots_each_packed<T: RowElement>(
    rows: &[T],
    stride: usize,
    n: usize,
    xs: &[&[f32]],
    outs: &mut [&mut [f32]],
    cols: usize,
    packed: &mut Vec<__m256>,
) -> usize {
    let quads = cols / 4;
    // (every register is written by a block's copy before any pass reads it)
    packed.resize(4 * quads, _mm256_setzero_ps());
    let prefetch = n * stride * core::mem::size_of::<T>() >= super::prefetch::LEAST_BYTES;
    let mut r = 0;
    while r + 8 <= n {
        // SAFETY: rows `r..r + 8` are readable (this function's contract, `r + 8 <= n`).
        let base = unsafe { rows.as_ptr().add(r * stride) };
        for (i, pair) in packed.chunks_exact_mut(quads).enumerate() {
            for (q, register) in pair.iter_mut().enumerate() {
                // SAFETY: columns `4q..4q + 4 <= cols` of rows `r + 2i` and `r + 2i + 1`.
                *register = unsafe {
                    let row = base.add(2 * i * stride + 4 * q);
                    T::two_quads(row, row.add(stride))
                };
            }
        }
        // the next block's rows (and the gaps between them at a longer stride)
        let next = (prefetch && r + 16 <= n).then(|| &rows[(r + 8) * stride..(r + 15) * stride + cols]);
        let mut p = 0;
        while p < xs.len() {
            let step = if p + 1 < xs.len() { 2 } else { 1 };
            if let Some(next) = next {
                super::prefetch::share_into::<_, 1>(next, p..p + step, xs.len());
            }
            let (head, tail) = outs.split_at_mut(p + 1);
            if step == 2 {
                let pair = [&xs[p][..cols], &xs[p + 1][..cols]];
                let out = [&mut head[p][r..r + 8], &mut tail[0][r..r + 8]];
                // SAFETY: as for this function; `packed` holds the block's registers.
                unsafe { dots_packed::<T, 2>(packed, quads, base, stride, pair, out) };
            } else {
                let out = [&mut head[p][r..r + 8]];
                // SAFETY: as for the pairs.
                unsafe { dots_packed::<T, 1>(packed, quads, base, stride, [&xs[p][..cols]], out) };
            }
            p += step;
        }
        r += 8;
    }
    r
}

/// Eight rows' sums for `INPUTS` inputs from a packed block (see [`dots_each_packed`]); the
/// columns after the last whole quad are read from the rows at `base`.
///
/// # Safety
/// As for [`dots_each_packed`], for the eight rows at `base`; `packed` holds `4 * quads`
/// registers and `quads = x.len() / 4` for every input.
#[inline]
#[target_feature(enable = "avx,f16c")]
unsafe fn dots_packed<T: RowElement, const INPUTS: usize>(
    packed: &[__m256],
    quads: usize,
    base: *const T,
    stride: usize,
    xs: [&[f32]; INPUTS],
    outs: [&mut [f32]; INPUTS],
) {
    let mut acc = [[_mm256_setzero_ps(); 4]; INPUTS];
    let [p0, p1, p2, p3]: [&[__m256]; 4] = core::array::from_fn(|i| &packed[i * quads..(i + 1) * quads]);
    let registers = p0.iter().zip(p1).zip(p2).zip(p3);
    for (q, (((w0, w1), w2), w3)) in registers.enumerate() {
        let mut x = [_mm256_setzero_ps(); INPUTS];
        for (x, input) in x.iter_mut().zip(xs) {
            // SAFETY: columns `4q..4q + 4` of the input (`4 * quads <= x.len()`).
            let quad = unsafe { _mm_loadu_ps(input.as_ptr().add(4 * q)) };
            *x = _mm256_set_m128(quad, quad);
        }
        for (i, w) in [w0, w1, w2, w3].into_iter().enumerate() {
            for (acc, x) in acc.iter_mut().zip(&x) {
                acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(*w, *x));
            }
        }
    }
    for ((acc, x), out) in acc.iter().zip(xs).zip(outs) {
        // SAFETY: as for this function.
        unsafe { finish_pairs(acc, base, stride, x, out) };
    }
}

/// `2 * PAIRS` rows from `base` at `stride`, into `out` (`2 * PAIRS` long): rows `2p` and
/// `2p + 1` share register `p`, four lanes each.
///
/// # Safety
/// `2 * PAIRS` rows of `x.len()` elements must be readable from `base` at `stride`; the CPU
/// must support AVX and F16C.
#[inline]
#[target_feature(enable = "avx,f16c")]
unsafe fn dots_pairs<T: RowElement, const PAIRS: usize>(
    base: *const T,
    stride: usize,
    x: &[f32],
    out: &mut [f32],
) {
    let cols = x.len();
    let body = cols / 4 * 4;
    let mut acc = [_mm256_setzero_ps(); PAIRS];
    let mut c = 0;
    while c < body {
        // SAFETY: `c + 4 <= cols`: four readable columns in `x` and in every row.
        unsafe {
            let quad = _mm_loadu_ps(x.as_ptr().add(c));
            let xs = _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(quad), quad);
            for (p, acc) in acc.iter_mut().enumerate() {
                let row = base.add(2 * p * stride + c);
                let w = T::two_quads(row, row.add(stride));
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(w, xs));
            }
        }
        c += 4;
    }
    // SAFETY: as for this function.
    unsafe { finish_pairs(&acc, base, stride, x, out) };
}

/// The rows' sums from [`dots_pairs`]' accumulators (a register of two rows, four lanes each):
/// `out[r]` = the lanes added pairwise, then row `r`'s columns after the last group of four.
/// Four registers (eight rows) at a time are summed in registers by two rounds of `VHADDPS`,
/// which add lanes `0 + 1` and `2 + 3`, then those two sums: the portable
/// `(a0 + a1) + (a2 + a3)`, in its order, for eight rows at once.
///
/// # Safety
/// As for [`dots_pairs`].
#[inline]
#[target_feature(enable = "avx,f16c")]
unsafe fn finish_pairs<T: RowElement, const PAIRS: usize>(
    acc: &[__m256; PAIRS],
    base: *const T,
    stride: usize,
    x: &[f32],
    out: &mut [f32],
) {
    let body = x.len() / 4 * 4;
    let mut quads = acc.chunks_exact(4);
    for (q, four) in (&mut quads).enumerate() {
        let first = 8 * q;
        // Row r's lanes sit in register r / 2, half r % 2; after the two rounds the sums are
        // in the order [r0, r2, r4, r6 | r1, r3, r5, r7].
        let pairs_ab = _mm256_hadd_ps(four[0], four[1]);
        let pairs_cd = _mm256_hadd_ps(four[2], four[3]);
        let sums = _mm256_hadd_ps(pairs_ab, pairs_cd);
        let mut tails = [0.0f32; 8];
        if body < x.len() {
            for (i, tail) in tails.iter_mut().enumerate() {
                let r = first + [0, 2, 4, 6, 1, 3, 5, 7][i];
                // SAFETY: row `r` has `x.len()` readable elements.
                *tail = unsafe { row_tail(base.add(r * stride), x, body) };
            }
        }
        // SAFETY: `tails` holds eight f32.
        let sums = _mm256_add_ps(sums, unsafe { _mm256_loadu_ps(tails.as_ptr()) });
        let (even, odd) = (_mm256_castps256_ps128(sums), _mm256_extractf128_ps::<1>(sums));
        let rows = &mut out[first..first + 8];
        // SAFETY: `rows` has room for eight f32, four at its start and four after them.
        unsafe {
            _mm_storeu_ps(rows.as_mut_ptr(), _mm_unpacklo_ps(even, odd));
            _mm_storeu_ps(rows.as_mut_ptr().add(4), _mm_unpackhi_ps(even, odd));
        }
    }
    let done = PAIRS / 4 * 4;
    for (p, acc) in quads.remainder().iter().enumerate() {
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` has room for eight f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *acc) };
        for (half, lanes) in lanes.chunks_exact(4).enumerate() {
            let r = 2 * (done + p) + half;
            // SAFETY: row `r` has `x.len()` readable elements.
            let tail = unsafe { row_tail(base.add(r * stride), x, body) };
            out[r] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail;
        }
    }
}

/// [`dots_pairs`] for two inputs at once: each register of two weight rows is multiplied by
/// both inputs, into two sets of accumulators (the same additions, in the same order, per row
/// and input).
///
/// # Safety
/// As for [`dots_pairs`]; both inputs have the same length.
#[inline]
#[target_feature(enable = "avx,f16c")]
unsafe fn dots_pairs_two<T: RowElement, const PAIRS: usize>(
    base: *const T,
    stride: usize,
    x: [&[f32]; 2],
    out: [&mut [f32]; 2],
) {
    let cols = x[0].len();
    let body = cols / 4 * 4;
    let mut acc = [[_mm256_setzero_ps(); PAIRS]; 2];
    let mut c = 0;
    while c < body {
        // SAFETY: `c + 4 <= cols`: four readable columns in each input and in every row.
        unsafe {
            let quad_a = _mm_loadu_ps(x[0].as_ptr().add(c));
            let quad_b = _mm_loadu_ps(x[1].as_ptr().add(c));
            let xs_a = _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(quad_a), quad_a);
            let xs_b = _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(quad_b), quad_b);
            let [acc_a, acc_b] = &mut acc;
            for (p, (acc_a, acc_b)) in acc_a.iter_mut().zip(acc_b.iter_mut()).enumerate() {
                let row = base.add(2 * p * stride + c);
                let w = T::two_quads(row, row.add(stride));
                *acc_a = _mm256_add_ps(*acc_a, _mm256_mul_ps(w, xs_a));
                *acc_b = _mm256_add_ps(*acc_b, _mm256_mul_ps(w, xs_b));
            }
        }
        c += 4;
    }
    for ((acc, x), out) in acc.iter().zip(x).zip(out) {
        // SAFETY: as for this function.
        unsafe { finish_pairs(acc, base, stride, x, out) };
    }
}

/// One row at `row` (`x.len()` readable elements) · `x`, four lanes as the four accumulators.
///
/// # Safety
/// As for [`dots_pairs`], with one row.
#[inline]
#[target_feature(enable = "avx,f16c")]
unsafe fn dot_one<T: RowElement>(row: *const T, x: &[f32]) -> f32 {
    let body = x.len() / 4 * 4;
    let mut acc = _mm_setzero_ps();
    let mut c = 0;
    while c < body {
        // SAFETY: `c + 4 <= x.len()`: four readable columns in `x` and in the row.
        unsafe {
            acc = _mm_add_ps(
                acc,
                _mm_mul_ps(T::quad(row.add(c)), _mm_loadu_ps(x.as_ptr().add(c))),
            )
        };
        c += 4;
    }
    let mut lanes = [0.0f32; 4];
    // SAFETY: `lanes` has room for four f32.
    unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), acc) };
    // SAFETY: the row has `x.len()` readable elements.
    let tail = unsafe { row_tail(row, x, body) };
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail
}

/// `out += p[k] * rows[k * stride..][..out.len()]` for each `k < p.len()` in order (f16 rows
/// widened exactly): per element the products are rounded and added in `k` order, as in the
/// portable loop, so the same bits. Thirty-two elements stay in registers while every `k`
/// passes, then eight, then one.
///
/// # Safety
/// The CPU must support AVX and F16C ([`has_avx_f16c`](crate::kernels::features::has_avx_f16c)).
#[target_feature(enable = "avx,f16c")]
pub unsafe fn axpys_strided<T: RowElement>(rows: &[T], stride: usize, p: &[f32], out: &mut [f32]) {
    let n = out.len();
    let k_count = rows_that_fit(rows.len(), stride, n, p.len());
    let p = &p[..k_count];
    let mut e = 0;
    while e + 32 <= n {
        // SAFETY: every read is at `k * stride + e + i` with `k < k_count` and `e + i < n`,
        // inside `rows` by `rows_that_fit`; the loads and stores of `out` are inside it.
        unsafe {
            let o = out.as_mut_ptr().add(e);
            let mut acc = [
                _mm256_loadu_ps(o),
                _mm256_loadu_ps(o.add(8)),
                _mm256_loadu_ps(o.add(16)),
                _mm256_loadu_ps(o.add(24)),
            ];
            for (k, &weight) in p.iter().enumerate() {
                let w = _mm256_set1_ps(weight);
                let row = rows.as_ptr().add(k * stride + e);
                for (i, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_add_ps(*acc, _mm256_mul_ps(w, T::eight(row.add(8 * i))));
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(o.add(8 * i), *acc);
            }
        }
        e += 32;
    }
    while e + 8 <= n {
        // SAFETY: as above, for elements `e..e + 8`.
        unsafe {
            let o = out.as_mut_ptr().add(e);
            let mut acc = _mm256_loadu_ps(o);
            for (k, &weight) in p.iter().enumerate() {
                let row = rows.as_ptr().add(k * stride + e);
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(weight), T::eight(row)));
            }
            _mm256_storeu_ps(o, acc);
        }
        e += 8;
    }
    for (i, o) in out.iter_mut().enumerate().skip(e) {
        for (k, &weight) in p.iter().enumerate() {
            *o += weight * rows[k * stride + i].widen();
        }
    }
}

/// `portable::quantize_i8`, eight columns a step: the same largest `|v|` (NaNs ignored:
/// `VMAXPS` returns its second operand, the running maximum, when the first is NaN), the same
/// products, and the same rounding (`y + ±(0.5 - EPSILON / 4)` truncated; a NaN gives 0, as
/// Rust's `as` does). A subnormal range, whose `127 / max` overflows, takes the portable path.
///
/// # Safety
/// The CPU must support AVX ([`has_avx_f16c`](crate::kernels::features::has_avx_f16c)).
#[target_feature(enable = "avx,f16c")]
pub unsafe fn quantize_i8(x: &[f32], act_scales: Option<&[f32]>, out: &mut [i8]) -> f32 {
    let n = x
        .len()
        .min(out.len())
        .min(act_scales.map_or(usize::MAX, |s| s.len()));
    let body = n / 8 * 8;
    // the values: `x`, or `x * act_scales`, eight at a time
    let load = |i: usize| -> __m256 {
        // SAFETY: `i + 8 <= body <= n`, inside `x` and the scales; the CPU has AVX.
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            match act_scales {
                Some(scales) => _mm256_mul_ps(v, _mm256_loadu_ps(scales.as_ptr().add(i))),
                None => v,
            }
        }
    };
    let value = |i: usize| match act_scales {
        Some(scales) => x[i] * scales[i],
        None => x[i],
    };
    let sign_bit = _mm256_set1_ps(-0.0);
    let mut max = _mm256_setzero_ps();
    for i in (0..body).step_by(8) {
        max = _mm256_max_ps(_mm256_andnot_ps(sign_bit, load(i)), max);
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` has room for eight f32.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), max) };
    let mut max_abs = lanes.iter().fold(0.0f32, |m, &a| if a > m { a } else { m });
    for i in body..n {
        let a = value(i).abs();
        if a > max_abs {
            max_abs = a;
        }
    }
    let inverse = 127.0 / max_abs;
    if !(max_abs > 0.0 && max_abs.is_finite() && inverse.is_finite()) {
        return portable::quantize_i8(&x[..n], act_scales.map(|s| &s[..n]), &mut out[..n]);
    }
    const JUST_BELOW_HALF: f32 = 0.5 - 0.25 * f32::EPSILON;
    let scale = _mm256_set1_ps(inverse);
    let (half, minus_half) = (_mm256_set1_ps(JUST_BELOW_HALF), _mm256_set1_ps(-JUST_BELOW_HALF));
    for i in (0..body).step_by(8) {
        let y = _mm256_mul_ps(load(i), scale);
        let y = _mm256_and_ps(y, _mm256_cmp_ps::<_CMP_ORD_Q>(y, y)); // NaN -> 0
        let toward = _mm256_blendv_ps(
            half,
            minus_half,
            _mm256_cmp_ps::<_CMP_LT_OQ>(y, _mm256_setzero_ps()),
        );
        let q = _mm256_cvttps_epi32(_mm256_add_ps(y, toward)); // in -127..=127
        let words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extractf128_si256::<1>(q));
        // SAFETY: `i + 8 <= n`: eight bytes of `out`.
        unsafe { _mm_storel_epi64(out.as_mut_ptr().add(i).cast(), _mm_packs_epi16(words, words)) };
    }
    for (i, o) in out.iter_mut().enumerate().take(n).skip(body) {
        let y = value(i) * inverse;
        let toward = if y < 0.0 {
            -JUST_BELOW_HALF
        } else {
            JUST_BELOW_HALF
        };
        *o = (y + toward) as i32 as i8;
    }
    max_abs / 127.0
}

/// `values[i] = libm::expf(values[i] - max)` for eight values, with `libm`'s own steps (its
/// FreeBSD-derived `expf`): the same argument reduction `x = hi - lo` with `k` rounded as it
/// rounds it, the same polynomial and division, and `y * 2^k` in the multiplications `libm`'s
/// `scalbnf` does, every operation rounded once as there.
/// A softmax's arguments are `<= 0`; at or below `-103.972084` (and `-inf`) the result is 0, as
/// `libm` returns it, and down to there a subnormal result is scaled in `scalbnf`'s two steps;
/// a lane `libm` treats on another path (NaN, positive beyond `2^-14`) is recomputed by
/// `libm::expf` itself.
///
/// # Safety
/// The CPU must support AVX2 ([`has_avx2`](crate::kernels::features::has_avx2)).
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn softmax_exp8(values: &mut [f32; 8], max: f32) {
    // libm's steps and constants, bit for bit (`kernels::fast_math::expf`)
    use crate::kernels::fast_math::expf::*;
    let f = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
    // SAFETY: `values` is eight readable f32.
    let x = _mm256_sub_ps(unsafe { _mm256_loadu_ps(values.as_ptr()) }, _mm256_set1_ps(max));
    let abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
    // lanes libm takes another path for: NaN, x > 2^-14
    let unusual = _mm256_cmp_ps::<_CMP_NLE_UQ>(x, f(TINY));
    // k: trunc(x / ln 2 - 1/2) beyond 1.5 ln 2, -1 beyond 0.5 ln 2,
    // else 0 (x <= 0 in every lane computed here)
    let truncated = _mm256_cvttps_epi32(_mm256_add_ps(
        _mm256_mul_ps(_mm256_set1_ps(INV_LN2), x),
        _mm256_set1_ps(-0.5),
    ));
    let beyond_3_halves = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GT_OQ>(abs, f(THREE_HALVES_LN2)));
    let beyond_half = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GT_OQ>(abs, f(HALF_LN2)));
    let minus_one = _mm256_and_si256(beyond_half, _mm256_set1_epi32(-1));
    let k = _mm256_blendv_epi8(minus_one, truncated, beyond_3_halves);
    let kf = _mm256_cvtepi32_ps(k);
    let hi = _mm256_sub_ps(x, _mm256_mul_ps(kf, _mm256_set1_ps(LN2_HI)));
    let lo = _mm256_mul_ps(kf, _mm256_set1_ps(LN2_LO));
    let r = _mm256_sub_ps(hi, lo);
    let rr = _mm256_mul_ps(r, r);
    let c = _mm256_sub_ps(
        r,
        _mm256_mul_ps(
            rr,
            _mm256_add_ps(_mm256_set1_ps(P1), _mm256_mul_ps(rr, _mm256_set1_ps(P2))),
        ),
    );
    let quotient = _mm256_div_ps(_mm256_mul_ps(r, c), _mm256_sub_ps(_mm256_set1_ps(2.0), c));
    let y = _mm256_add_ps(
        _mm256_set1_ps(1.0),
        _mm256_add_ps(_mm256_sub_ps(quotient, lo), hi),
    );
    // y * 2^k as libm's scalbnf takes it: for k < -126 (a subnormal result, x below
    // -87.33655) first y * 2^-102 (exact), then times 2^(k + 102) (rounded once); 2^k built
    // from its exponent bits
    let deep = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), k);
    let y = _mm256_blendv_ps(y, _mm256_mul_ps(y, f(DEEP_SCALE)), _mm256_castsi256_ps(deep));
    let k = _mm256_add_epi32(k, _mm256_and_si256(deep, _mm256_set1_epi32(102)));
    let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        k,
        _mm256_set1_epi32(127),
    )));
    let scaled = _mm256_mul_ps(y, scale);
    // |x| <= 2^-14: libm returns 1 + x
    let tiny = _mm256_cmp_ps::<_CMP_LE_OQ>(abs, f(TINY));
    let result = _mm256_blendv_ps(scaled, _mm256_add_ps(_mm256_set1_ps(1.0), x), tiny);
    // x <= -103.972084 or -inf: libm's expf returns 0 (not a NaN: ordered)
    let underflow = _mm256_and_ps(
        _mm256_cmp_ps::<_CMP_GE_OQ>(abs, f(UNDERFLOW)),
        _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps()),
    );
    let result = _mm256_andnot_ps(underflow, result);
    let unusual = _mm256_movemask_ps(_mm256_andnot_ps(underflow, unusual));
    let mut args = [0.0f32; 8];
    if unusual != 0 {
        // SAFETY: `args` has room for eight f32.
        unsafe { _mm256_storeu_ps(args.as_mut_ptr(), x) };
    }
    // SAFETY: `values` has room for eight f32.
    unsafe { _mm256_storeu_ps(values.as_mut_ptr(), result) };
    if unusual != 0 {
        for (i, (v, arg)) in values.iter_mut().zip(args).enumerate() {
            if unusual & (1 << i) != 0 {
                *v = libm::expf(arg);
            }
        }
    }
}

/// Four i32 sums (eight lanes each, wrapping) reduced to one vector `[s0, s1, s2, s3]`.
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn reduce_four(acc: [__m256i; 4]) -> __m128i {
    let pairs = _mm256_hadd_epi32(
        _mm256_hadd_epi32(acc[0], acc[1]),
        _mm256_hadd_epi32(acc[2], acc[3]),
    );
    _mm_add_epi32(
        _mm256_castsi256_si128(pairs),
        _mm256_extracti128_si256::<1>(pairs),
    )
}

/// `sums[r] = values[r * cols..][..cols] · xq` in i32 for each `r < sums.len()`: four rows per
/// pass share each widened slice of the input, 16 columns a step. Equal to `portable::dot_i8` per
/// row (integer sums are exact).
///
/// # Safety
/// The CPU must support AVX2 ([`has_avx2`](crate::kernels::features::has_avx2)).
#[target_feature(enable = "avx2")]
pub unsafe fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
    let xq = &xq[..cols];
    let n = rows_that_fit(values.len(), cols, cols, sums.len());
    let body = cols / 16 * 16;
    let mut r = 0;
    while r + 4 <= n {
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut c = 0;
        while c < body {
            // SAFETY: `c + 16 <= cols`, and rows `r..r + 4` are inside `values` (`r + 4 <= n`).
            unsafe {
                let x = _mm256_cvtepi8_epi16(_mm_loadu_si128(xq.as_ptr().add(c).cast()));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let w = values.as_ptr().add((r + i) * cols + c);
                    let w = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.cast()));
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(w, x));
                }
            }
            c += 16;
        }
        let mut four = [0i32; 4];
        // SAFETY: `four` has room for four i32, and the CPU has AVX2.
        unsafe { _mm_storeu_si128(four.as_mut_ptr().cast(), reduce_four(acc)) };
        for (i, (sum, total)) in sums[r..r + 4].iter_mut().zip(four).enumerate() {
            let row = &values[(r + i) * cols..(r + i + 1) * cols];
            *sum = total + portable::dot_i8(&row[body..], &xq[body..]);
        }
        r += 4;
    }
    for (i, sum) in sums.iter_mut().enumerate().take(n).skip(r) {
        // SAFETY: the CPU has AVX2, as this function requires.
        *sum = unsafe { dot_i8(&values[i * cols..(i + 1) * cols], xq) };
    }
}

/// The int4 kernels' frame, one for the AVX2 and the VNNI builds ([`row_sums_i4`] here,
/// `x86_64/vnni.rs`): for groups of a multiple of 32 columns, four rows per pass; in each group
/// the whole 32-column steps add into one register of eight i32 lanes per row (`$step`, with
/// `$c` the step's first column, `$rows` the four packed rows and `$acc` their registers),
/// corrected at the group's end (`$group_end`, on `$acc`), then weighed by the group's
/// multiplier in 64-bit lanes (`VPMULDQ`, [`weigh_group`]), so a row is summed across lanes once,
/// at its end, not once a group. The columns no step took, and the rows after the last pass, as
/// the portable code sums them. The same sums (exact integers: the multiplier distributes over
/// the lanes). `$group_start` runs before each group's steps. Expanded inside a function with
/// AVX2, whose `unsafe` blocks the steps and corrections are.
macro_rules! int4_row_sums_frame {
    (
        $values:expr, $group:expr, $codes:expr, $xq:expr, $sums:expr,
        group_start: $group_start:block,
        step: |$c:ident, $rows:ident, $acc:ident| $step:block,
        group_end: |$acc_end:ident| $group_end:block $(,)?
    ) => {{
        use crate::kernels::portable::{int4_groups, int4_multiplier, int4_row_bytes};
        use crate::kernels::x86_64::avx::{i64_lanes_sum, weigh_group};
        const ROWS: usize = 4;
        let (values, group, codes, xq, sums): (&[u8], usize, &[u8], &[i8], &mut [i64]) =
            ($values, $group, $codes, $xq, $sums);
        let cols = xq.len();
        let (row_bytes, groups) = (int4_row_bytes(cols), int4_groups(cols, group));
        let blocks = if group.is_multiple_of(32) { sums.len() / ROWS } else { 0 };
        for block in 0..blocks {
            let first = block * ROWS;
            let $rows: [&[u8]; ROWS] = core::array::from_fn(|i| &values[(first + i) * row_bytes..][..row_bytes]);
            // per row: four 64-bit lanes of weighed group sums, and the columns no step took
            let mut weighed = [_mm256_setzero_si256(); ROWS];
            let mut rest = [0i64; ROWS];
            for g in 0..groups {
                let (start, end) = (g * group, cols.min((g + 1) * group));
                let mut $c = start;
                let mut $acc = [_mm256_setzero_si256(); ROWS];
                $group_start
                while $c + 32 <= end {
                    // (columns `c..c + 32` are inside `xq`, `c + 32 <= end <= cols`, and their
                    // sixteen packed bytes inside each row)
                    $step
                    $c += 32;
                }
                {
                    let $acc_end = &mut $acc;
                    $group_end
                }
                for (i, (acc, weighed)) in $acc.iter().zip(weighed.iter_mut()).enumerate() {
                    let multiplier = int4_multiplier(codes[(first + i) * groups + g]);
                    // SAFETY: the CPU has AVX2, as the function this expands in requires.
                    *weighed = unsafe { weigh_group(*weighed, *acc, multiplier) };
                    if $c < end {
                        rest[i] += i64::from(multiplier)
                            * i64::from(crate::kernels::portable::int4_range_sum($rows[i], xq, $c..end));
                    }
                }
            }
            for ((sum, weighed), rest) in sums[first..first + ROWS].iter_mut().zip(weighed).zip(rest) {
                // SAFETY: the CPU has AVX2, as the function this expands in requires.
                *sum = unsafe { i64_lanes_sum(weighed) } + rest;
            }
        }
        let done = blocks * ROWS;
        crate::kernels::portable::row_sums_i4(
            &values[done * row_bytes..],
            group,
            &codes[done * groups..],
            xq,
            &mut sums[done..],
        );
    }};
}
pub(super) use int4_row_sums_frame;

/// [`portable::row_sums_i4`] with AVX2 (`int4_row_sums_frame!`): each step widens sixteen
/// packed bytes of each row to 16 bits, each nibble sign-extended by a shift pair, the inputs
/// reordered to match by one byte shuffle, once for the four rows. The same sums.
///
/// # Safety
/// The CPU must support AVX2 ([`has_avx2`](crate::kernels::features::has_avx2)).
#[target_feature(enable = "avx2")]
pub unsafe fn row_sums_i4(values: &[u8], group: usize, codes: &[u8], xq: &[i8], sums: &mut [i64]) {
    // the bytes of two blocks of eight inputs, low-nibble columns (0-3 of each block) first
    let order = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
    int4_row_sums_frame!(
        values, group, codes, xq, sums,
        group_start: {},
        step: |c, rows, acc| {
            // SAFETY: columns `c..c + 32` are inside `xq` and their sixteen packed bytes inside
            // each row (the frame's loop).
            unsafe {
                let first = _mm_shuffle_epi8(_mm_loadu_si128(xq.as_ptr().add(c).cast()), order);
                let second = _mm_shuffle_epi8(_mm_loadu_si128(xq.as_ptr().add(c + 16).cast()), order);
                let x_low = _mm256_cvtepi8_epi16(_mm_unpacklo_epi64(first, second));
                let x_high = _mm256_cvtepi8_epi16(_mm_unpackhi_epi64(first, second));
                for (acc, row) in acc.iter_mut().zip(rows) {
                    let packed = _mm256_cvtepi8_epi16(_mm_loadu_si128(row.as_ptr().add(c / 2).cast()));
                    let low = _mm256_srai_epi16::<12>(_mm256_slli_epi16::<12>(packed));
                    let high = _mm256_srai_epi16::<12>(_mm256_slli_epi16::<8>(packed));
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(low, x_low));
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(high, x_high));
                }
            }
        },
        group_end: |acc| {
            let _ = acc;
        },
    );
}

/// `weighed + multiplier * acc` for a group's eight i32 lane sums `acc`, in four i64 lanes: the
/// even and the odd lanes each times the multiplier (`VPMULDQ`), then added. The int4 kernels
/// weigh each group this way and sum a row's lanes once, at its end ([`i64_lanes_sum`]).
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn weigh_group(weighed: __m256i, acc: __m256i, multiplier: i32) -> __m256i {
    let m = _mm256_set1_epi64x(i64::from(multiplier));
    let even = _mm256_mul_epi32(acc, m);
    let odd = _mm256_mul_epi32(_mm256_srli_epi64::<32>(acc), m);
    _mm256_add_epi64(weighed, _mm256_add_epi64(even, odd))
}

/// The sum of four i64 lanes.
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn i64_lanes_sum(lanes: __m256i) -> i64 {
    let halves = _mm_add_epi64(
        _mm256_castsi256_si128(lanes),
        _mm256_extracti128_si256::<1>(lanes),
    );
    _mm_cvtsi128_si64(_mm_add_epi64(halves, _mm_unpackhi_epi64(halves, halves)))
}

/// [`int8_attention::key_sums_portable`](crate::kernels::portable::key_sums_i8) with AVX2:
/// four keys per pass, sixteen columns a step (each key's bytes put in the query words' order by
/// one byte shuffle, then one multiply-add of 16-bit pairs), the columns past the last whole 16
/// as the portable code does. Integer sums (wrapping, like the portable ones): the same bits.
///
/// # Safety
/// The CPU must support AVX2 ([`has_avx2`](crate::kernels::features::has_avx2)).
#[target_feature(enable = "avx2")]
pub unsafe fn key_sums_i8(keys: &[i8], stride: usize, d_head: usize, words: &[u32], sums: &mut [i32]) {
    const KEYS: usize = 4;
    let body = d_head / 16 * 16;
    // a key's bytes 0..16 in the words' order: columns (0, 2, 1, 3) of each four
    let order = _mm_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
    let key = |t: usize| &keys[t * stride..t * stride + d_head];
    let mut t = 0;
    while t + KEYS <= sums.len() {
        let rows: [&[i8]; KEYS] = core::array::from_fn(|i| key(t + i));
        let mut acc = [_mm256_setzero_si256(); KEYS];
        let mut c = 0;
        while c < body {
            // SAFETY: `c + 16 <= d_head`: the words hold `d_head` rounded up to four columns
            // (eight halves per eight columns), and each key `d_head` bytes.
            unsafe {
                let query = _mm256_loadu_si256(words.as_ptr().add(c / 2).cast());
                for (acc, row) in acc.iter_mut().zip(rows) {
                    let k = _mm_shuffle_epi8(_mm_loadu_si128(row.as_ptr().add(c).cast()), order);
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(_mm256_cvtepi8_epi16(k), query));
                }
            }
            c += 16;
        }
        // eight more columns where the head has them (heads of 24, 40, ...)
        let mut eights = [0i32; KEYS];
        let done = if body + 8 <= d_head { body + 8 } else { body };
        if done > body {
            // SAFETY: `body + 8 <= d_head`: eight bytes of each key, and the words of eight
            // columns (four) from word `body / 2`.
            unsafe {
                let query = _mm_loadu_si128(words.as_ptr().add(body / 2).cast());
                for (eight, row) in eights.iter_mut().zip(rows) {
                    let k = _mm_shuffle_epi8(_mm_loadl_epi64(row.as_ptr().add(body).cast()), order);
                    let lanes = _mm_madd_epi16(_mm_cvtepi8_epi16(k), query);
                    let pairs = _mm_add_epi32(lanes, _mm_unpackhi_epi64(lanes, lanes));
                    *eight = _mm_cvtsi128_si32(_mm_add_epi32(pairs, _mm_shuffle_epi32::<1>(pairs)));
                }
            }
        }
        let mut four = [0i32; KEYS];
        // SAFETY: `four` has room for four i32, and the CPU has AVX2.
        unsafe { _mm_storeu_si128(four.as_mut_ptr().cast(), reduce_four(acc)) };
        for (i, (sum, part)) in sums[t..t + KEYS].iter_mut().zip(four).enumerate() {
            let mut tail = 0;
            crate::kernels::portable::key_sums_columns(rows[i], done, words, &mut tail);
            *sum = part.wrapping_add(eights[i]).wrapping_add(tail);
        }
        t += KEYS;
    }
    let rest = &mut sums[t..];
    if !rest.is_empty() {
        crate::kernels::portable::key_sums_i8(&keys[t * stride..], stride, d_head, words, rest);
    }
}

/// [`int8_attention::value_sums_portable`](crate::kernels::portable::value_sums_i8) with
/// AVX2: sixteen columns a step, two keys per multiply-add (their values interleaved in 16-bit
/// pairs against the pair of their weights), the columns past the last whole 16 as the portable
/// code does. Integer sums (wrapping): the same bits.
///
/// # Safety
/// The CPU must support AVX2 ([`has_avx2`](crate::kernels::features::has_avx2)).
#[target_feature(enable = "avx2")]
pub unsafe fn value_sums_i8(values: &[i8], stride: usize, weights: &[i32], acc: &mut [i32]) {
    let columns = acc.len();
    let body = columns / 16 * 16;
    let pairs = weights.len() / 2;
    let mut c = 0;
    while c < body {
        // columns c..c + 4 and c + 8..c + 12 in `low`, c + 4..c + 8 and c + 12..c + 16 in `high`
        let (mut low, mut high) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for p in 0..=pairs {
            let (a, b) = (2 * p, 2 * p + 1);
            if a >= weights.len() {
                break;
            }
            let both = _mm256_set1_epi32(weight_pair(weights, a));
            // SAFETY: value `t` has `columns` bytes at `t * stride`, and `c + 16 <= columns`;
            // value `b` is read only when it exists.
            unsafe {
                let value_a =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(values.as_ptr().add(a * stride + c).cast()));
                let value_b = if b < weights.len() {
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(values.as_ptr().add(b * stride + c).cast()))
                } else {
                    _mm256_setzero_si256()
                };
                low = _mm256_add_epi32(
                    low,
                    _mm256_madd_epi16(_mm256_unpacklo_epi16(value_a, value_b), both),
                );
                high = _mm256_add_epi32(
                    high,
                    _mm256_madd_epi16(_mm256_unpackhi_epi16(value_a, value_b), both),
                );
            }
        }
        let mut out = [0i32; 16];
        // SAFETY: `out` has room for sixteen i32, and the CPU has AVX2.
        unsafe {
            _mm256_storeu_si256(
                out.as_mut_ptr().cast(),
                _mm256_permute2x128_si256::<0x20>(low, high),
            );
            _mm256_storeu_si256(
                out.as_mut_ptr().add(8).cast(),
                _mm256_permute2x128_si256::<0x31>(low, high),
            );
        }
        for (a, o) in acc[c..c + 16].iter_mut().zip(out) {
            *a = a.wrapping_add(o);
        }
        c += 16;
    }
    // eight more columns where the head has them (heads of 24, 40, ...)
    let done = if body + 8 <= columns { body + 8 } else { body };
    if done > body {
        // columns body..body + 4 in `low`, body + 4..body + 8 in `high`
        let (mut low, mut high) = (_mm_setzero_si128(), _mm_setzero_si128());
        for p in 0..=pairs {
            let (a, b) = (2 * p, 2 * p + 1);
            if a >= weights.len() {
                break;
            }
            let both = _mm_set1_epi32(weight_pair(weights, a));
            // SAFETY: value `t` has `columns` bytes at `t * stride`, and `body + 8 <= columns`;
            // value `b` is read only when it exists.
            unsafe {
                let value_a =
                    _mm_cvtepi8_epi16(_mm_loadl_epi64(values.as_ptr().add(a * stride + body).cast()));
                let value_b = if b < weights.len() {
                    _mm_cvtepi8_epi16(_mm_loadl_epi64(values.as_ptr().add(b * stride + body).cast()))
                } else {
                    _mm_setzero_si128()
                };
                low = _mm_add_epi32(low, _mm_madd_epi16(_mm_unpacklo_epi16(value_a, value_b), both));
                high = _mm_add_epi32(high, _mm_madd_epi16(_mm_unpackhi_epi16(value_a, value_b), both));
            }
        }
        let mut out = [0i32; 8];
        // SAFETY: `out` has room for eight i32.
        unsafe {
            _mm_storeu_si128(out.as_mut_ptr().cast(), low);
            _mm_storeu_si128(out.as_mut_ptr().add(4).cast(), high);
        }
        for (a, o) in acc[body..done].iter_mut().zip(out) {
            *a = a.wrapping_add(o);
        }
    }
    if done < columns {
        crate::kernels::portable::value_sums_i8(&values[done..], stride, weights, &mut acc[done..]);
    }
}

/// Weights `a` and `a + 1` (0 past the end) as the two 16-bit halves of one word, low first:
/// what `VPMADDWD` multiplies a pair of interleaved values by in [`value_sums_i8`].
#[inline]
fn weight_pair(weights: &[i32], a: usize) -> i32 {
    let b = weights.get(a + 1).copied().unwrap_or(0);
    (weights[a] & 0xffff) | (b << 16)
}

/// [`row_sums_i8`] for two inputs at once, `sums[p][r] = values[r] · xq[p]`: each widened slice
/// of four weight rows meets both inputs.
///
/// # Safety
/// The CPU must support AVX2 ([`has_avx2`](crate::kernels::features::has_avx2)).
#[target_feature(enable = "avx2")]
pub unsafe fn row_sums_pair_i8(values: &[i8], cols: usize, xq: [&[i8]; 2], sums: [&mut [i32]; 2]) {
    let xq = [&xq[0][..cols], &xq[1][..cols]];
    let [sums_a, sums_b] = sums;
    let n = rows_that_fit(values.len(), cols, cols, sums_a.len().min(sums_b.len()));
    let body = cols / 16 * 16;
    let mut r = 0;
    while r + 4 <= n {
        let mut acc = [[_mm256_setzero_si256(); 4]; 2];
        let mut c = 0;
        while c < body {
            // SAFETY: `c + 16 <= cols`, and rows `r..r + 4` are inside `values` (`r + 4 <= n`).
            unsafe {
                let xa = _mm256_cvtepi8_epi16(_mm_loadu_si128(xq[0].as_ptr().add(c).cast()));
                let xb = _mm256_cvtepi8_epi16(_mm_loadu_si128(xq[1].as_ptr().add(c).cast()));
                let [acc_a, acc_b] = &mut acc;
                for (i, (acc_a, acc_b)) in acc_a.iter_mut().zip(acc_b).enumerate() {
                    let w = values.as_ptr().add((r + i) * cols + c);
                    let w = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.cast()));
                    *acc_a = _mm256_add_epi32(*acc_a, _mm256_madd_epi16(w, xa));
                    *acc_b = _mm256_add_epi32(*acc_b, _mm256_madd_epi16(w, xb));
                }
            }
            c += 16;
        }
        for (p, sums) in [&mut *sums_a, &mut *sums_b].into_iter().enumerate() {
            let mut four = [0i32; 4];
            // SAFETY: `four` has room for four i32, and the CPU has AVX2.
            unsafe { _mm_storeu_si128(four.as_mut_ptr().cast(), reduce_four(acc[p])) };
            for (i, (sum, total)) in sums[r..r + 4].iter_mut().zip(four).enumerate() {
                let row = &values[(r + i) * cols..(r + i + 1) * cols];
                *sum = total + portable::dot_i8(&row[body..], &xq[p][body..]);
            }
        }
        r += 4;
    }
    for i in r..n {
        let row = &values[i * cols..(i + 1) * cols];
        // SAFETY: the CPU has AVX2, as this function requires.
        unsafe {
            sums_a[i] = dot_i8(row, xq[0]);
            sums_b[i] = dot_i8(row, xq[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::rng::Rng;
    use half::f16;

    /// `n` random bytes, every one of -128..=127 possible.
    fn i8s(rng: &mut Rng, n: usize) -> Vec<i8> {
        (0..n).map(|_| (rng.next_u64() >> 56) as i8).collect()
    }

    /// `n` random bytes, every one of 0..=255 possible.
    fn u8s(rng: &mut Rng, n: usize) -> Vec<u8> {
        (0..n).map(|_| (rng.next_u64() >> 56) as u8).collect()
    }

    /// 24 random bits: in `0..1 << 24`.
    fn bits24(rng: &mut Rng) -> u32 {
        (rng.next_u64() >> 40) as u32
    }

    #[test]
    fn int8_transposed_sums_equal_the_portable_loop() {
        let (avx2, avx512) = (
            crate::kernels::features::has_avx2(),
            crate::kernels::features::has_avx512bw(),
        );
        if !avx2 {
            crate::test_skips::skipped("the AVX2 part: this CPU has no AVX2");
        }
        if !avx512 {
            crate::test_skips::skipped("the AVX-512 part: this CPU has no AVX-512BW");
        }
        // odd widths (vector bodies and their tails), the byte range's extremes
        let mut rng = Rng::new(1);
        for (rows, cols, len) in [(1, 1, 1), (7, 33, 33), (64, 100, 97), (129, 256, 256)] {
            let mut values = i8s(&mut rng, rows * cols);
            let mut xq = i8s(&mut rng, rows);
            values[0] = i8::MIN;
            xq[0] = i8::MIN;
            let mut want = vec![0i32; len];
            crate::kernels::portable::vecmat_sums_i8(&xq, &values, cols, &mut want);
            let mut got = vec![7i32; len];
            if avx2 {
                // SAFETY: the CPU has AVX2, checked at the start.
                unsafe { super::vecmat_sums_i8(&xq, &values, cols, &mut got) };
                assert_eq!(got, want, "AVX2, {rows} x {cols}");
            }
            if avx512 {
                got.fill(7);
                // SAFETY: the CPU has AVX-512F, BW and VL, checked at the start.
                unsafe { super::super::avx512::vecmat_sums_i8(&xq, &values, cols, &mut got) };
                assert_eq!(got, want, "AVX-512, {rows} x {cols}");
            }
        }
    }

    #[test]
    fn f16c_dot_equals_the_scalar_dot_for_every_half() {
        if !crate::kernels::features::has_f16c() {
            crate::test_skips::skipped("this CPU has no F16C");
            return;
        }
        // every f16 bit pattern as a weight (NaNs compared as NaNs), against varied inputs
        let weights: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut rng = Rng::new(2);
        let inputs: Vec<f32> = (0..weights.len())
            .map(|_| rng.below(2003) as f32 / 1001.0 - 1.0)
            .collect();
        for len in [0usize, 1, 3, 4, 5, 31, 32, 33] {
            for start in (0..weights.len() - len).step_by(997) {
                let (a, b) = (&weights[start..start + len], &inputs[start..start + len]);
                // SAFETY: F16C was detected above.
                let fast = unsafe { super::dot_f16(a, b) };
                let slow = crate::kernels::portable::dot_f16(a, b);
                assert!(
                    fast.to_bits() == slow.to_bits() || (fast.is_nan() && slow.is_nan()),
                    "length {len} at {start}: {fast} vs {slow}"
                );
            }
        }
    }

    #[test]
    fn avx2_dot_equals_the_scalar_dot() {
        if !crate::kernels::features::has_avx2() {
            crate::test_skips::skipped("this CPU has no AVX2");
            return;
        }
        let mut rng = Rng::new(1);
        for len in [0usize, 1, 15, 16, 17, 31, 64, 100, 1000, 4099] {
            let a = i8s(&mut rng, len);
            let mut b = i8s(&mut rng, len);
            b.iter_mut().take(3).for_each(|v| *v = -128);
            // SAFETY: AVX2 was detected above.
            let fast = unsafe { super::dot_i8(&a, &b) };
            assert_eq!(fast, crate::kernels::portable::dot_i8(&a, &b), "length {len}");
        }
    }

    /// Pseudo-random f32s with the values that test an order of rounding: wide exponents,
    /// signed zeros, subnormals, infinities and a NaN now and then.
    fn awkward_floats(count: usize, seed: u32) -> Vec<f32> {
        let mut rng = Rng::new(seed.into());
        (0..count)
            .map(|_| {
                let state = (rng.next_u64() >> 32) as u32;
                match state >> 26 {
                    0 => -0.0,
                    1 => f32::from_bits(state & 0x807f_ffff), // subnormal
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

    /// [`dots_strided_each`](super::dots_strided_each) over `n` rows at `stride`, as f32 and as f16 (the rows
    /// rounded), asserted equal bit for bit to the portable `dot` and `dot_f16` of each row and
    /// input; returns those portable sums, `[f32, f16]`, input by input. The CPU must have AVX
    /// and F16C.
    fn dots_each_equal_the_scalar_dots(
        rows: &[f32],
        n: usize,
        stride: usize,
        xs: &[&[f32]],
    ) -> Vec<[f32; 2]> {
        let halves: Vec<f16> = rows.iter().map(|v| f16::from_f32_const(*v)).collect();
        let cols = xs[0].len();
        let mut out = vec![vec![0.0f32; n]; xs.len()];
        let mut outs: Vec<&mut [f32]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
        // SAFETY: the caller has checked for AVX and F16C.
        unsafe { super::dots_strided_each(rows, stride, xs, &mut outs) };
        let mut out16 = vec![vec![0.0f32; n]; xs.len()];
        let mut outs16: Vec<&mut [f32]> = out16.iter_mut().map(|o| o.as_mut_slice()).collect();
        // SAFETY: as above.
        unsafe { super::dots_strided_each(&halves, stride, xs, &mut outs16) };
        let mut slow = Vec::new();
        for (p, x) in xs.iter().enumerate() {
            for r in 0..n {
                let row = r * stride..r * stride + cols;
                // (the message formatted only on failure: Miri pays for every format)
                let at = |width| {
                    format!(
                        "{width}, input {p} of {}, row {r} of {n}x{cols} at stride {stride}",
                        xs.len()
                    )
                };
                let slow32 = crate::kernels::portable::dot_f32(&rows[row.clone()], x);
                assert!(same_bits(out[p][r], slow32), "{}", at("f32"));
                let slow16 = crate::kernels::portable::dot_f16(&halves[row], x);
                assert!(same_bits(out16[p][r], slow16), "{}", at("f16"));
                slow.push([slow32, slow16]);
            }
        }
        slow
    }

    #[test]
    fn avx_f32_rows_equal_the_scalar_dot_per_row() {
        if !crate::kernels::features::has_avx_f16c() {
            crate::test_skips::skipped("this CPU has no AVX and F16C");
            return;
        }
        // (under Miri, which checks every load and store, fewer: each edge of the loops)
        let (all_cols, all_n): (&[usize], &[usize]) = if cfg!(miri) {
            (&[0, 1, 5, 8, 33, 130], &[0, 1, 3, 17, 40])
        } else {
            (
                &[0, 1, 3, 4, 5, 7, 8, 31, 32, 33, 128, 130],
                &[0, 1, 2, 3, 15, 16, 17, 33, 40],
            )
        };
        for &cols in all_cols {
            for extra in [0usize, 3] {
                let stride = cols + extra;
                for &n in all_n {
                    let rows = awkward_floats(n * stride, (cols * 131 + n) as u32);
                    let x = awkward_floats(cols, 7 + cols as u32);
                    let mut fast = vec![1.5f32; n];
                    // SAFETY: AVX and F16C were detected above.
                    unsafe { super::dots_strided(&rows, stride, &x, &mut fast) };
                    for (r, f) in fast.iter().enumerate() {
                        let slow =
                            crate::kernels::portable::dot_f32(&rows[r * stride..r * stride + cols], &x);
                        assert!(
                            same_bits(*f, slow),
                            "{n} rows of {cols} at stride {stride}, row {r}: {f:e} vs {slow:e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn f16c_rows_equal_the_scalar_dot_for_every_half() {
        if !crate::kernels::features::has_avx_f16c() {
            crate::test_skips::skipped("this CPU has no AVX and F16C");
            return;
        }
        // every f16 bit pattern as a weight, in rows of several widths (under Miri, every 17th)
        let weights: Vec<f16> = (0..=u16::MAX)
            .step_by(if cfg!(miri) { 17 } else { 1 })
            .map(f16::from_bits)
            .collect();
        for cols in [4usize, 29, 61, 128] {
            let n = weights.len() / cols;
            let x = awkward_floats(cols, cols as u32);
            let x: Vec<f32> = x.iter().map(|v| if v.is_finite() { *v } else { 0.25 }).collect();
            let mut fast = vec![0.0f32; n];
            // SAFETY: AVX and F16C were detected above.
            unsafe { super::dots_strided(&weights, cols, &x, &mut fast) };
            for (r, f) in fast.iter().enumerate() {
                let slow = crate::kernels::portable::dot_f16(&weights[r * cols..(r + 1) * cols], &x);
                assert!(same_bits(*f, slow), "width {cols}, row {r}: {f:e} vs {slow:e}");
            }
        }
    }

    #[test]
    fn avx_weighted_rows_add_in_the_scalar_order() {
        if !crate::kernels::features::has_avx_f16c() {
            crate::test_skips::skipped("this CPU has no AVX and F16C");
            return;
        }
        for n in [0usize, 1, 7, 8, 9, 31, 32, 33, 64, 70] {
            for (keys, extra) in [(0usize, 0usize), (1, 0), (5, 3), (64, 1)] {
                let stride = n + extra;
                let rows = awkward_floats(keys * stride, (n * 17 + keys) as u32);
                let p = awkward_floats(keys, 3 + keys as u32);
                let start = awkward_floats(n, 99);
                let (mut fast, mut slow) = (start.clone(), start);
                // SAFETY: AVX and F16C were detected above.
                unsafe { super::axpys_strided(&rows, stride, &p, &mut fast) };
                for (k, &weight) in p.iter().enumerate() {
                    for (o, v) in slow.iter_mut().zip(&rows[k * stride..k * stride + n]) {
                        *o += weight * v;
                    }
                }
                for (e, (f, s)) in fast.iter().zip(&slow).enumerate() {
                    assert!(
                        same_bits(*f, *s),
                        "{keys} keys of {n}, element {e}: {f:e} vs {s:e}"
                    );
                }
            }
        }
    }

    #[test]
    fn avx2_row_sums_equal_the_scalar_dot_per_row() {
        if !crate::kernels::features::has_avx2() {
            crate::test_skips::skipped("this CPU has no AVX2");
            return;
        }
        let mut rng = Rng::new(5);
        // (under Miri, which checks every load and store, each edge of the loops once)
        let (all_cols, all_n): (&[usize], &[usize]) = if cfg!(miri) {
            (&[0, 1, 17, 33, 97], &[0, 1, 4, 5, 11])
        } else {
            (&[0, 1, 15, 16, 17, 33, 128, 250], &[0, 1, 3, 4, 5, 8, 11])
        };
        for &cols in all_cols {
            for &n in all_n {
                let mut values = i8s(&mut rng, n * cols);
                values.iter_mut().step_by(7).for_each(|v| *v = -128);
                let xa = i8s(&mut rng, cols);
                let mut xb = i8s(&mut rng, cols);
                xb.iter_mut().step_by(5).for_each(|v| *v = -128);
                let slow = |x: &[i8]| -> Vec<i32> {
                    values
                        .chunks_exact(cols.max(1))
                        .take(n)
                        .map(|row| crate::kernels::portable::dot_i8(row, x))
                        .collect()
                };
                let mut one = vec![0i32; n];
                // SAFETY: AVX2 was detected above.
                unsafe { super::row_sums_i8(&values, cols, &xb, &mut one) };
                let (mut a, mut b) = (vec![0i32; n], vec![0i32; n]);
                // SAFETY: AVX2 was detected above.
                unsafe { super::row_sums_pair_i8(&values, cols, [&xa, &xb], [&mut a, &mut b]) };
                if cols > 0 {
                    assert_eq!(one, slow(&xb), "{n} rows of {cols}");
                    assert_eq!(a, slow(&xa), "{n} rows of {cols}, first of a pair");
                    assert_eq!(b, slow(&xb), "{n} rows of {cols}, second of a pair");
                }
            }
        }
    }

    #[test]
    fn avx2_int4_sums_equal_the_scalar_sums() {
        if !crate::kernels::features::has_avx2() {
            crate::test_skips::skipped("this CPU has no AVX2");
            return;
        }
        let mut rng = Rng::new(9);
        // (under Miri, which checks every load and store, fewer widths: a tail alone, one step
        // of 32 columns and a tail, several)
        let (all_cols, groups): (&[usize], &[usize]) = if cfg!(miri) {
            (&[1, 33, 100], &[8, 16, 32, 64, 128])
        } else {
            (&[1, 8, 31, 32, 33, 64, 100, 128, 250], &[8, 16, 32, 64, 128])
        };
        for &cols in all_cols {
            for &group in groups {
                let rows = 5;
                let row_bytes = crate::kernels::portable::int4_row_bytes(cols);
                let groups = crate::kernels::portable::int4_groups(cols, group);
                // every nibble, -8 included; the bytes past `cols` zero as the packing leaves them
                let mut values = u8s(&mut rng, rows * row_bytes);
                for row in values.chunks_exact_mut(row_bytes) {
                    let mut unpacked: Vec<i8> = (0..cols)
                        .map(|c| crate::kernels::portable::int4_value(row, c))
                        .collect();
                    unpacked[0] = -8;
                    crate::kernels::portable::int4_pack_row(&unpacked, row);
                }
                let codes = u8s(&mut rng, rows * groups);
                let mut xq = i8s(&mut rng, cols);
                xq.iter_mut().step_by(3).for_each(|v| *v = -127);
                let (mut fast, mut slow) = (vec![0i64; rows], vec![0i64; rows]);
                // SAFETY: AVX2 was detected above.
                unsafe { super::row_sums_i4(&values, group, &codes, &xq, &mut fast) };
                crate::kernels::portable::row_sums_i4(&values, group, &codes, &xq, &mut slow);
                assert_eq!(fast, slow, "{rows} rows of {cols}, groups of {group}");
            }
        }
    }

    #[test]
    fn avx2_attention_sums_equal_the_portable_sums() {
        use crate::kernels::portable::{
            key_sums_i8 as key_sums_portable, query_words, value_sums_i8 as value_sums_portable,
        };
        if !crate::kernels::features::has_avx2() {
            crate::test_skips::skipped("this CPU has no AVX2");
            return;
        }
        let mut rng = Rng::new(17);
        // (under Miri, which checks every load and store, fewer: each edge of the loops)
        let (heads, counts): (&[usize], &[usize]) = if cfg!(miri) {
            (&[1, 8, 15, 17, 25, 47, 100], &[0, 1, 4, 5, 33])
        } else {
            (
                &[1, 4, 8, 15, 16, 17, 24, 25, 32, 40, 47, 64, 100],
                &[0, 1, 3, 4, 5, 9, 33],
            )
        };
        for &d_head in heads {
            for &count in counts {
                let stride = d_head + 7;
                let len = (count.max(1) - 1) * stride + d_head;
                let mut keys = i8s(&mut rng, len);
                keys.iter_mut().step_by(11).for_each(|k| *k = -128);
                let mut words: Vec<u32> = (0..query_words(d_head)).map(|_| bits24(&mut rng)).collect();
                words[0] = 0x8001_7fff; // -32767 and 32767 in the halves
                let (mut fast, mut slow) = (vec![0i32; count], vec![0i32; count]);
                // SAFETY: AVX2 was detected above.
                unsafe { super::key_sums_i8(&keys, stride, d_head, &words, &mut fast) };
                key_sums_portable(&keys, stride, d_head, &words, &mut slow);
                assert_eq!(fast, slow, "key sums: d_head {d_head}, {count} keys");

                let weights: Vec<i32> = (0..count).map(|_| rng.below(65535) as i32 - 32767).collect();
                // sums started below 2^24: the value sums stay far from overflowing
                let start: Vec<i32> = (0..d_head).map(|_| bits24(&mut rng) as i32).collect();
                let (mut fast, mut slow) = (start.clone(), start);
                // SAFETY: AVX2 was detected above.
                unsafe { super::value_sums_i8(&keys, stride, &weights, &mut fast) };
                value_sums_portable(&keys, stride, &weights, &mut slow);
                assert_eq!(fast, slow, "value sums: d_head {d_head}, {count} keys");
            }
        }
    }

    #[test]
    fn rows_for_several_inputs_equal_the_scalar_dot_per_row_and_input() {
        if !crate::kernels::features::has_avx_f16c() {
            crate::test_skips::skipped("this CPU has no AVX and F16C");
            return;
        }
        let all_shapes = [
            (0usize, 5usize),
            (1, 4),
            (17, 33),
            (40, 128),
            (35, 7),
            (18, 33),
            (26, 130),
            (8, 3),
            (16, 259),
            (9, 256),
            (24, 517),
            (16, 1024),
            // six rows a block against four inputs: whole blocks, a block and rows after it, none
            (12, 512),
            (13, 1027),
            (5, 600),
            // blocks over chunks of the panel, the last one short
            (24, 24_001),
            // over 1 MB of rows in f32 and in f16: a packed block asks for the next one
            (2_100, 255),
        ];
        // two inputs take their own kernel, three a pair and one, four or more a packed block
        // (two at a time, then one), or on rows of 512 columns or more blocks of four inputs
        // (the last group of 5, 7 and 11 filled up); rows at a stride longer than a row too (as
        // the attention's cached keys are)
        let all_counts = [2usize, 3, 4, 5, 7, 8, 11];
        let (mut finite, mut compared) = (0, 0);
        // and sixteen groups of four over 1 MB of f32 rows: a block asks for the one after next
        let all_many = [((19, 20_200), 65)];
        // Miri, which checks every load and store, takes an hour over those: there, each kernel
        // and each edge of its loops once, and no megabyte of rows (whose prefetches read nothing)
        let (shapes, counts, many): (&[_], &[_], &[_]) = if cfg!(miri) {
            (
                &[(0, 5), (1, 4), (17, 33), (8, 3)],
                &[2, 3, 5, 8],
                // blocks: a block and a row after it; a chunk of the panel and a short one
                &[((7, 515), 5), ((6, 1_100), 4)],
            )
        } else {
            (&all_shapes, &all_counts, &all_many)
        };
        for ((n, cols), count) in shapes
            .iter()
            .flat_map(|&s| counts.iter().map(move |&c| (s, c)))
            .chain(many.iter().copied())
        {
            let stride = cols + count % 3;
            let len = (n * stride).saturating_sub(stride - cols);
            // long rows without infinities and NaNs, whose sums would all be NaN
            let values = |count, seed| {
                let values = awkward_floats(count, seed).into_iter();
                values
                    .map(|v| if cols < 64 || v.is_finite() { v } else { 0.75 })
                    .collect::<Vec<f32>>()
            };
            let rows = values(len, n as u32);
            let inputs: Vec<Vec<f32>> = (0..count).map(|p| values(cols, 50 + p as u32)).collect();
            let xs: Vec<&[f32]> = inputs.iter().map(|x| x.as_slice()).collect();
            for [_, slow16] in dots_each_equal_the_scalar_dots(&rows, n, stride, &xs) {
                finite += usize::from(slow16.is_finite());
                compared += 1;
            }
        }
        // most sums finite, so that the bits compared are not all infinities and NaNs (Miri's
        // fewer long rows: more than half)
        let (part, of) = if cfg!(miri) { (1, 2) } else { (3, 4) };
        assert!(
            finite * of > compared * part,
            "{finite} of {compared} sums are finite"
        );
    }

    #[test]
    fn infinite_weights_stay_in_their_own_rows_and_inputs() {
        if !crate::kernels::features::has_avx_f16c() {
            crate::test_skips::skipped("this CPU has no AVX and F16C");
            return;
        }
        // one infinity per row against inputs without zeros: every sum is infinite, while a
        // block's lanes filled up with zero inputs (5 and 7 inputs) hold NaN; rows 0..12 are two
        // blocks, rows 12 and 13 take the pair kernel, and three columns are each row's tail
        let (n, cols, stride) = (14usize, 515usize, 517usize);
        let mut rows: Vec<f32> = awkward_floats(n * stride, 3)
            .into_iter()
            .map(|v| if v.is_finite() { v } else { 0.25 })
            .collect();
        for r in 0..n {
            rows[r * stride + (r * 37) % cols] = if r % 2 == 0 {
                f32::INFINITY
            } else {
                f32::NEG_INFINITY
            };
        }
        // (Miri: the five inputs alone, a block's lanes filled up all the same)
        for &count in if cfg!(miri) { &[5usize][..] } else { &[5, 7] } {
            let inputs: Vec<Vec<f32>> = (0..count)
                .map(|p| {
                    (0..cols)
                        .map(|c| 0.5 + ((c * 7 + p) % 11) as f32 / 16.0)
                        .collect()
                })
                .collect();
            let xs: Vec<&[f32]> = inputs.iter().map(|x| x.as_slice()).collect();
            for [slow, _] in dots_each_equal_the_scalar_dots(&rows, n, stride, &xs) {
                assert!(slow.is_infinite(), "{slow} with {count} inputs");
            }
        }
    }

    #[test]
    fn avx_quantization_equals_the_portable_one() {
        if !crate::kernels::features::has_avx_f16c() {
            crate::test_skips::skipped("this CPU has no AVX and F16C");
            return;
        }
        // (under Miri, which checks every load and store, the first eight seeds: each kind of
        // input below once)
        let seeds = if cfg!(miri) { 8 } else { 40u32 };
        for len in [0usize, 1, 7, 8, 9, 31, 64, 130] {
            for seed in 0..seeds {
                let mut x = awkward_floats(len, seed * 31 + len as u32);
                if seed % 4 == 0 {
                    x.iter_mut()
                        .for_each(|v| *v = if v.is_finite() { *v } else { 0.5 });
                }
                if seed % 8 == 1 {
                    x.iter_mut()
                        .for_each(|v| *v = f32::from_bits(v.to_bits() & 0x8000_0fff));
                    // subnormal
                }
                let scales = awkward_floats(len, seed + 1000);
                for act in [None, Some(scales.as_slice())] {
                    let (mut fast, mut slow) = (vec![0i8; len], vec![0i8; len]);
                    // SAFETY: AVX was detected above.
                    let fast_scale = unsafe { super::quantize_i8(&x, act, &mut fast) };
                    let slow_scale = crate::kernels::portable::quantize_i8(&x, act, &mut slow);
                    assert!(same_bits(fast_scale, slow_scale), "length {len}, seed {seed}");
                    assert_eq!(fast, slow, "length {len}, seed {seed}, scales {}", act.is_some());
                }
            }
        }
        // every rounding boundary of one range: k + 1/2 and its neighbours, both signs
        let mut x: Vec<f32> = (0..=254).map(|k| k as f32 / 2.0).collect();
        let neighbours: Vec<f32> = x
            .iter()
            .flat_map(|v| [f32::from_bits(v.to_bits() + 1), -v])
            .collect();
        x.extend(neighbours);
        x.push(127.0);
        let (mut fast, mut slow) = (vec![0i8; x.len()], vec![0i8; x.len()]);
        // SAFETY: AVX was detected above.
        unsafe { super::quantize_i8(&x, None, &mut fast) };
        crate::kernels::portable::quantize_i8(&x, None, &mut slow);
        assert_eq!(fast, slow);
    }

    #[test]
    fn avx2_softmax_exp_equals_libm_expf() {
        if !crate::kernels::features::has_avx2() || !crate::kernels::features::has_avx_f16c() {
            crate::test_skips::skipped("this CPU has no AVX2");
            return;
        }
        let check = |args: &[f32; 8], max: f32| {
            let mut fast = *args;
            // SAFETY: AVX2 was detected above.
            unsafe { super::softmax_exp8(&mut fast, max) };
            for (f, a) in fast.iter().zip(args) {
                let slow = libm::expf(a - max);
                assert!(same_bits(*f, slow), "exp({a:e} - {max:e}): {f:e} vs {slow:e}");
            }
        };
        // every 7th f32 from -0 down to past -104 (where exp is 0), and a few specials (under
        // Miri, which checks the loads and stores, a sample of each range)
        let (every, subnormal) = if cfg!(miri) { (1_000_003, 4_099) } else { (7, 1) };
        let mut batch = [0.0f32; 8];
        let mut filled = 0;
        for bits in (0x8000_0000u32..=0xc2d0_0000).step_by(every) {
            batch[filled] = f32::from_bits(bits);
            filled += 1;
            if filled == 8 {
                check(&batch, 0.0);
                filled = 0;
            }
        }
        // every f32 whose exp is subnormal (-87.33655 down to -103.97208)
        for bits in (0xc2ae_ac50u32..=0xc2cf_f1b5).step_by(subnormal) {
            batch[filled] = f32::from_bits(bits);
            filled += 1;
            if filled == 8 {
                check(&batch, 0.0);
                filled = 0;
            }
        }
        for special in [
            [
                0.0,
                -0.0,
                f32::NAN,
                f32::NEG_INFINITY,
                f32::INFINITY,
                1e-5,
                0.5,
                100.0,
            ],
            [
                -87.33655,
                -87.336_55,
                -87.3365,
                -88.0,
                -0.346_573_6,
                -0.346_573_62,
                -1.039_720_8,
                -1.039_720_7,
            ],
            [
                f32::MIN_POSITIVE,
                -f32::MIN_POSITIVE,
                -6.103_515_6e-5,
                -6.103_515e-5,
                -103.972_08,
                -103.972,
                -1e30,
                3.0,
            ],
        ] {
            check(&special, 0.0);
        }
        // through the subtraction of the maximum
        check(&[1.0, 2.0, 3.0, -4.0, 5.5, 5.25, -90.0, 0.0], 5.5);
    }

    #[test]
    fn f16c_strided_rows_and_weighted_rows_equal_the_portable_loops() {
        if !crate::kernels::features::has_avx_f16c() {
            crate::test_skips::skipped("this CPU has no AVX and F16C");
            return;
        }
        let widen = crate::kernels::portable::f16_to_f32;
        for (n, keys, extra) in [
            (32usize, 64usize, 96usize),
            (7, 5, 3),
            (40, 17, 0),
            (64, 1, 1),
            (0, 3, 2),
        ] {
            let stride = n + extra;
            let rows: Vec<f16> = awkward_floats(keys * stride, (n * 7 + keys) as u32)
                .iter()
                .map(|v| f16::from_f32_const(*v))
                .collect();
            let p = awkward_floats(keys, 11 + keys as u32);
            let start = awkward_floats(n, 5);
            let (mut fast, mut slow) = (start.clone(), start);
            // SAFETY: AVX and F16C were detected above.
            unsafe { super::axpys_strided(&rows, stride, &p, &mut fast) };
            for (k, &weight) in p.iter().enumerate() {
                for (o, v) in slow.iter_mut().zip(&rows[k * stride..k * stride + n]) {
                    *o += weight * widen(*v);
                }
            }
            for (e, (f, s)) in fast.iter().zip(&slow).enumerate() {
                assert!(same_bits(*f, *s), "{keys} f16 rows of {n}, element {e}");
            }
            // the keys' side: one product per row at the stride
            let x = awkward_floats(n, 77);
            let mut dots = vec![0.0f32; keys];
            // SAFETY: AVX and F16C were detected above.
            unsafe { super::dots_strided(&rows, stride, &x, &mut dots) };
            for (r, d) in dots.iter().enumerate() {
                let slow = crate::kernels::portable::dot_f16(&rows[r * stride..r * stride + n], &x);
                assert!(same_bits(*d, slow), "f16 row {r} of {keys} at stride {stride}");
            }
        }
    }
}

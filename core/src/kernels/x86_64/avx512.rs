//! x86-64 f32 and f16 rows with AVX-512F for several inputs at once (a segment's positions),
//! chosen at run time (feature `std`), with the bits of the portable [`dot`](crate::kernels::portable::dot_f32)
//! and [`dot_f16`](crate::kernels::portable::dot_f16).
//!
//! The portable dot product sums a row in four accumulators, column `c` into `c % 4`,
//! multiplying and then adding, and finishes with `(a0 + a1) + (a2 + a3) + tail`. Here one
//! 512-bit register holds those four accumulators of four rows for one input, a row in each
//! 128-bit block, and a pass of sixteen rows against four inputs keeps sixteen such registers.
//! The pass's rows are first copied (f16 rows widened exactly by F16C) into a panel of
//! registers, four rows' same four columns in each, 256 columns at a time; every group of four
//! inputs then reads the panel, so a weight is loaded (and widened) once per pass, not once
//! per group. Each step of four columns broadcasts an input's four columns to the four blocks
//! of a register, which meets the step's four registers of rows: sixteen multiply-accumulates
//! a multiply and an add, every lane doing the portable additions in the portable order (no
//! fused multiply-add, which would round once instead of twice). Each row's four sums carry
//! over from one chunk of columns to the next.
//!
//! A pass's sums are finished together, in the portable order: adjacent lanes of two
//! registers added by two lane shuffles and an add, twice, give an input's sixteen rows in one
//! register, `(a0 + a1) + (a2 + a3)` in each lane; then the tail is added, and the sixteen
//! sums are stored at once.

use core::arch::x86_64::*;

use super::row_element::RowElement;
use crate::kernels::portable::rows_that_fit;

/// [`portable::vecmat_sums_i8`](crate::kernels::portable::vecmat_sums_i8) compiled for AVX-512F and BW.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn vecmat_sums_i8(xq: &[i8], values: &[i8], cols: usize, acc: &mut [i32]) {
    crate::kernels::portable::vecmat_sums_i8(xq, values, cols, acc);
}

/// [`portable::vecmat_sums_each_i8`](crate::kernels::portable::vecmat_sums_each_i8) compiled for AVX-512F and BW.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn vecmat_sums_each_i8(
    xq: &[&[i8]; crate::kernels::portable::VECMAT_INPUTS],
    values: &[i8],
    cols: usize,
    sums: &mut [&mut [i32]; crate::kernels::portable::VECMAT_INPUTS],
) {
    crate::kernels::portable::vecmat_sums_each_i8(xq, values, cols, sums);
}

/// Inputs a pass takes, each in sixteen accumulator lanes (four registers of four rows).
const INPUTS: usize = 4;

/// Rows a pass takes, four to a register ([`pack`]).
const ROWS: usize = 16;

/// Columns of a pass's rows packed at a time ([`pack`]: 16 KB of registers for sixteen rows),
/// a multiple of eight.
const CHUNK: usize = 256;

/// Groups of four inputs whose sums a block of rows keeps between chunks of columns, on rows
/// longer than a chunk (more inputs are taken this many groups at a time).
const KEPT_GROUPS: usize = 16;

/// One group's accumulators: `[p][j]` input `p`'s for rows `j`, `4 + j`, `8 + j`, `12 + j` of
/// a pass, one row's four sums (column `c` into `c % 4`) in each 128-bit block.
type Sums = [[__m512; 4]; INPUTS];

/// `outs[p][r] = rows[r * stride..][..cols] · xs[p]` for every input `p` and row `r`, `cols`
/// the shortest input's length, the rows of the shortest output: the bits of
/// [`portable::dot_f32`](crate::kernels::portable::dot_f32) (f32 rows) or [`portable::dot_f16`](crate::kernels::portable::dot_f16)
/// (f16 rows) for each row and input. Rows go sixteen a pass (a last pass of fewer repeats its
/// last row and stores only its own sums), copied (f16 rows widened exactly by F16C) 256
/// columns at a time into a panel of registers (`pack`) that every group of four inputs then
/// reads, so a weight is loaded and widened once per pass, not once per group. Each row's four
/// sums carry over from one chunk of columns to the next in the portable order; a group's
/// sixteen rows are finished together (`finish`).
///
/// # Safety
/// The CPU must support AVX-512F and F16C ([`has_avx512f`](crate::kernels::features::has_avx512f)).
#[target_feature(enable = "avx512f,avx,f16c")]
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
    let body = cols / 4 * 4;
    let chunks = body.div_ceil(CHUNK).max(1);
    let groups = inputs.div_ceil(INPUTS);
    // rows of one chunk finish every group in registers; longer rows keep each group's sums
    // between chunks, `KEPT_GROUPS` groups at a time
    let window = if chunks == 1 { groups } else { KEPT_GROUPS };
    // written before they are read: no zeroing on every call
    let mut panel = core::mem::MaybeUninit::<[__m512; CHUNK]>::uninit();
    let panel = panel.as_mut_ptr().cast::<__m512>();
    let mut kept = [const { core::mem::MaybeUninit::<Sums>::uninit() }; KEPT_GROUPS];
    for first_group in (0..groups).step_by(window.max(1)) {
        let window = first_group..groups.min(first_group + window);
        for r in (0..n).step_by(ROWS) {
            let block = ROWS.min(n - r);
            // the lanes of the pass's own rows
            let mask = ((1u32 << block) - 1) as __mmask16;
            // SAFETY: rows `r..r + block` end at `(r + block - 1) * stride + cols <= rows.len()`
            // (`rows_that_fit` bounds `n`); the others repeat the last.
            let pass: [*const T; ROWS] =
                core::array::from_fn(|i| unsafe { rows.as_ptr().add((r + i.min(block - 1)) * stride) });
            for chunk in 0..chunks {
                let from = chunk * CHUNK;
                let len = CHUNK.min(body - from);
                // SAFETY: columns `from..from + len` (`<= body <= cols`) of each row of `pass`
                // are readable, and `panel` holds `CHUNK >= len` registers.
                unsafe { pack(&pass, from, len, panel) };
                for g in window.clone() {
                    let first = g * INPUTS;
                    let count = INPUTS.min(inputs - first);
                    let mut group: [&[f32]; INPUTS] = [&[]; INPUTS];
                    for (p, input) in group[..count].iter_mut().enumerate() {
                        *input = &xs[first + p][..cols];
                    }
                    let mut sums = if chunk == 0 {
                        [[_mm512_setzero_ps(); 4]; INPUTS]
                    } else {
                        // SAFETY: written at the previous chunk, for this group (a window of
                        // rows longer than a chunk has `KEPT_GROUPS` groups at most).
                        unsafe { kept[g - window.start].assume_init_read() }
                    };
                    // SAFETY: `panel` holds columns `from..from + len` of the pass's rows
                    // (packed just above), and each of the first `count` inputs `cols >= from
                    // + len` columns.
                    unsafe {
                        match count {
                            4 => steps::<4>(panel, len, &group, from, &mut sums),
                            3 => steps::<3>(panel, len, &group, from, &mut sums),
                            2 => steps::<2>(panel, len, &group, from, &mut sums),
                            _ => steps::<1>(panel, len, &group, from, &mut sums),
                        }
                    }
                    if chunk + 1 < chunks {
                        kept[g - window.start].write(sums);
                        continue;
                    }
                    // SAFETY: each row of `pass` has `cols` readable elements, each input
                    // `cols`.
                    let sums = unsafe { finish(&sums, &pass, cols, &group[..count]) };
                    for (out, sums) in outs[first..first + count].iter_mut().zip(sums) {
                        let out = &mut out[r..r + block];
                        // SAFETY: the mask's lanes are the `block` elements of `out`.
                        unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr(), mask, sums) };
                    }
                }
            }
        }
    }
}

/// Columns `from..from + len` (a multiple of four) of the sixteen rows of `pass`, as f32, into
/// `panel`, four registers for each four columns: register `j` of step `s` holds columns
/// `from + 4s..from + 4s + 4` of rows `j`, `4 + j`, `8 + j` and `12 + j`, one a 128-bit block.
/// Eight columns at a time: two registers of two rows' eight columns, then their blocks
/// interleaved (`_mm512_shuffle_f32x4`).
///
/// # Safety
/// Columns `from..from + len` of each row of `pass` must be readable, and `panel` must have
/// room for `len` registers; the CPU must support AVX-512F and F16C.
#[inline]
#[target_feature(enable = "avx512f,avx,f16c")]
unsafe fn pack<T: RowElement>(pass: &[*const T; ROWS], from: usize, len: usize, panel: *mut __m512) {
    // blocks 0 and 2 of the first, then of the second (`EVEN`); or 1 and 3 (`ODD`)
    const EVEN: i32 = 0b10_00_10_00;
    const ODD: i32 = 0b11_01_11_01;
    let two_rows = |a: __m256, b: __m256| -> __m512 {
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castpd256_pd512(_mm256_castps_pd(a)),
            _mm256_castps_pd(b),
        ))
    };
    // columns `c..c + 8` of row-register `j`: two steps
    let eight_columns = |c: usize, j: usize| {
        // SAFETY: eight columns `from + c..from + c + 8` of each row (the caller's `c + 8 <=
        // len`).
        let eight: [__m256; 4] = core::array::from_fn(|b| unsafe { T::eight(pass[4 * b + j].add(from + c)) });
        let low = two_rows(eight[0], eight[1]);
        let high = two_rows(eight[2], eight[3]);
        // SAFETY: registers `c + j` and `c + 4 + j` are below `len`.
        unsafe {
            panel.add(c + j).write(_mm512_shuffle_f32x4::<EVEN>(low, high));
            panel.add(c + 4 + j).write(_mm512_shuffle_f32x4::<ODD>(low, high));
        }
    };
    let mut c = 0;
    // sixteen columns of each row at once (a cache line, where the row starts on one), so that
    // rows whose lines compete for the same cache set are read whole
    while c + 16 <= len {
        for j in 0..4 {
            eight_columns(c, j);
            eight_columns(c + 8, j);
        }
        c += 16;
    }
    if c + 8 <= len {
        for j in 0..4 {
            eight_columns(c, j);
        }
        c += 8;
    }
    if c < len {
        for j in 0..4 {
            // SAFETY: four columns `from + c..from + c + 4` of each row (`len` is a multiple of
            // four), and register `c + j` below `len`.
            unsafe {
                let quad = |b: usize| T::quad(pass[4 * b + j].add(from + c));
                let x = _mm512_castps128_ps512(quad(0));
                let x = _mm512_insertf32x4::<1>(x, quad(1));
                let x = _mm512_insertf32x4::<2>(x, quad(2));
                panel.add(c + j).write(_mm512_insertf32x4::<3>(x, quad(3)));
            }
        }
    }
}

/// Adds columns `from..from + len` (a multiple of four) to the sums of a pass's sixteen rows
/// for the first `P` inputs of `group`, the rows packed in `panel` ([`pack`]): each step of
/// four columns broadcasts an input's four columns to the four blocks of a register, which
/// meets the step's four registers of rows, a multiply and an add each, in the portable order.
///
/// # Safety
/// `panel` must hold `len` registers; the first `P` inputs of `group` columns `from..from +
/// len`; the CPU must support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn steps<const P: usize>(
    panel: *const __m512,
    len: usize,
    group: &[&[f32]; INPUTS],
    from: usize,
    sums: &mut Sums,
) {
    let mut acc: [[__m512; 4]; P] = core::array::from_fn(|p| sums[p]);
    let mut c = 0;
    while c < len {
        // SAFETY: registers `c..c + 4` of `panel` (`c + 4 <= len`).
        let w: [__m512; 4] = core::array::from_fn(|j| unsafe { panel.add(c + j).read() });
        for (acc, input) in acc.iter_mut().zip(group) {
            // SAFETY: columns `from + c..from + c + 4` of the input (`c + 4 <= len`).
            let x = unsafe { _mm512_broadcast_f32x4(_mm_loadu_ps(input.as_ptr().add(from + c))) };
            for (acc, &w) in acc.iter_mut().zip(&w) {
                *acc = _mm512_add_ps(*acc, _mm512_mul_ps(w, x));
            }
        }
        c += 4;
    }
    sums[..P].copy_from_slice(&acc);
}

/// `[x0 + x1, x2 + x3, y0 + y1, y2 + y3]` in each 128-bit block of `x` and `y`: adjacent
/// lanes added, each sum's operands in lane order.
#[inline]
#[target_feature(enable = "avx512f")]
fn pair_sums(x: __m512, y: __m512) -> __m512 {
    // lanes 0 and 2 of each block of `x`, then of `y`; or lanes 1 and 3
    const EVEN: i32 = 0b10_00_10_00;
    const ODD: i32 = 0b11_01_11_01;
    _mm512_add_ps(_mm512_shuffle_ps::<EVEN>(x, y), _mm512_shuffle_ps::<ODD>(x, y))
}

/// The sixteen rows' dot products of a pass for each input of `group`, one register an input
/// (lane `i` row `i`'s), from their sums ([`Sums`]) and the columns past the last multiple of
/// four, in the portable order: `(a0 + a1) + (a2 + a3)` by two rounds of [`pair_sums`] (block
/// `b` of the result holding rows `4b..4b + 4`), then the tail, `+0.0` where there is none
/// (as the portable code adds it).
///
/// # Safety
/// `cols` elements must be readable from each row of `pass`, columns `cols / 4 * 4..cols`
/// from each input; the CPU must support AVX-512F and F16C.
#[inline]
#[target_feature(enable = "avx512f,avx,f16c")]
unsafe fn finish<T: RowElement>(
    sums: &Sums,
    pass: &[*const T; ROWS],
    cols: usize,
    group: &[&[f32]],
) -> [__m512; INPUTS] {
    let mut tails = [_mm512_setzero_ps(); INPUTS];
    for k in cols / 4 * 4..cols {
        // SAFETY: `k < cols`, inside each row.
        let column: [f32; ROWS] = core::array::from_fn(|i| unsafe { *pass[i].add(k) }.widen());
        // SAFETY: `column` is sixteen readable f32.
        let column = unsafe { _mm512_loadu_ps(column.as_ptr()) };
        for (tail, input) in tails.iter_mut().zip(group) {
            *tail = _mm512_add_ps(*tail, _mm512_mul_ps(column, _mm512_set1_ps(input[k])));
        }
    }
    core::array::from_fn(|p| {
        let [a, b, c, d] = sums[p];
        _mm512_add_ps(pair_sums(pair_sums(a, b), pair_sums(c, d)), tails[p])
    })
}

/// Weight lists an [`axpys_strided_each_f32`] pass takes: four lists of one sixty-four element chunk are
/// sixteen accumulators, and each loaded row chunk meets all four.
const LISTS: usize = 4;

/// `outs[q] += ps[q][k] * rows[k * stride..][..n]` for each `k` in order, `n` the shortest
/// output's length and `k` below the shortest list's, for every list `q`: the bits of
/// [`x86::axpys`](super::avx::axpys_strided) for each list (each element adds its products in `k`
/// order, rounding the product and then the sum; no fused multiply-add). Four lists a pass,
/// sixty-four elements at a time (masked past `n`), so each loaded row chunk meets four lists.
///
/// # Safety
/// The CPU must support AVX-512F ([`has_avx512f`](crate::kernels::features::has_avx512f)).
#[target_feature(enable = "avx512f")]
pub unsafe fn axpys_strided_each_f32(rows: &[f32], stride: usize, ps: &[&[f32]], outs: &mut [&mut [f32]]) {
    let n = outs.iter().map(|o| o.len()).min().unwrap_or(0);
    let wanted = ps.iter().map(|p| p.len()).min().unwrap_or(0);
    let k_count = rows_that_fit(rows.len(), stride, n, wanted);
    let lists = ps.len().min(outs.len());
    let mut first = 0;
    while first < lists {
        let count = LISTS.min(lists - first);
        let group = &ps[first..first + count];
        let outs = &mut outs[first..first + count];
        let mut e = 0;
        while e < n {
            // SAFETY: rows `k < k_count` have `n` readable elements from `k * stride`
            // (`rows_that_fit`), each output `n`, each list `k_count`; the CPU has AVX-512F.
            unsafe {
                match count {
                    4 => axpys_chunk::<4>(rows.as_ptr(), stride, k_count, group, outs, (e, n)),
                    3 => axpys_chunk::<3>(rows.as_ptr(), stride, k_count, group, outs, (e, n)),
                    2 => axpys_chunk::<2>(rows.as_ptr(), stride, k_count, group, outs, (e, n)),
                    _ => axpys_chunk::<1>(rows.as_ptr(), stride, k_count, group, outs, (e, n)),
                }
            }
            e += 4 * 16;
        }
        first += count;
    }
}

/// Elements `e..min(e + 64, n)` of the first `Q` outputs: four registers each, masked past
/// `n`, the rows' products added in `k` order.
///
/// # Safety
/// Rows `k < k_count` must have `n` readable elements from `rows + k * stride`; each output
/// `n` elements, each list `k_count`; the CPU must support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn axpys_chunk<const Q: usize>(
    rows: *const f32,
    stride: usize,
    k_count: usize,
    ps: &[&[f32]],
    outs: &mut [&mut [f32]],
    (e, n): (usize, usize),
) {
    let mask = |i: usize| -> __mmask16 {
        let from = e + 16 * i;
        let len = n.saturating_sub(from).min(16);
        ((1u32 << len) - 1) as __mmask16
    };
    let masks: [__mmask16; 4] = core::array::from_fn(mask);
    let mut acc = [[_mm512_setzero_ps(); 4]; Q];
    for (acc, out) in acc.iter_mut().zip(outs.iter()) {
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: the mask's lanes are elements below `n` of an output of `n`.
            *acc = unsafe { _mm512_maskz_loadu_ps(masks[i], out.as_ptr().add(e + 16 * i)) };
        }
    }
    for k in 0..k_count {
        let mut row = [_mm512_setzero_ps(); 4];
        for (i, row) in row.iter_mut().enumerate() {
            // SAFETY: the mask's lanes are elements below `n` of row `k < k_count`.
            *row = unsafe { _mm512_maskz_loadu_ps(masks[i], rows.add(k * stride + e + 16 * i)) };
        }
        for (acc, p) in acc.iter_mut().zip(ps) {
            // SAFETY: `k < k_count <= p.len()`.
            let weight = _mm512_set1_ps(unsafe { *p.get_unchecked(k) });
            for (acc, &row) in acc.iter_mut().zip(&row) {
                *acc = _mm512_add_ps(*acc, _mm512_mul_ps(weight, row));
            }
        }
    }
    for (acc, out) in acc.iter().zip(outs.iter_mut()) {
        for (i, &acc) in acc.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(e + 16 * i), masks[i], acc) };
        }
    }
}

/// [`super::avx::softmax_exp8`] for sixteen values, step for step in 512-bit registers (the
/// lane choices in mask registers): `values[i] = softmax_exp(values[i] - max)`, computing
/// `libm::expf`'s bits.
///
/// # Safety
/// The CPU must support AVX-512F ([`has_avx512f`](crate::kernels::features::has_avx512f)).
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn softmax_exp16(values: &mut [f32; 16], max: f32) {
    // libm's steps and constants, bit for bit (`kernels::fast_math::expf`)
    use crate::kernels::fast_math::expf::*;
    let f = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let ones = _mm512_set1_ps(1.0);
    // SAFETY: `values` is sixteen readable f32.
    let x = _mm512_sub_ps(unsafe { _mm512_loadu_ps(values.as_ptr()) }, _mm512_set1_ps(max));
    let abs = _mm512_castsi512_ps(_mm512_and_si512(
        _mm512_castps_si512(x),
        _mm512_set1_epi32(0x7fff_ffff),
    ));
    // lanes libm takes another path for: NaN, x > 2^-14
    let unusual = _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(x, f(TINY));
    // k: trunc(x / ln 2 - 1/2) beyond 1.5 ln 2, -1 beyond 0.5 ln 2, else 0
    let truncated = _mm512_cvttps_epi32(_mm512_add_ps(
        _mm512_mul_ps(_mm512_set1_ps(INV_LN2), x),
        _mm512_set1_ps(-0.5),
    ));
    let beyond_3_halves = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(abs, f(THREE_HALVES_LN2));
    let beyond_half = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(abs, f(HALF_LN2));
    let minus_one = _mm512_maskz_mov_epi32(beyond_half, _mm512_set1_epi32(-1));
    let k = _mm512_mask_blend_epi32(beyond_3_halves, minus_one, truncated);
    let kf = _mm512_cvtepi32_ps(k);
    let hi = _mm512_sub_ps(x, _mm512_mul_ps(kf, _mm512_set1_ps(LN2_HI)));
    let lo = _mm512_mul_ps(kf, _mm512_set1_ps(LN2_LO));
    let r = _mm512_sub_ps(hi, lo);
    let rr = _mm512_mul_ps(r, r);
    let c = _mm512_sub_ps(
        r,
        _mm512_mul_ps(
            rr,
            _mm512_add_ps(_mm512_set1_ps(P1), _mm512_mul_ps(rr, _mm512_set1_ps(P2))),
        ),
    );
    let quotient = _mm512_div_ps(_mm512_mul_ps(r, c), _mm512_sub_ps(_mm512_set1_ps(2.0), c));
    let y = _mm512_add_ps(ones, _mm512_add_ps(_mm512_sub_ps(quotient, lo), hi));
    // y * 2^k as libm's scalbnf takes it (see `softmax_exp8`)
    let deep = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(-126), k);
    let y = _mm512_mask_blend_ps(deep, y, _mm512_mul_ps(y, f(DEEP_SCALE)));
    let k = _mm512_mask_add_epi32(k, deep, k, _mm512_set1_epi32(102));
    let scale = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
        k,
        _mm512_set1_epi32(127),
    )));
    let scaled = _mm512_mul_ps(y, scale);
    // |x| <= 2^-14: libm returns 1 + x
    let tiny = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(abs, f(TINY));
    let result = _mm512_mask_blend_ps(tiny, scaled, _mm512_add_ps(ones, x));
    // x <= -103.972084 or -inf: libm's expf returns 0
    let underflow = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(abs, f(UNDERFLOW))
        & _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    let result = _mm512_maskz_mov_ps(!underflow, result);
    let unusual = unusual & !underflow;
    let mut args = [0.0f32; 16];
    if unusual != 0 {
        // SAFETY: `args` has room for sixteen f32.
        unsafe { _mm512_storeu_ps(args.as_mut_ptr(), x) };
    }
    // SAFETY: `values` has room for sixteen f32.
    unsafe { _mm512_storeu_ps(values.as_mut_ptr(), result) };
    if unusual != 0 {
        for (i, (v, arg)) in values.iter_mut().zip(args).enumerate() {
            if unusual & (1 << i) != 0 {
                *v = libm::expf(arg);
            }
        }
    }
}

/// [`softmax_exp16`] on each chunk of sixteen of `values`, then [`super::avx::softmax_exp8`]
/// on a last eight (`values` a multiple of eight long).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and F16C.
#[target_feature(enable = "avx512f,avx2,f16c")]
pub unsafe fn softmax_exps_f32(values: &mut [f32], max: f32) {
    let (sixteens, rest) = values.as_chunks_mut::<16>();
    for sixteen in sixteens {
        // SAFETY: the CPU has AVX-512F (this function's contract).
        unsafe { softmax_exp16(sixteen, max) };
    }
    let (eights, _) = rest.as_chunks_mut::<8>();
    for eight in eights {
        // SAFETY: the CPU has AVX2 and F16C (this function's contract).
        unsafe { super::avx::softmax_exp8(eight, max) };
    }
}

/// Rows whose LayerNorm sums [`layer_norm_sums_f32`] adds side by side, one a lane.
pub const LAYER_NORM_ROWS: usize = 16;

/// The LayerNorm sums of the first `rows = min(16, block.len() / width)` rows of `width` in
/// `block`, side by side, with the bits of the portable
/// [`layer_norm_rows_in_place`](crate::vector::layer_norm_rows_in_place): `means[b]` the sum
/// of row `b`'s values from `-0.0` in column order, divided by `width`; `vars[b]` the sum of its
/// `(v - mean) * (v - mean)` from `-0.0` in column order (not divided). Lanes past `rows` are
/// `-0.0`, as the portable arrays start, with `means` divided all the same. One lane a row:
/// sixteen columns of the sixteen rows are loaded a register a row (masked past `width`) and
/// transposed (`transpose_sixteen`), then added a column at a time; twice, once for each sum.
///
/// # Safety
/// `width` must not be zero; the CPU must support AVX-512F ([`has_avx512f`](crate::kernels::features::has_avx512f)).
#[target_feature(enable = "avx512f")]
pub unsafe fn layer_norm_sums_f32(
    block: &[f32],
    width: usize,
    means: &mut [f32; LAYER_NORM_ROWS],
    vars: &mut [f32; LAYER_NORM_ROWS],
) {
    let rows = (block.len() / width).min(LAYER_NORM_ROWS);
    let negative_zero = _mm512_set1_ps(-0.0);
    if rows == 0 {
        let mean = _mm512_div_ps(negative_zero, _mm512_set1_ps(width as f32));
        // SAFETY: `means` and `vars` have room for sixteen f32.
        unsafe {
            _mm512_storeu_ps(means.as_mut_ptr(), mean);
            _mm512_storeu_ps(vars.as_mut_ptr(), negative_zero);
        }
        return;
    }
    // rows past `rows` repeat the last (their lanes are set to -0.0 at the end)
    // SAFETY: row `min(b, rows - 1)` ends at `rows * width <= block.len()`.
    let starts: [*const f32; LAYER_NORM_ROWS] =
        core::array::from_fn(|b| unsafe { block.as_ptr().add(b.min(rows - 1) * width) });
    let own = ((1u32 << rows) - 1) as __mmask16;
    let mut columns = [_mm512_setzero_si512(); 16];
    let mut sum = negative_zero;
    for c in (0..width).step_by(16) {
        // SAFETY: each row of `starts` has `width` readable columns (above).
        let left = unsafe { sixteen_columns(&starts, c, width, &mut columns) };
        for &column in &columns[..left] {
            sum = _mm512_add_ps(sum, _mm512_castsi512_ps(column));
        }
    }
    let mean = _mm512_div_ps(
        _mm512_mask_blend_ps(own, negative_zero, sum),
        _mm512_set1_ps(width as f32),
    );
    let mut var = negative_zero;
    for c in (0..width).step_by(16) {
        // SAFETY: as above.
        let left = unsafe { sixteen_columns(&starts, c, width, &mut columns) };
        for &column in &columns[..left] {
            let deviation = _mm512_sub_ps(_mm512_castsi512_ps(column), mean);
            var = _mm512_add_ps(var, _mm512_mul_ps(deviation, deviation));
        }
    }
    // SAFETY: `means` and `vars` have room for sixteen f32.
    unsafe {
        _mm512_storeu_ps(means.as_mut_ptr(), mean);
        _mm512_storeu_ps(vars.as_mut_ptr(), _mm512_mask_blend_ps(own, negative_zero, var));
    }
}

/// Columns `c..c + min(16, width - c)` of the sixteen rows at `starts`, a register a column
/// (lane `b` row `b`'s, the bits of the f32 as integers) in `columns`; returns how many.
///
/// # Safety
/// Each row of `starts` must have `width > c` readable f32; the CPU must support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn sixteen_columns(
    starts: &[*const f32; 16],
    c: usize,
    width: usize,
    columns: &mut [__m512i; 16],
) -> usize {
    let left = (width - c).min(16);
    let mask = ((1u32 << left) - 1) as __mmask16;
    for (row, start) in columns.iter_mut().zip(starts) {
        // SAFETY: the mask's lanes are columns `c..c + left` of the row, `c + left <= width`.
        *row = unsafe { _mm512_maskz_loadu_epi32(mask, start.add(c).cast()) };
    }
    transpose_sixteen(columns);
    left
}

/// Transposes sixteen registers of sixteen dwords: lane `j` of register `i` goes to lane `i` of
/// register `j`. Interleaving dwords, then pairs of them, within each 128-bit quarter gives
/// registers of four rows' dword `4L + j` in quarter `L`; two rounds of moving whole quarters
/// then gather each dword's sixteen rows.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn transpose_sixteen(block: &mut [__m512i; 16]) {
    let r = *block;
    let mut pairs = [_mm512_setzero_si512(); 16];
    for k in 0..8 {
        pairs[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        pairs[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    // fours[4k + j], quarter L: rows 4k..4k + 4, dword 4L + j
    let mut fours = [_mm512_setzero_si512(); 16];
    for k in 0..4 {
        let t = &pairs[4 * k..4 * k + 4];
        fours[4 * k] = _mm512_unpacklo_epi64(t[0], t[2]);
        fours[4 * k + 1] = _mm512_unpackhi_epi64(t[0], t[2]);
        fours[4 * k + 2] = _mm512_unpacklo_epi64(t[1], t[3]);
        fours[4 * k + 3] = _mm512_unpackhi_epi64(t[1], t[3]);
    }
    // quarters 0 and 1 of the first, then of the second (`LOW`), or 2 and 3 (`HIGH`); then
    // quarters 0 and 2 of each (`EVEN`) or 1 and 3 (`ODD`)
    const LOW: i32 = 0b01_00_01_00;
    const HIGH: i32 = 0b11_10_11_10;
    const EVEN: i32 = 0b10_00_10_00;
    const ODD: i32 = 0b11_01_11_01;
    for j in 0..4 {
        let (a, b, c, d) = (fours[j], fours[4 + j], fours[8 + j], fours[12 + j]);
        let low_ab = _mm512_shuffle_i32x4::<LOW>(a, b);
        let high_ab = _mm512_shuffle_i32x4::<HIGH>(a, b);
        let low_cd = _mm512_shuffle_i32x4::<LOW>(c, d);
        let high_cd = _mm512_shuffle_i32x4::<HIGH>(c, d);
        block[j] = _mm512_shuffle_i32x4::<EVEN>(low_ab, low_cd);
        block[4 + j] = _mm512_shuffle_i32x4::<ODD>(low_ab, low_cd);
        block[8 + j] = _mm512_shuffle_i32x4::<EVEN>(high_ab, high_cd);
        block[12 + j] = _mm512_shuffle_i32x4::<ODD>(high_ab, high_cd);
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn softmax_exp16_has_the_bits_of_libm_expf() {
        if !crate::kernels::features::has_avx512f() {
            crate::test_skips::skipped("this CPU has no AVX-512F");
            return;
        }
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let check = |args: &[f32; 16], max: f32| {
            let mut fast = *args;
            // SAFETY: AVX-512F was detected above.
            unsafe { super::softmax_exp16(&mut fast, max) };
            for (f, a) in fast.iter().zip(args) {
                let slow = libm::expf(a - max);
                assert!(same(*f, slow), "exp({a:e} - {max:e}): {f:e} vs {slow:e}");
            }
        };
        // every 7th f32 from -0 down to past -104, every f32 whose exp is subnormal, specials
        // (under Miri, which checks the loads and stores, a sample of each range)
        let (step, subnormal) = if cfg!(miri) { (1_000_003, 4_099) } else { (7, 1) };
        let every = (0x8000_0000u32..=0xc2d0_0000)
            .step_by(step)
            .chain((0xc2ae_ac50u32..=0xc2cf_f1b5).step_by(subnormal));
        let specials = [
            0.0,
            -0.0,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            1e-5,
            0.5,
            100.0,
            -87.33655,
            -88.0,
            -0.346_573_6,
            -1.039_720_8,
            f32::MIN_POSITIVE,
            -6.103_515_6e-5,
            -103.972_08,
            -1e30,
        ];
        let values: Vec<f32> = every.map(f32::from_bits).chain(specials).collect();
        for batch in values.chunks_exact(16) {
            check(batch.try_into().unwrap(), 0.0);
        }
        // through the subtraction of the maximum
        let shifted = [
            1.0, 2.0, 3.0, -4.0, 5.5, 5.25, -90.0, 0.0, 5.5, -1e-6, 4.0, -3.0, 0.25, 1e-3, -97.0, 5.0,
        ];
        check(&shifted, 5.5);
    }
    use half::f16;

    use crate::kernels::portable;
    use crate::rng::Rng;

    /// 32 random bits.
    fn bits(rng: &mut Rng) -> u32 {
        (rng.next_u64() >> 32) as u32
    }

    /// Values of many magnitudes, so that a different order of additions rounds apart: a
    /// mantissa in `[-0.5, 0.5)` times 1, 1e-3, 1e3 or 7.5.
    fn magnitudes(rng: &mut Rng) -> f32 {
        let state = bits(rng);
        let mantissa = (state >> 9) as f32 / (1u32 << 23) as f32 - 0.5;
        mantissa * [1.0f32, 1e-3, 1e3, 7.5][(state & 3) as usize]
    }

    #[test]
    fn avx512_rows_for_several_inputs_equal_the_scalar_dots() {
        if !crate::kernels::features::has_avx512f() {
            crate::test_skips::skipped("this CPU has no AVX-512F (with F16C)");
            return;
        }
        let mut rng = Rng::new(17);
        let mut next = || magnitudes(&mut rng);
        // past 256 columns f16 rows are widened in chunks, past 64 inputs they go 64 at a time
        for cols in [0usize, 1, 3, 4, 5, 17, 64, 130, 256, 259, 530] {
            for n in [0usize, 1, 7, 16, 17, 33] {
                for inputs in [1usize, 3, 4, 5, 8, 11, 16, 67] {
                    let stride = cols + 3;
                    let rows: Vec<f32> = (0..n * stride).map(|_| next()).collect();
                    let xs: Vec<Vec<f32>> =
                        (0..inputs).map(|_| (0..cols).map(|_| next()).collect()).collect();
                    // the same values as f16 rows (rounded once, then widened exactly)
                    let rows_f16: Vec<f16> = rows.iter().map(|&v| f16::from_f32_const(v)).collect();
                    let x_refs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
                    let mut outs = vec![vec![f32::NAN; n]; inputs];
                    let mut outs_f16 = vec![vec![f32::NAN; n]; inputs];
                    let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                    let mut f16_refs: Vec<&mut [f32]> = outs_f16.iter_mut().map(|o| &mut o[..]).collect();
                    // SAFETY: AVX-512F and F16C were detected above.
                    unsafe {
                        super::dots_strided_each(&rows, stride, &x_refs, &mut out_refs);
                        super::dots_strided_each(&rows_f16, stride, &x_refs, &mut f16_refs);
                    }
                    for (p, x) in xs.iter().enumerate() {
                        for r in 0..n {
                            let row = r * stride..r * stride + cols;
                            let want = portable::dot_f32(&rows[row.clone()], x);
                            let want_f16 = portable::dot_f16(&rows_f16[row], x);
                            let what = format!("row {r} of {n}, input {p} of {inputs}, {cols} columns");
                            assert_eq!(outs[p][r].to_bits(), want.to_bits(), "f32 {what}");
                            assert_eq!(outs_f16[p][r].to_bits(), want_f16.to_bits(), "f16 {what}");
                        }
                    }
                }
            }
        }
    }

    /// Rows, inputs and the sums they make for [`dots_four_inputs_have_the_bits_of_scalar_dot`]:
    /// signed zeros, magnitudes far apart (products from 3e34 down to subnormal ones), and rows
    /// whose products cancel exactly against an input of equal columns.
    struct DotCase {
        rows: Vec<f32>,
        xs: Vec<Vec<f32>>,
    }

    impl DotCase {
        fn new(seed: u32, n: usize, stride: usize, cols: usize, inputs: usize) -> Self {
            let mut rng = Rng::new(seed.into());
            let mut next = move |scales: &[f32]| {
                let state = bits(&mut rng);
                match state >> 28 {
                    0 => 0.0,
                    1 => -0.0,
                    _ => {
                        let mantissa = (state >> 5 & 0x7f_ffff) as f32 / (1u32 << 23) as f32 - 0.5;
                        mantissa * scales[(state & 0x1f) as usize % scales.len()]
                    }
                }
            };
            // row magnitudes f16 holds (3e4 and 1e-6, a subnormal there), input ones f32 does
            let row_scales = [1.0f32, 1e-3, 1e3, 7.5, 3e4, 1e-6];
            let input_scales = [1.0f32, 1e-3, 1e3, 7.5, 1e30, 1e-37];
            let mut rows: Vec<f32> = (0..n * stride + cols).map(|_| next(&row_scales)).collect();
            for r in 0..n {
                let row = &mut rows[r * stride..r * stride + cols];
                match r % 5 {
                    // the products of columns 2i and 2i + 1 cancel against an even input
                    0 => {
                        for c in (1..cols).step_by(2) {
                            row[c] = -row[c - 1];
                        }
                    }
                    1 => row.fill(-0.0),
                    _ => {}
                }
            }
            let mut xs: Vec<Vec<f32>> = (0..inputs)
                .map(|p| (0..cols + p % 2 * 3).map(|_| next(&input_scales)).collect())
                .collect();
            xs[1].fill(0.75);
            xs[2].iter_mut().for_each(|x| *x = -x.abs());
            Self { rows, xs }
        }
    }

    #[test]
    fn dots_four_inputs_have_the_bits_of_scalar_dot() {
        if !crate::kernels::features::has_avx512f() {
            crate::test_skips::skipped("this CPU has no AVX-512F (with F16C)");
            return;
        }
        for cols in [1usize, 3, 4, 5, 63, 64, 65, 130] {
            for n in 1..=40 {
                for inputs in 3..=20 {
                    let stride = cols + [0, 1, 7][(n + inputs) % 3];
                    let case =
                        DotCase::new((cols * 1_000 + n * 100 + inputs) as u32, n, stride, cols, inputs);
                    let rows_f16: Vec<f16> = case.rows.iter().map(|&v| f16::from_f32_const(v)).collect();
                    let x_refs: Vec<&[f32]> = case.xs.iter().map(|x| &x[..]).collect();
                    // two more outputs than rows: they must stay as they are
                    let sentinel = f32::from_bits(0x7fc0_1234);
                    let mut outs = vec![vec![sentinel; n + 2]; inputs];
                    let mut outs_f16 = outs.clone();
                    let rows = &case.rows[..(n - 1) * stride + cols];
                    let rows_f16 = &rows_f16[..rows.len()];
                    {
                        let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                        let mut f16_refs: Vec<&mut [f32]> = outs_f16.iter_mut().map(|o| &mut o[..]).collect();
                        // SAFETY: AVX-512F and F16C were detected above.
                        unsafe {
                            super::dots_strided_each(rows, stride, &x_refs, &mut out_refs);
                            super::dots_strided_each(rows_f16, stride, &x_refs, &mut f16_refs);
                        }
                    }
                    for (p, x) in case.xs.iter().enumerate() {
                        for r in 0..n {
                            let row = r * stride..r * stride + cols;
                            let want = portable::dot_f32(&rows[row.clone()], &x[..cols]);
                            let want_f16 = portable::dot_f16(&rows_f16[row], &x[..cols]);
                            let what = format!("row {r} of {n}, input {p} of {inputs}, {cols} columns");
                            assert_eq!(outs[p][r].to_bits(), want.to_bits(), "f32 {what}: {want:e}");
                            assert_eq!(
                                outs_f16[p][r].to_bits(),
                                want_f16.to_bits(),
                                "f16 {what}: {want_f16:e}"
                            );
                        }
                        for out in [&outs[p], &outs_f16[p]] {
                            assert!(
                                out[n..].iter().all(|v| v.to_bits() == sentinel.to_bits()),
                                "past row {n}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The portable loops of [`portable::layer_norm_rows_in_place`], for one block.
    fn portable_layer_norm_sums(block: &[f32], width: usize) -> ([f32; 16], [f32; 16]) {
        let n = width as f32;
        let rows = (block.len() / width).min(16);
        let mut means = [-0.0f32; 16];
        for c in 0..width {
            for (b, sum) in means[..rows].iter_mut().enumerate() {
                *sum += block[b * width + c];
            }
        }
        for mean in means.iter_mut() {
            *mean /= n;
        }
        let mut vars = [-0.0f32; 16];
        for c in 0..width {
            for (b, (sum, mean)) in vars[..rows].iter_mut().zip(&means).enumerate() {
                let v = block[b * width + c];
                *sum += (v - mean) * (v - mean);
            }
        }
        (means, vars)
    }

    #[test]
    fn layer_norm_sums_have_the_bits_of_the_portable_loops() {
        if !crate::kernels::features::has_avx512f() {
            crate::test_skips::skipped("this CPU has no AVX-512F");
            return;
        }
        let mut rng = Rng::new(29);
        let mut next = || {
            let state = bits(&mut rng);
            match state >> 28 {
                0 => -0.0,
                1 => 0.0,
                // sums that overflow, and subnormal values
                2 => f32::MAX * if state & 1 == 0 { 0.9 } else { -0.9 },
                3 => f32::from_bits(state & 0x8000_ffff),
                _ => {
                    let mantissa = (state >> 5 & 0x7f_ffff) as f32 / (1u32 << 23) as f32 - 0.25;
                    mantissa * [1.0f32, 1e-3, 1e3, 7.5, 1e-30, 1e30][(state & 7) as usize % 6]
                }
            }
        };
        for width in [1usize, 2, 15, 16, 17, 31, 64, 1024, 1031] {
            for rows in 0..=16 {
                // and a block a part row longer, as a last chunk of a longer buffer can be
                for extra in [0, width / 2] {
                    let mut block: Vec<f32> = (0..rows * width + extra).map(|_| next()).collect();
                    if rows > 1 {
                        // a row of negative zeros, and one of one value (no deviation)
                        block[..width].fill(-0.0);
                        block[width..2 * width].fill(3.0);
                    }
                    let (want_means, want_vars) = portable_layer_norm_sums(&block, width);
                    let mut means = [f32::NAN; 16];
                    let mut vars = [f32::NAN; 16];
                    // SAFETY: AVX-512F was detected above; `width` is not zero.
                    unsafe { super::layer_norm_sums_f32(&block, width, &mut means, &mut vars) };
                    for b in 0..16 {
                        let what = format!("row {b} of {rows}, width {width}");
                        assert_eq!(means[b].to_bits(), want_means[b].to_bits(), "mean of {what}");
                        assert_eq!(
                            vars[b].to_bits(),
                            want_vars[b].to_bits(),
                            "variance sum of {what}"
                        );
                    }
                    let mut means = [f32::NAN; 16];
                    let mut vars = [f32::NAN; 16];
                    crate::kernels::layer_norm_sums_f32(&block, width, &mut means, &mut vars);
                    assert_eq!(
                        means.map(f32::to_bits),
                        want_means.map(f32::to_bits),
                        "dispatch, {width}"
                    );
                    assert_eq!(
                        vars.map(f32::to_bits),
                        want_vars.map(f32::to_bits),
                        "dispatch, {width}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_transpose_moves_every_lane_across_the_diagonal() {
        use core::arch::x86_64::*;
        if !crate::kernels::features::has_avx512f() {
            crate::test_skips::skipped("this CPU has no AVX-512F");
            return;
        }
        let mut lanes = [[0i32; 16]; 16];
        for (i, row) in lanes.iter_mut().enumerate() {
            for (j, lane) in row.iter_mut().enumerate() {
                *lane = (i * 100 + j) as i32;
            }
        }
        // SAFETY: each array holds sixteen i32; the CPU has AVX-512F (checked above).
        let mut block: [__m512i; 16] =
            core::array::from_fn(|i| unsafe { _mm512_loadu_epi32(lanes[i].as_ptr()) });
        // SAFETY: the CPU has AVX-512F (checked above).
        unsafe { super::transpose_sixteen(&mut block) };
        for (j, register) in block.iter().enumerate() {
            let mut got = [0i32; 16];
            // SAFETY: as above.
            unsafe { _mm512_storeu_epi32(got.as_mut_ptr(), *register) };
            let want: [i32; 16] = core::array::from_fn(|i| (i * 100 + j) as i32);
            assert_eq!(got, want, "register {j}");
        }
    }

    #[test]
    fn avx512_weighted_rows_for_several_lists_equal_the_portable_sums() {
        if !crate::kernels::features::has_avx512f() {
            crate::test_skips::skipped("this CPU has no AVX-512F (with F16C)");
            return;
        }
        let mut rng = Rng::new(5);
        let mut next = || magnitudes(&mut rng);
        // elements: a masked register, whole ones, and past one pass of sixty-four
        for n in [1usize, 4, 15, 16, 19, 64, 65, 130] {
            for keys in [0usize, 1, 2, 9, 40] {
                for lists in [1usize, 2, 3, 4, 5, 9] {
                    let stride = n + 5;
                    let rows: Vec<f32> = (0..keys * stride).map(|_| next()).collect();
                    let ps: Vec<Vec<f32>> = (0..lists).map(|_| (0..keys).map(|_| next()).collect()).collect();
                    let starts: Vec<Vec<f32>> =
                        (0..lists).map(|_| (0..n).map(|_| next()).collect()).collect();
                    let mut outs = starts.clone();
                    let p_refs: Vec<&[f32]> = ps.iter().map(|p| &p[..]).collect();
                    let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                    // SAFETY: AVX-512F was detected above.
                    unsafe { super::axpys_strided_each_f32(&rows, stride, &p_refs, &mut out_refs) };
                    for (q, (p, start)) in ps.iter().zip(&starts).enumerate() {
                        for e in 0..n {
                            let mut want = start[e];
                            for (k, &weight) in p.iter().enumerate() {
                                want += weight * rows[k * stride + e];
                            }
                            let what = format!("element {e} of {n}, list {q} of {lists}, {keys} keys");
                            assert_eq!(outs[q][e].to_bits(), want.to_bits(), "{what}");
                        }
                    }
                }
            }
        }
    }
}

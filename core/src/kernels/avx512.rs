//! x86-64 f32 and f16 rows with AVX-512F for several inputs at once (a segment's positions),
//! chosen at run time (feature `std`), with the bits of the portable [`dot`](super::scalar::dot)
//! and [`dot_f16`](super::scalar::dot_f16).
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
//!
//! f16 rows are widened exactly (F16C) into a buffer 256 columns of a pass's rows at a time,
//! which every group of inputs then reads: a weight is widened once per pass, not once per
//! group. Each row's four sums carry over from one chunk of columns to the next.

use core::arch::x86_64::*;

use super::rows_that_fit;
use super::x86::RowElement;

/// Whether this CPU has AVX-512F ([`dots_four_inputs`]; every such CPU has F16C too, which
/// the f16 rows also need, checked here all the same).
#[inline]
pub fn has_avx512f() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("f16c")
}

/// Whether this CPU executes each 512-bit operation as two 256-bit halves: AMD's Zen 4 (family
/// 19h; Zen 3, the same family, has no AVX-512). There 512-bit registers add no arithmetic over
/// AVX2, and [`dots_four_inputs`] ran the WikiText-103 shape's f32 segments at half the speed of
/// the AVX2 tiles (`x86/tiles.rs`), which [`crate::kernels`] then prefers where they apply.
/// Asked once (CPUID leaves 0 and 1), then kept.
pub fn splits_512_bit_operations() -> bool {
    static SPLITS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SPLITS.get_or_init(|| {
        if cfg!(miri) {
            return false;
        }
        // SAFETY: CPUID exists on every x86-64 CPU (the intrinsics are safe in newer Rust).
        #[allow(unused_unsafe)]
        let (vendor, signature) = unsafe {
            let vendor = core::arch::x86_64::__cpuid(0);
            (vendor, core::arch::x86_64::__cpuid(1).eax)
        };
        // "AuthenticAMD", four bytes a register in EBX, EDX, ECX
        let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        let base_family = (signature >> 8) & 0xf;
        let family = if base_family == 0xf {
            base_family + ((signature >> 20) & 0xff)
        } else {
            base_family
        };
        amd && family == 0x19
    })
}

/// Inputs one register holds, four lanes each.
const INPUTS: usize = 4;

/// Rows a pass takes (sixteen chains of additions in flight, each built input meeting sixteen
/// rows).
const ROWS: usize = 16;

/// Columns of f16 rows widened at a time (16 KB of f32 for a pass of sixteen rows), a multiple
/// of four.
const CHUNK: usize = 256;

/// Groups of four inputs whose sums a block of rows keeps between chunks of columns (more
/// inputs are taken this many groups at a time).
const KEPT_GROUPS: usize = 16;

/// `outs[p][r] = rows[r * stride..][..cols] · xs[p]` for every input `p` and row `r`, `cols`
/// the shortest input's length, the rows of the shortest output: the bits of
/// [`scalar::dot`](super::scalar::dot) (f32 rows) or [`scalar::dot_f16`](super::scalar::dot_f16)
/// (f16 rows) for each row and input. Inputs go four to a register (a last group of fewer
/// repeats its first and leaves those sums unused); rows sixteen a pass, then one. f16 rows are
/// widened exactly by F16C 256 columns at a time into a buffer every group of inputs then
/// reads, so each weight is widened once, not once per group; each row's four sums carry over
/// from one chunk to the next in the portable order.
///
/// # Safety
/// The CPU must support AVX-512F and F16C ([`has_avx512f`]).
#[target_feature(enable = "avx512f,avx,f16c")]
pub unsafe fn dots_four_inputs<T: RowElement>(
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
    // f32 rows are read in place, in one chunk; f16 rows in chunks widened into `widened`
    let chunk = if T::IN_PLACE { body.max(4) } else { CHUNK };
    // written before it is read, and only for f16 rows: no zeroing on every call
    let mut widened = core::mem::MaybeUninit::<[f32; ROWS * CHUNK]>::uninit();
    let widened = widened.as_mut_ptr().cast::<f32>();
    let mut kept = [[_mm512_setzero_ps(); ROWS]; KEPT_GROUPS];
    for first_group in (0..inputs.div_ceil(INPUTS)).step_by(KEPT_GROUPS) {
        let groups = KEPT_GROUPS.min(inputs.div_ceil(INPUTS) - first_group);
        let group = |g: usize| -> ([&[f32]; INPUTS], usize) {
            let first = (first_group + g) * INPUTS;
            let count = INPUTS.min(inputs - first);
            // a last group of fewer repeats its first input in the other lanes (sums unused)
            let input = |p: usize| &xs[first + if p < count { p } else { 0 }][..cols];
            (core::array::from_fn(input), count)
        };
        let mut r = 0;
        while r < n {
            let block = if r + ROWS <= n { ROWS } else { 1 };
            // SAFETY: rows `r..r + block` end at `(r + block - 1) * stride + cols <= rows.len()`
            // (`rows_that_fit` bounds `n`).
            let base = unsafe { rows.as_ptr().add(r * stride) };
            for kept in kept[..groups].iter_mut() {
                *kept = [_mm512_setzero_ps(); ROWS];
            }
            let mut c = 0;
            while c < body {
                let len = chunk.min(body - c);
                let (weights, weights_stride) = if T::IN_PLACE {
                    // SAFETY: `c < body <= cols`, inside row `r`; `IN_PLACE` rows are f32.
                    (unsafe { base.add(c).cast::<f32>() }, stride)
                } else {
                    for i in 0..block {
                        // SAFETY: columns `c..c + len` of row `r + i` are readable (`c + len <=
                        // body <= cols`), and `widened` holds `CHUNK >= len` per row.
                        unsafe { widen_into(base.add(i * stride + c), len, widened.add(i * CHUNK)) };
                    }
                    (widened.cast_const(), CHUNK)
                };
                for (g, kept) in kept[..groups].iter_mut().enumerate() {
                    let (inputs, _) = group(g);
                    // SAFETY: `block` rows of `len` f32 at `weights_stride` from `weights`, and
                    // columns `c..c + len` of each input.
                    unsafe {
                        if block == ROWS {
                            steps::<ROWS>(weights, weights_stride, len, &inputs, c, kept);
                        } else {
                            steps::<1>(weights, weights_stride, len, &inputs, c, &mut kept[..1]);
                        }
                    }
                }
                c += len;
            }
            for (g, kept) in kept[..groups].iter().enumerate() {
                let (inputs, count) = group(g);
                let outs = &mut outs[(first_group + g) * INPUTS..][..count];
                for (i, acc) in kept[..block].iter().enumerate() {
                    // SAFETY: row `r + i` has `cols` readable elements.
                    let row = unsafe { base.add(i * stride) };
                    // SAFETY: as above.
                    let sums = unsafe { finish(*acc, row, cols, &inputs) };
                    for (p, out) in outs.iter_mut().enumerate() {
                        out[r + i] = sums[p];
                    }
                }
            }
            r += block;
        }
    }
}

/// Writes `len` elements (a multiple of four) from `src` to `dst` as f32, eight at a time.
///
/// # Safety
/// `len` elements must be readable at `src` and writable at `dst`; the CPU must support AVX
/// and F16C.
#[inline]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_into<T: RowElement>(src: *const T, len: usize, dst: *mut f32) {
    let mut c = 0;
    while c + 8 <= len {
        // SAFETY: eight readable elements at `src + c` and writable at `dst + c`.
        unsafe { _mm256_storeu_ps(dst.add(c), T::eight(src.add(c))) };
        c += 8;
    }
    if c < len {
        // SAFETY: four elements left (`len` is a multiple of four), readable and writable.
        unsafe { _mm_storeu_ps(dst.add(c), T::quad(src.add(c))) };
    }
}

/// Adds columns `from..from + len` (a multiple of four) to the four sums of `PASS` rows for the
/// four inputs of `group`: the rows' f32 weights at `weights` (row `i` at `i * stride`, column
/// `from` first), `acc[i]` lanes `4p..4p + 4` input `p`'s, in the portable order.
///
/// # Safety
/// `PASS` rows of `len` f32 must be readable from `weights` at `stride`, columns `from..from +
/// len` of each input; `acc` must have `PASS` entries; the CPU must support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn steps<const PASS: usize>(
    weights: *const f32,
    stride: usize,
    len: usize,
    group: &[&[f32]; INPUTS],
    from: usize,
    acc: &mut [__m512],
) {
    let mut sums = [_mm512_setzero_ps(); PASS];
    sums.copy_from_slice(&acc[..PASS]);
    let mut c = 0;
    while c < len {
        // the four inputs' columns, input p in lanes 4p..4p + 4
        // SAFETY: `from + c + 4 <= from + len`: four readable columns in each input.
        let x = unsafe {
            let at = from + c;
            let x = _mm512_castps128_ps512(_mm_loadu_ps(group[0].as_ptr().add(at)));
            let x = _mm512_insertf32x4::<1>(x, _mm_loadu_ps(group[1].as_ptr().add(at)));
            let x = _mm512_insertf32x4::<2>(x, _mm_loadu_ps(group[2].as_ptr().add(at)));
            _mm512_insertf32x4::<3>(x, _mm_loadu_ps(group[3].as_ptr().add(at)))
        };
        for (i, sum) in sums.iter_mut().enumerate() {
            // SAFETY: row `i` has `len` readable f32 and `c + 4 <= len`.
            let w = unsafe { _mm512_broadcast_f32x4(_mm_loadu_ps(weights.add(i * stride + c))) };
            *sum = _mm512_add_ps(*sum, _mm512_mul_ps(w, x));
        }
        c += 4;
    }
    acc[..PASS].copy_from_slice(&sums);
}

/// One row's four sums for each input of `group` (`acc`, lanes `4p..4p + 4` input `p`'s) and
/// the columns past the last multiple of four, finished in the portable order.
///
/// # Safety
/// `cols` elements must be readable from `row`.
#[inline]
#[target_feature(enable = "avx512f,avx,f16c")]
unsafe fn finish<T: RowElement>(
    acc: __m512,
    row: *const T,
    cols: usize,
    group: &[&[f32]; INPUTS],
) -> [f32; INPUTS] {
    let body = cols / 4 * 4;
    let mut lanes = [0.0f32; 4 * INPUTS];
    // SAFETY: `lanes` has room for sixteen f32.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    let mut sums = [0.0f32; INPUTS];
    for (p, sum) in sums.iter_mut().enumerate() {
        let a = &lanes[4 * p..4 * p + 4];
        let mut tail = 0.0;
        for (k, x) in group[p][body..cols].iter().enumerate() {
            // SAFETY: `body + k < cols`, inside the row.
            tail += unsafe { *row.add(body + k) }.widen() * x;
        }
        *sum = (a[0] + a[1]) + (a[2] + a[3]) + tail;
    }
    sums
}

/// Weight lists an [`axpys_each`] pass takes: four lists of one sixty-four element chunk are
/// sixteen accumulators, and each loaded row chunk meets all four.
const LISTS: usize = 4;

/// `outs[q] += ps[q][k] * rows[k * stride..][..n]` for each `k` in order, `n` the shortest
/// output's length and `k` below the shortest list's, for every list `q`: the bits of
/// [`x86::axpys`](super::x86::axpys) for each list (each element adds its products in `k`
/// order, rounding the product and then the sum; no fused multiply-add). Four lists a pass,
/// sixty-four elements at a time (masked past `n`), so each loaded row chunk meets four lists.
///
/// # Safety
/// The CPU must support AVX-512F ([`has_avx512f`]).
#[target_feature(enable = "avx512f")]
pub unsafe fn axpys_each(rows: &[f32], stride: usize, ps: &[&[f32]], outs: &mut [&mut [f32]]) {
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

/// [`super::x86::softmax_exp8`] for sixteen values, step for step in 512-bit registers (the
/// lane choices in mask registers): `values[i] = softmax_exp(values[i] - max)`, computing
/// `libm::expf`'s bits.
///
/// # Safety
/// The CPU must support AVX-512F ([`has_avx512f`]).
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn softmax_exp16(values: &mut [f32; 16], max: f32) {
    // libm's constants, bit for bit
    const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
    const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
    const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b);
    const P1: f32 = f32::from_bits(0x3e2a_aa8f);
    const P2: f32 = f32::from_bits(0xbb35_5215);
    let f = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let ones = _mm512_set1_ps(1.0);
    // SAFETY: `values` is sixteen readable f32.
    let x = _mm512_sub_ps(unsafe { _mm512_loadu_ps(values.as_ptr()) }, _mm512_set1_ps(max));
    let abs = _mm512_castsi512_ps(_mm512_and_si512(
        _mm512_castps_si512(x),
        _mm512_set1_epi32(0x7fff_ffff),
    ));
    // lanes libm takes another path for: NaN, x > 2^-14
    let unusual = _mm512_cmp_ps_mask::<_CMP_NLE_UQ>(x, f(0x3900_0000));
    // k: trunc(x / ln 2 - 1/2) beyond 1.5 ln 2, -1 beyond 0.5 ln 2, else 0
    let truncated = _mm512_cvttps_epi32(_mm512_add_ps(
        _mm512_mul_ps(_mm512_set1_ps(INV_LN2), x),
        _mm512_set1_ps(-0.5),
    ));
    let beyond_3_halves = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(abs, f(0x3f85_1592));
    let beyond_half = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(abs, f(0x3eb1_7218));
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
    let y = _mm512_mask_blend_ps(deep, y, _mm512_mul_ps(y, f(0x0c80_0000)));
    let k = _mm512_mask_add_epi32(k, deep, k, _mm512_set1_epi32(102));
    let scale = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
        k,
        _mm512_set1_epi32(127),
    )));
    let scaled = _mm512_mul_ps(y, scale);
    // |x| <= 2^-14: libm returns 1 + x
    let tiny = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(abs, f(0x3900_0000));
    let result = _mm512_mask_blend_ps(tiny, scaled, _mm512_add_ps(ones, x));
    // x <= -103.972084 or -inf: libm's expf returns 0
    let underflow = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(abs, f(0x42cf_f1b5))
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

/// [`softmax_exp16`] on each chunk of sixteen of `values`, then [`super::x86::softmax_exp8`]
/// on a last eight (`values` a multiple of eight long).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and F16C.
#[target_feature(enable = "avx512f,avx2,f16c")]
pub unsafe fn softmax_exps(values: &mut [f32], max: f32) {
    let (sixteens, rest) = values.as_chunks_mut::<16>();
    for sixteen in sixteens {
        // SAFETY: the CPU has AVX-512F (this function's contract).
        unsafe { softmax_exp16(sixteen, max) };
    }
    let (eights, _) = rest.as_chunks_mut::<8>();
    for eight in eights {
        // SAFETY: the CPU has AVX2 and F16C (this function's contract).
        unsafe { super::x86::softmax_exp8(eight, max) };
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn softmax_exp16_has_the_bits_of_libm_expf() {
        if !super::has_avx512f() {
            eprintln!("SKIPPED softmax_exp16_has_the_bits_of_libm_expf: this CPU has no AVX-512F");
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
        let every = (0x8000_0000u32..=0xc2d0_0000)
            .step_by(7)
            .chain(0xc2ae_ac50u32..=0xc2cf_f1b5);
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

    use super::super::scalar;

    #[test]
    fn avx512_rows_for_several_inputs_equal_the_scalar_dots() {
        if !super::has_avx512f() {
            eprintln!("SKIPPED: this CPU has no AVX-512F (with F16C)");
            return;
        }
        let mut state = 17u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            // values of many magnitudes, so that a different order of additions rounds apart
            let mantissa = (state >> 9) as f32 / (1u32 << 23) as f32 - 0.5;
            mantissa * [1.0f32, 1e-3, 1e3, 7.5][(state & 3) as usize]
        };
        // past 256 columns f16 rows are widened in chunks, past 64 inputs they go 64 at a time
        for cols in [0usize, 1, 3, 4, 5, 17, 64, 130, 256, 259, 530] {
            for n in [0usize, 1, 7, 16, 17, 33] {
                for inputs in [1usize, 3, 4, 5, 8, 11, 16, 67] {
                    let stride = cols + 3;
                    let rows: Vec<f32> = (0..n * stride).map(|_| next()).collect();
                    let xs: Vec<Vec<f32>> =
                        (0..inputs).map(|_| (0..cols).map(|_| next()).collect()).collect();
                    // the same values as f16 rows (rounded once, then widened exactly)
                    let rows_f16: Vec<f16> = rows.iter().map(|&v| f16::from_f32(v)).collect();
                    let x_refs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
                    let mut outs = vec![vec![f32::NAN; n]; inputs];
                    let mut outs_f16 = vec![vec![f32::NAN; n]; inputs];
                    let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                    let mut f16_refs: Vec<&mut [f32]> = outs_f16.iter_mut().map(|o| &mut o[..]).collect();
                    // SAFETY: AVX-512F and F16C were detected above.
                    unsafe {
                        super::dots_four_inputs(&rows, stride, &x_refs, &mut out_refs);
                        super::dots_four_inputs(&rows_f16, stride, &x_refs, &mut f16_refs);
                    }
                    for (p, x) in xs.iter().enumerate() {
                        for r in 0..n {
                            let row = r * stride..r * stride + cols;
                            let want = scalar::dot(&rows[row.clone()], x);
                            let want_f16 = scalar::dot_f16(&rows_f16[row], x);
                            let what = format!("row {r} of {n}, input {p} of {inputs}, {cols} columns");
                            assert_eq!(outs[p][r].to_bits(), want.to_bits(), "f32 {what}");
                            assert_eq!(outs_f16[p][r].to_bits(), want_f16.to_bits(), "f16 {what}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn avx512_weighted_rows_for_several_lists_equal_the_portable_sums() {
        if !super::has_avx512f() {
            eprintln!("SKIPPED: this CPU has no AVX-512F (with F16C)");
            return;
        }
        let mut state = 5u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let mantissa = (state >> 9) as f32 / (1u32 << 23) as f32 - 0.5;
            mantissa * [1.0f32, 1e-3, 1e3, 7.5][(state & 3) as usize]
        };
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
                    unsafe { super::axpys_each(&rows, stride, &p_refs, &mut out_refs) };
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

//! x86-64 int8 row kernels with `VPDPBUSD` (VNNI), chosen at run time (feature `std`): four
//! byte products and their sum in one instruction, 32 columns a 256-bit register.
//!
//! `VPDPBUSD` multiplies unsigned bytes by signed bytes; the weights and the input are both
//! signed. Each weight byte has its sign bit flipped on the way in (`w ^ 0x80`, which is the
//! unsigned `w + 128`), so a lane sums `(w + 128) * x = w * x + 128 * x`, and a row's total is
//! `values[r] · xq + 128 * Σ xq`. The input's sum is taken once per call and subtracted from every
//! row. Every addition wraps in i32 (`VPDPBUSD`, not the saturating `VPDPBUSDS`), so the result
//! is the exact `values[r] · xq` modulo 2³², which is the exact sum itself wherever the portable
//! i32 sum is exact: the same bits as [`portable::dot_i8`](crate::kernels::portable::dot_i8).
//!
//! Two builds of the same code: [`evex`] for CPUs with AVX-512 VNNI (and VL, for 256-bit
//! registers: Ice Lake and later server parts, Zen 4 and later), [`vex`] for CPUs with AVX-VNNI
//! only (Alder Lake and later client parts).

/// The kernels, once for each instruction encoding: `$features` the target features,
/// `$dpbusd` the `VPDPBUSD` intrinsic of that encoding.
macro_rules! vnni_kernels {
    ($module:ident, $features:literal, $dpbusd:ident, $doc:literal) => {
        #[doc = $doc]
        pub mod $module {
            use core::arch::x86_64::*;

            use crate::kernels::portable;
            use crate::kernels::portable::rows_that_fit;
            use crate::kernels::x86_64::avx::{int4_row_sums_frame, reduce_four};

            /// Rows a pass takes.
            const ROWS: usize = 4;

            /// `sums[r] = values[r * cols..][..cols] · xq` in i32 for each `r < sums.len()`
            /// (rows past the end of `values` are left as they are): four rows per pass, 32
            /// columns a step, the columns after the last whole 32 as `portable::dot_i8` adds them.
            /// Equal to `portable::dot_i8` per row.
            ///
            /// # Safety
            /// The CPU must support this module's instructions (see the module's check).
            #[target_feature(enable = $features)]
            pub unsafe fn row_sums_i8(values: &[i8], cols: usize, xq: &[i8], sums: &mut [i32]) {
                // SAFETY: the CPU has this module's features, as this function requires.
                unsafe { row_sums_many::<1>(values, cols, [xq], [sums]) }
            }

            /// [`row_sums_i8`] for two inputs at once, `sums[p][r] = values[r] · xq[p]`: each
            /// loaded weight meets both.
            ///
            /// # Safety
            /// As for [`row_sums_i8`].
            #[target_feature(enable = $features)]
            pub unsafe fn row_sums_pair_i8(values: &[i8], cols: usize, xq: [&[i8]; 2], sums: [&mut [i32]; 2]) {
                // SAFETY: the CPU has this module's features, as this function requires.
                unsafe { row_sums_many::<2>(values, cols, xq, sums) }
            }

            /// [`row_sums_i8`] for `INPUTS` inputs, each register of weights (sign-flipped once)
            /// multiplied into every input's accumulators.
            ///
            /// # Safety
            /// As for [`row_sums_i8`].
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn row_sums_many<const INPUTS: usize>(
                values: &[i8],
                cols: usize,
                xq: [&[i8]; INPUTS],
                sums: [&mut [i32]; INPUTS],
            ) {
                let xq = xq.map(|x| &x[..cols]);
                let mut sums = sums;
                let wanted = sums.iter().map(|s| s.len()).min().unwrap_or(0);
                let n = rows_that_fit(values.len(), cols, cols, wanted);
                let body = cols / 32 * 32;
                // what the flipped sign adds to every row: 128 * Σ xq (wrapping)
                // SAFETY: `body <= cols`, each input's length; the CPU has this module's features.
                let excess = xq.map(|x| unsafe { input_sum(x, body) }.wrapping_mul(128));
                let mut r = 0;
                // eight rows a pass for one input (eight chains of sums in flight); with two,
                // four rows already give as many
                while INPUTS == 1 && r + 2 * ROWS <= n {
                    // SAFETY: rows `r..r + 2 * ROWS` are inside `values`; the CPU has this
                    // module's features.
                    unsafe { rows_pass::<INPUTS, { 2 * ROWS }>(values, cols, r, xq, excess, &mut sums) };
                    r += 2 * ROWS;
                }
                while r + ROWS <= n {
                    // SAFETY: as above, for rows `r..r + ROWS`.
                    unsafe { rows_pass::<INPUTS, ROWS>(values, cols, r, xq, excess, &mut sums) };
                    r += ROWS;
                }
                for i in r..n {
                    let row = &values[i * cols..(i + 1) * cols];
                    for p in 0..INPUTS {
                        sums[p][i] = portable::dot_i8(row, xq[p]);
                    }
                }
            }

            /// [`portable::row_sums_i4`] for groups of a multiple of 32 columns: four rows per
            /// pass, 32 columns a step. A step's sixteen packed bytes of a row become 32
            /// unsigned bytes, the low nibbles then the high ones, each `w + 8` (the nibble with
            /// its sign bit flipped); the input is put in the same order once for the four rows
            /// (one byte shuffle), and its lane sums are taken by one more `VPDPBUSD` against
            /// ones, so that `8 * Σ x` comes back out of each group's lanes before they are
            /// weighed by the group's multiplier in 64-bit lanes (`VPMULDQ`). Other groups, and
            /// the columns after the last whole 32 of each group, as the portable code. The same
            /// sums (exact integers).
            ///
            /// # Safety
            /// As for [`row_sums_i8`].
            #[target_feature(enable = $features)]
            pub unsafe fn row_sums_i4(
                values: &[u8],
                group: usize,
                codes: &[u8],
                xq: &[i8],
                sums: &mut [i64],
            ) {
                // the bytes of two blocks of eight inputs, low-nibble columns (0-3 of each) first
                let order = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
                let (nibble, sign, ones) = (
                    _mm256_set1_epi8(0x0f),
                    _mm256_set1_epi8(0x08),
                    _mm256_set1_epi8(1),
                );
                // each lane's sum of the group's inputs, for the flipped sign bits' excess
                let mut input_lanes: __m256i;
                int4_row_sums_frame!(
                    values, group, codes, xq, sums,
                    group_start: {
                        input_lanes = _mm256_setzero_si256();
                    },
                    step: |c, rows, acc| {
                        // SAFETY: columns `c..c + 32` are inside `xq` and their sixteen packed
                        // bytes inside each row (the frame's loop).
                        unsafe {
                            let low = _mm_shuffle_epi8(_mm_loadu_si128(xq.as_ptr().add(c).cast()), order);
                            let high = _mm_shuffle_epi8(_mm_loadu_si128(xq.as_ptr().add(c + 16).cast()), order);
                            let x = _mm256_set_m128i(_mm_unpackhi_epi64(low, high), _mm_unpacklo_epi64(low, high));
                            input_lanes = $dpbusd(input_lanes, ones, x);
                            for (acc, row) in acc.iter_mut().zip(rows) {
                                let packed = _mm_loadu_si128(row.as_ptr().add(c / 2).cast());
                                let both = _mm256_set_m128i(_mm_srli_epi16::<4>(packed), packed);
                                let w = _mm256_xor_si256(_mm256_and_si256(both, nibble), sign);
                                *acc = $dpbusd(*acc, w, x);
                            }
                        }
                    },
                    group_end: |acc| {
                        let excess = _mm256_slli_epi32::<3>(input_lanes);
                        for acc in acc.iter_mut() {
                            *acc = _mm256_sub_epi32(*acc, excess);
                        }
                    },
                );
            }

            /// `Σ xq[..body]` in i32 (`body` a multiple of 32), by `VPDPBUSD` against ones:
            /// once per input and call, however many rows the call takes.
            ///
            /// # Safety
            /// `body <= xq.len()`; the CPU must support this module's instructions.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn input_sum(xq: &[i8], body: usize) -> i32 {
                let ones = _mm256_set1_epi8(1);
                let mut lanes = _mm256_setzero_si256();
                let mut c = 0;
                while c < body {
                    // SAFETY: `c + 32 <= body <= xq.len()`.
                    lanes = $dpbusd(lanes, ones, unsafe {
                        _mm256_loadu_si256(xq.as_ptr().add(c).cast())
                    });
                    c += 32;
                }
                let half = _mm_add_epi32(
                    _mm256_castsi256_si128(lanes),
                    _mm256_extracti128_si256::<1>(lanes),
                );
                let half = _mm_add_epi32(half, _mm_unpackhi_epi64(half, half));
                _mm_cvtsi128_si32(_mm_add_epi32(half, _mm_shuffle_epi32::<1>(half)))
            }

            /// Rows `r..r + PASS` of [`row_sums_many`] (`PASS` a multiple of four), each
            /// input's `excess` (`128 * Σ xq` over the whole 32s) taken back out.
            ///
            /// # Safety
            /// Rows `r..r + PASS` of `cols` must be inside `values`, and `r + PASS` within every
            /// output; the CPU must support this module's instructions.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn rows_pass<const INPUTS: usize, const PASS: usize>(
                values: &[i8],
                cols: usize,
                r: usize,
                xq: [&[i8]; INPUTS],
                excess: [i32; INPUTS],
                sums: &mut [&mut [i32]; INPUTS],
            ) {
                let body = cols / 32 * 32;
                let flip = _mm256_set1_epi8(i8::MIN);
                let mut acc = [[_mm256_setzero_si256(); PASS]; INPUTS];
                let mut c = 0;
                while c < body {
                    // SAFETY: `c + 32 <= cols`, so 32 bytes are readable in every input and in
                    // rows `r..r + PASS`, which are inside `values` (this function's contract).
                    unsafe {
                        let x: [__m256i; INPUTS] =
                            core::array::from_fn(|p| _mm256_loadu_si256(xq[p].as_ptr().add(c).cast()));
                        for i in 0..PASS {
                            let w = values.as_ptr().add((r + i) * cols + c);
                            let w = _mm256_xor_si256(_mm256_loadu_si256(w.cast()), flip);
                            for p in 0..INPUTS {
                                acc[p][i] = $dpbusd(acc[p][i], w, x[p]);
                            }
                        }
                    }
                    c += 32;
                }
                for p in 0..INPUTS {
                    for q in 0..PASS / ROWS {
                        let first = r + q * ROWS;
                        let mut four = [0i32; ROWS];
                        let at = q * ROWS;
                        let quad = [acc[p][at], acc[p][at + 1], acc[p][at + 2], acc[p][at + 3]];
                        // SAFETY: `four` has room for four i32; the CPU has AVX2.
                        unsafe { _mm_storeu_si128(four.as_mut_ptr().cast(), reduce_four(quad)) };
                        for (i, (sum, total)) in sums[p][first..first + ROWS]
                            .iter_mut()
                            .zip(four)
                            .enumerate()
                        {
                            let row = &values[(first + i) * cols..(first + i + 1) * cols];
                            let tail = portable::dot_i8(&row[body..], &xq[p][body..]);
                            *sum = total.wrapping_sub(excess[p]).wrapping_add(tail);
                        }
                    }
                }
            }
        }
    };
}

vnni_kernels!(
    evex,
    "avx2,avx512vnni,avx512vl",
    _mm256_dpbusd_epi32,
    "The kernels with AVX-512 VNNI's `VPDPBUSD` on 256-bit registers ([`has_avx512_vnni`](crate::kernels::features::has_avx512_vnni))."
);

vnni_kernels!(
    vex,
    "avx2,avxvnni",
    _mm256_dpbusd_avx_epi32,
    "The kernels with AVX-VNNI's `VPDPBUSD` ([`has_avx_vnni`](crate::kernels::features::has_avx_vnni))."
);

#[cfg(test)]
mod tests {
    use crate::kernels::portable;
    use crate::rng::Rng;

    /// A random byte: every one of 0..=255 possible.
    fn byte(rng: &mut Rng) -> u8 {
        (rng.next_u64() >> 56) as u8
    }

    /// Every VNNI build's int4 kernel this CPU has, by name.
    type Int4RowSums = unsafe fn(&[u8], usize, &[u8], &[i8], &mut [i64]);

    /// (Each build this CPU lacks is recorded as a skip of the calling test.)
    fn int4_builds() -> Vec<(&'static str, Int4RowSums)> {
        let mut builds: Vec<(&'static str, Int4RowSums)> = Vec::new();
        if crate::kernels::features::has_avx512_vnni() {
            builds.push(("AVX-512 VNNI", super::evex::row_sums_i4));
        } else {
            crate::test_skips::skipped(NO_AVX512_VNNI);
        }
        if crate::kernels::features::has_avx_vnni() {
            builds.push(("AVX-VNNI", super::vex::row_sums_i4));
        } else {
            crate::test_skips::skipped(NO_AVX_VNNI);
        }
        builds
    }

    /// The skips of the builds a CPU lacks.
    const NO_AVX512_VNNI: &str = "the AVX-512 VNNI build: this CPU has no AVX-512 VNNI (with VL)";
    const NO_AVX_VNNI: &str = "the AVX-VNNI build: this CPU has no AVX-VNNI";

    #[test]
    fn vnni_int4_sums_equal_the_scalar_sums() {
        let builds = int4_builds();
        if builds.is_empty() {
            return; // (both builds recorded as skipped)
        }
        let mut rng = Rng::new(13);
        let mut next = || byte(&mut rng);
        // (under Miri, which checks every load and store, fewer: each edge of the loops)
        let (all_cols, groups): (&[usize], &[usize]) = if cfg!(miri) {
            (&[1, 31, 33, 100, 250], &[8, 32, 96])
        } else {
            (
                &[1, 8, 31, 32, 33, 64, 100, 128, 250, 1030],
                &[8, 16, 32, 64, 96, 128],
            )
        };
        for (name, kernel) in builds {
            for &cols in all_cols {
                for &group in groups {
                    let rows = 9;
                    let row_bytes = crate::kernels::portable::int4_row_bytes(cols);
                    let groups = crate::kernels::portable::int4_groups(cols, group);
                    // every nibble, -8 and 7 included; the bytes past `cols` zero as packed
                    let mut values: Vec<u8> = (0..rows * row_bytes).map(|_| next()).collect();
                    for (r, row) in values.chunks_exact_mut(row_bytes).enumerate() {
                        let mut unpacked: Vec<i8> = (0..cols)
                            .map(|c| crate::kernels::portable::int4_value(row, c))
                            .collect();
                        unpacked[0] = -8;
                        if r == 2 {
                            unpacked.fill(-8);
                        }
                        if r == 3 {
                            unpacked.fill(7);
                        }
                        crate::kernels::portable::int4_pack_row(&unpacked, row);
                    }
                    let codes: Vec<u8> = (0..rows * groups).map(|_| next()).collect();
                    let mut xq: Vec<i8> = (0..cols).map(|_| next() as i8).collect();
                    xq.iter_mut().step_by(3).for_each(|v| *v = -128);
                    let (mut fast, mut slow) = (vec![0i64; rows], vec![0i64; rows]);
                    // SAFETY: the build's features were detected in `int4_builds`.
                    unsafe { kernel(&values, group, &codes, &xq, &mut fast) };
                    portable::row_sums_i4(&values, group, &codes, &xq, &mut slow);
                    assert_eq!(fast, slow, "{name}: {rows} rows of {cols}, groups of {group}");
                }
            }
        }
    }

    /// Every VNNI build this CPU has, by name, with its kernels for one and two inputs.
    type RowSums = unsafe fn(&[i8], usize, &[i8], &mut [i32]);
    type RowSumsPair = unsafe fn(&[i8], usize, [&[i8]; 2], [&mut [i32]; 2]);

    /// (Each build this CPU lacks is recorded as a skip of the calling test.)
    fn builds() -> Vec<(&'static str, RowSums, RowSumsPair)> {
        let mut builds: Vec<(&'static str, RowSums, RowSumsPair)> = Vec::new();
        if crate::kernels::features::has_avx512_vnni() {
            builds.push((
                "AVX-512 VNNI",
                super::evex::row_sums_i8,
                super::evex::row_sums_pair_i8,
            ));
        } else {
            crate::test_skips::skipped(NO_AVX512_VNNI);
        }
        if crate::kernels::features::has_avx_vnni() {
            builds.push(("AVX-VNNI", super::vex::row_sums_i8, super::vex::row_sums_pair_i8));
        } else {
            crate::test_skips::skipped(NO_AVX_VNNI);
        }
        builds
    }

    #[test]
    fn vnni_row_sums_equal_the_scalar_dot_per_row() {
        let builds = builds();
        if builds.is_empty() {
            return; // (both builds recorded as skipped)
        }
        let mut rng = Rng::new(11);
        let mut next = || byte(&mut rng) as i8;
        // (under Miri, which checks every load and store, fewer: each edge of the loops)
        let (all_cols, all_n): (&[usize], &[usize]) = if cfg!(miri) {
            (&[0, 1, 33, 95, 250], &[0, 1, 4, 5, 13])
        } else {
            (
                &[0, 1, 31, 32, 33, 64, 95, 128, 250, 4100],
                &[0, 1, 3, 4, 5, 8, 11, 12, 13],
            )
        };
        for (name, one_input, two_inputs) in builds {
            for &cols in all_cols {
                for &n in all_n {
                    let mut values: Vec<i8> = (0..n * cols).map(|_| next()).collect();
                    values.iter_mut().step_by(7).for_each(|v| *v = -128);
                    let xa: Vec<i8> = (0..cols).map(|_| next()).collect();
                    let mut xb: Vec<i8> = (0..cols).map(|_| next()).collect();
                    xb.iter_mut().step_by(5).for_each(|v| *v = -128);
                    // the extremes, where a wrong correction or a saturating sum shows
                    let extreme_w = vec![-128i8; n * cols];
                    let extreme_x = vec![-128i8; cols];
                    let slow = |values: &[i8], x: &[i8]| -> Vec<i32> {
                        values
                            .chunks_exact(cols.max(1))
                            .take(n)
                            .map(|row| portable::dot_i8(row, x))
                            .collect()
                    };
                    let mut one = vec![0i32; n];
                    // SAFETY: the build's features were detected in `builds`.
                    unsafe { one_input(&values, cols, &xb, &mut one) };
                    let (mut a, mut b) = (vec![0i32; n], vec![0i32; n]);
                    // SAFETY: as above.
                    unsafe { two_inputs(&values, cols, [&xa, &xb], [&mut a, &mut b]) };
                    let mut extreme = vec![0i32; n];
                    // SAFETY: as above.
                    unsafe { one_input(&extreme_w, cols, &extreme_x, &mut extreme) };
                    if cols > 0 {
                        assert_eq!(one, slow(&values, &xb), "{name}: {n} rows of {cols}");
                        assert_eq!(
                            a,
                            slow(&values, &xa),
                            "{name}: {n} rows of {cols}, first of a pair"
                        );
                        assert_eq!(
                            b,
                            slow(&values, &xb),
                            "{name}: {n} rows of {cols}, second of a pair"
                        );
                        assert_eq!(
                            extreme,
                            slow(&extreme_w, &extreme_x),
                            "{name}: -128s, {n} rows of {cols}"
                        );
                    }
                }
            }
        }
    }
}

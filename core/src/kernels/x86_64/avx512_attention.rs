//! x86-64 attention over int8 memory with AVX-512BW for several queries at once (a segment's
//! queries of one head), chosen at run time (feature `std`): the integer sums of
//! [`crate::int8_attention`], exact in any order, so the same bits as the portable code.
//!
//! - **Keys** ([`key_sums_each_i8`]): each key is put in the query words' order and widened to
//!   16-bit pairs once; each of its words is then broadcast against that word of every query
//!   side by side (one lane a query, the queries' words laid out by word once per call), so
//!   one multiply-add of 16-bit pairs does two columns of sixteen queries. Sixteen keys' lanes
//!   are then transposed into each query's row of sums.
//! - **Values** ([`value_sums_each_i8`]): two values' sixteen columns are widened into one
//!   register of 16-bit pairs, which meets each list's two weights of those keys (broadcast),
//!   sixteen lists' sums in sixteen registers.

use core::arch::x86_64::*;

use crate::kernels::portable::query_words;

/// Queries (and weight lists) the kernels take at most: one register's lanes.
pub const QUERIES: usize = 16;

/// Keys [`key_sums_each_i8`] transposes at a time.
const KEYS: usize = 16;

/// Most words of a key's row in the query words' order (heads up to 256 columns wide; wider
/// heads take the portable code).
const MAX_WORDS: usize = 128;

/// Key pairs [`value_sums_each_i8`] takes a block: each list's weights of those keys are packed
/// into 16-bit pairs once per block.
const PAIRS: usize = 16;

/// `sums[b][t] = query_b · key_t` (the portable `key_sums` for each query) for the keys below
/// the shortest output, key `t` the first `d_head` bytes at `keys[t * stride..]`, query `b` in
/// `words[b]` ([`QueryWords::words`](crate::int8_attention::QueryWords)). Returns false, with
/// nothing written, when there are more than [`QUERIES`] queries, a head is wider than 256
/// columns, or a query has fewer words than its head needs.
///
/// # Safety
/// The CPU must support AVX-512F, BW and VL ([`has_avx512bw`](crate::kernels::features::has_avx512bw)).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn key_sums_each_i8(
    keys: &[i8],
    stride: usize,
    d_head: usize,
    words: &[&[u32]],
    sums: &mut [&mut [i32]],
) -> bool {
    let queries = words.len().min(sums.len());
    let word_count = query_words(d_head);
    // a key's row: whole chunks of sixteen columns, eight words each
    let row_words = d_head.div_ceil(16) * 8;
    if queries > QUERIES || row_words > MAX_WORDS || words[..queries].iter().any(|w| w.len() < word_count) {
        return false;
    }
    let n = sums[..queries].iter().map(|s| s.len()).min().unwrap_or(0);
    if n > 0 && keys.len() < (n - 1) * stride + d_head {
        return false;
    }
    // word `w` of every query, one lane each (lanes past the queries zero)
    let mut by_word = [[0u32; QUERIES]; MAX_WORDS];
    for (b, query) in words[..queries].iter().enumerate() {
        for (lanes, &word) in by_word.iter_mut().zip(&query[..word_count]) {
            lanes[b] = word;
        }
    }
    // a key's bytes 0..16 in the words' order: columns (0, 2, 1, 3) of each four
    let order = _mm_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
    let mut row = [0u32; MAX_WORDS];
    let mut first = 0;
    while first < n {
        let block = KEYS.min(n - first);
        // tile[t][b]: key `first + t` against query `b`
        let mut tile = [[0i32; QUERIES]; KEYS];
        for (t, lanes) in tile.iter_mut().enumerate().take(block) {
            // SAFETY: key `first + t < n` has `d_head` readable bytes at `(first + t) * stride`
            // (checked above); the masked loads read only the columns below `d_head`.
            let key = unsafe { keys.as_ptr().add((first + t) * stride) };
            let mut c = 0;
            while c < d_head {
                let mask = column_mask(d_head - c);
                // SAFETY: as above, for columns `c..c + 16` below `d_head`; `row` holds
                // `row_words >= c / 2 + 8` words.
                unsafe {
                    let bytes = _mm_maskz_loadu_epi8(mask, key.add(c));
                    let widened = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(bytes, order));
                    _mm256_storeu_si256(row.as_mut_ptr().add(c / 2).cast(), widened);
                }
                c += 16;
            }
            let mut acc = _mm512_setzero_si512();
            for (&word, lanes) in row[..word_count].iter().zip(&by_word) {
                // SAFETY: `lanes` is sixteen readable u32.
                let query = unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) };
                acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_set1_epi32(word as i32), query));
            }
            // SAFETY: `lanes` has room for sixteen i32.
            unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), acc) };
        }
        // SAFETY: the CPU has AVX-512F (this function's contract).
        let by_query = unsafe { super::amx::transpose(&tile) };
        for (sums, lanes) in sums[..queries].iter_mut().zip(&by_query) {
            sums[first..first + block].copy_from_slice(&lanes[..block]);
        }
        first += block;
    }
    true
}

/// `accs[b][c] += Σ_t weights[b][t] · value_t[c]` (the portable `value_sums` for each list)
/// for the keys below the shortest list and the columns below the shortest accumulator, value
/// `t` at `values[t * stride..]`. Every weight must be a 16-bit value (as the quantized
/// probabilities are). Returns false, with nothing added, when there are more than
/// [`QUERIES`] lists.
///
/// # Safety
/// The CPU must support AVX-512F, BW and VL ([`has_avx512bw`](crate::kernels::features::has_avx512bw)).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn value_sums_each_i8(
    values: &[i8],
    stride: usize,
    weights: &[&[i32]],
    accs: &mut [&mut [i32]],
) -> bool {
    let lists = weights.len().min(accs.len());
    if lists > QUERIES {
        return false;
    }
    let keys = weights[..lists].iter().map(|w| w.len()).min().unwrap_or(0);
    let columns = accs[..lists].iter().map(|a| a.len()).min().unwrap_or(0);
    if keys > 0 && values.len() < (keys - 1) * stride + columns {
        return false;
    }
    let mut first = 0;
    while first < keys {
        let block = (2 * PAIRS).min(keys - first);
        let pairs = block.div_ceil(2);
        // each list's weights of keys `first + 2j` and `first + 2j + 1` as one word
        let mut packed = [[0i32; PAIRS]; QUERIES];
        for (packed, weights) in packed.iter_mut().zip(&weights[..lists]) {
            let block_weights = &weights[first..first + block];
            for (word, two) in packed.iter_mut().zip(block_weights.chunks(2)) {
                let second = two.get(1).copied().unwrap_or(0);
                *word = (two[0] & 0xffff) | (second << 16);
            }
        }
        let mut c = 0;
        while c < columns {
            let mask = column_mask(columns - c);
            let mut acc = [_mm512_setzero_si512(); QUERIES];
            for (acc, sums) in acc.iter_mut().zip(accs[..lists].iter()) {
                // SAFETY: the mask's lanes are columns `c..columns` of an accumulator.
                *acc = unsafe { _mm512_maskz_loadu_epi32(mask, sums.as_ptr().add(c)) };
            }
            for j in 0..pairs {
                let t = first + 2 * j;
                // SAFETY: value `t < keys` has `columns` readable bytes at `t * stride`
                // (checked above); the masked loads read only columns below `columns`.
                let low = unsafe { widened_value(values.as_ptr().add(t * stride + c), mask) };
                let high = if t + 1 < first + block {
                    // SAFETY: as above, for value `t + 1 < keys`.
                    unsafe { widened_value(values.as_ptr().add((t + 1) * stride + c), mask) }
                } else {
                    _mm512_setzero_si512()
                };
                let both = _mm512_or_si512(low, _mm512_slli_epi32::<16>(high));
                for (acc, packed) in acc.iter_mut().zip(&packed[..lists]) {
                    *acc = _mm512_add_epi32(*acc, _mm512_madd_epi16(both, _mm512_set1_epi32(packed[j])));
                }
            }
            for (acc, sums) in acc.iter().zip(accs[..lists].iter_mut()) {
                // SAFETY: the mask's lanes are columns `c..columns` of an accumulator.
                unsafe { _mm512_mask_storeu_epi32(sums.as_mut_ptr().add(c), mask, *acc) };
            }
            c += 16;
        }
        first += block;
    }
    true
}

/// For each row `b` (at most [`QUERIES`], taken up to the shortest's length), `largest[b]` and
/// `sums[b]` carried on over the row's magnitudes in order as the portable loop of
/// [`crate::int8_attention::ProbabilityWords::quantize_in_place`] carries them: a larger
/// magnitude or a NaN becomes the largest, every magnitude is added to the sum. One lane a row:
/// sixteen keys of every row are loaded and transposed, then added key by key. Returns false,
/// with nothing changed, when there are more than [`QUERIES`] rows.
///
/// # Safety
/// The CPU must support AVX-512F ([`has_avx512bw`](crate::kernels::features::has_avx512bw) checks more).
#[target_feature(enable = "avx512f")]
pub unsafe fn magnitudes_each_f32(
    rows: &[&mut [f32]],
    largest: &mut [f32; QUERIES],
    sums: &mut [f32; QUERIES],
) -> bool {
    if rows.len() > QUERIES {
        return false;
    }
    let len = rows.iter().map(|row| row.len()).min().unwrap_or(0);
    // SAFETY: both arrays are sixteen f32.
    let (mut max, mut sum) = unsafe { (_mm512_loadu_ps(largest.as_ptr()), _mm512_loadu_ps(sums.as_ptr())) };
    let magnitude_bits = _mm512_set1_epi32(0x7fff_ffff);
    let mut first = 0;
    while first < len {
        let block = KEYS.min(len - first);
        let mask = column_mask(block);
        // tile[b][t]: row `b`'s key `first + t` (zeros past the block and the rows)
        let mut tile = [[0i32; KEYS]; QUERIES];
        for (lanes, row) in tile.iter_mut().zip(rows) {
            // SAFETY: the mask's lanes are keys `first..first + block` of the row, below its
            // length; `lanes` has room for sixteen i32.
            unsafe {
                let keys = _mm512_maskz_loadu_epi32(mask, row.as_ptr().add(first).cast());
                _mm512_storeu_si512(lanes.as_mut_ptr().cast(), keys);
            }
        }
        // SAFETY: the CPU has AVX-512F (this function's contract).
        let by_key = unsafe { super::amx::transpose(&tile) };
        for lanes in &by_key[..block] {
            // SAFETY: `lanes` is sixteen readable i32.
            let bits = unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) };
            let magnitude = _mm512_castsi512_ps(_mm512_and_si512(bits, magnitude_bits));
            let take = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(magnitude, max)
                | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(magnitude, magnitude);
            max = _mm512_mask_blend_ps(take, max, magnitude);
            sum = _mm512_add_ps(sum, magnitude);
        }
        first += block;
    }
    // SAFETY: both arrays have room for sixteen f32.
    unsafe {
        _mm512_storeu_ps(largest.as_mut_ptr(), max);
        _mm512_storeu_ps(sums.as_mut_ptr(), sum);
    }
    true
}

/// Sixteen bytes of a value from `at` (the mask's columns; zeros elsewhere), each as a 16-bit
/// value in the low half of a 32-bit lane, the high half zero.
///
/// # Safety
/// The mask's bytes must be readable from `at`; the CPU must support AVX-512F, BW and VL.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn widened_value(at: *const i8, mask: __mmask16) -> __m512i {
    // SAFETY: the masked load reads only the mask's bytes (this function's contract).
    let bytes = unsafe { _mm_maskz_loadu_epi8(mask, at) };
    _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(bytes))
}

/// The first `min(len, 16)` of sixteen lanes.
#[inline]
fn column_mask(len: usize) -> __mmask16 {
    if len >= 16 {
        0xffff
    } else {
        ((1u32 << len) - 1) as __mmask16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::int8_attention::QueryWords;
    use crate::kernels::features::has_avx512bw;
    use crate::kernels::portable::{key_sums_i8 as key_sums_portable, value_sums_i8 as value_sums_portable};

    use crate::rng::Rng;

    /// `n` random 64-bit values from the stream of `seed`.
    fn noise(n: usize, seed: u64) -> impl Iterator<Item = u64> {
        let mut rng = Rng::new(seed);
        (0..n).map(move |_| rng.next_u64())
    }

    /// `n` random bytes (every one of -128..=127 possible) from the stream of `seed`.
    fn bytes(n: usize, seed: u64) -> Vec<i8> {
        noise(n, seed).map(|v| (v >> 56) as i8).collect()
    }

    /// Whether this CPU lacks the kernels' extensions (then recorded as a skip of the test).
    fn skipped() -> bool {
        if has_avx512bw() {
            return false;
        }
        crate::test_skips::skipped("this CPU has no AVX-512BW and VL");
        true
    }

    /// Head widths with and without a partial chunk of sixteen columns or group of four, key
    /// counts around a block of sixteen, one to sixteen queries, keys at a stride of three heads.
    #[test]
    fn key_sums_each_are_the_portable_sums_of_each_query() {
        if skipped() {
            return;
        }
        for d_head in [1, 3, 4, 8, 16, 19, 24, 64, 100] {
            let stride = 3 * d_head;
            for keys in [0, 1, 15, 16, 17, 40] {
                let memory = bytes(keys.max(1) * stride, d_head as u64 + 7 * keys as u64);
                for queries in [1, 2, 5, 16] {
                    let floats: Vec<Vec<f32>> = (0..queries)
                        .map(|q| {
                            noise(d_head, 100 + q as u64)
                                .map(|v| (v % 2001) as f32 / 100.0 - 10.0)
                                .collect()
                        })
                        .collect();
                    let mut words = vec![vec![0u32; query_words(d_head)]; queries];
                    let quantized: Vec<QueryWords<'_>> = floats
                        .iter()
                        .zip(words.iter_mut())
                        .map(|(q, w)| QueryWords::quantize(q, w).unwrap())
                        .collect();
                    let word_refs: Vec<&[u32]> = quantized.iter().map(|q| q.words).collect();
                    let mut got = vec![vec![i32::MIN; keys]; queries];
                    let mut got_refs: Vec<&mut [i32]> = got.iter_mut().map(|g| g.as_mut_slice()).collect();
                    // SAFETY: the CPU has AVX-512F, BW and VL (checked above).
                    let ran = unsafe { key_sums_each_i8(&memory, stride, d_head, &word_refs, &mut got_refs) };
                    assert!(ran);
                    for (q, (got, words)) in got.iter().zip(&word_refs).enumerate() {
                        let mut want = vec![0i32; keys];
                        key_sums_portable(&memory, stride, d_head, words, &mut want);
                        assert_eq!(got, &want, "d_head {d_head}, {keys} keys, query {q} of {queries}");
                    }
                }
            }
        }
    }

    /// Every weight a 16-bit value (the extremes included), every value byte (-128 too), odd and
    /// even key counts around a block, columns with and without a partial chunk, one to sixteen
    /// lists, added onto accumulators that already hold sums.
    #[test]
    fn value_sums_each_are_the_portable_sums_of_each_list() {
        if skipped() {
            return;
        }
        for columns in [1, 7, 16, 19, 64, 100] {
            let stride = 2 * columns + 3;
            for keys in [0, 1, 2, 31, 32, 33, 70] {
                let memory = bytes(keys.max(1) * stride, columns as u64 + 11 * keys as u64);
                for lists in [1, 3, 16] {
                    let weights: Vec<Vec<i32>> = (0..lists)
                        .map(|l| {
                            let mut w: Vec<i32> = noise(keys, 50 + l as u64)
                                .map(|v| (v % 65535) as i32 - 32767)
                                .collect();
                            if let Some(first) = w.first_mut() {
                                *first = if l % 2 == 0 { 32767 } else { -32767 };
                            }
                            w
                        })
                        .collect();
                    let weight_refs: Vec<&[i32]> = weights.iter().map(|w| w.as_slice()).collect();
                    let start: Vec<Vec<i32>> = (0..lists)
                        .map(|l| noise(columns, 90 + l as u64).map(|v| v as i32).collect())
                        .collect();
                    let mut got = start.clone();
                    let mut got_refs: Vec<&mut [i32]> = got.iter_mut().map(|g| g.as_mut_slice()).collect();
                    // SAFETY: the CPU has AVX-512F, BW and VL (checked above).
                    let ran = unsafe { value_sums_each_i8(&memory, stride, &weight_refs, &mut got_refs) };
                    assert!(ran);
                    for (l, ((got, start), weights)) in got.iter().zip(&start).zip(&weights).enumerate() {
                        let mut want = start.clone();
                        value_sums_portable(&memory, stride, weights, &mut want);
                        assert_eq!(got, &want, "{columns} columns, {keys} keys, list {l} of {lists}");
                    }
                }
            }
        }
    }

    /// The largest magnitudes and sums of rows with NaNs, infinities, negative zeros and
    /// subnormals in them, against the portable loop's, bit for bit (the step and the weights
    /// of each row follow from them).
    #[test]
    fn magnitudes_each_are_the_portable_ones_of_each_row() {
        if skipped() {
            return;
        }
        let specials = [f32::NAN, f32::INFINITY, -0.0, f32::from_bits(1), -3.0e38, 1.0e-30];
        for len in [0, 1, 15, 16, 17, 50] {
            for rows in [1, 7, 16] {
                for special in [None, Some(0), Some(3), Some(4)] {
                    let mut data: Vec<Vec<f32>> = (0..rows)
                        .map(|r| {
                            noise(len, 30 + r as u64 + len as u64)
                                .map(|v| (v % 1000) as f32 / 7.0 - 70.0)
                                .collect()
                        })
                        .collect();
                    if let Some(s) = special {
                        for (r, row) in data.iter_mut().enumerate() {
                            if let Some(v) = row.get_mut((r * 5 + s) % len.max(1)) {
                                *v = specials[(r + s) % specials.len()];
                            }
                        }
                    }
                    let mut refs: Vec<&mut [f32]> = data.iter_mut().map(|r| r.as_mut_slice()).collect();
                    let (mut largest, mut sums) = ([0.0f32; QUERIES], [0.0f32; QUERIES]);
                    // SAFETY: the CPU has AVX-512F (checked above).
                    assert!(unsafe { magnitudes_each_f32(&refs, &mut largest, &mut sums) });
                    for (r, row) in refs.iter_mut().enumerate() {
                        // the loop of `ProbabilityWords::quantize_in_place`
                        let (mut max, mut sum) = (0.0f32, 0.0f32);
                        for &w in row.iter() {
                            let w = w.abs();
                            if w > max || w.is_nan() {
                                max = w;
                            }
                            sum += w;
                        }
                        let what = format!("{len} keys, row {r} of {rows}, special {special:?}");
                        assert_eq!(largest[r].to_bits(), max.to_bits(), "largest, {what}");
                        assert_eq!(sums[r].to_bits(), sum.to_bits(), "sum, {what}");
                    }
                }
            }
        }
    }
}

//! Relative multi-head attention (Dai et al., 2019, section 3.3): one query at a time
//! ([`attend_one`]), or a block of a segment's queries together over f32, f16 or int8 memory
//! ([`attend_block`]), with the same bits.
//!
//! For query `i` and key `j` at distance `d = mlen + i - j`, with `R_d = W_r · pos_emb(d)`:
//! ```text
//! score(i, j) = (q_i + u) · k_j      (terms a + c: content, with the content bias u)
//!             + (q_i + v) · R_d      (terms b + d: position, with the position bias v)
//! ```
//! scaled by `1 / sqrt(d_head)`, softmax over the keys the mask allows, then the weighted sum
//! of values. The position term is computed directly for each (query, distance) pair: no
//! pad-and-reshape "rel-shift"; [`PositionScores`] computes it from a table of `R_d`, or with
//! `W_r` folded into the query.

use crate::kernels::{self, MAX_POSITIONS_PER_PASS};
use crate::memory::{Memory, RingKeys, QUERIES_TOGETHER};
use crate::options::MemDtype;
use crate::position::PositionScores;
use crate::vector;

/// The shape of one segment's attention.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    /// Positions in this segment.
    pub qlen: usize,
    /// Remembered positions before it.
    pub mlen: usize,
    /// The session's `mem_len` (the `same_length` mask is defined with it).
    pub mem_len: usize,
    /// Every query attends to the same number of keys.
    pub same_length: bool,
    /// Largest distance with its own position key (`clamp_len`, or the longest possible).
    pub max_distance: usize,
    /// Heads.
    pub n_head: usize,
    /// Width of one head.
    pub d_head: usize,
}

impl AttentionShape {
    /// The keys `lo..=hi` query `i` may see, or `None` when the mask hides every key.
    ///
    /// Causal: `j <= mlen + i`. With `same_length`, also `j > i - shift`, where
    /// `shift = qlen - (klen - mem_len)` if `klen > mem_len`, else `qlen` (the original code).
    pub fn visible_keys(&self, i: usize) -> Option<(usize, usize)> {
        let hi = self.mlen + i;
        if !self.same_length {
            return Some((0, hi));
        }
        let klen = self.mlen + self.qlen;
        let shift = if klen > self.mem_len {
            self.qlen - (klen - self.mem_len).min(self.qlen)
        } else {
            self.qlen
        };
        // masked when j <= i - shift, i.e. visible from i - shift + 1
        let lo = (i + 1).saturating_sub(shift);
        (lo <= hi).then_some((lo, hi))
    }
}

/// The scores' scale `1 / sqrt(d_head)`, from f64 (software floating point on the Cortex-M
/// cores: taken once a segment and passed to [`attend_one`] and [`attend_block`]).
pub(crate) fn score_scale(d_head: usize) -> f32 {
    (1.0 / libm::sqrt(d_head as f64)) as f32
}

/// Floats of the scratch [`attend_one`] takes: the scores and the position terms of up to
/// `capacity` keys, then, for int8 memory, the integer sums of one head.
pub(crate) fn scores_len(capacity: usize, d_head: usize, mem_dtype: MemDtype) -> Option<usize> {
    let integer = match mem_dtype {
        MemDtype::Int8 => crate::int8_attention::scratch_words(d_head),
        MemDtype::F32 | MemDtype::F16 => 0,
    };
    capacity.checked_mul(2)?.checked_add(integer)
}

/// Attention output of one query for one layer.
///
/// `query (n_head * d_head)` holds `q_i + u`, `query_pos` holds `q_i + v`; `positions` gives
/// the position term for distances `0..=max_distance`; `scores` is scratch of
/// [`scores_len`] floats (the scores, the position terms, and integer scratch for int8
/// memory). Writes `out (n_head * d_head)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend_one(
    (shape, scale): (&AttentionShape, f32),
    i: usize,
    query: &[f32],
    query_pos: &[f32],
    positions: &mut PositionScores<'_>,
    memory: &Memory<'_>,
    layer: usize,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let klen = shape.mlen + shape.qlen;
    // int8 memory writes each head's sums (as if added to zeros), and fills a head whose keys
    // are all masked itself
    let int8 = memory.is_int8();
    if !int8 {
        out.fill(0.0);
    }
    for head in 0..shape.n_head {
        let h = head * shape.d_head..(head + 1) * shape.d_head;
        let (lo, hi) = match shape.visible_keys(i) {
            Some(range) => range,
            None => {
                // Every key masked: the reference fills all scores with the same constant,
                // so its softmax is uniform over all `klen` keys. Reproduce that.
                let weight = 1.0 / klen as f32;
                if int8 {
                    out[h.clone()].fill(0.0);
                }
                for j in 0..klen {
                    memory.add_value(layer, j, head, weight, &mut out[h.clone()]);
                }
                continue;
            }
        };
        let capacity = memory.capacity();
        let (scores, rest) = scores.split_at_mut(capacity);
        let (position_terms, int_scratch) = rest.split_at_mut(capacity);
        let int_scratch: &mut [u32] = bytemuck::cast_slice_mut(int_scratch);
        let query_pos = &query_pos[h.clone()];
        positions.start_head(head, query_pos);
        if int8 {
            let keys = memory.ring_keys(lo, hi + 1 - lo, shape.qlen == 1);
            let nearest = shape.mlen + i - hi;
            // the buffers whole: the keys take `keys.buffer_len(capacity)` entries of each
            let terms = &mut position_terms[..=hi - lo];
            let m = positions.terms(head, query_pos, (nearest, shape.max_distance), terms);
            let terms = (&terms[..m], scale);
            let query = &query[h.clone()];
            let max = memory.scores_int8((layer, head), &keys, query, terms, int_scratch, scores);
            let inverse = softmax_exps(&keys, max, scores);
            let out_head = &mut out[h.clone()];
            let w = &mut position_terms[..];
            memory.add_values_ring_int8(
                (layer, head),
                &keys,
                (scores, inverse),
                (w, int_scratch),
                out_head,
            );
            continue;
        }
        let scores = &mut scores[..=hi - lo];
        let position_terms = &mut position_terms[..=hi - lo];
        // the content terms (q_i + u) · k_j and the position terms (q_i + v) · R_{mlen+i-j} of
        // every key, then each score
        memory.key_dots(layer, lo, head, &query[h.clone()], int_scratch, scores);
        let nearest = shape.mlen + i - hi;
        positions.scores(head, query_pos, (nearest, shape.max_distance), position_terms);
        for (score, &position) in scores.iter_mut().zip(position_terms.iter()) {
            let content = *score;
            *score = (content + position) * scale;
        }
        vector::softmax(scores);
        memory.add_values(layer, lo, head, scores, int_scratch, &mut out[h.clone()]);
    }
}

/// The softmax's exponentials of `scores` (laid out as [`RingKeys`] says), in place, and the
/// inverse of their sum in the keys' order, `max` their largest ([`kernels::max`]): the bits of
/// [`vector::softmax`] before its last product.
fn softmax_exps(keys: &RingKeys, max: f32, scores: &mut [f32]) -> f32 {
    let mut sum = 0.0;
    for (at, _, len, _) in keys.pieces_from() {
        let piece = &mut scores[at..at + len];
        let by_eight = if kernels::SOFTMAX_EXPS { len / 8 * 8 } else { 0 };
        let (eights, rest) = piece.split_at_mut(by_eight);
        kernels::softmax_exps_f32(eights, max);
        for v in eights.iter() {
            sum += *v;
        }
        sum = kernels::softmax_exps_sum_f32(rest, max, sum);
    }
    1.0 / sum
}

// a block's queries come from one pass of the linear layers
const _: () = assert!(QUERIES_TOGETHER <= MAX_POSITIONS_PER_PASS);

/// The queries `first..first + count` of a segment for one layer, together: [`attend_one`]
/// for each, with its bits, each cached key and value read once per head for all of them.
/// Taken when the memory is f32, f16 or int8 ([`Memory::is_float`], [`Memory::is_int8`]) and the
/// position keys are a table of `R_d` (`position_keys`, distance `d` at `d * n_head *
/// d_head`); `false` otherwise, or when the mask hides every key from a query, or (int8) a
/// query has a value that is not finite: then `out` is left to [`attend_one`], which writes
/// every row anew.
///
/// `queries` and `queries_pos` hold `count` rows of `q_i + u` and `q_i + v`; `scratch` holds
/// `count` times [`scores_len`]; writes `count` rows of `out`.
#[allow(clippy::too_many_arguments)]
#[inline(never)] // out of the streaming path (one query a block), whose loop it would set up
pub(crate) fn attend_block(
    (shape, scale): (&AttentionShape, f32),
    first: usize,
    queries: &[f32],
    queries_pos: &[f32],
    position_keys: &[f32],
    memory: &Memory<'_>,
    layer: usize,
    scratch: &mut [f32],
    out: &mut [f32],
) -> bool {
    let width = shape.n_head * shape.d_head;
    let count = queries.len() / width.max(1);
    let int8 = memory.is_int8();
    if count == 0 || count > QUERIES_TOGETHER || !(memory.is_float() || int8) {
        return false;
    }
    let mut visible = [(0, 0); QUERIES_TOGETHER];
    for (b, range) in visible[..count].iter_mut().enumerate() {
        match shape.visible_keys(first + b) {
            Some(keys) => *range = keys,
            None => return false,
        }
    }
    let visible = &visible[..count];
    // keys any query sees, and the farthest distance any needs from the table
    let lo_first = visible.iter().map(|&(lo, _)| lo).min().unwrap_or(0);
    let hi_last = visible.iter().map(|&(_, hi)| hi).max().unwrap_or(0);
    let farthest = visible
        .iter()
        .enumerate()
        .map(|(b, &(lo, _))| shape.mlen + first + b - lo)
        .max()
        .unwrap_or(0);
    let distances = farthest.min(shape.max_distance) + 1;
    let capacity = memory.capacity();
    let (content, rest) = scratch.split_at_mut(count * capacity);
    let (position, integers) = rest.split_at_mut(count * capacity);
    let integers: &mut [u32] = bytemuck::cast_slice_mut(integers);
    if int8 && integers.len() < count * crate::int8_attention::scratch_words(shape.d_head) {
        return false;
    }
    out[..count * width].fill(0.0);
    for head in 0..shape.n_head {
        let h = head * shape.d_head..(head + 1) * shape.d_head;
        let query_heads = heads_of(queries, width, &h);
        let position_heads = heads_of(queries_pos, width, &h);
        // the content terms (q_i + u) · k_j of keys lo_first..=hi_last, and the position terms
        // (q_i + v) · R_d of distances 0..distances, each query's in one row
        {
            let mut rows = rows_of(content, capacity, hi_last - lo_first + 1);
            if int8 {
                // each query quantized as `Memory::key_dots` quantizes it
                let per_query = crate::int8_attention::query_words(shape.d_head);
                let mut quantized = [crate::int8_attention::QueryWords {
                    words: &[],
                    step: 0.0,
                }; QUERIES_TOGETHER];
                for ((q, words), query) in quantized
                    .iter_mut()
                    .zip(integers.chunks_exact_mut(per_query))
                    .zip(&query_heads[..count])
                {
                    match crate::int8_attention::QueryWords::quantize(query, words) {
                        Some(words) => *q = words,
                        None => return false,
                    }
                }
                memory.key_dots_each_int8(layer, lo_first, head, &quantized[..count], &mut rows[..count]);
            } else {
                memory.key_dots_each(layer, lo_first, head, &query_heads[..count], &mut rows[..count]);
            }
            let mut rows = rows_of(position, capacity, distances);
            let at = head * shape.d_head;
            let table = &position_keys[at..at + (distances - 1) * width + shape.d_head];
            kernels::dots_strided_each_f32(table, width, &position_heads[..count], &mut rows[..count]);
        }
        // each query's scores over the keys it sees, then their softmax, in place
        for (b, &(lo, hi)) in visible.iter().enumerate() {
            let i = first + b;
            let positions = &position[b * capacity..b * capacity + distances];
            let scores = &mut content[b * capacity + lo - lo_first..b * capacity + hi - lo_first + 1];
            // key `lo + t` is `nearest - t` away: the keys past `max_distance` first (each with
            // the term of `max_distance`), then the nearer ones, whose terms run backwards
            let nearest = shape.mlen + i - lo;
            let far = nearest.saturating_sub(shape.max_distance).min(scores.len());
            let (far_scores, near_scores) = scores.split_at_mut(far);
            for score in far_scores.iter_mut() {
                *score = (*score + positions[shape.max_distance]) * scale;
            }
            if !near_scores.is_empty() {
                let terms = &positions[..=nearest - far];
                // sixteen at a time (whole chunks, which vectorize), then the rest
                let (sixteens, rest) = near_scores.as_chunks_mut::<16>();
                let left = terms.len().saturating_sub(16 * sixteens.len());
                for (scores, terms) in sixteens.iter_mut().zip(terms.rchunks_exact(16)) {
                    for (k, score) in scores.iter_mut().enumerate() {
                        *score = (*score + terms[15 - k]) * scale;
                    }
                }
                for (score, term) in rest.iter_mut().zip(terms[..left].iter().rev()) {
                    *score = (*score + term) * scale;
                }
            }
            vector::softmax(scores);
        }
        if int8 {
            let mut outs: [&mut [f32]; QUERIES_TOGETHER] = core::array::from_fn(|_| Default::default());
            for (o, row) in outs.iter_mut().zip(out.chunks_exact_mut(width)) {
                *o = &mut row[h.clone()];
            }
            let (visible, weights) = ((lo_first, visible), (&mut content[..], capacity));
            let scales = &mut position[..capacity];
            memory.add_values_each_int8(
                layer,
                head,
                visible,
                weights,
                scales,
                integers,
                &mut outs[..count],
            );
        } else {
            add_weighted_values(
                memory,
                layer,
                head,
                (lo_first, visible),
                content,
                capacity,
                out,
                &h,
                width,
            );
        }
    }
    true
}

/// `out_b[h] += Σ_j p_b[j] v_j` over the keys `lo_b..=hi_b` each query `b` sees, in key order:
/// first the keys before the ones all see (each query alone), then those (all the queries
/// together), then the ones after them (each alone). `weights` holds query `b`'s weights of
/// keys `lo_first..` in row `b` of `capacity`.
#[allow(clippy::too_many_arguments)]
fn add_weighted_values(
    memory: &Memory<'_>,
    layer: usize,
    head: usize,
    (lo_first, visible): (usize, &[(usize, usize)]),
    weights: &mut [f32],
    capacity: usize,
    out: &mut [f32],
    h: &core::ops::Range<usize>,
    width: usize,
) {
    let count = visible.len();
    let shared_lo = visible.iter().map(|&(lo, _)| lo).max().unwrap_or(0);
    let shared_hi = visible.iter().map(|&(_, hi)| hi).min().unwrap_or(0);
    let mut outs: [&mut [f32]; QUERIES_TOGETHER] = core::array::from_fn(|_| Default::default());
    for (o, row) in outs.iter_mut().zip(out.chunks_exact_mut(width)) {
        *o = &mut row[h.clone()];
    }
    let outs = &mut outs[..count];
    let weights_of = |b: usize, keys: core::ops::RangeInclusive<usize>| {
        b * capacity + keys.start() - lo_first..b * capacity + keys.end() - lo_first + 1
    };
    if shared_lo > shared_hi {
        for (b, &(lo, hi)) in visible.iter().enumerate() {
            let p = &mut weights[weights_of(b, lo..=hi)];
            memory.add_values(layer, lo, head, p, &mut [], outs[b]);
        }
        return;
    }
    for (b, &(lo, _)) in visible.iter().enumerate() {
        if lo < shared_lo {
            let p = &mut weights[weights_of(b, lo..=shared_lo - 1)];
            memory.add_values(layer, lo, head, p, &mut [], outs[b]);
        }
    }
    {
        let mut shared: [&[f32]; QUERIES_TOGETHER] = [&[]; QUERIES_TOGETHER];
        for (b, p) in shared[..count].iter_mut().enumerate() {
            *p = &weights[weights_of(b, shared_lo..=shared_hi)];
        }
        memory.add_values_each(layer, shared_lo, head, &shared[..count], outs);
    }
    for (b, &(_, hi)) in visible.iter().enumerate() {
        if hi > shared_hi {
            let p = &mut weights[weights_of(b, shared_hi + 1..=hi)];
            memory.add_values(layer, shared_hi + 1, head, p, &mut [], outs[b]);
        }
    }
}

/// Head `h` of each row of `width` in `rows`.
fn heads_of<'a>(rows: &'a [f32], width: usize, h: &core::ops::Range<usize>) -> [&'a [f32]; QUERIES_TOGETHER] {
    let mut heads: [&[f32]; QUERIES_TOGETHER] = [&[]; QUERIES_TOGETHER];
    for (head_row, row) in heads.iter_mut().zip(rows.chunks_exact(width)) {
        *head_row = &row[h.clone()];
    }
    heads
}

/// The first `len` floats of each row of `capacity` in `buffer`.
fn rows_of(buffer: &mut [f32], capacity: usize, len: usize) -> [&mut [f32]; QUERIES_TOGETHER] {
    let mut rows: [&mut [f32]; QUERIES_TOGETHER] = core::array::from_fn(|_| Default::default());
    for (row, chunk) in rows.iter_mut().zip(buffer.chunks_exact_mut(capacity)) {
        *row = &mut chunk[..len];
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::AttentionShape;

    fn shape(qlen: usize, mlen: usize, mem_len: usize, same_length: bool) -> AttentionShape {
        AttentionShape {
            qlen,
            mlen,
            mem_len,
            same_length,
            max_distance: 100,
            n_head: 1,
            d_head: 1,
        }
    }

    #[test]
    fn causal_mask_sees_memory_and_the_past() {
        let s = shape(3, 4, 4, false);
        assert_eq!(s.visible_keys(0), Some((0, 4)));
        assert_eq!(s.visible_keys(2), Some((0, 6)));
    }

    #[test]
    fn same_length_keeps_mem_len_keys_when_memory_is_full() {
        // klen = 7 > mem_len = 4: shift = 3 - 3 = 0, so keys i+1..=mlen+i: mem_len keys.
        let s = shape(3, 4, 4, true);
        assert_eq!(s.visible_keys(0), Some((1, 4)));
        assert_eq!(s.visible_keys(2), Some((3, 6)));
    }

    #[test]
    fn same_length_without_enough_memory_is_plain_causal() {
        let s = shape(3, 0, 8, true);
        assert_eq!(s.visible_keys(2), Some((0, 2)));
    }

    #[test]
    fn same_length_with_no_memory_masks_everything() {
        let s = shape(3, 0, 0, true);
        assert_eq!(s.visible_keys(1), None);
    }
}

//! Relative multi-head attention (Dai et al., 2019, section 3.3), one query at a time.
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

use crate::kernels;
use crate::memory::{MemDtype, Memory};
use crate::position::PositionScores;

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
    shape: &AttentionShape,
    i: usize,
    query: &[f32],
    query_pos: &[f32],
    positions: &mut PositionScores<'_>,
    memory: &Memory<'_>,
    layer: usize,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let scale = (1.0 / libm::sqrt(shape.d_head as f64)) as f32;
    let klen = shape.mlen + shape.qlen;
    out.fill(0.0);
    for head in 0..shape.n_head {
        let h = head * shape.d_head..(head + 1) * shape.d_head;
        let (lo, hi) = match shape.visible_keys(i) {
            Some(range) => range,
            None => {
                // Every key masked: the reference fills all scores with the same constant,
                // so its softmax is uniform over all `klen` keys. Reproduce that.
                let weight = 1.0 / klen as f32;
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
        let scores = &mut scores[..=hi - lo];
        let position_terms = &mut position_terms[..=hi - lo];
        let query_pos = &query_pos[h.clone()];
        positions.start_head(head, query_pos);
        // the content terms (q_i + u) · k_j and the position terms (q_i + v) · R_{mlen+i-j} of
        // every key, then each score
        memory.key_dots(layer, lo, head, &query[h.clone()], int_scratch, scores);
        let nearest = shape.mlen + i - hi;
        positions.scores(head, query_pos, (nearest, shape.max_distance), position_terms);
        for (score, &position) in scores.iter_mut().zip(position_terms.iter()) {
            let content = *score;
            *score = (content + position) * scale;
        }
        kernels::softmax(scores);
        memory.add_values(layer, lo, head, scores, int_scratch, &mut out[h.clone()]);
    }
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

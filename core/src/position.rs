//! The position term of relative attention, `(q + v) · R_d` with `R_d = W_r · pos_emb(d)`, for
//! one query, head by head, in either of two summation orders:
//! ```text
//! keys    (q + v)_h · R_{d,h}                    R_d kept in a table (per session or segment)
//! folded  p_h · pos_emb(d),  p_h = W_r,hᵀ (q + v)_h   W_r folded into the query, once per head
//! ```
//! `W_r,h` are the rows `h·d_head..(h+1)·d_head` of `W_r (n_head · d_head, d_model)`. The two
//! are the same sum, grouped differently: the folded order needs no key table, only the one of
//! `pos_emb` (`distances × d_model`), and costs `d_head × d_model` MACs per query and head for
//! the fold, then `d_model` per key instead of `d_head`.

use crate::kernels;
use crate::weights::Matrix;

/// Where one query's position scores come from. [`PositionScores::start_head`] prepares a
/// head, then [`PositionScores::score`] gives its term for any distance.
#[derive(Debug)]
pub(crate) enum PositionScores<'a> {
    /// A table of position keys `R_d`.
    Keys {
        /// `(distances, n_head * d_head)` position keys `R_d = W_r pos_emb(d)`.
        keys: &'a [f32],
        /// `n_head * d_head`.
        width: usize,
        /// Width of one head.
        d_head: usize,
    },
    /// `W_r` folded into the query: no keys, one table of `pos_emb`.
    Folded {
        /// `W_r (n_head * d_head, d_model)`.
        r_net: Matrix<'a>,
        /// `(distances, d_model)` sinusoids `pos_emb(d)`.
        embeddings: &'a [f32],
        /// `(d_model)` the head's folded query `p_h = W_r,hᵀ (q + v)_h`.
        folded: &'a mut [f32],
        /// The quantized input of int8 `W_r` (at least `scratch_words(d_head)` words).
        scratch: &'a mut [u32],
        /// Width of one head.
        d_head: usize,
    },
}

impl PositionScores<'_> {
    /// Prepares head `head`, whose position query `(q + v)_h` is `query_pos (d_head)`: with
    /// the folded order, `p_h = W_r,hᵀ (q + v)_h`.
    pub(crate) fn start_head(&mut self, head: usize, query_pos: &[f32]) {
        if let PositionScores::Folded {
            r_net,
            folded,
            scratch,
            d_head,
            ..
        } = self
        {
            let w_r = r_net.row_range(head * *d_head, (head + 1) * *d_head);
            // (q + v)_h (d_head) @ W_r,h (d_head, d_model) -> p_h (d_model)
            kernels::vecmat(query_pos, &w_r, folded, scratch);
        }
    }

    /// `out[t] = score(head, query_pos, min(nearest + out.len() - 1 - t, max_distance))` for
    /// `t < out.len()`: the position terms of the keys `lo..=hi` of one query, whose distances
    /// fall from `nearest + hi - lo` (key `lo`) to `nearest` (key `hi`). The distances the table
    /// has are computed once each, several per pass, in ascending order; the bits are
    /// [`PositionScores::score`]'s.
    pub(crate) fn scores(
        &self,
        head: usize,
        query_pos: &[f32],
        (nearest, max_distance): (usize, usize),
        out: &mut [f32],
    ) {
        let n = out.len();
        if n == 0 {
            return;
        }
        if nearest > max_distance {
            out.fill(self.score(head, query_pos, max_distance));
            return;
        }
        // distances nearest..=nearest + m - 1 are in the table; the farther ones clamp
        let m = (max_distance - nearest + 1).min(n);
        let computed = &mut out[..m];
        match self {
            PositionScores::Keys { keys, width, d_head } => {
                let at = nearest * width + head * d_head;
                let rows = &keys[at..at + (m - 1) * width + d_head];
                kernels::dots_strided(rows, *width, query_pos, computed);
            }
            PositionScores::Folded {
                embeddings, folded, ..
            } => {
                let d_model = folded.len();
                let rows = &embeddings[nearest * d_model..(nearest + m) * d_model];
                kernels::dots_strided(rows, d_model, folded, computed);
            }
        }
        // out[t] holds distance nearest + t; key t wants nearest + n - 1 - t, clamped
        computed.reverse();
        out.copy_within(0..m, n - m);
        let farthest = out[n - m];
        out[..n - m].fill(farthest);
    }

    /// `(q + v)_h · R_{d,h}` for the head last started, `query_pos (d_head)` its position query,
    /// at `distance` (already clamped to the table).
    #[inline]
    pub(crate) fn score(&self, head: usize, query_pos: &[f32], distance: usize) -> f32 {
        match self {
            PositionScores::Keys { keys, width, d_head } => {
                let at = distance * width + head * d_head;
                kernels::dot(query_pos, &keys[at..at + d_head])
            }
            PositionScores::Folded {
                embeddings, folded, ..
            } => {
                let d_model = folded.len();
                kernels::dot(folded, &embeddings[distance * d_model..(distance + 1) * d_model])
            }
        }
    }
}

/// The sinusoid `pos_emb(d) = [sin(d * f_k) | cos(d * f_k)]`, `f_k = 1 / 10000^(2k / d_model)`,
/// into `pos_emb (d_model)`.
pub(crate) fn position_embedding(d: usize, pos_emb: &mut [f32]) {
    let d_model = pos_emb.len();
    let half = d_model / 2;
    let (sin, cos) = pos_emb.split_at_mut(half);
    for k in 0..half {
        // inv_freq as PyTorch computes and stores it (f32); the angle and sinusoid in f64.
        let exponent = (2 * k) as f32 / d_model as f32;
        let inv_freq = 1.0 / (libm::pow(10000.0, exponent as f64) as f32);
        let angle = d as f64 * inv_freq as f64;
        sin[k] = libm::sin(angle) as f32;
        cos[k] = libm::cos(angle) as f32;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec;
    use std::vec::Vec;

    use super::PositionScores;

    /// The batched position terms equal one `score` per key, clamped distances included, for
    /// both orders.
    #[test]
    fn batched_scores_equal_one_score_per_key() {
        let (n_head, d_head, distances) = (2usize, 3usize, 7usize);
        let width = n_head * d_head;
        let wave = |i: usize| ((i * 37 % 101) as f32 - 50.0) / 17.0;
        let keys: Vec<f32> = (0..distances * width).map(wave).collect();
        let d_model = 4;
        let embeddings: Vec<f32> = (0..distances * d_model).map(|i| wave(i + 5)).collect();
        let mut folded: Vec<f32> = (0..d_model).map(|i| wave(i + 11)).collect();
        let r_net_values: Vec<f32> = (0..width * d_model).map(|i| wave(i + 3)).collect();
        let query_pos: Vec<f32> = (0..d_head).map(|i| wave(i + 7)).collect();
        let mut scratch = [0u32; 8];
        let mut orders = [
            PositionScores::Keys {
                keys: &keys,
                width,
                d_head,
            },
            PositionScores::Folded {
                r_net: crate::weights::Matrix::f32(width, d_model, &r_net_values),
                embeddings: &embeddings,
                folded: &mut folded,
                scratch: &mut scratch,
                d_head,
            },
        ];
        for positions in orders.iter_mut() {
            for head in 0..n_head {
                positions.start_head(head, &query_pos);
                for max_distance in [0, 2, distances - 1] {
                    for nearest in 0..distances + 2 {
                        for n in 0..distances + 3 {
                            let mut out = vec![f32::NAN; n];
                            positions.scores(head, &query_pos, (nearest, max_distance), &mut out);
                            for (t, got) in out.iter().enumerate() {
                                let distance = (nearest + n - 1 - t).min(max_distance);
                                let want = positions.score(head, &query_pos, distance);
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "head {head} max {max_distance} nearest {nearest} n {n} key {t}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

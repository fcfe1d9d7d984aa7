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

//! The position term of relative attention, `(q + v) · R_d` with `R_d = W_r · pos_emb(d)`, for
//! one query, head by head, in either of two summation orders:
//! ```text
//! keys    (q + v)_h · R_{d,h}                    R_d kept in a table (per session or segment)
//! folded  p_h · pos_emb(d),  p_h = W_r,hᵀ (q + v)_h   W_r folded into the query, once per head
//! ```
//! `W_r,h` are the rows `h·d_head..(h+1)·d_head` of `W_r (n_head · d_head, d_model)`. The two
//! are the same sum, grouped differently: the folded order needs no key table, and costs
//! `d_head × d_model` MACs per query and head for the fold, then `d_model` per key instead of
//! `d_head`.
//!
//! The folded order does not keep `pos_emb(d)` for every distance either. With `d = a·B + b`
//! (`B` = [`split_distances`]), `sin(d f) = sin(aBf) cos(bf) + cos(aBf) sin(bf)` and
//! `cos(d f) = cos(aBf) cos(bf) - sin(aBf) sin(bf)`, so with `p_h = [w | w']` (its sine and
//! cosine halves) and `pos_emb(aB) = [s | c]`:
//! ```text
//! p_h · pos_emb(aB + b) = g_a · pos_emb(b),   g_a = [w c - w' s | w s + w' c]
//! ```
//! Two small tables remain, `pos_emb(aB)` and `pos_emb(b)` (about `3 √distances` rows instead
//! of `distances`); each query and head rotates `p_h` into `g_a` once per block of `B`
//! distances (`2 d_model` MACs), then pays `d_model` per key as before.

use crate::kernels;
use crate::matrix;
use crate::options::split_distances;
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
    /// `W_r` folded into the query: no keys, two small tables of `pos_emb`.
    Folded {
        /// `W_r (n_head * d_head, d_model)`.
        r_net: Matrix<'a>,
        /// The split sinusoids ([`SplitTable`]).
        table: SplitTable<'a>,
        /// `(d_model)` the head's folded query `p_h = W_r,hᵀ (q + v)_h`.
        folded: &'a mut [f32],
        /// `(d_model)` `p_h` rotated to the block of distances `rotated_block`: `g_a`.
        rotated: &'a mut [f32],
        /// The block `rotated` holds, if any, for the head last started.
        rotated_block: Option<usize>,
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
            rotated_block,
            scratch,
            d_head,
            ..
        } = self
        {
            let w_r = r_net.row_range(head * *d_head, (head + 1) * *d_head);
            // (q + v)_h (d_head) @ W_r,h (d_head, d_model) -> p_h (d_model)
            matrix::vecmat(query_pos, &w_r, folded, scratch);
            *rotated_block = None;
        }
    }

    /// `out[t] = score(head, query_pos, min(nearest + out.len() - 1 - t, max_distance))` for
    /// `t < out.len()`: the position terms of the keys `lo..=hi` of one query, whose distances
    /// fall from `nearest + hi - lo` (key `lo`) to `nearest` (key `hi`). The distances the table
    /// has are computed once each, several per pass, in ascending order; the bits are
    /// [`PositionScores::score`]'s.
    pub(crate) fn scores(
        &mut self,
        head: usize,
        query_pos: &[f32],
        (nearest, max_distance): (usize, usize),
        out: &mut [f32],
    ) {
        let n = out.len();
        let m = self.terms(head, query_pos, (nearest, max_distance), out);
        if m == 0 {
            return;
        }
        // out[t] holds distance nearest + t; key t wants nearest + n - 1 - t, clamped
        out[..m].reverse();
        // moved right, last first (`copy_within` would link a general `memmove`)
        for t in (0..m).rev() {
            out[n - m + t] = out[t];
        }
        let farthest = out[n - m];
        out[..n - m].fill(farthest);
    }

    /// The terms [`PositionScores::scores`] lays out for the `out.len()` keys `lo..=hi`, each
    /// computed once, in ascending order of distance: returns `m`, and key `lo + t` takes
    /// `out[min(n - 1 - t, m - 1)]` (`n = out.len()`; `m = 0` when `n` is). The same bits.
    pub(crate) fn terms(
        &mut self,
        head: usize,
        query_pos: &[f32],
        (nearest, max_distance): (usize, usize),
        out: &mut [f32],
    ) -> usize {
        let n = out.len();
        if n == 0 {
            return 0;
        }
        if nearest > max_distance {
            out[0] = self.score(head, query_pos, max_distance);
            return 1;
        }
        // distances nearest..=nearest + m - 1 are in the table; the farther ones clamp
        let m = (max_distance - nearest + 1).min(n);
        let computed = &mut out[..m];
        match self {
            PositionScores::Keys { keys, width, d_head } => {
                let (width, d_head) = (*width, *d_head);
                let at = nearest * width + head * d_head;
                let rows = &keys[at..at + (m - 1) * width + d_head];
                kernels::dots_strided_f32(rows, width, query_pos, computed);
            }
            PositionScores::Folded { table, .. } => {
                // block by block: rotate p_h to the block, then one product per distance in it
                let block = table.block;
                let mut done = 0;
                while done < m {
                    let d = nearest + done;
                    let (a, b) = (d / block, d % block);
                    let count = (block - b).min(m - done);
                    let (rotated, table) = self.rotate_to(a);
                    let d_model = rotated.len();
                    let rows = &table.fine[b * d_model..(b + count) * d_model];
                    kernels::dots_strided_f32(rows, d_model, rotated, &mut computed[done..done + count]);
                    done += count;
                }
            }
        }
        m
    }

    /// `(q + v)_h · R_{d,h}` for the head last started, `query_pos (d_head)` its position query,
    /// at `distance` (already clamped to the table).
    #[inline]
    pub(crate) fn score(&mut self, head: usize, query_pos: &[f32], distance: usize) -> f32 {
        match self {
            PositionScores::Keys { keys, width, d_head } => {
                let at = distance * *width + head * *d_head;
                kernels::dot_f32(query_pos, &keys[at..at + *d_head])
            }
            PositionScores::Folded { table, .. } => {
                let (a, b) = (distance / table.block, distance % table.block);
                let (rotated, table) = self.rotate_to(a);
                let d_model = rotated.len();
                kernels::dot_f32(rotated, &table.fine[b * d_model..(b + 1) * d_model])
            }
        }
    }

    /// With the folded order: `g_a`, `p_h` rotated to block `a` of distances (computed unless it
    /// is the block last rotated), and the table. Not called with the keys order. Kept out of
    /// line so the attention loop around it stays small enough for its `exp` to be inlined.
    #[inline(never)]
    fn rotate_to(&mut self, a: usize) -> (&[f32], &SplitTable<'_>) {
        let PositionScores::Folded {
            table,
            folded,
            rotated,
            rotated_block,
            ..
        } = self
        else {
            return (&[], &EMPTY_TABLE);
        };
        if table.coarse.is_empty() {
            return (folded, table); // one block: pos_emb(b) is the whole table
        }
        if *rotated_block != Some(a) {
            let d_model = folded.len();
            let half = d_model / 2;
            let (sin, cos) = table.coarse[a * d_model..(a + 1) * d_model].split_at(half);
            let (w_sin, w_cos) = folded.split_at(half);
            let (g_sin, g_cos) = rotated.split_at_mut(half);
            for k in 0..half {
                g_sin[k] = w_sin[k] * cos[k] - w_cos[k] * sin[k];
                g_cos[k] = w_sin[k] * sin[k] + w_cos[k] * cos[k];
            }
            *rotated_block = Some(a);
        }
        (rotated, table)
    }
}

/// The sinusoids of the folded order, split by [`split_distances`]: `pos_emb(a·block)` for each
/// block `a` and `pos_emb(b)` for `b < block`.
#[derive(Debug)]
pub(crate) struct SplitTable<'a> {
    /// Distances per block.
    pub(crate) block: usize,
    /// `(coarse, d_model)`: `pos_emb(a·block)`.
    pub(crate) coarse: &'a [f32],
    /// `(block, d_model)`: `pos_emb(b)`.
    pub(crate) fine: &'a [f32],
}

const EMPTY_TABLE: SplitTable<'static> = SplitTable {
    block: 1,
    coarse: &[],
    fine: &[],
};

/// Rows of `d_model` floats the folded order keeps for `distances`: the two tables and the
/// rotated query, or with one block only `pos_emb(d)` for every distance.
pub(crate) fn split_table_rows(distances: usize) -> usize {
    match split_distances(distances) {
        (block, 1) => block,
        (block, coarse) => block + coarse + 1,
    }
}

/// Floats of the folded order's tables and rotated query for `distances` and `d_model`.
pub(crate) fn split_table_floats(distances: usize, d_model: usize) -> Option<usize> {
    split_table_rows(distances).checked_mul(d_model)
}

/// The sinusoid `pos_emb(d) = [sin(d * f_k) | cos(d * f_k)]`, `f_k = 1 / 10000^(2k / d_model)`,
/// into `pos_emb (d_model)`.
pub(crate) fn position_embedding(d: usize, pos_emb: &mut [f32]) {
    position_embeddings(d, pos_emb, pos_emb.len());
}

/// Frequencies [`position_embeddings`] computes at a time, for all its rows.
const FREQUENCIES_AT_ONCE: usize = 32;

/// [`position_embedding`] of the distances `first`, `first + 1`, ... into consecutive rows of
/// `d_model` in `rows`, each frequency computed once for all the rows: the same bits.
pub(crate) fn position_embeddings(first: usize, rows: &mut [f32], d_model: usize) {
    let half = d_model / 2;
    for k0 in (0..half).step_by(FREQUENCIES_AT_ONCE) {
        let count = FREQUENCIES_AT_ONCE.min(half - k0);
        let mut inv_freqs = [0.0f32; FREQUENCIES_AT_ONCE];
        for (j, inv_freq) in inv_freqs[..count].iter_mut().enumerate() {
            // as PyTorch computes and stores it (f32); the angle and sinusoid in f64
            let exponent = (2 * (k0 + j)) as f32 / d_model as f32;
            *inv_freq = 1.0 / (libm::pow(10000.0, exponent as f64) as f32);
        }
        for (i, row) in rows.chunks_exact_mut(d_model.max(1)).enumerate() {
            let (sin, cos) = row.split_at_mut(half);
            for (j, &inv_freq) in inv_freqs[..count].iter().enumerate() {
                let angle = (first + i) as f64 * inv_freq as f64;
                sin[k0 + j] = libm::sin(angle) as f32;
                cos[k0 + j] = libm::cos(angle) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec;
    use std::vec::Vec;

    use super::PositionScores;

    /// The folded order over `r_net`, the split table `(block, coarse, fine)` and the buffers.
    fn folded_order<'a>(
        r_net: crate::weights::Matrix<'a>,
        (block, coarse, fine): (usize, &'a [f32], &'a [f32]),
        (folded, rotated): (&'a mut [f32], &'a mut [f32]),
        scratch: &'a mut [u32],
        d_head: usize,
    ) -> PositionScores<'a> {
        PositionScores::Folded {
            r_net,
            table: super::SplitTable { block, coarse, fine },
            folded,
            rotated,
            rotated_block: None,
            scratch,
            d_head,
        }
    }

    /// The batched position terms equal one `score` per key, clamped distances included, for
    /// both orders.
    #[test]
    fn batched_scores_equal_one_score_per_key() {
        let (n_head, d_head, distances) = (2usize, 3usize, 7usize);
        let width = n_head * d_head;
        let wave = |i: usize| ((i * 37 % 101) as f32 - 50.0) / 17.0;
        let keys: Vec<f32> = (0..distances * width).map(wave).collect();
        let d_model = 4;
        // three blocks of three distances (the last one short), to cross block boundaries
        let (block, coarse) = (3, 3);
        let coarse_rows: Vec<f32> = (0..coarse * d_model).map(|i| wave(i + 5)).collect();
        let fine_rows: Vec<f32> = (0..block * d_model).map(|i| wave(i + 2)).collect();
        let mut folded: Vec<f32> = (0..d_model).map(|i| wave(i + 11)).collect();
        let mut rotated = vec![0.0f32; d_model];
        let r_net_values: Vec<f32> = (0..width * d_model).map(|i| wave(i + 3)).collect();
        let query_pos: Vec<f32> = (0..d_head).map(|i| wave(i + 7)).collect();
        let mut scratch = [0u32; 8];
        let mut orders = [
            PositionScores::Keys {
                keys: &keys,
                width,
                d_head,
            },
            folded_order(
                crate::weights::Matrix::f32(width, d_model, &r_net_values),
                (block, &coarse_rows, &fine_rows),
                (&mut folded, &mut rotated),
                &mut scratch,
                d_head,
            ),
        ];
        for positions in orders.iter_mut() {
            for head in 0..n_head {
                positions.start_head(head, &query_pos);
                for max_distance in [0, 2, distances - 1] {
                    for nearest in 0..distances + 2 {
                        for n in 0..distances + 3 {
                            let mut out = vec![f32::NAN; n];
                            positions.scores(head, &query_pos, (nearest, max_distance), &mut out);
                            // one score at a time, from the farthest distance: each a new block
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

    /// The split sinusoids give the product with `pos_emb(d)` itself, to f32 rounding, at every
    /// distance.
    #[test]
    fn split_table_rotation_equals_the_direct_product() {
        let d_model = 16;
        for distances in [1usize, 2, 5, 65, 200] {
            let (block, coarse) = super::split_distances(distances);
            assert!(block * coarse >= distances && (block * block >= 4 * distances || coarse == 1));
            let coarse = if coarse == 1 { 0 } else { coarse };
            let mut coarse_rows = vec![0.0f32; coarse * d_model];
            for (a, row) in coarse_rows.chunks_exact_mut(d_model).enumerate() {
                super::position_embedding(a * block, row);
            }
            let mut fine_rows = vec![0.0f32; block * d_model];
            for (b, row) in fine_rows.chunks_exact_mut(d_model).enumerate() {
                super::position_embedding(b, row);
            }
            let r_net_values: Vec<f32> = (0..d_model * d_model)
                .map(|i| ((i * 29 % 61) as f32 - 30.0) / 40.0)
                .collect();
            let query_pos: Vec<f32> = (0..d_model).map(|i| (i as f32 - 7.5) / 5.0).collect();
            let (mut folded, mut rotated) = (vec![0.0f32; d_model], vec![0.0f32; d_model]);
            let mut scratch = [0u32; 16];
            let mut positions = folded_order(
                crate::weights::Matrix::f32(d_model, d_model, &r_net_values),
                (block, &coarse_rows, &fine_rows),
                (&mut folded, &mut rotated),
                &mut scratch,
                d_model,
            );
            positions.start_head(0, &query_pos);
            let p: Vec<f64> = match &positions {
                PositionScores::Folded { folded, .. } => folded.iter().map(|&v| v as f64).collect(),
                PositionScores::Keys { .. } => unreachable!(),
            };
            let norm: f64 = p.iter().map(|v| v.abs()).sum();
            for d in 0..distances {
                let mut pos_emb = vec![0.0f32; d_model];
                super::position_embedding(d, &mut pos_emb);
                let direct: f64 = p.iter().zip(&pos_emb).map(|(a, &b)| a * b as f64).sum();
                let split = positions.score(0, &query_pos, d) as f64;
                assert!(
                    (split - direct).abs() <= 1e-6 * norm,
                    "distances {distances} d {d}: {split} vs {direct}"
                );
            }
        }
    }
}

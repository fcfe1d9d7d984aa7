//! The output layer: a full log-softmax, or the adaptive log-softmax (Grave et al.) with a head
//! over the shortlist plus one logit per tail cluster, and a log-softmax inside each cluster.
//!
//! Tail cluster `i`'s logit is head column `cutoffs[0] + i - 1`, as in Hugging Face and the
//! original TensorFlow code. Each cluster's logits come from the hidden state projected by
//! `out_projs[i]^T` (when the model has projections).

use crate::config::MAX_CUTOFFS;
use crate::kernels::{self, MAX_POSITIONS_PER_PASS};
use crate::matrix;
use crate::model::Model;
use crate::vector;

/// `ln p(token | hiddens[p]) -> row p of log_probs` (rows of `n_token`) for every token and
/// each of up to [`MAX_POSITIONS_PER_PASS`] positions, each cluster's weights read once for all
/// of them. `projected` holds a row of `d_embed` floats for each position and `scratch`
/// [`scratch_words`](matrix::scratch_words)`(max(d_model, d_embed))` words for each; positions
/// past what they (or `log_probs`) hold are left out. Each row has the same bits however many
/// positions go together ([`matrix::matmul_split`]).
///
/// `targets[p] = Some(t)` asks only for `ln p(t)` at position `p` (scoring): an adaptive
/// softmax then computes the head and `t`'s own cluster for it, not the other tail clusters,
/// whose entries of the row are left as they were. `ln p(t)` has the same bits as in a full row.
/// Positions with `None`, or past the end of `targets`, get the full row.
pub fn log_probs_of_positions(
    model: &Model<'_>,
    hiddens: &[&[f32]],
    targets: &[Option<u32>],
    projected: &mut [f32],
    scratch: &mut [u32],
    log_probs: &mut [f32],
) {
    let config = model.config();
    let n_clusters = config.n_clusters();
    let n_token = config.n_token as usize;
    let max_width = config.max_emb_dim() as usize;
    let count = hiddens
        .len()
        .min(MAX_POSITIONS_PER_PASS)
        .min(log_probs.len() / n_token.max(1))
        .min(projected.len() / max_width.max(1));
    let hiddens = &hiddens[..count];
    let log_probs = &mut log_probs[..count * n_token];

    // The head: shortlist logits, then the tail clusters' logits.
    let shortlist = config.cluster_range(0).1 as usize;
    let heads = project(model, 0, hiddens, projected, scratch);
    {
        let mut rows: [&mut [f32]; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| Default::default());
        for (slot, row) in rows.iter_mut().zip(log_probs.chunks_exact_mut(n_token)) {
            *slot = row;
        }
        cluster_logits(model, 0, &heads, scratch, &mut rows[..count], 0..shortlist);
    }
    let mut tail_logits = [[0.0f32; MAX_CUTOFFS]; MAX_POSITIONS_PER_PASS];
    for (p, (head, row)) in heads.iter().zip(log_probs.chunks_exact_mut(n_token)).enumerate() {
        let tail_logits = &mut tail_logits[p][..n_clusters];
        if n_clusters > 0 {
            // cluster_weight (n_clusters, d_embed) @ head_hidden (d_embed) + cluster_bias -> (n_clusters)
            let cluster_weight = model.cluster_weight();
            matrix::matvec_bias(&cluster_weight, model.cluster_bias(), head, tail_logits, scratch);
        }
        let shortlist = &mut row[..shortlist];
        let head_max = kernels::max(shortlist).max(kernels::max(tail_logits));
        let mut head_sum = vector::sum_exp(shortlist, head_max);
        for &v in tail_logits.iter() {
            head_sum += kernels::fast_math::softmax_exp(v - head_max);
        }
        let head_lse = head_max + libm::logf(head_sum);
        // two loops rather than one over the chain: each compiles to a plain unrolled loop
        for v in shortlist.iter_mut() {
            *v -= head_lse;
        }
        for v in tail_logits.iter_mut() {
            *v -= head_lse;
        }
    }

    // Each tail: ln p(cluster) + ln p(token | cluster), for the positions that need it.
    for cluster in 1..=n_clusters {
        let (start, end) = config.cluster_range(cluster);
        let (start, end) = (start as usize, end as usize);
        let needs = |p: usize| match targets.get(p) {
            Some(Some(t)) => (start..end).contains(&(*t as usize)),
            _ => true,
        };
        let mut chosen_hiddens: [&[f32]; MAX_POSITIONS_PER_PASS] = [&[]; MAX_POSITIONS_PER_PASS];
        let mut chosen_rows: [&mut [f32]; MAX_POSITIONS_PER_PASS] =
            core::array::from_fn(|_| Default::default());
        let mut chosen_logits = [0.0f32; MAX_POSITIONS_PER_PASS];
        let mut chosen = 0;
        for (p, (hidden, row)) in hiddens
            .iter()
            .zip(log_probs.chunks_exact_mut(n_token))
            .enumerate()
        {
            if needs(p) {
                chosen_hiddens[chosen] = hidden;
                chosen_rows[chosen] = row;
                chosen_logits[chosen] = tail_logits[p][cluster - 1];
                chosen += 1;
            }
        }
        if chosen == 0 {
            continue;
        }
        let tails = project(model, cluster, &chosen_hiddens[..chosen], projected, scratch);
        let rows = &mut chosen_rows[..chosen];
        cluster_logits(model, cluster, &tails, scratch, rows, start..end);
        for (row, &cluster_logit) in rows.iter_mut().zip(&chosen_logits) {
            let tail = &mut row[start..end];
            vector::log_softmax(tail);
            for v in tail.iter_mut() {
                *v += cluster_logit;
            }
        }
    }
}

/// `hidden (d_model) @ out_projs[cluster] (d_model, width) -> (width)` for each position, into
/// consecutive rows of `projected` (rows of `max_emb_dim` floats), or the hiddens themselves.
fn project<'p>(
    model: &Model<'_>,
    cluster: usize,
    hiddens: &[&'p [f32]],
    projected: &'p mut [f32],
    scratch: &mut [u32],
) -> [&'p [f32]; MAX_POSITIONS_PER_PASS] {
    let config = model.config();
    let mut rows: [&[f32]; MAX_POSITIONS_PER_PASS] = [&[]; MAX_POSITIONS_PER_PASS];
    if !config.has_out_proj() {
        rows[..hiddens.len()].copy_from_slice(hiddens);
        return rows;
    }
    let width = config.emb_dim(config.emb_table_of_cluster(cluster)) as usize;
    let stride = config.max_emb_dim() as usize;
    let out_proj = model.out_proj(cluster);
    let count = hiddens.len().min(projected.len() / stride.max(1));
    let mut outs: [&mut [f32]; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| Default::default());
    for (slot, out) in outs
        .iter_mut()
        .zip(projected.chunks_exact_mut(stride))
        .take(count)
    {
        *slot = &mut out[..width];
    }
    matrix::vecmat_each(&hiddens[..count], &out_proj, &mut outs[..count], scratch);
    for (slot, out) in rows.iter_mut().zip(outs).take(count) {
        *slot = out;
    }
    rows
}

/// Logits of cluster `cluster`'s own tokens for each input: `W_i (n_i, width) @ xs[p] (width) +
/// b_i` into columns `tokens` (the cluster's) of `rows[p]` (rows of `n_token`), the weights read
/// once for all the inputs.
fn cluster_logits(
    model: &Model<'_>,
    cluster: usize,
    xs: &[&[f32]; MAX_POSITIONS_PER_PASS],
    scratch: &mut [u32],
    rows: &mut [&mut [f32]],
    tokens: core::ops::Range<usize>,
) {
    let config = model.config();
    let table = config.emb_table_of_cluster(cluster);
    // With div_val = 1 one table covers every cluster: take the cluster's rows.
    let first_row = if config.div_val == 1 { tokens.start } else { 0 };
    let tokens_here = tokens.len();
    let weight = model
        .out_weight(table)
        .row_range(first_row, first_row + tokens_here);
    let bias = model.out_bias(table).range(first_row, first_row + tokens_here);
    let mut outs: [&mut [f32]; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| Default::default());
    let mut count = 0;
    for (slot, row) in outs.iter_mut().zip(rows.iter_mut()) {
        *slot = &mut row[tokens.clone()];
        count += 1;
    }
    if kernels::LONE_POSITION_PASSES && count == 1 {
        // one position: the bias added in the pass that scales the sums
        let x = (xs[0], None);
        return matrix::matvec_bias_known(&weight, x, bias, &mut *outs[0], scratch);
    }
    let mut rests: [&mut [f32]; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| Default::default());
    matrix::matmul_split(
        &weight,
        &xs[..count],
        &mut outs[..count],
        &mut rests[..count],
        scratch,
    );
    for out in &mut outs[..count] {
        vector::add_vector(out, bias);
    }
}

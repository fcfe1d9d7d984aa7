//! The output layer: a full log-softmax, or the adaptive log-softmax (Grave et al.) with a head
//! over the shortlist plus one logit per tail cluster, and a log-softmax inside each cluster.
//!
//! Tail cluster `i`'s logit is head column `cutoffs[0] + i - 1`, as in Hugging Face and the
//! original TensorFlow code. Each cluster's logits come from the hidden state projected by
//! `out_projs[i]^T` (when the model has projections).

use crate::config::MAX_CUTOFFS;
use crate::kernels;
use crate::model::Model;

/// `ln p(token | hidden) -> log_probs (n_token)` for every token. `projected` (at least
/// `d_embed` floats) and `scratch` (at least `scratch_words(max(d_model, d_embed))`) are scratch.
pub fn log_probs(
    model: &Model<'_>,
    hidden: &[f32],
    projected: &mut [f32],
    scratch: &mut [u32],
    log_probs: &mut [f32],
) {
    let config = model.config();
    let n_clusters = config.n_clusters();

    // The head: shortlist logits, then the tail clusters' logits.
    let shortlist = &mut log_probs[..config.cluster_range(0).1 as usize];
    let head_hidden = project(model, 0, hidden, projected, scratch);
    cluster_logits(model, 0, head_hidden, scratch, shortlist);
    let mut tail_logits = [0.0f32; MAX_CUTOFFS];
    let tail_logits = &mut tail_logits[..n_clusters];
    if n_clusters > 0 {
        // cluster_weight (n_clusters, d_embed) @ head_hidden (d_embed) + cluster_bias -> (n_clusters)
        let cluster_weight = model.cluster_weight();
        kernels::matvec_bias(
            &cluster_weight,
            model.cluster_bias(),
            head_hidden,
            tail_logits,
            scratch,
        );
    }
    let head_max = kernels::max(shortlist).max(kernels::max(tail_logits));
    let head_sum: f32 = shortlist
        .iter()
        .chain(tail_logits.iter())
        .map(|&v| kernels::fast_math::softmax_exp(v - head_max))
        .sum();
    let head_lse = head_max + libm::logf(head_sum);
    for v in shortlist.iter_mut().chain(tail_logits.iter_mut()) {
        *v -= head_lse;
    }

    // Each tail: ln p(cluster) + ln p(token | cluster).
    for cluster in 1..=n_clusters {
        let (start, end) = config.cluster_range(cluster);
        let tail_hidden = project(model, cluster, hidden, projected, scratch);
        let tail = &mut log_probs[start as usize..end as usize];
        cluster_logits(model, cluster, tail_hidden, scratch, tail);
        kernels::log_softmax(tail);
        for v in tail.iter_mut() {
            *v += tail_logits[cluster - 1];
        }
    }
}

/// `hidden (d_model) @ out_projs[cluster] (d_model, width) -> (width)`, or `hidden` itself.
fn project<'p>(
    model: &Model<'_>,
    cluster: usize,
    hidden: &'p [f32],
    projected: &'p mut [f32],
    scratch: &mut [u32],
) -> &'p [f32] {
    let config = model.config();
    if !config.has_out_proj() {
        return hidden;
    }
    let width = config.emb_dim(config.emb_table_of_cluster(cluster)) as usize;
    let out = &mut projected[..width];
    kernels::vecmat(hidden, &model.out_proj(cluster), out, scratch);
    out
}

/// Logits of cluster `cluster`'s own tokens: `W_i (n_i, width) @ x (width) + b_i -> out (n_i)`.
fn cluster_logits(model: &Model<'_>, cluster: usize, x: &[f32], scratch: &mut [u32], out: &mut [f32]) {
    let config = model.config();
    let table = config.emb_table_of_cluster(cluster);
    // With div_val = 1 one table covers every cluster: take the cluster's rows.
    let first_row = if config.div_val == 1 {
        config.cluster_range(cluster).0 as usize
    } else {
        0
    };
    let rows = out.len();
    let weight = model.out_weight(table).row_range(first_row, first_row + rows);
    let bias = &model.out_bias(table)[first_row..first_row + rows];
    kernels::matvec_bias(&weight, bias, x, out, scratch);
}

//! The output layer over many rows at once: a full log-softmax, or the adaptive log-softmax
//! (Grave et al.) as Hugging Face's `ProjectedAdaptiveLogSoftmax` computes it: the head's
//! logits are the shortlist's plus one per tail cluster (`cluster_weight`), and a tail token's
//! log-probability is its cluster's head log-probability plus its log-softmax in the cluster.

use crate::cpu::matmul::{linear, matmul, Rhs};
use crate::real::Real;
use crate::weights::HostWeights;

/// Reusable buffers.
#[derive(Debug, Default)]
pub(crate) struct Scratch<T> {
    projected: Vec<T>,
    tail_logits: Vec<T>,
}

/// `ln sum exp` of `x`.
fn log_sum_exp<T: Real>(x: impl Iterator<Item = T> + Clone) -> T {
    let max = x.clone().fold(None, |m: Option<T>, v| match m {
        Some(m) if m >= v => Some(m),
        _ => Some(v),
    });
    let Some(max) = max else { return T::ZERO };
    let sum = x.fold(T::ZERO, |s, v| s + (v - max).exp());
    max + sum.ln()
}

/// The input of `cluster`'s output layer for `hidden` (rows, d_model): `hidden @
/// out_projs[cluster]` (rows, width) written to `projected` when the model has output
/// projections, or `hidden` itself.
pub(crate) fn cluster_input<'x, T: Real>(
    w: &HostWeights<T>,
    cluster: usize,
    hidden: &'x [T],
    projected: &'x mut Vec<T>,
) -> &'x [T] {
    let config = &w.config;
    if !config.has_out_proj() {
        return hidden;
    }
    let d_model = config.d_model as usize;
    let rows = hidden.len() / d_model;
    let width = config.emb_dim(config.emb_table_of_cluster(cluster)) as usize;
    projected.resize(rows * width, T::ZERO);
    // (rows, width) = hidden (rows, d_model) @ out_projs[cluster] (d_model, width)
    let plain = Rhs::Plain { ld: width };
    matmul(
        rows,
        width,
        d_model,
        hidden,
        d_model,
        &w.out_projs[cluster],
        plain,
        projected,
        width,
        false,
    );
    projected
}

/// `hidden (rows, d_model) -> log_probs (rows, n_token)`.
pub(crate) fn log_probs<T: Real>(
    w: &HostWeights<T>,
    hidden: &[T],
    scratch: &mut Scratch<T>,
    log_probs: &mut [T],
) {
    let config = &w.config;
    let d_model = config.d_model as usize;
    let n_token = config.n_token as usize;
    let rows = hidden.len() / d_model;
    let n_clusters = config.n_clusters();

    // Logits of every cluster into its columns of log_probs.
    for cluster in 0..=n_clusters {
        let (start, end) = config.cluster_range(cluster);
        let (start, end) = (start as usize, end as usize);
        let table = config.emb_table_of_cluster(cluster);
        let width = config.emb_dim(table) as usize;
        let x = cluster_input(w, cluster, hidden, &mut scratch.projected);
        // With div_val 1 one output layer covers the vocabulary: take the cluster's rows.
        let first = if config.div_val == 1 { start } else { 0 };
        let weight = &w.out_weights[table][first * width..(first + end - start) * width];
        let bias = &w.out_biases[table][first..first + end - start];
        // logits (rows, n_c) = x @ W_c^T + b_c, written at columns start..end.
        let w_t = Rhs::Transposed { ld: width };
        let out = &mut log_probs[start..];
        matmul(
            rows,
            end - start,
            width,
            x,
            width,
            weight,
            w_t,
            out,
            n_token,
            false,
        );
        for row in log_probs.chunks_exact_mut(n_token) {
            for (v, b) in row[start..end].iter_mut().zip(bias) {
                *v += *b;
            }
        }
        if cluster == 0 && n_clusters > 0 {
            // The tail clusters' head logits (rows, n_clusters) = x @ cluster_weight^T + bias.
            scratch.tail_logits.resize(rows * n_clusters, T::ZERO);
            let cluster_bias = Some(&w.cluster_bias[..]);
            linear(
                x,
                width,
                &w.cluster_weight,
                cluster_bias,
                &mut scratch.tail_logits,
            );
        }
    }

    // Normalise each row.
    let shortlist = config.cluster_range(0).1 as usize;
    for (r, row) in log_probs.chunks_exact_mut(n_token).enumerate() {
        let tails = &scratch.tail_logits[r * n_clusters..(r + 1) * n_clusters];
        let head_lse = log_sum_exp(row[..shortlist].iter().chain(tails).copied());
        for v in &mut row[..shortlist] {
            *v = *v - head_lse;
        }
        for (c, &tail_logit) in tails.iter().enumerate() {
            let (start, end) = config.cluster_range(c + 1);
            let cluster = &mut row[start as usize..end as usize];
            let offset = tail_logit - head_lse - log_sum_exp(cluster.iter().copied());
            for v in cluster.iter_mut() {
                *v += offset;
            }
        }
    }
}

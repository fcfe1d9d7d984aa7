//! Multiply-accumulates of the forward pass, counted from the config: the firmware's
//! instructions per MAC and `txl bench`'s multiply-accumulates per second.
//!
//! With `H = n_head * d_head`, per layer and position:
//!
//! ```text
//! q, k, v          3 * H * d_model
//! attention        3 * H * K      (K keys the mask lets the position see: (q + u) . k_j,
//!                                  (q + v) . R_d and the weighted sum of values, per key)
//! o_net            d_model * H
//! feed-forward     2 * d_model * d_inner
//! ```
//!
//! and per position the output layer: each cluster's projection `d_model * w_i` (when the model
//! has projections) and logits `tokens_i * w_i`, plus `n_clusters * d_embed` for the tail
//! clusters' logits in the head. LayerNorm, softmax, biases and the embedding are not counted.
//! The position keys `R_d` count where they are computed in the forward pass: not at all when
//! the session keeps them (it computes them once, before), `klen * d_model * H` per layer and
//! segment when they are recomputed per segment (`klen` distances, `d_model` MACs per element),
//! and with `W_r` folded into the query `H * d_model` per layer and position for the fold, then
//! `n_head * d_model` instead of `H` per key for the position term, and `2 * d_model` per head
//! for each block of distances the position reaches (the folded query rotated to the block).

use crate::{AttentionShape, Config, MemInit, PositionKeys, SessionOptions};

/// MACs of scoring `tokens` tokens in segments of `tgt_len`, the memory carried as the session
/// carries it.
pub fn score_macs(config: &Config, options: &SessionOptions, tokens: usize) -> u64 {
    let tgt_len = options.tgt_len.max(1) as usize;
    let mem_len = options.mem_len as usize;
    let mut mlen = if options.mem_init == MemInit::Zeros {
        mem_len
    } else {
        0
    };
    let mut total = 0;
    let mut done = 0;
    while done < tokens {
        let qlen = tgt_len.min(tokens - done);
        total += segment_macs(config, options, mlen, qlen);
        mlen = (mlen + qlen).min(mem_len);
        done += qlen;
    }
    total
}

/// MACs of one segment of `qlen` positions after `mlen` remembered ones, every output row.
pub fn segment_macs(config: &Config, options: &SessionOptions, mlen: usize, qlen: usize) -> u64 {
    let d_model = config.d_model as u64;
    let width = config.qkv_width() as u64;
    let shape = AttentionShape {
        qlen,
        mlen,
        mem_len: options.mem_len as usize,
        same_length: options.same_length,
        max_distance: options.distances().saturating_sub(1),
        n_head: config.n_head as usize,
        d_head: config.d_head as usize,
    };
    let n_layer = config.n_layer as u64;
    let dense = 3 * width * d_model + d_model * width + 2 * d_model * config.d_inner as u64;
    // the position term per key: (q + v) . R_d over a head (H in all heads), or with the fold
    // p_h . pos_emb(d) over d_model per head
    let (position_per_key, per_position) = match options.position_keys {
        PositionKeys::FoldedIntoQuery => (config.n_head as u64 * d_model, width * d_model),
        PositionKeys::PerSession | PositionKeys::PerSegment => (width, 0),
    };
    let mut total = 0;
    for i in 0..qlen {
        let attention = match shape.visible_keys(i) {
            Some((lo, hi)) => {
                (2 * width + position_per_key) * (hi - lo + 1) as u64
                    + folded_rotations(config, options, &shape, mlen + i - hi, hi - lo + 1)
            }
            // Every key masked: a uniform average of all values.
            None => width * (mlen + qlen) as u64,
        };
        total += n_layer * (dense + attention + per_position) + output_macs(config);
    }
    if options.position_keys == PositionKeys::PerSegment {
        let distances = (mlen + qlen).min(options.distances()) as u64;
        total += n_layer * distances * d_model * width;
    }
    total
}

/// MACs of rotating each head's folded query to the blocks of distances `nearest..nearest + n`
/// (clamped to the table) reaches; none in the other modes.
fn folded_rotations(
    config: &Config,
    options: &SessionOptions,
    shape: &AttentionShape,
    nearest: usize,
    n: usize,
) -> u64 {
    if options.position_keys != PositionKeys::FoldedIntoQuery {
        return 0;
    }
    let (block, blocks) = options.folded_blocks();
    if blocks == 1 {
        return 0; // one block: the folded query is used as it is
    }
    let (first, last) = if nearest > shape.max_distance {
        (shape.max_distance, shape.max_distance)
    } else {
        (nearest, (nearest + n - 1).min(shape.max_distance))
    };
    let reached = (last / block - first / block + 1) as u64;
    reached * config.n_head as u64 * 2 * config.d_model as u64
}

/// MACs of one row of log-probabilities.
pub fn output_macs(config: &Config) -> u64 {
    let d_model = config.d_model as u64;
    let mut total = config.n_clusters() as u64 * config.d_embed as u64;
    for cluster in 0..=config.n_clusters() {
        let width = config.emb_dim(config.emb_table_of_cluster(cluster)) as u64;
        let (start, end) = config.cluster_range(cluster);
        if config.has_out_proj() {
            total += d_model * width;
        }
        total += (end - start) as u64 * width;
    }
    total
}

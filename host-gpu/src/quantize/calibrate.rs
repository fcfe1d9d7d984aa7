//! Calibration: per-channel ranges of every linear layer's input, seen on calibration text, and
//! the SmoothQuant migration factors derived from them.

use txl_core::kernels;
use txl_core::weights::Matrix;
use txl_core::{Linear, Model, Probe, Session, SessionOptions};

/// Largest `|x[c]|` of each input channel, per consumer.
#[derive(Clone, Debug, Default)]
pub struct ChannelRanges {
    /// `[layer][Qkv, ONet, Ff1, Ff2]`.
    pub layers: Vec<[Vec<f32>; 4]>,
    /// Input of each output table (its cluster's projected hidden state), by table.
    pub out_tables: Vec<Vec<f32>>,
    /// Input of the cluster logits (the head's projected hidden state).
    pub cluster_head: Vec<f32>,
    /// Input of each embedding projection: the embedding rows looked up.
    pub emb_proj: Vec<Vec<f32>>,
}

fn widen(range: &mut Vec<f32>, x: &[f32]) {
    if range.len() < x.len() {
        range.resize(x.len(), 0.0);
    }
    for (r, v) in range.iter_mut().zip(x) {
        *r = r.max(v.abs());
    }
}

fn linear_index(linear: Linear) -> usize {
    match linear {
        Linear::Qkv => 0,
        Linear::ONet => 1,
        Linear::Ff1 => 2,
        Linear::Ff2 => 3,
    }
}

struct RangeProbe<'r> {
    ranges: &'r mut ChannelRanges,
    last_layer: usize,
    final_hidden: Vec<f32>,
    d_model: usize,
}

impl Probe for RangeProbe<'_> {
    fn linear_input(&mut self, layer: usize, linear: Linear, x: &[f32]) {
        widen(&mut self.ranges.layers[layer][linear_index(linear)], x);
    }

    fn layer_output(&mut self, layer: usize, position: usize, hidden: &[f32]) {
        if layer == self.last_layer {
            let at = position * self.d_model;
            if self.final_hidden.len() < at + self.d_model {
                self.final_hidden.resize(at + self.d_model, 0.0);
            }
            self.final_hidden[at..at + self.d_model].copy_from_slice(hidden);
        }
    }
}

/// Runs `model` over `tokens` and records the input range of every linear layer.
pub fn channel_ranges(
    model: &Model<'_>,
    options: SessionOptions,
    tokens: &[u32],
) -> Result<ChannelRanges, txl_core::Error> {
    let config = *model.config();
    let d_model = config.d_model as usize;
    let mut ranges = ChannelRanges {
        layers: vec![Default::default(); config.n_layer as usize],
        out_tables: vec![Vec::new(); config.n_emb_tables()],
        cluster_head: Vec::new(),
        emb_proj: vec![Vec::new(); config.n_emb_tables()],
    };
    let mut arena = txl_core::scoring::arena_for(model, &options)?;
    let mut session = Session::new(model, arena.bytes_mut(), options)?;
    let mut projected = vec![0.0f32; config.d_embed as usize];
    let mut row = vec![0.0f32; config.d_embed as usize];
    let mut scratch = vec![0i8; d_model.max(config.d_embed as usize)];
    for segment in tokens.chunks(options.tgt_len as usize) {
        let mut probe = RangeProbe {
            ranges: &mut ranges,
            last_layer: config.n_layer as usize - 1,
            final_hidden: Vec::new(),
            d_model,
        };
        session.forward_probed(segment, |_, _| {}, &mut probe)?;
        let final_hidden = probe.final_hidden;
        // The output layer's inputs: each cluster's projection of the final hidden state.
        for h in final_hidden.chunks_exact(d_model) {
            for cluster in 0..=config.n_clusters() {
                let table = config.emb_table_of_cluster(cluster);
                let input: &[f32] = if config.has_out_proj() {
                    let width = config.emb_dim(table) as usize;
                    kernels::vecmat(h, &model.out_proj(cluster), &mut projected[..width], &mut scratch);
                    &projected[..width]
                } else {
                    h
                };
                widen(&mut ranges.out_tables[table], input);
                if cluster == 0 {
                    widen(&mut ranges.cluster_head, input);
                }
            }
        }
        // The embedding projections' inputs: the rows looked up.
        if config.has_emb_proj() {
            for &token in segment {
                let (table, index) = config.embedding_row(token);
                let width = config.emb_dim(table) as usize;
                model.emb_layer(table).row_to_f32(index, &mut row[..width]);
                widen(&mut ranges.emb_proj[table], &row[..width]);
            }
        }
    }
    Ok(ranges)
}

/// SmoothQuant factors `s[c] = max|x_c|^alpha / max_r |W[r][c]|^(1 - alpha)` for a matrix and
/// the input range of its columns; `None` when nothing was observed.
pub fn smoothing_factors(
    weight: &Matrix<'_>,
    dense: &[f32],
    input_range: &[f32],
    alpha: f32,
) -> Option<Vec<f32>> {
    let cols = weight.cols;
    if input_range.len() != cols || input_range.iter().all(|&r| r == 0.0) {
        return None;
    }
    let mut weight_range = vec![0.0f32; cols];
    for row in dense.chunks_exact(cols) {
        for (m, w) in weight_range.iter_mut().zip(row) {
            *m = m.max(w.abs());
        }
    }
    Some(
        input_range
            .iter()
            .zip(&weight_range)
            .map(|(&x, &w)| {
                if x > 0.0 && w > 0.0 {
                    (x.powf(alpha) / w.powf(1.0 - alpha)).clamp(1e-4, 1e4)
                } else {
                    1.0
                }
            })
            .collect(),
    )
}

//! Calibration statistics on the CPU ([`ChannelStats`]): the CPU engine hands it what it computes
//! anyway (the rows entering each layer's `qkv`, `o_net`, `ff1` and `ff2` products, the tokens
//! embedded and the final hidden rows), and it widens each consumer's per-column range and, for
//! Gram matrices, adds the rows a batch at a time as one product. The inputs of the embedding
//! projections (the embedding rows looked up) and of the output layer (each cluster's
//! projection of the final hidden state) follow from those and the weights.

use txl_core::{Config, Linear};

use super::matmul::{matmul, Rhs};
use super::output::cluster_input;
use crate::gram::Gram;
use crate::real::Real;
use crate::statistics::{ChannelRanges, InputGrams, Statistics};
use crate::weights::HostWeights;

/// Input rows gathered before they are added to a Gram matrix as one product.
const BATCH: usize = 256;

/// `range[c] = max(range[c], |x[c]|)` over the `width`-long rows of `rows`; `range` grows to
/// `width` on first use, so a consumer that saw nothing keeps an empty range.
fn widen<T: Real>(range: &mut Vec<f32>, rows: &[T], width: usize) {
    if rows.is_empty() {
        return;
    }
    if range.len() < width {
        range.resize(width, 0.0);
    }
    for row in rows.chunks_exact(width) {
        for (r, v) in range.iter_mut().zip(row) {
            *r = r.max(v.to_f64().abs() as f32);
        }
    }
}

/// A Gram matrix being accumulated on the CPU: rows wait in a batch, then go in as one product.
#[derive(Clone, Debug)]
struct GramAccumulator {
    gram: Gram,
    /// `(n, BATCH)` the waiting rows, transposed.
    pending: Vec<f64>,
    waiting: usize,
}

impl GramAccumulator {
    fn new() -> GramAccumulator {
        GramAccumulator {
            gram: Gram::new(0),
            pending: Vec::new(),
            waiting: 0,
        }
    }

    /// Adds the row `x`; the matrix takes `x`'s width on first use.
    fn add<T: Real>(&mut self, x: &[T]) {
        if self.gram.rows == 0 && self.waiting == 0 && self.gram.n != x.len() {
            self.gram = Gram::new(x.len());
            self.pending = vec![0.0; x.len() * BATCH];
        }
        for (c, &v) in x.iter().enumerate() {
            self.pending[c * BATCH + self.waiting] = v.to_f64();
        }
        self.waiting += 1;
        if self.waiting == BATCH {
            self.flush();
        }
    }

    /// Adds each `width`-long row of `rows`.
    fn add_rows<T: Real>(&mut self, rows: &[T], width: usize) {
        for row in rows.chunks_exact(width.max(1)) {
            self.add(row);
        }
    }

    /// `sum += P Pᵀ` for the waiting rows `P (n, waiting)`.
    fn flush(&mut self) {
        let n = self.gram.n;
        if self.waiting > 0 {
            // P (n, waiting) @ Pᵀ (waiting, n) -> (n, n), accumulated
            matmul(
                n,
                n,
                self.waiting,
                &self.pending,
                BATCH,
                &self.pending,
                Rhs::Transposed { ld: BATCH },
                &mut self.gram.sum,
                n,
                true,
            );
            self.gram.rows += self.waiting;
            self.waiting = 0;
        }
    }

    /// The Gram matrix of every row added, exactly symmetric.
    fn finish(mut self) -> Gram {
        self.flush();
        self.gram.symmetrize();
        self.gram
    }
}

/// A [`GramAccumulator`] per consumer, laid out as [`InputGrams`].
#[derive(Debug)]
struct GramAccumulators {
    layers: Vec<[GramAccumulator; 4]>,
    out_tables: Vec<GramAccumulator>,
    cluster_head: GramAccumulator,
    emb_proj: Vec<GramAccumulator>,
}

impl GramAccumulators {
    /// Nothing seen yet, for a model of `config`.
    fn new(config: &Config) -> GramAccumulators {
        GramAccumulators {
            layers: (0..config.n_layer)
                .map(|_| std::array::from_fn(|_| GramAccumulator::new()))
                .collect(),
            out_tables: vec![GramAccumulator::new(); config.n_emb_tables()],
            cluster_head: GramAccumulator::new(),
            emb_proj: vec![GramAccumulator::new(); config.n_emb_tables()],
        }
    }

    /// The Gram matrices, each exactly symmetric.
    fn finish(self) -> InputGrams {
        let finish = |all: Vec<GramAccumulator>| all.into_iter().map(GramAccumulator::finish).collect();
        InputGrams {
            layers: self
                .layers
                .into_iter()
                .map(|layer| layer.map(GramAccumulator::finish))
                .collect(),
            out_tables: finish(self.out_tables),
            cluster_head: self.cluster_head.finish(),
            emb_proj: finish(self.emb_proj),
        }
    }
}

/// The statistics seen so far, fed by `CpuEngine::step_observed`.
#[derive(Debug)]
pub(crate) struct ChannelStats {
    ranges: ChannelRanges,
    grams: Option<GramAccumulators>,
    /// Per token: whether its embedding row has been seen already (for the ranges).
    embedded: Vec<bool>,
}

impl ChannelStats {
    /// Nothing seen yet, for a model of `config`; Gram matrices too when `grams`.
    pub(crate) fn new(config: &Config, grams: bool) -> Self {
        ChannelStats {
            ranges: ChannelRanges::empty(config),
            grams: grams.then(|| GramAccumulators::new(config)),
            embedded: vec![false; config.n_token as usize],
        }
    }

    /// What was seen.
    pub(crate) fn finish(self) -> Statistics {
        Statistics {
            ranges: self.ranges,
            grams: self.grams.map(GramAccumulators::finish),
        }
    }

    /// `rows` (`(n, width)`) enter `layer`'s linear layer `input`.
    pub(crate) fn linear_input<T: Real>(&mut self, layer: usize, linear: Linear, rows: &[T], width: usize) {
        widen(self.ranges.linear_input_mut(layer, linear), rows, width);
        if let Some(grams) = &mut self.grams {
            grams.layers[layer][linear as usize].add_rows(rows, width);
        }
    }

    /// `tokens` are embedded: with embedding projections, their rows are those projections'
    /// inputs (a range once per token, a Gram matrix row per occurrence).
    pub(crate) fn embedded<T: Real>(&mut self, w: &HostWeights<T>, tokens: &[u32]) {
        let c = &w.config;
        if !c.has_emb_proj() {
            return;
        }
        for &token in tokens {
            let (table, row) = c.embedding_row(token);
            let width = c.emb_dim(table) as usize;
            let emb_row = &w.emb_layers[table][row * width..(row + 1) * width];
            if let Some(grams) = &mut self.grams {
                grams.emb_proj[table].add(emb_row);
            }
            if !std::mem::replace(&mut self.embedded[token as usize], true) {
                widen(&mut self.ranges.emb_proj[table], emb_row, width);
            }
        }
    }

    /// `hidden` (`(rows, d_model)`) are the last layer's outputs: each cluster's projection
    /// of them (or they themselves) is its output table's input, and cluster 0's is also the
    /// input of the tail clusters' head logits.
    pub(crate) fn final_hidden<T: Real>(&mut self, w: &HostWeights<T>, hidden: &[T]) {
        let c = &w.config;
        let d_model = c.d_model as usize;
        let mut projected = Vec::new();
        for cluster in 0..=c.n_clusters() {
            let table = c.emb_table_of_cluster(cluster);
            let input = cluster_input(w, cluster, hidden, &mut projected);
            let width = if c.has_out_proj() {
                c.emb_dim(table) as usize
            } else {
                d_model
            };
            widen(&mut self.ranges.out_tables[table], input, width);
            if cluster == 0 {
                widen(&mut self.ranges.cluster_head, input, width);
            }
            if let Some(grams) = &mut self.grams {
                grams.out_tables[table].add_rows(input, width);
                // the cluster head's matrix exists only with tail clusters
                if cluster == 0 && c.n_clusters() > 0 {
                    grams.cluster_head.add_rows(input, width);
                }
            }
        }
    }
}

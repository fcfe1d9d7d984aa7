//! Activation statistics from the batched forward pass, what the quantizer calibrates with
//! ([`Statistics`]): for every matrix that multiplies activations (each layer's `qkv`, `o_net`,
//! `ff1` and `ff2`, each output table, the cluster head, each embedding projection), the largest
//! `|x|` of each input column ([`ChannelRanges`], for smoothing) and, when asked, the Gram
//! matrix `XᵀX` of its inputs in f64 ([`InputGrams`], for error-compensated rounding).
//!
//! The CPU engine hands a [`ChannelStats`] what it computes anyway: the rows entering each
//! layer's `qkv`, `o_net`, `ff1` and `ff2` products, the tokens embedded and the final hidden
//! rows. The inputs of the embedding projections (the embedding rows looked up) and of the
//! output layer (each cluster's projection of the final hidden state) follow from those and
//! the weights. The CUDA engine keeps both statistics on the device (`cuda/statistics.rs`) and
//! brings them back once, at the end.

use txl_core::{Config, Linear, SessionOptions};

use crate::cpu::output::cluster_input;
use crate::cpu::CpuEngine;
use crate::cuda::CudaEngine;
use crate::engine::{lockstep, Segment, Settings, Wanted};
use crate::error::Error;
use crate::quantize::calibrate::ChannelRanges;
use crate::quantize::inputs::{GramAccumulators, InputGrams};
use crate::real::Real;
use crate::reference::{check_tokens, Engine, Reference};
use crate::weights::HostWeights;

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

/// What the reference saw on calibration text ([`Reference::statistics`]).
#[derive(Clone, Debug)]
pub struct Statistics {
    /// The largest `|x|` of each input column, per consumer.
    pub ranges: ChannelRanges,
    /// `XᵀX` of each consumer's inputs, when asked for.
    pub grams: Option<InputGrams>,
}

/// An empty [`ChannelRanges`] for a model of `config`.
pub(crate) fn empty_ranges(config: &Config) -> ChannelRanges {
    ChannelRanges {
        layers: vec![Default::default(); config.n_layer as usize],
        out_tables: vec![Vec::new(); config.n_emb_tables()],
        cluster_head: Vec::new(),
        emb_proj: vec![Vec::new(); config.n_emb_tables()],
    }
}

/// The statistics seen so far, fed by [`CpuEngine::step_observed`].
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
            ranges: empty_ranges(config),
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

/// Calls `step` for each step of `streams` in lockstep (segment `k` of every stream at step
/// `k`), asking for no output: the engines skip the output layer.
fn each_step(
    streams: &[&[u32]],
    settings: Settings,
    mut step: impl FnMut(&[Segment<'_>], &Wanted<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    for (_, segments) in lockstep(streams, settings.tgt_len) {
        let rows = segments.iter().map(|s| s.tokens.len()).sum();
        let targets = vec![None; rows];
        let wanted = Wanted {
            targets: &targets,
            full_rows: &[],
        };
        step(&segments, &wanted)?;
    }
    Ok(())
}

/// Runs `streams` on the CPU `engine` with `stats` observing.
fn observe<T: Real>(
    engine: &mut CpuEngine<T>,
    streams: &[&[u32]],
    settings: Settings,
    mut stats: ChannelStats,
) -> Result<Statistics, Error> {
    engine.start(streams.len(), settings)?;
    each_step(streams, settings, |segments, wanted| {
        engine.step_observed(segments, wanted, Some(&mut stats)).map(drop)
    })?;
    Ok(stats.finish())
}

/// [`observe`] on the GPU: the statistics stay on the device until the last step.
fn observe_on_device(
    engine: &mut CudaEngine,
    streams: &[&[u32]],
    settings: Settings,
    grams: bool,
) -> Result<Statistics, Error> {
    engine.start(streams.len(), settings)?;
    let mut stats = engine.statistics(grams);
    each_step(streams, settings, |segments, wanted| {
        engine.step_observed(segments, wanted, Some(&mut stats)).map(drop)
    })?;
    engine.finish_statistics(stats)
}

impl Reference {
    /// What the quantizer calibrates with, seen while the model runs over `streams` as
    /// [`Reference::score_batch`] runs them (each stream with its own memory, in segments of
    /// `options.tgt_len`, the output layer skipped): per input channel of every linear layer
    /// (and of the embedding projections and the output layer) the largest `|x|`, and with
    /// `grams` the Gram matrix `XᵀX` of the inputs, accumulated in f64 on every backend (on
    /// CUDA by cuBLAS's double-precision products, on the device).
    pub fn statistics(
        &mut self,
        streams: &[&[u32]],
        options: &SessionOptions,
        grams: bool,
    ) -> Result<Statistics, Error> {
        let settings = Settings::new(options)?;
        check_tokens(streams, self.config().n_token)?;
        let config = *self.config();
        match &mut self.engine {
            Engine::Cpu64(e) => observe(e, streams, settings, ChannelStats::new(&config, grams)),
            Engine::Cpu32(e) => observe(e, streams, settings, ChannelStats::new(&config, grams)),
            Engine::Cuda(e) => observe_on_device(e, streams, settings, grams),
        }
    }

    /// The ranges of [`Reference::statistics`] alone.
    pub fn channel_ranges(
        &mut self,
        streams: &[&[u32]],
        options: &SessionOptions,
    ) -> Result<ChannelRanges, Error> {
        Ok(self.statistics(streams, options, false)?.ranges)
    }
}

//! Activation statistics from the batched forward pass: per input channel, the largest `|x|`
//! seen at the input of every linear layer, which is what the quantizer's smoothing needs
//! ([`ChannelRanges`]).
//!
//! The CPU engine hands a [`ChannelStats`] what it computes anyway: the rows entering each
//! layer's `qkv`, `o_net`, `ff1` and `ff2` products, the tokens embedded and the final hidden
//! rows. The inputs of the embedding projections (the embedding rows looked up) and of the
//! output layer (each cluster's projection of the final hidden state) follow from those and
//! the weights.

use txl_core::{Config, Linear, SessionOptions};

use crate::cpu::output::cluster_input;
use crate::cpu::CpuEngine;
use crate::engine::{lockstep, Settings, Wanted};
use crate::error::Error;
use crate::quantize::calibrate::ChannelRanges;
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

/// The ranges seen so far, fed by [`CpuEngine::step_observed`].
#[derive(Debug)]
pub(crate) struct ChannelStats {
    ranges: ChannelRanges,
    /// Per token: whether its embedding row has been seen already.
    embedded: Vec<bool>,
}

impl ChannelStats {
    /// Nothing seen yet, for a model of `config`.
    pub(crate) fn new(config: &Config) -> Self {
        ChannelStats {
            ranges: ChannelRanges {
                layers: vec![Default::default(); config.n_layer as usize],
                out_tables: vec![Vec::new(); config.n_emb_tables()],
                cluster_head: Vec::new(),
                emb_proj: vec![Vec::new(); config.n_emb_tables()],
            },
            embedded: vec![false; config.n_token as usize],
        }
    }

    /// The ranges.
    pub(crate) fn into_ranges(self) -> ChannelRanges {
        self.ranges
    }

    /// `rows` (`(n, width)`) enter `layer`'s linear layer `input`.
    pub(crate) fn linear_input<T: Real>(&mut self, layer: usize, linear: Linear, rows: &[T], width: usize) {
        widen(self.ranges.linear_input_mut(layer, linear), rows, width);
    }

    /// `tokens` are embedded: with embedding projections, their rows are those projections'
    /// inputs.
    pub(crate) fn embedded<T: Real>(&mut self, w: &HostWeights<T>, tokens: &[u32]) {
        let c = &w.config;
        if !c.has_emb_proj() {
            return;
        }
        for &token in tokens {
            if std::mem::replace(&mut self.embedded[token as usize], true) {
                continue;
            }
            let (table, row) = c.embedding_row(token);
            let width = c.emb_dim(table) as usize;
            let emb_row = &w.emb_layers[table][row * width..(row + 1) * width];
            widen(&mut self.ranges.emb_proj[table], emb_row, width);
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
        }
    }
}

/// Runs `streams` on `engine` in lockstep, segment `k` of every stream at step `k`, with
/// `stats` observing and the output layer skipped.
fn observe<T: Real>(
    engine: &mut CpuEngine<T>,
    streams: &[&[u32]],
    settings: Settings,
    stats: &mut ChannelStats,
) -> Result<(), Error> {
    engine.start(streams.len(), settings)?;
    for (_, segments) in lockstep(streams, settings.tgt_len) {
        let rows = segments.iter().map(|s| s.tokens.len()).sum();
        let targets = vec![None; rows];
        let wanted = Wanted {
            targets: &targets,
            full_rows: &[],
        };
        engine.step_observed(&segments, &wanted, Some(stats))?;
    }
    Ok(())
}

impl Reference {
    /// Per input channel, the largest `|x|` at the input of every linear layer (and of the
    /// embedding projections and the output layer) while the model runs over `streams` as
    /// [`Reference::score_batch`] runs them: each stream with its own memory, in segments of
    /// `options.tgt_len`.
    ///
    /// Only the CPU backends ([`Backend::Cpu32`](crate::Backend::Cpu32),
    /// [`Backend::Cpu64`](crate::Backend::Cpu64)) collect statistics; on
    /// [`Backend::Cuda`](crate::Backend::Cuda) this is an [`Error::BadOptions`].
    pub fn channel_ranges(
        &mut self,
        streams: &[&[u32]],
        options: &SessionOptions,
    ) -> Result<ChannelRanges, Error> {
        let settings = Settings::new(options)?;
        check_tokens(streams, self.config().n_token)?;
        let mut stats = ChannelStats::new(self.config());
        match &mut self.engine {
            Engine::Cpu64(e) => observe(e, streams, settings, &mut stats)?,
            Engine::Cpu32(e) => observe(e, streams, settings, &mut stats)?,
            Engine::Cuda(_) => return Err(Error::BadOptions(
                "activation statistics are collected on the CPU backends (cpu32, cpu64) for now, not on cuda"
                    .into(),
            )),
        }
        Ok(stats.into_ranges())
    }
}

//! What the reference sees on calibration text, the quantizer's input ([`Statistics`]): for
//! every matrix that multiplies activations (each layer's `qkv`, `o_net`, `ff1` and `ff2`, each
//! output table, the cluster head, each embedding projection), the largest `|x|` of each input
//! column ([`ChannelRanges`], for smoothing) and, when asked, the Gram matrix `XᵀX` of its
//! inputs in f64 ([`InputGrams`], for error-compensated rounding).
//!
//! The inputs are collected consumer by consumer while the forward pass runs: every layer's
//! `qkv`, `o_net`, `ff1` and `ff2` inputs, the output tables' inputs (the last layer's output,
//! projected per cluster when the model has output projections), the cluster head's (cluster
//! 0's), and the embedding projections' (the embedding rows looked up, once per occurrence for
//! a Gram matrix, once per token for a range). The CPU engine adds them as it goes
//! (`cpu/statistics.rs`); the CUDA engine keeps them on the device (`cuda/statistics.rs`) and
//! brings them back once, at the end. [`Reference::statistics`](crate::Reference::statistics)
//! runs them.

use txl_core::tensors::{LayerTensor, TensorName};
use txl_core::{Config, Linear};

use crate::gram::Gram;

/// What the reference saw on calibration text
/// ([`Reference::statistics`](crate::Reference::statistics)).
#[derive(Clone, Debug)]
pub struct Statistics {
    /// The largest `|x|` of each input column, per consumer.
    pub ranges: ChannelRanges,
    /// `XᵀX` of each consumer's inputs, when asked for.
    pub grams: Option<InputGrams>,
}

/// Largest `|x[c]|` of each input channel, per consumer.
#[derive(Clone, Debug, Default)]
pub struct ChannelRanges {
    /// `[layer][Qkv, ONet, Ff1, Ff2]`; see [`ChannelRanges::linear_input`].
    pub layers: Vec<[Vec<f32>; 4]>,
    /// Input of each output table (its cluster's projected hidden state), by table.
    pub out_tables: Vec<Vec<f32>>,
    /// Input of the cluster logits (the head's projected hidden state).
    pub cluster_head: Vec<f32>,
    /// Input of each embedding projection: the embedding rows looked up.
    pub emb_proj: Vec<Vec<f32>>,
}

impl ChannelRanges {
    /// Nothing seen (every range empty), for a model of `config`.
    pub(crate) fn empty(config: &Config) -> ChannelRanges {
        ChannelRanges {
            layers: vec![Default::default(); config.n_layer as usize],
            out_tables: vec![Vec::new(); config.n_emb_tables()],
            cluster_head: Vec::new(),
            emb_proj: vec![Vec::new(); config.n_emb_tables()],
        }
    }

    /// The range of the input of `layer`'s linear layer `linear`.
    pub fn linear_input(&self, layer: usize, linear: Linear) -> &[f32] {
        &self.layers[layer][linear as usize]
    }

    /// That range, to widen.
    pub(crate) fn linear_input_mut(&mut self, layer: usize, linear: Linear) -> &mut Vec<f32> {
        &mut self.layers[layer][linear as usize]
    }
}

/// `XᵀX` of each consumer's inputs.
#[derive(Clone, Debug)]
pub struct InputGrams {
    /// `[layer][Qkv, ONet, Ff1, Ff2]`.
    pub layers: Vec<[Gram; 4]>,
    /// Input of each output table, by table.
    pub out_tables: Vec<Gram>,
    /// Input of the cluster logits (empty without tail clusters).
    pub cluster_head: Gram,
    /// Input of each embedding projection.
    pub emb_proj: Vec<Gram>,
}

impl InputGrams {
    /// Every matrix empty (nothing seen), for a model of `config`.
    pub fn empty(config: &Config) -> InputGrams {
        InputGrams {
            layers: (0..config.n_layer)
                .map(|_| std::array::from_fn(|_| Gram::new(0)))
                .collect(),
            out_tables: vec![Gram::new(0); config.n_emb_tables()],
            cluster_head: Gram::new(0),
            emb_proj: vec![Gram::new(0); config.n_emb_tables()],
        }
    }

    /// The Gram matrix of the inputs `name` multiplies as a `(rows, cols)` matrix times a
    /// column, if it is used that way: the layers' products, the output tables (and a tied
    /// embedding table, which is one), the cluster head and the embedding projections. The
    /// position projection `r_net` (its inputs are fixed sinusoids) and the output projections
    /// (applied transposed) have none.
    pub fn of(&self, config: &Config, name: TensorName) -> Option<&Gram> {
        let gram = match name {
            TensorName::Layer(l, LayerTensor::QkvWeight) => &self.layers[l as usize][Linear::Qkv as usize],
            TensorName::Layer(l, LayerTensor::OWeight) => &self.layers[l as usize][Linear::ONet as usize],
            TensorName::Layer(l, LayerTensor::Ff1Weight) => &self.layers[l as usize][Linear::Ff1 as usize],
            TensorName::Layer(l, LayerTensor::Ff2Weight) => &self.layers[l as usize][Linear::Ff2 as usize],
            TensorName::EmbLayer(t) if config.tie_weight => &self.out_tables[t as usize],
            TensorName::OutWeight(t) => &self.out_tables[t as usize],
            TensorName::ClusterWeight => &self.cluster_head,
            TensorName::EmbProj(t) => &self.emb_proj[t as usize],
            _ => return None,
        };
        (!gram.is_empty()).then_some(gram)
    }
}

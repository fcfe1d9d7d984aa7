//! The canonical list of a model's tensors: their names, shapes and order in the image.
//!
//! Names are the original code's `state_dict` keys (Hugging Face's without the `transformer.`
//! prefix), so `layers.3.dec_attn.qkv_net.weight` means the same thing everywhere. Tied tensors
//! are stored once: output weights tied to the embedding (`tie_weight`) and output projections
//! tied to the embedding projections (`tie_projs`) are absent from the image; a shared
//! `r_w_bias` / `r_r_bias` (`untie_r = false`) is stored once at the top level.
//!
//! Order: the embedding, the shared biases, then one block per layer, then the output layer.

use core::fmt;

use crate::config::Config;

/// A tensor of one decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerTensor {
    /// `(n_head, d_head)` content bias `u` (only when `untie_r`).
    RWBias,
    /// `(n_head, d_head)` position bias `v` (only when `untie_r`).
    RRBias,
    /// `(3 * n_head * d_head, d_model)`: queries, keys and values stacked.
    QkvWeight,
    /// `(n_head * d_head, d_model)`: projects the sinusoid position embedding to position keys.
    RWeight,
    /// `(d_model, n_head * d_head)`: attention output projection.
    OWeight,
    /// `(d_model)` attention LayerNorm gain.
    AttnNormWeight,
    /// `(d_model)` attention LayerNorm bias.
    AttnNormBias,
    /// `(d_inner, d_model)` first feed-forward layer.
    Ff1Weight,
    /// `(d_inner)`.
    Ff1Bias,
    /// `(d_model, d_inner)` second feed-forward layer.
    Ff2Weight,
    /// `(d_model)`.
    Ff2Bias,
    /// `(d_model)` feed-forward LayerNorm gain.
    FfNormWeight,
    /// `(d_model)` feed-forward LayerNorm bias.
    FfNormBias,
}

impl LayerTensor {
    /// Every layer tensor in image order; the first two only when `untie_r`.
    pub const ALL: [LayerTensor; 13] = [
        LayerTensor::RWBias,
        LayerTensor::RRBias,
        LayerTensor::QkvWeight,
        LayerTensor::RWeight,
        LayerTensor::OWeight,
        LayerTensor::AttnNormWeight,
        LayerTensor::AttnNormBias,
        LayerTensor::Ff1Weight,
        LayerTensor::Ff1Bias,
        LayerTensor::Ff2Weight,
        LayerTensor::Ff2Bias,
        LayerTensor::FfNormWeight,
        LayerTensor::FfNormBias,
    ];

    fn suffix(self) -> &'static str {
        match self {
            LayerTensor::RWBias => ".dec_attn.r_w_bias",
            LayerTensor::RRBias => ".dec_attn.r_r_bias",
            LayerTensor::QkvWeight => ".dec_attn.qkv_net.weight",
            LayerTensor::RWeight => ".dec_attn.r_net.weight",
            LayerTensor::OWeight => ".dec_attn.o_net.weight",
            LayerTensor::AttnNormWeight => ".dec_attn.layer_norm.weight",
            LayerTensor::AttnNormBias => ".dec_attn.layer_norm.bias",
            LayerTensor::Ff1Weight => ".pos_ff.CoreNet.0.weight",
            LayerTensor::Ff1Bias => ".pos_ff.CoreNet.0.bias",
            LayerTensor::Ff2Weight => ".pos_ff.CoreNet.3.weight",
            LayerTensor::Ff2Bias => ".pos_ff.CoreNet.3.bias",
            LayerTensor::FfNormWeight => ".pos_ff.layer_norm.weight",
            LayerTensor::FfNormBias => ".pos_ff.layer_norm.bias",
        }
    }
}

/// The name of one stored tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorName {
    /// `(tokens of table i, d_embed / div_val^i)` embedding table.
    EmbLayer(u8),
    /// `(d_model, d_embed / div_val^i)` embedding projection.
    EmbProj(u8),
    /// `(n_head, d_head)` content bias shared by all layers (`untie_r = false`).
    SharedRWBias,
    /// `(n_head, d_head)` position bias shared by all layers (`untie_r = false`).
    SharedRRBias,
    /// A decoder layer's tensor.
    Layer(u32, LayerTensor),
    /// `(tokens of layer i, d_embed / div_val^i)` output weight (absent when `tie_weight`).
    OutWeight(u8),
    /// `(tokens of layer i)` output bias.
    OutBias(u8),
    /// `(d_model, d_embed / div_val^i)` output projection of cluster i (absent when tied).
    OutProj(u8),
    /// `(n_clusters, d_embed)` head logits of the tail clusters.
    ClusterWeight,
    /// `(n_clusters)`.
    ClusterBias,
}

impl TensorName {
    /// Whether this is a weight matrix, which may be stored in f16, int8 or int4 (biases, gains
    /// and `r_w_bias` / `r_r_bias` are f32 or f16).
    pub fn is_matrix(self) -> bool {
        matches!(
            self,
            TensorName::EmbLayer(_)
                | TensorName::EmbProj(_)
                | TensorName::OutWeight(_)
                | TensorName::OutProj(_)
                | TensorName::ClusterWeight
                | TensorName::Layer(
                    _,
                    LayerTensor::QkvWeight
                        | LayerTensor::RWeight
                        | LayerTensor::OWeight
                        | LayerTensor::Ff1Weight
                        | LayerTensor::Ff2Weight
                )
        )
    }
}

impl TensorName {
    /// The name in three pieces, without `core::fmt` (which the image check would otherwise
    /// link into every firmware): a prefix, the layer, table or cluster number if the name has
    /// one, and the rest. `layers.3.dec_attn.qkv_net.weight` is `("layers.", Some(3),
    /// ".dec_attn.qkv_net.weight")`.
    pub fn pieces(self) -> (&'static str, Option<u32>, &'static str) {
        match self {
            TensorName::EmbLayer(i) => ("word_emb.emb_layers.", Some(i.into()), ".weight"),
            TensorName::EmbProj(i) => ("word_emb.emb_projs.", Some(i.into()), ""),
            TensorName::SharedRWBias => ("r_w_bias", None, ""),
            TensorName::SharedRRBias => ("r_r_bias", None, ""),
            TensorName::Layer(l, t) => ("layers.", Some(l), t.suffix()),
            TensorName::OutWeight(i) => ("crit.out_layers.", Some(i.into()), ".weight"),
            TensorName::OutBias(i) => ("crit.out_layers.", Some(i.into()), ".bias"),
            TensorName::OutProj(i) => ("crit.out_projs.", Some(i.into()), ""),
            TensorName::ClusterWeight => ("crit.cluster_weight", None, ""),
            TensorName::ClusterBias => ("crit.cluster_bias", None, ""),
        }
    }
}

impl fmt::Display for TensorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (prefix, number, rest) = self.pieces();
        f.write_str(prefix)?;
        if let Some(number) = number {
            write!(f, "{number}")?;
        }
        f.write_str(rest)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for TensorName {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}

/// A tensor's shape: a vector `[n]` or a row-major matrix `[rows, cols]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A vector of `n` elements.
    Vector(u32),
    /// A `rows x cols` matrix, row-major.
    Matrix(u32, u32),
}

impl Shape {
    /// Number of elements.
    pub fn len(self) -> usize {
        match self {
            Shape::Vector(n) => n as usize,
            Shape::Matrix(r, c) => r as usize * c as usize,
        }
    }

    /// Whether the shape has no elements.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// `(rows, cols)`: a vector is one row.
    pub fn rows_cols(self) -> (usize, usize) {
        match self {
            Shape::Vector(n) => (1, n as usize),
            Shape::Matrix(r, c) => (r as usize, c as usize),
        }
    }

    /// The dimensions as a list (1 or 2 entries).
    pub fn dims(self) -> ([u32; 2], usize) {
        match self {
            Shape::Vector(n) => ([n, 0], 1),
            Shape::Matrix(r, c) => ([r, c], 2),
        }
    }
}

/// How many tensors of each kind a config stores, and where each sits in the image's
/// directory. Computed from the config alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorLayout {
    /// Tensors before the first layer block.
    pub n_global: usize,
    /// Tensors in one layer block.
    pub per_layer: usize,
    /// Tensors after the last layer block.
    pub n_output: usize,
    n_layer: usize,
}

impl TensorLayout {
    /// The layout of `config`'s tensors.
    pub fn new(config: &Config) -> Self {
        let tables = config.n_emb_tables();
        let projs = if config.has_emb_proj() { tables } else { 0 };
        let shared_biases = if config.untie_r { 0 } else { 2 };
        let per_layer = if config.untie_r { 13 } else { 11 };
        let out_weights = if config.tie_weight { 0 } else { tables };
        let out_projs = (0..=config.n_clusters())
            .filter(|&i| config.has_out_proj() && !config.out_proj_tied(i))
            .count();
        let clusters = if config.n_clusters() > 0 { 2 } else { 0 };
        TensorLayout {
            n_global: tables + projs + shared_biases,
            per_layer,
            n_output: out_weights + tables + out_projs + clusters,
            n_layer: config.n_layer as usize,
        }
    }

    /// Total number of tensors.
    pub fn count(&self) -> usize {
        self.n_global + self.per_layer * self.n_layer + self.n_output
    }

    /// Directory index of layer `layer`'s tensor `tensor` (whose presence the caller knows).
    pub fn layer_index(&self, layer: usize, tensor: LayerTensor) -> usize {
        // `ALL` lists the variants in declaration order, so the discriminant is the position.
        let skipped = LayerTensor::ALL.len() - self.per_layer;
        self.n_global + layer * self.per_layer + tensor as usize - skipped
    }
}

/// Calls `visit(name, shape)` for every tensor `config` stores, in image order.
pub fn for_each_tensor(config: &Config, mut visit: impl FnMut(TensorName, Shape)) {
    let d_model = config.d_model;
    let qkv = config.qkv_width();
    let tables = config.n_emb_tables();
    for i in 0..tables {
        let tokens = config.out_layer_tokens(i);
        visit(
            TensorName::EmbLayer(i as u8),
            Shape::Matrix(tokens, config.emb_dim(i)),
        );
    }
    if config.has_emb_proj() {
        for i in 0..tables {
            visit(
                TensorName::EmbProj(i as u8),
                Shape::Matrix(d_model, config.emb_dim(i)),
            );
        }
    }
    let bias_shape = Shape::Matrix(config.n_head, config.d_head);
    if !config.untie_r {
        visit(TensorName::SharedRWBias, bias_shape);
        visit(TensorName::SharedRRBias, bias_shape);
    }
    for layer in 0..config.n_layer {
        for tensor in LayerTensor::ALL {
            let shape = match tensor {
                LayerTensor::RWBias | LayerTensor::RRBias if !config.untie_r => continue,
                LayerTensor::RWBias | LayerTensor::RRBias => bias_shape,
                LayerTensor::QkvWeight => Shape::Matrix(3 * qkv, d_model),
                LayerTensor::RWeight => Shape::Matrix(qkv, d_model),
                LayerTensor::OWeight => Shape::Matrix(d_model, qkv),
                LayerTensor::Ff1Weight => Shape::Matrix(config.d_inner, d_model),
                LayerTensor::Ff1Bias => Shape::Vector(config.d_inner),
                LayerTensor::Ff2Weight => Shape::Matrix(d_model, config.d_inner),
                LayerTensor::AttnNormWeight
                | LayerTensor::AttnNormBias
                | LayerTensor::Ff2Bias
                | LayerTensor::FfNormWeight
                | LayerTensor::FfNormBias => Shape::Vector(d_model),
            };
            visit(TensorName::Layer(layer, tensor), shape);
        }
    }
    for i in 0..tables {
        let tokens = config.out_layer_tokens(i);
        if !config.tie_weight {
            visit(
                TensorName::OutWeight(i as u8),
                Shape::Matrix(tokens, config.emb_dim(i)),
            );
        }
        visit(TensorName::OutBias(i as u8), Shape::Vector(tokens));
    }
    for cluster in 0..=config.n_clusters() {
        if config.has_out_proj() && !config.out_proj_tied(cluster) {
            let width = config.emb_dim(config.emb_table_of_cluster(cluster));
            visit(TensorName::OutProj(cluster as u8), Shape::Matrix(d_model, width));
        }
    }
    if config.n_clusters() > 0 {
        let n = config.n_clusters() as u32;
        visit(TensorName::ClusterWeight, Shape::Matrix(n, config.d_embed));
        visit(TensorName::ClusterBias, Shape::Vector(n));
    }
}

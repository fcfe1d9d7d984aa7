//! The model's hyper-parameters, as stored in the image header.
//!
//! Field names follow the original Transformer-XL code (`n_token`, `d_model`, `div_val`, ...)
//! so a reader can hold this file next to a checkpoint's `config.json`.

use core::fmt;

/// Most cutoffs an adaptive embedding / softmax may have (the WT103 model has 3).
pub const MAX_CUTOFFS: usize = 8;

/// Most embedding tables / output clusters: the head plus one per cutoff.
pub const MAX_CLUSTERS: usize = MAX_CUTOFFS + 1;

/// Transformer-XL hyper-parameters (the `attn_type = 0` model) plus the default evaluation
/// settings (`tgt_len`, `mem_len`, `clamp_len`, `same_length`), which a session may override.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Vocabulary size.
    pub n_token: u32,
    /// Width of the residual stream.
    pub d_model: u32,
    /// Width of the (first) embedding table; projected to `d_model` when they differ.
    pub d_embed: u32,
    /// Number of attention heads.
    pub n_head: u32,
    /// Width of one head.
    pub d_head: u32,
    /// Width of the position-wise feed-forward layer.
    pub d_inner: u32,
    /// Number of decoder layers.
    pub n_layer: u32,
    /// Adaptive cutoffs, strictly increasing, each in `1..n_token`; `cutoffs[..n_cutoffs]`.
    pub cutoffs: [u32; MAX_CUTOFFS],
    /// How many entries of `cutoffs` are used (0: a plain embedding and full softmax).
    pub n_cutoffs: u32,
    /// Embedding width divisor per cluster: cluster `i` has width `d_embed / div_val^i`.
    pub div_val: u32,
    /// Output weights are the embedding tables (`tie_weight` / `tie_word_embeddings`).
    pub tie_weight: bool,
    /// Bit `i`: output projection `i` is the embedding projection (`tie_projs[i]`).
    pub tie_projs: u32,
    /// LayerNorm before each sub-layer instead of after the residual.
    pub pre_lnorm: bool,
    /// Each layer has its own `r_w_bias` / `r_r_bias` (otherwise one pair is shared).
    pub untie_r: bool,
    /// LayerNorm epsilon.
    pub layer_norm_epsilon: f32,
    /// Default segment length.
    pub tgt_len: u32,
    /// Default number of remembered positions.
    pub mem_len: u32,
    /// Default largest relative distance; 0 means no clamping.
    pub clamp_len: u32,
    /// Default for `same_length`: every query attends to the same number of keys.
    pub same_length: bool,
}

impl Config {
    /// Checks that the hyper-parameters describe a model this crate can run.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let dims = [
            self.n_token,
            self.d_model,
            self.d_embed,
            self.n_head,
            self.d_head,
            self.d_inner,
            self.n_layer,
            self.div_val,
            self.tgt_len,
        ];
        if dims.contains(&0) {
            return Err(ConfigError::ZeroDimension);
        }
        if !self.d_model.is_multiple_of(2) {
            return Err(ConfigError::OddModelWidth);
        }
        if self.n_cutoffs as usize > MAX_CUTOFFS {
            return Err(ConfigError::TooManyCutoffs);
        }
        let mut previous = 0;
        for &cutoff in self.cutoffs() {
            if cutoff <= previous || cutoff >= self.n_token {
                return Err(ConfigError::BadCutoffs);
            }
            previous = cutoff;
        }
        if self.cutoffs[self.n_cutoffs as usize..].iter().any(|&c| c != 0) {
            return Err(ConfigError::BadCutoffs);
        }
        if self.tie_projs >> (self.n_cutoffs + 1) != 0 {
            return Err(ConfigError::BadTieProjs);
        }
        for table in 0..self.n_emb_tables() {
            if self.emb_dim(table) == 0 {
                return Err(ConfigError::EmbeddingTooNarrow);
            }
        }
        if !(self.layer_norm_epsilon.is_finite() && self.layer_norm_epsilon > 0.0) {
            return Err(ConfigError::BadLayerNormEpsilon);
        }
        // Sizes must stay addressable: each tensor's bytes fit the image's u32 fields.
        let limit = 1u64 << 24;
        let widths = [
            self.n_token,
            self.d_model,
            self.d_embed,
            self.n_head,
            self.d_head,
            self.d_inner,
        ];
        let qkv = self.n_head as u64 * self.d_head as u64;
        if widths.iter().any(|&w| w as u64 > limit) || qkv > limit || self.n_layer > 1 << 16 {
            return Err(ConfigError::TooLarge);
        }
        let largest_tensor = [
            3 * qkv * self.d_model as u64,
            self.d_inner as u64 * self.d_model as u64,
            self.n_token as u64 * self.d_embed.max(self.d_model) as u64,
        ];
        if largest_tensor.iter().any(|&n| n * 4 > u32::MAX as u64) {
            return Err(ConfigError::TooLarge);
        }
        Ok(())
    }

    /// The used cutoffs.
    pub fn cutoffs(&self) -> &[u32] {
        &self.cutoffs[..(self.n_cutoffs as usize).min(MAX_CUTOFFS)]
    }

    /// Number of tail clusters of the adaptive softmax (0 for a full softmax).
    pub fn n_clusters(&self) -> usize {
        self.n_cutoffs as usize
    }

    /// Token range `[start, end)` of cluster `i` (`0` is the head's shortlist).
    pub fn cluster_range(&self, cluster: usize) -> (u32, u32) {
        let cutoffs = self.cutoffs();
        let start = if cluster == 0 { 0 } else { cutoffs[cluster - 1] };
        let end = cutoffs.get(cluster).copied().unwrap_or(self.n_token);
        (start, end)
    }

    /// Cluster that holds `token` (`token < n_token`).
    pub fn cluster_of(&self, token: u32) -> usize {
        self.cutoffs().iter().take_while(|&&c| c <= token).count()
    }

    /// Number of embedding tables (and output layers): one when `div_val == 1`, else one per cluster.
    pub fn n_emb_tables(&self) -> usize {
        if self.div_val == 1 {
            1
        } else {
            self.n_clusters() + 1
        }
    }

    /// Width of embedding table `i`: `d_embed / div_val^i`.
    pub fn emb_dim(&self, table: usize) -> u32 {
        let mut width = self.d_embed;
        for _ in 0..table {
            width /= self.div_val;
        }
        width
    }

    /// Widest embedding table.
    pub fn max_emb_dim(&self) -> u32 {
        self.d_embed
    }

    /// Embedding table that holds cluster `i`'s tokens, and the token offset inside it.
    pub fn emb_table_of_cluster(&self, cluster: usize) -> usize {
        if self.div_val == 1 {
            0
        } else {
            cluster
        }
    }

    /// Where `token`'s embedding is: `(table, row)` of `emb_layers[table]`. With `div_val` 1
    /// every token is in table 0 at its own id; otherwise each cluster has its own table,
    /// indexed from the cluster's first token.
    pub fn embedding_row(&self, token: u32) -> (usize, usize) {
        let cluster = self.cluster_of(token);
        let first_token = if self.div_val == 1 {
            0
        } else {
            self.cluster_range(cluster).0
        };
        (self.emb_table_of_cluster(cluster), (token - first_token) as usize)
    }

    /// Whether embedding table `i` is followed by a projection to `d_model`.
    pub fn has_emb_proj(&self) -> bool {
        self.div_val != 1 || self.d_embed != self.d_model
    }

    /// Whether output cluster `i`'s logits are computed from a projection of the hidden state.
    pub fn has_out_proj(&self) -> bool {
        self.has_emb_proj()
    }

    /// Whether output projection `i` is the embedding projection (`tie_projs[i]`).
    pub fn out_proj_tied(&self, cluster: usize) -> bool {
        self.has_out_proj() && (self.tie_projs >> cluster) & 1 == 1
    }

    /// `n_head * d_head`: width of the queries, keys, values and position keys.
    pub fn qkv_width(&self) -> u32 {
        self.n_head * self.d_head
    }

    /// Output layer `i`'s token count: the whole vocabulary when `div_val == 1`.
    pub fn out_layer_tokens(&self, table: usize) -> u32 {
        if self.div_val == 1 {
            self.n_token
        } else {
            let (start, end) = self.cluster_range(table);
            end - start
        }
    }
}

/// A config field that makes no sense, or that this crate cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConfigError {
    /// A size (n_token, d_model, n_head, ..., div_val, tgt_len) is zero.
    ZeroDimension,
    /// `d_model` must be even (the sinusoid embedding is `[sin | cos]`).
    OddModelWidth,
    /// More cutoffs than [`MAX_CUTOFFS`].
    TooManyCutoffs,
    /// Cutoffs must be strictly increasing and inside `1..n_token`.
    BadCutoffs,
    /// `tie_projs` names a cluster that does not exist.
    BadTieProjs,
    /// `d_embed / div_val^i` is zero for some cluster.
    EmbeddingTooNarrow,
    /// The LayerNorm epsilon must be positive and finite.
    BadLayerNormEpsilon,
    /// The sizes overflow what this crate can address.
    TooLarge,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::ZeroDimension => "a model dimension is zero",
            ConfigError::OddModelWidth => "d_model must be even",
            ConfigError::TooManyCutoffs => "too many adaptive cutoffs (at most 8)",
            ConfigError::BadCutoffs => "cutoffs must be strictly increasing and below n_token",
            ConfigError::BadTieProjs => "tie_projs names a cluster that does not exist",
            ConfigError::EmbeddingTooNarrow => "d_embed / div_val^i is zero for some cluster",
            ConfigError::BadLayerNormEpsilon => "layer_norm_epsilon must be positive and finite",
            ConfigError::TooLarge => "the model's sizes overflow the addressable range",
        })
    }
}

impl core::error::Error for ConfigError {}

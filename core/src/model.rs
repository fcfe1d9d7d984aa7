//! A validated image bound to typed weight views: ties resolved, one lookup per tensor.

use crate::config::{Config, MAX_CLUSTERS};
use crate::error::Error;
use crate::image::Image;
use crate::tensors::{for_each_tensor, LayerTensor, TensorName};
use crate::weights::{Matrix, Vector};

/// One decoder layer's weights, borrowed from the image.
#[derive(Clone, Copy, Debug)]
pub struct LayerWeights<'a> {
    /// `(n_head, d_head)` content bias `u`.
    pub r_w_bias: Vector<'a>,
    /// `(n_head, d_head)` position bias `v`.
    pub r_r_bias: Vector<'a>,
    /// `(3 * n_head * d_head, d_model)`: queries, keys, values.
    pub qkv: Matrix<'a>,
    /// `(n_head * d_head, d_model)`: position embedding to position keys.
    pub r_net: Matrix<'a>,
    /// `(d_model, n_head * d_head)`: attention output.
    pub o_net: Matrix<'a>,
    /// `(d_model)` attention LayerNorm gain.
    pub attn_norm_weight: Vector<'a>,
    /// `(d_model)` attention LayerNorm bias.
    pub attn_norm_bias: Vector<'a>,
    /// `(d_inner, d_model)`.
    pub ff1_weight: Matrix<'a>,
    /// `(d_inner)`.
    pub ff1_bias: Vector<'a>,
    /// `(d_model, d_inner)`.
    pub ff2_weight: Matrix<'a>,
    /// `(d_model)`.
    pub ff2_bias: Vector<'a>,
    /// `(d_model)` feed-forward LayerNorm gain.
    pub ff_norm_weight: Vector<'a>,
    /// `(d_model)` feed-forward LayerNorm bias.
    pub ff_norm_bias: Vector<'a>,
}

/// Directory indices of the tensors outside the layer blocks, with ties resolved.
#[derive(Clone, Copy, Debug, Default)]
struct GlobalIndices {
    emb_layer: [usize; MAX_CLUSTERS],
    emb_proj: [usize; MAX_CLUSTERS],
    shared_r_w_bias: usize,
    shared_r_r_bias: usize,
    out_weight: [usize; MAX_CLUSTERS],
    out_bias: [usize; MAX_CLUSTERS],
    out_proj: [usize; MAX_CLUSTERS],
    cluster_weight: usize,
    cluster_bias: usize,
}

/// A parsed model: the image plus where each weight is.
#[derive(Clone, Copy, Debug)]
pub struct Model<'a> {
    image: Image<'a>,
    globals: GlobalIndices,
    fast_f32: bool,
}

impl<'a> Model<'a> {
    /// Validates `bytes` (see [`Image::parse`]) and resolves the tensors. `bytes` must start
    /// on a 16-byte boundary.
    pub fn parse(bytes: &'a [u8]) -> Result<Model<'a>, Error> {
        let image = Image::parse(bytes)?;
        let config = *image.config();
        let mut g = GlobalIndices::default();
        let mut index = 0;
        for_each_tensor(&config, |name, _| {
            match name {
                TensorName::EmbLayer(i) => g.emb_layer[i as usize] = index,
                TensorName::EmbProj(i) => g.emb_proj[i as usize] = index,
                TensorName::SharedRWBias => g.shared_r_w_bias = index,
                TensorName::SharedRRBias => g.shared_r_r_bias = index,
                TensorName::OutWeight(i) => g.out_weight[i as usize] = index,
                TensorName::OutBias(i) => g.out_bias[i as usize] = index,
                TensorName::OutProj(i) => g.out_proj[i as usize] = index,
                TensorName::ClusterWeight => g.cluster_weight = index,
                TensorName::ClusterBias => g.cluster_bias = index,
                TensorName::Layer(..) => {}
            }
            index += 1;
        });
        if config.tie_weight {
            g.out_weight = g.emb_layer;
        }
        for cluster in 0..=config.n_clusters() {
            if config.out_proj_tied(cluster) {
                g.out_proj[cluster] = g.emb_proj[config.emb_table_of_cluster(cluster)];
            }
        }
        Ok(Model {
            image,
            globals: g,
            fast_f32: false,
        })
    }

    /// Sums the products of the f32 weight matrices with fused multiply-adds, one chain per
    /// row in column order ([`kernels::matmul_fma_f32`](crate::kernels::matmul_fma_f32)), when `on`, instead of the
    /// exact order. Off by default. The results differ from the exact ones by a few ulps a
    /// sum; they are the same on every machine, so a fast-f32 run has digests of its own.
    /// Attention, LayerNorm, the softmaxes and f16, int8 and int4 matrices are unchanged.
    pub fn set_fast_f32(&mut self, on: bool) {
        self.fast_f32 = on;
    }

    /// Whether [`set_fast_f32`](Model::set_fast_f32) is on.
    pub fn fast_f32(&self) -> bool {
        self.fast_f32
    }

    /// Matrix tensor `index` of the image, in the fused order when fast f32 is on.
    fn matrix(&self, index: usize) -> Matrix<'a> {
        self.image.matrix(index).with_fast_f32(self.fast_f32)
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &Config {
        self.image.config()
    }

    /// The underlying image.
    pub fn image(&self) -> &Image<'a> {
        &self.image
    }

    /// `(tokens of table i, emb_dim(i))` embedding table `i`.
    pub fn emb_layer(&self, table: usize) -> Matrix<'a> {
        self.matrix(self.globals.emb_layer[table])
    }

    /// `(d_model, emb_dim(i))` embedding projection `i` (only when `has_emb_proj`).
    pub fn emb_proj(&self, table: usize) -> Matrix<'a> {
        self.matrix(self.globals.emb_proj[table])
    }

    /// `(tokens of layer i, emb_dim(i))` output weight `i` (the embedding table when tied).
    pub fn out_weight(&self, table: usize) -> Matrix<'a> {
        self.matrix(self.globals.out_weight[table])
    }

    /// `(tokens of layer i)` output bias `i`.
    pub fn out_bias(&self, table: usize) -> Vector<'a> {
        self.image.vector(self.globals.out_bias[table])
    }

    /// `(d_model, width)` output projection of cluster `i` (only when `has_out_proj`).
    pub fn out_proj(&self, cluster: usize) -> Matrix<'a> {
        self.matrix(self.globals.out_proj[cluster])
    }

    /// `(n_clusters, d_embed)` head logits of the tail clusters.
    pub fn cluster_weight(&self) -> Matrix<'a> {
        self.matrix(self.globals.cluster_weight)
    }

    /// `(n_clusters)`.
    pub fn cluster_bias(&self) -> Vector<'a> {
        self.image.vector(self.globals.cluster_bias)
    }

    /// Layer `layer`'s weights (`layer < n_layer`).
    pub fn layer(&self, layer: usize) -> LayerWeights<'a> {
        let layout = self.image.layout();
        let tensor = |t: LayerTensor| self.image.vector(layout.layer_index(layer, t));
        let matrix = |t: LayerTensor| self.matrix(layout.layer_index(layer, t));
        let (r_w_bias, r_r_bias) = if self.config().untie_r {
            (tensor(LayerTensor::RWBias), tensor(LayerTensor::RRBias))
        } else {
            (
                self.image.vector(self.globals.shared_r_w_bias),
                self.image.vector(self.globals.shared_r_r_bias),
            )
        };
        LayerWeights {
            r_w_bias,
            r_r_bias,
            qkv: matrix(LayerTensor::QkvWeight),
            r_net: matrix(LayerTensor::RWeight),
            o_net: matrix(LayerTensor::OWeight),
            attn_norm_weight: tensor(LayerTensor::AttnNormWeight),
            attn_norm_bias: tensor(LayerTensor::AttnNormBias),
            ff1_weight: matrix(LayerTensor::Ff1Weight),
            ff1_bias: tensor(LayerTensor::Ff1Bias),
            ff2_weight: matrix(LayerTensor::Ff2Weight),
            ff2_bias: tensor(LayerTensor::Ff2Bias),
            ff_norm_weight: tensor(LayerTensor::FfNormWeight),
            ff_norm_bias: tensor(LayerTensor::FfNormBias),
        }
    }
}

//! A model's weights copied out of the image into host vectors of `f64` or `f32`: every
//! matrix is dequantized (f16 and int8 matrices included) and every tie resolved by copying,
//! so the forward passes index plain row-major arrays.
//!
//! This is the only place that reads [`txl_core::Model`]; nothing of the core's arithmetic is
//! used.

use txl_core::weights::{Matrix, Vector};
use txl_core::{Config, Model};

use crate::error::{filled, with_room, Error};
use crate::real::Real;

/// One decoder layer. Shapes use `W = n_head * d_head`.
#[derive(Clone, Debug)]
pub(crate) struct LayerParams<T> {
    /// `(W)` content bias `u`.
    pub r_w_bias: Vec<T>,
    /// `(W)` position bias `v`.
    pub r_r_bias: Vec<T>,
    /// `(3W, d_model)`: rows of q, then k, then v.
    pub qkv: Vec<T>,
    /// `(W, d_model)`.
    pub r_net: Vec<T>,
    /// `(d_model, W)`.
    pub o_net: Vec<T>,
    /// `(d_model)`.
    pub attn_norm_weight: Vec<T>,
    /// `(d_model)`.
    pub attn_norm_bias: Vec<T>,
    /// `(d_inner, d_model)`.
    pub ff1_weight: Vec<T>,
    /// `(d_inner)`.
    pub ff1_bias: Vec<T>,
    /// `(d_model, d_inner)`.
    pub ff2_weight: Vec<T>,
    /// `(d_model)`.
    pub ff2_bias: Vec<T>,
    /// `(d_model)`.
    pub ff_norm_weight: Vec<T>,
    /// `(d_model)`.
    pub ff_norm_bias: Vec<T>,
    /// `(W)` key of an all-zero hidden state (the zero-memory start).
    pub zero_key: Vec<T>,
    /// `(W)` value of an all-zero hidden state.
    pub zero_value: Vec<T>,
}

/// Every weight of a model, in `T`.
#[derive(Clone, Debug)]
pub(crate) struct HostWeights<T> {
    /// The hyper-parameters.
    pub config: Config,
    /// Per embedding table `t`: `(tokens_t, w_t)`.
    pub emb_layers: Vec<Vec<T>>,
    /// Per table: `(d_model, w_t)`; empty when the model has no projections.
    pub emb_projs: Vec<Vec<T>>,
    /// The decoder layers.
    pub layers: Vec<LayerParams<T>>,
    /// Per table: `(tokens_t, w_t)` output weights (a copy of the embedding when tied).
    pub out_weights: Vec<Vec<T>>,
    /// Per table: `(tokens_t)`.
    pub out_biases: Vec<Vec<T>>,
    /// Per cluster `c`: `(d_model, w_table(c))`; empty when the model has no projections.
    pub out_projs: Vec<Vec<T>>,
    /// `(n_clusters, d_embed)`; empty for a full softmax.
    pub cluster_weight: Vec<T>,
    /// `(n_clusters)`.
    pub cluster_bias: Vec<T>,
}

/// A matrix of any stored dtype, dequantized to f64, row-major.
fn matrix_f64(m: Matrix<'_>) -> Result<Vec<f64>, Error> {
    let mut row = filled(m.cols, 0.0f32, "a weight row")?;
    let mut out = with_room(m.rows.saturating_mul(m.cols), "a weight matrix in f64")?;
    for r in 0..m.rows {
        m.row_to_f32(r, &mut row);
        out.extend(row.iter().map(|&v| v as f64));
    }
    Ok(out)
}

fn convert<T: Real>(v: &[f64]) -> Result<Vec<T>, Error> {
    let mut out = with_room(v.len(), "a weight tensor")?;
    out.extend(v.iter().map(|&x| T::from_f64(x)));
    Ok(out)
}

fn vector<T: Real>(v: Vector<'_>) -> Result<Vec<T>, Error> {
    let mut out = with_room(v.len(), "a weight vector")?;
    out.extend(v.iter().map(|x| T::from_f64(x as f64)));
    Ok(out)
}

fn matrix<T: Real>(m: Matrix<'_>) -> Result<Vec<T>, Error> {
    convert(&matrix_f64(m)?)
}

/// `W (rows, cols) @ x (cols)` in f64.
fn matvec_f64(w: &[f64], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

impl<T: Real> HostWeights<T> {
    /// Copies every weight of `model`. The copies are asked of the allocator fallibly (an f64
    /// copy of an int8 image is 8 times its size): what it refuses is an
    /// [`Error::AllocationFailed`].
    pub fn new(model: &Model<'_>) -> Result<Self, Error> {
        let config = *model.config();
        let d_model = config.d_model as usize;
        let width = config.qkv_width() as usize;
        let tables = config.n_emb_tables();
        let projected = config.has_emb_proj();
        let mut layers = with_room(config.n_layer as usize, "the layers")?;
        for l in 0..config.n_layer as usize {
            let w = model.layer(l);
            let qkv = matrix_f64(w.qkv)?;
            // The zero-memory start remembers mem_len all-zero hidden states; their keys and
            // values are W_k x and W_v x with x = LayerNorm(0) = the LayerNorm bias when
            // pre_lnorm, else x = 0.
            let zero_input: Vec<f64> = if config.pre_lnorm {
                w.attn_norm_bias.iter().map(|v| v as f64).collect()
            } else {
                vec![0.0; d_model]
            };
            let zero_key = matvec_f64(&qkv[width * d_model..2 * width * d_model], &zero_input);
            let zero_value = matvec_f64(&qkv[2 * width * d_model..], &zero_input);
            layers.push(LayerParams {
                r_w_bias: vector(w.r_w_bias)?,
                r_r_bias: vector(w.r_r_bias)?,
                qkv: convert(&qkv)?,
                r_net: matrix(w.r_net)?,
                o_net: matrix(w.o_net)?,
                attn_norm_weight: vector(w.attn_norm_weight)?,
                attn_norm_bias: vector(w.attn_norm_bias)?,
                ff1_weight: matrix(w.ff1_weight)?,
                ff1_bias: vector(w.ff1_bias)?,
                ff2_weight: matrix(w.ff2_weight)?,
                ff2_bias: vector(w.ff2_bias)?,
                ff_norm_weight: vector(w.ff_norm_weight)?,
                ff_norm_bias: vector(w.ff_norm_bias)?,
                zero_key: convert(&zero_key)?,
                zero_value: convert(&zero_value)?,
            });
        }
        let clusters = config.n_clusters();
        Ok(HostWeights {
            config,
            emb_layers: (0..tables)
                .map(|t| matrix(model.emb_layer(t)))
                .collect::<Result<_, _>>()?,
            emb_projs: if projected {
                (0..tables)
                    .map(|t| matrix(model.emb_proj(t)))
                    .collect::<Result<_, _>>()?
            } else {
                Vec::new()
            },
            layers,
            out_weights: (0..tables)
                .map(|t| matrix(model.out_weight(t)))
                .collect::<Result<_, _>>()?,
            out_biases: (0..tables)
                .map(|t| vector(model.out_bias(t)))
                .collect::<Result<_, _>>()?,
            out_projs: if projected {
                (0..=clusters)
                    .map(|c| matrix(model.out_proj(c)))
                    .collect::<Result<_, _>>()?
            } else {
                Vec::new()
            },
            cluster_weight: if clusters > 0 {
                matrix(model.cluster_weight())?
            } else {
                Vec::new()
            },
            cluster_bias: if clusters > 0 {
                vector(model.cluster_bias())?
            } else {
                Vec::new()
            },
        })
    }

    /// The LayerNorm epsilon as PyTorch uses it: the config's decimal value as an f64 (`1e-5`,
    /// not the f32 nearest to it widened).
    pub fn layer_norm_epsilon(&self) -> f64 {
        let eps = self.config.layer_norm_epsilon;
        eps.to_string().parse().unwrap_or(eps as f64)
    }
}

/// `inv_freq[k] = 1 / 10000^(2k / d_model)` for `k < d_model / 2`, rounded as PyTorch computes
/// it in f32: `2k / d_model` in f32, the power rounded to f32, the reciprocal in f32. These
/// are the values Hugging Face checkpoints store as `pos_emb.inv_freq`.
pub fn inv_freq(d_model: usize) -> Vec<f32> {
    (0..d_model / 2)
        .map(|k| {
            let exponent = (2 * k) as f32 / d_model as f32;
            let power = 10000f64.powf(exponent as f64) as f32;
            1.0 / power
        })
        .collect()
}

/// The sinusoid position embeddings of relative distances `0..n`: `(n, d_model)` rows
/// `[sin(d * inv_freq) | cos(d * inv_freq)]`, in f64. `n` comes from the session options, so
/// the rows are allocated fallibly.
pub fn position_embeddings(n: usize, d_model: usize) -> Result<Vec<f64>, Error> {
    let inv_freq = inv_freq(d_model);
    let count = n.saturating_mul(d_model);
    let mut out = with_room(count, "the position embeddings")?;
    for d in 0..n {
        let angles = inv_freq.iter().map(|&f| d as f64 * f as f64);
        out.extend(angles.clone().map(f64::sin));
        out.extend(angles.map(f64::cos));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn inv_freq_matches_what_pytorch_stores() {
        // transformer.pos_emb.inv_freq of tests/fixtures/adaptive_div2 (d_model 24), bit for bit.
        let stored: [u32; 12] = [
            0x3f80_0000,
            0x3eed_a63c,
            0x3e5c_9d35,
            0x3dcc_cccd,
            0x3d3e_1e95,
            0x3cb0_7dc6,
            0x3c23_d70a,
            0x3b98_187a,
            0x3b0d_3169,
            0x3a83_126f,
            0x39f3_5a5c,
            0x3961_e8a7,
        ];
        let ours: Vec<u32> = super::inv_freq(24).iter().map(|v| v.to_bits()).collect();
        assert_eq!(ours, stored);
    }

    #[test]
    fn position_zero_is_sin_zero_cos_one() {
        let p = super::position_embeddings(2, 8).unwrap();
        assert_eq!(&p[..8], &[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
        assert_eq!(p[8], 1f64.sin());
    }
}

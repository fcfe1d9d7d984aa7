//! Random-weight models of any shape, built in memory: for the property tests and the
//! benchmarks. The scale follows `tools/reference/make_fixtures.py` so the output distributions
//! are far from uniform (unlike a standard `init_std = 0.02` model, whose every prediction is
//! nearly `1 / n_token`): weight matrices have standard deviation `gain / sqrt(fan_in)`,
//! embeddings `emb_std`, LayerNorm gains `1 ± 0.2`.

use txl_core::image::{write_image, Payload};
use txl_core::rng::Rng;
use txl_core::tensors::{for_each_tensor, LayerTensor, Shape, TensorName};
use txl_core::{Config, ConfigError};

use crate::error::with_room;

/// The scale of a random model's weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomInit {
    /// Weight matrices: standard deviation `gain / sqrt(fan_in)`.
    pub gain: f32,
    /// Embedding tables and the tail clusters' head weights: standard deviation.
    pub emb_std: f32,
}

impl Default for RandomInit {
    /// `gain` 1, `emb_std` 0.5: the reference fixtures' scale, for models with d_embed near 16.
    fn default() -> Self {
        RandomInit {
            gain: 1.0,
            emb_std: 0.5,
        }
    }
}

impl RandomInit {
    /// The default scale carried to any width: `emb_std = 2 / sqrt(d_embed)` keeps the output
    /// logits' spread (a LayerNorm-ed hidden state dotted with embedding rows) the same for a
    /// wide model as for a d_embed 16 one.
    pub fn for_config(config: &Config) -> Self {
        RandomInit {
            emb_std: 2.0 / (config.d_embed as f32).sqrt(),
            ..RandomInit::default()
        }
    }
}

/// Uniform with mean `mean` and standard deviation `std`.
fn uniform(rng: &mut Rng, mean: f32, std: f32) -> f32 {
    mean + std * 3f32.sqrt() * rng.symmetric_f32()
}

/// An image of `config` with random weights drawn from `seed` at the scale `init` says.
///
/// A config whose f32 image would not fit a model image's 32-bit sizes is refused before any
/// weight is drawn ([`ConfigError::TooLarge`]); the weights are allocated fallibly
/// ([`txl_core::Error::AllocationFailed`]).
pub fn random_image(config: &Config, seed: u64, init: RandomInit) -> Result<Vec<u8>, txl_core::Error> {
    config.validate()?;
    let mut tensor_bytes = 0u64;
    for_each_tensor(config, |_, shape| {
        tensor_bytes = tensor_bytes.saturating_add(shape.len() as u64 * 4);
    });
    if tensor_bytes > u64::from(u32::MAX) {
        return Err(ConfigError::TooLarge.into());
    }
    let mut tensors: Vec<(TensorName, Vec<f32>)> = Vec::new();
    let mut failed = None;
    let mut rng = Rng::new(seed);
    for_each_tensor(config, |name, shape| {
        if failed.is_some() {
            return;
        }
        let (rows, cols) = match shape {
            Shape::Matrix(rows, cols) => (rows as f32, cols as f32),
            Shape::Vector(n) => (n as f32, 1.0),
        };
        // (mean, std) of this tensor's elements
        let (mean, std) = match name {
            TensorName::Layer(_, LayerTensor::AttnNormWeight | LayerTensor::FfNormWeight) => (1.0, 0.2),
            TensorName::Layer(_, LayerTensor::RWBias | LayerTensor::RRBias)
            | TensorName::SharedRWBias
            | TensorName::SharedRRBias => (0.0, 0.3),
            TensorName::EmbLayer(_) | TensorName::ClusterWeight => (0.0, init.emb_std),
            TensorName::ClusterBias => (0.0, 0.5),
            // used as hidden @ out_proj: the fan-in is the first dimension
            TensorName::OutBias(_)
            | TensorName::Layer(
                _,
                LayerTensor::AttnNormBias
                | LayerTensor::FfNormBias
                | LayerTensor::Ff1Bias
                | LayerTensor::Ff2Bias,
            ) => (0.0, 0.2),
            TensorName::OutProj(_) => (0.0, init.gain / rows.sqrt()),
            _ => (0.0, init.gain / cols.sqrt()),
        };
        let Ok(mut data) = with_room::<f32>(shape.len(), "a random tensor") else {
            failed = Some(txl_core::Error::AllocationFailed {
                bytes: shape.len() * 4,
            });
            return;
        };
        data.extend((0..shape.len()).map(|_| uniform(&mut rng, mean, std)));
        tensors.push((name, data));
    });
    if let Some(error) = failed {
        return Err(error);
    }
    let payloads: Vec<(TensorName, Payload<'_>)> = tensors
        .iter()
        .map(|(name, data)| (*name, Payload::F32(data)))
        .collect();
    write_image(config, &payloads)
}

/// A small config that exercises the adaptive embedding and softmax (two tail clusters,
/// div_val 2, one tied projection): what tests and examples start from.
pub fn small_config() -> Config {
    let mut cutoffs = [0; txl_core::config::MAX_CUTOFFS];
    cutoffs[0] = 10;
    cutoffs[1] = 20;
    Config {
        n_token: 40,
        d_model: 16,
        d_embed: 16,
        n_head: 2,
        d_head: 4,
        d_inner: 24,
        n_layer: 2,
        cutoffs,
        n_cutoffs: 2,
        div_val: 2,
        tie_weight: true,
        tie_projs: 0b110,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 4,
        mem_len: 6,
        clamp_len: 0,
        same_length: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_beyond_a_model_image_is_refused_before_drawing() {
        // Valid (each tensor fits), but 65536 layers of d_model 1024 are 4 TB of weights.
        let config = Config {
            d_model: 1024,
            d_embed: 1024,
            n_head: 16,
            d_head: 64,
            d_inner: 4096,
            n_layer: 65536,
            ..small_config()
        };
        config.validate().unwrap();
        assert_eq!(
            random_image(&config, 1, RandomInit::default()),
            Err(txl_core::Error::BadConfig(ConfigError::TooLarge))
        );
    }
}

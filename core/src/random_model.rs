//! Small models with random weights, built in memory: the one builder the tests, benchmarks,
//! fuzzing seeds and examples of every crate draw their models with.
//!
//! A [`RandomModel`] is a config, a seed and three choices: how the weights are drawn
//! ([`Init`]), how the image stores its matrices ([`MatrixDtype`]) and its vectors
//! ([`VectorDtype`]). The same choices draw the same numbers on every target (the
//! [`Rng`] is xorshift64*, the arithmetic plain f32 and `libm`).
//!
//! ```
//! use txl_core::random_model::{small_config, Init, MatrixDtype, RandomModel};
//! use txl_core::Model;
//!
//! let image = RandomModel::new(&small_config(), 1).matrices(MatrixDtype::Int8).aligned()?;
//! let model = Model::parse(image.bytes())?;
//! assert_eq!(model.config().n_token, 40);
//! // The same seed draws the same image.
//! assert_eq!(RandomModel::new(&small_config(), 1).matrices(MatrixDtype::Int8).image()?, image.bytes());
//! # Ok::<(), txl_core::Error>(())
//! ```

use alloc::vec::Vec;

use half::f16;

use crate::config::MAX_CUTOFFS;
use crate::image::{write_image, Payload};
use crate::rng::Rng;
use crate::tensors::{for_each_tensor, LayerTensor, Shape, TensorName};
use crate::{AlignedBytes, Config, ConfigError, Error};

/// The fixtures' scale of a random model's weights ([`Init::Scaled`]). It follows
/// `tools/reference/make_fixtures.py`, so the output distributions are far from uniform
/// (unlike a standard `init_std = 0.02` model, whose every prediction is nearly
/// `1 / n_token`): weight matrices have standard deviation `gain / sqrt(fan_in)`, embeddings
/// `emb_std`, LayerNorm gains `1 ± 0.2`.
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
            emb_std: 2.0 / libm::sqrtf(config.d_embed as f32),
            ..RandomInit::default()
        }
    }
}

/// How the weights are drawn. Every tensor's elements are drawn in the image's tensor order
/// ([`for_each_tensor`]), one [`Rng::symmetric_f32`] each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Uniform with the mean and standard deviation [`RandomInit`] gives each tensor: the
    /// reference fixtures' scale, what the accuracy tests and benchmarks use.
    Scaled(RandomInit),
    /// Uniform in `±1 / sqrt(cols)` for a `(rows, cols)` matrix, `±0.5` for a vector, and
    /// `1 ± 1` for a LayerNorm gain: the core's own tests' models.
    Plain,
}

impl Default for Init {
    /// [`Init::Scaled`] at [`RandomInit::default`].
    fn default() -> Self {
        Init::Scaled(RandomInit::default())
    }
}

/// How the image stores its weight matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatrixDtype {
    /// f32, as drawn.
    #[default]
    F32,
    /// f16, rounded from the draws.
    F16,
    /// int8 with one scale per row (`max |w| / 127`), rounded to nearest.
    Int8,
    /// int8 with an activation scale per column (SmoothQuant-style), each `2^u` for `u` uniform
    /// in `[-1, 1)`, drawn after every weight (matrix by matrix, in tensor order): the row
    /// stores `W[r][c] / a_c`, quantized as [`MatrixDtype::Int8`].
    Int8Smoothed,
}

/// How the image stores its vectors (biases, LayerNorm gains, `u`, `v`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VectorDtype {
    /// f32, as drawn.
    #[default]
    F32,
    /// f32 holding the values f16 rounds them to: the numbers of [`VectorDtype::F16`], stored
    /// wide.
    F32OfF16,
    /// f16.
    F16,
}

/// A model of a config with random weights drawn from a seed; see the [module](self).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomModel {
    config: Config,
    seed: u64,
    init: Init,
    matrices: MatrixDtype,
    vectors: VectorDtype,
}

impl RandomModel {
    /// `config`'s model with weights drawn from `seed`: [`Init::default`], f32 matrices and
    /// vectors, until the other methods say otherwise.
    pub fn new(config: &Config, seed: u64) -> Self {
        RandomModel {
            config: *config,
            seed,
            init: Init::default(),
            matrices: MatrixDtype::F32,
            vectors: VectorDtype::F32,
        }
    }

    /// Draws the weights as `init` says.
    pub fn init(self, init: Init) -> Self {
        RandomModel { init, ..self }
    }

    /// Stores the weight matrices as `dtype`.
    pub fn matrices(self, dtype: MatrixDtype) -> Self {
        RandomModel {
            matrices: dtype,
            ..self
        }
    }

    /// Stores the vectors as `dtype`.
    pub fn vectors(self, dtype: VectorDtype) -> Self {
        RandomModel {
            vectors: dtype,
            ..self
        }
    }

    /// The model image.
    ///
    /// A config whose f32 image would not fit a model image's 32-bit sizes is refused before any
    /// weight is drawn ([`ConfigError::TooLarge`]); the weights are allocated fallibly
    /// ([`Error::AllocationFailed`]).
    pub fn image(&self) -> Result<Vec<u8>, Error> {
        let config = &self.config;
        config.validate()?;
        let mut tensor_bytes = 0u64;
        for_each_tensor(config, |_, shape| {
            tensor_bytes = tensor_bytes.saturating_add(shape.len() as u64 * 4);
        });
        if tensor_bytes > u64::from(u32::MAX) {
            return Err(ConfigError::TooLarge.into());
        }
        let mut rng = Rng::new(self.seed);
        let mut tensors = draw(config, self.init, &mut rng)?;
        if self.vectors != VectorDtype::F32 {
            for (_, _, values) in tensors.iter_mut().filter(|(name, _, _)| !name.is_matrix()) {
                values
                    .iter_mut()
                    .for_each(|v| *v = f16::from_f32_const(*v).to_f32());
            }
        }
        // each tensor as the image stores it, in tensor order (the smoothed matrices' activation
        // scales are drawn matrix by matrix after every weight)
        let stored = tensors
            .iter()
            .map(|(name, shape, values)| {
                let dtype = if name.is_matrix() {
                    self.matrices
                } else if self.vectors == VectorDtype::F16 {
                    MatrixDtype::F16
                } else {
                    MatrixDtype::F32
                };
                Ok(match dtype {
                    MatrixDtype::F32 => Stored::F32,
                    MatrixDtype::F16 => {
                        let mut half = try_vec(values.len(), 2)?;
                        half.extend(values.iter().map(|&v| f16::from_f32_const(v)));
                        Stored::F16(half)
                    }
                    MatrixDtype::Int8 => Stored::Int8(quantize_rows(*shape, values, None)?),
                    MatrixDtype::Int8Smoothed => Stored::Int8(quantize_rows(*shape, values, Some(&mut rng))?),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let payloads: Vec<(TensorName, Payload<'_>)> = tensors
            .iter()
            .zip(&stored)
            .map(|((name, _, values), stored)| {
                let payload = match stored {
                    Stored::F32 => Payload::F32(values),
                    Stored::F16(half) => Payload::F16(half),
                    Stored::Int8(rows) => Payload::Int8 {
                        values: &rows.values,
                        row_scales: &rows.row_scales,
                        act_scales: (!rows.act_scales.is_empty()).then_some(&rows.act_scales[..]),
                    },
                };
                (*name, payload)
            })
            .collect();
        write_image(config, &payloads)
    }

    /// [`RandomModel::image`] in a 16-byte-aligned buffer, as [`Model::parse`](crate::Model::parse)
    /// wants it.
    pub fn aligned(&self) -> Result<AlignedBytes, Error> {
        AlignedBytes::copy_from(&self.image()?)
    }
}

/// An empty vector with room for `len` elements of `size` bytes, or
/// [`Error::AllocationFailed`].
fn try_vec<T>(len: usize, size: usize) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::AllocationFailed {
        bytes: len.saturating_mul(size),
    })?;
    Ok(v)
}

/// Every tensor of `config` in image order, its elements drawn from `rng` as `init` says.
fn draw(config: &Config, init: Init, rng: &mut Rng) -> Result<Vec<(TensorName, Shape, Vec<f32>)>, Error> {
    let mut tensors: Vec<(TensorName, Shape, Vec<f32>)> = Vec::new();
    let mut failed = None;
    for_each_tensor(config, |name, shape| {
        if failed.is_some() {
            return;
        }
        let mut data = match try_vec::<f32>(shape.len(), 4) {
            Ok(data) => data,
            Err(error) => {
                failed = Some(error);
                return;
            }
        };
        match init {
            Init::Scaled(init) => {
                let (mean, std) = scaled_mean_std(name, shape, init);
                let half_width = std * libm::sqrtf(3.0);
                data.extend((0..shape.len()).map(|_| mean + half_width * rng.symmetric_f32()));
            }
            Init::Plain => {
                let (cols, gain_offset) = match (shape, name) {
                    (_, TensorName::Layer(_, LayerTensor::AttnNormWeight | LayerTensor::FfNormWeight)) => {
                        (1, 1.0)
                    }
                    (Shape::Matrix(_, cols), _) => (cols, 0.0),
                    (Shape::Vector(_), _) => (4, 0.0),
                };
                let std = 1.0 / libm::sqrtf(cols as f32);
                data.extend((0..shape.len()).map(|_| gain_offset + std * rng.symmetric_f32()));
            }
        }
        tensors.push((name, shape, data));
    });
    match failed {
        Some(error) => Err(error),
        None => Ok(tensors),
    }
}

/// `(mean, std)` of the elements of tensor `name` under [`Init::Scaled`].
fn scaled_mean_std(name: TensorName, shape: Shape, init: RandomInit) -> (f32, f32) {
    let (rows, cols) = match shape {
        Shape::Matrix(rows, cols) => (rows as f32, cols as f32),
        Shape::Vector(n) => (n as f32, 1.0),
    };
    match name {
        TensorName::Layer(_, LayerTensor::AttnNormWeight | LayerTensor::FfNormWeight) => (1.0, 0.2),
        TensorName::Layer(_, LayerTensor::RWBias | LayerTensor::RRBias)
        | TensorName::SharedRWBias
        | TensorName::SharedRRBias => (0.0, 0.3),
        TensorName::EmbLayer(_) | TensorName::ClusterWeight => (0.0, init.emb_std),
        TensorName::ClusterBias => (0.0, 0.5),
        TensorName::OutBias(_)
        | TensorName::Layer(
            _,
            LayerTensor::AttnNormBias | LayerTensor::FfNormBias | LayerTensor::Ff1Bias | LayerTensor::Ff2Bias,
        ) => (0.0, 0.2),
        // used as hidden @ out_proj: the fan-in is the first dimension
        TensorName::OutProj(_) => (0.0, init.gain / libm::sqrtf(rows)),
        _ => (0.0, init.gain / libm::sqrtf(cols)),
    }
}

/// A tensor as the image stores it, beside its f32 draws.
enum Stored {
    /// The draws themselves.
    F32,
    /// The draws rounded to f16.
    F16(Vec<f16>),
    /// The draws quantized to int8 rows.
    Int8(Int8Rows),
}

/// A matrix in int8: values, row scales, activation scales (empty unless smoothed).
#[derive(Debug, Default)]
struct Int8Rows {
    values: Vec<i8>,
    row_scales: Vec<f32>,
    act_scales: Vec<f32>,
}

/// Symmetric int8 with one scale per row. With `smoothing`, each column `c` first gets a
/// random activation scale `a_c` and the row stores `W[r][c] / a_c` (the matrix stands for
/// `q * row_scale * a_c`). Only matrices are quantized (a vector's shape gives nothing).
fn quantize_rows(shape: Shape, values: &[f32], smoothing: Option<&mut Rng>) -> Result<Int8Rows, Error> {
    let Shape::Matrix(rows, cols) = shape else {
        return Ok(Int8Rows::default());
    };
    let mut act_scales = Vec::new();
    if let Some(rng) = smoothing {
        act_scales = try_vec(cols as usize, 4)?;
        act_scales.extend((0..cols).map(|_| libm::exp2f(rng.symmetric_f32())));
    }
    let mut quantized = try_vec(values.len(), 1)?;
    let mut row_scales = try_vec(rows as usize, 4)?;
    let mut row = try_vec::<f32>(cols as usize, 4)?;
    for original in values.chunks(cols as usize) {
        row.clear();
        row.extend(
            original
                .iter()
                .enumerate()
                .map(|(c, v)| v / act_scales.get(c).unwrap_or(&1.0)),
        );
        let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        row_scales.push(scale);
        quantized.extend(
            row.iter()
                .map(|v| libm::roundf(v / scale).clamp(-127.0, 127.0) as i8),
        );
    }
    Ok(Int8Rows {
        values: quantized,
        row_scales,
        act_scales,
    })
}

/// A small config that exercises the adaptive embedding and softmax (two tail clusters,
/// div_val 2, one tied projection): what the accuracy tests and examples start from.
pub fn small_config() -> Config {
    let mut cutoffs = [0; MAX_CUTOFFS];
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

/// Two layers, two heads of four, an adaptive softmax with two tail clusters: every part of
/// the forward pass in a few thousand multiply-adds (the core's own tests' model, small enough
/// for Miri).
pub fn tiny_config() -> Config {
    let mut cutoffs = [0; MAX_CUTOFFS];
    cutoffs[0] = 6;
    cutoffs[1] = 12;
    // `small_config`'s switches, at smaller sizes and with the middle projection tied alone
    Config {
        n_token: 20,
        d_model: 8,
        d_embed: 8,
        d_inner: 12,
        cutoffs,
        tie_projs: 0b010,
        tgt_len: 3,
        mem_len: 4,
        ..small_config()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // safe code that draws whole models: four minutes under Miri, which is for the kernels
    #[cfg_attr(miri, ignore = "safe code; Miri checks the kernels")]
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
            RandomModel::new(&config, 1).image(),
            Err(Error::BadConfig(ConfigError::TooLarge))
        );
    }
}

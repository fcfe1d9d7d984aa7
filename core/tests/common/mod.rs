//! Tiny models built in the test, so the core's own tests (and Miri) run whole sessions
//! without fixtures or other crates.

#![allow(dead_code)]

use half::f16;
use txl_core::config::MAX_CUTOFFS;
use txl_core::image::{write_image, Payload};
use txl_core::rng::Rng;
use txl_core::tensors::{for_each_tensor, LayerTensor, Shape, TensorName};
use txl_core::{AlignedBytes, Config, Model, Session, SessionOptions};

/// How the image stores its weight matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    F32,
    F16,
    Int8,
    /// int8 with an activation scale per column (SmoothQuant-style), each in `[0.5, 2)`.
    Int8Smoothed,
}

/// How the image stores its vectors (biases, LayerNorm gains, `u`, `v`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vectors {
    /// f32, as drawn.
    F32,
    /// f32 holding the values f16 rounds them to: the numbers of [`Vectors::F16`], stored wide.
    F32OfF16,
    /// f16.
    F16,
}

/// Two layers, two heads of four, an adaptive softmax with two tail clusters: every part of
/// the forward pass in a few thousand multiply-adds.
pub fn tiny_config() -> Config {
    let mut cutoffs = [0; MAX_CUTOFFS];
    cutoffs[0] = 6;
    cutoffs[1] = 12;
    Config {
        n_token: 20,
        d_model: 8,
        d_embed: 8,
        n_head: 2,
        d_head: 4,
        d_inner: 12,
        n_layer: 2,
        cutoffs,
        n_cutoffs: 2,
        div_val: 2,
        tie_weight: true,
        tie_projs: 0b010,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 3,
        mem_len: 4,
        clamp_len: 0,
        same_length: false,
    }
}

/// An image of `config` with random weights from `seed`, matrices stored as `weights` says.
pub fn tiny_image(config: &Config, weights: Weights, seed: u64) -> AlignedBytes {
    tiny_image_with_vectors(config, weights, Vectors::F32, seed)
}

/// [`tiny_image`] with the vectors stored as `vectors` says.
pub fn tiny_image_with_vectors(
    config: &Config,
    weights: Weights,
    vectors: Vectors,
    seed: u64,
) -> AlignedBytes {
    let mut rng = Rng::new(seed);
    let mut tensors: Vec<(TensorName, Shape, Vec<f32>)> = Vec::new();
    for_each_tensor(config, |name, shape| {
        let (cols, gain_offset) = match (shape, name) {
            (_, TensorName::Layer(_, LayerTensor::AttnNormWeight | LayerTensor::FfNormWeight)) => (1, 1.0),
            (Shape::Matrix(_, cols), _) => (cols, 0.0),
            (Shape::Vector(_), _) => (4, 0.0),
        };
        let std = 1.0 / (cols as f32).sqrt();
        let values = (0..shape.len())
            .map(|_| gain_offset + std * rng.symmetric_f32())
            .collect();
        tensors.push((name, shape, values));
    });
    if vectors != Vectors::F32 {
        for (_, _, values) in tensors.iter_mut().filter(|(name, _, _)| !name.is_matrix()) {
            values.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32());
        }
    }
    let halves: Vec<Vec<f16>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().map(|&x| f16::from_f32(x)).collect())
        .collect();
    let smoothed = weights == Weights::Int8Smoothed;
    let quantized: Vec<(Vec<i8>, Vec<f32>, Vec<f32>)> = tensors
        .iter()
        .map(|(_, shape, v)| quantize_rows(*shape, v, smoothed.then_some(&mut rng)))
        .collect();
    let payloads: Vec<(TensorName, Payload<'_>)> = tensors
        .iter()
        .enumerate()
        .map(|(i, (name, _, values))| {
            let payload = match weights {
                _ if !name.is_matrix() && vectors == Vectors::F16 => Payload::F16(&halves[i]),
                _ if !name.is_matrix() => Payload::F32(values),
                Weights::F32 => Payload::F32(values),
                Weights::F16 => Payload::F16(&halves[i]),
                Weights::Int8 | Weights::Int8Smoothed => Payload::Int8 {
                    values: &quantized[i].0,
                    row_scales: &quantized[i].1,
                    act_scales: smoothed.then_some(&quantized[i].2[..]),
                },
            };
            (*name, payload)
        })
        .collect();
    let bytes = write_image(config, &payloads).expect("a valid tiny model");
    AlignedBytes::copy_from(&bytes).expect("allocation")
}

/// Symmetric int8 with one scale per row: `(values, row scales, activation scales)`. With
/// `smoothing`, each column `c` first gets a random activation scale `a_c` and the row stores
/// `W[r][c] / a_c` (the matrix stands for `q * row_scale * a_c`); without, the activation
/// scales are empty.
fn quantize_rows(shape: Shape, values: &[f32], smoothing: Option<&mut Rng>) -> (Vec<i8>, Vec<f32>, Vec<f32>) {
    let Shape::Matrix(_, cols) = shape else {
        return (Vec::new(), Vec::new(), Vec::new());
    };
    let act_scales: Vec<f32> = match smoothing {
        Some(rng) => (0..cols).map(|_| 2.0f32.powf(rng.symmetric_f32())).collect(),
        None => Vec::new(),
    };
    let mut quantized = Vec::with_capacity(values.len());
    let mut scales = Vec::new();
    for row in values.chunks(cols as usize) {
        let row: Vec<f32> = row
            .iter()
            .enumerate()
            .map(|(c, v)| v / act_scales.get(c).unwrap_or(&1.0))
            .collect();
        let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        scales.push(scale);
        quantized.extend(row.iter().map(|v| (v / scale).round().clamp(-127.0, 127.0) as i8));
    }
    (quantized, scales, act_scales)
}

/// A 16-byte-aligned arena of `bytes`.
pub fn arena(bytes: usize) -> Vec<u128> {
    vec![0u128; bytes.div_ceil(16)]
}

/// Every log-probability of `tokens` in segments of `options.tgt_len`, the linear layers on
/// `positions` positions a pass.
pub fn log_prob_bits(
    model: &Model<'_>,
    options: SessionOptions,
    positions: usize,
    tokens: &[u32],
) -> Vec<u32> {
    let bytes = Session::arena_bytes_for_positions_per_pass(model, &options, positions).unwrap();
    let mut memory = arena(bytes);
    let arena = bytemuck::cast_slice_mut(&mut memory);
    let mut session = Session::with_positions_per_pass(model, arena, options, positions).unwrap();
    let mut bits = Vec::new();
    for segment in tokens.chunks(options.tgt_len as usize) {
        session
            .forward(segment, |_, row| bits.extend(row.iter().map(|v| v.to_bits())))
            .unwrap();
    }
    bits
}

//! The quantizer: f32 image in, f16 or int8 image out, with a report of what it cost.
//!
//! int8 is per-row symmetric with the clipping range searched per row ([`int8`]), computed on
//! the device as W8A8 (activations quantized per token). With calibration text, activation
//! smoothing (SmoothQuant: migrate per-channel activation range into the weights, strength
//! `alpha`) is tried and kept only where it lowers the measured bits per token, and a
//! sensitivity pass can keep the tensors whose quantization costs most in f16.

pub mod calibrate;
pub mod int8;

use anyhow::{bail, Result};
use half::f16;
use serde::Serialize;
use txl_core::image::{write_image, Payload};
use txl_core::tensors::{for_each_tensor, LayerTensor, Shape, TensorName};
use txl_core::{Config, MemDtype, Model, Probe, Session, SessionOptions};

use crate::model_file::{AlignedBytes, Arena};
use crate::scoring;
use calibrate::{channel_ranges, smoothing_factors, ChannelRanges};

/// The weight precision to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Every matrix in f16.
    F16,
    /// Every matrix in int8 (W8A8), except those kept in f16.
    Int8,
}

/// Activation smoothing for int8.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Smoothing {
    /// No smoothing.
    Off,
    /// Smoothing with this migration strength (0 = none, 1 = all of the range to the weights).
    Alpha(f32),
    /// Try several strengths and none on the calibration text; keep the best.
    Auto,
}

/// What to do.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// The precision.
    pub target: Target,
    /// Activation smoothing (int8 with calibration only).
    pub smoothing: Smoothing,
    /// Tensors (glob patterns over names, `*` matches anything) kept in f16.
    pub keep_f16: Vec<String>,
    /// Also keep the `k` tensors whose int8 quantization alone costs most on the calibration text.
    pub auto_keep_f16: usize,
    /// Session settings used to evaluate on the calibration text.
    pub session: SessionOptions,
}

impl QuantizeOptions {
    /// Weights alone: no smoothing, nothing kept in f16 (what needs no calibration text).
    pub fn weights_only(target: Target, session: SessionOptions) -> QuantizeOptions {
        QuantizeOptions {
            target,
            smoothing: Smoothing::Off,
            keep_f16: Vec::new(),
            auto_keep_f16: 0,
            session,
        }
    }
}

/// One tensor in the report.
#[derive(Clone, Debug, Serialize)]
pub struct TensorReport {
    /// Canonical name.
    pub name: String,
    /// `f32`, `f16` or `int8`.
    pub dtype: &'static str,
    /// Dimensions.
    pub shape: Vec<u32>,
    /// Signal-to-quantization-noise ratio in dB (infinite when stored exactly).
    pub sqnr_db: f64,
    /// Bits per token lost when only this tensor is int8 (sensitivity pass only).
    pub solo_delta_bits: Option<f64>,
}

/// What the quantizer did and measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The precision produced.
    pub target: Target,
    /// The smoothing strength used (`None`: no smoothing).
    pub smoothing_alpha: Option<f32>,
    /// Calibration bits per token for each smoothing strength tried.
    pub smoothing_search: Vec<(Option<f32>, f64)>,
    /// Every tensor.
    pub tensors: Vec<TensorReport>,
    /// Relative RMS error of each layer's output against the f32 model, on the calibration text.
    pub layer_errors: Vec<f64>,
    /// Calibration bits per token of each precision (`f32`, `f16`, this image, this image with
    /// int8 memory).
    pub bits_per_token: Vec<(String, f64)>,
    /// Calibration tokens used (0 without calibration).
    pub calibration_tokens: usize,
    /// Bytes of the image written.
    pub image_bytes: usize,
    /// Parameters of the model.
    pub parameters: usize,
}

/// The quantized image and its report.
#[derive(Clone, Debug)]
pub struct Quantized {
    /// The new image.
    pub image: Vec<u8>,
    /// What it cost.
    pub report: Report,
}

/// How one tensor is stored.
#[derive(Clone, Debug)]
enum Plan {
    F32,
    F16,
    Int8(Option<Vec<f32>>),
}

/// The source model's tensors, in f32.
struct Source {
    config: Config,
    tensors: Vec<(TensorName, Shape, Vec<f32>)>,
}

impl Source {
    fn read(model: &Model<'_>) -> Source {
        let config = *model.config();
        let image = model.image();
        let mut tensors = Vec::new();
        let mut index = 0;
        for_each_tensor(&config, |name, shape| {
            let data = if name.is_matrix() {
                let matrix = image.matrix(index);
                let mut dense = vec![0.0f32; matrix.rows * matrix.cols];
                for (r, row) in dense.chunks_exact_mut(matrix.cols).enumerate() {
                    matrix.row_to_f32(r, row);
                }
                dense
            } else {
                image.f32_tensor(index).to_vec()
            };
            tensors.push((name, shape, data));
            index += 1;
        });
        Source { config, tensors }
    }

    /// Builds an image storing tensor `i` as `plans[i]`; returns it and each tensor's SQNR.
    fn build(&self, plans: &[Plan]) -> Result<(Vec<u8>, Vec<f64>)> {
        enum Stored {
            F32,
            F16(Vec<f16>),
            Int8(int8::Int8Matrix),
        }
        let mut stored = Vec::with_capacity(plans.len());
        let mut sqnr = Vec::with_capacity(plans.len());
        for ((_, shape, data), plan) in self.tensors.iter().zip(plans) {
            let cols = match shape {
                Shape::Matrix(_, c) => *c as usize,
                Shape::Vector(n) => *n as usize,
            };
            let (item, approximation) = match plan {
                Plan::F32 => (Stored::F32, None),
                Plan::F16 => {
                    let halves: Vec<f16> = data.iter().map(|&v| f16::from_f32(v)).collect();
                    let back = halves.iter().map(|v| v.to_f32()).collect();
                    (Stored::F16(halves), Some(back))
                }
                Plan::Int8(smooth) => {
                    let q = int8::quantize(data, cols, smooth.as_deref());
                    let back = q.dequantize(cols);
                    (Stored::Int8(q), Some(back))
                }
            };
            sqnr.push(approximation.map_or(f64::INFINITY, |a| int8::sqnr_db(data, &a)));
            stored.push(item);
        }
        let payloads: Vec<(TensorName, Payload<'_>)> = self
            .tensors
            .iter()
            .zip(&stored)
            .map(|((name, _, data), item)| {
                let payload = match item {
                    Stored::F32 => Payload::F32(data),
                    Stored::F16(h) => Payload::F16(h),
                    Stored::Int8(q) => Payload::Int8 {
                        values: &q.values,
                        row_scales: &q.row_scales,
                        act_scales: q.act_scales.as_deref(),
                    },
                };
                (*name, payload)
            })
            .collect();
        let image = write_image(&self.config, &payloads).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok((image, sqnr))
    }

    fn parameters(&self) -> usize {
        self.tensors.iter().map(|(_, shape, _)| shape.len()).sum()
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((prefix, rest)) => {
            name.starts_with(prefix)
                && (0..=name.len() - prefix.len()).any(|skip| glob_match(rest, &name[prefix.len() + skip..]))
        }
    }
}

/// The input range that smoothing a tensor's columns would use, if it has one.
fn input_range<'r>(config: &Config, name: TensorName, ranges: &'r ChannelRanges) -> Option<&'r [f32]> {
    let layer_input = |layer: u32, linear: usize| Some(ranges.layers[layer as usize][linear].as_slice());
    match name {
        TensorName::Layer(l, LayerTensor::QkvWeight) => layer_input(l, 0),
        TensorName::Layer(l, LayerTensor::OWeight) => layer_input(l, 1),
        TensorName::Layer(l, LayerTensor::Ff1Weight) => layer_input(l, 2),
        TensorName::Layer(l, LayerTensor::Ff2Weight) => layer_input(l, 3),
        // A tied embedding table is also the output layer: smooth for that use.
        TensorName::EmbLayer(t) if config.tie_weight => Some(&ranges.out_tables[t as usize]),
        TensorName::OutWeight(t) => Some(&ranges.out_tables[t as usize]),
        TensorName::ClusterWeight => Some(&ranges.cluster_head),
        TensorName::EmbProj(t) => Some(&ranges.emb_proj[t as usize]),
        _ => None,
    }
}

fn bits_per_token(image: &[u8], options: SessionOptions, tokens: &[u32]) -> Result<f64> {
    let bytes = AlignedBytes::new(image);
    let model = Model::parse(bytes.bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let scores = scoring::score(&model, tokens, options, 0, |_| {}).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(scores.bits_per_token())
}

/// Quantizes `model` as `options` say; `calibration` tokens (never the evaluation text) enable
/// smoothing, the sensitivity pass and the measured parts of the report.
pub fn quantize(
    model: &Model<'_>,
    options: &QuantizeOptions,
    calibration: Option<&[u32]>,
    mut progress: impl FnMut(&str),
) -> Result<Quantized> {
    let source = Source::read(model);
    let config = source.config;
    let keep = |name: TensorName| {
        let text = name.to_string();
        options.keep_f16.iter().any(|p| glob_match(p, &text))
    };
    let needs_calibration =
        options.smoothing != Smoothing::Off && options.target == Target::Int8 || options.auto_keep_f16 > 0;
    if needs_calibration && calibration.is_none() {
        bail!("activation smoothing and the sensitivity pass need calibration text (--calib-bytes or --calib-tokens)");
    }
    let ranges = match (calibration, options.target) {
        (Some(tokens), Target::Int8) => {
            progress("calibrating: activation ranges");
            Some(channel_ranges(model, options.session, tokens).map_err(|e| anyhow::anyhow!("{e}"))?)
        }
        _ => None,
    };
    let plan_with = |alpha: Option<f32>, kept: &dyn Fn(TensorName) -> bool| -> Vec<Plan> {
        source
            .tensors
            .iter()
            .enumerate()
            .map(|(index, (name, _, data))| {
                if !name.is_matrix() {
                    return Plan::F32;
                }
                if options.target == Target::F16 || kept(*name) {
                    return Plan::F16;
                }
                let smooth = alpha.zip(ranges.as_ref()).and_then(|(alpha, ranges)| {
                    let range = input_range(&config, *name, ranges)?;
                    smoothing_factors(&model.image().matrix(index), data, range, alpha)
                });
                Plan::Int8(smooth)
            })
            .collect()
    };

    let f32_bits = match calibration {
        Some(tokens) => Some(bits_per_token(model.image().bytes(), options.session, tokens)?),
        None => None,
    };

    // Smoothing: try the candidates, keep the best measured.
    let candidates: Vec<Option<f32>> = match (options.target, options.smoothing, calibration) {
        (Target::Int8, Smoothing::Auto, Some(_)) => vec![None, Some(0.25), Some(0.5), Some(0.75)],
        (Target::Int8, Smoothing::Alpha(a), Some(_)) => vec![Some(a)],
        _ => vec![None],
    };
    let mut search = Vec::new();
    let mut alpha = candidates[0];
    if let (Some(tokens), true) = (calibration, candidates.len() > 1) {
        let mut best = f64::INFINITY;
        for candidate in candidates {
            progress(&format!("smoothing: trying alpha {candidate:?}"));
            let (image, _) = source.build(&plan_with(candidate, &keep))?;
            let bits = bits_per_token(&image, options.session, tokens)?;
            search.push((candidate, bits));
            if bits < best {
                (best, alpha) = (bits, candidate);
            }
        }
    }

    // Sensitivity: each matrix alone in int8; keep the costliest in f16.
    let mut solo = vec![None; source.tensors.len()];
    let mut auto_kept: Vec<TensorName> = Vec::new();
    if let (Some(tokens), Some(reference), true) = (calibration, f32_bits, options.auto_keep_f16 > 0) {
        let all_int8 = plan_with(alpha, &keep);
        for (index, (name, _, _)) in source.tensors.iter().enumerate() {
            if !matches!(all_int8[index], Plan::Int8(_)) {
                continue;
            }
            progress(&format!("sensitivity: {name}"));
            let mut plans = vec![Plan::F32; source.tensors.len()];
            plans[index] = all_int8[index].clone();
            let (image, _) = source.build(&plans)?;
            solo[index] = Some(bits_per_token(&image, options.session, tokens)? - reference);
        }
        let mut ranked: Vec<usize> = (0..solo.len()).filter(|&i| solo[i].is_some()).collect();
        ranked.sort_by(|&a, &b| solo[b].partial_cmp(&solo[a]).unwrap_or(std::cmp::Ordering::Equal));
        auto_kept = ranked
            .iter()
            .take(options.auto_keep_f16)
            .map(|&i| source.tensors[i].0)
            .collect();
    }

    let kept = |name: TensorName| keep(name) || auto_kept.contains(&name);
    let plans = plan_with(alpha, &kept);
    progress("writing the image");
    let (image, sqnr) = source.build(&plans)?;

    let mut bits = Vec::new();
    let mut layer_errors = Vec::new();
    if let (Some(tokens), Some(reference)) = (calibration, f32_bits) {
        progress("measuring");
        bits.push(("f32".to_string(), reference));
        if options.target == Target::Int8 {
            let (f16_image, _) = source.build(&plan_with(None, &|_| true))?;
            bits.push((
                "f16".to_string(),
                bits_per_token(&f16_image, options.session, tokens)?,
            ));
        }
        let label = match options.target {
            Target::F16 => "f16",
            Target::Int8 => "int8",
        };
        bits.push((
            label.to_string(),
            bits_per_token(&image, options.session, tokens)?,
        ));
        let memory = match options.target {
            Target::F16 => MemDtype::F16,
            Target::Int8 => MemDtype::Int8,
        };
        let with_memory = SessionOptions {
            mem_dtype: memory,
            ..options.session
        };
        bits.push((
            format!("{label} + {label} memory"),
            bits_per_token(&image, with_memory, tokens)?,
        ));
        layer_errors = measure_layer_errors(model, &image, options.session, tokens)?;
    }

    let tensors = source
        .tensors
        .iter()
        .zip(&plans)
        .zip(sqnr.iter().zip(&solo))
        .map(
            |(((name, shape, _), plan), (&sqnr_db, &solo_delta_bits))| TensorReport {
                name: name.to_string(),
                dtype: match plan {
                    Plan::F32 => "f32",
                    Plan::F16 => "f16",
                    Plan::Int8(_) => "int8",
                },
                shape: {
                    let (dims, n) = shape.dims();
                    dims[..n].to_vec()
                },
                sqnr_db,
                solo_delta_bits,
            },
        )
        .collect();
    let report = Report {
        target: options.target,
        smoothing_alpha: alpha,
        smoothing_search: search,
        tensors,
        layer_errors,
        bits_per_token: bits,
        calibration_tokens: calibration.map_or(0, <[u32]>::len),
        image_bytes: image.len(),
        parameters: source.parameters(),
    };
    Ok(Quantized { image, report })
}

/// `model` with its weights quantized to `target` and nothing measured: what `txl convert
/// --dtype` and `txl quantize` make without calibration text, and what the firmware's build
/// script embeds.
pub fn quantize_weights(model: &Model<'_>, target: Target) -> Result<Vec<u8>> {
    let options = QuantizeOptions::weights_only(target, SessionOptions::from_config(model.config()));
    Ok(quantize(model, &options, None, |_| {})?.image)
}

/// Records every layer's output for one segment, or compares against a recording.
struct LayerOutputs {
    d_model: usize,
    /// `(n_layer, tgt_len, d_model)` the reference's outputs of the current segment.
    recorded: Vec<f32>,
    tgt_len: usize,
    /// Per layer: (sum of squared differences, sum of squared reference values).
    sums: Vec<(f64, f64)>,
    comparing: bool,
}

impl Probe for LayerOutputs {
    fn layer_output(&mut self, layer: usize, position: usize, hidden: &[f32]) {
        let at = (layer * self.tgt_len + position) * self.d_model;
        let slot = &mut self.recorded[at..at + self.d_model];
        if self.comparing {
            let (diff, norm) = &mut self.sums[layer];
            for (&r, &c) in slot.iter().zip(hidden) {
                *diff += ((r - c) as f64).powi(2);
                *norm += (r as f64).powi(2);
            }
        } else {
            slot.copy_from_slice(hidden);
        }
    }
}

/// Relative RMS error of each layer's output, candidate image against the reference model.
fn measure_layer_errors(
    reference: &Model<'_>,
    candidate: &[u8],
    options: SessionOptions,
    tokens: &[u32],
) -> Result<Vec<f64>> {
    let candidate_bytes = AlignedBytes::new(candidate);
    let candidate = Model::parse(candidate_bytes.bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = *reference.config();
    let error = |e: txl_core::Error| anyhow::anyhow!("{e}");
    let mut ref_arena = Arena::new(Session::arena_bytes(reference, &options).map_err(error)?);
    let mut cand_arena = Arena::new(Session::arena_bytes(&candidate, &options).map_err(error)?);
    let mut ref_session = Session::new(reference, ref_arena.bytes_mut(), options).map_err(error)?;
    let mut cand_session = Session::new(&candidate, cand_arena.bytes_mut(), options).map_err(error)?;
    let tgt_len = options.tgt_len as usize;
    let mut probe = LayerOutputs {
        d_model: config.d_model as usize,
        recorded: vec![0.0; config.n_layer as usize * tgt_len * config.d_model as usize],
        tgt_len,
        sums: vec![(0.0, 0.0); config.n_layer as usize],
        comparing: false,
    };
    for segment in tokens.chunks(tgt_len) {
        probe.comparing = false;
        ref_session
            .forward_probed(segment, |_, _| {}, &mut probe)
            .map_err(error)?;
        probe.comparing = true;
        cand_session
            .forward_probed(segment, |_, _| {}, &mut probe)
            .map_err(error)?;
    }
    Ok(probe
        .sums
        .iter()
        .map(|&(diff, norm)| (diff / norm.max(f64::MIN_POSITIVE)).sqrt())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_names() {
        assert!(glob_match(
            "layers.*.pos_ff.*",
            "layers.3.pos_ff.CoreNet.0.weight"
        ));
        assert!(glob_match("crit.*", "crit.out_layers.0.weight"));
        assert!(glob_match(
            "word_emb.emb_layers.0.weight",
            "word_emb.emb_layers.0.weight"
        ));
        assert!(!glob_match("layers.1.*", "layers.10.dec_attn.qkv_net.weight"));
        assert!(!glob_match("crit.*", "layers.0.dec_attn.qkv_net.weight"));
    }
}

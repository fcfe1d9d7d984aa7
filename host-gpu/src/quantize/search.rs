//! The calibrated quantizer: smoothing search, sensitivity pass and the measured report.

use txl_core::tensors::{LayerTensor, TensorName};
use txl_core::{AlignedBytes, MemDtype, Model, Probe, Session, SessionOptions};
use txl_core::{Config, Linear};

use std::rc::Rc;

use super::calibrate::{channel_ranges, smoothing_factors, ChannelRanges};
use super::inputs::{input_grams, InputGrams};
use super::{check_group, gptq, int4, int8};
use super::{
    glob_match, Method, Plan, QuantizeOptions, Quantized, Report, RoundingReport, Smoothing, Source, Target,
    TensorReport,
};
use crate::error::{filled, Error};

/// Bits per token of `image` on `tokens`, measured with the core (the engine that runs int8).
fn bits_per_token(image: &[u8], options: SessionOptions, tokens: &[u32]) -> Result<f64, Error> {
    let bytes = AlignedBytes::copy_from(image)?;
    let model = Model::parse(bytes.bytes())?;
    Ok(txl_core::scoring::score(&model, tokens, options, 0, |_| {})?.bits_per_token())
}

/// Quantizes `model` as `options` say; `calibration` tokens (never the evaluation text) enable
/// smoothing, the sensitivity pass and the measured parts of the report.
pub fn quantize(
    model: &Model<'_>,
    options: &QuantizeOptions,
    calibration: Option<&[u32]>,
    mut progress: impl FnMut(&str),
) -> Result<Quantized, Error> {
    check_group(options.group)?;
    let source = Source::read(model);
    let config = source.config;
    let keep = |name: TensorName| {
        let text = name.to_string();
        options.keep_f16.iter().any(|p| glob_match(p, &text))
    };
    if options.target == Target::F16 && options.method != Method::Round {
        return Err(Error::BadOptions(format!(
            "the rounding method ({}) applies to int8 and int4 weights, not f16",
            options.method
        )));
    }
    let needs_calibration = (options.smoothing != Smoothing::Off || options.method == Method::Compensated)
        && options.target.is_integer()
        || options.auto_keep_f16 > 0;
    if needs_calibration && calibration.is_none() {
        return Err(Error::BadOptions(
            "activation smoothing, error-compensated rounding and the sensitivity pass need calibration text (--calib-bytes or --calib-tokens)"
                .into(),
        ));
    }
    let ranges = match (calibration, options.target.is_integer()) {
        (Some(tokens), true) => {
            progress("calibrating: activation ranges");
            Some(channel_ranges(model, options.session, tokens)?)
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
                if options.target.is_int4(*name) {
                    return Plan::Int4(options.group);
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
    // (int4 tensors are never smoothed: their format has no activation scales)
    let candidates: Vec<Option<f32>> = match (options.target.is_integer(), options.smoothing, calibration) {
        (true, Smoothing::Auto, Some(_)) => vec![None, Some(0.25), Some(0.5), Some(0.75)],
        (true, Smoothing::Alpha(a), Some(_)) => vec![Some(a)],
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

    // Sensitivity: each matrix alone in int8 or int4; keep the costliest in f16.
    let mut solo = vec![None; source.tensors.len()];
    let mut auto_kept: Vec<TensorName> = Vec::new();
    if let (Some(tokens), Some(reference), true) = (calibration, f32_bits, options.auto_keep_f16 > 0) {
        let all_int8 = plan_with(alpha, &keep);
        for (index, (name, _, _)) in source.tensors.iter().enumerate() {
            if !matches!(all_int8[index], Plan::Int8(_) | Plan::Int4(_)) {
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
    let mut plans = plan_with(alpha, &kept);
    let mut rounding = Rounding {
        methods: plans
            .iter()
            .map(|plan| matches!(plan, Plan::Int8(_) | Plan::Int4(_)).then_some(Method::Round))
            .collect(),
        reports: vec![None; plans.len()],
    };
    if let (Some(tokens), true, Method::Compensated | Method::Auto) =
        (calibration, options.target.is_integer(), options.method)
    {
        progress("calibrating: input Gram matrices");
        let grams = input_grams(model, options.session, tokens)?;
        rounding = choose_rounding(&source, &mut plans, &grams, options, tokens, &mut progress)?;
    }
    progress("writing the image");
    let (image, sqnr) = source.build(&plans)?;

    let mut bits = Vec::new();
    let mut layer_errors = Vec::new();
    if let (Some(tokens), Some(reference)) = (calibration, f32_bits) {
        progress("measuring");
        bits.push(("f32".to_string(), reference));
        if options.target.is_integer() {
            let (f16_image, _) = source.build(&plan_with(None, &|_| true))?;
            bits.push((
                "f16".to_string(),
                bits_per_token(&f16_image, options.session, tokens)?,
            ));
        }
        let label = options.target.to_string();
        bits.push((label.clone(), bits_per_token(&image, options.session, tokens)?));
        let (memory, memory_label) = match options.target {
            Target::F16 => (MemDtype::F16, "f16"),
            Target::Int8 | Target::Int4 | Target::Int4All => (MemDtype::Int8, "int8"),
        };
        let with_memory = SessionOptions {
            mem_dtype: memory,
            ..options.session
        };
        bits.push((
            format!("{label} + {memory_label} memory"),
            bits_per_token(&image, with_memory, tokens)?,
        ));
        layer_errors = measure_layer_errors(model, &image, options.session, tokens)?;
    }

    let tensors = source
        .tensors
        .iter()
        .zip(&plans)
        .zip(sqnr.iter().zip(&solo))
        .zip(rounding.methods.iter().zip(rounding.reports))
        .map(
            |((((name, shape, _), plan), (&sqnr_db, &solo_delta_bits)), (&method, rounding))| TensorReport {
                name: name.to_string(),
                dtype: plan.dtype(),
                shape: {
                    let (dims, n) = shape.dims();
                    dims[..n].to_vec()
                },
                sqnr_db,
                solo_delta_bits,
                method,
                rounding,
            },
        )
        .collect();
    let report = Report {
        target: options.target,
        method: options.method,
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

/// How each tensor was rounded, and the two roundings compared.
struct Rounding {
    methods: Vec<Option<Method>>,
    reports: Vec<Option<RoundingReport>>,
}

/// Quantizes every int8 and int4 tensor of `plans` both ways where it has calibration inputs,
/// and keeps the compensated rounding everywhere ([`Method::Compensated`]) or, tensor by tensor
/// in image order, where it lowers the calibration bits per token ([`Method::Auto`]). The plans
/// become [`Plan::Quantized`] or [`Plan::Int4Quantized`].
fn choose_rounding(
    source: &Source,
    plans: &mut [Plan],
    grams: &InputGrams,
    options: &QuantizeOptions,
    tokens: &[u32],
    progress: &mut impl FnMut(&str),
) -> Result<Rounding, Error> {
    let mut methods = vec![None; plans.len()];
    let mut reports = vec![None; plans.len()];
    let mut compensated = Vec::new();
    for (index, plan) in plans.iter_mut().enumerate() {
        let (name, _, data) = &source.tensors[index];
        let cols = source.cols(index);
        let gram = grams.of(&source.config, *name);
        // each rounding, as a plan and the matrix it stands for
        let (plain, other) = match plan {
            Plan::Int8(smooth) => {
                let smooth = smooth.as_deref();
                let plain = int8::quantize(data, cols, smooth);
                let back = plain.dequantize(cols);
                let other = gram.map(|gram| {
                    progress(&format!("compensating: {name}"));
                    let other = gptq::quantize(data, cols, smooth, gram, gptq::DAMPENING);
                    let back = other.dequantize(cols);
                    (Plan::Quantized(Rc::new(other)), back, gram)
                });
                ((Plan::Quantized(Rc::new(plain)), back), other)
            }
            Plan::Int4(group) => {
                let plain = int4::quantize(data, cols, *group);
                let back = plain.dequantize(cols);
                let other = gram.map(|gram| {
                    progress(&format!("compensating: {name}"));
                    let other = gptq::quantize_int4(data, cols, *group, gram, gptq::DAMPENING);
                    let back = other.dequantize(cols);
                    (Plan::Int4Quantized(Rc::new(other)), back, gram)
                });
                ((Plan::Int4Quantized(Rc::new(plain)), back), other)
            }
            _ => continue,
        };
        if let Some((other, other_back, gram)) = other {
            let output_error = |back: &[f32]| gptq::output_error(data, back, gram).unwrap_or(f64::NAN);
            reports[index] = Some(RoundingReport {
                round_sqnr_db: int8::sqnr_db(data, &plain.1),
                compensated_sqnr_db: int8::sqnr_db(data, &other_back),
                round_output_error: output_error(&plain.1),
                compensated_output_error: output_error(&other_back),
                bits_per_token: None,
            });
            compensated.push((index, other));
        }
        *plan = plain.0;
        methods[index] = Some(Method::Round);
    }
    match options.method {
        Method::Round => {}
        Method::Compensated => {
            for (index, other) in compensated {
                plans[index] = other;
                methods[index] = Some(Method::Compensated);
            }
        }
        Method::Auto => {
            let mut best = bits_per_token(&source.build(plans)?.0, options.session, tokens)?;
            for (index, other) in compensated {
                progress(&format!(
                    "rounding: trying {} compensated",
                    source.tensors[index].0
                ));
                let previous = std::mem::replace(&mut plans[index], other);
                let bits = bits_per_token(&source.build(plans)?.0, options.session, tokens)?;
                if let Some(report) = &mut reports[index] {
                    report.bits_per_token = Some([best, bits]);
                }
                if bits < best {
                    best = bits;
                    methods[index] = Some(Method::Compensated);
                } else {
                    plans[index] = previous;
                }
            }
        }
    }
    Ok(Rounding { methods, reports })
}

/// Records every layer's output for one segment, or compares against a recording.
struct LayerOutputs {
    d_model: usize,
    /// `(n_layer, tgt_len, d_model)` the reference's outputs of the current segment (`tgt_len`
    /// no more than the tokens).
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
) -> Result<Vec<f64>, Error> {
    let candidate_bytes = AlignedBytes::copy_from(candidate)?;
    let candidate = Model::parse(candidate_bytes.bytes())?;
    let config = *reference.config();
    let mut ref_arena = txl_core::scoring::arena_for(reference, &options)?;
    let mut cand_arena = txl_core::scoring::arena_for(&candidate, &options)?;
    let mut ref_session = Session::new(reference, ref_arena.bytes_mut(), options)?;
    let mut cand_session = Session::new(&candidate, cand_arena.bytes_mut(), options)?;
    let tgt_len = options.tgt_len as usize;
    // (n_layer, rows, d_model), rows the longest segment the tokens fill: allocated fallibly.
    let rows = tgt_len.min(tokens.len());
    let d_model = config.d_model as usize;
    let recorded = filled(
        (config.n_layer as usize)
            .saturating_mul(rows)
            .saturating_mul(d_model),
        0.0,
        "the layer outputs",
    )?;
    let mut probe = LayerOutputs {
        d_model,
        recorded,
        tgt_len: rows,
        sums: vec![(0.0, 0.0); config.n_layer as usize],
        comparing: false,
    };
    for segment in tokens.chunks(tgt_len) {
        probe.comparing = false;
        ref_session.forward_probed(segment, |_, _| {}, &mut probe)?;
        probe.comparing = true;
        cand_session.forward_probed(segment, |_, _| {}, &mut probe)?;
    }
    Ok(probe
        .sums
        .iter()
        .map(|&(diff, norm)| (diff / norm.max(f64::MIN_POSITIVE)).sqrt())
        .collect())
}

/// The input range that smoothing a tensor's columns would use, if it has one.
fn input_range<'r>(config: &Config, name: TensorName, ranges: &'r ChannelRanges) -> Option<&'r [f32]> {
    let layer_input = |layer: u32, linear| Some(ranges.linear_input(layer as usize, linear));
    match name {
        TensorName::Layer(l, LayerTensor::QkvWeight) => layer_input(l, Linear::Qkv),
        TensorName::Layer(l, LayerTensor::OWeight) => layer_input(l, Linear::ONet),
        TensorName::Layer(l, LayerTensor::Ff1Weight) => layer_input(l, Linear::Ff1),
        TensorName::Layer(l, LayerTensor::Ff2Weight) => layer_input(l, Linear::Ff2),
        // A tied embedding table is also the output layer: smooth for that use.
        TensorName::EmbLayer(t) if config.tie_weight => Some(&ranges.out_tables[t as usize]),
        TensorName::OutWeight(t) => Some(&ranges.out_tables[t as usize]),
        TensorName::ClusterWeight => Some(&ranges.cluster_head),
        TensorName::EmbProj(t) => Some(&ranges.emb_proj[t as usize]),
        _ => None,
    }
}

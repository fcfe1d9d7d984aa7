//! The calibrated quantizer: smoothing search, sensitivity pass and the measured report.

use txl_core::tensors::{LayerTensor, TensorName};
use txl_core::{AlignedBytes, MemDtype, Model, Probe, Session, SessionOptions};
use txl_core::{Config, Linear};

use std::rc::Rc;

use super::calibrate::{smoothing_factors, ChannelRanges};
use super::inputs::InputGrams;
use super::options::{check_group, glob_match, Method, MixedPrecision, QuantizeOptions, Smoothing, Target};
use super::report::{Quantized, Report, RoundingReport, TensorReport};
use super::source::{Plan, Source};
use super::{gptq, int4, int8};
use crate::error::{filled, Error};
use crate::reference::Reference;

/// Bits per token of `image` on `tokens`, measured with the core (the engine that runs int8).
pub(super) fn bits_per_token(image: &[u8], options: SessionOptions, tokens: &[u32]) -> Result<f64, Error> {
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
    progress: impl FnMut(&str),
) -> Result<Quantized, Error> {
    quantize_mixed(model, options, &MixedPrecision::default(), calibration, progress)
}

/// A matrix's precision while the plans are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Int4,
    Int8,
    F16,
}

/// [`quantize`], with some tensors kept at a higher precision as `mixed` says.
pub fn quantize_mixed(
    model: &Model<'_>,
    options: &QuantizeOptions,
    mixed: &MixedPrecision,
    calibration: Option<&[u32]>,
    mut progress: impl FnMut(&str),
) -> Result<Quantized, Error> {
    check_group(options.group)?;
    let source = Source::read(model);
    let config = source.config;
    if options.target == Target::F16 && options.method != Method::Round {
        return Err(Error::BadOptions(format!(
            "the rounding method ({}) applies to int8 and int4 weights, not f16",
            options.method
        )));
    }
    let int4_target = matches!(options.target, Target::Int4 | Target::Int4All);
    if mixed.auto_keep_int8 > 0 && !int4_target {
        return Err(Error::BadOptions(format!(
            "keeping tensors in int8 (--auto-keep-int8) applies to int4 targets, not {}",
            options.target
        )));
    }
    let needs_calibration = (options.smoothing != Smoothing::Off || options.method == Method::Compensated)
        && options.target.is_integer()
        || options.auto_keep_f16 > 0
        || mixed.auto_keep_int8 > 0
        || mixed.budget_bytes.is_some();
    if needs_calibration && calibration.is_none() {
        return Err(Error::BadOptions(
            "activation smoothing, error-compensated rounding, the sensitivity pass and the byte budget need calibration text (--calib-bytes or --calib-tokens)"
                .into(),
        ));
    }
    // The reference's statistics: ranges for smoothing, Gram matrices for compensated rounding.
    let wants_grams = matches!(options.method, Method::Compensated | Method::Auto);
    // `auto` fits its candidates on the start of the text and judges them on the rest.
    let auto_split = match (options.method, calibration) {
        (Method::Auto, Some(tokens)) if options.target.is_integer() => {
            let split = Method::auto_split(tokens.len());
            if split == 0 || tokens.len() - split < 2 {
                return Err(Error::BadOptions(format!(
                    "the rounding method auto fits on one half of the calibration text and \
                     chooses on the other: {} tokens are too few (4 at least)",
                    tokens.len()
                )));
            }
            Some(split)
        }
        _ => None,
    };
    let (ranges, grams) = match (calibration, options.target.is_integer()) {
        (Some(tokens), true) => {
            let backend = options.calibration_backend;
            progress(&format!(
                "calibrating on {}: activation ranges{}",
                backend.name(),
                if wants_grams {
                    " and input Gram matrices"
                } else {
                    ""
                }
            ));
            let mut reference = Reference::new(model, backend)?;
            let statistics = reference.statistics(&[tokens], &options.session, wants_grams)?;
            (Some(statistics.ranges), statistics.grams)
        }
        _ => (None, None),
    };
    let fit_grams = match (calibration, auto_split) {
        (Some(tokens), Some(split)) => {
            progress(&format!(
                "calibrating on {}: input Gram matrices of the first {split} tokens",
                options.calibration_backend.name()
            ));
            let mut reference = Reference::new(model, options.calibration_backend)?;
            reference
                .statistics(&[&tokens[..split]], &options.session, true)?
                .grams
        }
        _ => None,
    };
    // Each tensor's precision (`None`: a vector, f32) and why it is above the target's.
    let mut levels: Vec<Option<Level>> = source
        .tensors
        .iter()
        .map(|(name, _, _)| {
            name.is_matrix().then_some(match options.target {
                Target::F16 => Level::F16,
                _ if options.target.is_int4(*name) => Level::Int4,
                _ => Level::Int8,
            })
        })
        .collect();
    let mut kept_for: Vec<Option<&'static str>> = vec![None; levels.len()];
    for ((name, _, _), (level, why)) in source.tensors.iter().zip(levels.iter_mut().zip(&mut kept_for)) {
        let text = name.to_string();
        if level.is_some_and(|l| l != Level::F16) && options.keep_f16.iter().any(|p| glob_match(p, &text)) {
            (*level, *why) = (Some(Level::F16), Some("keep-f16"));
        }
    }
    let plan_with = |alpha: Option<f32>, levels: &[Option<Level>]| -> Vec<Plan> {
        levels
            .iter()
            .enumerate()
            .map(|(index, level)| match level {
                None => Plan::vector(options.vectors),
                Some(Level::F16) => Plan::F16,
                Some(Level::Int4) => Plan::Int4(options.group),
                Some(Level::Int8) => {
                    let (name, _, data) = &source.tensors[index];
                    let smooth = alpha.zip(ranges.as_ref()).and_then(|(alpha, ranges)| {
                        let range = input_range(&config, *name, ranges)?;
                        let pow2 = options.power_of_two_smoothing;
                        smoothing_factors(&model.image().matrix(index), data, range, (alpha, pow2))
                    });
                    Plan::Int8(smooth)
                }
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
            let (image, _) = source.build(&plan_with(candidate, &levels))?;
            let bits = bits_per_token(&image, options.session, tokens)?;
            search.push((candidate, bits));
            if bits < best {
                (best, alpha) = (bits, candidate);
            }
        }
    }

    // Sensitivity: each matrix alone in int8 or int4 (an int4 one also in int8, for `mixed`).
    let mut solo = vec![None; source.tensors.len()];
    let mut solo_int8 = vec![None; source.tensors.len()];
    let sensitivity = options.auto_keep_f16 > 0 || mixed.auto_keep_int8 > 0 || mixed.budget_bytes.is_some();
    if let (Some(tokens), Some(reference), true) = (calibration, f32_bits, sensitivity) {
        let int4_also_int8 = mixed.auto_keep_int8 > 0 || mixed.budget_bytes.is_some();
        for (index, (name, _, _)) in source.tensors.iter().enumerate() {
            let mut measure = |level: Level| -> Result<f64, Error> {
                progress(&format!("sensitivity: {name} {level:?}"));
                let mut alone = vec![None; levels.len()];
                alone[index] = Some(level);
                let plans = plan_with(alpha, &alone);
                let (image, _) = source.build(&plans)?;
                Ok(bits_per_token(&image, options.session, tokens)? - reference)
            };
            match levels[index] {
                Some(Level::Int8) => solo[index] = Some(measure(Level::Int8)?),
                Some(Level::Int4) => {
                    solo[index] = Some(measure(Level::Int4)?);
                    if int4_also_int8 {
                        solo_int8[index] = Some(measure(Level::Int8)?);
                    }
                }
                _ => {}
            }
        }
    }
    // The costliest first, among the tensors at `level` with a measured cost.
    let ranked = |levels: &[Option<Level>], level: Level| -> Vec<usize> {
        let mut ranked: Vec<usize> = (0..solo.len())
            .filter(|&i| solo[i].is_some() && levels[i] == Some(level))
            .collect();
        ranked.sort_by(|&a, &b| solo[b].partial_cmp(&solo[a]).unwrap_or(std::cmp::Ordering::Equal));
        ranked
    };
    if options.auto_keep_f16 > 0 {
        let mut costly: Vec<usize> = ranked(&levels, Level::Int8);
        costly.extend(ranked(&levels, Level::Int4));
        costly.sort_by(|&a, &b| solo[b].partial_cmp(&solo[a]).unwrap_or(std::cmp::Ordering::Equal));
        for index in costly.into_iter().take(options.auto_keep_f16) {
            (levels[index], kept_for[index]) = (Some(Level::F16), Some("auto-keep-f16"));
        }
    }
    for index in ranked(&levels, Level::Int4)
        .into_iter()
        .take(mixed.auto_keep_int8)
    {
        (levels[index], kept_for[index]) = (Some(Level::Int8), Some("auto-keep-int8"));
    }
    let mut smallest_image_bytes = None;
    if let Some(budget) = mixed.budget_bytes {
        progress("fitting the byte budget");
        let smallest = source.image_bytes(&plan_with(alpha, &levels))?;
        if smallest > budget {
            return Err(Error::BadOptions(format!(
                "the smallest image these options make is {smallest} bytes, {} over the budget of {budget} bytes: \
                 a smaller precision (int4 or int4-all, larger int4 groups) or a larger budget",
                smallest - budget
            )));
        }
        smallest_image_bytes = Some(smallest);
        spend_budget(
            budget,
            smallest,
            &mut levels,
            &mut kept_for,
            (&solo, &solo_int8),
            |levels| source.image_bytes(&plan_with(alpha, levels)),
        )?;
    }

    let mut plans = plan_with(alpha, &levels);
    let mut rounding = Rounding {
        methods: plans
            .iter()
            .map(|plan| matches!(plan, Plan::Int8(_) | Plan::Int4(_)).then_some(Method::Round))
            .collect(),
        reports: vec![None; plans.len()],
    };
    if let (Some(tokens), Some(grams)) = (calibration, &grams) {
        let auto = fit_grams.as_ref().zip(auto_split);
        rounding = choose_rounding(&source, &mut plans, (grams, auto), options, tokens, &mut progress)?;
    }
    progress("writing the image");
    let (image, sqnr) = source.build(&plans)?;
    if let Some(budget) = mixed.budget_bytes {
        if image.len() > budget {
            return Err(Error::BadOptions(format!(
                "the image came to {} bytes, over the budget of {budget} bytes",
                image.len()
            )));
        }
    }

    let mut bits = Vec::new();
    let mut layer_errors = Vec::new();
    if let (Some(tokens), Some(reference)) = (calibration, f32_bits) {
        progress("measuring");
        bits.push(("f32".to_string(), reference));
        if options.target.is_integer() {
            let all_f16: Vec<Option<Level>> = levels.iter().map(|l| l.map(|_| Level::F16)).collect();
            let (f16_image, _) = source.build(&plan_with(None, &all_f16))?;
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
        .zip(sqnr.iter().zip(solo.iter().zip(&solo_int8)))
        .zip(rounding.methods.iter().zip(rounding.reports))
        .zip(&kept_for)
        .map(
            |(
                (
                    (((name, shape, _), plan), (&sqnr_db, (&solo_delta_bits, &solo_delta_bits_int8))),
                    (&method, rounding),
                ),
                &kept_for,
            )| TensorReport {
                name: name.to_string(),
                dtype: plan.dtype(),
                shape: {
                    let (dims, n) = shape.dims();
                    dims[..n].to_vec()
                },
                sqnr_db,
                solo_delta_bits,
                solo_delta_bits_int8,
                kept_for,
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
        rounding_choice: auto_split
            .zip(calibration)
            .map(|(split, tokens)| [split, tokens.len() - split]),
        statistics_backend: ranges.is_some().then(|| options.calibration_backend.name()),
        image_bytes: image.len(),
        budget_bytes: mixed.budget_bytes,
        smallest_image_bytes,
        parameters: source.parameters(),
        precisions: Vec::new(),
    };
    Ok(Quantized { image, report })
}

/// Spends a byte budget: from `levels` (an image of `bytes` bytes), raises one matrix a
/// precision at a time (int4 to int8, int8 to f16), each time the one with the largest measured
/// gain in bits per token per byte added among those the budget still has room for, until none
/// fits or gains. A tensor's cost at a precision is its measured solo cost (`solo` at the
/// precision it started at, `solo_int8` at int8 for one that started at int4); f16 counts as
/// lossless. `bytes_of` gives the bytes of an image with the levels given: each raise is checked
/// against it, so the image stays within the budget whatever the layout.
fn spend_budget(
    budget: usize,
    mut bytes: usize,
    levels: &mut [Option<Level>],
    kept_for: &mut [Option<&'static str>],
    (solo, solo_int8): (&[Option<f64>], &[Option<f64>]),
    bytes_of: impl Fn(&[Option<Level>]) -> Result<usize, Error>,
) -> Result<(), Error> {
    let start = levels.to_vec();
    let cost = |index: usize, level: Level| -> Option<f64> {
        match (start[index]?, level) {
            (_, Level::F16) => Some(0.0),
            (Level::Int4, Level::Int4) | (Level::Int8, Level::Int8) => solo[index],
            (Level::Int4, Level::Int8) => solo_int8[index],
            _ => None,
        }
    };
    let raise = |level: Level| match level {
        Level::Int4 => Some(Level::Int8),
        Level::Int8 => Some(Level::F16),
        Level::F16 => None,
    };
    // The bytes each tensor adds at each precision above its start, computed once (each tensor
    // is aligned on its own in the image, so they do not depend on the others).
    let mut extra = vec![[0usize; 3]; levels.len()];
    for (index, level) in start.iter().enumerate() {
        let mut trial = start.clone();
        let mut level = *level;
        while let Some(to) = level.and_then(raise) {
            trial[index] = Some(to);
            extra[index][to as usize] = bytes_of(&trial)?.saturating_sub(bytes);
            level = Some(to);
        }
    }
    let mut blocked = vec![false; levels.len()];
    loop {
        // (tensor, precision, gain in bits per token, bytes added)
        let best = (0..levels.len())
            .filter(|&index| !blocked[index])
            .filter_map(|index| {
                let from = levels[index]?;
                let to = raise(from)?;
                let gain = cost(index, from)? - cost(index, to)?;
                let add = extra[index][to as usize]
                    .saturating_sub(extra[index][from as usize])
                    .max(1);
                (gain > 0.0 && bytes + add <= budget).then_some((index, to, gain / add as f64))
            })
            .max_by(|a, b| a.2.total_cmp(&b.2));
        let Some((index, to, _)) = best else { break };
        let from = levels[index];
        levels[index] = Some(to);
        let now = bytes_of(levels)?;
        if now > budget {
            (levels[index], blocked[index]) = (from, true);
            continue;
        }
        bytes = now;
        kept_for[index] = Some("budget");
    }
    Ok(())
}

/// How each tensor was rounded, and the two roundings compared.
struct Rounding {
    methods: Vec<Option<Method>>,
    reports: Vec<Option<RoundingReport>>,
}

/// Quantizes every int8 and int4 tensor of `plans` both ways where it has calibration inputs
/// (`grams`, from all of `tokens`), and keeps the compensated rounding everywhere
/// ([`Method::Compensated`]) or, tensor by tensor in image order, where it lowers the bits per
/// token ([`Method::Auto`]). For `auto`, `auto` holds the Gram matrices of `tokens[..split]` and
/// `split`: the candidates are compensated with those and measured on `tokens[split..]`, text
/// they were not fitted on, and the tensors chosen are then compensated with `grams`. The plans
/// become [`Plan::Quantized`] or [`Plan::Int4Quantized`].
fn choose_rounding(
    source: &Source,
    plans: &mut [Plan],
    (grams, auto): (&InputGrams, Option<(&InputGrams, usize)>),
    options: &QuantizeOptions,
    tokens: &[u32],
    progress: &mut impl FnMut(&str),
) -> Result<Rounding, Error> {
    let mut methods = vec![None; plans.len()];
    let mut reports = vec![None; plans.len()];
    // (tensor, compensated with all the text, compensated with the fitting part for `auto`)
    let mut compensated = Vec::new();
    for (index, plan) in plans.iter_mut().enumerate() {
        let (name, _, data) = &source.tensors[index];
        let cols = source.cols(index);
        let gram = grams.of(&source.config, *name);
        let fit_gram = auto.and_then(|(fit, _)| fit.of(&source.config, *name));
        // each rounding, as a plan and the matrix it stands for
        let (plain, other, trial) = match plan {
            Plan::Int8(smooth) => {
                let smooth = smooth.as_deref();
                let plain = int8::quantize(data, cols, smooth);
                let back = plain.dequantize(cols);
                let mut compensate = |gram| {
                    progress(&format!("compensating: {name}"));
                    gptq::quantize(data, cols, smooth, gram, gptq::DAMPENING)
                };
                let other = gram.map(|gram| {
                    let other = compensate(gram);
                    let back = other.dequantize(cols);
                    (Plan::Quantized(Rc::new(other)), back, gram)
                });
                let trial = fit_gram.map(|gram| Plan::Quantized(Rc::new(compensate(gram))));
                ((Plan::Quantized(Rc::new(plain)), back), other, trial)
            }
            Plan::Int4(group) => {
                let group = *group;
                let plain = int4::quantize(data, cols, group);
                let back = plain.dequantize(cols);
                let mut compensate = |gram| {
                    progress(&format!("compensating: {name}"));
                    gptq::quantize_int4(data, cols, group, gram, gptq::DAMPENING)
                };
                let other = gram.map(|gram| {
                    let other = compensate(gram);
                    let back = other.dequantize(cols);
                    (Plan::Int4Quantized(Rc::new(other)), back, gram)
                });
                let trial = fit_gram.map(|gram| Plan::Int4Quantized(Rc::new(compensate(gram))));
                ((Plan::Int4Quantized(Rc::new(plain)), back), other, trial)
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
            compensated.push((index, other, trial));
        }
        *plan = plain.0;
        methods[index] = Some(Method::Round);
    }
    match (options.method, auto) {
        // (`auto` without the fitting part's matrices has nothing it could judge fairly)
        (Method::Round, _) | (Method::Auto, None) => {}
        (Method::Compensated, _) => {
            for (index, other, _) in compensated {
                plans[index] = other;
                methods[index] = Some(Method::Compensated);
            }
        }
        (Method::Auto, Some((_, split))) => {
            let judged = &tokens[split..];
            let mut best = bits_per_token(&source.build(plans)?.0, options.session, judged)?;
            let mut chosen = Vec::new();
            for (index, other, trial) in compensated {
                let Some(trial) = trial else { continue };
                progress(&format!(
                    "rounding: trying {} compensated",
                    source.tensors[index].0
                ));
                let previous = std::mem::replace(&mut plans[index], trial);
                let bits = bits_per_token(&source.build(plans)?.0, options.session, judged)?;
                if let Some(report) = &mut reports[index] {
                    report.bits_per_token = Some([best, bits]);
                }
                if bits < best {
                    best = bits;
                    methods[index] = Some(Method::Compensated);
                    chosen.push((index, other));
                } else {
                    plans[index] = previous;
                }
            }
            // what was chosen on the held-back part, fitted on all of the text
            for (index, other) in chosen {
                plans[index] = other;
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
pub(super) fn measure_layer_errors(
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

#[cfg(test)]
mod tests {
    use super::{spend_budget, Level};

    /// Three matrices, 10 bytes in int4, 20 in int8, 40 in f16: the budget buys the largest
    /// gain per byte first, skips what no longer fits, and never goes over.
    #[test]
    fn the_budget_buys_the_largest_gain_per_byte_first() {
        let bytes_of = |levels: &[Option<Level>]| -> Result<usize, crate::error::Error> {
            Ok(levels
                .iter()
                .map(|l| match l {
                    None => 0,
                    Some(Level::Int4) => 10,
                    Some(Level::Int8) => 20,
                    Some(Level::F16) => 40,
                })
                .sum())
        };
        let start = [Some(Level::Int4), Some(Level::Int4), Some(Level::Int8), None];
        // int4 costs 0.5, 0.1; int8 0.1, 0.05, 0.2
        let solo = [Some(0.5), Some(0.1), Some(0.2), None];
        let solo_int8 = [Some(0.1), Some(0.05), None, None];
        let spend = |budget: usize| {
            let mut levels = start.to_vec();
            let mut kept_for = vec![None; levels.len()];
            let bytes = bytes_of(&levels).unwrap();
            spend_budget(
                budget,
                bytes,
                &mut levels,
                &mut kept_for,
                (&solo, &solo_int8),
                bytes_of,
            )
            .unwrap();
            (levels, kept_for)
        };
        let (int4, int8, f16) = (Some(Level::Int4), Some(Level::Int8), Some(Level::F16));
        assert_eq!(spend(40).0, start, "no room");
        // 0 to int8 (0.4 for 10 bytes) first; nothing else fits in 55
        let (levels, kept_for) = spend(55);
        assert_eq!(levels, [int8, int4, int8, None]);
        assert_eq!(kept_for, [Some("budget"), None, None, None]);
        // then 2 to f16 (0.2 for 20), then 1 to int8 (0.05 for 10): 80 bytes
        assert_eq!(spend(80).0, [int8, int8, f16, None]);
        // everything
        assert_eq!(spend(1000).0, [f16, f16, f16, None]);
    }
}

//! Integer-only arithmetic (`txl_host_gpu::integer`: every product, sum, LayerNorm and softmax
//! in integers) on int8 weights against the f64 reference on the f32 weights.
//!
//! - The trained demo and second models, calibrated on `calib.txt` (which sets the fixed-point
//!   format), scored on held-out text never used for calibration: at most +0.5% bits per token
//!   over the reference, in segments, streaming and from a zero memory with a clamp.
//! - Random models of three shapes (adaptive div_val 2 post-LN; pre-LN div_val 1 with
//!   projections; a plain untied softmax) under four session settings: within the bounds
//!   `int8_vs_reference.rs` holds the float arithmetic on int8 weights to.
//! - Every layer's output stays near the core's float arithmetic on the same int8 weights.
//!
//! `cargo test --release -p txl-tests --test integer_vs_reference -- --nocapture` prints the
//! measured figures.

use txl_core::{AlignedBytes, MemInit, Model, SessionOptions};
use txl_host_gpu::integer::IntegerModel;
use txl_host_gpu::quantize::{quantize_weights, Method, Target};
use txl_host_gpu::{Backend, Reference};
use txl_tests::{accuracy_configs, random_model, session_variants, tokens, trained_text};

const HELDOUT: usize = 2048;
const CALIBRATION: usize = 4096;

/// The fixed-point format calibrated on `calibration` with the f64 reference, and the model.
fn integer_model(model: &Model<'_>, calibration: &[u32]) -> IntegerModel {
    let options = SessionOptions::from_config(model.config());
    let ranges = Reference::new(model, Backend::Cpu64)
        .unwrap()
        .channel_ranges(&[calibration], &options)
        .unwrap();
    IntegerModel::new(model, IntegerModel::frac_for(&ranges)).unwrap()
}

fn within_half_a_percent(name: &str) {
    let text = trained_text(name, HELDOUT, CALIBRATION);
    let f32_model = Model::parse(text.f32_image.bytes()).unwrap();
    let mut reference = Reference::new(&f32_model, Backend::Cpu64).unwrap();
    let base = SessionOptions::from_config(f32_model.config());
    let mut failures = Vec::new();
    // smoothing in powers of two (as `txl quantize --integer` makes it), then in any scale
    for (power_of_two, about) in [
        (true, "smoothing in powers of two"),
        (false, "smoothing in any scale"),
    ] {
        let int8 = text
            .quantized_with(Target::Int8, Method::Compensated, power_of_two)
            .image;
        let int8 = AlignedBytes::copy_from(&int8).unwrap();
        let int8 = Model::parse(int8.bytes()).unwrap();
        let integer = integer_model(&int8, &text.calibration);
        for (label, options) in [
            ("segments", base),
            ("streaming", SessionOptions { tgt_len: 1, ..base }),
            (
                "zero memory, clamp_len 20",
                SessionOptions {
                    mem_init: MemInit::Zeros,
                    clamp_len: 20,
                    ..base
                },
            ),
        ] {
            let truth = reference
                .score(&text.heldout, &options, 0, |_| {})
                .unwrap()
                .bits_per_token();
            let float = txl_core::scoring::score(&int8, &text.heldout, options, 0, |_| {})
                .unwrap()
                .bits_per_token();
            let ours = integer.score(&text.heldout, &options).unwrap().bits_per_token();
            let relative = ours / truth - 1.0;
            println!(
                "{name}, {about}, {label}: Q{}, f64 {truth:.5} bits/token; int8 weights, float \
                 arithmetic {float:.5} ({:+.3}%), integer arithmetic {ours:.5} ({:+.3}%)",
                integer.frac(),
                100.0 * (float / truth - 1.0),
                100.0 * relative
            );
            if relative > 0.005 {
                failures.push(format!("{about}, {label}: {:+.3}%", 100.0 * relative));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: more than +0.5% bits per token: {failures:?}"
    );
}

#[test]
fn the_demo_model_loses_at_most_half_a_percent() {
    within_half_a_percent("demo");
}

#[test]
fn the_second_model_loses_at_most_half_a_percent() {
    within_half_a_percent("second");
}

/// int4 weights: the integer arithmetic within +0.5% of the float arithmetic on the same int4
/// weights (and, on this model, of the reference). Measured +0.013% over the reference
/// (segments and streaming), the float arithmetic -0.010%.
#[test]
fn int4_weights_lose_at_most_half_a_percent_more() {
    let text = trained_text("demo", HELDOUT, CALIBRATION);
    let int4 = AlignedBytes::copy_from(&text.quantized(Target::Int4, Method::Compensated).image).unwrap();
    let int4 = Model::parse(int4.bytes()).unwrap();
    let integer = integer_model(&int4, &text.calibration);
    let f32_model = Model::parse(text.f32_image.bytes()).unwrap();
    let mut reference = Reference::new(&f32_model, Backend::Cpu64).unwrap();
    let base = SessionOptions::from_config(int4.config());
    for (label, options) in [
        ("segments", base),
        ("streaming", SessionOptions { tgt_len: 1, ..base }),
    ] {
        let truth = reference
            .score(&text.heldout, &options, 0, |_| {})
            .unwrap()
            .bits_per_token();
        let float = txl_core::scoring::score(&int4, &text.heldout, options, 0, |_| {})
            .unwrap()
            .bits_per_token();
        let ours = integer.score(&text.heldout, &options).unwrap().bits_per_token();
        println!(
            "demo int4, {label}: f64 {truth:.5}; int4 weights, float arithmetic {float:.5} ({:+.3}%), integer \
             arithmetic {ours:.5} ({:+.3}%)",
            100.0 * (float / truth - 1.0),
            100.0 * (ours / truth - 1.0)
        );
        assert!(ours / float - 1.0 < 0.005, "{label}: {ours} against {float}");
        // on this model int4 weights stay within half a percent of the reference as well
        assert!(ours / truth - 1.0 < 0.005, "{label}: {ours} against {truth}");
    }
}

// Measured worst over 3 shapes × 2 seeds × 4 settings: max |Δ ln p| 0.418, |Δ bits/token| 0.026
// (the float arithmetic on int8 weights: 0.461 and 0.047 over 4 seeds); the bounds are
// int8_vs_reference.rs's for int8 weights with float arithmetic.
#[test]
fn random_models_stay_within_the_int8_bounds() {
    let (mut worst_delta, mut worst_bits) = (0.0f64, 0.0f64);
    for (name, config) in accuracy_configs() {
        for seed in 1..=2 {
            let f32_image = random_model(&config, 80 + seed);
            let f32_model = Model::parse(f32_image.bytes()).unwrap();
            let int8 = AlignedBytes::copy_from(&quantize_weights(&f32_model, Target::Int8).unwrap()).unwrap();
            let int8 = Model::parse(int8.bytes()).unwrap();
            let integer = integer_model(&int8, &tokens(256, config.n_token, 90 + seed));
            let mut reference = Reference::new(&f32_model, Backend::Cpu64).unwrap();
            let text = tokens(64, config.n_token, 70 + seed);
            for options in session_variants(SessionOptions::from_config(&config)) {
                let truth = reference.score(&text, &options, 0, |_| {}).unwrap();
                let ours = integer.score(&text, &options).unwrap();
                let delta = truth
                    .logp
                    .iter()
                    .zip(ours.ln_p())
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                let bits = (ours.bits_per_token() - truth.bits_per_token()).abs();
                println!(
                    "{name} seed {seed} tgt {} mem {} clamp {} same_length {} {}: Q{}, max |Δ ln p| {delta:.3e}, \
                     |Δ bits/token| {bits:.3e}",
                    options.tgt_len,
                    options.mem_len,
                    options.clamp_len,
                    options.same_length,
                    options.mem_init,
                    integer.frac()
                );
                worst_delta = worst_delta.max(delta);
                worst_bits = worst_bits.max(bits);
            }
        }
    }
    println!("worst: max |Δ ln p| {worst_delta:.3e}, |Δ bits/token| {worst_bits:.3e}");
    assert!(
        worst_delta < 1.4 && worst_bits < 0.14,
        "{worst_delta} {worst_bits}"
    );
    assert!(worst_delta > 0.0, "integer arithmetic cannot match f64 exactly");
}

#[test]
fn every_layer_follows_the_float_arithmetic() {
    let text = trained_text("demo", 64, CALIBRATION);
    let int8 = AlignedBytes::copy_from(&text.quantized(Target::Int8, Method::Compensated).image).unwrap();
    let int8 = Model::parse(int8.bytes()).unwrap();
    let integer = integer_model(&int8, &text.calibration);
    let options = SessionOptions::from_config(int8.config());
    let tokens = &text.heldout[..33];
    let step = (0.5f64).powi(integer.frac() as i32);
    let mut ours = Vec::new();
    integer
        .score_probed(tokens, &options, |layer, position, h| {
            ours.push((
                layer,
                position,
                h.iter().map(|&v| v as f64 * step).collect::<Vec<_>>(),
            ))
        })
        .unwrap();
    struct Outputs(Vec<(usize, usize, Vec<f64>)>);
    impl txl_core::Probe for Outputs {
        fn layer_output(&mut self, layer: usize, position: usize, hidden: &[f32]) {
            self.0
                .push((layer, position, hidden.iter().map(|&v| v as f64).collect()));
        }
    }
    let mut theirs = Outputs(Vec::new());
    let mut arena = vec![0u128; txl_core::Session::arena_bytes(&int8, &options).unwrap() / 16 + 1];
    let mut session = txl_core::Session::new(&int8, bytemuck::cast_slice_mut(&mut arena), options).unwrap();
    session
        .forward_probed(&tokens[..32], |_, _| {}, &mut theirs)
        .unwrap();
    assert_eq!(ours.len(), theirs.0.len());
    let mut worst = 0.0f64;
    for ((layer, position, h), (l, p, f)) in ours.iter().zip(&theirs.0) {
        assert_eq!((layer, position), (l, p));
        let delta = h.iter().zip(f).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        let size = f.iter().map(|v| v.abs()).fold(0.0, f64::max);
        worst = worst.max(delta / size);
    }
    // measured 0.012 (the int8 rounding of the two paths differs in the last place)
    println!("largest |Δ h| / max |h| over every layer and position: {worst:.4}");
    assert!(worst < 0.05, "{worst}");
}

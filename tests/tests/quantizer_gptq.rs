//! Error-compensated int8 rounding (GPTQ) against plain rounding on the bundled trained model and
//! on the `adaptive_div2` reference model: calibrated on one text, measured on another.

use txl_core::AlignedBytes;
use txl_core::{MemDtype, Model, SessionOptions};
use txl_host_gpu::quantize::{quantize, Method, QuantizeOptions, Quantized, Smoothing, Target};
use txl_tests::{demo_text, fixtures_dir, sampled_text, QuantizationText};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::compare::{compare, Comparison};

/// Held-out tokens scored (as `quantized_accuracy.rs`).
const HELDOUT_TOKENS: usize = 8192;
/// Calibration tokens (from the training text).
const CALIBRATION_TOKENS: usize = 4096;

/// The f32 image and its held-out and calibration tokens.
type Fixture = QuantizationText;

fn demo() -> Fixture {
    demo_text(HELDOUT_TOKENS, CALIBRATION_TOKENS)
}

/// `adaptive_div2` on text sampled from its f32 self, calibration and evaluation from different
/// seeds (as `quantized_accuracy.rs`).
fn adaptive_div2() -> Fixture {
    let dir = fixtures_dir().join("adaptive_div2");
    let checkpoint = load_hf_checkpoint(&dir, CheckpointFormat::Safetensors, false).unwrap();
    let f32_image = AlignedBytes::copy_from(&checkpoint.to_image().unwrap()).unwrap();
    let model = Model::parse(f32_image.bytes()).unwrap();
    let calibration = sampled_text(&model, 2048, 1);
    let heldout = sampled_text(&model, 4096, 2);
    Fixture {
        f32_image,
        heldout,
        calibration,
    }
}

fn quantized(f: &Fixture, method: Method) -> Quantized {
    let model = Model::parse(f.f32_image.bytes()).unwrap();
    let options = QuantizeOptions {
        smoothing: Smoothing::Auto,
        method,
        ..QuantizeOptions::weights_only(Target::Int8, SessionOptions::from_config(model.config()))
    };
    quantize(&model, &options, Some(&f.calibration), |_| {}).unwrap()
}

/// The candidate (f32 memory) against f32 on the held-out text.
fn measure(f: &Fixture, candidate: &[u8]) -> Comparison {
    measure_with_memory(f, candidate, MemDtype::F32)
}

/// The candidate with `mem_dtype` memory against f32 (f32 memory) on the held-out text.
fn measure_with_memory(f: &Fixture, candidate: &[u8], mem_dtype: MemDtype) -> Comparison {
    let reference = Model::parse(f.f32_image.bytes()).unwrap();
    let candidate = AlignedBytes::copy_from(candidate).unwrap();
    let candidate = Model::parse(candidate.bytes()).unwrap();
    let options = SessionOptions::from_config(reference.config());
    let candidate_options = SessionOptions { mem_dtype, ..options };
    let result = compare(
        (&reference, options),
        (&candidate, candidate_options),
        &f.heldout,
        |_| {},
    )
    .unwrap();
    println!("{mem_dtype:?} memory: {result:?}");
    result
}

/// Calibration bits per token of the image, from its report.
fn calibration_bits(q: &Quantized) -> f64 {
    q.report
        .bits_per_token
        .iter()
        .find(|(label, _)| label == "int8")
        .unwrap()
        .1
}

/// PyTorch's dynamic int8 of the Linear layers on the demo model and the same held-out text
/// (`tools/reference/pytorch_quantization.py`, checked to describe the committed model and text).
fn pytorch_dynamic_int8_relative_delta() -> f64 {
    txl_tests::pytorch_baseline("demo", "dynamic_int8_linear", HELDOUT_TOKENS)["relative_delta"]
        .as_f64()
        .unwrap()
}

/// The three roundings of one model, measured on its held-out text.
struct Measured {
    round: (Quantized, Comparison),
    compensated: (Quantized, Comparison),
    auto: (Quantized, Comparison),
}

fn measure_all(name: &str, f: &Fixture) -> Measured {
    let run = |method| {
        let q = quantized(f, method);
        let r = measure(f, &q.image);
        println!(
            "{name}, {method}: held-out relative Δ {:+.4}%, mean KL {:.3e}; calibration bits/token {:.6}",
            100.0 * r.relative_delta,
            r.mean_kl,
            calibration_bits(&q)
        );
        (q, r)
    };
    Measured {
        round: run(Method::Round),
        compensated: run(Method::Compensated),
        auto: run(Method::Auto),
    }
}

/// What every report of these runs must show: the method asked for, each int8 tensor's
/// method, both roundings compared where a tensor has calibration inputs, and GPTQ's defining
/// property on those inputs: a lower output error than plain rounding, for every tensor, at
/// most `max_error_ratio` of it.
fn check_reports(m: &Measured, max_error_ratio: f64) {
    for (q, method) in [
        (&m.round.0, Method::Round),
        (&m.compensated.0, Method::Compensated),
        (&m.auto.0, Method::Auto),
    ] {
        assert_eq!(q.report.method, method);
        let mut compared = 0;
        for t in &q.report.tensors {
            assert_eq!(t.method.is_some(), t.dtype == "int8", "{method}: {}", t.name);
            let Some(r) = &t.rounding else {
                continue;
            };
            compared += 1;
            let ratio = r.compensated_output_error / r.round_output_error;
            println!(
                "  {method}: {} ({:?}): SQNR {:.2} / {:.2} dB, output error {:.3e} / {:.3e} (x{ratio:.2}), bits {:?}",
                t.name,
                t.method,
                r.round_sqnr_db,
                r.compensated_sqnr_db,
                r.round_output_error,
                r.compensated_output_error,
                r.bits_per_token
            );
            assert!(
                ratio < max_error_ratio,
                "{}: compensated output error {:.3e} against plain {:.3e}",
                t.name,
                r.compensated_output_error,
                r.round_output_error
            );
            match method {
                Method::Round => unreachable!("plain rounding compares nothing"),
                Method::Compensated => assert_eq!(t.method, Some(Method::Compensated), "{}", t.name),
                Method::Auto => {
                    let [round, compensated] = r.bits_per_token.expect("auto measures both");
                    let expected = if compensated < round {
                        Method::Compensated
                    } else {
                        Method::Round
                    };
                    assert_eq!(t.method, Some(expected), "{}: {round} vs {compensated}", t.name);
                }
            }
        }
        assert_eq!(
            compared > 0,
            method != Method::Round,
            "{method}: tensors compared"
        );
    }
    // auto judges on the half of the calibration text its candidates were not fitted on
    let n = m.auto.0.report.calibration_tokens;
    assert_eq!(m.auto.0.report.rounding_choice, Some([n / 2, n - n / 2]));
}

// Measured with the committed code (calibration as `quantized_accuracy.rs`: smoothing auto, 4096
// demo bytes of calib.txt, 2048 sampled adaptive_div2 tokens); limits at about 3x.
/// Demo, compensated: held-out relative Δ measured -3.2e-5 (plain rounding: +7.7e-5).
const DEMO_COMPENSATED_MAX_ABS_DELTA: f64 = 1.0e-4;
/// Demo, compensated: mean KL measured 5.78e-5 (plain: 8.45e-5).
const DEMO_COMPENSATED_MAX_MEAN_KL: f64 = 1.7e-4;
/// Demo, compensated + int8 memory: relative Δ measured +2.9e-5 (plain rounding: +1.9e-4),
/// mean KL 6.16e-5 (plain: 8.9e-5).
const DEMO_COMPENSATED_INT8_MEMORY_MAX_ABS_DELTA: f64 = 9.0e-5;
const DEMO_COMPENSATED_INT8_MEMORY_MAX_MEAN_KL: f64 = 1.85e-4;
/// Demo, auto (fitted on the first half of the calibration text, chosen on the second): held-out
/// relative Δ measured +2.80e-4, mean KL 8.38e-5.
const DEMO_AUTO_MAX_ABS_DELTA: f64 = 8.4e-4;
const DEMO_AUTO_MAX_MEAN_KL: f64 = 2.5e-4;
/// adaptive_div2, compensated: relative Δ measured +6.4e-5 (plain: +1.36e-4), mean KL 3.75e-4
/// (plain: 4.67e-4).
const ADAPTIVE_COMPENSATED_MAX_ABS_DELTA: f64 = 1.9e-4;
const ADAPTIVE_COMPENSATED_MAX_MEAN_KL: f64 = 1.1e-3;
/// adaptive_div2, auto: relative Δ measured +1.09e-4, mean KL 3.88e-4.
const ADAPTIVE_AUTO_MAX_ABS_DELTA: f64 = 3.3e-4;
const ADAPTIVE_AUTO_MAX_MEAN_KL: f64 = 1.2e-3;
/// Compensated may lose to plain rounding on held-out text by no more than this relative Δ
/// (measured: it wins by 1.1e-4 on the demo, 7.2e-5 on adaptive_div2).
const COMPENSATED_MARGIN: f64 = 1.0e-5;

/// Compensated rounding against plain: not worse on held-out text (bits and KL), and each
/// tensor's output error on the calibration inputs lower.
fn check_compensated(m: &Measured, max_abs_delta: f64, max_mean_kl: f64, max_kl_ratio: f64) {
    let (round, compensated) = (&m.round.1, &m.compensated.1);
    assert!(
        compensated.relative_delta <= round.relative_delta + COMPENSATED_MARGIN,
        "compensated {compensated:?} against plain {round:?}"
    );
    assert!(
        compensated.relative_delta.abs() <= max_abs_delta,
        "{compensated:?}"
    );
    assert!(compensated.mean_kl <= max_mean_kl, "{compensated:?}");
    assert!(
        compensated.mean_kl <= max_kl_ratio * round.mean_kl,
        "compensated mean KL {:.3e} against plain {:.3e}",
        compensated.mean_kl,
        round.mean_kl
    );
    // A rounding that changed nothing would pass the limits above.
    assert_ne!(m.round.0.image, m.compensated.0.image);
}

#[test]
fn error_compensation_beats_plain_rounding_on_the_demo_model() {
    let f = demo();
    let m = measure_all("demo", &f);
    // Output error on the calibration inputs measured at most x0.30 of plain rounding's (x0.06
    // to x0.30); the held-out mean KL x0.68 of plain's.
    check_reports(&m, 0.9);
    check_compensated(
        &m,
        DEMO_COMPENSATED_MAX_ABS_DELTA,
        DEMO_COMPENSATED_MAX_MEAN_KL,
        0.85,
    );
    let baseline = pytorch_dynamic_int8_relative_delta();
    assert!(m.compensated.1.relative_delta < baseline && m.auto.1.relative_delta < baseline);
    let auto = &m.auto.1;
    assert!(auto.relative_delta.abs() <= DEMO_AUTO_MAX_ABS_DELTA, "{auto:?}");
    let int8_memory = measure_with_memory(&f, &m.compensated.0.image, MemDtype::Int8);
    assert!(
        int8_memory.relative_delta.abs() <= DEMO_COMPENSATED_INT8_MEMORY_MAX_ABS_DELTA,
        "compensated + int8 memory: {int8_memory:?}"
    );
    assert!(
        int8_memory.mean_kl <= DEMO_COMPENSATED_INT8_MEMORY_MAX_MEAN_KL,
        "compensated + int8 memory: {int8_memory:?}"
    );
    assert!(auto.mean_kl <= DEMO_AUTO_MAX_MEAN_KL, "{auto:?}");
}

#[test]
fn error_compensation_beats_plain_rounding_on_an_adaptive_model() {
    let m = measure_all("adaptive_div2", &adaptive_div2());
    // Output error on the calibration inputs measured at most x0.78 of plain rounding's (x0.13
    // to x0.78): it must stay below; the held-out mean KL x0.80 of plain's.
    check_reports(&m, 1.0);
    check_compensated(
        &m,
        ADAPTIVE_COMPENSATED_MAX_ABS_DELTA,
        ADAPTIVE_COMPENSATED_MAX_MEAN_KL,
        0.93,
    );
    let auto = &m.auto.1;
    assert!(
        auto.relative_delta.abs() <= ADAPTIVE_AUTO_MAX_ABS_DELTA,
        "{auto:?}"
    );
    assert!(auto.mean_kl <= ADAPTIVE_AUTO_MAX_MEAN_KL, "{auto:?}");
}

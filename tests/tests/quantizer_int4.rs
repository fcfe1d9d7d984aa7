//! int4 weights (W4A8) on the bundled trained model and on the `adaptive_div2` reference model:
//! calibrated on one text, measured on another, against f32 and against the int8 image.

use txl_core::AlignedBytes;
use txl_core::Model;
use txl_host_gpu::quantize::{Method, Quantized, Target};
use txl_tests::{demo_text, fixtures_dir, sampled_text, QuantizationText};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};

/// Held-out tokens scored (as `quantized_accuracy.rs`; tgt_len 64, mem_len 64 from the config).
const HELDOUT_TOKENS: usize = 8192;
/// Calibration tokens (from the training text).
const CALIBRATION_TOKENS: usize = 4096;

/// Every matrix of the report has the dtype `target` gives it, and where both roundings were
/// compared the compensated one has the lower output error on the calibration inputs.
fn check_report(q: &Quantized, target: Target) {
    let mut compared = 0;
    for t in &q.report.tensors {
        let layer = t.name.starts_with("layers.");
        let matrix = t.shape.len() == 2 && !t.name.ends_with("_bias");
        let expected = match (matrix, target, layer) {
            (false, _, _) => "f16", // the int4 targets store their vectors in f16
            (true, Target::Int4All, _) | (true, Target::Int4, true) => "int4",
            (true, _, _) => "int8",
        };
        assert_eq!(t.dtype, expected, "{}", t.name);
        if let Some(r) = &t.rounding {
            compared += 1;
            assert!(
                r.compensated_output_error < r.round_output_error,
                "{}: compensated {:.3e} vs plain {:.3e}",
                t.name,
                r.compensated_output_error,
                r.round_output_error
            );
        }
    }
    assert_eq!(compared > 0, q.report.method != Method::Round);
}

// Measured with the committed code (calibration as `quantized_accuracy.rs`: smoothing auto for
// the int8 tensors, 4096 demo bytes of calib.txt); the limits are 1% (int4 linear layers)
// and 2% (int4 everything); the regression limits here are about 3x the measured values.
/// Demo, int4 linear layers, plain rounding: relative Δ measured +0.27% (mean KL 3.7e-3).
const DEMO_INT4_ROUND_MAX_DELTA: f64 = 0.008;
/// Demo, int4 linear layers, compensated: relative Δ measured +0.028% (mean KL 1.1e-3).
const DEMO_INT4_COMPENSATED_MAX_DELTA: f64 = 0.001;
/// Demo, int4 everything, compensated: relative Δ measured -0.077% (mean KL 1.7e-3).
const DEMO_INT4_ALL_COMPENSATED_MAX_DELTA: f64 = 0.003;
/// Demo: the int4 image (linear layers; G = 32; vectors in f16) over the int8 image (vectors
/// in f32): measured 0.5368; the limit. With f32 vectors it was 0.5512: the biases and
/// LayerNorms, 2.7% of the int8 image, do not shrink with the weights.
const DEMO_INT4_IMAGE_MAX_RATIO: f64 = 0.55;
/// adaptive_div2 (sampled text), int4 linear layers, compensated: relative Δ measured +0.28%
/// (mean KL 1.3e-2: a random model's text is hard to predict, so the bits move more).
const ADAPTIVE_INT4_COMPENSATED_MAX_DELTA: f64 = 0.009;

#[test]
fn int4_on_the_demo_model_stays_within_its_limits() {
    let f = demo_text(HELDOUT_TOKENS, CALIBRATION_TOKENS);
    let int8 = f.quantized(Target::Int8, Method::Round);
    for (target, method, limit) in [
        (Target::Int4, Method::Round, DEMO_INT4_ROUND_MAX_DELTA),
        (Target::Int4, Method::Compensated, DEMO_INT4_COMPENSATED_MAX_DELTA),
        (
            Target::Int4All,
            Method::Compensated,
            DEMO_INT4_ALL_COMPENSATED_MAX_DELTA,
        ),
    ] {
        let q = f.quantized(target, method);
        check_report(&q, target);
        let r = f.measure("demo", &q);
        assert!(
            r.relative_delta.abs() <= limit,
            "{target} {method}: relative Δ {:+.4}% over {:.2}%",
            100.0 * r.relative_delta,
            100.0 * limit
        );
        let ratio = q.image.len() as f64 / int8.image.len() as f64;
        println!("  image {} bytes = {ratio:.4} x the int8 image", q.image.len());
        if target == Target::Int4 {
            assert!(ratio <= DEMO_INT4_IMAGE_MAX_RATIO, "int4 image ratio {ratio:.4}");
        }
    }
}

#[test]
fn int4_on_an_adaptive_softmax_model_stays_within_its_limit() {
    let dir = fixtures_dir().join("adaptive_div2");
    let checkpoint = load_hf_checkpoint(&dir, CheckpointFormat::Safetensors, false).unwrap();
    let f32_image = AlignedBytes::copy_from(&checkpoint.to_image().unwrap()).unwrap();
    let model = Model::parse(f32_image.bytes()).unwrap();
    let calibration = sampled_text(&model, 2048, 1);
    let heldout = sampled_text(&model, 4096, 2);
    let f = QuantizationText {
        f32_image,
        heldout,
        calibration,
    };
    let q = f.quantized(Target::Int4, Method::Compensated);
    check_report(&q, Target::Int4);
    let r = f.measure("adaptive_div2", &q);
    assert!(
        r.relative_delta.abs() <= ADAPTIVE_INT4_COMPENSATED_MAX_DELTA,
        "relative Δ {:+.4}%",
        100.0 * r.relative_delta
    );
}

//! The quantizer on a second trained model, unlike the demo model in text and shape
//! (`tools/reference/make_second_model.py`: the Python reference documentation, 6 layers of
//! d_model 96, pre-LayerNorm, shared position biases, same_length off), held to the demo
//! model's limits: the int8 image with error-compensated rounding loses less than PyTorch's
//! dynamic int8 on the same model and text, int4 linear layers at most 1%, int4 everything at
//! most 2%. Calibrated on `calib.txt` (training text), measured on 8192 bytes of `heldout.txt`
//! (never trained on), tgt_len 64 and mem_len 64 from the config, the memory starting empty.

use std::sync::OnceLock;

use txl_core::{Model, SessionOptions};
use txl_host_gpu::quantize::{Method, Target};
use txl_tests::{pytorch_baseline, trained_text, QuantizationText};

const HELDOUT_TOKENS: usize = 8192;
const CALIBRATION_TOKENS: usize = 4096;

fn second() -> &'static QuantizationText {
    static TEXT: OnceLock<QuantizationText> = OnceLock::new();
    TEXT.get_or_init(|| trained_text("second", HELDOUT_TOKENS, CALIBRATION_TOKENS))
}

#[test]
fn the_f32_model_scores_as_pytorch_does() {
    let f = second();
    let model = Model::parse(f.f32_image.bytes()).unwrap();
    let options = SessionOptions::from_config(model.config());
    let ours = txl_core::scoring::score(&model, &f.heldout, options, 0, |_| {})
        .unwrap()
        .bits_per_token();
    let theirs = pytorch_baseline("second", "f32", HELDOUT_TOKENS)["bits_per_token"]
        .as_f64()
        .unwrap();
    println!("second, f32: {ours:.6} bits per byte (PyTorch {theirs:.6})");
    // the file keeps six decimals
    assert!((ours - theirs).abs() < 2e-6, "txl {ours} vs PyTorch {theirs}");
}

// Measured with the committed code; regression limits about 3x the measured values, within the
// limits the issue set (PyTorch dynamic int8's loss, +0.0199% here; 1%; 2%).
/// int8, every matrix, compensated: relative Δ measured -0.029% (mean KL 6.1e-5).
const INT8_COMPENSATED_MAX_DELTA: f64 = 0.0009;
/// int4 linear layers, plain rounding: +0.070% (mean KL 3.0e-3).
const INT4_ROUND_MAX_DELTA: f64 = 0.0021;
/// int4 linear layers, compensated: +0.062% (mean KL 9.4e-4).
const INT4_COMPENSATED_MAX_DELTA: f64 = 0.0019;
/// int4 everything, compensated: +0.20% (mean KL 2.9e-3).
const INT4_ALL_COMPENSATED_MAX_DELTA: f64 = 0.006;
/// The int4 image (linear layers, G = 32) over the int8 image: measured 0.5375.
const INT4_IMAGE_MAX_RATIO: f64 = 0.54;

#[test]
fn compensated_int8_loses_less_than_pytorch_dynamic_int8() {
    let pytorch = pytorch_baseline("second", "dynamic_int8_linear", HELDOUT_TOKENS)["relative_delta"]
        .as_f64()
        .unwrap();
    let r = second().measure("second", &second().quantized(Target::Int8, Method::Compensated));
    println!(
        "  PyTorch dynamic int8 (Linear layers only): {:+.4}%",
        100.0 * pytorch
    );
    assert!(
        r.relative_delta < pytorch,
        "txl int8 {:+.4}% vs PyTorch {:+.4}%",
        100.0 * r.relative_delta,
        100.0 * pytorch
    );
    assert!(r.relative_delta.abs() <= INT8_COMPENSATED_MAX_DELTA);
}

#[test]
fn int4_stays_within_its_limits() {
    let int8_bytes = second().quantized(Target::Int8, Method::Round).image.len();
    for (target, method, limit) in [
        (Target::Int4, Method::Round, INT4_ROUND_MAX_DELTA),
        (Target::Int4, Method::Compensated, INT4_COMPENSATED_MAX_DELTA),
        (
            Target::Int4All,
            Method::Compensated,
            INT4_ALL_COMPENSATED_MAX_DELTA,
        ),
    ] {
        let q = second().quantized(target, method);
        let ratio = q.image.len() as f64 / int8_bytes as f64;
        println!("  image {} bytes = {ratio:.4} x the int8 image", q.image.len());
        if target == Target::Int4 {
            assert!(ratio <= INT4_IMAGE_MAX_RATIO, "int4 image ratio {ratio:.4}");
        }
        let r = second().measure("second", &q);
        assert!(
            r.relative_delta.abs() <= limit,
            "{target} {method}: {:+.4}% over {:.2}%",
            100.0 * r.relative_delta,
            100.0 * limit
        );
    }
}

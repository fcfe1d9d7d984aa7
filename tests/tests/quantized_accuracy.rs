//! fp16 and int8 against f32 on the bundled trained model: held-out text never used for
//! calibration, segment evaluation with the model's tgt_len / mem_len.

use std::sync::OnceLock;

use txl_core::AlignedBytes;
use txl_core::{MemDtype, Model, PositionKeys, SessionOptions};
use txl_host_gpu::quantize::{quantize, QuantizeOptions, Smoothing, Target};
use txl_tests::{demo_text, fixtures_dir, sampled_text, QuantizationText};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::compare::{compare, Comparison};

/// Held-out tokens scored.
const HELDOUT_TOKENS: usize = 8192;
/// Calibration tokens (from the training text).
const CALIBRATION_TOKENS: usize = 4096;

// Limits at about 3x what the code achieves (measured value in each comment), so that a
// regression of 3x fails. Relative Δ = (bits per token - f32's) / f32's.
/// f16 weights + f16 memory: measured +6.7e-6.
const F16_MAX_RELATIVE_DELTA: f64 = 2.0e-5;
/// Measured 100%.
const F16_MIN_TOP1: f64 = 0.9995;
/// int8 W8A8 + f32 memory: measured +7.7e-5 (activation ranges from the f32 reference).
const INT8_MAX_RELATIVE_DELTA: f64 = 2.3e-4;
/// int8 W8A8 + int8 memory: measured +1.9e-4.
const INT8_INT8_MEMORY_MAX_RELATIVE_DELTA: f64 = 5.4e-4;
/// Measured 99.61% (99.50% before attention over int8 memory ran in integers): three times
/// the disagreement would be 98.8%; 98.7% is kept.
const INT8_INT8_MEMORY_MIN_TOP1: f64 = 0.987;
/// Measured 1.007.
const INT8_MAX_SIZE_OVERHEAD: f64 = 1.021;
/// f32 weights + f16 memory: measured +1.8e-6.
const F16_MEMORY_MAX_RELATIVE_DELTA: f64 = 5.5e-6;
/// f32 weights + f16 memory, mean KL(f32 ‖ f16 memory) in nats: measured 9.4e-9.
const F16_MEMORY_MAX_MEAN_KL: f64 = 2.8e-8;
/// f32 weights + int8 memory: measured -1.7e-6. The signed errors nearly cancel in the mean
/// (it was +2.8e-8 before attention over int8 memory ran in integers, with the same KL), so
/// the KL below is the tight check.
const INT8_MEMORY_MAX_RELATIVE_DELTA: f64 = 5.0e-6;
/// f32 weights + int8 memory, mean KL in nats: measured 5.6e-6.
const INT8_MEMORY_MAX_MEAN_KL: f64 = 1.7e-5;
/// `adaptive_div2`, f16 weights + f16 memory: measured +8.3e-7.
const ADAPTIVE_F16_MAX_RELATIVE_DELTA: f64 = 2.5e-6;
/// `adaptive_div2`, int8 + f32 memory: measured +1.36e-4.
const ADAPTIVE_INT8_MAX_RELATIVE_DELTA: f64 = 4.1e-4;
/// `adaptive_div2`, int8 + int8 memory: measured +2.73e-4 (+3.06e-4 before attention over int8
/// memory ran in integers).
const ADAPTIVE_INT8_INT8_MEMORY_MAX_RELATIVE_DELTA: f64 = 9.2e-4;
// The relative Δ is a mean of signed changes, which partly cancel; the mean KL(f32 ‖ int8) per
// prediction cannot cancel, so each int8 case also bounds it at about 3x what is measured.
/// int8 + f32 memory, mean KL in nats: measured 8.45e-5.
const INT8_MAX_MEAN_KL: f64 = 2.5e-4;
/// int8 + int8 memory, mean KL in nats: measured 8.91e-5.
const INT8_INT8_MEMORY_MAX_MEAN_KL: f64 = 2.7e-4;
/// `adaptive_div2`, int8 + f32 memory, mean KL in nats: measured 4.67e-4.
const ADAPTIVE_INT8_MAX_MEAN_KL: f64 = 1.4e-3;
/// `adaptive_div2`, int8 + int8 memory, mean KL in nats: measured 4.76e-4.
const ADAPTIVE_INT8_INT8_MEMORY_MAX_MEAN_KL: f64 = 1.43e-3;

type Fixture = QuantizationText;

/// The f32 image and texts, built once for all tests of this file.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(load_fixture)
}

/// The int8 image, quantized once.
fn int8() -> &'static txl_host_gpu::quantize::Quantized {
    static INT8: OnceLock<txl_host_gpu::quantize::Quantized> = OnceLock::new();
    INT8.get_or_init(|| quantized(fixture(), Target::Int8))
}

fn load_fixture() -> Fixture {
    demo_text(HELDOUT_TOKENS, CALIBRATION_TOKENS)
}

fn measure(f: &Fixture, candidate: &[u8], mem_dtype: MemDtype) -> Comparison {
    measure_with_keys(f, candidate, mem_dtype, PositionKeys::PerSession)
}

/// The candidate with `mem_dtype` memory and `position_keys` against f32 (keys kept).
fn measure_with_keys(
    f: &Fixture,
    candidate: &[u8],
    mem_dtype: MemDtype,
    position_keys: PositionKeys,
) -> Comparison {
    let reference = Model::parse(f.f32_image.bytes()).unwrap();
    let candidate = AlignedBytes::copy_from(candidate).unwrap();
    let candidate = Model::parse(candidate.bytes()).unwrap();
    let options = SessionOptions::from_config(reference.config());
    let candidate_options = SessionOptions {
        mem_dtype,
        position_keys,
        ..options
    };
    let result = compare(
        (&reference, options),
        (&candidate, candidate_options),
        &f.heldout,
        |_| {},
    )
    .unwrap();
    println!("{mem_dtype:?} memory, position keys {position_keys}: {result:?}");
    result
}

fn quantized(f: &Fixture, target: Target) -> txl_host_gpu::quantize::Quantized {
    let model = Model::parse(f.f32_image.bytes()).unwrap();
    let options = QuantizeOptions {
        smoothing: Smoothing::Auto,
        ..QuantizeOptions::weights_only(target, SessionOptions::from_config(model.config()))
    };
    let calibration = (target == Target::Int8).then_some(f.calibration.as_slice());
    quantize(&model, &options, calibration, |_| {}).unwrap()
}

#[test]
fn fp16_weights_and_memory_lose_almost_nothing() {
    let f = fixture();
    let q = quantized(f, Target::F16);
    let result = measure(f, &q.image, MemDtype::F16);
    assert!(
        result.relative_delta.abs() <= F16_MAX_RELATIVE_DELTA,
        "fp16: relative Δ bits/token {:.5}% > {:.3}%",
        100.0 * result.relative_delta,
        100.0 * F16_MAX_RELATIVE_DELTA
    );
    assert!(
        result.top1_agreement >= F16_MIN_TOP1,
        "fp16: top-1 agreement {}",
        result.top1_agreement
    );
}

#[test]
fn int8_everywhere_stays_within_the_stated_loss() {
    let f = fixture();
    let q = int8();
    // Every matrix is int8: embeddings, every linear layer, the output layer.
    for t in &q.report.tensors {
        let is_matrix = t.shape.len() == 2 && !t.name.ends_with("r_w_bias") && !t.name.ends_with("r_r_bias");
        assert_eq!(t.dtype, if is_matrix { "int8" } else { "f32" }, "{}", t.name);
    }

    let with_f32_memory = measure(f, &q.image, MemDtype::F32);
    assert!(
        with_f32_memory.relative_delta.abs() <= INT8_MAX_RELATIVE_DELTA,
        "int8 + f32 memory: relative Δ {:.4}% > {:.2}%",
        100.0 * with_f32_memory.relative_delta,
        100.0 * INT8_MAX_RELATIVE_DELTA
    );
    // PyTorch's own dynamic int8 of the Linear layers alone, same model, text and settings
    // (tools/reference/pytorch_quantization.py): txl quantizes more of the model and must lose less.
    let baseline = pytorch_dynamic_int8_relative_delta();
    assert!(
        with_f32_memory.relative_delta < baseline,
        "txl int8 loses {:.4}%, PyTorch's dynamic int8 {:.4}%",
        100.0 * with_f32_memory.relative_delta,
        100.0 * baseline
    );
    let with_int8_memory = measure(f, &q.image, MemDtype::Int8);
    assert!(
        with_int8_memory.relative_delta.abs() <= INT8_INT8_MEMORY_MAX_RELATIVE_DELTA,
        "int8 + int8 memory: relative Δ {:.4}% > {:.2}%",
        100.0 * with_int8_memory.relative_delta,
        100.0 * INT8_INT8_MEMORY_MAX_RELATIVE_DELTA
    );
    assert!(
        with_int8_memory.top1_agreement >= INT8_INT8_MEMORY_MIN_TOP1,
        "int8 + int8 memory: top-1 agreement {}",
        with_int8_memory.top1_agreement
    );
    assert!(
        with_f32_memory.mean_kl <= INT8_MAX_MEAN_KL,
        "int8 + f32 memory: mean KL {:.3e}",
        with_f32_memory.mean_kl
    );
    assert!(
        with_int8_memory.mean_kl <= INT8_INT8_MEMORY_MAX_MEAN_KL,
        "int8 + int8 memory: mean KL {:.3e}",
        with_int8_memory.mean_kl
    );
}

/// `W_r` folded into the queries (no position-key tables) rounds another activation to int8
/// than the kept keys: with int8 weights and memory it stays within the loss stated for them,
/// and no further from f32 than the kept keys: measured mean KL 8.68e-5 (kept keys 8.91e-5),
/// relative Δ +3.4e-4 (+1.8e-4), top-1 agreement 99.61% (99.50%).
#[test]
fn int8_with_folded_position_keys_stays_within_the_stated_loss() {
    let f = fixture();
    let q = int8();
    let kept = measure(f, &q.image, MemDtype::Int8);
    let folded = measure_with_keys(f, &q.image, MemDtype::Int8, PositionKeys::FoldedIntoQuery);
    assert!(
        folded.relative_delta.abs() <= INT8_INT8_MEMORY_MAX_RELATIVE_DELTA,
        "folded: relative Δ {:.4}% > {:.2}%",
        100.0 * folded.relative_delta,
        100.0 * INT8_INT8_MEMORY_MAX_RELATIVE_DELTA
    );
    assert!(
        folded.top1_agreement >= INT8_INT8_MEMORY_MIN_TOP1,
        "folded: top-1 agreement {}",
        folded.top1_agreement
    );
    assert!(
        folded.mean_kl <= INT8_INT8_MEMORY_MAX_MEAN_KL,
        "folded: mean KL {:.3e}",
        folded.mean_kl
    );
    assert!(
        folded.mean_kl <= 1.1 * kept.mean_kl,
        "folded: mean KL {:.3e}, kept keys {:.3e}",
        folded.mean_kl,
        kept.mean_kl
    );
    assert!(
        folded.max_abs_delta_logp != kept.max_abs_delta_logp,
        "folded: the kept keys' values (is the mode ignored?)"
    );
}

fn pytorch_dynamic_int8_relative_delta() -> f64 {
    pytorch_variant("dynamic_int8_linear")["relative_delta"]
        .as_f64()
        .unwrap()
}

/// One variant of PyTorch's own quantization of the demo model, checked to describe the committed
/// model, text and settings.
fn pytorch_variant(name: &str) -> serde_json::Value {
    txl_tests::pytorch_baseline("demo", name, HELDOUT_TOKENS)
}

#[test]
fn f32_equals_pytorchs_f32_on_the_same_text() {
    let f = fixture();
    let model = Model::parse(f.f32_image.bytes()).unwrap();
    let options = SessionOptions::from_config(model.config());
    let ours = txl_core::scoring::score(&model, &f.heldout, options, 0, |_| {})
        .unwrap()
        .bits_per_token();
    let theirs = pytorch_variant("f32")["bits_per_token"].as_f64().unwrap();
    // The JSON keeps 6 decimals (rounding up to 5e-7); measured 1e-7 apart.
    println!("f32 bits per token: txl {ours:.7}, PyTorch {theirs:.6}");
    assert!((ours - theirs).abs() <= 1.0e-6, "txl {ours} vs PyTorch {theirs}");
}

#[test]
fn fp16_weights_lose_what_pytorchs_fp16_loses() {
    // Both round every weight to f16 and compute in f32 with f32 memory; the rounding is the
    // same, the arithmetic order differs, so the losses agree closely but not to the bit.
    let f = fixture();
    let q = quantized(f, Target::F16);
    let ours = measure(f, &q.image, MemDtype::F32).relative_delta;
    let theirs = pytorch_variant("fp16_weights")["relative_delta"]
        .as_f64()
        .unwrap();
    println!("fp16 weights: txl {ours:.3e}, PyTorch {theirs:.3e}");
    // Measured: txl +4.79e-6, PyTorch +5e-6 (the JSON rounds to 1e-6, so up to 5e-7 of the
    // difference is rounding).
    assert!(
        (ours - theirs).abs() <= 1.5e-6,
        "txl {ours:.3e} vs PyTorch {theirs:.3e}"
    );
}

#[test]
fn f32_weights_with_a_smaller_memory_lose_little() {
    let f = fixture();
    let f16_memory = measure(f, f.f32_image.bytes(), MemDtype::F16);
    let int8_memory = measure(f, f.f32_image.bytes(), MemDtype::Int8);
    println!(
        "f32 weights: f16 memory {:.3e}, int8 memory {:.3e}",
        f16_memory.relative_delta, int8_memory.relative_delta
    );
    assert!(
        f16_memory.relative_delta.abs() <= F16_MEMORY_MAX_RELATIVE_DELTA,
        "f16 memory: relative Δ {:.3e}",
        f16_memory.relative_delta
    );
    assert!(
        int8_memory.relative_delta.abs() <= INT8_MEMORY_MAX_RELATIVE_DELTA,
        "int8 memory: relative Δ {:.3e}",
        int8_memory.relative_delta
    );
    assert!(
        f16_memory.mean_kl <= F16_MEMORY_MAX_MEAN_KL,
        "f16 memory: {f16_memory:?}"
    );
    assert!(
        int8_memory.mean_kl <= INT8_MEMORY_MAX_MEAN_KL,
        "int8 memory: {int8_memory:?}"
    );
    // A memory in another dtype must change something: an ignored option would pass the limits.
    assert!(f16_memory.max_abs_delta_logp > 0.0 && int8_memory.max_abs_delta_logp > 0.0);
}

/// The adaptive-softmax, div_val 2 reference model (`adaptive_div2`: tied projections, three
/// embedding tables of different widths), on text sampled from its f32 self: calibration and
/// evaluation text from different seeds.
#[test]
fn an_adaptive_div_val_2_model_quantizes_as_well() {
    let dir = fixtures_dir().join("adaptive_div2");
    let checkpoint = load_hf_checkpoint(&dir, CheckpointFormat::Safetensors, false).unwrap();
    let image = AlignedBytes::copy_from(&checkpoint.to_image().unwrap()).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    assert!(model.config().div_val == 2 && model.config().n_cutoffs == 2);
    let calibration = sampled_text(&model, 2048, 1);
    let heldout = sampled_text(&model, 4096, 2);
    let options = SessionOptions::from_config(model.config());
    let measure = |candidate: &[u8], mem_dtype| {
        let candidate = AlignedBytes::copy_from(candidate).unwrap();
        let candidate = Model::parse(candidate.bytes()).unwrap();
        let result = compare(
            (&model, options),
            (&candidate, SessionOptions { mem_dtype, ..options }),
            &heldout,
            |_| {},
        )
        .unwrap();
        println!("adaptive_div2, {mem_dtype:?} memory: {result:?}");
        result
    };
    let f16 = quantize(
        &model,
        &QuantizeOptions::weights_only(Target::F16, options),
        None,
        |_| {},
    )
    .unwrap();
    let int8_options = QuantizeOptions {
        smoothing: Smoothing::Auto,
        ..QuantizeOptions::weights_only(Target::Int8, options)
    };
    let int8 = quantize(&model, &int8_options, Some(&calibration), |_| {}).unwrap();
    let f16_result = measure(&f16.image, MemDtype::F16);
    let int8_result = measure(&int8.image, MemDtype::F32);
    let int8_memory_result = measure(&int8.image, MemDtype::Int8);
    assert!(
        f16_result.relative_delta.abs() <= ADAPTIVE_F16_MAX_RELATIVE_DELTA,
        "{f16_result:?}"
    );
    assert!(
        int8_result.relative_delta.abs() <= ADAPTIVE_INT8_MAX_RELATIVE_DELTA,
        "{int8_result:?}"
    );
    assert!(
        int8_memory_result.relative_delta.abs() <= ADAPTIVE_INT8_INT8_MEMORY_MAX_RELATIVE_DELTA,
        "{int8_memory_result:?}"
    );
    assert!(
        int8_result.mean_kl <= ADAPTIVE_INT8_MAX_MEAN_KL,
        "{int8_result:?}"
    );
    assert!(
        int8_memory_result.mean_kl <= ADAPTIVE_INT8_INT8_MEMORY_MAX_MEAN_KL,
        "{int8_memory_result:?}"
    );
}

#[test]
fn int8_image_is_as_small_as_its_contents() {
    let q = int8();
    let image = AlignedBytes::copy_from(&q.image).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    // Values and scales as stored: 1 byte per int8 weight, 4 per f32 element and per scale.
    let mut contents = 0usize;
    let mut index = 0;
    txl_core::tensors::for_each_tensor(model.config(), |name, shape| {
        contents += if name.is_matrix() {
            model.image().matrix(index).stored_bytes()
        } else {
            shape.len() * 4
        };
        index += 1;
    });
    let ratio = q.image.len() as f64 / contents as f64;
    println!(
        "int8 image {} bytes, contents {contents} bytes, ratio {ratio:.4}",
        q.image.len()
    );
    assert!(
        ratio <= INT8_MAX_SIZE_OVERHEAD,
        "int8 image is {ratio:.3} x its contents"
    );
    let int8_values: usize = q
        .report
        .tensors
        .iter()
        .filter(|t| t.dtype == "int8")
        .map(|t| t.shape.iter().product::<u32>() as usize)
        .sum();
    assert!(
        int8_values * 4 > q.report.parameters * 3,
        "most parameters should be int8"
    );
}

//! fp16 and int8 against f32 on the bundled trained model: held-out text never used for
//! calibration, segment evaluation with the model's tgt_len / mem_len.

use std::sync::OnceLock;

use txl_core::AlignedBytes;
use txl_core::{MemDtype, Model, SessionOptions};
use txl_host_gpu::quantize::{quantize, QuantizeOptions, Smoothing, Target};
use txl_tests::fixtures_dir;
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::compare::{compare, Comparison};
use txl_tools::tokens::read_byte_tokens;

/// Held-out tokens scored.
const HELDOUT_TOKENS: usize = 8192;
/// Calibration tokens (from the training text).
const CALIBRATION_TOKENS: usize = 4096;

const F16_MAX_RELATIVE_DELTA: f64 = 0.0005;
const F16_MIN_TOP1: f64 = 0.995;
const INT8_MAX_RELATIVE_DELTA: f64 = 0.0025;
const INT8_INT8_MEMORY_MAX_RELATIVE_DELTA: f64 = 0.005;
const INT8_INT8_MEMORY_MIN_TOP1: f64 = 0.98;
const INT8_MAX_SIZE_OVERHEAD: f64 = 1.05;

struct Fixture {
    f32_image: AlignedBytes,
    heldout: Vec<u32>,
    calibration: Vec<u32>,
}

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
    let demo = fixtures_dir().join("demo");
    let checkpoint = load_hf_checkpoint(&demo, CheckpointFormat::Auto, false).unwrap();
    let mut heldout = read_byte_tokens(&demo.join("heldout.txt")).unwrap();
    assert!(
        heldout.len() >= HELDOUT_TOKENS,
        "heldout.txt is shorter than {HELDOUT_TOKENS} bytes"
    );
    heldout.truncate(HELDOUT_TOKENS);
    let mut calibration = read_byte_tokens(&demo.join("calib.txt")).unwrap();
    calibration.truncate(CALIBRATION_TOKENS);
    Fixture {
        f32_image: AlignedBytes::copy_from(&checkpoint.to_image().unwrap()).unwrap(),
        heldout,
        calibration,
    }
}

fn measure(f: &Fixture, candidate: &[u8], mem_dtype: MemDtype) -> Comparison {
    let reference = Model::parse(f.f32_image.bytes()).unwrap();
    let candidate = AlignedBytes::copy_from(candidate).unwrap();
    let candidate = Model::parse(candidate.bytes()).unwrap();
    let options = SessionOptions::from_config(reference.config());
    let result = compare(
        (&reference, options),
        (&candidate, SessionOptions { mem_dtype, ..options }),
        &f.heldout,
        |_| {},
    )
    .unwrap();
    println!("{mem_dtype:?} memory: {result:?}");
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
}

fn pytorch_dynamic_int8_relative_delta() -> f64 {
    let path = fixtures_dir().join("demo/pytorch_quantization.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        json["tokens"], HELDOUT_TOKENS,
        "the baseline was measured on another text length"
    );
    assert_eq!(json["mem_init"], "empty");
    let variant = json["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "dynamic_int8_linear")
        .expect("the baseline has the dynamic int8 variant");
    variant["relative_delta"].as_f64().unwrap()
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

//! The quantizer's choices: patterns and the sensitivity pass keep tensors in f16, smoothing is
//! searched only with calibration text, and the report matches the image.

use txl_core::rng::Rng;
use txl_core::AlignedBytes;
use txl_core::{Model, SessionOptions};
use txl_host_gpu::quantize::{quantize, QuantizeOptions, Smoothing, Target};
use txl_tests::{random_image, small_config};

fn options(smoothing: Smoothing, keep_f16: &[&str], auto_keep_f16: usize) -> QuantizeOptions {
    QuantizeOptions {
        target: Target::Int8,
        smoothing,
        keep_f16: keep_f16.iter().map(|s| s.to_string()).collect(),
        auto_keep_f16,
        session: SessionOptions::from_config(&small_config()),
        method: txl_host_gpu::quantize::Method::Round,
        group: txl_host_gpu::quantize::int4::DEFAULT_GROUP,
    }
}

fn calibration() -> Vec<u32> {
    let mut rng = Rng::new(3);
    (0..64)
        .map(|_| rng.below(u64::from(small_config().n_token)) as u32)
        .collect()
}

#[test]
fn patterns_and_the_sensitivity_pass_keep_tensors_in_f16() {
    let image = AlignedBytes::copy_from(&random_image(&small_config(), 1)).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    let calibration = calibration();
    let q = quantize(
        &model,
        &options(Smoothing::Off, &["layers.1.*"], 2),
        Some(&calibration),
        |_| {},
    )
    .unwrap();

    let f16: Vec<&str> = q
        .report
        .tensors
        .iter()
        .filter(|t| t.dtype == "f16")
        .map(|t| t.name.as_str())
        .collect();
    let pattern_kept = f16.iter().filter(|n| n.starts_with("layers.1.")).count();
    assert_eq!(pattern_kept, 5, "every matrix of layer 1 is kept: {f16:?}");
    assert_eq!(f16.len(), 5 + 2, "plus the two most sensitive others: {f16:?}");

    // The two kept automatically are the two with the largest measured solo cost.
    let mut measured: Vec<(&str, f64)> = q
        .report
        .tensors
        .iter()
        .filter_map(|t| t.solo_delta_bits.map(|d| (t.name.as_str(), d)))
        .collect();
    measured.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, _) in &measured[..2] {
        assert!(f16.contains(name), "{name} was the most sensitive but is not f16");
    }
    assert!(measured.len() >= 10, "every int8 candidate was measured");

    // The image holds what the report says.
    let out = AlignedBytes::copy_from(&q.image).unwrap();
    let quantized = Model::parse(out.bytes()).unwrap();
    assert_eq!(q.report.image_bytes, q.image.len());
    assert_eq!(q.report.layer_errors.len(), quantized.config().n_layer as usize);
    assert!(q.report.layer_errors.iter().all(|e| e.is_finite() && *e > 0.0));
    let labels: Vec<&str> = q.report.bits_per_token.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["f32", "f16", "int8", "int8 + int8 memory"]);
}

#[test]
fn smoothing_is_searched_with_calibration_and_refused_without() {
    let image = AlignedBytes::copy_from(&random_image(&small_config(), 2)).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    assert!(quantize(&model, &options(Smoothing::Auto, &[], 0), None, |_| {}).is_err());

    let calibration = calibration();
    let q = quantize(
        &model,
        &options(Smoothing::Auto, &[], 0),
        Some(&calibration),
        |_| {},
    )
    .unwrap();
    let tried: Vec<Option<f32>> = q.report.smoothing_search.iter().map(|(a, _)| *a).collect();
    assert_eq!(tried, [None, Some(0.25), Some(0.5), Some(0.75)]);
    let best = q
        .report
        .smoothing_search
        .iter()
        .map(|(_, b)| *b)
        .fold(f64::INFINITY, f64::min);
    let chosen = q
        .report
        .smoothing_search
        .iter()
        .find(|(a, _)| *a == q.report.smoothing_alpha)
        .unwrap()
        .1;
    assert_eq!(chosen, best, "the strength kept is the one measured best");
}

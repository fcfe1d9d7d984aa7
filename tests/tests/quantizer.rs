//! The quantizer's choices: patterns and the sensitivity pass keep tensors in f16, smoothing is
//! searched only with calibration text, a byte budget is kept to, and the report matches the
//! image.

use txl_core::rng::Rng;
use txl_core::weights::MatrixData;
use txl_core::AlignedBytes;
use txl_core::{Model, SessionOptions};
use txl_host_gpu::quantize::{quantize, quantize_mixed, MixedPrecision, QuantizeOptions, Smoothing, Target};
use txl_tests::{random_image, small_config};

fn options(smoothing: Smoothing, keep_f16: &[&str], auto_keep_f16: usize) -> QuantizeOptions {
    QuantizeOptions {
        target: Target::Int8,
        smoothing,
        power_of_two_smoothing: false,
        keep_f16: keep_f16.iter().map(|s| s.to_string()).collect(),
        auto_keep_f16,
        session: SessionOptions::from_config(&small_config()),
        method: txl_host_gpu::quantize::Method::Round,
        group: txl_host_gpu::quantize::int4::DEFAULT_GROUP,
        vectors: Target::Int8.default_vectors(),
        calibration_backend: txl_host_gpu::Backend::Cpu32,
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

/// The calibration bits per token of a report's image (labelled with its target).
fn image_bits(report: &txl_host_gpu::quantize::Report) -> f64 {
    let label = report.target.to_string();
    report.bits_per_token.iter().find(|(l, _)| *l == label).unwrap().1
}

#[test]
fn a_byte_budget_keeps_the_costliest_int4_tensors_in_int8_and_holds() {
    let image = AlignedBytes::copy_from(&random_image(&small_config(), 4)).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    let calibration = calibration();
    let int4_options = QuantizeOptions {
        target: Target::Int4,
        group: 8,
        ..options(Smoothing::Off, &[], 0)
    };
    let run =
        |mixed: MixedPrecision| quantize_mixed(&model, &int4_options, &mixed, Some(&calibration), |_| {});
    let int4 = quantize(&model, &int4_options, Some(&calibration), |_| {}).unwrap();
    let int8 = quantize(
        &model,
        &options(Smoothing::Off, &[], 0),
        Some(&calibration),
        |_| {},
    )
    .unwrap();
    assert!(int4.image.len() < int8.image.len());

    // Between the two sizes: some int4 tensors go to int8, none to f16, and the bits go down.
    let budget = (int4.image.len() + int8.image.len()) / 2;
    let fitted = run(MixedPrecision {
        budget_bytes: Some(budget),
        ..MixedPrecision::default()
    })
    .unwrap();
    assert!(fitted.image.len() <= budget, "{} > {budget}", fitted.image.len());
    assert!(fitted.image.len() > int4.image.len());
    assert_eq!(fitted.report.image_bytes, fitted.image.len());
    assert_eq!(fitted.report.budget_bytes, Some(budget));
    assert_eq!(fitted.report.smallest_image_bytes, Some(int4.image.len()));
    let raised: Vec<&str> = fitted
        .report
        .tensors
        .iter()
        .filter(|t| t.kept_for == Some("budget"))
        .map(|t| t.name.as_str())
        .collect();
    assert!(!raised.is_empty());
    for t in &fitted.report.tensors {
        if t.name.starts_with("layers.") && t.dtype != "f32" {
            assert!(
                t.solo_delta_bits.is_some() && t.solo_delta_bits_int8.is_some(),
                "{}",
                t.name
            );
            let expected = if t.kept_for.is_some() { "int8" } else { "int4" };
            assert_eq!(t.dtype, expected, "{}", t.name);
        }
    }
    assert!(
        image_bits(&fitted.report) < image_bits(&int4.report),
        "{} int8 tensors, {} bits against {}",
        raised.len(),
        image_bits(&fitted.report),
        image_bits(&int4.report)
    );
    // The report holds what the image holds.
    let bytes = AlignedBytes::copy_from(&fitted.image).unwrap();
    let parsed = Model::parse(bytes.bytes()).unwrap();
    let int8_matrices = (0..fitted.report.tensors.len())
        .filter(|&i| fitted.report.tensors[i].dtype == "int8")
        .count();
    assert_eq!(
        int8_matrices,
        (0..fitted.report.tensors.len())
            .filter(|&i| matches!(parsed.image().matrix(i).data, MatrixData::Int8 { .. }))
            .count()
    );

    // A budget of exactly the smallest image raises nothing; one byte less is refused.
    let exact = run(MixedPrecision {
        budget_bytes: Some(int4.image.len()),
        ..MixedPrecision::default()
    })
    .unwrap();
    assert_eq!(exact.image, int4.image);
    let refused = run(MixedPrecision {
        budget_bytes: Some(int4.image.len() - 1),
        ..MixedPrecision::default()
    })
    .unwrap_err()
    .to_string();
    assert!(refused.contains("1 over the budget"), "{refused}");

    // --auto-keep-int8 2: the two int4 tensors that cost most alone.
    let kept = run(MixedPrecision {
        auto_keep_int8: 2,
        ..MixedPrecision::default()
    })
    .unwrap();
    let mut measured: Vec<(&str, f64)> = kept
        .report
        .tensors
        .iter()
        .filter(|t| t.name.starts_with("layers."))
        .filter_map(|t| t.solo_delta_bits.map(|d| (t.name.as_str(), d)))
        .collect();
    measured.sort_by(|a, b| b.1.total_cmp(&a.1));
    let int8: Vec<&str> = kept
        .report
        .tensors
        .iter()
        .filter(|t| t.kept_for == Some("auto-keep-int8"))
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(int8.len(), 2);
    assert!(int8.contains(&measured[0].0) && int8.contains(&measured[1].0));

    // Both need calibration text; an int8 target has no int4 tensors to keep.
    let mixed = MixedPrecision {
        budget_bytes: Some(budget),
        ..MixedPrecision::default()
    };
    assert!(quantize_mixed(&model, &int4_options, &mixed, None, |_| {}).is_err());
    let mixed = MixedPrecision {
        auto_keep_int8: 1,
        ..MixedPrecision::default()
    };
    assert!(quantize_mixed(
        &model,
        &options(Smoothing::Off, &[], 0),
        &mixed,
        Some(&calibration),
        |_| {}
    )
    .is_err());
}

/// The bundled trained model, int4 linear layers (plain rounding): alone, and with a budget
/// halfway between the int4 and the int8 image, measured on held-out text against f32
/// (`-- --nocapture` prints the numbers).
#[test]
fn a_budget_between_int4_and_int8_lowers_the_demo_models_held_out_loss() {
    let text = txl_tests::demo_text(8192, 4096);
    let model = Model::parse(text.f32_image.bytes()).unwrap();
    let session = SessionOptions::from_config(model.config());
    let int4_options = QuantizeOptions::weights_only(Target::Int4, session);
    let int8 = txl_host_gpu::quantize::quantize_weights(&model, Target::Int8).unwrap();
    let int4 = quantize(&model, &int4_options, Some(&text.calibration), |_| {}).unwrap();
    let budget = (int4.image.len() + int8.len()) / 2;
    let mixed = MixedPrecision {
        budget_bytes: Some(budget),
        ..MixedPrecision::default()
    };
    let fitted = quantize_mixed(&model, &int4_options, &mixed, Some(&text.calibration), |_| {}).unwrap();
    assert!(fitted.image.len() <= budget);

    let held_out = |image: &[u8]| {
        let candidate = AlignedBytes::copy_from(image).unwrap();
        let candidate = Model::parse(candidate.bytes()).unwrap();
        txl_tools::compare::compare((&model, session), (&candidate, session), &text.heldout, |_| {})
            .unwrap()
            .relative_delta
    };
    let (int4_delta, fitted_delta) = (held_out(&int4.image), held_out(&fitted.image));
    let raised: Vec<&str> = fitted
        .report
        .tensors
        .iter()
        .filter(|t| t.kept_for.is_some())
        .map(|t| t.name.as_str())
        .collect();
    println!(
        "demo int4: {} bytes, calibration {:.5} bits/token, held-out {:+.4}%; budget {budget}: {} bytes, \
         calibration {:.5}, held-out {:+.4}%; int8 {} bytes; raised to int8: {raised:?}",
        int4.image.len(),
        image_bits(&int4.report),
        100.0 * int4_delta,
        fitted.image.len(),
        image_bits(&fitted.report),
        100.0 * fitted_delta,
        int8.len(),
    );
    assert!(image_bits(&fitted.report) < image_bits(&int4.report));
    assert!(
        fitted_delta < int4_delta,
        "{fitted_delta} against int4's {int4_delta}"
    );
}

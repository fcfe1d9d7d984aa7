//! `txl quantize --method`: how int8 rows are rounded (round, compensated, auto). Each value
//! must change the image or the report, the report must say which method every int8 tensor
//! got, and the method that needs calibration text is refused without it. Without the flag,
//! the method is compensated with calibration text and round without.

use std::path::Path;

use serde_json::Value;

mod common;
use common::{fixture, quantize, s, scratch_dir, skipped, stderr, txl};

/// The `method` of every int8 tensor of a report.
fn tensor_methods(report: &Value) -> Vec<(String, Value)> {
    report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["dtype"] == "int8")
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["method"].clone()))
        .collect()
}

#[test]
fn every_rounding_method_changes_the_image_or_the_report() {
    let dir = scratch_dir("method");
    let image = dir.join("adaptive_div2.txl");
    let out = txl(&["convert", s(&fixture("adaptive_div2")), "-o", s(&image)]);
    assert!(out.status.success(), "convert: {}", stderr(&out));
    let tokens = fixture("adaptive_div2").join("tokens.txt");
    let calib = ["--calib-tokens", s(&tokens), "--smooth", "off"];

    let (round, report) = quantize(
        &image,
        &dir,
        "round",
        &[&calib[..], &["--method", "round"]].concat(),
    );
    assert_eq!(report["method"], "round", "--method round");
    let methods = tensor_methods(&report);
    assert!(!methods.is_empty());
    assert!(
        methods.iter().all(|(_, m)| m == "round"),
        "--method round: {methods:?}"
    );

    let (compensated, report) = quantize(
        &image,
        &dir,
        "compensated",
        &[&calib[..], &["--method", "compensated"]].concat(),
    );
    assert_eq!(report["method"], "compensated", "--method compensated");
    assert!(
        compensated != round,
        "--method compensated made the image --method round makes"
    );
    let methods = tensor_methods(&report);
    assert!(
        methods.iter().any(|(_, m)| m == "compensated"),
        "--method compensated: {methods:?}"
    );
    // the layers' products all have calibration inputs
    for (name, method) in &methods {
        if name.starts_with("layers.") && !name.ends_with("r_net.weight") {
            assert_eq!(method, "compensated", "--method compensated: {name}");
        }
    }
    let compared = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["rounding"].is_null())
        .count();
    assert!(
        compared > 0,
        "--method compensated: no tensor compares both roundings"
    );

    let (_, report) = quantize(
        &image,
        &dir,
        "auto",
        &[&calib[..], &["--method", "auto"]].concat(),
    );
    assert_eq!(report["method"], "auto", "--method auto");
    // fitted on the first half of the calibration text, chosen on the second
    let n = report["calibration_tokens"].as_u64().unwrap();
    assert_eq!(report["rounding_choice"], serde_json::json!([n / 2, n - n / 2]));
    for t in report["tensors"].as_array().unwrap() {
        if !t["rounding"].is_null() {
            let bits = t["rounding"]["bits_per_token"]
                .as_array()
                .expect("auto measures both roundings");
            let (plain, other) = (bits[0].as_f64().unwrap(), bits[1].as_f64().unwrap());
            let expected = if other < plain { "compensated" } else { "round" };
            assert_eq!(t["method"], expected, "--method auto: {}", t["name"]);
        }
    }
}

/// No `--method`: compensated with calibration text (the method that lost least on held-out
/// text, docs/QUANTIZATION.md), the image `--method compensated` makes; round without it, and
/// for f16, which is not rounded to steps.
#[test]
fn the_default_method_is_compensated_with_calibration_text_and_round_without() {
    let dir = scratch_dir("method-default");
    let image = dir.join("adaptive_div2.txl");
    let out = txl(&["convert", s(&fixture("adaptive_div2")), "-o", s(&image)]);
    assert!(out.status.success(), "convert: {}", stderr(&out));
    let tokens = fixture("adaptive_div2").join("tokens.txt");
    let calib = ["--calib-tokens", s(&tokens), "--smooth", "off"];

    let (default, report) = quantize(&image, &dir, "default", &calib);
    assert_eq!(report["method"], "compensated", "with calibration text");
    let (compensated, _) = quantize(
        &image,
        &dir,
        "compensated",
        &[&calib[..], &["--method", "compensated"]].concat(),
    );
    assert!(default == compensated, "the default made another image");

    let (default, report) = quantize(&image, &dir, "no-text", &["--smooth", "off"]);
    assert_eq!(report["method"], "round", "without calibration text");
    let (round, _) = quantize(&image, &dir, "round", &["--smooth", "off", "--method", "round"]);
    assert!(default == round, "the default made another image");

    let (_, report) = quantize(&image, &dir, "f16", &[&calib[..], &["--dtype", "f16"]].concat());
    assert_eq!(report["method"], "round", "f16 with calibration text");

    let out = txl(&["quantize", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("Default: compensated"), "{help}");
}

/// `auto` fits on one half of the calibration text and chooses on the other: too few tokens
/// for both halves is one error line, and nothing is written.
#[test]
fn auto_refuses_calibration_text_too_short_to_split() {
    let dir = scratch_dir("method-auto-short");
    let image = dir.join("adaptive_div2.txl");
    let out = txl(&["convert", s(&fixture("adaptive_div2")), "-o", s(&image)]);
    assert!(out.status.success(), "convert: {}", stderr(&out));
    let tokens = fixture("adaptive_div2").join("tokens.txt");
    let written = dir.join("auto.txl");
    #[rustfmt::skip]
    let out = txl(&[
        "quantize", s(&image), "-o", s(&written), "--calib-tokens", s(&tokens),
        "--calib-limit", "3", "--method", "auto",
    ]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with("error: ") && text.lines().count() == 1 && text.contains("3 tokens are too few"),
        "{text}"
    );
    assert!(!written.exists());
}

#[test]
fn compensated_rounding_needs_calibration_text_and_int8() {
    let dir = scratch_dir("method-no-text");
    let image = dir.join("adaptive_div2.txl");
    let out = txl(&["convert", s(&fixture("adaptive_div2")), "-o", s(&image)]);
    assert!(out.status.success(), "convert: {}", stderr(&out));
    let written = dir.join("int8.txl");
    let out = txl(&[
        "quantize",
        s(&image),
        "-o",
        s(&written),
        "--method",
        "compensated",
    ]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with("error: ") && text.contains("calibration text"),
        "{text}"
    );
    assert!(!written.exists(), "an image was written without calibration text");
    // f16 weights are not rounded to int8 steps: the flag would be ignored
    let calib = fixture("adaptive_div2").join("tokens.txt");
    assert_f16_refuses(&image, &written, &calib, ["--method", "compensated"], "int8");
}

/// `txl quantize --dtype f16` with the calibration text `tokens` and `flag`: refused with an
/// error that mentions `needle`, and nothing written at `written`.
fn assert_f16_refuses(image: &Path, written: &Path, tokens: &Path, flag: [&str; 2], needle: &str) {
    let out = txl(&[
        "quantize",
        s(image),
        "-o",
        s(written),
        "--dtype",
        "f16",
        "--calib-tokens",
        s(tokens),
        flag[0],
        flag[1],
    ]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.starts_with("error: ") && text.contains(needle), "{text}");
    assert!(!written.exists(), "an f16 image was written with {flag:?}");
}

#[test]
fn the_help_names_the_methods() {
    let out = txl(&["quantize", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("--method"), "{help}");
    for word in ["round", "compensated", "auto"] {
        assert!(help.contains(word), "quantize --help does not name {word}");
    }
}

/// `--calib-backend` chooses where the reference collects the calibration statistics, and the
/// report says which; `cuda` without a GPU is an error that writes nothing.
#[test]
fn calib_backend_chooses_where_the_statistics_are_collected() {
    let dir = scratch_dir("calib-backend");
    let image = dir.join("adaptive_div2.txl");
    let out = txl(&["convert", s(&fixture("adaptive_div2")), "-o", s(&image)]);
    assert!(out.status.success(), "convert: {}", stderr(&out));
    let tokens = fixture("adaptive_div2").join("tokens.txt");
    let calib = [
        "--calib-tokens",
        s(&tokens),
        "--smooth",
        "off",
        "--method",
        "compensated",
    ];
    for (flag, backend) in [("cpu", "cpu64"), ("cpu32", "cpu32")] {
        let (_, report) = quantize(
            &image,
            &dir,
            flag,
            &[&calib[..], &["--calib-backend", flag]].concat(),
        );
        assert_eq!(report["statistics_backend"], backend, "--calib-backend {flag}");
        assert!(
            report["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["method"] == "compensated"),
            "--calib-backend {flag}: the Gram matrices reached the rounding"
        );
    }
    let (_, plain) = quantize(&image, &dir, "weights-only", &["--smooth", "off"]);
    assert!(
        plain["statistics_backend"].is_null(),
        "no calibration text, no statistics"
    );

    let written = dir.join("cuda.txl");
    let mut args = vec!["quantize", s(&image), "-o", s(&written)];
    args.extend(calib);
    args.extend(["--calib-backend", "cuda"]);
    let out = txl(&args);
    let text = stderr(&out);
    match txl_host_gpu::cuda_available() {
        Err(why) => {
            skipped(&format!(
                "--calib-backend cuda on a GPU: no GPU here ({why}); scripts/gpu-check.sh runs it"
            ));
            assert_eq!(out.status.code(), Some(1), "{text}");
            assert!(text.starts_with("error: ") && text.contains("GPU"), "{text}");
            assert!(
                !written.exists(),
                "an image was written without the statistics asked for"
            );
        }
        Ok(_) => {
            assert!(out.status.success(), "{text}");
            assert!(
                text.contains("calibration statistics collected on cuda"),
                "{text}"
            );
        }
    }

    // f16 collects no statistics: the flag would be ignored
    let f16 = dir.join("f16.txl");
    assert_f16_refuses(
        &image,
        &f16,
        &tokens,
        ["--calib-backend", "cpu"],
        "f16 needs none",
    );

    // convert refuses the flag where it does not quantize
    let out = txl(&[
        "convert",
        s(&fixture("adaptive_div2")),
        "-o",
        s(&dir.join("f32.txl")),
        "--calib-backend",
        "cpu",
    ]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("--calib-backend applies to quantization"), "{text}");
}

//! Integer images: what `Model::parse` checks of the header's arithmetic and of the weights'
//! scales, and `txl quantize --integer` / `txl convert --integer` with what the other commands
//! do with the image it writes.

use std::path::{Path, PathBuf};

use txl_core::image::{set_arithmetic, Arithmetic, FRAC_AT, MAX_FRAC};
use txl_core::tensors::{for_each_tensor, TensorName};
use txl_core::{AlignedBytes, ArithmeticError, Error, Model};
use txl_host_gpu::quantize::{quantize_weights, Target};
use txl_host_gpu::{random_image, small_config, RandomInit};

mod common;
use common::{fixture, s, scratch_dir, stderr, txl};

/// A random model of `small_config` with its weights quantized to `target`.
fn quantized(target: Target) -> Vec<u8> {
    let image = random_image(&small_config(), 1, RandomInit::default()).unwrap();
    let aligned = AlignedBytes::copy_from(&image).unwrap();
    quantize_weights(&Model::parse(aligned.bytes()).unwrap(), target).unwrap()
}

/// `Model::parse` of a copy of `image` in aligned memory: its arithmetic, or why not.
fn parse(image: &[u8]) -> Result<Arithmetic, Error> {
    let aligned = AlignedBytes::copy_from(image).unwrap();
    Model::parse(aligned.bytes()).map(|model| model.image().arithmetic())
}

/// Rewrites the trailing CRC-32 after an edit.
fn fix_crc(image: &mut [u8]) {
    let crc_at = image.len() - 4;
    let crc = txl_core::crc32(&image[..crc_at]);
    image[crc_at..].copy_from_slice(&crc.to_le_bytes());
}

/// The directory index and name of the first weight matrix.
fn first_matrix(image: &[u8]) -> (usize, TensorName) {
    let aligned = AlignedBytes::copy_from(image).unwrap();
    let model = Model::parse(aligned.bytes()).unwrap();
    let mut found = None;
    let mut index = 0;
    for_each_tensor(model.config(), |name, _| {
        if found.is_none() && name.is_matrix() {
            found = Some((index, name));
        }
        index += 1;
    });
    found.unwrap()
}

#[test]
fn an_int8_image_set_to_integer_parses_with_its_frac() {
    let image = set_arithmetic(&quantized(Target::Int8), Arithmetic::Integer { frac: 20 }).unwrap();
    assert_eq!(parse(&image), Ok(Arithmetic::Integer { frac: 20 }));
    let image = set_arithmetic(&quantized(Target::Int4), Arithmetic::Integer { frac: MAX_FRAC }).unwrap();
    assert_eq!(parse(&image), Ok(Arithmetic::Integer { frac: MAX_FRAC }));
    // and back to float
    let image = set_arithmetic(&image, Arithmetic::Float).unwrap();
    assert_eq!(parse(&image), Ok(Arithmetic::Float));
}

#[test]
fn more_than_thirty_fraction_bits_are_refused() {
    let int8 = quantized(Target::Int8);
    let frac = |frac| Error::BadArithmetic(ArithmeticError::Frac(frac));
    assert_eq!(
        set_arithmetic(&int8, Arithmetic::Integer { frac: 31 }),
        Err(frac(31))
    );
    // written by hand: the header's word says 31
    let mut image = set_arithmetic(&int8, Arithmetic::Integer { frac: MAX_FRAC }).unwrap();
    image[FRAC_AT..FRAC_AT + 4].copy_from_slice(&31u32.to_le_bytes());
    fix_crc(&mut image);
    assert_eq!(parse(&image), Err(frac(31)));
    image[FRAC_AT..FRAC_AT + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    fix_crc(&mut image);
    assert_eq!(parse(&image), Err(frac(u32::MAX)));
}

#[test]
fn a_negative_or_infinite_row_scale_is_refused_by_name() {
    let int8 = quantized(Target::Int8);
    let (index, name) = first_matrix(&int8);
    let row_scales = {
        let aligned = AlignedBytes::copy_from(&int8).unwrap();
        Model::parse(aligned.bytes())
            .unwrap()
            .image()
            .entry(index)
            .row_scales_offset
    };
    for bad in [-0.5f32, f32::INFINITY, f32::NAN, 1e30] {
        let mut image = set_arithmetic(&int8, Arithmetic::Integer { frac: 20 }).unwrap();
        image[row_scales..row_scales + 4].copy_from_slice(&bad.to_le_bytes());
        fix_crc(&mut image);
        assert_eq!(
            parse(&image),
            Err(Error::BadArithmetic(ArithmeticError::Scale(name))),
            "row scale {bad}"
        );
        // a float image takes any scale
        let float = set_arithmetic(&image, Arithmetic::Float).unwrap();
        assert_eq!(parse(&float), Ok(Arithmetic::Float), "row scale {bad}");
    }
}

#[test]
fn float_weights_are_refused_by_name() {
    let f32_image = random_image(&small_config(), 1, RandomInit::default()).unwrap();
    for image in [f32_image, quantized(Target::F16)] {
        let (_, name) = first_matrix(&image);
        let image = set_arithmetic(&image, Arithmetic::Integer { frac: 20 }).unwrap();
        assert_eq!(
            parse(&image),
            Err(Error::BadArithmetic(ArithmeticError::FloatWeights(name)))
        );
    }
}

#[test]
fn an_int4_embedding_table_is_refused() {
    let image = set_arithmetic(&quantized(Target::Int4All), Arithmetic::Integer { frac: 20 }).unwrap();
    assert!(
        matches!(
            parse(&image),
            Err(Error::BadArithmetic(ArithmeticError::NeedsInt8(_)))
        ),
        "{:?}",
        parse(&image)
    );
}

#[test]
fn images_without_the_flag_are_float() {
    let f32_image = random_image(&small_config(), 1, RandomInit::default()).unwrap();
    assert_eq!(parse(&f32_image), Ok(Arithmetic::Float));
    assert_eq!(parse(&quantized(Target::Int8)), Ok(Arithmetic::Float));
    // a float image with a frac word is damaged
    let mut image = f32_image;
    image[FRAC_AT..FRAC_AT + 4].copy_from_slice(&20u32.to_le_bytes());
    fix_crc(&mut image);
    assert_eq!(parse(&image), Err(Error::BadHeader));
}

#[test]
fn the_bundled_demo_model_of_the_repository_parses_as_float() {
    let dir = scratch_dir("demo-float");
    let image = common::convert(&fixture("demo"), dir.join("demo.txl"));
    let out = txl(&["inspect", s(&image)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("arithmetic    float\n"), "{text}");
    assert!(text.contains("mem_dtype f32"), "{text}");
}

/// The first `n` bytes of the demo's held-out text, as a file in `dir`.
fn heldout(dir: &Path, n: usize) -> std::path::PathBuf {
    let text = std::fs::read(fixture("demo").join("heldout.txt")).unwrap();
    let path = dir.join("heldout.txt");
    std::fs::write(&path, &text[..n]).unwrap();
    path
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = txl(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// `txl args` fails with exit status 1 and an error naming each of `needles`.
fn refused(args: &[&str], needles: &[&str]) {
    let out = txl(args);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {text}");
    assert!(text.starts_with("error: "), "{args:?}: {text}");
    for needle in needles {
        assert!(text.contains(needle), "{args:?}: no {needle:?} in {text}");
    }
}

/// `txl quantize --integer` of the demo model (converted into `dir`) with `--smooth smooth`,
/// calibrated on 1024 bytes of `calib.txt`: the float image's path, the integer image's and the
/// command's output.
fn quantize_demo_integer(dir: &Path, smooth: &str) -> (PathBuf, PathBuf, std::process::Output) {
    let float = common::convert(&fixture("demo"), dir.join("demo.txl"));
    let integer = dir.join("demo-integer.txl");
    let calib = fixture("demo").join("calib.txt");
    #[rustfmt::skip]
    let out = txl(&[
        "quantize", s(&float), "-o", s(&integer), "--integer", "--calib-bytes", s(&calib),
        "--calib-limit", "1024", "--calib-backend", "cpu32", "--smooth", smooth,
    ]);
    (float, integer, out)
}

#[test]
fn quantize_integer_writes_an_integer_image_that_the_commands_run_with_int8_memory() {
    let dir = scratch_dir("round-trip");
    let (float, integer, out) = quantize_demo_integer(&dir, "off");
    let text = stderr(&out);
    assert!(out.status.success(), "quantize --integer: {text}");
    assert!(
        text.contains("integer arithmetic: activations in Q"),
        "no frac printed: {text}"
    );

    let bytes = std::fs::read(&integer).unwrap();
    let Ok(Arithmetic::Integer { frac }) = parse(&bytes) else {
        panic!("not an integer image: {:?}", parse(&bytes));
    };
    assert!((10..=MAX_FRAC).contains(&frac), "Q{frac}");

    let out = txl(&["inspect", s(&integer)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let inspected = String::from_utf8(out.stdout).unwrap();
    assert!(
        inspected.contains(&format!("arithmetic    integer, activations Q{frac}\n")),
        "{inspected}"
    );
    assert!(inspected.contains("mem_dtype int8"), "{inspected}");

    let text = heldout(&dir, 100);
    let scored = json(&["score", s(&integer), "--bytes", s(&text), "--json"]);
    assert_eq!(scored["arithmetic"], "integer", "{scored}");
    assert_eq!(scored["mem_dtype"], "int8", "{scored}");
    assert_eq!(scored["position_keys"], "session", "{scored}");
    let scored = json(&[
        "score",
        s(&integer),
        "--bytes",
        s(&text),
        "--position-keys",
        "segment",
        "--mem-dtype",
        "int8",
        "--json",
    ]);
    assert_eq!(scored["position_keys"], "segment", "{scored}");
    // the reference computes in floating point whatever the image says
    let scored = json(&[
        "score",
        s(&integer),
        "--bytes",
        s(&text),
        "--backend",
        "cpu32",
        "--json",
    ]);
    assert_eq!(scored["arithmetic"], "float", "{scored}");
    let scored = json(&["score", s(&float), "--bytes", s(&text), "--json"]);
    assert_eq!(scored["arithmetic"], "float", "{scored}");
    assert_eq!(scored["mem_dtype"], "f32", "{scored}");

    // what an integer image cannot run with
    for (flag, word) in [("--mem-dtype", "f32"), ("--mem-dtype", "f16")] {
        for command in ["score", "inspect"] {
            let mut args = vec![command, s(&integer), flag, word];
            if command == "score" {
                args.extend(["--bytes", s(&text)]);
            }
            refused(&args, &["int8 memory", flag]);
        }
    }
    refused(
        &[
            "generate",
            s(&integer),
            "--prompt",
            "The",
            "--length",
            "2",
            "--position-keys",
            "folded",
        ],
        &["position keys", "--position-keys session or segment"],
    );
    refused(
        &[
            "export",
            s(&integer),
            "--rust",
            s(&dir.join("module")),
            "--mem-dtype",
            "f16",
        ],
        &["int8 memory"],
    );
    refused(&["bench", s(&integer), "--tokens", "2"], &["integer image"]);
    // and it is no input to the quantizer
    refused(
        &["quantize", s(&integer), "-o", s(&dir.join("again.txl"))],
        &["integer image", "float image"],
    );

    // export writes int8 memory into the options
    let module = dir.join("module");
    let out = txl(&["export", s(&integer), "--rust", s(&module)]);
    assert!(out.status.success(), "export: {}", stderr(&out));
    let rust = std::fs::read_to_string(module.join("model.rs")).unwrap();
    assert!(
        rust.contains(&format!("arithmetic: integer, activations in Q{frac}")),
        "{rust}"
    );
    assert!(rust.contains("MemDtype::Int8"), "{rust}");

    // compare: the float image as the reference, the integer one as the candidate
    let compared = json(&["compare", s(&float), s(&integer), "--bytes", s(&text), "--json"]);
    assert!(
        compared["candidate_bits_per_token"].as_f64().is_some(),
        "{compared}"
    );
}

#[test]
fn integer_needs_calibration_text_and_int8_or_int4_weights() {
    let dir = scratch_dir("refusals");
    let float = common::convert(&fixture("adaptive_div2"), dir.join("model.txl"));
    let out = dir.join("out.txl");
    let calib = fixture("demo").join("calib.txt");
    let quantize = |flags: &[&str], needles: &[&str]| {
        let mut args = vec!["quantize", s(&float), "-o", s(&out), "--integer"];
        args.extend(flags);
        refused(&args, needles);
        assert!(!out.exists(), "{flags:?} wrote an image");
    };
    quantize(&[], &["--calib-bytes"]);
    quantize(&["--dtype", "f16", "--calib-bytes", s(&calib)], &["--dtype int8"]);
    quantize(
        &["--dtype", "int4-all", "--calib-bytes", s(&calib)],
        &["must be int8", "--dtype int4"],
    );
    quantize(
        &["--keep-f16", "*ff*", "--calib-bytes", s(&calib)],
        &["--keep-f16", "int8 or int4"],
    );
    quantize(
        &["--auto-keep-f16", "1", "--calib-bytes", s(&calib)],
        &["--auto-keep-f16"],
    );
    let checkpoint = fixture("adaptive_div2");
    for dtype in ["f32", "f16"] {
        refused(
            &[
                "convert",
                s(&checkpoint),
                "-o",
                s(&out),
                "--integer",
                "--dtype",
                dtype,
                "--calib-bytes",
                s(&calib),
            ],
            &["--integer", "--dtype int8"],
        );
    }
    refused(
        &["convert", s(&checkpoint), "-o", s(&out), "--integer"],
        &["--integer", "--dtype int8"],
    );
    assert!(!out.exists());
}

#[test]
fn convert_integer_converts_quantizes_and_calibrates_in_one_step() {
    let dir = scratch_dir("convert");
    let out = dir.join("model.txl");
    // token ids of adaptive_div2's vocabulary
    let calib = dir.join("calib.txt");
    let ids: Vec<String> = (0..400).map(|i| ((i * 7) % 300).to_string()).collect();
    std::fs::write(&calib, ids.join(" ")).unwrap();
    #[rustfmt::skip]
    let run = txl(&[
        "convert", s(&fixture("adaptive_div2")), "-o", s(&out), "--dtype", "int4", "--integer",
        "--calib-tokens", s(&calib), "--calib-backend", "cpu32", "--smooth", "off",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let bytes = std::fs::read(&out).unwrap();
    assert!(
        matches!(parse(&bytes), Ok(Arithmetic::Integer { .. })),
        "{:?}",
        parse(&bytes)
    );
}

#[test]
fn quantize_integer_smooths_in_powers_of_two() {
    let dir = scratch_dir("power-of-two");
    let (_, integer, out) = quantize_demo_integer(&dir, "0.5");
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = AlignedBytes::copy_from(&std::fs::read(&integer).unwrap()).unwrap();
    let model = Model::parse(bytes.bytes()).unwrap();
    // every smoothed input's scales are powers of two: the integer arithmetic shifts
    let mut smoothed = 0;
    for layer in 0..model.config().n_layer as usize {
        let w = model.layer(layer);
        for m in [w.qkv, w.o_net, w.ff1_weight, w.ff2_weight] {
            if let txl_core::weights::MatrixData::Int8 {
                act_scales: Some(act),
                ..
            } = m.data
            {
                assert!(txl_core::integer::pow2_act_top(act).is_some(), "{act:?}");
                smoothed += 1;
            }
        }
    }
    assert!(smoothed > 0, "nothing smoothed");
}

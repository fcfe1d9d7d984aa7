//! Every flag of every `txl` subcommand does what its `--help` says: for each, a run with
//! another value gives another result (a digest, a JSON field, a file, an image, a report), or
//! the result reports the setting it ran with, or a file appears with the right shape. A flag
//! that is parsed and then ignored fails here, with a message naming the flag.
//!
//! Some flags change results only in some settings, which the tests choose: `--clamp-len` needs
//! distances beyond the clamp, `--same-length` needs memory. `--position-keys segment` gives the
//! same bits by design (only where the keys live changes), so for it the tests check the arena;
//! `folded` sums in another order, so it changes both the bits (slightly) and the arena.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};
use txl_core::digest::Digest;
use txl_core::{MemDtype, Model, PositionKeys, Session, SessionOptions};
use txl_tools::npy;

mod common;
use common::{fixture, quantize, s, scratch_dir, stderr, txl, txl_in};

/// The stdout of a run that must succeed.
fn stdout(output: &Output, what: &str) -> String {
    assert!(output.status.success(), "{what}: {}", stderr(output));
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The one JSON object a successful run prints.
fn json(output: &Output, what: &str) -> Value {
    serde_json::from_str(&stdout(output, what)).unwrap_or_else(|e| panic!("{what}: not one JSON object: {e}"))
}

/// Asserts that the run failed with exit status 1 and that stderr contains `words`.
fn assert_refused(output: &Output, words: &str, what: &str) {
    let text = stderr(output);
    assert_eq!(output.status.code(), Some(1), "{what}: {text}");
    assert!(
        text.starts_with("error: ") && text.contains(words),
        "{what}: {text}"
    );
}

/// Converts fixture `name` into `dir/NAME.txl`, which it returns.
fn convert_fixture(name: &str, dir: &Path) -> PathBuf {
    let image = dir.join(format!("{name}.txl"));
    let out = txl(&["convert", s(&fixture(name)), "-o", s(&image)]);
    assert!(out.status.success(), "convert {name}: {}", stderr(&out));
    image
}

/// The small model most tests use (`adaptive_div2`: tgt_len 6, mem_len 10, no clamp, no
/// same_length, 300 tokens) as an image in `dir`, and its token file (48 ids, 175 bytes).
fn small_model(dir: &Path) -> (PathBuf, PathBuf) {
    (
        convert_fixture("adaptive_div2", dir),
        fixture("adaptive_div2").join("tokens.txt"),
    )
}

/// The token ids of a `--tokens` file.
fn token_ids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect()
}

/// `txl score IMAGE --tokens TOKENS --json FLAGS`.
fn score(image: &Path, tokens: &Path, flags: &[&str]) -> Value {
    let mut args = vec!["score", s(image), "--tokens", s(tokens), "--json"];
    args.extend(flags);
    json(&txl(&args), &format!("score {flags:?}"))
}

/// The arena bytes of one core session of `image` as a device runs it (pairs of positions a
/// pass, `Session::arena_bytes`), with its config's options changed by `edit`.
fn arena_bytes(image: &Path, edit: impl FnOnce(&mut SessionOptions)) -> u64 {
    arena_bytes_for(image, edit, txl_core::arena::DEFAULT_POSITIONS_PER_PASS)
}

/// [`arena_bytes`] for the sessions the host commands run (`score`, `compare`, `generate`,
/// `bench`), which take `scoring::POSITIONS_PER_PASS` positions a pass.
fn host_arena_bytes(image: &Path, edit: impl FnOnce(&mut SessionOptions)) -> u64 {
    arena_bytes_for(image, edit, txl_core::scoring::POSITIONS_PER_PASS)
}

fn arena_bytes_for(image: &Path, edit: impl FnOnce(&mut SessionOptions), positions: usize) -> u64 {
    let bytes = txl_tools::image_file::read_image(image).unwrap();
    let model = Model::parse(bytes.bytes()).unwrap();
    let mut options = SessionOptions::from_config(model.config());
    edit(&mut options);
    Session::arena_bytes_for_positions_per_pass(&model, &options, positions).unwrap() as u64
}

/// A memory length no machine has the arena for: about 1.5 TB on `adaptive_div2`.
const HUGE_MEM_LEN: &str = "4000000000";

/// The arena bytes that a run refused for want of memory says it needs
/// (`error: the session needs N bytes of arena ...`).
fn refused_arena_bytes(args: &[&str]) -> u64 {
    let out = txl(args);
    assert_refused(&out, "bytes of arena", &format!("{args:?}"));
    let text = stderr(&out);
    let words: Vec<&str> = text.split_whitespace().collect();
    let at = words.iter().position(|&w| w == "need" || w == "needs").unwrap();
    words[at + 1]
        .parse()
        .unwrap_or_else(|_| panic!("{args:?}: {text}"))
}

/// `--dtype` and `-o` of `convert`, and `--format`: with one of the two weights files broken,
/// only the flag that names the other one converts.
#[test]
fn convert_reads_the_format_asked_and_writes_the_precision_asked() {
    let dir = scratch_dir("convert");
    let src = fixture("adaptive_div2");

    let out_path = dir.join("made/here.txl");
    let out = txl(&["convert", s(&src), "-o", s(&out_path)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let intact = std::fs::read(&out_path).unwrap_or_else(|_| panic!("-o: nothing at {}", out_path.display()));
    let aligned = txl_core::AlignedBytes::copy_from(&intact).unwrap();
    assert!(Model::parse(aligned.bytes()).is_ok(), "-o: not a model image");

    for (broken, good) in [
        ("model.safetensors", "pytorch-bin"),
        ("pytorch_model.bin", "safetensors"),
    ] {
        let ckpt = dir.join(format!("broken-{broken}"));
        std::fs::create_dir_all(&ckpt).unwrap();
        for file in ["config.json", "model.safetensors", "pytorch_model.bin"] {
            std::fs::copy(src.join(file), ckpt.join(file)).unwrap();
        }
        let bytes = std::fs::read(src.join(broken)).unwrap();
        std::fs::write(ckpt.join(broken), &bytes[..bytes.len() / 2]).unwrap();
        let bad = if good == "safetensors" {
            "pytorch-bin"
        } else {
            "safetensors"
        };

        let image = dir.join(format!("{good}.txl"));
        let out = txl(&["convert", s(&ckpt), "-o", s(&image), "--format", good]);
        assert!(
            out.status.success(),
            "--format {good} read the broken {broken}: {}",
            stderr(&out)
        );
        assert_eq!(std::fs::read(&image).unwrap(), intact, "--format {good}");
        let out = txl(&["convert", s(&ckpt), "-o", s(&image), "--format", bad]);
        assert_refused(&out, broken, &format!("--format {bad} did not read {broken}"));
    }

    let mut sizes = Vec::new();
    for dtype in ["f32", "f16", "int8"] {
        let image = dir.join(format!("{dtype}.txl"));
        let out = txl(&["convert", s(&src), "-o", s(&image), "--dtype", dtype]);
        assert!(out.status.success(), "--dtype {dtype}: {}", stderr(&out));
        let summary = score(&image, &src.join("tokens.txt"), &[]);
        assert_eq!(summary["precision"], dtype, "--dtype {dtype}");
        sizes.push(std::fs::metadata(&image).unwrap().len());
    }
    assert!(
        sizes[0] > sizes[1] && sizes[1] > sizes[2],
        "--dtype: sizes {sizes:?}"
    );
}

/// `convert --dtype int8` takes every quantizer flag as `quantize` does (the flags themselves
/// are tested on `quantize` below), and refuses them without `--dtype`.
#[test]
fn convert_passes_the_quantizer_flags_on() {
    let dir = scratch_dir("convert-quantize");
    let src = fixture("adaptive_div2");
    let tokens = src.join("tokens.txt");
    let f32_image = convert_fixture("adaptive_div2", &dir);
    #[rustfmt::skip]
    let flags = [
        "--calib-tokens", s(&tokens), "--calib-limit", "20", "--smooth", "0.25",
        "--keep-f16", "crit.cluster_weight", "--auto-keep-f16", "1",
    ];
    let mut results = Vec::new();
    for command in ["convert", "quantize"] {
        let (input, image, report) = (
            if command == "convert" { &src } else { &f32_image },
            dir.join(format!("{command}.txl")),
            dir.join(format!("{command}.json")),
        );
        let mut args = vec![
            command,
            s(input),
            "-o",
            s(&image),
            "--dtype",
            "int8",
            "--report",
            s(&report),
        ];
        args.extend(flags);
        let out = txl(&args);
        assert!(out.status.success(), "{command}: {}", stderr(&out));
        let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        results.push((std::fs::read(&image).unwrap(), report));
    }
    let (image, report) = &results[0];
    assert!(
        *image == results[1].0,
        "convert --dtype int8 made another image than quantize"
    );
    assert_eq!(report["calibration_tokens"], 20, "convert --calib-limit");
    assert_eq!(report["smoothing_alpha"], 0.25, "convert --smooth");
    assert_eq!(f16_tensors(report).len(), 2, "convert --auto-keep-f16 1");
    assert!(
        f16_tensors(report).contains(&"crit.cluster_weight".to_string()),
        "convert --keep-f16"
    );

    let report_path = dir.join("bytes.json");
    #[rustfmt::skip]
    let out = txl(&[
        "convert", s(&src), "-o", s(&dir.join("bytes.txl")), "--dtype", "f16",
        "--calib-bytes", s(&tokens), "--report", s(&report_path),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let n_bytes = std::fs::metadata(&tokens).unwrap().len();
    assert_eq!(report["calibration_tokens"], n_bytes, "convert --calib-bytes");
    assert_eq!(report["target"], "f16", "convert --dtype f16 --report");
    // The full report compares every precision, each measured on the calibration text.
    let precisions: Vec<(String, f64)> = report["precisions"]
        .as_array()
        .expect("--report: no precisions")
        .iter()
        .map(|p| {
            (
                p["precision"].as_str().unwrap().to_string(),
                p["bits_per_token"].as_f64().unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = precisions.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["f16", "int8", "int4", "int4-all"], "--report precisions");

    // An f32 conversion quantizes nothing: each flag is refused rather than dropped.
    let report_path = dir.join("unused.json");
    let plain = dir.join("plain.txl");
    for flag in [
        ["--calib-bytes", s(&tokens)],
        ["--calib-tokens", s(&tokens)],
        ["--calib-limit", "20"],
        ["--calib-backend", "cpu"],
        ["--smooth", "off"],
        ["--keep-f16", "crit.*"],
        ["--auto-keep-f16", "1"],
        ["--auto-keep-int8", "1"],
        ["--budget-bytes", "100000"],
        ["--report", s(&report_path)],
        ["--report-png", s(&report_path)],
    ] {
        let mut args = vec!["convert", s(&src), "-o", s(&plain)];
        args.extend(flag);
        assert_refused(&txl(&args), flag[0], &format!("convert {flag:?} without --dtype"));
    }
    assert!(
        !report_path.exists(),
        "convert --report without --dtype wrote a report"
    );
}

/// The names of the tensors a quantizer report lists in f16.
fn f16_tensors(report: &Value) -> Vec<String> {
    report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["dtype"] == "f16")
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// Whether `name` is a vector of the image (a bias, a LayerNorm gain, `u` or `v`).
fn is_vector(name: &str) -> bool {
    name.ends_with("bias") || name.ends_with("layer_norm.weight")
}

/// The dtypes of the report's vectors, each once.
fn vector_dtypes(report: &Value) -> Vec<String> {
    let mut dtypes: Vec<String> = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| is_vector(t["name"].as_str().unwrap()))
        .map(|t| t["dtype"].as_str().unwrap().to_string())
        .collect();
    dtypes.dedup();
    dtypes
}

#[test]
fn every_quantizer_flag_changes_the_image_or_the_report() {
    let dir = scratch_dir("quantize");
    let (image, tokens) = small_model(&dir);
    let n_ids = token_ids(&tokens).len();
    let n_bytes = std::fs::metadata(&tokens).unwrap().len() as usize;
    let calib = ["--calib-tokens", s(&tokens)];

    let (int8, plain) = quantize(&image, &dir, "plain", &[]);
    assert_eq!(plain["target"], "int8");
    assert_eq!(plain["calibration_tokens"], 0);
    let (f16, report) = quantize(&image, &dir, "f16", &["--dtype", "f16"]);
    assert_eq!(report["target"], "f16", "--dtype f16");
    assert!(f16.len() > int8.len(), "--dtype f16: no larger than int8");
    let precision = |bytes: &[u8], name: &str| {
        let path = dir.join(format!("{name}-check.txl"));
        std::fs::write(&path, bytes).unwrap();
        score(&path, &tokens, &[])["precision"].clone()
    };
    assert_eq!(precision(&f16, "f16"), "f16", "--dtype f16");
    assert_eq!(precision(&int8, "int8"), "int8", "--dtype int8");

    let (_, by_id) = quantize(&image, &dir, "ids", &calib);
    assert_eq!(by_id["calibration_tokens"], n_ids, "--calib-tokens");
    let (_, by_byte) = quantize(&image, &dir, "bytes", &["--calib-bytes", s(&tokens)]);
    assert_eq!(by_byte["calibration_tokens"], n_bytes, "--calib-bytes");
    let (_, limited) = quantize(
        &image,
        &dir,
        "limit",
        &[&calib[..], &["--calib-limit", "20"]].concat(),
    );
    assert_eq!(limited["calibration_tokens"], 20, "--calib-limit");
    assert_ne!(
        limited["bits_per_token"], by_id["bits_per_token"],
        "--calib-limit"
    );

    // Without calibration text smoothing is off; with it, auto searches strengths.
    assert!(!by_id["smoothing_search"].as_array().unwrap().is_empty());
    let (off, report) = quantize(&image, &dir, "off", &[&calib[..], &["--smooth", "off"]].concat());
    assert_eq!(report["smoothing_alpha"], Value::Null, "--smooth off");
    assert!(
        report["smoothing_search"].as_array().unwrap().is_empty(),
        "--smooth off"
    );
    let (alpha, report) = quantize(
        &image,
        &dir,
        "alpha",
        &[&calib[..], &["--smooth", "0.25"]].concat(),
    );
    assert_eq!(report["smoothing_alpha"], 0.25, "--smooth 0.25");
    assert!(alpha != off, "--smooth 0.25 made the image --smooth off makes");

    assert!(f16_tensors(&plain).is_empty());
    let (kept, report) = quantize(&image, &dir, "keep", &["--keep-f16", "crit.*"]);
    let names = f16_tensors(&report);
    assert!(
        !names.is_empty() && names.iter().all(|n| n.starts_with("crit.")),
        "--keep-f16 crit.*: {names:?}"
    );
    assert_eq!(precision(&kept, "keep"), "mixed", "--keep-f16");
    let (_, report) = quantize(
        &image,
        &dir,
        "auto",
        &[&calib[..], &["--auto-keep-f16", "2"]].concat(),
    );
    assert_eq!(f16_tensors(&report).len(), 2, "--auto-keep-f16 2");

    // int4: the decoder layers' matrices (int4-all: every matrix), in groups of --group-size
    let dtypes = |report: &Value| -> Vec<(String, String)> {
        report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| !is_vector(t["name"].as_str().unwrap()))
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["dtype"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (int4, report) = quantize(&image, &dir, "int4", &["--dtype", "int4"]);
    assert_eq!(report["target"], "int4", "--dtype int4");
    assert_eq!(vector_dtypes(&report), ["f16"], "--dtype int4: vectors");
    for (name, dtype) in dtypes(&report) {
        let expected = if name.starts_with("layers.") {
            "int4"
        } else {
            "int8"
        };
        assert_eq!(dtype, expected, "--dtype int4: {name}");
    }
    assert!(int4.len() < int8.len(), "--dtype int4: no smaller than int8");
    assert_eq!(precision(&int4, "int4"), "mixed", "--dtype int4");
    let (int4_all, report) = quantize(&image, &dir, "int4-all", &["--dtype", "int4-all"]);
    assert_eq!(report["target"], "int4-all", "--dtype int4-all");
    assert!(
        dtypes(&report).iter().all(|(_, dtype)| dtype == "int4"),
        "--dtype int4-all"
    );
    assert_eq!(precision(&int4_all, "int4-all"), "int4", "--dtype int4-all");
    // --vectors: f16 by default with int4 (above), f32 with int8; either way on request
    assert_eq!(vector_dtypes(&plain), ["f32"], "int8: vectors");
    let (wide, report) = quantize(&image, &dir, "int4-v32", &["--dtype", "int4", "--vectors", "f32"]);
    assert_eq!(vector_dtypes(&report), ["f32"], "--dtype int4 --vectors f32");
    assert!(
        wide.len() > int4.len(),
        "--vectors f32: no larger than f16 vectors"
    );
    let (narrow, report) = quantize(&image, &dir, "int8-v16", &["--vectors", "f16"]);
    assert_eq!(vector_dtypes(&report), ["f16"], "--dtype int8 --vectors f16");
    assert!(
        narrow.len() < int8.len(),
        "--vectors f16: no smaller than f32 vectors"
    );
    let refused = txl(&[
        "quantize",
        s(&image),
        "-o",
        s(&dir.join("v.txl")),
        "--vectors",
        "int8",
    ]);
    let text = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "--vectors int8: {text}");
    assert!(
        text.contains("f32") && text.contains("f16"),
        "--vectors int8: {text}"
    );
    let (groups_of_8, _) = quantize(&image, &dir, "group-8", &["--dtype", "int4", "--group-size", "8"]);
    assert!(
        groups_of_8.len() > int4.len(),
        "--group-size 8: no more multipliers than 32"
    );
    let refused = txl(&[
        "quantize",
        s(&image),
        "-o",
        s(&dir.join("g.txl")),
        "--group-size",
        "64",
    ]);
    assert_refused(&refused, "--group-size", "--group-size with int8");
    let refused = txl(&[
        "quantize",
        s(&image),
        "-o",
        s(&dir.join("g.txl")),
        "--dtype",
        "int4",
        "--group-size",
        "12",
    ]);
    assert_refused(&refused, "multiple of 8", "--group-size 12");

    // --auto-keep-int8 K: the K int4 tensors that cost most alone, in int8.
    let int4_calib = [&calib[..], &["--dtype", "int4", "--smooth", "off"]].concat();
    let (plain_int4, report) = quantize(&image, &dir, "int4-calib", &int4_calib);
    assert_eq!(report["budget_bytes"], Value::Null);
    let kept_for = |report: &Value, why: &str| -> Vec<(String, String)> {
        report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kept_for"] == why)
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["dtype"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (kept, report) = quantize(
        &image,
        &dir,
        "keep-int8",
        &[&int4_calib[..], &["--auto-keep-int8", "2"]].concat(),
    );
    let int8_kept = kept_for(&report, "auto-keep-int8");
    assert_eq!(int8_kept.len(), 2, "--auto-keep-int8 2: {int8_kept:?}");
    assert!(
        int8_kept
            .iter()
            .all(|(name, dtype)| name.starts_with("layers.") && dtype == "int8"),
        "--auto-keep-int8 2: {int8_kept:?}"
    );
    assert!(
        kept.len() > plain_int4.len(),
        "--auto-keep-int8 2: no larger image"
    );
    let refused = txl(&[
        "quantize",
        s(&image),
        "-o",
        s(&dir.join("k.txl")),
        "--calib-tokens",
        s(&tokens),
        "--auto-keep-int8",
        "1",
    ]);
    assert_refused(&refused, "int4", "--auto-keep-int8 with int8");

    // --budget-bytes N: between the int4 and the int8 image, some int4 tensors go to int8 and
    // the image stays within N; below the smallest image, refused.
    let budget = (plain_int4.len() + int8.len()) / 2;
    let budget_flag = budget.to_string();
    let (fitted, report) = quantize(
        &image,
        &dir,
        "budget",
        &[&int4_calib[..], &["--budget-bytes", &budget_flag]].concat(),
    );
    assert!(
        fitted.len() <= budget && fitted.len() > plain_int4.len(),
        "--budget-bytes {budget}: {} bytes (int4 {})",
        fitted.len(),
        plain_int4.len()
    );
    assert_eq!(report["budget_bytes"], budget, "--budget-bytes");
    assert_eq!(report["smallest_image_bytes"], plain_int4.len(), "--budget-bytes");
    assert!(
        !kept_for(&report, "budget").is_empty(),
        "--budget-bytes {budget}: nothing raised"
    );
    let too_small = (plain_int4.len() - 10).to_string();
    let refused_image = dir.join("b.txl");
    let mut args = vec!["quantize", s(&image), "-o", s(&refused_image)];
    args.extend(&int4_calib);
    args.extend(["--budget-bytes", too_small.as_str()]);
    assert_refused(&txl(&args), "10 over the budget", "--budget-bytes below int4");
    assert!(
        !dir.join("b.txl").exists(),
        "--budget-bytes below int4: an image was written"
    );
}

/// The size and the distinct colours of a PNG file.
fn png_size_and_colours(path: &Path) -> ((u32, u32), usize) {
    let file = std::fs::File::open(path).unwrap_or_else(|_| panic!("nothing at {}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap_or_else(|e| panic!("{}: not a PNG: {e}", path.display()));
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let step = info.color_type.samples();
    let colours: std::collections::HashSet<&[u8]> = pixels[..info.buffer_size()].chunks_exact(step).collect();
    ((info.width, info.height), colours.len())
}

#[test]
fn report_png_draws_the_report() {
    let dir = scratch_dir("quantize-png");
    let (image, tokens) = small_model(&dir);
    for (name, flags) in [
        ("measured", vec!["--calib-tokens", s(&tokens), "--dtype", "int4"]),
        ("unmeasured", vec![]),
    ] {
        let png = dir.join(format!("{name}.png"));
        let mut args = vec!["--report-png", s(&png)];
        args.extend(flags);
        quantize(&image, &dir, name, &args);
        let (size, colours) = png_size_and_colours(&png);
        // laid out to its content: a few hundred pixels a side at least, within reason
        let (width, height) = size;
        assert!(
            (600..=3000).contains(&width) && (300..=3000).contains(&height),
            "--report-png ({name}): {size:?}"
        );
        assert!(colours > 10, "--report-png ({name}): {colours} colours");
    }
}

/// The session flags every subcommand shares, with a value each that differs from
/// `adaptive_div2`'s config: `(flag, value, the key score's JSON reports it under, that value)`.
fn session_flags() -> [(&'static str, &'static str, &'static str, Value); 6] {
    [
        ("--tgt-len", "12", "tgt_len", json!(12)),
        ("--mem-len", "4", "mem_len", json!(4)),
        // Distances reach mem_len + tgt_len = 16, beyond a clamp of 3.
        ("--clamp-len", "3", "clamp_len", json!(3)),
        // With a memory of 10, equal lengths hide the oldest keys from the later queries.
        ("--same-length", "true", "same_length", json!(true)),
        ("--mem-init", "zeros", "mem_init", json!("zeros")),
        ("--mem-dtype", "int8", "mem_dtype", json!("int8")),
    ]
}

#[test]
fn score_session_flags_change_the_scores() {
    let dir = scratch_dir("score-session");
    let (image, tokens) = small_model(&dir);
    let base = score(&image, &tokens, &[]);
    #[rustfmt::skip]
    let defaults = [("tgt_len", json!(6)), ("mem_len", json!(10)), ("clamp_len", json!(0)),
        ("same_length", json!(false)), ("mem_init", json!("empty")), ("mem_dtype", json!("f32")),
        ("position_keys", json!("session"))];
    for (key, value) in defaults {
        assert_eq!(base[key], value, "{key} without a flag");
    }
    let mut flags = session_flags().to_vec();
    flags.push(("--mem-dtype", "f16", "mem_dtype", json!("f16")));
    for (flag, value, key, reported) in flags {
        let summary = score(&image, &tokens, &[flag, value]);
        assert_eq!(summary[key], reported, "score {flag} {value}: not reported");
        assert_ne!(
            summary["digest"], base["digest"],
            "score {flag} {value}: the scores of the config's setting"
        );
    }

    // The position keys give the same bits by design, only kept otherwise (one table recomputed
    // for each layer instead of one per layer): the JSON reports the setting, and the arena
    // differs.
    let summary = score(&image, &tokens, &["--position-keys", "segment"]);
    assert_eq!(
        summary["position_keys"], "segment",
        "score --position-keys: not reported"
    );
    assert_eq!(
        summary["digest"], base["digest"],
        "--position-keys changed the bits"
    );
    let inspect = |flags: &[&str]| {
        let mut args = vec!["inspect", s(&image)];
        args.extend(flags);
        arena_line(&stdout(&txl(&args), "inspect"))
    };
    let expected = arena_bytes(&image, |o| o.position_keys = PositionKeys::PerSegment);
    assert_eq!(
        inspect(&["--position-keys", "segment"]),
        expected,
        "inspect --position-keys segment"
    );
    assert_ne!(expected, inspect(&[]), "--position-keys: the same arena");

    // W_r folded into the queries sums in another order: other bits, the same scores within
    // the tolerance the references are held to, and an arena without key tables.
    let folded = score(&image, &tokens, &["--position-keys", "folded"]);
    assert_eq!(
        folded["position_keys"], "folded",
        "score --position-keys folded: not reported"
    );
    assert_ne!(
        folded["digest"], base["digest"],
        "score --position-keys folded: the kept keys' bits"
    );
    let nll = |v: &Value| v["nll"].as_f64().unwrap();
    assert!(
        (nll(&folded) - nll(&base)).abs() < 1e-5,
        "score --position-keys folded: nll {} against {}",
        nll(&folded),
        nll(&base)
    );
    let expected = arena_bytes(&image, |o| o.position_keys = PositionKeys::FoldedIntoQuery);
    assert_eq!(
        inspect(&["--position-keys", "folded"]),
        expected,
        "inspect --position-keys folded"
    );
    assert_ne!(
        expected,
        inspect(&["--position-keys", "segment"]),
        "--position-keys folded: the arena of segment"
    );
}

/// `arena bytes   N` of `txl inspect`'s output.
fn arena_line(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("arena bytes"))
        .unwrap_or_else(|| panic!("no arena bytes in {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn score_source_backend_and_output_flags() {
    let dir = scratch_dir("score-output");
    let (image, tokens) = small_model(&dir);
    let ids = token_ids(&tokens);
    let base = score(&image, &tokens, &[]);
    assert_eq!(base["tokens"], ids.len(), "--tokens");
    let out = txl(&["score", s(&image), "--bytes", s(&tokens), "--json"]);
    let by_bytes = json(&out, "score --bytes");
    let n_bytes = std::fs::metadata(&tokens).unwrap().len();
    assert_eq!(by_bytes["tokens"], n_bytes, "--bytes: not one token per byte");

    let mut digests = vec![base["digest"].clone()];
    for (backend, mem_dtype) in [("cpu", "f64"), ("cpu32", "f32")] {
        let summary = score(&image, &tokens, &["--backend", backend]);
        assert_eq!(summary["backend"], backend, "--backend {backend}");
        assert_eq!(summary["mem_dtype"], mem_dtype, "--backend {backend}");
        assert!(
            !digests.contains(&summary["digest"]),
            "--backend {backend}: bits another backend gave"
        );
        digests.push(summary["digest"].clone());
    }

    // --fast-f32: other bits (its own digest), the same scores to a few ulps, reported; the
    // reference refuses it
    let fast = score(&image, &tokens, &["--fast-f32"]);
    assert_eq!(fast["fast_f32"], true, "--fast-f32: not reported");
    assert_eq!(base["fast_f32"], false, "without --fast-f32");
    assert!(!digests.contains(&fast["digest"]), "--fast-f32: the exact bits");
    let (exact_nll, fast_nll) = (base["nll"].as_f64().unwrap(), fast["nll"].as_f64().unwrap());
    assert!(
        (exact_nll - fast_nll).abs() < 1e-5 * exact_nll,
        "--fast-f32: nll {fast_nll} vs {exact_nll}"
    );
    let out = txl(&[
        "score",
        s(&image),
        "--tokens",
        s(&tokens),
        "--backend",
        "cpu",
        "--fast-f32",
    ]);
    assert_refused(&out, "--fast-f32", "score --backend cpu --fast-f32");

    let logp = dir.join("logp.npy");
    let mut rows_seen = Vec::new();
    for k in [2usize, 5] {
        let rows = dir.join(format!("rows{k}.npy"));
        let summary = score(
            &image,
            &tokens,
            &[
                "--out",
                s(&logp),
                "--rows",
                &k.to_string(),
                "--rows-out",
                s(&rows),
            ],
        );
        let logp = npy::read(&logp).unwrap();
        assert_eq!(logp.shape, vec![ids.len() - 1], "--out: shape");
        let values: Vec<f32> = logp.data.iter().map(|&v| v as f32).collect();
        let digest = format!("{:#010x}", Digest::of(&values));
        assert_eq!(summary["digest"], digest, "--out: not the values scored");
        let rows = npy::read(&rows).unwrap();
        assert_eq!(rows.shape, vec![k, 300], "--rows {k} --rows-out: shape");
        for i in 0..k {
            let row = &rows.data[i * 300..(i + 1) * 300];
            assert_eq!(
                row[ids[i + 1] as usize],
                logp.data[i],
                "--rows-out row {i}: not the row --out took ln p from"
            );
        }
        rows_seen.push(rows.data);
    }
    assert_eq!(
        rows_seen[1][..600],
        rows_seen[0][..],
        "--rows 5 begins with --rows 2"
    );

    let text = stdout(&txl(&["score", s(&image), "--tokens", s(&tokens)]), "score");
    assert!(
        serde_json::from_str::<Value>(&text).is_err(),
        "without --json: {text}"
    );
    let digest = base["digest"].as_str().unwrap();
    assert!(
        text.starts_with("tokens 48 ") && text.contains(&format!("digest {digest}")),
        "score text: {text}"
    );
}

#[test]
fn compare_flags_change_what_is_compared() {
    let dir = scratch_dir("compare");
    let (image, tokens) = small_model(&dir);
    let compare = |flags: &[&str]| {
        let mut args = vec!["compare", s(&image), s(&image), "--tokens", s(&tokens), "--json"];
        args.extend(flags);
        json(&txl(&args), &format!("compare {flags:?}"))
    };
    let base = compare(&[]);
    assert_eq!(base["tokens"], 48, "--tokens");
    assert_eq!(base["max_abs_delta_logp"], 0.0, "an image against itself");
    let mut args = vec!["compare", s(&image), s(&image), "--bytes", s(&tokens), "--json"];
    let by_bytes = json(&txl(&args), "compare --bytes");
    let n_bytes = std::fs::metadata(&tokens).unwrap().len();
    assert_eq!(by_bytes["tokens"], n_bytes, "compare --bytes");

    // Both sides run with the session flags: the reference scores what `score` scores.
    let close = |a: &Value, b: &Value| (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-12;
    let base_bits = &base["reference_bits_per_token"];
    for (flag, value, _, _) in session_flags() {
        let result = compare(&[flag, value]);
        let (reference, candidate) = (
            &result["reference_bits_per_token"],
            &result["candidate_bits_per_token"],
        );
        let scored = &score(&image, &tokens, &[flag, value])["bits_per_token"];
        if flag == "--mem-dtype" {
            // The candidate's memory only; the reference keeps f32.
            assert!(
                close(reference, base_bits),
                "compare {flag} {value}: changed the reference"
            );
            assert!(
                close(candidate, scored),
                "compare {flag} {value}: not the candidate's memory"
            );
        } else {
            assert!(
                !close(reference, base_bits),
                "compare {flag} {value}: the reference of the config's setting"
            );
            assert!(
                close(reference, scored) && close(candidate, scored),
                "compare {flag} {value}: {result}, score says {scored}"
            );
        }
    }

    // Same bits by design; the two sessions' arena is another one.
    assert_eq!(
        compare(&["--position-keys", "segment"]),
        base,
        "compare --position-keys"
    );
    let arena = |keys: &str| {
        #[rustfmt::skip]
        let args = ["compare", s(&image), s(&image), "--tokens", s(&tokens),
            "--mem-len", HUGE_MEM_LEN, "--position-keys", keys];
        refused_arena_bytes(&args)
    };
    let expected = 2 * host_arena_bytes(&image, |o| {
        o.mem_len = HUGE_MEM_LEN.parse().unwrap();
        o.position_keys = PositionKeys::PerSegment;
    });
    assert_eq!(arena("segment"), expected, "compare --position-keys segment");
    assert_ne!(arena("session"), expected, "compare --position-keys");
    // Folded: both sides sum in its order, as score does.
    let folded = compare(&["--position-keys", "folded"]);
    let scored = &score(&image, &tokens, &["--position-keys", "folded"])["bits_per_token"];
    for side in ["reference_bits_per_token", "candidate_bits_per_token"] {
        assert!(
            close(&folded[side], scored) && !close(&folded[side], base_bits),
            "compare --position-keys folded: {side} {}, score says {scored}",
            folded[side]
        );
    }
    let expected = 2 * host_arena_bytes(&image, |o| {
        o.mem_len = HUGE_MEM_LEN.parse().unwrap();
        o.position_keys = PositionKeys::FoldedIntoQuery;
    });
    assert_eq!(arena("folded"), expected, "compare --position-keys folded");

    args.pop();
    let text = stdout(&txl(&args), "compare");
    assert!(
        serde_json::from_str::<Value>(&text).is_err() && text.contains("reference bits/token"),
        "compare without --json: {text}"
    );
}

#[test]
fn eval_flags_change_what_is_evaluated() {
    let dir = scratch_dir("eval");
    let (image, tokens) = small_model(&dir);
    let eval = |flags: &[&str]| {
        let mut args = vec!["eval", s(&image), "--text", s(&tokens), "--json"];
        args.extend(flags);
        json(&txl(&args), &format!("eval {flags:?}"))
    };
    let one_stream = ["--backend", "cpu", "--batch", "1"];
    let base = eval(&one_stream);
    assert_eq!(base["tokens"], 48, "--text");
    assert_eq!(base["streams"], 1, "--batch 1");
    assert_eq!(base["backend"], "cpu", "--backend cpu");
    let by_bytes = eval(&[&one_stream[..], &["--bytes"]].concat());
    let n_bytes = std::fs::metadata(&tokens).unwrap().len();
    assert_eq!(by_bytes["tokens"], n_bytes, "eval --bytes");
    let nll = |v: &Value| v["nll"].as_f64().unwrap();

    let three = eval(&["--backend", "cpu", "--batch", "3"]);
    assert_eq!(three["streams"], 3, "--batch 3");
    assert!(nll(&three) != nll(&base), "--batch 3: the nll of one stream");
    let cpu32 = eval(&["--backend", "cpu32", "--batch", "1"]);
    assert_eq!(cpu32["backend"], "cpu32", "--backend cpu32");
    assert!(nll(&cpu32) != nll(&base), "--backend cpu32: the nll of f64");
    let out = txl(&["eval", s(&image), "--text", s(&tokens), "--backend", "core"]);
    assert_refused(&out, "score --backend core", "eval --backend core");

    // One stream of the f64 reference is what `score --backend cpu` computes.
    for (flag, value, _, _) in session_flags() {
        if flag == "--mem-dtype" {
            continue;
        }
        let evaluated = nll(&eval(&[&one_stream[..], &[flag, value]].concat()));
        let scored = score(&image, &tokens, &["--backend", "cpu", flag, value])["nll"]
            .as_f64()
            .unwrap();
        assert!(
            (evaluated - nll(&base)).abs() > 1e-6,
            "eval {flag} {value}: the nll of the config's setting"
        );
        assert!(
            (evaluated - scored).abs() < 1e-9,
            "eval {flag} {value}: nll {evaluated}, score --backend cpu {scored}"
        );
    }
    // The core's memory options do not apply to the reference: refused, not dropped.
    #[rustfmt::skip]
    let core_only = [["--mem-dtype", "int8"], ["--position-keys", "segment"], ["--position-keys", "folded"]];
    for flag in core_only {
        let mut args = vec!["eval", s(&image), "--text", s(&tokens), "--backend", "cpu"];
        args.extend(flag);
        assert_refused(&txl(&args), "core only", &format!("eval {flag:?}"));
    }

    let text = stdout(
        &txl(&["eval", s(&image), "--text", s(&tokens), "--backend", "cpu"]),
        "eval",
    );
    assert!(
        serde_json::from_str::<Value>(&text).is_err() && text.starts_with("tokens 48 "),
        "eval without --json: {text}"
    );
}

/// `bench` counts the multiply-accumulates of the options it was given (`txl_core::macs`, here
/// for `--tgt-len 2 --mem-len 3`, which change the count) and holds each variant's rate against
/// the limit of its kernels, measured in the same run.
#[test]
fn bench_reports_multiply_accumulates_against_the_measured_limit() {
    let dir = scratch_dir("bench-limit");
    let (image, _) = small_model(&dir);
    #[rustfmt::skip]
    let args = ["bench", s(&image), "--json", "--tokens", "16", "--tgt-len", "2", "--mem-len", "3"];
    let report = json(&txl(&args), "bench --tgt-len 2 --mem-len 3");
    let bytes = txl_tools::image_file::read_image(&image).unwrap();
    let model = Model::parse(bytes.bytes()).unwrap();
    let count = |tgt_len, mem_len| {
        let options = SessionOptions {
            tgt_len,
            mem_len,
            ..SessionOptions::from_config(model.config())
        };
        txl_core::macs::score_macs(model.config(), &options, 16) as f64 / 16.0
    };
    let macs = report["macs_per_token"].as_f64().unwrap();
    assert_eq!(macs, count(2, 3), "bench --tgt-len 2 --mem-len 3: MACs per token");
    assert_ne!(
        macs,
        count(6, 10),
        "the model's own tgt_len and mem_len count otherwise"
    );
    assert_held_against_their_limits(&report, macs, 2);
    let extensions: Vec<&str> = report["extensions"]
        .as_array()
        .expect("bench --json names the extensions its kernels choose from")
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    assert_eq!(
        extensions,
        txl_core::kernels::features::run_time_extensions(),
        "this CPU's extensions"
    );
    // three positions or more a pass: int8 weights are held against the segments' int8 limit
    #[rustfmt::skip]
    let args = ["bench", s(&image), "--json", "--tokens", "16", "--tgt-len", "4", "--mem-len", "3"];
    let report = json(&txl(&args), "bench --tgt-len 4 --mem-len 3");
    assert_held_against_their_limits(&report, count(4, 3), 4);
}

/// Each variant's GMAC/s is its tokens per second times `macs`, and its percentage is of its
/// kernels' limit in the same report (int8 weights in segments of `tgt_len` 3 or more: the
/// segments' int8 limit).
fn assert_held_against_their_limits(report: &serde_json::Value, macs: f64, tgt_len: u32) {
    let limit = |kind: &str| {
        report["limits"][format!("{kind}_gmacs_per_second")]
            .as_f64()
            .unwrap()
    };
    assert!(
        limit("f32") > 0.0 && limit("int8") > 0.0 && limit("fast_f32") > 0.0,
        "limits: {}",
        report["limits"]
    );
    assert!(
        limit("int8_segments") >= limit("int8"),
        "limits: {}",
        report["limits"]
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 7, "six core variants and the reference");
    for m in results {
        let variant = m["variant"].as_str().unwrap();
        let gmacs = m["gmacs_per_second"].as_f64().unwrap();
        let expected = m["tokens_per_second"].as_f64().unwrap() * macs / 1e9;
        assert!(
            (gmacs - expected).abs() <= 1e-9 * expected,
            "{variant}: {gmacs} GMAC/s"
        );
        let kind = if variant.starts_with("int8") && tgt_len >= 3 {
            "int8_segments"
        } else if variant.starts_with("int") {
            "int8"
        } else if variant.contains("fast f32") {
            "fast_f32"
        } else {
            "f32"
        };
        let percent = m["percent_of_limit"].as_f64().unwrap();
        let expected = 100.0 * gmacs / limit(kind);
        assert!(
            (percent - expected).abs() <= 1e-9 * expected,
            "{variant}: {percent}% of {kind}'s limit"
        );
    }
}

#[test]
fn bench_flags_reach_its_sessions_and_its_report() {
    let dir = scratch_dir("bench");
    let (image, _) = small_model(&dir);
    let bench = |flags: &[&str]| {
        let mut args = vec!["bench", s(&image), "--json"];
        args.extend(flags);
        json(&txl(&args), &format!("bench {flags:?}"))
    };
    let base = bench(&["--tokens", "16"]);
    assert_eq!(base["tokens"], 16, "bench --tokens 16");
    assert_eq!(bench(&["--tokens", "24"])["tokens"], 24, "bench --tokens 24");
    #[rustfmt::skip]
    let defaults = [("tgt_len", json!(6)), ("mem_len", json!(10)), ("clamp_len", json!(0)),
        ("same_length", json!(false)), ("mem_init", json!("empty")), ("position_keys", json!("session"))];
    for (key, value) in defaults {
        assert_eq!(base[key], value, "bench reports {key}");
    }
    let mut flags = session_flags()[..5].to_vec();
    flags.push(("--position-keys", "segment", "position_keys", json!("segment")));
    flags.push(("--position-keys", "folded", "position_keys", json!("folded")));
    for (flag, value, key, reported) in flags {
        let report = bench(&["--tokens", "16", flag, value]);
        assert_eq!(report[key], reported, "bench {flag} {value}: not reported");
    }
    // Timings tell nothing of the options; the arena the sessions need does.
    let huge: u32 = HUGE_MEM_LEN.parse().unwrap();
    for (flag, value, edit) in [
        (
            "--position-keys",
            "segment",
            (|o| o.position_keys = PositionKeys::PerSegment) as fn(&mut SessionOptions),
        ),
        ("--position-keys", "folded", |o| {
            o.position_keys = PositionKeys::FoldedIntoQuery
        }),
        ("--clamp-len", "3", |o| o.clamp_len = 3),
    ] {
        #[rustfmt::skip]
        let args = ["bench", s(&image), "--tokens", "16", "--mem-len", HUGE_MEM_LEN, flag, value];
        let expected = host_arena_bytes(&image, |o| {
            o.mem_len = huge;
            edit(o);
        });
        assert_eq!(refused_arena_bytes(&args), expected, "bench {flag} {value}");
        assert_ne!(
            refused_arena_bytes(&args[..6]),
            expected,
            "bench {flag}: the same arena"
        );
    }
    // bench measures each memory dtype in its variants, so --mem-dtype is refused, not dropped.
    let out = txl(&["bench", s(&image), "--tokens", "16", "--mem-dtype", "int8"]);
    assert_refused(&out, "--mem-dtype", "bench --mem-dtype int8");

    let text = stdout(&txl(&["bench", s(&image), "--tokens", "16"]), "bench");
    assert!(
        serde_json::from_str::<Value>(&text).is_err() && text.contains("variant"),
        "bench without --json: {text}"
    );
}

/// `txl generate DEMO --ids FLAGS`: the token ids generated.
fn generate_ids(image: &Path, flags: &[&str]) -> Vec<u32> {
    let mut args = vec!["generate", s(image), "--ids"];
    args.extend(flags);
    stdout(&txl(&args), &format!("generate {flags:?}"))
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect()
}

/// The trained demo model: the random fixtures' next-token distributions are nearly flat, so
/// a changed setting seldom changes a sample there.
#[test]
fn generate_flags_change_what_is_generated() {
    let dir = scratch_dir("generate");
    let image = convert_fixture("demo", &dir);
    let prompt = "And God said";
    let prompt_ids: Vec<String> = prompt.bytes().map(|b| b.to_string()).collect();
    let prompt_ids = prompt_ids.join(" ");
    let base_flags = ["--prompt", prompt, "--length", "200"];
    let generate = |flags: &[&str]| generate_ids(&image, &[&base_flags[..], flags].concat());
    let base = generate(&[]);
    assert_eq!(base.len(), 200, "--length 200");

    let other = generate_ids(&image, &["--prompt", "In the beginning", "--length", "200"]);
    assert!(other != base, "--prompt: another prompt, the same text");
    #[rustfmt::skip]
    let by_ids = generate_ids(&image, &["--prompt-tokens", &prompt_ids, "--length", "200"]);
    assert!(by_ids == base, "--prompt-tokens: not the prompt's bytes as ids");
    let by_ids = generate_ids(&image, &["--prompt-tokens", "73 110", "--length", "200"]);
    assert!(by_ids != base, "--prompt-tokens: another prompt, the same text");
    assert_eq!(
        generate_ids(&image, &["--prompt", prompt, "--length", "7"]).len(),
        7,
        "--length 7"
    );

    assert!(generate(&["--seed", "2"]) != base, "--seed 2: the same text");
    let greedy = generate(&["--temperature", "0"]);
    assert!(greedy != base, "--temperature 0: the samples of 0.8");
    assert!(
        generate(&["--temperature", "0", "--seed", "2"]) == greedy,
        "--temperature 0 is not greedy"
    );
    assert!(
        generate(&["--temperature", "1.5"]) != base,
        "--temperature 1.5: the samples of 0.8"
    );

    let text = stdout(
        &txl(&["generate", s(&image), "--prompt", prompt, "--length", "200"]),
        "generate",
    );
    let bytes: Vec<u8> = base.iter().map(|&t| t as u8).collect();
    assert_eq!(
        text,
        format!("{prompt}{}\n", String::from_utf8_lossy(&bytes)),
        "without --ids: not the prompt and the generated bytes"
    );

    // The demo's config: tgt_len 64, mem_len 64, no clamp, same_length.
    for (flag, value) in [
        ("--tgt-len", "4"),
        ("--mem-len", "8"),
        ("--clamp-len", "2"),
        ("--same-length", "false"),
        ("--mem-init", "zeros"),
        ("--mem-dtype", "int8"),
        ("--mem-dtype", "f16"),
    ] {
        assert!(
            generate(&[flag, value]) != base,
            "generate {flag} {value}: the same text"
        );
    }
    // Same bits by design; the session's arena is another one.
    let segment = ["--position-keys", "segment"];
    assert!(
        generate(&segment) == base,
        "generate --position-keys changed the bits"
    );
    #[rustfmt::skip]
    let args = ["generate", s(&image), "--prompt", prompt, "--mem-len", HUGE_MEM_LEN, segment[0], segment[1]];
    let expected = host_arena_bytes(&image, |o| {
        o.mem_len = HUGE_MEM_LEN.parse().unwrap();
        o.position_keys = PositionKeys::PerSegment;
    });
    assert_eq!(
        refused_arena_bytes(&args),
        expected,
        "generate --position-keys segment"
    );
    assert_ne!(
        refused_arena_bytes(&args[..6]),
        expected,
        "generate --position-keys"
    );
    // Folded: other bits (a sample may or may not change), and an arena without key tables.
    #[rustfmt::skip]
    let args = ["generate", s(&image), "--prompt", prompt, "--mem-len", HUGE_MEM_LEN, "--position-keys", "folded"];
    let expected = host_arena_bytes(&image, |o| {
        o.mem_len = HUGE_MEM_LEN.parse().unwrap();
        o.position_keys = PositionKeys::FoldedIntoQuery;
    });
    assert_eq!(
        refused_arena_bytes(&args),
        expected,
        "generate --position-keys folded"
    );
}

/// The `session` line of `txl inspect` as `(word, value)` pairs, and the arena bytes.
fn inspect(image: &Path, flags: &[&str]) -> (Vec<(String, String)>, u64) {
    let mut args = vec!["inspect", s(image)];
    args.extend(flags);
    let text = stdout(&txl(&args), &format!("inspect {flags:?}"));
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("session"))
        .unwrap_or_else(|| panic!("no session line: {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let pairs = words
        .chunks(2)
        .map(|pair| (pair[0].to_string(), pair.get(1).unwrap_or(&"").to_string()))
        .collect();
    (pairs, arena_line(&text))
}

#[test]
fn inspect_reports_every_session_flag_and_its_arena() {
    let dir = scratch_dir("inspect");
    let (image, _) = small_model(&dir);
    let (base_line, base_arena) = inspect(&image, &[]);
    assert_eq!(base_arena, arena_bytes(&image, |_| {}));
    let mut flags = session_flags().to_vec();
    flags.push(("--position-keys", "segment", "position_keys", json!("segment")));
    flags.push(("--position-keys", "folded", "position_keys", json!("folded")));
    for (flag, value, key, _) in flags {
        let (line, arena) = inspect(&image, &[flag, value]);
        assert!(
            line.contains(&(key.to_string(), value.to_string())),
            "inspect {flag} {value}: not reported in {line:?}"
        );
        assert_ne!(line, base_line, "inspect {flag} {value}");
        let expected = arena_bytes(&image, |o| match flag {
            "--tgt-len" => o.tgt_len = 12,
            "--mem-len" => o.mem_len = 4,
            "--clamp-len" => o.clamp_len = 3,
            "--mem-dtype" => o.mem_dtype = MemDtype::Int8,
            "--position-keys" => o.position_keys = value.parse().unwrap(),
            _ => {}
        });
        assert_eq!(arena, expected, "inspect {flag} {value}: arena bytes");
        // How the memory starts and which keys each query sees do not size the arena.
        if !matches!(flag, "--same-length" | "--mem-init") {
            assert_ne!(arena, base_arena, "inspect {flag} {value}: the same arena");
        }
    }
    // The saved state is the memory: it follows --mem-len and --mem-dtype.
    for (flags, edit) in [
        (&[][..], (|_| {}) as fn(&mut SessionOptions)),
        (&["--mem-len", "4"][..], |o| o.mem_len = 4),
        (&["--mem-dtype", "f16"][..], |o| o.mem_dtype = MemDtype::F16),
    ] {
        let bytes = txl_tools::image_file::read_image(&image).unwrap();
        let model = Model::parse(bytes.bytes()).unwrap();
        let mut options = SessionOptions::from_config(model.config());
        edit(&mut options);
        let expected = Session::state_bytes_for(&model, &options).unwrap();
        let mut args = vec!["inspect", s(&image)];
        args.extend(flags);
        let text = stdout(&txl(&args), &format!("inspect {flags:?}"));
        assert!(
            text.contains(&format!("state bytes   {expected} ")),
            "inspect {flags:?}: no `state bytes   {expected}` in\n{text}"
        );
    }
}

#[test]
fn demo_writes_where_told_and_scores_as_many_bytes_as_told() {
    let dir = scratch_dir("demo");
    let out_dir = dir.join("out");
    let out = txl_in(&dir, &["demo", "--out-dir", s(&out_dir), "--limit", "64"]);
    let text = stdout(&out, "demo");
    for name in ["demo.txl", "demo-int8.txl"] {
        assert!(out_dir.join(name).is_file(), "demo --out-dir: no {name}");
    }
    assert!(
        !dir.join("target").exists(),
        "demo --out-dir: wrote to the default"
    );
    assert!(text.contains("2. score 64 bytes"), "demo --limit 64: {text}");

    // The bits per byte it narrates are those of the first 64 held-out bytes.
    let heldout = std::fs::read(fixture("demo").join("heldout.txt")).unwrap();
    let first = dir.join("first.txt");
    std::fs::write(&first, &heldout[..64]).unwrap();
    let image = out_dir.join("demo.txl");
    let out = txl(&["score", s(&image), "--bytes", s(&first), "--json"]);
    let bits = json(&out, "score")["bits_per_token"].as_f64().unwrap();
    assert!(
        text.contains(&format!("   {bits:.4} bits per byte")),
        "demo --limit 64: not the bits of 64 bytes ({bits:.4}): {text}"
    );
    let int8 = out_dir.join("demo-int8.txl");
    let out = txl(&["score", s(&int8), "--bytes", s(&first), "--json"]);
    assert_eq!(
        json(&out, "score")["precision"],
        "int8",
        "demo --out-dir: demo-int8.txl"
    );
}

/// The `<f4` values of an `.npy` file, as bits.
fn npy_bits(path: &Path) -> Vec<u32> {
    let array = npy::read(path).unwrap();
    array.data.iter().map(|v| (*v as f32).to_bits()).collect()
}

/// Writes `ids` as a `--tokens` file in `dir`.
fn token_file(dir: &Path, name: &str, ids: &[u32]) -> PathBuf {
    let path = dir.join(name);
    let text: Vec<String> = ids.iter().map(u32::to_string).collect();
    std::fs::write(&path, text.join(" ")).unwrap();
    path
}

#[test]
fn score_state_flags_continue_a_text_bit_for_bit() {
    let dir = scratch_dir("score-state");
    let (image, tokens) = small_model(&dir);
    let ids = token_ids(&tokens);
    // tgt_len 6: the first part's length minus one is a multiple of it, so the segments of
    // the two runs fall where one run's do; the second part starts with the first's last token.
    let split = 13;
    let first = token_file(&dir, "first.txt", &ids[..split]);
    let second = token_file(&dir, "second.txt", &ids[split - 1..]);
    let (state, whole, a, b) = (
        dir.join("memory.state"),
        dir.join("whole.npy"),
        dir.join("a.npy"),
        dir.join("b.npy"),
    );
    let flags = ["--mem-init", "zeros", "--mem-dtype", "int8"];
    let run = |tokens: &Path, out: &Path, extra: &[&str]| {
        let mut args = vec!["score", s(&image), "--tokens", s(tokens), "--out", s(out)];
        args.extend(flags);
        args.extend(extra);
        txl(&args)
    };
    stdout(&run(&tokens, &whole, &[]), "score the whole text");
    stdout(&run(&first, &a, &["--state-out", s(&state)]), "score --state-out");
    assert!(state.exists(), "--state-out wrote nothing");
    stdout(&run(&second, &b, &["--state-in", s(&state)]), "score --state-in");
    let mut parts = npy_bits(&a);
    assert_eq!(
        parts.len(),
        split - 1,
        "--state-out: every token of the first part predicted"
    );
    parts.extend(npy_bits(&b));
    assert_eq!(parts, npy_bits(&whole), "the two runs differ from one run");

    // Without the state, the second part starts from the zero memory: other bits.
    stdout(&run(&second, &b, &[]), "score the second part alone");
    assert_ne!(
        npy_bits(&b),
        npy_bits(&whole)[split - 1..],
        "--state-in changed nothing"
    );

    // Refused states: exit status 1 and a message that says why.
    let other = dir.join("other.state");
    let mut args = vec![
        "score",
        s(&image),
        "--tokens",
        s(&first),
        "--state-out",
        s(&other),
    ];
    args.extend(["--mem-init", "zeros"]);
    stdout(&txl(&args), "score --state-out with f32 memory");
    assert_refused(
        &run(&second, &b, &["--state-in", s(&other)]),
        "other session options (tgt_len 6, mem_len 10, clamp_len 0, same_length false, mem_init zeros, mem_dtype f32",
        "--state-in from other options",
    );
    let mut damaged = std::fs::read(&state).unwrap();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 1;
    let damaged_path = dir.join("damaged.state");
    std::fs::write(&damaged_path, &damaged).unwrap();
    assert_refused(
        &run(&second, &b, &["--state-in", s(&damaged_path)]),
        "checksum mismatch",
        "--state-in damaged",
    );
    let mut padded = std::fs::read(&state).unwrap();
    padded.resize(padded.len() * 3, 0);
    std::fs::write(&damaged_path, &padded).unwrap();
    assert_refused(
        &run(&second, &b, &["--state-in", s(&damaged_path)]),
        "bytes after its session state",
        "--state-in too long",
    );
    let out = txl(&[
        "score",
        s(&image),
        "--tokens",
        s(&second),
        "--backend",
        "cpu",
        "--state-in",
        s(&state),
    ]);
    assert_refused(
        &out,
        "--state-in and --state-out apply to the core only",
        "--backend cpu --state-in",
    );
}

#[test]
fn quantizer_flags_that_need_calibration_text_are_refused_without_it() {
    let dir = scratch_dir("quantize-no-text");
    let (image, _) = small_model(&dir);
    let out = dir.join("int8.txl");
    for (flag, value) in [
        ("--calib-limit", "100"),
        ("--calib-backend", "cpu"),
        ("--auto-keep-f16", "2"),
        ("--auto-keep-int8", "2"),
        ("--budget-bytes", "100000"),
    ] {
        for command in [
            vec!["quantize", s(&image), "-o", s(&out), flag, value],
            vec![
                "convert",
                s(&fixture("adaptive_div2")),
                "-o",
                s(&out),
                "--dtype",
                "int8",
                flag,
                value,
            ],
        ] {
            let what = format!("{} {flag} {value} without calibration text", command[0]);
            assert_refused(&txl(&command), flag, &what);
            assert!(!out.exists(), "{what}: an image was written");
        }
    }
}

#[test]
fn generate_refuses_temperatures_that_are_not_finite_or_negative() {
    let dir = scratch_dir("generate-temperature");
    let (image, _) = small_model(&dir);
    for temperature in ["inf", "NaN", "-1", "hot"] {
        let flag = format!("--temperature={temperature}");
        let out = txl(&["generate", s(&image), "--prompt-tokens", "1 2", &flag]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "--temperature {temperature}: {text}");
        assert!(
            text.contains("a finite number >= 0"),
            "--temperature {temperature}: {text}"
        );
    }
}

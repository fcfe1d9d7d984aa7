//! The `txl` command end to end: convert a reference checkpoint, score it through the CLI
//! contract (`--out`, `--rows-out`, `--json`), and refuse bad input with a clear message.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use txl_tools::npy;

fn txl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txl"))
        .args(args)
        .output()
        .expect("txl runs")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("txl-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Converts fixture `name` into `dir/model.txl`, which it returns.
fn convert_fixture(name: &str, dir: &Path) -> PathBuf {
    let image = dir.join("model.txl");
    let out = txl(&[
        "convert",
        fixture(name).to_str().unwrap(),
        "-o",
        image.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "convert {name}: {}", stderr(&out));
    image
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn convert_then_score_follows_the_contract() {
    let dir = scratch_dir("contract");
    let src = fixture("adaptive_div2");
    let image = convert_fixture("adaptive_div2", &dir);

    let logp = dir.join("logp.npy");
    let rows = dir.join("rows.npy");
    let tokens = src.join("tokens.txt");
    #[rustfmt::skip]
    let out = txl(&[
        "score", image.to_str().unwrap(), "--tokens", tokens.to_str().unwrap(),
        "--tgt-len", "6", "--mem-len", "10", "--clamp-len", "0", "--same-length", "false",
        "--mem-init", "zeros", "--out", logp.to_str().unwrap(),
        "--rows", "3", "--rows-out", rows.to_str().unwrap(), "--json",
    ]);
    assert!(out.status.success(), "score failed: {}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let n_tokens = std::fs::read_to_string(&tokens)
        .unwrap()
        .split_whitespace()
        .count();
    assert_eq!(summary["tokens"], n_tokens);

    let ours = npy::read(&logp).unwrap();
    assert_eq!(ours.shape, vec![n_tokens - 1]);
    let nll = -ours.data.iter().sum::<f64>() / ours.data.len() as f64;
    assert!((summary["nll"].as_f64().unwrap() - nll).abs() < 1e-9);
    assert!((summary["bits_per_token"].as_f64().unwrap() - nll / std::f64::consts::LN_2).abs() < 1e-9);
    assert!((summary["ppl"].as_f64().unwrap() - nll.exp()).abs() < 1e-6);
    assert!(summary["digest"].as_str().unwrap().starts_with("0x"));

    // The same case the reference computed with transformers (float64): seg_zeros uses the
    // first 48 tokens; our run used all of them, so compare that prefix.
    let reference = npy::read(&src.join("seg_zeros.logp.npy")).unwrap();
    let worst = reference
        .data
        .iter()
        .zip(&ours.data)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-4, "CLI scores differ from the reference by {worst}");

    let ours_rows = npy::read(&rows).unwrap();
    let reference_rows = npy::read(&src.join("seg_zeros.rows.npy")).unwrap();
    assert_eq!(ours_rows.shape, vec![3, 300]);
    let worst = ours_rows
        .data
        .iter()
        .zip(&reference_rows.data)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-4, "CLI rows differ from the reference by {worst}");
}

#[test]
fn both_checkpoint_formats_give_the_same_image() {
    let dir = scratch_dir("formats");
    let src = fixture("untied_div2_clamp_samelen");
    let mut images = Vec::new();
    for format in ["safetensors", "pytorch-bin"] {
        let path = dir.join(format!("{format}.txl"));
        let out = txl(&[
            "convert",
            src.to_str().unwrap(),
            "-o",
            path.to_str().unwrap(),
            "--format",
            format,
        ]);
        assert!(
            out.status.success(),
            "convert --format {format}: {}",
            stderr(&out)
        );
        images.push(std::fs::read(path).unwrap());
    }
    assert_eq!(images[0], images[1]);
}

#[test]
fn bad_input_gets_a_clear_error() {
    let dir = scratch_dir("errors");
    let image = convert_fixture("no_mem", &dir);

    // A token id out of range.
    let tokens = dir.join("tokens.txt");
    std::fs::write(&tokens, "1 2 99999 3").unwrap();
    let out = txl(&[
        "score",
        image.to_str().unwrap(),
        "--tokens",
        tokens.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("token id 99999 out of range"),
        "{}",
        stderr(&out)
    );

    // A truncated image.
    let bytes = std::fs::read(&image).unwrap();
    let truncated = dir.join("truncated.txl");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let out = txl(&["inspect", truncated.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));

    // A checkpoint without a tensor names it.
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(fixture("no_mem").join("config.json"), broken.join("config.json")).unwrap();
    let out = txl(&[
        "convert",
        broken.to_str().unwrap(),
        "-o",
        dir.join("x.txl").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("model.safetensors") || stderr(&out).contains("pytorch_model.bin"));
}

#[test]
fn inspect_reports_the_arena_the_core_computes() {
    let dir = scratch_dir("inspect");
    let image = convert_fixture("full_softmax_long", &dir);
    let out = txl(&[
        "inspect",
        image.to_str().unwrap(),
        "--mem-len",
        "16",
        "--tgt-len",
        "4",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);

    let bytes = txl_tools::image_file::read_image(&image).unwrap();
    let model = txl_core::Model::parse(bytes.bytes()).unwrap();
    let options = txl_core::SessionOptions {
        mem_len: 16,
        tgt_len: 4,
        ..txl_core::SessionOptions::from_config(model.config())
    };
    let arena = txl_core::Session::arena_bytes(&model, &options).unwrap();
    assert!(text.contains(&format!("arena bytes   {arena}")), "{text}");
}

#[test]
fn the_reference_backends_follow_the_score_contract_and_eval_runs() {
    let dir = scratch_dir("backends");
    let src = fixture("div1_proj_prelnorm");
    let image = convert_fixture("div1_proj_prelnorm", &dir);
    let tokens = src.join("tokens.txt");
    let reference = npy::read(&src.join("stream_zeros.logp.npy")).unwrap();
    for backend in ["cpu", "cpu32", "core"] {
        let logp = dir.join(format!("{backend}.npy"));
        #[rustfmt::skip]
        let out = txl(&[
            "score", image.to_str().unwrap(), "--tokens", tokens.to_str().unwrap(), "--backend", backend,
            "--tgt-len", "1", "--mem-len", "8", "--clamp-len", "4", "--same-length", "false",
            "--mem-init", "zeros", "--out", logp.to_str().unwrap(), "--json",
        ]);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let ours = npy::read(&logp).unwrap();
        let worst = reference
            .data
            .iter()
            .zip(&ours.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        // f64 rounded to f32 for the file: half an f32 ulp of |ln p| (< 2e-6 here); f32: about 1e-5.
        let limit = if backend == "cpu" { 4e-6 } else { 1e-4 };
        assert!(worst < limit, "{backend}: {worst}");
    }

    let out = txl(&[
        "eval",
        image.to_str().unwrap(),
        "--text",
        tokens.to_str().unwrap(),
        "--batch",
        "3",
        "--backend",
        "cpu",
        "--json",
    ]);
    assert!(out.status.success(), "eval: {}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = std::fs::read_to_string(&tokens)
        .unwrap()
        .split_whitespace()
        .count();
    assert_eq!(summary["tokens"], n);
    assert_eq!(summary["predicted"], n - 1);
    assert_eq!(summary["streams"], 3);
}

#[test]
fn bench_reports_every_precision_against_f32() {
    let dir = scratch_dir("bench");
    let image = convert_fixture("adaptive_div2", &dir);
    let out = txl(&["bench", image.to_str().unwrap(), "--tokens", "64", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(results[0]["ratio_to_f32"], 1.0);
    for r in results {
        assert!(r["tokens_per_second"].as_f64().unwrap() > 0.0, "{r}");
    }
    // The int8 image is about a quarter of the f32 one.
    let f32_bytes = results[0]["image_bytes"].as_f64().unwrap();
    assert!(results[2]["image_bytes"].as_f64().unwrap() < 0.4 * f32_bytes);
}

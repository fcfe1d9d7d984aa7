//! The trained word-level model (`tests/fixtures/kjv-words`, `tools/reference/make_word_model.py`:
//! 8,000 words of the King James Bible in an adaptive softmax, cutoffs 600 and 2,400, div_val 4,
//! its vocabulary in the original code's `vocab_file` format) end to end through the command:
//! `txl convert` picks the vocabulary up beside the checkpoint, `--text` gives the ids the
//! original `Vocab` gives, the log-probabilities are Hugging Face float64's (PyTorch) on
//! held-out text, the model writes words of its vocabulary, and int8 costs at most 0.1% in bits
//! per token on held-out text.

use std::path::{Path, PathBuf};

use serde_json::Value;
use txl_tools::npy;
use txl_tools::vocab::read_vocabulary;

mod common;
use common::{max_delta, quantize, s, scratch_dir, stderr, txl};

/// Largest |Δ ln p| allowed between txl (f32) and PyTorch float64, as for every fixture model
/// (`tests/tests/core_vs_hf.rs`).
const TOLERANCE: f64 = 1e-4;
/// int8 (every matrix, the 8,000-word output layer included, calibrated on `calib.txt`) over f32
/// on all of `heldout.txt`: at most +0.1%.
const INT8_MAX_DELTA: f64 = 0.001;

fn kjv(name: &str) -> PathBuf {
    common::fixture("kjv-words").join(name)
}

fn reference() -> Value {
    serde_json::from_slice(&std::fs::read(kjv("reference.json")).unwrap()).unwrap()
}

fn ids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect()
}

fn json(args: &[&str]) -> Value {
    let out = txl(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn bits(v: &Value) -> f64 {
    v["bits_per_token"].as_f64().unwrap()
}

/// The fixture converted by `txl convert` on its folder (`vocab.txt` is found beside the
/// weights): `dir/kjv.txl`.
fn convert(dir: &Path) -> PathBuf {
    common::convert(&common::fixture("kjv-words"), dir.join("kjv.txl"))
}

#[test]
fn the_vocabulary_gives_the_original_vocab_ids_and_convert_keeps_it() {
    let vocabulary = read_vocabulary(&kjv("vocab.txt")).unwrap();
    assert_eq!(vocabulary.len(), 8000);
    assert_eq!(vocabulary.symbols()[..2], ["<eos>", "<UNK>"]);
    let heldout = std::fs::read_to_string(kjv("heldout.txt")).unwrap();
    let expected = ids(&kjv("heldout.ids.txt"));
    assert_eq!(vocabulary.encode(&heldout).unwrap(), expected);
    // Held-out text has words the vocabulary lacks, and many lines.
    let count = |id| expected.iter().filter(|&&t| Some(t) == id).count();
    assert!(count(vocabulary.unk()) > 100 && count(vocabulary.eos()) > 100);
    assert_eq!(
        reference()["heldout"]["tokens"].as_u64(),
        Some(expected.len() as u64)
    );

    let dir = scratch_dir("vocabulary");
    let image = convert(&dir);
    let shown = String::from_utf8(txl(&["inspect", s(&image)]).stdout).unwrap();
    assert!(
        shown.contains("symbols       8000  lower_case false  \"<eos>\", \"<UNK>\", \"the\""),
        "{shown}"
    );
    assert!(shown.contains("cutoffs [600, 2400]  div_val 4"), "{shown}");
}

/// Each case of `reference.json` scored by `txl score --tokens` on the held-out ids, against
/// PyTorch float64: txl's core in f32 within [`TOLERANCE`], the logp of every prediction and
/// the full rows kept.
#[test]
fn log_probabilities_match_pytorch_float64_on_held_out_text() {
    let dir = scratch_dir("logp");
    let image = convert(&dir);
    let all = ids(&kjv("heldout.ids.txt"));
    for case in reference()["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let n = case["n_tokens"].as_u64().unwrap() as usize;
        let tokens = dir.join(format!("{name}.ids"));
        let text: Vec<String> = all[..n].iter().map(u32::to_string).collect();
        std::fs::write(&tokens, text.join(" ")).unwrap();
        let theirs = npy::read(&kjv(case["logp"].as_str().unwrap())).unwrap();
        assert_eq!(theirs.shape, [n - 1]);
        let rows_k = case["rows_k"].as_u64().unwrap_or(0) as usize;
        let logp = dir.join(format!("{name}.npy"));
        let rows = dir.join(format!("{name}-rows.npy"));
        let (tgt_len, mem_len) = (case["tgt_len"].to_string(), case["mem_len"].to_string());
        let mut args = vec![
            "score",
            s(&image),
            "--tokens",
            s(&tokens),
            "--tgt-len",
            &tgt_len,
            "--mem-len",
            &mem_len,
            "--out",
            s(&logp),
            "--json",
        ];
        let rows_k_arg = rows_k.to_string();
        if rows_k > 0 {
            args.extend(["--rows", &rows_k_arg, "--rows-out", s(&rows)]);
        }
        let scored = json(&args);
        assert_eq!(scored["same_length"], case["same_length"]);
        assert_eq!(scored["mem_init"], case["mem_init"]);
        let ours = npy::read(&logp).unwrap();
        let mut worst = max_delta(&ours.data, &theirs.data);
        if rows_k > 0 {
            let ours = npy::read(&rows).unwrap();
            let theirs = npy::read(&kjv(case["rows"].as_str().unwrap())).unwrap();
            assert_eq!(theirs.shape, [rows_k, 8000]);
            assert_eq!(ours.shape, theirs.shape);
            worst = worst.max(max_delta(&ours.data, &theirs.data));
        }
        println!("{name}: max |Δ ln p| {worst:.2e} over {n} tokens");
        assert!(worst <= TOLERANCE, "{name}: {worst:e}");
    }
}

#[test]
fn score_text_gives_pytorchs_bits_per_token_on_held_out_text() {
    let dir = scratch_dir("score");
    let image = convert(&dir);
    let scored = json(&["score", s(&image), "--text", s(&kjv("heldout.txt")), "--json"]);
    let by_ids = json(&[
        "score",
        s(&image),
        "--tokens",
        s(&kjv("heldout.ids.txt")),
        "--json",
    ]);
    assert_eq!(scored["digest"], by_ids["digest"]);
    let held = &reference()["heldout"];
    assert_eq!(scored["tokens"], held["tokens"]);
    let (f32_bits, f64_bits) = (
        held["bits_per_token_f32"].as_f64().unwrap(),
        held["bits_per_token_f64"].as_f64().unwrap(),
    );
    println!(
        "held out, {} words: txl f32 {:.6} bits per token, PyTorch f32 {f32_bits:.6}, f64 {f64_bits:.6}",
        scored["tokens"],
        bits(&scored)
    );
    // reference.json keeps six decimals.
    assert!((bits(&scored) - f64_bits).abs() < 2e-5, "{scored}");
    assert!((bits(&scored) - f32_bits).abs() < 2e-5, "{scored}");
}

/// `txl generate` with a word prompt writes words of the vocabulary, the prompt first.
#[test]
fn generate_continues_a_word_prompt_with_words_of_the_vocabulary() {
    let vocabulary = read_vocabulary(&kjv("vocab.txt")).unwrap();
    let prompt = "And God said unto Moses,";
    let dir = scratch_dir("generate");
    let image = convert(&dir);
    for (temperature, seed) in [("0", "1"), ("0.8", "7")] {
        let out = txl(&[
            "generate",
            s(&image),
            "--prompt",
            prompt,
            "--length",
            "60",
            "--temperature",
            temperature,
            "--seed",
            seed,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let written = String::from_utf8(out.stdout).unwrap();
        println!("temperature {temperature}: {written}");
        let rest = written.strip_prefix(prompt).expect("the prompt comes first");
        let words: Vec<&str> = rest.split_whitespace().collect();
        // 60 tokens, some of them line ends.
        assert!(words.len() >= 40, "{written}");
        for word in &words {
            assert!(vocabulary.id(word).is_some(), "{word:?} in {written}");
        }
        let unknown = words.iter().filter(|w| **w == "<UNK>").count();
        assert!(unknown * 10 <= words.len(), "{written}");
        // Real words, the commonest among them.
        assert!(words.contains(&"the") || words.contains(&"and"), "{written}");
    }
}

/// int8 (`txl quantize`, calibrated on `calib.txt`, training text) over f32 on all of
/// `heldout.txt`: at most +0.1% bits per token, with every matrix in int8, the embedding and
/// the tied 8,000-word output layer included.
#[test]
fn int8_costs_at_most_a_tenth_of_a_percent_on_held_out_text() {
    let dir = scratch_dir("int8");
    let image = convert(&dir);
    let calib = kjv("calib.txt");
    let (_, report) = quantize(&image, &dir, "int8", &["--calib-text", s(&calib)]);
    assert_eq!(report["target"], "int8", "{report}");
    assert_eq!(report["method"], "compensated", "{report}");
    let int8 = dir.join("int8.txl");
    let shown = String::from_utf8(txl(&["inspect", s(&int8)]).stdout).unwrap();
    for table in ["emb_layers.0", "emb_layers.1", "emb_layers.2"] {
        let line = shown.lines().find(|l| l.contains(table)).unwrap();
        assert!(line.contains("Int8RowScaled"), "{line}");
    }
    let heldout = kjv("heldout.txt");
    let f32_bits = bits(&json(&["score", s(&image), "--text", s(&heldout), "--json"]));
    let int8_bits = bits(&json(&["score", s(&int8), "--text", s(&heldout), "--json"]));
    let delta = int8_bits / f32_bits - 1.0;
    println!(
        "int8 {int8_bits:.6} vs f32 {f32_bits:.6} bits per token: {:+.4}% ({} of {} bytes)",
        100.0 * delta,
        std::fs::metadata(&int8).unwrap().len(),
        std::fs::metadata(&image).unwrap().len()
    );
    assert!(delta <= INT8_MAX_DELTA, "int8 {:+.4}%", 100.0 * delta);
}

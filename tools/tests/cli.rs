//! The `txl` command end to end: convert a reference checkpoint, score it through the CLI
//! contract (`--out`, `--rows-out`, `--json`), and refuse bad input with a clear message.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use txl_tools::npy;

mod common;
use common::{fixture, max_delta, scratch_dir, stderr, txl};

/// Converts fixture `name` into `dir/model.txl`, which it returns.
fn convert_fixture(name: &str, dir: &Path) -> PathBuf {
    common::convert(&fixture(name), dir.join("model.txl"))
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
    let worst = max_delta(&reference.data, &ours.data[..reference.data.len()]);
    assert!(worst < 1e-4, "CLI scores differ from the reference by {worst}");

    let ours_rows = npy::read(&rows).unwrap();
    let reference_rows = npy::read(&src.join("seg_zeros.rows.npy")).unwrap();
    assert_eq!(ours_rows.shape, vec![3, 300]);
    // The reference keeps more rows; we asked for the first 3.
    let worst = max_delta(&ours_rows.data, &reference_rows.data[..ours_rows.data.len()]);
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

/// `read_image` reads an image whole and places it so that the payloads of the most common
/// place within a 64-byte line (by bytes) start on a line: the kernels' 64-byte loads then do
/// not straddle two.
#[test]
fn images_are_read_with_their_large_payloads_on_cache_lines() {
    let dir = scratch_dir("placement");
    for name in ["full_softmax_long", "adaptive_div2"] {
        let path = convert_fixture(name, &dir);
        let image = txl_tools::image_file::read_image(&path).unwrap();
        let bytes = image.bytes();
        assert_eq!(
            bytes,
            std::fs::read(&path).unwrap(),
            "{name}: the bytes of the file"
        );
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let entries: Vec<(usize, usize)> = (0..word(16))
            .map(|i| (word(128 + 80 * i + 60), word(128 + 80 * i + 64)))
            .collect();
        let mut bytes_at = [0usize; 4];
        for &(offset, length) in &entries {
            bytes_at[offset % 64 / 16] += length;
        }
        let most = (0..4)
            .max_by_key(|&k| (bytes_at[k], std::cmp::Reverse(k)))
            .unwrap();
        for &(offset, _) in entries.iter().filter(|(offset, _)| offset % 64 / 16 == most) {
            let address = bytes.as_ptr() as usize + offset;
            assert_eq!(
                address % 64,
                0,
                "{name}: the payload at {offset} (places {bytes_at:?})"
            );
        }
    }
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
        let worst = max_delta(&reference.data, &ours.data);
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
    assert_eq!(results.len(), 7);
    assert_eq!(results[0]["ratio_to_f32"], 1.0);
    assert_eq!(results[1]["variant"], "f32 weights, fast f32 (FMA)");
    assert_eq!(results[5]["variant"], "int4 layers, int8 memory");
    for r in results {
        assert!(r["tokens_per_second"].as_f64().unwrap() > 0.0, "{r}");
    }
    // The int8 image is about a quarter of the f32 one.
    let f32_bytes = results[0]["image_bytes"].as_f64().unwrap();
    assert_eq!(results[1]["image_bytes"].as_f64().unwrap(), f32_bytes);
    assert!(results[3]["image_bytes"].as_f64().unwrap() < 0.4 * f32_bytes);
    // ... and the int4 one smaller still
    assert!(results[5]["image_bytes"].as_f64().unwrap() < results[3]["image_bytes"].as_f64().unwrap());
}

/// The settings of case `case` of fixture model `model` in `manifest.json`, as `txl score`
/// arguments, after checking the case scores the whole token file.
fn case_args(model: &str, case: &str) -> Vec<String> {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("manifest.json")).unwrap()).unwrap();
    let entry = manifest["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == model)
        .unwrap();
    let settings = entry["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == case)
        .unwrap();
    let tokens = std::fs::read_to_string(fixture(model).join(entry["tokens"].as_str().unwrap())).unwrap();
    assert_eq!(settings["n_tokens"], tokens.split_whitespace().count());
    let mut args = Vec::new();
    for (flag, key) in [
        ("--tgt-len", "tgt_len"),
        ("--mem-len", "mem_len"),
        ("--clamp-len", "clamp_len"),
        ("--same-length", "same_length"),
        ("--mem-init", "mem_init"),
    ] {
        let value = &settings[key];
        args.push(flag.to_string());
        args.push(value.as_str().map_or_else(|| value.to_string(), str::to_string));
    }
    args
}

fn json(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "{}", stderr(output));
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

#[test]
fn score_backend_chooses_the_forward_pass() {
    let dir = scratch_dir("score-backend");
    let (name, case) = ("div1_proj_prelnorm", "seg_zeros");
    let image = convert_fixture(name, &dir);
    let tokens = fixture(name).join("tokens.txt");
    let reference = npy::read(&fixture(name).join(format!("{case}.logp.npy"))).unwrap();
    let settings = case_args(name, case);

    let mut digests = Vec::new();
    for backend in ["core", "cpu", "cpu32"] {
        let logp = dir.join(format!("{backend}.npy"));
        let mut args = vec![
            "score",
            image.to_str().unwrap(),
            "--tokens",
            tokens.to_str().unwrap(),
            "--backend",
            backend,
            "--out",
            logp.to_str().unwrap(),
            "--json",
        ];
        args.extend(settings.iter().map(String::as_str));
        let summary = json(&txl(&args));
        assert_eq!(summary["backend"], backend);
        assert_eq!(summary["precision"], "f32");
        assert_eq!(summary["position_keys"], "session");
        let mem_dtype = if backend == "cpu" { "f64" } else { "f32" };
        assert_eq!(summary["mem_dtype"], mem_dtype);

        let ours = npy::read(&logp).unwrap();
        let values: Vec<f32> = ours.data.iter().map(|&v| v as f32).collect();
        let digest = format!("{:#010x}", txl_core::digest::Digest::of(&values));
        assert_eq!(
            summary["digest"], digest,
            "{backend}: the digest is of the --out values"
        );
        digests.push(digest);

        if backend == "cpu" {
            // The f64 reference, rounded to f32 for the file.
            assert_eq!(ours.shape, reference.shape);
            let worst = max_delta(&reference.data, &ours.data);
            assert!(worst < 1e-6, "cpu differs from float64 Hugging Face by {worst}");
        }
    }
    assert_ne!(digests[1], digests[0], "--backend cpu ran the core");
    assert_ne!(digests[2], digests[0], "--backend cpu32 ran the core");
    assert_ne!(digests[2], digests[1], "--backend cpu32 ran in f64");

    // The core's memory options mean nothing to the reference.
    #[rustfmt::skip]
    let core_only = [["--mem-dtype", "int8"], ["--position-keys", "segment"], ["--position-keys", "folded"]];
    for flag in core_only {
        let mut args = vec![
            "score",
            image.to_str().unwrap(),
            "--tokens",
            tokens.to_str().unwrap(),
            "--backend",
            "cpu",
        ];
        args.extend(flag);
        let out = txl(&args);
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("core only"), "{}", stderr(&out));
    }

    // eval on one stream is the same float64 computation.
    let mut args = vec![
        "eval",
        image.to_str().unwrap(),
        "--text",
        tokens.to_str().unwrap(),
        "--backend",
        "cpu",
        "--batch",
        "1",
        "--json",
    ];
    args.extend(settings.iter().map(String::as_str));
    let summary = json(&txl(&args));
    let nll = -reference.data.iter().sum::<f64>() / reference.data.len() as f64;
    let got = summary["nll"].as_f64().unwrap();
    assert!(
        (got - nll).abs() < 1e-9,
        "eval nll {got}, float64 reference {nll}"
    );
}

#[test]
fn a_session_too_large_is_an_error_not_an_abort() {
    // The demo model: 4 layers of d_model 128, so mem_len 40M needs about 246 GB of arena.
    let dir = scratch_dir("huge");
    let image = convert_fixture("demo", &dir);
    let tokens = dir.join("tokens.txt");
    std::fs::write(&tokens, "72 101 108 108 111 44 32 119 111 114 108 100").unwrap();
    let (image, tokens) = (image.to_str().unwrap(), tokens.to_str().unwrap());
    for mem_len in ["40000000", "4000000000"] {
        #[rustfmt::skip]
        let commands: [&[&str]; 6] = [
            &["score", image, "--tokens", tokens],
            &["score", image, "--tokens", tokens, "--backend", "cpu"],
            &["eval", image, "--text", tokens, "--backend", "cpu", "--batch", "2"],
            &["compare", image, image, "--tokens", tokens],
            &["generate", image, "--prompt-tokens", "1 2 3", "--length", "4"],
            &["bench", image, "--tokens", "8"],
        ];
        for command in commands {
            let mut args = command.to_vec();
            args.extend(["--mem-len", mem_len]);
            let out = txl(&args);
            let text = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {text}");
            assert!(text.starts_with("error: "), "{args:?}: {text}");
            assert!(!text.contains("panicked"), "{args:?}: {text}");
            assert!(
                text.contains("bytes") || text.contains("overflow"),
                "{args:?}: {text}"
            );
            assert!(text.contains(&format!("mem_len {mem_len}")), "{args:?}: {text}");
        }
    }
}

/// Runs `txl args` with stdout a pipe that has no reader left, so that every write fails with
/// `BrokenPipe`. The reader was `txl --version`'s stdin, which it never reads before it exits.
fn txl_into_closed_pipe(args: &[&str]) -> Output {
    let mut reader = Command::new(env!("CARGO_BIN_EXE_txl"))
        .arg("--version")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("txl runs");
    let writer = reader.stdin.take().unwrap();
    assert!(reader.wait().unwrap().success());
    Command::new(env!("CARGO_BIN_EXE_txl"))
        .args(args)
        .stdout(Stdio::from(writer))
        .output()
        .expect("txl runs")
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let dir = scratch_dir("pipe");
    let image = convert_fixture("adaptive_div2", &dir);
    let tokens = fixture("adaptive_div2").join("tokens.txt");
    let image = image.to_str().unwrap();
    for args in [
        vec!["inspect", image],
        vec!["score", image, "--tokens", tokens.to_str().unwrap(), "--json"],
    ] {
        let out = txl_into_closed_pipe(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
    }
}

/// `line` split into words as a shell would, for the double quotes the examples use.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted = false;
    for c in line.chars() {
        if c == '"' {
            quoted = !quoted;
            word.get_or_insert_with(String::new);
        } else if c.is_whitespace() && !quoted {
            words.extend(word.take());
        } else {
            word.get_or_insert_with(String::new).push(c);
        }
    }
    words.extend(word);
    words
}

/// The examples of `txl --help`, of every subcommand's `--help` and of the README's section on
/// the command all name subcommands and flags that exist, with values they accept.
#[test]
fn every_example_in_the_help_and_the_readme_parses() {
    use clap::Parser;
    use txl_tools::cli::Cli;

    let help = |args: &[&str]| String::from_utf8(txl(args).stdout).unwrap();
    let examples_in = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("  txl "))
            .map(str::to_string)
            .collect()
    };
    let top = help(&["--help"]);
    let mut examples = examples_in(&top);
    // The "Commands:" list: "  score     Score a token sequence: ...", up to a blank line.
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&name| name != "help")
        .collect();
    assert_eq!(commands.len(), 11, "{top}");
    for name in commands {
        let sub = examples_in(&help(&[name, "--help"]));
        assert!(!sub.is_empty(), "`txl {name} --help` has no examples");
        examples.extend(sub);
    }

    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let section = readme
        .split("## The `txl` command")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap();
    let before = examples.len();
    let mut in_sh = false;
    for line in section.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            command if in_sh => {
                let command = command.split(" #").next().unwrap();
                examples.push(command.strip_prefix("txl ").expect("a txl command").to_string());
            }
            _ => {}
        }
    }

    assert!(
        examples.len() >= before + 8,
        "the README's examples were not found"
    );

    for example in &examples {
        let words = std::iter::once("txl".to_string()).chain(shell_words(example));
        if let Err(e) = Cli::try_parse_from(words) {
            panic!("`txl {example}` does not parse:\n{e}");
        }
    }
}

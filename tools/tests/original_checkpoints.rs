//! Checkpoints of the original Transformer-XL training code (`tests/fixtures/original/`, made
//! by `tools/reference/regenerate_original.sh` from the Hugging Face fixtures' weights in the
//! original code's layout): each converts with no config.json and scores with the same digest
//! as the Hugging Face fixture it was made from, every convert flag for them changes the image
//! as it says, and damaged or foreign files are refused with a clear message.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;
use common::{fixture, s, scratch_dir, stderr, txl};

/// `tests/fixtures/original/MODEL/FILE`.
fn original(model: &str, file: &str) -> PathBuf {
    fixture("original").join(model).join(file)
}

fn tokens(model: &str) -> PathBuf {
    fixture(model).join("tokens.txt")
}

/// `txl convert SRC -o DIR/NAME.txl FLAGS`, which must succeed; returns the image.
fn convert(src: &Path, dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let image = dir.join(format!("{name}.txl"));
    let mut args = vec!["convert", s(src), "-o", s(&image)];
    args.extend(flags);
    let out = txl(&args);
    assert!(out.status.success(), "convert {name} {flags:?}: {}", stderr(&out));
    image
}

/// `txl convert SRC -o DIR/refused.txl FLAGS`, which must fail; returns its stderr.
fn refused(src: &Path, dir: &Path, flags: &[&str]) -> String {
    let image = dir.join("refused.txl");
    let mut args = vec!["convert", s(src), "-o", s(&image)];
    args.extend(flags);
    let out: Output = txl(&args);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "convert {src:?} {flags:?}: {text}");
    assert!(
        text.starts_with("error: ") && !text.contains("panicked"),
        "{text}"
    );
    assert!(!image.exists(), "a refused conversion wrote {image:?}");
    text
}

/// The digest `txl score IMAGE --tokens TOKENS --json FLAGS` prints.
fn digest(image: &Path, tokens: &Path, flags: &[&str]) -> String {
    let mut args = vec!["score", s(image), "--tokens", s(tokens), "--json"];
    args.extend(flags);
    let out = txl(&args);
    assert!(out.status.success(), "score {flags:?}: {}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["digest"].as_str().unwrap().to_string()
}

/// The Hugging Face fixture `model` converted, and its digest on its tokens.
fn hf(model: &str, dir: &Path) -> (PathBuf, String) {
    let image = convert(&fixture(model), dir, &format!("{model}-hf"), &[]);
    let digest = digest(&image, &tokens(model), &[]);
    (image, digest)
}

/// The flags a state_dict of `model` needs to match its config.json (train.py's defaults
/// cover the rest: clamp_len -1, same_length off, eps 1e-5).
fn state_dict_flags(model: &str) -> &'static [&'static str] {
    match model {
        "adaptive_div2" => &["--tgt-len", "6", "--mem-len", "10"],
        "full_softmax_long" => &["--pre-lnorm", "--tgt-len", "6", "--mem-len", "8"],
        "no_mem" => &["--cutoffs", "20", "--tgt-len", "6"],
        _ => unreachable!(),
    }
}

const MODELS: [&str; 3] = ["adaptive_div2", "full_softmax_long", "no_mem"];

#[test]
fn whole_module_files_score_like_the_hugging_face_conversion() {
    let dir = scratch_dir("whole");
    for model in MODELS {
        let (_, expected) = hf(model, &dir);
        let image = convert(&original(model, "model.pt"), &dir, model, &[]);
        assert_eq!(digest(&image, &tokens(model), &[]), expected, "{model}: model.pt");
    }
    // The legacy stream format (PyTorch before 1.6, what the original code ran on).
    let (_, expected) = hf("adaptive_div2", &dir);
    let image = convert(&original("adaptive_div2", "model_legacy.pt"), &dir, "legacy", &[]);
    assert_eq!(
        digest(&image, &tokens("adaptive_div2"), &[]),
        expected,
        "model_legacy.pt"
    );
    // A directory holding model.pt and no config.json is read as well.
    let image = convert(&original("adaptive_div2", ""), &dir, "dir", &[]);
    assert_eq!(
        digest(&image, &tokens("adaptive_div2"), &[]),
        expected,
        "the directory"
    );
}

#[test]
fn state_dicts_with_their_flags_score_like_the_hugging_face_conversion() {
    let dir = scratch_dir("state");
    for model in MODELS {
        let (_, expected) = hf(model, &dir);
        let image = convert(
            &original(model, "state_dict.pt"),
            &dir,
            model,
            state_dict_flags(model),
        );
        assert_eq!(
            digest(&image, &tokens(model), &[]),
            expected,
            "{model}: state_dict.pt"
        );
    }
}

/// The adaptive softmax's cluster order: the original scores tail cluster i with head column
/// -i, so a conversion that kept the original's row order would score otherwise. With the
/// rows swapped back by hand the digest must change (adaptive_div2 has two tail clusters).
#[test]
fn the_tail_clusters_are_reordered_for_the_original_head_columns() {
    use txl_core::tensors::TensorName;
    use txl_tools::checkpoint::{load_checkpoint, CheckpointFormat, OriginalKind, OriginalOptions};

    let dir = scratch_dir("clusters");
    let (_, expected) = hf("adaptive_div2", &dir);
    let (mut checkpoint, kind) = load_checkpoint(
        &original("adaptive_div2", "model.pt"),
        CheckpointFormat::Auto,
        &OriginalOptions::default(),
        false,
    )
    .unwrap();
    assert_eq!(kind, Some(OriginalKind::WholeModule));
    let d_embed = checkpoint.config.d_embed as usize;
    for (name, data) in &mut checkpoint.tensors {
        match name {
            TensorName::ClusterWeight => {
                let rows: Vec<Vec<f32>> = data.chunks(d_embed).rev().map(<[f32]>::to_vec).collect();
                *data = rows.concat();
            }
            TensorName::ClusterBias => data.reverse(),
            _ => {}
        }
    }
    let image = dir.join("unordered.txl");
    std::fs::write(&image, checkpoint.to_image().unwrap()).unwrap();
    assert_ne!(digest(&image, &tokens("adaptive_div2"), &[]), expected);
}

/// `--tgt-len`, `--mem-len`, `--clamp-len` and `--same-length` become the image's defaults:
/// the converted state_dict scores as the Hugging Face image does with the same session flag
/// (and otherwise than without it); given for a model.pt they override its saved values.
#[test]
fn session_flags_become_the_image_defaults() {
    let dir = scratch_dir("session");
    let model = "adaptive_div2";
    let (hf_image, plain) = hf(model, &dir);
    let cases: [(&[&str], &[&str]); 4] = [
        (&["--tgt-len", "4", "--mem-len", "10"], &["--tgt-len", "4"]),
        (&["--tgt-len", "6", "--mem-len", "3"], &["--mem-len", "3"]),
        (
            &["--tgt-len", "6", "--mem-len", "10", "--clamp-len", "2"],
            &["--clamp-len", "2"],
        ),
        (
            &["--tgt-len", "6", "--mem-len", "10", "--same-length"],
            &["--same-length", "true"],
        ),
    ];
    for (i, (convert_flags, score_flags)) in cases.into_iter().enumerate() {
        let expected = digest(&hf_image, &tokens(model), score_flags);
        assert_ne!(expected, plain, "{score_flags:?} changes nothing on {model}");
        let image = convert(
            &original(model, "state_dict.pt"),
            &dir,
            &format!("s{i}"),
            convert_flags,
        );
        assert_eq!(
            digest(&image, &tokens(model), &[]),
            expected,
            "state_dict {convert_flags:?}"
        );
        let image = convert(
            &original(model, "model.pt"),
            &dir,
            &format!("w{i}"),
            convert_flags,
        );
        assert_eq!(
            digest(&image, &tokens(model), &[]),
            expected,
            "model.pt {convert_flags:?}"
        );
    }
    // The underscore spellings of train.py are accepted too.
    let image = convert(
        &original(model, "state_dict.pt"),
        &dir,
        "underscores",
        &["--tgt_len", "6", "--mem_len", "10"],
    );
    assert_eq!(digest(&image, &tokens(model), &[]), plain);
}

/// `--pre-lnorm` and `--layer-norm-eps` describe a state_dict's layers: without the first,
/// the pre-LayerNorm model scores otherwise; another epsilon scores otherwise. A model.pt
/// that says otherwise refuses them.
#[test]
fn layer_flags_describe_a_state_dict_and_must_agree_with_a_model_pt() {
    let dir = scratch_dir("layers");
    let model = "full_softmax_long";
    let (_, expected) = hf(model, &dir);
    let state_dict = original(model, "state_dict.pt");
    let without = convert(&state_dict, &dir, "post", &["--tgt-len", "6", "--mem-len", "8"]);
    assert_ne!(
        digest(&without, &tokens(model), &[]),
        expected,
        "--pre-lnorm ignored"
    );
    let mut flags = state_dict_flags(model).to_vec();
    flags.extend(["--layer-norm-eps", "0.25"]);
    let eps = convert(&state_dict, &dir, "eps", &flags);
    assert_ne!(
        digest(&eps, &tokens(model), &[]),
        expected,
        "--layer-norm-eps ignored"
    );
    // The same epsilon as saved is accepted by a model.pt; another, or --pre-lnorm on a
    // post-LayerNorm model, is refused.
    convert(
        &original(model, "model.pt"),
        &dir,
        "same-eps",
        &["--pre-lnorm", "--layer-norm-eps", "1e-5"],
    );
    let text = refused(&original(model, "model.pt"), &dir, &["--layer-norm-eps", "0.25"]);
    assert!(
        text.contains("--layer-norm-eps 0.25") && text.contains("1e-5"),
        "{text}"
    );
    let text = refused(&original("adaptive_div2", "model.pt"), &dir, &["--pre-lnorm"]);
    assert!(text.contains("pre_lnorm = False"), "{text}");
}

/// `--cutoffs` gives what a div_val 1 state_dict's shapes do not hold: refused without it,
/// and another value scores otherwise.
#[test]
fn cutoffs_flag_places_the_clusters_of_a_div_val_1_state_dict() {
    let dir = scratch_dir("cutoffs");
    let model = "no_mem";
    let (_, expected) = hf(model, &dir);
    let state_dict = original(model, "state_dict.pt");
    let text = refused(&state_dict, &dir, &["--tgt-len", "6"]);
    assert!(text.contains("--cutoffs") && text.contains("div_val 1"), "{text}");
    let other = convert(&state_dict, &dir, "other", &["--cutoffs", "30", "--tgt-len", "6"]);
    assert_ne!(digest(&other, &tokens(model), &[]), expected, "--cutoffs ignored");
    let text = refused(&state_dict, &dir, &["--cutoffs", "10,30", "--tgt-len", "6"]);
    assert!(text.contains("2 tail clusters"), "{text}");
    // Where the shapes hold the cutoffs (div_val 2), a --cutoffs that disagrees is refused.
    let text = refused(
        &original("adaptive_div2", "state_dict.pt"),
        &dir,
        &["--cutoffs", "40,100"],
    );
    assert!(text.contains("[40, 120]"), "{text}");
}

#[test]
fn original_flags_are_refused_for_a_hugging_face_checkpoint() {
    let dir = scratch_dir("hf-flags");
    for flag in [
        &["--tgt-len", "6"][..],
        &["--mem-len", "6"],
        &["--clamp-len", "-1"],
        &["--same-length"],
        &["--pre-lnorm"],
        &["--layer-norm-eps", "1e-5"],
        &["--cutoffs", "40,120"],
    ] {
        let text = refused(&fixture("adaptive_div2"), &dir, flag);
        assert!(
            text.contains(flag[0]) && text.contains("config.json"),
            "{flag:?}: {text}"
        );
    }
}

#[test]
fn a_class_the_original_code_does_not_use_is_refused_by_name() {
    let dir = scratch_dir("foreign");
    let text = refused(&original("no_mem", "foreign_class.pt"), &dir, &[]);
    assert!(text.contains("`torch.nn.modules.activation.GELU`"), "{text}");
    assert!(text.contains("foreign_class.pt"), "{text}");
}

#[test]
fn a_missing_tensor_is_named() {
    let dir = scratch_dir("missing");
    let text = refused(&original("adaptive_div2", "missing_tensor.pt"), &dir, &[]);
    assert!(
        text.contains("`crit.cluster_bias`") && text.contains("missing_tensor.pt"),
        "{text}"
    );
}

/// A file cut short anywhere: in the storages, in the pickle, in the ZIP directory.
#[test]
fn a_truncated_file_is_refused() {
    let dir = scratch_dir("truncated");
    for file in ["model.pt", "model_legacy.pt", "state_dict.pt"] {
        let bytes = std::fs::read(original("adaptive_div2", file)).unwrap();
        for keep in [bytes.len() - 1, bytes.len() * 3 / 4, bytes.len() / 2, 2000] {
            let cut = dir.join(format!("cut-{keep}-{file}"));
            std::fs::write(&cut, &bytes[..keep]).unwrap();
            let text = refused(&cut, &dir, state_dict_flags("adaptive_div2"));
            assert!(text.contains(s(&cut)), "{file} cut to {keep}: {text}");
        }
    }
}

/// The settings txl does not implement are refused by name, as for a Hugging Face config.
#[test]
fn extended_context_and_other_attention_types_are_refused_by_name() {
    let dir = scratch_dir("unsupported");
    let text = refused(&original("no_mem", "ext_len.pt"), &dir, &[]);
    assert!(
        text.contains("ext_len = 16") && text.contains("not supported"),
        "{text}"
    );
    let text = refused(&original("no_mem", "attn_type.pt"), &dir, &[]);
    assert!(
        text.contains("only attn_type 0") && text.contains("attn_type 2"),
        "{text}"
    );
}

/// What a legacy save of a model trained on a GPU writes: `torch.cuda.FloatStorage` storages
/// at location `cuda:0` (the fixture, saved on the CPU, with those names put in).
#[test]
fn a_legacy_save_of_cuda_tensors_is_read() {
    let dir = scratch_dir("cuda");
    let (_, expected) = hf("adaptive_div2", &dir);
    let bytes = std::fs::read(original("adaptive_div2", "model_legacy.pt")).unwrap();
    let replace = |bytes: Vec<u8>, from: &[u8], to: &[u8]| -> Vec<u8> {
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .expect("the name is in the file");
        assert!(
            bytes[at + 1..].windows(from.len()).all(|w| w != from),
            "the name is memoized once"
        );
        [&bytes[..at], to, &bytes[at + from.len()..]].concat()
    };
    let bytes = replace(bytes, b"ctorch\nFloatStorage\n", b"ctorch.cuda\nFloatStorage\n");
    let bytes = replace(bytes, b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0");
    let cuda = dir.join("cuda.pt");
    std::fs::write(&cuda, bytes).unwrap();
    let image = convert(&cuda, &dir, "cuda", &[]);
    assert_eq!(digest(&image, &tokens("adaptive_div2"), &[]), expected);
}

/// A state_dict of the original code read with a config.json next to it (the Hugging Face
/// reader) gets the original head's cluster order too.
#[test]
fn an_original_state_dict_beside_a_config_json_scores_like_the_hugging_face_conversion() {
    let dir = scratch_dir("beside-config");
    let (_, expected) = hf("adaptive_div2", &dir);
    let ckpt = dir.join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::copy(
        fixture("adaptive_div2").join("config.json"),
        ckpt.join("config.json"),
    )
    .unwrap();
    std::fs::copy(
        original("adaptive_div2", "state_dict.pt"),
        ckpt.join("pytorch_model.bin"),
    )
    .unwrap();
    let image = convert(&ckpt, &dir, "beside", &[]);
    assert_eq!(digest(&image, &tokens("adaptive_div2"), &[]), expected);
}

//! Writes the seed corpus, `fuzz/corpus/<target>/`, from nothing but the code and the test
//! fixtures: `cargo run --manifest-path fuzz/Cargo.toml --example seeds` (from the repository
//! root; stable Rust is enough). The output is the same on every run, so `git status`
//! afterwards shows whether the committed seeds are current.
//!
//! - `image`: random-weight images of `txl_fuzz::tiny_config` in f32, f16 and int8 (and int8
//!   with a vocabulary section), and of a second config with the other switches (pre-LN, shared
//!   biases, untied output weights, one table, clamping, same_length).
//! - `integer_image`: the two base images unedited, and an edit of each kind (a negative row
//!   scale, `frac` 31, the arithmetic flag cleared, a header byte, a byte anywhere).
//! - `safetensors` / `torch`: the checkpoint of `txl_fuzz::CHECKPOINT_CONFIG` as
//!   `save_pretrained` and `torch.save` lay it out, plus the `no_mem` fixture's files (real
//!   output of `transformers` and PyTorch, for another config: they reach the shape checks).
//! - `original`: the `no_mem` fixture in the original training code's layout (a whole pickled
//!   module and a state_dict).
//! - `config`: every fixture's `config.json` and the checkpoint targets' config.
//! - `firmware_args`: the command lines of the firmware's tests and README.
//! - `state`: the saved state of each session the target restores into.
//! - `vocab`: the fixture vocabularies' pickles, and a vocabulary line with a text after it.

use std::fs;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use txl_core::random_model::{Init, RandomInit, RandomModel};
use txl_core::tensors::{for_each_tensor, LayerTensor, TensorName};
use txl_core::{AlignedBytes, Config, Model};
use txl_host_gpu::quantize::{quantize_weights, Target};
use txl_tools::checkpoint::parse_hf_config;
use txl_tools::checkpoint::torch_writer::{encode, TorchFile};

fn main() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures = fuzz.join("../tests/fixtures");
    let corpus = fuzz.join("corpus");
    image_seeds(&corpus.join("image"));
    integer_image_seeds(&corpus.join("integer_image"));
    checkpoint_seeds(&corpus, &fixtures);
    config_seeds(&corpus.join("config"), &fixtures);
    firmware_args_seeds(&corpus.join("firmware_args"));
    state_seeds(&corpus.join("state"));
    vocab_seeds(&corpus.join("vocab"), &fixtures);
}

// ---------------------------------------------------------------------------------------
// vocab
// ---------------------------------------------------------------------------------------

/// The fixture vocabularies' pickles (the legacy `cache.pt` starts with its pickles) and a
/// vocabulary line with a text after it.
fn vocab_seeds(dir: &Path, fixtures: &Path) {
    let dir = fresh(dir);
    let words = fixtures.join("words");
    write(&dir, "hf_vocab.pkl", &fs::read(words.join("vocab.pkl")).unwrap());
    let legacy = fs::read(words.join("lower/legacy/cache.pt")).unwrap();
    write(
        &dir,
        "legacy_cache_pt_head",
        &legacy[..legacy.len().min(24 << 10)],
    );
    let symbols = fs::read_to_string(words.join("vocab.txt"))
        .unwrap()
        .replace('\n', " ");
    let heldout = fs::read_to_string(words.join("heldout.txt")).unwrap();
    write(
        &dir,
        "vocab_and_text.txt",
        format!("{symbols}\n{heldout}").as_bytes(),
    );
}

/// Random weights for `config` from `seed`, at the fixtures' scale carried to its width.
fn random_image(config: &Config, seed: u64) -> Vec<u8> {
    RandomModel::new(config, seed)
        .init(Init::Scaled(RandomInit::for_config(config)))
        .image()
        .unwrap()
}

/// A fresh, empty `dir`.
fn fresh(dir: &Path) -> PathBuf {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    dir.to_path_buf()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::write(dir.join(name), bytes).unwrap();
    println!("{:>6} bytes  {}", bytes.len(), dir.join(name).display());
}

// ---------------------------------------------------------------------------------------
// image
// ---------------------------------------------------------------------------------------

/// One table, the other switches flipped from `tiny_config`.
fn other_config() -> Config {
    Config {
        n_token: 6,
        d_model: 4,
        d_embed: 2,
        n_head: 1,
        d_head: 2,
        d_inner: 3,
        n_layer: 1,
        cutoffs: [0; txl_core::config::MAX_CUTOFFS],
        n_cutoffs: 0,
        div_val: 1,
        tie_weight: false,
        tie_projs: 0,
        pre_lnorm: true,
        untie_r: false,
        layer_norm_epsilon: 1e-5,
        tgt_len: 2,
        mem_len: 2,
        clamp_len: 1,
        same_length: true,
    }
}

fn image_seeds(dir: &Path) {
    let dir = fresh(dir);
    let tiny = txl_fuzz::tiny_config();
    let f32_image = random_image(&tiny, 1);
    let aligned = AlignedBytes::copy_from(&f32_image).unwrap();
    let model = Model::parse(aligned.bytes()).unwrap();
    write(&dir, "tiny_f32.txl", &f32_image);
    write(
        &dir,
        "tiny_f16.txl",
        &quantize_weights(&model, Target::F16).unwrap(),
    );
    write(
        &dir,
        "tiny_int8.txl",
        &quantize_weights(&model, Target::Int8).unwrap(),
    );
    // int4 in groups of 8 (the tiny model's rows are short), every matrix
    write(
        &dir,
        "tiny_int4.txl",
        &txl_host_gpu::quantize::quantize_weights_grouped(&model, Target::Int4All, 8).unwrap(),
    );
    let other = other_config();
    write(&dir, "other_f32.txl", &random_image(&other, 2));
    // With a vocabulary section (multi-byte UTF-8 included), to reach its checks.
    let symbols: Vec<String> = (0..tiny.n_token)
        .map(|i| match i {
            0 => "<eos>".to_string(),
            1 => "<unk>".to_string(),
            _ => format!("wörd{i}"),
        })
        .collect();
    let section = txl_core::vocab::encode_section(&symbols, true).unwrap();
    write(
        &dir,
        "tiny_int8_vocab.txl",
        &txl_core::image::set_vocabulary(&quantize_weights(&model, Target::Int8).unwrap(), Some(&section))
            .unwrap(),
    );
}

// ---------------------------------------------------------------------------------------
// integer_image
// ---------------------------------------------------------------------------------------

/// Edit scripts of the `integer_image` target: a base (0 int8, 1 int4), then edits of seven
/// bytes `[kind, a, b, v0, v1, v2, v3]`.
fn integer_image_seeds(dir: &Path) {
    let dir = fresh(dir);
    let edit = |kind: u8, a: u8, b: u8, v: [u8; 4]| [kind, a, b, v[0], v[1], v[2], v[3]];
    write(&dir, "int8", &[0]);
    write(&dir, "int4", &[1]);
    let negative_scale = edit(2, 3, 1, (-1.0f32).to_le_bytes());
    write(&dir, "int8_negative_scale", &[&[0][..], &negative_scale].concat());
    write(
        &dir,
        "int4_frac_31",
        &[&[1][..], &edit(1, 1, 0, 31u32.to_le_bytes())].concat(),
    );
    write(
        &dir,
        "int8_float_flags",
        &[&[0][..], &edit(1, 0, 0, [0; 4])].concat(),
    );
    let mixed = [
        &[1][..],
        &edit(0, 121, 1, [0; 4]),
        &edit(3, 0x55, 0, 1000u32.to_le_bytes()),
        &edit(2, 0, 0, f32::INFINITY.to_le_bytes()),
    ]
    .concat();
    write(&dir, "int4_mixed_edits", &mixed);
}

// ---------------------------------------------------------------------------------------
// safetensors and torch
// ---------------------------------------------------------------------------------------

/// One tensor of a checkpoint file.
#[derive(Clone, Debug)]
struct Stored {
    key: String,
    shape: Vec<usize>,
    dtype: Dtype,
    data: Vec<f32>,
}

/// Deterministic values `k / 64`, `|k| <= 128`: exact in f16, bf16, f32 and f64.
fn values(state: &mut u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            ((*state % 257) as i32 - 128) as f32 / 64.0
        })
        .collect()
}

/// The tensors of `CHECKPOINT_CONFIG` under Hugging Face keys, as `save_pretrained` keeps
/// them: no tied output weights or projection, each shared bias under one layer's alias,
/// the `pos_emb.inv_freq` buffer; a few in f16, bf16 and f64.
fn hf_tensors(config: &Config) -> Vec<Stored> {
    let mut state = 0x9e37_79b9_7f4a_7c15;
    let mut stored = Vec::new();
    for_each_tensor(config, |name, shape| {
        let (dims, n) = shape.dims();
        let key = match name {
            TensorName::SharedRWBias => "transformer.layers.1.dec_attn.r_w_bias".to_string(),
            TensorName::SharedRRBias => "transformer.layers.0.dec_attn.r_r_bias".to_string(),
            TensorName::OutWeight(_)
            | TensorName::OutBias(_)
            | TensorName::OutProj(_)
            | TensorName::ClusterWeight
            | TensorName::ClusterBias => name.to_string(),
            _ => format!("transformer.{name}"),
        };
        let dtype = match name {
            TensorName::EmbLayer(1) => Dtype::F16,
            TensorName::Layer(0, LayerTensor::Ff1Bias) => Dtype::BF16,
            TensorName::OutBias(0) => Dtype::F64,
            _ => Dtype::F32,
        };
        stored.push(Stored {
            key,
            shape: dims[..n].iter().map(|&d| d as usize).collect(),
            dtype,
            data: values(&mut state, shape.len()),
        });
    });
    stored.push(Stored {
        key: "transformer.pos_emb.inv_freq".into(),
        shape: vec![2],
        dtype: Dtype::F32,
        data: vec![1.0, 0.5],
    });
    stored
}

fn safetensors_bytes(tensors: &[Stored]) -> Vec<u8> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|t| encode(t.dtype, &t.data).unwrap())
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|(t, b)| {
            (
                t.key.clone(),
                TensorView::new(t.dtype, t.shape.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// The tensors as `torch.save(model.state_dict())` leaves them: every tied copy present,
/// sharing its source's storage.
fn torch_file(stored: &[Stored], n_layer: usize) -> TorchFile {
    let mut file = TorchFile::default();
    let shared = [
        ("r_w_bias", "transformer.layers.1.dec_attn.r_w_bias"),
        ("r_r_bias", "transformer.layers.0.dec_attn.r_r_bias"),
    ];
    for tensor in stored {
        if shared.iter().any(|(_, key)| *key == tensor.key) {
            continue;
        }
        file.add(&tensor.key, &tensor.shape, tensor.dtype, &tensor.data);
    }
    for (bias, key) in shared {
        let mut top = stored.iter().find(|t| t.key == key).unwrap().clone();
        top.key = format!("transformer.{bias}");
        file.add(&top.key, &top.shape, top.dtype, &top.data);
        for layer in 0..n_layer {
            file.alias(&format!("transformer.layers.{layer}.dec_attn.{bias}"), &top.key)
                .unwrap();
        }
    }
    file.alias(
        "crit.out_layers.0.weight",
        "transformer.word_emb.emb_layers.0.weight",
    )
    .unwrap();
    file.alias(
        "crit.out_layers.1.weight",
        "transformer.word_emb.emb_layers.1.weight",
    )
    .unwrap();
    file.alias("crit.out_projs.1", "transformer.word_emb.emb_projs.1")
        .unwrap();
    file
}

fn checkpoint_seeds(corpus: &Path, fixtures: &Path) {
    let config = parse_hf_config(txl_fuzz::CHECKPOINT_CONFIG).unwrap();
    let stored = hf_tensors(&config);

    let dir = fresh(&corpus.join("safetensors"));
    let st = safetensors_bytes(&stored);
    check_loads("safetensors", txl_tools::checkpoint::SAFETENSORS_FILE, &st);
    write(&dir, "save_pretrained.safetensors", &st);
    let fixture = fs::read(fixtures.join("no_mem/model.safetensors")).unwrap();
    write(&dir, "fixture_no_mem.safetensors", &fixture);

    let dir = fresh(&corpus.join("torch"));
    let bin = torch_file(&stored, config.n_layer as usize).to_bytes().unwrap();
    check_loads("torch", txl_tools::checkpoint::PYTORCH_BIN_FILE, &bin);
    write(&dir, "torch_save.bin", &bin);
    let fixture = fs::read(fixtures.join("no_mem/pytorch_model.bin")).unwrap();
    write(&dir, "fixture_no_mem.bin", &fixture);

    // the original training code's layout: the `no_mem` fixture's weights as a whole pickled
    // module and as a state_dict (tools/reference/make_original_fixtures.py)
    let dir = fresh(&corpus.join(txl_fuzz::ORIGINAL_TARGET));
    for (fixture, seed) in [
        ("original/no_mem/model.pt", "whole_module.pt"),
        ("original/no_mem/state_dict.pt", "state_dict.pt"),
    ] {
        let bytes = fs::read(fixtures.join(fixture)).unwrap();
        write(&dir, seed, &bytes);
    }
}

/// The generated checkpoint must load against the targets' config, or it seeds nothing
/// beyond the first error.
fn check_loads(target: &str, file_name: &str, weights: &[u8]) {
    use txl_tools::checkpoint::{load_hf_checkpoint, CONFIG_FILE};
    let dir = std::env::temp_dir().join(format!("txl-fuzz-seeds-{target}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(CONFIG_FILE), txl_fuzz::CHECKPOINT_CONFIG).unwrap();
    fs::write(dir.join(file_name), weights).unwrap();
    let loaded = load_hf_checkpoint(&dir, Default::default(), false);
    fs::remove_dir_all(&dir).unwrap();
    if let Err(error) = loaded {
        panic!("the {target} seed does not load: {error:#}");
    }
}

// ---------------------------------------------------------------------------------------
// config and firmware_args
// ---------------------------------------------------------------------------------------

fn config_seeds(dir: &Path, fixtures: &Path) {
    let dir = fresh(dir);
    let mut names: Vec<String> = fs::read_dir(fixtures)
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.unwrap();
            entry
                .path()
                .join("config.json")
                .is_file()
                .then(|| entry.file_name().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    for name in names {
        let json = fs::read(fixtures.join(&name).join("config.json")).unwrap();
        write(&dir, &format!("fixture_{name}.json"), &json);
    }
    write(
        &dir,
        "checkpoint_targets.json",
        txl_fuzz::CHECKPOINT_CONFIG.as_bytes(),
    );
}

fn firmware_args_seeds(dir: &Path) {
    let dir = fresh(dir);
    let lines: [(&str, &[&str]); 6] = [
        ("score", &["score"]),
        ("score_reset", &["score", "--reset-after", "2", "--mem-len", "8"]),
        (
            "score_heap",
            &["score", "--arena", "heap", "--tgt-len", "16", "--mem-len", "32"],
        ),
        (
            "score_options",
            &["--clamp-len", "8", "--same-length", "true", "--mem-init", "zeros"],
        ),
        (
            "demo",
            &[
                "demo",
                "--prompt",
                "And God said",
                "--length",
                "20",
                "--temperature",
                "0",
                "--seed",
                "7",
            ],
        ),
        (
            "demo_sampled",
            &["demo", "--temperature", "0.8", "--arena", "static"],
        ),
    ];
    for (name, words) in lines {
        write(&dir, name, words.join("\0").as_bytes());
    }
}

// ---------------------------------------------------------------------------------------
// state
// ---------------------------------------------------------------------------------------

fn state_seeds(dir: &Path) {
    let dir = fresh(dir);
    for which in 0..txl_fuzz::STATE_SESSIONS {
        let state = txl_fuzz::with_state_session(which, |session| txl_fuzz::saved_state(session));
        write(&dir, &format!("session_{which}.state"), &state);
    }
}

//! End-to-end tests: tiny checkpoints written in a scratch directory, in both containers,
//! laid out as `save_pretrained` and `torch.save` lay them out, then read back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use safetensors::tensor::{Dtype, TensorView};
use txl_core::tensors::{for_each_tensor, LayerTensor, TensorName};
use txl_core::{Config, Image};

use super::torch_writer::TorchFile;
use super::*;

// ---------------------------------------------------------------------------------------
// Scaffolding
// ---------------------------------------------------------------------------------------

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("txl-checkpoint-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write_config(&self, json: &str) {
        std::fs::write(self.0.join(CONFIG_FILE), json).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic values `k / 64`, `|k| <= 128`: exact in f16, bf16, f32 and f64.
struct Values(u64);

impl Values {
    fn take(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                ((self.0 % 257) as i32 - 128) as f32 / 64.0
            })
            .collect()
    }
}

/// f32 to f16 bits, for values f16 holds exactly (all the test values).
fn f16_bits(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    if value == 0.0 {
        return sign;
    }
    let exponent = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    assert!(
        exponent > 0 && exponent < 31 && bits & 0x1fff == 0,
        "{value} is not exact in f16"
    );
    sign | ((exponent as u16) << 10) | ((bits >> 13) & 0x3ff) as u16
}

fn encode(dtype: Dtype, data: &[f32]) -> Vec<u8> {
    match dtype {
        Dtype::F32 => data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Dtype::F64 => data.iter().flat_map(|&v| (v as f64).to_le_bytes()).collect(),
        Dtype::F16 => data.iter().flat_map(|&v| f16_bits(v).to_le_bytes()).collect(),
        Dtype::BF16 => data
            .iter()
            .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
            .collect(),
        Dtype::I64 => data.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect(),
        other => panic!("no test encoding for {other:?}"),
    }
}

/// Canonical tensors, in image order.
type Canonical = Vec<(TensorName, Vec<f32>)>;

/// One tensor of a test file.
#[derive(Clone, Debug)]
struct Stored {
    key: String,
    shape: Vec<usize>,
    dtype: Dtype,
    data: Vec<f32>,
}

fn hf_key(name: TensorName) -> String {
    match name {
        TensorName::OutWeight(_)
        | TensorName::OutBias(_)
        | TensorName::OutProj(_)
        | TensorName::ClusterWeight
        | TensorName::ClusterBias => name.to_string(),
        _ => format!("transformer.{name}"),
    }
}

/// Random canonical tensors for `config`, and the same stored under Hugging Face keys (no
/// tied copies; shared biases at the top level). A few are stored as f16, bf16 and f64.
fn model(config: &Config, seed: u64) -> (Canonical, Vec<Stored>) {
    let mut values = Values(seed);
    let mut canonical = Vec::new();
    let mut stored = Vec::new();
    for_each_tensor(config, |name, shape| {
        let (dims, n) = shape.dims();
        let data = values.take(shape.len());
        let dtype = match name {
            TensorName::EmbLayer(1) => Dtype::F16,
            TensorName::Layer(0, LayerTensor::Ff1Bias) => Dtype::BF16,
            TensorName::OutBias(0) => Dtype::F64,
            _ => Dtype::F32,
        };
        stored.push(Stored {
            key: hf_key(name),
            shape: dims[..n].iter().map(|&d| d as usize).collect(),
            dtype,
            data: data.clone(),
        });
        canonical.push((name, data));
    });
    (canonical, stored)
}

fn write_safetensors(path: &Path, tensors: &[Stored]) {
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|t| encode(t.dtype, &t.data)).collect();
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
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn stored_mut<'a>(tensors: &'a mut [Stored], key: &str) -> &'a mut Stored {
    tensors
        .iter_mut()
        .find(|t| t.key == key)
        .unwrap_or_else(|| panic!("no {key}"))
}

fn without(tensors: &[Stored], key: &str) -> Vec<Stored> {
    let kept: Vec<Stored> = tensors.iter().filter(|t| t.key != key).cloned().collect();
    assert_eq!(kept.len() + 1, tensors.len(), "{key} was not there");
    kept
}

fn rename(tensors: &mut [Stored], from: &str, to: &str) {
    stored_mut(tensors, from).key = to.to_string();
}

fn copy_of(tensors: &[Stored], key: &str, new_key: &str) -> Stored {
    let mut copy = tensors.iter().find(|t| t.key == key).unwrap().clone();
    copy.key = new_key.to_string();
    copy
}

fn error_text(result: Result<Checkpoint>) -> String {
    format!("{:#}", result.expect_err("loading should fail"))
}

// ---------------------------------------------------------------------------------------
// The tiny model of the tests: two embedding tables (div_val 2), tied output weights, the
// second output projection tied, and one r_w_bias / r_r_bias pair shared by both layers.
// ---------------------------------------------------------------------------------------

const TINY: &str = r#"{
    "model_type": "transfo-xl", "n_token": 20, "cutoffs": [8], "div_val": 2,
    "d_model": 6, "d_embed": 8, "n_head": 2, "d_head": 3, "d_inner": 10, "n_layer": 2,
    "tie_weight": true, "untie_r": false, "proj_share_all_but_first": true,
    "pre_lnorm": false, "same_length": true, "clamp_len": -1, "mem_len": 5, "tgt_len": 4
}"#;

/// The tiny model as `save_pretrained(safe_serialization=True)` leaves it: no tied output
/// weights or projection, each shared bias kept only under one layer's alias, plus the
/// `pos_emb.inv_freq` buffer.
fn tiny_safetensors(seed: u64) -> (Config, Canonical, Vec<Stored>) {
    let config = parse_hf_config(TINY).unwrap();
    let (canonical, mut stored) = model(&config, seed);
    rename(
        &mut stored,
        "transformer.r_w_bias",
        "transformer.layers.1.dec_attn.r_w_bias",
    );
    rename(
        &mut stored,
        "transformer.r_r_bias",
        "transformer.layers.0.dec_attn.r_r_bias",
    );
    stored.push(Stored {
        key: "transformer.pos_emb.inv_freq".into(),
        shape: vec![3],
        dtype: Dtype::F32,
        data: vec![1.0, 0.5, 0.25],
    });
    (config, canonical, stored)
}

/// The tiny model as `torch.save(model.state_dict())` leaves it: every tied copy present,
/// sharing its source's storage.
fn tiny_torch(stored: &[Stored]) -> TorchFile {
    let mut file = TorchFile::default();
    for tensor in stored {
        if tensor.key.ends_with("dec_attn.r_w_bias") || tensor.key.ends_with("dec_attn.r_r_bias") {
            continue;
        }
        file.add(&tensor.key, &tensor.shape, tensor.dtype, &tensor.data);
    }
    let shared = [
        ("r_w_bias", "transformer.layers.1.dec_attn.r_w_bias"),
        ("r_r_bias", "transformer.layers.0.dec_attn.r_r_bias"),
    ];
    for (bias, key) in shared {
        let tensor = stored.iter().find(|t| t.key == key).unwrap();
        let mut top = tensor.clone();
        top.key = format!("transformer.{bias}");
        file.add(&top.key, &top.shape, top.dtype, &top.data);
        for layer in 0..2 {
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

#[test]
fn safetensors_without_tied_copies_reads_back_what_was_written() {
    let dir = Scratch::new("st");
    let (config, canonical, stored) = tiny_safetensors(1);
    dir.write_config(TINY);
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);

    let (checkpoint, report) =
        load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(checkpoint.config, config);
    assert_eq!(checkpoint.tensors, canonical);
    assert_eq!(report.format, CheckpointFormat::Safetensors);
    assert_eq!(report.weights_path, dir.path().join(SAFETENSORS_FILE));
    assert_eq!(report.key_prefix, "transformer.");
    assert_eq!(report.ignored_keys, ["transformer.pos_emb.inv_freq"]);
    assert!(report.tied_copies_checked.is_empty());
    assert_eq!(report.source_dtypes, ["bf16", "f16", "f32", "f64"]);
    assert!(checkpoint.tensor(TensorName::OutWeight(0)).is_none());
    assert_eq!(
        checkpoint.tensor(TensorName::SharedRWBias),
        stored
            .iter()
            .find(|t| t.key == "transformer.layers.1.dec_attn.r_w_bias")
            .map(|t| t.data.as_slice())
    );

    // The image holds the same tensors.
    let image_bytes = checkpoint.to_image().unwrap();
    let mut aligned = vec![0u128; image_bytes.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut aligned)[..image_bytes.len()].copy_from_slice(&image_bytes);
    let image = Image::parse(&bytemuck::cast_slice::<u128, u8>(&aligned)[..image_bytes.len()]).unwrap();
    assert_eq!(*image.config(), config);
    for (index, (_, data)) in canonical.iter().enumerate() {
        let stored: Vec<f32> = image.vector(index).iter().collect();
        assert_eq!(stored, *data, "tensor {index}");
    }
}

#[test]
fn pytorch_bin_with_every_tied_copy_gives_the_same_checkpoint() {
    let dir = Scratch::new("bin");
    let (_, canonical, stored) = tiny_safetensors(2);
    dir.write_config(TINY);
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);
    tiny_torch(&stored)
        .write(&dir.path().join(PYTORCH_BIN_FILE))
        .unwrap();

    let (from_bin, report) =
        load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::PytorchBin, false).unwrap();
    assert_eq!(from_bin.tensors, canonical);
    assert_eq!(report.format, CheckpointFormat::PytorchBin);
    let mut checked = report.tied_copies_checked.clone();
    checked.sort();
    assert_eq!(
        checked,
        [
            "crit.out_layers.0.weight",
            "crit.out_layers.1.weight",
            "crit.out_projs.1",
            "transformer.layers.0.dec_attn.r_r_bias",
            "transformer.layers.0.dec_attn.r_w_bias",
            "transformer.layers.1.dec_attn.r_r_bias",
            "transformer.layers.1.dec_attn.r_w_bias",
        ]
    );
    assert_eq!(report.ignored_keys, ["transformer.pos_emb.inv_freq"]);

    // Auto prefers safetensors; both give identical checkpoints.
    let (from_auto, auto_report) =
        load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(auto_report.format, CheckpointFormat::Safetensors);
    assert_eq!(from_auto, from_bin);
    assert_eq!(from_auto.to_image().unwrap(), from_bin.to_image().unwrap());

    // The file itself, its format told from its bytes.
    let direct =
        load_hf_checkpoint(&dir.path().join(PYTORCH_BIN_FILE), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(direct, from_bin);
    let direct =
        load_hf_checkpoint(&dir.path().join(SAFETENSORS_FILE), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(direct, from_bin);
}

#[test]
fn a_tied_copy_that_differs_is_an_error() {
    let dir = Scratch::new("tied");
    let (_, _, stored) = tiny_safetensors(3);
    dir.write_config(TINY);
    let mut file = tiny_torch(&stored);
    let mut other = copy_of(
        &stored,
        "transformer.word_emb.emb_layers.1.weight",
        "crit.out_layers.1.weight",
    );
    other.data[5] += 1.0;
    assert!(file.remove("crit.out_layers.1.weight"));
    file.add(&other.key, &other.shape, other.dtype, &other.data);
    file.write(&dir.path().join(PYTORCH_BIN_FILE)).unwrap();
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(error.contains("`crit.out_layers.1.weight`"), "{error}");
    assert!(
        error.contains("`transformer.word_emb.emb_layers.1.weight`"),
        "{error}"
    );
    assert!(error.contains("1 of 48 elements"), "{error}");

    // A layer's alias of a shared bias that differs from the shared one.
    let mut stored_with_aliases = stored.clone();
    let mut alias = copy_of(
        &stored,
        "transformer.layers.1.dec_attn.r_w_bias",
        "transformer.r_w_bias",
    );
    stored_with_aliases.push(alias.clone());
    alias.key = "transformer.layers.0.dec_attn.r_w_bias".into();
    alias.data[0] = -alias.data[0] + 0.5;
    stored_with_aliases.push(alias);
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored_with_aliases);
    let error = error_text(load_hf_checkpoint(
        dir.path(),
        CheckpointFormat::Safetensors,
        false,
    ));
    assert!(
        error.contains("transformer.layers.0.dec_attn.r_w_bias") && error.contains("untie_r"),
        "{error}"
    );
}

#[test]
fn a_missing_tensor_is_named_with_the_file() {
    let dir = Scratch::new("missing");
    let (_, _, stored) = tiny_safetensors(4);
    dir.write_config(TINY);
    let path = dir.path().join(SAFETENSORS_FILE);

    write_safetensors(
        &path,
        &without(&stored, "transformer.layers.1.pos_ff.CoreNet.3.weight"),
    );
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(
        error.contains("`transformer.layers.1.pos_ff.CoreNet.3.weight`"),
        "{error}"
    );
    assert!(error.contains(&path.display().to_string()), "{error}");

    write_safetensors(&path, &without(&stored, "transformer.layers.0.dec_attn.r_r_bias"));
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(error.contains("`transformer.r_r_bias`"), "{error}");
    assert!(
        error.contains("transformer.layers.0.dec_attn.r_r_bias"),
        "{error}"
    );

    write_safetensors(&path, &without(&stored, "crit.out_projs.0"));
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(error.contains("`crit.out_projs.0`"), "{error}");

    // A base model without the LM head.
    let headless: Vec<Stored> = stored
        .iter()
        .filter(|t| !t.key.starts_with("crit."))
        .cloned()
        .collect();
    write_safetensors(&path, &headless);
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(
        error.contains("`crit.out_layers.0.bias`") && error.contains("language-model head"),
        "{error}"
    );
}

#[test]
fn a_wrong_shape_is_named_with_both_shapes() {
    let dir = Scratch::new("shape");
    let (_, _, mut stored) = tiny_safetensors(5);
    dir.write_config(TINY);
    stored_mut(&mut stored, "transformer.layers.0.dec_attn.qkv_net.weight").shape = vec![6, 18];
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(
        error.contains("`transformer.layers.0.dec_attn.qkv_net.weight`"),
        "{error}"
    );
    assert!(error.contains("[6, 18]") && error.contains("[18, 6]"), "{error}");

    // A tied copy of the wrong shape (one table's worth of tokens fewer).
    let (_, _, stored) = tiny_safetensors(5);
    let mut copy = copy_of(
        &stored,
        "transformer.word_emb.emb_layers.0.weight",
        "crit.out_layers.0.weight",
    );
    copy.shape = vec![4, 8];
    copy.data.truncate(32);
    let mut with_copy = stored.clone();
    with_copy.push(copy);
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &with_copy);
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(
        error.contains("`crit.out_layers.0.weight`") && error.contains("[4, 8]"),
        "{error}"
    );
}

#[test]
fn an_unsupported_element_type_is_named() {
    let dir = Scratch::new("dtype");
    let (_, _, mut stored) = tiny_safetensors(6);
    dir.write_config(TINY);
    stored_mut(&mut stored, "crit.cluster_bias").dtype = Dtype::I64;
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(
        error.contains("`crit.cluster_bias`") && error.contains("I64"),
        "{error}"
    );
}

#[test]
fn the_original_key_layout_is_detected() {
    let dir = Scratch::new("orig");
    let (_, canonical, stored) = tiny_safetensors(7);
    dir.write_config(TINY);
    let original = without_transformer_prefix(&stored);
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &original);
    let (checkpoint, report) =
        load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(checkpoint.tensors, canonical);
    assert_eq!(report.key_prefix, "");
    assert_eq!(report.ignored_keys, ["pos_emb.inv_freq"]);

    // Nested under a further prefix, as a DataParallel model saves.
    let nested: Vec<Stored> = stored
        .iter()
        .map(|t| Stored {
            key: format!("module.{}", t.key),
            ..t.clone()
        })
        .collect();
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &nested);
    let (checkpoint, report) =
        load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(checkpoint.tensors, canonical);
    assert_eq!(report.key_prefix, "module.transformer.");
}

/// `stored` under the original code's key layout: no `transformer.` prefix.
fn without_transformer_prefix(stored: &[Stored]) -> Vec<Stored> {
    stored
        .iter()
        .map(|t| Stored {
            key: t.key.trim_start_matches("transformer.").to_string(),
            ..t.clone()
        })
        .collect()
}

/// The original PyTorch code's head scores tail cluster i with column -i, the reverse of
/// Hugging Face's order: weights under the original key layout have their cluster rows
/// reversed, Hugging Face's are kept (two tail clusters, so the order shows).
#[test]
fn original_layout_weights_have_their_cluster_rows_reversed() {
    let json = TINY.replace(
        r#""n_token": 20, "cutoffs": [8]"#,
        r#""n_token": 20, "cutoffs": [8, 14]"#,
    );
    let config = parse_hf_config(&json).unwrap();
    assert_eq!(config.n_clusters(), 2);
    let (canonical, stored) = model(&config, 11);
    let dir = Scratch::new("clusters");
    dir.write_config(&json);
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);
    let (checkpoint, report) =
        load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(checkpoint.tensors, canonical);
    assert!(!report.cluster_rows_reversed);

    let original = without_transformer_prefix(&stored);
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &original);
    let (checkpoint, report) =
        load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert!(report.cluster_rows_reversed);
    let d_embed = config.d_embed as usize;
    for ((name, read), (_, written)) in checkpoint.tensors.iter().zip(&canonical) {
        match name {
            TensorName::ClusterWeight => {
                let rows: Vec<&[f32]> = written.chunks(d_embed).rev().collect();
                assert_eq!(*read, rows.concat());
                assert_ne!(read, written);
            }
            TensorName::ClusterBias => {
                assert_eq!(
                    read.iter().rev().collect::<Vec<_>>(),
                    written.iter().collect::<Vec<_>>()
                );
                assert_ne!(read, written);
            }
            _ => assert_eq!(read, written, "{name}"),
        }
    }
}

#[test]
fn weights_the_config_has_no_place_for_are_an_error() {
    let dir = Scratch::new("stray");
    let (_, _, stored) = tiny_safetensors(8);
    dir.write_config(TINY);
    let mut extra = stored.clone();
    extra.push(copy_of(
        &stored,
        "transformer.layers.1.dec_attn.o_net.weight",
        "transformer.layers.2.dec_attn.o_net.weight",
    ));
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &extra);
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(
        error.contains("transformer.layers.2.dec_attn.o_net.weight") && error.contains("n_layer"),
        "{error}"
    );

    let mut other = stored.clone();
    other.push(Stored {
        key: "lm_head.unrelated".into(),
        shape: vec![2],
        dtype: Dtype::F32,
        data: vec![0.0; 2],
    });
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &other);
    let (_, report) = load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(
        report.ignored_keys,
        ["lm_head.unrelated", "transformer.pos_emb.inv_freq"]
    );
}

#[test]
fn untied_weights_and_div_val_1_projections() {
    // div_val 1 with d_embed != d_model: one table, one projection, and output projections
    // tied to projection 0 where tie_projs says so; output weights and biases untied.
    let json = r#"{
        "vocab_size": 24, "cutoffs": [6, 14], "div_val": 1, "d_model": 4, "d_embed": 6,
        "n_head": 2, "d_head": 2, "d_inner": 8, "n_layer": 1, "tie_word_embeddings": false,
        "tie_projs": [false, true, true], "untie_r": true, "pre_lnorm": true
    }"#;
    let dir = Scratch::new("div1");
    dir.write_config(json);
    let config = parse_hf_config(json).unwrap();
    let (canonical, stored) = model(&config, 9);
    assert!(stored.iter().any(|t| t.key == "crit.out_layers.0.weight"));
    assert!(stored.iter().any(|t| t.key == "crit.out_projs.0"));
    assert!(!stored
        .iter()
        .any(|t| t.key == "crit.out_projs.1" || t.key == "transformer.r_w_bias"));
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);

    let mut file = TorchFile::default();
    for tensor in &stored {
        file.add(&tensor.key, &tensor.shape, tensor.dtype, &tensor.data);
    }
    file.alias("crit.out_projs.1", "transformer.word_emb.emb_projs.0")
        .unwrap();
    file.alias("crit.out_projs.2", "transformer.word_emb.emb_projs.0")
        .unwrap();
    file.write(&dir.path().join(PYTORCH_BIN_FILE)).unwrap();

    let from_st = load_hf_checkpoint(dir.path(), CheckpointFormat::Safetensors, false).unwrap();
    let (from_bin, report) =
        load_hf_checkpoint_with_report(dir.path(), CheckpointFormat::PytorchBin, false).unwrap();
    assert_eq!(from_st.tensors, canonical);
    assert_eq!(from_bin, from_st);
    let mut checked = report.tied_copies_checked;
    checked.sort();
    assert_eq!(checked, ["crit.out_projs.1", "crit.out_projs.2"]);
    from_bin.to_image().unwrap();
}

#[test]
fn the_format_and_files_are_chosen_as_documented() {
    let dir = Scratch::new("locate");
    let (_, canonical, stored) = tiny_safetensors(10);

    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(error.contains(CONFIG_FILE), "{error}");
    dir.write_config(TINY);
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(
        error.contains(SAFETENSORS_FILE) && error.contains(PYTORCH_BIN_FILE),
        "{error}"
    );

    // safetensors preferred; a broken bin next to it is not touched unless asked for.
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);
    std::fs::write(dir.path().join(PYTORCH_BIN_FILE), b"not a checkpoint").unwrap();
    let checkpoint = load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(checkpoint.tensors, canonical);
    let error = error_text(load_hf_checkpoint(
        dir.path(),
        CheckpointFormat::PytorchBin,
        false,
    ));
    assert!(error.contains(PYTORCH_BIN_FILE), "{error}");

    // Only the bin: Auto reads it; asking for safetensors names the missing file.
    std::fs::remove_file(dir.path().join(SAFETENSORS_FILE)).unwrap();
    tiny_torch(&stored)
        .write(&dir.path().join(PYTORCH_BIN_FILE))
        .unwrap();
    let checkpoint = load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false).unwrap();
    assert_eq!(checkpoint.tensors, canonical);
    let error = error_text(load_hf_checkpoint(
        dir.path(),
        CheckpointFormat::Safetensors,
        false,
    ));
    assert!(error.contains(SAFETENSORS_FILE), "{error}");

    // A file with a name of its own, config.json next to it.
    let renamed = dir.path().join("weights.pt");
    std::fs::rename(dir.path().join(PYTORCH_BIN_FILE), &renamed).unwrap();
    assert_eq!(
        load_hf_checkpoint(&renamed, CheckpointFormat::Auto, false)
            .unwrap()
            .tensors,
        canonical
    );
    let error = error_text(load_hf_checkpoint(
        &dir.path().join("nothing.bin"),
        CheckpointFormat::Auto,
        false,
    ));
    assert!(error.contains("does not exist"), "{error}");

    // A truncated safetensors file.
    let path = dir.path().join(SAFETENSORS_FILE);
    write_safetensors(&path, &stored);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
    let error = error_text(load_hf_checkpoint(
        dir.path(),
        CheckpointFormat::Safetensors,
        false,
    ));
    assert!(error.contains("truncated"), "{error}");
}

#[test]
fn a_config_error_names_the_config_file() {
    let dir = Scratch::new("badconfig");
    let (_, _, stored) = tiny_safetensors(11);
    dir.write_config(&TINY.replace("\"n_layer\": 2,", "\"n_layer\": 2, \"attn_type\": 1,"));
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);
    let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
    assert!(
        error.contains(CONFIG_FILE) && error.contains("attn_type"),
        "{error}"
    );
}

#[test]
fn the_image_size_checked_before_reading_is_the_size_written() {
    // parse_hf_config refuses a config by the f32 image it would make; that size must be the
    // one `to_image` writes, or the check refuses too much or too little.
    let dir = Scratch::new("image-size");
    let (config, _, stored) = tiny_safetensors(3);
    dir.write_config(TINY);
    write_safetensors(&dir.path().join(SAFETENSORS_FILE), &stored);
    let checkpoint = load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false).unwrap();
    let (parameters, image_bytes) = hf_config::f32_image_bytes(&config);
    assert_eq!(image_bytes, checkpoint.to_image().unwrap().len() as u64);
    let stored: usize = checkpoint.tensors.iter().map(|(_, data)| data.len()).sum();
    assert_eq!(parameters, stored as u64);
}

#[test]
fn safetensors_claims_are_checked_against_the_file_before_the_header_is_trusted() {
    let dir = Scratch::new("claims");
    let (_, _, stored) = tiny_safetensors(4);
    dir.write_config(TINY);
    let path = dir.path().join(SAFETENSORS_FILE);
    write_safetensors(&path, &stored);
    let intact = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(intact[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&intact[8..8 + header_len]).unwrap();
    let data = &intact[8 + header_len..];
    let key = "transformer.word_emb.emb_layers.0.weight";
    let start = header[key]["data_offsets"][0].as_u64().unwrap();
    let write = |entry: serde_json::Value| {
        let mut header = header.clone();
        header[key] = entry;
        let json = serde_json::to_vec(&header).unwrap();
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend(json);
        bytes.extend(data);
        std::fs::write(&path, bytes).unwrap();
    };
    let cases = [
        (
            serde_json::json!({"dtype": "F32", "shape": [u64::MAX, 2], "data_offsets": [start, start + 4]}),
            "36893488147419103230 elements (147573952589676412920 bytes)",
        ),
        (
            serde_json::json!({"dtype": "BF16", "shape": [1u64 << 50], "data_offsets": [start, start + (1u64 << 51)]}),
            "truncated or corrupt",
        ),
        (
            serde_json::json!({"dtype": "F16", "shape": [2], "data_offsets": [start + 4, start]}),
            "run backwards",
        ),
    ];
    for (entry, problem) in cases {
        write(entry.clone());
        let error = error_text(load_hf_checkpoint(dir.path(), CheckpointFormat::Auto, false));
        assert!(error.contains(problem) && error.contains(key), "{entry}: {error}");
        assert!(
            error.contains(&format!("{} bytes of tensors", data.len())),
            "{entry}: {error}"
        );
    }
}

#[test]
fn a_config_beyond_a_model_image_is_refused_naming_its_sizes() {
    // 65536 layers of d_model 6 and d_inner 2^24: 2 * 6 * 2^24 parameters per layer.
    let json = TINY
        .replace(r#""n_layer": 2"#, r#""n_layer": 65536"#)
        .replace(r#""d_inner": 10"#, r#""d_inner": 16777216"#);
    let error = format!("{:#}", parse_hf_config(&json).unwrap_err());
    for name in [
        "n_layer 65536",
        "d_inner 16777216",
        "bytes as an f32 image",
        "4294967295",
    ] {
        assert!(error.contains(name), "{name}: {error}");
    }
    let json = TINY.replace(r#""n_token": 20"#, r#""n_token": 4000000000"#);
    let error = format!("{:#}", parse_hf_config(&json).unwrap_err());
    assert!(error.contains("n_token 4000000000"), "{error}");
}

/// A state_dict of the original code saved from a model wrapped in `DataParallel` has every
/// key under `module.`: with no config.json it converts to the image of the unwrapped one.
#[test]
fn an_original_state_dict_under_module_converts_like_the_unwrapped_one() {
    use super::source::TensorSource;
    use super::torch_source::TorchSource;

    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/original");
    for (name, cutoffs) in [
        ("adaptive_div2", None),
        ("full_softmax_long", None),
        ("no_mem", Some(vec![20])),
    ] {
        let plain = fixtures.join(name).join("state_dict.pt");
        let mut source = TorchSource::open(&plain).unwrap();
        let mut wrapped = TorchFile::default();
        for key in source.keys() {
            let shape = source.meta(&key).unwrap().shape;
            let data = source.read_f32(&key).unwrap();
            wrapped.add(&format!("module.{key}"), &shape, Dtype::F32, &data);
        }
        let dir = Scratch::new("module");
        let path = dir.path().join("state_dict.pt");
        wrapped.write(&path).unwrap();

        let options = OriginalOptions {
            cutoffs,
            ..OriginalOptions::default()
        };
        let (expected, kind) = load_checkpoint(&plain, CheckpointFormat::Auto, &options, false).unwrap();
        assert_eq!(kind, Some(OriginalKind::StateDict), "{name}");
        let (read, kind) = load_checkpoint(&path, CheckpointFormat::Auto, &options, false)
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert_eq!(kind, Some(OriginalKind::StateDict), "{name}");
        assert_eq!(read.config, expected.config, "{name}");
        assert_eq!(read.to_image().unwrap(), expected.to_image().unwrap(), "{name}");

        // Two models under two prefixes: which one is meant cannot be told.
        for key in source.keys() {
            let shape = source.meta(&key).unwrap().shape;
            let data = source.read_f32(&key).unwrap();
            wrapped.add(&format!("other.{key}"), &shape, Dtype::F32, &data);
        }
        wrapped.write(&path).unwrap();
        let error =
            error_text(load_checkpoint(&path, CheckpointFormat::Auto, &options, false).map(|(c, _)| c));
        assert!(error.contains("config.json"), "{name}: {error}");
    }
}

//! Checkpoints of the original Transformer-XL TensorFlow code (`tests/fixtures/tf/`, written by
//! TensorFlow's own Saver with the original variable names and optimizer slots, by
//! `tools/reference/regenerate_tf.sh`): each converts with `txl convert` and scores within 1e-4
//! of Hugging Face's TransfoXL reading the same checkpoint back in float64; the settings the
//! shapes cannot give default to the paper's evaluation settings for the dataset; the
//! vocabulary comes from `cache.pkl`; and damaged files are refused with one `error:` line.

use std::path::{Path, PathBuf};

use serde_json::Value;
use txl_core::tensors::TensorName;
use txl_tools::checkpoint::tf::{self, Bundle, TfOptions};
use txl_tools::npy;

mod common;
use common::{fixture, max_delta, s, scratch_dir, stderr, txl};

const FIXTURES: [&str; 5] = [
    "enwik8_div1",
    "text8_div1_proj",
    "wt103_div4",
    "div1_cutoffs_proj",
    "lm1b_div4_samedim",
];

fn tf_fixture(name: &str) -> PathBuf {
    fixture("tf").join(name)
}

fn case(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(tf_fixture(name).join("case.json")).unwrap()).unwrap()
}

/// The `convert` flags of fixture `name` (its case.json).
fn convert_flags(name: &str) -> Vec<String> {
    case(name)["convert"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// `txl convert SRC -o DIR/NAME.txl FLAGS`, which must succeed.
fn convert(src: &Path, dir: &Path, name: &str, flags: &[String]) -> PathBuf {
    let image = dir.join(format!("{name}.txl"));
    let mut args = vec!["convert", s(src), "-o", s(&image)];
    args.extend(flags.iter().map(String::as_str));
    let out = txl(&args);
    assert!(out.status.success(), "convert {name}: {}", stderr(&out));
    image
}

/// `txl convert SRC -o DIR/refused.txl`, which must fail with one `error:` line; its stderr.
fn refused(src: &Path, dir: &Path, flags: &[&str]) -> String {
    let image = dir.join("refused.txl");
    let mut args = vec!["convert", s(src), "-o", s(&image)];
    args.extend(flags);
    let out = txl(&args);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "convert {src:?}: {text}");
    assert!(
        text.starts_with("error: ") && !text.contains("panicked"),
        "{text}"
    );
    assert_eq!(text.trim_end().lines().count(), 1, "one line: {text}");
    assert!(!image.exists(), "a refused conversion wrote {image:?}");
    text
}

/// `txl score IMAGE --tokens tokens.txt --out logp.npy` (the image's own settings), compared
/// with the fixture's reference; returns the largest difference.
fn score_delta(name: &str, image: &Path, dir: &Path) -> f64 {
    let logp = dir.join(format!("{name}.npy"));
    let tokens = tf_fixture(name).join("tokens.txt");
    let out = txl(&[
        "score",
        s(image),
        "--tokens",
        s(&tokens),
        "--mem-init",
        "empty",
        "--out",
        s(&logp),
    ]);
    assert!(out.status.success(), "score {name}: {}", stderr(&out));
    let ours = npy::read(&logp).unwrap();
    let reference = npy::read(&tf_fixture(name).join("seg.logp.npy")).unwrap();
    assert_eq!(ours.shape, reference.shape, "{name}");
    max_delta(&reference.data, &ours.data)
}

#[test]
fn each_fixture_scores_like_hugging_face_reading_the_tensorflow_checkpoint() {
    let dir = scratch_dir("score");
    for name in FIXTURES {
        let image = convert(&tf_fixture(name), &dir, name, &convert_flags(name));
        let worst = score_delta(name, &image, &dir);
        println!("{name}: max |Δ ln p| = {worst:.3e}");
        assert!(worst < 1e-4, "{name}: differs from the reference by {worst}");
    }
}

#[test]
fn the_prefix_its_index_and_its_directory_give_the_same_image() {
    let dir = scratch_dir("forms");
    let name = "wt103_div4";
    let flags = convert_flags(name);
    let from_dir = std::fs::read(convert(&tf_fixture(name), &dir, "dir", &flags)).unwrap();
    let prefix = tf_fixture(name).join("model.ckpt-0");
    let from_prefix = std::fs::read(convert(&prefix, &dir, "prefix", &flags)).unwrap();
    let index = tf_fixture(name).join("model.ckpt-0.index");
    let from_index = std::fs::read(convert(&index, &dir, "index", &flags)).unwrap();
    assert_eq!(from_dir, from_prefix);
    assert_eq!(from_dir, from_index);

    // The release layout: `model/` (the checkpoint) beside `data/` (corpus-info.json,
    // cache.pkl), given as the top folder or as `model/`.
    let name = "enwik8_div1";
    let flags = convert_flags(name);
    let expected = std::fs::read(convert(&tf_fixture(name), &dir, "flat", &flags)).unwrap();
    let release = dir.join("tf_enwik8");
    copy_dir(&tf_fixture(name), &release.join("model"));
    std::fs::create_dir_all(release.join("data")).unwrap();
    for file in ["corpus-info.json", "cache.pkl"] {
        std::fs::rename(release.join("model").join(file), release.join("data").join(file)).unwrap();
    }
    let from_top = std::fs::read(convert(&release, &dir, "top", &flags)).unwrap();
    let from_model = std::fs::read(convert(&release.join("model"), &dir, "model", &flags)).unwrap();
    assert_eq!(
        from_top, expected,
        "the vocabulary and corpus-info.json from ../data/"
    );
    assert_eq!(from_model, expected);
}

#[test]
fn shapes_give_the_sizes_and_the_dataset_gives_the_evaluation_settings() {
    let load = |name: &str, options: &TfOptions| {
        tf::load_tf_checkpoint(&tf_fixture(name).join("model.ckpt-0"), options, false).unwrap()
    };
    // wt103: the paper's evaluation (tgt_len 128, mem_len 1600, clamp_len 1000, same_length).
    let (checkpoint, report) = load("wt103_div4", &TfOptions::default());
    let c = checkpoint.config;
    assert_eq!(
        (c.n_token, c.d_model, c.d_embed, c.div_val, c.n_layer),
        (100, 16, 32, 4, 2)
    );
    assert_eq!((c.n_head, c.d_head, c.d_inner), (2, 8, 32));
    assert_eq!(c.cutoffs(), [20, 60]);
    assert!(c.untie_r && c.tie_weight && !c.pre_lnorm);
    // proj_share_all_but_first: cluster 0 has its own projection, the others the embedding's.
    assert_eq!(c.tie_projs, 0b110);
    assert_eq!(
        (c.tgt_len, c.mem_len, c.clamp_len, c.same_length),
        (128, 1600, 1000, true)
    );
    assert_eq!(c.layer_norm_epsilon, 1e-12);
    assert_eq!(report.defaults_for.as_deref(), Some("wt103"));
    // Every optimizer slot and counter is skipped, and nothing else.
    assert!(report
        .skipped
        .iter()
        .all(|n| n.ends_with("/Adam") || n.ends_with("/Adam_1") || !n.starts_with("transformer/")));
    assert!(report.skipped.iter().any(|n| n == "global_step"));

    // enwik8: 128, 3800, 1000, same_length; the flags override each.
    let (checkpoint, _) = load("enwik8_div1", &TfOptions::default());
    let c = checkpoint.config;
    assert_eq!(
        (c.tgt_len, c.mem_len, c.clamp_len, c.same_length),
        (128, 3800, 1000, true)
    );
    assert!(!c.untie_r && c.div_val == 1 && c.n_clusters() == 0);
    let options = TfOptions {
        tgt_len: Some(64),
        mem_len: Some(640),
        clamp_len: Some(-1),
        same_length: Some(false),
        layer_norm_eps: Some(1e-5),
        ..TfOptions::default()
    };
    let (checkpoint, _) = load("enwik8_div1", &options);
    let c = checkpoint.config;
    assert_eq!(
        (c.tgt_len, c.mem_len, c.clamp_len, c.same_length),
        (64, 640, 0, false)
    );
    assert_eq!(c.layer_norm_epsilon, 1e-5);

    // A dataset the paper did not evaluate: train_gpu.py's flag defaults.
    let (checkpoint, report) = load("div1_cutoffs_proj", &TfOptions::default());
    let c = checkpoint.config;
    assert_eq!(
        (c.tgt_len, c.mem_len, c.clamp_len, c.same_length),
        (70, 70, 0, false)
    );
    assert_eq!(report.defaults_for, None);
    // div_val 1 with a cutoff: cluster 0 its own projection, cluster 1 the embedding's.
    assert_eq!((c.div_val, c.cutoffs(), c.tie_projs), (1, &[24][..], 0b10));
    assert!(checkpoint.tensor(TensorName::OutProj(0)).is_some());
    assert!(checkpoint.tensor(TensorName::OutProj(1)).is_none());

    // lm1b: proj_same_dim False leaves the d_model-wide table without proj_W (the identity),
    // and its cluster without a projection of its own; the paper's lm1b evaluation.
    let (checkpoint, report) = load("lm1b_div4_samedim", &TfOptions::default());
    let c = checkpoint.config;
    assert_eq!(report.layout.identity_emb_projs, [0]);
    assert_eq!((c.div_val, c.tie_projs), (4, 0b001));
    let identity = checkpoint.tensor(TensorName::EmbProj(0)).unwrap();
    assert!(identity
        .iter()
        .enumerate()
        .all(|(i, &v)| v == if i % 17 == 0 { 1.0 } else { 0.0 }));
    assert_eq!(
        (c.tgt_len, c.mem_len, c.clamp_len, c.same_length),
        (32, 128, 0, true)
    );
}

#[test]
fn the_corpus_pickle_becomes_the_vocabulary() {
    let dir = scratch_dir("vocab");
    // enwik8: byte values by frequency; `--bytes` reads raw text through them.
    let image = convert(
        &tf_fixture("enwik8_div1"),
        &dir,
        "enwik8",
        &convert_flags("enwik8_div1"),
    );
    let vocabulary = tf::read_cache_pkl(&tf_fixture("enwik8_div1").join("cache.pkl")).unwrap();
    assert_eq!(vocabulary.len(), 48);
    assert_eq!(&vocabulary.symbols()[..3], ["32", "101", "116"]); // ' ', 'e', 't'
    let text = dir.join("text.txt");
    std::fs::write(&text, "the earth was without form").unwrap();
    let out = txl(&["score", s(&image), "--bytes", s(&text), "--json"]);
    assert!(out.status.success(), "score --bytes: {}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["tokens"], 26);
    // text8: characters, `_` for a space.
    let vocabulary = tf::read_cache_pkl(&tf_fixture("text8_div1_proj").join("cache.pkl")).unwrap();
    assert_eq!(vocabulary.symbols()[0], "_");
    assert_eq!(vocabulary.symbols()[26], "z");
    // A checkpoint whose corpus pickle is another model's is refused.
    let other = dir.join("other");
    copy_dir(&tf_fixture("wt103_div4"), &other);
    std::fs::copy(
        tf_fixture("enwik8_div1").join("cache.pkl"),
        other.join("cache.pkl"),
    )
    .unwrap();
    let text = refused(&other, &dir, &[]);
    assert!(
        text.contains("48 symbols") && text.contains("100 tokens"),
        "{text}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// A copy of fixture `name` in `dir/sub`, with `edit` applied to it.
fn damaged(name: &str, dir: &Path, sub: &str, edit: impl FnOnce(&Path)) -> PathBuf {
    let copy = dir.join(sub);
    copy_dir(&tf_fixture(name), &copy);
    edit(&copy);
    copy
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at as usize] ^= 0x10;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn damaged_files_are_refused_with_one_clear_line() {
    let dir = scratch_dir("damaged");
    let index = |d: &Path| d.join("model.ckpt-0.index");

    let d = damaged("enwik8_div1", &dir, "truncated", |d| {
        let bytes = std::fs::read(index(d)).unwrap();
        std::fs::write(index(d), &bytes[..30]).unwrap();
    });
    let text = refused(&d, &dir, &[]);
    assert!(text.contains("truncated") && text.contains("footer"), "{text}");

    let d = damaged("enwik8_div1", &dir, "magic", |d| {
        let len = std::fs::metadata(index(d)).unwrap().len();
        flip(&index(d), len - 1);
    });
    let text = refused(&d, &dir, &[]);
    assert!(text.contains("not a TensorFlow checkpoint index"), "{text}");

    // A byte of the first data block (the header and the first entries).
    let d = damaged("enwik8_div1", &dir, "block", |d| flip(&index(d), 3));
    let text = refused(&d, &dir, &[]);
    assert!(text.contains("data block 0") && text.contains("CRC32C"), "{text}");

    // A byte of a tensor the model reads, in the data shard.
    let name = "transformer/layer_1/ff/layer_1/kernel";
    let d = damaged("enwik8_div1", &dir, "data", |d| {
        let bundle = Bundle::open(&d.join("model.ckpt-0")).unwrap();
        let (shard, offset, size) = bundle.location(name).unwrap();
        flip(&shard, offset + size / 2);
    });
    let text = refused(&d, &dir, &[]);
    assert!(text.contains(name) && text.contains("CRC32C"), "{text}");

    let d = damaged("enwik8_div1", &dir, "shard", |d| {
        std::fs::remove_file(d.join("model.ckpt-0.data-00000-of-00001")).unwrap();
    });
    let text = refused(&d, &dir, &[]);
    assert!(
        text.contains("data shard 0") && text.contains("data-00000-of-00001"),
        "{text}"
    );

    // Written by TensorFlow, but one tensor has the wrong shape, or is missing.
    let text = refused(&fixture("tf/damaged/wrong_shape"), &dir, &[]);
    assert!(
        text.contains("transformer/layer_1/ff/layer_2/bias") && text.contains("[17]"),
        "{text}"
    );
    let text = refused(&fixture("tf/damaged/missing_tensor"), &dir, &[]);
    assert!(text.contains("transformer/layer_1/ff/LayerNorm/beta"), "{text}");

    // corpus-info.json that disagrees with the shapes.
    let d = damaged("wt103_div4", &dir, "info", |d| {
        std::fs::write(
            d.join("corpus-info.json"),
            r#"{"vocab_size": 100, "cutoffs": [0, 30, 60, 100], "dataset": "wt103"}"#,
        )
        .unwrap();
    });
    let text = refused(&d, &dir, &[]);
    assert!(text.contains("[30, 60]") && text.contains("[20, 60]"), "{text}");
    let text = refused(&tf_fixture("wt103_div4"), &dir, &["--cutoffs", "10,60"]);
    assert!(text.contains("--cutoffs"), "{text}");

    // A state file naming a checkpoint that is not there.
    let d = damaged("enwik8_div1", &dir, "state", |d| {
        std::fs::write(d.join("checkpoint"), "model_checkpoint_path: \"model.ckpt-5\"\n").unwrap();
    });
    let text = refused(&d, &dir, &[]);
    assert!(text.contains("model.ckpt-5"), "{text}");
}

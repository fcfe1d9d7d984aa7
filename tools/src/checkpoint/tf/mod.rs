//! Checkpoints of the Transformer-XL authors' TensorFlow code (kimiyoung/transformer-xl,
//! `tf/`), the form their pretrained enwik8, text8, WikiText-103 and One Billion Word models
//! were released in, read without TensorFlow.
//!
//! A checkpoint is a tensor bundle: `PREFIX.index` ([`table`], [`proto`]) and
//! `PREFIX.data-SSSSS-of-NNNNN` ([`bundle`]), every block and tensor checked against its
//! CRC32C (the `crc32c` crate; Snappy-compressed blocks: [`snappy`]). The variables carry the
//! names the original `tf/model.py` gives them; [`names`] maps them to txl's canonical tensors and infers the hyper-parameters from their shapes.
//! What shapes cannot tell (the evaluation's `tgt_len`, `mem_len`, `clamp_len`,
//! `same_length`, and `pre_lnorm`, which the TensorFlow code does not have) comes from
//! [`TfOptions`], whose defaults are the paper's evaluation settings (`tf/sota/*.sh`) for the
//! dataset that `corpus-info.json` names ([`EvalSettings::for_dataset`]). The vocabulary is
//! the corpus pickle `cache.pkl` beside it ([`read_cache_pkl`]), read as data.
//!
//! The release layout is `DIR/data/{cache.pkl,corpus-info.json}` beside
//! `DIR/model/{checkpoint,model.ckpt-0.*}`: both files are looked for next to the checkpoint,
//! then in `../data/`.

pub mod bundle;
pub mod error;
pub mod names;
pub mod proto;
pub mod snappy;
pub mod table;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

pub use bundle::Bundle;
pub use error::TfError;
pub use names::{TfLayout, DEFAULT_LAYER_NORM_EPS};

use super::Checkpoint;
use crate::vocab::unpickle::{self, Value};
use crate::vocab::Vocabulary;

/// File name of the checkpoint state (`model_checkpoint_path: "model.ckpt-0"`).
pub const CHECKPOINT_STATE_FILE: &str = "checkpoint";
/// File name of the corpus summary the TensorFlow code writes beside `cache.pkl`.
pub const CORPUS_INFO_FILE: &str = "corpus-info.json";
/// File name of the pickled corpus (with its vocabulary).
pub const CACHE_PKL_FILE: &str = "cache.pkl";

/// What a TensorFlow checkpoint does not say for itself: the `txl convert` flags (each `None`
/// or `false` takes the dataset's default, [`EvalSettings::for_dataset`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TfOptions {
    /// `--tgt-len`.
    pub tgt_len: Option<u32>,
    /// `--mem-len`.
    pub mem_len: Option<u32>,
    /// `--clamp-len` (`<= 0`: none).
    pub clamp_len: Option<i64>,
    /// `--same-length [true|false]`.
    pub same_length: Option<bool>,
    /// `--pre-lnorm` (the TensorFlow code has only post-LayerNorm; for modified code).
    pub pre_lnorm: bool,
    /// `--layer-norm-eps` (default [`DEFAULT_LAYER_NORM_EPS`], `tf.contrib.layers.layer_norm`'s).
    pub layer_norm_eps: Option<f64>,
    /// `--cutoffs`: checked against the ones the shapes give.
    pub cutoffs: Option<Vec<u32>>,
}

/// The evaluation settings of one dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvalSettings {
    /// Segment length.
    pub tgt_len: u32,
    /// Remembered positions.
    pub mem_len: u32,
    /// Largest relative distance (`<= 0`: none).
    pub clamp_len: i64,
    /// Whether every query sees the same number of keys.
    pub same_length: bool,
}

impl EvalSettings {
    /// The paper's evaluation settings for `dataset` (the original `tf/sota/{enwik8,text8,
    /// wt103,lm1b}.sh`), or, for any other dataset, the defaults of the original
    /// `tf/train_gpu.py` flags (tgt_len 70, mem_len 70, no clamp, same_length off).
    pub fn for_dataset(dataset: Option<&str>) -> EvalSettings {
        let (tgt_len, mem_len, clamp_len, same_length) = match dataset {
            Some("enwik8" | "text8") => (128, 3800, 1000, true),
            Some("wt103") => (128, 1600, 1000, true),
            Some("lm1b") => (32, 128, -1, true),
            _ => (70, 70, -1, false),
        };
        EvalSettings {
            tgt_len,
            mem_len,
            clamp_len,
            same_length,
        }
    }
}

/// `corpus-info.json`: `{"vocab_size": N, "cutoffs": [0, c1, ..., N] or [], "dataset": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorpusInfo {
    /// The file read.
    pub path: PathBuf,
    /// `vocab_size`.
    pub vocab_size: u32,
    /// `cutoffs` without the `0` and `vocab_size` the TensorFlow code puts around them.
    pub cutoffs: Vec<u32>,
    /// `dataset`, if given.
    pub dataset: Option<String>,
}

impl CorpusInfo {
    /// Reads `corpus-info.json` at `path`.
    pub fn read(path: &Path) -> Result<CorpusInfo> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        CorpusInfo::parse(&text, path).with_context(|| format!("in {}", path.display()))
    }

    fn parse(text: &str, path: &Path) -> Result<CorpusInfo> {
        let value: serde_json::Value = serde_json::from_str(text).context("not valid JSON")?;
        let vocab_size = value
            .get("vocab_size")
            .and_then(serde_json::Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
            .ok_or_else(|| anyhow!("`vocab_size` is missing or not a positive integer"))?;
        let mut cutoffs = Vec::new();
        match value.get("cutoffs") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Array(items)) => {
                for item in items {
                    let c = item
                        .as_u64()
                        .and_then(|v| u32::try_from(v).ok())
                        .ok_or_else(|| anyhow!("`cutoffs` holds {item}, not a token count"))?;
                    cutoffs.push(c);
                }
            }
            Some(other) => bail!("`cutoffs` is {other}, not a list"),
        }
        // The TensorFlow code writes [0, c1, ..., vocab_size] and uses cutoffs[1:-1].
        if cutoffs.first() == Some(&0) {
            cutoffs.remove(0);
            if cutoffs.last() != Some(&vocab_size) {
                bail!("`cutoffs` starts with 0 but does not end with vocab_size {vocab_size}");
            }
            cutoffs.pop();
        }
        let dataset = value
            .get("dataset")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        Ok(CorpusInfo {
            path: path.to_path_buf(),
            vocab_size,
            cutoffs,
            dataset,
        })
    }
}

/// Where a TensorFlow checkpoint given as `src` is: its prefix (`DIR/model.ckpt-0`), if `src`
/// is one. `src` may be the prefix, its `.index` file, or a directory (without a
/// `config.json`) holding a `checkpoint` state file (its `model_checkpoint_path`), a `model/`
/// folder holding one (the release layout's top folder), or exactly one `*.index`.
pub fn checkpoint_prefix(src: &Path) -> Result<Option<PathBuf>> {
    if src.is_file() {
        if src.extension().is_some_and(|e| e == "index") {
            return Ok(Some(src.with_extension("")));
        }
        return Ok(None);
    }
    if bundle::index_path(src).is_file() {
        return Ok(Some(src.to_path_buf()));
    }
    // A folder with a config.json is a Hugging Face checkpoint, whatever else it holds.
    if !src.is_dir() || src.join(super::CONFIG_FILE).is_file() {
        return Ok(None);
    }
    // The release layout's top folder: `model/` beside `data/`.
    let model = src.join("model");
    if !src.join(CHECKPOINT_STATE_FILE).is_file() && model.join(CHECKPOINT_STATE_FILE).is_file() {
        return checkpoint_prefix(&model);
    }
    let state = src.join(CHECKPOINT_STATE_FILE);
    if state.is_file() {
        let text =
            std::fs::read_to_string(&state).with_context(|| format!("cannot read {}", state.display()))?;
        let Some(named) = model_checkpoint_path(&text) else {
            bail!("{} names no model_checkpoint_path", state.display());
        };
        let named = PathBuf::from(named);
        let in_dir = src.join(&named);
        if bundle::index_path(&in_dir).is_file() {
            return Ok(Some(in_dir));
        }
        // An absolute path from the machine that trained it: look beside the state file.
        if let Some(base) = named.file_name().map(|n| src.join(n)) {
            if bundle::index_path(&base).is_file() {
                return Ok(Some(base));
            }
        }
        bail!(
            "{} names the checkpoint {}, but there is no {}",
            state.display(),
            named.display(),
            bundle::index_path(&in_dir).display()
        );
    }
    let mut indexes = Vec::new();
    for entry in std::fs::read_dir(src).with_context(|| format!("cannot list {}", src.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "index") && path.is_file() {
            indexes.push(path);
        }
    }
    match indexes.as_slice() {
        [one] => Ok(Some(one.with_extension(""))),
        [] => Ok(None),
        many => bail!(
            "{} holds {} checkpoints (*.index) and no `checkpoint` file naming one; give one, e.g. {}",
            src.display(),
            many.len(),
            many[0].with_extension("").display()
        ),
    }
}

/// `model_checkpoint_path: "..."` of a checkpoint state file (a text protocol buffer).
fn model_checkpoint_path(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("model_checkpoint_path:")?.trim();
        let inner = rest.strip_prefix('"')?.strip_suffix('"')?;
        Some(inner.replace("\\\"", "\"").replace("\\\\", "\\"))
    })
}

/// `name` beside the checkpoint `prefix`, else in `../data/` (the release layout).
pub fn find_beside(prefix: &Path, name: &str) -> Option<PathBuf> {
    let dir = prefix
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    [dir.join(name), dir.join("..").join("data").join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

/// What [`load_tf_checkpoint`] found besides the tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct TfReport {
    /// The checkpoint prefix read.
    pub prefix: PathBuf,
    /// `corpus-info.json`, if found.
    pub corpus_info: Option<CorpusInfo>,
    /// Which evaluation settings were the defaults (the dataset named, or none).
    pub defaults_for: Option<String>,
    /// Names in the checkpoint not read: optimizer slots, `global_step` and the like.
    pub skipped: Vec<String>,
    /// The layout settings inferred.
    pub layout: TfLayout,
}

/// Reads the TensorFlow checkpoint at `prefix` (with `corpus-info.json` beside it, if there
/// is one) into canonical tensors.
pub fn load_tf_checkpoint(
    prefix: &Path,
    options: &TfOptions,
    show_progress: bool,
) -> Result<(Checkpoint, TfReport)> {
    let corpus_info = find_beside(prefix, CORPUS_INFO_FILE)
        .map(|p| CorpusInfo::read(&p))
        .transpose()?;
    let mut bundle = Bundle::open(prefix)?;
    let defaults = EvalSettings::for_dataset(corpus_info.as_ref().and_then(|c| c.dataset.as_deref()));
    let (config, layout) = names::infer_config(&bundle, corpus_info.as_ref(), options, defaults)?;
    let (tensors, skipped) = names::read_tensors(&config, &layout, &mut bundle, show_progress)?;
    let defaults_for = corpus_info
        .as_ref()
        .and_then(|c| c.dataset.clone())
        .filter(|d| matches!(d.as_str(), "enwik8" | "text8" | "wt103" | "lm1b"));
    Ok((
        Checkpoint { config, tensors },
        TfReport {
            prefix: prefix.to_path_buf(),
            corpus_info,
            defaults_for,
            skipped,
            layout,
        },
    ))
}

/// The vocabulary of the TensorFlow code's `cache.pkl` (`pickle.dump(corpus, protocol=2)` of
/// its `data_utils.Corpus`): the corpus's `vocab.idx2sym`. The pickle is read as data
/// ([`unpickle`]); the token arrays beside the vocabulary are not read.
pub fn read_cache_pkl(path: &Path) -> Result<Vocabulary> {
    let context = || format!("reading the corpus {}", path.display());
    let file = std::fs::File::open(path).with_context(context)?;
    let len = file.metadata().with_context(context)?.len();
    let limit = usize::try_from(len).unwrap_or(usize::MAX);
    let root = unpickle::read(&mut std::io::BufReader::new(file), limit).with_context(context)?;
    vocabulary_of(&root).with_context(|| format!("{}: not the original code's corpus", path.display()))
}

fn vocabulary_of(root: &Value) -> Result<Vocabulary> {
    let vocab = match root {
        Value::Object(class, _) if class.ends_with(".Corpus") => root
            .get("vocab")
            .ok_or_else(|| anyhow!("the corpus has no vocab"))?,
        Value::Object(class, _) if class.ends_with(".Vocab") => root,
        Value::Object(class, _) => bail!("the pickle holds a {class}"),
        _ => bail!("the pickle holds no object"),
    };
    let Some(Value::List(symbols)) = vocab.get("idx2sym") else {
        bail!("its vocab has no idx2sym list");
    };
    let symbols = symbols
        .iter()
        .enumerate()
        .map(|(id, s)| match s {
            Value::Str(s) => Ok(s.clone()),
            Value::Bytes(b) => {
                String::from_utf8(b.clone()).map_err(|_| anyhow!("idx2sym[{id}] is not UTF-8"))
            }
            _ => Err(anyhow!("idx2sym[{id}] is not a string")),
        })
        .collect::<Result<Vec<_>>>()?;
    let lower_case = matches!(vocab.get("lower_case"), Some(Value::Bool(true)));
    Vocabulary::new(symbols, lower_case)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_info_drops_the_ends_the_tensorflow_code_adds() {
        let p = Path::new("corpus-info.json");
        let info = CorpusInfo::parse(
            r#"{"vocab_size": 267735, "cutoffs": [0, 20000, 40000, 200000, 267735], "dataset": "wt103"}"#,
            p,
        )
        .unwrap();
        assert_eq!(info.cutoffs, [20000, 40000, 200000]);
        assert_eq!(info.dataset.as_deref(), Some("wt103"));
        let info =
            CorpusInfo::parse(r#"{"vocab_size": 204, "cutoffs": [], "dataset": "enwik8"}"#, p).unwrap();
        assert!(info.cutoffs.is_empty());
        assert!(CorpusInfo::parse(r#"{"vocab_size": 10, "cutoffs": [0, 5, 9]}"#, p).is_err());
        assert!(CorpusInfo::parse(r#"{"cutoffs": []}"#, p).is_err());
        assert!(CorpusInfo::parse("[", p).is_err());
    }

    /// `cache.pkl` as Python 2 writes it (protocol 2): `str` as SHORT_BINSTRING / BINSTRING,
    /// and a NumPy array whose raw bytes are not UTF-8.
    #[test]
    fn reads_a_python2_corpus_pickle_with_a_numpy_array() {
        let mut p: Vec<u8> = b"\x80\x02cdata_utils\nCorpus\n)\x81}(".to_vec();
        let short = |p: &mut Vec<u8>, s: &str| {
            p.push(b'U');
            p.push(s.len() as u8);
            p.extend_from_slice(s.as_bytes());
        };
        short(&mut p, "vocab");
        p.extend_from_slice(b"cvocabulary\nVocab\n)\x81}(");
        short(&mut p, "idx2sym");
        p.extend_from_slice(b"](");
        for symbol in ["32", "101", "<eos>"] {
            short(&mut p, symbol);
        }
        p.extend_from_slice(b"eu"); // APPENDS, SETITEMS
        p.push(b'b'); // BUILD the Vocab
        short(&mut p, "train");
        p.extend_from_slice(b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85");
        short(&mut p, "b");
        p.extend_from_slice(b"\x87R(K\x01K\x02\x85cnumpy\ndtype\n");
        short(&mut p, "i8");
        p.extend_from_slice(b"\x85R\x89T\x10\x00\x00\x00");
        p.extend_from_slice(&[0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(b"tbu"); // the array's state, BUILD it, SETITEMS
        p.extend_from_slice(b"b."); // BUILD the Corpus, STOP
        let root = unpickle::read(&mut p.as_slice(), p.len()).unwrap();
        let vocabulary = vocabulary_of(&root).unwrap();
        assert_eq!(vocabulary.symbols(), ["32", "101", "<eos>"]);
        // A class outside the allow-list stops the read at its name.
        let hostile = b"\x80\x02cos\nsystem\nU\x02ls\x85R.";
        let error = unpickle::read(&mut hostile.as_slice(), hostile.len()).unwrap_err();
        assert!(error.to_string().contains("os.system"), "{error}");
    }

    #[test]
    fn the_state_file_names_the_checkpoint() {
        let text = "model_checkpoint_path: \"model.ckpt-0\"\nall_model_checkpoint_paths: \"model.ckpt-0\"\n";
        assert_eq!(model_checkpoint_path(text).as_deref(), Some("model.ckpt-0"));
        assert_eq!(model_checkpoint_path("nothing"), None);
    }

    #[test]
    fn dataset_defaults_are_the_papers_evaluation_settings() {
        assert_eq!(
            EvalSettings::for_dataset(Some("enwik8")),
            EvalSettings {
                tgt_len: 128,
                mem_len: 3800,
                clamp_len: 1000,
                same_length: true
            }
        );
        assert_eq!(EvalSettings::for_dataset(Some("wt103")).mem_len, 1600);
        assert_eq!(EvalSettings::for_dataset(Some("lm1b")).tgt_len, 32);
        assert!(!EvalSettings::for_dataset(None).same_length);
    }
}

//! Checkpoint readers: a Hugging Face TransfoXL checkpoint (`config.json` plus
//! `model.safetensors` or `pytorch_model.bin`), or one of the original training code (its
//! `model.pt` or a `state_dict`, no `config.json`), to the canonical tensors of a model image.
//! [`load_checkpoint`] tells them apart; [`load_original_checkpoint`] documents the second.
//!
//! ```no_run
//! use std::path::Path;
//! use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
//!
//! let checkpoint = load_hf_checkpoint(Path::new("transfo-xl-wt103"), CheckpointFormat::Auto, true)?;
//! std::fs::write("wt103.txl", checkpoint.to_image()?)?;
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! # Keys and tied tensors
//!
//! A tensor's key is `transformer.` + its canonical name ([`TensorName`]'s `Display`), except
//! the output layer's `crit.*`, which sit at the top. The original code's state_dict (no
//! `transformer.` prefix) is recognised too, as is a further prefix around both (`module.`);
//! its adaptive softmax's cluster rows are then reversed (see [`LoadReport::cluster_rows_reversed`]).
//! The image stores each tied group once, and the files differ in which copies they keep:
//! `save_pretrained(safe_serialization=True)` drops the tied copies (output weights tied to
//! the embedding, output projections tied by `tie_projs`, and with `untie_r = false` one of
//! the shared `r_w_bias` / `r_r_bias` and its per-layer aliases), while `torch.save` keeps
//! them all. So each canonical tensor is read from the first copy present (its own key, then
//! its tied copies; for a shared bias, `transformer.r_w_bias`, then any
//! `transformer.layers.{l}.dec_attn.r_w_bias`), and every other copy present must equal it
//! bit for bit: a difference is an error, since the config then does not describe the weights.
//!
//! A missing tensor is an error naming the key expected and the file; a shape that differs
//! from what `config.json` implies is an error naming the key and both shapes. Keys the model
//! does not use (`transformer.pos_emb.inv_freq`, a buffer the model computes) are listed in
//! [`LoadReport::ignored_keys`], except keys that look like a part of the model but have no
//! place in it (a `layers.{n_layer}.*`, say): those mean config and weights disagree, and are
//! an error rather than weights silently dropped.
//!
//! # Modules
//!
//! - `hf_config`: `config.json` to [`Config`] ([`parse_hf_config`] documents the fields).
//! - `resolve`: which key holds each canonical tensor, tied copies, layouts, checks.
//! - `safetensors_source` / `torch_source`: the two containers. Neither runs code from the
//!   file: safetensors is a JSON header and raw bytes, and the pickle inside a PyTorch file is
//!   interpreted as data by `pytorch-reader`, which knows only the globals `torch.save` writes.
//! - `original`: the original training code's checkpoints: hyper-parameters from the pickled
//!   module's attributes (or a state_dict's shapes and the caller's options), the adaptive
//!   softmax's cluster order.
//! - `pickle_tree`: a pickle walked as a tree of data, with an allow-list of the classes it
//!   may name (the module's classes and attributes, which `pytorch-reader` does not keep).
//! - `legacy_module_source`: the tensors of a module saved in the pre-1.6 stream format.
//! - [`tf`]: the original TensorFlow code's checkpoints (tensor bundles), read without
//!   TensorFlow; [`load_checkpoint`] takes one given as its prefix, `.index` or directory.
//!
//! Every element type the files use for weights (f32, f16, bf16, f64) is converted to f32.

mod hf_config;
mod legacy_module_source;
mod original;
mod pickle_tree;
mod resolve;
mod safetensors_source;
mod source;
pub mod tf;
mod torch_source;
pub mod torch_writer;

#[cfg(test)]
mod tests;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use txl_core::image::{write_image, Payload};
use txl_core::tensors::TensorName;
use txl_core::Config;

pub use hf_config::parse_hf_config;
pub use original::{
    allowed_global, load_original_checkpoint, OriginalKind, OriginalOptions, DEFAULT_CLAMP_LEN,
    DEFAULT_LAYER_NORM_EPS, DEFAULT_MEM_LEN, DEFAULT_TGT_LEN,
};

pub use tf::{load_tf_checkpoint, TfOptions, TfReport};

use safetensors_source::SafetensorsSource;
use source::TensorSource;
use torch_source::TorchSource;

/// File name of the weights `save_pretrained` writes with `safe_serialization=True`.
pub const SAFETENSORS_FILE: &str = "model.safetensors";
/// File name of the weights `save_pretrained` writes with `safe_serialization=False`.
pub const PYTORCH_BIN_FILE: &str = "pytorch_model.bin";
/// File name of the hyper-parameters.
pub const CONFIG_FILE: &str = "config.json";
/// File name the original training code's `train.py` saves the whole model under.
pub const ORIGINAL_MODEL_FILE: &str = "model.pt";

/// Which weights file to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum CheckpointFormat {
    /// `model.safetensors` when the directory has it, else `pytorch_model.bin`; a file given
    /// directly is recognised by its first bytes.
    #[default]
    Auto,
    /// `model.safetensors`.
    Safetensors,
    /// `pytorch_model.bin` (what `torch.save` writes).
    #[cfg_attr(feature = "cli", value(alias = "bin", alias = "pytorch"))]
    PytorchBin,
}

/// A checkpoint read into memory: the config and its canonical tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// The validated hyper-parameters.
    pub config: Config,
    /// Every tensor the image stores, in canonical order
    /// ([`txl_core::tensors::for_each_tensor`]), as row-major f32.
    pub tensors: Vec<(TensorName, Vec<f32>)>,
}

impl Checkpoint {
    /// Builds the model image (f32 weights).
    pub fn to_image(&self) -> Result<Vec<u8>> {
        let payloads: Vec<(TensorName, Payload<'_>)> = self
            .tensors
            .iter()
            .map(|(name, data)| (*name, Payload::F32(data)))
            .collect();
        write_image(&self.config, &payloads).context("cannot build the model image")
    }

    /// The elements of tensor `name`, if the checkpoint stores it.
    pub fn tensor(&self, name: TensorName) -> Option<&[f32]> {
        self.tensors
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, data)| data.as_slice())
    }
}

/// What [`load_hf_checkpoint_with_report`] found besides the tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReport {
    /// The `config.json` read.
    pub config_path: PathBuf,
    /// The weights file read.
    pub weights_path: PathBuf,
    /// Its format ([`CheckpointFormat::Safetensors`] or [`CheckpointFormat::PytorchBin`]).
    pub format: CheckpointFormat,
    /// Prefix of the non-output tensors' keys: `transformer.` for Hugging Face, empty for the
    /// original code's state_dict.
    pub key_prefix: String,
    /// Keys in the file the model does not use (e.g. `transformer.pos_emb.inv_freq`, which
    /// is computed, not stored), sorted.
    pub ignored_keys: Vec<String>,
    /// Tied copies present in the file (output weights, output projections, per-layer
    /// aliases of shared biases) that were checked equal to the tensor they copy.
    pub tied_copies_checked: Vec<String>,
    /// Element types of the tensors read (`f32`, `f16`, `bf16`, `f64`), sorted.
    pub source_dtypes: Vec<String>,
    /// Whether the adaptive softmax's cluster rows were reversed: the keys have the original
    /// PyTorch code's layout (no `transformer.` prefix), whose head scores tail cluster `i`
    /// with column `-i` where txl uses `cutoffs[0] + i - 1`.
    pub cluster_rows_reversed: bool,
}

/// Reads a Hugging Face TransfoXL checkpoint.
///
/// `src` is a directory holding `config.json` and `model.safetensors` or
/// `pytorch_model.bin` (safetensors preferred when both exist, unless `format` says
/// otherwise), or the weights file itself with `config.json` next to it. With
/// `show_progress`, a progress bar over the bytes read is drawn to stderr when it is a
/// terminal.
pub fn load_hf_checkpoint(src: &Path, format: CheckpointFormat, show_progress: bool) -> Result<Checkpoint> {
    load_hf_checkpoint_with_report(src, format, show_progress).map(|(checkpoint, _)| checkpoint)
}

/// [`load_hf_checkpoint`], also returning what was found besides the tensors (ignored keys,
/// tied copies checked, element types), for a verbose listing.
pub fn load_hf_checkpoint_with_report(
    src: &Path,
    format: CheckpointFormat,
    show_progress: bool,
) -> Result<(Checkpoint, LoadReport)> {
    let (config_path, weights_path, format) = locate(src, format)?;
    let json = std::fs::read_to_string(&config_path)
        .with_context(|| format!("cannot read {}", config_path.display()))?;
    let config = parse_hf_config(&json).with_context(|| format!("in {}", config_path.display()))?;
    let mut source: Box<dyn TensorSource> = match format {
        CheckpointFormat::Safetensors => Box::new(SafetensorsSource::open(&weights_path)?),
        _ => Box::new(TorchSource::open(&weights_path)?),
    };
    let mut resolved = resolve::resolve(&config, source.as_mut(), show_progress, CONFIG_FILE)?;
    // Only the original PyTorch code writes keys without `transformer.` (a Hugging Face
    // TransfoXLLMHeadModel always has it), and its head orders the clusters the other way.
    let original_layout = !resolved.prefix.ends_with("transformer.");
    if original_layout {
        original::reverse_cluster_rows(&config, &mut resolved.tensors);
    }
    let report = LoadReport {
        config_path,
        weights_path,
        format,
        key_prefix: resolved.prefix,
        ignored_keys: resolved.ignored_keys,
        tied_copies_checked: resolved.tied_copies_checked,
        source_dtypes: resolved.source_dtypes,
        cluster_rows_reversed: original_layout && config.n_clusters() > 1,
    };
    Ok((
        Checkpoint {
            config,
            tensors: resolved.tensors,
        },
        report,
    ))
}

/// Reads any checkpoint `txl convert` accepts: a Hugging Face one ([`load_hf_checkpoint`]),
/// or one of the original training code ([`load_original_checkpoint`]), told apart by the
/// file itself.
///
/// An original checkpoint is a PyTorch file (`src`, or `model.pt` in the directory `src`
/// when it has no `config.json`) that holds a pickled `mem_transformer.MemTransformerLM`
/// (read whatever lies next to it), or a `state_dict` under the original names (perhaps all
/// under `module.`, as a model wrapped in `DataParallel` saves them) with no `config.json`
/// next to it. `original` supplies what such a file does not say; given for a
/// Hugging Face checkpoint, it is an error rather than ignored. Returns the checkpoint, and
/// which kind of original checkpoint it was (`None` for a Hugging Face one).
pub fn load_checkpoint(
    src: &Path,
    format: CheckpointFormat,
    original: &OriginalOptions,
    show_progress: bool,
) -> Result<(Checkpoint, Option<OriginalKind>)> {
    if let Some((path, kind)) = original_file(src, format)? {
        return load_original_checkpoint(&path, kind, original, show_progress).map(|c| (c, Some(kind)));
    }
    if let Some(flag) = original.given() {
        bail!(
            "{flag} applies to checkpoints of the original training code, which have no {CONFIG_FILE}; \
             {} is read with its {CONFIG_FILE}",
            src.display()
        );
    }
    load_hf_checkpoint(src, format, show_progress).map(|c| (c, None))
}

/// The original-code checkpoint at `src`, if it is one (see [`load_checkpoint`]).
fn original_file(src: &Path, format: CheckpointFormat) -> Result<Option<(PathBuf, OriginalKind)>> {
    if format == CheckpointFormat::Safetensors {
        return Ok(None);
    }
    let (file, has_config) = if src.is_dir() {
        let model = src.join(ORIGINAL_MODEL_FILE);
        if src.join(CONFIG_FILE).is_file() || !model.is_file() {
            return Ok(None);
        }
        (model, false)
    } else if src.is_file() {
        let dir = src
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (src.to_path_buf(), dir.join(CONFIG_FILE).is_file())
    } else {
        return Ok(None);
    };
    if has_config {
        // Beside a config.json only a pickled MemTransformerLM is read as the original's: a
        // state_dict is read with the config, and a file this reader refuses is left to
        // the Hugging Face reader.
        return Ok(match original::detect(&file) {
            Ok(Some(OriginalKind::WholeModule)) => Some((file, OriginalKind::WholeModule)),
            _ => None,
        });
    }
    Ok(original::detect(&file)?.map(|kind| (file, kind)))
}

/// Finds `config.json` and the weights file, and settles the format.
fn locate(src: &Path, format: CheckpointFormat) -> Result<(PathBuf, PathBuf, CheckpointFormat)> {
    if src.is_dir() {
        let config = src.join(CONFIG_FILE);
        if !config.is_file() {
            bail!("{} has no {CONFIG_FILE}", src.display());
        }
        let safetensors = src.join(SAFETENSORS_FILE);
        let bin = src.join(PYTORCH_BIN_FILE);
        let (weights, format) = match format {
            CheckpointFormat::Safetensors => (safetensors, CheckpointFormat::Safetensors),
            CheckpointFormat::PytorchBin => (bin, CheckpointFormat::PytorchBin),
            CheckpointFormat::Auto if safetensors.is_file() => (safetensors, CheckpointFormat::Safetensors),
            CheckpointFormat::Auto if bin.is_file() => (bin, CheckpointFormat::PytorchBin),
            CheckpointFormat::Auto => {
                let sharded = ["model.safetensors.index.json", "pytorch_model.bin.index.json"]
                    .iter()
                    .any(|index| src.join(index).is_file());
                if sharded {
                    bail!(
                        "{} holds a sharded checkpoint (*.index.json); only single-file checkpoints are supported",
                        src.display()
                    );
                }
                bail!(
                    "{} has neither {SAFETENSORS_FILE} nor {PYTORCH_BIN_FILE}",
                    src.display()
                );
            }
        };
        if !weights.is_file() {
            bail!("{} does not exist", weights.display());
        }
        Ok((config, weights, format))
    } else if src.is_file() {
        let dir = src
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let config = dir.join(CONFIG_FILE);
        if !config.is_file() {
            bail!(
                "no {CONFIG_FILE} next to {} (looked for {})",
                src.display(),
                config.display()
            );
        }
        let format = match format {
            CheckpointFormat::Auto => sniff_format(src)?,
            explicit => explicit,
        };
        Ok((config, src.to_path_buf(), format))
    } else {
        bail!("{} does not exist", src.display())
    }
}

/// Tells a safetensors file from a PyTorch one by its first bytes.
fn sniff_format(path: &Path) -> Result<CheckpointFormat> {
    let mut head = Vec::with_capacity(9);
    File::open(path)
        .and_then(|file| file.take(9).read_to_end(&mut head))
        .with_context(|| format!("cannot read {}", path.display()))?;
    // torch.save: a ZIP archive (PyTorch >= 1.6) or a pickle stream (protocol 2 starts 0x80).
    if head.starts_with(b"PK\x03\x04") || head.first() == Some(&0x80) {
        return Ok(CheckpointFormat::PytorchBin);
    }
    // safetensors: an 8-byte little-endian header length, then the JSON header.
    if head.len() == 9 && head[8] == b'{' {
        return Ok(CheckpointFormat::Safetensors);
    }
    bail!(
        "cannot tell the format of {} from its contents; name it with --format safetensors or --format pytorch-bin",
        path.display()
    )
}

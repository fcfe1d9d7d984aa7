//! `txl convert`: a Hugging Face TransfoXL checkpoint, or one of the original training code
//! (PyTorch or TensorFlow), to a txl model image.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use txl_core::AlignedBytes;

use super::args::{DtypeArg, QuantizeArgs};
use super::quantize::quantize_image;
use crate::checkpoint::tf::{self, EvalSettings, TfOptions};
use crate::checkpoint::{
    load_checkpoint, Checkpoint, CheckpointFormat, OriginalKind, OriginalOptions, DEFAULT_LAYER_NORM_EPS,
    DEFAULT_MEM_LEN, DEFAULT_TGT_LEN,
};
use crate::image_file::{parse_model, write_file};
use crate::vocab::Vocabulary;

pub const EXAMPLES: &str = "Examples:\n  \
    txl convert path/to/hf-checkpoint -o model.txl\n  \
    txl convert path/to/hf-checkpoint -o model.txl --format pytorch-bin\n  \
    txl convert path/to/hf-checkpoint -o model-f16.txl --dtype f16\n  \
    txl convert path/to/hf-checkpoint -o model-integer.txl --dtype int8 --integer --calib-bytes train.txt\n  \
    txl convert work_dir/model.pt -o model.txl\n  \
    txl convert state_dict.pt -o model.txl --pre-lnorm --tgt-len 128 --mem-len 1600 --clamp-len 1000\n  \
    txl convert tests/fixtures/original/no_mem/state_dict.pt -o no_mem.txl --cutoffs 20 --tgt-len 6\n  \
    txl convert path/to/hf-checkpoint -o words.txl --vocab vocab.pkl\n  \
    txl convert pretrained_xl/tf_enwik8 -o enwik8.txl\n  \
    txl convert pretrained_xl/tf_wt103/model/model.ckpt-0 -o wt103.txl --mem-len 640\n  \
    txl convert tests/fixtures/tf/enwik8_div1 -o tiny.txl --tgt-len 8 --mem-len 16 --same-length=false";

/// Arguments of `txl convert`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Checkpoint directory (config.json and weights), weights file, or a checkpoint of the
    /// original training code: its model.pt or a state_dict (PyTorch), or a TensorFlow
    /// checkpoint (its prefix, DIR/model.ckpt-0, its .index, or the directory holding its
    /// `checkpoint` file).
    pub src: PathBuf,
    /// Output image path.
    #[arg(short, long, value_name = "OUT.txl")]
    pub out: PathBuf,
    /// Which weights file to read when the directory has both.
    #[arg(long, value_enum, default_value_t = CheckpointFormat::Auto)]
    pub format: CheckpointFormat,
    /// Weight precision of the image (f16, int8 and int4 as `txl quantize` makes them).
    #[arg(long, value_enum, default_value_t = DtypeArg::F32)]
    pub dtype: DtypeArg,
    /// The vocabulary: vocab.pkl (Hugging Face), the original code's cache.pt or cache.pkl, or
    /// a file of one symbol per line [default: vocab.pkl, vocab.txt or cache.pt beside the
    /// checkpoint; for a TensorFlow one, cache.pkl beside it or in ../data/].
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,
    #[command(flatten)]
    pub quantize: QuantizeArgs,
    #[command(flatten)]
    pub original: OriginalArgs,
}

/// What a checkpoint of the original training code (kimiyoung/transformer-xl) may not say
/// for itself. A whole-module `model.pt` (`torch.save(model)`) carries its hyper-parameters;
/// a `state_dict` carries only sizes, so the rest comes from these flags, named and defaulted
/// as the original `train.py`'s (the underscore spellings are accepted). A TensorFlow
/// checkpoint's sizes come from its shapes and corpus-info.json; these flags default to the
/// paper's evaluation settings for the dataset corpus-info.json names (enwik8, text8:
/// tgt_len 128, mem_len 3800, clamp_len 1000, same_length; wt103: 128, 1600, 1000,
/// same_length; lm1b: 32, 128, none, same_length; any other: 70, 70, none, off) and a
/// LayerNorm epsilon of 1e-12 (tf.contrib.layers.layer_norm's).
#[derive(clap::Args, Debug, Default)]
#[command(
    next_help_heading = "Original training checkpoints (model.pt, state_dict, TensorFlow; no config.json)"
)]
pub struct OriginalArgs {
    /// Segment length [default: the model.pt's tgt_len; for a state_dict, train.py's 70; for
    /// TensorFlow, the dataset's].
    #[arg(long, alias = "tgt_len", value_name = "N")]
    pub tgt_len: Option<u32>,
    /// Remembered positions [default: the model.pt's mem_len; for a state_dict, train.py's 0;
    /// for TensorFlow, the dataset's].
    #[arg(long, alias = "mem_len", value_name = "N")]
    pub mem_len: Option<u32>,
    /// Largest relative distance, <= 0 for none [default: the model.pt's; for a state_dict,
    /// -1; for TensorFlow, the dataset's].
    #[arg(long, alias = "clamp_len", value_name = "N", allow_negative_numbers = true)]
    pub clamp_len: Option<i64>,
    /// Every query sees the same number of keys; `--same-length=false` turns off a TensorFlow
    /// dataset's default (`txl score --same-length false` does so for any image) [default: the
    /// model.pt's; for a state_dict, off; for TensorFlow, the dataset's].
    #[arg(long, alias = "same_length", value_name = "true|false", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub same_length: Option<bool>,
    /// LayerNorm before each sub-layer (train.py --pre_lnorm): a state_dict's shapes do not
    /// show it; a model.pt must agree. The TensorFlow code has only post-LayerNorm.
    #[arg(long, alias = "pre_lnorm")]
    pub pre_lnorm: bool,
    /// LayerNorm epsilon of a state_dict [default: 1e-5, torch's; for TensorFlow, 1e-12];
    /// a model.pt must agree.
    #[arg(long, value_name = "EPS")]
    pub layer_norm_eps: Option<f64>,
    /// Adaptive softmax cutoffs, comma separated, as train.py sets them per dataset
    /// (WikiText-103: 20000,40000,200000); needed by a state_dict with div_val 1 and tail
    /// clusters, whose shapes do not hold them; checked against a TensorFlow checkpoint's.
    #[arg(long, value_name = "C1,C2,...", value_delimiter = ',')]
    pub cutoffs: Option<Vec<u32>>,
}

impl OriginalArgs {
    /// The options of [`crate::checkpoint::load_checkpoint`].
    pub fn options(&self) -> OriginalOptions {
        OriginalOptions {
            tgt_len: self.tgt_len,
            mem_len: self.mem_len,
            clamp_len: self.clamp_len,
            same_length: self.same_length.unwrap_or(false),
            pre_lnorm: self.pre_lnorm,
            layer_norm_eps: self.layer_norm_eps,
            cutoffs: self.cutoffs.clone(),
        }
    }

    /// The options of [`crate::checkpoint::load_tf_checkpoint`].
    pub fn tf_options(&self) -> TfOptions {
        TfOptions {
            tgt_len: self.tgt_len,
            mem_len: self.mem_len,
            clamp_len: self.clamp_len,
            same_length: self.same_length,
            pre_lnorm: self.pre_lnorm,
            layer_norm_eps: self.layer_norm_eps,
            cutoffs: self.cutoffs.clone(),
        }
    }
}

// The defaults `--help` names are the checkpoint module's.
const _: () = assert!(DEFAULT_TGT_LEN == 70 && DEFAULT_MEM_LEN == 0);
const _: () = assert!(DEFAULT_LAYER_NORM_EPS == 1e-5);

impl Args {
    /// Converts; prints nothing on `out` (a note on stderr says what was written).
    pub fn run(self, _out: &mut dyn Write) -> Result<()> {
        if self.quantize.integer && matches!(self.dtype, DtypeArg::F32 | DtypeArg::F16) {
            bail!("--integer needs int8 or int4 weights: add --dtype int8 or --dtype int4");
        }
        if let Some(flag) = self.quantize.given().filter(|_| self.dtype == DtypeArg::F32) {
            bail!("{flag} applies to quantization: add --dtype f16, int8, int4 or int4-all");
        }
        let quantize = (self.dtype != DtypeArg::F32).then_some((self.dtype, &self.quantize));
        if let Some(prefix) = tf::checkpoint_prefix(&self.src)? {
            if self.format != CheckpointFormat::Auto {
                bail!(
                    "--format applies to PyTorch and safetensors files; {} is a TensorFlow checkpoint",
                    self.src.display()
                );
            }
            return convert_tf(
                &prefix,
                &self.out,
                &self.original.tf_options(),
                self.vocab.as_deref(),
                quantize,
            )
            .map(|_| ());
        }
        convert_with(
            &self.src,
            &self.out,
            self.format,
            (&self.original.options(), self.vocab.as_deref()),
            quantize,
        )
        .map(|_| ())
    }
}

/// Converts the checkpoint at `src` to an image at `out`, quantized to the given precision if
/// one is given; returns the image's size in bytes.
pub fn convert(
    src: &Path,
    out: &Path,
    format: CheckpointFormat,
    quantize: Option<(DtypeArg, &QuantizeArgs)>,
) -> Result<usize> {
    convert_with(src, out, format, (&OriginalOptions::default(), None), quantize)
}

/// [`convert`], with what an original training checkpoint may need (see [`OriginalArgs`]) and
/// the vocabulary file (`--vocab`; without it, the one
/// [`find_vocabulary`](crate::vocab::find_vocabulary) finds beside the checkpoint).
pub fn convert_with(
    src: &Path,
    out: &Path,
    format: CheckpointFormat,
    (original, vocab): (&OriginalOptions, Option<&Path>),
    quantize: Option<(DtypeArg, &QuantizeArgs)>,
) -> Result<usize> {
    let (checkpoint, kind) = load_checkpoint(src, format, original, std::io::stderr().is_terminal())?;
    if let Some(kind) = kind {
        let c = &checkpoint.config;
        let (what, settings) = match kind {
            OriginalKind::WholeModule => (
                "torch.save(model) of the original training code",
                "saved or given",
            ),
            OriginalKind::StateDict => (
                "state_dict of the original training code",
                "given or train.py's defaults",
            ),
        };
        eprintln!(
            "read {} as a {what}; {settings}: tgt_len {}, mem_len {}, clamp_len {}, same_length {}, \
             pre_lnorm {}, layer_norm_eps {:e}",
            src.display(),
            c.tgt_len,
            c.mem_len,
            c.clamp_len,
            c.same_length,
            c.pre_lnorm,
            c.layer_norm_epsilon
        );
    }
    let vocabulary = crate::vocab::find_vocabulary(src, vocab)?;
    finish(&checkpoint, vocabulary, out, quantize)
}

/// Converts the TensorFlow checkpoint at `prefix` (`DIR/model.ckpt-0`) to an image at `out`
/// (see [`crate::checkpoint::tf`]), with the vocabulary of `vocab` or of the `cache.pkl`
/// found beside it; returns the image's size in bytes.
pub fn convert_tf(
    prefix: &Path,
    out: &Path,
    options: &TfOptions,
    vocab: Option<&Path>,
    quantize: Option<(DtypeArg, &QuantizeArgs)>,
) -> Result<usize> {
    let (checkpoint, report) = tf::load_tf_checkpoint(prefix, options, std::io::stderr().is_terminal())?;
    // The vocabulary first: the note below is for a conversion that goes through.
    let vocabulary = match vocab {
        Some(path) => Some(match tf::read_cache_pkl(path) {
            Ok(v) => v,
            Err(_) => crate::vocab::read_vocabulary(path)?,
        }),
        None => tf::find_beside(prefix, tf::CACHE_PKL_FILE)
            .map(|p| tf::read_cache_pkl(&p))
            .transpose()?,
    };
    let c = &checkpoint.config;
    if let Some(v) = vocabulary.as_ref().filter(|v| v.len() != c.n_token as usize) {
        bail!(
            "the vocabulary has {} symbols but the model has {} tokens (n_token): it belongs to another model",
            v.len(),
            c.n_token
        );
    }
    let dataset = report.corpus_info.as_ref().and_then(|i| i.dataset.clone());
    let defaults = EvalSettings::for_dataset(dataset.as_deref());
    let from = match &report.defaults_for {
        Some(d) => format!("the paper's {d} evaluation"),
        None => "train_gpu.py's defaults".to_string(),
    };
    eprintln!(
        "read {} as a TensorFlow checkpoint of the original code ({} tensors skipped: optimizer slots, step counters); \
         tgt_len {}, mem_len {}, clamp_len {}, same_length {} (given, else {from}: {}, {}, {}, {}), pre_lnorm {}, layer_norm_eps {:e}",
        prefix.display(),
        report.skipped.len(),
        c.tgt_len,
        c.mem_len,
        c.clamp_len,
        c.same_length,
        defaults.tgt_len,
        defaults.mem_len,
        defaults.clamp_len,
        defaults.same_length,
        c.pre_lnorm,
        c.layer_norm_epsilon
    );
    finish(&checkpoint, vocabulary, out, quantize)
}

/// The image of `checkpoint` with `vocabulary`, checked, quantized if asked, written to `out`.
fn finish(
    checkpoint: &Checkpoint,
    vocabulary: Option<Vocabulary>,
    out: &Path,
    quantize: Option<(DtypeArg, &QuantizeArgs)>,
) -> Result<usize> {
    let mut image = checkpoint.to_image()?;
    if let Some(vocabulary) = vocabulary {
        image = vocabulary.attach(&image)?;
    }
    let aligned = AlignedBytes::copy_from(&image)?;
    // Check what we wrote reads back before anyone flashes it.
    let model = parse_model(&aligned, out)?;
    if let Some((dtype, args)) = quantize {
        image = quantize_image(&model, dtype, args)?;
    }
    write_file(out, &image)?;
    eprintln!(
        "wrote {} ({} bytes, {} tensors)",
        out.display(),
        image.len(),
        checkpoint.tensors.len()
    );
    Ok(image.len())
}

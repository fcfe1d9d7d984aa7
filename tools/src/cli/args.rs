//! The argument groups several subcommands share: session options, where the tokens come from,
//! which forward pass runs, and the quantizer's settings.
//!
//! The session's option words (`empty|zeros`, `f32|f16|int8`, `session|segment|folded`) are the
//! core's ([`OptionWord`]): clap offers their words with their help and parses through their
//! `FromStr`, so each word is spelt in one place.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::ValueEnum;
use txl_core::image::Arithmetic;
use txl_core::{Error, MemDtype, MemInit, Model, OptionWord, PositionKeys, SessionOptions};
use txl_host_gpu::quantize::int4::DEFAULT_GROUP;
use txl_host_gpu::quantize::{Method, Smoothing, VectorDtype};
use txl_host_gpu::Backend;

use crate::tokens;

/// Parses one of `T`'s words with the core's `FromStr`; `--help` lists the words with their help.
fn words<T: OptionWord>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(
        T::ALL
            .iter()
            .map(|&value| PossibleValue::new(value.word()).help(value.help())),
    )
    .try_map(|word| word.parse::<T>())
}

/// Session settings; each defaults to the model's config.
#[derive(clap::Args, Debug)]
pub struct SessionArgs {
    /// Segment length [default: the model's tgt_len].
    #[arg(long)]
    pub tgt_len: Option<u32>,
    /// Remembered positions [default: the model's mem_len].
    #[arg(long)]
    pub mem_len: Option<u32>,
    /// Largest relative distance, 0 for none [default: the model's clamp_len].
    #[arg(long)]
    pub clamp_len: Option<u32>,
    /// Every query sees the same number of keys [default: the model's same_length].
    #[arg(long, value_name = "true|false")]
    pub same_length: Option<bool>,
    /// How the memory starts.
    #[arg(long, value_parser = words::<MemInit>(), default_value_t = MemInit::Empty)]
    pub mem_init: MemInit,
    /// How the cached keys and values are stored (the core only) [default: f32; int8 for an
    /// integer image, which takes no other].
    #[arg(long, value_parser = words::<MemDtype>())]
    pub mem_dtype: Option<MemDtype>,
    /// Keep the position keys for the session, recompute them per segment (less RAM, same
    /// bits), or fold W_r into the queries (no key tables, least RAM, other bits; not for an
    /// integer image); the core only [default: session].
    #[arg(long, value_parser = words::<PositionKeys>())]
    pub position_keys: Option<PositionKeys>,
}

impl SessionArgs {
    /// The options for `model`: its config's, with what was given on the command line, and for
    /// an integer image the memory and position keys its arithmetic takes (an error when the
    /// command line asks for others).
    pub fn options(&self, model: &Model<'_>) -> Result<SessionOptions> {
        self.options_for(model, model.image().arithmetic())
    }

    /// [`SessionArgs::options`] with `model`'s config for a model computing in `arithmetic`
    /// (`txl compare`: the reference's config, the candidate's arithmetic).
    pub fn options_for(&self, model: &Model<'_>, arithmetic: Arithmetic) -> Result<SessionOptions> {
        let config = SessionOptions::from_config(model.config());
        let integer = matches!(arithmetic, Arithmetic::Integer { .. });
        let mem_dtype = match self.mem_dtype {
            Some(dtype @ (MemDtype::F32 | MemDtype::F16)) if integer => bail!(
                "{}: --mem-dtype {dtype} is for float images; drop it (int8 is the default for an \
                 integer image)",
                Error::IntegerOptions
            ),
            Some(dtype) => dtype,
            None if integer => MemDtype::Int8,
            None => MemDtype::F32,
        };
        let position_keys = match self.position_keys {
            Some(PositionKeys::FoldedIntoQuery) if integer => bail!(
                "{}: --position-keys folded is for float images; give --position-keys session or \
                 segment",
                Error::IntegerOptions
            ),
            Some(keys) => keys,
            None => PositionKeys::PerSession,
        };
        Ok(SessionOptions {
            tgt_len: self.tgt_len.unwrap_or(config.tgt_len),
            mem_len: self.mem_len.unwrap_or(config.mem_len),
            clamp_len: self.clamp_len.unwrap_or(config.clamp_len),
            same_length: self.same_length.unwrap_or(config.same_length),
            mem_init: self.mem_init,
            mem_dtype,
            position_keys,
        })
    }

    /// Refuses the options only the core has (`--mem-dtype`, `--position-keys`) when `engine`
    /// is the reference, which keeps its memory in its own precision and its keys per session.
    pub fn check_engine(&self, engine: Engine) -> Result<()> {
        if engine == Engine::Core {
            return Ok(());
        }
        if let Some(dtype) = self.mem_dtype.filter(|&d| d != MemDtype::F32) {
            bail!(
                "--mem-dtype {dtype} applies to the core only, not to --backend {}",
                engine.word()
            );
        }
        if let Some(keys) = self.position_keys.filter(|&k| k != PositionKeys::PerSession) {
            bail!(
                "--position-keys {keys} applies to the core only, not to --backend {}",
                engine.word()
            );
        }
        Ok(())
    }
}

/// Where the tokens come from.
#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false)]
pub struct TokenSource {
    /// Whitespace-separated decimal token ids.
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// Raw text: every byte of the file is one token id (byte-level models). A character
    /// model of the original code (enwik8, text8: a vocabulary of byte values or single
    /// characters) maps each byte to its symbol's id as the original preparation did
    /// (enwik8: newline bytes dropped; text8: UTF-8 characters, a space as `_`).
    #[arg(long, value_name = "FILE")]
    pub bytes: Option<PathBuf>,
    /// Text, tokenized with the image's vocabulary as the original code's
    /// Vocab.encode_file(add_eos=True): words split at whitespace, <eos> at each line end
    /// (when the vocabulary has it), <unk> for unknown words, lower-cased when the vocabulary
    /// is. Without a vocabulary (byte-level models), the same as --bytes. A character model of
    /// the original code (enwik8, text8) reads here text written as its symbols (the prepared
    /// corpus); give raw text with --bytes.
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
}

impl TokenSource {
    /// Reads the tokens (`--text` with `model`'s vocabulary).
    pub fn read(&self, model: &Model<'_>) -> Result<Vec<u32>> {
        match (&self.tokens, &self.bytes, &self.text) {
            (Some(path), _, _) => tokens::read_token_ids(path),
            (_, Some(path), _) => tokens::read_raw_text(path, model),
            (_, _, Some(path)) => tokens::read_text_tokens(path, model),
            _ => bail!("give --tokens FILE, --bytes FILE or --text FILE"),
        }
    }
}

/// Which forward pass computes the scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// The txl-core engine (what runs on the device), in the image's precision.
    Core,
    /// The independent reference on the CPU in f64 (the golden oracle).
    Cpu,
    /// The independent reference on the CPU in f32.
    Cpu32,
    /// The independent reference on an NVIDIA GPU in f32 (CUDA).
    Cuda,
    /// cuda when a GPU is present, else cpu32.
    Auto,
}

/// Where the quantizer's calibration statistics (activation ranges, Gram matrices) are
/// collected: the full-precision reference on one of its backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CalibBackendArg {
    /// The reference on the CPU in f64.
    Cpu,
    /// The reference on the CPU in f32.
    Cpu32,
    /// The reference on an NVIDIA GPU in f32, the Gram matrices summed in f64 there (CUDA).
    Cuda,
    /// cuda when a GPU is present, else cpu32.
    Auto,
}

impl CalibBackendArg {
    /// The reference backend: `auto` looks for a GPU, and says on stderr when it found one.
    pub fn backend(self) -> Backend {
        let engine = match self {
            CalibBackendArg::Cpu => BackendArg::Cpu,
            CalibBackendArg::Cpu32 => BackendArg::Cpu32,
            CalibBackendArg::Cuda => BackendArg::Cuda,
            CalibBackendArg::Auto => BackendArg::Auto,
        }
        .engine();
        match engine {
            Engine::Reference(backend) => backend,
            Engine::Core => unreachable!("no calibration backend is the core"),
        }
    }
}

/// The forward pass a [`BackendArg`] chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The core.
    Core,
    /// The full-precision reference on this backend.
    Reference(Backend),
}

impl BackendArg {
    /// The engine: `auto` looks for a GPU, and says on stderr when it found one.
    pub fn engine(self) -> Engine {
        match self {
            BackendArg::Core => Engine::Core,
            BackendArg::Cpu => Engine::Reference(Backend::Cpu64),
            BackendArg::Cpu32 => Engine::Reference(Backend::Cpu32),
            BackendArg::Cuda => Engine::Reference(Backend::Cuda),
            BackendArg::Auto => match txl_host_gpu::cuda_available() {
                Ok(gpu) => {
                    eprintln!("using {} (CUDA)", gpu.name);
                    Engine::Reference(Backend::Cuda)
                }
                Err(_) => Engine::Reference(Backend::Cpu32),
            },
        }
    }
}

impl Engine {
    /// The `--backend` word for this engine (`auto` resolved).
    pub fn word(self) -> &'static str {
        match self {
            Engine::Core => "core",
            Engine::Reference(Backend::Cpu64) => "cpu",
            Engine::Reference(Backend::Cpu32) => "cpu32",
            Engine::Reference(Backend::Cuda) => "cuda",
        }
    }
}

/// Weight precision of an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// f32 weights (exact).
    F32,
    /// f16 weights.
    F16,
    /// int8 weights with per-row scales; activations quantized per token (W8A8).
    Int8,
    /// int4 decoder-layer weights (a scale per row, a multiplier per --group-size columns;
    /// W4A8), the embedding and output layers in int8.
    Int4,
    /// int4 for every weight matrix, the embedding and output layers too.
    Int4All,
}

/// `--calib-limit` when not given.
const CALIB_LIMIT: usize = 16384;

/// Quantizer settings shared by `convert --dtype` and `quantize`.
#[derive(clap::Args, Debug)]
pub struct QuantizeArgs {
    /// Calibration text, one token per byte (a character model of the original code: its
    /// characters, as --bytes reads them).
    #[arg(long, value_name = "FILE", conflicts_with = "calib_tokens")]
    pub calib_bytes: Option<PathBuf>,
    /// Calibration text as whitespace-separated token ids.
    #[arg(long, value_name = "FILE", conflicts_with = "calib_text")]
    pub calib_tokens: Option<PathBuf>,
    /// Calibration text, tokenized with the image's vocabulary as --text is (without one, the
    /// same as --calib-bytes).
    #[arg(long, value_name = "FILE", conflicts_with = "calib_bytes")]
    pub calib_text: Option<PathBuf>,
    /// Use at most this many calibration tokens (with --calib-bytes, --calib-tokens or
    /// --calib-text).
    #[arg(long, default_value_t = CALIB_LIMIT)]
    pub calib_limit: usize,
    /// Where the full-precision reference runs over the calibration text to collect the
    /// activation ranges (smoothing) and the inputs' Gram matrices (--method compensated or
    /// auto): cpu (f64), cpu32, cuda (an NVIDIA GPU; far faster on large models), or auto (cuda
    /// when a GPU is present, else cpu32). The backends agree closely but not to the bit, so
    /// images made on different ones may differ in a few weights.
    #[arg(long, value_enum, value_name = "BACKEND", default_value_t = CalibBackendArg::Auto)]
    pub calib_backend: CalibBackendArg,
    /// Activation smoothing: auto (try strengths, keep the best), off, or a strength in [0, 1].
    #[arg(long, value_name = "auto|off|ALPHA", value_parser = smoothing, default_value = "auto")]
    pub smooth: Smoothing,
    /// How int8 and int4 rows are rounded: round (to the nearest step), compensated (GPTQ:
    /// column by column, each rounding error pushed onto the columns not yet rounded, weighed by
    /// the calibration inputs; needs calibration text), or auto (per tensor, whichever gives
    /// fewer bits per token on the second half of the calibration text, the compensation fitted
    /// on the first; round without calibration text). Default: compensated with calibration
    /// text, which lost least on held-out text of both trained models in int8 and int4; round
    /// without. auto lost more than compensated there: each choice is judged on half the text,
    /// and gains of a few thousandths of a percent are within that half's noise
    /// (docs/QUANTIZATION.md).
    #[arg(long, value_name = "round|compensated|auto", value_parser = method)]
    pub method: Option<Method>,
    /// Columns that share one multiplier in an int4 row: 32, 64 or 128 (any multiple of 8);
    /// smaller groups follow the weights more closely and cost a byte more per group.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_GROUP)]
    pub group_size: usize,
    /// How the biases, LayerNorm gains and the attention biases are stored: f16 halves them (a
    /// few percent of an int4 image) at a cost far below the weights'. Default: f16 with
    /// --dtype int4 or int4-all, f32 otherwise.
    #[arg(long, value_name = "f32|f16", value_parser = vector_dtype)]
    pub vectors: Option<VectorDtype>,
    /// Keep tensors matching this pattern in f16 (`*` matches anything; repeatable).
    #[arg(long, value_name = "PATTERN")]
    pub keep_f16: Vec<String>,
    /// Also keep the K tensors whose int8 quantization costs most (measured on the calibration
    /// text, which it needs).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub auto_keep_f16: usize,
    /// With --dtype int4 or int4-all: keep the K int4 tensors whose quantization costs most
    /// (each measured alone on the calibration text, which it needs) in int8.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub auto_keep_int8: usize,
    /// Make an image of at most N bytes: starting from the smallest image the other flags make,
    /// raise one tensor at a time (int4 to int8, int8 to f16), the largest gain in calibration
    /// bits per token per byte added first, while the image fits. Refused when even the
    /// smallest image does not fit. Needs calibration text; the report says why each tensor
    /// got its precision.
    #[arg(long, value_name = "N")]
    pub budget_bytes: Option<usize>,
    /// Integer arithmetic: mark the image to compute with integers alone, every activation in
    /// fixed point Q(frac), for cores without an FPU (RV32IMAC, Cortex-M0+, Cortex-M3), where
    /// every f32 operation is a call into software floating point. frac is calibrated on the
    /// calibration text (which it needs): room for eight times the largest activation the
    /// full-precision model shows there. Takes --dtype int8 or int4 (the embedding tables and
    /// output projections int8, no tensor kept in f16); sessions then keep int8 memory.
    /// Smoothing factors are rounded to powers of two, which the device applies as shifts. The
    /// cost: one more pass of the full-precision model over the calibration text here, and a
    /// few hundredths of a percent of bits per token over float arithmetic on the same weights
    /// on the trained models (docs/INTEGER.md).
    #[arg(long)]
    pub integer: bool,
    /// Write the full report as JSON. With it (or --report-png) the model is also quantized
    /// plainly to f16, int8, int4 and int4-all and each is measured the same way, for
    /// comparison (`precisions` in the JSON).
    #[arg(long, value_name = "FILE.json")]
    pub report: Option<PathBuf>,
    /// Draw the report as a PNG picture: a grid of layers (rows) by matrix kinds (columns),
    /// each cell coloured by the matrix's weight SQNR; each layer's output error for this image
    /// and every precision rounded plainly; the worst matrices named; and the calibration bits
    /// per token of each precision. The picture grows with the number of layers.
    #[arg(long, value_name = "FILE.png")]
    pub report_png: Option<PathBuf>,
}

impl QuantizeArgs {
    /// The first of these flags given a value other than its default, if any: `convert` refuses
    /// them when it does not quantize.
    pub fn given(&self) -> Option<&'static str> {
        [
            (self.calib_bytes.is_some(), "--calib-bytes"),
            (self.calib_tokens.is_some(), "--calib-tokens"),
            (self.calib_text.is_some(), "--calib-text"),
            (self.calib_limit != CALIB_LIMIT, "--calib-limit"),
            (self.calib_backend != CalibBackendArg::Auto, "--calib-backend"),
            (self.smooth != Smoothing::Auto, "--smooth"),
            (self.method.is_some(), "--method"),
            (self.group_size != DEFAULT_GROUP, "--group-size"),
            (self.vectors.is_some(), "--vectors"),
            (!self.keep_f16.is_empty(), "--keep-f16"),
            (self.auto_keep_f16 != 0, "--auto-keep-f16"),
            (self.auto_keep_int8 != 0, "--auto-keep-int8"),
            (self.budget_bytes.is_some(), "--budget-bytes"),
            (self.integer, "--integer"),
            (self.report.is_some(), "--report"),
            (self.report_png.is_some(), "--report-png"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// Reads the calibration text, if any was given, cut to `--calib-limit` tokens
    /// (`--calib-text` with `model`'s vocabulary).
    pub fn calibration(&self, model: &Model<'_>) -> Result<Option<Vec<u32>>> {
        let mut calibration = match (&self.calib_bytes, &self.calib_tokens, &self.calib_text) {
            (Some(path), _, _) => tokens::read_raw_text(path, model)?,
            (_, Some(path), _) => tokens::read_token_ids(path)?,
            (_, _, Some(path)) => tokens::read_text_tokens(path, model)?,
            _ => {
                // These only act on calibration text: without it they would be ignored.
                let reading = [
                    (self.calib_limit != CALIB_LIMIT, "--calib-limit"),
                    (self.calib_backend != CalibBackendArg::Auto, "--calib-backend"),
                ];
                if let Some((_, flag)) = reading.into_iter().find(|(given, _)| *given) {
                    bail!("{flag} needs calibration text (--calib-bytes, --calib-tokens or --calib-text)");
                }
                let measuring = [
                    (self.auto_keep_f16 != 0, "--auto-keep-f16"),
                    (self.auto_keep_int8 != 0, "--auto-keep-int8"),
                    (self.budget_bytes.is_some(), "--budget-bytes"),
                ];
                if let Some((_, flag)) = measuring.into_iter().find(|(given, _)| *given) {
                    bail!(
                        "{flag} measures on calibration text: give --calib-bytes, --calib-tokens or \
                         --calib-text"
                    );
                }
                return Ok(None);
            }
        };
        calibration.truncate(self.calib_limit);
        Ok(Some(calibration))
    }
}

/// `--smooth`: `auto`, `off`, or a strength in [0, 1].
fn method(word: &str) -> Result<Method, String> {
    word.parse().map_err(|e: txl_core::UnknownWord| e.to_string())
}

fn vector_dtype(word: &str) -> Result<VectorDtype, String> {
    word.parse().map_err(|e: txl_core::UnknownWord| e.to_string())
}

fn smoothing(word: &str) -> Result<Smoothing, String> {
    match word {
        "auto" => Ok(Smoothing::Auto),
        "off" => Ok(Smoothing::Off),
        alpha => match alpha.parse::<f32>() {
            Ok(a) if (0.0..=1.0).contains(&a) => Ok(Smoothing::Alpha(a)),
            _ => Err("expected auto, off or a strength in [0, 1]".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_takes_auto_off_or_a_strength() {
        assert_eq!(smoothing("auto"), Ok(Smoothing::Auto));
        assert_eq!(smoothing("off"), Ok(Smoothing::Off));
        assert_eq!(smoothing("0.5"), Ok(Smoothing::Alpha(0.5)));
        assert_eq!(smoothing("1"), Ok(Smoothing::Alpha(1.0)));
        for bad in ["1.5", "-0.1", "NaN", "strong", ""] {
            assert!(smoothing(bad).is_err(), "{bad}");
        }
    }
}

//! What the quantizer is asked for: the precision ([`Target`]), how the vectors are stored
//! ([`VectorDtype`]), the smoothing and rounding ([`Smoothing`], [`Method`]), all of it in
//! [`QuantizeOptions`] with the mixing of precisions ([`MixedPrecision`]).

use serde::Serialize;
use txl_core::tensors::TensorName;
use txl_core::SessionOptions;

use super::int4;
use crate::error::Error;

/// The weight precision to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Every matrix in f16.
    F16,
    /// Every matrix in int8 (W8A8), except those kept in f16.
    Int8,
    /// The decoder layers' matrices in int4 (W4A8), the embedding and output layers in int8,
    /// except those kept in f16.
    Int4,
    /// Every matrix in int4, except those kept in f16.
    #[serde(rename = "int4-all")]
    Int4All,
}

impl Target {
    /// The words that name the precisions.
    pub const WORDS: &'static [&'static str] = &["f16", "int8", "int4", "int4-all"];

    /// Whether tensor `name` (a matrix) is int4 under this target.
    pub fn is_int4(self, name: TensorName) -> bool {
        match self {
            Target::F16 | Target::Int8 => false,
            Target::Int4 => matches!(name, TensorName::Layer(..)),
            Target::Int4All => true,
        }
    }

    /// Whether the target stores integer weights (int8 or int4), which calibration can tune.
    pub fn is_integer(self) -> bool {
        self != Target::F16
    }

    /// How the vectors are stored when not asked: f16 for the int4 targets, whose purpose is
    /// the smallest image, f32 otherwise (those images keep their bits from before f16 vectors).
    pub fn default_vectors(self) -> VectorDtype {
        match self {
            Target::Int4 | Target::Int4All => VectorDtype::F16,
            Target::F16 | Target::Int8 => VectorDtype::F32,
        }
    }
}

/// How the vectors (biases, LayerNorm gains and biases, the attention biases `u` and `v`) are
/// stored: they are a few percent of an int4 image, and f16 halves them at a cost far below
/// the weights' (each element within 2^-11 of itself, relative, like f16 weights).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VectorDtype {
    /// f32: exactly the source's.
    F32,
    /// f16, widened exactly on every read.
    F16,
}

impl VectorDtype {
    /// The words that name them.
    pub const WORDS: &'static [&'static str] = &["f32", "f16"];
}

impl std::str::FromStr for VectorDtype {
    type Err = txl_core::UnknownWord;

    fn from_str(word: &str) -> Result<VectorDtype, Self::Err> {
        match word {
            "f32" => Ok(VectorDtype::F32),
            "f16" => Ok(VectorDtype::F16),
            _ => Err(txl_core::UnknownWord {
                option: "vector precision",
                expected: VectorDtype::WORDS,
            }),
        }
    }
}

impl std::fmt::Display for VectorDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VectorDtype::F32 => "f32",
            VectorDtype::F16 => "f16",
        })
    }
}

impl std::str::FromStr for Target {
    type Err = txl_core::UnknownWord;

    fn from_str(word: &str) -> Result<Target, Self::Err> {
        match word {
            "f16" => Ok(Target::F16),
            "int8" => Ok(Target::Int8),
            "int4" => Ok(Target::Int4),
            "int4-all" => Ok(Target::Int4All),
            _ => Err(txl_core::UnknownWord {
                option: "weight precision",
                expected: Target::WORDS,
            }),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::F16 => "f16",
            Target::Int8 => "int8",
            Target::Int4 => "int4",
            Target::Int4All => "int4-all",
        })
    }
}

/// Activation smoothing for int8.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Smoothing {
    /// No smoothing.
    Off,
    /// Smoothing with this migration strength (0 = none, 1 = all of the range to the weights).
    Alpha(f32),
    /// Try several strengths and none on the calibration text; keep the best.
    Auto,
}

/// How int8 rows are rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Each weight to its nearest grid point (after the clip search).
    Round,
    /// GPTQ: column by column, each column's error compensated on the columns after it
    /// through the inverse Gram matrix of the calibration inputs (needs calibration text).
    Compensated,
    /// Per tensor, whichever of the two gives fewer bits per token on text the compensation
    /// was not fitted on: the compensated candidates are fitted on the first half of the
    /// calibration text and judged on the second ([`AUTO_FIT_SHARE`]); those chosen are then
    /// fitted again on all of it (plain rounding without calibration text).
    Auto,
}

/// [`Method::Auto`] fits its compensated candidates on this share of the calibration text
/// (the start) and chooses among the roundings on the rest.
pub const AUTO_FIT_SHARE: f64 = 0.5;

impl Method {
    /// The words that name the methods.
    pub const WORDS: &'static [&'static str] = &["round", "compensated", "auto"];

    /// The method used when none is asked for: [`Method::Compensated`] with calibration text,
    /// which lost least on held-out text of both trained models in int8 and int4
    /// (docs/QUANTIZATION.md, `tests/tests/quantizer_methods.rs`), and [`Method::Round`]
    /// without, the one that needs none.
    pub fn default_for(calibrated: bool) -> Method {
        if calibrated {
            Method::Compensated
        } else {
            Method::Round
        }
    }

    /// Where [`Method::Auto`] splits `tokens` calibration tokens: the compensation is fitted on
    /// `..split` and the roundings are compared on `split..`.
    pub fn auto_split(tokens: usize) -> usize {
        (tokens as f64 * AUTO_FIT_SHARE).round() as usize
    }
}

impl std::str::FromStr for Method {
    type Err = txl_core::UnknownWord;

    fn from_str(word: &str) -> Result<Method, Self::Err> {
        match word {
            "round" => Ok(Method::Round),
            "compensated" => Ok(Method::Compensated),
            "auto" => Ok(Method::Auto),
            _ => Err(txl_core::UnknownWord {
                option: "rounding method",
                expected: Method::WORDS,
            }),
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Round => "round",
            Method::Compensated => "compensated",
            Method::Auto => "auto",
        })
    }
}

/// What to do.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// The precision.
    pub target: Target,
    /// Activation smoothing (int8 with calibration only).
    pub smoothing: Smoothing,
    /// Round each smoothing factor to the nearest power of two (in log terms), so that the
    /// activation scales are powers of two: the integer arithmetic applies those with a shift
    /// (`txl quantize --integer` sets it).
    pub power_of_two_smoothing: bool,
    /// Tensors (glob patterns over names, `*` matches anything) kept in f16.
    pub keep_f16: Vec<String>,
    /// Also keep the `k` tensors whose int8 quantization alone costs most on the calibration text.
    pub auto_keep_f16: usize,
    /// How int8 and int4 rows are rounded.
    pub method: Method,
    /// Columns per multiplier of an int4 row ([`int4::GROUPS`]; a multiple of 8).
    pub group: usize,
    /// How the vectors are stored ([`Target::default_vectors`] unless asked otherwise).
    pub vectors: VectorDtype,
    /// Session settings used to evaluate on the calibration text.
    pub session: SessionOptions,
    /// Where the reference collects the calibration statistics (activation ranges, Gram
    /// matrices): [`Backend::Cpu32`](crate::Backend::Cpu32) unless asked otherwise.
    #[cfg(feature = "reference")]
    pub calibration_backend: crate::reference::Backend,
}

impl QuantizeOptions {
    /// Weights alone: no smoothing, nothing kept in f16 (what needs no calibration text).
    pub fn weights_only(target: Target, session: SessionOptions) -> QuantizeOptions {
        QuantizeOptions {
            target,
            smoothing: Smoothing::Off,
            power_of_two_smoothing: false,
            keep_f16: Vec::new(),
            auto_keep_f16: 0,
            method: Method::Round,
            group: int4::DEFAULT_GROUP,
            vectors: target.default_vectors(),
            session,
            #[cfg(feature = "reference")]
            calibration_backend: crate::reference::Backend::Cpu32,
        }
    }
}

/// Precision chosen tensor by tensor from measurements on the calibration text, beyond
/// [`QuantizeOptions`]: both need calibration text ([`quantize_mixed`](super::quantize_mixed)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MixedPrecision {
    /// An int4 target keeps the `k` int4 tensors whose quantization alone costs most in int8.
    pub auto_keep_int8: usize,
    /// The image may hold at most this many bytes: starting from the smallest image the other
    /// options make, tensors go up a precision (int4 to int8, int8 to f16) one at a time, the
    /// largest measured gain in bits per token per byte added first, as long as the image stays
    /// within the budget. f16 counts as lossless.
    pub budget_bytes: Option<usize>,
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((prefix, rest)) => {
            name.starts_with(prefix)
                && (0..=name.len() - prefix.len()).any(|skip| glob_match(rest, &name[prefix.len() + skip..]))
        }
    }
}

/// Refuses a group size the image cannot hold.
pub(super) fn check_group(group: usize) -> Result<(), Error> {
    if group < 8 || !group.is_multiple_of(8) || group > 65_528 {
        return Err(Error::BadOptions(format!(
            "an int4 group is a multiple of 8 columns from 8 to 65,528 (32, 64 or 128 are usual), not {group}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_names() {
        assert!(glob_match(
            "layers.*.pos_ff.*",
            "layers.3.pos_ff.CoreNet.0.weight"
        ));
        assert!(glob_match("crit.*", "crit.out_layers.0.weight"));
        assert!(glob_match(
            "word_emb.emb_layers.0.weight",
            "word_emb.emb_layers.0.weight"
        ));
        assert!(!glob_match("layers.1.*", "layers.10.dec_attn.qkv_net.weight"));
        assert!(!glob_match("crit.*", "layers.0.dec_attn.qkv_net.weight"));
    }
}

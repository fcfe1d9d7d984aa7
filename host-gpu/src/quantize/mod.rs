//! The quantizer: f32 image in, f16, int8 or int4 image out, with a report of what it cost.
//!
//! int8 is per-row symmetric with the clipping range searched per row ([`int8`]), computed on
//! the device as W8A8 (activations quantized per token). With calibration text, activation
//! smoothing (SmoothQuant: migrate per-channel activation range into the weights, strength
//! `alpha`) is tried and kept only where it lowers the measured bits per token, and a
//! sensitivity pass can keep the tensors whose quantization costs most in f16.
//!
//! With calibration text, int8 rows can also be rounded with their errors compensated
//! ([`gptq`]: GPTQ, weighed by the Gram matrix of each matrix's inputs, [`inputs`]) instead of
//! to the nearest grid point; [`Method`] says which, or lets the measured bits per token on
//! the calibration text choose per tensor.
//!
//! int4 ([`int4`]) has a scale per row and a multiplier per group of columns, is computed as
//! W4A8, and goes to the linear layers ([`Target::Int4`], the embedding and output layers in
//! int8) or to every matrix ([`Target::Int4All`]); the same rounding methods apply.
//!
//! [`MixedPrecision`] mixes precisions by measurement: each matrix quantized alone costs some
//! calibration bits per token, and the costliest int4 matrices stay int8 (`auto_keep_int8`), or
//! matrices go up a precision, the largest gain per byte first, until the image would exceed a
//! byte budget ([`quantize_mixed`]).

#[cfg(feature = "reference")]
pub mod calibrate;

#[cfg(feature = "reference")]
pub mod compare;

pub mod gptq;
pub mod int4;
pub mod int8;

#[cfg(feature = "reference")]
pub mod inputs;

#[cfg(feature = "reference")]
mod search;

use half::f16;
use serde::Serialize;
use txl_core::image::{set_vocabulary, write_image, Payload};
use txl_core::tensors::{for_each_tensor, Shape, TensorName};
use txl_core::weights::{int4_groups, int4_row_bytes};
use txl_core::{Config, Model, SessionOptions};

use crate::error::Error;
#[cfg(feature = "reference")]
pub use search::{quantize, quantize_mixed};

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

    fn plan(self) -> Plan {
        match self {
            VectorDtype::F32 => Plan::F32,
            VectorDtype::F16 => Plan::F16,
        }
    }
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
    /// Per tensor, whichever of the two gives fewer bits per token on the calibration text
    /// (plain rounding without calibration text).
    Auto,
}

impl Method {
    /// The words that name the methods.
    pub const WORDS: &'static [&'static str] = &["round", "compensated", "auto"];
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
    pub calibration_backend: crate::Backend,
}

impl QuantizeOptions {
    /// Weights alone: no smoothing, nothing kept in f16 (what needs no calibration text).
    pub fn weights_only(target: Target, session: SessionOptions) -> QuantizeOptions {
        QuantizeOptions {
            target,
            smoothing: Smoothing::Off,
            keep_f16: Vec::new(),
            auto_keep_f16: 0,
            method: Method::Round,
            group: int4::DEFAULT_GROUP,
            vectors: target.default_vectors(),
            session,
            #[cfg(feature = "reference")]
            calibration_backend: crate::Backend::Cpu32,
        }
    }
}

/// Precision chosen tensor by tensor from measurements on the calibration text, beyond
/// [`QuantizeOptions`]: both need calibration text ([`quantize_mixed`]).
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

/// One tensor in the report.
#[derive(Clone, Debug, Serialize)]
pub struct TensorReport {
    /// Canonical name.
    pub name: String,
    /// `f32`, `f16`, `int8` or `int4`.
    pub dtype: &'static str,
    /// Dimensions.
    pub shape: Vec<u32>,
    /// Signal-to-quantization-noise ratio in dB (infinite when stored exactly).
    pub sqnr_db: f64,
    /// Calibration bits per token lost when only this tensor is quantized, to the target's
    /// precision for it (int8, or int4 for the target's int4 tensors; sensitivity pass only).
    pub solo_delta_bits: Option<f64>,
    /// The same with the tensor in int8, for the target's int4 tensors (measured for
    /// [`MixedPrecision`]).
    pub solo_delta_bits_int8: Option<f64>,
    /// Why the tensor is stored above the target's precision: `keep-f16` (a pattern),
    /// `auto-keep-f16`, `auto-keep-int8` or `budget` (`None`: it is not).
    pub kept_for: Option<&'static str>,
    /// How an int8 or int4 tensor was rounded: `round` or `compensated` (`None` if neither).
    pub method: Option<Method>,
    /// The two roundings compared, for int8 and int4 tensors that have calibration inputs
    /// (`None` otherwise).
    pub rounding: Option<RoundingReport>,
}

/// Plain and error-compensated rounding of one tensor, side by side.
#[derive(Clone, Debug, Serialize)]
pub struct RoundingReport {
    /// SQNR of the weights in dB, plain rounding.
    pub round_sqnr_db: f64,
    /// SQNR of the weights in dB, error-compensated.
    pub compensated_sqnr_db: f64,
    /// Relative output error `‖(W - Ŵ) Xᵀ‖² / ‖W Xᵀ‖²` on the calibration inputs `X`, plain
    /// rounding.
    pub round_output_error: f64,
    /// The same, error-compensated.
    pub compensated_output_error: f64,
    /// [`Method::Auto`] only: calibration bits per token with this tensor rounded plainly and
    /// compensated (the tensors before it as already chosen, those after it plain).
    pub bits_per_token: Option<[f64; 2]>,
}

/// What the quantizer did and measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The precision produced.
    pub target: Target,
    /// The rounding method asked for ([`TensorReport::method`] says what each tensor got).
    pub method: Method,
    /// The smoothing strength used (`None`: no smoothing).
    pub smoothing_alpha: Option<f32>,
    /// Calibration bits per token for each smoothing strength tried.
    pub smoothing_search: Vec<(Option<f32>, f64)>,
    /// Every tensor.
    pub tensors: Vec<TensorReport>,
    /// Relative RMS error of each layer's output against the f32 model, on the calibration text.
    pub layer_errors: Vec<f64>,
    /// Calibration bits per token of each precision (`f32`, `f16`, this image, this image with
    /// int8 memory).
    pub bits_per_token: Vec<(String, f64)>,
    /// Calibration tokens used (0 without calibration).
    pub calibration_tokens: usize,
    /// The reference backend that collected the calibration statistics (`cpu64`, `cpu32` or
    /// `cuda`; `None` when none were collected).
    pub statistics_backend: Option<&'static str>,
    /// Bytes of the image written.
    pub image_bytes: usize,
    /// The byte budget ([`MixedPrecision::budget_bytes`]), if any.
    pub budget_bytes: Option<usize>,
    /// With a budget: the bytes of the smallest image the other options make, where the
    /// budget's search starts.
    pub smallest_image_bytes: Option<usize>,
    /// Parameters of the model.
    pub parameters: usize,
    /// Every precision quantized plainly and measured the same way, for comparison (filled
    /// by `compare::compare_precisions` when asked for; empty otherwise).
    pub precisions: Vec<PrecisionReport>,
}

/// One precision, every matrix stored in it (int4's embedding and output layers in int8),
/// rounded to the nearest grid point without smoothing.
#[derive(Clone, Debug, Serialize)]
pub struct PrecisionReport {
    /// The precision.
    pub precision: Target,
    /// Bytes of its image.
    pub image_bytes: usize,
    /// Each tensor's weight SQNR in dB, in the order of [`Report::tensors`] (`None`
    /// for a tensor stored exactly: f32 vectors).
    pub sqnr_db: Vec<Option<f64>>,
    /// Relative RMS error of each layer's output against the f32 model on the calibration
    /// text (empty without calibration text).
    pub layer_errors: Vec<f64>,
    /// Calibration bits per token (`None` without calibration text).
    pub bits_per_token: Option<f64>,
}

/// The quantized image and its report.
#[derive(Clone, Debug)]
pub struct Quantized {
    /// The new image.
    pub image: Vec<u8>,
    /// What it cost.
    pub report: Report,
}

/// How one tensor is stored.
#[derive(Clone, Debug)]
enum Plan {
    F32,
    F16,
    /// int8 with these smoothing factors, rounded plainly.
    Int8(Option<Vec<f32>>),
    /// int8, already quantized (by the calibrated quantizer's error-compensated rounding).
    #[cfg_attr(not(feature = "reference"), allow(dead_code))]
    Quantized(std::rc::Rc<int8::Int8Matrix>),
    /// int4 with this many columns a group, rounded plainly.
    Int4(usize),
    /// int4, already quantized.
    #[cfg_attr(not(feature = "reference"), allow(dead_code))]
    Int4Quantized(std::rc::Rc<int4::Int4Matrix>),
}

impl Plan {
    /// The dtype's name in the report.
    #[cfg_attr(not(feature = "reference"), allow(dead_code))]
    fn dtype(&self) -> &'static str {
        match self {
            Plan::F32 => "f32",
            Plan::F16 => "f16",
            Plan::Int8(_) | Plan::Quantized(_) => "int8",
            Plan::Int4(_) | Plan::Int4Quantized(_) => "int4",
        }
    }
}

/// A tensor as the image stores it.
enum Stored {
    F32,
    F16(Vec<f16>),
    Int8(int8::Int8Matrix),
    /// The matrix and its packed values.
    Int4(int4::Int4Matrix, Vec<u8>),
}

/// The source model's tensors, in f32, and its vocabulary section (kept in every image built).
struct Source {
    config: Config,
    tensors: Vec<(TensorName, Shape, Vec<f32>)>,
    vocabulary: Option<Vec<u8>>,
}

impl Source {
    fn read(model: &Model<'_>) -> Source {
        let config = *model.config();
        let image = model.image();
        let mut tensors = Vec::new();
        let mut index = 0;
        for_each_tensor(&config, |name, shape| {
            let data = if name.is_matrix() {
                let matrix = image.matrix(index);
                let mut dense = vec![0.0f32; matrix.rows * matrix.cols];
                for (r, row) in dense.chunks_exact_mut(matrix.cols).enumerate() {
                    matrix.row_to_f32(r, row);
                }
                dense
            } else {
                image.vector(index).iter().collect()
            };
            tensors.push((name, shape, data));
            index += 1;
        });
        let vocabulary = image.vocabulary().map(|v| v.section_bytes().to_vec());
        Source {
            config,
            tensors,
            vocabulary,
        }
    }

    /// Every matrix rounded plainly to `target` (int4 in groups of `group` columns), the
    /// vectors stored as `vectors`.
    fn plain_plans(&self, target: Target, group: usize, vectors: VectorDtype) -> Vec<Plan> {
        self.tensors
            .iter()
            .map(|(name, _, _)| match (name.is_matrix(), target) {
                (false, _) => vectors.plan(),
                (true, Target::F16) => Plan::F16,
                (true, _) if target.is_int4(*name) => Plan::Int4(group),
                (true, _) => Plan::Int8(None),
            })
            .collect()
    }

    /// Builds an image storing tensor `i` as `plans[i]`; returns it and each tensor's SQNR.
    fn build(&self, plans: &[Plan]) -> Result<(Vec<u8>, Vec<f64>), Error> {
        let mut stored = Vec::with_capacity(plans.len());
        let mut sqnr = Vec::with_capacity(plans.len());
        for ((_, shape, data), plan) in self.tensors.iter().zip(plans) {
            let cols = shape.rows_cols().1;
            let (item, approximation) = match plan {
                Plan::F32 => (Stored::F32, None),
                Plan::F16 => {
                    let halves: Vec<f16> = data.iter().map(|&v| f16::from_f32(v)).collect();
                    let back = halves.iter().map(|v| v.to_f32()).collect();
                    (Stored::F16(halves), Some(back))
                }
                Plan::Int8(smooth) => {
                    let q = int8::quantize(data, cols, smooth.as_deref());
                    let back = q.dequantize(cols);
                    (Stored::Int8(q), Some(back))
                }
                Plan::Quantized(q) => {
                    let back = q.dequantize(cols);
                    (Stored::Int8((**q).clone()), Some(back))
                }
                Plan::Int4(group) => {
                    let q = int4::quantize(data, cols, *group);
                    let (back, packed) = (q.dequantize(cols), q.packed(cols));
                    (Stored::Int4(q, packed), Some(back))
                }
                Plan::Int4Quantized(q) => {
                    let (back, packed) = (q.dequantize(cols), q.packed(cols));
                    (Stored::Int4((**q).clone(), packed), Some(back))
                }
            };
            sqnr.push(approximation.map_or(f64::INFINITY, |a| int8::sqnr_db(data, &a)));
            stored.push(item);
        }
        Ok((self.write(&stored)?, sqnr))
    }

    /// Bytes of the image [`Source::build`] makes of `plans`, without quantizing anything: the
    /// same writer, given zeros of the lengths each plan stores.
    #[cfg_attr(not(feature = "reference"), allow(dead_code))]
    fn image_bytes(&self, plans: &[Plan]) -> Result<usize, Error> {
        let stored: Vec<Stored> = self
            .tensors
            .iter()
            .zip(plans)
            .map(|((_, shape, _), plan)| {
                let (rows, cols) = shape.rows_cols();
                let values = rows * cols;
                let int8 = |act_scales: Option<usize>| int8::Int8Matrix {
                    values: vec![0; values],
                    row_scales: vec![0.0; rows],
                    act_scales: act_scales.map(|n| vec![0.0; n]),
                };
                let int4 = |group: usize| {
                    let group = int4::stored_group(cols, group);
                    let q = int4::Int4Matrix {
                        values: Vec::new(),
                        scale: 0.0,
                        codes: vec![0; rows * int4_groups(cols, group)],
                        group,
                    };
                    Stored::Int4(q, vec![0; rows * int4_row_bytes(cols)])
                };
                match plan {
                    Plan::F32 => Stored::F32,
                    Plan::F16 => Stored::F16(vec![f16::ZERO; values]),
                    Plan::Int8(smooth) => Stored::Int8(int8(smooth.as_ref().map(Vec::len))),
                    Plan::Quantized(q) => Stored::Int8(int8(q.act_scales.as_ref().map(Vec::len))),
                    Plan::Int4(group) => int4(*group),
                    Plan::Int4Quantized(q) => int4(q.group),
                }
            })
            .collect();
        Ok(self.write(&stored)?.len())
    }

    /// The image of the tensors stored as `stored`, with the source's vocabulary.
    fn write(&self, stored: &[Stored]) -> Result<Vec<u8>, Error> {
        let payloads: Vec<(TensorName, Payload<'_>)> = self
            .tensors
            .iter()
            .zip(stored)
            .map(|((name, _, data), item)| {
                let payload = match item {
                    Stored::F32 => Payload::F32(data),
                    Stored::F16(h) => Payload::F16(h),
                    Stored::Int8(q) => Payload::Int8 {
                        values: &q.values,
                        row_scales: &q.row_scales,
                        act_scales: q.act_scales.as_deref(),
                    },
                    Stored::Int4(q, packed) => Payload::Int4 {
                        values: packed,
                        scale: q.scale,
                        codes: &q.codes,
                        group: q.group,
                    },
                };
                (*name, payload)
            })
            .collect();
        let mut image = write_image(&self.config, &payloads)?;
        if let Some(section) = &self.vocabulary {
            image = set_vocabulary(&image, Some(section))?;
        }
        Ok(image)
    }

    /// Columns of tensor `index` (a vector's length).
    #[cfg(feature = "reference")]
    fn cols(&self, index: usize) -> usize {
        self.tensors[index].1.rows_cols().1
    }

    #[cfg(feature = "reference")]
    fn parameters(&self) -> usize {
        self.tensors.iter().map(|(_, shape, _)| shape.len()).sum()
    }
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

/// `model` with its weights quantized to `target` and nothing measured: what `txl convert
/// --dtype` and `txl quantize` make without calibration text, and what the firmware's build
/// script embeds.
/// int4 tensors have [`int4::DEFAULT_GROUP`] columns a group ([`quantize_weights_grouped`]
/// chooses).
pub fn quantize_weights(model: &Model<'_>, target: Target) -> Result<Vec<u8>, Error> {
    quantize_weights_grouped(model, target, int4::DEFAULT_GROUP)
}

/// [`quantize_weights`] with `group` columns per multiplier of the int4 tensors (a multiple of
/// 8, at least 8).
pub fn quantize_weights_grouped(model: &Model<'_>, target: Target, group: usize) -> Result<Vec<u8>, Error> {
    check_group(group)?;
    let source = Source::read(model);
    let plans = source.plain_plans(target, group, target.default_vectors());
    Ok(source.build(&plans)?.0)
}

/// Refuses a group size the image cannot hold.
fn check_group(group: usize) -> Result<(), Error> {
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

    /// The size the budget counts with is the size of the image built, whatever the mix of
    /// precisions, smoothing and group sizes.
    #[cfg(feature = "reference")]
    #[test]
    fn image_bytes_are_the_bytes_built() {
        use super::{Plan, Source};
        use crate::{random_image, small_config, RandomInit};

        let image = random_image(&small_config(), 5, RandomInit::default()).unwrap();
        let bytes = txl_core::AlignedBytes::copy_from(&image).unwrap();
        let model = txl_core::Model::parse(bytes.bytes()).unwrap();
        let source = Source::read(&model);
        for shift in 0..6 {
            let plans: Vec<Plan> = source
                .tensors
                .iter()
                .enumerate()
                .map(|(index, (name, _, _))| {
                    let cols = source.cols(index);
                    match (name.is_matrix(), (index + shift) % 6) {
                        (false, _) | (true, 0) => Plan::F32,
                        (true, 1) => Plan::F16,
                        (true, 2) => Plan::Int8(None),
                        (true, 3) => Plan::Int8(Some(vec![1.5; cols])),
                        (true, 4) => Plan::Int4(8),
                        (true, _) => Plan::Int4(32),
                    }
                })
                .collect();
            let built = source.build(&plans).unwrap().0.len();
            assert_eq!(source.image_bytes(&plans).unwrap(), built, "shift {shift}");
        }
    }

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

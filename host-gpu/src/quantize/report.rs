//! What quantizing cost: per tensor ([`TensorReport`]), per image ([`Report`]), per precision
//! compared ([`PrecisionReport`]), and the image with its report ([`Quantized`]).

use serde::Serialize;

use super::options::{Method, Target};

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
    /// [`MixedPrecision`](super::MixedPrecision)).
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
    /// [`Method::Auto`] only: bits per token with this tensor rounded plainly and compensated
    /// (the tensors before it as already chosen, those after it plain), on the part of the
    /// calibration text the compensation was not fitted on ([`Report::rounding_choice`]).
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
    /// [`Method::Auto`] with calibration text: the tokens its compensated candidates were
    /// fitted on (the start of the calibration text) and the tokens the roundings were
    /// compared on (the rest).
    pub rounding_choice: Option<[usize; 2]>,
    /// The reference backend that collected the calibration statistics (`cpu64`, `cpu32` or
    /// `cuda`; `None` when none were collected).
    pub statistics_backend: Option<&'static str>,
    /// Bytes of the image written.
    pub image_bytes: usize,
    /// The byte budget ([`MixedPrecision::budget_bytes`](super::MixedPrecision::budget_bytes)), if any.
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

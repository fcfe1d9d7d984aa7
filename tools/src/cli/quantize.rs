//! `txl quantize`: an f32 image to f16, int8 or int4 weights, with a report of the cost on
//! stderr.

pub mod report_png;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use txl_core::image::{set_arithmetic, Arithmetic};
use txl_core::tensors::TensorName;
use txl_core::{AlignedBytes, ArithmeticError, Error, Model, SessionOptions};
use txl_host_gpu::integer::IntegerModel;
use txl_host_gpu::quantize::int4::DEFAULT_GROUP;
use txl_host_gpu::quantize::{self, compare, Method, MixedPrecision, QuantizeOptions, Smoothing, Target};
use txl_host_gpu::{Backend, Reference};

use super::args::{CalibBackendArg, DtypeArg, QuantizeArgs};
use super::{arena, progress};
use crate::image_file::{parse_model, read_image, write_file};

pub const EXAMPLES: &str = "Examples:\n  \
    txl quantize model.txl -o model-int8.txl\n  \
    txl quantize model.txl -o model-int8.txl --calib-bytes train.txt --report report.json\n  \
    txl quantize model.txl -o model-int8.txl --calib-bytes train.txt --auto-keep-f16 2\n  \
    txl quantize model.txl -o model-int8.txl --calib-bytes train.txt --method round\n  \
    txl quantize words.txl -o words-int8.txl --calib-text train.txt\n  \
    txl quantize model.txl -o model-int4.txl --dtype int4 --calib-bytes train.txt\n  \
    txl quantize model.txl -o model-int4.txl --dtype int4 --calib-bytes train.txt --auto-keep-int8 4\n  \
    txl quantize model.txl -o model-mixed.txl --dtype int4 --calib-bytes train.txt --budget-bytes 450000 \
    --report-png report.png\n  \
    txl quantize model.txl -o model-f16.txl --dtype f16\n  \
    txl quantize model.txl -o model-integer.txl --integer --calib-bytes train.txt\n  \
    txl quantize model.txl -o model-int4-integer.txl --dtype int4 --integer --calib-bytes train.txt";

/// Arguments of `txl quantize`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The f32 image.
    pub input: PathBuf,
    /// Output image path.
    #[arg(short, long, value_name = "OUT.txl")]
    pub out: PathBuf,
    /// Weight precision.
    #[arg(long, value_enum, default_value_t = DtypeArg::Int8)]
    pub dtype: DtypeArg,
    #[command(flatten)]
    pub quantize: QuantizeArgs,
}

impl Args {
    /// Quantizes; prints nothing on `out` (the report goes to stderr and `--report`).
    pub fn run(self, _out: &mut dyn Write) -> Result<()> {
        let bytes = read_image(&self.input)?;
        let model = parse_model(&bytes, &self.input)?;
        let image = quantize_image(&model, self.dtype, &self.quantize)?;
        write_file(&self.out, &image)
    }
}

/// Quantizes `model` to `dtype` as `args` say; prints the report on stderr and writes it to
/// `--report` (and as a picture to `--report-png`). Returns the new image.
pub fn quantize_image(model: &Model<'_>, dtype: DtypeArg, args: &QuantizeArgs) -> Result<Vec<u8>> {
    let target = match dtype {
        DtypeArg::F32 => bail!("the quantizer makes f16, int8 or int4 images; f32 is what convert writes"),
        DtypeArg::F16 => Target::F16,
        DtypeArg::Int8 => Target::Int8,
        DtypeArg::Int4 => Target::Int4,
        DtypeArg::Int4All => Target::Int4All,
    };
    if let Arithmetic::Integer { frac } = model.image().arithmetic() {
        bail!(
            "the input is an integer image (activations in Q{frac}): quantize the float image it \
             was made from"
        );
    }
    if args.integer {
        check_integer_flags(target, args)?;
    }
    if args.group_size != DEFAULT_GROUP && !matches!(target, Target::Int4 | Target::Int4All) {
        bail!("--group-size sets int4 groups: add --dtype int4 or --dtype int4-all");
    }
    if args.calib_backend != CalibBackendArg::Auto && !target.is_integer() {
        bail!(
            "--calib-backend chooses where int8 and int4 calibration statistics are collected: f16 \
             needs none"
        );
    }
    // The quantizer keeps the weights in f32 (4 times an int8 image) beside each image it builds.
    let parameters = arena::parameters(model);
    arena::check_values::<f32>(parameters.saturating_mul(2), || {
        format!("quantizing {parameters} parameters")
    })?;
    let calibration = args.calibration(model)?;
    if args.integer && calibration.is_none() {
        bail!(
            "--integer calibrates the activations' fixed-point format on text: give --calib-bytes, \
             --calib-tokens or --calib-text"
        );
    }
    let session = SessionOptions::from_config(model.config());
    // Without calibration text, smoothing cannot be measured: quantize the weights alone.
    let smoothing = match (&calibration, args.smooth) {
        (None, Smoothing::Auto) => Smoothing::Off,
        (_, smoothing) => smoothing,
    };
    if calibration.is_some() {
        // The search runs the f32 model and a candidate side by side.
        arena::check_core(&[(model, session), (model, session)])?;
    }
    let options = QuantizeOptions {
        target,
        smoothing,
        // the integer arithmetic shifts by a power of two where a float scale costs a rescale
        power_of_two_smoothing: args.integer,
        keep_f16: args.keep_f16.clone(),
        auto_keep_f16: args.auto_keep_f16,
        // compensated where there is text to fit on; f16 is not rounded to steps
        method: args
            .method
            .unwrap_or(Method::default_for(calibration.is_some() && target.is_integer())),
        group: args.group_size,
        vectors: args.vectors.unwrap_or(target.default_vectors()),
        session,
        calibration_backend: match calibration {
            // only where statistics are collected: `auto` looks for a GPU
            Some(_) if target.is_integer() => args.calib_backend.backend(),
            _ => Backend::Cpu32,
        },
    };
    let mixed = MixedPrecision {
        auto_keep_int8: args.auto_keep_int8,
        budget_bytes: args.budget_bytes,
    };
    let spinner = progress::spinner();
    let mut quantized = quantize::quantize_mixed(model, &options, &mixed, calibration.as_deref(), |step| {
        spinner.set_message(step.to_string())
    })?;
    if args.report.is_some() || args.report_png.is_some() {
        // The full report sets the image beside every precision, quantized plainly.
        quantized.report.precisions =
            compare::compare_precisions(model, &options, calibration.as_deref(), |step| {
                spinner.set_message(step.to_string())
            })?;
    }
    spinner.finish_and_clear();
    print_report(&quantized.report);
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&quantized.report)?;
        write_file(path, json.as_bytes())?;
    }
    if let Some(path) = &args.report_png {
        write_file(path, &report_png::png(&quantized.report)?)?;
    }
    match calibration.as_deref().filter(|_| args.integer) {
        Some(calibration) => integer_image(
            model,
            &quantized.image,
            calibration,
            (session, options.calibration_backend),
        ),
        None => Ok(quantized.image),
    }
}

/// What `--integer` refuses before anything is quantized: a float or int4-all target, and
/// tensors kept in f16.
fn check_integer_flags(target: Target, args: &QuantizeArgs) -> Result<()> {
    match target {
        Target::F16 => bail!("--integer needs int8 or int4 weights: give --dtype int8 or --dtype int4"),
        Target::Int4All => bail!(
            "{} (--dtype int4-all makes it int4); give --dtype int4, which keeps the embedding \
             tables and output projections int8",
            Error::BadArithmetic(ArithmeticError::NeedsInt8(TensorName::EmbLayer(0)))
        ),
        _ => {}
    }
    let kept = [
        (!args.keep_f16.is_empty(), "--keep-f16"),
        (args.auto_keep_f16 != 0, "--auto-keep-f16"),
    ];
    if let Some((_, flag)) = kept.into_iter().find(|(given, _)| *given) {
        bail!(
            "{flag} keeps tensors in f16, and integer arithmetic needs int8 or int4 weights: drop \
             it (with --dtype int4, --auto-keep-int8 keeps the costliest tensors in int8)"
        );
    }
    Ok(())
}

/// The quantized `image` made an integer image: the activations' fraction bits calibrated with
/// the full-precision `model` on `calibration` (its largest activations), written in the header
/// and checked by parsing.
fn integer_image(
    model: &Model<'_>,
    image: &[u8],
    calibration: &[u32],
    (session, backend): (SessionOptions, Backend),
) -> Result<Vec<u8>> {
    arena::check_reference(model, &session, backend, 1)?;
    let spinner = progress::spinner();
    spinner.set_message("calibrating the fixed-point format");
    let ranges = Reference::new(model, backend)?.channel_ranges(&[calibration], &session)?;
    spinner.finish_and_clear();
    let frac = IntegerModel::frac_for(&ranges);
    let largest = IntegerModel::largest_input(&ranges);
    let image = set_arithmetic(image, Arithmetic::Integer { frac })?;
    let aligned = AlignedBytes::copy_from(&image)?;
    match Model::parse(aligned.bytes()) {
        Ok(_) => {}
        Err(Error::BadArithmetic(e)) => bail!("{}{}", Error::BadArithmetic(e), integer_hint(e, frac)),
        Err(e) => return Err(e.into()),
    }
    eprintln!(
        "integer arithmetic: activations in Q{frac} (largest calibrated |x| {largest:.4}, with room \
         for eight times that)"
    );
    Ok(image)
}

/// What to change when the integer check refuses a quantized image.
fn integer_hint(error: ArithmeticError, frac: u32) -> String {
    match error {
        ArithmeticError::FloatWeights(_) => "; the quantizer kept it in f16 (--budget-bytes raises \
            tensors to f16): drop --budget-bytes, or with --dtype int4 keep the costliest tensors \
            in int8 with --auto-keep-int8"
            .into(),
        ArithmeticError::NeedsInt8(_) => "; give --dtype int8, or --dtype int4 (not int4-all), \
            which keep the embedding tables and output projections int8"
            .into(),
        ArithmeticError::Scale(_) => format!(
            "; with the calibrated Q{frac} (an embedding row's scale times 2^{frac} must be one): \
             quantize again with other calibration text, or keep float arithmetic"
        ),
        _ => "; keep float arithmetic for this model (drop --integer)".into(),
    }
}

/// The report as a table on stderr.
fn print_report(report: &quantize::Report) {
    eprintln!(
        "{:<40} {:>6} {:>9} {:>12} {:>12}  kept for",
        "tensor", "dtype", "SQNR dB", "solo Δ bits", "… in int8"
    );
    let signed = |d: Option<f64>| d.map_or(String::new(), |d| format!("{d:+.5}"));
    for t in &report.tensors {
        if t.dtype == "f32" {
            continue;
        }
        eprintln!(
            "{:<40} {:>6} {:>9.2} {:>12} {:>12}  {}",
            t.name,
            t.dtype,
            t.sqnr_db,
            signed(t.solo_delta_bits),
            signed(t.solo_delta_bits_int8),
            t.kept_for.unwrap_or("")
        );
    }
    if let Some(alpha) = report.smoothing_alpha {
        eprintln!("activation smoothing: alpha {alpha}");
    }
    for (layer, error) in report.layer_errors.iter().enumerate() {
        eprintln!("layer {layer} output: relative RMS error {error:.5}");
    }
    if let Some(backend) = report.statistics_backend {
        eprintln!("calibration statistics collected on {backend}");
    }
    if let Some((_, reference)) = report.bits_per_token.first() {
        eprintln!("calibration text ({} tokens):", report.calibration_tokens);
        for (label, bits) in &report.bits_per_token {
            eprintln!(
                "  {label:<20} {bits:.5} bits/token ({:+.3}%)",
                100.0 * (bits - reference) / reference
            );
        }
    }
    if !report.precisions.is_empty() {
        eprintln!("each precision, plain rounding:");
        let reference = report.bits_per_token.first().map(|(_, bits)| *bits);
        for p in &report.precisions {
            let change = match (p.bits_per_token, reference) {
                (Some(bits), Some(reference)) => {
                    format!(
                        "  {bits:.5} bits/token ({:+.3}%)",
                        100.0 * (bits - reference) / reference
                    )
                }
                _ => String::new(),
            };
            eprintln!(
                "  {:<20} {:>10} bytes{change}",
                p.precision.to_string(),
                p.image_bytes
            );
        }
    }
    eprintln!(
        "image {} bytes for {} parameters",
        report.image_bytes, report.parameters
    );
    if let (Some(budget), Some(smallest)) = (report.budget_bytes, report.smallest_image_bytes) {
        eprintln!("budget {budget} bytes (the smallest image: {smallest} bytes)");
    }
}

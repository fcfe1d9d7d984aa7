//! `txl`: convert Transformer-XL checkpoints to txl model images, and run them.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use txl_core::arena::ArenaLayout;
use txl_core::sampling::Sampling;
use txl_core::scoring;
use txl_core::AlignedBytes;
use txl_core::{MemDtype, MemInit, Model, PositionKeys, SessionOptions};
use txl_host_gpu::quantize::{self, QuantizeOptions, Smoothing, Target};
use txl_host_gpu::{Backend, Reference};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::{compare, generate, npy, tokens};

#[derive(Parser, Debug)]
#[command(
    name = "txl",
    version,
    about = "Transformer-XL for microcontrollers: convert checkpoints, score and generate text",
    long_about = "Transformer-XL for microcontrollers.\n\n\
        Convert a Hugging Face TransfoXL checkpoint to a txl model image, then score or \
        generate text with the same no_std engine that runs on the device.",
    after_help = "Examples:\n  \
        txl demo\n  \
        txl convert path/to/hf-checkpoint -o model.txl\n  \
        txl inspect model.txl\n  \
        txl score model.txl --bytes heldout.txt --json\n  \
        txl score model.txl --tokens ids.txt --tgt-len 1 --mem-init zeros --out logp.npy\n  \
        txl generate model.txl --prompt \"In the beginning\" --length 200\n  \
        txl quantize model.txl -o model-int8.txl --calib-bytes train.txt --report report.json\n  \
        txl compare model.txl model-int8.txl --bytes heldout.txt --mem-dtype int8\n  \
        txl eval model.txl --text heldout.txt --bytes --batch 8\n  \
        txl bench model.txl"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Convert a Hugging Face TransfoXL checkpoint to a txl model image.
    ///
    /// SRC is a directory with config.json and model.safetensors or pytorch_model.bin
    /// (or one of those files, with config.json beside it). Tied tensors are stored once.
    Convert {
        /// Checkpoint directory or weights file.
        src: PathBuf,
        /// Output image path.
        #[arg(short, long, value_name = "OUT.txl")]
        out: PathBuf,
        /// Which weights file to read when the directory has both.
        #[arg(long, value_enum, default_value_t = CheckpointFormat::Auto)]
        format: CheckpointFormat,
        /// Weight precision of the image (f16 and int8 as `txl quantize` makes them).
        #[arg(long, value_enum, default_value_t = DtypeArg::F32)]
        dtype: DtypeArg,
        #[command(flatten)]
        quantize: QuantizeArgs,
    },
    /// Quantize a model image to f16 or int8 (W8A8) weights, with a report of the cost.
    ///
    /// int8 is per-row symmetric with the clipping range searched per row. With calibration
    /// text (never the text you evaluate on), activation smoothing is tried and kept where it
    /// lowers the measured bits per token, and the report measures each precision.
    Quantize {
        /// The f32 image.
        input: PathBuf,
        /// Output image path.
        #[arg(short, long, value_name = "OUT.txl")]
        out: PathBuf,
        /// Weight precision.
        #[arg(long, value_enum, default_value_t = DtypeArg::Int8)]
        dtype: DtypeArg,
        #[command(flatten)]
        quantize: QuantizeArgs,
    },
    /// Compare a candidate image (e.g. quantized) with a reference on the same tokens.
    ///
    /// Prints bits per token of each, the relative change, mean KL(ref || cand) per token, top-1
    /// agreement and the largest change of ln p of the scored tokens. --mem-dtype applies to the
    /// candidate; the reference keeps f32 memory.
    Compare {
        /// Reference image.
        reference: PathBuf,
        /// Candidate image.
        candidate: PathBuf,
        #[command(flatten)]
        source: TokenSource,
        #[command(flatten)]
        session: SessionArgs,
        /// Print one JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Score a token sequence: log-probability of every next token, bits per token.
    ///
    /// Tokens are processed in consecutive segments of --tgt-len (the last may be shorter) with
    /// the memory carried between segments; --tgt-len 1 is token-by-token streaming.
    Score(ScoreArgs),
    /// Bits per token and perplexity over a long text, with the full-precision reference.
    ///
    /// The text is split into --batch contiguous streams scored side by side (each with its own
    /// memory, every token after the first predicted once), in segments of tgt_len.
    Eval(EvalArgs),
    /// Measure speed: tokens per second per precision, as ratios against f32 in the same run.
    ///
    /// Scores the same pseudo-random tokens with the core for the f32 image and its f16 and int8
    /// variants (quantized in memory), and with the full-precision reference (cpu32).
    Bench {
        /// Model image (f32; the f16 and int8 variants are quantized from it in memory).
        model: PathBuf,
        /// Tokens per measurement (pseudo-random ids).
        #[arg(long, default_value_t = 1024)]
        tokens: usize,
        #[command(flatten)]
        session: SessionArgs,
        /// Print one JSON object on stdout instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Continue a prompt with the model.
    Generate(GenerateArgs),
    /// Print a model image's config, tensors and the arena a session needs.
    Inspect {
        /// Model image.
        model: PathBuf,
        #[command(flatten)]
        session: SessionArgs,
    },
    /// Convert the bundled demo model, score held-out text, generate a sample, quantize to int8.
    Demo {
        /// Where to write the converted image.
        #[arg(long, default_value = "target/demo")]
        out_dir: PathBuf,
        /// Held-out bytes to score.
        #[arg(long, default_value_t = 4096)]
        limit: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DtypeArg {
    /// f32 weights (exact).
    F32,
    /// f16 weights.
    F16,
    /// int8 weights with per-row scales; activations quantized per token (W8A8).
    Int8,
}

/// Quantizer settings shared by `convert --dtype` and `quantize`.
#[derive(Args, Debug)]
struct QuantizeArgs {
    /// Calibration text, one token per byte.
    #[arg(long, value_name = "FILE", conflicts_with = "calib_tokens")]
    calib_bytes: Option<PathBuf>,
    /// Calibration text as whitespace-separated token ids.
    #[arg(long, value_name = "FILE")]
    calib_tokens: Option<PathBuf>,
    /// Use at most this many calibration tokens.
    #[arg(long, default_value_t = 16384)]
    calib_limit: usize,
    /// Activation smoothing: auto (try strengths, keep the best), off, or a strength in [0, 1].
    #[arg(long, default_value = "auto")]
    smooth: String,
    /// Keep tensors matching this pattern in f16 (`*` matches anything; repeatable).
    #[arg(long, value_name = "PATTERN")]
    keep_f16: Vec<String>,
    /// Also keep the K tensors whose int8 quantization costs most (measured on calibration text).
    #[arg(long, value_name = "K", default_value_t = 0)]
    auto_keep_f16: usize,
    /// Write the full report as JSON.
    #[arg(long, value_name = "FILE.json")]
    report: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum MemInitArg {
    /// No memory at the start (the original PyTorch code).
    Empty,
    /// mem_len all-zero hidden states (Hugging Face, the original TensorFlow code).
    Zeros,
}

/// Session settings; each defaults to the model's config.
#[derive(Args, Debug)]
struct SessionArgs {
    /// Segment length [default: the model's tgt_len].
    #[arg(long)]
    tgt_len: Option<u32>,
    /// Remembered positions [default: the model's mem_len].
    #[arg(long)]
    mem_len: Option<u32>,
    /// Largest relative distance, 0 for none [default: the model's clamp_len].
    #[arg(long)]
    clamp_len: Option<u32>,
    /// Every query sees the same number of keys [default: the model's same_length].
    #[arg(long, value_name = "true|false")]
    same_length: Option<bool>,
    /// How the memory starts.
    #[arg(long, value_enum, default_value_t = MemInitArg::Empty)]
    mem_init: MemInitArg,
    /// How the cached keys and values are stored.
    #[arg(long, value_enum, default_value_t = MemDtypeArg::F32)]
    mem_dtype: MemDtypeArg,
    /// Keep the position keys for the session, or recompute them per segment (less RAM, same bits).
    #[arg(long, value_enum, default_value_t = PositionKeysArg::Session)]
    position_keys: PositionKeysArg,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PositionKeysArg {
    /// One table per layer, computed once (fastest).
    Session,
    /// One table, recomputed for each layer of each segment (two tables of RAM instead of n_layer).
    Segment,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum MemDtypeArg {
    /// f32 (exact).
    F32,
    /// f16.
    F16,
    /// int8 with one scale per position and head.
    Int8,
}

impl From<MemDtypeArg> for MemDtype {
    fn from(arg: MemDtypeArg) -> MemDtype {
        match arg {
            MemDtypeArg::F32 => MemDtype::F32,
            MemDtypeArg::F16 => MemDtype::F16,
            MemDtypeArg::Int8 => MemDtype::Int8,
        }
    }
}

impl SessionArgs {
    fn options(&self, model: &Model<'_>) -> SessionOptions {
        let mut options = SessionOptions::from_config(model.config());
        options.tgt_len = self.tgt_len.unwrap_or(options.tgt_len);
        options.mem_len = self.mem_len.unwrap_or(options.mem_len);
        options.clamp_len = self.clamp_len.unwrap_or(options.clamp_len);
        options.same_length = self.same_length.unwrap_or(options.same_length);
        options.mem_init = match self.mem_init {
            MemInitArg::Empty => MemInit::Empty,
            MemInitArg::Zeros => MemInit::Zeros,
        };
        options.mem_dtype = self.mem_dtype.into();
        options.position_keys = match self.position_keys {
            PositionKeysArg::Session => PositionKeys::PerSession,
            PositionKeysArg::Segment => PositionKeys::PerSegment,
        };
        options
    }
}

/// Where the tokens come from.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
struct TokenSource {
    /// Whitespace-separated decimal token ids.
    #[arg(long, value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// Every byte of the file is one token id (byte-level models).
    #[arg(long, value_name = "FILE")]
    bytes: Option<PathBuf>,
}

impl TokenSource {
    fn read(&self) -> Result<Vec<u32>> {
        match (&self.tokens, &self.bytes) {
            (Some(path), _) => tokens::read_token_ids(path),
            (_, Some(path)) => tokens::read_byte_tokens(path),
            _ => bail!("give --tokens FILE or --bytes FILE"),
        }
    }
}

#[derive(Args, Debug)]
struct ScoreArgs {
    /// Model image.
    model: PathBuf,
    #[command(flatten)]
    source: TokenSource,
    #[command(flatten)]
    session: SessionArgs,
    /// Which forward pass: the core (the device engine) or the full-precision reference.
    #[arg(long, value_enum, default_value_t = BackendArg::Core)]
    backend: BackendArg,
    /// Write ln p(t[i+1] | t[..=i]) for every i as a <f4 .npy of shape (N-1,).
    #[arg(long, value_name = "LOGP.npy")]
    out: Option<PathBuf>,
    /// Keep the full log-probability rows of the first K positions (with --rows-out).
    #[arg(long, value_name = "K", requires = "rows_out")]
    rows: Option<usize>,
    /// Where to write those rows: <f4 .npy of shape (K, n_token).
    #[arg(long, value_name = "ROWS.npy", requires = "rows")]
    rows_out: Option<PathBuf>,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// Which forward pass computes the scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendArg {
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

impl BackendArg {
    fn reference(self) -> Result<Option<Backend>> {
        Ok(match self {
            BackendArg::Core => None,
            BackendArg::Cpu => Some(Backend::Cpu64),
            BackendArg::Cpu32 => Some(Backend::Cpu32),
            BackendArg::Cuda => Some(Backend::Cuda),
            BackendArg::Auto => match txl_host_gpu::cuda_available() {
                Ok(gpu) => {
                    eprintln!("using {} (CUDA)", gpu.name);
                    Some(Backend::Cuda)
                }
                Err(_) => Some(Backend::Cpu32),
            },
        })
    }
}

#[derive(Args, Debug)]
struct EvalArgs {
    /// Model image.
    model: PathBuf,
    /// The text: whitespace-separated token ids, or bytes with --bytes.
    #[arg(long, value_name = "FILE")]
    text: PathBuf,
    /// Every byte of the text is one token id (byte-level models).
    #[arg(long)]
    bytes: bool,
    /// Streams scored side by side.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Which forward pass.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    #[command(flatten)]
    session: SessionArgs,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct GenerateArgs {
    /// Model image.
    model: PathBuf,
    /// Prompt text, one token per byte (byte-level models).
    #[arg(long, conflicts_with = "prompt_tokens")]
    prompt: Option<String>,
    /// Prompt as whitespace-separated token ids.
    #[arg(long, value_name = "IDS")]
    prompt_tokens: Option<String>,
    /// Tokens to generate.
    #[arg(long, default_value_t = 200)]
    length: usize,
    /// Sampling temperature; 0 picks the most likely token every time.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print token ids instead of bytes as text.
    #[arg(long)]
    ids: bool,
    #[command(flatten)]
    session: SessionArgs,
}

fn main() {
    if let Err(error) = run(Cli::parse()) {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Convert {
            src,
            out,
            format,
            dtype,
            quantize,
        } => convert(&src, &out, format, dtype, &quantize).map(|_| ()),
        Command::Quantize {
            input,
            out,
            dtype,
            quantize,
        } => {
            let bytes = load(&input)?;
            let model = parse_model(&bytes, &input)?;
            let image = quantize_image(&model, dtype, &quantize)?;
            write_file(&out, &image)
        }
        Command::Compare {
            reference,
            candidate,
            source,
            session,
            json,
        } => compare_images(&reference, &candidate, &source, &session, json),
        Command::Score(args) => score(&args),
        Command::Eval(args) => eval(&args),
        Command::Bench {
            model,
            tokens,
            session,
            json,
        } => bench(&model, tokens, &session, json),
        Command::Generate(args) => generate_text(&args),
        Command::Inspect { model, session } => inspect(&model, &session),
        Command::Demo { out_dir, limit } => demo(&out_dir, limit),
    }
}

fn convert(
    src: &Path,
    out: &Path,
    format: CheckpointFormat,
    dtype: DtypeArg,
    quantize: &QuantizeArgs,
) -> Result<usize> {
    let checkpoint = load_hf_checkpoint(src, format, std::io::stderr().is_terminal())?;
    let mut image = checkpoint.to_image()?;
    let aligned = AlignedBytes::copy_from(&image)?;
    // Check what we wrote reads back before anyone flashes it.
    let model = parse_model(&aligned, out)?;
    if dtype != DtypeArg::F32 {
        image = quantize_image(&model, dtype, quantize)?;
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

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn quantize_image(model: &Model<'_>, dtype: DtypeArg, args: &QuantizeArgs) -> Result<Vec<u8>> {
    let target = match dtype {
        DtypeArg::F32 => bail!("the quantizer makes f16 or int8 images; f32 is what convert writes"),
        DtypeArg::F16 => Target::F16,
        DtypeArg::Int8 => Target::Int8,
    };
    let smoothing = match args.smooth.as_str() {
        "auto" => Smoothing::Auto,
        "off" => Smoothing::Off,
        alpha => match alpha.parse::<f32>() {
            Ok(a) if (0.0..=1.0).contains(&a) => Smoothing::Alpha(a),
            _ => bail!("--smooth takes auto, off or a strength in [0, 1], not {alpha:?}"),
        },
    };
    let mut calibration = match (&args.calib_bytes, &args.calib_tokens) {
        (Some(path), _) => Some(tokens::read_byte_tokens(path)?),
        (_, Some(path)) => Some(tokens::read_token_ids(path)?),
        _ => None,
    };
    if let Some(tokens) = &mut calibration {
        tokens.truncate(args.calib_limit);
    }
    // Without calibration text, smoothing cannot be measured: quantize the weights alone.
    let smoothing = if calibration.is_none() && smoothing == Smoothing::Auto {
        Smoothing::Off
    } else {
        smoothing
    };
    let options = QuantizeOptions {
        target,
        smoothing,
        keep_f16: args.keep_f16.clone(),
        auto_keep_f16: args.auto_keep_f16,
        session: SessionOptions::from_config(model.config()),
    };
    let spinner = if std::io::stderr().is_terminal() {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let quantized = quantize::quantize(model, &options, calibration.as_deref(), |step| {
        spinner.set_message(step.to_string())
    })?;
    spinner.finish_and_clear();
    print_report(&quantized.report);
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&quantized.report)?;
        write_file(path, json.as_bytes())?;
    }
    Ok(quantized.image)
}

fn print_report(report: &quantize::Report) {
    eprintln!(
        "{:<40} {:>6} {:>9} {:>12}",
        "tensor", "dtype", "SQNR dB", "solo Δ bits"
    );
    for t in &report.tensors {
        if t.dtype == "f32" {
            continue;
        }
        let solo = t.solo_delta_bits.map_or(String::new(), |d| format!("{d:+.5}"));
        eprintln!("{:<40} {:>6} {:>9.2} {:>12}", t.name, t.dtype, t.sqnr_db, solo);
    }
    if let Some(alpha) = report.smoothing_alpha {
        eprintln!("activation smoothing: alpha {alpha}");
    }
    for (layer, error) in report.layer_errors.iter().enumerate() {
        eprintln!("layer {layer} output: relative RMS error {error:.5}");
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
    eprintln!(
        "image {} bytes for {} parameters",
        report.image_bytes, report.parameters
    );
}

fn compare_images(
    reference: &Path,
    candidate: &Path,
    source: &TokenSource,
    session: &SessionArgs,
    json: bool,
) -> Result<()> {
    let ref_bytes = load(reference)?;
    let cand_bytes = load(candidate)?;
    let ref_model = parse_model(&ref_bytes, reference)?;
    let cand_model = parse_model(&cand_bytes, candidate)?;
    let tokens = source.read()?;
    if tokens.len() < 2 {
        bail!("need at least 2 tokens to compare, got {}", tokens.len());
    }
    let cand_options = session.options(&ref_model);
    let ref_options = SessionOptions {
        mem_dtype: MemDtype::F32,
        ..cand_options
    };
    let bar = progress_bar(tokens.len());
    let result = compare::compare(
        (&ref_model, ref_options),
        (&cand_model, cand_options),
        &tokens,
        |done| bar.set_position(done as u64),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        println!("tokens                {}", result.tokens);
        println!("reference bits/token  {:.6}", result.reference_bits_per_token);
        println!("candidate bits/token  {:.6}", result.candidate_bits_per_token);
        println!("relative change       {:+.4}%", 100.0 * result.relative_delta);
        println!("mean KL(ref || cand)  {:.3e} nats/token", result.mean_kl);
        println!("top-1 agreement       {:.4}%", 100.0 * result.top1_agreement);
        println!("max |Δ ln p|          {:.3e}", result.max_abs_delta_logp);
    }
    Ok(())
}

fn load(path: &Path) -> Result<AlignedBytes> {
    txl_tools::image_file::read_image(path)
}

fn parse_model<'a>(bytes: &'a AlignedBytes, path: &Path) -> Result<Model<'a>> {
    Model::parse(bytes.bytes()).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn progress_bar(total: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tokens  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

fn score(args: &ScoreArgs) -> Result<()> {
    let bytes = load(&args.model)?;
    let model = parse_model(&bytes, &args.model)?;
    let tokens = args.source.read()?;
    if tokens.len() < 2 {
        bail!("need at least 2 tokens to score, got {}", tokens.len());
    }
    let options = args.session.options(&model);
    let bar = progress_bar(tokens.len());
    let started = Instant::now();
    let scores = scoring::score(&model, &tokens, options, args.rows.unwrap_or(0), |done| {
        bar.set_position(done as u64)
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    if let Some(path) = &args.out {
        npy::write_f32(path, &[scores.logp.len()], &scores.logp)?;
    }
    if let Some(path) = &args.rows_out {
        npy::write_f32(
            path,
            &[scores.rows_kept, model.config().n_token as usize],
            &scores.rows,
        )?;
    }
    let nll = scores.nll();
    let summary = serde_json::json!({
        "tokens": tokens.len(),
        "predicted": scores.logp.len(),
        "nll": nll,
        "bits_per_token": scores.bits_per_token(),
        "ppl": nll.exp(),
        "digest": format!("{:#010x}", scores.digest()),
        "tgt_len": options.tgt_len,
        "mem_len": options.mem_len,
        "clamp_len": options.clamp_len,
        "same_length": options.same_length,
        "mem_init": match options.mem_init { MemInit::Empty => "empty", MemInit::Zeros => "zeros" },
        "tokens_per_second": tokens.len() as f64 / seconds.max(1e-9),
    });
    if args.json {
        println!("{summary}");
    } else {
        println!(
            "tokens {}  nll {:.6} nats  bits/token {:.6}  ppl {:.4}  digest {:#010x}  ({:.0} tokens/s)",
            tokens.len(),
            nll,
            scores.bits_per_token(),
            nll.exp(),
            scores.digest(),
            tokens.len() as f64 / seconds.max(1e-9)
        );
    }
    Ok(())
}

fn eval(args: &EvalArgs) -> Result<()> {
    let bytes = load(&args.model)?;
    let model = parse_model(&bytes, &args.model)?;
    let tokens = if args.bytes {
        tokens::read_byte_tokens(&args.text)?
    } else {
        tokens::read_token_ids(&args.text)?
    };
    if tokens.len() < 2 {
        bail!("need at least 2 tokens to evaluate, got {}", tokens.len());
    }
    let options = args.session.options(&model);
    let bar = progress_bar(tokens.len());
    let report = match args.backend.reference()? {
        Some(backend) => {
            let mut reference = Reference::new(&model, backend)?;
            txl_host_gpu::eval(&mut reference, &tokens, &options, args.batch.max(1), |done, _| {
                bar.set_position(done as u64)
            })?
        }
        None => bail!("eval runs the full-precision reference; use `txl score --backend core` for the core"),
    };
    bar.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "tokens": report.tokens,
                "predicted": report.predicted,
                "streams": report.streams,
                "nll": report.nll,
                "bits_per_token": report.bits_per_token,
                "ppl": report.ppl,
                "seconds": report.seconds,
                "tokens_per_second": report.tokens_per_second,
            })
        );
    } else {
        println!(
            "tokens {}  streams {}  nll {:.6} nats  bits/token {:.6}  ppl {:.4}  {:.0} tokens/s",
            report.tokens,
            report.streams,
            report.nll,
            report.bits_per_token,
            report.ppl,
            report.tokens_per_second
        );
    }
    Ok(())
}

fn bench(path: &Path, count: usize, session: &SessionArgs, json: bool) -> Result<()> {
    let bytes = load(path)?;
    let model = parse_model(&bytes, path)?;
    let options = session.options(&model);
    let n_token = model.config().n_token;
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let tokens: Vec<u32> = (0..count.max(2))
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n_token as u64) as u32
        })
        .collect();
    let quantized = |target| quantize::quantize_weights(&model, target);
    let variants = [
        (
            "f32 weights, f32 memory",
            model.image().bytes().to_vec(),
            MemDtype::F32,
        ),
        ("f16 weights, f16 memory", quantized(Target::F16)?, MemDtype::F16),
        (
            "int8 weights, f32 memory",
            quantized(Target::Int8)?,
            MemDtype::F32,
        ),
        (
            "int8 weights, int8 memory",
            quantized(Target::Int8)?,
            MemDtype::Int8,
        ),
    ];
    let mut rows = Vec::new();
    for (label, image, mem_dtype) in &variants {
        let aligned = AlignedBytes::copy_from(image)?;
        let variant = parse_model(&aligned, path)?;
        let started = Instant::now();
        scoring::score(
            &variant,
            &tokens,
            SessionOptions {
                mem_dtype: *mem_dtype,
                ..options
            },
            0,
            |_| {},
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        rows.push((
            label.to_string(),
            image.len(),
            tokens.len() as f64 / started.elapsed().as_secs_f64(),
        ));
    }
    let mut reference = Reference::new(&model, Backend::Cpu32)?;
    let started = Instant::now();
    reference.score(&tokens, &options, 0, |_| {})?;
    rows.push((
        "reference cpu32 (f32 weights)".to_string(),
        model.image().bytes().len(),
        tokens.len() as f64 / started.elapsed().as_secs_f64(),
    ));
    let baseline = rows[0].2;
    if json {
        let items: Vec<serde_json::Value> = rows
            .iter()
            .map(|(label, image_bytes, rate)| {
                serde_json::json!({
                    "variant": label, "image_bytes": image_bytes,
                    "tokens_per_second": rate, "ratio_to_f32": rate / baseline,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "tokens": tokens.len(), "tgt_len": options.tgt_len, "mem_len": options.mem_len, "results": items })
        );
    } else {
        println!(
            "{} tokens, tgt_len {}, mem_len {}, one thread:",
            tokens.len(),
            options.tgt_len,
            options.mem_len
        );
        println!(
            "{:<32} {:>12} {:>12} {:>10}",
            "variant", "image bytes", "tokens/s", "vs f32"
        );
        for (label, image_bytes, rate) in &rows {
            println!(
                "{label:<32} {image_bytes:>12} {rate:>12.0} {:>9.2}x",
                rate / baseline
            );
        }
    }
    Ok(())
}

fn generate_text(args: &GenerateArgs) -> Result<()> {
    let bytes = load(&args.model)?;
    let model = parse_model(&bytes, &args.model)?;
    let prompt: Vec<u32> = match (&args.prompt, &args.prompt_tokens) {
        (Some(text), _) => text.bytes().map(u32::from).collect(),
        (_, Some(ids)) => ids
            .split_whitespace()
            .map(|w| w.parse().with_context(|| format!("bad token id {w:?}")))
            .collect::<Result<_>>()?,
        _ => bail!("give --prompt TEXT or --prompt-tokens IDS"),
    };
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    let sampling = if args.temperature > 0.0 {
        Sampling::Temperature {
            temperature: args.temperature,
            seed: args.seed,
        }
    } else {
        Sampling::Greedy
    };
    let tokens = generate::generate(
        &model,
        args.session.options(&model),
        &prompt,
        args.length,
        sampling,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.ids {
        let ids: Vec<String> = tokens.iter().map(u32::to_string).collect();
        println!("{}", ids.join(" "));
    } else {
        print!("{}", args.prompt.as_deref().unwrap_or(""));
        println!("{}", bytes_as_text(&tokens));
    }
    Ok(())
}

fn bytes_as_text(tokens: &[u32]) -> String {
    let bytes: Vec<u8> = tokens.iter().map(|&t| t.min(255) as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn inspect(path: &Path, session: &SessionArgs) -> Result<()> {
    let bytes = load(path)?;
    let model = parse_model(&bytes, path)?;
    let c = model.config();
    println!("image         {}", path.display());
    println!("image bytes   {}", bytes.bytes().len());
    println!(
        "model         n_layer {}  d_model {}  d_embed {}  n_head {}  d_head {}  d_inner {}",
        c.n_layer, c.d_model, c.d_embed, c.n_head, c.d_head, c.d_inner
    );
    println!(
        "vocabulary    n_token {}  cutoffs {:?}  div_val {}  tie_weight {}  tie_projs {:#b}",
        c.n_token,
        c.cutoffs(),
        c.div_val,
        c.tie_weight,
        c.tie_projs
    );
    println!(
        "layers        pre_lnorm {}  untie_r {}  layer_norm_epsilon {:e}",
        c.pre_lnorm, c.untie_r, c.layer_norm_epsilon
    );
    let options = session.options(&model);
    println!(
        "session       tgt_len {}  mem_len {}  clamp_len {}  same_length {}",
        options.tgt_len, options.mem_len, options.clamp_len, options.same_length
    );
    let layout = ArenaLayout::new(c, &options).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("arena bytes   {}", layout.total_bytes());
    println!("  memory (keys + values)   {}", layout.memory_bytes());
    println!("  position keys            {}", layout.position_key_bytes());
    println!("  activations              {}", layout.activation_bytes());
    println!("  scratch                  {}", layout.scratch_bytes());
    let image = model.image();
    let mut parameters = 0usize;
    println!("tensors       {}", image.layout().count());
    let mut index = 0;
    txl_core::tensors::for_each_tensor(c, |name, shape| {
        let entry = image.entry(index);
        parameters += shape.len();
        println!(
            "  {:<40} {:?} {:?} @ {}",
            name.to_string(),
            entry.dtype,
            shape,
            entry.offset
        );
        index += 1;
    });
    println!("parameters    {parameters}");
    Ok(())
}

fn no_quantizer() -> QuantizeArgs {
    QuantizeArgs {
        calib_bytes: None,
        calib_tokens: None,
        calib_limit: 0,
        smooth: "off".into(),
        keep_f16: Vec::new(),
        auto_keep_f16: 0,
        report: None,
    }
}

fn demo(out_dir: &Path, limit: usize) -> Result<()> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/demo");
    let image_path = out_dir.join("demo.txl");
    println!("1. convert the bundled checkpoint ({})", fixtures.display());
    let image_bytes = convert(
        &fixtures,
        &image_path,
        CheckpointFormat::Auto,
        DtypeArg::F32,
        &no_quantizer(),
    )?;
    println!("   -> {} ({image_bytes} bytes)", image_path.display());

    let bytes = load(&image_path)?;
    let model = parse_model(&bytes, &image_path)?;
    let options = SessionOptions::from_config(model.config());
    let arena = txl_core::Session::arena_bytes(&model, &options).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "   tgt_len {}  mem_len {}  arena {} bytes",
        options.tgt_len, options.mem_len, arena
    );

    let heldout = fixtures.join("heldout.txt");
    let mut tokens = tokens::read_byte_tokens(&heldout)?;
    tokens.truncate(limit);
    println!(
        "2. score {} bytes of held-out text ({})",
        tokens.len(),
        heldout.display()
    );
    let started = Instant::now();
    let scores = scoring::score(&model, &tokens, options, 0, |_| {}).map_err(|e| anyhow::anyhow!("{e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "   {:.4} bits per byte (ppl {:.3}), {:.0} tokens/s on this machine",
        scores.bits_per_token(),
        scores.nll().exp(),
        tokens.len() as f64 / seconds
    );

    let prompt = "And God said";
    println!("3. generate 240 bytes after {prompt:?} (temperature 0.8, seed 1)");
    let prompt_tokens: Vec<u32> = prompt.bytes().map(u32::from).collect();
    let sampling = Sampling::Temperature {
        temperature: 0.8,
        seed: 1,
    };
    let generated = generate::generate(&model, options, &prompt_tokens, 240, sampling)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("---\n{prompt}{}\n---", bytes_as_text(&generated));

    println!("4. quantize to int8 (W8A8, calibrated on 4096 bytes of training text) and compare");
    let mut calibration = tokens::read_byte_tokens(&fixtures.join("calib.txt"))?;
    calibration.truncate(4096);
    let quantize_options = QuantizeOptions {
        smoothing: Smoothing::Auto,
        ..QuantizeOptions::weights_only(Target::Int8, options)
    };
    let int8 = quantize::quantize(&model, &quantize_options, Some(&calibration), |_| {})?;
    let int8_path = out_dir.join("demo-int8.txl");
    write_file(&int8_path, &int8.image)?;
    let int8_bytes = AlignedBytes::copy_from(&int8.image)?;
    let int8_model = parse_model(&int8_bytes, &int8_path)?;
    for mem_dtype in [MemDtype::F32, MemDtype::Int8] {
        let candidate = SessionOptions { mem_dtype, ..options };
        let c = compare::compare((&model, options), (&int8_model, candidate), &tokens, |_| {})
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        println!(
            "   int8 weights, {:<4} memory: {:.4} bits per byte ({:+.3}%), top-1 agreement {:.2}%",
            format!("{mem_dtype:?}").to_lowercase(),
            c.candidate_bits_per_token,
            100.0 * c.relative_delta,
            100.0 * c.top1_agreement
        );
    }
    let arena_int8 = txl_core::Session::arena_bytes(
        &int8_model,
        &SessionOptions {
            mem_dtype: MemDtype::Int8,
            ..options
        },
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "   -> {} ({} bytes, {:.1}x smaller; arena with int8 memory {} bytes)",
        int8_path.display(),
        int8.image.len(),
        image_bytes as f64 / int8.image.len() as f64,
        arena_int8
    );
    Ok(())
}

//! `txl`: convert Transformer-XL checkpoints to txl model images, and run them.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use txl_core::arena::ArenaLayout;
use txl_core::sampling::Sampling;
use txl_core::{MemInit, Model, SessionOptions};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::model_file::AlignedBytes;
use txl_tools::{generate, npy, scoring};

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
        txl generate model.txl --prompt \"In the beginning\" --length 200"
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
        #[arg(long, value_enum, default_value_t = FormatArg::Auto)]
        format: FormatArg,
    },
    /// Score a token sequence: log-probability of every next token, bits per token.
    ///
    /// Tokens are processed in consecutive segments of --tgt-len (the last may be shorter) with
    /// the memory carried between segments; --tgt-len 1 is token-by-token streaming.
    Score(ScoreArgs),
    /// Continue a prompt with the model.
    Generate(GenerateArgs),
    /// Print a model image's config, tensors and the arena a session needs.
    Inspect {
        /// Model image.
        model: PathBuf,
        #[command(flatten)]
        session: SessionArgs,
    },
    /// Convert the bundled demo model, score held-out text and generate a sample.
    Demo {
        /// Where to write the converted image.
        #[arg(long, default_value = "target/demo")]
        out_dir: PathBuf,
        /// Held-out bytes to score.
        #[arg(long, default_value_t = 4096)]
        limit: usize,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    /// model.safetensors if present, else pytorch_model.bin.
    Auto,
    /// model.safetensors.
    Safetensors,
    /// pytorch_model.bin (zip + pickle; read without executing anything).
    Bin,
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
            (Some(path), _) => scoring::read_token_ids(path),
            (_, Some(path)) => scoring::read_byte_tokens(path),
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
        Command::Convert { src, out, format } => convert(&src, &out, format).map(|_| ()),
        Command::Score(args) => score(&args),
        Command::Generate(args) => generate_text(&args),
        Command::Inspect { model, session } => inspect(&model, &session),
        Command::Demo { out_dir, limit } => demo(&out_dir, limit),
    }
}

fn convert(src: &Path, out: &Path, format: FormatArg) -> Result<usize> {
    let format = match format {
        FormatArg::Auto => CheckpointFormat::Auto,
        FormatArg::Safetensors => CheckpointFormat::Safetensors,
        FormatArg::Bin => CheckpointFormat::PytorchBin,
    };
    let checkpoint = load_hf_checkpoint(src, format, std::io::stderr().is_terminal())?;
    let image = checkpoint.to_image()?;
    // Check what we wrote reads back before anyone flashes it.
    Model::parse(AlignedBytes::new(&image).bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(out, &image).with_context(|| format!("writing {}", out.display()))?;
    eprintln!(
        "wrote {} ({} bytes, {} tensors)",
        out.display(),
        image.len(),
        checkpoint.tensors.len()
    );
    Ok(image.len())
}

fn load(path: &Path) -> Result<AlignedBytes> {
    AlignedBytes::read(path)
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

fn demo(out_dir: &Path, limit: usize) -> Result<()> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/demo");
    let image_path = out_dir.join("demo.txl");
    println!("1. convert the bundled checkpoint ({})", fixtures.display());
    let image_bytes = convert(&fixtures, &image_path, FormatArg::Auto)?;
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
    let mut tokens = scoring::read_byte_tokens(&heldout)?;
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
    Ok(())
}

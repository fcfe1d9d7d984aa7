//! `txl bench`: tokens per second per precision, as ratios against f32 in the same run, and
//! multiply-accumulates per second against the machine's limit measured in the same run
//! ([`limit`]); or (`--recompute`) the paper's Table 9: the cached memory against recomputing
//! the context.

mod limit;

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use txl_core::rng::Rng;

use anyhow::{bail, Result};
use serde::Serialize;
use txl_core::image::Arithmetic;
use txl_core::{scoring, AlignedBytes, Config, MemDtype, MemInit, Model, OptionWord, SessionOptions};
use txl_host_gpu::quantize::{self, Target};
use txl_host_gpu::{random_image, Backend, RandomInit, Reference};

use self::limit::Limits;
use super::arena;
use super::args::SessionArgs;
use crate::image_file::{parse_model, read_image};

pub const EXAMPLES: &str = "Examples:\n  \
    txl bench model.txl\n  \
    txl bench model.txl --tokens 4096 --tgt-len 1 --json\n  \
    txl bench model.txl --recompute --lengths 800,1800 --tokens 2\n  \
    txl bench --recompute --enwik8-base --tokens 1";

/// The paper's Table 9 (Dai et al., 2019): attention length and how many times slower the
/// vanilla Transformer predicts a token than Transformer-XL with its cache.
const PAPER_TABLE_9: [(u32, f64); 4] = [(800, 363.0), (1800, 773.0), (2800, 1409.0), (3800, 1874.0)];

/// The cached model predicts at least this many tokens per length: each takes a fraction of a
/// vanilla prediction, and more of them give a steadier time.
const MIN_CACHED_TOKENS: usize = 64;

/// Arguments of `txl bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model image (f32; the f16 and int8 variants are quantized from it in memory).
    #[arg(required_unless_present = "enwik8_base")]
    pub model: Option<PathBuf>,
    /// Tokens per measurement (pseudo-random ids); with --recompute, the predictions each
    /// vanilla measurement makes [default: 1024; 4 with --recompute].
    #[arg(long)]
    pub tokens: Option<usize>,
    /// Instead of the precisions, the paper's Table 9: for each attention length L, the time
    /// to predict a token with the cached memory of L positions (tgt_len 1, mem_len L, the
    /// memory full from the start) against a vanilla model that recomputes a window of L tokens
    /// from scratch for each prediction (the same weights, tgt_len L, no memory), and their
    /// ratio next to the paper's. The cached model predicts at least 64 tokens.
    #[arg(long)]
    pub recompute: bool,
    /// The attention lengths L of --recompute, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [800, 1800, 2800, 3800], requires = "recompute")]
    pub lengths: Vec<u32>,
    /// Time a model shaped like the paper's enwik8 base (12 layers, d_model 512, 8 heads of
    /// 64, d_inner 2048, 204 byte tokens; 41 M parameters, 164 MB in f32) with random weights
    /// instead of MODEL: one whose weights do not fit in a CPU's caches.
    #[arg(long, conflicts_with = "model")]
    pub enwik8_base: bool,
    #[command(flatten)]
    pub session: SessionArgs,
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `txl bench --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    /// The image's path, or the random model of `--enwik8-base`.
    model: String,
    /// Tokens per measurement.
    tokens: usize,
    tgt_len: u32,
    mem_len: u32,
    clamp_len: u32,
    same_length: bool,
    mem_init: &'static str,
    position_keys: &'static str,
    /// Multiply-accumulates of the core's forward pass per token scored, with these options
    /// (`txl_core::macs`): the linear layers, attention and the output layer.
    macs_per_token: f64,
    /// What the core's f32 and int8 kernels do with their weights in the first-level cache (the
    /// f32 ones for a segment's positions also in the second-level cache), measured before the
    /// variants run.
    limits: LimitsReport,
    /// The instruction-set extensions this CPU has that the core's kernels choose from at run
    /// time (`txl_core::kernels::features::run_time_extensions`).
    extensions: Vec<&'static str>,
    /// One measurement per variant, f32 first.
    results: Vec<Measurement>,
}

/// [`Limits`] in G multiply-accumulates a second.
#[derive(Debug, Serialize)]
struct LimitsReport {
    f32_gmacs_per_second: f64,
    int8_gmacs_per_second: f64,
    /// int8 with 64 positions a pass (AMX, or AVX-512 VNNI eight at a time, where the machine
    /// has it, else `int8`'s kernels).
    int8_segments_gmacs_per_second: f64,
    fast_f32_gmacs_per_second: f64,
}

/// One variant's speed.
#[derive(Debug, Serialize)]
struct Measurement {
    /// What ran: weights, memory, engine.
    variant: String,
    /// Size of the variant's image.
    image_bytes: usize,
    tokens_per_second: f64,
    /// `tokens_per_second` over the f32 variant's.
    ratio_to_f32: f64,
    /// `tokens_per_second × macs_per_token`, in G multiply-accumulates a second.
    gmacs_per_second: f64,
    /// `gmacs_per_second` over the limit of the variant's kernels: int8's for int8 and int4
    /// weights (int8 in segments' for int8 weights when `tgt_len` is 3 or more, where a
    /// segment's positions go through the linear layers together), fast f32's for the fast f32 variant, f32's for f32 and f16 weights and the
    /// reference.
    percent_of_limit: f64,
}

/// Which of the [`Limits`] a variant's speed is held against.
#[derive(Debug, Clone, Copy)]
enum Kernels {
    F32,
    Int8,
    Int4,
    FastF32,
}

impl Args {
    /// Measures; prints the table (or `--json`) on `out`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        if self.recompute {
            return self.run_recompute(out);
        }
        if let Some(dtype) = self.session.mem_dtype.filter(|&d| d != MemDtype::F32) {
            bail!(
                "--mem-dtype {dtype} does not apply to bench, which measures f32, f16 and int8 memory in its variants"
            );
        }
        let (bytes, name) = self.model_bytes()?;
        let model = Model::parse(bytes.bytes()).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        if let Arithmetic::Integer { frac } = model.image().arithmetic() {
            bail!(
                "{name} is an integer image (activations in Q{frac}): bench measures a float image \
                 and the precisions it quantizes from it; give the float image, or time this one \
                 with --recompute or `txl score`"
            );
        }
        let options = self.session.options(&model)?;
        let requested = self.tokens.unwrap_or(1024);
        let count = requested.max(2);
        let what = || format!("--tokens {requested}");
        // Each token, and its scores: an f32 from the core, an f64 from the reference.
        arena::check_values::<(u32, f32, f64)>(count, what)?;
        let mut tokens = arena::reserve(count, what)?;
        tokens.extend(pseudo_random_tokens(count, model.config().n_token));
        let f32_options = SessionOptions {
            mem_dtype: MemDtype::F32,
            ..options
        };
        arena::check_core(&[(&model, f32_options)])?;
        arena::check_reference(&model, &options, Backend::Cpu32, 1)?;

        let f16 = quantize::quantize_weights(&model, Target::F16)?;
        let int8 = quantize::quantize_weights(&model, Target::Int8)?;
        let int4 = quantize::quantize_weights(&model, Target::Int4)?;
        let variants: [(&str, &[u8], MemDtype, Kernels); 6] = [
            (
                "f32 weights, f32 memory",
                model.image().bytes(),
                MemDtype::F32,
                Kernels::F32,
            ),
            (
                "f32 weights, fast f32 (FMA)",
                model.image().bytes(),
                MemDtype::F32,
                Kernels::FastF32,
            ),
            ("f16 weights, f16 memory", &f16, MemDtype::F16, Kernels::F32),
            ("int8 weights, f32 memory", &int8, MemDtype::F32, Kernels::Int8),
            ("int8 weights, int8 memory", &int8, MemDtype::Int8, Kernels::Int8),
            ("int4 layers, int8 memory", &int4, MemDtype::Int8, Kernels::Int4),
        ];
        let limits = Limits::measure();
        let mut rows = Vec::new();
        for (label, image, mem_dtype, kernels) in &variants {
            let aligned = AlignedBytes::copy_from(image)?;
            let mut variant = Model::parse(aligned.bytes()).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            variant.set_fast_f32(matches!(kernels, Kernels::FastF32));
            let variant_options = SessionOptions {
                mem_dtype: *mem_dtype,
                ..options
            };
            let started = Instant::now();
            scoring::score(&variant, &tokens, variant_options, 0, |_| {})
                .map_err(arena::explain(&variant_options))?;
            rows.push((
                label.to_string(),
                image.len(),
                rate(tokens.len(), started),
                *kernels,
            ));
        }
        let mut reference = Reference::new(&model, Backend::Cpu32)?;
        let started = Instant::now();
        reference.score(&tokens, &options, 0, |_| {})?;
        rows.push((
            "reference cpu32 (f32 weights)".to_string(),
            model.image().bytes().len(),
            rate(tokens.len(), started),
            Kernels::F32,
        ));

        let macs_per_token =
            txl_core::macs::score_macs(model.config(), &options, tokens.len()) as f64 / tokens.len() as f64;
        let baseline = rows[0].2;
        let report = Report {
            model: name,
            tokens: tokens.len(),
            tgt_len: options.tgt_len,
            mem_len: options.mem_len,
            clamp_len: options.clamp_len,
            same_length: options.same_length,
            mem_init: options.mem_init.word(),
            position_keys: options.position_keys.word(),
            macs_per_token,
            extensions: txl_core::kernels::features::run_time_extensions(),
            limits: LimitsReport {
                f32_gmacs_per_second: limits.f32_macs_per_second / 1e9,
                int8_gmacs_per_second: limits.int8_macs_per_second / 1e9,
                int8_segments_gmacs_per_second: limits.int8_segments_macs_per_second / 1e9,
                fast_f32_gmacs_per_second: limits.fast_f32_macs_per_second / 1e9,
            },
            results: rows
                .into_iter()
                .map(|(variant, image_bytes, tokens_per_second, kernels)| {
                    let macs_per_second = tokens_per_second * macs_per_token;
                    let limit = match kernels {
                        Kernels::F32 => limits.f32_macs_per_second,
                        // three positions or more go through the linear layers together
                        Kernels::Int8 if options.tgt_len >= 3 => limits.int8_segments_macs_per_second,
                        Kernels::Int8 | Kernels::Int4 => limits.int8_macs_per_second,
                        Kernels::FastF32 => limits.fast_f32_macs_per_second,
                    };
                    Measurement {
                        variant,
                        image_bytes,
                        tokens_per_second,
                        ratio_to_f32: tokens_per_second / baseline,
                        gmacs_per_second: macs_per_second / 1e9,
                        percent_of_limit: 100.0 * macs_per_second / limit,
                    }
                })
                .collect(),
        };
        if self.json {
            writeln!(out, "{}", serde_json::to_string(&report)?)?;
        } else {
            print_table(&report, out)?;
        }
        Ok(())
    }
}

/// `count` token ids below `n_token` from a fixed seed, the same every run.
fn pseudo_random_tokens(count: usize, n_token: u32) -> impl Iterator<Item = u32> {
    let mut rng = Rng::new(1);
    (0..count).map(move |_| rng.below(u64::from(n_token)) as u32)
}

/// Tokens per second since `started`.
fn rate(tokens: usize, started: Instant) -> f64 {
    tokens as f64 / started.elapsed().as_secs_f64()
}

fn print_table(report: &Report, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "{} tokens, tgt_len {}, mem_len {}, one thread, {:.0} multiply-accumulates per token:",
        report.tokens, report.tgt_len, report.mem_len, report.macs_per_token
    )?;
    let extensions = if report.extensions.is_empty() {
        "none (portable code)".to_string()
    } else {
        report.extensions.join(", ")
    };
    writeln!(
        out,
        "extensions the kernels choose from at run time: {extensions}"
    )?;
    writeln!(
        out,
        "limit (the core's kernels, weights in the first- or second-level cache): f32 {:.1} GMAC/s, int8 {:.1} GMAC/s ({:.1} in segments), fast f32 {:.1} GMAC/s",
        report.limits.f32_gmacs_per_second,
        report.limits.int8_gmacs_per_second,
        report.limits.int8_segments_gmacs_per_second,
        report.limits.fast_f32_gmacs_per_second
    )?;
    writeln!(
        out,
        "{:<32} {:>12} {:>12} {:>10} {:>8} {:>11}",
        "variant", "image bytes", "tokens/s", "vs f32", "GMAC/s", "% of limit"
    )?;
    for m in &report.results {
        writeln!(
            out,
            "{:<32} {:>12} {:>12.0} {:>9.2}x {:>8.2} {:>10.0}%",
            m.variant,
            m.image_bytes,
            m.tokens_per_second,
            m.ratio_to_f32,
            m.gmacs_per_second,
            m.percent_of_limit
        )?;
    }
    Ok(())
}

/// What `txl bench --recompute --json` prints.
#[derive(Debug, Serialize)]
struct RecomputeReport {
    /// Which model ran: the image's path, or `enwik8-base (random weights)`.
    model: String,
    n_layer: u32,
    d_model: u32,
    n_head: u32,
    d_head: u32,
    d_inner: u32,
    n_token: u32,
    /// Tokens each vanilla measurement predicts.
    tokens: usize,
    /// Tokens each cached measurement predicts.
    cached_tokens: usize,
    /// One row per attention length, in the order given.
    lengths: Vec<RecomputeRow>,
}

/// One attention length of Table 9.
#[derive(Debug, Serialize)]
struct RecomputeRow {
    /// Attention length L.
    length: u32,
    /// Seconds per predicted token with the cached memory of L positions.
    cached_seconds_per_token: f64,
    /// Seconds per predicted token recomputing a window of L tokens.
    vanilla_seconds_per_token: f64,
    /// `vanilla / cached`.
    speedup: f64,
    /// The paper's figure for this length, if it has one.
    paper_speedup: Option<f64>,
}

/// The paper's enwik8 base model (Dai et al., 2019, and its released configuration): 12 layers,
/// d_model 512, 8 heads of 64, d_inner 2048, a full softmax over 204 byte tokens.
fn enwik8_base() -> Config {
    Config {
        n_token: 204,
        d_model: 512,
        d_embed: 512,
        n_head: 8,
        d_head: 64,
        d_inner: 2048,
        n_layer: 12,
        cutoffs: [0; txl_core::config::MAX_CUTOFFS],
        n_cutoffs: 0,
        div_val: 1,
        tie_weight: true,
        tie_projs: 0,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 512,
        mem_len: 512,
        clamp_len: 0,
        same_length: false,
    }
}

impl Args {
    /// MODEL's bytes, or with `--enwik8-base` an image of that shape with random weights; and
    /// what to call it.
    fn model_bytes(&self) -> Result<(AlignedBytes, String)> {
        Ok(match &self.model {
            Some(path) => {
                let bytes = read_image(path)?;
                parse_model(&bytes, path)?; // its errors say what to do
                (bytes, path.display().to_string())
            }
            None => {
                let config = enwik8_base();
                let image = random_image(&config, 1, RandomInit::for_config(&config))?;
                (
                    AlignedBytes::copy_from(&image)?,
                    "enwik8-base (random weights)".to_string(),
                )
            }
        })
    }

    /// `--recompute`: Table 9 on this engine.
    fn run_recompute(&self, out: &mut dyn Write) -> Result<()> {
        if self.session.tgt_len.is_some() || self.session.mem_len.is_some() {
            bail!(
                "--recompute sets tgt_len and mem_len itself (from --lengths); drop --tgt-len and --mem-len"
            );
        }
        if self.lengths.is_empty() || self.lengths.contains(&0) {
            bail!("--lengths needs one or more attention lengths above 0");
        }
        let (bytes, name) = self.model_bytes()?;
        let model = Model::parse(bytes.bytes()).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let config = *model.config();
        let count = self.tokens.unwrap_or(4).max(1);
        let cached_count = count.max(MIN_CACHED_TOKENS);
        let base = self.session.options(&model)?;
        let mut rows = Vec::new();
        for &length in &self.lengths {
            let cached = SessionOptions {
                tgt_len: 1,
                mem_len: length,
                mem_init: MemInit::Zeros,
                ..base
            };
            let vanilla = SessionOptions {
                tgt_len: length,
                mem_len: 0,
                mem_init: MemInit::Empty,
                ..base
            };
            arena::check_core(&[(&model, cached)])?;
            arena::check_core(&[(&model, vanilla)])?;
            let window = length as usize;
            let what = || format!("--lengths {length} with --tokens {count}");
            let total = window
                .checked_add(cached_count)
                .ok_or_else(|| anyhow::anyhow!("{}: too many tokens", what()))?;
            let mut tokens = arena::reserve(total, what)?;
            tokens.extend(pseudo_random_tokens(total, config.n_token));

            // (a) the cached memory of L positions, one token a step
            let cached_time = {
                let mut arena_bytes = scoring::arena_for(&model, &cached).map_err(arena::explain(&cached))?;
                let mut session = scoring::start(&model, &mut arena_bytes, cached)?;
                let started = Instant::now();
                for token in &tokens[..cached_count] {
                    session.forward(core::slice::from_ref(token), |_, _| {})?;
                }
                started.elapsed().as_secs_f64() / cached_count as f64
            };
            // (b) a vanilla model: each prediction recomputes its window of L tokens
            let vanilla_time = {
                let mut arena_bytes =
                    scoring::arena_for(&model, &vanilla).map_err(arena::explain(&vanilla))?;
                let mut session = scoring::start(&model, &mut arena_bytes, vanilla)?;
                let started = Instant::now();
                for t in 0..count {
                    session.forward_last(&tokens[t..t + window], |_, _| {})?;
                }
                started.elapsed().as_secs_f64() / count as f64
            };

            rows.push(RecomputeRow {
                length,
                cached_seconds_per_token: cached_time,
                vanilla_seconds_per_token: vanilla_time,
                speedup: vanilla_time / cached_time,
                paper_speedup: PAPER_TABLE_9
                    .iter()
                    .find(|(l, _)| *l == length)
                    .map(|(_, ratio)| *ratio),
            });
        }
        let report = RecomputeReport {
            model: name,
            n_layer: config.n_layer,
            d_model: config.d_model,
            n_head: config.n_head,
            d_head: config.d_head,
            d_inner: config.d_inner,
            n_token: config.n_token,
            tokens: count,
            cached_tokens: cached_count,
            lengths: rows,
        };
        if self.json {
            writeln!(out, "{}", serde_json::to_string(&report)?)?;
        } else {
            print_recompute_table(&report, out)?;
        }
        Ok(())
    }
}

fn print_recompute_table(report: &RecomputeReport, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "Table 9 (Dai et al., 2019) on this engine, one thread: {} ({} layers, d_model {}, {} heads of {}, d_inner {}, {} tokens)",
        report.model, report.n_layer, report.d_model, report.n_head, report.d_head, report.d_inner, report.n_token
    )?;
    writeln!(
        out,
        "cached: tgt_len 1, mem_len L ({} tokens); vanilla: a window of L tokens recomputed per token ({} tokens)",
        report.cached_tokens, report.tokens
    )?;
    writeln!(
        out,
        "{:>16} {:>16} {:>17} {:>10} {:>10}",
        "attention len", "cached ms/token", "vanilla ms/token", "speedup", "paper"
    )?;
    for row in &report.lengths {
        let paper = row.paper_speedup.map_or("-".to_string(), |p| format!("{p:.0}x"));
        writeln!(
            out,
            "{:>16} {:>16.3} {:>17.1} {:>9.0}x {:>10}",
            row.length,
            row.cached_seconds_per_token * 1e3,
            row.vanilla_seconds_per_token * 1e3,
            row.speedup,
            paper
        )?;
    }
    Ok(())
}

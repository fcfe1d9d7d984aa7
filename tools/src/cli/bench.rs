//! `txl bench`: tokens per second per precision, as ratios against f32 in the same run.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use txl_core::rng::Rng;

use anyhow::{bail, Result};
use serde::Serialize;
use txl_core::{scoring, AlignedBytes, MemDtype, OptionWord, SessionOptions};
use txl_host_gpu::quantize::{self, Target};
use txl_host_gpu::{Backend, Reference};

use super::arena;
use super::args::SessionArgs;
use crate::image_file::{parse_model, read_image};

pub const EXAMPLES: &str = "Examples:\n  \
    txl bench model.txl\n  \
    txl bench model.txl --tokens 4096 --tgt-len 1 --json";

/// Arguments of `txl bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model image (f32; the f16 and int8 variants are quantized from it in memory).
    pub model: PathBuf,
    /// Tokens per measurement (pseudo-random ids).
    #[arg(long, default_value_t = 1024)]
    pub tokens: usize,
    #[command(flatten)]
    pub session: SessionArgs,
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `txl bench --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    /// Tokens per measurement.
    tokens: usize,
    tgt_len: u32,
    mem_len: u32,
    clamp_len: u32,
    same_length: bool,
    mem_init: &'static str,
    position_keys: &'static str,
    /// One measurement per variant, f32 first.
    results: Vec<Measurement>,
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
}

impl Args {
    /// Measures; prints the table (or `--json`) on `out`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        if self.session.mem_dtype != MemDtype::F32 {
            bail!(
                "--mem-dtype {} does not apply to bench, which measures f32, f16 and int8 memory in its variants",
                self.session.mem_dtype
            );
        }
        let bytes = read_image(&self.model)?;
        let model = parse_model(&bytes, &self.model)?;
        let options = self.session.options(&model);
        let count = self.tokens.max(2);
        let what = || format!("--tokens {}", self.tokens);
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
        let variants: [(&str, &[u8], MemDtype); 4] = [
            ("f32 weights, f32 memory", model.image().bytes(), MemDtype::F32),
            ("f16 weights, f16 memory", &f16, MemDtype::F16),
            ("int8 weights, f32 memory", &int8, MemDtype::F32),
            ("int8 weights, int8 memory", &int8, MemDtype::Int8),
        ];
        let mut rows = Vec::new();
        for (label, image, mem_dtype) in &variants {
            let aligned = AlignedBytes::copy_from(image)?;
            let variant = parse_model(&aligned, &self.model)?;
            let variant_options = SessionOptions {
                mem_dtype: *mem_dtype,
                ..options
            };
            let started = Instant::now();
            scoring::score(&variant, &tokens, variant_options, 0, |_| {})
                .map_err(arena::explain(&variant_options))?;
            rows.push((label.to_string(), image.len(), rate(tokens.len(), started)));
        }
        let mut reference = Reference::new(&model, Backend::Cpu32)?;
        let started = Instant::now();
        reference.score(&tokens, &options, 0, |_| {})?;
        rows.push((
            "reference cpu32 (f32 weights)".to_string(),
            model.image().bytes().len(),
            rate(tokens.len(), started),
        ));

        let baseline = rows[0].2;
        let report = Report {
            tokens: tokens.len(),
            tgt_len: options.tgt_len,
            mem_len: options.mem_len,
            clamp_len: options.clamp_len,
            same_length: options.same_length,
            mem_init: options.mem_init.word(),
            position_keys: options.position_keys.word(),
            results: rows
                .into_iter()
                .map(|(variant, image_bytes, tokens_per_second)| Measurement {
                    variant,
                    image_bytes,
                    tokens_per_second,
                    ratio_to_f32: tokens_per_second / baseline,
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
        "{} tokens, tgt_len {}, mem_len {}, one thread:",
        report.tokens, report.tgt_len, report.mem_len
    )?;
    writeln!(
        out,
        "{:<32} {:>12} {:>12} {:>10}",
        "variant", "image bytes", "tokens/s", "vs f32"
    )?;
    for m in &report.results {
        writeln!(
            out,
            "{:<32} {:>12} {:>12.0} {:>9.2}x",
            m.variant, m.image_bytes, m.tokens_per_second, m.ratio_to_f32
        )?;
    }
    Ok(())
}

//! `txl demo`: the whole path on the bundled model: convert, score, generate, quantize.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use txl_core::sampling::Sampling;
use txl_core::{scoring, AlignedBytes, MemDtype, OptionWord, SessionOptions};
use txl_host_gpu::quantize::{self, QuantizeOptions, Smoothing, Target};

use super::arena;
use super::convert::convert;
use super::generate::bytes_as_text;
use crate::checkpoint::CheckpointFormat;
use crate::image_file::{parse_model, read_image, write_file};
use crate::{compare, generate, tokens};

pub const EXAMPLES: &str = "Examples:\n  \
    txl demo\n  \
    txl demo --out-dir /tmp/txl-demo --limit 1024";

/// Arguments of `txl demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to write the converted image.
    #[arg(long, default_value = "target/demo")]
    pub out_dir: PathBuf,
    /// Held-out bytes to score.
    #[arg(long, default_value_t = 4096)]
    pub limit: usize,
}

impl Args {
    /// Runs the demo, narrating on `out`; writes `demo.txl` and `demo-int8.txl` to `--out-dir`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/demo");
        let image_path = self.out_dir.join("demo.txl");
        writeln!(out, "1. convert the bundled checkpoint ({})", fixtures.display())?;
        let image_bytes = convert(&fixtures, &image_path, CheckpointFormat::Auto, None)?;
        writeln!(out, "   -> {} ({image_bytes} bytes)", image_path.display())?;

        let bytes = read_image(&image_path)?;
        let model = parse_model(&bytes, &image_path)?;
        let options = SessionOptions::from_config(model.config());
        // The quantizer below runs two sessions side by side.
        arena::check_core(&[(&model, options), (&model, options)])?;
        writeln!(
            out,
            "   tgt_len {}  mem_len {}  arena {} bytes",
            options.tgt_len,
            options.mem_len,
            arena::arena_bytes(&model, &options)?
        )?;

        let heldout = fixtures.join("heldout.txt");
        let mut tokens = tokens::read_byte_tokens(&heldout)?;
        tokens.truncate(self.limit);
        writeln!(
            out,
            "2. score {} bytes of held-out text ({})",
            tokens.len(),
            heldout.display()
        )?;
        let started = Instant::now();
        let scores = scoring::score(&model, &tokens, options, 0, |_| {}).map_err(arena::explain(&options))?;
        let seconds = started.elapsed().as_secs_f64();
        writeln!(
            out,
            "   {:.4} bits per byte (ppl {:.3}), {:.0} tokens/s on this machine",
            scores.bits_per_token(),
            scores.nll().exp(),
            tokens.len() as f64 / seconds
        )?;

        let prompt = "And God said";
        writeln!(
            out,
            "3. generate 240 bytes after {prompt:?} (temperature 0.8, seed 1)"
        )?;
        let prompt_tokens: Vec<u32> = prompt.bytes().map(u32::from).collect();
        let sampling = Sampling::Temperature {
            temperature: 0.8,
            seed: 1,
        };
        let generated = generate::generate(&model, options, &prompt_tokens, 240, sampling)
            .map_err(arena::explain(&options))?;
        writeln!(out, "---\n{prompt}{}\n---", bytes_as_text(&generated))?;

        writeln!(
            out,
            "4. quantize to int8 (W8A8, calibrated on 4096 bytes of training text) and compare"
        )?;
        let mut calibration = tokens::read_byte_tokens(&fixtures.join("calib.txt"))?;
        calibration.truncate(4096);
        let quantize_options = QuantizeOptions {
            smoothing: Smoothing::Auto,
            ..QuantizeOptions::weights_only(Target::Int8, options)
        };
        let int8 = quantize::quantize(&model, &quantize_options, Some(&calibration), |_| {})?;
        let int8_path = self.out_dir.join("demo-int8.txl");
        write_file(&int8_path, &int8.image)?;
        let int8_bytes = AlignedBytes::copy_from(&int8.image)?;
        let int8_model = parse_model(&int8_bytes, &int8_path)?;
        for mem_dtype in [MemDtype::F32, MemDtype::Int8] {
            let candidate = SessionOptions { mem_dtype, ..options };
            let c = compare::compare((&model, options), (&int8_model, candidate), &tokens, |_| {})
                .map_err(arena::explain(&candidate))?;
            writeln!(
                out,
                "   int8 weights, {:<4} memory: {:.4} bits per byte ({:+.3}%), top-1 agreement {:.2}%",
                mem_dtype.word(),
                c.candidate_bits_per_token,
                100.0 * c.relative_delta,
                100.0 * c.top1_agreement
            )?;
        }
        let int8_options = SessionOptions {
            mem_dtype: MemDtype::Int8,
            ..options
        };
        writeln!(
            out,
            "   -> {} ({} bytes, {:.1}x smaller; arena with int8 memory {} bytes)",
            int8_path.display(),
            int8.image.len(),
            image_bytes as f64 / int8.image.len() as f64,
            arena::arena_bytes(&int8_model, &int8_options)?
        )?;
        Ok(())
    }
}

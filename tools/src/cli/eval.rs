//! `txl eval`: bits per token and perplexity over a long text, with the full-precision
//! reference.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use serde::Serialize;
use txl_host_gpu::Reference;

use super::args::{BackendArg, Engine, SessionArgs};
use super::{arena, progress};
use crate::image_file::{parse_model, read_image};
use crate::tokens;

pub const EXAMPLES: &str = "Examples:\n  \
    txl eval model.txl --text heldout.txt --bytes --batch 8\n  \
    txl eval model.txl --text ids.txt --backend cpu --batch 1 --json\n  \
    txl eval words.txl --text wiki.test.tokens --words --batch 8";

/// Arguments of `txl eval`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model image.
    pub model: PathBuf,
    /// The text: whitespace-separated token ids, bytes with --bytes, words with --words.
    #[arg(long, value_name = "FILE")]
    pub text: PathBuf,
    /// Every byte of the text is one token id (byte-level models); a character model of the
    /// original code (enwik8, text8) maps each byte to its symbol, as `txl score --bytes` does.
    #[arg(long, conflicts_with = "words")]
    pub bytes: bool,
    /// Tokenize the text with the image's vocabulary, as `txl score --text` does (<eos> at each
    /// line end, <unk> for unknown words); without a vocabulary, the same as --bytes.
    #[arg(long)]
    pub words: bool,
    /// Streams scored side by side.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Which forward pass.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    #[command(flatten)]
    pub session: SessionArgs,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `txl eval --json` prints ([`txl_host_gpu::EvalReport`], and the backend).
#[derive(Debug, Serialize)]
struct Report {
    /// Tokens in the text.
    tokens: usize,
    /// Tokens predicted (every token but the first).
    predicted: usize,
    /// Streams the text was split into.
    streams: usize,
    /// Mean negative log-likelihood, nats per token.
    nll: f64,
    /// `nll / ln 2`.
    bits_per_token: f64,
    /// `e^nll`.
    ppl: f64,
    /// Wall-clock seconds of scoring.
    seconds: f64,
    /// Tokens processed per second, over all streams.
    tokens_per_second: f64,
    /// `cpu`, `cpu32` or `cuda` (what `auto` chose).
    backend: &'static str,
}

impl Args {
    /// Evaluates; prints the report (text or `--json`) on `out`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        let engine = self.backend.engine();
        let Engine::Reference(backend) = engine else {
            bail!("eval runs the full-precision reference; use `txl score --backend core` for the core");
        };
        self.session.check_engine(engine)?;
        let bytes = read_image(&self.model)?;
        let model = parse_model(&bytes, &self.model)?;
        let tokens = if self.bytes {
            tokens::read_raw_text(&self.text, &model)?
        } else if self.words {
            tokens::read_text_tokens(&self.text, &model)?
        } else {
            tokens::read_token_ids(&self.text)?
        };
        if tokens.len() < 2 {
            bail!("need at least 2 tokens to evaluate, got {}", tokens.len());
        }
        let options = self.session.options(&model)?;
        let batch = self.batch.max(1);
        // --batch is at most the streams: the text gives no more than one per prediction.
        let streams = txl_host_gpu::split_streams(&tokens, batch).len();
        arena::check_reference(&model, &options, backend, streams)?;
        let bar = progress::tokens(tokens.len());
        let mut reference = Reference::new(&model, backend)?;
        let report = txl_host_gpu::eval(&mut reference, &tokens, &options, batch, |done, _| {
            bar.set_position(done as u64)
        })?;
        bar.finish_and_clear();
        if self.json {
            let report = Report {
                tokens: report.tokens,
                predicted: report.predicted,
                streams: report.streams,
                nll: report.nll,
                bits_per_token: report.bits_per_token,
                ppl: report.ppl,
                seconds: report.seconds,
                tokens_per_second: report.tokens_per_second,
                backend: engine.word(),
            };
            writeln!(out, "{}", serde_json::to_string(&report)?)?;
        } else {
            writeln!(
                out,
                "tokens {}  streams {}  nll {:.6} nats  bits/token {:.6}  ppl {:.4}  {:.0} tokens/s",
                report.tokens,
                report.streams,
                report.nll,
                report.bits_per_token,
                report.ppl,
                report.tokens_per_second
            )?;
        }
        Ok(())
    }
}

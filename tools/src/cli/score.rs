//! `txl score`: the log-probability of every next token, by the core or by the reference.
//!
//! This is the contract docs/CLI.md documents: `--out` and `--rows-out` hold `<f4` values, and
//! the digest is the [`Digest`] of the `--out` values, whichever backend computed them (the
//! reference's f64 values are rounded to f32 first).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use txl_core::digest::Digest;
use txl_core::image::{Arithmetic, Dtype};
use txl_core::scoring::{LastToken, Scores};
use txl_core::tensors::for_each_tensor;
use txl_core::{scoring, Model, OptionWord, SessionOptions};
use txl_host_gpu::{Backend, Reference};

use super::args::{BackendArg, Engine, SessionArgs, TokenSource};
use super::{arena, progress};
use crate::image_file::{parse_model, read_image, write_file};
use crate::npy;

pub const EXAMPLES: &str = "Examples:\n  \
    txl score model.txl --bytes heldout.txt --json\n  \
    txl score model.txl --tokens ids.txt --tgt-len 1 --mem-init zeros --out logp.npy\n  \
    txl score model.txl --bytes heldout.txt --rows 4 --rows-out rows.npy\n  \
    txl score model.txl --bytes heldout.txt --mem-dtype int8 --position-keys segment\n  \
    txl score model.txl --bytes heldout.txt --tgt-len 1 --mem-dtype int8 --position-keys folded\n  \
    txl score model.txl --bytes heldout.txt --backend cpu --out logp-reference.npy\n  \
    txl score model.txl --bytes heldout.txt --fast-f32 --json\n  \
    txl score words.txl --text wiki.test.tokens --json\n  \
    txl score model.txl --bytes part1.txt --state-out memory.state\n  \
    txl score model.txl --bytes part2.txt --state-in memory.state\n\
    (part2 starts with part1's last byte: the two runs predict every byte once)\n\
    --text: words with the image's vocabulary (<eos> per line, <unk>), bits per word. A\n\
    character model of the original code (enwik8, text8) reads raw text with --bytes, each\n\
    byte mapped to its symbol's id as the original preparation did:\n  \
    txl score enwik8.txl --bytes test.txt.raw --json";

/// Arguments of `txl score`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model image.
    pub model: PathBuf,
    #[command(flatten)]
    pub source: TokenSource,
    #[command(flatten)]
    pub session: SessionArgs,
    /// Which forward pass: the core (the device engine) or the full-precision reference.
    #[arg(long, value_enum, default_value_t = BackendArg::Core)]
    pub backend: BackendArg,
    /// Write ln p(t[i+1] | t[..=i]) for every i as a <f4 .npy of shape (N-1,).
    #[arg(long, value_name = "LOGP.npy")]
    pub out: Option<PathBuf>,
    /// Keep the full log-probability rows of the first K positions (with --rows-out).
    #[arg(long, value_name = "K", requires = "rows_out")]
    pub rows: Option<usize>,
    /// Where to write those rows: <f4 .npy of shape (K, n_token).
    #[arg(long, value_name = "ROWS.npy", requires = "rows")]
    pub rows_out: Option<PathBuf>,
    /// Start from the session state in STATE (written by --state-out with the same model and
    /// session options) instead of --mem-init.
    #[arg(long, value_name = "STATE")]
    pub state_in: Option<PathBuf>,
    /// Write the session state to STATE afterwards. The text's last token is held back: its
    /// row predicts nothing here, and the memory ends just before it. Score the continuation
    /// with --state-in STATE on a text that starts with that token: the two runs then predict
    /// every token once, bit for bit as one run over the whole text does when this text's
    /// length minus one is a multiple of --tgt-len (the segments fall alike).
    #[arg(long, value_name = "STATE")]
    pub state_out: Option<PathBuf>,
    /// Sum the f32 weight matrices' products with fused multiply-adds, one chain per row in
    /// column order (one rounding per product): faster in segments on a CPU with AVX2 and FMA
    /// (streaming a small model, slower than exact), a few ulps from the exact scores, with
    /// digests of their own that every machine reproduces. The core only; f16, int8 and int4
    /// weights and the attention are unchanged.
    #[arg(long)]
    pub fast_f32: bool,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `txl score --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    /// Tokens read (`N`).
    tokens: usize,
    /// Tokens predicted (`N - 1`).
    predicted: usize,
    /// Mean negative log-likelihood, nats (a reference's: over its values before they are
    /// rounded to f32).
    nll: f64,
    /// `nll / ln 2`.
    bits_per_token: f64,
    /// `e^nll`.
    ppl: f64,
    /// The [`Digest`] of the `--out` values, `0x` and 8 hex digits.
    digest: String,
    tgt_len: u32,
    mem_len: u32,
    clamp_len: u32,
    same_length: bool,
    mem_init: &'static str,
    /// The memory's precision: the core's `--mem-dtype`, or the reference's (`f64` on `cpu`).
    mem_dtype: &'static str,
    position_keys: &'static str,
    /// `core`, `cpu`, `cpu32` or `cuda` (what `auto` chose).
    backend: &'static str,
    /// Whether the f32 products were summed with fused multiply-adds (`--fast-f32`).
    fast_f32: bool,
    /// The image's weight precision: `f32`, `f16`, `int8` or `mixed`.
    precision: &'static str,
    /// How the activations were computed: `integer` (the core on an integer image, in
    /// fixed point) or `float` (a float image, or a reference backend).
    arithmetic: &'static str,
    tokens_per_second: f64,
}

/// Scores in f32, whichever backend computed them.
struct Scored {
    logp: Vec<f32>,
    rows: Vec<f32>,
    rows_kept: usize,
    nll: f64,
}

impl Args {
    /// Scores; prints the summary (text or `--json`) on `out` and writes `--out`, `--rows-out`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        let engine = self.backend.engine();
        self.session.check_engine(engine)?;
        if engine != Engine::Core && (self.state_in.is_some() || self.state_out.is_some()) {
            bail!(
                "--state-in and --state-out apply to the core only, not to --backend {}",
                engine.word()
            );
        }
        if engine != Engine::Core && self.fast_f32 {
            bail!(
                "--fast-f32 applies to the core only, not to --backend {}",
                engine.word()
            );
        }
        let bytes = read_image(&self.model)?;
        let mut model = parse_model(&bytes, &self.model)?;
        model.set_fast_f32(self.fast_f32);
        let tokens = self.source.read(&model)?;
        if tokens.len() < 2 {
            bail!("need at least 2 tokens to score, got {}", tokens.len());
        }
        let options = self.session.options(&model)?;
        let keep_rows = self.rows.unwrap_or(0);
        let n_token = model.config().n_token as usize;
        let kept_values = keep_rows.min(tokens.len()).saturating_mul(n_token);
        // The reference's rows are f64, then copied to f32.
        let value_bytes = match engine {
            Engine::Core => 4,
            Engine::Reference(_) => 12,
        };
        arena::check_values::<u8>(kept_values.saturating_mul(value_bytes), || {
            format!("--rows {keep_rows} (of {n_token} log-probabilities each)")
        })?;
        let bar = progress::tokens(tokens.len());
        let progress = |done: usize| bar.set_position(done as u64);
        let started = Instant::now();
        let scored = match engine {
            Engine::Core => {
                arena::check_core(&[(&model, options)])?;
                let scores = self.score_core(&model, &tokens, options, keep_rows, progress)?;
                Scored {
                    nll: scores.nll(),
                    logp: scores.logp,
                    rows: scores.rows,
                    rows_kept: scores.rows_kept,
                }
            }
            Engine::Reference(backend) => {
                arena::check_reference(&model, &options, backend, 1)?;
                let mut reference = Reference::new(&model, backend)?;
                let scores = reference.score(&tokens, &options, keep_rows, progress)?;
                let to_f32 = |values: &[f64]| values.iter().map(|&v| v as f32).collect();
                Scored {
                    nll: scores.nll(),
                    logp: to_f32(&scores.logp),
                    rows: to_f32(&scores.rows),
                    rows_kept: scores.rows_kept,
                }
            }
        };
        bar.finish_and_clear();
        let seconds = started.elapsed().as_secs_f64();
        if let Some(path) = &self.out {
            npy::write_f32(path, &[scored.logp.len()], &scored.logp)?;
        }
        if let Some(path) = &self.rows_out {
            let shape = [scored.rows_kept, model.config().n_token as usize];
            npy::write_f32(path, &shape, &scored.rows)?;
        }
        let digest = Digest::of(&scored.logp);
        // The reference computes in floating point whatever the image says.
        let arithmetic = match engine {
            Engine::Core => model.image().arithmetic(),
            Engine::Reference(_) => Arithmetic::Float,
        };
        let nll = scored.nll;
        let tokens_per_second = tokens.len() as f64 / seconds.max(1e-9);
        if self.json {
            let report = Report {
                tokens: tokens.len(),
                predicted: scored.logp.len(),
                nll,
                bits_per_token: nll / std::f64::consts::LN_2,
                ppl: nll.exp(),
                digest: format!("{digest:#010x}"),
                tgt_len: options.tgt_len,
                mem_len: options.mem_len,
                clamp_len: options.clamp_len,
                same_length: options.same_length,
                mem_init: options.mem_init.word(),
                mem_dtype: match engine {
                    Engine::Core => options.mem_dtype.word(),
                    Engine::Reference(Backend::Cpu64) => "f64",
                    Engine::Reference(_) => "f32",
                },
                position_keys: options.position_keys.word(),
                backend: engine.word(),
                fast_f32: self.fast_f32,
                precision: precision(&model),
                arithmetic: arithmetic.name(),
                tokens_per_second,
            };
            writeln!(out, "{}", serde_json::to_string(&report)?)?;
        } else {
            writeln!(
                out,
                "tokens {}  nll {:.6} nats  bits/token {:.6}  ppl {:.4}  digest {digest:#010x}  {} arithmetic  ({:.0} tokens/s)",
                tokens.len(),
                nll,
                nll / std::f64::consts::LN_2,
                nll.exp(),
                match arithmetic {
                    Arithmetic::Float => "float".to_string(),
                    Arithmetic::Integer { frac } => format!("integer (Q{frac})"),
                },
                tokens_per_second
            )?;
        }
        Ok(())
    }
}

impl Args {
    /// Scores on the core, starting from `--state-in` and writing `--state-out` when given.
    fn score_core(
        &self,
        model: &Model<'_>,
        tokens: &[u32],
        options: SessionOptions,
        keep_rows: usize,
        progress: impl FnMut(usize),
    ) -> Result<Scores> {
        let mut arena = scoring::arena_for(model, &options).map_err(arena::explain(&options))?;
        let mut session = scoring::start(model, &mut arena, options)?;
        if let Some(path) = &self.state_in {
            let state = read_state(path)?;
            let len = session
                .restore_state(&state)
                .with_context(|| format!("restoring the session state from {}", path.display()))?;
            // The file must be one state, not a state with something after it.
            if len != state.len() {
                bail!(
                    "{} holds {} bytes after its session state of {len} bytes",
                    path.display(),
                    state.len() - len
                );
            }
        }
        let last = match self.state_out {
            Some(_) => LastToken::Hold,
            None => LastToken::Feed,
        };
        let scores = scoring::score_in(&mut session, tokens, last, keep_rows, progress)?;
        if let Some(path) = &self.state_out {
            let mut state = vec![0u8; session.state_bytes()];
            let written = session.save_state(&mut state)?;
            write_file(path, &state[..written])?;
        }
        Ok(scores)
    }
}

/// Reads a session state file into memory, allocating fallibly (its length is the file's).
fn read_state(path: &Path) -> Result<Vec<u8>> {
    let context = || format!("reading the session state {}", path.display());
    let mut file = File::open(path).with_context(context)?;
    let len = file.metadata().with_context(context)?.len();
    let mut state = Vec::new();
    usize::try_from(len)
        .ok()
        .and_then(|len| state.try_reserve_exact(len).ok())
        .with_context(|| format!("{}: cannot allocate {len} bytes", path.display()))?;
    file.read_to_end(&mut state).with_context(context)?;
    Ok(state)
}

/// The image's weight precision: the dtype of its weight matrices (`f32`, `f16`, `int8`, `int4`), or
/// `mixed` when they differ. Biases and gains (f32, or f16: `quantize --vectors`) do not count.
pub(super) fn precision(model: &Model<'_>) -> &'static str {
    let image = model.image();
    let mut dtypes: Vec<Dtype> = Vec::new();
    let mut index = 0;
    for_each_tensor(model.config(), |name, _| {
        let dtype = image.entry(index).dtype;
        if name.is_matrix() && !dtypes.contains(&dtype) {
            dtypes.push(dtype);
        }
        index += 1;
    });
    match dtypes[..] {
        [Dtype::F32] => "f32",
        [Dtype::F16] => "f16",
        [Dtype::Int8RowScaled] => "int8",
        [Dtype::Int4GroupScaled] => "int4",
        _ => "mixed",
    }
}

//! `txl compare`: a candidate image (quantized, say) against a reference on the same tokens.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use txl_core::image::Arithmetic;
use txl_core::{MemDtype, PositionKeys, SessionOptions};

use super::args::{SessionArgs, TokenSource};
use super::{arena, progress};
use crate::image_file::{parse_model, read_image};

pub const EXAMPLES: &str = "Examples:\n  \
    txl compare model.txl model-int8.txl --bytes heldout.txt\n  \
    txl compare model.txl model-int8.txl --bytes heldout.txt --mem-dtype int8 --json";

/// Arguments of `txl compare`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Reference image.
    pub reference: PathBuf,
    /// Candidate image.
    pub candidate: PathBuf,
    #[command(flatten)]
    pub source: TokenSource,
    #[command(flatten)]
    pub session: SessionArgs,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    /// Compares; prints the [`crate::compare::Comparison`] on `out`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        let ref_bytes = read_image(&self.reference)?;
        let cand_bytes = read_image(&self.candidate)?;
        let ref_model = parse_model(&ref_bytes, &self.reference)?;
        let cand_model = parse_model(&cand_bytes, &self.candidate)?;
        let tokens = self.source.read(&ref_model)?;
        if tokens.len() < 2 {
            bail!("need at least 2 tokens to compare, got {}", tokens.len());
        }
        let cand_options = self
            .session
            .options_for(&ref_model, cand_model.image().arithmetic())?;
        // The reference keeps f32 memory, or int8 with the position keys it takes when it is an
        // integer image itself.
        let ref_options = match ref_model.image().arithmetic() {
            Arithmetic::Float => SessionOptions {
                mem_dtype: MemDtype::F32,
                ..cand_options
            },
            Arithmetic::Integer { .. } => SessionOptions {
                mem_dtype: MemDtype::Int8,
                position_keys: match cand_options.position_keys {
                    PositionKeys::FoldedIntoQuery => PositionKeys::PerSession,
                    keys => keys,
                },
                ..cand_options
            },
        };
        arena::check_core(&[(&ref_model, ref_options), (&cand_model, cand_options)])?;
        let n_token = ref_model.config().n_token as usize;
        let rows = crate::compare::rows_values(cand_options.tgt_len as usize, tokens.len(), n_token);
        arena::check_values::<f32>(rows, || {
            format!(
                "the reference's rows of a segment (tgt_len {}, {} tokens, n_token {n_token})",
                cand_options.tgt_len,
                tokens.len()
            )
        })?;
        let bar = progress::tokens(tokens.len());
        let result = crate::compare::compare(
            (&ref_model, ref_options),
            (&cand_model, cand_options),
            &tokens,
            |done| bar.set_position(done as u64),
        )
        .map_err(arena::explain(&cand_options))?;
        bar.finish_and_clear();
        if self.json {
            writeln!(out, "{}", serde_json::to_string(&result)?)?;
        } else {
            writeln!(out, "tokens                {}", result.tokens)?;
            writeln!(
                out,
                "reference bits/token  {:.6}",
                result.reference_bits_per_token
            )?;
            writeln!(
                out,
                "candidate bits/token  {:.6}",
                result.candidate_bits_per_token
            )?;
            writeln!(
                out,
                "relative change       {:+.4}%",
                100.0 * result.relative_delta
            )?;
            writeln!(out, "mean KL(ref || cand)  {:.3e} nats/token", result.mean_kl)?;
            writeln!(out, "top-1 agreement       {:.4}%", 100.0 * result.top1_agreement)?;
            writeln!(out, "max |Δ ln p|          {:.3e}", result.max_abs_delta_logp)?;
        }
        Ok(())
    }
}

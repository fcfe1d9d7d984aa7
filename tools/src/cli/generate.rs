//! `txl generate`: continue a prompt with the core.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use txl_core::sampling::Sampling;
use txl_core::Model;

use super::arena;
use super::args::SessionArgs;
use crate::image_file::{parse_model, read_image};
use crate::vocab::characters::CharacterVocabulary;
use crate::vocab::Vocabulary;

pub const EXAMPLES: &str = "Examples:\n  \
    txl generate model.txl --prompt \"In the beginning\" --length 200\n  \
    txl generate model.txl --prompt \"And God said\" --temperature 0.8 --seed 7\n  \
    txl generate model.txl --prompt-tokens \"17 4 291\" --temperature 0 --ids\n  \
    txl generate words.txl --prompt \"The city of\" --length 50";

/// Arguments of `txl generate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model image.
    pub model: PathBuf,
    /// Prompt text: one token per byte (byte-level models), or words looked up in the image's
    /// vocabulary as `txl score --text` does (no <eos> after the last line unless the prompt
    /// ends with a line break). Word models print their output as words joined by spaces,
    /// <eos> as a line break. A character model of the original code (enwik8, text8) reads
    /// the prompt as raw text and writes raw text, as `txl score --bytes` reads it (enwik8:
    /// newlines dropped; text8: a space is `_`).
    #[arg(long, conflicts_with = "prompt_tokens")]
    pub prompt: Option<String>,
    /// Prompt as whitespace-separated token ids.
    #[arg(long, value_name = "IDS")]
    pub prompt_tokens: Option<String>,
    /// Tokens to generate.
    #[arg(long, default_value_t = 200)]
    pub length: usize,
    /// Sampling temperature, a finite number >= 0; 0 picks the most likely token every time.
    #[arg(long, default_value_t = 0.8, value_parser = temperature)]
    pub temperature: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print token ids instead of text.
    #[arg(long)]
    pub ids: bool,
    #[command(flatten)]
    pub session: SessionArgs,
}

impl Args {
    /// Generates; prints the prompt and its continuation (or the new token ids) on `out`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        let bytes = read_image(&self.model)?;
        let model = parse_model(&bytes, &self.model)?;
        let reading = Reading::of(&model);
        let prompt: Vec<u32> = match (&self.prompt, &self.prompt_tokens) {
            (Some(text), _) => match &reading {
                Reading::Bytes => text.bytes().map(u32::from).collect(),
                Reading::Characters(characters) => characters
                    .encode(text.as_bytes(), false)
                    .context("reading --prompt")?,
                Reading::Words(vocabulary) => prompt_words(vocabulary, text)?,
            },
            (_, Some(ids)) => ids
                .split_whitespace()
                .map(|w| w.parse().with_context(|| format!("bad token id {w:?}")))
                .collect::<Result<_>>()?,
            _ => bail!("give --prompt TEXT or --prompt-tokens IDS"),
        };
        if prompt.is_empty() {
            bail!("the prompt is empty");
        }
        let sampling = Sampling::from_temperature(self.temperature, self.seed);
        let options = self.session.options(&model)?;
        arena::check_core(&[(&model, options)])?;
        // The tokens (4 bytes each) and, as text, up to 4 bytes more each.
        arena::check_values::<u64>(self.length, || format!("--length {}", self.length))?;
        let tokens = crate::generate::generate(&model, options, &prompt, self.length, sampling)
            .map_err(arena::explain(&options))?;
        if self.ids {
            for (i, token) in tokens.iter().enumerate() {
                let separator = if i == 0 { "" } else { " " };
                write!(out, "{separator}{token}")?;
            }
            writeln!(out)?;
        } else {
            let prompt = self.prompt.as_deref().unwrap_or("");
            match &reading {
                Reading::Bytes => writeln!(out, "{prompt}{}", bytes_as_text(&tokens))?,
                Reading::Characters(characters) => {
                    // Raw bytes, whatever they are, as `--bytes` would read them back.
                    out.write_all(prompt.as_bytes())?;
                    out.write_all(&characters.decode(&tokens))?;
                    writeln!(out)?;
                }
                Reading::Words(vocabulary) => {
                    let text = vocabulary.decode(&tokens);
                    // A space between the prompt's last word and the first new one.
                    let space = !prompt.is_empty()
                        && !prompt.ends_with(char::is_whitespace)
                        && !text.starts_with('\n');
                    writeln!(out, "{prompt}{}{text}", if space { " " } else { "" })?;
                }
            }
        }
        Ok(())
    }
}

/// How a model reads and writes text.
enum Reading {
    /// No vocabulary: a byte is a token id.
    Bytes,
    /// A character vocabulary of the original code (enwik8, text8): raw text, mapped.
    Characters(CharacterVocabulary),
    /// A word vocabulary: words.
    Words(Vocabulary),
}

impl Reading {
    fn of(model: &Model<'_>) -> Reading {
        let Some(vocabulary) = model.image().vocabulary().map(|v| Vocabulary::from_image(&v)) else {
            return Reading::Bytes;
        };
        match CharacterVocabulary::of(&vocabulary) {
            Some(characters) => Reading::Characters(characters),
            None => Reading::Words(vocabulary),
        }
    }
}

/// A prompt's ids with a word vocabulary: as `Vocabulary::encode`, without the `<eos>` of the
/// last line unless the prompt ends with a line break (the text continues that line).
fn prompt_words(vocabulary: &Vocabulary, text: &str) -> Result<Vec<u32>> {
    let mut ids = vocabulary.encode(text).context("tokenizing --prompt")?;
    if !text.ends_with(['\n', '\r']) && ids.last().is_some() && ids.last().copied() == vocabulary.eos() {
        ids.pop();
    }
    Ok(ids)
}

/// Byte tokens as text (ids above 255 as 255), invalid UTF-8 replaced.
pub fn bytes_as_text(tokens: &[u32]) -> String {
    let bytes: Vec<u8> = tokens.iter().map(|&t| t.min(255) as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `--temperature`: a finite number, at least 0.
fn temperature(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err("expected a finite number >= 0 (0: the most likely token)".into()),
    }
}

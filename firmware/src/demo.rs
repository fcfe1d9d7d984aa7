//! `demo`: continue a prompt, greedy or with seeded sampling, and print the text.
//!
//! Generation is `txl generate`'s, step for step (feed the prompt in segments, then one token at
//! a time, picking with the core's `Sampler`), so the same prompt, length, temperature and seed
//! give the same text on the host. The last line is
//! `demo tokens=N digest=0xHHHHHHHH instructions_per_token=Y`, `digest` being FNV-1a over the
//! generated token ids as little-endian u32s.
//!
//! A model image with a vocabulary (a word-level model) reads the prompt as words, looked up in
//! the image's vocabulary (`<unk>` for a word it lacks; lower-cased first, ASCII letters only,
//! when the vocabulary is lower-case), and prints the words it generates joined by spaces, a line
//! per `<eos>`, as `txl generate` writes them.

use defmt::info;
use heapless::{String, Vec};
use txl_core::digest::Fnv1a;
use txl_core::sampling::{Sampler, Sampling};
use txl_core::{Session, Vocabulary};

use crate::args::{DemoArgs, MAX_PROMPT};
use crate::counter::InstructionCounter;
use crate::Failure;

/// Bytes per printed line of text.
const LINE: usize = 96;

/// Generates `args.length` tokens after `args.prompt` and prints them as text.
pub fn run(
    mut session: Session<'_, '_>,
    args: &DemoArgs,
    counter: &InstructionCounter,
) -> Result<(), Failure> {
    let n_token = session.model().config().n_token;
    let tgt_len = session.options().tgt_len as usize;
    let vocabulary = session.model().image().vocabulary();
    let prompt: Vec<u32, MAX_PROMPT> = match &vocabulary {
        Some(vocabulary) => prompt_words(vocabulary, &args.prompt)?,
        None => args.prompt.iter().map(|&b| u32::from(b)).collect(),
    };
    if prompt.is_empty() {
        return Err(Failure::Args("the prompt is empty"));
    }
    if prompt.iter().any(|&t| t >= n_token) {
        return Err(Failure::Args("a prompt byte is not a token of this model"));
    }
    let sampling = Sampling::from_temperature(args.temperature, args.seed);
    info!(
        "demo: {=usize} tokens after \"{=str}\", {}",
        args.length,
        core::str::from_utf8(&args.prompt).unwrap_or("?"),
        sampling
    );

    let start = counter.read();
    let mut sampler = Sampler::new(sampling);
    let mut text = TextLines::new();
    text.push_all(&args.prompt);
    if vocabulary.is_some() {
        text.line_start = args.prompt.iter().all(u8::is_ascii_whitespace);
    }
    let mut next = None;
    for segment in prompt.chunks(tgt_len) {
        session.forward_last(segment, |_, row| next = Some(sampler.pick(row)))?;
    }
    let mut digest = Fnv1a::new();
    let mut generated = 0;
    while generated < args.length {
        let token = next.unwrap_or(0);
        digest.write(&token.to_le_bytes());
        match &vocabulary {
            Some(vocabulary) => text.push_word(vocabulary.symbol(token).unwrap_or("<?>")),
            None => text.push(token.min(255) as u8),
        }
        generated += 1;
        if generated == args.length {
            break;
        }
        session.forward_last(&[token], |_, row| next = Some(sampler.pick(row)))?;
    }
    text.finish();
    let instructions = counter.since(start).instructions();
    let fed = (prompt.len() + generated).saturating_sub(1).max(1) as u64;
    crate::stack::report();
    info!(
        "demo tokens={=usize} digest=0x{=u32:08x} instructions_per_token={=u64}",
        generated,
        digest.value(),
        instructions / fed
    );
    Ok(())
}

/// Longest prompt word looked up, in bytes.
const MAX_WORD: usize = 64;

/// The prompt's words as token ids of `vocabulary`, as `txl generate --prompt` takes them for a
/// word-level model: split at whitespace, no `<eos>` after the last line, `<eos>` at each line
/// break, `<unk>` (or `<UNK>`) for a word the vocabulary lacks.
fn prompt_words(vocabulary: &Vocabulary<'_>, prompt: &[u8]) -> Result<Vec<u32, MAX_PROMPT>, Failure> {
    let text = core::str::from_utf8(prompt).map_err(|_| Failure::Args("the prompt is not UTF-8"))?;
    let unk = vocabulary.find("<unk>").or_else(|| vocabulary.find("<UNK>"));
    let mut ids = Vec::new();
    let mut lines = text.split('\n').peekable();
    while let Some(line) = lines.next() {
        for word in line.split_whitespace() {
            let mut lowered: String<MAX_WORD> = String::new();
            let word = if vocabulary.lower_case() {
                for c in word.chars() {
                    lowered
                        .push(c.to_ascii_lowercase())
                        .map_err(|_| Failure::Args("a prompt word is longer than 64 bytes"))?;
                }
                lowered.as_str()
            } else {
                word
            };
            let id = vocabulary.find(word).or(unk).ok_or(Failure::Args(
                "a prompt word is not in the vocabulary, which has no <unk>",
            ))?;
            ids.push(id)
                .map_err(|_| Failure::Args("the prompt has too many words"))?;
        }
        if lines.peek().is_some() {
            if let Some(eos) = vocabulary.eos() {
                ids.push(eos)
                    .map_err(|_| Failure::Args("the prompt has too many words"))?;
            }
        }
    }
    Ok(ids)
}

/// Prints bytes (non-ASCII bytes as `?`) or words as lines of text.
struct TextLines {
    line: String<LINE>,
    /// No word on this line yet (words are joined by spaces).
    line_start: bool,
}

impl TextLines {
    fn new() -> TextLines {
        TextLines {
            line: String::new(),
            line_start: true,
        }
    }

    /// Appends a word: after a space unless the line is new; `<eos>` ends the line.
    fn push_word(&mut self, word: &str) {
        if word == txl_core::vocab::EOS {
            self.flush();
            self.line_start = true;
            return;
        }
        if !self.line_start {
            self.push(b' ');
        }
        for c in word.chars() {
            let mut bytes = [0u8; 4];
            if self.line.push_str(c.encode_utf8(&mut bytes)).is_err() {
                self.flush();
                let _ = self.line.push(c);
            }
        }
        self.line_start = false;
    }

    fn push_all(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.push(b);
        }
    }

    fn push(&mut self, byte: u8) {
        if byte == b'\n' {
            self.flush();
            return;
        }
        let c = if byte.is_ascii() && !byte.is_ascii_control() {
            byte as char
        } else {
            '?'
        };
        if self.line.push(c).is_err() {
            self.flush();
            let _ = self.line.push(c);
        }
    }

    fn finish(&mut self) {
        if !self.line.is_empty() {
            self.flush();
        }
    }

    fn flush(&mut self) {
        info!("| {=str}", self.line.as_str());
        self.line.clear();
    }
}

//! `demo`: continue a prompt, greedy or with seeded sampling, and print the text.
//!
//! Generation is `txl generate`'s, step for step (feed the prompt in segments, then one token at
//! a time, picking with the core's `Sampler`), so the same prompt, length, temperature and seed
//! give the same text on the host. The last line is
//! `demo tokens=N digest=0xHHHHHHHH instructions_per_token=Y`, `digest` being FNV-1a over the
//! generated token ids as little-endian u32s.

use defmt::info;
use heapless::{String, Vec};
use txl_core::digest::Fnv1a;
use txl_core::sampling::{Sampler, Sampling};
use txl_core::Session;

use crate::args::{DemoArgs, MAX_PROMPT};
use crate::counter::{self, InstructionCounter};
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
    let prompt: Vec<u32, MAX_PROMPT> = args.prompt.iter().map(|&b| u32::from(b)).collect();
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

    let start = counter.ticks();
    let mut sampler = Sampler::new(sampling);
    let mut text = TextLines::new();
    text.push_all(&args.prompt);
    let mut next = None;
    for segment in prompt.chunks(tgt_len) {
        session.forward_last(segment, |_, row| next = Some(sampler.pick(row)))?;
    }
    let mut digest = Fnv1a::new();
    let mut generated = 0;
    while generated < args.length {
        let token = next.unwrap_or(0);
        digest.write(&token.to_le_bytes());
        text.push(token.min(255) as u8);
        generated += 1;
        if generated == args.length {
            break;
        }
        session.forward_last(&[token], |_, row| next = Some(sampler.pick(row)))?;
    }
    text.finish();
    let instructions = counter::instructions(counter.ticks_since(start));
    let fed = (prompt.len() + generated).saturating_sub(1).max(1) as u64;
    info!(
        "demo tokens={=usize} digest=0x{=u32:08x} instructions_per_token={=u64}",
        generated,
        digest.value(),
        instructions / fed
    );
    Ok(())
}

/// Prints bytes as lines of text (non-ASCII bytes as `?`).
struct TextLines {
    line: String<LINE>,
}

impl TextLines {
    fn new() -> TextLines {
        TextLines { line: String::new() }
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

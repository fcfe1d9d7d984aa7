//! A firmware that is not part of txl: it runs a model that `txl export` wrote as a Rust module
//! (`exported/model.rs`, with the image beside it), with `txl-core` alone.
//!
//! It scores `exported/tokens.bin` (one token id per byte) in segments of the exported
//! `tgt_len`, as `txl score` does, and prints one line over semihosting:
//! `score tokens=N bits_per_token=X digest=0xHHHHHHHH`. The digest is `txl score --json`'s for the
//! same image, tokens and options when the log-probabilities are the same bits.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use semihosting::println;
use txl_core::digest::Digest;
use txl_core::{Error, Model, Session};

#[path = "../exported/model.rs"]
mod model;

/// The text to score, one token id per byte.
static TOKENS: &[u8] = include_bytes!("../exported/tokens.bin");

/// Longest segment fed at once.
const MAX_SEGMENT: usize = 256;

/// The arena: `model::ARENA_BYTES`, 16-byte aligned.
#[repr(C, align(16))]
struct Arena([u8; model::ARENA_BYTES]);

#[entry]
fn main() -> ! {
    // A `static mut` inside `#[entry]` is handed out once, as a `&'static mut`: no `unsafe`.
    static mut ARENA: Arena = Arena([0; model::ARENA_BYTES]);
    let code = match score(&mut ARENA.0) {
        Ok(()) => 0,
        Err(error) => {
            println!("error: {}", error);
            1
        }
    };
    semihosting::process::exit(code)
}

fn score(arena: &mut [u8]) -> Result<(), Error> {
    let model = Model::parse(model::IMAGE)?;
    let mut session = Session::new(&model, arena, model::OPTIONS)?;
    let tgt_len = (model::OPTIONS.tgt_len as usize).min(MAX_SEGMENT);
    let mut digest = Digest::new();
    let mut sum = 0.0f64;
    let mut predicted = 0usize;
    let mut segment = [0u32; MAX_SEGMENT];
    for (index, chunk) in TOKENS.chunks(tgt_len).enumerate() {
        for (slot, &byte) in segment.iter_mut().zip(chunk) {
            *slot = u32::from(byte);
        }
        let base = index * tgt_len;
        session.forward(&segment[..chunk.len()], |i, log_probs| {
            // Row i predicts the token after it; the text's last row predicts nothing.
            if let Some(&next) = TOKENS.get(base + i + 1) {
                let log_prob = log_probs[usize::from(next)];
                digest.push(log_prob);
                sum += f64::from(log_prob); // in order, as the host sums it
                predicted += 1;
            }
        })?;
    }
    let bits_per_token = -sum / predicted.max(1) as f64 / core::f64::consts::LN_2;
    println!(
        "score tokens={} bits_per_token={:.6} digest={:#010x}",
        TOKENS.len(),
        bits_per_token,
        digest.value()
    );
    Ok(())
}

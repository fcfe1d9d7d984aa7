//! Scores a token file with a model image on the core alone, and prints the digest of the
//! log-probabilities and the bits per token: the figures `txl score --json` gives for the same
//! model, text and options.
//!
//! ```text
//! cargo run --release -p txl-core --features std --example score -- MODEL TOKENS [--tgt-len N] [--fast-f32]
//! ```
//!
//! `TOKENS` holds one token id a byte (`txl score --bytes`). The session takes the model's
//! defaults, as `txl score` does without options: int8 memory for an integer image, f32 for a
//! float one. `scripts/aarch64.sh` runs it under QEMU user mode, so the core's digests on
//! aarch64 need no cross build of the command.

use std::process::ExitCode;

use txl_core::image::Arithmetic;
use txl_core::{scoring, AlignedBytes, MemDtype, Model, SessionOptions};

const USAGE: &str = "usage: score MODEL TOKENS [--tgt-len N] [--fast-f32]";

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<String, String> {
    let mut args = std::env::args().skip(1);
    let (Some(model_path), Some(tokens_path)) = (args.next(), args.next()) else {
        return Err(USAGE.into());
    };
    let (mut tgt_len, mut fast_f32) = (None, false);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--tgt-len" => {
                let value = args.next().ok_or(USAGE)?;
                let value = value
                    .parse::<u32>()
                    .map_err(|e| format!("--tgt-len {value}: {e}"))?;
                tgt_len = Some(value);
            }
            "--fast-f32" => fast_f32 = true,
            _ => return Err(format!("unknown argument {arg:?}\n{USAGE}")),
        }
    }
    let bytes = std::fs::read(&model_path).map_err(|e| format!("{model_path}: {e}"))?;
    let image = AlignedBytes::copy_from(&bytes).map_err(|e| format!("{model_path}: {e}"))?;
    let mut model = Model::parse(image.bytes()).map_err(|e| format!("{model_path}: {e}"))?;
    model.set_fast_f32(fast_f32);
    let tokens = std::fs::read(&tokens_path).map_err(|e| format!("{tokens_path}: {e}"))?;
    let tokens: Vec<u32> = tokens.into_iter().map(u32::from).collect();
    let defaults = SessionOptions::from_config(model.config());
    let options = SessionOptions {
        tgt_len: tgt_len.unwrap_or(defaults.tgt_len),
        mem_dtype: match model.image().arithmetic() {
            Arithmetic::Integer { .. } => MemDtype::Int8,
            Arithmetic::Float => MemDtype::F32,
        },
        ..defaults
    };
    let scores = scoring::score(&model, &tokens, options, 0, |_| {}).map_err(|e| e.to_string())?;
    Ok(format!(
        "digest {:#010x} bits_per_token {}",
        scores.digest(),
        scores.bits_per_token()
    ))
}

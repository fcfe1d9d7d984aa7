//! A firmware that is not part of txl: it runs a model that `txl export` wrote as a Rust module
//! (`exported/model.rs`, with the image beside it), with `txl-core` alone.
//!
//! It scores `exported/tokens.bin` (one token id per byte) in segments of the exported
//! `tgt_len`, as `txl score` does, and prints one line over semihosting:
//! `score tokens=N bits_per_token=X digest=0xHHHHHHHH`. The digest is `txl score --json`'s for the
//! same image, tokens and options when the log-probabilities are the same bits.
//!
//! It is also the measure of txl's code size: it links only the kernels of the weight precision
//! and memory dtype it is built for (its features), and writes its line without `core::fmt`
//! (whose float formatting alone is about 25 KB), so its `.text` is txl's share of a firmware.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use semihosting::io::Write;
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
            let mut line = Line::new();
            line.text("error: ").text(reason(&error)).text("\n");
            line.print();
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
    let mut line = Line::new();
    line.text("score tokens=")
        .decimal(TOKENS.len() as u32)
        .text(" bits_per_token=")
        .fixed6(bits_per_token)
        .text(" digest=0x")
        .hex8(digest.value())
        .text("\n");
    line.print();
    Ok(())
}

/// Why the core refused, in words, without `core::fmt` (`Error`'s `Display` says more, with
/// numbers, at the price of the formatting machinery).
fn reason(error: &Error) -> &'static str {
    match error {
        Error::ArenaTooSmall { .. } => "the arena is smaller than Session::arena_bytes",
        // (the feature's name is in the error: printing it costs 270 bytes of code here)
        Error::LeftOut(_) => "the image or options need a txl-core feature this build leaves out",
        Error::BadChecksum { .. } | Error::Truncated { .. } => "the image is damaged",
        Error::TokenOutOfRange { .. } => "a token id is not below n_token",
        _ => "txl-core refused the image or its options (txl score on the host says why)",
    }
}

/// One line of output, written without `core::fmt`.
struct Line {
    bytes: [u8; 96],
    len: usize,
}

impl Line {
    fn new() -> Line {
        Line {
            bytes: [0; 96],
            len: 0,
        }
    }

    fn text(&mut self, text: &str) -> &mut Line {
        text.bytes().for_each(|byte| {
            self.byte(byte);
        });
        self
    }

    fn byte(&mut self, byte: u8) -> &mut Line {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
        self
    }

    /// `value` in decimal, with 32-bit divisions (64-bit ones are a library call on the core).
    fn decimal(&mut self, mut value: u32) -> &mut Line {
        let mut digits = [0u8; 10];
        let mut count = 0;
        loop {
            digits[count] = b'0' + (value % 10) as u8;
            count += 1;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        for &digit in digits[..count].iter().rev() {
            self.byte(digit);
        }
        self
    }

    /// `value` (non-negative, below 2^32) rounded to six decimals.
    fn fixed6(&mut self, value: f64) -> &mut Line {
        let mut whole = value as u32;
        let mut micros = ((value - f64::from(whole)) * 1e6 + 0.5) as u32;
        if micros >= 1_000_000 {
            whole += 1;
            micros -= 1_000_000;
        }
        self.decimal(whole).text(".");
        let mut scale = 100_000;
        while scale > 0 {
            self.byte(b'0' + (micros / scale % 10) as u8);
            scale /= 10;
        }
        self
    }

    fn hex8(&mut self, value: u32) -> &mut Line {
        for shift in (0..8).rev() {
            let nibble = (value >> (shift * 4)) & 0xf;
            self.byte(b"0123456789abcdef"[nibble as usize]);
        }
        self
    }

    fn print(&self) {
        if let Ok(mut out) = semihosting::io::stdout() {
            let _ = out.write_all(&self.bytes[..self.len]);
        }
    }
}

/// A panic (a bug: the core returns errors on bad input) says so and exits with 101, without
/// formatting its message.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    let mut line = Line::new();
    line.text("panicked\n");
    line.print();
    semihosting::process::exit(101)
}

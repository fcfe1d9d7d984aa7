//! The command line, read through semihosting.
//!
//! ```text
//! [score|demo] [--arena static|heap]
//!              [--tgt-len N] [--mem-len M] [--clamp-len C] [--same-length true|false]
//!              [--mem-init empty|zeros]
//!              [--prompt TEXT] [--length N] [--temperature T] [--seed S]     (demo)
//! ```
//!
//! The session options default to the build-time ones (`TXL_TGT_LEN`, ...). The static arena is
//! sized for those; other options need `--arena heap` unless their arena is no larger. The demo
//! defaults match `txl generate`: 200 tokens, temperature 0.8 (0: greedy), seed 1.

use heapless::Vec;
use txl_core::{MemInit, SessionOptions};

use crate::{build, Failure};

/// Longest prompt, in bytes.
pub const MAX_PROMPT: usize = 256;

/// Bytes of the semihosting command line the firmware reads.
const CMDLINE_BYTES: usize = 1024;

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Score the build-time token file.
    Score,
    /// Continue a prompt.
    Demo,
}

/// Where the arena comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArenaSource {
    /// The static buffer sized at build time.
    Static,
    /// The heap, sized at boot for the run-time options.
    Heap,
}

/// The demo's settings.
#[derive(Clone, Debug)]
pub struct DemoArgs {
    /// Prompt bytes (one token each).
    pub prompt: Vec<u8, MAX_PROMPT>,
    /// Tokens to generate.
    pub length: usize,
    /// Sampling temperature; 0 picks the most likely token.
    pub temperature: f32,
    /// Sampler seed.
    pub seed: u64,
}

/// The parsed command line.
#[derive(Clone, Debug)]
pub struct Cli {
    /// What to run.
    pub mode: Mode,
    /// Where the arena comes from.
    pub arena: ArenaSource,
    tgt_len: Option<u32>,
    mem_len: Option<u32>,
    clamp_len: Option<u32>,
    same_length: Option<bool>,
    mem_init: Option<MemInit>,
    /// The demo's settings.
    pub demo: DemoArgs,
}

impl Cli {
    /// The build-time session options with the command line's changes.
    pub fn options(&self) -> SessionOptions {
        let build = build::OPTIONS;
        SessionOptions {
            tgt_len: self.tgt_len.unwrap_or(build.tgt_len),
            mem_len: self.mem_len.unwrap_or(build.mem_len),
            clamp_len: self.clamp_len.unwrap_or(build.clamp_len),
            same_length: self.same_length.unwrap_or(build.same_length),
            mem_init: self.mem_init.unwrap_or(build.mem_init),
            ..build
        }
    }
}

impl Default for Cli {
    fn default() -> Cli {
        let mut prompt = Vec::new();
        let _ = prompt.extend_from_slice(b"And God said");
        Cli {
            mode: Mode::Score,
            arena: ArenaSource::Static,
            tgt_len: None,
            mem_len: None,
            clamp_len: None,
            same_length: None,
            mem_init: None,
            demo: DemoArgs {
                prompt,
                length: 200,
                temperature: 0.8,
                seed: 1,
            },
        }
    }
}

/// Reads the semihosting command line (argument 0 is the program name). No command line (a
/// debugger that gives none) means the defaults.
pub fn parse() -> Result<Cli, Failure> {
    let mut cli = Cli::default();
    let Ok(args) = semihosting::experimental::env::args::<CMDLINE_BYTES>() else {
        return Ok(cli);
    };
    let mut words = (&args).skip(1);
    while let Some(word) = words.next() {
        let word = word.map_err(|_| Failure::Args("an argument is not UTF-8"))?;
        let mut value = || -> Result<&str, Failure> {
            match words.next() {
                Some(Ok(value)) => Ok(value),
                Some(Err(_)) => Err(Failure::Args("an argument is not UTF-8")),
                None => Err(Failure::Args("an option needs a value")),
            }
        };
        match word {
            "score" => cli.mode = Mode::Score,
            "demo" => cli.mode = Mode::Demo,
            "--arena" => {
                cli.arena = match value()? {
                    "static" => ArenaSource::Static,
                    "heap" => ArenaSource::Heap,
                    _ => return Err(Failure::Args("--arena takes static or heap")),
                }
            }
            "--tgt-len" => cli.tgt_len = Some(number(value()?, "--tgt-len takes a whole number")?),
            "--mem-len" => cli.mem_len = Some(number(value()?, "--mem-len takes a whole number")?),
            "--clamp-len" => cli.clamp_len = Some(number(value()?, "--clamp-len takes a whole number")?),
            "--same-length" => {
                cli.same_length = Some(match value()? {
                    "true" => true,
                    "false" => false,
                    _ => return Err(Failure::Args("--same-length takes true or false")),
                })
            }
            "--mem-init" => {
                cli.mem_init = Some(
                    value()?
                        .parse()
                        .map_err(|_| Failure::Args("--mem-init takes empty or zeros"))?,
                )
            }
            "--prompt" => {
                cli.demo.prompt.clear();
                cli.demo
                    .prompt
                    .extend_from_slice(value()?.as_bytes())
                    .map_err(|_| Failure::Args("the prompt is longer than 256 bytes"))?;
            }
            "--length" => cli.demo.length = number(value()?, "--length takes a whole number")? as usize,
            "--temperature" => {
                cli.demo.temperature = value()?
                    .parse()
                    .ok()
                    .filter(|t: &f32| *t >= 0.0)
                    .ok_or(Failure::Args("--temperature takes a number >= 0"))?
            }
            "--seed" => {
                cli.demo.seed = value()?
                    .parse()
                    .map_err(|_| Failure::Args("--seed takes a whole number"))?
            }
            _ => return Err(Failure::Args("unknown argument (see firmware/README.md)")),
        }
    }
    Ok(cli)
}

fn number(text: &str, message: &'static str) -> Result<u32, Failure> {
    text.parse().map_err(|_| Failure::Args(message))
}

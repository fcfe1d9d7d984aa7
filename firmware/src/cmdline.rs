//! The command line's grammar: words to a [`Cli`], with nothing of the board in it.
//!
//! ```text
//! [score|demo|bench] [--arena static|heap]
//!              [--tgt-len N] [--mem-len M] [--clamp-len C] [--same-length true|false]
//!              [--mem-init empty|zeros]
//!              [--reset-after K]                                                (score)
//!              [--prompt TEXT] [--length N] [--temperature T] [--seed S]     (demo)
//! ```
//!
//! The session options start from the defaults the caller passes (the firmware passes its
//! build-time ones, `TXL_TGT_LEN`, ...). The demo defaults match `txl generate`: 200 tokens,
//! temperature 0.8 (0: greedy), seed 1.
//!
//! This file depends on `core`, `heapless` and `txl_core` only, so the host can compile it
//! on its own (the fuzz target `firmware_args` includes it by path).

use heapless::Vec;
use txl_core::SessionOptions;

/// Longest prompt, in bytes.
pub const MAX_PROMPT: usize = 256;

/// Why a command line was refused: one line for the user.
pub type CmdlineError = &'static str;

/// The message for a word that is not UTF-8.
const NOT_UTF8: CmdlineError = "an argument is not UTF-8";

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Score the build-time token file.
    Score,
    /// Continue a prompt.
    Demo,
    /// Count each kernel's instructions on fixed shapes (no model needed).
    Bench,
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
    /// Sampling temperature, finite and `>= 0`; 0 picks the most likely token.
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
    /// The session options: the defaults given to [`parse`] with the command line's changes.
    options: SessionOptions,
    /// Score: after this many segments, save the session state to RAM that survives a soft
    /// reset, reset, and go on from the saved state after the reboot.
    pub reset_after: Option<usize>,
    /// The demo's settings.
    pub demo: DemoArgs,
}

impl Cli {
    /// No arguments: score, static arena, the `defaults` session options, the demo defaults.
    pub fn new(defaults: SessionOptions) -> Cli {
        let mut prompt = Vec::new();
        let _ = prompt.extend_from_slice(b"And God said");
        Cli {
            mode: Mode::Score,
            arena: ArenaSource::Static,
            options: defaults,
            reset_after: None,
            demo: DemoArgs {
                prompt,
                length: 200,
                temperature: 0.8,
                seed: 1,
            },
        }
    }

    /// The session options: the defaults given to [`parse`] with the command line's changes.
    pub fn options(&self) -> SessionOptions {
        self.options
    }
}

/// Parses `words` (the arguments after the program name; an `Err` is a word that is not
/// UTF-8) over the session options `defaults`.
pub fn parse<'a, E>(
    words: impl IntoIterator<Item = Result<&'a str, E>>,
    defaults: SessionOptions,
) -> Result<Cli, CmdlineError> {
    let mut cli = Cli::new(defaults);
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let word = word.map_err(|_| NOT_UTF8)?;
        let mut value = || -> Result<&'a str, CmdlineError> {
            match words.next() {
                Some(Ok(value)) => Ok(value),
                Some(Err(_)) => Err(NOT_UTF8),
                None => Err("an option needs a value"),
            }
        };
        match word {
            "score" => cli.mode = Mode::Score,
            "demo" => cli.mode = Mode::Demo,
            "bench" => cli.mode = Mode::Bench,
            "--arena" => {
                cli.arena = match value()? {
                    "static" => ArenaSource::Static,
                    "heap" => ArenaSource::Heap,
                    _ => return Err("--arena takes static or heap"),
                }
            }
            "--tgt-len" => cli.options.tgt_len = number(value()?, "--tgt-len takes a whole number")?,
            "--mem-len" => cli.options.mem_len = number(value()?, "--mem-len takes a whole number")?,
            "--clamp-len" => cli.options.clamp_len = number(value()?, "--clamp-len takes a whole number")?,
            "--same-length" => {
                cli.options.same_length = match value()? {
                    "true" => true,
                    "false" => false,
                    _ => return Err("--same-length takes true or false"),
                }
            }
            "--mem-init" => {
                cli.options.mem_init = value()?.parse().map_err(|_| "--mem-init takes empty or zeros")?
            }
            "--reset-after" => {
                cli.reset_after = Some(number(value()?, "--reset-after takes a whole number")? as usize)
            }
            "--prompt" => {
                cli.demo.prompt.clear();
                cli.demo
                    .prompt
                    .extend_from_slice(value()?.as_bytes())
                    .map_err(|_| "the prompt is longer than 256 bytes")?;
            }
            "--length" => cli.demo.length = number(value()?, "--length takes a whole number")? as usize,
            "--temperature" => {
                cli.demo.temperature = value()?
                    .parse()
                    .ok()
                    .filter(|t: &f32| t.is_finite() && *t >= 0.0)
                    .ok_or("--temperature takes a finite number >= 0")?
            }
            "--seed" => cli.demo.seed = value()?.parse().map_err(|_| "--seed takes a whole number")?,
            _ => return Err("unknown argument (see firmware/README.md)"),
        }
    }
    Ok(cli)
}

fn number(text: &str, message: CmdlineError) -> Result<u32, CmdlineError> {
    text.parse().map_err(|_| message)
}

//! The `txl` command: its arguments, and one module per subcommand.
//!
//! Each subcommand is an `Args` struct with `run(self, out)`: what it prints as its result goes
//! to `out` (the binary passes stdout), while progress bars, notes and the quantizer's report go
//! to stderr. A reader that closes stdout early (`txl inspect model.txl | head`) ends the run
//! quietly: [`is_broken_pipe`] tells the binary so.
//!
//! - `args`: the argument groups several subcommands share (session options, token source,
//!   backend, quantizer settings).
//! - `arena`: what a run's sessions need, found by arithmetic before anything is allocated.
//! - `files`: reading model images and writing outputs; `progress`: the bars on stderr.
#![deny(clippy::print_stdout)]

use std::io::Write;

use anyhow::Result;
use clap::{Parser, Subcommand};

mod arena;
mod args;
mod bench;
mod compare;
mod convert;
mod demo;
mod eval;
mod export;
mod fit;
mod generate;
mod inspect;
mod picture;
mod progress;
mod quantize;
mod score;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "txl",
    version,
    about = "Transformer-XL for microcontrollers: convert checkpoints, score and generate text",
    long_about = "Transformer-XL for microcontrollers.\n\n\
        Convert a Transformer-XL checkpoint (Hugging Face, or the authors' PyTorch or \
        TensorFlow code) to a txl model image, then score or generate text with the same \
        no_std engine that runs on the device, and see whether it fits your microcontroller.",
    after_help = "Examples:\n  \
        txl demo\n  \
        txl convert path/to/hf-checkpoint -o model.txl\n  \
        txl inspect model.txl\n  \
        txl score model.txl --bytes heldout.txt --json\n  \
        txl score model.txl --tokens ids.txt --tgt-len 1 --mem-init zeros --out logp.npy\n  \
        txl generate model.txl --prompt \"In the beginning\" --length 200\n  \
        txl quantize model.txl -o model-int8.txl --calib-bytes train.txt --report report.json\n  \
        txl compare model.txl model-int8.txl --bytes heldout.txt --mem-dtype int8\n  \
        txl eval model.txl --text heldout.txt --bytes --batch 8\n  \
        txl bench model.txl\n  \
        txl export model.txl --rust firmware/src/model\n  \
        txl fit model.txl --part stm32f405"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Convert a checkpoint (Hugging Face, the authors' PyTorch or TensorFlow code) to a txl model image.
    ///
    /// SRC is a Hugging Face directory with config.json and model.safetensors or
    /// pytorch_model.bin (or one of those files, with config.json beside it), the original
    /// training code's model.pt or state_dict, or a TensorFlow checkpoint (model.ckpt-N, its
    /// .index, or the folder holding `checkpoint`). Tied tensors are stored once.
    #[command(after_help = convert::EXAMPLES)]
    Convert(convert::Args),
    /// Quantize a model image to f16, int8 (W8A8) or int4 (W4A8) weights, with a report of the cost.
    ///
    /// int8 is per-row symmetric with the clipping range searched per row; int4 has a
    /// multiplier per group of --group-size columns. With calibration text (never the text you
    /// evaluate on), activation smoothing is tried and kept where it lowers the measured bits per
    /// token, rows are rounded with their errors compensated (--method's default then),
    /// tensors kept at a higher precision within a byte budget (--budget-bytes), and the report
    /// measures each precision (--report JSON, --report-png picture).
    #[command(after_help = quantize::EXAMPLES)]
    Quantize(quantize::Args),
    /// Compare a candidate image (e.g. quantized) with a reference on the same tokens.
    ///
    /// Prints bits per token of each, the relative change, mean KL(ref || cand) per token, top-1
    /// agreement and the largest change of ln p of the scored tokens. --mem-dtype applies to the
    /// candidate; the reference keeps f32 memory.
    #[command(after_help = compare::EXAMPLES)]
    Compare(compare::Args),
    /// Score a token sequence: log-probability of every next token, bits per token.
    ///
    /// Tokens are processed in consecutive segments of --tgt-len (the last may be shorter) with
    /// the memory carried between segments; --tgt-len 1 is token-by-token streaming.
    #[command(after_help = score::EXAMPLES)]
    Score(score::Args),
    /// Bits per token and perplexity over a long text, with the full-precision reference.
    ///
    /// The text is split into --batch contiguous streams scored side by side (each with its own
    /// memory, every token after the first predicted once), in segments of tgt_len.
    #[command(after_help = eval::EXAMPLES)]
    Eval(eval::Args),
    /// Measure speed: tokens per second per precision, as ratios against f32 in the same run.
    ///
    /// Scores the same pseudo-random tokens with the core for the f32 image and its f16, int8
    /// and int4 variants (quantized in memory), and with the full-precision reference (cpu32).
    /// Each speed is also given in multiply-accumulates a second and as a percentage of this
    /// machine's limit: what the core's f32 or int8 kernels do with their weights in the
    /// first-level cache (f32 for a segment's positions also on 192 KB of rows in the
    /// second-level cache), measured by the command first (about a third of a second; int8 in
    /// segments of three positions or more against the AMX tile kernel, or the AVX-512 VNNI
    /// kernel of eight positions at a time, where the CPU has one).
    #[command(after_help = bench::EXAMPLES)]
    Bench(bench::Args),
    /// Continue a prompt with the model.
    #[command(after_help = generate::EXAMPLES)]
    Generate(generate::Args),
    /// Print a model image's config, vocabulary, tensors and the arena a session needs.
    #[command(after_help = inspect::EXAMPLES)]
    Inspect(inspect::Args),
    /// Write a Rust module or C source for firmware: the image as an aligned static, the arena
    /// size and the session options.
    ///
    /// The module (--rust: OUT_DIR/NAME.rs) includes a copy of the image (OUT_DIR/NAME.txl) with
    /// include_bytes!, aligned to 16 bytes, and holds ARENA_BYTES and STATE_BYTES for the
    /// session options given here (the model's defaults otherwise) and those options as a const
    /// txl_core::SessionOptions. It needs txl-core alone: nothing of txl's tools at build time.
    /// Its C twin (--c: OUT_DIR/NAME.h and OUT_DIR/NAME.c) holds the image as an aligned const
    /// uint8_t array, TXL_ARENA_BYTES, TXL_STATE_BYTES and the options, for the C API
    /// (include/txl.h).
    #[command(after_help = export::EXAMPLES)]
    Export(export::Args),
    /// Convert the bundled demo model, score held-out text, generate a sample, quantize to int8.
    #[command(after_help = demo::EXAMPLES)]
    Demo(demo::Args),
    /// Does a model fit a microcontroller: flash, RAM, session options and tokens per second.
    ///
    /// Checks the image against the part's flash beside the firmware's own code (measured), and
    /// finds the session options whose arena fits its RAM beside the stack and statics the
    /// firmware keeps: for each memory dtype and position-key mode the longest mem_len,
    /// streaming (tgt_len 1) and in segments. It suggests the most exact options that keep the
    /// model's mem_len streaming (else the longest memory), and estimates instructions per token
    /// from the instructions per MAC the firmware measured on the part's core in QEMU
    /// (scripts/firmware.sh --table). QEMU counts instructions, not cycles: tokens per second
    /// assume one instruction a cycle, an upper bound. --part list prints the parts.
    #[command(after_help = fit::EXAMPLES)]
    Fit(fit::Args),
}

impl Cli {
    /// Runs the subcommand, printing its result on `out`.
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        match self.command {
            Command::Convert(args) => args.run(out),
            Command::Quantize(args) => args.run(out),
            Command::Compare(args) => args.run(out),
            Command::Score(args) => args.run(out),
            Command::Eval(args) => args.run(out),
            Command::Bench(args) => args.run(out),
            Command::Generate(args) => args.run(out),
            Command::Inspect(args) => args.run(out),
            Command::Export(args) => args.run(out),
            Command::Demo(args) => args.run(out),
            Command::Fit(args) => args.run(out),
        }
    }
}

/// Whether `error` comes from writing to a pipe whose reader has gone (`txl ... | head`): not a
/// failure of the command, which should then end quietly.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

//! `txl fit`: does a model fit a microcontroller, with which session options, and how fast might
//! it run there.
//!
//! - **Flash**: the image beside txl's code for the image's weight precision alone, as
//!   `examples/export-demo` measures it on the part's Arm instruction set ([`CODE`], written by
//!   `scripts/export-example.sh --code-table`); where none is measured (RISC-V, integer images),
//!   the code of the whole firmware on the core's board ([`CORES`], `scripts/firmware.sh
//!   --table`: every precision, the log and the benchmarks, several times more).
//! - **RAM**: the arena ([`Session::arena_bytes`], the core's own arithmetic) beside the stack
//!   and the statics the firmware keeps (measured on the `stm32f405` board: `firmware/src/board.rs`).
//!   For each memory dtype and position-key mode, the longest `mem_len` that fits, streaming
//!   (`tgt_len 1`) and in segments of the model's `tgt_len`.
//! - **Speed**: multiply-accumulates per token ([`txl_core::macs`]) times the instructions per
//!   MAC the firmware measured on the core for the image's weights, and the part's clock over
//!   that. QEMU counts instructions, not cycles: the tokens per second assume one instruction a
//!   cycle, an upper bound (flash wait states, loads and multiplies that take more than a cycle
//!   on the real part lower it).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use txl_core::arena::ArenaLayout;
use txl_core::image::{Arithmetic, Dtype};
use txl_core::macs::segment_macs;
use txl_core::tensors::Shape;
use txl_core::{MemDtype, Model, OptionWord, PositionKeys, Session, SessionOptions};

use crate::image_file::{parse_model, read_image, write_file};

mod picture;

/// The firmware's boards (memory maps, the stack and statics it keeps), the file the firmware,
/// its build script and its runner read.
#[allow(dead_code)]
pub(crate) mod board {
    include!("../../../firmware/src/board.rs");
}

pub const EXAMPLES: &str = "Examples:\n  \
    txl fit model.txl --part stm32f405\n  \
    txl fit model.txl --part rp2040 --json\n  \
    txl fit model.txl --ram 256K --flash 1M --core Cortex-M4F --clock 120\n  \
    txl fit model.txl --part nrf52840 --png fit.png\n  \
    txl fit --part list";

/// The parts: name, core, board, clock, RAM for the firmware, all SRAM, flash, description.
const PARTS: &str = include_str!("fit/parts.tsv");

/// What the firmware measured on each board (`scripts/firmware.sh --table` writes it): per
/// precision of the demo model, instructions per MAC, and the flash its code takes.
pub const CORES: &str = include_str!("fit/cores.tsv");

/// txl's code for one weight precision on each Arm instruction set: `.text` bytes of
/// `examples/export-demo` built with that precision's features (`scripts/export-example.sh
/// --code-table` writes it).
pub const CODE: &str = include_str!("fit/code.tsv");

/// The Rust target whose row of [`CODE`] stands for `core`'s code: the one it builds for, or for
/// Armv8-M Mainline (M33, M55) Armv7E-M's, the same Thumb-2 instructions with the DSP extension.
fn code_target(core: &str) -> Option<&'static str> {
    match core {
        "Cortex-M4F" | "Cortex-M4" | "Cortex-M7" | "Cortex-M33" | "Cortex-M55" => {
            Some("thumbv7em-none-eabihf")
        }
        "Cortex-M3" => Some("thumbv7m-none-eabi"),
        "Cortex-M0+" | "Cortex-M0" | "Armv6-M" => Some("thumbv6m-none-eabi"),
        _ => None,
    }
}

/// `(bytes, where measured)` of txl's code for `weights` on `core`, from [`CODE`].
fn precision_code(core: &str, weights: &str) -> Result<Option<(usize, String)>> {
    let Some(target) = code_target(core) else {
        return Ok(None);
    };
    for (number, line) in CODE.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let [row_target, row_weights, bytes] = f[..] else {
            bail!("code table line {}: {line:?}", number + 1);
        };
        if row_target == target && row_weights == weights {
            let bytes = bytes
                .parse()
                .with_context(|| format!("code table line {}: {line:?}", number + 1))?;
            return Ok(Some((
                bytes,
                format!("examples/export-demo, {weights} alone, {target}"),
            )));
        }
    }
    Ok(None)
}

/// The longest `mem_len` searched.
const MAX_MEM_LEN: u32 = 1 << 20;

/// Arguments of `txl fit`.
#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("target").required(true).args(["part", "ram"]))]
pub struct Args {
    /// Model image (not needed with `--part list`).
    pub model: Option<PathBuf>,
    /// A part from the table (`--part list` prints it), e.g. stm32f405, rp2040, a QEMU board.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["ram", "flash"])]
    pub part: Option<String>,
    /// RAM the firmware may take, in bytes (`256K`, `1M` and `0x40000` also read), instead of a part.
    #[arg(long, value_name = "BYTES", requires = "flash", value_parser = parse_bytes)]
    pub ram: Option<usize>,
    /// Flash for the code and the model image, in bytes, with `--ram`.
    #[arg(long, value_name = "BYTES", requires = "ram", value_parser = parse_bytes)]
    pub flash: Option<usize>,
    /// The core, with `--ram` and `--flash`, for the speed estimate: one of the measured cores
    /// (Cortex-M4F, Cortex-M7, Cortex-M33, Cortex-M55, Cortex-M3, Cortex-M0+, RV32IMC).
    #[arg(long, value_name = "CORE", requires = "ram")]
    pub core: Option<String>,
    /// The core's clock in MHz (default: the part's top clock).
    #[arg(long, value_name = "MHZ")]
    pub clock: Option<f64>,
    /// Print the answer as JSON (exit 0 whether it fits or not).
    #[arg(long)]
    pub json: bool,
    /// Draw the flash and RAM of the model against the part's as a PNG.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
}

/// `1234`, `0x4d2`, `128K`/`128KiB` (×1024), `1M`/`1MiB` (×1024²).
fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, scale) = match t.trim_end_matches("iB").trim_end_matches('B') {
        s if s.ends_with(['K', 'k']) => (&s[..s.len() - 1], 1usize << 10),
        s if s.ends_with(['M', 'm']) => (&s[..s.len() - 1], 1 << 20),
        s => (s, 1),
    };
    let value = match digits.strip_prefix("0x") {
        Some(hex) => usize::from_str_radix(hex, 16).ok(),
        None => digits.parse::<usize>().ok(),
    };
    value
        .and_then(|v| v.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a byte count (e.g. 131072, 128K, 1M)"))
}

/// A microcontroller.
#[derive(Clone, Debug, Serialize)]
pub struct Part {
    /// What `--part` takes.
    pub name: String,
    /// Its core, as the boards name it.
    pub core: String,
    /// The board whose measurements stand for the core, if any.
    pub board: Option<String>,
    /// Top clock in MHz (none known for a QEMU board without a stated clock).
    pub clock_mhz: Option<f64>,
    /// RAM the firmware takes as one region.
    pub ram_bytes: usize,
    /// All the on-chip SRAM.
    pub sram_bytes: usize,
    /// Flash for code and image.
    pub flash_bytes: usize,
    /// Flash for the image alone when the image has a region of its own (QEMU's MPS3 AN547).
    pub image_region_bytes: Option<usize>,
    /// Stack kept at the top of the RAM.
    pub stack_bytes: usize,
    /// RAM kept for the statics besides the arena.
    pub static_bytes: usize,
    /// One line about it.
    pub description: String,
}

/// The parts of `parts.tsv`, then the firmware's QEMU boards.
pub fn parts() -> Result<Vec<Part>> {
    let mut parts = Vec::new();
    for (number, line) in PARTS.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || anyhow!("parts.tsv line {}: {line:?}", number + 1);
        if f.len() != 8 {
            return Err(bad());
        }
        let number = |s: &str| s.parse::<usize>().map_err(|_| bad());
        parts.push(Part {
            name: f[0].into(),
            core: f[1].into(),
            board: (f[2] != "-").then(|| f[2].into()),
            clock_mhz: Some(f[3].parse().map_err(|_| bad())?),
            ram_bytes: number(f[4])?,
            sram_bytes: number(f[5])?,
            flash_bytes: number(f[6])?,
            image_region_bytes: None,
            stack_bytes: board::STM32F405.stack_bytes,
            static_bytes: board::STM32F405.static_bytes,
            description: f[7].into(),
        });
    }
    for b in board::BOARDS {
        if parts.iter().any(|p| p.name == b.name) {
            continue;
        }
        let clock_mhz = match b.counter {
            board::Counter::SysTick { hz } => Some(f64::from(hz) / 1e6),
            board::Counter::Minstret => None,
        };
        parts.push(Part {
            name: b.name.into(),
            core: b.core.into(),
            board: Some(b.name.into()),
            clock_mhz,
            ram_bytes: b.ram.bytes,
            sram_bytes: b.ram.bytes,
            flash_bytes: b.flash.bytes,
            image_region_bytes: b.image.map(|r| r.bytes),
            stack_bytes: b.stack_bytes,
            static_bytes: b.static_bytes,
            description: format!("QEMU's {} machine ({}), the firmware's board", b.machine, b.core),
        });
    }
    Ok(parts)
}

/// One measured row of [`CORES`].
#[derive(Clone, Debug, PartialEq)]
pub struct CoreRow {
    /// The firmware's board.
    pub board: String,
    /// Its core.
    pub core: String,
    /// `int8`, `int4`, `f16`, `f32` or `integer`.
    pub weights: String,
    /// The segment length it ran with: 1 is streaming.
    pub tgt_len: u32,
    /// Instructions per token over MACs per token.
    pub instructions_per_mac: f64,
    /// Flash the build's code and constants take.
    pub code_bytes: usize,
}

/// The rows of a cores table (the text of [`CORES`]).
pub fn core_rows(text: &str) -> Result<Vec<CoreRow>> {
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || anyhow!("cores table line {}: {line:?}", number + 1);
        if f.len() != 9 {
            return Err(bad());
        }
        rows.push(CoreRow {
            board: f[0].into(),
            core: f[1].into(),
            weights: f[2].into(),
            tgt_len: f[3].parse().map_err(|_| bad())?,
            instructions_per_mac: f[7].parse().map_err(|_| bad())?,
            code_bytes: f[8].parse().map_err(|_| bad())?,
        });
    }
    Ok(rows)
}

/// The precision of an image's weights as the cores table names it: the dtype that holds most
/// of the matrices' elements, `integer` for an integer image.
fn weights_of(model: &Model<'_>) -> &'static str {
    if matches!(model.image().arithmetic(), Arithmetic::Integer { .. }) {
        return "integer";
    }
    let image = model.image();
    let mut elements = [0usize; 4];
    for index in 0..image.layout().count() {
        let entry = image.entry(index);
        if let Shape::Matrix(rows, cols) = entry.shape {
            elements[entry.dtype as usize] += rows as usize * cols as usize;
        }
    }
    let most = (0..4).max_by_key(|&i| elements[i]).unwrap_or(0);
    match most {
        x if x == Dtype::F16 as usize => "f16",
        x if x == Dtype::Int8RowScaled as usize => "int8",
        x if x == Dtype::Int4GroupScaled as usize => "int4",
        _ => "f32",
    }
}

/// The longest memory one choice of options fits.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Choice {
    pub mem_dtype: &'static str,
    pub position_keys: &'static str,
    /// The longest `mem_len` streaming (`tgt_len 1`), `None` when not even `mem_len 0` fits.
    pub streaming_mem_len: Option<u32>,
    /// The same in segments of the model's `tgt_len`.
    pub segments_mem_len: Option<u32>,
}

/// The session options `txl fit` suggests.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Options {
    pub tgt_len: u32,
    pub mem_len: u32,
    pub mem_dtype: &'static str,
    pub position_keys: &'static str,
}

/// The firmware's run an instructions-per-MAC figure comes from.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    pub board: String,
    /// 1: streaming; else segments of this length.
    pub tgt_len: u32,
}

/// The answer, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct Answer {
    pub fits: bool,
    pub part: String,
    pub core: String,
    pub clock_mhz: Option<f64>,
    pub ram_bytes: usize,
    pub flash_bytes: usize,
    pub image_bytes: usize,
    pub code_bytes: usize,
    pub code_measured_on: Option<String>,
    pub flash_fits: bool,
    /// Bytes the flash lacks (0 when the image fits).
    pub flash_shortfall_bytes: usize,
    pub ram_fits: bool,
    /// Bytes the RAM lacks for the smallest arena (streaming, `mem_len 1`, the least RAM).
    pub ram_shortfall_bytes: usize,
    pub arena_bytes: usize,
    pub arena_memory_bytes: usize,
    pub arena_position_key_bytes: usize,
    pub arena_activation_bytes: usize,
    pub arena_scratch_bytes: usize,
    pub state_bytes: usize,
    pub stack_bytes: usize,
    pub static_bytes: usize,
    pub mem_len: u32,
    pub options: Options,
    pub choices: Vec<Choice>,
    pub weights: &'static str,
    pub macs_per_token: u64,
    pub instructions_per_mac: Option<f64>,
    /// Where the instructions per MAC were measured.
    pub measured_on: Option<Measured>,
    pub instructions_per_token: Option<u64>,
    pub tokens_per_second: Option<f64>,
}

impl Args {
    pub fn run(self, out: &mut dyn Write) -> Result<()> {
        let parts = parts()?;
        if self.part.as_deref() == Some("list") {
            return list(&parts, self.json, out);
        }
        let Some(model_path) = &self.model else {
            bail!("txl fit needs a model image (txl fit MODEL.txl --part NAME), or --part list");
        };
        let part = match (&self.part, self.ram, self.flash) {
            (Some(name), _, _) => parts
                .iter()
                .find(|p| p.name.eq_ignore_ascii_case(name))
                .cloned()
                .ok_or_else(|| {
                    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
                    anyhow!(
                        "--part {name}: not a known part; the parts are {} (txl fit --part list)",
                        names.join(", ")
                    )
                })?,
            (None, Some(ram), Some(flash)) => custom_part(ram, flash, self.core.as_deref())?,
            _ => bail!("txl fit needs --part NAME, or --ram BYTES and --flash BYTES"),
        };
        let part = match self.clock {
            Some(mhz) if !(mhz > 0.0 && mhz.is_finite()) => {
                bail!("--clock {mhz}: the clock must be above 0 MHz")
            }
            Some(mhz) => Part {
                clock_mhz: Some(mhz),
                ..part
            },
            None => part,
        };
        let bytes = read_image(model_path)?;
        let model = parse_model(&bytes, model_path)?;
        let answer = fit(&model, bytes.len(), &part)?;
        if let Some(path) = &self.png {
            let png = picture::png(&answer, &model_name(model_path))?;
            write_file(path, &png)?;
        }
        if self.json {
            serde_json::to_writer_pretty(&mut *out, &answer)?;
            writeln!(out)?;
            return Ok(());
        }
        print(&answer, &part, model_path, out)?;
        if !answer.fits {
            let mut short = Vec::new();
            if !answer.flash_fits {
                short.push(format!(
                    "the flash is {} bytes short",
                    answer.flash_shortfall_bytes
                ));
            }
            if !answer.ram_fits {
                short.push(format!("the RAM is {} bytes short", answer.ram_shortfall_bytes));
            }
            bail!(
                "{} does not fit {}: {}",
                model_path.display(),
                part.name,
                short.join(" and ")
            );
        }
        Ok(())
    }
}

fn model_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A part from `--ram`, `--flash` and `--core`.
fn custom_part(ram: usize, flash: usize, core: Option<&str>) -> Result<Part> {
    let rows = core_rows(CORES)?;
    let board = match core {
        None => None,
        Some(core) => {
            // The parts' cores name the boards that stand for them.
            let parts = parts()?;
            let board = parts
                .iter()
                .find(|p| p.core.eq_ignore_ascii_case(core) && p.board.is_some())
                .and_then(|p| p.board.clone())
                .or_else(|| {
                    rows.iter()
                        .find(|r| r.core.eq_ignore_ascii_case(core))
                        .map(|r| r.board.clone())
                });
            match board {
                Some(board) => Some(board),
                None => {
                    let mut cores: Vec<&str> = parts
                        .iter()
                        .filter(|p| p.board.is_some())
                        .map(|p| p.core.as_str())
                        .collect();
                    cores.sort_unstable();
                    cores.dedup();
                    bail!(
                        "--core {core}: no measured core of that name; the cores are {}",
                        cores.join(", ")
                    )
                }
            }
        }
    };
    Ok(Part {
        name: "custom".into(),
        core: core.unwrap_or("unknown").into(),
        board,
        clock_mhz: None,
        ram_bytes: ram,
        sram_bytes: ram,
        flash_bytes: flash,
        image_region_bytes: None,
        stack_bytes: board::STM32F405.stack_bytes,
        static_bytes: board::STM32F405.static_bytes,
        description: format!("{ram} bytes of RAM, {flash} bytes of flash"),
    })
}

/// The memory dtypes and position-key modes an image can run with, the most exact first.
fn modes(model: &Model<'_>) -> Vec<(MemDtype, PositionKeys)> {
    let integer = matches!(model.image().arithmetic(), Arithmetic::Integer { .. });
    let dtypes: &[MemDtype] = if integer {
        &[MemDtype::Int8]
    } else {
        &[MemDtype::F32, MemDtype::F16, MemDtype::Int8]
    };
    let keys: &[PositionKeys] = if integer {
        &[PositionKeys::PerSession, PositionKeys::PerSegment]
    } else {
        &[
            PositionKeys::PerSession,
            PositionKeys::PerSegment,
            PositionKeys::FoldedIntoQuery,
        ]
    };
    dtypes
        .iter()
        .flat_map(|&d| keys.iter().map(move |&k| (d, k)))
        .collect()
}

fn options(
    model: &Model<'_>,
    tgt_len: u32,
    mem_len: u32,
    mem_dtype: MemDtype,
    keys: PositionKeys,
) -> SessionOptions {
    SessionOptions {
        tgt_len,
        mem_len,
        mem_dtype,
        position_keys: keys,
        ..SessionOptions::from_config(model.config())
    }
}

/// The arena for `options`, `None` when its size overflows.
fn arena(model: &Model<'_>, options: &SessionOptions) -> Option<usize> {
    Session::arena_bytes(model, options).ok()
}

/// The longest `mem_len` up to [`MAX_MEM_LEN`] whose arena is at most `budget` bytes.
fn longest(model: &Model<'_>, tgt_len: u32, d: MemDtype, k: PositionKeys, budget: usize) -> Option<u32> {
    let fits = |mem_len| arena(model, &options(model, tgt_len, mem_len, d, k)).is_some_and(|a| a <= budget);
    if !fits(0) {
        return None;
    }
    let (mut lo, mut hi) = (0u32, MAX_MEM_LEN);
    if fits(hi) {
        return Some(hi);
    }
    // fits(lo), !fits(hi): the arena grows with mem_len
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// The whole answer for `model` (an image of `image_bytes`) on `part`.
pub fn fit(model: &Model<'_>, image_bytes: usize, part: &Part) -> Result<Answer> {
    let config = model.config();
    let rows = core_rows(CORES)?;
    let weights = weights_of(model);
    // The part's own board if the firmware has one (the stm32f405), else the core's board.
    let code_board = if rows.iter().any(|r| r.board == part.name) {
        Some(part.name.clone())
    } else {
        part.board.clone()
    };
    let code_rows: Vec<&CoreRow> = rows
        .iter()
        .filter(|r| Some(&r.board) == code_board.as_ref())
        .collect();
    // txl's code for this precision alone; else that board's firmware (its largest build), or
    // the largest measured anywhere.
    let firmware_code = code_rows.iter().map(|r| r.code_bytes).max();
    let (code_bytes, code_measured_on) = match (precision_code(&part.core, weights)?, firmware_code) {
        (Some((code, on)), _) => (code, Some(on)),
        (None, Some(code)) => (code, code_board),
        (None, None) => {
            let row = rows
                .iter()
                .max_by_key(|r| r.code_bytes)
                .context("the cores table is empty")?;
            (row.code_bytes, Some(row.board.clone()))
        }
    };
    let (flash_need, flash_have) = match part.image_region_bytes {
        Some(region) => (image_bytes, region),
        None => (image_bytes + code_bytes, part.flash_bytes),
    };
    let flash_fits = flash_need <= flash_have;
    let reserve = part.stack_bytes + part.static_bytes;
    let budget = part.ram_bytes.saturating_sub(reserve);

    let choices: Vec<Choice> = modes(model)
        .into_iter()
        .map(|(d, k)| Choice {
            mem_dtype: d.word(),
            position_keys: k.word(),
            streaming_mem_len: longest(model, 1, d, k, budget),
            segments_mem_len: longest(model, config.tgt_len.max(1), d, k, budget),
        })
        .collect();
    // The most exact options that keep the model's own mem_len streaming, else those that keep
    // the longest memory.
    let wanted = config.mem_len;
    let exact = choices
        .iter()
        .find(|c| c.streaming_mem_len.is_some_and(|m| m >= wanted))
        .map(|c| (c, wanted));
    let longest_choice = choices
        .iter()
        .filter_map(|c| c.streaming_mem_len.map(|m| (c, m)))
        .fold(None::<(&Choice, u32)>, |best, (c, m)| match best {
            Some((_, b)) if b >= m => best,
            _ => Some((c, m)),
        });
    let chosen = exact.or(longest_choice);
    let ram_fits = chosen.is_some_and(|(_, m)| m >= wanted.min(1));
    // The options shown: the chosen ones, or the least RAM (the last mode, mem_len 1) when none fits.
    let (mem_dtype, keys, mem_len) = match chosen {
        Some((c, m)) if ram_fits => (c.mem_dtype.parse()?, c.position_keys.parse()?, m),
        _ => {
            let (d, k) = *modes(model).last().context("no memory mode")?;
            (d, k, wanted.min(1))
        }
    };
    let opts = options(model, 1, mem_len, mem_dtype, keys);
    let layout = ArenaLayout::new(config, model.image().arithmetic(), &opts)
        .map_err(|e| anyhow!("sizing the arena: {e}"))?;
    let arena_bytes = layout.total_bytes();
    let ram_shortfall_bytes = (arena_bytes + reserve).saturating_sub(part.ram_bytes);
    let state_bytes =
        Session::state_bytes_for(model, &opts).map_err(|e| anyhow!("sizing the session state: {e}"))?;
    // A token streamed with the memory full.
    let macs_per_token = segment_macs(config, &opts, mem_len as usize, 1);
    // The core's measurement for these weights, streaming where one was made (a streamed token
    // costs more instructions per MAC than one in a long segment), else in segments.
    let core = part
        .board
        .as_deref()
        .and_then(|b| rows.iter().find(|r| r.board == b))
        .map(|r| r.core.clone());
    let measurement = rows
        .iter()
        .filter(|r| Some(&r.core) == core.as_ref() && r.weights == weights)
        .min_by_key(|r| (r.tgt_len != 1, Some(&r.board) != part.board.as_ref()));
    let instructions_per_mac = measurement.map(|r| r.instructions_per_mac);
    let measured_on = measurement.map(|r| Measured {
        board: r.board.clone(),
        tgt_len: r.tgt_len,
    });
    let instructions_per_token = instructions_per_mac.map(|i| (i * macs_per_token as f64).round() as u64);
    let tokens_per_second = match (instructions_per_token, part.clock_mhz) {
        (Some(i), Some(mhz)) if i > 0 => Some(mhz * 1e6 / i as f64),
        _ => None,
    };
    Ok(Answer {
        fits: flash_fits && ram_fits,
        part: part.name.clone(),
        core: part.core.clone(),
        clock_mhz: part.clock_mhz,
        ram_bytes: part.ram_bytes,
        flash_bytes: flash_have,
        image_bytes,
        code_bytes: if part.image_region_bytes.is_some() {
            0
        } else {
            code_bytes
        },
        code_measured_on,
        flash_fits,
        flash_shortfall_bytes: flash_need.saturating_sub(flash_have),
        ram_fits,
        ram_shortfall_bytes,
        arena_bytes,
        arena_memory_bytes: layout.memory_bytes(),
        arena_position_key_bytes: layout.position_key_bytes(),
        arena_activation_bytes: layout.activation_bytes(),
        arena_scratch_bytes: layout.scratch_bytes(),
        state_bytes,
        stack_bytes: part.stack_bytes,
        static_bytes: part.static_bytes,
        mem_len,
        options: Options {
            tgt_len: 1,
            mem_len,
            mem_dtype: mem_dtype.word(),
            position_keys: keys.word(),
        },
        choices,
        weights,
        macs_per_token,
        instructions_per_mac,
        measured_on,
        instructions_per_token,
        tokens_per_second,
    })
}

/// `1 048 576` (thin spaces would not survive every terminal: plain spaces).
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

fn kib(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n.is_multiple_of(1024) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

fn list(parts: &[Part], json: bool, out: &mut dyn Write) -> Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, parts)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<16} {:<12} {:>9} {:>10} {:>10} {:>9}  description",
        "part", "core", "clock", "RAM used", "SRAM", "flash"
    )?;
    for p in parts {
        let clock = p
            .clock_mhz
            .map(|c| format!("{c} MHz"))
            .unwrap_or_else(|| "-".into());
        writeln!(
            out,
            "{:<16} {:<12} {:>9} {:>10} {:>10} {:>9}  {}",
            p.name,
            p.core,
            clock,
            kib(p.ram_bytes),
            kib(p.sram_bytes),
            kib(p.flash_bytes),
            p.description
        )?;
    }
    Ok(())
}

fn print(a: &Answer, part: &Part, model: &Path, out: &mut dyn Write) -> Result<()> {
    let verdict = if a.fits { "fits" } else { "does not fit" };
    writeln!(
        out,
        "{} {verdict} {} ({})",
        model.display(),
        part.name,
        part.description
    )?;
    let flash_line = if a.code_bytes > 0 {
        format!(
            "image {} + code {} (measured on {}) = {} of {} bytes",
            grouped(a.image_bytes),
            grouped(a.code_bytes),
            a.code_measured_on.as_deref().unwrap_or("-"),
            grouped(a.image_bytes + a.code_bytes),
            grouped(a.flash_bytes)
        )
    } else {
        format!(
            "image {} of {} bytes (a region of its own)",
            grouped(a.image_bytes),
            grouped(a.flash_bytes)
        )
    };
    let flash_verdict = if a.flash_fits {
        format!(
            "fits, {} to spare",
            grouped(a.flash_bytes + a.flash_shortfall_bytes - a.image_bytes - a.code_bytes)
        )
    } else {
        format!("{} bytes too many", grouped(a.flash_shortfall_bytes))
    };
    writeln!(out, "flash   {flash_line}: {flash_verdict}")?;
    let used = a.arena_bytes + a.stack_bytes + a.static_bytes;
    let ram_verdict = if a.ram_fits {
        format!("fits, {} to spare", grouped(a.ram_bytes.saturating_sub(used)))
    } else {
        format!("{} bytes too many even so", grouped(a.ram_shortfall_bytes))
    };
    writeln!(
        out,
        "RAM     arena {} + stack {} + statics {} = {} of {} bytes: {ram_verdict}",
        grouped(a.arena_bytes),
        grouped(a.stack_bytes),
        grouped(a.static_bytes),
        grouped(used),
        grouped(a.ram_bytes)
    )?;
    writeln!(
        out,
        "arena   memory {}, position keys {}, activations {}, scratch {}; session state {} bytes",
        grouped(a.arena_memory_bytes),
        grouped(a.arena_position_key_bytes),
        grouped(a.arena_activation_bytes),
        grouped(a.arena_scratch_bytes),
        grouped(a.state_bytes)
    )?;
    let o = &a.options;
    let which = if a.ram_fits { "options" } else { "least RAM" };
    writeln!(
        out,
        "{which:<7} --tgt-len {} --mem-len {} --mem-dtype {} --position-keys {}",
        o.tgt_len, o.mem_len, o.mem_dtype, o.position_keys
    )?;
    match (a.instructions_per_mac, a.instructions_per_token) {
        (Some(per_mac), Some(per_token)) => {
            let speed = match (a.tokens_per_second, a.clock_mhz) {
                (Some(t), Some(mhz)) => {
                    format!(", at most {t:.1} tokens/s at {mhz} MHz (one instruction a cycle)")
                }
                _ => String::new(),
            };
            let on = match &a.measured_on {
                Some(m) if m.tgt_len == 1 => format!("{}, streaming", m.board),
                Some(m) => format!(
                    "{} in segments of {}; streaming costs more a MAC",
                    m.board, m.tgt_len
                ),
                None => "-".into(),
            };
            writeln!(
                out,
                "speed   {} instructions/token = {} MACs x {per_mac} instructions/MAC ({} weights, measured on {on}){speed}",
                grouped(per_token as usize),
                grouped(a.macs_per_token as usize),
                a.weights,
            )?;
            writeln!(
                out,
                "        QEMU counts instructions, not cycles: wait states and multi-cycle loads make the part slower"
            )?;
        }
        _ => writeln!(
            out,
            "speed   {} MACs/token; no instructions per MAC measured for {} with {} weights",
            grouped(a.macs_per_token as usize),
            part.core,
            a.weights
        )?,
    }
    writeln!(out)?;
    writeln!(out, "longest mem_len that fits the RAM ('-': none)")?;
    writeln!(
        out,
        "{:<10} {:<14} {:>10} {:>10}",
        "mem dtype", "position keys", "streaming", "segments"
    )?;
    let show = |m: Option<u32>| match m {
        Some(m) if m == MAX_MEM_LEN => format!(">={m}"),
        Some(m) => m.to_string(),
        None => "-".into(),
    };
    for c in &a.choices {
        writeln!(
            out,
            "{:<10} {:<14} {:>10} {:>10}",
            c.mem_dtype,
            c.position_keys,
            show(c.streaming_mem_len),
            show(c.segments_mem_len)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_with_units() {
        assert_eq!(parse_bytes("131072"), Ok(131072));
        assert_eq!(parse_bytes("128K"), Ok(131072));
        assert_eq!(parse_bytes("128KiB"), Ok(131072));
        assert_eq!(parse_bytes("1M"), Ok(1 << 20));
        assert_eq!(parse_bytes("0x20000"), Ok(131072));
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn the_tables_parse_and_every_part_board_is_measured() {
        let rows = core_rows(CORES).unwrap();
        for part in parts().unwrap() {
            if let Some(board) = &part.board {
                assert!(
                    rows.iter().any(|r| &r.board == board),
                    "{}: no row of {board} in cores.tsv",
                    part.name
                );
            }
        }
    }
}

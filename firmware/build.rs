//! Build script: chooses the model image and the token file, sizes the arena with the core's own
//! `Session::arena_bytes`, checks that both fit the board, and writes the linker's memory map.
//!
//! Everything is decided here, at build time, from these variables:
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `TXL_BOARD` | the board (`src/board.rs`); the build's target must be the board's | `mps2-an386` |
//! | `TXL_MODEL` | a txl model image (`txl convert` output) | the bundled demo model, converted |
//! | `TXL_DTYPE` | precision of the converted demo model (`f32`, `f16`, `int8`, `int4`, `int4-all`) | [`DEFAULT_DTYPE`] |
//! | `TXL_TOKENS` | the token file `score` reads: every byte is one token id | 256 bytes of held-out text |
//! | `TXL_TGT_LEN`, `TXL_MEM_LEN`, `TXL_CLAMP_LEN` | session options | the model's config |
//! | `TXL_SAME_LENGTH` (`true`/`false`), `TXL_MEM_INIT` (`empty`/`zeros`) | session options | config / `empty` |
//! | `TXL_MEM_DTYPE` (`f32`/`f16`/`int8`), `TXL_POSITION_KEYS` (`session`/`segment`/`folded`) | memory precision, position keys kept, recomputed or folded into the queries | `f32` / `session` |
//!
//! Relative paths are relative to this folder (`firmware/`). An image or arena that does not fit
//! the board stops the build here, with a message that says by how many bytes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use std::str::FromStr;

use txl_core::arena::ArenaLayout;
use txl_core::image::Arithmetic;
use txl_core::{AlignedBytes, MemDtype, MemInit, Model, PositionKeys, Session, SessionOptions};
use txl_host_gpu::quantize::{quantize_weights, Target};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};

#[allow(dead_code)]
mod board {
    include!("src/board.rs");
}

/// Precision of the bundled demo model when `TXL_MODEL` is unset.
const DEFAULT_DTYPE: &str = "int8";

/// The bundled checkpoint, relative to this folder.
const DEMO_CHECKPOINT: &str = "../tests/fixtures/demo";

/// Tokens `score` reads when `TXL_TOKENS` is unset: the first bytes of the held-out text.
const DEFAULT_TOKENS: usize = 256;

include!("build_vars.rs");

fn main() {
    if let Err(message) = run() {
        // Cargo shows a failing build script's stderr; one clear line, no backtrace.
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let out_dir = PathBuf::from(env("OUT_DIR").ok_or("OUT_DIR is not set")?);
    for var in BUILD_VARS {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=src/board.rs");

    let board = board()?;

    // The model image, copied to OUT_DIR/model.txl for `include_bytes!`.
    let (image, model_source) = model_image()?;
    let aligned = AlignedBytes::copy_from(&image).map_err(|e| format!("{model_source}: {e}"))?;
    let model =
        Model::parse(aligned.bytes()).map_err(|e| format!("{model_source}: not a usable txl image: {e}"))?;
    let options = session_options(&model)?;
    let arena_bytes = Session::arena_bytes(&model, &options).map_err(|e| format!("sizing the arena: {e}"))?;
    let layout = ArenaLayout::new(model.config(), model.image().arithmetic(), &options)
        .map_err(|e| format!("sizing the arena: {e}"))?;

    // The token file.
    let (tokens, tokens_source) = token_file(&model)?;

    check_fit(
        &board,
        image.len(),
        tokens.len(),
        &layout,
        &model_source,
        &options,
    )?;
    let state_bytes =
        Session::state_bytes_for(&model, &options).map_err(|e| format!("sizing the session state: {e}"))?;
    let surviving = surviving_ram(&board, layout.total_bytes(), state_bytes);
    if let (Err(why), true) = (&surviving, board.ram_survives_reset) {
        println!("cargo:warning={why}");
    }
    let no_surviving_ram = surviving.as_ref().err().cloned().unwrap_or_default();
    let surviving = surviving.ok();

    // Only now, with every check passed, replace the outputs of the last successful run: a
    // failed build leaves them as they were.
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(out_dir.join(name), bytes).map_err(|e| format!("writing {name}: {e}"))
    };
    write("model.txl", &image)?;
    write("tokens.bin", &tokens)?;
    // The memory map, and the linker scripts of the runtime (cortex-m-rt or riscv-rt) and defmt.
    write("memory.x", memory_x(&board, surviving).as_bytes())?;
    println!("cargo:rustc-link-search={}", out_dir.display());
    println!("cargo:rustc-link-arg=-Tlink.x");
    println!("cargo:rustc-link-arg=-Tdefmt.x");
    // On a board without an FPU, every call into the software floating-point routines goes
    // through a wrapper that counts it.
    let arch = env("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let soft_float = soft_float_wrappers(&board, &arch)?;
    for routine in &soft_float.routines {
        println!("cargo:rustc-link-arg=--wrap={routine}");
    }
    write("soft_float.s", soft_float.asm.as_bytes())?;

    let mut config = String::new();
    let mut line = |name: &str, ty: &str, value: String, doc: &str| {
        let _ = writeln!(config, "/// {doc}\npub const {name}: {ty} = {value};");
    };
    line(
        "BOARD",
        "crate::board::Board",
        format!("crate::board::{}", board.name.to_uppercase().replace('-', "_")),
        "The board this firmware is built for.",
    );
    line(
        "BOARD_NAME",
        &format!("[u8; {}]", board.name.len()),
        format!("*b{:?}", board.name),
        "The board's name as bytes (the `TXL_BOARD` symbol the runner reads).",
    );
    line(
        "MODEL_SOURCE",
        "&str",
        format!("{model_source:?}"),
        "Where the model image came from.",
    );
    line(
        "IMAGE_BYTES",
        "usize",
        image.len().to_string(),
        "Bytes of the model image.",
    );
    line(
        "TOKEN_BYTES",
        "usize",
        tokens.len().to_string(),
        "Bytes of the token file (one token each).",
    );
    line(
        "TOKENS_SOURCE",
        "&str",
        format!("{tokens_source:?}"),
        "Where the tokens came from.",
    );
    line(
        "ARENA_BYTES",
        "usize",
        arena_bytes.to_string(),
        "`Session::arena_bytes` for the build-time options.",
    );
    line(
        "ARENA_MEMORY_BYTES",
        "usize",
        layout.memory_bytes().to_string(),
        "The memory ring buffers (keys and values).",
    );
    line(
        "ARENA_POSITION_KEY_BYTES",
        "usize",
        layout.position_key_bytes().to_string(),
        "The position keys.",
    );
    line(
        "ARENA_ACTIVATION_BYTES",
        "usize",
        layout.activation_bytes().to_string(),
        "The activations (`tgt_len` rows).",
    );
    line(
        "ARENA_SCRATCH_BYTES",
        "usize",
        layout.scratch_bytes().to_string(),
        "The one-row scratch buffers.",
    );
    line(
        "ARENA_PARAMETER_BYTES",
        "usize",
        layout.parameter_bytes().to_string(),
        "An integer session's parameters, made ready once (0 in float arithmetic).",
    );
    line(
        "OPTIONS",
        "txl_core::SessionOptions",
        options.rust_literal("txl_core::").to_string(),
        "The build-time session options.",
    );
    line(
        "SURVIVING_RAM",
        "Option<crate::board::Region>",
        match surviving {
            Some(region) => format!(
                "Some(crate::board::Region {{ origin: {:#010x}, bytes: {} }})",
                region.origin, region.bytes
            ),
            None => "None".to_string(),
        },
        "RAM that a reset leaves alone and nothing is linked into (`score --reset-after`).",
    );
    line(
        "NO_SURVIVING_RAM",
        "&str",
        format!("{no_surviving_ram:?}"),
        "Why `SURVIVING_RAM` is `None` (empty when it is not).",
    );
    line(
        "STACK_BYTES",
        "usize",
        board.stack_bytes.to_string(),
        "Bytes kept for the stack at the top of RAM.",
    );
    line(
        "SOFT_FLOAT_COUNTED",
        "bool",
        (!soft_float.routines.is_empty()).to_string(),
        "Whether the calls into the software floating-point routines are counted (`soft_float.s`).",
    );
    line(
        "SOFT_FLOAT_WRAPPER_INSTRUCTIONS",
        "u64",
        soft_float.instructions.to_string(),
        "Instructions one counting wrapper executes before it jumps to the routine.",
    );
    write("build_config.rs", config.as_bytes())?;
    Ok(())
}

/// The software floating-point routines of `compiler_builtins` whose calls the firmware counts on
/// a board without an FPU, by their generic names: f32 and f64 arithmetic, comparisons and
/// conversions (RISC-V calls these).
const SOFT_FLOAT_ROUTINES: &str = "
    __addsf3 __subsf3 __mulsf3 __divsf3
    __eqsf2 __nesf2 __ltsf2 __lesf2 __gesf2 __gtsf2 __unordsf2
    __fixsfsi __fixunssfsi __fixsfdi __fixunssfdi __floatsisf __floatunsisf __floatdisf __floatundisf
    __extendsfdf2 __truncdfsf2
    __adddf3 __subdf3 __muldf3 __divdf3
    __eqdf2 __nedf2 __ltdf2 __ledf2 __gedf2 __gtdf2 __unorddf2
    __fixdfsi __fixunsdfsi __fixdfdi __fixunsdfdi __floatsidf __floatunsidf __floatdidf __floatundidf
";

/// The same routines by the names of the Arm run-time ABI, which LLVM calls on Arm. Not counted:
/// `__aeabi_frsub` and `__aeabi_drsub` (they call `__aeabi_fsub` and `__aeabi_dsub`, which are),
/// the flag-setting comparisons `__aeabi_cfcmp*` and `__aeabi_cdcmp*` (LLVM does not call them),
/// negation (LLVM flips the sign bit itself), and libm's functions (`expf`, `sqrtf`, `fmaxf`,
/// ...: they call the counted routines).
const SOFT_FLOAT_ROUTINES_AEABI: &str = "
    __aeabi_fadd __aeabi_fsub __aeabi_fmul __aeabi_fdiv
    __aeabi_fcmpeq __aeabi_fcmplt __aeabi_fcmple __aeabi_fcmpge __aeabi_fcmpgt __aeabi_fcmpun
    __aeabi_f2iz __aeabi_f2uiz __aeabi_f2lz __aeabi_f2ulz __aeabi_i2f __aeabi_ui2f __aeabi_l2f __aeabi_ul2f
    __aeabi_f2d __aeabi_d2f
    __aeabi_dadd __aeabi_dsub __aeabi_dmul __aeabi_ddiv
    __aeabi_dcmpeq __aeabi_dcmplt __aeabi_dcmple __aeabi_dcmpge __aeabi_dcmpgt __aeabi_dcmpun
    __aeabi_d2iz __aeabi_d2uiz __aeabi_d2lz __aeabi_d2ulz __aeabi_i2d __aeabi_ui2d __aeabi_l2d __aeabi_ul2d
";

/// The counter the wrappers increment (`src/soft_float.rs`).
const SOFT_FLOAT_COUNTER: &str = "TXL_SOFT_FLOAT_CALLS";

/// A counting wrapper in Armv6-M code (it runs on every Cortex-M), for `global_asm!` (braces
/// doubled): r0-r3 hold the arguments and are restored, r12 is free at a call. Nine instructions.
const ARM_WRAPPER: &str = r#"
    .section .text.__wrap_ROUTINE,"ax",%progbits
    .global __wrap_ROUTINE
    .type __wrap_ROUTINE,%function
    .thumb_func
    .p2align 1
__wrap_ROUTINE:
    push {{r0, r1}}
    ldr r0, .Lcounter_ROUTINE
    ldr r1, [r0]
    adds r1, r1, #1
    str r1, [r0]
    ldr r0, .Lreal_ROUTINE
    mov r12, r0
    pop {{r0, r1}}
    bx r12
    .p2align 2
.Lcounter_ROUTINE:
    .word COUNTER
.Lreal_ROUTINE:
    .word __real_ROUTINE
    .size __wrap_ROUTINE, . - __wrap_ROUTINE
"#;

/// A counting wrapper in RV32 code: a0-a7 hold the arguments, t0 and t1 are free at a call. No
/// linker relaxation, so it keeps its six instructions (`tail` is two) wherever it lands.
const RISCV_WRAPPER: &str = r#"
    .section .text.__wrap_ROUTINE,"ax",@progbits
    .global __wrap_ROUTINE
    .type __wrap_ROUTINE,@function
    .p2align 1
__wrap_ROUTINE:
    .option push
    .option norelax
    lui t0, %hi(COUNTER)
    lw t1, %lo(COUNTER)(t0)
    addi t1, t1, 1
    sw t1, %lo(COUNTER)(t0)
    tail __real_ROUTINE
    .option pop
    .size __wrap_ROUTINE, . - __wrap_ROUTINE
"#;

/// The routines to wrap, the wrappers (assembly for `global_asm!`) and the instructions each
/// executes before it jumps to its routine.
struct SoftFloatWrappers {
    routines: Vec<&'static str>,
    asm: String,
    instructions: u32,
}

/// The counting wrappers for `board` (none for a board with an FPU). The linker's `--wrap=X`
/// sends every call to `X` from another object file to `__wrap_X`, and `__real_X` to `X`; the
/// routines live in `compiler_builtins`, which is never part of the LTO object, so every call from
/// the firmware, the core or libm is wrapped. None is counted twice: the routines reach each other
/// by their mangled Rust names, and the few functions that call a counted routine by its name
/// (`__aeabi_frsub`, `__powisf2`, `fmaxf`, ...) are not wrapped themselves. Each wrapper adds one to
/// a 32-bit counter and jumps to the routine with the arguments untouched, in a fixed number of
/// instructions, which the firmware takes off its instruction counts.
fn soft_float_wrappers(board: &board::Board, arch: &str) -> Result<SoftFloatWrappers, String> {
    if !board.soft_float {
        return Ok(SoftFloatWrappers {
            routines: Vec::new(),
            asm: String::new(),
            instructions: 0,
        });
    }
    let (routines, wrapper, instructions, mut asm): (Vec<&'static str>, _, _, _) = match arch {
        "arm" => (
            SOFT_FLOAT_ROUTINES_AEABI
                .split_whitespace()
                .chain(SOFT_FLOAT_ROUTINES.split_whitespace())
                .collect(),
            ARM_WRAPPER,
            9,
            String::from("    .syntax unified\n    .thumb\n"),
        ),
        "riscv32" => (
            SOFT_FLOAT_ROUTINES.split_whitespace().collect(),
            RISCV_WRAPPER,
            6,
            String::new(),
        ),
        other => {
            return Err(format!(
                "TXL_BOARD={}: no soft-float counting for the architecture {other}",
                board.name
            ))
        }
    };
    for routine in &routines {
        asm.push_str(
            &wrapper
                .replace("ROUTINE", routine)
                .replace("COUNTER", SOFT_FLOAT_COUNTER),
        );
    }
    Ok(SoftFloatWrappers {
        routines,
        asm,
        instructions,
    })
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The firmware's features that turn on a core's own kernels (`Board::features` lists a board's).
const BOARD_FEATURES: &[&str] = &["mve"];

/// `TXL_BOARD` (default: the first board), checked against the build's target and features.
fn board() -> Result<board::Board, String> {
    let name = env("TXL_BOARD").unwrap_or_else(|| board::BOARDS[0].name.to_string());
    let board = board::board_named(&name).ok_or_else(|| {
        let names: Vec<&str> = board::BOARDS.iter().map(|b| b.name).collect();
        format!(
            "TXL_BOARD={name}: not a board; the boards are {}",
            names.join(", ")
        )
    })?;
    // The features the board needs and only those: a Helium kernel faults on a core without it,
    // and a board with Helium built without it would run slower than it should.
    for &feature in BOARD_FEATURES {
        let wanted = board.features.contains(&feature);
        let enabled = env(&format!("CARGO_FEATURE_{}", feature.to_uppercase())).is_some();
        if wanted && !enabled {
            return Err(format!(
                "TXL_BOARD={name} is built with `--features {feature}` (its core's kernel; \
                 scripts/firmware.sh {name} turns it on)"
            ));
        }
        if enabled && !wanted {
            return Err(format!(
                "the feature `{feature}` is for boards whose core has it ({}), not {name} ({})",
                board::BOARDS
                    .iter()
                    .filter(|b| b.features.contains(&feature))
                    .map(|b| b.name)
                    .collect::<Vec<_>>()
                    .join(", "),
                board.core
            ));
        }
    }
    let target = env("TARGET").unwrap_or_default();
    if target != board.target {
        return Err(format!(
            "TXL_BOARD={name} is built for {} (cargo build --target {}), not for {target} \
             (scripts/firmware.sh {name} picks the target itself)",
            board.target, board.target
        ));
    }
    Ok(board)
}

/// `TXL_MODEL`, or the bundled checkpoint converted at `TXL_DTYPE`.
fn model_image() -> Result<(Vec<u8>, String), String> {
    if let Some(path) = env("TXL_MODEL") {
        println!("cargo:rerun-if-changed={path}");
        let image = std::fs::read(&path).map_err(|e| format!("TXL_MODEL={path}: {e}"))?;
        return Ok((image, path));
    }
    let dtype = env("TXL_DTYPE").unwrap_or_else(|| DEFAULT_DTYPE.to_string());
    let dir = Path::new(DEMO_CHECKPOINT);
    for file in ["config.json", "model.safetensors"] {
        println!("cargo:rerun-if-changed={}", dir.join(file).display());
    }
    let target = match dtype.as_str() {
        "f32" => None,
        other => Some(Target::from_str(other).map_err(|e| format!("TXL_DTYPE={other}: {e}, or f32"))?),
    };
    let image = load_hf_checkpoint(dir, CheckpointFormat::Auto, false)
        .and_then(|checkpoint| checkpoint.to_image())
        .map_err(|e| format!("converting {DEMO_CHECKPOINT}: {e:#}"))?;
    let image = match target {
        None => image,
        Some(target) => demo_quantized(&image, target)?,
    };
    Ok((image, format!("{DEMO_CHECKPOINT} ({dtype})")))
}

/// The f32 demo image quantized as `txl convert --dtype` does without calibration text
/// (per-row clip search, no smoothing), so the host can make the same image.
fn demo_quantized(f32_image: &[u8], target: Target) -> Result<Vec<u8>, String> {
    let bytes = AlignedBytes::copy_from(f32_image).map_err(|e| format!("the converted demo model: {e}"))?;
    let model = Model::parse(bytes.bytes()).map_err(|e| format!("the converted demo model: {e}"))?;
    quantize_weights(&model, target).map_err(|e| format!("quantizing the demo model: {e:#}"))
}

fn session_options(model: &Model<'_>) -> Result<SessionOptions, String> {
    let mut options = SessionOptions::from_config(model.config());
    let number = |name: &str, default: u32| -> Result<u32, String> {
        match env(name) {
            Some(v) => v
                .parse()
                .map_err(|_| format!("{name}={v}: expected a whole number")),
            None => Ok(default),
        }
    };
    options.tgt_len = number("TXL_TGT_LEN", options.tgt_len)?;
    options.mem_len = number("TXL_MEM_LEN", options.mem_len)?;
    options.clamp_len = number("TXL_CLAMP_LEN", options.clamp_len)?;
    options.same_length = word("TXL_SAME_LENGTH", options.same_length)?;
    options.mem_init = word("TXL_MEM_INIT", MemInit::Empty)?;
    // an integer image keeps int8 memory (docs/INTEGER.md)
    let integer = matches!(model.image().arithmetic(), Arithmetic::Integer { .. });
    let memory = if integer { MemDtype::Int8 } else { MemDtype::F32 };
    options.mem_dtype = word("TXL_MEM_DTYPE", memory)?;
    options.position_keys = word("TXL_POSITION_KEYS", PositionKeys::PerSession)?;
    if options.tgt_len == 0 {
        return Err("TXL_TGT_LEN must be at least 1".into());
    }
    if integer && options.mem_dtype != MemDtype::Int8 {
        return Err("an integer image keeps int8 memory: leave TXL_MEM_DTYPE unset or int8".into());
    }
    if integer && options.position_keys == PositionKeys::FoldedIntoQuery {
        return Err("an integer image keeps its position keys: TXL_POSITION_KEYS=session or segment".into());
    }
    Ok(options)
}

/// The variable `name` read with `T`'s own spelling (`true|false`, `empty|zeros`, ...), or
/// `default` when it is unset.
fn word<T: FromStr>(name: &str, default: T) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    match env(name) {
        Some(v) => v.parse().map_err(|e| format!("{name}={v}: {e}")),
        None => Ok(default),
    }
}

/// `TXL_TOKENS` (every byte one token id), or the first bytes of the held-out text.
fn token_file(model: &Model<'_>) -> Result<(Vec<u8>, String), String> {
    let (tokens, source) = match env("TXL_TOKENS") {
        Some(path) => {
            println!("cargo:rerun-if-changed={path}");
            let tokens = std::fs::read(&path).map_err(|e| format!("TXL_TOKENS={path}: {e}"))?;
            (tokens, path)
        }
        None => {
            let path = Path::new(DEMO_CHECKPOINT).join("heldout.txt");
            println!("cargo:rerun-if-changed={}", path.display());
            let mut tokens = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            tokens.truncate(DEFAULT_TOKENS);
            let source = format!("{} (first {} bytes)", path.display(), tokens.len());
            (tokens, source)
        }
    };
    if tokens.len() < 2 {
        return Err(format!(
            "{source}: need at least 2 tokens to score, got {}",
            tokens.len()
        ));
    }
    let n_token = model.config().n_token;
    if let Some(at) = tokens.iter().position(|&t| u32::from(t) >= n_token) {
        return Err(format!(
            "{source}: byte {at} is token {}, but the model has {n_token} tokens",
            tokens[at]
        ));
    }
    Ok((tokens, source))
}

/// Fails when the image does not fit the flash or the arena does not fit the RAM, saying by how
/// many bytes.
fn check_fit(
    board: &board::Board,
    image_bytes: usize,
    token_bytes: usize,
    layout: &ArenaLayout,
    model_source: &str,
    options: &SessionOptions,
) -> Result<(), String> {
    // The image and the tokens share the flash with the code, or have a region of their own.
    let (code, region) = match board.image {
        None => (board.code_bytes, board.flash),
        Some(region) => (0, region),
    };
    let flash = image_bytes + token_bytes + code;
    if flash > region.bytes {
        return Err(format!(
            "the model image does not fit the board's flash: image {image_bytes} bytes ({model_source}) \
             + tokens {token_bytes} + code {code} = {flash} bytes > {} bytes of flash ({}), \
             {} bytes too many",
            region.bytes,
            board.name,
            flash - region.bytes
        ));
    }
    if board.code_bytes > board.flash.bytes {
        return Err(format!(
            "the board's flash ({} bytes, {}) cannot hold the code ({} bytes)",
            board.flash.bytes, board.name, board.code_bytes
        ));
    }
    let arena = layout.total_bytes();
    let ram = arena + board.stack_bytes + board.static_bytes;
    if ram > board.ram.bytes {
        return Err(format!(
            "the arena does not fit the board's RAM: arena {arena} bytes (memory {}, position keys {}, \
             activations {}, scratch {}, parameters {}; tgt_len {}, mem_len {}) + stack {} + statics {} = {ram} bytes \
             > {} bytes of RAM ({}), {} bytes too many",
            layout.memory_bytes(),
            layout.position_key_bytes(),
            layout.activation_bytes(),
            layout.scratch_bytes(),
            layout.parameter_bytes(),
            options.tgt_len,
            options.mem_len,
            board.stack_bytes,
            board.static_bytes,
            board.ram.bytes,
            board.name,
            ram - board.ram.bytes
        ));
    }
    Ok(())
}

/// Bytes of the record `score --reset-after` keeps across a reset: `src/resume.rs`'s header
/// and the session state.
const RESUME_HEADER_BYTES: usize = 64;

/// Where `score --reset-after` keeps the session state: the board's own surviving RAM, or, on a
/// board whose RAM survives a reset, the top of that RAM when the record fits beside the arena,
/// the stack and the statics. `Err` says why there is none.
fn surviving_ram(
    board: &board::Board,
    arena_bytes: usize,
    state_bytes: usize,
) -> Result<board::Region, String> {
    if let Some(region) = board.surviving_ram {
        return Ok(region);
    }
    if !board.ram_survives_reset {
        return Err(format!(
            "{}: no RAM survives a reset, so `score --reset-after` is refused",
            board.name
        ));
    }
    // 16-byte steps keep the stack's top aligned.
    let record = (RESUME_HEADER_BYTES + state_bytes).next_multiple_of(16);
    let used = arena_bytes + board.stack_bytes + board.static_bytes;
    let free = board.ram.bytes - used;
    if record > free {
        return Err(format!(
            "{}: `score --reset-after` is refused with these options: the session state's record \
             ({record} bytes: header {RESUME_HEADER_BYTES} + state {state_bytes}) does not fit the \
             {free} bytes of RAM left beside the arena ({arena_bytes}), the stack ({}) and the statics \
             ({}), {} bytes too many",
            board.name,
            board.stack_bytes,
            board.static_bytes,
            record - free
        ));
    }
    Ok(board::Region {
        origin: board.ram.origin + (board.ram.bytes - record) as u32,
        bytes: record,
    })
}

/// The memory map for the runtime's `link.x` (cortex-m-rt's or riscv-rt's): the stack takes the
/// top `STACK_BYTES` of RAM (`_stack_end` is its lowest address), the heap the RAM between the
/// statics and the stack. The model image and the tokens (section `.txl_image`) follow the
/// constants in flash, or go to the board's image region.
fn memory_x(board: &board::Board, surviving: Option<board::Region>) -> String {
    // The session state's record at the top of the RAM is not the firmware's RAM.
    let ram_bytes = match surviving {
        Some(region)
            if region.origin > board.ram.origin
                && region.origin < board.ram.origin + board.ram.bytes as u32 =>
        {
            (region.origin - board.ram.origin) as usize
        }
        _ => board.ram.bytes,
    };
    let mut x = format!(
        "/* Written by build.rs from src/board.rs: {} as QEMU models it. */\nMEMORY\n{{\n  \
         FLASH : ORIGIN = {:#010x}, LENGTH = {}\n  RAM : ORIGIN = {:#010x}, LENGTH = {}\n",
        board.name, board.flash.origin, board.flash.bytes, board.ram.origin, ram_bytes
    );
    if let Some(image) = board.image {
        let _ = writeln!(
            x,
            "  IMAGE : ORIGIN = {:#010x}, LENGTH = {}",
            image.origin, image.bytes
        );
    }
    x.push_str("}\n");
    if board.target.starts_with("riscv") {
        // riscv-rt places its sections in these regions.
        for (alias, region) in [
            ("REGION_TEXT", "FLASH"),
            ("REGION_RODATA", "FLASH"),
            ("REGION_DATA", "RAM"),
            ("REGION_BSS", "RAM"),
            ("REGION_HEAP", "RAM"),
            ("REGION_STACK", "RAM"),
        ] {
            let _ = writeln!(x, "REGION_ALIAS(\"{alias}\", {region});");
        }
    }
    let _ = write!(
        x,
        "SECTIONS\n{{\n  .txl_image : ALIGN(16)\n  {{\n    KEEP(*(.txl_image .txl_image.*));\n  }} > {}\n}}\n\
         INSERT AFTER .rodata;\n\
         _stack_end = ORIGIN(RAM) + LENGTH(RAM) - {};\n\
         ASSERT(__sheap <= _stack_end,\n  \
         \"txl-firmware: the statics (arena included) overlap the stack reserve at the top of RAM\");\n",
        if board.image.is_some() { "IMAGE" } else { "FLASH" },
        board.stack_bytes
    );
    x
}

//! The firmware (`firmware/`) runs the unmodified core on microcontrollers in QEMU and gives the
//! host core's results bit for bit; images that do not fit the board fail the build. The default
//! board (`mps2-an386`, Cortex-M4F) is checked in depth; every other board (Cortex-M7, M33, M55,
//! RV32IMAC) scores with int8 and f32 weights and an integer image and resumes after a reset,
//! the Cortex-M3 with int8 and int4 weights and integer images, and Armv6-M code on the M3 with
//! int8 weights and an integer image. On the boards without an FPU (M3, Armv6-M, RV32IMAC) the
//! score's count of calls into software floating point must be above 0 with float arithmetic
//! and 0 with an integer image. The `stm32f405` (a real part's limits: 1 MiB of flash, 128 KiB
//! of SRAM) streams a trained int4 model, keeps its stack within the measured reserve, refuses
//! `--reset-after` where the state's record does not fit and resumes where it does; and
//! `tools/src/cli/fit/cores.tsv` (what `txl fit` embeds) matches a fresh `--table` run of that
//! board. Every session option's build variable (`TXL_TGT_LEN`, `TXL_MEM_LEN`,
//! `TXL_CLAMP_LEN`, `TXL_SAME_LENGTH`, `TXL_MEM_INIT`, f16 memory, the position keys per
//! segment) runs on the M33 and the keys folded into the queries on the RV32IMAC, then other
//! options given at run time, with the static arena and one from the heap; each option is first
//! seen to change the host's digest (the position keys per segment: its arena), so one the
//! firmware ignored fails the test. The firmware's error exits (bad arguments, a heap too small
//! for the arena, the core's errors) are checked with their exit codes and messages.
//!
//! Needs every board's Rust target and QEMU (`qemu-system-arm`, `qemu-system-riscv32`), which
//! `scripts/test.sh` installs; a missing one fails the test. Builds go to `target/firmware-test`
//! (this test run holds no lock on it), without link-time optimisation or debug information
//! ([`cargo`]).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use txl_core::arena::ArenaLayout;
use txl_core::digest::Fnv1a;
use txl_core::macs;
use txl_core::sampling::Sampling;
use txl_core::scoring;
use txl_core::AlignedBytes;
use txl_core::{Config, MemDtype, MemInit, Model, PositionKeys, Session, SessionOptions};
use txl_firmware_host::board::{self, Board};
use txl_firmware_host::{field, Outcome, ScoreLine};
use txl_host_gpu::quantize::{quantize_weights, Target};
use txl_tests::{random_image, with_integer_arithmetic};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::generate;

/// The default board, checked in depth.
const DEFAULT: Board = board::MPS2_AN386;

/// Each QEMU run takes seconds; this only stops a hung one.
const QEMU_TIMEOUT: Duration = Duration::from_secs(600);

// `BUILD_VARS`: every build of the firmware sets each explicitly.
include!("../../firmware/build_vars.rs");

/// Tokens scored: the first bytes of the held-out text (four segments of the demo's tgt_len).
const SCORE_TOKENS: usize = 256;

/// Firmware builds share one target directory: one at a time.
static BUILDS: Mutex<()> = Mutex::new(());

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn work_dir() -> PathBuf {
    let dir = workspace().join("target/firmware-test");
    std::fs::create_dir_all(&dir).expect("creating target/firmware-test");
    dir
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // A RUSTFLAGS variable would replace the firmware's flags; the linker scripts come from its
    // build script, and nothing of this test run's configuration should leak in.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "DEFMT_LOG",
    ]
    .into_iter()
    .chain(BUILD_VARS)
    {
        command.env_remove(var);
    }
    // The release profile without link-time optimisation: a build for another model or
    // options recompiles the firmware crate alone, not the whole program (a few seconds
    // against about fifteen). The same digests, which is what these tests check; the
    // instruction counts the docs report come from `scripts/firmware.sh`'s optimised builds.
    // Nor debug information (a third of each build's time): the defmt decoder reads the
    // symbol table, which stays.
    command
        .env("CARGO_PROFILE_RELEASE_LTO", "off")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false");
    command
}

/// Fails (never skips) when `board`'s Rust target is missing.
fn require_target(board: &Board) {
    let target = board.target;
    let sysroot = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let target_lib = Path::new(&sysroot).join("lib/rustlib").join(target);
    assert!(
        target_lib.is_dir(),
        "the Rust target {target} is not installed (no {}): run scripts/test.sh, which installs it",
        target_lib.display()
    );
}

/// Fails (never skips) when `board`'s Rust target or QEMU is missing.
fn require_target_and_qemu(board: &Board) {
    require_target(board);
    if let Err(error) = txl_firmware_host::check_qemu(board) {
        panic!("{error}");
    }
}

/// Builds the firmware for `board` with `vars`; the ELF is copied to
/// `target/firmware-test/NAME.elf`. `Err` holds cargo's error output.
fn build_firmware(board: &Board, name: &str, vars: &[(&str, &OsStr)]) -> Result<PathBuf, String> {
    let _build = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let target_dir = work_dir().join("firmware");
    let output = cargo()
        .current_dir(workspace().join("firmware"))
        .env("TXL_BOARD", board.name)
        .envs(vars.iter().copied())
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            board.target,
            "--target-dir",
        ])
        .arg(&target_dir)
        .args(if board.features.is_empty() {
            vec![]
        } else {
            vec!["--features".to_string(), board.features.join(",")]
        })
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !stderr.contains("--locked"),
        "firmware/Cargo.lock is out of date (a dependency of txl-core or txl-tools changed?): \
         run `cargo build --release` in firmware/ once to update it\n{stderr}"
    );
    if !output.status.success() {
        return Err(stderr);
    }
    let built = target_dir.join(board.target).join("release/txl-firmware");
    let elf = work_dir().join(format!("{name}.elf"));
    std::fs::copy(&built, &elf).unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
    // the flash the fit checks keep for code and constants must hold them
    let code = txl_firmware_host::code_bytes(&std::fs::read(&elf).unwrap()).unwrap();
    assert!(
        code > 0 && code <= board::CODE_BYTES as u64,
        "{name}: {code} bytes of code and constants, board::CODE_BYTES keeps {}",
        board::CODE_BYTES
    );
    Ok(elf)
}

fn run_firmware(elf: &Path, args: &[&str]) -> Outcome {
    let outcome = txl_firmware_host::run(elf, args, Some(QEMU_TIMEOUT), |_| {})
        .unwrap_or_else(|e| panic!("running {} {args:?} in QEMU: {e:#}", elf.display()));
    assert!(
        outcome.success(),
        "the firmware {args:?} failed in QEMU:\n{}",
        outcome.transcript()
    );
    outcome
}

/// The number after `label` on the first line that has it.
fn number_after(lines: &[String], label: &str) -> usize {
    lines
        .iter()
        .find_map(|line| {
            let rest = &line[line.find(label)? + label.len()..];
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no {label:?} in\n{}", lines.join("\n")))
}

/// `txl inspect`: the command-line tool, built like the tests (`cargo test --workspace` has
/// built it already for the tools' own tests; then this build is a no-op).
fn txl_inspect(image: &Path, options: &[&str]) -> Vec<String> {
    // This test is TARGET_DIR/debug/deps/firmware-HASH.
    let exe = std::env::current_exe().expect("the test's path");
    let target_dir = exe
        .ancestors()
        .nth(3)
        .expect("the test runs from a target directory");
    let status = {
        let _build = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
        // The test run's own environment (RUSTFLAGS included), so the build shares its artifacts.
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(workspace())
            .args([
                "build",
                "--quiet",
                "--locked",
                "--profile",
                "test",
                "-p",
                "txl-tools",
                "--bin",
                "txl",
            ])
            .arg("--target-dir")
            .arg(target_dir)
            .status()
            .expect("cargo runs")
    };
    assert!(status.success(), "building txl failed");
    let output = Command::new(target_dir.join("debug/txl"))
        .arg("inspect")
        .arg(image)
        .args(options)
        .output()
        .expect("txl runs");
    assert!(
        output.status.success(),
        "txl inspect failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The firmware's arena figures equal `txl inspect`'s for the same image and options.
fn assert_arena_matches_inspect(firmware: &[String], inspect: &[String]) {
    let inspect_number = |label: &str| -> usize {
        inspect
            .iter()
            .find(|line| line.trim_start().starts_with(label))
            .and_then(|line| line.split_whitespace().last()?.parse().ok())
            .unwrap_or_else(|| panic!("no {label:?} in txl inspect's output:\n{}", inspect.join("\n")))
    };
    assert_eq!(
        number_after(firmware, "arena bytes"),
        inspect_number("arena bytes")
    );
    assert_eq!(number_after(firmware, "image"), inspect_number("image bytes"));
    for (firmware_label, inspect_label) in [
        ("breakdown: memory", "memory"),
        ("position keys", "position keys"),
        ("activations", "activations"),
        ("scratch", "scratch"),
    ] {
        assert_eq!(
            number_after(firmware, firmware_label),
            inspect_number(inspect_label),
            "{inspect_label} bytes"
        );
    }
}

fn score_line(outcome: &Outcome) -> ScoreLine {
    let last = outcome.lines.last().map(String::as_str).unwrap_or("");
    ScoreLine::parse(last)
        .unwrap_or_else(|| panic!("the last line is not a score line:\n{}", outcome.transcript()))
}

/// The demo checkpoint converted in f32, as the firmware's build script converts it.
fn demo_image_f32() -> Vec<u8> {
    let dir = workspace().join("tests/fixtures/demo");
    load_hf_checkpoint(&dir, CheckpointFormat::Auto, false)
        .and_then(|checkpoint| checkpoint.to_image())
        .expect("the demo checkpoint converts")
}

/// The tokens, and a file of them for `TXL_TOKENS` (one per test: the tests run in parallel).
fn score_tokens(file: &str) -> (Vec<u32>, PathBuf) {
    heldout_tokens(file, SCORE_TOKENS)
}

/// The first `count` bytes of the held-out text as tokens, and `file` holding them.
fn heldout_tokens(file: &str, count: usize) -> (Vec<u32>, PathBuf) {
    let heldout =
        std::fs::read(workspace().join("tests/fixtures/demo/heldout.txt")).expect("reading heldout.txt");
    let bytes = &heldout[..count];
    let path = work_dir().join(file);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    (bytes.iter().map(|&b| u32::from(b)).collect(), path)
}

fn options_with(model: &Model<'_>, tgt_len: u32, mem_len: u32) -> SessionOptions {
    let mut options = SessionOptions::from_config(model.config());
    options.tgt_len = tgt_len;
    options.mem_len = mem_len;
    options
}

/// The demo checkpoint in int8, as the firmware's build script quantizes it (no calibration text).
fn demo_image_int8() -> Vec<u8> {
    let f32_image = AlignedBytes::copy_from(&demo_image_f32()).unwrap();
    let model = Model::parse(f32_image.bytes()).expect("the image parses");
    quantize_weights(&model, Target::Int8).expect("the demo model quantizes")
}

/// The demo checkpoint with int4 linear layers (groups of 32 columns, the int8 embedding and
/// output layer), as the firmware's build script quantizes it for `TXL_DTYPE=int4`.
fn demo_image_int4() -> Vec<u8> {
    let f32_image = AlignedBytes::copy_from(&demo_image_f32()).unwrap();
    let model = Model::parse(f32_image.bytes()).expect("the image parses");
    quantize_weights(&model, Target::Int4).expect("the demo model quantizes")
}

/// Each position-key mode counts the MACs its forward pass does (docs/MICROCONTROLLERS.md's formula):
/// recomputed keys add `n_layer × klen·d_model·H` per segment, the fold `n_layer × H·d_model`
/// per position and `n_head·d_model` instead of `H` per key for the position term.
#[test]
fn firmware_mac_counts_follow_the_position_key_mode() {
    let image = AlignedBytes::copy_from(&demo_image_f32()).unwrap();
    let config = *Model::parse(image.bytes()).expect("the image parses").config();
    let (n_layer, d_model) = (u64::from(config.n_layer), u64::from(config.d_model));
    let (h, n_head) = (u64::from(config.qkv_width()), u64::from(config.n_head));
    let session = SessionOptions {
        tgt_len: 1,
        mem_len: 64,
        clamp_len: 0,
        same_length: false,
        ..SessionOptions::from_config(&config)
    };
    let (mlen, qlen) = (64, 1);
    let keys = (mlen + qlen) as u64; // causal: every remembered key and itself
    let macs = |position_keys| {
        macs::segment_macs(
            &config,
            &SessionOptions {
                position_keys,
                ..session
            },
            mlen,
            qlen,
        )
    };
    let kept = macs(txl_core::PositionKeys::PerSession);
    assert_eq!(
        macs(txl_core::PositionKeys::PerSegment) - kept,
        n_layer * keys * d_model * h
    );
    // distances 0..=64 in blocks of ⌈2√65⌉ = 17: four blocks, each head's query rotated to each
    let folded_options = SessionOptions {
        position_keys: txl_core::PositionKeys::FoldedIntoQuery,
        ..session
    };
    assert_eq!(folded_options.folded_blocks(), (17, 4));
    let rotations = 4 * n_head * 2 * d_model;
    assert_eq!(
        macs(txl_core::PositionKeys::FoldedIntoQuery) - kept,
        n_layer * (h * d_model + keys * (n_head * d_model - h) + rotations)
    );
}

/// The demo checkpoint in f16, as the firmware's build script converts it.
fn demo_image_f16() -> Vec<u8> {
    let f32_image = AlignedBytes::copy_from(&demo_image_f32()).unwrap();
    let model = Model::parse(f32_image.bytes()).expect("the image parses");
    quantize_weights(&model, Target::F16).expect("the demo model converts to f16")
}

#[test]
fn f32_firmware_is_bit_exact_with_the_host() {
    check_bit_exact("f32", demo_image_f32());
}

/// f16 weights are widened by the FPU (`VCVTB`/`VCVTT`) on the device and in software or by
/// F16C on the host: the same bits.
#[test]
fn f16_firmware_is_bit_exact_with_the_host() {
    check_bit_exact("f16", demo_image_f16());
}

/// `bench` counts every kernel on the demo's four shapes; each count is positive and the int8
/// kernel for two positions costs less per MAC than the one for one (it reads the weights once).
#[test]
fn firmware_bench_reports_every_kernel() {
    require_target_and_qemu(&DEFAULT);
    let (_, tokens_path) = score_tokens("tokens-bench.bin");
    let elf = build_firmware(
        &DEFAULT,
        "bench-int8",
        &[
            ("TXL_DTYPE", OsStr::new("int8")),
            ("TXL_TOKENS", tokens_path.as_os_str()),
        ],
    )
    .unwrap_or_else(|stderr| panic!("building the firmware failed:\n{stderr}"));
    let run = run_firmware(&elf, &["bench"]);
    let per_mac = |kernel: &str| -> f64 {
        let line = run
            .lines
            .iter()
            .find(|l| l.contains(&format!("kernel={kernel} ")) && l.contains("shape=all"))
            .unwrap_or_else(|| panic!("no shape=all line for {kernel}:\n{}", run.transcript()));
        field(line, "instructions_per_mac")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no instructions_per_mac in {line}"))
    };
    let kernels = [
        "int8_matvec",
        "int8_rows",
        "int8_matvec_pair",
        "int4_matvec",
        "f16_matvec",
        "f32_matvec",
    ];
    for kernel in kernels {
        let per_shape = run
            .lines
            .iter()
            .filter(|l| l.contains(&format!("kernel={kernel} rows=")))
            .count();
        assert_eq!(
            per_shape,
            4,
            "{kernel}: one line per shape:\n{}",
            run.transcript()
        );
        assert!(per_mac(kernel) > 0.0, "{kernel}");
    }
    assert!(
        per_mac("int8_matvec_pair") < per_mac("int8_matvec"),
        "{}",
        run.transcript()
    );
    // the attention's integer kernels equal the portable sums on odd shapes (18 heads x 8 key
    // counts, then the key and value sums at strides of 128 and 256 bytes: 2 x 5 x 9)
    assert!(
        run.lines
            .iter()
            .any(|l| l.contains("bench check kernel=attention_int8 shapes=234 ok")),
        "{}",
        run.transcript()
    );
    // the int4 product equals the portable sums on odd shapes (5 groups x 14 widths x 5 row
    // counts, and the extreme sums in groups of 128 and 256 columns)
    assert!(
        run.lines
            .iter()
            .any(|l| l.contains("bench check kernel=int4 shapes=352 ok")),
        "{}",
        run.transcript()
    );
    // the integer row sums equal the portable ones (13 widths x 11 row counts)
    assert!(
        run.lines
            .iter()
            .any(|l| l.contains("bench check kernel=int8_rows shapes=143 ok")),
        "{}",
        run.transcript()
    );
    // the f16 vectors' widening keeps every f16's bits (all 65,536, then all but the first)
    assert!(
        run.lines
            .iter()
            .any(|l| l.contains("bench check kernel=widen_f16 values=131071 ok")),
        "{}",
        run.transcript()
    );
    // one head's attention over 64 keys of 32: 2 x 64 x 32 MACs, f32 and int8 memory
    for kernel in ["attention_f32", "attention_int8"] {
        let line = run
            .lines
            .iter()
            .find(|l| l.contains(&format!("kernel={kernel} shape=head ")))
            .unwrap_or_else(|| panic!("no line for {kernel}:\n{}", run.transcript()));
        assert_eq!(field(line, "macs"), Some("4096"), "{line}");
        let per_mac: f64 = field(line, "instructions_per_mac")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no instructions_per_mac in {line}"));
        assert!(per_mac > 0.0, "{line}");
    }
}

#[test]
fn int8_firmware_is_bit_exact_with_the_host() {
    check_bit_exact("int8", demo_image_int8());
}

/// int4 weights (W4A8): the DSP kernel's sums on the device, the portable (or AVX2) ones on the
/// host, the same bits.
#[test]
fn int4_firmware_is_bit_exact_with_the_host() {
    check_bit_exact("int4", demo_image_int4());
}

#[test]
fn int8_firmware_with_int8_memory_and_recomputed_position_keys_is_bit_exact() {
    check_int8_variant(
        "segment",
        &[
            ("TXL_MEM_DTYPE", OsStr::new("int8")),
            ("TXL_POSITION_KEYS", OsStr::new("segment")),
        ],
        |options| SessionOptions {
            mem_dtype: txl_core::MemDtype::Int8,
            position_keys: txl_core::PositionKeys::PerSegment,
            ..options
        },
        // the defaults: f32 memory, every layer's keys kept
        |options| SessionOptions {
            mem_dtype: txl_core::MemDtype::F32,
            position_keys: txl_core::PositionKeys::PerSession,
            ..options
        },
    );
}

/// Streaming (`tgt_len` 1) with int8 memory and `W_r` folded into the queries, the smallest
/// arena for the demo model: the host's bits, that arena, and a resume after a reset.
#[test]
fn int8_firmware_streaming_with_folded_position_keys_is_bit_exact() {
    check_int8_variant(
        "folded",
        &[
            ("TXL_TGT_LEN", OsStr::new("1")),
            ("TXL_MEM_DTYPE", OsStr::new("int8")),
            ("TXL_POSITION_KEYS", OsStr::new("folded")),
        ],
        |options| SessionOptions {
            tgt_len: 1,
            mem_dtype: txl_core::MemDtype::Int8,
            position_keys: txl_core::PositionKeys::FoldedIntoQuery,
            ..options
        },
        // one key table recomputed per segment instead
        |options| SessionOptions {
            position_keys: txl_core::PositionKeys::PerSegment,
            ..options
        },
    );
}

/// The int8 demo built with the build variables `vars` on the default board, whose session
/// options are `variant` of the model's: the host's bits, a resume after a reset, the arena the
/// core sizes for them, and that arena smaller than the one of `larger` of those options.
fn check_int8_variant(
    name: &str,
    vars: &[(&str, &OsStr)],
    variant: impl Fn(SessionOptions) -> SessionOptions,
    larger: impl Fn(SessionOptions) -> SessionOptions,
) {
    require_target_and_qemu(&DEFAULT);
    let image = demo_image_int8();
    let aligned = AlignedBytes::copy_from(&image).unwrap();
    let model = Model::parse(aligned.bytes()).expect("the image parses");
    let (tokens, tokens_path) = score_tokens(&format!("tokens-int8-{name}.bin"));
    let mut vars = vars.to_vec();
    vars.extend([
        ("TXL_DTYPE", OsStr::new("int8")),
        ("TXL_TOKENS", tokens_path.as_os_str()),
    ]);
    let elf = build_firmware(&DEFAULT, &format!("demo-int8-{name}"), &vars)
        .unwrap_or_else(|stderr| panic!("building the firmware failed:\n{stderr}"));
    let options = variant(SessionOptions::from_config(model.config()));
    let run = run_firmware(&elf, &["score"]);
    let firmware = score_line(&run);
    let host = scoring::score(&model, &tokens, options, 0, |_| {}).expect("the host scores");
    assert_eq!(
        (firmware.digest, firmware.bits_per_token),
        (host.digest(), host.bits_per_token()),
        "{name}:\n{}",
        run.transcript()
    );
    assert_resumes_after_a_reset(&elf, 2, &[], host.digest());
    let arena = Session::arena_bytes(&model, &options).unwrap();
    assert_eq!(number_after(&run.lines, "arena bytes"), arena);
    let other = Session::arena_bytes(&model, &larger(options)).unwrap();
    assert!(arena < other, "{name}: {arena} >= {other}");
}

/// Runs `score --reset-after K` (then `options`): the firmware saves its session state after `K`
/// segments, resets itself, restores the state after the reboot and must print the digest of an
/// uninterrupted run, `digest`. Returns the score line.
fn assert_resumes_after_a_reset(elf: &Path, segments: usize, options: &[&str], digest: u32) -> ScoreLine {
    let segments = segments.to_string();
    let mut args = vec!["score", "--reset-after", &segments];
    args.extend(options);
    let run = run_firmware(elf, &args);
    let transcript = run.transcript();
    assert!(
        transcript.contains("session state saved") && transcript.contains("resumed after a reset"),
        "the firmware did not reset and resume:\n{transcript}"
    );
    let score = score_line(&run);
    assert_eq!(
        score.digest, digest,
        "the score resumed after a reset differs from an uninterrupted one:\n{transcript}"
    );
    score
}

/// Builds the firmware with the bundled model in `dtype` (the build script converts it; `image`
/// is the same conversion on the host), then checks score and demo against the host core.
fn check_bit_exact(dtype: &str, image: Vec<u8>) {
    require_target_and_qemu(&DEFAULT);
    let image_path = work_dir().join(format!("demo-{dtype}.txl"));
    std::fs::write(&image_path, &image).expect("writing the image");
    let aligned = AlignedBytes::copy_from(&image).unwrap();
    let model = Model::parse(aligned.bytes()).expect("the image parses");
    let (tokens, tokens_path) = score_tokens(&format!("tokens-{dtype}.bin"));

    // The bundled model converted by the build script (TXL_MODEL unset).
    let elf = build_firmware(
        &DEFAULT,
        &format!("demo-{dtype}"),
        &[
            ("TXL_DTYPE", OsStr::new(dtype)),
            ("TXL_TOKENS", tokens_path.as_os_str()),
        ],
    )
    .unwrap_or_else(|stderr| panic!("building the firmware failed:\n{stderr}"));

    // 1. Static arena, build-time (the model's) options.
    let options = SessionOptions::from_config(model.config());
    let run = run_firmware(&elf, &["score"]);
    let firmware = score_line(&run);
    let host = scoring::score(&model, &tokens, options, 0, |_| {}).expect("the host scores");
    assert_eq!(firmware.tokens, tokens.len());
    assert_eq!(
        (firmware.digest, firmware.bits_per_token),
        (host.digest(), host.bits_per_token()),
        "firmware digest {:#010x} / {} bits, host {:#010x} / {} bits:\n{}",
        firmware.digest,
        firmware.bits_per_token,
        host.digest(),
        host.bits_per_token(),
        run.transcript()
    );
    assert!(firmware.instructions_per_token > 0);
    assert_eq!(
        number_after(&run.lines, "arena bytes"),
        Session::arena_bytes(&model, &options).unwrap()
    );
    assert_arena_matches_inspect(&run.lines, &txl_inspect(&image_path, &[]));
    assert_resumes_after_a_reset(&elf, 2, &[], host.digest());

    // 2. The same firmware with other options and its arena sized at boot, from the heap.
    let run = run_firmware(
        &elf,
        &["score", "--arena", "heap", "--tgt-len", "16", "--mem-len", "32"],
    );
    let firmware = score_line(&run);
    let host =
        scoring::score(&model, &tokens, options_with(&model, 16, 32), 0, |_| {}).expect("the host scores");
    assert_eq!(
        (firmware.digest, firmware.bits_per_token),
        (host.digest(), host.bits_per_token()),
        "with tgt_len 16, mem_len 32:\n{}",
        run.transcript()
    );
    assert_arena_matches_inspect(
        &run.lines,
        &txl_inspect(&image_path, &["--tgt-len", "16", "--mem-len", "32"]),
    );

    // 3. The demo generates what `txl generate` generates.
    let prompt = "And God said";
    let run = run_firmware(
        &elf,
        &[
            "demo",
            "--prompt",
            prompt,
            "--length",
            "40",
            "--temperature",
            "0.8",
            "--seed",
            "7",
        ],
    );
    let sampling = Sampling::Temperature {
        temperature: 0.8,
        seed: 7,
    };
    let prompt_tokens: Vec<u32> = prompt.bytes().map(u32::from).collect();
    let generated =
        generate::generate(&model, options, &prompt_tokens, 40, sampling).expect("the host generates");
    let digest = {
        let mut hash = Fnv1a::new();
        generated.iter().for_each(|t| hash.write(&t.to_le_bytes()));
        hash.value()
    };
    let last = run.lines.last().cloned().unwrap_or_default();
    assert_eq!(
        field(&last, "digest"),
        Some(format!("{digest:#010x}").as_str()),
        "the firmware's demo differs from the host's:\n{}",
        run.transcript()
    );
}

/// A model whose f32 image (about 5 MB) is larger than the board's 4 MiB flash.
fn too_large_config() -> Config {
    Config {
        n_token: 256,
        d_model: 256,
        d_embed: 256,
        n_head: 4,
        d_head: 64,
        d_inner: 512,
        n_layer: 2,
        cutoffs: [0; txl_core::config::MAX_CUTOFFS],
        n_cutoffs: 0,
        div_val: 1,
        tie_weight: true,
        tie_projs: 0,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 8,
        mem_len: 8,
        clamp_len: 0,
        same_length: false,
    }
}

#[test]
fn images_that_do_not_fit_the_board_fail_the_build() {
    require_target(&DEFAULT);
    let (tokens, tokens_path) = score_tokens("tokens-too-large.bin");

    // An image larger than the flash.
    let image = random_image(&too_large_config(), 3);
    let image_path = work_dir().join("too-large.txl");
    std::fs::write(&image_path, &image).expect("writing the image");
    let stderr = build_firmware(
        &DEFAULT,
        "too-large",
        &[
            ("TXL_MODEL", image_path.as_os_str()),
            ("TXL_TOKENS", tokens_path.as_os_str()),
        ],
    )
    .expect_err("a 5 MB image built for a 4 MiB flash");
    let over = image.len() + tokens.len() + board::CODE_BYTES - DEFAULT.flash.bytes;
    let expected = format!("{over} bytes too many");
    assert!(
        stderr.contains("does not fit the board's flash") && stderr.contains(&expected),
        "expected \"does not fit the board's flash ... {expected}\" in:\n{stderr}"
    );

    // The demo image with a memory whose arena is larger than the RAM.
    let image = demo_image_f32();
    let image_path = work_dir().join("demo-f32-long-memory.txl");
    std::fs::write(&image_path, &image).expect("writing the image");
    let aligned = AlignedBytes::copy_from(&image).unwrap();
    let model = Model::parse(aligned.bytes()).expect("the image parses");
    let mem_len = 2000;
    let arena = ArenaLayout::new(
        model.config(),
        model.image().arithmetic(),
        &options_with(&model, model.config().tgt_len, mem_len),
    )
    .unwrap()
    .total_bytes();
    let stderr = build_firmware(
        &DEFAULT,
        "long-memory",
        &[
            ("TXL_MODEL", image_path.as_os_str()),
            ("TXL_TOKENS", tokens_path.as_os_str()),
            ("TXL_MEM_LEN", OsStr::new(&mem_len.to_string())),
        ],
    )
    .expect_err("an arena larger than the RAM");
    let over = arena + board::STACK_BYTES + board::STATIC_BYTES - DEFAULT.ram.bytes;
    let expected = format!("arena {arena} bytes");
    let too_many = format!("{over} bytes too many");
    assert!(
        stderr.contains("does not fit the board's RAM")
            && stderr.contains(&expected)
            && stderr.contains(&too_many),
        "expected \"does not fit the board's RAM: {expected} ... {too_many}\" in:\n{stderr}"
    );
}

/// Tokens the other boards score: two segments of the demo's `tgt_len`, the memory carried from
/// the first to the second (the f32 build on the RV32IMAC, which has no FPU, runs its arithmetic in
/// software: about 75 million instructions a token).
const BOARD_TOKENS: usize = 128;

/// Builds the firmware for `board` with the bundled model in int8 and in f32, and checks that each
/// scores `BOARD_TOKENS` tokens with the host's digest and bits per token; the int8 build also
/// resumes after a reset with the uninterrupted digest. On a board without an FPU the score counts
/// its calls into software floating point: today's forward pass (f32 LayerNorm, softmax and
/// attention) makes some with any weights, so the count must be above 0 (and the same after a
/// reset).
fn check_board(board: &Board) {
    check_board_images(
        board,
        [
            ("int8", demo_image_int8()),
            ("f32", demo_image_f32()),
            ("integer-int8", demo_image_integer()),
        ],
    );
}

/// The demo checkpoint in int8 as an integer image, calibrated on the first bytes of
/// `calib.txt` (`txl quantize --integer --calib-bytes`), made once.
fn demo_image_integer() -> Vec<u8> {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| integer_image(&demo_image_int8())).clone()
}

/// [`demo_image_integer`] with int4 linear layers.
fn demo_image_integer_int4() -> Vec<u8> {
    integer_image(&demo_image_int4())
}

fn integer_image(image: &[u8]) -> Vec<u8> {
    let calibration = std::fs::read(workspace().join("tests/fixtures/demo/calib.txt")).unwrap();
    let calibration: Vec<u32> = calibration[..1024].iter().map(|&b| u32::from(b)).collect();
    with_integer_arithmetic(image, &calibration)
}

/// [`check_board`] for the given `TXL_DTYPE`s (or `integer-…` for integer images, which go in as
/// `TXL_MODEL`) and the images they stand for.
fn check_board_images<const N: usize>(board: &Board, images: [(&str, Vec<u8>); N]) {
    check_board_runs(board, images, true);
}

/// [`check_board_images`], the resume after a reset left out when `resume` is false.
fn check_board_runs<const N: usize>(board: &Board, images: [(&str, Vec<u8>); N], resume: bool) {
    require_target_and_qemu(board);
    let (tokens, tokens_path) = heldout_tokens(
        &format!("tokens-{}-{}.bin", board.name, images[0].0),
        BOARD_TOKENS,
    );
    for (dtype, image) in images {
        let aligned = AlignedBytes::copy_from(&image).unwrap();
        let model = Model::parse(aligned.bytes()).expect("the image parses");
        let name = format!("{}-{dtype}", board.name);
        // an integer image goes in as a file (the build script converts the others itself)
        let integer = dtype.starts_with("integer");
        let image_path = work_dir().join(format!("{name}.txl"));
        if integer {
            std::fs::write(&image_path, &image).unwrap();
        }
        let model_var = match integer {
            true => ("TXL_MODEL", image_path.as_os_str()),
            false => ("TXL_DTYPE", OsStr::new(dtype)),
        };
        let elf = build_firmware(
            board,
            &name,
            &[model_var, ("TXL_TOKENS", tokens_path.as_os_str())],
        )
        .unwrap_or_else(|stderr| panic!("building the firmware for {} failed:\n{stderr}", board.name));
        let run = run_firmware(&elf, &["score"]);
        if dtype == "integer-int8" && board.soft_float {
            // the integer row sums' assembly of the cores without DSP (RV32IM, Cortex-M3,
            // Armv6-M) equals the portable sums on odd shapes, as `bench` checks them here
            let bench = run_firmware(&elf, &["bench"]);
            assert!(
                bench
                    .lines
                    .iter()
                    .any(|l| l.contains("bench check kernel=int8_rows shapes=143 ok")),
                "{}: {}",
                board.name,
                bench.transcript()
            );
        }
        let firmware = score_line(&run);
        let mut options = SessionOptions::from_config(model.config());
        if integer {
            options.mem_dtype = MemDtype::Int8; // as the build script sets it for integer images
        }
        let host = scoring::score(&model, &tokens, options, 0, |_| {}).expect("the host scores");
        assert_eq!(firmware.tokens, tokens.len());
        assert_eq!(
            (firmware.digest, firmware.bits_per_token),
            (host.digest(), host.bits_per_token()),
            "{} with {dtype} weights: firmware digest {:#010x}, host {:#010x}:\n{}",
            board.name,
            firmware.digest,
            host.digest(),
            run.transcript()
        );
        assert!(firmware.instructions_per_token > 0);
        assert!(
            run.lines[0].contains(board.core) && run.lines[0].contains(board.name),
            "the firmware does not say it runs on {} ({}):\n{}",
            board.core,
            board.name,
            run.transcript()
        );
        if board.soft_float && integer {
            assert_eq!(
                firmware.soft_float_calls,
                Some(0),
                "{} with an integer image called software floating point:\n{}",
                board.name,
                run.transcript()
            );
        } else if board.soft_float {
            assert!(
                firmware.soft_float_calls.is_some_and(|calls| calls > 0),
                "{} with {dtype} weights counted no calls into software floating point:\n{}",
                board.name,
                run.transcript()
            );
        } else {
            assert_eq!(firmware.soft_float_calls, None, "{}", run.transcript());
        }
        if (dtype == "int8" || dtype == "integer-int8") && resume {
            let resumed = assert_resumes_after_a_reset(&elf, 1, &[], host.digest());
            assert_eq!(
                resumed.soft_float_calls, firmware.soft_float_calls,
                "the soft-float calls counted across a reset"
            );
        }
    }
}

/// An integer image on the default board (Cortex-M4F): the DSP kernels' integer sums, the
/// host's digest.
#[test]
fn integer_firmware_is_bit_exact_with_the_host() {
    check_board_runs(&DEFAULT, [("integer-int8", demo_image_integer())], false);
}

#[test]
fn cortex_m7_mps2_an500_is_bit_exact_with_the_host() {
    check_board(&board::MPS2_AN500);
}

#[test]
fn cortex_m33_mps2_an505_is_bit_exact_with_the_host() {
    check_board(&board::MPS2_AN505);
}

#[test]
fn cortex_m55_mps3_an547_is_bit_exact_with_the_host() {
    check_board(&board::MPS3_AN547);
}

/// int4 weights on the M55, whose Helium build runs the DSP int4 kernel on an input it widens
/// itself.
#[test]
fn int4_firmware_on_the_cortex_m55_mps3_an547_is_bit_exact_with_the_host() {
    check_board_images(&board::MPS3_AN547, [("int4", demo_image_int4())]);
}

/// The Helium kernel (`--features mve`) is built for the M55 and for nothing else: the build
/// script refuses an M55 build without it and an M33 build with it, saying why.
#[test]
fn boards_are_built_with_their_own_kernels_only() {
    let m33_with_helium = Board {
        features: &["mve"],
        ..board::MPS2_AN505
    };
    let m55_without = Board {
        features: &[],
        ..board::MPS3_AN547
    };
    for (board, expected) in [
        (
            &m33_with_helium,
            "the feature `mve` is for boards whose core has it (mps3-an547)",
        ),
        (
            &m55_without,
            "TXL_BOARD=mps3-an547 is built with `--features mve`",
        ),
    ] {
        require_target(board);
        let stderr =
            build_firmware(board, "wrong-features", &[]).expect_err("a build with another board's kernels");
        assert!(stderr.contains(expected), "expected \"{expected}\" in:\n{stderr}");
    }
}

#[test]
fn rv32imac_riscv32_virt_is_bit_exact_with_the_host() {
    check_board(&board::RISCV32_VIRT);
}

/// The Cortex-M3 (no DSP extension, no FPU: the portable kernels, floating point in software)
/// in int8, with a resume after a reset, and in int4; f32 would take minutes here.
#[test]
fn cortex_m3_mps2_an385_is_bit_exact_with_the_host() {
    check_board_images(
        &board::MPS2_AN385,
        [
            ("int8", demo_image_int8()),
            ("int4", demo_image_int4()),
            ("integer-int8", demo_image_integer()),
            ("integer-int4", demo_image_integer_int4()),
        ],
    );
}

/// Armv6-M code (Cortex-M0/M0+) on the AN385's M3, in int8: the host's digest, and calls into
/// software floating point counted. (The resume after a reset is the M3's, above.)
#[test]
fn armv6m_on_mps2_an385_is_bit_exact_and_counts_soft_float_calls() {
    check_board_runs(
        &board::MPS2_AN385_V6M,
        [
            ("int8", demo_image_int8()),
            ("integer-int8", demo_image_integer()),
        ],
        false,
    );
}

/// A change to the session options, named by the build variable (`TXL_CLAMP_LEN=40`) or the
/// firmware's arguments (`--clamp-len 20`) that make it.
type OptionChange = (&'static str, fn(&mut SessionOptions));

/// `base` with every one of `changes`, once each change is seen to count: without it the host
/// gives another digest (or, for the position keys, needs another arena), so a firmware that
/// ignored it would fail.
fn with_changes_that_count(
    model: &Model<'_>,
    tokens: &[u32],
    base: SessionOptions,
    changes: &[OptionChange],
) -> SessionOptions {
    let all_but = |skip: Option<usize>| {
        let mut options = base;
        for (i, (_, change)) in changes.iter().enumerate() {
            if Some(i) != skip {
                change(&mut options);
            }
        }
        options
    };
    let result = |options: SessionOptions| {
        let host = scoring::score(model, tokens, options, 0, |_| {}).expect("the host scores");
        (host.digest(), Session::arena_bytes(model, &options).unwrap())
    };
    let options = all_but(None);
    let expected = result(options);
    let names: Vec<&str> = changes.iter().map(|(name, _)| *name).collect();
    assert_ne!(result(base), expected, "{names:?} change nothing");
    for (i, (name, _)) in changes.iter().enumerate() {
        let without = all_but(Some(i));
        let (digest, arena) = result(without);
        if without.position_keys == options.position_keys {
            assert_ne!(
                digest,
                expected.0,
                "{name} leaves the host's digest for {} tokens as it was",
                tokens.len()
            );
        } else {
            // the position keys kept or recomputed per segment: the same bits in another arena
            assert_ne!(
                (digest, arena),
                expected,
                "{name} changes neither the host's digest nor its arena"
            );
        }
    }
    options
}

/// The build variables of `changes` (`TXL_CLAMP_LEN=40`, ...).
fn build_vars(changes: &[OptionChange]) -> Vec<(&'static str, &'static OsStr)> {
    changes
        .iter()
        .map(|(name, _)| {
            let (var, value) = name.split_once('=').expect("VAR=value");
            (var, OsStr::new(value))
        })
        .collect()
}

/// The firmware's arguments of `changes` (`--clamp-len 20`, ...).
fn run_args(changes: &[OptionChange]) -> Vec<&'static str> {
    changes
        .iter()
        .flat_map(|(name, _)| name.split_whitespace())
        .collect()
}

/// `run` scored `tokens` as the host does with `options`: digest and bits per token, the arena
/// the core sizes for them, and the options the firmware says it runs with.
fn assert_scores_like_the_host(
    run: &Outcome,
    model: &Model<'_>,
    tokens: &[u32],
    options: &SessionOptions,
    what: &str,
) {
    let firmware = score_line(run);
    let host = scoring::score(model, tokens, *options, 0, |_| {}).expect("the host scores");
    assert_eq!(firmware.tokens, tokens.len());
    assert_eq!(
        (firmware.digest, firmware.bits_per_token),
        (host.digest(), host.bits_per_token()),
        "{what}: firmware digest {:#010x}, host {:#010x} ({options}):\n{}",
        firmware.digest,
        host.digest(),
        run.transcript()
    );
    assert_eq!(
        number_after(&run.lines, "arena bytes"),
        Session::arena_bytes(model, options).unwrap(),
        "{what}: the arena for {options}:\n{}",
        run.transcript()
    );
    let session = format!(
        "session: {}",
        options
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(
        run.lines.contains(&session),
        "{what}: no line {session:?}:\n{}",
        run.transcript()
    );
}

/// The board of the session options set at build time and of the firmware's error exits.
const OPTIONS_BOARD: Board = board::MPS2_AN505;

/// Every session option's build variable, each with a value other than the demo model's
/// (`tgt_len` 64, `mem_len` 64, no clamp, `same_length` true). The position keys recomputed per
/// segment give the same bits as those kept, in less RAM.
const BUILT_IN_OPTIONS: [OptionChange; 7] = [
    ("TXL_TGT_LEN=32", |o| o.tgt_len = 32),
    ("TXL_MEM_LEN=48", |o| o.mem_len = 48),
    // below mem_len + tgt_len = 80: the distances 41 to 79 share the embedding of 40
    ("TXL_CLAMP_LEN=40", |o| o.clamp_len = 40),
    ("TXL_SAME_LENGTH=false", |o| o.same_length = false),
    ("TXL_MEM_INIT=zeros", |o| o.mem_init = MemInit::Zeros),
    ("TXL_MEM_DTYPE=f16", |o| o.mem_dtype = MemDtype::F16),
    ("TXL_POSITION_KEYS=segment", |o| {
        o.position_keys = PositionKeys::PerSegment
    }),
];

/// The int8 demo for [`OPTIONS_BOARD`] with [`BUILT_IN_OPTIONS`], and the [`BOARD_TOKENS`] tokens
/// it scores: built once, by the first test that runs it.
fn options_firmware() -> &'static (PathBuf, Vec<u32>) {
    static FIRMWARE: OnceLock<(PathBuf, Vec<u32>)> = OnceLock::new();
    FIRMWARE.get_or_init(|| {
        require_target_and_qemu(&OPTIONS_BOARD);
        let (tokens, tokens_path) = heldout_tokens("tokens-options.bin", BOARD_TOKENS);
        let mut vars = build_vars(&BUILT_IN_OPTIONS);
        vars.extend([
            ("TXL_DTYPE", OsStr::new("int8")),
            ("TXL_TOKENS", tokens_path.as_os_str()),
        ]);
        let elf = build_firmware(&OPTIONS_BOARD, "mps2-an505-options", &vars)
            .unwrap_or_else(|stderr| panic!("building the firmware failed:\n{stderr}"));
        (elf, tokens)
    })
}

/// The session options' build variables on the M33, each of which changes the host's digest or
/// arena: the firmware runs with them, in the arena the core sizes for them, with the host's
/// digest and bits per token. Then the same firmware takes other options at run time, each of
/// which counts too: other lengths in an arena from the heap, the model's `same_length` and
/// memory start in the static one.
#[test]
fn session_options_built_into_the_cortex_m33_firmware_are_bit_exact() {
    let image = AlignedBytes::copy_from(&demo_image_int8()).unwrap();
    let model = Model::parse(image.bytes()).expect("the image parses");
    let (elf, tokens) = options_firmware();
    let defaults = SessionOptions::from_config(model.config());
    let built_in = with_changes_that_count(&model, tokens, defaults, &BUILT_IN_OPTIONS);
    let run = run_firmware(elf, &["score"]);
    assert_scores_like_the_host(&run, &model, tokens, &built_in, "the build-time options");

    // Other lengths and a clamp below them (with same_length false the distances reach 47), in
    // an arena sized at boot; then the model's same_length and memory start again, which the
    // static arena holds.
    let lengths: [OptionChange; 3] = [
        ("--tgt-len 16", |o| o.tgt_len = 16),
        ("--mem-len 32", |o| o.mem_len = 32),
        ("--clamp-len 20", |o| o.clamp_len = 20),
    ];
    assert_scores_with_run_time_options(elf, &model, tokens, built_in, "heap", &lengths);
    let starts: [OptionChange; 2] = [
        ("--same-length true", |o| o.same_length = true),
        ("--mem-init empty", |o| o.mem_init = MemInit::Empty),
    ];
    assert_scores_with_run_time_options(elf, &model, tokens, built_in, "static", &starts);
}

/// Runs `score --arena ARENA` with the arguments of `changes` (each of which must count) on a
/// firmware built with the options `built_in`: the host's digest for those options changed.
fn assert_scores_with_run_time_options(
    elf: &Path,
    model: &Model<'_>,
    tokens: &[u32],
    built_in: SessionOptions,
    arena: &str,
    changes: &[OptionChange],
) {
    let options = with_changes_that_count(model, tokens, built_in, changes);
    let mut args = vec!["score", "--arena", arena];
    args.extend(run_args(changes));
    let run = run_firmware(elf, &args);
    assert_scores_like_the_host(&run, model, tokens, &options, &args.join(" "));
    let source = match arena {
        "heap" => "(from the heap, sized at boot",
        _ => "(static, computed at build time",
    };
    assert!(
        run.lines.iter().any(|l| l.contains(source)),
        "no {source:?}:\n{}",
        run.transcript()
    );
}

/// Runs `elf` with `args`, which must end with exit code `code` and one `ERROR` line, the last;
/// returns the log and that line's message.
fn run_failing(elf: &Path, args: &[&str], code: i32) -> (Outcome, String) {
    let outcome = txl_firmware_host::run(elf, args, Some(QEMU_TIMEOUT), |_| {})
        .unwrap_or_else(|e| panic!("running {} {args:?} in QEMU: {e:#}", elf.display()));
    assert_eq!(
        outcome.exit_code(),
        Some(code),
        "{args:?}: the exit code:\n{}",
        outcome.transcript()
    );
    let errors: Vec<&String> = outcome.lines.iter().filter(|l| l.starts_with("ERROR ")).collect();
    assert!(
        errors.len() == 1 && outcome.lines.last() == Some(errors[0]),
        "{args:?}: one ERROR line, the last:\n{}",
        outcome.transcript()
    );
    let message = errors[0]["ERROR ".len()..].to_string();
    (outcome, message)
}

/// The firmware's error exits, each with its exit code and one line that says why: a command line
/// it cannot read (2, before anything else is printed), an arena larger than the heap (1) and the
/// core's errors (1): options it refuses, and options the static arena cannot hold.
#[test]
fn firmware_error_exits_say_why() {
    let image = AlignedBytes::copy_from(&demo_image_int8()).unwrap();
    let model = Model::parse(image.bytes()).expect("the image parses");
    let mut built_in = SessionOptions::from_config(model.config());
    for (_, change) in BUILT_IN_OPTIONS {
        change(&mut built_in);
    }
    let (elf, _) = options_firmware();

    for (args, expected) in [
        (
            &["score", "--arena", "nowhere"][..],
            "--arena takes static or heap",
        ),
        (
            &["score", "--mem-length", "32"],
            "unknown argument (see firmware/README.md)",
        ),
        (
            &["demo", "--temperature", "-1"],
            "--temperature takes a finite number >= 0",
        ),
    ] {
        let (outcome, message) = run_failing(elf, args, 2);
        assert_eq!(message, expected, "{args:?}");
        assert_eq!(outcome.lines.len(), 1, "{args:?}:\n{}", outcome.transcript());
    }

    // Memory for 2000 positions: more than the heap has.
    let options = SessionOptions {
        mem_len: 2000,
        ..built_in
    };
    let needed = Session::arena_bytes(&model, &options).unwrap();
    let (outcome, message) = run_failing(elf, &["score", "--arena", "heap", "--mem-len", "2000"], 1);
    let free = number_after(&outcome.lines, "sized at boot;");
    assert!(free < needed, "{free} >= {needed}");
    assert_eq!(
        message,
        format!(
            "the arena needs {needed} bytes, the heap has {free} free: {} bytes short",
            needed - free
        )
    );

    let (_, message) = run_failing(elf, &["score", "--tgt-len", "0"], 1);
    assert_eq!(
        message,
        "txl-core: invalid session options (tgt_len must be at least 1)"
    );

    // The static arena, sized for mem_len 48, with mem_len 128.
    let options = SessionOptions {
        mem_len: 128,
        ..built_in
    };
    let (_, message) = run_failing(elf, &["score", "--mem-len", "128"], 1);
    assert_eq!(
        message,
        format!(
            "txl-core: arena too small: needs {} bytes, got {}",
            Session::arena_bytes(&model, &options).unwrap(),
            Session::arena_bytes(&model, &built_in).unwrap()
        )
    );
}

/// `W_r` folded into the queries (other bits than the keys kept) on the RV32IMAC in int8, which
/// runs the portable kernels and its floating point in software: the host's digest with the
/// static arena, and with one taken from the heap for a `tgt_len` and `mem_len` given at run time.
#[test]
fn rv32imac_firmware_with_folded_position_keys_and_the_heap_arena_is_bit_exact() {
    let board = board::RISCV32_VIRT;
    require_target_and_qemu(&board);
    let image = AlignedBytes::copy_from(&demo_image_int8()).unwrap();
    let model = Model::parse(image.bytes()).expect("the image parses");
    let (tokens, tokens_path) = heldout_tokens("tokens-riscv32-virt-folded.bin", BOARD_TOKENS);
    let folded: [OptionChange; 1] = [("TXL_POSITION_KEYS=folded", |o| {
        o.position_keys = PositionKeys::FoldedIntoQuery
    })];
    let defaults = SessionOptions::from_config(model.config());
    let options = with_changes_that_count(&model, &tokens, defaults, &folded);
    let mut vars = build_vars(&folded);
    vars.extend([
        ("TXL_DTYPE", OsStr::new("int8")),
        ("TXL_TOKENS", tokens_path.as_os_str()),
    ]);
    let elf = build_firmware(&board, "riscv32-virt-folded", &vars)
        .unwrap_or_else(|stderr| panic!("building the firmware failed:\n{stderr}"));
    let run = run_firmware(&elf, &["score"]);
    assert_scores_like_the_host(&run, &model, &tokens, &options, "folded");

    let run_time: [OptionChange; 2] = [
        ("--tgt-len 16", |o| o.tgt_len = 16),
        ("--mem-len 32", |o| o.mem_len = 32),
    ];
    assert_scores_with_run_time_options(&elf, &model, &tokens, options, "heap", &run_time);
}

/// `tests/fixtures/second` (a trained 6-layer model, d_model 96) with int4 linear layers, as `txl
/// convert --dtype int4` quantizes it (no calibration text).
fn second_image_int4() -> Vec<u8> {
    let dir = workspace().join("tests/fixtures/second");
    let f32_image = load_hf_checkpoint(&dir, CheckpointFormat::Auto, false)
        .and_then(|checkpoint| checkpoint.to_image())
        .expect("the second checkpoint converts");
    let f32_image = AlignedBytes::copy_from(&f32_image).unwrap();
    let model = Model::parse(f32_image.bytes()).expect("the image parses");
    quantize_weights(&model, Target::Int4).expect("the second model quantizes")
}

/// The first 256 bytes of the second model's held-out text as tokens, and `file` holding them.
fn second_tokens(file: &str) -> (Vec<u32>, PathBuf) {
    let heldout = std::fs::read(workspace().join("tests/fixtures/second/heldout.txt"))
        .expect("reading the second model's heldout.txt");
    let bytes = &heldout[..256];
    let path = work_dir().join(file);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    (bytes.iter().map(|&b| u32::from(b)).collect(), path)
}

/// The build variables of the second model streamed on the STM32F405 with `mem_len`.
fn stm32_vars<'a>(image: &'a Path, tokens: &'a Path, mem_len: &'a str) -> Vec<(&'static str, &'a OsStr)> {
    vec![
        ("TXL_MODEL", image.as_os_str()),
        ("TXL_TOKENS", tokens.as_os_str()),
        ("TXL_TGT_LEN", OsStr::new("1")),
        ("TXL_MEM_LEN", OsStr::new(mem_len)),
        ("TXL_MEM_DTYPE", OsStr::new("int8")),
        ("TXL_POSITION_KEYS", OsStr::new("folded")),
    ]
}

/// The STM32F405 (QEMU's `netduinoplus2`) within the real part's limits: 1 MiB of flash and the
/// first 128 KiB of SRAM. A trained model in int4 streams there (tgt_len 1, mem_len 64, int8
/// memory, W_r folded into the queries) with the host's digest and bits per token; the stack
/// stays inside its measured reserve; `--reset-after` is refused with the reason (the session
/// state's record does not fit beside the arena) and, with a shorter memory whose record fits,
/// the score resumes after a reset with the uninterrupted digest; options that do not fit
/// the part fail the build, naming it and the shortfall.
#[test]
fn stm32f405_streams_a_trained_int4_model_within_the_parts_limits() {
    let board = board::STM32F405;
    require_target_and_qemu(&board);
    assert_eq!(
        (board.flash.bytes, board.ram.bytes),
        (1 << 20, 128 << 10),
        "the real part's"
    );
    let image = second_image_int4();
    let image_path = work_dir().join("second-int4.txl");
    std::fs::write(&image_path, &image).expect("writing the image");
    let aligned = AlignedBytes::copy_from(&image).unwrap();
    let model = Model::parse(aligned.bytes()).expect("the image parses");
    let (tokens, tokens_path) = second_tokens("tokens-stm32f405.bin");
    let options = SessionOptions {
        tgt_len: 1,
        mem_len: 64,
        mem_dtype: MemDtype::Int8,
        position_keys: PositionKeys::FoldedIntoQuery,
        ..SessionOptions::from_config(model.config())
    };
    let elf = build_firmware(
        &board,
        "stm32f405-second-int4",
        &stm32_vars(&image_path, &tokens_path, "64"),
    )
    .unwrap_or_else(|stderr| panic!("building the firmware failed:\n{stderr}"));
    let run = run_firmware(&elf, &["score"]);
    let firmware = score_line(&run);
    let host = scoring::score(&model, &tokens, options, 0, |_| {}).expect("the host scores");
    assert_eq!(
        (firmware.digest, firmware.bits_per_token),
        (host.digest(), host.bits_per_token()),
        "{}",
        run.transcript()
    );
    let arena = Session::arena_bytes(&model, &options).unwrap();
    assert_eq!(number_after(&run.lines, "arena bytes"), arena);
    assert!(arena + board.stack_bytes + board.static_bytes <= board.ram.bytes);
    // the painted stack: used, and within the reserve
    let used = number_after(&run.lines, "stack:");
    assert!(
        used > 0 && used < board.stack_bytes,
        "stack {used} of {}",
        board.stack_bytes
    );

    // the session state's record does not fit beside this arena: refused, saying why
    let (_, message) = run_failing(&elf, &["score", "--reset-after", "2"], 2);
    let record = Session::state_bytes_for(&model, &options).unwrap() + 64;
    assert!(
        message.contains("stm32f405: `score --reset-after` is refused")
            && message.contains(&format!("record ({} bytes", record.next_multiple_of(16)))
            && message.contains("does not fit"),
        "{message}"
    );

    // with 8 positions of memory it fits: the score resumes after a system reset
    let short = SessionOptions {
        mem_len: 8,
        ..options
    };
    let elf = build_firmware(
        &board,
        "stm32f405-second-int4-mem8",
        &stm32_vars(&image_path, &tokens_path, "8"),
    )
    .unwrap_or_else(|stderr| panic!("building the firmware failed:\n{stderr}"));
    let host = scoring::score(&model, &tokens, short, 0, |_| {}).expect("the host scores");
    assert_resumes_after_a_reset(&elf, 100, &[], host.digest());

    // f32 memory with the keys kept does not fit the part: the build says so, with the bytes
    let f32_memory = SessionOptions {
        mem_dtype: MemDtype::F32,
        position_keys: PositionKeys::PerSession,
        ..options
    };
    let arena = Session::arena_bytes(&model, &f32_memory).unwrap();
    let mut vars = stm32_vars(&image_path, &tokens_path, "64");
    vars.retain(|(name, _)| !matches!(*name, "TXL_MEM_DTYPE" | "TXL_POSITION_KEYS"));
    let stderr = build_firmware(&board, "stm32f405-too-large", &vars).expect_err("an arena over 128 KiB");
    let over = arena + board.stack_bytes + board.static_bytes - board.ram.bytes;
    let expected = format!("({}), {over} bytes too many", board.name);
    assert!(
        stderr.contains("does not fit the board's RAM") && stderr.contains(&expected),
        "expected \"does not fit the board's RAM ... {expected}\" in:\n{stderr}"
    );
}

/// `scripts/firmware.sh --table` writes the figures `txl fit` embeds
/// (`tools/src/cli/fit/cores.tsv`): a fresh run for the cheapest board, the stm32f405 (one build),
/// gives its committed rows, figure for figure (the code bytes within 1%: they depend on where
/// the sources are). The table takes the second model's int4 image from here
/// (`TXL_TABLE_IMAGES`): the bytes `txl convert --dtype int4` writes, converted by the same
/// library without a release build of the command. Its build goes to `firmware/target`, beside
/// this test run's builds.
#[test]
fn the_committed_cores_table_matches_a_fresh_table_run() {
    let board = board::STM32F405;
    require_target_and_qemu(&board);
    let committed = workspace().join("tools/src/cli/fit/cores.tsv");
    let committed = std::fs::read_to_string(&committed).expect("reading cores.tsv");
    let fresh = work_dir().join("cores-fresh.tsv");
    std::fs::write(&fresh, "").unwrap();
    let images = work_dir().join("table-images");
    std::fs::create_dir_all(&images).unwrap();
    std::fs::write(images.join("second-int4.txl"), second_image_int4()).expect("writing the image");
    let output = cargo_free_command("bash")
        .current_dir(workspace())
        .env("TXL_TABLE_TSV", &fresh)
        .env("TXL_TABLE_IMAGES", &images)
        .args(["scripts/firmware.sh", "--table", board.name])
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "scripts/firmware.sh --table {} failed:\n{}",
        board.name,
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{}\t", board.name)))
            .map(String::from)
            .collect()
    };
    let fresh = std::fs::read_to_string(&fresh).unwrap();
    assert!(
        !rows(&fresh).is_empty(),
        "no {} row written:\n{fresh}",
        board.name
    );
    // Every figure equal, but the code bytes within 1%: the panic messages hold the source
    // files' paths, so a checkout elsewhere builds a few bytes more or less (96 bytes between
    // two checkouts whose paths differ by four characters).
    let (fresh, committed) = (rows(&fresh), rows(&committed));
    let split = |row: &String| -> (Vec<String>, u64) {
        let mut fields: Vec<String> = row.split('\t').map(String::from).collect();
        let code: u64 = fields
            .pop()
            .and_then(|c| c.parse().ok())
            .expect("a code_bytes field");
        (fields, code)
    };
    let stale = || {
        format!(
            "tools/src/cli/fit/cores.tsv is out of date: run scripts/firmware.sh --table {}\n\
             fresh: {fresh:?}\ncommitted: {committed:?}",
            board.name
        )
    };
    assert_eq!(fresh.len(), committed.len(), "{}", stale());
    for (f, c) in fresh.iter().zip(&committed) {
        let ((f, f_code), (c, c_code)) = (split(f), split(c));
        assert_eq!(f, c, "{}", stale());
        assert!(f_code.abs_diff(c_code) * 100 <= c_code, "{}", stale());
    }
}

/// `program` with none of this test run's cargo or build variables.
fn cargo_free_command(program: &str) -> Command {
    let mut command = Command::new(program);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "DEFMT_LOG",
        "TXL_TABLE_TSV",
        "TXL_TABLE_IMAGES",
    ]
    .into_iter()
    .chain(BUILD_VARS)
    {
        command.env_remove(var);
    }
    command
}

//! `txl export`: the module holds the image (a copy beside it), the arena and state bytes the core
//! computes for the options given, and those options as a `const`; and the standalone firmware in
//! `examples/export-demo/`, built from that module and `txl-core` alone, prints `txl score`'s
//! digest in QEMU (when `qemu-system-arm` is installed).

use std::path::Path;
use std::process::Command;

use txl_core::{MemDtype, MemInit, Model, PositionKeys, Session, SessionOptions};

mod common;
use common::{fixture, s, scratch_dir, skipped, stderr, txl};

/// The value of `pub const NAME: usize = VALUE;` in `module`.
fn constant(module: &str, name: &str) -> usize {
    let prefix = format!("pub const {name}: usize = ");
    let line = module
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in\n{module}"));
    line.trim_end_matches(';').parse().unwrap()
}

/// The `OPTIONS` constant, as written.
fn options_text(options: &SessionOptions) -> String {
    format!(
        "pub const OPTIONS: SessionOptions = {};\n",
        options.rust_literal("")
    )
}

#[test]
fn export_writes_the_image_the_arena_and_every_session_option() {
    let dir = scratch_dir("module");
    let image = dir.join("m.txl");
    let out = txl(&["convert", s(&fixture("div1_proj_prelnorm")), "-o", s(&image)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = txl_tools::image_file::read_image(&image).unwrap();
    let model = Model::parse(bytes.bytes()).unwrap();
    let defaults = SessionOptions::from_config(model.config());
    let cases: [(&[&str], SessionOptions); 8] = [
        (&[], defaults),
        (
            &["--tgt-len", "3"],
            SessionOptions {
                tgt_len: 3,
                ..defaults
            },
        ),
        (
            &["--mem-len", "40"],
            SessionOptions {
                mem_len: 40,
                ..defaults
            },
        ),
        (
            &["--clamp-len", "2"],
            SessionOptions {
                clamp_len: 2,
                ..defaults
            },
        ),
        (
            &["--same-length", "true"],
            SessionOptions {
                same_length: true,
                ..defaults
            },
        ),
        (
            &["--mem-init", "zeros"],
            SessionOptions {
                mem_init: MemInit::Zeros,
                ..defaults
            },
        ),
        (
            &["--mem-dtype", "int8"],
            SessionOptions {
                mem_dtype: MemDtype::Int8,
                ..defaults
            },
        ),
        (
            &["--position-keys", "folded"],
            SessionOptions {
                position_keys: PositionKeys::FoldedIntoQuery,
                ..defaults
            },
        ),
    ];
    for (i, (flags, options)) in cases.iter().enumerate() {
        assert_ne!(i > 0, *options == defaults, "case {i} must change an option");
        let out_dir = dir.join(format!("out{i}"));
        let mut args = vec!["export", s(&image), "--rust", s(&out_dir)];
        args.extend(*flags);
        let out = txl(&args);
        assert!(out.status.success(), "{flags:?}: {}", stderr(&out));
        let module = std::fs::read_to_string(out_dir.join("model.rs")).unwrap();
        assert_eq!(std::fs::read(out_dir.join("model.txl")).unwrap(), bytes.bytes());
        assert_eq!(constant(&module, "IMAGE_BYTES"), bytes.bytes().len());
        assert_eq!(
            constant(&module, "ARENA_BYTES"),
            Session::arena_bytes(&model, options).unwrap(),
            "{flags:?}"
        );
        assert_eq!(
            constant(&module, "STATE_BYTES"),
            Session::state_bytes_for(&model, options).unwrap(),
            "{flags:?}"
        );
        assert!(module.contains(&options_text(options)), "{flags:?}:\n{module}");
        assert!(module.contains("include_bytes!(\"model.txl\")"));
    }

    // --name names the module and the image it includes.
    let out_dir = dir.join("named");
    let out = txl(&["export", s(&image), "--rust", s(&out_dir), "--name", "kjv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let module = std::fs::read_to_string(out_dir.join("kjv.rs")).unwrap();
    assert!(module.contains("include_bytes!(\"kjv.txl\")"));
    assert!(out_dir.join("kjv.txl").is_file());
    let out = txl(&[
        "export",
        s(&image),
        "--rust",
        s(&out_dir),
        "--name",
        "Not-a-module",
    ]);
    assert!(!out.status.success());
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The `.text` bytes each one-precision build of `examples/export-demo` may take (as
/// `scripts/export-example.sh` builds it: opt-level "s"): 48 KiB, the most a firmware should pay
/// for txl's code, and below that the measured size with a 2% margin, so a change that links
/// more of txl into a firmware fails here. An int4 image keeps its embedding table in int8, so
/// its firmware has both precisions' kernels: it takes more. docs/MICROCONTROLLERS.md ("Code
/// size") has the figures and the commands.
const TEXT_BUDGET: [(&str, u64); 4] = [
    ("int8", 48 * 1024),
    ("int4", 53_500),
    ("f16", 42_800),
    ("f32", 43_000),
];

#[test]
fn the_exported_example_runs_in_qemu_with_the_digest_of_score_and_within_its_code_budget() {
    let target_installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("thumbv7em-none-eabihf"));
    if !have("qemu-system-arm", "--version") || !have("arm-none-eabi-size", "--version") || !target_installed
    {
        skipped("needs qemu-system-arm, arm-none-eabi-size and the thumbv7em-none-eabihf target");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (dtype, budget) in TEXT_BUDGET {
        let out = Command::new(root.join("scripts/export-example.sh"))
            .env("TXL_BIN", env!("CARGO_BIN_EXE_txl"))
            .env("TXL_DTYPE", dtype)
            .env("TXL_TOKENS", "64")
            .env_remove("CARGO_PROFILE_RELEASE_OPT_LEVEL")
            .output()
            .expect("the script runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{dtype}: {text}\n{}", stderr(&out));
        assert!(text.contains("the same as txl score --json"), "{dtype}: {text}");
        let bytes: u64 = text
            .lines()
            .find_map(|line| line.strip_prefix("export example: .text "))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{dtype}: no .text size in {text}"));
        assert!(
            bytes <= budget,
            "{dtype}: the example's .text is {bytes} bytes, over its budget of {budget}"
        );
    }
}

//! The C API (`capi/`, `include/txl.h`) from C, and `txl export --c`:
//!
//! - the exported header holds the image's size, the arena and state bytes the core computes for
//!   the options given, and those options; the source holds the image's bytes;
//! - the host's static library, with the C test `capi/tests/host.c` built by the system `cc` with
//!   AddressSanitizer and UndefinedBehaviorSanitizer, calls every function and gets every error
//!   code, and gives `txl score`'s digest and saved state for a float image, an integer image and
//!   an adaptive-softmax image; the exported files build as C99 and link with C++11;
//! - `scripts/c-example.sh` builds the C firmware of `examples/c-firmware/` for the Cortex-M4F
//!   and runs it in QEMU, where it prints `txl score`'s digest (an int8 image and an integer one).
//!
//! The static library is built in `capi/target` (its own workspace), one build at a time.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use txl_core::rng::Rng;
use txl_core::{MemDtype, MemInit, Model, PositionKeys, Session, SessionOptions};

mod common;
use common::{fixture, s, scratch_dir, skipped, stderr, txl};

/// Builds in `capi/target`: one at a time.
static BUILDS: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Cargo, with nothing of this test run's configuration (flags, target, target directory).
fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        command.env_remove(var);
    }
    command
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn succeeded(what: &str, out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{what}:\n{text}\n{}", stderr(out));
    text
}

/// `#define NAME VALUEu` of `header`.
fn macro_value(header: &str, name: &str) -> u64 {
    let prefix = format!("#define {name} ");
    let line = header
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in\n{header}"));
    line.trim().trim_end_matches('u').parse().unwrap()
}

/// The fields of `TXL_OPTIONS_INIT`, as written.
fn options_init(header: &str) -> Vec<String> {
    let start = header.find("#define TXL_OPTIONS_INIT").unwrap();
    let body = &header[start..header[start..].find('}').unwrap() + start];
    body.lines()
        .skip(2)
        .map(|line| {
            line.split("/*")
                .next()
                .unwrap()
                .trim()
                .trim_end_matches(',')
                .to_string()
        })
        .filter(|field| !field.is_empty())
        .collect()
}

/// The fields `TXL_OPTIONS_INIT` must hold for `options`.
fn expected_init(options: &SessionOptions) -> Vec<String> {
    let word = |prefix: &str, word: &str| format!("TXL_{prefix}_{}", word.to_ascii_uppercase());
    vec![
        format!("{}u", options.tgt_len),
        format!("{}u", options.mem_len),
        format!("{}u", options.clamp_len),
        format!("{}u", u32::from(options.same_length)),
        word("MEM_INIT", &options.mem_init.to_string()),
        word("MEM_DTYPE", &options.mem_dtype.to_string()),
        word("POSITION_KEYS", &options.position_keys.to_string()),
    ]
}

/// The bytes of the array in an exported `NAME.c`.
fn image_of(source: &str) -> Vec<u8> {
    let start = source.find("_image[TXL_IMAGE_BYTES] = {").unwrap();
    let body = &source[source[start..].find('\n').unwrap() + start..source.rfind("};").unwrap()];
    body.split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(|b| b.parse().unwrap())
        .collect()
}

/// `demo` (a float image) as an integer image in `dir`, calibrated on the first 2048 bytes of
/// the demo's `calib.txt` (`txl quantize --integer`).
fn integer_image(dir: &Path, demo: &Path) -> PathBuf {
    let integer = dir.join("demo-integer.txl");
    let calib = fixture("demo").join("calib.txt");
    #[rustfmt::skip]
    let out = txl(&[
        "quantize", s(demo), "-o", s(&integer), "--integer", "--calib-bytes", s(&calib),
        "--calib-limit", "2048",
    ]);
    succeeded("quantize --integer", &out);
    integer
}

#[test]
fn export_c_writes_the_image_the_sizes_and_every_session_option() {
    let dir = scratch_dir("export");
    let image = dir.join("m.txl");
    let out = txl(&["convert", s(&fixture("div1_proj_prelnorm")), "-o", s(&image)]);
    succeeded("convert", &out);
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
        let mut args = vec!["export", s(&image), "--c", s(&out_dir)];
        args.extend(*flags);
        succeeded(&format!("export {flags:?}"), &txl(&args));
        let header = std::fs::read_to_string(out_dir.join("model.h")).unwrap();
        let source = std::fs::read_to_string(out_dir.join("model.c")).unwrap();
        assert_eq!(image_of(&source), bytes.bytes(), "{flags:?}");
        assert_eq!(
            macro_value(&header, "TXL_IMAGE_BYTES"),
            bytes.bytes().len() as u64
        );
        assert_eq!(
            macro_value(&header, "TXL_N_TOKEN"),
            u64::from(model.config().n_token)
        );
        assert_eq!(macro_value(&header, "TXL_TGT_LEN"), u64::from(options.tgt_len));
        assert_eq!(
            macro_value(&header, "TXL_ARENA_BYTES"),
            Session::arena_bytes(&model, options).unwrap() as u64,
            "{flags:?}"
        );
        assert_eq!(
            macro_value(&header, "TXL_STATE_BYTES"),
            Session::state_bytes_for(&model, options).unwrap() as u64,
            "{flags:?}"
        );
        assert_eq!(
            options_init(&header),
            expected_init(options),
            "{flags:?}\n{header}"
        );
        assert!(source.contains("TXL_ALIGN_16 const uint8_t model_image[TXL_IMAGE_BYTES]"));
        assert!(source.contains("const txl_options model_options = TXL_OPTIONS_INIT;"));
    }

    // --name names the files and the image's and options' variables.
    let out_dir = dir.join("named");
    succeeded(
        "export --name",
        &txl(&["export", s(&image), "--c", s(&out_dir), "--name", "kjv"]),
    );
    let source = std::fs::read_to_string(out_dir.join("kjv.c")).unwrap();
    assert!(source.contains("#include \"kjv.h\"") && source.contains("kjv_image[TXL_IMAGE_BYTES]"));
    let header = std::fs::read_to_string(out_dir.join("kjv.h")).unwrap();
    assert!(header.contains("extern const txl_options kjv_options;"));
    // One of --rust and --c, not both, not neither.
    let both = txl(&["export", s(&image), "--c", s(&out_dir), "--rust", s(&out_dir)]);
    assert!(!both.status.success());
    let neither = txl(&["export", s(&image)]);
    assert!(!neither.status.success());
    // An integer image's options need int8 memory: refused as by `txl score`.
    let integer = dir.join("integer.txl");
    let calib = dir.join("calib.txt");
    std::fs::write(
        &calib,
        "In the beginning God created the heaven and the earth.".repeat(8),
    )
    .unwrap();
    succeeded(
        "quantize --integer",
        &txl(&[
            "quantize",
            s(&image),
            "-o",
            s(&integer),
            "--integer",
            "--calib-bytes",
            s(&calib),
        ]),
    );
    let f32_memory = txl(&["export", s(&integer), "--c", s(&out_dir), "--mem-dtype", "f32"]);
    assert!(!f32_memory.status.success());
}

/// Builds the host's static library of `capi/` (release, as scripts/c-example.sh builds the
/// Cortex-M4F's: they share the build of the procedural macros) and returns its path.
fn build_library() -> PathBuf {
    let out = cargo()
        .current_dir(repo().join("capi"))
        .args(["build", "--locked", "--release"])
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "building capi: {}", stderr(&out));
    repo().join("capi/target/release/libtxl.a")
}

/// `txl score IMAGE --tokens IDS --json --state-out STATE`'s digest.
fn score(image: &Path, ids: &Path, state: &Path) -> String {
    let out = txl(&[
        "score",
        s(image),
        "--tokens",
        s(ids),
        "--json",
        "--state-out",
        s(state),
    ]);
    let json: serde_json::Value = serde_json::from_str(&succeeded("score", &out)).unwrap();
    json["digest"].as_str().unwrap().to_string()
}

/// Runs `program args` and returns its stdout, which it must exit 0 with.
fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> String {
    let program = program.as_ref();
    let out = Command::new(program)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("{program:?}: {e}"));
    succeeded(&format!("{program:?} {args:?}"), &out)
}

#[test]
fn every_function_and_error_from_c_under_the_sanitizers() {
    if !have("cc", "--version") || !have("c++", "--version") {
        skipped("needs the system's cc and c++");
        return;
    }
    let dir = scratch_dir("host");
    let demo = dir.join("demo.txl");
    succeeded("convert", &txl(&["convert", s(&fixture("demo")), "-o", s(&demo)]));
    let integer = integer_image(&dir, &demo);
    let adaptive = dir.join("adaptive.txl");
    succeeded(
        "convert",
        &txl(&["convert", s(&fixture("adaptive_div2")), "-o", s(&adaptive)]),
    );

    // the held-out text's bytes for the demo model; random ids for the adaptive one
    let heldout = std::fs::read(fixture("demo").join("heldout.txt")).unwrap();
    let demo_ids: Vec<String> = heldout[..160].iter().map(|b| b.to_string()).collect();
    let adaptive_bytes = txl_tools::image_file::read_image(&adaptive).unwrap();
    let n_token = Model::parse(adaptive_bytes.bytes()).unwrap().config().n_token;
    let mut rng = Rng::new(39);
    let adaptive_ids: Vec<String> = (0..100)
        .map(|_| rng.below(u64::from(n_token)).to_string())
        .collect();
    let mut args: Vec<String> = Vec::new();
    for (name, image, ids) in [
        ("demo", &demo, &demo_ids),
        ("integer", &integer, &demo_ids),
        ("adaptive", &adaptive, &adaptive_ids),
    ] {
        let ids_path = dir.join(format!("{name}.ids"));
        std::fs::write(&ids_path, ids.join(" ")).unwrap();
        let state = dir.join(format!("{name}.state"));
        let digest = score(image, &ids_path, &state);
        for arg in [image, &ids_path] {
            args.push(s(arg).to_string());
        }
        args.push(digest);
        args.push(s(&state).to_string());
    }

    let _build = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let library = build_library();
    let program = dir.join("host");
    let include = repo().join("include");
    let sanitizers = [
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
    ];
    let mut cc_args = vec![
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        "-g",
        "-O1",
    ];
    cc_args.extend(sanitizers);
    let include_flag = format!("-I{}", s(&include));
    let host_c = repo().join("capi/tests/host.c");
    cc_args.extend([
        include_flag.as_str(),
        s(&host_c),
        s(&library),
        "-lm",
        "-o",
        s(&program),
    ]);
    run("cc", &cc_args);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = run(&program, &arg_refs);
    assert!(text.ends_with("ok\n"), "{text}");
    println!("{text}");

    // The exported files: model.c as C99, a C++11 program that uses them, linked together.
    let exported = dir.join("exported");
    succeeded("export --c", &txl(&["export", s(&integer), "--c", s(&exported)]));
    let object = dir.join("model.o");
    let exported_flag = format!("-I{}", s(&exported));
    let model_c = exported.join("model.c");
    let mut c_args = vec!["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c"];
    c_args.extend([include_flag.as_str(), s(&model_c), "-o", s(&object)]);
    run("cc", &c_args);
    let cpp = repo().join("capi/tests/exported.cpp");
    let linked = dir.join("exported");
    let mut cpp_args = vec!["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"];
    cpp_args.extend(sanitizers);
    cpp_args.extend([
        include_flag.as_str(),
        exported_flag.as_str(),
        s(&cpp),
        s(&object),
        s(&library),
        "-o",
    ]);
    let linked_program = linked.with_extension("bin");
    cpp_args.push(s(&linked_program));
    run("c++", &cpp_args);
    assert_eq!(run(&linked_program, &[]), "exported ok\n");
}

#[test]
fn the_c_example_runs_in_qemu_with_the_digest_of_score() {
    let target_installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("thumbv7em-none-eabihf"));
    let tools = ["qemu-system-arm", "arm-none-eabi-gcc", "make"];
    if !tools.iter().all(|tool| have(tool, "--version")) || !target_installed {
        skipped(
            "needs qemu-system-arm, arm-none-eabi-gcc (gcc-arm-none-eabi, libnewlib-arm-none-eabi), \
             make and the thumbv7em-none-eabihf target",
        );
        return;
    }
    let dir = scratch_dir("example");
    let demo = dir.join("demo.txl");
    succeeded("convert", &txl(&["convert", s(&fixture("demo")), "-o", s(&demo)]));
    let int8 = dir.join("demo-int8.txl");
    succeeded(
        "quantize",
        &txl(&["quantize", s(&demo), "-o", s(&int8), "--dtype", "int8"]),
    );
    let integer = integer_image(&dir, &demo);
    let tokens = dir.join("tokens.bin");
    let heldout = std::fs::read(fixture("demo").join("heldout.txt")).unwrap();
    std::fs::write(&tokens, &heldout[..128]).unwrap();

    let _build = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    for image in [&int8, &integer] {
        let out = Command::new(repo().join("scripts/c-example.sh"))
            .args([s(image), s(&tokens)])
            .env("TXL_BIN", env!("CARGO_BIN_EXE_txl"))
            .output()
            .expect("the script runs");
        let text = succeeded("scripts/c-example.sh", &out);
        assert!(text.contains("the same as txl score --json"), "{text}");
        println!("{text}");
    }
}

//! `txl fit`: a model that fits a part (the second trained model in int4 on the STM32F405), one
//! that misses (the demo model in f32: its flash; a few KiB of RAM: its arena), and every flag.
//! The expected figures come from elsewhere: the image's size from the file, the arena from `txl
//! inspect` with the same options, the code bytes from the committed table
//! `scripts/export-example.sh --code-table` writes, the instructions per MAC from the one the
//! firmware's `--table` writes, the MACs from the core's count.

use std::path::{Path, PathBuf};

use serde_json::Value;
use txl_core::macs::segment_macs;
use txl_core::{AlignedBytes, MemDtype, Model, PositionKeys, SessionOptions};

mod common;
use common::{fixture, s, scratch_dir, stderr, txl};

/// The table `txl fit` embeds.
const CORES: &str = include_str!("../src/cli/fit/cores.tsv");
const CODE: &str = include_str!("../src/cli/fit/code.tsv");

/// txl's code for `weights` alone on `target`, from the code table.
fn precision_code(target: &str, weights: &str) -> u64 {
    CODE.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .find(|f| f[0] == target && f[1] == weights)
        .map(|f| f[2].parse().unwrap())
        .unwrap_or_else(|| panic!("no {target} {weights} row in the code table"))
}

fn json(args: &[&str]) -> Value {
    let out = txl(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON: {e}"))
}

/// `tests/fixtures/NAME` converted at `dtype` into `dir`.
fn image(dir: &Path, name: &str, dtype: &str) -> PathBuf {
    let path = dir.join(format!("{name}-{dtype}.txl"));
    let out = txl(&["convert", s(&fixture(name)), "--dtype", dtype, "-o", s(&path)]);
    assert!(out.status.success(), "convert {name} {dtype}: {}", stderr(&out));
    path
}

/// The largest code bytes and the instructions per MAC of `weights` the cores table has for
/// `board` (columns: board, core, weights, tgt_len, image, arena, instructions/token, /MAC, code).
fn measured(board: &str, weights: &str) -> (u64, f64) {
    let rows: Vec<Vec<&str>> = CORES
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').collect())
        .filter(|f: &Vec<&str>| f[0] == board)
        .collect();
    let code = rows.iter().map(|f| f[8].parse::<u64>().unwrap()).max().unwrap();
    let per_mac = rows
        .iter()
        .find(|f| f[2] == weights)
        .map(|f| f[7].parse().unwrap())
        .unwrap();
    (code, per_mac)
}

/// `txl inspect`'s arena bytes for these options.
fn inspect_arena(image: &Path, options: &[&str]) -> u64 {
    let mut args = vec!["inspect", s(image)];
    args.extend_from_slice(options);
    let out = txl(&args);
    assert!(out.status.success(), "inspect: {}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("arena bytes"))
        .unwrap_or_else(|| panic!("no arena line in\n{text}"));
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn the_second_model_in_int4_fits_the_stm32f405_streaming() {
    let dir = scratch_dir("fits");
    let image = image(&dir, "second", "int4");
    let a = json(&["fit", s(&image), "--part", "stm32f405", "--json"]);
    assert_eq!(a["fits"], true, "{a:#}");
    assert_eq!(
        a["image_bytes"],
        std::fs::metadata(&image).unwrap().len(),
        "{a:#}"
    );
    assert_eq!(
        a["ram_bytes"],
        128 * 1024,
        "the part's 128 KiB of contiguous SRAM"
    );
    assert_eq!(a["flash_bytes"], 1 << 20, "{a:#}");
    // txl's code for int4 weights (and the int8 embedding) alone on the M4F's instruction set;
    // the part's own board measured int4 streaming
    let (_, per_mac) = measured("stm32f405", "int4");
    assert_eq!(
        a["code_bytes"],
        precision_code("thumbv7em-none-eabihf", "int4"),
        "{a:#}"
    );
    assert!(
        a["code_measured_on"]
            .as_str()
            .unwrap()
            .contains("examples/export-demo"),
        "{a:#}"
    );
    // f32, f16 and int8 memory with the keys kept or recomputed need more RAM than the part
    // has; int8 memory with the keys folded into the queries keeps the model's mem_len of 64
    let o = &a["options"];
    assert_eq!(
        (&o["tgt_len"], &o["mem_len"], &o["mem_dtype"], &o["position_keys"]),
        (
            &Value::from(1),
            &Value::from(64),
            &Value::from("int8"),
            &Value::from("folded")
        ),
        "{a:#}"
    );
    assert_eq!(a["mem_len"], 64);
    let options = [
        "--tgt-len",
        "1",
        "--mem-len",
        "64",
        "--mem-dtype",
        "int8",
        "--position-keys",
        "folded",
    ];
    assert_eq!(a["arena_bytes"], inspect_arena(&image, &options), "{a:#}");
    let used = a["arena_bytes"].as_u64().unwrap()
        + a["stack_bytes"].as_u64().unwrap()
        + a["static_bytes"].as_u64().unwrap();
    assert!(used <= 128 * 1024, "{a:#}");
    // a choice the suggestion passed over does not fit at mem_len 64
    let choices = a["choices"].as_array().unwrap();
    let f32_session = choices
        .iter()
        .find(|c| c["mem_dtype"] == "f32" && c["position_keys"] == "session")
        .unwrap();
    assert!(
        f32_session["streaming_mem_len"].as_u64().is_none_or(|m| m < 64),
        "{a:#}"
    );
    let folded = choices
        .iter()
        .find(|c| c["mem_dtype"] == "int8" && c["position_keys"] == "folded")
        .unwrap();
    let longest = folded["streaming_mem_len"].as_u64().unwrap();
    assert!(longest >= 64, "{a:#}");
    // one more position of memory would not fit: the arena at longest + 1 is over the budget
    let over = [
        "--tgt-len",
        "1",
        "--mem-len",
        &(longest + 1).to_string(),
        "--mem-dtype",
        "int8",
        "--position-keys",
        "folded",
    ]
    .map(String::from);
    let over: Vec<&str> = over.iter().map(String::as_str).collect();
    let budget = 128 * 1024 - a["stack_bytes"].as_u64().unwrap() - a["static_bytes"].as_u64().unwrap();
    assert!(inspect_arena(&image, &over) > budget, "{a:#}");

    // speed: the core's MACs of a streamed token with the memory full, times the table's
    let bytes = AlignedBytes::copy_from(&std::fs::read(&image).unwrap()).unwrap();
    let model = Model::parse(bytes.bytes()).unwrap();
    let session = SessionOptions {
        tgt_len: 1,
        mem_len: 64,
        mem_dtype: MemDtype::Int8,
        position_keys: PositionKeys::FoldedIntoQuery,
        ..SessionOptions::from_config(model.config())
    };
    let macs = segment_macs(model.config(), &session, 64, 1);
    assert_eq!(a["macs_per_token"], macs);
    assert_eq!(a["weights"], "int4");
    let per_token = (per_mac * macs as f64).round() as u64;
    assert_eq!(a["instructions_per_token"], per_token, "{a:#}");
    let tokens_per_second = a["tokens_per_second"].as_f64().unwrap();
    assert!(
        (tokens_per_second - 168e6 / per_token as f64).abs() < 1e-6,
        "{a:#}"
    );

    // --clock: the same instructions at half the clock, half the tokens
    let slow = json(&["fit", s(&image), "--part", "stm32f405", "--clock", "84", "--json"]);
    assert_eq!(slow["instructions_per_token"], a["instructions_per_token"]);
    assert!((slow["tokens_per_second"].as_f64().unwrap() * 2.0 - tokens_per_second).abs() < 1e-6);

    // the text answer says the same
    let out = txl(&["fit", s(&image), "--part", "stm32f405"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(" fits stm32f405 "), "{text}");
    assert!(
        text.contains("--tgt-len 1 --mem-len 64 --mem-dtype int8 --position-keys folded"),
        "{text}"
    );
    assert!(text.contains("QEMU counts instructions, not cycles"), "{text}");
}

#[test]
fn the_demo_model_in_f32_misses_the_stm32f405s_flash() {
    let dir = scratch_dir("misses");
    let image = image(&dir, "demo", "f32");
    let image_bytes = std::fs::metadata(&image).unwrap().len();
    let a = json(&["fit", s(&image), "--part", "stm32f405", "--json"]);
    assert_eq!(a["fits"], false, "{a:#}");
    assert_eq!(a["flash_fits"], false, "{a:#}");
    let code = precision_code("thumbv7em-none-eabihf", "f32");
    assert_eq!(
        a["flash_shortfall_bytes"],
        image_bytes + code - (1 << 20),
        "{a:#}"
    );
    // without --json: the answer, then one error line and exit 1
    let out = txl(&["fit", s(&image), "--part", "stm32f405"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: ") && err.contains("stm32f405") && err.contains("bytes"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("does not fit"));
    // and a part with room takes it: the STM32H743 has 2 MiB of flash... not enough for 2.5 MB,
    // the Alif E7's 5.5 MiB is
    let e7 = json(&["fit", s(&image), "--part", "alif-e7", "--json"]);
    assert_eq!(e7["fits"], true, "{e7:#}");
}

#[test]
fn a_few_kib_of_ram_miss_the_arena_with_the_shortfall() {
    let dir = scratch_dir("ram");
    let image = image(&dir, "second", "int4");
    let a = json(&[
        "fit",
        s(&image),
        "--ram",
        "24K",
        "--flash",
        "1M",
        "--core",
        "Cortex-M4F",
        "--clock",
        "100",
        "--json",
    ]);
    assert_eq!(a["fits"], false, "{a:#}");
    assert_eq!(a["ram_fits"], false, "{a:#}");
    assert_eq!(a["flash_fits"], true, "{a:#}");
    assert_eq!(a["ram_bytes"], 24 * 1024);
    let need = a["arena_bytes"].as_u64().unwrap()
        + a["stack_bytes"].as_u64().unwrap()
        + a["static_bytes"].as_u64().unwrap();
    assert_eq!(a["ram_shortfall_bytes"], need - 24 * 1024, "{a:#}");
    // the least RAM: streaming, one position of int8 memory, keys folded (txl inspect agrees)
    let o = &a["options"];
    assert_eq!(
        (&o["mem_len"], &o["position_keys"]),
        (&Value::from(1), &Value::from("folded"))
    );
    let least = [
        "--tgt-len",
        "1",
        "--mem-len",
        "1",
        "--mem-dtype",
        "int8",
        "--position-keys",
        "folded",
    ];
    assert_eq!(a["arena_bytes"], inspect_arena(&image, &least));
    assert!(a["choices"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["streaming_mem_len"].is_null()));
    assert!(
        a["tokens_per_second"].as_f64().is_some(),
        "--core and --clock give a speed: {a:#}"
    );
}

#[test]
fn every_part_is_listed_and_the_png_is_drawn() {
    let out = txl(&["fit", "--part", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for part in [
        "stm32f405",
        "stm32h743",
        "stm32l476",
        "nrf52840",
        "rp2040",
        "esp32-c3",
        "esp32-s3",
        "imxrt1062",
        "alif-e7",
        "mps2-an386",
        "mps3-an547",
        "riscv32-virt",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(part)),
            "{part} missing from\n{text}"
        );
    }
    let parts = json(&["fit", "--part", "list", "--json"]);
    let f405 = parts
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "stm32f405")
        .unwrap();
    // the datasheet's figures
    assert_eq!(
        (&f405["clock_mhz"], &f405["sram_bytes"], &f405["flash_bytes"]),
        (
            &Value::from(168.0),
            &Value::from(192 * 1024),
            &Value::from(1 << 20)
        )
    );

    let dir = scratch_dir("png");
    let image = image(&dir, "second", "int4");
    let png = dir.join("fit.png");
    let out = txl(&["fit", s(&image), "--part", "rp2040", "--png", s(&png)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let reader = decoder.read_info().unwrap();
    assert_eq!((reader.info().width, reader.info().height), (1000, 320));
}

#[test]
fn bad_arguments_get_one_error_line() {
    let dir = scratch_dir("bad");
    let image = image(&dir, "second", "int4");
    let cases: [(&[&str], &str); 6] = [
        (&["fit", s(&image), "--part", "z80"], "not a known part"),
        (&["fit", s(&image), "--ram", "64K"], "--flash"),
        (
            &["fit", s(&image), "--ram", "lots", "--flash", "1M"],
            "not a byte count",
        ),
        (
            &["fit", s(&image), "--part", "rp2040", "--clock", "0"],
            "above 0 MHz",
        ),
        (
            &["fit", s(&image), "--ram", "64K", "--flash", "1M", "--core", "Z80"],
            "no measured core",
        ),
        (&["fit", "--part", "rp2040"], "needs a model image"),
    ];
    for (args, says) in cases {
        let out = txl(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = stderr(&out);
        assert!(err.contains("error") && err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let missing = txl(&["fit", "no-such.txl", "--part", "rp2040"]);
    assert!(!missing.status.success());
    assert!(stderr(&missing).starts_with("error: "), "{}", stderr(&missing));
}

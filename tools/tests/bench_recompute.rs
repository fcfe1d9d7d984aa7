//! `txl bench --recompute` (the paper's Table 9): each of its flags changes the report. Timings
//! are printed, never checked; what is checked is what ran.

use serde_json::Value;

mod common;
use common::{fixture, s, scratch_dir, stderr, txl};

/// The one JSON object a successful `txl args` prints.
fn report(args: &[&str]) -> Value {
    let out = txl(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not one JSON object: {e}"))
}

#[test]
fn recompute_times_the_cache_against_the_vanilla_model_at_each_length() {
    let dir = scratch_dir("recompute");
    let image = dir.join("adaptive_div2.txl");
    let out = txl(&["convert", s(&fixture("adaptive_div2")), "-o", s(&image)]);
    assert!(out.status.success(), "convert: {}", stderr(&out));

    // --recompute: the lengths' table, not the precisions' variants
    let table = report(&[
        "bench",
        s(&image),
        "--recompute",
        "--lengths",
        "3,7",
        "--tokens",
        "2",
        "--json",
    ]);
    assert!(table.get("results").is_none(), "--recompute ignored: {table}");
    let lengths: Vec<u64> = table["lengths"]
        .as_array()
        .unwrap_or_else(|| panic!("--recompute ignored: {table}"))
        .iter()
        .map(|row| row["length"].as_u64().unwrap())
        .collect();
    assert_eq!(lengths, [3, 7], "--lengths 3,7: {table}");
    assert_eq!(table["tokens"], 2, "--tokens 2: {table}");
    assert_eq!(table["n_layer"], 2, "the model given: {table}");
    for row in table["lengths"].as_array().unwrap() {
        for key in ["cached_seconds_per_token", "vanilla_seconds_per_token", "speedup"] {
            assert!(row[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {row}");
        }
        assert!(
            row["paper_speedup"].is_null(),
            "no paper figure for length {}",
            row["length"]
        );
    }
    let one = report(&[
        "bench",
        s(&image),
        "--recompute",
        "--lengths",
        "800",
        "--tokens",
        "1",
        "--json",
    ]);
    assert_eq!(
        one["lengths"][0]["paper_speedup"], 363.0,
        "the paper's figure for 800: {one}"
    );

    // --enwik8-base: the paper's enwik8 base shape, random weights, instead of the image
    let base = report(&[
        "bench",
        "--recompute",
        "--enwik8-base",
        "--lengths",
        "3",
        "--tokens",
        "1",
        "--json",
    ]);
    for (key, value) in [
        ("n_layer", 12),
        ("d_model", 512),
        ("n_head", 8),
        ("d_head", 64),
        ("d_inner", 2048),
    ] {
        assert_eq!(base[key], value, "--enwik8-base {key}: {base}");
    }

    // --enwik8-base without --recompute: each precision on that shape
    let precisions = report(&[
        "bench",
        "--enwik8-base",
        "--tokens",
        "2",
        "--tgt-len",
        "2",
        "--mem-len",
        "2",
        "--json",
    ]);
    assert_eq!(
        precisions["model"], "enwik8-base (random weights)",
        "{precisions}"
    );
    let f32_bytes = precisions["results"][0]["image_bytes"].as_u64().unwrap();
    assert!(f32_bytes > 160_000_000, "--enwik8-base: {f32_bytes} bytes in f32");

    // without --recompute the flags of Table 9 are refused, not dropped; with an image,
    // --enwik8-base is refused too
    for flags in [&["--lengths", "3"][..], &["--enwik8-base"][..]] {
        let mut args = vec!["bench", s(&image), "--tokens", "8"];
        args.extend(flags);
        let out = txl(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flags:?} without --recompute: {}",
            stderr(&out)
        );
    }
    let text = String::from_utf8(
        txl(&[
            "bench",
            s(&image),
            "--recompute",
            "--lengths",
            "3",
            "--tokens",
            "1",
        ])
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains("Table 9") && text.contains("speedup"),
        "the table: {text}"
    );
}

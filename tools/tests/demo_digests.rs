//! The demo model's digests that `scripts/aarch64.sh` expects on aarch64, computed here on the
//! host with the same commands: `scripts/aarch64-digests.txt` holds them once for both, so a
//! digest copied wrong fails on every machine, not only where the aarch64 script runs.

use std::path::Path;

mod common;
use common::{fixture, s, scratch_dir, stderr, txl};

/// One line of the digests file: `NAME DIGEST MODEL [SCORE FLAGS...]`.
#[derive(Debug)]
struct Expected {
    name: String,
    digest: String,
    model: String,
    flags: Vec<String>,
}

fn expected_digests() -> Vec<Expected> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/aarch64-digests.txt");
    let text = std::fs::read_to_string(&path).expect("scripts/aarch64-digests.txt");
    let mut all = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace().map(String::from);
        let mut next = |what: &str| words.next().unwrap_or_else(|| panic!("{line:?}: no {what}"));
        let (name, digest, model) = (next("name"), next("digest"), next("model"));
        let flags = words.collect();
        assert!(
            digest.len() == 10
                && digest.starts_with("0x")
                && digest[2..].bytes().all(|b| b.is_ascii_hexdigit()),
            "{line:?}: a digest is 0x and eight hex digits"
        );
        all.push(Expected {
            name,
            digest,
            model,
            flags,
        });
    }
    all
}

/// Runs `txl args`, which must succeed.
fn run(args: &[&str]) -> std::process::Output {
    let out = txl(args);
    assert!(out.status.success(), "txl {args:?}: {}", stderr(&out));
    out
}

#[test]
fn the_aarch64_scripts_digests_are_the_hosts() {
    let expected = expected_digests();
    let names: Vec<&str> = expected.iter().map(|e| e.name.as_str()).collect();
    for name in ["f32", "f16", "int8", "int4", "f32-fast"] {
        assert!(names.contains(&name), "no {name} digest in {names:?}");
    }

    // The models and the text, as scripts/aarch64.sh makes them.
    let dir = scratch_dir("models");
    let demo = fixture("demo");
    let f32_model = dir.join("demo.txl");
    run(&["convert", s(&demo), "-o", s(&f32_model)]);
    run(&[
        "convert",
        s(&demo),
        "-o",
        s(&dir.join("demo-f16.txl")),
        "--dtype",
        "f16",
    ]);
    let int8 = dir.join("demo-int8.txl");
    run(&["quantize", s(&f32_model), "-o", s(&int8), "--smooth", "off"]);
    let int4 = dir.join("demo-int4.txl");
    #[rustfmt::skip]
    run(&["quantize", s(&f32_model), "-o", s(&int4), "--dtype", "int4", "--smooth", "off"]);
    let heldout = std::fs::read(demo.join("heldout.txt")).unwrap();
    let tokens = dir.join("tokens.bin");
    std::fs::write(&tokens, &heldout[..256]).unwrap();

    let mut wrong = Vec::new();
    for e in &expected {
        let model = dir.join(&e.model);
        assert!(
            model.exists(),
            "{}: no model {} (not one the script makes)",
            e.name,
            e.model
        );
        for streaming in [&[][..], &["--tgt-len", "1"][..]] {
            let mut args = vec!["score", s(&model), "--bytes", s(&tokens), "--json"];
            args.extend(e.flags.iter().map(String::as_str));
            args.extend(streaming);
            let out = run(&args);
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
            let got = report["digest"].as_str().expect("a digest").to_string();
            if got != e.digest {
                wrong.push(format!(
                    "{} ({args:?}): the host gives {got}, the file says {}",
                    e.name, e.digest
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "scripts/aarch64-digests.txt differs from the host:\n{}",
        wrong.join("\n")
    );
}

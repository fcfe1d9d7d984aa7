//! `txl compare` against values computed independently: `tests/fixtures/compare/` holds a
//! candidate checkpoint (the `adaptive_div2` fixture with seeded noise on every weight), the
//! tokens, and what Hugging Face `transformers` in float64 gives for every field of the
//! comparison, with session settings other than the model's (tools/reference/
//! make_compare_fixture.py). Both checkpoints are converted to f32 images and compared by the
//! binary; each field must match.

use serde_json::Value;

mod common;
use common::{convert, fixture, s, scratch_dir, stderr, txl};

/// Bits per token, relative Δ, mean KL and max |Δ ln p| are means, differences and a maximum
/// of log-probabilities, each of which the core in f32 gives within ε = 6e-6 of Hugging Face's
/// float64 on the fixture models (`tests/tests/core_vs_hf.rs`, worst 5.9e-6): a max |Δ ln p| may
/// be off by 2ε, bits per token by ε / ln 2, the KL by about 2ε. Measured here at most 2.3e-6
/// (max |Δ ln p|; the others 1e-8 to 4.5e-7), printed by `cargo test -p txl-tools --test
/// compare_fixture -- --nocapture`.
const TOLERANCE: f64 = 2e-5;

#[test]
fn compare_matches_hugging_face_float64() {
    let dir = scratch_dir("compare");
    let here = fixture("compare");
    let fixture_json: Value =
        serde_json::from_str(&std::fs::read_to_string(here.join("expected.json")).unwrap()).unwrap();
    let reference = convert(
        &fixture(fixture_json["reference"].as_str().unwrap()),
        dir.join("reference.txl"),
    );
    let candidate = convert(&here, dir.join("candidate.txl"));
    let session = &fixture_json["session"];
    let number = |key: &str| session[key].to_string();
    let (tgt_len, mem_len, clamp_len, same_length) = (
        number("tgt_len"),
        number("mem_len"),
        number("clamp_len"),
        number("same_length"),
    );
    let tokens = here.join("tokens.txt");
    #[rustfmt::skip]
    let args = ["compare", s(&reference), s(&candidate), "--tokens", s(&tokens), "--json",
        "--tgt-len", &tgt_len, "--mem-len", &mem_len, "--clamp-len", &clamp_len,
        "--same-length", &same_length, "--mem-init", session["mem_init"].as_str().unwrap()];
    let run = txl(&args);
    assert!(run.status.success(), "compare: {}", stderr(&run));
    let ours: Value = serde_json::from_slice(&run.stdout).unwrap();
    let expected = &fixture_json["expected"];

    let fields = expected.as_object().unwrap();
    assert_eq!(
        ours.as_object().unwrap().len(),
        fields.len(),
        "compare prints {ours}, the fixture has {expected}"
    );
    assert_eq!(ours["tokens"], expected["tokens"], "tokens");
    // Every top-1 leads the second token by more than 1e-4 in both models (the script checks
    // it), so f32 rounding cannot change one: the count of agreements is exact.
    assert_eq!(
        ours["top1_agreement"], expected["top1_agreement"],
        "top1_agreement"
    );
    let mut failures = Vec::new();
    for key in [
        "reference_bits_per_token",
        "candidate_bits_per_token",
        "relative_delta",
        "mean_kl",
        "max_abs_delta_logp",
    ] {
        let (got, want) = (ours[key].as_f64().unwrap(), expected[key].as_f64().unwrap());
        let delta = (got - want).abs();
        println!("{key:<26} txl {got:.9} Hugging Face {want:.9} |Δ| {delta:.2e}");
        if delta.is_nan() || delta > TOLERANCE {
            failures.push(format!("{key}: txl {got}, Hugging Face float64 {want}"));
        }
    }
    assert!(
        failures.is_empty(),
        "over {TOLERANCE:e}:\n{}",
        failures.join("\n")
    );
}

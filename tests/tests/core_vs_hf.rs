//! The core in f32 against float64 log-probabilities from Hugging Face `transformers`
//! (`tools/reference/make_fixtures.py`), for every fixture model, both checkpoint formats,
//! segment and streaming evaluation, both memory starts and every position-key mode.

use txl_core::scoring;
use txl_core::AlignedBytes;
use txl_core::{Model, OptionWord, PositionKeys, SessionOptions};
use txl_tests::{FixtureModel, Manifest};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::npy;

/// Largest |Δ ln p| allowed between the core (f32) and the float64 reference.
const TOLERANCE: f64 = 1e-4;

fn formats(model: &FixtureModel) -> Vec<CheckpointFormat> {
    model
        .formats
        .iter()
        .map(|f| match f.as_str() {
            "safetensors" => CheckpointFormat::Safetensors,
            "bin" => CheckpointFormat::PytorchBin,
            other => panic!("unknown format {other} in the manifest"),
        })
        .collect()
}

/// Scores every case of `model` from `format` with `position_keys` (and the f32 products in the
/// fused order when `fast_f32`); returns (case, worst |Δ|) pairs.
fn check_model(
    model: &FixtureModel,
    format: CheckpointFormat,
    position_keys: PositionKeys,
    fast_f32: bool,
) -> Vec<(String, f64)> {
    let checkpoint = load_hf_checkpoint(&model.path(), format, false)
        .unwrap_or_else(|e| panic!("{} ({format:?}): {e:#}", model.name));
    let image = AlignedBytes::copy_from(&checkpoint.to_image().unwrap()).unwrap();
    let mut core_model = Model::parse(image.bytes()).unwrap();
    core_model.set_fast_f32(fast_f32);
    let n_token = core_model.config().n_token as usize;
    let tokens = model.tokens().unwrap();
    let mut results = Vec::new();
    for case in &model.cases {
        let tokens = &tokens[..case.n_tokens];
        let options = SessionOptions {
            position_keys,
            ..case.options()
        };
        let scores = scoring::score(&core_model, tokens, options, case.rows_k, |_| {})
            .unwrap_or_else(|e| panic!("{} {}: {e}", model.name, case.name));
        let reference = npy::read(&model.path().join(&case.logp)).unwrap();
        assert_eq!(
            reference.shape,
            vec![tokens.len() - 1],
            "{} {}",
            model.name,
            case.name
        );
        let rows = npy::read(&model.path().join(&case.rows)).unwrap();
        assert_eq!(
            rows.shape,
            vec![case.rows_k, n_token],
            "{} {}",
            model.name,
            case.name
        );
        let worst = scores
            .logp
            .iter()
            .zip(&reference.data)
            .chain(scores.rows.iter().zip(&rows.data))
            .map(|(&ours, &theirs)| (ours as f64 - theirs).abs())
            // A NaN must count as a failure, not vanish in the max.
            .map(|delta| if delta.is_nan() { f64::INFINITY } else { delta })
            .fold(0.0, f64::max);
        assert_eq!(scores.logp.len(), reference.data.len());
        assert_eq!(scores.rows.len(), rows.data.len());
        let fast = if fast_f32 { " fast-f32" } else { "" };
        let name = format!("{} {:?} {} {position_keys}{fast}", model.name, format, case.name);
        results.push((name, worst));
    }
    results
}

/// Prints every (case, worst |Δ|) and fails, naming them, if any is over [`TOLERANCE`] or if
/// fewer than `at_least` cases were checked.
fn assert_within_tolerance(results: impl IntoIterator<Item = (String, f64)>, at_least: usize) {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (case, worst) in results {
        println!("{case:<60} max |Δ ln p| = {worst:.3e}");
        checked += 1;
        if worst > TOLERANCE {
            failures.push(format!("{case}: {worst:.3e}"));
        }
    }
    assert!(checked >= at_least, "only {checked} cases checked");
    assert!(
        failures.is_empty(),
        "over tolerance {TOLERANCE:e}:\n{}",
        failures.join("\n")
    );
}

#[test]
fn core_f32_matches_hugging_face_float64_on_every_fixture() {
    let manifest = Manifest::load().unwrap();
    assert!(manifest.models.len() >= 5, "the manifest lists too few models");
    let results = manifest.models.iter().flat_map(|model| {
        formats(model)
            .into_iter()
            .flat_map(|format| PositionKeys::ALL.iter().map(move |&keys| (format, keys)))
            .flat_map(move |(format, keys)| check_model(model, format, keys, false))
    });
    assert_within_tolerance(results, 60);
}

/// `Model::set_fast_f32` (`txl score --fast-f32`) stays within the same tolerance of Hugging
/// Face: the fused order moves each sum by a few ulps.
#[test]
fn core_fast_f32_matches_hugging_face_float64_on_every_fixture() {
    let manifest = Manifest::load().unwrap();
    let results = manifest
        .models
        .iter()
        .flat_map(|model| check_model(model, formats(model)[0], PositionKeys::PerSession, true));
    assert_within_tolerance(results, 10);
}

#[test]
fn fixtures_cover_what_the_core_must_get_right() {
    // The comparison above only means something if the fixtures exercise these.
    let manifest = Manifest::load().unwrap();
    let mut long_stream = false;
    let (mut both_formats, mut zeros, mut streaming, mut same_length, mut clamped) = (0, 0, 0, 0, 0);
    for model in &manifest.models {
        if model.formats.len() == 2 {
            both_formats += 1;
        }
        for case in &model.cases {
            zeros += (case.mem_init == "zeros") as usize;
            streaming += (case.tgt_len == 1) as usize;
            same_length += case.same_length as usize;
            clamped += (case.clamp_len > 0 && (case.clamp_len as usize) < case.n_tokens) as usize;
            long_stream |=
                case.tgt_len == 1 && case.mem_len > 0 && case.n_tokens >= 20 * case.mem_len as usize;
        }
    }
    assert!(long_stream, "no streaming case of at least 20 x mem_len tokens");
    assert!(both_formats >= 3 && zeros >= 3 && streaming >= 3 && same_length >= 1 && clamped >= 1);
}

#[test]
fn position_keys_recomputed_per_segment_give_the_same_bits_in_less_memory() {
    use txl_core::Session;
    let manifest = Manifest::load().unwrap();
    for model in &manifest.models {
        let checkpoint = load_hf_checkpoint(&model.path(), CheckpointFormat::Auto, false).unwrap();
        let image = AlignedBytes::copy_from(&checkpoint.to_image().unwrap()).unwrap();
        let core_model = Model::parse(image.bytes()).unwrap();
        let tokens = model.tokens().unwrap();
        for case in &model.cases {
            let tokens = &tokens[..case.n_tokens];
            let kept = case.options();
            let recomputed = SessionOptions {
                position_keys: PositionKeys::PerSegment,
                ..kept
            };
            let a = scoring::score(&core_model, tokens, kept, 0, |_| {}).unwrap();
            let b = scoring::score(&core_model, tokens, recomputed, 0, |_| {}).unwrap();
            assert_eq!(a.digest(), b.digest(), "{} {}", model.name, case.name);
            let layers = core_model.config().n_layer;
            let (kept_bytes, recomputed_bytes) = (
                Session::arena_bytes(&core_model, &kept).unwrap(),
                Session::arena_bytes(&core_model, &recomputed).unwrap(),
            );
            if layers > 2 {
                assert!(
                    recomputed_bytes < kept_bytes,
                    "{}: {recomputed_bytes} >= {kept_bytes}",
                    model.name
                );
            }
            // Folded into the queries: no key table at all (its accuracy is checked above).
            let folded = SessionOptions {
                position_keys: PositionKeys::FoldedIntoQuery,
                ..kept
            };
            let folded_bytes = Session::arena_bytes(&core_model, &folded).unwrap();
            assert!(
                folded_bytes < recomputed_bytes,
                "{}: folded {folded_bytes} >= {recomputed_bytes}",
                model.name
            );
        }
    }
}

//! Property test: random small models (any shape the format allows, within test-sized bounds)
//! scored by the core in f32 and by this crate's f64 reference agree to 1e-4 in every
//! log-probability. proptest shrinks a failure to the smallest config and text that still
//! fail.

use std::cell::Cell;
use txl_tests::max_delta;

use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use txl_core::config::MAX_CUTOFFS;
use txl_core::scoring;
use txl_core::AlignedBytes;
use txl_core::{Config, MemInit, Model, SessionOptions};
use txl_host_gpu::{random_image, Backend, RandomInit, Reference};

/// Largest |Δ ln p| allowed between the core (f32) and the reference (f64).
const TOLERANCE: f64 = 1e-4;

#[derive(Clone, Debug)]
struct Case {
    config: Config,
    tgt_len: u32,
    mem_len: u32,
    clamp_len: u32,
    same_length: bool,
    zero_memory: bool,
    tokens: Vec<u32>,
    seed: u64,
}

/// Every choice is an independent strategy and the case is a plain function of them, so
/// proptest can shrink each one on its own (dependent choices, such as the cutoffs below
/// `n_token`, are derived in the map).
fn case() -> impl Strategy<Value = Case> {
    // n_layer, n_head, d_head, d_model / 2, d_inner
    let shape = (1u32..=3, 1u32..=4, 4u32..=32, 4u32..=24, 8u32..=48);
    // n_token, cutoff positions (per mille of n_token), div_val, d_embed (0: d_model)
    let vocabulary = (
        20u32..=120,
        proptest::collection::vec(1u32..1000, 0..=2),
        1u32..=2,
        prop_oneof![Just(0u32), 4u32..=32],
    );
    // tie_weight, tie_projs bits, pre_lnorm, untie_r
    let flags = (any::<bool>(), 0u32..8, any::<bool>(), any::<bool>());
    // tgt_len, mem_len, clamp_len, same_length, zero memory
    let settings = (
        1u32..=16,
        0u32..=48,
        prop_oneof![Just(0u32), 1u32..=20],
        any::<bool>(),
        any::<bool>(),
    );
    let text = (proptest::collection::vec(any::<u32>(), 1..=64), any::<u64>());
    (shape, vocabulary, flags, settings, text).prop_map(
        |(shape, vocabulary, flags, settings, (text, seed))| {
            let (n_layer, n_head, d_head, half_d_model, d_inner) = shape;
            let (n_token, per_mille, div_val, d_embed) = vocabulary;
            let (tie_weight, tie_bits, pre_lnorm, untie_r) = flags;
            let (tgt_len, mem_len, clamp_len, same_length, zero_memory) = settings;
            let mut cuts: Vec<u32> = per_mille.iter().map(|p| (p * n_token / 1000).max(1)).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut cutoffs = [0; MAX_CUTOFFS];
            cutoffs[..cuts.len()].copy_from_slice(&cuts);
            let d_model = half_d_model * 2;
            let config = Config {
                n_token,
                d_model,
                d_embed: if d_embed == 0 { d_model } else { d_embed },
                n_head,
                d_head,
                d_inner,
                n_layer,
                cutoffs,
                n_cutoffs: cuts.len() as u32,
                div_val,
                tie_weight,
                tie_projs: tie_bits & ((1 << (cuts.len() + 1)) - 1),
                pre_lnorm,
                untie_r,
                layer_norm_epsilon: 1e-5,
                tgt_len,
                mem_len,
                clamp_len,
                same_length,
            };
            Case {
                config,
                tgt_len,
                mem_len,
                clamp_len,
                same_length,
                zero_memory,
                tokens: text.iter().map(|t| t % n_token).collect(),
                seed,
            }
        },
    )
}

/// Worst |Δ ln p| between the core and the reference over every log-probability and the
/// first two full rows.
fn worst_delta(case: &Case) -> f64 {
    let image =
        AlignedBytes::copy_from(&random_image(&case.config, case.seed, RandomInit::default()).unwrap())
            .unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions {
        tgt_len: case.tgt_len,
        mem_len: case.mem_len,
        clamp_len: case.clamp_len,
        same_length: case.same_length,
        mem_init: if case.zero_memory {
            MemInit::Zeros
        } else {
            MemInit::Empty
        },
        ..SessionOptions::from_config(model.config())
    };
    let core = scoring::score(&model, &case.tokens, options, 2, |_| {}).unwrap();
    let mut reference = Reference::new(&model, Backend::Cpu64).unwrap();
    let ours = reference.score(&case.tokens, &options, 2, |_| {}).unwrap();
    assert_eq!(
        core.logp.len(),
        ours.logp.len(),
        "log-probabilities: core vs reference count"
    );
    assert_eq!(
        core.rows.len(),
        ours.rows.len(),
        "full rows: core vs reference values"
    );
    max_delta(
        core.logp.iter().chain(&core.rows).map(|&v| v as f64),
        ours.logp.iter().chain(&ours.rows).copied(),
    )
}

#[test]
fn core_f32_agrees_with_the_f64_reference() {
    // Deterministic: the same cases on every run (PROPTEST_CASES overrides how many).
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let worst = Cell::new(0.0f64);
    let result = runner.run(&case(), |case| {
        let delta = worst_delta(&case);
        worst.set(worst.get().max(delta));
        prop_assert!(delta <= TOLERANCE, "max |Δ ln p| = {delta:e}");
        Ok(())
    });
    println!(
        "{cases} random models: worst |Δ ln p| between the core and the reference {:.3e}",
        worst.get()
    );
    if let Err(error) = result {
        panic!("{error}");
    }
}

//! Shared by the test files: the Hugging Face fixtures (`tests/fixtures/manifest.json`), model
//! loading, and the comparison of log-probabilities.

#![allow(dead_code)] // each test file uses part of this

use txl_core::{Model, SessionOptions};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::model_file::AlignedBytes;

#[allow(unused_imports)] // each test file uses part of this
pub use txl_tests::{FixtureCase, FixtureModel, Manifest};

/// Loading a fixture model from its `model.safetensors`.
pub trait FixtureImage {
    /// The model image converted from `model.safetensors`.
    fn image(&self) -> AlignedBytes;
}

impl FixtureImage for FixtureModel {
    fn image(&self) -> AlignedBytes {
        let checkpoint = load_hf_checkpoint(&self.path(), CheckpointFormat::Safetensors, false)
            .unwrap_or_else(|e| panic!("{}: {e:#}", self.name));
        AlignedBytes::new(&checkpoint.to_image().unwrap())
    }
}

/// The evaluation settings of a case.
pub fn case_options(_model: &Model<'_>, case: &FixtureCase) -> SessionOptions {
    case.options()
}

/// Largest |a - b|, a NaN counting as infinitely far.
pub fn max_delta(a: impl IntoIterator<Item = f64>, b: impl IntoIterator<Item = f64>) -> f64 {
    a.into_iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .map(|d| if d.is_nan() { f64::INFINITY } else { d })
        .fold(0.0, f64::max)
}

/// A small model config for tests: `txl_tests::small_config` with wider heads and vocabulary.
pub fn small_config() -> txl_core::Config {
    let mut cutoffs = [0; 8];
    cutoffs[..2].copy_from_slice(&[10, 30]);
    txl_core::Config {
        n_token: 60,
        d_head: 8,
        d_inner: 32,
        cutoffs,
        tgt_len: 5,
        mem_len: 7,
        ..txl_tests::small_config()
    }
}

/// Deterministic pseudo-random tokens below `n_token`.
pub fn tokens(n: usize, n_token: u32, seed: u64) -> Vec<u32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n_token as u64) as u32
        })
        .collect()
}

/// A random model of `config`, as aligned image bytes.
pub fn random_model(config: &txl_core::Config, seed: u64) -> AlignedBytes {
    let image = txl_host_gpu::random_image(config, seed, txl_host_gpu::RandomInit::default()).unwrap();
    AlignedBytes::new(&image)
}

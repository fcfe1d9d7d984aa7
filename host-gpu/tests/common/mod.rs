//! Shared by the test files: the Hugging Face fixtures (`tests/fixtures/manifest.json`), model
//! loading, and the comparison of log-probabilities.

#![allow(dead_code)] // each test file uses part of this

use std::path::{Path, PathBuf};

use serde::Deserialize;
use txl_core::{MemInit, Model, SessionOptions};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::model_file::AlignedBytes;

/// `tests/fixtures` of the workspace, or `$TXL_FIXTURES` (for test binaries built on another
/// machine, as `scripts/gpu-check.sh run` uses them).
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("TXL_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures"),
    }
}

#[derive(Debug, Deserialize)]
pub struct Manifest {
    pub models: Vec<FixtureModel>,
}

#[derive(Debug, Deserialize)]
pub struct FixtureModel {
    pub name: String,
    pub dir: String,
    pub tokens: TokenFile,
    pub cases: Vec<FixtureCase>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum TokenFile {
    Ids(String),
    Bytes { bytes: String },
}

/// One Hugging Face float64 evaluation.
#[derive(Debug, Deserialize)]
pub struct FixtureCase {
    pub name: String,
    pub tgt_len: u32,
    pub mem_len: u32,
    pub clamp_len: i64,
    pub same_length: bool,
    pub mem_init: String,
    pub n_tokens: usize,
    pub logp: String,
    pub rows: String,
    pub rows_k: usize,
}

impl Manifest {
    pub fn load() -> Manifest {
        let path = fixtures_dir().join("manifest.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

impl FixtureModel {
    pub fn path(&self) -> PathBuf {
        fixtures_dir().join(&self.dir)
    }

    pub fn tokens(&self) -> Vec<u32> {
        match &self.tokens {
            TokenFile::Ids(file) => txl_tools::scoring::read_token_ids(&self.path().join(file)).unwrap(),
            TokenFile::Bytes { bytes } => {
                txl_tools::scoring::read_byte_tokens(&self.path().join(bytes)).unwrap()
            }
        }
    }

    /// The model image converted from `model.safetensors`.
    pub fn image(&self) -> AlignedBytes {
        let checkpoint = load_hf_checkpoint(&self.path(), CheckpointFormat::Safetensors, false)
            .unwrap_or_else(|e| panic!("{}: {e:#}", self.name));
        AlignedBytes::new(&checkpoint.to_image().unwrap())
    }
}

/// `options` with the evaluation settings of a case (other fields as the model's defaults).
pub fn case_options(model: &Model<'_>, case: &FixtureCase) -> SessionOptions {
    SessionOptions {
        tgt_len: case.tgt_len,
        mem_len: case.mem_len,
        clamp_len: case.clamp_len.max(0) as u32,
        same_length: case.same_length,
        mem_init: if case.mem_init == "zeros" {
            MemInit::Zeros
        } else {
            MemInit::Empty
        },
        ..SessionOptions::from_config(model.config())
    }
}

/// Largest |a - b|, a NaN counting as infinitely far.
pub fn max_delta(a: impl IntoIterator<Item = f64>, b: impl IntoIterator<Item = f64>) -> f64 {
    a.into_iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .map(|d| if d.is_nan() { f64::INFINITY } else { d })
        .fold(0.0, f64::max)
}

/// A small model config for tests; adjust fields as needed.
pub fn small_config() -> txl_core::Config {
    let mut cutoffs = [0; 8];
    cutoffs[0] = 10;
    cutoffs[1] = 30;
    txl_core::Config {
        n_token: 60,
        d_model: 16,
        d_embed: 16,
        n_head: 2,
        d_head: 8,
        d_inner: 32,
        n_layer: 2,
        cutoffs,
        n_cutoffs: 2,
        div_val: 2,
        tie_weight: true,
        tie_projs: 0b110,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 5,
        mem_len: 7,
        clamp_len: 0,
        same_length: false,
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

//! Shared helpers for the accuracy tests: the fixture manifest written by
//! `tools/reference/make_fixtures.py`, and small random models built in Rust.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;
use txl_core::image::{write_image, Payload};
use txl_core::tensors::{for_each_tensor, LayerTensor, TensorName};
use txl_core::{Config, MemInit, SessionOptions};

/// `tests/fixtures`, or `$TXL_FIXTURES` (for test binaries run on another machine, as
/// `scripts/gpu-check.sh run` does).
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("TXL_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
    }
}

/// `tests/fixtures/manifest.json`.
#[derive(Debug, Deserialize)]
pub struct Manifest {
    /// The reference models.
    pub models: Vec<FixtureModel>,
}

/// One reference model and its cases.
#[derive(Debug, Deserialize)]
pub struct FixtureModel {
    /// Name.
    pub name: String,
    /// Folder under `tests/fixtures`.
    pub dir: String,
    /// `safetensors` and/or `bin`.
    pub formats: Vec<String>,
    /// The token sequence: a file of ids, or `{"bytes": FILE}`.
    pub tokens: TokenFile,
    /// Reference evaluations.
    pub cases: Vec<FixtureCase>,
}

/// Where a fixture's tokens are.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum TokenFile {
    /// Whitespace-separated ids.
    Ids(String),
    /// Every byte of the file is a token.
    Bytes {
        /// The file.
        bytes: String,
    },
}

/// One reference evaluation: settings plus the float64 log-probabilities Hugging Face gave.
#[derive(Debug, Deserialize)]
pub struct FixtureCase {
    /// Name.
    pub name: String,
    /// Segment length.
    pub tgt_len: u32,
    /// Memory length.
    pub mem_len: u32,
    /// 0 or negative: no clamping.
    pub clamp_len: i64,
    /// Same-length attention.
    pub same_length: bool,
    /// `empty` or `zeros`.
    pub mem_init: String,
    /// Leading tokens used.
    pub n_tokens: usize,
    /// `.npy` of `ln p(t[i+1] | t[..=i])`, shape `(n_tokens - 1,)`.
    pub logp: String,
    /// `.npy` of the first `rows_k` full rows.
    pub rows: String,
    /// Rows kept.
    pub rows_k: usize,
}

impl FixtureCase {
    /// The session options of this case.
    pub fn options(&self) -> SessionOptions {
        SessionOptions {
            tgt_len: self.tgt_len,
            mem_len: self.mem_len,
            clamp_len: self.clamp_len.max(0) as u32,
            same_length: self.same_length,
            mem_init: if self.mem_init == "zeros" {
                MemInit::Zeros
            } else {
                MemInit::Empty
            },
            mem_dtype: txl_core::MemDtype::F32,
            position_keys: txl_core::PositionKeys::PerSession,
        }
    }
}

impl Manifest {
    /// Reads `tests/fixtures/manifest.json`.
    pub fn load() -> Result<Manifest> {
        let path = fixtures_dir().join("manifest.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

impl FixtureModel {
    /// The model's folder.
    pub fn path(&self) -> PathBuf {
        fixtures_dir().join(&self.dir)
    }

    /// All of the model's tokens.
    pub fn tokens(&self) -> Result<Vec<u32>> {
        match &self.tokens {
            TokenFile::Ids(file) => txl_tools::scoring::read_token_ids(&self.path().join(file)),
            TokenFile::Bytes { bytes } => txl_tools::scoring::read_byte_tokens(&self.path().join(bytes)),
        }
    }
}

/// splitmix64: a small deterministic generator for test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`.
    pub fn symmetric(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % n as u64) as u32
    }
}

/// A small config with adaptive embedding and softmax, for robustness tests.
pub fn small_config() -> Config {
    let mut cutoffs = [0; txl_core::config::MAX_CUTOFFS];
    cutoffs[0] = 10;
    cutoffs[1] = 20;
    Config {
        n_token: 40,
        d_model: 16,
        d_embed: 16,
        n_head: 2,
        d_head: 4,
        d_inner: 24,
        n_layer: 2,
        cutoffs,
        n_cutoffs: 2,
        div_val: 2,
        tie_weight: true,
        tie_projs: 0b110,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len: 4,
        mem_len: 6,
        clamp_len: 0,
        same_length: false,
    }
}

/// An image of `config` with random weights (LayerNorm gains near 1).
pub fn random_image(config: &Config, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut tensors: Vec<(TensorName, Vec<f32>)> = Vec::new();
    for_each_tensor(config, |name, shape| {
        let gain = matches!(
            name,
            TensorName::Layer(_, LayerTensor::AttnNormWeight | LayerTensor::FfNormWeight)
        );
        let data = (0..shape.len())
            .map(|_| {
                if gain {
                    1.0 + 0.2 * rng.symmetric()
                } else {
                    0.5 * rng.symmetric()
                }
            })
            .collect();
        tensors.push((name, data));
    });
    let payloads: Vec<(TensorName, Payload<'_>)> = tensors
        .iter()
        .map(|(name, data)| (*name, Payload::F32(data)))
        .collect();
    write_image(config, &payloads).expect("a valid config gives a valid image")
}

/// `random_image` quantized to `target` (no calibration, no smoothing), some tensors kept in f16.
pub fn quantized_image(config: &Config, seed: u64, target: txl_tools::quantize::Target) -> Vec<u8> {
    use txl_tools::quantize::{quantize, QuantizeOptions};
    let image = txl_tools::model_file::AlignedBytes::new(&random_image(config, seed));
    let model = txl_core::Model::parse(image.bytes()).expect("a random image parses");
    let options = QuantizeOptions {
        keep_f16: vec!["layers.0.pos_ff.*".into()],
        ..QuantizeOptions::weights_only(target, SessionOptions::from_config(config))
    };
    quantize(&model, &options, None, |_| {}).expect("quantizes").image
}

//! Shared helpers for the accuracy tests: the fixture manifest written by
//! `tools/reference/make_fixtures.py`, and small random models built in Rust.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;
pub use txl_core::random_model::small_config;
use txl_core::random_model::RandomModel;
use txl_core::rng::Rng;
use txl_core::{AlignedBytes, Config, MemInit, OptionWord, PositionKeys, SessionOptions};
use txl_host_gpu::quantize::{quantize, Method, QuantizeOptions, Quantized, Smoothing, Target};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::compare::{compare, Comparison};

/// The skip ledger the core's tests keep too: [`skipped`] prints `SKIPPED <test>: <reason>` and
/// appends the line to the file `$TXL_SKIPS` names, which `scripts/test.sh` lists at its end.
#[path = "../../core/src/test_skips.rs"]
mod test_skips;
pub use test_skips::skipped;

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
            mem_init: self.mem_init.parse().expect("the manifest says empty or zeros"),
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
            TokenFile::Ids(file) => txl_tools::tokens::read_token_ids(&self.path().join(file)),
            TokenFile::Bytes { bytes } => txl_tools::tokens::read_byte_tokens(&self.path().join(bytes)),
        }
    }
}

/// Loads `model.safetensors` of a fixture model as an aligned model image.
impl FixtureModel {
    /// The model image converted from the fixture's `model.safetensors`.
    pub fn image(&self) -> Result<AlignedBytes> {
        let checkpoint = load_hf_checkpoint(&self.path(), CheckpointFormat::Safetensors, false)
            .with_context(|| format!("fixture {}", self.name))?;
        Ok(AlignedBytes::copy_from(&checkpoint.to_image()?)?)
    }
}

/// Largest |a - b| over pairs of equal index, a NaN counting as infinitely far. Panics when
/// the two have different lengths: a backend that returns fewer values must not pass.
pub fn max_delta(a: impl IntoIterator<Item = f64>, b: impl IntoIterator<Item = f64>) -> f64 {
    let (a, b): (Vec<f64>, Vec<f64>) = (a.into_iter().collect(), b.into_iter().collect());
    assert_eq!(a.len(), b.len(), "compared sequences differ in length");
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .map(|d| if d.is_nan() { f64::INFINITY } else { d })
        .fold(0.0, f64::max)
}

/// The shapes the quantized-accuracy tests cover: the reference tests' config (adaptive,
/// div_val 2, post-LN, per-layer biases, tied), a pre-LN one with div_val 1, d_embed ≠ d_model and
/// a shared bias pair, and a plain softmax with untied output weights.
pub fn accuracy_configs() -> Vec<(&'static str, Config)> {
    let adaptive = reference_config();
    let pre_ln = Config {
        pre_lnorm: true,
        untie_r: false,
        div_val: 1,
        d_embed: 12,
        tie_projs: 0b010,
        ..adaptive
    };
    let plain = Config {
        n_token: 50,
        n_cutoffs: 0,
        cutoffs: [0; txl_core::config::MAX_CUTOFFS],
        div_val: 1,
        tie_projs: 0,
        tie_weight: false,
        n_head: 3,
        ..adaptive
    };
    vec![
        ("adaptive div2", adaptive),
        ("pre-LN div1", pre_ln),
        ("plain untied", plain),
    ]
}

/// The reference tests' model: [`small_config`] with wider heads and vocabulary.
pub fn reference_config() -> Config {
    let mut cutoffs = [0; txl_core::config::MAX_CUTOFFS];
    cutoffs[..2].copy_from_slice(&[10, 30]);
    Config {
        n_token: 60,
        d_head: 8,
        d_inner: 32,
        cutoffs,
        tgt_len: 5,
        mem_len: 7,
        ..small_config()
    }
}

/// Deterministic pseudo-random tokens below `n_token`.
pub fn tokens(n: usize, n_token: u32, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.below(u64::from(n_token)) as u32).collect()
}

/// A model of `config` with random weights at the reference fixtures' scale, as aligned bytes.
pub fn random_model(config: &Config, seed: u64) -> AlignedBytes {
    AlignedBytes::copy_from(&random_image(config, seed)).expect("allocates")
}

/// An image of `config` with random weights at the reference fixtures' scale.
pub fn random_image(config: &Config, seed: u64) -> Vec<u8> {
    RandomModel::new(config, seed)
        .image()
        .expect("a valid config gives a valid image")
}

/// `random_image` quantized to `target` (no calibration, no smoothing), some tensors kept in f16.
pub fn quantized_image(config: &Config, seed: u64, target: Target) -> Vec<u8> {
    let image = random_model(config, seed);
    let model = txl_core::Model::parse(image.bytes()).expect("a random image parses");
    let options = QuantizeOptions {
        keep_f16: vec!["layers.0.pos_ff.*".into()],
        ..QuantizeOptions::weights_only(target, SessionOptions::from_config(config))
    };
    quantize(&model, &options, None, |_| {}).expect("quantizes").image
}

/// Session settings the batched and CUDA reference tests cover, applied to a model's defaults:
/// `(tgt_len, mem_len, clamp_len, same_length, mem_init)` = (6, 9, 0, no, empty), (4, 5, 3, yes,
/// zeros), (1, 3, 0, yes, empty), (7, 0, 0, no, zeros): segments and streaming, a clamp, both
/// masks, both memory starts, no memory.
pub fn session_variants(base: SessionOptions) -> [SessionOptions; 4] {
    [
        (6, 9, 0, false, MemInit::Empty),
        (4, 5, 3, true, MemInit::Zeros),
        (1, 3, 0, true, MemInit::Empty),
        (7, 0, 0, false, MemInit::Zeros),
    ]
    .map(
        |(tgt_len, mem_len, clamp_len, same_length, mem_init)| SessionOptions {
            tgt_len,
            mem_len,
            clamp_len,
            same_length,
            mem_init,
            ..base
        },
    )
}

/// [`session_variants`] under each [`PositionKeys`] mode: the settings the core's own checks
/// against the reference cover. The reference has one position term, so it is the same for
/// every mode, and each mode of the core must match it.
pub fn core_session_variants(base: SessionOptions) -> Vec<SessionOptions> {
    session_variants(base)
        .into_iter()
        .flat_map(|options| {
            PositionKeys::ALL
                .iter()
                .map(move |&position_keys| SessionOptions {
                    position_keys,
                    ..options
                })
        })
        .collect()
}

/// A model in f32 with the texts the quantization tests score it on.
#[derive(Debug)]
pub struct QuantizationText {
    /// The f32 image.
    pub f32_image: AlignedBytes,
    /// The text the scores are measured on, never used for calibration.
    pub heldout: Vec<u32>,
    /// The calibration text.
    pub calibration: Vec<u32>,
}

impl QuantizationText {
    /// The f32 model quantized to `target`, rows rounded by `method`, calibrated on the
    /// calibration text with activation smoothing searched.
    pub fn quantized(&self, target: Target, method: Method) -> Quantized {
        self.quantized_with(target, method, false)
    }

    /// [`QuantizationText::quantized`] as `txl quantize --integer` smooths (`power_of_two`: each
    /// smoothing factor a power of two) or as without it.
    pub fn quantized_with(&self, target: Target, method: Method, power_of_two: bool) -> Quantized {
        let model = txl_core::Model::parse(self.f32_image.bytes()).unwrap();
        let options = QuantizeOptions {
            smoothing: Smoothing::Auto,
            power_of_two_smoothing: power_of_two,
            method,
            ..QuantizeOptions::weights_only(target, SessionOptions::from_config(model.config()))
        };
        quantize(&model, &options, Some(&self.calibration), |_| {}).unwrap()
    }

    /// `q` against the f32 model on the held-out text, both with the model's session settings;
    /// printed with `name`.
    pub fn measure(&self, name: &str, q: &Quantized) -> Comparison {
        let reference = txl_core::Model::parse(self.f32_image.bytes()).unwrap();
        let candidate = AlignedBytes::copy_from(&q.image).unwrap();
        let candidate = txl_core::Model::parse(candidate.bytes()).unwrap();
        let options = SessionOptions::from_config(reference.config());
        let result = compare(
            (&reference, options),
            (&candidate, options),
            &self.heldout,
            |_| {},
        )
        .unwrap();
        println!(
            "{name}, {} {}: held-out relative Δ {:+.4}%, mean KL {:.3e}, top-1 {:.4}; image {} bytes",
            q.report.target,
            q.report.method,
            100.0 * result.relative_delta,
            result.mean_kl,
            result.top1_agreement,
            q.image.len()
        );
        result
    }
}

/// The bundled demo model with `heldout.txt` and `calib.txt` as byte tokens, cut to
/// `heldout_tokens` and `calibration_tokens` (the held-out text must have that many).
pub fn demo_text(heldout_tokens: usize, calibration_tokens: usize) -> QuantizationText {
    trained_text("demo", heldout_tokens, calibration_tokens)
}

/// [`demo_text`] for the trained byte-level model in `tests/fixtures/NAME` (`demo`, or
/// `second`: another text and shape, `tools/reference/make_second_model.py`).
pub fn trained_text(name: &str, heldout_tokens: usize, calibration_tokens: usize) -> QuantizationText {
    let demo = fixtures_dir().join(name);
    let checkpoint = load_hf_checkpoint(&demo, CheckpointFormat::Auto, false).unwrap();
    let mut heldout = txl_tools::tokens::read_byte_tokens(&demo.join("heldout.txt")).unwrap();
    assert!(
        heldout.len() >= heldout_tokens,
        "heldout.txt is shorter than {heldout_tokens} bytes"
    );
    heldout.truncate(heldout_tokens);
    let mut calibration = txl_tools::tokens::read_byte_tokens(&demo.join("calib.txt")).unwrap();
    calibration.truncate(calibration_tokens);
    QuantizationText {
        f32_image: AlignedBytes::copy_from(&checkpoint.to_image().unwrap()).unwrap(),
        heldout,
        calibration,
    }
}

/// One variant of PyTorch's own quantization of the trained model `name`
/// (`tests/fixtures/NAME/pytorch_quantization.json`, `tools/reference/pytorch_quantization.py`),
/// after checking that the file describes the committed weights (their SHA-256), `tokens`
/// held-out tokens, an empty memory start and the model's own `tgt_len` and `mem_len`.
pub fn pytorch_baseline(name: &str, variant: &str, tokens: usize) -> serde_json::Value {
    use sha2::Digest as _;
    let dir = fixtures_dir().join(name);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("pytorch_quantization.json")).unwrap())
            .unwrap();
    let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
    let sha: String = sha2::Sha256::digest(&weights)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        json["model_sha256"].as_str().unwrap(),
        sha,
        "{name}: the PyTorch baseline was measured on another model"
    );
    assert_eq!(
        json["tokens"], tokens,
        "{name}: the baseline was measured on another text length"
    );
    assert_eq!(json["mem_init"], "empty");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(json["tgt_len"], config["tgt_len"], "{name}: tgt_len");
    assert_eq!(json["mem_len"], config["mem_len"], "{name}: mem_len");
    json["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == variant)
        .unwrap_or_else(|| panic!("{name}: the baseline has no variant {variant}"))
        .clone()
}

/// Tokens sampled from `model` at temperature 1 (the model's own distribution), from `seed`.
pub fn sampled_text(model: &txl_core::Model<'_>, length: usize, seed: u64) -> Vec<u32> {
    let options = SessionOptions::from_config(model.config());
    let sampling = txl_core::sampling::Sampling::Temperature {
        temperature: 1.0,
        seed,
    };
    txl_tools::generate::generate(model, options, &[1], length, sampling).unwrap()
}

/// `image` (int8 or int4 weights) as an integer image: the activations' format calibrated on
/// `calibration` with the f64 reference (as `txl quantize --integer` does), the flag and `frac`
/// set in its header.
pub fn with_integer_arithmetic(image: &[u8], calibration: &[u32]) -> Vec<u8> {
    use txl_core::image::{set_arithmetic, Arithmetic};
    use txl_host_gpu::integer::IntegerModel;
    use txl_host_gpu::{Backend, Reference};
    let bytes = AlignedBytes::copy_from(image).unwrap();
    let model = txl_core::Model::parse(bytes.bytes()).unwrap();
    let options = SessionOptions::from_config(model.config());
    let ranges = Reference::new(&model, Backend::Cpu64)
        .unwrap()
        .channel_ranges(&[calibration], &options)
        .unwrap();
    let frac = IntegerModel::frac_for(&ranges);
    set_arithmetic(image, Arithmetic::Integer { frac }).unwrap()
}

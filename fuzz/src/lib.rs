//! What the fuzz targets and the seed generator (`examples/seeds.rs`) share: the fixed
//! checkpoint config the `safetensors` and `torch` targets read their input against, the
//! scratch directory those targets write it to, the check that a checkpoint which loads also
//! makes a valid image, and the tiny model of the `state` target.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use txl_core::random_model::{Init, RandomInit, RandomModel};
use txl_core::Config;
use txl_tools::checkpoint::{
    load_checkpoint as load_any_checkpoint, load_hf_checkpoint, Checkpoint, CheckpointFormat,
    OriginalOptions, CONFIG_FILE,
};

/// The `config.json` the checkpoint targets pair every input with: two embedding tables
/// (div_val 2), tied output weights, the second output projection tied, one `r_w_bias` /
/// `r_r_bias` pair shared by both layers. Its weights take about 1.4 KB in f32.
pub const CHECKPOINT_CONFIG: &str = r#"{
  "model_type": "transfo-xl", "n_token": 20, "cutoffs": [8], "div_val": 2,
  "d_model": 4, "d_embed": 4, "n_head": 1, "d_head": 2, "d_inner": 4, "n_layer": 2,
  "tie_weight": true, "untie_r": false, "proj_share_all_but_first": true,
  "pre_lnorm": false, "same_length": true, "clamp_len": -1, "mem_len": 3, "tgt_len": 2
}
"#;

/// The scratch directory, once made.
static SCRATCH: OnceLock<PathBuf> = OnceLock::new();

/// A directory of this process's own (`/dev/shm` when there is one, else the temporary
/// directory) holding `config` as `config.json` when one is given (the `original` target's
/// checkpoints have none); made on the first call, reused,
/// and removed when the process exits (libFuzzer ends with `exit`; after a crash it stays,
/// next to the crash's input). Fuzzing runs each job in its own process, so jobs never share
/// one.
pub fn scratch_dir(target: &str, config: Option<&str>) -> &'static Path {
    SCRATCH.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("txl-fuzz-{target}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cannot make the scratch directory");
        if let Some(config) = config {
            std::fs::write(dir.join(CONFIG_FILE), config).expect("cannot write config.json");
        }
        // SAFETY: `remove_scratch` is an `extern "C" fn()` that does not unwind.
        unsafe { libc::atexit(remove_scratch) };
        dir
    })
}

extern "C" fn remove_scratch() {
    if let Some(dir) = SCRATCH.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Writes `weights` as `file_name` in the target's scratch directory and loads the checkpoint
/// from there as `format`. Loading may fail (most inputs are not checkpoints) but must not
/// panic; a checkpoint that loads must make an image that parses, with the config read.
pub fn load_checkpoint(target: &str, file_name: &str, format: CheckpointFormat, weights: &[u8]) {
    let dir = scratch_dir(target, Some(CHECKPOINT_CONFIG));
    std::fs::write(dir.join(file_name), weights).expect("cannot write the weights file");
    if let Ok(checkpoint) = load_hf_checkpoint(dir, format, false) {
        check_image(&checkpoint);
    }
}

/// A checkpoint that loads must make an image that parses, with the config read.
fn check_image(checkpoint: &Checkpoint) {
    let image = checkpoint
        .to_image()
        .expect("a checkpoint that loads makes an image");
    let aligned = txl_core::AlignedBytes::copy_from(&image).expect("the image fits in memory");
    let model = txl_core::Model::parse(aligned.bytes()).expect("the image written parses");
    assert_eq!(*model.config(), checkpoint.config);
}

/// The target that reads checkpoints of the original training code (no `config.json`).
pub const ORIGINAL_TARGET: &str = "original";

/// Writes `data` as `model.pt` in the `original` target's scratch directory (no `config.json`)
/// and reads it as `txl convert` does, with no flags. Reading may fail but must not panic; a
/// checkpoint that loads must make an image that parses, with the config read.
pub fn load_original_checkpoint(data: &[u8]) {
    let dir = scratch_dir(ORIGINAL_TARGET, None);
    std::fs::write(dir.join("model.pt"), data).expect("cannot write model.pt");
    let options = OriginalOptions::default();
    if let Ok((checkpoint, _)) = load_any_checkpoint(dir, CheckpointFormat::Auto, &options, false) {
        check_image(&checkpoint);
    }
}

/// The model of the `state` target and of the image seeds: the smallest shape with every
/// part the forward pass has (two adaptive clusters, div_val 2, a tied and an untied output
/// projection, per-layer biases, two layers).
pub fn tiny_config() -> Config {
    let mut cutoffs = [0; txl_core::config::MAX_CUTOFFS];
    cutoffs[0] = 4;
    cutoffs[1] = 8;
    // `small_config`'s switches, at the smallest sizes
    Config {
        n_token: 12,
        d_model: 4,
        d_embed: 4,
        d_head: 2,
        d_inner: 6,
        cutoffs,
        tgt_len: 3,
        mem_len: 4,
        ..txl_core::random_model::small_config()
    }
}

/// The `state` target's model: random weights for [`tiny_config`] (the `tiny_f32.txl` image
/// seed), parsed once.
pub fn state_model() -> txl_core::Model<'static> {
    static IMAGE: OnceLock<txl_core::AlignedBytes> = OnceLock::new();
    let image = IMAGE.get_or_init(|| {
        let config = tiny_config();
        RandomModel::new(&config, 1)
            .init(Init::Scaled(RandomInit::for_config(&config)))
            .aligned()
            .expect("the tiny config is valid")
    });
    txl_core::Model::parse(image.bytes()).expect("the random image parses")
}

/// The sessions the `state` target restores its input into: one per cache dtype and one per
/// position-key mode, each run over a different number of segments first (a memory partly
/// filled, one wrapped around the ring, ones that start as zeros), so their saved states differ
/// in length, layout and header.
pub const STATE_SESSIONS: usize = 4;

/// Starts session `which` (`< STATE_SESSIONS`) of [`state_model`], runs its first segments,
/// and hands it to `f`.
pub fn with_state_session<R>(which: usize, f: impl FnOnce(&mut txl_core::Session<'_, '_>) -> R) -> R {
    use txl_core::{MemDtype, MemInit, PositionKeys, Session, SessionOptions};
    let model = state_model();
    let (mem_dtype, position_keys, mem_init, segments) = [
        (MemDtype::F32, PositionKeys::PerSession, MemInit::Empty, 1),
        (MemDtype::F16, PositionKeys::PerSegment, MemInit::Empty, 2),
        (MemDtype::Int8, PositionKeys::PerSession, MemInit::Zeros, 1),
        (MemDtype::F32, PositionKeys::FoldedIntoQuery, MemInit::Zeros, 3),
    ][which];
    let options = SessionOptions {
        mem_dtype,
        position_keys,
        mem_init,
        ..SessionOptions::from_config(model.config())
    };
    let bytes = Session::arena_bytes(&model, &options).expect("a small arena");
    let mut arena = txl_core::AlignedBytes::zeroed(bytes).expect("a small arena");
    let mut session = Session::new(&model, arena.bytes_mut(), options).expect("the arena is the size asked");
    for segment in 0..segments {
        session
            .forward(&[1, 5 + segment, 11], |_, _| {})
            .expect("in-range tokens");
    }
    f(&mut session)
}

/// `session`'s saved state.
pub fn saved_state(session: &txl_core::Session<'_, '_>) -> Vec<u8> {
    let mut out = vec![0; session.state_bytes()];
    let len = session.save_state(&mut out).expect("the buffer is state_bytes");
    out.truncate(len);
    out
}

//! What the `txl` command tests share: running the binary, the fixtures, scratch folders,
//! checkpoints to damage.

#![allow(dead_code)] // each test file uses part of this

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The skip ledger the core's tests keep too: [`skipped`] prints `SKIPPED <test>: <reason>` and
/// appends the line to the file `$TXL_SKIPS` names, which `scripts/test.sh` lists at its end.
#[path = "../../../core/src/test_skips.rs"]
mod test_skips;
#[allow(unused_imports)] // (the tests that may skip use it)
pub use test_skips::skipped;

/// Runs `txl args` in the current directory.
pub fn txl(args: &[&str]) -> Output {
    txl_in(Path::new("."), args)
}

/// Runs `txl args` in the directory `cwd`.
pub fn txl_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txl"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("txl runs")
}

/// `tests/fixtures/NAME`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// An empty directory of this test's own, removed when the test passes (kept when it fails,
/// to look at). `name` must be unique within the test file.
pub fn scratch_dir(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!(
        "txl-{}-{}-{name}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// A scratch directory; see [`scratch_dir`].
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A path as the `&str` an argument list wants.
pub fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A run's stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Converts the checkpoint `checkpoint` (a directory or file `txl convert` reads) into the image
/// `image`, which it returns; the conversion must succeed.
#[allow(dead_code)] // (not every test binary converts)
pub fn convert(checkpoint: &Path, image: PathBuf) -> PathBuf {
    let run = txl(&["convert", s(checkpoint), "-o", s(&image)]);
    assert!(
        run.status.success(),
        "convert {}: {}",
        checkpoint.display(),
        stderr(&run)
    );
    image
}

/// A checkpoint directory `dir/name` with `adaptive_div2`'s `config.json` and the weights file
/// `weights`; returns the directory.
pub fn checkpoint(dir: &Path, name: &str, weights: &str) -> PathBuf {
    let ckpt = dir.join(name);
    std::fs::create_dir_all(&ckpt).unwrap();
    for file in ["config.json", weights] {
        std::fs::copy(fixture("adaptive_div2").join(file), ckpt.join(file)).unwrap();
    }
    ckpt
}

/// The key of `adaptive_div2`'s first embedding table.
pub const EMBEDDING: &str = "transformer.word_emb.emb_layers.0.weight";

/// A safetensors file: the JSON header `header` (tensor name → dtype, shape, data_offsets)
/// and the tensor bytes `data`.
pub fn safetensors(header: &serde_json::Map<String, serde_json::Value>, data: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(header).unwrap();
    let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
    bytes.extend(json);
    bytes.extend(data);
    bytes
}

/// The header and the tensor bytes of a safetensors file.
pub fn split_safetensors(bytes: &[u8]) -> (serde_json::Map<String, serde_json::Value>, Vec<u8>) {
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    (header, bytes[8 + len..].to_vec())
}

/// Largest |a - b| over pairs of equal index, a NaN counting as infinitely far (as
/// `txl_tests::max_delta`). Panics when the lengths differ: a run that wrote fewer values must
/// not pass.
pub fn max_delta(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "compared sequences differ in length");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .map(|d| if d.is_nan() { f64::INFINITY } else { d })
        .fold(0.0, f64::max)
}

/// `txl quantize IMAGE -o OUT --report REPORT FLAGS`: the image written and the report.
pub fn quantize(image: &Path, dir: &Path, name: &str, flags: &[&str]) -> (Vec<u8>, serde_json::Value) {
    let out_path = dir.join(format!("{name}.txl"));
    let report_path = dir.join(format!("{name}.json"));
    let mut args = vec![
        "quantize",
        s(image),
        "-o",
        s(&out_path),
        "--report",
        s(&report_path),
    ];
    args.extend(flags);
    let out = txl(&args);
    assert!(out.status.success(), "quantize {flags:?}: {}", stderr(&out));
    let image = std::fs::read(&out_path).unwrap_or_else(|_| panic!("-o: nothing at {}", out_path.display()));
    let report = std::fs::read(&report_path)
        .unwrap_or_else(|_| panic!("--report: nothing at {}", report_path.display()));
    (image, serde_json::from_slice(&report).unwrap())
}

//! What the `txl` command tests share: running the binary, the fixtures, scratch folders.

#![allow(dead_code)] // each test file uses part of this

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

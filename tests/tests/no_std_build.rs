//! `txl-core` is `#![no_std]` without `alloc` and builds for a Cortex-M4F.

use std::path::Path;
use std::process::Command;

const TARGET: &str = "thumbv7em-none-eabihf";

#[test]
fn core_builds_for_cortex_m4f() {
    build_core(&[]);
}

#[test]
fn core_builds_for_cortex_m4f_with_the_dsp_kernels() {
    build_core(&["--features", "cortex-m-dsp"]);
}

fn build_core(extra: &[&str]) {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(&workspace)
        .env_remove("RUSTFLAGS")
        .args(["build", "--release", "-p", "txl-core", "--target", TARGET])
        .args(extra)
        // A separate target directory: the test run holds no lock on it.
        .args(["--target-dir", "target/no-std-check"])
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "txl-core does not build for {TARGET} (if the target is missing: `rustup target add {TARGET}`, \
         which scripts/test.sh does):\n{stderr}"
    );
}

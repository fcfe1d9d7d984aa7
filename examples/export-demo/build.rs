//! Puts `memory.x` where the linker finds it, links with cortex-m-rt's `link.x`, and says what is
//! missing when the exported module has not been written yet.

use std::path::PathBuf;

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::copy(here.join("memory.x"), out.join("memory.x")).unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rustc-link-arg=-Tlink.x");
    println!("cargo:rerun-if-changed=memory.x");
    for file in ["exported/model.rs", "exported/model.txl", "exported/tokens.bin"] {
        println!("cargo:rerun-if-changed={file}");
        if !here.join(file).is_file() {
            panic!(
                "{file} is missing: write it first, e.g. with scripts/export-example.sh from the \
                 repository root (txl export MODEL.txl --rust examples/export-demo/exported, and \
                 the tokens to score as exported/tokens.bin, one token id per byte)"
            );
        }
    }
}

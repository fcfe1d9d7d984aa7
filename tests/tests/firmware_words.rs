//! The firmware's `demo` with a word-level model (the trained `kjv-words` model, 8,000 words of
//! the King James Bible in an adaptive softmax, with its vocabulary in the image; f32, 3.1 MB of
//! the board's 4 MiB of flash): it looks the prompt's words up in the image's vocabulary and
//! writes the words it generates, the same ids and the same text as `txl generate` on the host.
//! Runs the Cortex-M4F board through `scripts/firmware.sh` (QEMU and the thumbv7em-none-eabihf
//! target are needed, as for `firmware.rs`).

use std::path::Path;
use std::process::Command;

use txl_core::digest::Fnv1a;
use txl_core::sampling::Sampling;
use txl_core::{AlignedBytes, Model, SessionOptions};
use txl_tools::checkpoint::{load_hf_checkpoint, CheckpointFormat};
use txl_tools::vocab::{add_vocabulary, read_vocabulary};

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

#[test]
fn the_firmware_demo_writes_the_words_txl_generate_writes() {
    let fixtures = workspace().join("tests/fixtures");
    let checkpoint = load_hf_checkpoint(&fixtures.join("kjv-words"), CheckpointFormat::Auto, false).unwrap();
    let vocabulary = read_vocabulary(&fixtures.join("kjv-words/vocab.txt")).unwrap();
    let image = add_vocabulary(&checkpoint.to_image().unwrap(), &vocabulary).unwrap();
    let dir = workspace().join("target/firmware-test");
    std::fs::create_dir_all(&dir).unwrap();
    let image_path = dir.join("words.txl");
    std::fs::write(&image_path, &image).unwrap();

    // The host: `txl generate`'s ids and text for the same prompt and sampling.
    let prompt = "And God said unto Moses,";
    let (length, temperature, seed) = (30usize, 0.8f32, 3u64);
    let mut prompt_ids = vocabulary.encode(prompt).unwrap();
    prompt_ids.pop(); // the line's <eos>: the text goes on
    let aligned = AlignedBytes::copy_from(&image).unwrap();
    let model = Model::parse(aligned.bytes()).unwrap();
    let options = SessionOptions::from_config(model.config());
    let sampling = Sampling::from_temperature(temperature, seed);
    let ids = txl_tools::generate::generate(&model, options, &prompt_ids, length, sampling).unwrap();
    let mut digest = Fnv1a::new();
    ids.iter().for_each(|id| digest.write(&id.to_le_bytes()));
    let text = format!("{prompt} {}", vocabulary.decode(&ids));

    let output = Command::new(workspace().join("scripts/firmware.sh"))
        .env("TXL_MODEL", &image_path)
        .env_remove("RUSTFLAGS")
        .args(["mps2-an386", "--", "demo", "--prompt", prompt, "--length", "30"])
        .args(["--temperature", "0.8", "--seed", "3"])
        .output()
        .expect("scripts/firmware.sh runs");
    let log = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{log}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let written: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("| ").map(|(_, text)| text))
        .collect();
    assert_eq!(
        written.join("\n").trim_end(),
        firmware_lines(&text).trim_end(),
        "{log}"
    );
    let expected = format!("demo tokens={length} digest={:#010x}", digest.value());
    assert!(log.contains(&expected), "expected `{expected}` in\n{log}");
}

/// The firmware's demo prints its text in lines of at most 96 bytes (`firmware/src/demo.rs`,
/// `LINE`): `text` (`<eos>` as a line break) broken as it breaks it, a line that is full going on
/// in the next.
fn firmware_lines(text: &str) -> String {
    const LINE: usize = 96;
    let mut lines = Vec::new();
    for line in text.split('\n') {
        let mut current = String::new();
        for c in line.chars() {
            if current.len() + c.len_utf8() > LINE {
                lines.push(std::mem::take(&mut current));
            }
            current.push(c);
        }
        lines.push(current);
    }
    lines.join("\n")
}

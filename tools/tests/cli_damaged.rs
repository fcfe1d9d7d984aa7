//! Damaged files through the `txl` command: a truncated or corrupt model image (`inspect`,
//! `score`) and a broken checkpoint (`convert`) each end the run with exit status 1 and one
//! message that starts with `error: ` and names the file or the problem. Never a panic (status
//! 101), never a signal (no status at all).
//!
//! The core's own tests (`tests/tests/robustness.rs`) try every truncation and every byte of
//! an image; these check the same refusals reach the command line intact.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Map, Value};

mod common;
use common::{checkpoint, fixture, s, safetensors, scratch_dir, split_safetensors, txl, EMBEDDING};

/// Asserts that `txl args` ended as a damaged `file` should: exit status exactly 1 (not a
/// panic's 101, not a signal), stderr starting with `error: `, naming the file and, apart from
/// the file's path, `problem`; no panic.
fn assert_refused(args: &[&str], file: &Path, problem: &str, what: &str) {
    assert_failed(&txl(args), file, problem, &format!("{what}: {args:?}"));
}

/// [`assert_refused`] for a run already made.
fn assert_failed(out: &Output, file: &Path, problem: &str, what: &str) {
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {text}");
    assert!(text.starts_with("error: "), "{what}: {text}");
    assert!(!text.contains("panicked"), "{what}: {text}");
    assert!(
        text.contains(s(file)),
        "{what}: the message does not name the file: {text}"
    );
    assert!(
        text.replace(s(file), "FILE").contains(problem),
        "{what}: the message does not name {problem:?}: {text}"
    );
}

/// An image of `adaptive_div2` and its tokens.
fn small_image(dir: &Path) -> (Vec<u8>, PathBuf) {
    let image = dir.join("intact.txl");
    let src = fixture("adaptive_div2");
    let out = txl(&["convert", s(&src), "-o", s(&image)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (std::fs::read(&image).unwrap(), src.join("tokens.txt"))
}

/// Writes `damaged` to `dir/damaged.txl`; both `inspect` and `score` must refuse it, naming
/// the file and `problem`.
fn assert_image_refused(dir: &Path, damaged: &[u8], tokens: &Path, problem: &str, what: &str) {
    let path = dir.join("damaged.txl");
    std::fs::write(&path, damaged).unwrap();
    assert_refused(&["inspect", s(&path)], &path, problem, what);
    let score = ["score", s(&path), "--tokens", s(tokens)];
    assert_refused(&score, &path, problem, what);
}

#[test]
fn truncated_images_are_refused() {
    let dir = scratch_dir("truncated");
    let (image, tokens) = small_image(&dir);
    let len = image.len();
    // Inside the magic, just past the version, inside and at the end of the header (128),
    // inside the directory (80-byte entries), in the payloads, and without the CRC's bytes.
    for cut in [
        0,
        4,
        11,
        12,
        64,
        128,
        131,
        128 + 5 * 80 + 7,
        len / 2,
        len - 4,
        len - 1,
    ] {
        let what = format!("cut to {cut} of {len} bytes");
        assert_image_refused(&dir, &image[..cut], &tokens, "truncated", &what);
    }
}

#[test]
fn a_flipped_byte_is_caught_by_the_crc() {
    let dir = scratch_dir("flipped");
    let (image, tokens) = small_image(&dir);
    let len = image.len();
    // The magic, the version and the length are read before the CRC (FORMAT.md, "What
    // `parse` checks"); every other byte only the CRC covers.
    let mut flips = vec![(0, "bad magic"), (8, "version"), (12, "truncated")];
    for at in [
        24,
        60,
        100,
        116,
        128,
        128 + 48,
        128 + 80 * 7 + 60,
        4000,
        len / 2,
        len - 5,
    ] {
        flips.push((at, "checksum mismatch"));
    }
    flips.push((len - 1, "checksum mismatch")); // the CRC itself
    for (at, problem) in flips {
        let mut damaged = image.clone();
        damaged[at] ^= 0x01;
        assert_image_refused(&dir, &damaged, &tokens, problem, &format!("byte {at} flipped"));
    }
}

/// `bytes` with the CRC-32 of all but its last 4 bytes written into those (`core/FORMAT.md`).
fn reseal(bytes: &mut [u8]) {
    let end = bytes.len() - 4;
    let crc = txl_core::crc32(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn damage_behind_a_recomputed_crc_is_caught_by_the_structure_checks() {
    let dir = scratch_dir("resealed");
    let (image, tokens) = small_image(&dir);
    // The first directory entry starts at 128.
    let entry = 128;
    #[rustfmt::skip]
    let damage: [(&str, usize, u8, &str); 17] = [
        ("format_version", 8, 0x01, "version"),
        ("image_bytes", 12, 0x01, "truncated"),
        ("tensor_count", 16, 0x01, "the config needs"),
        ("directory_offset", 20, 0x10, "malformed image header"),
        ("d_model (odd)", 28, 0x01, "d_model must be even"),
        ("n_layer", 48, 0x01, "the config needs"),
        ("n_cutoffs", 56, 0x01, "cutoffs"),
        ("flags: tie_weight", 92, 0x01, "the config needs"),
        ("flags: an unused bit", 92, 0x80, "malformed image header"),
        ("reserved header bytes", 116, 0x01, "malformed image header"),
        ("entry name", entry, 0x01, "should be `word_emb.emb_layers.0.weight`"),
        ("entry dtype", entry + 48, 0x01, "lies outside the image or is misaligned"),
        ("entry ndim", entry + 49, 0x01, "has the wrong shape"),
        ("entry dim0", entry + 52, 0x01, "has the wrong shape"),
        ("entry data_offset", entry + 60, 0x10, "lies outside the image or is misaligned"),
        ("entry data_bytes", entry + 64, 0x04, "lies outside the image or is misaligned"),
        ("entry reserved bytes", entry + 76, 0x01, "has the wrong shape"),
    ];
    for (field, at, flip, problem) in damage {
        let mut damaged = image.clone();
        damaged[at] ^= flip;
        reseal(&mut damaged);
        let what = format!("{field} (byte {at} ^ {flip:#04x}) with a valid CRC");
        assert_image_refused(&dir, &damaged, &tokens, problem, &what);
    }
}

/// `txl convert ckpt` must be refused, naming `file` and `problem`, and write no image.
fn assert_convert_refused(ckpt: &Path, file: &Path, problem: &str, what: &str) {
    let out = ckpt.join("out.txl");
    let _ = std::fs::remove_file(&out);
    assert_refused(&["convert", s(ckpt), "-o", s(&out)], file, problem, what);
    assert!(!out.exists(), "{what}: an image was written");
}

#[test]
fn truncated_safetensors_are_refused() {
    let dir = scratch_dir("safetensors-truncated");
    let ckpt = checkpoint(&dir, "ckpt", "model.safetensors");
    let path = ckpt.join("model.safetensors");
    let intact = std::fs::read(&path).unwrap();
    let header = u64::from_le_bytes(intact[..8].try_into().unwrap()) as usize;
    let len = intact.len();
    // Inside the length, inside and at the end of the JSON header, inside the tensors.
    for cut in [
        0,
        4,
        8,
        8 + header / 2,
        8 + header,
        8 + header + 1,
        len / 2,
        len - 1,
    ] {
        std::fs::write(&path, &intact[..cut]).unwrap();
        assert_convert_refused(&ckpt, &path, "", &format!("safetensors cut to {cut}"));
    }
}

#[test]
fn absurd_safetensors_headers_are_refused() {
    let dir = scratch_dir("safetensors-header");
    let ckpt = checkpoint(&dir, "ckpt", "model.safetensors");
    let path = ckpt.join("model.safetensors");
    let intact = std::fs::read(&path).unwrap();
    let (header, data) = split_safetensors(&intact);
    // The tensor whose bytes come last.
    let last = header
        .iter()
        .filter_map(|(name, info)| Some((info.get("data_offsets")?[1].as_u64()?, name.clone())))
        .max()
        .unwrap()
        .1;

    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    let mut edit = |what, change: &dyn Fn(&mut Map<String, Value>), problem| {
        let mut header = header.clone();
        change(&mut header);
        cases.push((what, safetensors(&header, &data), problem));
    };
    edit(
        "a shape of 2^80 elements",
        &|h| h[EMBEDDING]["shape"] = serde_json::json!([1u64 << 40, 1u64 << 40]),
        "invalid safetensors header",
    );
    edit(
        "the last tensor 10^15 bytes long",
        &|h| {
            let start = h[&last]["data_offsets"][0].as_u64().unwrap();
            h[&last]["shape"] = serde_json::json!([250_000_000_000_000u64]);
            h[&last]["data_offsets"][1] = (start + 1_000_000_000_000_000).into();
        },
        "truncated or corrupt",
    );
    edit(
        "overlapping offsets",
        &|h| {
            let start = h[EMBEDDING]["data_offsets"][0].as_u64().unwrap();
            h[EMBEDDING]["data_offsets"][0] = (start + 4).into();
        },
        "invalid safetensors header",
    );
    edit(
        "an unknown dtype",
        &|h| h[EMBEDDING]["dtype"] = "Q7".into(),
        "invalid safetensors header",
    );
    edit(
        "an integer dtype",
        &|h| h[EMBEDDING]["dtype"] = "I32".into(),
        "element type I32",
    );
    edit(
        "the shape transposed",
        &|h| h[EMBEDDING]["shape"] = serde_json::json!([32, 40]),
        "config.json implies [40, 32]",
    );
    let mut huge_length = intact.clone();
    huge_length[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    cases.push((
        "a header length past the end",
        huge_length,
        "not a valid safetensors file",
    ));
    let mut flipped = intact.clone();
    flipped[9] ^= 0x80; // inside the JSON
    cases.push((
        "a byte of the header flipped",
        flipped,
        "invalid safetensors header",
    ));

    for (what, bytes, problem) in cases {
        std::fs::write(&path, bytes).unwrap();
        assert_convert_refused(&ckpt, &path, problem, what);
    }
}

/// Offsets that add up to nearly 2^64 bytes: the reader adds them to the header's length.
#[test]
fn safetensors_offsets_near_the_address_space_are_refused() {
    let dir = scratch_dir("safetensors-overflow");
    let ckpt = checkpoint(&dir, "ckpt", "model.safetensors");
    let path = ckpt.join("model.safetensors");
    let mut header = Map::new();
    let size = (1u64 << 61) - 1; // a U8 tensor of this many bytes still passes the crate's checks
    for i in 0..8 {
        let offsets = serde_json::json!([i * size, (i + 1) * size]);
        header.insert(
            format!("t{i}"),
            serde_json::json!({"dtype": "U8", "shape": [size], "data_offsets": offsets}),
        );
    }
    std::fs::write(&path, safetensors(&header, &[])).unwrap();
    assert_convert_refused(&ckpt, &path, "", "offsets near 2^64");
}

#[test]
fn truncated_pytorch_checkpoints_are_refused() {
    let dir = scratch_dir("bin-truncated");
    let ckpt = checkpoint(&dir, "ckpt", "pytorch_model.bin");
    let path = ckpt.join("pytorch_model.bin");
    let intact = std::fs::read(&path).unwrap();
    let len = intact.len();
    // Inside the first local header, in the entries, in the central directory, and the last
    // 22 bytes (the end of central directory record).
    for cut in [
        0,
        1,
        4,
        30,
        100,
        len / 4,
        len / 2,
        len - 1000,
        len - 100,
        len - 22,
        len - 1,
    ] {
        std::fs::write(&path, &intact[..cut]).unwrap();
        assert_convert_refused(&ckpt, &path, "", &format!("pytorch_model.bin cut to {cut}"));
    }
}

fn u16_at(bytes: &[u8], at: usize) -> usize {
    u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
}

/// The entries of a ZIP archive as (name, offset of the local header, offset and length of the
/// stored contents), read from its central directory.
fn zip_entries(zip: &[u8]) -> Vec<(String, usize, usize, usize)> {
    let end = zip.windows(4).rposition(|w| w == b"PK\x05\x06").unwrap();
    let (count, mut at) = (u16_at(zip, end + 10), u32_at(zip, end + 16));
    let mut entries = Vec::new();
    for _ in 0..count {
        assert_eq!(&zip[at..at + 4], b"PK\x01\x02");
        let (size, name_len) = (u32_at(zip, at + 20), u16_at(zip, at + 28));
        let skip = name_len + u16_at(zip, at + 30) + u16_at(zip, at + 32);
        let local = u32_at(zip, at + 42);
        let name = String::from_utf8_lossy(&zip[at + 46..at + 46 + name_len]).into_owned();
        let contents = local + 30 + u16_at(zip, local + 26) + u16_at(zip, local + 28);
        entries.push((name, local, contents, size));
        at += 46 + skip;
    }
    entries
}

/// A byte of the pickle or of a tensor flipped fails the entry's CRC-32; a damaged record of
/// the archive fails to read. Only the storage of a buffer the converter never reads
/// (`transformer.pos_emb.inv_freq`, which the model computes) may be damaged unnoticed, and
/// then the image is the intact one. (Flips in what the reader never uses, such as a local
/// header's copy of the sizes, leave the weights intact too, so they are not tried here.)
#[test]
fn flipped_pytorch_checkpoints_are_refused() {
    let dir = scratch_dir("bin-flipped");
    let ckpt = checkpoint(&dir, "ckpt", "pytorch_model.bin");
    let path = ckpt.join("pytorch_model.bin");
    let image = ckpt.join("out.txl");
    let convert = || {
        let _ = std::fs::remove_file(&image);
        txl(&["convert", s(&ckpt), "-o", s(&image)])
    };
    assert!(convert().status.success());
    let converted = std::fs::read(&image).unwrap();

    let intact = std::fs::read(&path).unwrap();
    let entries = zip_entries(&intact);
    let mut flips = Vec::new();
    for (name, local, contents, size) in &entries {
        if name.ends_with("data.pkl") || name.contains("/data/") {
            for at in [*contents, contents + size / 2, contents + size - 1] {
                flips.push((name.clone(), format!("{name} byte {}", at - contents), at));
            }
        }
        if name.ends_with("data.pkl") {
            flips.push((name.clone(), format!("{name}'s local header signature"), *local));
        }
    }
    assert!(flips.len() > 3 * 20, "{} entries", entries.len());
    let central = intact.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    flips.push((String::new(), "the central directory's signature".into(), central));
    let end = intact.windows(4).rposition(|w| w == b"PK\x05\x06").unwrap();
    flips.push((String::new(), "the end record's signature".into(), end));

    let mut unread = std::collections::BTreeSet::new();
    for (entry, what, at) in flips {
        let mut damaged = intact.clone();
        damaged[at] ^= 0x01;
        std::fs::write(&path, damaged).unwrap();
        let out = convert();
        if out.status.success() && entry.contains("/data/") {
            let image = std::fs::read(&image).unwrap();
            assert!(image == converted, "flipped {what}: another image");
            unread.insert(entry);
        } else {
            assert_failed(&out, &path, "", &format!("flipped {what}"));
            assert!(!image.exists(), "flipped {what}: an image was written");
        }
    }
    assert!(unread.len() <= 1, "damage in {unread:?} went unnoticed");
}

#[test]
fn broken_configs_are_refused_naming_the_field() {
    let dir = scratch_dir("config");
    let ckpt = checkpoint(&dir, "ckpt", "model.safetensors");
    let path = ckpt.join("config.json");
    let intact = std::fs::read_to_string(&path).unwrap();
    let config: Map<String, Value> = serde_json::from_str(&intact).unwrap();
    let mut cases: Vec<(String, String, &str)> = Vec::new();
    for (field, value) in [
        ("n_layer", Value::from("2")),
        ("d_model", Value::from(24.5)),
        ("n_head", Value::from(-2)),
        ("cutoffs", Value::from("40,120")),
        ("same_length", Value::from("no")),
    ] {
        let mut broken = config.clone();
        broken.insert(field.to_string(), value.clone());
        let what = format!("`{field}`: {value}");
        cases.push((what, serde_json::to_string(&broken).unwrap(), field));
    }
    for field in ["d_model", "n_head", "cutoffs", "vocab_size"] {
        let mut broken = config.clone();
        broken.remove(field);
        let what = format!("no `{field}`");
        cases.push((what, serde_json::to_string(&broken).unwrap(), field));
    }
    let what = "cut in half".to_string();
    cases.push((what, intact[..intact.len() / 2].to_string(), "not valid JSON"));

    for (what, text, problem) in cases {
        std::fs::write(&path, text).unwrap();
        assert_convert_refused(&ckpt, &path, problem, &format!("config.json {what}"));
    }
}

#[test]
fn a_missing_tensor_is_named() {
    let dir = scratch_dir("missing");
    let ckpt = checkpoint(&dir, "ckpt", "model.safetensors");
    let path = ckpt.join("model.safetensors");
    let (header, data) = split_safetensors(&std::fs::read(&path).unwrap());
    let missing = "transformer.layers.1.dec_attn.o_net.weight";

    // Every other tensor, packed again from offset 0.
    let mut tensors: Vec<(&String, &Value)> = header
        .iter()
        .filter(|(name, info)| *name != missing && info.get("data_offsets").is_some())
        .collect();
    tensors.sort_by_key(|(_, info)| info["data_offsets"][0].as_u64());
    let (mut kept, mut packed) = (Map::new(), Vec::new());
    for (name, info) in tensors {
        let offsets = &info["data_offsets"];
        let (start, end) = (offsets[0].as_u64().unwrap(), offsets[1].as_u64().unwrap());
        let mut info = info.clone();
        info["data_offsets"] = serde_json::json!([packed.len(), packed.len() as u64 + end - start]);
        packed.extend_from_slice(&data[start as usize..end as usize]);
        kept.insert(name.clone(), info);
    }
    std::fs::write(&path, safetensors(&kept, &packed)).unwrap();
    assert_convert_refused(&ckpt, &path, missing, "a missing tensor");
}

//! The worst sizes a file or an option can ask for, through the `txl` command: model image
//! headers whose defaults need terabytes (behind a valid CRC), session options and counts near
//! their types' limits, safetensors headers and PyTorch archives whose claims exceed the file,
//! and configs that describe models no image can hold. Each run must end with exit status 1 (not
//! a panic's 101, not a signal) and one `error: ` message that names the size and where it came
//! from, and must write nothing; or, where the size is harmless, run as usual.
//!
//! Nothing here allocates what it is refused: the models are small, only their sessions are
//! not (`wide_image`: 4 layers of 16 heads of 128, so each remembered position costs 128 KiB).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Map, Value};
use txl_core::random_model::RandomModel;
use txl_core::Config;

mod common;
use common::{checkpoint, s, safetensors, scratch_dir, skipped, stderr, txl, EMBEDDING};

/// Asserts that a run was refused: exit status exactly 1, stderr one `error: ` message with
/// every one of `names` in it, and no panic.
fn assert_refused(out: &Output, names: &[&str], what: &str) {
    let text = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{what}: {text}");
    assert!(text.starts_with("error: "), "{what}: {text}");
    let errors = text.lines().filter(|line| line.starts_with("error: ")).count();
    assert_eq!(errors, 1, "{what}: {text}");
    assert!(!text.contains("panicked"), "{what}: {text}");
    for name in names {
        assert!(
            text.contains(name),
            "{what}: the message does not name {name:?}: {text}"
        );
    }
}

/// Asserts that a run succeeded.
fn assert_ran(out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(out));
}

/// A model with a plain embedding and softmax (no cutoffs, tied, post-LayerNorm) of these
/// sizes (`d_embed = d_model`), with the session defaults `(tgt_len, mem_len, clamp_len)`.
fn plain_config(
    [n_token, d_model, n_head, d_head, d_inner, n_layer]: [u32; 6],
    (tgt_len, mem_len, clamp_len): (u32, u32, u32),
) -> Config {
    Config {
        n_token,
        d_model,
        d_embed: d_model,
        n_head,
        d_head,
        d_inner,
        n_layer,
        cutoffs: [0; 8],
        n_cutoffs: 0,
        div_val: 1,
        tie_weight: true,
        tie_projs: 0,
        pre_lnorm: false,
        untie_r: true,
        layer_norm_epsilon: 1e-5,
        tgt_len,
        mem_len,
        clamp_len,
        same_length: false,
    }
}

/// A small model with wide attention (4 layers, 16 heads of 128: 2048 channels per position
/// and layer) and the session defaults given, as a model image in `dir/name`.
fn wide_image(dir: &Path, name: &str, tgt_len: u32, mem_len: u32, clamp_len: u32) -> PathBuf {
    let config = plain_config([64, 8, 16, 128, 8, 4], (tgt_len, mem_len, clamp_len));
    write_model(dir, name, &config)
}

/// `config` with random weights (only the sizes matter here), as a model image in `dir/name`.
fn write_model(dir: &Path, name: &str, config: &Config) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, RandomModel::new(config, 1).image().unwrap()).unwrap();
    path
}

/// Eight token ids below 64, in `dir/tokens.txt`.
fn tokens_file(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.txt");
    std::fs::write(&path, "1 7 3 60 5 2 9 33").unwrap();
    path
}

/// Image headers whose defaults ask for terabytes of session: `inspect` describes them (it
/// computes the arena, it does not allocate it), and everything that would run a session
/// refuses, naming the defaults, and writes nothing.
#[test]
fn absurd_header_defaults_behind_a_valid_crc() {
    let dir = scratch_dir("header");
    let tokens = tokens_file(&dir);
    let out = dir.join("logp.npy");
    let max = u32::MAX;
    for (tgt_len, mem_len, clamp_len) in [
        (4_000_000_000, 4, 0),
        (4, 4_000_000_000, 0),
        (4, 40_000_000, max),
        (max, max, max),
    ] {
        let image = wide_image(&dir, "header.txl", tgt_len, mem_len, clamp_len);
        let what = format!("header tgt_len {tgt_len}, mem_len {mem_len}, clamp_len {clamp_len}");
        let inspect = txl(&["inspect", s(&image)]);
        assert_ran(&inspect, &what);
        let text = String::from_utf8_lossy(&inspect.stdout);
        assert!(
            text.contains(&format!(
                "tgt_len {tgt_len}  mem_len {mem_len}  clamp_len {clamp_len}"
            )),
            "{what}: {text}"
        );

        let sizes = format!("tgt_len {tgt_len}, mem_len {mem_len}");
        #[rustfmt::skip]
        let commands: [&[&str]; 6] = [
            &["score", s(&image), "--tokens", s(&tokens), "--out", s(&out)],
            &["score", s(&image), "--tokens", s(&tokens), "--backend", "cpu32", "--out", s(&out)],
            &["generate", s(&image), "--prompt-tokens", "1 2 3", "--length", "4"],
            &["compare", s(&image), s(&image), "--tokens", s(&tokens)],
            &["eval", s(&image), "--text", s(&tokens), "--backend", "cpu32", "--batch", "2"],
            &["bench", s(&image), "--tokens", "8"],
        ];
        for args in commands {
            assert_refused(&txl(args), &[&sizes, "bytes"], &format!("{what}: {args:?}"));
            assert!(!out.exists(), "{what}: {args:?} wrote {}", out.display());
        }
    }
}

/// `--mem-len` and `--tgt-len` near u32's limit are refused by every command that would run a
/// session, naming them; `inspect` reports them.
#[test]
fn huge_session_options_are_refused_naming_them() {
    let dir = scratch_dir("session");
    let image = wide_image(&dir, "wide.txl", 4, 4, 0);
    let tokens = tokens_file(&dir);
    let out = dir.join("logp.npy");
    for (flag, value) in [("--mem-len", "40000000"), ("--tgt-len", "4000000000")] {
        let name = format!("{}_len {value}", &flag[2..5]);
        #[rustfmt::skip]
        let commands: [&[&str]; 7] = [
            &["score", s(&image), "--tokens", s(&tokens), "--out", s(&out)],
            &["score", s(&image), "--tokens", s(&tokens), "--backend", "cpu", "--out", s(&out)],
            &["score", s(&image), "--tokens", s(&tokens), "--mem-dtype", "int8", "--out", s(&out)],
            &["generate", s(&image), "--prompt-tokens", "1 2 3", "--length", "4"],
            &["compare", s(&image), s(&image), "--tokens", s(&tokens)],
            &["eval", s(&image), "--text", s(&tokens), "--backend", "cpu32", "--batch", "1000"],
            &["bench", s(&image), "--tokens", "8"],
        ];
        for command in commands {
            let mut args = command.to_vec();
            args.extend([flag, value]);
            assert_refused(&txl(&args), &[&name, "bytes"], &format!("{args:?}"));
            assert!(!out.exists(), "{args:?} wrote {}", out.display());
        }
        let inspect = txl(&["inspect", s(&image), flag, value]);
        assert_ran(&inspect, &format!("inspect {flag} {value}"));
        assert!(String::from_utf8_lossy(&inspect.stdout).contains(&name));
    }
}

/// Counts no machine can hold (`generate --length`, `bench --tokens`) are refused naming the
/// option, before anything is allocated; counts that only cap something smaller
/// (`eval --batch`, `score --rows`, `quantize --calib-limit`) run as usual.
#[test]
fn huge_counts_are_refused_or_harmless() {
    let dir = scratch_dir("counts");
    let image = wide_image(&dir, "wide.txl", 4, 4, 0);
    let tokens = tokens_file(&dir);

    let length = "10000000000000";
    let args = [
        "generate",
        s(&image),
        "--prompt-tokens",
        "1 2",
        "--length",
        length,
    ];
    assert_refused(&txl(&args), &[&format!("--length {length}"), "bytes"], "--length");
    let length = u64::MAX.to_string();
    let args = [
        "generate",
        s(&image),
        "--prompt-tokens",
        "1",
        "--length",
        &length,
        "--ids",
    ];
    assert_refused(
        &txl(&args),
        &[&format!("--length {length}"), "overflow"],
        "--length max",
    );
    let count = "10000000000000";
    let args = ["bench", s(&image), "--tokens", count];
    assert_refused(&txl(&args), &[&format!("--tokens {count}"), "bytes"], "--tokens");

    // The text gives 7 predictions, so at most 7 streams, whatever --batch says.
    let eval = txl(&[
        "eval",
        s(&image),
        "--text",
        s(&tokens),
        "--backend",
        "cpu32",
        "--batch",
        "1000000000000000000",
        "--json",
    ]);
    assert_ran(&eval, "eval --batch 10^18");
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert_eq!(report["streams"], 7, "{report}");

    let rows = dir.join("rows.npy");
    let score = txl(&[
        "score",
        s(&image),
        "--tokens",
        s(&tokens),
        "--rows",
        "1000000000000000",
        "--rows-out",
        s(&rows),
    ]);
    assert_ran(&score, "score --rows 10^15");
    // 8 rows of 64 values after a 128-byte header.
    assert_eq!(std::fs::metadata(&rows).unwrap().len(), 128 + 8 * 64 * 4);

    let quantized = dir.join("int8.txl");
    let quantize = txl(&[
        "quantize",
        s(&image),
        "-o",
        s(&quantized),
        "--calib-tokens",
        s(&tokens),
        "--calib-limit",
        "1000000000000000",
        "--smooth",
        "off",
    ]);
    assert_ran(&quantize, "quantize --calib-limit 10^15");
    assert!(quantized.exists());
}

/// `compare` keeps the reference's log-probability rows of a segment: with a vocabulary of
/// 2^20 and segments of 10^6 tokens that is 4 TiB, refused before the sessions start (their
/// arenas are small: one layer two wide, no memory).
#[test]
fn compare_rows_beyond_memory_are_refused() {
    let dir = scratch_dir("compare");
    // a vocabulary of 2^20, one layer two wide
    let config = plain_config([1 << 20, 2, 1, 2, 2, 1], (4, 0, 0));
    let image = write_model(&dir, "vocabulary.txl", &config);
    let tokens = dir.join("tokens.txt");
    std::fs::write(&tokens, "7 ".repeat(1_000_000)).unwrap();
    #[rustfmt::skip]
    let args = ["compare", s(&image), s(&image), "--tokens", s(&tokens),
        "--tgt-len", "1000000", "--mem-len", "0", "--clamp-len", "1"];
    let names = [
        "tgt_len 1000000",
        "1000000 tokens",
        "n_token 1048576",
        "4194304000000 bytes",
    ];
    assert_refused(&txl(&args), &names, "compare --tgt-len 10^6");

    // `score --rows` keeps as many rows as there are tokens: 4 TiB again, for each backend.
    let rows_out = dir.join("rows.npy");
    for backend in ["core", "cpu32"] {
        #[rustfmt::skip]
        let args = ["score", s(&image), "--tokens", s(&tokens), "--backend", backend,
            "--rows", "1000000000000000", "--rows-out", s(&rows_out)];
        let names = ["--rows 1000000000000000", "1048576 log-probabilities"];
        assert_refused(
            &txl(&args),
            &names,
            &format!("score --backend {backend} --rows 10^15"),
        );
        assert!(!rows_out.exists(), "score --rows: a rows file was written");
    }
}

/// `txl convert ckpt` is refused naming every one of `names`, and writes no image.
fn assert_convert_refused(ckpt: &Path, names: &[&str], what: &str) {
    let image = ckpt.join("out.txl");
    let _ = std::fs::remove_file(&image);
    let out = txl(&["convert", s(ckpt), "-o", s(&image)]);
    assert_refused(&out, names, what);
    assert!(!image.exists(), "{what}: an image was written");
}

/// Safetensors headers whose header length, shapes or offsets claim more than the file holds:
/// the message names the tensor (or the header), what it claims and what the file holds.
#[test]
fn safetensors_claims_beyond_the_file_are_named() {
    let dir = scratch_dir("safetensors");
    let ckpt = checkpoint(&dir, "ckpt", "model.safetensors");
    let path = ckpt.join("model.safetensors");
    let intact = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(intact[..8].try_into().unwrap()) as usize;
    let header: Map<String, Value> = serde_json::from_slice(&intact[8..8 + header_len]).unwrap();
    let data = &intact[8 + header_len..];
    let data_len = data.len().to_string();
    let file_len = intact.len().to_string();
    let start = header[EMBEDDING]["data_offsets"][0].as_u64().unwrap();

    for (claimed, limit) in [(u64::MAX, file_len.as_str()), (99_000_000, file_len.as_str())] {
        let mut bytes = intact.clone();
        bytes[..8].copy_from_slice(&claimed.to_le_bytes());
        std::fs::write(&path, bytes).unwrap();
        let what = format!("header length {claimed}");
        assert_convert_refused(&ckpt, &[s(&path), &what, limit], &what);
    }

    let mut cases: Vec<(&str, Value, Vec<&str>)> = Vec::new();
    cases.push((
        "a shape of 2^80 elements",
        json!({"dtype": "F32", "shape": [1u64 << 40, 1u64 << 40], "data_offsets": [start, start + 5120]}),
        vec![
            "1208925819614629174706176 elements",
            "4835703278458516698824704 bytes",
            "span 5120",
        ],
    ));
    cases.push((
        "10^15 bytes past the end",
        json!({"dtype": "F32", "shape": [250_000_000_000_000u64], "data_offsets": [start, start + 1_000_000_000_000_000]}),
        vec!["1000000000000000 bytes", "truncated or corrupt", &data_len],
    ));
    cases.push((
        "a shape of u64::MAX elements",
        json!({"dtype": "F64", "shape": [u64::MAX], "data_offsets": [start, start + 5120]}),
        vec!["18446744073709551615 elements", "147573952589676412920 bytes"],
    ));
    cases.push((
        "offsets that run backwards",
        json!({"dtype": "F32", "shape": [40, 32], "data_offsets": [start + 5120, start]}),
        vec!["run backwards", "5120 bytes"],
    ));
    for (what, entry, mut names) in cases {
        let mut header = header.clone();
        header[EMBEDDING] = entry;
        std::fs::write(&path, safetensors(&header, data)).unwrap();
        names.extend([s(&path), EMBEDDING]);
        assert_convert_refused(&ckpt, &names, what);
    }
}

/// A pickle (protocol 2) of a dict holding one float32 tensor, as `torch.save(state_dict)`
/// writes it: `key`, viewing storage `0` (declared `elements` long) with `shape` and `stride`.
fn pickle(key: &str, elements: u64, shape: &[u64], stride: &[u64]) -> Vec<u8> {
    fn text(out: &mut Vec<u8>, s: &str) {
        out.push(b'X'); // BINUNICODE
        out.extend((s.len() as u32).to_le_bytes());
        out.extend(s.as_bytes());
    }
    fn int(out: &mut Vec<u8>, n: u64) {
        out.push(0x8a); // LONG1
        out.push(9);
        out.extend(n.to_le_bytes());
        out.push(0);
    }
    fn tuple(out: &mut Vec<u8>, items: &[u64]) {
        out.push(b'('); // MARK
        for &n in items {
            int(out, n);
        }
        out.push(b't'); // TUPLE
    }
    let mut out = vec![0x80, 2, b'}', b'(']; // PROTO 2, EMPTY_DICT, MARK
    text(&mut out, key);
    out.extend(b"ctorch._utils\n_rebuild_tensor_v2\n(("); // GLOBAL, MARK, MARK
    text(&mut out, "storage");
    out.extend(b"ctorch\nFloatStorage\n");
    text(&mut out, "0");
    text(&mut out, "cpu");
    int(&mut out, elements);
    out.extend(b"tQ"); // TUPLE, BINPERSID
    int(&mut out, 0);
    tuple(&mut out, shape);
    tuple(&mut out, stride);
    out.extend(b"\x89ccollections\nOrderedDict\n)RtR"); // False, OrderedDict(), the call
    out.extend(b"u."); // SETITEMS, STOP
    out
}

/// A ZIP archive of `entries`, stored uncompressed as `torch.save` writes them.
fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let (mut out, mut central) = (Vec::new(), Vec::new());
    for (name, data) in entries {
        let offset = out.len() as u32;
        let sizes = [txl_core::crc32(data), data.len() as u32, data.len() as u32];
        let sizes: Vec<u8> = sizes.iter().flat_map(|n| n.to_le_bytes()).collect();
        // Local header: signature, version 20, flags, stored, time, date, CRC and sizes,
        // name length, no extra field.
        out.extend(b"PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x00\x00");
        out.extend(&sizes);
        out.extend((name.len() as u16).to_le_bytes());
        out.extend([0, 0]);
        out.extend(name.as_bytes());
        out.extend(*data);
        // Central directory entry: as above, then no comment, disk 0, no attributes, offset.
        central.extend(b"PK\x01\x02\x14\x00\x14\x00\x00\x00\x00\x00\x00\x00\x00\x00");
        central.extend(&sizes);
        central.extend((name.len() as u16).to_le_bytes());
        central.extend([0; 12]);
        central.extend(offset.to_le_bytes());
        central.extend(name.as_bytes());
    }
    let count = (entries.len() as u16).to_le_bytes();
    let (central_len, central_at) = (central.len() as u32, out.len() as u32);
    out.extend(central);
    out.extend(b"PK\x05\x06\x00\x00\x00\x00");
    out.extend(count);
    out.extend(count);
    out.extend(central_len.to_le_bytes());
    out.extend(central_at.to_le_bytes());
    out.extend([0, 0]);
    out
}

/// A checkpoint directory `dir/name` holding `config` and a `pytorch_model.bin` of `pickled`
/// tensors and `storages`.
fn torch_checkpoint(
    dir: &Path,
    name: &str,
    config: Value,
    pickled: &[u8],
    storages: &[(&str, &[u8])],
) -> PathBuf {
    let ckpt = dir.join(name);
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::write(ckpt.join("config.json"), config.to_string()).unwrap();
    let mut entries: Vec<(String, &[u8])> = vec![("archive/data.pkl".into(), pickled)];
    for (key, bytes) in storages {
        entries.push((format!("archive/data/{key}"), bytes));
    }
    entries.push(("archive/version".into(), b"3\n"));
    let entries: Vec<(&str, &[u8])> = entries.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    std::fs::write(ckpt.join("pytorch_model.bin"), zip(&entries)).unwrap();
    ckpt
}

/// A config for a one-layer model of `vocab_size` tokens and width `d_model` everywhere.
fn tiny_config(vocab_size: u64, d_model: u64) -> Value {
    json!({
        "vocab_size": vocab_size, "d_model": d_model, "d_embed": d_model, "n_head": 1,
        "d_head": d_model, "d_inner": d_model, "n_layer": 1, "cutoffs": [], "div_val": 1
    })
}

/// PyTorch archives whose storages claim more than the file holds: ZIP entries declaring 2 GiB
/// each, a `data.pkl` declaring 2 GiB, a tensor that a stride-0 view makes 25 MB from one
/// stored float, and a pickle declaring a storage of 10^12 floats behind a 4-byte entry.
#[test]
fn pytorch_storages_beyond_the_file_are_refused() {
    let dir = scratch_dir("pytorch");
    let ckpt = checkpoint(&dir, "ckpt", "pytorch_model.bin");
    let path = ckpt.join("pytorch_model.bin");
    let intact = std::fs::read(&path).unwrap();
    let file_len = intact.len().to_string();

    // Each entry's sizes, in its central directory record (at +20) and local header (at +18).
    let end = intact.windows(4).rposition(|w| w == b"PK\x05\x06").unwrap();
    let u32_at = |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u16_at = |bytes: &[u8], at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
    let mut records = Vec::new();
    let mut at = u32_at(&intact, end + 16) as usize;
    for _ in 0..u16_at(&intact, end + 10) {
        let name_len = u16_at(&intact, at + 28);
        let name = String::from_utf8_lossy(&intact[at + 46..at + 46 + name_len]).into_owned();
        records.push((name, at, u32_at(&intact, at + 42) as usize));
        at += 46 + name_len + u16_at(&intact, at + 30) + u16_at(&intact, at + 32);
    }
    let claim = |names: &dyn Fn(&str) -> bool| {
        let mut bytes = intact.clone();
        for (_, central, local) in records.iter().filter(|(name, _, _)| names(name)) {
            bytes[central + 20..central + 28].copy_from_slice(&[0xf0, 0xff, 0xff, 0x7f].repeat(2));
            bytes[local + 18..local + 26].copy_from_slice(&[0xf0, 0xff, 0xff, 0x7f].repeat(2));
        }
        bytes
    };
    let storages = records
        .iter()
        .filter(|(name, _, _)| name.contains("/data/"))
        .count();
    let first = claim(&|name| name.ends_with("/data/0"));
    let every = claim(&|name| name.contains("/data/"));
    let pickle_entry = claim(&|name| name.ends_with("data.pkl"));
    let every_total = (storages as u64 * 0x7fff_fff0).to_string();
    for (what, bytes, names) in [
        (
            "one storage claiming 2 GiB",
            first,
            vec!["claim", "bytes", &file_len],
        ),
        (
            "every storage claiming 2 GiB",
            every,
            vec!["claim", &every_total, &file_len],
        ),
        ("data.pkl claiming 2 GiB", pickle_entry, vec!["2147483632"]),
    ] {
        std::fs::write(&path, bytes).unwrap();
        let mut names = names;
        names.push(s(&path));
        assert_convert_refused(&ckpt, &names, what);
    }

    // An embedding of 100000 x 64 floats from one stored float: 25.6 MB from a file of 1 kB.
    let pickled = pickle(EMBEDDING, 1, &[100_000, 64], &[0, 0]);
    let one_float = 1.5f32.to_le_bytes();
    let ckpt = torch_checkpoint(
        &dir,
        "view",
        tiny_config(100_000, 64),
        &pickled,
        &[("0", &one_float)],
    );
    let path = ckpt.join("pytorch_model.bin");
    let file_len = std::fs::metadata(&path).unwrap().len().to_string();
    let names = [s(&path), EMBEDDING, "[100000, 64]", "25600000 bytes", &file_len];
    assert_convert_refused(&ckpt, &names, "a stride-0 view of 25.6 MB");

    // A storage of 10^12 floats, of which the archive holds one.
    let pickled = pickle(EMBEDDING, 1_000_000_000_000, &[4, 2], &[2, 1]);
    let ckpt = torch_checkpoint(&dir, "storage", tiny_config(4, 2), &pickled, &[("0", &one_float)]);
    let path = ckpt.join("pytorch_model.bin");
    assert_convert_refused(&ckpt, &[s(&path), EMBEDDING], "a storage of 10^12 floats");
}

/// Fields of a config.json and the values they are given.
type Edits<'a> = &'a [(&'a str, Value)];

/// Configs whose sizes no model image can hold, next to a small weights file: refused before
/// a weight is read, naming the sizes and config.json.
#[test]
fn configs_beyond_a_model_image_are_refused_before_reading() {
    let dir = scratch_dir("config");
    for weights in ["model.safetensors", "pytorch_model.bin"] {
        let ckpt = checkpoint(&dir, weights, weights);
        let path = ckpt.join("config.json");
        let intact: Map<String, Value> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        #[rustfmt::skip]
        let cases: [(Edits, &[&str]); 5] = [
            (&[("vocab_size", json!(1_000_000_000_000u64))], &["`vocab_size`", "1000000000000"]),
            (&[("vocab_size", json!(4_000_000_000u64))], &["n_token 4000000000", "overflow"]),
            (&[("vocab_size", json!(16_000_000)), ("d_embed", json!(1024))],
                &["n_token 16000000", "d_embed 1024", "overflow"]),
            (&[("n_layer", json!(65536)), ("d_inner", json!(1_000_000))],
                &["parameters", "n_layer 65536", "d_inner 1000000", "bytes as an f32 image", "4294967295"]),
            (&[("n_layer", json!(60000)), ("d_model", json!(1024)), ("d_embed", json!(1024)),
               ("n_head", json!(16)), ("d_head", json!(64)), ("d_inner", json!(4096))],
                &["parameters", "n_layer 60000", "bytes as an f32 image"]),
        ];
        for (edits, names) in cases {
            let mut config = intact.clone();
            for (field, value) in edits {
                config.insert(field.to_string(), value.clone());
            }
            std::fs::write(&path, Value::Object(config).to_string()).unwrap();
            let mut names = names.to_vec();
            names.extend(["config.json", s(&path)]);
            assert_convert_refused(&ckpt, &names, &format!("{weights}: {edits:?}"));
        }
    }
}

/// A file longer than any model image (sparse, so it costs no disk) is refused by its length,
/// before it is read into memory.
#[cfg(unix)]
#[test]
fn a_file_longer_than_any_image_is_refused_unread() {
    use std::os::unix::fs::MetadataExt;

    let dir = scratch_dir("long");
    let path = dir.join("long.txl");
    let len = 5u64 << 30;
    std::fs::File::create(&path).unwrap().set_len(len).unwrap();
    if std::fs::metadata(&path).unwrap().blocks() * 512 >= len {
        skipped(&format!("{} does not hold sparse files", dir.display()));
        return;
    }
    let tokens = tokens_file(&dir);
    let names = [s(&path), "5368709120 bytes", "4294967295"];
    assert_refused(&txl(&["inspect", s(&path)]), &names, "inspect");
    let args = ["score", s(&path), "--tokens", s(&tokens)];
    assert_refused(&txl(&args), &names, "score");
}

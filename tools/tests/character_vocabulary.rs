//! Character models as the original code prepares them (enwik8, text8) take and give raw text.
//!
//! Each test builds a small character vocabulary the way the original `Vocab` would hold one
//! (symbols as the preparation script writes them, numbered by frequency), adds it to a
//! reference model with as many tokens, and checks that raw text read with `--bytes` (and
//! `generate --prompt`) gives the ids of the prepared corpus — written here from the raw bytes
//! by the preparation rule, one plain loop — read with `--text`, and that generated tokens
//! come out as the raw bytes their symbols stand for.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use txl_tools::vocab::{add_vocabulary, Vocabulary};

mod common;
use common::{fixture, s, scratch_dir, stderr, txl};

fn json(args: &[&str]) -> Value {
    let out = txl(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Raw text with several lines, a tab, bytes above 127 (UTF-8 `é`, `ü`) and a `~`.
const RAW: &str = "  The quick brown fox, 12 times: jumps over the lazy dog.\n\
    Caf\u{e9} M\u{fc}ller's dog\tdid not care; it slept ~ all day!\n\
    \n\
    Who knows? Nobody -- not even the fox.  \n";

/// Symbols ordered by how often `units` holds them (most often first; ties by first
/// appearance), as `Vocab.build_vocab` numbers a corpus; then `rest` in order.
fn by_frequency(units: &[String], rest: &[String]) -> Vec<String> {
    let mut count: HashMap<&String, (usize, usize)> = HashMap::new();
    for (at, unit) in units.iter().enumerate() {
        count.entry(unit).or_insert((0, at)).0 += 1;
    }
    let mut symbols: Vec<(&String, (usize, usize))> = count.into_iter().collect();
    symbols.sort_by_key(|&(_, (n, first))| (std::cmp::Reverse(n), first));
    let mut symbols: Vec<String> = symbols.into_iter().map(|(s, _)| s.clone()).collect();
    for extra in rest {
        if !symbols.contains(extra) {
            symbols.push(extra.clone());
        }
    }
    symbols
}

/// `fixture` converted, with `vocabulary` added: `dir/name.txl`, and the plain image.
fn model_with(dir: &Path, fixture_name: &str, vocabulary: &Vocabulary, name: &str) -> PathBuf {
    let plain = dir.join(format!("{name}-plain.txl"));
    let out = txl(&["convert", s(&fixture(fixture_name)), "-o", s(&plain)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let image = add_vocabulary(&std::fs::read(&plain).unwrap(), vocabulary).unwrap();
    let path = dir.join(format!("{name}.txl"));
    std::fs::write(&path, image).unwrap();
    path
}

/// Scores `raw` with `--bytes`, its prepared `symbols` with `--text` and the `expected` ids with
/// `--tokens` (files in `dir`): the same tokens, so the same digest.
fn score_three_ways(dir: &Path, model: &Path, raw: &[u8], symbols: &str, expected: &[u32]) {
    std::fs::write(dir.join("raw.txt"), raw).unwrap();
    std::fs::write(dir.join("symbols.txt"), symbols).unwrap();
    std::fs::write(dir.join("ids.txt"), id_list(expected)).unwrap();
    let score = |flag: &str, file: &str| json(&["score", s(model), flag, s(&dir.join(file)), "--json"]);
    let by_bytes = score("--bytes", "raw.txt");
    assert_eq!(by_bytes["tokens"], expected.len());
    assert_eq!(
        by_bytes["digest"],
        score("--text", "symbols.txt")["digest"],
        "--bytes vs --text"
    );
    assert_eq!(
        by_bytes["digest"],
        score("--tokens", "ids.txt")["digest"],
        "--bytes vs --tokens"
    );
}

/// The prepared corpus as `prep_enwik8.py` writes it: each byte's decimal value, joined by
/// spaces, a newline byte as a line break.
fn prep_enwik8(raw: &[u8]) -> String {
    let units: Vec<String> = raw
        .iter()
        .map(|&b| {
            if b == b'\n' {
                "\n".to_string()
            } else {
                b.to_string()
            }
        })
        .collect();
    units.join(" ")
}

/// The prepared corpus as `prep_text8.py` writes it: the text stripped at both ends, each
/// character a symbol, `_` for a space, joined by spaces.
fn prep_text8(raw: &str) -> String {
    let units: Vec<String> = raw
        .trim()
        .chars()
        .map(|c| if c == ' ' { "_".to_string() } else { c.to_string() })
        .collect();
    units.join(" ")
}

/// `ids` as the whitespace-separated list `--tokens` and `--prompt-tokens` read.
fn id_list(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
}

fn parse_ids(out: &[u8]) -> Vec<u32> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect()
}

/// `generate` on `model` after `prompt`, as ids (`--ids`) and as written text; checks the
/// ids against the raw-text prompt given as `--prompt-tokens prompt_ids`.
fn generated(model: &Path, prompt: &str, prompt_ids: &[u32]) -> (Vec<u32>, Vec<u8>) {
    let flags = ["--length", "60", "--temperature", "1", "--seed", "5"];
    let run = |extra: &[&str]| {
        let mut args = vec!["generate", s(model)];
        args.extend(extra);
        args.extend(flags);
        let out = txl(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        out.stdout
    };
    let ids = parse_ids(&run(&["--prompt", prompt, "--ids"]));
    let from_ids = parse_ids(&run(&["--prompt-tokens", &id_list(prompt_ids), "--ids"]));
    assert_eq!(
        ids, from_ids,
        "the prompt read as raw text gives its characters' ids"
    );
    assert_eq!(ids.len(), 60);
    let written = run(&["--prompt", prompt]);
    let written = written
        .strip_prefix(prompt.as_bytes())
        .and_then(|w| w.strip_suffix(b"\n"))
        .unwrap_or_else(|| panic!("{:?}", String::from_utf8_lossy(&written)))
        .to_vec();
    (ids, written)
}

#[test]
fn an_enwik8_model_reads_and_writes_raw_bytes() {
    let dir = scratch_dir("enwik8");
    let raw = RAW.as_bytes();
    // The vocabulary: the raw text's byte values but `~` and the newline (which the model
    // never sees), by frequency, then other values up to 96, and `<unk>`: 97 symbols, the
    // reference model's n_token.
    let units: Vec<String> = raw
        .iter()
        .filter(|&&b| b != b'\n' && b != b'~')
        .map(u8::to_string)
        .collect();
    let others: Vec<String> = (128..=255u8).rev().map(|b| b.to_string()).collect();
    let mut symbols = by_frequency(&units, &others);
    symbols.truncate(96);
    symbols.insert(0, "<unk>".to_string());
    std::fs::write(dir.join("vocab.txt"), symbols.join("\n") + "\n").unwrap();

    // `txl convert --vocab` adds it (a vocab.txt: case-sensitive, as the digits need).
    let model = dir.join("enwik8.txl");
    let out = txl(&[
        "convert",
        s(&fixture("full_softmax_long")),
        "-o",
        s(&model),
        "--vocab",
        s(&dir.join("vocab.txt")),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let inspect = txl(&["inspect", s(&model)]);
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("characters: byte values"), "inspect: {text}");

    // The ids by hand: each byte's symbol's position, `<unk>` (0) for `~`, newlines dropped.
    let expected: Vec<u32> = raw
        .iter()
        .filter(|&&b| b != b'\n')
        .map(|b| symbols.iter().position(|s| *s == b.to_string()).unwrap_or(0) as u32)
        .collect();
    assert!(expected.contains(&0) && expected.len() < raw.len());
    score_three_ways(&dir, &model, raw, &prep_enwik8(raw), &expected);
    // compare and eval read --bytes the same way.
    let compared = json(&[
        "compare",
        s(&model),
        s(&model),
        "--bytes",
        s(&dir.join("raw.txt")),
        "--json",
    ]);
    assert_eq!(compared["tokens"], expected.len());
    let eval = json(&[
        "eval",
        s(&model),
        "--text",
        s(&dir.join("raw.txt")),
        "--bytes",
        "--backend",
        "cpu",
        "--batch",
        "1",
        "--json",
    ]);
    assert_eq!(eval["tokens"], expected.len());

    // Generated tokens come out as the bytes their symbols name (`<unk>` writes nothing).
    let prompt = "The fox ";
    let prompt_ids: Vec<u32> = prompt
        .bytes()
        .map(|b| symbols.iter().position(|s| *s == b.to_string()).unwrap() as u32)
        .collect();
    let (ids, written) = generated(&model, prompt, &prompt_ids);
    let bytes: Vec<u8> = ids
        .iter()
        .filter(|&&id| id != 0)
        .map(|&id| symbols[id as usize].parse::<u8>().unwrap())
        .collect();
    assert_eq!(written, bytes);
    assert!(written.len() > 30, "{written:?}");
}

#[test]
fn a_text8_model_reads_and_writes_raw_text() {
    let dir = scratch_dir("text8");
    // The vocabulary (lower-cased, as the original `Vocab` is by default): the stripped
    // text's characters, a space as `_`, by frequency, then letters, digits and more up to 50, the
    // reference model's n_token. No `<unk>`.
    let lower = RAW.to_lowercase();
    let units: Vec<String> = lower
        .trim()
        .chars()
        .filter(|c| !c.is_whitespace() || *c == ' ')
        .map(|c| if c == ' ' { "_".to_string() } else { c.to_string() })
        .collect();
    let others: Vec<String> = ('a'..='z')
        .chain('0'..='9')
        .chain(['(', ')', '"', '/'])
        .map(String::from)
        .collect();
    let mut symbols = by_frequency(&units, &others);
    symbols.truncate(50);
    assert_eq!(symbols.len(), 50);
    let vocabulary = Vocabulary::new(symbols.clone(), true).unwrap();
    let model = model_with(&dir, "no_mem", &vocabulary, "text8");
    let inspect = txl(&["inspect", s(&model)]);
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("characters: letters"), "inspect: {text}");

    let id_of = |c: char| -> u32 {
        let symbol = if c == ' ' {
            "_".to_string()
        } else {
            c.to_lowercase().to_string()
        };
        symbols.iter().position(|s| *s == symbol).unwrap() as u32
    };
    let expected: Vec<u32> = RAW
        .trim()
        .chars()
        .filter(|c| !c.is_whitespace() || *c == ' ')
        .map(id_of)
        .collect();
    score_three_ways(&dir, &model, RAW.as_bytes(), &prep_text8(RAW), &expected);

    // Generated tokens come out as their characters, `_` as a space.
    let prompt = "Nobody knows ";
    let prompt_ids: Vec<u32> = prompt.chars().map(id_of).collect();
    let (ids, written) = generated(&model, prompt, &prompt_ids);
    let text: String = ids
        .iter()
        .map(|&id| match symbols[id as usize].as_str() {
            "_" => " ".to_string(),
            symbol => symbol.to_string(),
        })
        .collect();
    assert_eq!(String::from_utf8(written).unwrap(), text);

    // A character the vocabulary lacks, with no <unk> to stand for it: named, with its offset.
    std::fs::write(dir.join("odd.txt"), "dog\u{263a}").unwrap();
    let out = txl(&["score", s(&model), "--bytes", s(&dir.join("odd.txt"))]);
    assert!(!out.status.success());
    let error = stderr(&out);
    assert!(error.contains("U+263A") && error.contains("offset 3"), "{error}");
}

#[test]
fn without_a_character_vocabulary_bytes_are_token_ids() {
    let dir = scratch_dir("plain");
    // A word vocabulary that holds numbers and letters is not a character vocabulary.
    let mut symbols: Vec<String> = ["<eos>", "<unk>", "the", "a", "1", "2", "10"]
        .map(String::from)
        .to_vec();
    symbols.extend((symbols.len()..50).map(|i| format!("w{i}")));
    let vocabulary = Vocabulary::new(symbols, false).unwrap();
    let model = model_with(&dir, "no_mem", &vocabulary, "words");
    let raw: Vec<u8> = (0..40u32).map(|i| (i * 7 % 50) as u8).collect();
    std::fs::write(dir.join("raw.bin"), &raw).unwrap();
    let ids: Vec<u32> = raw.iter().map(|&b| u32::from(b)).collect();
    std::fs::write(dir.join("ids.txt"), id_list(&ids)).unwrap();
    for image in [model, dir.join("words-plain.txl")] {
        let by_bytes = json(&["score", s(&image), "--bytes", s(&dir.join("raw.bin")), "--json"]);
        let by_ids = json(&["score", s(&image), "--tokens", s(&dir.join("ids.txt")), "--json"]);
        assert_eq!(by_bytes["digest"], by_ids["digest"]);
        assert_eq!(by_bytes["tokens"], raw.len());
    }
}

//! Word vocabularies end to end: the readers give the ids the original code's `Vocab` gives
//! (computed by `tools/reference/make_vocab_fixtures.py` with Hugging Face's TransfoXLTokenizer),
//! and a word-level model with an adaptive softmax (the `adaptive_div2` reference model with
//! the 300-symbol fixture vocabulary) is scored on text, in bits per word, and writes words.
//!
//! `convert_picks_up_*` need `txl convert` to attach the vocabulary it finds (`--vocab FILE`,
//! or `vocab.pkl` / `vocab.txt` beside the checkpoint).

use std::path::{Path, PathBuf};

use serde_json::Value;
use txl_tools::vocab::characters::{CharacterVocabulary, SymbolKind};
use txl_tools::vocab::{add_vocabulary, find_vocabulary, read_vocabulary};

mod common;
use common::{fixture, s, scratch_dir, stderr, txl};

fn words(name: &str) -> PathBuf {
    fixture("words").join(name)
}

fn ids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect()
}

fn text(path: &Path) -> String {
    String::from_utf8(std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn hf_pickle_and_vocab_txt_give_the_original_vocab_ids() {
    let heldout = text(&words("heldout.txt"));
    let expected = ids(&words("heldout.ids.txt"));
    for file in ["vocab.pkl", "vocab.txt"] {
        let vocabulary = read_vocabulary(&words(file)).unwrap();
        assert_eq!(vocabulary.len(), 300, "{file}");
        assert!(!vocabulary.lower_case(), "{file}");
        assert_eq!(vocabulary.encode(&heldout).unwrap(), expected, "{file}");
    }
    let lower = read_vocabulary(&words("lower/vocab.pkl")).unwrap();
    assert!(lower.lower_case());
    assert_eq!(
        lower.encode(&heldout).unwrap(),
        ids(&words("lower/heldout.ids.txt"))
    );
    // The fixture exercises what it should: unknown words and more than one line.
    let pkl = read_vocabulary(&words("vocab.pkl")).unwrap();
    assert!(expected.iter().filter(|&&id| Some(id) == pkl.unk()).count() > 10);
    assert!(expected.iter().filter(|&&id| Some(id) == pkl.eos()).count() > 5);
}

#[test]
fn the_original_codes_cache_pt_gives_its_vocab_in_both_torch_save_layouts() {
    let heldout = text(&words("heldout.txt"));
    let expected = ids(&words("lower/heldout.ids.txt"));
    for file in ["lower/cache.pt", "lower/legacy/cache.pt"] {
        let vocabulary = read_vocabulary(&words(file)).unwrap();
        assert!(vocabulary.lower_case(), "{file}");
        assert_eq!(vocabulary.encode(&heldout).unwrap(), expected, "{file}");
        // Cut anywhere, or with a byte changed, it is an error or a vocabulary, never a panic.
        let bytes = std::fs::read(words(file)).unwrap();
        let dir = scratch_dir(&file.replace('/', "-"));
        let damaged = dir.join("cache.pt");
        for cut in (0..bytes.len()).step_by(997) {
            std::fs::write(&damaged, &bytes[..cut]).unwrap();
            let read = read_vocabulary(&damaged);
            // The legacy layout has the token tensors after the pickle, and they are not read.
            if !file.contains("legacy") {
                assert!(read.is_err(), "{file} cut at {cut}");
            }
        }
        for at in (0..bytes.len()).step_by(101) {
            let mut changed = bytes.clone();
            changed[at] ^= 0x5a;
            std::fs::write(&damaged, &changed).unwrap();
            let _ = read_vocabulary(&damaged);
        }
    }
}

#[test]
fn find_vocabulary_looks_beside_the_checkpoint_or_where_told() {
    let dir = scratch_dir("find");
    assert!(find_vocabulary(&fixture("adaptive_div2"), None)
        .unwrap()
        .is_none());
    std::fs::copy(words("vocab.txt"), dir.join("vocab.txt")).unwrap();
    let beside = find_vocabulary(&dir.join("model.safetensors"), None)
        .unwrap()
        .unwrap();
    assert_eq!(
        beside.symbols()[1],
        read_vocabulary(&words("vocab.pkl")).unwrap().symbols()[1]
    );
    let told = find_vocabulary(&dir, Some(&words("lower/vocab.pkl")))
        .unwrap()
        .unwrap();
    assert!(told.lower_case());
    std::fs::remove_file(dir.join("vocab.txt")).unwrap();
    std::fs::copy(words("lower/cache.pt"), dir.join("cache.pt")).unwrap();
    assert!(find_vocabulary(&dir, None).unwrap().unwrap().lower_case());
    let missing = find_vocabulary(&dir, Some(&dir.join("nothing.pkl"))).unwrap_err();
    assert!(format!("{missing:#}").contains("nothing.pkl"), "{missing:#}");
}

/// `adaptive_div2` converted, with the fixture vocabulary added: `dir/words.txl`.
fn word_model(dir: &Path) -> PathBuf {
    let plain = dir.join("plain.txl");
    let out = txl(&["convert", s(&fixture("adaptive_div2")), "-o", s(&plain)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let vocabulary = read_vocabulary(&words("vocab.pkl")).unwrap();
    let image = add_vocabulary(&std::fs::read(&plain).unwrap(), &vocabulary).unwrap();
    let path = dir.join("words.txl");
    std::fs::write(&path, image).unwrap();
    path
}

fn json(args: &[&str]) -> Value {
    let out = txl(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_word_model_scores_text_in_bits_per_word_as_its_ids() {
    let dir = scratch_dir("score");
    let model = word_model(&dir);
    let by_text = json(&["score", s(&model), "--text", s(&words("heldout.txt")), "--json"]);
    let by_ids = json(&[
        "score",
        s(&model),
        "--tokens",
        s(&words("heldout.ids.txt")),
        "--json",
    ]);
    assert_eq!(by_text["tokens"], ids(&words("heldout.ids.txt")).len());
    assert_eq!(by_text["digest"], by_ids["digest"]);
    // The same model without the vocabulary scores the same ids alike: the section changes
    // nothing the forward pass reads.
    let plain = json(&[
        "score",
        s(&dir.join("plain.txl")),
        "--tokens",
        s(&words("heldout.ids.txt")),
        "--json",
    ]);
    assert_eq!(plain["digest"], by_ids["digest"]);
    // --text on the model without a vocabulary is --bytes.
    let text_as_bytes = json(&[
        "score",
        s(&dir.join("plain.txl")),
        "--text",
        s(&words("heldout.txt")),
        "--json",
    ]);
    let bytes = json(&[
        "score",
        s(&dir.join("plain.txl")),
        "--bytes",
        s(&words("heldout.txt")),
        "--json",
    ]);
    assert_eq!(text_as_bytes["digest"], bytes["digest"]);
    assert_eq!(
        bytes["tokens"],
        std::fs::read(words("heldout.txt")).unwrap().len()
    );

    // compare and eval read text the same way.
    let compared = json(&[
        "compare",
        s(&model),
        s(&model),
        "--text",
        s(&words("heldout.txt")),
        "--json",
    ]);
    assert_eq!(compared["tokens"], by_text["tokens"]);
    let eval = json(&[
        "eval",
        s(&model),
        "--text",
        s(&words("heldout.txt")),
        "--words",
        "--backend",
        "cpu",
        "--batch",
        "1",
        "--json",
    ]);
    assert_eq!(eval["tokens"], by_text["tokens"]);
    let bits = |v: &Value| v["bits_per_token"].as_f64().unwrap();
    assert!((bits(&eval) - bits(&by_text)).abs() < 1e-4, "{eval} {by_text}");
}

#[test]
fn a_word_model_generates_words_and_inspect_shows_its_vocabulary() {
    let dir = scratch_dir("generate");
    let model = word_model(&dir);
    let vocabulary = read_vocabulary(&words("vocab.pkl")).unwrap();
    let prompt = "The city of";
    let prompt_ids: Vec<String> = vocabulary
        .encode(prompt)
        .unwrap()
        .iter()
        .take(3) // not the line's <eos>: the text goes on
        .map(u32::to_string)
        .collect();
    let flags = ["--length", "24", "--temperature", "0"];
    let mut args = vec!["generate", s(&model), "--prompt", prompt];
    args.extend(flags);
    let out = txl(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let written = String::from_utf8(out.stdout).unwrap();
    let prompt_tokens = prompt_ids.join(" ");
    let mut args = vec!["generate", s(&model), "--prompt-tokens", &prompt_tokens, "--ids"];
    args.extend(flags);
    let out = txl(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let generated: Vec<u32> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(generated.len(), 24);
    let expected = format!("{prompt} {}\n", vocabulary.decode(&generated));
    let expected = expected.replace(" \n", "\n");
    assert_eq!(written.replace(" \n", "\n"), expected);
    assert!(written.split_whitespace().count() > 10, "{written}");

    let out = txl(&["inspect", s(&model)]);
    let shown = String::from_utf8(out.stdout).unwrap();
    let line = shown.lines().find(|l| l.starts_with("symbols")).unwrap();
    assert!(
        line.contains("300") && line.contains("lower_case false") && line.contains("\"<eos>\""),
        "{line}"
    );
    let out = txl(&["inspect", s(&dir.join("plain.txl"))]);
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(shown.contains("symbols       none"), "{shown}");
}

#[test]
fn quantize_keeps_the_vocabulary_and_calibrates_on_text() {
    let dir = scratch_dir("quantize");
    let model = word_model(&dir);
    let by_text = dir.join("by-text.json");
    let by_ids = dir.join("by-ids.json");
    for (flag, file, report) in [
        ("--calib-text", words("train.txt"), &by_text),
        ("--calib-tokens", words("heldout.ids.txt"), &by_ids),
    ] {
        let out_image = dir.join("int8.txl");
        let out = txl(&[
            "quantize",
            s(&model),
            "-o",
            s(&out_image),
            flag,
            s(&file),
            "--smooth",
            "off",
            "--report",
            s(report),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let bytes = txl_tools::image_file::read_image(&out_image).unwrap();
        let quantized = txl_core::Model::parse(bytes.bytes()).unwrap();
        let kept = quantized.image().vocabulary().expect("the vocabulary is kept");
        assert_eq!(
            kept.symbol(5),
            Some(read_vocabulary(&words("vocab.pkl")).unwrap().symbols()[5].as_str())
        );
    }
    let train_ids = read_vocabulary(&words("vocab.pkl"))
        .unwrap()
        .encode(&text(&words("train.txt")))
        .unwrap();
    let report: Value = serde_json::from_slice(&std::fs::read(&by_text).unwrap()).unwrap();
    assert_eq!(report["calibration_tokens"], train_ids.len().min(16384));
}

#[test]
fn convert_picks_up_the_vocabulary_beside_the_checkpoint() {
    let dir = scratch_dir("convert-beside");
    let ckpt = dir.join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("adaptive_div2").join(file), ckpt.join(file)).unwrap();
    }
    std::fs::copy(words("vocab.pkl"), ckpt.join("vocab.pkl")).unwrap();
    let image = dir.join("m.txl");
    let out = txl(&["convert", s(&ckpt), "-o", s(&image)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let by_text = json(&["score", s(&image), "--text", s(&words("heldout.txt")), "--json"]);
    let by_ids = json(&[
        "score",
        s(&image),
        "--tokens",
        s(&words("heldout.ids.txt")),
        "--json",
    ]);
    assert_eq!(by_text["digest"], by_ids["digest"]);
    // Quantized while converting, the image keeps it.
    let int8 = dir.join("int8.txl");
    let out = txl(&["convert", s(&ckpt), "-o", s(&int8), "--dtype", "int8"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8(txl(&["inspect", s(&int8)]).stdout).unwrap();
    assert!(shown.contains("symbols       300"), "{shown}");
}

#[test]
fn convert_picks_up_the_vocabulary_it_is_given() {
    let dir = scratch_dir("convert-flag");
    let image = dir.join("m.txl");
    let src = fixture("adaptive_div2");
    let out = txl(&[
        "convert",
        s(&src),
        "-o",
        s(&image),
        "--vocab",
        s(&words("vocab.txt")),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8(txl(&["inspect", s(&image)]).stdout).unwrap();
    assert!(shown.contains("symbols       300"), "{shown}");
    // A vocabulary of another size is refused, naming both sizes.
    let out = txl(&[
        "convert",
        s(&src),
        "-o",
        s(&image),
        "--vocab",
        s(&words("lower/vocab.pkl")),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("300"), "{}", stderr(&out));
}

/// Raw bytes read for a vocabulary made as the original enwik8 preparation makes it (each byte
/// its decimal value, a newline byte a line break), numbered by frequency and without `<eos>`:
/// the ids are the symbols' ranks, newlines left out, as the original `prep_enwik8.py` +
/// `Vocab.encode_file(add_eos=False)` give them, both from the raw bytes (what `--bytes`
/// reads) and from the prepared corpus (what `--text` reads).
#[test]
fn raw_bytes_reach_an_enwik8_style_vocabulary_as_the_preparation_gives_them() {
    let raw = std::fs::read(fixture("demo").join("heldout.txt")).unwrap();
    let raw = &raw[..raw.len().min(3000)];
    assert!(
        raw.contains(&b'\n'),
        "the text must have line breaks to exercise them"
    );
    // The prepared corpus: decimal values joined by spaces, a newline byte as a line break.
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
    let symbols_text = units.join(" ");

    // The vocabulary: every byte value but the newline, by falling frequency (ties by value).
    let mut counts = [0usize; 256];
    raw.iter().for_each(|&b| counts[b as usize] += 1);
    let mut order: Vec<u8> = (0..=255u8)
        .filter(|&b| b != b'\n' && counts[b as usize] > 0)
        .collect();
    order.sort_by_key(|&b| (std::cmp::Reverse(counts[b as usize]), b));
    let vocabulary =
        txl_tools::vocab::Vocabulary::new(order.iter().map(|b| b.to_string()).collect(), false).unwrap();
    let expected: Vec<u32> = raw
        .iter()
        .filter(|&&b| b != b'\n')
        .map(|b| order.iter().position(|o| o == b).unwrap() as u32)
        .collect();
    assert_eq!(vocabulary.encode(&symbols_text).unwrap(), expected);
    let characters = CharacterVocabulary::of(&vocabulary).expect("a character vocabulary");
    assert_eq!(characters.kind(), SymbolKind::ByteValues);
    assert_eq!(characters.encode(raw, true).unwrap(), expected);
    let kept: Vec<u8> = raw.iter().copied().filter(|&b| b != b'\n').collect();
    assert_eq!(characters.decode(&expected), kept);
}

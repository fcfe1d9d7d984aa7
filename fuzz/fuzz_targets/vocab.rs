//! The vocabulary readers that take bytes: the data-only unpickler behind the original code's
//! `cache.pt` (`txl_tools::vocab::unpickle`), and the tokenizer. Nothing may panic.
//!
//! The same input is read both ways: as a pickle (allowed classes only, a budget of values tied
//! to its length), and, when it is UTF-8, as a vocabulary (the first line's words, case folded
//! when the line starts with `!`) and a text to tokenize with it (the rest). Tokenized ids are
//! in range, and decoding them gives a text with no more words than there were ids.

#![no_main]

use libfuzzer_sys::fuzz_target;
use txl_tools::vocab::{unpickle, Vocabulary};

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = unpickle::read(&mut &data[..], data.len()) {
        let _ = value.get("vocab").and_then(|v| v.get("idx2sym"));
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let lower_case = first.starts_with('!');
    let symbols: Vec<String> = first.split_whitespace().map(str::to_string).collect();
    let Ok(vocabulary) = Vocabulary::new(symbols, lower_case) else {
        return;
    };
    if let Ok(ids) = vocabulary.encode(rest) {
        assert!(ids.iter().all(|&id| (id as usize) < vocabulary.len()));
        let decoded = vocabulary.decode(&ids);
        assert!(decoded.split_whitespace().count() <= ids.len());
    }
});

//! The original code's vocabulary file (`Vocab(vocab_file=...)`, what `Vocab._build_from_file`
//! reads): one symbol per line, the first whitespace-separated field of the line (anything
//! after it, such as a count, is ignored); a symbol seen again keeps its first id.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::tokenize::{is_python_space, python_lines};
use super::Vocabulary;

/// Reads a vocabulary file of one symbol per line. Such a file does not say whether the text
/// was lower-cased: the vocabulary is taken as case-sensitive.
pub fn read_vocab_txt(path: &Path) -> Result<Vocabulary> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read the vocabulary {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .with_context(|| format!("the vocabulary {} is not UTF-8 text", path.display()))?;
    let mut symbols = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (number, line) in python_lines(&text).enumerate() {
        let Some(symbol) = line.split(is_python_space).find(|s| !s.is_empty()) else {
            bail!(
                "{} line {}: no symbol (the line is blank)",
                path.display(),
                number + 1
            );
        };
        if seen.insert(symbol) {
            symbols.push(symbol.to_owned());
        }
    }
    Vocabulary::new(symbols, false).with_context(|| format!("the vocabulary {}", path.display()))
}

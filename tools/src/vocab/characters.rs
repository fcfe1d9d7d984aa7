//! Character vocabularies: the original code's enwik8 and text8 models, whose symbols are the
//! characters of raw text as its preparation scripts write them, and raw text to and from
//! their token ids.
//!
//! - enwik8 (`prep_enwik8.py`): each byte of the text is written as its decimal value (`104`
//!   for `h`) and the values are joined by spaces, except a newline byte, which is written as a
//!   line break. The corpus is then encoded by `Vocab.encode_file(ordered=True,
//!   add_eos=False)`, which splits lines at whitespace and appends nothing: line breaks vanish,
//!   and the model never sees byte 10.
//! - text8 (`prep_text8.py`): the text is read as UTF-8, stripped of white space at both ends,
//!   and each character written as a symbol, `_` for a space; the other white space (line
//!   ends, tabs) separates symbols and vanishes the same way.
//!
//! The `Vocab` numbers symbols by how often they occur, so a token id is not a byte: `txl`
//! reads raw text through [`CharacterVocabulary::encode`] (`--bytes`, `generate --prompt`) and
//! writes the model's tokens back as raw text with [`CharacterVocabulary::decode`].
//!
//! [`SymbolKind::of`] is the one rule that tells such a vocabulary from a word vocabulary.
//!
//! ```
//! use txl_tools::vocab::{characters::CharacterVocabulary, Vocabulary};
//!
//! let symbols = ["101", "104", "108", "111", "32"].map(String::from).to_vec();
//! let enwik8 = CharacterVocabulary::of(&Vocabulary::new(symbols, false)?).unwrap();
//! assert_eq!(enwik8.encode(b"hello\n", false)?, [1, 0, 2, 2, 3]);
//! assert_eq!(enwik8.decode(&[1, 0, 4]), b"he ");
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::collections::HashMap;

use anyhow::{anyhow, bail, Result};
use txl_core::vocab::EOS;

use super::tokenize::is_python_space;
use super::Vocabulary;

/// How a character vocabulary writes a character.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    /// enwik8: the byte's decimal value, `0` to `255`.
    ByteValues,
    /// text8: the character itself, `_` for a space.
    Characters,
}

/// Whether `symbol` is a special symbol (`<unk>`, `<eos>`, `<S>`), which a character
/// vocabulary may hold beside its characters.
fn is_special(symbol: &str) -> bool {
    symbol.len() >= 3 && symbol.starts_with('<') && symbol.ends_with('>')
}

/// The byte a decimal symbol stands for: `0` to `255`, written without leading zeros.
fn byte_value(symbol: &str) -> Option<u8> {
    let value: u8 = symbol.parse().ok()?;
    (symbol.bytes().all(|b| b.is_ascii_digit()) && value.to_string() == symbol).then_some(value)
}

impl SymbolKind {
    /// Whether `vocabulary` is a character vocabulary, and which. Special symbols (`<...>`)
    /// aside, there must be at least one symbol, and
    /// - every one a byte's decimal value (`0`..`255`, no leading zeros), at least one of
    ///   them of two or more digits: [`SymbolKind::ByteValues`];
    /// - else every one a single character: [`SymbolKind::Characters`].
    ///
    /// A word vocabulary holds words of several characters, so it is neither, even when some
    /// of its words are numbers (`1`, `1990`) or letters (`a`).
    pub fn of(vocabulary: &Vocabulary) -> Option<SymbolKind> {
        let mut plain = vocabulary.symbols().iter().filter(|s| !is_special(s)).peekable();
        plain.peek()?;
        let plain: Vec<&String> = plain.collect();
        if plain.iter().all(|s| byte_value(s).is_some()) && plain.iter().any(|s| s.len() > 1) {
            return Some(SymbolKind::ByteValues);
        }
        if plain.iter().all(|s| s.chars().count() == 1) {
            return Some(SymbolKind::Characters);
        }
        None
    }
}

/// A character vocabulary ([`SymbolKind::of`]) ready to encode raw text and decode ids.
#[derive(Clone, Debug)]
pub struct CharacterVocabulary {
    kind: SymbolKind,
    /// [`SymbolKind::ByteValues`]: the id of each byte's symbol.
    by_byte: Vec<Option<u32>>,
    /// [`SymbolKind::Characters`]: the id of each character's symbol.
    by_char: HashMap<char, u32>,
    /// The raw text of each id (empty for a special symbol but `<eos>`, a line break).
    text: Vec<Vec<u8>>,
    unk: Option<u32>,
    lower_case: bool,
    /// The whole vocabulary, for symbols a lower-cased character turns into.
    vocabulary: Vocabulary,
}

impl CharacterVocabulary {
    /// `vocabulary` as a character vocabulary, if it is one ([`SymbolKind::of`]).
    pub fn of(vocabulary: &Vocabulary) -> Option<CharacterVocabulary> {
        let kind = SymbolKind::of(vocabulary)?;
        let mut by_byte = vec![None; 256];
        let mut by_char = HashMap::new();
        let mut text = Vec::with_capacity(vocabulary.len());
        for (id, symbol) in vocabulary.symbols().iter().enumerate() {
            let id = id as u32;
            let raw = if symbol == EOS {
                b"\n".to_vec()
            } else if is_special(symbol) {
                Vec::new()
            } else {
                match kind {
                    SymbolKind::ByteValues => {
                        let byte = byte_value(symbol)?;
                        by_byte[usize::from(byte)].get_or_insert(id);
                        vec![byte]
                    }
                    SymbolKind::Characters => {
                        let c = symbol.chars().next()?;
                        by_char.entry(c).or_insert(id);
                        if c == '_' {
                            b" ".to_vec()
                        } else {
                            symbol.as_bytes().to_vec()
                        }
                    }
                }
            };
            text.push(raw);
        }
        Some(CharacterVocabulary {
            kind,
            by_byte,
            by_char,
            text,
            unk: vocabulary.unk(),
            lower_case: vocabulary.lower_case(),
            vocabulary: vocabulary.clone(),
        })
    }

    /// How the vocabulary writes a character.
    pub fn kind(&self) -> SymbolKind {
        self.kind
    }

    /// The token ids of the raw text `raw`, as the preparation script and
    /// `Vocab.encode_file(ordered=True, add_eos=False)` give them (see the module
    /// documentation): enwik8, one id per byte, newline bytes dropped; text8, one per UTF-8
    /// character, a space as `_`, other white space dropped, and, when `whole_file`, the
    /// white space at both ends dropped first (as the script strips its text; a prompt is the
    /// start of a text and keeps it). A character lower-cased when the vocabulary says so; one
    /// without a symbol becomes `<unk>` (or `<UNK>`), or, when the vocabulary has neither, is
    /// an error naming it and its byte offset.
    pub fn encode(&self, raw: &[u8], whole_file: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        ids.try_reserve_exact(raw.len()).map_err(|_| {
            anyhow!(
                "cannot allocate {} bytes for the token ids",
                raw.len().saturating_mul(4)
            )
        })?;
        match self.kind {
            SymbolKind::ByteValues => {
                for (offset, &byte) in raw.iter().enumerate() {
                    if byte == b'\n' {
                        continue;
                    }
                    match (self.by_byte[usize::from(byte)], self.unk) {
                        (Some(id), _) | (None, Some(id)) => ids.push(id),
                        (None, None) => bail!(
                            "byte {byte} (0x{byte:02x}) at offset {offset} is not in the vocabulary, \
                             which has no <unk> to stand for it"
                        ),
                    }
                }
            }
            SymbolKind::Characters => {
                let text = std::str::from_utf8(raw).map_err(|e| {
                    anyhow!(
                        "not UTF-8 text (at byte offset {}); this character model reads UTF-8",
                        e.valid_up_to()
                    )
                })?;
                let (start, text) = if whole_file {
                    let trimmed = text.trim_start_matches(is_python_space);
                    (
                        text.len() - trimmed.len(),
                        trimmed.trim_end_matches(is_python_space),
                    )
                } else {
                    (0, text)
                };
                for (at, c) in text.char_indices() {
                    let c = if c == ' ' { '_' } else { c };
                    if is_python_space(c) {
                        continue;
                    }
                    match (self.char_id(c), self.unk) {
                        (Some(id), _) | (None, Some(id)) => ids.push(id),
                        (None, None) => bail!(
                            "{c:?} (U+{:04X}) at byte offset {} is not in the vocabulary, which has \
                             no <unk> to stand for it",
                            u32::from(c),
                            start + at
                        ),
                    }
                }
            }
        }
        Ok(ids)
    }

    /// The id of the character `c`'s symbol, lower-cased first when the vocabulary says so
    /// (as Python's `str.lower`, which may give more than one character: that string is the
    /// symbol looked up).
    fn char_id(&self, c: char) -> Option<u32> {
        if !self.lower_case {
            return self.by_char.get(&c).copied();
        }
        let mut lower = c.to_lowercase();
        if lower.len() == 1 {
            lower.next().and_then(|l| self.by_char.get(&l).copied())
        } else {
            self.vocabulary.id(&lower.collect::<String>())
        }
    }

    /// The raw text of `ids`: each character's bytes (enwik8: the byte its value names;
    /// text8: the character, a space for `_`), `<eos>` as a line break, nothing for another
    /// special symbol (`<unk>`) or an id out of range.
    pub fn decode(&self, ids: &[u32]) -> Vec<u8> {
        let mut raw = Vec::with_capacity(ids.len());
        for &id in ids {
            if let Some(text) = self.text.get(id as usize) {
                raw.extend_from_slice(text);
            }
        }
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(symbols: &[&str], lower_case: bool) -> Vocabulary {
        Vocabulary::new(symbols.iter().map(|s| s.to_string()).collect(), lower_case).unwrap()
    }

    #[test]
    fn the_kind_needs_every_plain_symbol_to_be_a_character() {
        let kind = |symbols: &[&str]| SymbolKind::of(&vocab(symbols, false));
        assert_eq!(kind(&["<unk>", "32", "101", "7"]), Some(SymbolKind::ByteValues));
        assert_eq!(kind(&["_", "e", "t", "<unk>"]), Some(SymbolKind::Characters));
        // Single digits alone are characters; a value above 255 or with a leading zero is a word.
        assert_eq!(kind(&["1", "2", "3"]), Some(SymbolKind::Characters));
        assert_eq!(kind(&["32", "256"]), None);
        assert_eq!(kind(&["32", "032"]), None);
        assert_eq!(kind(&["+1", "32"]), None);
        // Word vocabularies holding numbers and letters are words.
        assert_eq!(kind(&["<eos>", "the", "1", "2", "10", "a"]), None);
        assert_eq!(kind(&["<eos>", "<unk>"]), None);
        assert_eq!(kind(&["1", "2", "a", "10"]), None);
    }

    #[test]
    fn enwik8_bytes_map_to_their_values_symbols_without_newlines() {
        let v = CharacterVocabulary::of(&vocab(&["101", "<unk>", "104", "0", "255"], false)).unwrap();
        assert_eq!(v.encode(b"he\nh\0\xff!", true).unwrap(), [2, 0, 2, 3, 4, 1]);
        assert_eq!(v.decode(&[2, 0, 1, 4, 9]), b"he\xff");
        let strict = CharacterVocabulary::of(&vocab(&["101", "104"], false)).unwrap();
        let error = strict.encode(b"he\nhx", true).unwrap_err().to_string();
        assert!(
            error.contains("byte 120") && error.contains("offset 4"),
            "{error}"
        );
    }

    #[test]
    fn text8_spaces_become_underscores_and_the_file_is_stripped() {
        let v = CharacterVocabulary::of(&vocab(&["_", "a", "b", "é", "<eos>"], true)).unwrap();
        assert_eq!(v.kind(), SymbolKind::Characters);
        assert_eq!(
            v.encode(b" a b\n\tAb \xc3\x89 ", true).unwrap(),
            [1, 0, 2, 1, 2, 0, 3]
        );
        assert_eq!(v.encode(b" a ", false).unwrap(), [0, 1, 0]);
        assert_eq!(v.decode(&[1, 0, 3, 4, 2]), "a é\nb".as_bytes());
        let error = v.encode(b"ab c", true).unwrap_err().to_string();
        assert!(error.contains("'c'") && error.contains("offset 3"), "{error}");
        let error = v.encode(b"a\xffb", true).unwrap_err().to_string();
        assert!(error.contains("UTF-8") && error.contains("offset 1"), "{error}");
        let cased = CharacterVocabulary::of(&vocab(&["_", "a", "<unk>"], false)).unwrap();
        assert_eq!(cased.encode(b"aA", true).unwrap(), [1, 2]);
    }
}

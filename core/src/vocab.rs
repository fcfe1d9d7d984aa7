//! The optional vocabulary section of a model image: the symbol of every token id, so a device
//! can turn the ids it generates back into text (`core/FORMAT.md`, "Vocabulary section").
//!
//! Byte-level models need none: their token ids are the bytes. Word-level models (WikiText-103)
//! and character models whose symbols are numbered by frequency (enwik8, text8 as the original
//! code prepares them) carry theirs in the image, and the host tokenizes text with it.
//!
//! [`Vocabulary::parse`] checks the section once (sizes, offsets, UTF-8), without allocating;
//! [`Vocabulary::symbol`] is then a few loads. Looking a word up ([`Vocabulary::find`]) is a
//! linear scan here; hosts build a hash map from [`Vocabulary::symbols`].
//!
//! ```
//! # fn demo(image: &txl_core::Image<'_>) {
//! if let Some(vocabulary) = image.vocabulary() {
//!     let text = vocabulary.symbol(42).unwrap_or("?");
//!     let _ = (text, vocabulary.lower_case(), vocabulary.find("<eos>"));
//! }
//! # }
//! ```

use core::fmt;

/// The first eight bytes of a vocabulary section.
pub const VOCAB_MAGIC: [u8; 8] = *b"TXLVOCAB";
/// Bytes of the section's fixed header.
pub const VOCAB_HEADER_BYTES: usize = 32;
/// Flag bit: the model was trained on lower-cased text; text is lower-cased before lookup.
pub const FLAG_LOWER_CASE: u32 = 1 << 0;

/// The symbol the original code appends at the end of every line.
pub const EOS: &str = "<eos>";

/// Why a vocabulary section was refused (inside [`crate::Error::BadVocabulary`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum VocabError {
    /// The section runs past the end of the bytes it was given (in an image: past the CRC): its
    /// symbol count or text length is too large.
    Bounds,
    /// The section does not start with `TXLVOCAB`.
    BadMagic,
    /// The section holds another number of symbols than the model has tokens.
    SymbolCount {
        /// The model's `n_token`.
        expected: u32,
        /// Symbols in the section.
        found: u32,
    },
    /// A reserved field or an unknown flag bit is set.
    Reserved,
    /// Symbol `index` is empty or its end offset lies outside the text or before its start.
    BadOffset {
        /// The symbol's token id.
        index: u32,
    },
    /// Symbol `index` is not valid UTF-8.
    NotUtf8 {
        /// The symbol's token id.
        index: u32,
    },
}

impl fmt::Display for VocabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VocabError::Bounds => {
                f.write_str("the vocabulary lies outside the image or overlaps the tensors")
            }
            VocabError::BadMagic => f.write_str("the vocabulary section does not start with TXLVOCAB"),
            VocabError::SymbolCount { expected, found } => {
                write!(
                    f,
                    "the vocabulary holds {found} symbols, the model has {expected} tokens"
                )
            }
            VocabError::Reserved => f.write_str("a reserved vocabulary field or flag is set"),
            VocabError::BadOffset { index } => {
                write!(
                    f,
                    "vocabulary symbol {index} is empty or lies outside the section"
                )
            }
            VocabError::NotUtf8 { index } => write!(f, "vocabulary symbol {index} is not UTF-8"),
        }
    }
}

impl core::error::Error for VocabError {}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        word.copy_from_slice(src);
    }
    u32::from_le_bytes(word)
}

/// A checked vocabulary section, borrowed in place: symbol `i` is token id `i`'s text.
#[derive(Clone, Copy, Debug)]
pub struct Vocabulary<'a> {
    /// The whole section, header included.
    section: &'a [u8],
    /// `(count)` u32 end offsets into `text`.
    ends: &'a [u8],
    /// The symbols' UTF-8 text, one after another.
    text: &'a [u8],
    count: u32,
    lower_case: bool,
}

impl<'a> Vocabulary<'a> {
    /// Checks `bytes` as a vocabulary section for a model of `n_token` tokens. Bytes after the
    /// section are ignored; [`Vocabulary::section_bytes`] says where it ends.
    pub fn parse(bytes: &'a [u8], n_token: u32) -> Result<Vocabulary<'a>, VocabError> {
        let header = bytes.get(..VOCAB_HEADER_BYTES).ok_or(VocabError::Bounds)?;
        if header[..8] != VOCAB_MAGIC {
            return Err(VocabError::BadMagic);
        }
        let count = read_u32(header, 8);
        let flags = read_u32(header, 12);
        let text_bytes = read_u32(header, 16) as usize;
        if count != n_token {
            return Err(VocabError::SymbolCount {
                expected: n_token,
                found: count,
            });
        }
        if flags & !FLAG_LOWER_CASE != 0 || header[20..].iter().any(|&b| b != 0) {
            return Err(VocabError::Reserved);
        }
        let ends_end = (count as usize)
            .checked_mul(4)
            .and_then(|n| n.checked_add(VOCAB_HEADER_BYTES))
            .ok_or(VocabError::Bounds)?;
        let text_end = ends_end.checked_add(text_bytes).ok_or(VocabError::Bounds)?;
        let section = bytes.get(..text_end).ok_or(VocabError::Bounds)?;
        let vocabulary = Vocabulary {
            section,
            ends: &section[VOCAB_HEADER_BYTES..ends_end],
            text: &section[ends_end..],
            count,
            lower_case: flags & FLAG_LOWER_CASE != 0,
        };
        let mut start = 0;
        for index in 0..count {
            let end = read_u32(vocabulary.ends, 4 * index as usize) as usize;
            if end <= start || end > text_bytes {
                return Err(VocabError::BadOffset { index });
            }
            if core::str::from_utf8(&vocabulary.text[start..end]).is_err() {
                return Err(VocabError::NotUtf8 { index });
            }
            start = end;
        }
        if start != text_bytes {
            return Err(VocabError::BadOffset {
                index: count.saturating_sub(1),
            });
        }
        Ok(vocabulary)
    }

    /// Symbols, `n_token` of them.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether there are no symbols (never, for a parsed section: `n_token ≥ 1`).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether the model was trained on lower-cased text, so text is lower-cased before lookup.
    pub fn lower_case(&self) -> bool {
        self.lower_case
    }

    /// The text of token `id`, or `None` when `id` is not below `n_token`.
    pub fn symbol(&self, id: u32) -> Option<&'a str> {
        if id >= self.count {
            return None;
        }
        let end = read_u32(self.ends, 4 * id as usize) as usize;
        let start = match id {
            0 => 0,
            _ => read_u32(self.ends, 4 * (id as usize - 1)) as usize,
        };
        // `parse` checked every symbol's bounds and UTF-8.
        core::str::from_utf8(self.text.get(start..end)?).ok()
    }

    /// Every symbol, in id order.
    pub fn symbols(&self) -> impl Iterator<Item = &'a str> + 'a {
        let this = *self;
        (0..self.count).map(move |id| this.symbol(id).unwrap_or(""))
    }

    /// The id of the first symbol equal to `word` (a linear scan: hosts keep a map).
    pub fn find(&self, word: &str) -> Option<u32> {
        self.symbols().position(|s| s == word).map(|i| i as u32)
    }

    /// The id of [`EOS`], the symbol that ends each line, if the vocabulary has it.
    pub fn eos(&self) -> Option<u32> {
        self.find(EOS)
    }

    /// The section's bytes, header included (to copy it into another image).
    pub fn section_bytes(&self) -> &'a [u8] {
        self.section
    }

    /// Writes the text of `ids` as the original code joins symbols: separated by spaces, with
    /// [`EOS`] written as a line break (and no space around it). Ids out of range are `<?>`.
    pub fn write_text(&self, ids: &[u32], out: &mut dyn fmt::Write) -> fmt::Result {
        let mut line_start = true;
        for &id in ids {
            match self.symbol(id) {
                Some(EOS) => {
                    out.write_char('\n')?;
                    line_start = true;
                    continue;
                }
                symbol => {
                    if !line_start {
                        out.write_char(' ')?;
                    }
                    out.write_str(symbol.unwrap_or("<?>"))?;
                }
            }
            line_start = false;
        }
        Ok(())
    }
}

/// Builds a vocabulary section from `symbols` (each non-empty; token id = position).
#[cfg(feature = "alloc")]
pub fn encode_section<S: AsRef<str>>(
    symbols: &[S],
    lower_case: bool,
) -> Result<alloc::vec::Vec<u8>, VocabError> {
    use alloc::vec::Vec;

    let text_bytes: usize = symbols.iter().map(|s| s.as_ref().len()).sum();
    let count = u32::try_from(symbols.len()).map_err(|_| VocabError::Bounds)?;
    let text_bytes_u32 = u32::try_from(text_bytes).map_err(|_| VocabError::Bounds)?;
    let mut section = Vec::with_capacity(VOCAB_HEADER_BYTES + 4 * symbols.len() + text_bytes);
    section.extend_from_slice(&VOCAB_MAGIC);
    section.extend_from_slice(&count.to_le_bytes());
    let flags = if lower_case { FLAG_LOWER_CASE } else { 0 };
    section.extend_from_slice(&flags.to_le_bytes());
    section.extend_from_slice(&text_bytes_u32.to_le_bytes());
    section.resize(VOCAB_HEADER_BYTES, 0);
    let mut end = 0u32;
    for (index, symbol) in symbols.iter().enumerate() {
        let len = symbol.as_ref().len() as u32;
        if len == 0 {
            return Err(VocabError::BadOffset { index: index as u32 });
        }
        end += len;
        section.extend_from_slice(&end.to_le_bytes());
    }
    for symbol in symbols {
        section.extend_from_slice(symbol.as_ref().as_bytes());
    }
    Ok(section)
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::string::String;

    #[test]
    fn a_section_reads_back_its_symbols() {
        let section = encode_section(&["<eos>", "the", "été", ","], true).unwrap();
        let v = Vocabulary::parse(&section, 4).unwrap();
        assert_eq!(v.len(), 4);
        assert!(v.lower_case());
        assert_eq!(v.symbol(2), Some("été"));
        assert_eq!(v.symbol(4), None);
        assert_eq!(v.find(","), Some(3));
        assert_eq!(v.find("x"), None);
        assert_eq!(v.eos(), Some(0));
        assert_eq!(v.section_bytes(), &section[..]);
        let mut text = String::new();
        v.write_text(&[1, 2, 0, 3, 1, 9], &mut text).unwrap();
        assert_eq!(text, "the été\n, the <?>");
    }

    #[test]
    fn every_damage_is_an_error_not_a_panic() {
        let section = encode_section(&["a", "bc", "d"], false).unwrap();
        assert_eq!(
            Vocabulary::parse(&section, 4).unwrap_err(),
            VocabError::SymbolCount {
                expected: 4,
                found: 3
            }
        );
        for cut in 0..section.len() {
            assert!(Vocabulary::parse(&section[..cut], 3).is_err(), "cut at {cut}");
        }
        let stride = if cfg!(miri) { 7 } else { 1 };
        for at in (0..section.len()).step_by(stride) {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = section.clone();
                damaged[at] ^= flip;
                // Parses or refuses; a symbol of a parsed section is always readable.
                if let Ok(v) = Vocabulary::parse(&damaged, 3) {
                    assert!(v.symbols().all(|s| !s.is_empty()));
                }
            }
        }
        let mut bad_utf8 = section.clone();
        let last = bad_utf8.len() - 1;
        bad_utf8[last] = 0xff;
        assert_eq!(
            Vocabulary::parse(&bad_utf8, 3).unwrap_err(),
            VocabError::NotUtf8 { index: 2 }
        );
        assert_eq!(
            encode_section(&["a", ""], false).unwrap_err(),
            VocabError::BadOffset { index: 1 }
        );
    }
}

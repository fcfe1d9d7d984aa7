//! Text to token ids as the original code's `Vocab.encode_file(path, ordered=True,
//! add_eos=True)` gives them, and ids back to text.
//!
//! Per line (lines end at `\n`, `\r\n` or `\r`, as Python reads a text file): strip the
//! whitespace at both ends, lower-case when the vocabulary says so, split at runs of
//! whitespace, and append `<eos>` (when the vocabulary has it: the original enwik8 and text8
//! vocabularies do not, and their text is encoded without it). A word the vocabulary lacks
//! becomes `<unk>` (or `<UNK>`); a vocabulary with neither refuses it, naming it. Whitespace is
//! Python's (`str.split()`): Unicode white space and the separators U+001C..U+001F.

use anyhow::{bail, Result};
use txl_core::vocab::EOS;

use super::Vocabulary;

/// Whether Python's `str.split()` splits at `c`.
pub fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The lines of `text` as Python's text-mode file iteration gives them (universal newlines),
/// without their line ends; a last line without a line end counts, an empty text has none.
pub fn python_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (line, next) = match rest.find(['\n', '\r']) {
            None => (rest, ""),
            Some(at) => {
                let skip = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
                (&rest[..at], &rest[at + skip..])
            }
        };
        rest = next;
        Some(line)
    })
}

impl Vocabulary {
    /// The token ids of `text`, as the original `Vocab.encode_file(ordered=True, add_eos=True)`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let eos = self.eos();
        let unk = self.unk();
        let mut ids = Vec::new();
        for (number, line) in python_lines(text).enumerate() {
            let line = line.trim_matches(is_python_space);
            let lowered;
            let line = if self.lower_case() {
                lowered = line.to_lowercase();
                lowered.as_str()
            } else {
                line
            };
            for word in line.split(is_python_space).filter(|w| !w.is_empty()) {
                let id = match (self.id(word), unk) {
                    (Some(id), _) => id,
                    // The original refuses an unknown word that holds `<eos>`.
                    (None, Some(unk)) if !word.contains(EOS) => unk,
                    _ => bail!(
                        "line {}: {word:?} is not in the vocabulary, which has no <unk> to stand for it",
                        number + 1
                    ),
                };
                ids.try_reserve(1)?;
                ids.push(id);
            }
            if let Some(eos) = eos {
                ids.try_reserve(1)?;
                ids.push(eos);
            }
        }
        Ok(ids)
    }

    /// The text of `ids`: symbols joined by spaces, `<eos>` as a line break. Ids out of range
    /// are written `<?>`.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut text = String::new();
        let mut line_start = true;
        for &id in ids {
            let symbol = self.symbols().get(id as usize).map_or("<?>", String::as_str);
            if symbol == EOS {
                text.push('\n');
                line_start = true;
                continue;
            }
            if !line_start {
                text.push(' ');
            }
            text.push_str(symbol);
            line_start = false;
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(symbols: &[&str], lower_case: bool) -> Vocabulary {
        Vocabulary::new(symbols.iter().map(|s| s.to_string()).collect(), lower_case).unwrap()
    }

    #[test]
    fn lines_end_as_python_reads_them() {
        let lines: Vec<&str> = python_lines("a\nb\r\nc\rd").collect();
        assert_eq!(lines, ["a", "b", "c", "d"]);
        assert_eq!(python_lines("a\n").count(), 1);
        assert_eq!(python_lines("\n\n").count(), 2);
        assert_eq!(python_lines("").count(), 0);
    }

    #[test]
    fn words_eos_unk_and_lower_case() {
        let v = vocab(&["<eos>", "<unk>", "the", "cat", "@-@"], false);
        assert_eq!(
            v.encode(" The cat @-@ dog \n\n cat").unwrap(),
            [1, 3, 4, 1, 0, 0, 3, 0]
        );
        let lower = vocab(&["<eos>", "<unk>", "the", "cat"], true);
        assert_eq!(lower.encode("The CAT\u{1f}cat").unwrap(), [2, 3, 3, 0]);
        assert_eq!(v.decode(&[2, 3, 0, 3, 0, 9]), "the cat\ncat\n<?>");
    }

    #[test]
    fn no_unk_means_an_error_and_no_eos_means_none_appended() {
        let chars = vocab(&["32", "101", "116"], false);
        assert_eq!(chars.encode("116 101\n32").unwrap(), [2, 1, 0]);
        let error = chars.encode("116 10").unwrap_err().to_string();
        assert!(error.contains("\"10\"") && error.contains("line 1"), "{error}");
        let v = vocab(&["<eos>", "<unk>"], false);
        assert!(v.encode("a<eos>b").is_err());
    }
}

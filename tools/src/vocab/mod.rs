//! Word vocabularies: read from where training left them, kept in the model image, and used to
//! turn text into token ids and ids back into text.
//!
//! - [`read_vocabulary`] reads Hugging Face `TransfoXLTokenizer.save_pretrained`'s `vocab.pkl`
//!   ([`pickle`]), the original code's `cache.pt` (its `torch.save`d corpus, [`corpus`]) or its
//!   vocabulary file, one symbol per line ([`text_file`]).
//! - [`find_vocabulary`] looks beside a checkpoint for one (or takes `--vocab FILE`), and
//!   [`Vocabulary::attach`] adds it to a model image (`core/FORMAT.md`, "Vocabulary section").
//! - [`Vocabulary::encode`] tokenizes as the original `Vocab.encode_file(ordered=True,
//!   add_eos=True)` does ([`tokenize`]); [`Vocabulary::decode`] joins symbols with spaces and
//!   writes `<eos>` as a line break.
//! - [`characters`] tells the original code's character vocabularies (enwik8, text8) apart and
//!   maps raw text to their ids and back, as their preparation scripts write the text.

pub mod characters;
pub mod corpus;
pub mod pickle;
pub mod text_file;
pub mod tokenize;
pub mod unpickle;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use txl_core::vocab::{encode_section, EOS};

/// The symbol unknown words become, when the vocabulary has it (`<UNK>` is tried next, as the
/// original code's `vocab_file` vocabularies spell it).
pub const UNK: &str = "<unk>";
/// The other spelling of [`UNK`].
pub const UNK_UPPER: &str = "<UNK>";

/// A vocabulary on the host: symbol `i` is token id `i`, and a map finds a word's id.
#[derive(Clone, Debug)]
pub struct Vocabulary {
    symbols: Vec<String>,
    index: HashMap<String, u32>,
    lower_case: bool,
}

impl Vocabulary {
    /// A vocabulary of `symbols` (id = position). Every symbol must be non-empty and distinct.
    pub fn new(symbols: Vec<String>, lower_case: bool) -> Result<Vocabulary> {
        if symbols.is_empty() {
            bail!("the vocabulary is empty");
        }
        let count = u32::try_from(symbols.len()).context("more symbols than token ids can number")?;
        let mut index = HashMap::with_capacity(symbols.len());
        for (id, symbol) in symbols.iter().enumerate() {
            if symbol.is_empty() {
                bail!("vocabulary symbol {id} is empty");
            }
            if let Some(first) = index.insert(symbol.clone(), id as u32) {
                bail!("the vocabulary holds {symbol:?} twice (ids {first} and {id})");
            }
        }
        debug_assert_eq!(index.len(), count as usize);
        Ok(Vocabulary {
            symbols,
            index,
            lower_case,
        })
    }

    /// The vocabulary a model image carries.
    pub fn from_image(vocabulary: &txl_core::Vocabulary<'_>) -> Vocabulary {
        let symbols: Vec<String> = vocabulary.symbols().map(str::to_owned).collect();
        let mut index = HashMap::with_capacity(symbols.len());
        for (id, symbol) in symbols.iter().enumerate() {
            // A lookup takes the first of equal symbols, as `txl_core::Vocabulary::find` does.
            index.entry(symbol.clone()).or_insert(id as u32);
        }
        Vocabulary {
            symbols,
            index,
            lower_case: vocabulary.lower_case(),
        }
    }

    /// Symbols, one per token id.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Whether there are no symbols (never: [`Vocabulary::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// Every symbol, in id order.
    pub fn symbols(&self) -> &[String] {
        &self.symbols
    }

    /// Whether text is lower-cased before lookup (the model was trained on lower-cased text).
    pub fn lower_case(&self) -> bool {
        self.lower_case
    }

    /// The id of `word`, if it is a symbol.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.index.get(word).copied()
    }

    /// The id of `<eos>`, which ends every line, if the vocabulary has it.
    pub fn eos(&self) -> Option<u32> {
        self.id(EOS)
    }

    /// The id unknown words become: `<unk>`, else `<UNK>`, else none (they are an error).
    pub fn unk(&self) -> Option<u32> {
        self.id(UNK).or_else(|| self.id(UNK_UPPER))
    }

    /// The image's vocabulary section for this vocabulary.
    pub fn section(&self) -> Result<Vec<u8>> {
        encode_section(&self.symbols, self.lower_case).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// `image` with this vocabulary as its vocabulary section (replacing any it had). The
    /// vocabulary must have as many symbols as the model has tokens.
    pub fn attach(&self, image: &[u8]) -> Result<Vec<u8>> {
        let n_token = image
            .get(24..28)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])));
        if let Some(n_token) = n_token.filter(|&n| n as usize != self.len()) {
            bail!(
                "the vocabulary has {} symbols but the model has {n_token} tokens (n_token): \
                 it belongs to another model",
                self.len()
            );
        }
        txl_core::image::set_vocabulary(image, Some(&self.section()?))
            .context("cannot add the vocabulary to the model image")
    }

    /// A few symbols for a summary: the first `count`, quoted, comma-separated.
    pub fn sample(&self, count: usize) -> String {
        let shown: Vec<String> = self
            .symbols
            .iter()
            .take(count)
            .map(|s| format!("{s:?}"))
            .collect();
        let more = if self.len() > count { ", ..." } else { "" };
        format!("{}{more}", shown.join(", "))
    }
}

/// Reads a vocabulary file, told apart by content: a pickle (`vocab.pkl` of
/// `TransfoXLTokenizer.save_pretrained`), a `torch.save` file (the original code's `cache.pt`,
/// ZIP or legacy), or text with one symbol per line (the original code's `vocab_file`).
pub fn read_vocabulary(path: &Path) -> Result<Vocabulary> {
    let head = read_head(path)?;
    // `torch.save`'s legacy layout starts with its magic number, pickled as a LONG1.
    let legacy_torch = head.starts_with(&[
        0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8,
    ]);
    if head.starts_with(b"PK\x03\x04") || legacy_torch {
        corpus::read_cache_pt(path)
    } else if head.first() == Some(&0x80) {
        pickle::read_hf_vocab(path)
    } else {
        text_file::read_vocab_txt(path)
    }
}

fn read_head(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(16).read_to_end(&mut head))
        .with_context(|| format!("cannot read the vocabulary {}", path.display()))?;
    Ok(head)
}

/// The files [`find_vocabulary`] looks for beside a checkpoint, in this order.
pub const VOCAB_FILES: [&str; 3] = ["vocab.pkl", "vocab.txt", "cache.pt"];

/// The vocabulary for the checkpoint at `checkpoint` (a directory or a weights file): the file
/// `explicit` when given (`--vocab FILE`), else the first of [`VOCAB_FILES`] in the checkpoint's
/// directory, else none (a byte-level model).
pub fn find_vocabulary(checkpoint: &Path, explicit: Option<&Path>) -> Result<Option<Vocabulary>> {
    if let Some(path) = explicit {
        return read_vocabulary(path).map(Some);
    }
    let dir: PathBuf = if checkpoint.is_dir() {
        checkpoint.to_path_buf()
    } else {
        checkpoint
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    };
    for name in VOCAB_FILES {
        let path = dir.join(name);
        if path.is_file() {
            return read_vocabulary(&path).map(Some);
        }
    }
    Ok(None)
}

/// `image` with `vocabulary` added as its vocabulary section (what `txl convert` does with
/// [`find_vocabulary`]'s answer).
pub fn add_vocabulary(image: &[u8], vocabulary: &Vocabulary) -> Result<Vec<u8>> {
    vocabulary.attach(image)
}

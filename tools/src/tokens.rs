//! Reading token files: whitespace-separated decimal ids, one token per byte (or, for a
//! character model of the original code, per character mapped to its symbol's id), or text
//! tokenized with the model's vocabulary.
//!
//! A file of `n` bytes holds at most `n` tokens, kept as 4-byte ids: the ids are allocated
//! fallibly, so a file too large for memory is an error naming it, not an abort.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use txl_core::Model;

use crate::vocab::characters::CharacterVocabulary;
use crate::vocab::Vocabulary;

/// Reads whitespace-separated decimal token ids.
pub fn read_token_ids(path: &Path) -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut ids = with_room(path, text.split_whitespace().count())?;
    for (i, word) in text.split_whitespace().enumerate() {
        let id = word
            .parse::<u32>()
            .with_context(|| format!("{}: token {} is not a token id: {word:?}", path.display(), i + 1))?;
        ids.push(id);
    }
    Ok(ids)
}

/// Reads a file whose every byte is one token id.
pub fn read_byte_tokens(path: &Path) -> Result<Vec<u32>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut ids = with_room(path, bytes.len())?;
    ids.extend(bytes.into_iter().map(u32::from));
    Ok(ids)
}

/// Reads raw bytes as `model` takes them: with a character vocabulary (the original code's
/// enwik8 or text8 models, [`CharacterVocabulary`]) each byte or character becomes its
/// symbol's id as the preparation script and `Vocab.encode_file` give it; otherwise every byte
/// is one token id, as [`read_byte_tokens`].
pub fn read_raw_text(path: &Path, model: &Model<'_>) -> Result<Vec<u32>> {
    let characters = model
        .image()
        .vocabulary()
        .and_then(|v| CharacterVocabulary::of(&Vocabulary::from_image(&v)));
    let Some(characters) = characters else {
        return read_byte_tokens(path);
    };
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    characters.encode(&bytes, true).with_context(|| {
        format!(
            "{}: mapping its bytes to the vocabulary's characters",
            path.display()
        )
    })
}

/// Reads text and tokenizes it with `model`'s vocabulary as the original code's
/// `Vocab.encode_file(ordered=True, add_eos=True)` does ([`Vocabulary::encode`]); a model
/// without a vocabulary (byte-level) takes every byte as one token, as [`read_byte_tokens`].
pub fn read_text_tokens(path: &Path, model: &Model<'_>) -> Result<Vec<u32>> {
    let Some(vocabulary) = model.image().vocabulary() else {
        return read_byte_tokens(path);
    };
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow!(
            "{}: not UTF-8 text (byte {}); a model with a vocabulary reads words",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    Vocabulary::from_image(&vocabulary)
        .encode(&text)
        .with_context(|| format!("tokenizing {}", path.display()))
}

/// An empty vector with room for the `count` tokens of the file at `path`.
fn with_room(path: &Path, count: usize) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    ids.try_reserve_exact(count).map_err(|_| {
        anyhow!(
            "{}: cannot allocate {} bytes for its {count} tokens",
            path.display(),
            count.saturating_mul(4)
        )
    })?;
    Ok(ids)
}

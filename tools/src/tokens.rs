//! Reading token files: whitespace-separated decimal ids, or one token per byte.

use std::path::Path;

use anyhow::{Context, Result};

/// Reads whitespace-separated decimal token ids.
pub fn read_token_ids(path: &Path) -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.split_whitespace()
        .enumerate()
        .map(|(i, word)| {
            word.parse::<u32>()
                .with_context(|| format!("{}: token {} is not a token id: {word:?}", path.display(), i + 1))
        })
        .collect()
}

/// Reads a file whose every byte is one token id.
pub fn read_byte_tokens(path: &Path) -> Result<Vec<u32>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes.into_iter().map(u32::from).collect())
}

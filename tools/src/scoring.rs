//! Scoring a token sequence with the core: consecutive segments of `tgt_len`, memory carried.

use std::path::Path;

use anyhow::{Context, Result};
use txl_core::{Model, Session, SessionOptions};

use crate::model_file::Arena;

/// What `score` computed.
#[derive(Clone, Debug, PartialEq)]
pub struct Scores {
    /// `logp[i] = ln p(t[i+1] | t[..=i])`, length `N - 1`.
    pub logp: Vec<f32>,
    /// Full log-probability rows of the first `rows_kept` positions, `(rows_kept, n_token)`.
    pub rows: Vec<f32>,
    /// How many rows `rows` holds.
    pub rows_kept: usize,
}

impl Scores {
    /// Mean negative log-likelihood in nats (0 when nothing was predicted).
    pub fn nll(&self) -> f64 {
        if self.logp.is_empty() {
            return 0.0;
        }
        -self.logp.iter().map(|&v| v as f64).sum::<f64>() / self.logp.len() as f64
    }

    /// Mean bits per token.
    pub fn bits_per_token(&self) -> f64 {
        self.nll() / std::f64::consts::LN_2
    }

    /// FNV-1a (32-bit) over the little-endian bits of every log-probability: equal digests
    /// mean bit-identical results.
    pub fn digest(&self) -> u32 {
        fnv1a(self.logp.iter().flat_map(|v| v.to_bits().to_le_bytes()))
    }
}

/// FNV-1a, 32-bit.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u32 {
    bytes.into_iter().fold(0x811c_9dc5u32, |hash, b| {
        (hash ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// Scores `tokens` in segments of `options.tgt_len`, keeping the first `keep_rows` full rows.
/// `progress(done)` is called after each segment with the number of tokens processed.
pub fn score(
    model: &Model<'_>,
    tokens: &[u32],
    options: SessionOptions,
    keep_rows: usize,
    mut progress: impl FnMut(usize),
) -> Result<Scores, txl_core::Error> {
    let mut arena = Arena::new(Session::arena_bytes(model, &options)?);
    let mut session = Session::new(model, arena.bytes_mut(), options)?;
    let n_token = model.config().n_token as usize;
    let rows_kept = keep_rows.min(tokens.len());
    let mut scores = Scores {
        logp: Vec::with_capacity(tokens.len().saturating_sub(1)),
        rows: Vec::with_capacity(rows_kept * n_token),
        rows_kept,
    };
    let mut start = 0;
    for segment in tokens.chunks(options.tgt_len as usize) {
        session.forward(segment, |i, row| {
            let position = start + i;
            if let Some(&next) = tokens.get(position + 1) {
                scores.logp.push(row[next as usize]);
            }
            if position < rows_kept {
                scores.rows.extend_from_slice(row);
            }
        })?;
        start += segment.len();
        progress(start);
    }
    Ok(scores)
}

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

#[cfg(test)]
mod tests {
    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(super::fnv1a(*b""), 0x811c_9dc5);
        assert_eq!(super::fnv1a(*b"a"), 0xe40c_292c);
        assert_eq!(super::fnv1a(*b"foobar"), 0xbf9c_f968);
    }
}

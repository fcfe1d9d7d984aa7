//! Evaluating a long text: split it into `B` contiguous streams that run side by side, each
//! with its own memory, and report the mean negative log-likelihood, bits per token and
//! perplexity over every predicted token.

use std::time::Instant;

use txl_core::SessionOptions;

use crate::error::Error;
use crate::reference::Reference;

/// What [`eval`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalReport {
    /// Tokens in the text.
    pub tokens: usize,
    /// Tokens predicted (every token but the first).
    pub predicted: usize,
    /// Streams the text was split into.
    pub streams: usize,
    /// Mean negative log-likelihood, nats per token.
    pub nll: f64,
    /// `nll / ln 2`: bits per token (bits per character with one token per byte).
    pub bits_per_token: f64,
    /// `e^nll`.
    pub ppl: f64,
    /// Wall-clock seconds of scoring.
    pub seconds: f64,
    /// Tokens processed per second, over all streams.
    pub tokens_per_second: f64,
}

/// Splits `tokens` into at most `batch` contiguous streams. Consecutive streams share one
/// token (the last of one is the first of the next), so every token after the first is
/// predicted exactly once: by the position before it, in whichever stream holds both.
pub fn split_streams(tokens: &[u32], batch: usize) -> Vec<&[u32]> {
    let predicted = tokens.len().saturating_sub(1);
    if predicted == 0 {
        return Vec::new();
    }
    let per_stream = predicted.div_ceil(batch.max(1));
    (0..predicted)
        .step_by(per_stream)
        .map(|start| &tokens[start..(start + per_stream + 1).min(tokens.len())])
        .collect()
}

/// Scores `tokens` as `batch` side-by-side streams ([`split_streams`]). `progress(done, total)`
/// is called after each step with tokens processed so far and in all.
pub fn eval(
    reference: &mut Reference,
    tokens: &[u32],
    options: &SessionOptions,
    batch: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<EvalReport, Error> {
    let streams = split_streams(tokens, batch);
    let total: usize = streams.iter().map(|s| s.len()).sum();
    let started = Instant::now();
    let scores = reference.score_batch(&streams, options, 0, |done| progress(done, total))?;
    let seconds = started.elapsed().as_secs_f64();
    let predicted: usize = scores.iter().map(|s| s.logp.len()).sum();
    let sum: f64 = scores.iter().flat_map(|s| s.logp.iter()).sum();
    let nll = if predicted == 0 {
        0.0
    } else {
        -sum / predicted as f64
    };
    Ok(EvalReport {
        tokens: tokens.len(),
        predicted,
        streams: streams.len(),
        nll,
        bits_per_token: nll / std::f64::consts::LN_2,
        ppl: nll.exp(),
        seconds,
        tokens_per_second: if seconds > 0.0 {
            total as f64 / seconds
        } else {
            0.0
        },
    })
}

#[cfg(test)]
mod tests {
    use super::split_streams;

    #[test]
    fn streams_overlap_by_one_token_and_cover_every_prediction() {
        let tokens: Vec<u32> = (0..10).collect();
        for batch in 1..=12 {
            let streams = split_streams(&tokens, batch);
            assert!(streams.len() <= batch);
            let predicted: Vec<u32> = streams.iter().flat_map(|s| s[1..].iter().copied()).collect();
            assert_eq!(predicted, (1..10).collect::<Vec<_>>(), "batch {batch}");
        }
        assert!(split_streams(&[7], 4).is_empty());
    }
}

//! Scoring a whole token sequence on a host (feature `alloc`): consecutive segments of
//! `tgt_len` with the memory carried between them, every next token's log-probability kept.
//! This is what `txl score` and the quantizer measure with; the firmware runs the same loop
//! over its own buffers.
//!
//! ```no_run
//! # fn demo(model: &txl_core::Model<'_>) -> Result<(), txl_core::Error> {
//! use txl_core::{scoring, SessionOptions};
//!
//! let options = SessionOptions::from_config(model.config());
//! let scores = scoring::score(model, &[1, 2, 3, 4], options, 0, |_done| {})?;
//! println!("{:.4} bits per token, digest {:#010x}", scores.bits_per_token(), scores.digest());
//! # Ok(()) }
//! ```

use alloc::vec::Vec;

use crate::aligned::AlignedBytes;
use crate::digest::Digest;
use crate::error::Error;
use crate::kernels::MAX_POSITIONS_PER_PASS;
use crate::model::Model;
use crate::options::SessionOptions;
use crate::session::Session;

/// What [`score`] computed.
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
        -self.logp.iter().map(|&v| f64::from(v)).sum::<f64>() / self.logp.len() as f64
    }

    /// Mean bits per token.
    pub fn bits_per_token(&self) -> f64 {
        self.nll() / core::f64::consts::LN_2
    }

    /// The [`Digest`] of every log-probability: equal digests mean bit-identical results.
    pub fn digest(&self) -> u32 {
        Digest::of(&self.logp)
    }
}

/// Positions the linear layers take per pass in the sessions [`score`] and [`start`] make: the
/// most a pass takes ([`MAX_POSITIONS_PER_PASS`]: 128 on a host), so that a model whose
/// weights do not fit in the CPU's caches reads them once for every 128 positions of a
/// segment (the output layer's, once for every [`MAX_OUTPUT_ROWS`]). At the published
/// WikiText-103 shape (285 M parameters, segments of 128) sixteen a pass scored f32 twice and
/// int8 1.35 times as fast as pairs, 64 f32 1.16 and int8 1.08 times as fast as sixteen, and
/// 128 f32 and f16 a few percent faster than 64 (int8 as fast); on the small bundled model
/// neither was faster or slower (docs/PERFORMANCE.md, "What bounds it"). The bits are those of pairs, a
/// device's sessions ([`Session::new`]); the arena is larger by the rows of the positions.
///
/// [`MAX_OUTPUT_ROWS`]: crate::arena::MAX_OUTPUT_ROWS
pub const POSITIONS_PER_PASS: usize = MAX_POSITIONS_PER_PASS;

/// A zeroed arena for a session of `model` under `options` made by [`start`] (large enough for
/// [`Session::new`] too: [`Session::arena_bytes`] is never more).
pub fn arena_for(model: &Model<'_>, options: &SessionOptions) -> Result<AlignedBytes, Error> {
    AlignedBytes::zeroed(Session::arena_bytes_for_positions_per_pass(
        model,
        options,
        POSITIONS_PER_PASS,
    )?)
}

/// A session of `model` in `arena` (from [`arena_for`]) whose linear layers take
/// [`POSITIONS_PER_PASS`] positions a pass.
pub fn start<'m, 'a>(
    model: &Model<'m>,
    arena: &'a mut AlignedBytes,
    options: SessionOptions,
) -> Result<Session<'m, 'a>, Error> {
    Session::with_positions_per_pass(model, arena.bytes_mut(), options, POSITIONS_PER_PASS)
}

/// Whether the text's last token goes through the session. Its row predicts nothing within
/// the text, so holding it back loses no score; the memory then ends one token short, where a
/// continuation that starts with that token picks up (`txl score --state-out`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastToken {
    /// Every token goes through the session (the memory holds the whole text).
    Feed,
    /// The last token does not.
    Hold,
}

/// Scores `tokens` in segments of `options.tgt_len` in a new session, keeping the first
/// `keep_rows` full rows. `progress(done)` is called after each segment with the number of
/// tokens processed.
pub fn score(
    model: &Model<'_>,
    tokens: &[u32],
    options: SessionOptions,
    keep_rows: usize,
    progress: impl FnMut(usize),
) -> Result<Scores, Error> {
    let mut arena = arena_for(model, &options)?;
    let mut session = start(model, &mut arena, options)?;
    score_in(&mut session, tokens, LastToken::Feed, keep_rows, progress)
}

/// Scores `tokens` like [`score`], in `session` as it is (a restored state, say) and leaving
/// its memory after the text: after every token, or all but the last ([`LastToken`]).
pub fn score_in(
    session: &mut Session<'_, '_>,
    tokens: &[u32],
    last: LastToken,
    keep_rows: usize,
    mut progress: impl FnMut(usize),
) -> Result<Scores, Error> {
    let n_token = session.model().config().n_token as usize;
    let tgt_len = session.options().tgt_len as usize;
    let fed = match last {
        LastToken::Feed => tokens,
        LastToken::Hold => &tokens[..tokens.len().saturating_sub(1)],
    };
    let rows_kept = keep_rows.min(fed.len());
    let mut scores = Scores {
        logp: reserve(tokens.len().saturating_sub(1))?,
        rows: reserve(rows_kept.checked_mul(n_token).ok_or(Error::SizeOverflow)?)?,
        rows_kept,
    };
    // each position's next token: only its log-probability is needed, past the kept rows
    let mut targets: Vec<Option<u32>> = Vec::new();
    targets
        .try_reserve_exact(tgt_len.min(fed.len()))
        .map_err(|_| Error::AllocationFailed {
            bytes: tgt_len
                .min(fed.len())
                .saturating_mul(core::mem::size_of::<Option<u32>>()),
        })?;
    let mut start = 0;
    for segment in fed.chunks(tgt_len) {
        targets.clear();
        targets.extend(
            (start..start + segment.len()).map(|position| match tokens.get(position + 1) {
                Some(&next) if position >= rows_kept => Some(next),
                _ => None,
            }),
        );
        session.forward_scoring(segment, &targets, |i, row| {
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

/// An empty vector with room for `capacity` values, or the error that says it cannot have it.
fn reserve(capacity: usize) -> Result<Vec<f32>, Error> {
    let mut values = Vec::new();
    values
        .try_reserve_exact(capacity)
        .map_err(|_| Error::AllocationFailed {
            bytes: capacity.saturating_mul(4),
        })?;
    Ok(values)
}

//! What a backend does, independent of where it runs: start the streams' memories, then run
//! one step (a segment of each active stream) and hand back the log-probabilities asked for.

use txl_core::{MemInit, SessionOptions};

use crate::error::Error;

/// One stream's segment in a step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment<'a> {
    /// Which stream (its memory).
    pub stream: usize,
    /// The segment's tokens, 1..=tgt_len of them.
    pub tokens: &'a [u32],
}

/// Runs `streams` in lockstep in segments of `tgt_len`: step `k` holds segment `k` (tokens
/// `k * tgt_len..`) of every stream that still has one. Yields each step's first position and
/// its segments, in stream order.
pub(crate) fn lockstep<'s>(
    streams: &'s [&'s [u32]],
    tgt_len: usize,
) -> impl Iterator<Item = (usize, Vec<Segment<'s>>)> + 's {
    let steps = streams
        .iter()
        .map(|s| s.len().div_ceil(tgt_len))
        .max()
        .unwrap_or(0);
    (0..steps).map(move |step| {
        let start = step * tgt_len;
        let segments = streams
            .iter()
            .enumerate()
            .filter(|(_, tokens)| start < tokens.len())
            .map(|(stream, tokens)| Segment {
                stream,
                tokens: &tokens[start..(start + tgt_len).min(tokens.len())],
            })
            .collect();
        (start, segments)
    })
}

/// What a step hands back.
#[derive(Clone, Debug, Default)]
pub(crate) struct StepOutput {
    /// Per row of the step (the segments' positions in order): `ln p(target)`, or NaN where
    /// the row has no target.
    pub target_logp: Vec<f64>,
    /// The full rows asked for, in the order asked, `n_token` each.
    pub full_rows: Vec<f64>,
}

/// The evaluation settings a backend needs, checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// Longest segment.
    pub tgt_len: usize,
    /// Positions kept in memory.
    pub mem_len: usize,
    /// Largest distance with its own position key.
    pub max_distance: usize,
    /// Same-length attention.
    pub same_length: bool,
    /// Start from `mem_len` zero states.
    pub zero_memory: bool,
}

impl Settings {
    /// Checks `options`.
    pub fn new(options: &SessionOptions) -> Result<Settings, Error> {
        if options.tgt_len == 0 {
            return Err(Error::BadOptions("tgt_len must be at least 1".into()));
        }
        let tgt_len = options.tgt_len as usize;
        let mem_len = options.mem_len as usize;
        // The longest distance a query sees is klen - 1 = mem_len + tgt_len - 1, and a
        // position key is kept for each distance up to it.
        let longest = mem_len
            .checked_add(tgt_len - 1)
            .filter(|longest| longest.checked_add(1).is_some())
            .ok_or_else(|| {
                Error::BadOptions(format!(
                    "mem_len {mem_len} + tgt_len {tgt_len} overflows the address space"
                ))
            })?;
        let max_distance = match options.clamp_len {
            0 => longest,
            clamp => longest.min(clamp as usize),
        };
        Ok(Settings {
            tgt_len,
            mem_len,
            max_distance,
            same_length: options.same_length,
            zero_memory: options.mem_init == MemInit::Zeros && mem_len > 0,
        })
    }
}

/// The rows of a step: `targets[r]` is the token row `r` predicts (if any); `full_rows` lists
/// the rows whose whole distribution is wanted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wanted<'a> {
    /// One entry per row.
    pub targets: &'a [Option<u32>],
    /// Row indices, increasing.
    pub full_rows: &'a [usize],
}

/// Collects a step's outputs from log-probability rows computed in chunks.
pub(crate) fn collect_rows<T: Copy>(
    wanted: &Wanted<'_>,
    first_row: usize,
    rows: &[T],
    n_token: usize,
    to_f64: impl Fn(T) -> f64,
    out: &mut StepOutput,
) {
    for (i, row) in rows.chunks_exact(n_token).enumerate() {
        let r = first_row + i;
        out.target_logp.push(match wanted.targets[r] {
            Some(t) => to_f64(row[t as usize]),
            None => f64::NAN,
        });
        if wanted.full_rows.binary_search(&r).is_ok() {
            out.full_rows.extend(row.iter().map(|&v| to_f64(v)));
        }
    }
}

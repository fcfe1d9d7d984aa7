//! Comparing a candidate model (quantized, say) against a reference on the same tokens: bits
//! per token of each, KL divergence, top-1 agreement and the largest log-probability change.

use serde::Serialize;
use txl_core::{kernels, Model, SessionOptions};

/// What [`compare`] measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// Tokens scored (`N`; `N - 1` predictions).
    pub tokens: usize,
    /// Reference bits per token.
    pub reference_bits_per_token: f64,
    /// Candidate bits per token.
    pub candidate_bits_per_token: f64,
    /// `(candidate - reference) / reference`.
    pub relative_delta: f64,
    /// Mean over positions of `KL(reference ‖ candidate)`, in nats.
    pub mean_kl: f64,
    /// Fraction of positions where both rank the same token first.
    pub top1_agreement: f64,
    /// Largest `|ln p_ref(t) - ln p_cand(t)|` over the scored next tokens.
    pub max_abs_delta_logp: f64,
}

/// The values [`compare`] keeps of the reference's rows for `tokens` scored in segments of
/// `tgt_len` with a vocabulary of `n_token`: one segment's rows, no more than the tokens.
pub fn rows_values(tgt_len: usize, tokens: usize, n_token: usize) -> usize {
    tgt_len.min(tokens).saturating_mul(n_token)
}

/// Runs `reference` and `candidate` side by side over `tokens` in segments of `tgt_len`, each
/// with its own options (they must share `tgt_len`), and compares every prediction.
pub fn compare(
    reference: (&Model<'_>, SessionOptions),
    candidate: (&Model<'_>, SessionOptions),
    tokens: &[u32],
    mut progress: impl FnMut(usize),
) -> Result<Comparison, txl_core::Error> {
    let (ref_model, ref_options) = reference;
    let (cand_model, cand_options) = candidate;
    if ref_options.tgt_len != cand_options.tgt_len
        || ref_model.config().n_token != cand_model.config().n_token
    {
        return Err(txl_core::Error::BadOptions);
    }
    let mut ref_arena = txl_core::scoring::arena_for(ref_model, &ref_options)?;
    let mut cand_arena = txl_core::scoring::arena_for(cand_model, &cand_options)?;
    let mut ref_session = txl_core::scoring::start(ref_model, &mut ref_arena, ref_options)?;
    let mut cand_session = txl_core::scoring::start(cand_model, &mut cand_arena, cand_options)?;

    let n_token = ref_model.config().n_token as usize;
    let segment_len = ref_options.tgt_len as usize;
    // (segment, n_token): the reference's rows of one segment, allocated fallibly.
    let row_values = rows_values(segment_len, tokens.len(), n_token);
    let mut ref_rows = Vec::new();
    ref_rows
        .try_reserve_exact(row_values)
        .map_err(|_| txl_core::Error::AllocationFailed {
            bytes: row_values.saturating_mul(4),
        })?;
    ref_rows.resize(row_values, 0.0f32);
    let (mut ref_nll, mut cand_nll, mut kl, mut agree, mut max_delta) =
        (0.0f64, 0.0f64, 0.0f64, 0usize, 0.0f64);
    let mut predictions = 0usize;
    let mut start = 0;
    for segment in tokens.chunks(segment_len) {
        ref_session.forward(segment, |i, row| {
            ref_rows[i * n_token..(i + 1) * n_token].copy_from_slice(row)
        })?;
        cand_session.forward(segment, |i, cand| {
            let Some(&next) = tokens.get(start + i + 1) else {
                return;
            };
            let reference = &ref_rows[i * n_token..(i + 1) * n_token];
            let (lp, lq) = (reference[next as usize] as f64, cand[next as usize] as f64);
            ref_nll -= lp;
            cand_nll -= lq;
            max_delta = max_delta.max((lp - lq).abs());
            kl += reference
                .iter()
                .zip(cand)
                .map(|(&p, &q)| (p as f64).exp() * (p as f64 - q as f64))
                .sum::<f64>();
            agree += (kernels::argmax(reference) == kernels::argmax(cand)) as usize;
            predictions += 1;
        })?;
        start += segment.len();
        progress(start);
    }
    let n = predictions.max(1) as f64;
    let (ref_bits, cand_bits) = (
        ref_nll / n / std::f64::consts::LN_2,
        cand_nll / n / std::f64::consts::LN_2,
    );
    Ok(Comparison {
        tokens: tokens.len(),
        reference_bits_per_token: ref_bits,
        candidate_bits_per_token: cand_bits,
        relative_delta: if ref_bits > 0.0 {
            (cand_bits - ref_bits) / ref_bits
        } else {
            0.0
        },
        mean_kl: kl / n,
        top1_agreement: agree as f64 / n,
        max_abs_delta_logp: max_delta,
    })
}

//! `score`: the log-probability of every next token of the build-time token file, as
//! `txl score` computes it on the host, plus the instructions it took.
//!
//! The last line is `score tokens=N bits_per_token=X digest=0xHHHHHHHH instructions_per_token=Y`:
//! `digest` is `txl_core::digest::Digest` over every `ln p(t[i+1] | t[..=i])`,
//! `i < N - 1`, exactly as `txl score --json` prints it, so equal digests mean bit-identical
//! log-probabilities; `bits_per_token` is computed in f64 in the same order as on the host. On a
//! board without an FPU the line goes on with `soft_float_calls=S soft_float_calls_per_token=Z`:
//! the calls into software floating point the forward passes made ([`crate::soft_float`]; the
//! score's own sum of ln p in f64 is not among them).

use core::hint::black_box;

use defmt::info;
use heapless::Vec;
use txl_core::{macs, Session};

use crate::counter::InstructionCounter;
use crate::resume::{self, Progress};
use crate::{soft_float, Failure};

/// Longest segment this mode feeds (`tgt_len` above it is refused).
pub const MAX_SEGMENT: usize = 1024;

/// Positions of a segment whose next token is named to the session (the rest, in segments
/// longer than this, get full rows: the same `ln p`): 512 bytes of stack, where a target for
/// each of [`MAX_SEGMENT`] positions would take 8 KiB.
const TARGETS: usize = 64;

/// Scores `tokens` (one token id per byte) in segments of `tgt_len`. After a reset that
/// [`resume`] saved a record for, it picks up where the score stopped; with `reset_after =
/// Some(k)` (and no record) it saves the state after `k` segments and resets.
pub fn run(
    mut session: Session<'_, '_>,
    tokens: &[u8],
    counter: &InstructionCounter,
    reset_after: Option<usize>,
) -> Result<(), Failure> {
    let options = *session.options();
    let tgt_len = options.tgt_len as usize;
    if tgt_len > MAX_SEGMENT {
        return Err(Failure::Args("score feeds segments of at most 1024 tokens"));
    }
    if reset_after.is_some() && crate::build::SURVIVING_RAM.is_none() {
        // the build's reason, when it has one (the record does not fit beside the arena)
        return Err(Failure::Args(if crate::build::NO_SURVIVING_RAM.is_empty() {
            resume::NO_SURVIVING_RAM
        } else {
            crate::build::NO_SURVIVING_RAM
        }));
    }
    let mut progress = match resume::take(&mut session)? {
        Some(progress) => {
            info!(
                "score: resumed after a reset: session state restored, {=usize} tokens predicted before it",
                progress.predicted
            );
            progress
        }
        None => Progress::start(),
    };
    info!(
        "score: {=usize} tokens in segments of {=usize}",
        tokens.len(),
        tgt_len
    );
    let mut segment: Vec<u32, MAX_SEGMENT> = Vec::new();
    let mut targets: Vec<Option<u32>, TARGETS> = Vec::new();
    let segments = tokens.chunks(tgt_len).enumerate().skip(progress.next_segment);
    for (index, chunk) in segments {
        if reset_after == Some(index) && !progress.resumed {
            progress.next_segment = index;
            resume::save_and_reset(&session, &progress)?;
        }
        segment.clear();
        segment.extend(chunk.iter().map(|&t| u32::from(t)));
        let base = index * tgt_len;
        // each position's next token, as `txl score` asks for it (an adaptive softmax computes
        // only its cluster; an integer session turns only its ln p into f32)
        targets.clear();
        targets
            .extend((0..chunk.len().min(TARGETS)).map(|i| tokens.get(base + i + 1).map(|&t| u32::from(t))));
        let start = counter.read();
        let p = &mut progress;
        session.forward_scoring(&segment, &targets, |i, log_probs| {
            if let Some(&next) = tokens.get(base + i + 1) {
                let log_prob = log_probs[usize::from(next)];
                p.digest.push(log_prob);
                if soft_float::COUNTED {
                    // The sum is the score's own arithmetic, not the forward pass's: its calls
                    // are counted apart (`black_box` keeps them between the two readings).
                    let before = soft_float::calls();
                    p.sum = black_box(black_box(p.sum) + f64::from(black_box(log_prob)));
                    p.scoring_soft_float_calls += u64::from(soft_float::calls().wrapping_sub(before));
                } else {
                    p.sum += f64::from(log_prob); // in order, as the host sums it
                }
                p.predicted += 1;
            }
        })?;
        progress.spent += counter.since(start);
    }
    let Progress {
        digest,
        sum,
        predicted,
        spent,
        scoring_soft_float_calls,
        ..
    } = progress;
    let nll = -sum / predicted as f64;
    let bits_per_token = nll / core::f64::consts::LN_2;

    let instructions = spent.instructions();
    let macs = macs::score_macs(session.model().config(), &options, tokens.len());
    let per_token = instructions / tokens.len() as u64;
    // Instructions per MAC with two decimals, rounded.
    let per_mac_x100 = (instructions * 100 + macs / 2) / macs.max(1);
    info!(
        "score: {=u64} instructions in the forward passes, {=u64} multiply-accumulates ({=u64} per token)",
        instructions,
        macs,
        macs / tokens.len() as u64
    );
    info!(
        "score macs_per_token={=u64} instructions_per_mac={=u64}.{=u64:02}",
        macs / tokens.len() as u64,
        per_mac_x100 / 100,
        per_mac_x100 % 100
    );
    crate::stack::report();
    if !soft_float::COUNTED {
        info!(
            "score tokens={=usize} bits_per_token={=f64} digest=0x{=u32:08x} instructions_per_token={=u64}",
            tokens.len(),
            bits_per_token,
            digest.value(),
            per_token
        );
        return Ok(());
    }
    let soft_float_calls = spent.soft_float_calls - scoring_soft_float_calls;
    info!(
        "score: {=u64} calls into software floating point in the forward passes ({=u64} more in the score's own sum of ln p, not counted; the counting's own {=u64} instructions are not in the instruction count)",
        soft_float_calls,
        scoring_soft_float_calls,
        spent.soft_float_calls * soft_float::WRAPPER_INSTRUCTIONS
    );
    info!(
        "score tokens={=usize} bits_per_token={=f64} digest=0x{=u32:08x} instructions_per_token={=u64} soft_float_calls={=u64} soft_float_calls_per_token={=u64}",
        tokens.len(),
        bits_per_token,
        digest.value(),
        per_token,
        soft_float_calls,
        soft_float_calls / tokens.len() as u64
    );
    Ok(())
}

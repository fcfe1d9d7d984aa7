//! Text generation with the core: feed a prompt, then one token at a time.

use txl_core::sampling::{Sampler, Sampling};
use txl_core::{Model, SessionOptions};

/// Continues `prompt` by `count` tokens; returns the new tokens. Room for them is asked of
/// the allocator up front and fallibly: a `count` it refuses is
/// [`txl_core::Error::AllocationFailed`].
pub fn generate(
    model: &Model<'_>,
    options: SessionOptions,
    prompt: &[u32],
    count: usize,
    sampling: Sampling,
) -> Result<Vec<u32>, txl_core::Error> {
    let mut generated = Vec::new();
    generated
        .try_reserve_exact(count)
        .map_err(|_| txl_core::Error::AllocationFailed {
            bytes: count.saturating_mul(4),
        })?;
    let mut arena = txl_core::scoring::arena_for(model, &options)?;
    let mut session = txl_core::scoring::start(model, &mut arena, options)?;
    let mut sampler = Sampler::new(sampling);
    let mut next = None;
    for segment in prompt.chunks(options.tgt_len as usize) {
        session.forward_last(segment, |_, row| next = Some(sampler.pick(row)))?;
    }
    while generated.len() < count {
        // An empty prompt starts from token 0.
        let token = next.unwrap_or(0);
        generated.push(token);
        if generated.len() == count {
            break;
        }
        session.forward_last(&[token], |_, row| next = Some(sampler.pick(row)))?;
    }
    Ok(generated)
}

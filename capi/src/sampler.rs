//! `txl_sampler`: the next token from a row of log-probabilities, greedy or sampled with a
//! temperature and a seed: `txl_core::sampling`, the sampler `txl generate` uses.

use core::ffi::c_int;

use txl_core::sampling::{Sampler, Sampling};

use crate::checked::{self, fits};
use crate::status::{code, TXL_ERR_BAD_ARGUMENT, TXL_ERR_EMPTY};

/// Words (`uint64_t`) of a `txl_sampler`.
pub const TXL_SAMPLER_WORDS: usize = 6;

/// A sampler: the caller's storage, filled by [`txl_sampler_init`].
#[repr(C)]
#[derive(Debug)]
pub struct txl_sampler {
    opaque: [u64; TXL_SAMPLER_WORDS],
}

const _: () = assert!(fits::<txl_sampler, Sampler>(), "TXL_SAMPLER_WORDS is too small");

/// Marks a `txl_sampler` that [`txl_sampler_init`] filled: "txlsampl".
const MAGIC: u64 = u64::from_le_bytes(*b"txlsampl");

/// Sets up `sampler`: with `temperature` above 0, it samples from p^(1 / temperature) with a
/// generator seeded by `seed` (the core's sampler, as `txl generate --temperature T --seed S`);
/// with 0 or below, it takes the most likely token. A NaN temperature is refused.
///
/// # Safety
/// `sampler` must point to a `txl_sampler` (checked for NULL and alignment).
#[no_mangle]
pub unsafe extern "C" fn txl_sampler_init(sampler: *mut txl_sampler, temperature: f32, seed: u64) -> c_int {
    // SAFETY: the caller's contract above; `txl_sampler` holds a `Slot<Sampler>`.
    code(unsafe {
        checked::clear::<txl_sampler, Sampler>(sampler).and_then(|()| {
            if temperature.is_nan() {
                return Err(TXL_ERR_BAD_ARGUMENT);
            }
            let sampling = Sampling::from_temperature(temperature, seed);
            checked::put(sampler, MAGIC, Sampler::new(sampling))
        })
    })
}

/// Picks the next token from `n_log_probs` log-probabilities (a row `txl_session_feed` wrote:
/// entry `t` for token `t`) and writes it to `token`.
///
/// # Safety
/// `sampler` must point to a `txl_sampler`, `log_probs` to `n_log_probs` floats, `token` to a
/// `uint32_t` (each checked for NULL, alignment and overlaps).
#[no_mangle]
pub unsafe extern "C" fn txl_sample(
    sampler: *mut txl_sampler,
    log_probs: *const f32,
    n_log_probs: usize,
    token: *mut u32,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { sample(sampler, log_probs, n_log_probs, token) })
}

unsafe fn sample(
    sampler: *mut txl_sampler,
    log_probs: *const f32,
    n_log_probs: usize,
    token: *mut u32,
) -> Result<(), c_int> {
    // SAFETY: `txl_sampler` holds a `Slot<Sampler>`; the caller's contract.
    let picker = unsafe { checked::get_mut::<txl_sampler, Sampler>(sampler, MAGIC)? };
    let spans = [
        checked::Span::of_one(sampler),
        checked::span(log_probs, n_log_probs)?,
        checked::span(token, 1)?,
    ];
    if n_log_probs == 0 {
        return Err(TXL_ERR_EMPTY);
    }
    checked::disjoint(&spans)?;
    // SAFETY: the caller's contract; the buffers overlap nothing else of this call.
    let row = unsafe { checked::slice(log_probs, n_log_probs)? };
    let picked = picker.pick(row);
    // SAFETY: as above.
    let slot = unsafe { checked::slice_mut(token, 1)? };
    slot[0] = picked;
    Ok(())
}

//! `txl_session`: a session of a model in the caller's arena: tokens in, log-probabilities out,
//! its state saved, restored and reset.

use core::ffi::{c_int, c_void};

use txl_core::Session;

use crate::checked::{self, fits, Span};
use crate::model::{model_ref, read_options, txl_model};
use crate::options::txl_options;
use crate::status::{
    code, of_error, TXL_ERR_BUFFER_TOO_SMALL, TXL_ERR_EMPTY, TXL_ERR_NULL, TXL_ERR_TOKEN_OUT_OF_RANGE,
};

/// Words (`uint64_t`) of a `txl_session` where pointers have 64 bits.
#[cfg(target_pointer_width = "64")]
pub const TXL_SESSION_WORDS: usize = 160;
/// Words (`uint64_t`) of a `txl_session` where pointers have 32 bits.
#[cfg(not(target_pointer_width = "64"))]
pub const TXL_SESSION_WORDS: usize = 96;

/// A session: the caller's storage, filled by [`txl_session_init`].
#[repr(C)]
#[derive(Debug)]
pub struct txl_session {
    opaque: [u64; TXL_SESSION_WORDS],
}

/// A session and the buffers it uses, which no buffer of a call may overlap.
#[derive(Debug)]
struct Running {
    session: Session<'static, 'static>,
    arena: Span,
    image: Span,
}

const _: () = assert!(fits::<txl_session, Running>(), "TXL_SESSION_WORDS is too small");

/// Marks a `txl_session` that [`txl_session_init`] filled: "txlsessn".
const MAGIC: u64 = u64::from_le_bytes(*b"txlsessn");

/// Targets of one segment that [`txl_session_score`] asks the output layer for alone; a
/// segment's positions past them get whole rows (the same bits, more work for an adaptive
/// softmax).
const SCORE_TARGETS: usize = 64;

impl Running {
    /// `TXL_ERR_OVERLAP` unless `buffers`, the session's storage at `at`, its arena and its image
    /// are pairwise disjoint.
    fn disjoint(&self, at: *const txl_session, buffers: &[Span]) -> Result<(), c_int> {
        let mut spans = [Span::of_one(at); 8];
        spans[1] = self.arena;
        spans[2] = self.image;
        let used = 3 + buffers.len();
        spans[3..used].copy_from_slice(buffers);
        checked::disjoint(&spans[..used])
    }

    /// The model's vocabulary size.
    fn n_token(&self) -> usize {
        self.session.model().config().n_token as usize
    }

    /// `TXL_ERR_EMPTY` for no tokens, `TXL_ERR_TOKEN_OUT_OF_RANGE` for one not below `n_token`.
    fn check_tokens(&self, tokens: &[u32]) -> Result<(), c_int> {
        if tokens.is_empty() {
            return Err(TXL_ERR_EMPTY);
        }
        let n_token = self.session.model().config().n_token;
        if tokens.iter().any(|&token| token >= n_token) {
            return Err(TXL_ERR_TOKEN_OUT_OF_RANGE);
        }
        Ok(())
    }

    /// Segments are at most this long.
    fn tgt_len(&self) -> usize {
        (self.session.options().tgt_len as usize).max(1)
    }
}

/// The session in `session`, if [`txl_session_init`] filled it.
///
/// # Safety
/// As [`checked::get`].
unsafe fn running<'a>(session: *const txl_session) -> Result<&'a Running, c_int> {
    // SAFETY: `txl_session` holds a `Slot<Running>` (asserted above); the rest is the caller's.
    unsafe { checked::get::<txl_session, Running>(session, MAGIC) }
}

/// The session in `session` to run, if [`txl_session_init`] filled it.
///
/// # Safety
/// As [`checked::get_mut`].
unsafe fn running_mut<'a>(session: *mut txl_session) -> Result<&'a mut Running, c_int> {
    // SAFETY: as in `running`.
    unsafe { checked::get_mut::<txl_session, Running>(session, MAGIC) }
}

/// Starts a session of `model` with `options` in `session`, its memory, activations and scratch
/// in the arena of `arena_bytes` bytes at `arena` (16-byte aligned, at least `txl_arena_bytes`).
/// The session keeps a copy of the parsed model: `model` may go afterwards, the image and the
/// arena must stay while the session is used. A pointer refused changes nothing; any other
/// failure leaves `session` not set up.
///
/// # Safety
/// `session` must point to a `txl_session`, `model` to a `txl_model`, `options` to a
/// `txl_options`, `arena` to `arena_bytes` writable bytes that nothing else uses while the
/// session does (each checked for NULL and alignment; the arena, the image and the structs for
/// overlaps).
#[no_mangle]
pub unsafe extern "C" fn txl_session_init(
    session: *mut txl_session,
    model: *const txl_model,
    arena: *mut c_void,
    arena_bytes: usize,
    options: *const txl_options,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { init(session, model, arena, arena_bytes, options) })
}

unsafe fn init(
    session: *mut txl_session,
    model: *const txl_model,
    arena: *mut c_void,
    arena_bytes: usize,
    options: *const txl_options,
) -> Result<(), c_int> {
    if session.is_null() {
        return Err(TXL_ERR_NULL);
    }
    let model_at = model;
    // SAFETY: the caller's contract.
    let model = unsafe { model_ref(model)? };
    // SAFETY: the caller's contract.
    let options = unsafe { read_options(options)? };
    let arena_span = checked::span(arena.cast::<u8>(), arena_bytes)?;
    let image = Span::of(model.image().bytes());
    checked::disjoint(&[arena_span, image, Span::of_one(session), Span::of_one(model_at)])?;
    // Every pointer checked: from here on a failure leaves the session not set up.
    // SAFETY: `txl_session` holds a `Slot<Running>`; the caller's contract.
    unsafe { checked::clear::<txl_session, Running>(session)? };
    // SAFETY: the caller's contract: the arena is the session's while it is used.
    let arena: &'static mut [u8] = unsafe { checked::slice_mut(arena.cast::<u8>(), arena_bytes)? };
    let started = Session::new(model, arena, options).map_err(of_error)?;
    let running = Running {
        session: started,
        arena: arena_span,
        image,
    };
    // SAFETY: as above.
    unsafe { checked::put(session, MAGIC, running) }
}

/// Runs `n_tokens` tokens through the session, in segments of its `tgt_len` from the first, so
/// that the memory then holds the last `mem_len` positions; any number of tokens, at least one.
/// Where `next_log_probs` is not NULL, writes to it the log-probabilities of the token that
/// follows the last (`n_token` floats: entry `t` is ln p(t | everything fed so far));
/// `n_log_probs`, its length, must be at least the model's `n_token`. Every token is checked
/// before anything runs: on an error the session is as it was.
///
/// # Safety
/// `session` must point to a `txl_session`, `tokens` to `n_tokens` token ids, `next_log_probs`
/// to `n_log_probs` floats or be NULL (each checked for NULL, alignment and overlaps).
#[no_mangle]
pub unsafe extern "C" fn txl_session_feed(
    session: *mut txl_session,
    tokens: *const u32,
    n_tokens: usize,
    next_log_probs: *mut f32,
    n_log_probs: usize,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { feed(session, tokens, n_tokens, next_log_probs, n_log_probs) })
}

unsafe fn feed(
    session: *mut txl_session,
    tokens: *const u32,
    n_tokens: usize,
    next_log_probs: *mut f32,
    n_log_probs: usize,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let running = unsafe { running_mut(session)? };
    let tokens_span = checked::span(tokens, n_tokens)?;
    if n_tokens == 0 {
        return Err(TXL_ERR_EMPTY);
    }
    let n_token = running.n_token();
    let out_span = match next_log_probs.is_null() {
        // no output: an empty span, which overlaps nothing
        true => Span::of::<f32>(&[]),
        false if n_log_probs < n_token => return Err(TXL_ERR_BUFFER_TOO_SMALL),
        false => checked::span(next_log_probs, n_token)?,
    };
    running.disjoint(session, &[tokens_span, out_span])?;
    // SAFETY: the caller's contract; the buffers overlap nothing else of this call.
    let tokens = unsafe { checked::slice(tokens, n_tokens)? };
    let mut out = match next_log_probs.is_null() {
        true => None,
        // SAFETY: as above.
        false => Some(unsafe { checked::slice_mut(next_log_probs, n_token)? }),
    };
    running.check_tokens(tokens)?;
    let tgt_len = running.tgt_len();
    let segments = tokens.len().div_ceil(tgt_len);
    for (index, segment) in tokens.chunks(tgt_len).enumerate() {
        let last = index + 1 == segments;
        running
            .session
            .forward_last(segment, |_, row| {
                if let (true, Some(out)) = (last, out.as_deref_mut()) {
                    out.copy_from_slice(&row[..n_token]);
                }
            })
            .map_err(of_error)?;
    }
    Ok(())
}

/// Scores a text: runs `tokens[0 .. n_tokens - 1]` through the session in segments of its
/// `tgt_len` from the first, and writes `log_probs[i]` = ln p(`tokens[i + 1]` | `tokens[..= i]`
/// and the memory) for each `i` below `n_tokens - 1` (`n_log_probs` must be at least that). The
/// last token is not run, only scored: to go on with the text, start the next call with it. The
/// log-probabilities are `txl score`'s bits for the same text and options when every call but
/// the last scores a multiple of `tgt_len` tokens plus the one carried over. With one token,
/// nothing is run and `log_probs` may be NULL. Every token is checked before anything runs: on
/// an error the session is as it was.
///
/// # Safety
/// `session` must point to a `txl_session`, `tokens` to `n_tokens` token ids, `log_probs` to
/// `n_log_probs` floats (each checked for NULL, alignment and overlaps).
#[no_mangle]
pub unsafe extern "C" fn txl_session_score(
    session: *mut txl_session,
    tokens: *const u32,
    n_tokens: usize,
    log_probs: *mut f32,
    n_log_probs: usize,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { score(session, tokens, n_tokens, log_probs, n_log_probs) })
}

unsafe fn score(
    session: *mut txl_session,
    tokens: *const u32,
    n_tokens: usize,
    log_probs: *mut f32,
    n_log_probs: usize,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let running = unsafe { running_mut(session)? };
    let tokens_span = checked::span(tokens, n_tokens)?;
    if n_tokens == 0 {
        return Err(TXL_ERR_EMPTY);
    }
    let scored = n_tokens - 1;
    let out_span = match scored {
        // nothing to score: an empty span, which overlaps nothing
        0 => Span::of::<f32>(&[]),
        // a NULL pointer is named first
        _ if log_probs.is_null() => return Err(TXL_ERR_NULL),
        _ if n_log_probs < scored => return Err(TXL_ERR_BUFFER_TOO_SMALL),
        _ => checked::span(log_probs, scored)?,
    };
    running.disjoint(session, &[tokens_span, out_span])?;
    // SAFETY: the caller's contract; the buffers overlap nothing else of this call.
    let tokens = unsafe { checked::slice(tokens, n_tokens)? };
    running.check_tokens(tokens)?;
    if scored == 0 {
        return Ok(());
    }
    // SAFETY: as above.
    let out = unsafe { checked::slice_mut(log_probs, scored)? };
    let tgt_len = running.tgt_len();
    let mut start = 0;
    for segment in tokens[..scored].chunks(tgt_len) {
        // each position's next token: the output layer computes its log-probability alone
        let mut targets = [None; SCORE_TARGETS];
        let asked = segment.len().min(SCORE_TARGETS);
        for (target, &next) in targets[..asked].iter_mut().zip(&tokens[start + 1..]) {
            *target = Some(next);
        }
        let (next, scores) = (&tokens[start + 1..], &mut out[start..]);
        running
            .session
            .forward_scoring(segment, &targets[..asked], |i, row| {
                if let (Some(&token), Some(score)) = (next.get(i), scores.get_mut(i)) {
                    *score = row[token as usize];
                }
            })
            .map_err(of_error)?;
        start += segment.len();
    }
    Ok(())
}

/// Forgets the memory: the session starts again as its `mem_init` says.
///
/// # Safety
/// `session` must point to a `txl_session` (checked).
#[no_mangle]
pub unsafe extern "C" fn txl_session_reset(session: *mut txl_session) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { running_mut(session) }.map(|running| running.session.reset()))
}

/// Writes the session's state (its memory, what it is valid for, a CRC-32) to `state`, a
/// buffer of `state_bytes` bytes, and the bytes written to `written`: at most
/// `txl_state_bytes`, fewer while the memory is not yet full. The session is not changed.
///
/// # Safety
/// `session` must point to a `txl_session`, `state` to `state_bytes` writable bytes, `written`
/// to a `size_t` (each checked for NULL, alignment and overlaps).
#[no_mangle]
pub unsafe extern "C" fn txl_session_save_state(
    session: *const txl_session,
    state: *mut c_void,
    state_bytes: usize,
    written: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { save_state(session, state, state_bytes, written) })
}

unsafe fn save_state(
    session: *const txl_session,
    state: *mut c_void,
    state_bytes: usize,
    written: *mut usize,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let running = unsafe { running(session)? };
    let state = state.cast::<u8>();
    let spans = [checked::span(state, state_bytes)?, checked::span(written, 1)?];
    running.disjoint(session, &spans)?;
    // SAFETY: the caller's contract; the buffers overlap nothing else of this call.
    let out = unsafe { checked::slice_mut(state, state_bytes)? };
    // SAFETY: as above.
    let written = unsafe { checked::slice_mut(written, 1)? };
    written[0] = running.session.save_state(out).map_err(of_error)?;
    Ok(())
}

/// Replaces the session's memory with a state `txl_session_save_state` wrote (of `state_bytes`
/// bytes at `state`; longer is fine). The state must come from this model image and these
/// options, undamaged; otherwise the code says which, and the session is as it was.
///
/// # Safety
/// `session` must point to a `txl_session`, `state` to `state_bytes` readable bytes (each
/// checked for NULL and overlaps).
#[no_mangle]
pub unsafe extern "C" fn txl_session_restore_state(
    session: *mut txl_session,
    state: *const c_void,
    state_bytes: usize,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { restore_state(session, state, state_bytes) })
}

unsafe fn restore_state(
    session: *mut txl_session,
    state: *const c_void,
    state_bytes: usize,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let running = unsafe { running_mut(session)? };
    let state = state.cast::<u8>();
    running.disjoint(session, &[checked::span(state, state_bytes)?])?;
    // SAFETY: the caller's contract; the bytes overlap nothing else of this call.
    let bytes = unsafe { checked::slice(state, state_bytes)? };
    running.session.restore_state(bytes).map_err(of_error)?;
    Ok(())
}

/// Writes to `bytes` the most bytes `txl_session_save_state` writes for this session (a full
/// memory; `txl_state_bytes` of its model and options).
///
/// # Safety
/// `session` must point to a `txl_session`, `bytes` to a `size_t` (each checked).
#[no_mangle]
pub unsafe extern "C" fn txl_session_state_bytes(session: *const txl_session, bytes: *mut usize) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { write_out(session, bytes, |running| running.session.state_bytes()) })
}

/// Writes to `positions` the positions the session remembers now (at most its `mem_len`).
///
/// # Safety
/// `session` must point to a `txl_session`, `positions` to a `size_t` (each checked).
#[no_mangle]
pub unsafe extern "C" fn txl_session_memory_len(session: *const txl_session, positions: *mut usize) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe { write_out(session, positions, |running| running.session.memory_len()) })
}

/// Writes the session's options to `options`.
///
/// # Safety
/// `session` must point to a `txl_session`, `options` to a `txl_options` (each checked).
#[no_mangle]
pub unsafe extern "C" fn txl_session_options(
    session: *const txl_session,
    options: *mut txl_options,
) -> c_int {
    // SAFETY: the caller's contract above.
    code(unsafe {
        write_out(session, options, |running| {
            txl_options::from_core(running.session.options())
        })
    })
}

/// Writes `value(session)` to the one `T` at `out`.
///
/// # Safety
/// `session` must point to a `txl_session`, `out` to a `T` (each checked).
unsafe fn write_out<T>(
    session: *const txl_session,
    out: *mut T,
    value: impl FnOnce(&Running) -> T,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let running = unsafe { running(session)? };
    running.disjoint(session, &[checked::span(out, 1)?])?;
    let written = value(running);
    // SAFETY: the caller's contract; it overlaps nothing else of this call.
    let slot = unsafe { checked::slice_mut(out, 1)? };
    slot[0] = written;
    Ok(())
}

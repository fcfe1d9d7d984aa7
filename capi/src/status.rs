//! The status codes every function returns, `TXL_OK` or a `TXL_ERR_*`, and their messages
//! (`txl_strerror`). The codes are `include/txl.h`'s `enum txl_status`, value for value.

use core::ffi::{c_char, c_int, CStr};

use txl_core::{Error, StateError};

/// Success.
pub const TXL_OK: c_int = 0;
/// A pointer the function needs is NULL.
pub const TXL_ERR_NULL: c_int = 1;
/// A pointer is not aligned for what it points to (a `txl_*` struct, tokens, floats).
pub const TXL_ERR_MISALIGNED: c_int = 2;
/// A `txl_model`, `txl_session` or `txl_sampler` its setup function did not fill (or whose
/// setup failed).
pub const TXL_ERR_NOT_INITIALIZED: c_int = 3;
/// Two buffers of one call overlap (the arena, the image, the tokens, an output, the structs).
pub const TXL_ERR_OVERLAP: c_int = 4;
/// No tokens, or no log-probabilities to sample from.
pub const TXL_ERR_EMPTY: c_int = 5;
/// An output buffer is shorter than what it must hold.
pub const TXL_ERR_BUFFER_TOO_SMALL: c_int = 6;
/// An argument out of its range (a temperature that is NaN).
pub const TXL_ERR_BAD_ARGUMENT: c_int = 7;
/// The image is shorter than its header or than the length it declares.
pub const TXL_ERR_IMAGE_TRUNCATED: c_int = 8;
/// The bytes are not a txl model image (no `TXLMODEL`).
pub const TXL_ERR_IMAGE_BAD_MAGIC: c_int = 9;
/// The image's format version is not one this library reads.
pub const TXL_ERR_IMAGE_VERSION: c_int = 10;
/// The image's CRC-32 does not match its bytes.
pub const TXL_ERR_IMAGE_CHECKSUM: c_int = 11;
/// The image's header, config, tensors, vocabulary or integer parameters are invalid.
pub const TXL_ERR_IMAGE_INVALID: c_int = 12;
/// The image does not start on a 16-byte boundary.
pub const TXL_ERR_IMAGE_MISALIGNED: c_int = 13;
/// Session options that cannot work: a zero `tgt_len`, an unknown enum value.
pub const TXL_ERR_BAD_OPTIONS: c_int = 14;
/// Options an integer image cannot run with (it needs int8 memory, position keys per session
/// or per segment).
pub const TXL_ERR_INTEGER_OPTIONS: c_int = 15;
/// The arena is smaller than `txl_arena_bytes`.
pub const TXL_ERR_ARENA_TOO_SMALL: c_int = 16;
/// The arena does not start on a 16-byte boundary.
pub const TXL_ERR_ARENA_MISALIGNED: c_int = 17;
/// A size overflows the address space (options far too large, a length far too long).
pub const TXL_ERR_SIZE_OVERFLOW: c_int = 18;
/// A token id is not below the model's `n_token`.
pub const TXL_ERR_TOKEN_OUT_OF_RANGE: c_int = 19;
/// The buffer for a saved state is shorter than the state.
pub const TXL_ERR_STATE_BUFFER_TOO_SMALL: c_int = 20;
/// A state is shorter than its header or than the memory it declares.
pub const TXL_ERR_STATE_TRUNCATED: c_int = 21;
/// The bytes are not a session state this library reads (magic, version, header).
pub const TXL_ERR_STATE_INVALID: c_int = 22;
/// A state's CRC-32 does not match its bytes.
pub const TXL_ERR_STATE_CHECKSUM: c_int = 23;
/// A state saved by a session of another model image.
pub const TXL_ERR_STATE_OTHER_MODEL: c_int = 24;
/// A state saved by a session with other options.
pub const TXL_ERR_STATE_OTHER_OPTIONS: c_int = 25;
/// An error of the core that none of the codes above names (none is known today).
pub const TXL_ERR_INTERNAL: c_int = 26;

/// The code of a core error.
pub fn of_error(error: Error) -> c_int {
    match error {
        Error::Truncated { .. } => TXL_ERR_IMAGE_TRUNCATED,
        Error::BadMagic => TXL_ERR_IMAGE_BAD_MAGIC,
        Error::UnsupportedVersion(_) => TXL_ERR_IMAGE_VERSION,
        Error::BadChecksum { .. } => TXL_ERR_IMAGE_CHECKSUM,
        Error::BadHeader
        | Error::BadConfig(_)
        | Error::TensorCount { .. }
        | Error::TensorName { .. }
        | Error::TensorShape(_)
        | Error::TensorDtype(_)
        | Error::TensorBounds(_)
        | Error::BadVocabulary(_)
        | Error::BadArithmetic(_) => TXL_ERR_IMAGE_INVALID,
        Error::ImageMisaligned => TXL_ERR_IMAGE_MISALIGNED,
        Error::IntegerOptions => TXL_ERR_INTEGER_OPTIONS,
        Error::ArenaTooSmall { .. } => TXL_ERR_ARENA_TOO_SMALL,
        Error::ArenaMisaligned => TXL_ERR_ARENA_MISALIGNED,
        Error::SizeOverflow => TXL_ERR_SIZE_OVERFLOW,
        Error::BadOptions => TXL_ERR_BAD_OPTIONS,
        Error::TokenOutOfRange { .. } => TXL_ERR_TOKEN_OUT_OF_RANGE,
        Error::SegmentLength { len: 0, .. } => TXL_ERR_EMPTY,
        Error::BadState(state) => match state {
            StateError::BufferTooSmall { .. } => TXL_ERR_STATE_BUFFER_TOO_SMALL,
            StateError::Truncated { .. } => TXL_ERR_STATE_TRUNCATED,
            StateError::BadMagic | StateError::UnsupportedVersion(_) | StateError::BadHeader => {
                TXL_ERR_STATE_INVALID
            }
            StateError::BadChecksum { .. } => TXL_ERR_STATE_CHECKSUM,
            StateError::OtherModel { .. } => TXL_ERR_STATE_OTHER_MODEL,
            StateError::OtherOptions { .. } => TXL_ERR_STATE_OTHER_OPTIONS,
            _ => TXL_ERR_INTERNAL,
        },
        _ => TXL_ERR_INTERNAL,
    }
}

/// `TXL_OK`, or the code of what went wrong.
pub fn code(result: Result<(), c_int>) -> c_int {
    match result {
        Ok(()) => TXL_OK,
        Err(code) => code,
    }
}

/// The message of each code, in the order of the codes.
const MESSAGES: [&CStr; 27] = [
    c"success",
    c"a pointer is NULL",
    c"a pointer is not aligned for its type",
    c"the txl_model, txl_session or txl_sampler was not set up (or its setup failed)",
    c"buffers of one call overlap",
    c"no tokens or no log-probabilities given",
    c"an output buffer is too small",
    c"an argument is out of range",
    c"image truncated: shorter than its header or its declared length",
    c"not a txl model image (bad magic)",
    c"unsupported image format version",
    c"image checksum mismatch (corrupt image)",
    c"invalid image: header, config, tensors, vocabulary or integer parameters",
    c"the image must start on a 16-byte boundary",
    c"invalid session options",
    c"an integer image runs with int8 memory and position keys per session or per segment",
    c"arena too small: see txl_arena_bytes",
    c"the arena must start on a 16-byte boundary",
    c"a size overflows the address space",
    c"token id out of range (not below n_token)",
    c"state buffer too small: see txl_state_bytes",
    c"state truncated",
    c"not a txl session state, or one of another format version",
    c"state checksum mismatch (damaged state)",
    c"the state was saved with another model image",
    c"the state was saved with other session options",
    c"internal error",
];

/// A message for `code`, a NUL-terminated string with static storage (never NULL; an unknown
/// code has the message "unknown status code").
#[no_mangle]
pub extern "C" fn txl_strerror(code: c_int) -> *const c_char {
    let message = usize::try_from(code)
        .ok()
        .and_then(|i| MESSAGES.get(i))
        .copied()
        .unwrap_or(c"unknown status code");
    message.as_ptr()
}

//! Typed errors. Nothing in this crate panics on bad input: every check returns one of these.

use core::fmt;

pub use crate::config::ConfigError;
use crate::options::SessionOptions;
use crate::tensors::TensorName;
use crate::vocab::VocabError;

/// Why [`crate::Session::restore_state`] (or `save_state`) refused a session state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StateError {
    /// The state is shorter than its header or than the memory it declares; or, when saving,
    /// the buffer is.
    Truncated {
        /// Bytes the state needs.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The buffer given to `save_state` is shorter than the state.
    BufferTooSmall {
        /// Bytes the state needs.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The bytes do not start with `TXLSTATE`.
    BadMagic,
    /// The state's format version is not one this crate reads.
    UnsupportedVersion(u32),
    /// The CRC-32 at the end of the state does not match its contents.
    BadChecksum {
        /// CRC stored in the state.
        stored: u32,
        /// CRC computed over the state.
        computed: u32,
    },
    /// A header field is out of range (an unknown option word, more positions than `mem_len`,
    /// a row size that does not match the options).
    BadHeader,
    /// The state was saved by a session of another model image.
    OtherModel {
        /// The CRC-32 of the image the state was saved with.
        image_crc: u32,
    },
    /// The state was saved by a session with other options.
    OtherOptions {
        /// The options it was saved with.
        saved: SessionOptions,
    },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Truncated { needed, got } => {
                write!(f, "state truncated: needs {needed} bytes, got {got}")
            }
            StateError::BufferTooSmall { needed, got } => {
                write!(f, "state buffer too small: needs {needed} bytes, got {got}")
            }
            StateError::BadMagic => f.write_str("not a txl session state (bad magic)"),
            StateError::UnsupportedVersion(v) => write!(f, "unsupported session state version {v}"),
            StateError::BadChecksum { stored, computed } => write!(
                f,
                "state checksum mismatch: stored {stored:#010x}, computed {computed:#010x} (damaged state)"
            ),
            StateError::BadHeader => f.write_str("malformed session state header"),
            StateError::OtherModel { image_crc } => write!(
                f,
                "the state was saved with another model image (image CRC {image_crc:#010x})"
            ),
            StateError::OtherOptions { saved } => {
                write!(f, "the state was saved with other session options ({saved:#})")
            }
        }
    }
}

/// Why [`crate::Image::parse`] refused an integer image: a fixed-point parameter the integer
/// arithmetic would derive from it does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ArithmeticError {
    /// The activations' fraction bits (the header's `frac`) are above
    /// [`MAX_FRAC`](crate::fixed_point::MAX_FRAC).
    Frac(u32),
    /// A weight matrix is f32 or f16: integer arithmetic takes int8 and int4 weights.
    FloatWeights(TensorName),
    /// An embedding table or output projection is int4, or the projection has activation
    /// scales: integer arithmetic takes them int8, with row scales alone.
    NeedsInt8(TensorName),
    /// A scale is negative, not finite or too large to be a fixed-point multiplier.
    Scale(TensorName),
    /// `d_model` is above 2^14 (the integer LayerNorm's row), or too large for the fixed-point
    /// square roots.
    Size,
}

impl fmt::Display for ArithmeticError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArithmeticError::Frac(frac) => write!(
                f,
                "{frac} fraction bits for the activations (at most {})",
                crate::fixed_point::MAX_FRAC
            ),
            ArithmeticError::FloatWeights(name) => write!(
                f,
                "tensor `{name}` is floating point: integer arithmetic needs int8 or int4 weights"
            ),
            ArithmeticError::NeedsInt8(name) => write!(
                f,
                "tensor `{name}` must be int8 without activation scales for integer arithmetic"
            ),
            ArithmeticError::Scale(name) => write!(
                f,
                "tensor `{name}` has a scale that is no fixed-point multiplier (negative, not finite or too large)"
            ),
            ArithmeticError::Size => f.write_str("d_model too large for integer arithmetic (at most 16384)"),
        }
    }
}

/// Everything that can go wrong when reading an image or running a session.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The image is shorter than its header or than the length it declares.
    Truncated {
        /// Bytes the image needs.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The image does not start with `TXLMODEL`.
    BadMagic,
    /// The image's format version is not one this crate reads.
    UnsupportedVersion(u32),
    /// The CRC-32 at the end of the image does not match its contents.
    BadChecksum {
        /// CRC stored in the image.
        stored: u32,
        /// CRC computed over the image.
        computed: u32,
    },
    /// A reserved field or flag bit is set, or the header's sizes disagree.
    BadHeader,
    /// The config in the header is invalid.
    BadConfig(ConfigError),
    /// The directory holds a different number of tensors than the config needs.
    TensorCount {
        /// Tensors the config needs.
        expected: usize,
        /// Tensors in the directory.
        found: usize,
    },
    /// Directory entry `index` is not the tensor the config needs there.
    TensorName {
        /// Directory index.
        index: usize,
        /// The tensor expected at that index.
        expected: TensorName,
    },
    /// A tensor's shape does not match the config.
    TensorShape(TensorName),
    /// A tensor's data type is unknown, or not supported for this tensor.
    TensorDtype(TensorName),
    /// A tensor's payload lies outside the image, overlaps another, or is misaligned.
    TensorBounds(TensorName),
    /// The image does not start on a 16-byte boundary, so its payloads cannot be read in place.
    ImageMisaligned,
    /// The image's vocabulary section is damaged: see [`VocabError`].
    BadVocabulary(VocabError),
    /// An integer image's fixed-point parameters are inconsistent: see [`ArithmeticError`].
    BadArithmetic(ArithmeticError),
    /// Session options an integer image cannot run with: integer arithmetic keeps int8 memory
    /// and a table of position keys (per session or per segment).
    IntegerOptions,
    /// The image or the session options need a weight precision, memory dtype or arithmetic
    /// that this build of the crate leaves out: the cargo feature named (see
    /// [`crate::included`]).
    LeftOut(&'static str),
    /// The arena is smaller than [`crate::Session::arena_bytes`].
    ArenaTooSmall {
        /// Bytes the session needs.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// The arena does not start on a 16-byte boundary.
    ArenaMisaligned,
    /// The session's buffers (or the image's directory) need more bytes than the address space
    /// holds: `tgt_len`, `mem_len` or a model size far too large.
    SizeOverflow,
    /// A host buffer of this many bytes could not be allocated (feature `alloc`).
    AllocationFailed {
        /// Bytes asked for.
        bytes: usize,
    },
    /// A session state was refused: see [`StateError`].
    BadState(StateError),
    /// Session options that cannot work (a zero `tgt_len`).
    BadOptions,
    /// A token id is not below `n_token`.
    TokenOutOfRange {
        /// The token id.
        token: u32,
        /// The vocabulary size.
        n_token: u32,
    },
    /// A segment is empty or longer than the session's `tgt_len`.
    SegmentLength {
        /// Tokens given.
        len: usize,
        /// The session's `tgt_len`.
        max: usize,
    },
}

impl From<ConfigError> for Error {
    fn from(error: ConfigError) -> Self {
        Error::BadConfig(error)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated { needed, got } => {
                write!(f, "image truncated: needs {needed} bytes, got {got}")
            }
            Error::BadMagic => f.write_str("not a txl model image (bad magic)"),
            Error::UnsupportedVersion(v) => write!(f, "unsupported image format version {v}"),
            Error::BadChecksum { stored, computed } => write!(
                f,
                "image checksum mismatch: stored {stored:#010x}, computed {computed:#010x} (corrupt image)"
            ),
            Error::BadHeader => f.write_str("malformed image header"),
            Error::BadConfig(e) => write!(f, "invalid model config: {e}"),
            Error::TensorCount { expected, found } => {
                write!(f, "image holds {found} tensors, the config needs {expected}")
            }
            Error::TensorName { index, expected } => {
                write!(f, "tensor {index} of the image should be `{expected}`")
            }
            Error::TensorShape(name) => write!(f, "tensor `{name}` has the wrong shape"),
            Error::TensorDtype(name) => write!(f, "tensor `{name}` has an unsupported data type"),
            Error::TensorBounds(name) => {
                write!(f, "tensor `{name}` lies outside the image or is misaligned")
            }
            Error::ImageMisaligned => f.write_str("the image must start on a 16-byte boundary"),
            Error::BadVocabulary(e) => write!(f, "invalid vocabulary section: {e}"),
            Error::BadArithmetic(e) => write!(f, "invalid integer image: {e}"),
            Error::IntegerOptions => f.write_str(
                "an integer image runs with int8 memory and position keys per session or per segment",
            ),
            Error::LeftOut(feature) => write!(
                f,
                "this build of txl-core leaves out what the image or options need: its cargo feature `{feature}`"
            ),
            Error::ArenaTooSmall { needed, got } => {
                write!(f, "arena too small: needs {needed} bytes, got {got}")
            }
            Error::ArenaMisaligned => f.write_str("the arena must start on a 16-byte boundary"),
            Error::SizeOverflow => f.write_str(
                "the sizes overflow the address space (tgt_len, mem_len or the model far too large)",
            ),
            Error::AllocationFailed { bytes } => {
                write!(f, "cannot allocate {bytes} bytes")
            }
            Error::BadState(e) => write!(f, "session state refused: {e}"),
            Error::BadOptions => f.write_str("invalid session options (tgt_len must be at least 1)"),
            Error::TokenOutOfRange { token, n_token } => {
                write!(f, "token id {token} out of range (vocabulary has {n_token})")
            }
            Error::SegmentLength { len, max } => {
                write!(f, "segment of {len} tokens; must be 1..={max}")
            }
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Error {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "{}", defmt::Display2Format(self))
    }
}

impl core::error::Error for Error {}
impl core::error::Error for StateError {}
impl core::error::Error for ArithmeticError {}

//! `txl_options`: the session options as C sees them, every field a `uint32_t`, each enum field
//! one of the `TXL_MEM_INIT_*`, `TXL_MEM_DTYPE_*` and `TXL_POSITION_KEYS_*` values.

use core::ffi::c_int;

use txl_core::{MemDtype, MemInit, PositionKeys, SessionOptions};

use crate::status::TXL_ERR_BAD_OPTIONS;

/// `mem_init`: no memory at the start (the original code's).
pub const TXL_MEM_INIT_EMPTY: u32 = 0;
/// `mem_init`: `mem_len` all-zero hidden states (Hugging Face's).
pub const TXL_MEM_INIT_ZEROS: u32 = 1;
/// `mem_dtype`: the cached keys and values in f32.
pub const TXL_MEM_DTYPE_F32: u32 = 0;
/// `mem_dtype`: in f16.
pub const TXL_MEM_DTYPE_F16: u32 = 1;
/// `mem_dtype`: in int8 with a scale per position and head (integer images need it).
pub const TXL_MEM_DTYPE_INT8: u32 = 2;
/// `position_keys`: a table per layer, computed once per session.
pub const TXL_POSITION_KEYS_SESSION: u32 = 0;
/// `position_keys`: one table, recomputed for each layer of each segment.
pub const TXL_POSITION_KEYS_SEGMENT: u32 = 1;
/// `position_keys`: none, `W_r` folded into the queries (float images only).
pub const TXL_POSITION_KEYS_FOLDED: u32 = 2;

/// The options of a session (`txl_core::SessionOptions`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct txl_options {
    /// Longest segment run at once (sizes the activations); at least 1.
    pub tgt_len: u32,
    /// Positions remembered between segments.
    pub mem_len: u32,
    /// Largest relative distance with its own position embedding; 0: no clamping.
    pub clamp_len: u32,
    /// 1: every query attends to the same number of keys; 0: not.
    pub same_length: u32,
    /// `TXL_MEM_INIT_*`.
    pub mem_init: u32,
    /// `TXL_MEM_DTYPE_*`.
    pub mem_dtype: u32,
    /// `TXL_POSITION_KEYS_*`.
    pub position_keys: u32,
}

impl txl_options {
    /// The core's options, or `TXL_ERR_BAD_OPTIONS` for a value no field takes.
    pub fn to_core(&self) -> Result<SessionOptions, c_int> {
        let bad = TXL_ERR_BAD_OPTIONS;
        Ok(SessionOptions {
            tgt_len: self.tgt_len,
            mem_len: self.mem_len,
            clamp_len: self.clamp_len,
            same_length: match self.same_length {
                0 => false,
                1 => true,
                _ => return Err(bad),
            },
            mem_init: match self.mem_init {
                TXL_MEM_INIT_EMPTY => MemInit::Empty,
                TXL_MEM_INIT_ZEROS => MemInit::Zeros,
                _ => return Err(bad),
            },
            mem_dtype: match self.mem_dtype {
                TXL_MEM_DTYPE_F32 => MemDtype::F32,
                TXL_MEM_DTYPE_F16 => MemDtype::F16,
                TXL_MEM_DTYPE_INT8 => MemDtype::Int8,
                _ => return Err(bad),
            },
            position_keys: match self.position_keys {
                TXL_POSITION_KEYS_SESSION => PositionKeys::PerSession,
                TXL_POSITION_KEYS_SEGMENT => PositionKeys::PerSegment,
                TXL_POSITION_KEYS_FOLDED => PositionKeys::FoldedIntoQuery,
                _ => return Err(bad),
            },
        })
    }

    /// The core's options as C sees them.
    pub fn from_core(options: &SessionOptions) -> txl_options {
        txl_options {
            tgt_len: options.tgt_len,
            mem_len: options.mem_len,
            clamp_len: options.clamp_len,
            same_length: u32::from(options.same_length),
            mem_init: match options.mem_init {
                MemInit::Empty => TXL_MEM_INIT_EMPTY,
                MemInit::Zeros => TXL_MEM_INIT_ZEROS,
            },
            mem_dtype: match options.mem_dtype {
                MemDtype::F32 => TXL_MEM_DTYPE_F32,
                MemDtype::F16 => TXL_MEM_DTYPE_F16,
                MemDtype::Int8 => TXL_MEM_DTYPE_INT8,
            },
            position_keys: match options.position_keys {
                PositionKeys::PerSession => TXL_POSITION_KEYS_SESSION,
                PositionKeys::PerSegment => TXL_POSITION_KEYS_SEGMENT,
                PositionKeys::FoldedIntoQuery => TXL_POSITION_KEYS_FOLDED,
            },
        }
    }
}

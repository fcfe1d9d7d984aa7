//! The session's state as bytes that survive a restart.
//!
//! A Transformer-XL's whole state between segments is its recurrence memory: the cached keys
//! and values of the last `mem_len` positions (the position keys and every scratch buffer are
//! recomputed or overwritten). [`Session::save_state`] writes it, with what it is only valid
//! for: a fingerprint of the model image and the session options it was made with, and a
//! CRC-32 over everything. [`Session::restore_state`] checks all of that before it touches the
//! memory, so a damaged state or one from another model leaves the session as it was, and a
//! restored session continues bit for bit as if it had never stopped.
//!
//! The byte layout (all little-endian) is documented in `core/FORMAT.md`, "Session state".

use crate::crc32::crc32;
use crate::error::{Error, StateError};
use crate::model::Model;
use crate::options::MemDtype;
use crate::options::{MemInit, OptionWord, PositionKeys, SessionOptions};

use super::Session;

/// The first eight bytes of every saved state.
pub const STATE_MAGIC: [u8; 8] = *b"TXLSTATE";
/// The state format version this crate reads and writes.
pub const STATE_VERSION: u32 = 1;
/// Bytes before the memory rows.
pub const STATE_HEADER_BYTES: usize = 48;
/// Bytes of the trailing CRC-32.
const CRC_BYTES: usize = 4;

/// What a state is valid for, and how much memory it holds: the header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    /// The model image's own CRC-32 (its last four bytes).
    image_crc: u32,
    /// The model image's length in bytes.
    image_bytes: u64,
    options: SessionOptions,
    /// Remembered positions.
    len: u32,
    /// Bytes of one key (or value) row.
    row_bytes: u32,
}

impl Header {
    fn write(&self, out: &mut [u8]) {
        let o = &self.options;
        out[..8].copy_from_slice(&STATE_MAGIC);
        put_u32(out, 8, STATE_VERSION);
        put_u32(out, 12, self.image_crc);
        out[16..24].copy_from_slice(&self.image_bytes.to_le_bytes());
        put_u32(out, 24, o.tgt_len);
        put_u32(out, 28, o.mem_len);
        put_u32(out, 32, o.clamp_len);
        out[36] = o.same_length as u8;
        out[37] = word_index(o.mem_init);
        out[38] = word_index(o.mem_dtype);
        out[39] = word_index(o.position_keys);
        put_u32(out, 40, self.len);
        put_u32(out, 44, self.row_bytes);
    }

    /// Reads the header of `bytes` (at least [`STATE_HEADER_BYTES`]); magic and version first.
    fn read(bytes: &[u8]) -> Result<Header, StateError> {
        if bytes[..8] != STATE_MAGIC {
            return Err(StateError::BadMagic);
        }
        let version = get_u32(bytes, 8);
        if version != STATE_VERSION {
            return Err(StateError::UnsupportedVersion(version));
        }
        let mut image_bytes = [0u8; 8];
        image_bytes.copy_from_slice(&bytes[16..24]);
        let same_length = match bytes[36] {
            0 => false,
            1 => true,
            _ => return Err(StateError::BadHeader),
        };
        let options = SessionOptions {
            tgt_len: get_u32(bytes, 24),
            mem_len: get_u32(bytes, 28),
            clamp_len: get_u32(bytes, 32),
            same_length,
            mem_init: word_at::<MemInit>(bytes[37])?,
            mem_dtype: word_at::<MemDtype>(bytes[38])?,
            position_keys: word_at::<PositionKeys>(bytes[39])?,
        };
        Ok(Header {
            image_crc: get_u32(bytes, 12),
            image_bytes: u64::from_le_bytes(image_bytes),
            options,
            len: get_u32(bytes, 40),
            row_bytes: get_u32(bytes, 44),
        })
    }
}

/// The image's fingerprint: its stored CRC-32 and its length.
fn fingerprint(model: &Model<'_>) -> (u32, u64) {
    let bytes = model.image().bytes();
    let crc = match bytes.len().checked_sub(CRC_BYTES) {
        Some(at) => get_u32(bytes, at),
        None => 0,
    };
    (crc, bytes.len() as u64)
}

fn word_index<T: OptionWord + PartialEq>(value: T) -> u8 {
    T::ALL.iter().position(|&v| v == value).unwrap_or(0) as u8
}

fn word_at<T: OptionWord>(index: u8) -> Result<T, StateError> {
    T::ALL.get(index as usize).copied().ok_or(StateError::BadHeader)
}

fn put_u32(out: &mut [u8], at: usize, value: u32) {
    out[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Bytes of a state holding `positions` remembered positions of `n_layer` layers.
fn state_len(n_layer: usize, positions: usize, row_bytes: usize) -> Option<usize> {
    let rows = n_layer.checked_mul(positions)?.checked_mul(2)?;
    rows.checked_mul(row_bytes)?
        .checked_add(STATE_HEADER_BYTES + CRC_BYTES)
}

impl Session<'_, '_> {
    /// The most bytes [`Session::save_state`] writes for a session of `model` under
    /// `options` (a full memory), known before the session exists: size the buffer, or the
    /// flash region, that keeps the state with this.
    pub fn state_bytes_for(model: &Model<'_>, options: &SessionOptions) -> Result<usize, Error> {
        let config = model.config();
        let width = config.qkv_width() as usize;
        let row_bytes = options
            .mem_dtype
            .row_bytes(width, config.d_head as usize)
            .ok_or(Error::SizeOverflow)?;
        state_len(config.n_layer as usize, options.mem_len as usize, row_bytes).ok_or(Error::SizeOverflow)
    }

    /// The most bytes [`Session::save_state`] writes for this session (a full memory).
    pub fn state_bytes(&self) -> usize {
        // The arena of this session holds 2 * n_layer * capacity rows, so this cannot overflow.
        self.state_len(self.options.mem_len as usize)
    }

    fn state_len(&self, positions: usize) -> usize {
        let n_layer = self.model.config().n_layer as usize;
        state_len(n_layer, positions, self.memory.row_bytes()).unwrap_or(usize::MAX)
    }

    /// Writes the session's state (its memory, what it is valid for, a CRC) to the start of
    /// `out` and returns the bytes written: at most [`Session::state_bytes`], fewer while the
    /// memory is not yet full. The session is not changed.
    pub fn save_state(&self, out: &mut [u8]) -> Result<usize, Error> {
        let len = self.memory.len();
        let total = self.state_len(len);
        if out.len() < total {
            return Err(Error::BadState(StateError::BufferTooSmall {
                needed: total,
                got: out.len(),
            }));
        }
        let (image_crc, image_bytes) = fingerprint(&self.model);
        let header = Header {
            image_crc,
            image_bytes,
            options: self.options,
            len: len as u32,
            row_bytes: self.memory.row_bytes() as u32,
        };
        let out = &mut out[..total];
        header.write(out);
        let crc_at = total - CRC_BYTES;
        let n_layer = self.model.config().n_layer as usize;
        self.memory.save(n_layer, &mut out[STATE_HEADER_BYTES..crc_at]);
        let crc = crc32(&out[..crc_at]);
        put_u32(out, crc_at, crc);
        Ok(total)
    }

    /// Replaces the session's memory with a state [`Session::save_state`] wrote, and returns
    /// the bytes the state took (`bytes` may be longer; the rest is not read). The state must
    /// come from this model image and these session options, and be undamaged; otherwise the
    /// error says which, and the session is left exactly as it was.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<usize, Error> {
        let rows = self.check_state(bytes).map_err(Error::BadState)?;
        let n_layer = self.model.config().n_layer as usize;
        let end = STATE_HEADER_BYTES + rows.bytes;
        self.memory
            .load(n_layer, rows.len, &bytes[STATE_HEADER_BYTES..end]);
        Ok(end + CRC_BYTES)
    }

    /// Checks everything about a state before anything is changed.
    fn check_state(&self, bytes: &[u8]) -> Result<Rows, StateError> {
        let minimum = STATE_HEADER_BYTES + CRC_BYTES;
        if bytes.len() < minimum {
            return Err(StateError::Truncated {
                needed: minimum,
                got: bytes.len(),
            });
        }
        let header = Header::read(bytes)?;
        let mem_len = header.options.mem_len;
        if header.len > mem_len {
            return Err(StateError::BadHeader);
        }
        let n_layer = self.model.config().n_layer as usize;
        let total = state_len(n_layer, header.len as usize, header.row_bytes as usize)
            .ok_or(StateError::BadHeader)?;
        if bytes.len() < total {
            return Err(StateError::Truncated {
                needed: total,
                got: bytes.len(),
            });
        }
        let crc_at = total - CRC_BYTES;
        let stored = get_u32(bytes, crc_at);
        let computed = crc32(&bytes[..crc_at]);
        if stored != computed {
            return Err(StateError::BadChecksum { stored, computed });
        }
        if (header.image_crc, header.image_bytes) != fingerprint(&self.model) {
            return Err(StateError::OtherModel {
                image_crc: header.image_crc,
            });
        }
        if header.options != self.options {
            return Err(StateError::OtherOptions {
                saved: header.options,
            });
        }
        if header.row_bytes as usize != self.memory.row_bytes() {
            return Err(StateError::BadHeader);
        }
        Ok(Rows {
            len: header.len as usize,
            bytes: crc_at - STATE_HEADER_BYTES,
        })
    }
}

/// The memory rows of a checked state.
struct Rows {
    /// Remembered positions.
    len: usize,
    /// Bytes of all rows.
    bytes: usize,
}

//! An owned, 16-byte-aligned byte buffer for hosts (feature `alloc`): a model image read from
//! a file, or a session's arena.
//!
//! Allocation is fallible: a size that comes from a file or an option is asked for with
//! `try_reserve`, and a refusal is [`Error::AllocationFailed`], never an abort.
//!
//! ```
//! use txl_core::AlignedBytes;
//!
//! let image = AlignedBytes::copy_from(b"TXLMODEL")?;
//! assert_eq!(image.bytes(), b"TXLMODEL");
//! assert_eq!(image.bytes().as_ptr() as usize % 16, 0);
//! let mut arena = AlignedBytes::zeroed(100)?;
//! assert_eq!(arena.bytes_mut().len(), 100);
//! assert!(AlignedBytes::zeroed(usize::MAX).is_err());
//! # Ok::<(), txl_core::Error>(())
//! ```

use alloc::vec::Vec;

use crate::arena::ARENA_ALIGN;
use crate::error::Error;

/// Bytes starting on a 16-byte boundary, as [`crate::Model::parse`] and [`crate::Session::new`]
/// require.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlignedBytes {
    words: Vec<u128>,
    len: usize,
}

impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Result<AlignedBytes, Error> {
        let failed = Error::AllocationFailed { bytes: len };
        let words = len.checked_add(ARENA_ALIGN - 1).ok_or(failed)? / ARENA_ALIGN;
        let mut buffer = Vec::new();
        buffer.try_reserve_exact(words).map_err(|_| failed)?;
        buffer.resize(words, 0u128);
        Ok(AlignedBytes { words: buffer, len })
    }

    /// A copy of `bytes`.
    pub fn copy_from(bytes: &[u8]) -> Result<AlignedBytes, Error> {
        let mut aligned = AlignedBytes::zeroed(bytes.len())?;
        aligned.bytes_mut().copy_from_slice(bytes);
        Ok(aligned)
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u128, u8>(&self.words)[..self.len]
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u128, u8>(&mut self.words)[..self.len]
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

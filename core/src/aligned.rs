//! An owned, 16-byte-aligned byte buffer for hosts (feature `alloc`): a model image read from
//! a file, or a session's arena.
//!
//! Allocation is fallible: a size that comes from a file or an option is asked for once, and
//! a refusal is [`Error::AllocationFailed`], never an abort. The bytes come zeroed from the
//! allocator, so the fresh pages of a large image or arena are not written twice (once with
//! zeros, then with their contents).
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
/// require; optionally at a chosen place relative to 64-byte boundaries
/// ([`AlignedBytes::zeroed_at_phase`]).
#[derive(Clone, Debug)]
pub struct AlignedBytes {
    words: Vec<u128>,
    /// Where the bytes start in `words`, in bytes (a multiple of 16).
    start: usize,
    len: usize,
}

impl PartialEq for AlignedBytes {
    fn eq(&self, other: &AlignedBytes) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for AlignedBytes {}

/// The boundaries [`AlignedBytes::zeroed_at_phase`] measures from: a cache line, and an AVX-512
/// register.
const LINE: usize = 64;

impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Result<AlignedBytes, Error> {
        AlignedBytes::allocate(len, 0)
    }

    /// `len` zero bytes whose first byte is `phase` bytes past a 64-byte boundary (`phase` is
    /// taken modulo 64 and rounded down to a multiple of 16): a model image placed so that its
    /// large payloads start on cache lines ([`crate::image::load_phase`]), where the kernels'
    /// 64-byte loads do not straddle two.
    ///
    /// ```
    /// use txl_core::AlignedBytes;
    ///
    /// let bytes = AlignedBytes::zeroed_at_phase(100, 48)?;
    /// assert_eq!(bytes.bytes().as_ptr() as usize % 64, 48);
    /// assert_eq!(bytes.len(), 100);
    /// # Ok::<(), txl_core::Error>(())
    /// ```
    pub fn zeroed_at_phase(len: usize, phase: usize) -> Result<AlignedBytes, Error> {
        let mut bytes = AlignedBytes::allocate(len, LINE - ARENA_ALIGN)?;
        let phase = phase % LINE / ARENA_ALIGN * ARENA_ALIGN;
        let base = bytes.words.as_ptr() as usize;
        bytes.start = (phase + LINE - base % LINE) % LINE;
        Ok(bytes)
    }

    /// `len` zero bytes with room for `slack` more before them.
    fn allocate(len: usize, slack: usize) -> Result<AlignedBytes, Error> {
        let failed = Error::AllocationFailed { bytes: len };
        let words = len
            .checked_add(slack)
            .and_then(|n| n.checked_add(ARENA_ALIGN - 1))
            .ok_or(failed)?
            / ARENA_ALIGN;
        let buffer = if words == 0 {
            Vec::new()
        } else {
            let layout = core::alloc::Layout::array::<u128>(words).map_err(|_| failed)?;
            // SAFETY: `layout` has a non-zero size (`words > 0`).
            let words_at = unsafe { alloc::alloc::alloc_zeroed(layout) }.cast::<u128>();
            if words_at.is_null() {
                return Err(failed);
            }
            // SAFETY: `words_at` comes from the global allocator with the layout of `words`
            // u128s (`Vec`'s own), all initialized (zero); length and capacity are `words`.
            unsafe { Vec::from_raw_parts(words_at, words, words) }
        };
        Ok(AlignedBytes {
            words: buffer,
            start: 0,
            len,
        })
    }

    /// A copy of `bytes`; a model image is placed where its large payloads start on 64-byte
    /// boundaries ([`crate::image::load_phase`]).
    pub fn copy_from(bytes: &[u8]) -> Result<AlignedBytes, Error> {
        let mut aligned = AlignedBytes::zeroed_at_phase(bytes.len(), crate::image::load_phase(bytes))?;
        aligned.bytes_mut().copy_from_slice(bytes);
        Ok(aligned)
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u128, u8>(&self.words)[self.start..self.start + self.len]
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u128, u8>(&mut self.words)[self.start..self.start + self.len]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_is_zeroed_and_its_own() {
        // past 2 MB (the allocator's fresh pages; not under the slow interpreter), at a phase,
        // then cloned and dropped
        let len = if cfg!(miri) { 4096 + 123 } else { (5 << 20) + 123 };
        let mut bytes = AlignedBytes::zeroed_at_phase(len, 48).unwrap();
        assert!(bytes.bytes().iter().all(|&b| b == 0));
        for (i, byte) in bytes.bytes_mut().iter_mut().enumerate().step_by(4093) {
            *byte = (i % 251) as u8 + 1;
        }
        let copy = bytes.clone();
        assert_eq!(copy, bytes);
        assert_eq!(copy.bytes()[4093], (4093 % 251) as u8 + 1);
        drop(bytes);
        assert_eq!(copy.bytes()[len - 1], 0);
    }

    #[test]
    fn every_phase_starts_where_asked_and_compares_by_bytes() {
        for len in [0usize, 1, 100, 4096] {
            let mut reference = AlignedBytes::zeroed(len).unwrap();
            for (i, byte) in reference.bytes_mut().iter_mut().enumerate() {
                *byte = i as u8;
            }
            for phase in [0usize, 16, 32, 48, 64 + 16, 17] {
                let mut bytes = AlignedBytes::zeroed_at_phase(len, phase).unwrap();
                assert_eq!(bytes.len(), len);
                assert_eq!(
                    bytes.bytes().as_ptr() as usize % 64,
                    phase % 64 / 16 * 16,
                    "phase {phase}"
                );
                bytes.bytes_mut().copy_from_slice(reference.bytes());
                assert_eq!(bytes, reference, "the same bytes at another place are equal");
            }
        }
        assert!(AlignedBytes::zeroed_at_phase(usize::MAX - 8, 16).is_err());
    }
}

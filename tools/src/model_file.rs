//! Loading a model image from disk into 16-byte-aligned memory, as `txl-core` requires.

use std::path::Path;

use anyhow::{Context, Result};

/// Image bytes in a 16-byte-aligned buffer.
#[derive(Clone, Debug)]
pub struct AlignedBytes {
    words: Vec<u128>,
    len: usize,
}

impl AlignedBytes {
    /// Copies `bytes` into aligned memory.
    pub fn new(bytes: &[u8]) -> Self {
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        AlignedBytes {
            words,
            len: bytes.len(),
        }
    }

    /// Reads a file.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Self::new(&bytes))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u128, u8>(&self.words)[..self.len]
    }
}

/// A zeroed, 16-byte-aligned arena of at least `bytes` bytes; `arena_slice` gives exactly `bytes`.
#[derive(Debug)]
pub struct Arena {
    words: Vec<u128>,
    len: usize,
}

impl Arena {
    /// An arena of `bytes` bytes.
    pub fn new(bytes: usize) -> Self {
        Arena {
            words: vec![0u128; bytes.div_ceil(16)],
            len: bytes,
        }
    }

    /// The arena's bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u128, u8>(&mut self.words)[..self.len]
    }
}

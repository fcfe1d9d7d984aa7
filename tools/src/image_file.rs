//! Reading a model image from disk into 16-byte-aligned memory, as `txl-core` requires.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use txl_core::AlignedBytes;

/// Reads the file at `path` into aligned memory. The buffer is sized from the file's length
/// and allocated fallibly: a file too large for memory is an error, not an abort.
pub fn read_image(path: &Path) -> Result<AlignedBytes> {
    let mut file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    let len =
        usize::try_from(len).with_context(|| format!("{}: {len} bytes is too large", path.display()))?;
    let mut bytes = AlignedBytes::zeroed(len).with_context(|| format!("reading {}", path.display()))?;
    file.read_exact(bytes.bytes_mut())
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes)
}

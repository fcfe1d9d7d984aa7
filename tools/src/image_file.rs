//! Model images on disk: read into 16-byte-aligned memory (as `txl-core` requires) and
//! parsed with the file named in any error; files written with the folders they need.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use txl_core::{AlignedBytes, Model};

/// Reads the file at `path` into aligned memory. The buffer is sized from the file's length
/// and allocated fallibly: a file too large for memory is an error, not an abort. An image
/// states its length in a u32, so a longer file is refused before anything is allocated.
pub fn read_image(path: &Path) -> Result<AlignedBytes> {
    let mut file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if len > u64::from(u32::MAX) {
        bail!(
            "{}: {len} bytes is more than a model image can be ({} bytes)",
            path.display(),
            u32::MAX
        );
    }
    let len =
        usize::try_from(len).with_context(|| format!("{}: {len} bytes is too large", path.display()))?;
    let mut bytes = AlignedBytes::zeroed(len).with_context(|| format!("reading {}", path.display()))?;
    file.read_exact(bytes.bytes_mut())
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes)
}

/// Parses an image read from `path`; an error names the file.
pub fn parse_model<'a>(bytes: &'a AlignedBytes, path: &Path) -> Result<Model<'a>> {
    Model::parse(bytes.bytes()).with_context(|| path.display().to_string())
}

/// Writes `bytes` to `path`, creating the directories it needs.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

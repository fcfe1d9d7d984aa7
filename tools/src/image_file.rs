//! Model images on disk: read into 16-byte-aligned memory (as `txl-core` requires) and
//! parsed with the file named in any error; files written with the folders they need.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use txl_core::{image, AlignedBytes, Model};

/// Reads the file at `path` into aligned memory. The buffer is sized from the file's length
/// and allocated fallibly: a file too large for memory is an error, not an abort. An image
/// states its length in a u32, so a longer file is refused before anything is allocated. The
/// image is placed where its largest payloads start on 64-byte boundaries
/// ([`image::load_phase`]), which makes the kernels' loads faster and changes no result.
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
    let reading = || format!("reading {}", path.display());
    // the header and the directory first, to place the image so that its large payloads start
    // on cache lines (`load_phase`: faster loads in the kernels, the same bits)
    let mut prefix = vec![0u8; len.min(image::HEADER_BYTES)];
    file.read_exact(&mut prefix).with_context(reading)?;
    if prefix.len() == image::HEADER_BYTES {
        let at = image::TENSOR_COUNT_AT;
        let count = u32::from_le_bytes([prefix[at], prefix[at + 1], prefix[at + 2], prefix[at + 3]]) as usize;
        // (a damaged count reads at most a megabyte here; parsing reports it)
        let directory = count
            .saturating_mul(image::ENTRY_BYTES)
            .min(len - prefix.len())
            .min(1 << 20);
        let at = prefix.len();
        prefix.resize(at + directory, 0);
        file.read_exact(&mut prefix[at..]).with_context(reading)?;
    }
    let mut bytes = AlignedBytes::zeroed_at_phase(len, image::load_phase(&prefix)).with_context(reading)?;
    let (head, rest) = bytes.bytes_mut().split_at_mut(prefix.len());
    head.copy_from_slice(&prefix);
    file.read_exact(rest).with_context(reading)?;
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

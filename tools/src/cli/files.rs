//! Reading model images and writing what the commands make.

use std::path::Path;

use anyhow::{Context, Result};
use txl_core::{AlignedBytes, Model};

/// Reads the image at `path` into aligned memory (see [`crate::image_file::read_image`]).
pub fn read_image(path: &Path) -> Result<AlignedBytes> {
    crate::image_file::read_image(path)
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

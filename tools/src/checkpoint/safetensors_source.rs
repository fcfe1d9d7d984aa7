//! `model.safetensors`: an 8-byte little-endian header length, a JSON header (parsed and
//! validated by the `safetensors` crate), then the tensors' bytes. Only the header is read
//! at open; each tensor is read from the file when asked for, so a large checkpoint is never
//! held in memory twice.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use safetensors::tensor::{Dtype, Metadata, TensorInfo};

use super::source::{ByteOrder, SourceDtype, TensorMeta, TensorSource};

/// Largest header accepted (the `safetensors` crate's own limit).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// An opened `.safetensors` file.
#[derive(Debug)]
pub(crate) struct SafetensorsSource {
    path: PathBuf,
    file: File,
    /// File offset of the first tensor byte.
    data_start: u64,
    tensors: HashMap<String, TensorInfo>,
}

impl SafetensorsSource {
    /// Opens `path` and validates its header against the file's length.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let file_len = file
            .metadata()
            .with_context(|| format!("cannot read {}", path.display()))?
            .len();
        let mut length_bytes = [0u8; 8];
        file.read_exact(&mut length_bytes)
            .with_context(|| format!("{} is too short for a safetensors file", path.display()))?;
        let header_len = u64::from_le_bytes(length_bytes);
        if header_len > MAX_HEADER_BYTES || header_len > file_len - 8 {
            bail!(
                "{} is not a valid safetensors file (header length {header_len}, file length {file_len})",
                path.display()
            );
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header)
            .with_context(|| format!("cannot read the header of {}", path.display()))?;
        let metadata: Metadata = serde_json::from_slice(&header)
            .with_context(|| format!("{} has an invalid safetensors header", path.display()))?;
        let data_start = 8 + header_len;
        let data_len = metadata.data_len() as u64;
        if data_start.checked_add(data_len) != Some(file_len) {
            bail!(
                "{} is truncated or corrupt: its header describes {} bytes of tensors, the file holds {}",
                path.display(),
                data_len,
                file_len.saturating_sub(data_start)
            );
        }
        let tensors = metadata
            .tensors()
            .into_iter()
            .map(|(name, info)| (name, info.clone()))
            .collect();
        Ok(SafetensorsSource {
            path: path.to_path_buf(),
            file,
            data_start,
            tensors,
        })
    }
}

fn source_dtype(dtype: Dtype) -> SourceDtype {
    match dtype {
        Dtype::F32 => SourceDtype::F32,
        Dtype::F16 => SourceDtype::F16,
        Dtype::BF16 => SourceDtype::BF16,
        Dtype::F64 => SourceDtype::F64,
        other => SourceDtype::Other(format!("{other:?}")),
    }
}

impl TensorSource for SafetensorsSource {
    fn path(&self) -> &Path {
        &self.path
    }

    fn keys(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn meta(&self, key: &str) -> Option<TensorMeta> {
        let info = self.tensors.get(key)?;
        let (start, end) = info.data_offsets;
        Some(TensorMeta {
            dtype: source_dtype(info.dtype),
            shape: info.shape.clone(),
            byte_len: (end - start) as u64,
        })
    }

    fn read_bytes(&mut self, key: &str) -> Result<(Vec<u8>, ByteOrder)> {
        let Some(info) = self.tensors.get(key) else {
            bail!("{} has no tensor `{key}`", self.path.display());
        };
        let (start, end) = info.data_offsets;
        let mut bytes = vec![0u8; end - start];
        self.file
            .seek(SeekFrom::Start(self.data_start + start as u64))
            .and_then(|_| self.file.read_exact(&mut bytes))
            .with_context(|| format!("cannot read tensor `{key}` from {}", self.path.display()))?;
        Ok((bytes, ByteOrder::Little))
    }
}

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
use serde::Deserialize;

use super::source::{with_room, ByteOrder, SourceDtype, TensorMeta, TensorSource};

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
        let after_length = file_len.saturating_sub(8);
        if header_len > MAX_HEADER_BYTES || header_len > after_length {
            let limit = if header_len > MAX_HEADER_BYTES {
                format!("the {MAX_HEADER_BYTES}-byte limit")
            } else {
                format!("the {after_length} bytes the file holds after it")
            };
            bail!(
                "{} is not a valid safetensors file: its header length {header_len} is more than {limit} \
                 (file length {file_len})",
                path.display()
            );
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header)
            .with_context(|| format!("cannot read the header of {}", path.display()))?;
        let data_start = 8 + header_len;
        check_claims(path, &header, file_len - data_start)?;
        let metadata: Metadata = serde_json::from_slice(&header)
            .with_context(|| format!("{} has an invalid safetensors header", path.display()))?;
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

/// One tensor's entry in the header, as far as its size goes.
#[derive(Deserialize)]
struct Claim {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// Bytes per element of a safetensors dtype name; `None` for the sub-byte and unknown ones
/// (the `safetensors` crate checks those).
fn element_bytes(dtype: &str) -> Option<u128> {
    match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => Some(1),
        "U16" | "I16" | "F16" | "BF16" => Some(2),
        "U32" | "I32" | "F32" => Some(4),
        "U64" | "I64" | "F64" | "C64" => Some(8),
        _ => None,
    }
}

/// Checks what each tensor of the `header` claims (shape, element type, offsets) against
/// itself and against the `data_len` bytes of tensors the file holds, before anything is
/// sized by it. The `safetensors` crate refuses the same headers; this says which tensor
/// claims how many bytes. Entries that do not parse are left to the crate.
fn check_claims(path: &Path, header: &[u8], data_len: u64) -> Result<()> {
    let Ok(entries) = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(header) else {
        return Ok(());
    };
    for (name, entry) in &entries {
        let Ok(claim) = Claim::deserialize(entry) else {
            continue;
        };
        let Some(size) = element_bytes(&claim.dtype) else {
            continue;
        };
        let elements = claim
            .shape
            .iter()
            .try_fold(1u128, |n, &d| n.checked_mul(u128::from(d)));
        let bytes = elements.and_then(|n| n.checked_mul(size));
        let (start, end) = claim.data_offsets;
        let span = end.checked_sub(start);
        if bytes.is_none() || span.map(u128::from) != bytes {
            let count = |n: Option<u128>| n.map_or("more than 2^128".to_string(), |n| n.to_string());
            let span = span.map_or("run backwards".to_string(), |n| format!("span {n} bytes"));
            bail!(
                "{} has an invalid safetensors header: tensor `{name}` claims shape {:?} of {}, {} elements ({} bytes), \
                 but its data_offsets {start}..{end} {span} (the file holds {data_len} bytes of tensors)",
                path.display(),
                claim.shape,
                claim.dtype,
                count(elements),
                count(bytes),
            );
        }
        if end > data_len {
            bail!(
                "{} is truncated or corrupt: tensor `{name}` claims bytes {start}..{end} ({} bytes, shape {:?} of {}), \
                 but the file holds {data_len} bytes of tensors",
                path.display(),
                end - start,
                claim.shape,
                claim.dtype
            );
        }
    }
    Ok(())
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
        // Within the file (checked at open), but perhaps not within memory.
        let mut bytes = with_room(end - start, || {
            format!(
                "tensor `{key}` in {} ({} bytes)",
                self.path.display(),
                end - start
            )
        })?;
        bytes.resize(end - start, 0);
        self.file
            .seek(SeekFrom::Start(self.data_start + start as u64))
            .and_then(|_| self.file.read_exact(&mut bytes))
            .with_context(|| format!("cannot read tensor `{key}` from {}", self.path.display()))?;
        Ok((bytes, ByteOrder::Little))
    }
}

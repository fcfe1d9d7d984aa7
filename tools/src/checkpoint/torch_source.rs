//! `pytorch_model.bin`: what `torch.save(state_dict)` writes, a ZIP archive holding
//! `archive/data.pkl` and one `archive/data/N` entry per storage (or, from PyTorch before 1.6,
//! a legacy pickle stream). Read with the `pytorch-reader` crate, which interprets the pickle
//! as data: it knows the handful of globals `torch.save` uses (`OrderedDict`,
//! `torch._utils._rebuild_tensor_v2`, the storage types, ...) and refuses any other, so no
//! code from the file is ever run. Tensor bytes are read from the archive on demand.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use pytorch_reader::{DType, PytorchReader, Tensor};

use super::source::{ByteOrder, SourceDtype, TensorMeta, TensorSource};

/// An opened PyTorch checkpoint.
#[derive(Debug)]
pub(crate) struct TorchSource {
    path: PathBuf,
    /// The file's length when opened: no tensor `torch.save` writes is longer.
    file_len: u64,
    tensors: HashMap<String, Tensor>,
}

impl TorchSource {
    /// Opens `path` and parses its pickle (metadata only).
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let file_len = std::fs::metadata(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .len();
        // `PytorchError`'s message already holds its source's: one of them is enough.
        let reader = PytorchReader::new(path)
            .map_err(|error| anyhow!("cannot read the PyTorch checkpoint {}: {error}", path.display()))?;
        // A ZIP's storage entries declare their sizes; `pytorch-reader` reads only the bytes
        // each tensor needs, so entries that claim more than the file holds would otherwise
        // go unnoticed (and their CRCs unchecked). `torch.save` stores them uncompressed.
        if let Some(claimed) = reader.metadata().total_data_size {
            if claimed as u64 > file_len {
                bail!(
                    "the storages in {} claim {claimed} bytes, but the file holds {file_len} bytes",
                    path.display()
                );
            }
        }
        Ok(TorchSource {
            path: path.to_path_buf(),
            file_len,
            tensors: reader.into_tensors(),
        })
    }
}

fn source_dtype(dtype: DType) -> SourceDtype {
    match dtype {
        DType::F32 => SourceDtype::F32,
        DType::F16 => SourceDtype::F16,
        DType::BF16 => SourceDtype::BF16,
        DType::F64 => SourceDtype::F64,
        other => SourceDtype::Other(format!("{other:?}").to_lowercase()),
    }
}

impl TensorSource for TorchSource {
    fn path(&self) -> &Path {
        &self.path
    }

    fn keys(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn meta(&self, key: &str) -> Option<TensorMeta> {
        let tensor = self.tensors.get(key)?;
        Some(TensorMeta {
            dtype: source_dtype(tensor.dtype()),
            shape: tensor.shape().to_vec(),
            byte_len: tensor.byte_len() as u64,
        })
    }

    fn read_bytes(&mut self, key: &str) -> Result<(Vec<u8>, ByteOrder)> {
        let Some(tensor) = self.tensors.get(key) else {
            bail!("{} has no tensor `{key}`", self.path.display());
        };
        // `pytorch-reader` checks every storage against the file, but materializes a view
        // (an `expand`, stride 0) or a deflated entry at its full size, up to 10 GiB each.
        // `torch.save` writes neither for a state_dict's weights, so a tensor that claims
        // more bytes than the whole file is refused before it is read.
        let claimed = tensor.byte_len() as u64;
        if claimed > self.file_len {
            bail!(
                "tensor `{key}` in {} claims shape {:?} of {}, {claimed} bytes, but the file holds {} bytes \
                 (a view or a compressed storage larger than the checkpoint is not read)",
                self.path.display(),
                tensor.shape(),
                source_dtype(tensor.dtype()).name(),
                self.file_len
            );
        }
        let bytes = tensor
            .read()
            .with_context(|| format!("cannot read tensor `{key}` from {}", self.path.display()))?;
        // pytorch-reader hands back contiguous, native-endian elements.
        Ok((bytes, ByteOrder::Native))
    }
}

//! `pytorch_model.bin`: what `torch.save(state_dict)` writes, a ZIP archive holding
//! `archive/data.pkl` and one `archive/data/N` entry per storage (or, from PyTorch before 1.6,
//! a legacy pickle stream). Read with the `pytorch-reader` crate, which interprets the pickle
//! as data: it knows the handful of globals `torch.save` uses (`OrderedDict`,
//! `torch._utils._rebuild_tensor_v2`, the storage types, ...) and refuses any other, so no
//! code from the file is ever run. Tensor bytes are read from the archive on demand.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use pytorch_reader::{DType, PytorchReader, Tensor};

use super::source::{ByteOrder, SourceDtype, TensorMeta, TensorSource};

/// An opened PyTorch checkpoint.
#[derive(Debug)]
pub(crate) struct TorchSource {
    path: PathBuf,
    tensors: HashMap<String, Tensor>,
}

impl TorchSource {
    /// Opens `path` and parses its pickle (metadata only).
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let reader = PytorchReader::new(path)
            .with_context(|| format!("cannot read the PyTorch checkpoint {}", path.display()))?;
        Ok(TorchSource {
            path: path.to_path_buf(),
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
        let bytes = tensor
            .read()
            .with_context(|| format!("cannot read tensor `{key}` from {}", self.path.display()))?;
        // pytorch-reader hands back contiguous, native-endian elements.
        Ok((bytes, ByteOrder::Native))
    }
}

//! The tensors of a whole module saved in the legacy stream format (PyTorch before 1.6, which
//! the original training code ran on): `pytorch-reader` does not read a module pickled this
//! way (its classes are persistent ids), so the module tree [`super::pickle_tree`] walked is
//! flattened here to `state_dict()` names, and each tensor's bytes are read from its storage
//! in the stream.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use super::pickle_tree::{self, TensorRef, Value, MAX_DEPTH};
use super::source::{byte_len, ByteOrder, SourceDtype, TensorMeta, TensorSource};

/// A legacy whole-module file opened for reading.
pub(crate) struct LegacyModuleSource {
    path: PathBuf,
    file: File,
    tensors: HashMap<String, std::rc::Rc<TensorRef>>,
    /// Where each storage's elements start in the file, and how many it holds there.
    offsets: HashMap<String, (u64, u64)>,
}

fn dtype(storage_class: &str) -> SourceDtype {
    match storage_class {
        "FloatStorage" => SourceDtype::F32,
        "HalfStorage" => SourceDtype::F16,
        "BFloat16Storage" => SourceDtype::BF16,
        "DoubleStorage" => SourceDtype::F64,
        other => SourceDtype::Other(other.to_string()),
    }
}

/// Bytes per element of a storage class (the integer ones too, to step over them).
fn element_bytes(storage_class: &str) -> Option<u64> {
    Some(match storage_class {
        "DoubleStorage" | "LongStorage" => 8,
        "FloatStorage" | "IntStorage" => 4,
        "HalfStorage" | "BFloat16Storage" | "ShortStorage" => 2,
        "ByteStorage" | "CharStorage" | "BoolStorage" => 1,
        _ => return None,
    })
}

/// Adds the parameters and buffers of the module `value` and its children under `prefix`.
fn flatten(
    value: &Value,
    prefix: &str,
    depth: usize,
    out: &mut HashMap<String, std::rc::Rc<TensorRef>>,
) -> Result<()> {
    if depth > MAX_DEPTH {
        bail!("the module tree is deeper than {MAX_DEPTH} levels");
    }
    let Value::Object(object) = value else {
        bail!("`{prefix}` is a {}, not a module", value.type_name());
    };
    let object = object.borrow();
    let Some(attrs) = object.state.as_ref().and_then(Value::dict_items) else {
        bail!("`{prefix}` ({}) has no attributes", object.class);
    };
    for (table, name) in attrs.iter().filter_map(|(k, v)| k.as_str().map(|k| (k, v))) {
        if !matches!(table, "_parameters" | "_buffers" | "_modules") {
            continue;
        }
        let Some(items) = name.dict_items() else {
            bail!("`{prefix}`.{table} is not a dict");
        };
        for (key, item) in items {
            let Some(key) = key.as_str() else {
                bail!("`{prefix}`.{table} has a key that is not a string");
            };
            let full = format!("{prefix}{key}");
            match (table, &item) {
                (_, Value::None) => {}
                ("_modules", _) => flatten(&item, &format!("{full}."), depth + 1, out)?,
                (_, Value::Tensor(tensor)) => {
                    out.insert(full, tensor.clone());
                }
                (_, other) => bail!("`{full}` is a {}, not a tensor", other.type_name()),
            }
        }
    }
    Ok(())
}

impl LegacyModuleSource {
    /// Opens the legacy stream at `path` holding a pickled module.
    pub(crate) fn open(path: &Path, allowed: &dyn Fn(&str, &str) -> bool) -> Result<Self> {
        let mut file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
        let Some((root, end)) = pickle_tree::legacy_object(&mut file, allowed)? else {
            bail!("{} is not a legacy torch.save stream", path.display());
        };
        let mut tensors = HashMap::new();
        flatten(&root, "", 0, &mut tensors)?;
        let mut classes: HashMap<String, String> = HashMap::new();
        for tensor in tensors.values() {
            classes.insert(tensor.storage.key.clone(), tensor.storage.class.clone());
        }
        let sizes = |key: &str| -> Result<u64> {
            let class = classes
                .get(key)
                .ok_or_else(|| anyhow!("storage {key} is held by no tensor of the model"))?;
            element_bytes(class).ok_or_else(|| anyhow!("storage {key} is a torch.{class}, which is not read"))
        };
        let offsets = pickle_tree::legacy_storage_offsets(&mut file, end, &sizes)
            .with_context(|| format!("in {}", path.display()))?;
        Ok(LegacyModuleSource {
            path: path.to_path_buf(),
            file,
            tensors,
            offsets,
        })
    }

    fn element_bytes(&self, tensor: &TensorRef) -> Result<u64> {
        element_bytes(&tensor.storage.class)
            .ok_or_else(|| anyhow!("a torch.{} is not read", tensor.storage.class))
    }
}

impl TensorSource for LegacyModuleSource {
    fn path(&self) -> &Path {
        &self.path
    }

    fn keys(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn meta(&self, key: &str) -> Option<TensorMeta> {
        let tensor = self.tensors.get(key)?;
        let size = element_bytes(&tensor.storage.class).unwrap_or(1) as usize;
        Some(TensorMeta {
            dtype: dtype(&tensor.storage.class),
            shape: tensor.shape.clone(),
            byte_len: u64::try_from(byte_len(&tensor.shape, size)).unwrap_or(u64::MAX),
        })
    }

    fn read_bytes(&mut self, key: &str) -> Result<(Vec<u8>, ByteOrder)> {
        let Some(tensor) = self.tensors.get(key).cloned() else {
            bail!("{} has no tensor `{key}`", self.path.display());
        };
        // Only what torch.save writes for a parameter: a contiguous, row-major view.
        let mut expected = 1usize;
        for (&dim, &stride) in tensor.shape.iter().zip(&tensor.stride).rev() {
            if dim > 1 && stride != expected {
                bail!(
                    "tensor `{key}` in {} is not contiguous (stride {:?})",
                    self.path.display(),
                    tensor.stride
                );
            }
            expected = expected.saturating_mul(dim);
        }
        let numel = expected as u64;
        let size = self.element_bytes(&tensor)?;
        let Some(&(start, stored)) = self.offsets.get(&tensor.storage.key) else {
            bail!(
                "{}: storage {} of `{key}` is not in the file",
                self.path.display(),
                tensor.storage.key
            );
        };
        // The stream's own element count bounds the read (it was checked against the file).
        let end = tensor.offset.saturating_add(numel);
        if tensor.stride.len() != tensor.shape.len() || end > tensor.storage.numel || end > stored {
            bail!(
                "tensor `{key}` in {} reaches past its storage ({stored} elements)",
                self.path.display()
            );
        }
        let mut bytes = vec![0u8; (numel * size) as usize];
        self.file.seek(SeekFrom::Start(start + tensor.offset * size))?;
        self.file.read_exact(&mut bytes).with_context(|| {
            format!(
                "cannot read tensor `{key}` from {} (is it truncated?)",
                self.path.display()
            )
        })?;
        Ok((bytes, ByteOrder::Little))
    }
}

//! A TensorFlow V2 checkpoint (a tensor bundle) opened for reading: `PREFIX.index` (see
//! [`super::table`]) holds a header and one entry per tensor, and the tensors' bytes lie in
//! `PREFIX.data-SSSSS-of-NNNNN`, raw and row-major, each range checked against its entry's
//! CRC32C when read.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use super::error::TfError;
use super::proto::{BundleEntry, BundleHeader};
use super::table::{mask_crc, read_table};
use crate::checkpoint::source::{byte_len, with_room, ByteOrder, SourceDtype, TensorMeta, TensorSource};
use ::crc32c::crc32c;

/// The largest `.index` file read (the index of a 24-layer model with its optimizer slots is
/// tens of kilobytes).
pub const MAX_INDEX_BYTES: u64 = 1 << 28;

/// The element type of a `DataType` number (`types.proto`).
fn dtype_of(number: i64) -> SourceDtype {
    match number {
        1 => SourceDtype::F32,
        2 => SourceDtype::F64,
        14 => SourceDtype::BF16,
        19 => SourceDtype::F16,
        3 => SourceDtype::Other("int32".into()),
        9 => SourceDtype::Other("int64".into()),
        7 => SourceDtype::Other("string".into()),
        10 => SourceDtype::Other("bool".into()),
        n => SourceDtype::Other(format!("DataType {n}")),
    }
}

/// One tensor's entry, checked.
#[derive(Clone, Debug)]
struct Entry {
    dtype: SourceDtype,
    shape: Vec<usize>,
    shard: u32,
    offset: u64,
    size: u64,
    crc32c: u32,
}

/// A checkpoint's tensors: names, types, shapes, and their bytes on demand.
#[derive(Debug)]
pub struct Bundle {
    prefix: PathBuf,
    index_path: PathBuf,
    num_shards: u32,
    entries: BTreeMap<String, Entry>,
}

/// `PREFIX.index`.
pub fn index_path(prefix: &Path) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(".index");
    PathBuf::from(name)
}

/// `PREFIX.data-SSSSS-of-NNNNN`.
pub fn shard_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!(".data-{shard:05}-of-{num_shards:05}"));
    PathBuf::from(name)
}

impl Bundle {
    /// Opens the checkpoint `prefix` (`DIR/model.ckpt-0`): reads and checks its index.
    pub fn open(prefix: &Path) -> Result<Bundle> {
        let index_path = index_path(prefix);
        let mut file =
            File::open(&index_path).with_context(|| format!("cannot read {}", index_path.display()))?;
        let len = file
            .metadata()
            .with_context(|| format!("cannot read {}", index_path.display()))?
            .len();
        if len > MAX_INDEX_BYTES {
            bail!(
                "{} is {len} bytes, more than an index holds ({MAX_INDEX_BYTES})",
                index_path.display()
            );
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", index_path.display()))?;
        Bundle::from_index(prefix, &bytes).with_context(|| format!("in {}", index_path.display()))
    }

    /// The bundle whose index holds `bytes` (the data files are looked for beside `prefix`).
    pub fn from_index(prefix: &Path, bytes: &[u8]) -> Result<Bundle, TfError> {
        let table = read_table(bytes)?;
        let mut header = None;
        let mut entries = BTreeMap::new();
        for (key, value) in table {
            if key.is_empty() {
                header = Some(BundleHeader::decode(&value)?);
                continue;
            }
            let name = String::from_utf8(key)
                .map_err(|_| TfError::Malformed("a tensor name is not UTF-8".into()))?;
            let entry = BundleEntry::decode(&value, &name)?;
            entries.insert(name, entry);
        }
        let header =
            header.ok_or_else(|| TfError::Malformed("the index has no header (the empty key)".into()))?;
        if header.endianness != 0 {
            return Err(TfError::Unsupported(format!(
                "the tensors are stored big-endian (endianness {}); only little-endian checkpoints are read",
                header.endianness
            )));
        }
        let num_shards = u32::try_from(header.num_shards)
            .ok()
            .filter(|&n| (1..=99_999).contains(&n))
            .ok_or_else(|| {
                TfError::Malformed(format!("the header names {} data shards", header.num_shards))
            })?;
        let mut checked = BTreeMap::new();
        for (name, entry) in entries {
            if entry.sliced {
                return Err(TfError::Unsupported(format!(
                    "`{name}` is saved in slices (a partitioned variable)"
                )));
            }
            let bad = |what: &str| TfError::Malformed(format!("the entry of `{name}`: {what}"));
            let shape = entry
                .shape
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| bad(&format!("dimension {d}"))))
                .collect::<Result<Vec<usize>, TfError>>()?;
            let shard = u32::try_from(entry.shard_id)
                .ok()
                .filter(|&s| s < num_shards)
                .ok_or_else(|| bad(&format!("shard {} of {num_shards}", entry.shard_id)))?;
            let offset = u64::try_from(entry.offset).map_err(|_| bad(&format!("offset {}", entry.offset)))?;
            let size = u64::try_from(entry.size).map_err(|_| bad(&format!("size {}", entry.size)))?;
            checked.insert(
                name,
                Entry {
                    dtype: dtype_of(entry.dtype),
                    shape,
                    shard,
                    offset,
                    size,
                    crc32c: entry.crc32c,
                },
            );
        }
        Ok(Bundle {
            prefix: prefix.to_path_buf(),
            index_path: index_path(prefix),
            num_shards,
            entries: checked,
        })
    }

    /// How many data shards the header names.
    pub fn num_shards(&self) -> u32 {
        self.num_shards
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The shape of tensor `name`, if the bundle holds it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// Where tensor `name`'s bytes lie: its data file, byte offset and length.
    pub fn location(&self, name: &str) -> Option<(PathBuf, u64, u64)> {
        self.entries.get(name).map(|e| {
            (
                shard_path(&self.prefix, e.shard, self.num_shards),
                e.offset,
                e.size,
            )
        })
    }

    /// The bytes of tensor `name`, checked against its CRC32C.
    fn bytes(&self, name: &str) -> Result<Vec<u8>> {
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| anyhow!("{} has no tensor `{name}`", self.index_path.display()))?;
        let path = shard_path(&self.prefix, entry.shard, self.num_shards);
        let mut file = File::open(&path).with_context(|| {
            format!(
                "cannot read data shard {} of `{name}` ({})",
                entry.shard,
                path.display()
            )
        })?;
        let len = file
            .metadata()
            .with_context(|| format!("cannot read {}", path.display()))?
            .len();
        if entry.offset.checked_add(entry.size).is_none_or(|end| end > len) {
            return Err(anyhow!(TfError::Truncated(format!(
                "`{name}` lies at bytes {}..+{} of {}, which has {len}",
                entry.offset,
                entry.size,
                path.display()
            ))));
        }
        let size = usize::try_from(entry.size).map_err(|_| anyhow!("`{name}` is too large"))?;
        let mut bytes: Vec<u8> = with_room(size, || format!("tensor `{name}`"))?;
        file.seek(SeekFrom::Start(entry.offset))
            .and_then(|_| file.take(entry.size).read_to_end(&mut bytes))
            .with_context(|| format!("cannot read `{name}` from {}", path.display()))?;
        let computed = mask_crc(crc32c(&bytes));
        if computed != entry.crc32c {
            return Err(anyhow!(TfError::Checksum {
                what: format!("tensor `{name}` in {}", path.display()),
                stored: entry.crc32c,
                computed,
            }));
        }
        Ok(bytes)
    }
}

impl TensorSource for Bundle {
    fn path(&self) -> &Path {
        &self.index_path
    }

    fn keys(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    fn meta(&self, key: &str) -> Option<TensorMeta> {
        self.entries.get(key).map(|e| TensorMeta {
            dtype: e.dtype.clone(),
            shape: e.shape.clone(),
            byte_len: e.size,
        })
    }

    fn read_bytes(&mut self, key: &str) -> Result<(Vec<u8>, ByteOrder)> {
        let entry = self
            .entries
            .get(key)
            .ok_or_else(|| anyhow!("{} has no tensor `{key}`", self.index_path.display()))?;
        // The entry's size must be what its shape and type take, before anything is read.
        if let Some(element) = match entry.dtype {
            SourceDtype::F32 => Some(4),
            SourceDtype::F64 => Some(8),
            SourceDtype::F16 | SourceDtype::BF16 => Some(2),
            SourceDtype::Other(_) => None,
        } {
            let expected = byte_len(&entry.shape, element);
            if u128::from(entry.size) != expected {
                bail!(TfError::Malformed(format!(
                    "`{key}` has shape {:?} of {}, {expected} bytes, but its entry says {}",
                    entry.shape,
                    entry.dtype.name(),
                    entry.size
                )));
            }
        }
        Ok((self.bytes(key)?, ByteOrder::Little))
    }
}

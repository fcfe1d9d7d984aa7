//! Writes `torch.save(state_dict)` files without Python: a ZIP archive, uncompressed, holding
//! `archive/data.pkl` (a protocol-2 pickle of an `OrderedDict` of `_rebuild_tensor_v2` calls, as
//! `torch.save` writes it) and one `archive/data/N` per storage. Several keys may share a
//! storage, as tied parameters do in a real checkpoint.
//!
//! The checkpoint reader's tests and the fuzzing seeds build their PyTorch files with it; it
//! writes the subset of the format the reader accepts, so a file from here is also a small,
//! readable example of that subset.
//!
//! ```
//! use safetensors::Dtype;
//! use txl_tools::checkpoint::torch_writer::TorchFile;
//!
//! let mut file = TorchFile::default();
//! file.add("transformer.word_emb.emb_layers.0.weight", &[2, 2], Dtype::F32, &[0.5, -1.0, 2.0, 0.0]);
//! file.alias("crit.out_layers.0.weight", "transformer.word_emb.emb_layers.0.weight")?;
//! let bytes = file.to_bytes()?;
//! assert_eq!(&bytes[..4], b"PK\x03\x04");
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::path::Path;

use anyhow::{bail, Context, Result};
use safetensors::Dtype;

/// A `state_dict` being assembled: storages, and the keys that view them.
#[derive(Clone, Debug, Default)]
pub struct TorchFile {
    /// Each storage's element type and values.
    storages: Vec<(Dtype, Vec<f32>)>,
    /// `(key, shape, storage)`, in the order `torch.save` lists them.
    entries: Vec<(String, Vec<usize>, usize)>,
}

impl TorchFile {
    /// Adds a tensor with a storage of its own (`data` row-major, stored as `dtype`); returns the
    /// storage's index.
    pub fn add(&mut self, key: &str, shape: &[usize], dtype: Dtype, data: &[f32]) -> usize {
        self.storages.push((dtype, data.to_vec()));
        let storage = self.storages.len() - 1;
        self.entries.push((key.to_string(), shape.to_vec(), storage));
        storage
    }

    /// Adds `key` as another name for the tensor `of` (same storage and shape), as a tied
    /// parameter appears in a `state_dict`.
    pub fn alias(&mut self, key: &str, of: &str) -> Result<()> {
        let (_, shape, storage) = self
            .entries
            .iter()
            .find(|(name, ..)| name == of)
            .cloned()
            .with_context(|| format!("no tensor `{of}` to alias as `{key}`"))?;
        self.entries.push((key.to_string(), shape, storage));
        Ok(())
    }

    /// Drops the name `key`, keeping its storage (as a checkpoint that lost a tied copy);
    /// whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(name, ..)| name != key);
        self.entries.len() < before
    }

    /// The pickle `archive/data.pkl`.
    pub fn pickle(&self) -> Result<Vec<u8>> {
        let mut out = vec![0x80, 0x02]; // PROTO 2
        ordered_dict(&mut out);
        for (key, shape, storage) in &self.entries {
            let (dtype, data) = &self.storages[*storage];
            let storage_type = match dtype {
                Dtype::F32 => "FloatStorage",
                Dtype::F16 => "HalfStorage",
                Dtype::BF16 => "BFloat16Storage",
                Dtype::F64 => "DoubleStorage",
                Dtype::I64 => "LongStorage",
                other => bail!("no PyTorch storage type for {other:?}"),
            };
            text(&mut out, key);
            global(&mut out, "torch._utils", "_rebuild_tensor_v2");
            out.extend_from_slice(b"((");
            // the persistent id: ('storage', type, key, location, size)
            text(&mut out, "storage");
            global(&mut out, "torch", storage_type);
            text(&mut out, &storage.to_string());
            text(&mut out, "cpu");
            int(&mut out, data.len())?;
            out.extend_from_slice(b"tQ"); // TUPLE, BINPERSID
            int(&mut out, 0)?; // storage offset
            out.push(b'(');
            for &d in shape {
                int(&mut out, d)?;
            }
            out.extend_from_slice(b"t(");
            for i in 0..shape.len() {
                int(&mut out, shape[i + 1..].iter().product())?; // row-major strides
            }
            out.push(b't');
            out.push(0x89); // requires_grad = False
            ordered_dict(&mut out); // backward hooks
            out.extend_from_slice(b"tRs"); // TUPLE, REDUCE, SETITEM
        }
        out.push(b'.');
        Ok(out)
    }

    /// The whole file, as `torch.save` lays it out.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut entries: Vec<(String, Vec<u8>)> = vec![
            ("archive/data.pkl".into(), self.pickle()?),
            ("archive/byteorder".into(), b"little".to_vec()),
        ];
        for (i, (dtype, data)) in self.storages.iter().enumerate() {
            entries.push((format!("archive/data/{i}"), encode(*dtype, data)?));
        }
        entries.push(("archive/version".into(), b"3\n".to_vec()));
        Ok(stored_zip(&entries))
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_bytes()?).with_context(|| format!("writing {}", path.display()))
    }
}

/// `values` as little-endian `dtype` elements (f16 and bf16 rounded to nearest even).
pub fn encode(dtype: Dtype, values: &[f32]) -> Result<Vec<u8>> {
    Ok(match dtype {
        Dtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Dtype::F64 => values.iter().flat_map(|&v| f64::from(v).to_le_bytes()).collect(),
        Dtype::F16 => values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        Dtype::BF16 => values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        Dtype::I64 => values.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect(),
        other => bail!("no encoding for {other:?}"),
    })
}

/// A ZIP archive of uncompressed (stored) entries, `(name, bytes)`, each under 4 GiB.
pub fn stored_zip(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    const DOS_DATE_1980_01_01: u16 = 0x21;
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let crc = txl_core::crc32(data);
        let common = |buf: &mut Vec<u8>| {
            buf.extend_from_slice(&20u16.to_le_bytes()); // version needed
            buf.extend_from_slice(&0u16.to_le_bytes()); // flags
            buf.extend_from_slice(&0u16.to_le_bytes()); // stored
            buf.extend_from_slice(&0u16.to_le_bytes()); // time
            buf.extend_from_slice(&DOS_DATE_1980_01_01.to_le_bytes());
            buf.extend_from_slice(&crc.to_le_bytes());
            buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
            buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
            buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
            buf.extend_from_slice(&0u16.to_le_bytes()); // extra length
        };
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        common(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);

        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // version made by
        common(&mut central);
        central.extend_from_slice(&[0; 10]); // comment length, disk, attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let central_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // disk numbers
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&central_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // comment length
    out
}

/// `GLOBAL module name`.
fn global(out: &mut Vec<u8>, module: &str, name: &str) {
    out.push(b'c');
    out.extend_from_slice(format!("{module}\n{name}\n").as_bytes());
}

/// `BINUNICODE s`.
fn text(out: &mut Vec<u8>, s: &str) {
    out.push(b'X');
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// `BININT v`.
fn int(out: &mut Vec<u8>, v: usize) -> Result<()> {
    let v = i32::try_from(v).with_context(|| format!("{v} does not fit a pickle BININT"))?;
    out.push(b'J');
    out.extend_from_slice(&v.to_le_bytes());
    Ok(())
}

/// An empty `collections.OrderedDict()`.
fn ordered_dict(out: &mut Vec<u8>) {
    global(out, "collections", "OrderedDict");
    out.extend_from_slice(b")R"); // EMPTY_TUPLE, REDUCE
}

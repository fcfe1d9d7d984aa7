//! What the resolver needs from a weights file, whatever its container: the keys, each
//! tensor's element type and shape, and its elements converted to f32.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// Element type of a stored tensor, as far as the converter cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SourceDtype {
    F32,
    F16,
    BF16,
    F64,
    /// Anything else (integers, bool, fp8, ...), named for the error message.
    Other(String),
}

impl SourceDtype {
    /// Bytes per element, for the floating-point types the converter reads.
    fn size(&self) -> Option<usize> {
        match self {
            SourceDtype::F32 => Some(4),
            SourceDtype::F16 | SourceDtype::BF16 => Some(2),
            SourceDtype::F64 => Some(8),
            SourceDtype::Other(_) => None,
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            SourceDtype::F32 => "f32",
            SourceDtype::F16 => "f16",
            SourceDtype::BF16 => "bf16",
            SourceDtype::F64 => "f64",
            SourceDtype::Other(name) => name,
        }
    }
}

/// Byte order of the bytes a source hands back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ByteOrder {
    Little,
    Native,
}

/// A tensor's metadata, known before its bytes are read.
#[derive(Clone, Debug)]
pub(crate) struct TensorMeta {
    pub dtype: SourceDtype,
    pub shape: Vec<usize>,
    /// Bytes a read produces (for the progress bar).
    pub byte_len: u64,
}

/// A weights file opened for reading: metadata up front, bytes on demand.
pub(crate) trait TensorSource {
    /// The file, for error messages.
    fn path(&self) -> &Path;
    /// Every tensor key in the file.
    fn keys(&self) -> Vec<String>;
    /// Metadata of `key`, if the file holds it.
    fn meta(&self, key: &str) -> Option<TensorMeta>;
    /// The raw bytes of `key`, row-major, and their byte order.
    fn read_bytes(&mut self, key: &str) -> Result<(Vec<u8>, ByteOrder)>;

    /// The elements of `key`, converted to f32.
    fn read_f32(&mut self, key: &str) -> Result<Vec<f32>> {
        let Some(meta) = self.meta(key) else {
            bail!("{} has no tensor `{key}`", self.path().display());
        };
        let Some(size) = meta.dtype.size() else {
            bail!(
                "tensor `{key}` in {} has element type {}; only f32, f16, bf16 and f64 are supported",
                self.path().display(),
                meta.dtype.name()
            );
        };
        let expected = byte_len(&meta.shape, size);
        let (bytes, order) = self.read_bytes(key)?;
        if bytes.len() as u128 != expected {
            bail!(
                "tensor `{key}` in {}: read {} bytes, its shape {:?} of {} needs {expected}",
                self.path().display(),
                bytes.len(),
                meta.shape,
                meta.dtype.name(),
            );
        }
        to_f32(&meta.dtype, &bytes, order)
            .with_context(|| format!("tensor `{key}` in {}", self.path().display()))
    }
}

/// `inner` seen without `prefix` in front of its keys (`module.`, under which a model wrapped
/// in `DataParallel` saves its state_dict); keys without the prefix are not seen.
pub(crate) struct Unprefixed<S> {
    pub inner: S,
    pub prefix: String,
}

impl<S: TensorSource> Unprefixed<S> {
    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

impl<S: TensorSource> TensorSource for Unprefixed<S> {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn keys(&self) -> Vec<String> {
        let keys = self.inner.keys();
        keys.iter()
            .filter_map(|k| k.strip_prefix(self.prefix.as_str()))
            .map(str::to_string)
            .collect()
    }

    fn meta(&self, key: &str) -> Option<TensorMeta> {
        self.inner.meta(&self.full(key))
    }

    fn read_bytes(&mut self, key: &str) -> Result<(Vec<u8>, ByteOrder)> {
        let full = self.full(key);
        self.inner.read_bytes(&full)
    }
}

/// The bytes `shape` takes at `element_bytes` each, in u128 (saturating): a shape read from a
/// file can name more than the address space.
pub(crate) fn byte_len(shape: &[usize], element_bytes: usize) -> u128 {
    shape
        .iter()
        .fold(element_bytes as u128, |bytes, &d| bytes.saturating_mul(d as u128))
}

/// An empty vector with room for `count` values, asked of the allocator fallibly: an error
/// says how many bytes `what` needed.
pub(crate) fn with_room<T>(count: usize, what: impl FnOnce() -> String) -> Result<Vec<T>> {
    let mut values = Vec::new();
    values.try_reserve_exact(count).map_err(|_| {
        anyhow::anyhow!(
            "{}: cannot allocate {} bytes",
            what(),
            count as u128 * size_of::<T>() as u128
        )
    })?;
    Ok(values)
}

/// Converts `bytes` of `dtype` elements to f32. f64 values outside f32's range are an error
/// (a finite weight must stay finite); everything else converts exactly or rounds to nearest.
/// The f32 values (twice the bytes of f16 ones) are allocated fallibly.
pub(crate) fn to_f32(dtype: &SourceDtype, bytes: &[u8], order: ByteOrder) -> Result<Vec<f32>> {
    let u16_of = |c: &[u8]| {
        let b = [c[0], c[1]];
        match order {
            ByteOrder::Little => u16::from_le_bytes(b),
            ByteOrder::Native => u16::from_ne_bytes(b),
        }
    };
    let Some(size) = dtype.size() else {
        bail!("element type {} cannot be converted to f32", dtype.name());
    };
    let mut out = with_room(bytes.len() / size, || "the tensor in f32".to_string())?;
    match dtype {
        SourceDtype::F32 => out.extend(bytes.chunks_exact(4).map(|c| {
            let b = [c[0], c[1], c[2], c[3]];
            match order {
                ByteOrder::Little => f32::from_le_bytes(b),
                ByteOrder::Native => f32::from_ne_bytes(b),
            }
        })),
        SourceDtype::F16 => out.extend(bytes.chunks_exact(2).map(|c| f16_to_f32(u16_of(c)))),
        SourceDtype::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| f32::from_bits((u16_of(c) as u32) << 16)),
        ),
        SourceDtype::F64 => {
            for c in bytes.chunks_exact(8) {
                let b = [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
                let value = match order {
                    ByteOrder::Little => f64::from_le_bytes(b),
                    ByteOrder::Native => f64::from_ne_bytes(b),
                };
                let narrowed = value as f32;
                if value.is_finite() && !narrowed.is_finite() {
                    bail!("f64 value {value} does not fit in f32");
                }
                out.push(narrowed);
            }
        }
        SourceDtype::Other(_) => {} // refused above: it has no element size
    }
    Ok(out)
}

/// IEEE 754 binary16 to binary32 (exact: every half value is a float value).
pub(crate) fn f16_to_f32(half: u16) -> f32 {
    let sign = ((half >> 15) as u32) << 31;
    let exponent = ((half >> 10) & 0x1f) as u32;
    let mantissa = (half & 0x3ff) as u32;
    match exponent {
        0 => {
            // Zero or subnormal: mantissa * 2^-24, exact in f32.
            let magnitude = mantissa as f32 * f32::from_bits(0x3380_0000);
            f32::from_bits(sign | magnitude.to_bits())
        }
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
        _ => f32::from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_covers_every_class() {
        assert_eq!(f16_to_f32(0x0000), 0.0);
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x0400), 2f32.powi(-14));
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
    }

    #[test]
    fn converts_each_float_type() {
        let le = ByteOrder::Little;
        let f32s: Vec<u8> = [1.5f32, -2.25].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(to_f32(&SourceDtype::F32, &f32s, le).unwrap(), [1.5, -2.25]);
        let bf16s: Vec<u8> = [0x3fc0u16, 0xc010].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(to_f32(&SourceDtype::BF16, &bf16s, le).unwrap(), [1.5, -2.25]);
        let f16s: Vec<u8> = [0x3e00u16, 0xc080].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(to_f32(&SourceDtype::F16, &f16s, le).unwrap(), [1.5, -2.25]);
        let f64s: Vec<u8> = [1.5f64, -2.25].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(to_f32(&SourceDtype::F64, &f64s, le).unwrap(), [1.5, -2.25]);
        let huge = 1e300f64.to_le_bytes();
        assert!(to_f32(&SourceDtype::F64, &huge, le).is_err());
        assert!(to_f32(&SourceDtype::Other("i64".into()), &huge, le).is_err());
    }
}

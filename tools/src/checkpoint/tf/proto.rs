//! The two protocol buffers of a tensor bundle's index, decoded by hand (field numbers from
//! TensorFlow's `tensor_bundle.proto`, `tensor_shape.proto`): unknown fields are skipped, as
//! protocol buffers require, and every length is checked against the bytes there are.

use super::error::TfError;
use super::table::varint;

/// `BundleHeaderProto`, under the empty key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BundleHeader {
    /// Field 1: how many `.data-*` shards there are.
    pub num_shards: i64,
    /// Field 2: 0 little-endian, 1 big-endian.
    pub endianness: i64,
    /// Field 3 (`VersionDef`), its `producer` (field 1).
    pub version: i64,
}

/// `BundleEntryProto`, under each tensor's name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BundleEntry {
    /// Field 1: the `DataType` (1 float, 2 double, 9 int64, 14 bfloat16, 19 half, ...).
    pub dtype: i64,
    /// Field 2 (`TensorShapeProto`): each `dim` (field 2)'s `size` (field 1).
    pub shape: Vec<i64>,
    /// Field 3.
    pub shard_id: i64,
    /// Field 4: byte offset in the shard.
    pub offset: i64,
    /// Field 5: bytes.
    pub size: i64,
    /// Field 6 (fixed32): masked CRC32C of the bytes.
    pub crc32c: u32,
    /// Field 7: slices (a partitioned variable), which this reader refuses.
    pub sliced: bool,
}

/// One field of a message.
enum Field<'a> {
    Varint(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
    Other,
}

/// The fields of `message`, as (number, value), in order.
fn fields<'a>(message: &'a [u8], what: &str) -> Result<Vec<(u64, Field<'a>)>, TfError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let tag = varint(message, &mut at, 10, what)?;
        let number = tag >> 3;
        let field = match tag & 7 {
            0 => Field::Varint(varint(message, &mut at, 10, what)?),
            1 => {
                let end = at.checked_add(8).filter(|&e| e <= message.len()).ok_or_else(|| {
                    TfError::Malformed(format!("{what}: a fixed64 field runs past the end"))
                })?;
                at = end;
                Field::Other
            }
            2 => {
                let len = varint(message, &mut at, 10, what)?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|len| at.checked_add(len))
                    .filter(|&e| e <= message.len())
                    .ok_or_else(|| TfError::Malformed(format!("{what}: field {number} runs past the end")))?;
                let bytes = &message[at..end];
                at = end;
                Field::Bytes(bytes)
            }
            5 => {
                let end = at.checked_add(4).filter(|&e| e <= message.len()).ok_or_else(|| {
                    TfError::Malformed(format!("{what}: a fixed32 field runs past the end"))
                })?;
                let value =
                    u32::from_le_bytes([message[at], message[at + 1], message[at + 2], message[at + 3]]);
                at = end;
                Field::Fixed32(value)
            }
            wire => {
                return Err(TfError::Malformed(format!(
                    "{what}: field {number} has wire type {wire}, which protocol buffers do not use here"
                )))
            }
        };
        out.push((number, field));
    }
    Ok(out)
}

fn int(field: &Field<'_>, what: &str, name: &str) -> Result<i64, TfError> {
    match field {
        Field::Varint(v) => Ok(*v as i64),
        _ => Err(TfError::Malformed(format!("{what}: {name} is not a varint"))),
    }
}

impl BundleHeader {
    /// Decodes the header message.
    pub fn decode(message: &[u8]) -> Result<BundleHeader, TfError> {
        let what = "the bundle header";
        let mut header = BundleHeader::default();
        for (number, field) in fields(message, what)? {
            match number {
                1 => header.num_shards = int(&field, what, "num_shards")?,
                2 => header.endianness = int(&field, what, "endianness")?,
                3 => {
                    if let Field::Bytes(version) = field {
                        for (n, f) in fields(version, what)? {
                            if n == 1 {
                                header.version = int(&f, what, "version.producer")?;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(header)
    }
}

impl BundleEntry {
    /// Decodes the entry of tensor `name`.
    pub fn decode(message: &[u8], name: &str) -> Result<BundleEntry, TfError> {
        let what = format!("the entry of `{name}`");
        let mut entry = BundleEntry::default();
        for (number, field) in fields(message, &what)? {
            match number {
                1 => entry.dtype = int(&field, &what, "dtype")?,
                2 => {
                    let Field::Bytes(shape) = field else {
                        return Err(TfError::Malformed(format!("{what}: shape is not a message")));
                    };
                    for (n, f) in fields(shape, &what)? {
                        match (n, f) {
                            (2, Field::Bytes(dim)) => {
                                let mut size = 0;
                                for (m, g) in fields(dim, &what)? {
                                    if m == 1 {
                                        size = int(&g, &what, "a dimension's size")?;
                                    }
                                }
                                entry.shape.push(size);
                            }
                            (2, _) => {
                                return Err(TfError::Malformed(format!(
                                    "{what}: a dimension is not a message"
                                )))
                            }
                            (3, Field::Varint(unknown)) if unknown != 0 => {
                                return Err(TfError::Unsupported(format!(
                                    "{what}: its shape has unknown rank"
                                )))
                            }
                            _ => {}
                        }
                    }
                }
                3 => entry.shard_id = int(&field, &what, "shard_id")?,
                4 => entry.offset = int(&field, &what, "offset")?,
                5 => entry.size = int(&field, &what, "size")?,
                6 => match field {
                    Field::Fixed32(crc) => entry.crc32c = crc,
                    _ => return Err(TfError::Malformed(format!("{what}: crc32c is not a fixed32"))),
                },
                7 => entry.sliced = true,
                _ => {}
            }
        }
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_an_entry_as_tensorflow_writes_it() {
        // dtype 1, shape [3, 4], shard 0, offset 16, size 48, crc 0x01020304, then an
        // unknown field 9 (varint), skipped.
        let message = [
            0x08, 0x01, 0x12, 0x08, 0x12, 0x02, 0x08, 0x03, 0x12, 0x02, 0x08, 0x04, 0x20, 0x10, 0x28, 0x30,
            0x35, 0x04, 0x03, 0x02, 0x01, 0x48, 0x07,
        ];
        let entry = BundleEntry::decode(&message, "t").unwrap();
        assert_eq!(
            entry,
            BundleEntry {
                dtype: 1,
                shape: vec![3, 4],
                shard_id: 0,
                offset: 16,
                size: 48,
                crc32c: 0x0102_0304,
                sliced: false,
            }
        );
        for cut in 0..message.len() {
            let _ = BundleEntry::decode(&message[..cut], "t");
        }
        assert!(BundleEntry::decode(&[0x12, 0x7f], "t").is_err());
    }

    #[test]
    fn decodes_a_header() {
        // num_shards 1, endianness 0, version { producer 1 }.
        let header = BundleHeader::decode(&[0x08, 0x01, 0x10, 0x00, 0x1a, 0x02, 0x08, 0x01]).unwrap();
        assert_eq!(
            header,
            BundleHeader {
                num_shards: 1,
                endianness: 0,
                version: 1
            }
        );
    }
}

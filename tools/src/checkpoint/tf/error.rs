//! The errors of the tensor-bundle reader.

use std::fmt;

/// What is wrong with a TensorFlow checkpoint's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TfError {
    /// A file ends before what it must hold.
    Truncated(String),
    /// The `.index` file does not end with the table magic: not a TensorFlow checkpoint index
    /// (the value found).
    BadMagic(u64),
    /// A block or a tensor's bytes do not match their stored CRC32C (masked values).
    Checksum {
        /// What was checked.
        what: String,
        /// The CRC the file stores.
        stored: u32,
        /// The CRC of the bytes read.
        computed: u32,
    },
    /// A structure that cannot be decoded (a varint, a protocol buffer, a block).
    Malformed(String),
    /// Something valid that this reader does not handle (big-endian data, sliced tensors).
    Unsupported(String),
}

impl fmt::Display for TfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TfError::Truncated(what) => write!(f, "truncated: {what}"),
            TfError::BadMagic(found) => write!(
                f,
                "not a TensorFlow checkpoint index: it ends with {found:#018x}, not the table magic {:#018x}",
                super::table::TABLE_MAGIC
            ),
            TfError::Checksum {
                what,
                stored,
                computed,
            } => write!(
                f,
                "{what} is damaged: its CRC32C is {computed:#010x}, the file stores {stored:#010x}"
            ),
            TfError::Malformed(what) => write!(f, "malformed: {what}"),
            TfError::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for TfError {}

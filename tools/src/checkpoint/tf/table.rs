//! The `.index` file of a TensorFlow tensor bundle: a table in LevelDB's format (TensorFlow's
//! `core/lib/io/table_format.txt`), read whole from memory.
//!
//! The last 48 bytes are the footer: the metaindex block's handle and the index block's
//! (each a varint64 offset and a varint64 size), zero-padded to 40 bytes, then the magic
//! [`TABLE_MAGIC`] as a little-endian u64. Every block is followed by a 5-byte trailer: its
//! compression (0 none, 1 Snappy) and the masked CRC32C of the stored block and that byte.
//! A block is a run of entries (varint32 bytes shared with the previous key, varint32 bytes
//! not shared, varint32 value length, the key's new bytes, the value), then an array of u32
//! restart offsets and their count. The index block maps the last key of each data block to
//! that block's handle. Filter blocks (the metaindex) are not read: the bundle writer makes
//! none, and nothing here needs one.

use super::error::TfError;
use super::snappy;
use ::crc32c::{crc32c, crc32c_append};

/// Magic number at the end of every table (`kTableMagicNumber`).
pub const TABLE_MAGIC: u64 = 0xdb47_7524_8b80_fb57;
/// Bytes of the footer: two block handles padded to 40, then the magic.
pub const FOOTER_LEN: usize = 48;
/// Bytes after each block: compression type and masked CRC32C.
pub const TRAILER_LEN: usize = 5;

const NO_COMPRESSION: u8 = 0;
const SNAPPY: u8 = 1;

/// A table entry: key and value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// Where a block lies in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHandle {
    /// Byte offset of the block.
    pub offset: u64,
    /// Bytes of the block, without its trailer.
    pub size: u64,
}

/// A varint (up to `max_bytes` bytes, 5 for 32 bits, 10 for 64) at `*at` in `bytes`,
/// advancing `*at`; `what` names it for the error.
pub(crate) fn varint(bytes: &[u8], at: &mut usize, max_bytes: usize, what: &str) -> Result<u64, TfError> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        let Some(&byte) = bytes.get(*at) else {
            return Err(TfError::Malformed(format!("{what}: a varint runs past the end")));
        };
        *at += 1;
        let bits = u64::from(byte & 0x7f);
        let shift = 7 * i as u32;
        if shift == 63 && bits > 1 {
            return Err(TfError::Malformed(format!("{what}: a varint overflows 64 bits")));
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            if max_bytes == 5 && value > u64::from(u32::MAX) {
                return Err(TfError::Malformed(format!(
                    "{what}: a varint32 overflows 32 bits"
                )));
            }
            return Ok(value);
        }
    }
    Err(TfError::Malformed(format!(
        "{what}: a varint is longer than {max_bytes} bytes"
    )))
}

impl BlockHandle {
    fn decode(bytes: &[u8], at: &mut usize, what: &str) -> Result<BlockHandle, TfError> {
        let offset = varint(bytes, at, 10, what)?;
        let size = varint(bytes, at, 10, what)?;
        Ok(BlockHandle { offset, size })
    }
}

/// LevelDB's CRC mask: stored CRCs are rotated and offset so that a CRC of data holding CRCs
/// is not trivially related to them.
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The footer's two handles: (metaindex, index).
fn footer(file: &[u8]) -> Result<(BlockHandle, BlockHandle), TfError> {
    if file.len() < FOOTER_LEN {
        return Err(TfError::Truncated(format!(
            "the index is {} bytes, shorter than its {FOOTER_LEN}-byte footer",
            file.len()
        )));
    }
    let footer = &file[file.len() - FOOTER_LEN..];
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&footer[40..]);
    let magic = u64::from_le_bytes(magic);
    if magic != TABLE_MAGIC {
        return Err(TfError::BadMagic(magic));
    }
    let handles = &footer[..40];
    let mut at = 0;
    let metaindex = BlockHandle::decode(handles, &mut at, "the footer")?;
    let index = BlockHandle::decode(handles, &mut at, "the footer")?;
    Ok((metaindex, index))
}

/// The contents of the block at `handle`, its CRC checked and decompressed; `what` names it.
fn block(file: &[u8], handle: BlockHandle, what: &str) -> Result<Vec<u8>, TfError> {
    let body_end = file.len() - FOOTER_LEN;
    let end = handle
        .offset
        .checked_add(handle.size)
        .and_then(|e| e.checked_add(TRAILER_LEN as u64))
        .filter(|&e| e <= body_end as u64)
        .ok_or_else(|| {
            TfError::Truncated(format!(
                "{what} (bytes {}..+{} and its trailer) lies past the end of the table ({body_end} bytes before the footer)",
                handle.offset, handle.size
            ))
        })? as usize;
    let start = handle.offset as usize;
    let data_end = end - TRAILER_LEN;
    let stored = &file[start..data_end];
    let kind = file[data_end];
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&file[data_end + 1..end]);
    let expected = u32::from_le_bytes(crc_bytes);
    let actual = mask_crc(crc32c_append(crc32c(stored), &[kind]));
    if actual != expected {
        return Err(TfError::Checksum {
            what: format!("{what} at byte {start}"),
            stored: expected,
            computed: actual,
        });
    }
    match kind {
        NO_COMPRESSION => Ok(stored.to_vec()),
        SNAPPY => snappy::decompress(stored, what),
        other => Err(TfError::Malformed(format!(
            "{what}: compression type {other} (only 0, none, and 1, Snappy, exist)"
        ))),
    }
}

/// The (key, value) entries of a block, in order.
fn entries(block: &[u8], what: &str) -> Result<Vec<Entry>, TfError> {
    if block.len() < 4 {
        return Err(TfError::Malformed(format!(
            "{what} is {} bytes, too short for its restart count",
            block.len()
        )));
    }
    let count_at = block.len() - 4;
    let restarts = u32::from_le_bytes([
        block[count_at],
        block[count_at + 1],
        block[count_at + 2],
        block[count_at + 3],
    ]);
    let restart_bytes = (restarts as usize)
        .checked_mul(4)
        .filter(|&b| b <= count_at)
        .ok_or_else(|| {
            TfError::Malformed(format!(
                "{what} claims {restarts} restart points, more than it holds"
            ))
        })?;
    let data = &block[..count_at - restart_bytes];
    let mut out: Vec<Entry> = Vec::new();
    let mut key: Vec<u8> = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let shared = varint(data, &mut at, 5, what)? as usize;
        let unshared = varint(data, &mut at, 5, what)? as usize;
        let value_len = varint(data, &mut at, 5, what)? as usize;
        if shared > key.len() {
            return Err(TfError::Malformed(format!(
                "{what}: an entry shares {shared} bytes with a key of {}",
                key.len()
            )));
        }
        let key_end = at
            .checked_add(unshared)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| TfError::Malformed(format!("{what}: a key runs past the block")))?;
        let value_end = key_end
            .checked_add(value_len)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| TfError::Malformed(format!("{what}: a value runs past the block")))?;
        key.truncate(shared);
        key.extend_from_slice(&data[at..key_end]);
        if let Some((previous, _)) = out.last() {
            if *previous >= key {
                return Err(TfError::Malformed(format!(
                    "{what}: its keys are not in increasing order"
                )));
            }
        }
        out.push((key.clone(), data[key_end..value_end].to_vec()));
        at = value_end;
    }
    Ok(out)
}

/// Every (key, value) entry of the table in `file` (the whole `.index` file), in key order;
/// each block's CRC checked.
pub fn read_table(file: &[u8]) -> Result<Vec<Entry>, TfError> {
    let (_metaindex, index) = footer(file)?;
    let index_block = block(file, index, "the index block")?;
    let mut out: Vec<Entry> = Vec::new();
    for (n, (last_key, handle)) in entries(&index_block, "the index block")?.into_iter().enumerate() {
        let mut at = 0;
        let what = format!("data block {n}");
        let handle = BlockHandle::decode(&handle, &mut at, &what)?;
        let data = block(file, handle, &what)?;
        let found = entries(&data, &what)?;
        if let (Some((first, _)), Some((previous, _))) = (found.first(), out.last()) {
            if first <= previous {
                return Err(TfError::Malformed(format!(
                    "{what}: its keys are not after the previous block's"
                )));
            }
        }
        if found.last().is_some_and(|(k, _)| *k > last_key) {
            return Err(TfError::Malformed(format!(
                "{what}: its keys pass the index's bound"
            )));
        }
        out.extend(found);
    }
    Ok(out)
}

/// Rewrites the CRC32C in the trailer of the index block and of every data block it names to
/// match their bytes, where their handles lie within the file; anything that does not decode
/// is left as it is. For fuzzing, so that edits reach the decoders behind the checksums.
pub fn reseal(file: &mut [u8]) {
    fn seal(file: &mut [u8], handle: BlockHandle) -> bool {
        let body_end = file.len() - FOOTER_LEN;
        let Some(end) = handle
            .offset
            .checked_add(handle.size)
            .and_then(|e| e.checked_add(TRAILER_LEN as u64))
            .filter(|&e| e <= body_end as u64)
        else {
            return false;
        };
        let (start, data_end) = (handle.offset as usize, end as usize - TRAILER_LEN);
        let crc = mask_crc(crc32c_append(crc32c(&file[start..data_end]), &[file[data_end]]));
        file[data_end + 1..end as usize].copy_from_slice(&crc.to_le_bytes());
        true
    }
    let Ok((_, index)) = footer(file) else {
        return;
    };
    if !seal(file, index) {
        return;
    }
    let Ok(index_block) = block(file, index, "the index block") else {
        return;
    };
    let Ok(handles) = entries(&index_block, "the index block") else {
        return;
    };
    for (_, handle) in handles {
        if let Ok(handle) = BlockHandle::decode(&handle, &mut 0, "a handle") {
            seal(file, handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `entries` in one block, built as TensorFlow's writer builds it (one restart
    /// every 16 entries), its data block Snappy-compressed (literals only) when `snappy`.
    pub(crate) fn build_table(entries: &[(&[u8], &[u8])], snappy: bool) -> Vec<u8> {
        fn put_varint(out: &mut Vec<u8>, mut v: u64) {
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
        fn encode_block(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
            let mut out = Vec::new();
            let mut restarts = Vec::new();
            let mut last: &[u8] = &[];
            for (i, (k, v)) in entries.iter().enumerate() {
                let shared = if i % 16 == 0 {
                    restarts.push(out.len() as u32);
                    0
                } else {
                    last.iter().zip(k.iter()).take_while(|(a, b)| a == b).count()
                };
                put_varint(&mut out, shared as u64);
                put_varint(&mut out, (k.len() - shared) as u64);
                put_varint(&mut out, v.len() as u64);
                out.extend_from_slice(&k[shared..]);
                out.extend_from_slice(v);
                last = k;
            }
            if restarts.is_empty() {
                restarts.push(0);
            }
            for r in &restarts {
                out.extend_from_slice(&r.to_le_bytes());
            }
            out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
            out
        }
        fn write_block(file: &mut Vec<u8>, block: &[u8], snappy: bool) -> (u64, u64) {
            let (stored, kind) = if snappy {
                (super::super::snappy::literals_only(block), SNAPPY)
            } else {
                (block.to_vec(), NO_COMPRESSION)
            };
            let offset = file.len() as u64;
            file.extend_from_slice(&stored);
            file.push(kind);
            let crc = mask_crc(crc32c_append(crc32c(&stored), &[kind]));
            file.extend_from_slice(&crc.to_le_bytes());
            (offset, stored.len() as u64)
        }
        let mut file = Vec::new();
        let data = write_block(&mut file, &encode_block(entries), snappy);
        let meta = write_block(&mut file, &encode_block(&[]), false);
        let mut handle = Vec::new();
        put_varint(&mut handle, data.0);
        put_varint(&mut handle, data.1);
        let last = entries.last().map_or(&b""[..], |(k, _)| k);
        let index = write_block(&mut file, &encode_block(&[(last, &handle)]), false);
        let mut footer = Vec::new();
        for v in [meta.0, meta.1, index.0, index.1] {
            put_varint(&mut footer, v);
        }
        footer.resize(40, 0);
        footer.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        file.extend_from_slice(&footer);
        file
    }

    #[test]
    fn reads_entries_back_plain_and_snappy() {
        let keys: Vec<String> = (0..40).map(|i| format!("transformer/layer_{i:02}/w")).collect();
        let entries: Vec<(&[u8], &[u8])> = std::iter::once((&b""[..], &b"header"[..]))
            .chain(keys.iter().map(|k| (k.as_bytes(), &b"value"[..])))
            .collect();
        for snappy in [false, true] {
            let table = build_table(&entries, snappy);
            let read = read_table(&table).unwrap();
            assert_eq!(read.len(), 41);
            assert_eq!(read[0], (b"".to_vec(), b"header".to_vec()));
            assert_eq!(read[40].0, keys[39].as_bytes());
        }
    }

    #[test]
    fn damage_is_a_typed_error() {
        let table = build_table(&[(b"", b"h"), (b"a", b"1")], false);
        assert!(matches!(read_table(&table[..20]), Err(TfError::Truncated(_))));
        let mut wrong = table.clone();
        let last = wrong.len() - 1;
        wrong[last] ^= 1;
        assert!(matches!(read_table(&wrong), Err(TfError::BadMagic(_))));
        let mut flipped = table.clone();
        flipped[3] ^= 0x20; // the first value, `h`
        assert!(matches!(read_table(&flipped), Err(TfError::Checksum { .. })));
        // Resealed, the flipped block reads again, with its byte changed.
        let mut resealed = flipped.clone();
        reseal(&mut resealed);
        assert_ne!(read_table(&resealed).unwrap(), read_table(&table).unwrap());
        // Every single-byte truncation or flip is an error or a clean read, never a panic.
        for cut in 0..table.len() {
            let _ = read_table(&table[..cut]);
            let mut t = table.clone();
            t[cut] ^= 0xff;
            let _ = read_table(&t);
        }
    }

    #[test]
    fn crc32c_mask_matches_leveldb() {
        // crc32c("123456789") = 0xe3069283 (the CRC-32C check value, RFC 3720 B.4).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(mask_crc(0), 0xa282_ead8);
        assert_eq!(
            mask_crc(0xe306_9283),
            0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8)
        );
    }
}

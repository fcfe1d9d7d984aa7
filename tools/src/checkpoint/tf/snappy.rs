//! Snappy's raw block format (no framing), decompression only: what a LevelDB table block with
//! compression type 1 holds. A varint32 of the uncompressed length, then elements: a literal
//! (tag `00`: its length in the tag or the 1–4 bytes after it, then the bytes) or a copy of
//! earlier output (tags `01`, `10`, `11`: a length and an offset of 11, 16 or 32 bits). Every
//! length and offset is checked against what there is.

use super::error::TfError;
use super::table::varint;

/// The largest uncompressed block accepted (a table block is a few kilobytes).
pub const MAX_UNCOMPRESSED: usize = 1 << 26;

fn malformed(what: &str, detail: &str) -> TfError {
    TfError::Malformed(format!("{what}: bad Snappy data: {detail}"))
}

/// Decompresses the raw Snappy block `input`; `what` names it for errors.
pub fn decompress(input: &[u8], what: &str) -> Result<Vec<u8>, TfError> {
    let mut at = 0;
    let len = varint(input, &mut at, 5, what)? as usize;
    // Each input byte makes at most 64 output bytes (a 3-byte copy of 64); refuse claims
    // beyond that before allocating.
    if len > MAX_UNCOMPRESSED || len > input.len().saturating_mul(64) {
        return Err(malformed(
            what,
            &format!("it claims {len} bytes from {}", input.len()),
        ));
    }
    let mut out = Vec::with_capacity(len);
    while at < input.len() {
        let tag = input[at];
        at += 1;
        let take = |at: &mut usize, n: usize| -> Result<u64, TfError> {
            let bytes = input
                .get(*at..*at + n)
                .ok_or_else(|| malformed(what, "an element runs past the end"))?;
            *at += n;
            Ok(bytes.iter().rev().fold(0u64, |v, &b| (v << 8) | u64::from(b)))
        };
        let (copy_len, offset) = match tag & 3 {
            0 => {
                let short = usize::from(tag >> 2);
                let n = if short < 60 {
                    short + 1
                } else {
                    take(&mut at, short - 59)? as usize + 1
                };
                let bytes = at
                    .checked_add(n)
                    .and_then(|end| input.get(at..end))
                    .ok_or_else(|| malformed(what, "a literal runs past the end"))?;
                if out.len() + n > len {
                    return Err(malformed(what, "more bytes than it claims"));
                }
                out.extend_from_slice(bytes);
                at += n;
                continue;
            }
            1 => (
                usize::from((tag >> 2) & 7) + 4,
                (usize::from(tag >> 5) << 8) | take(&mut at, 1)? as usize,
            ),
            2 => (usize::from(tag >> 2) + 1, take(&mut at, 2)? as usize),
            _ => (usize::from(tag >> 2) + 1, take(&mut at, 4)? as usize),
        };
        if offset == 0 || offset > out.len() {
            return Err(malformed(
                what,
                &format!("a copy reaches {offset} bytes back, past the start"),
            ));
        }
        if out.len() + copy_len > len {
            return Err(malformed(what, "more bytes than it claims"));
        }
        let start = out.len() - offset;
        for i in 0..copy_len {
            // Byte by byte: a copy may overlap what it writes (a run).
            out.push(out[start + i]);
        }
    }
    if out.len() != len {
        return Err(malformed(
            what,
            &format!("{} bytes where it claims {len}", out.len()),
        ));
    }
    Ok(out)
}

/// A valid Snappy block of `data` made of literals only (for tests that need one).
#[cfg(test)]
pub(crate) fn literals_only(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut n = data.len() as u32;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    for chunk in data.chunks(60) {
        out.push(((chunk.len() - 1) as u8) << 2);
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const TEXT: &[u8] = b"transformer/layer_0/rel_attn/qkv/kernel transformer/layer_0/rel_attn/qkv/kernel/Adam transformer/layer_0/rel_attn/qkv/kernel/Adam_1 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa end";

    /// `TEXT` compressed by the `snap` crate (1.1.2): long literals, 1- and 2-byte-offset
    /// copies, an overlapping run.
    const COMPRESSED: [u8; 72] = [
        0xf0, 0x01, 0xa0, 0x74, 0x72, 0x61, 0x6e, 0x73, 0x66, 0x6f, 0x72, 0x6d, 0x65, 0x72, 0x2f, 0x6c, 0x61,
        0x79, 0x65, 0x72, 0x5f, 0x30, 0x2f, 0x72, 0x65, 0x6c, 0x5f, 0x61, 0x74, 0x74, 0x6e, 0x2f, 0x71, 0x6b,
        0x76, 0x2f, 0x6b, 0x65, 0x72, 0x6e, 0x65, 0x6c, 0x20, 0x74, 0x96, 0x28, 0x00, 0x10, 0x2f, 0x41, 0x64,
        0x61, 0x6d, 0xb2, 0x2d, 0x00, 0x0c, 0x5f, 0x31, 0x20, 0x61, 0xfe, 0x01, 0x00, 0x9a, 0x01, 0x00, 0x0c,
        0x20, 0x65, 0x6e, 0x64,
    ];

    #[test]
    fn decompresses_what_the_snap_crate_compressed() {
        assert_eq!(decompress(&COMPRESSED, "t").unwrap(), TEXT);
        assert_eq!(decompress(&literals_only(TEXT), "t").unwrap(), TEXT);
        assert_eq!(decompress(&[0], "t").unwrap(), b"");
    }

    #[test]
    fn damage_is_an_error_never_a_panic() {
        for cut in 0..COMPRESSED.len() {
            assert!(decompress(&COMPRESSED[..cut], "t").is_err(), "cut at {cut}");
        }
        for at in 0..COMPRESSED.len() {
            for flip in [0x01, 0x10, 0x80, 0xff] {
                let mut bytes = COMPRESSED;
                bytes[at] ^= flip;
                let _ = decompress(&bytes, "t");
            }
        }
        // A copy before anything was written; a claim far beyond the input.
        assert!(decompress(&[4, 0x01, 0x01], "t").is_err());
        assert!(decompress(&[0xff, 0xff, 0xff, 0x7f, 0x00], "t").is_err());
    }
}

//! Snappy's raw block format (no framing), what a LevelDB table block with compression type 1
//! holds, decompressed by the `snap` crate once the length it claims is checked.

use super::error::TfError;

/// The largest uncompressed block accepted (a table block is a few kilobytes).
pub const MAX_UNCOMPRESSED: usize = 1 << 26;

fn malformed(what: &str, detail: &str) -> TfError {
    TfError::Malformed(format!("{what}: bad Snappy data: {detail}"))
}

/// Decompresses the raw Snappy block `input`; `what` names it for errors.
pub fn decompress(input: &[u8], what: &str) -> Result<Vec<u8>, TfError> {
    let len = snap::raw::decompress_len(input).map_err(|e| malformed(what, &e.to_string()))?;
    // Each input byte makes at most 64 output bytes (a 3-byte copy of 64); refuse claims
    // beyond that before allocating.
    if len > MAX_UNCOMPRESSED || len > input.len().saturating_mul(64) {
        return Err(malformed(
            what,
            &format!("it claims {len} bytes from {}", input.len()),
        ));
    }
    snap::raw::Decoder::new()
        .decompress_vec(input)
        .map_err(|e| malformed(what, &e.to_string()))
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

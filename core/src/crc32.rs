//! CRC-32 (IEEE 802.3, reflected polynomial `0xEDB88320`), the checksum zlib and PNG use. A
//! byte at a time from a 1 KB table on a device (the flash a faster table would take matters
//! more there); with the `std` feature, `crc32fast` (the same checksum).

const TABLE: [u32; 256] = make_table();

const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
}

/// CRC-32 of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    #[cfg(feature = "std")]
    return crc32fast::hash(bytes);
    #[cfg(not(feature = "std"))]
    crc32_by_bytes(bytes)
}

/// CRC-32 a byte at a time.
#[cfg_attr(feature = "std", allow(dead_code))] // (the tests hold crc32fast to it)
fn crc32_by_bytes(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_standard_check_value() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(super::crc32_by_bytes(b"123456789"), 0xCBF4_3926);
    }

    /// Whichever implementation the build uses gives the table's checksum, for lengths around
    /// the faster code's blocks and every alignment.
    #[test]
    fn every_length_and_offset_gives_the_bytewise_checksum() {
        let mut rng = crate::rng::Rng::new(0x1234_5678);
        let bytes: [u8; 300] = core::array::from_fn(|_| (rng.next_u64() >> 56) as u8);
        let lengths: &[usize] = if cfg!(miri) {
            &[0, 1, 17, 64, 129]
        } else {
            &[0, 1, 3, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257]
        };
        for offset in 0..if cfg!(miri) { 2 } else { 16 } {
            for &len in lengths {
                let slice = &bytes[offset..offset + len];
                assert_eq!(
                    super::crc32(slice),
                    super::crc32_by_bytes(slice),
                    "{len} bytes at {offset}"
                );
            }
        }
    }
}

//! CRC-32C (Castagnoli, reflected polynomial `0x82f63b78`), the checksum of LevelDB tables and
//! of TensorFlow's tensor bundles, computed eight bytes at a time ("slicing by 8").

const POLY: u32 = 0x82f6_3b78;

/// `TABLES[k][b]`: the CRC of byte `b` followed by `k` zero bytes.
const TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut crc = b as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ POLY } else { crc >> 1 };
            bit += 1;
        }
        t[0][b] = crc;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let previous = t[k - 1][b];
            t[k][b] = (previous >> 8) ^ t[0][(previous & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

/// The CRC-32C of `crc`'s data followed by `data`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let low = c ^ u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let high = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        c = TABLES[7][(low & 0xff) as usize]
            ^ TABLES[6][((low >> 8) & 0xff) as usize]
            ^ TABLES[5][((low >> 16) & 0xff) as usize]
            ^ TABLES[4][(low >> 24) as usize]
            ^ TABLES[3][(high & 0xff) as usize]
            ^ TABLES[2][((high >> 8) & 0xff) as usize]
            ^ TABLES[1][((high >> 16) & 0xff) as usize]
            ^ TABLES[0][(high >> 24) as usize];
    }
    for &byte in chunks.remainder() {
        c = TABLES[0][((c ^ u32::from(byte)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// The CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // The CRC-32C check value (RFC 3720, B.4: "123456789").
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        // RFC 3720 B.4: 32 bytes of zeros, of 0xff.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        // The `crc32c` crate (0.6.9) on a 240-byte text.
        assert_eq!(crc32c(super::super::snappy::tests::TEXT), 0x19b4_b5f4);
        // Appending is the CRC of the whole, at every split.
        let text = super::super::snappy::tests::TEXT;
        for split in 0..text.len() {
            assert_eq!(crc32c_append(crc32c(&text[..split]), &text[split..]), 0x19b4_b5f4);
        }
    }
}

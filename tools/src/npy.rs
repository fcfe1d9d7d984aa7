//! Reading and writing NumPy `.npy` files (format version 1.0, little-endian, C order).

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Writes `data` as a `<f4` array of `shape`.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> Result<()> {
    let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if count != Some(data.len()) {
        bail!("npy: shape {shape:?} does not match {} values", data.len());
    }
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Magic (6) + version (2) + header length (2) + header, padded to 64 bytes, ending in \n.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.div_ceil(64) * 64 - unpadded));
    header.push('\n');
    let header_len =
        u16::try_from(header.len()).context("npy: the shape is too long for a version 1.0 header")?;
    // Written as it goes, with no copy of `data`; a file left half-written is removed.
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut file = std::io::BufWriter::new(file);
    let written = (|| {
        file.write_all(b"\x93NUMPY\x01\x00")?;
        file.write_all(&header_len.to_le_bytes())?;
        file.write_all(header.as_bytes())?;
        for v in data {
            file.write_all(&v.to_le_bytes())?;
        }
        file.flush()
    })();
    if let Err(error) = written {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(error).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}

/// An array read from a `.npy` file, converted to f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Elements in C order.
    pub data: Vec<f64>,
}

/// Reads a `<f8` or `<f4` C-order array.
pub fn read(path: &Path) -> Result<Array> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&bytes).with_context(|| format!("parsing {}", path.display()))
}

fn parse(bytes: &[u8]) -> Result<Array> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        bail!("not a .npy file");
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => bail!("unsupported .npy version {v}"),
    };
    let header = bytes
        .get(header_start..header_start + header_len)
        .context("truncated header")?;
    let header = std::str::from_utf8(header).context("header is not text")?;
    let field = |key: &str| -> Result<&str> {
        let at = header
            .find(&format!("'{key}'"))
            .with_context(|| format!("no '{key}' in header"))?;
        Ok(header[at + key.len() + 2..].trim_start_matches([':', ' ']))
    };
    if field("fortran_order")?.starts_with("True") {
        bail!("Fortran-order arrays are not supported");
    }
    let descr = field("descr")?;
    let width = if descr.starts_with("'<f8'") {
        8
    } else if descr.starts_with("'<f4'") {
        4
    } else {
        bail!(
            "unsupported dtype {}",
            &descr[..descr.find(',').unwrap_or(descr.len())]
        );
    };
    let shape_text = field("shape")?;
    let shape_text = shape_text
        .strip_prefix('(')
        .and_then(|rest| rest.split_once(')'))
        .context("bad shape")?
        .0;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().context("bad shape"))
        .collect::<Result<_>>()?;
    // The bytes the shape needs (in u128, checked) are compared with the payload before
    // anything is sized by them.
    let needed = shape
        .iter()
        .try_fold(width as u128, |bytes, &d| bytes.checked_mul(d as u128));
    let payload = &bytes[header_start + header_len..];
    if needed != Some(payload.len() as u128) {
        let needed = needed.map_or("more than 2^128".to_string(), |n| n.to_string());
        bail!(
            "payload has {} bytes, shape {shape:?} of {width}-byte values needs {needed}",
            payload.len()
        );
    }
    let mut data = Vec::new();
    data.try_reserve_exact(payload.len() / width).with_context(|| {
        format!(
            "cannot allocate {} bytes for the values",
            payload.len() / width * 8
        )
    })?;
    data.extend(payload.chunks_exact(width).map(|c| match width {
        8 => f64::from_le_bytes(c.try_into().unwrap_or_default()),
        _ => f32::from_le_bytes(c.try_into().unwrap_or_default()) as f64,
    }));
    Ok(Array { shape, data })
}

#[cfg(test)]
mod tests {
    /// A version 1.0 `.npy` file of `header` text and `payload`.
    fn npy(header: &str, payload: &[u8]) -> Vec<u8> {
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        bytes.extend(payload);
        bytes
    }

    #[test]
    fn shapes_beyond_the_payload_are_errors_not_panics() {
        let header = |shape: &str| format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
        for (shape, problem) in [
            (
                "(18446744073709551615, 18446744073709551615, 4)",
                "more than 2^128",
            ),
            ("(4611686018427387904,)", "needs 18446744073709551616"),
            ("(3,)", "needs 12"),
            (")", "bad shape"),
            ("(", "bad shape"),
            ("(2, x)", "bad shape"),
        ] {
            let error = super::parse(&npy(&header(shape), &[0; 8])).unwrap_err();
            assert!(format!("{error:#}").contains(problem), "{shape}: {error:#}");
        }
        let two = super::parse(&npy(&header("(2,)"), &[0; 8])).unwrap();
        assert_eq!(two.data, [0.0, 0.0]);
    }

    #[test]
    fn a_shape_that_overflows_is_not_written() {
        let path = std::env::temp_dir().join(format!("txl-npy-overflow-{}.npy", std::process::id()));
        assert!(super::write_f32(&path, &[usize::MAX, 2], &[]).is_err());
        assert!(!path.exists());
    }
    #[test]
    fn round_trips_a_matrix() {
        let dir = std::env::temp_dir().join(format!("txl-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.npy");
        super::write_f32(&path, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.5, -6.0]).unwrap();
        let array = super::read(&path).unwrap();
        assert_eq!(array.shape, vec![2, 3]);
        assert_eq!(array.data, vec![1.0, 2.0, 3.0, 4.0, 5.5, -6.0]);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!((10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize) % 64, 0);
    }
}

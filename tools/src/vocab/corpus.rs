//! The original code's `cache.pt`: `torch.save(corpus)` of its `data_utils.Corpus`, whose
//! `vocab` attribute is the `utils.vocabulary.Vocab` the model was trained with (`idx2sym`,
//! `lower_case`). Only the pickle is read ([`super::unpickle`]); the token tensors beside it are
//! not. Both of `torch.save`'s layouts are read: a ZIP archive (PyTorch 1.6 and later; its
//! `*/data.pkl` entry, stored uncompressed) and the legacy stream of pickles.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::unpickle::{self, Value};
use super::Vocabulary;

/// Reads the vocabulary of the corpus in `cache.pt` at `path`.
pub fn read_cache_pt(path: &Path) -> Result<Vocabulary> {
    let context = || format!("reading the corpus {}", path.display());
    let mut file = File::open(path).with_context(context)?;
    let len = file.metadata().with_context(context)?.len();
    let limit = usize::try_from(len).unwrap_or(usize::MAX);
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic).with_context(context)?;
    file.seek(SeekFrom::Start(0)).with_context(context)?;
    let root = if magic == *b"PK\x03\x04" {
        let (offset, size) = zip_entry(&mut file, len, "data.pkl").with_context(context)?;
        file.seek(SeekFrom::Start(offset)).with_context(context)?;
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        unpickle::read(&mut BufReader::new(file.take(size as u64)), size).with_context(context)?
    } else {
        // Legacy: the magic number, the protocol version and the system info, then the object.
        let mut reader = BufReader::new(file);
        for _ in 0..3 {
            unpickle::read(&mut reader, limit).with_context(context)?;
        }
        unpickle::read(&mut reader, limit).with_context(context)?
    };
    from_corpus(&root).with_context(|| format!("{}: not the original code's corpus", path.display()))
}

/// The vocabulary of a pickled `Corpus`.
fn from_corpus(root: &Value) -> Result<Vocabulary> {
    let vocab = match root {
        Value::Object(class, _) if class == "data_utils.Corpus" => root
            .get("vocab")
            .ok_or_else(|| anyhow!("the corpus has no vocab"))?,
        Value::Object(class, _) if class.ends_with(".Vocab") => root,
        other => bail!("the pickle holds {}", describe(other)),
    };
    let Some(Value::List(symbols)) = vocab.get("idx2sym") else {
        bail!("its vocab has no idx2sym list");
    };
    let symbols = symbols
        .iter()
        .enumerate()
        .map(|(id, s)| match s {
            Value::Str(s) => Ok(s.clone()),
            other => Err(anyhow!("idx2sym[{id}] is {}", describe(other))),
        })
        .collect::<Result<Vec<_>>>()?;
    let lower_case = matches!(vocab.get("lower_case"), Some(Value::Bool(true)));
    Vocabulary::new(symbols, lower_case)
}

fn describe(value: &Value) -> String {
    match value {
        Value::Object(class, _) => format!("a {class}"),
        Value::Class(name) => format!("the class {name}"),
        other => format!("{other:?}").chars().take(40).collect(),
    }
}

fn u16_at(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
}

/// Where the data of the ZIP entry whose name ends with `/{suffix}` lies: its offset and length.
/// The entry must be stored (uncompressed), as `torch.save` writes them.
fn zip_entry(file: &mut File, len: u64, suffix: &str) -> Result<(u64, u64)> {
    // The end-of-central-directory record: in the last 22 + 65535 bytes.
    let tail_len = len.min(22 + 65535);
    let mut tail = vec![0u8; tail_len as usize];
    file.seek(SeekFrom::Start(len - tail_len))?;
    file.read_exact(&mut tail)?;
    let eocd = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&i| tail[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])
        .ok_or_else(|| anyhow!("a ZIP archive without its central directory"))?;
    let entries = u16_at(&tail, eocd + 10);
    let directory_len = u32_at(&tail, eocd + 12);
    let directory_at = u32_at(&tail, eocd + 16);
    if directory_at
        .checked_add(directory_len)
        .is_none_or(|end| end > len)
        || directory_at == 0xffff_ffff
    {
        bail!("a ZIP central directory outside the file (or ZIP64, which is not read here)");
    }
    let mut directory = vec![0u8; directory_len as usize];
    file.seek(SeekFrom::Start(directory_at))?;
    file.read_exact(&mut directory)?;
    let mut at = 0usize;
    for _ in 0..entries {
        let header = directory
            .get(at..at + 46)
            .filter(|h| h[..4] == [0x50, 0x4b, 0x01, 0x02])
            .ok_or_else(|| anyhow!("a damaged ZIP central directory"))?;
        let method = u16_at(header, 10);
        let size = u32_at(header, 20);
        let name_len = u16_at(header, 28) as usize;
        let extra_len = u16_at(header, 30) as usize;
        let comment_len = u16_at(header, 32) as usize;
        let local_at = u32_at(header, 42);
        let name = directory
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| anyhow!("a damaged ZIP central directory"))?;
        at += 46 + name_len + extra_len + comment_len;
        let name = String::from_utf8_lossy(name);
        if !(name == suffix || name.ends_with(&format!("/{suffix}"))) {
            continue;
        }
        if method != 0 {
            bail!("{name} is compressed (method {method}); torch.save stores it uncompressed");
        }
        let mut local = [0u8; 30];
        file.seek(SeekFrom::Start(local_at))?;
        file.read_exact(&mut local)?;
        if local[..4] != [0x50, 0x4b, 0x03, 0x04] {
            bail!("a damaged ZIP entry {name}");
        }
        let data_at = local_at + 30 + u16_at(&local, 26) + u16_at(&local, 28);
        if data_at.checked_add(size).is_none_or(|end| end > len) {
            bail!("the ZIP entry {name} lies outside the file");
        }
        return Ok((data_at, size));
    }
    bail!("no {suffix} in the archive")
}

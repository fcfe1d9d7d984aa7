//! `vocab.pkl`: what Hugging Face's `TransfoXLTokenizer.save_pretrained` writes, a pickle of the
//! tokenizer's attribute dict. The symbols are its `idx2sym` list, checked against its `sym2idx`
//! map; `lower_case` says whether text is lower-cased first.
//!
//! The pickle is read as data by `pytorch-reader` (the reader behind `checkpoint`'s PyTorch
//! files): the objects it does not interpret (the Moses tokenizers, compiled patterns, the
//! `Counter`) stay opaque and are not needed; no code from the file runs.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, bail, Result};
use pytorch_reader::{PickleValue, PytorchReader};

use super::Vocabulary;

/// Reads `vocab.pkl` at `path`.
pub fn read_hf_vocab(path: &Path) -> Result<Vocabulary> {
    let root = PytorchReader::read_pickle_data(path, None)
        .map_err(|e| anyhow!("cannot read the vocabulary pickle {}: {e}", path.display()))?;
    from_pickle(root).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// The vocabulary in a tokenizer's attribute dict.
fn from_pickle(root: PickleValue) -> Result<Vocabulary> {
    let PickleValue::Dict(mut dict) = root else {
        bail!("not a TransfoXLTokenizer vocabulary (the pickle is not a dict)");
    };
    let lower_case = match dict.remove("lower_case") {
        None => false,
        Some(PickleValue::Bool(b)) => b,
        Some(other) => bail!("lower_case is {other:?}, not a bool"),
    };
    let sym2idx = match dict.remove("sym2idx") {
        Some(PickleValue::Dict(map)) => Some(map),
        None => None,
        Some(_) => bail!("sym2idx is not a dict"),
    };
    let symbols = match dict.remove("idx2sym") {
        Some(PickleValue::List(items)) => items
            .into_iter()
            .enumerate()
            .map(|(id, item)| match item {
                PickleValue::String(s) => Ok(s),
                other => Err(anyhow!("idx2sym[{id}] is {other:?}, not a string")),
            })
            .collect::<Result<Vec<String>>>()?,
        Some(_) => bail!("idx2sym is not a list"),
        None => match &sym2idx {
            Some(map) => symbols_from_ids(map)?,
            None => bail!("not a TransfoXLTokenizer vocabulary: it has neither idx2sym nor sym2idx"),
        },
    };
    if let Some(map) = &sym2idx {
        check_agrees(&symbols, map)?;
    }
    Vocabulary::new(symbols, lower_case)
}

/// The symbols of a `sym2idx` map whose ids are `0..n`, each once.
fn symbols_from_ids(map: &HashMap<String, PickleValue>) -> Result<Vec<String>> {
    let mut symbols = vec![None; map.len()];
    for (symbol, id) in map {
        let slot = match id {
            PickleValue::Int(i) => usize::try_from(*i).ok().and_then(|i| symbols.get_mut(i)),
            _ => None,
        };
        match slot {
            Some(slot @ None) => *slot = Some(symbol.clone()),
            _ => bail!(
                "sym2idx gives {symbol:?} the id {id:?}: the ids must be 0..{} each once",
                map.len()
            ),
        }
    }
    Ok(symbols.into_iter().flatten().collect())
}

/// `sym2idx[idx2sym[i]] == i` for every `i`, and no other entries.
fn check_agrees(symbols: &[String], map: &HashMap<String, PickleValue>) -> Result<()> {
    for (id, symbol) in symbols.iter().enumerate() {
        match map.get(symbol) {
            Some(PickleValue::Int(i)) if *i == id as i64 => {}
            other => bail!("idx2sym[{id}] is {symbol:?} but sym2idx gives it {other:?}"),
        }
    }
    if map.len() != symbols.len() {
        bail!(
            "sym2idx has {} entries, idx2sym {} symbols",
            map.len(),
            symbols.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dict(entries: Vec<(&str, PickleValue)>) -> PickleValue {
        PickleValue::Dict(entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    fn strings(items: &[&str]) -> PickleValue {
        PickleValue::List(items.iter().map(|s| PickleValue::String(s.to_string())).collect())
    }

    fn ids(items: &[(&str, i64)]) -> PickleValue {
        PickleValue::Dict(
            items
                .iter()
                .map(|(s, i)| (s.to_string(), PickleValue::Int(*i)))
                .collect(),
        )
    }

    #[test]
    fn idx2sym_and_sym2idx_must_agree() {
        let good = dict(vec![
            ("idx2sym", strings(&["<eos>", "a"])),
            ("sym2idx", ids(&[("<eos>", 0), ("a", 1)])),
            ("lower_case", PickleValue::Bool(true)),
            (
                "moses_tokenizer",
                PickleValue::Unsupported("sacremoses.MosesTokenizer".into()),
            ),
        ]);
        let v = from_pickle(good).unwrap();
        assert_eq!(v.symbols(), ["<eos>", "a"]);
        assert!(v.lower_case());

        let swapped = dict(vec![
            ("idx2sym", strings(&["<eos>", "a"])),
            ("sym2idx", ids(&[("<eos>", 1), ("a", 0)])),
        ]);
        assert!(from_pickle(swapped).is_err());
        let extra = dict(vec![
            ("idx2sym", strings(&["<eos>"])),
            ("sym2idx", ids(&[("<eos>", 0), ("b", 1)])),
        ]);
        assert!(from_pickle(extra).is_err());
        let only_map = dict(vec![("sym2idx", ids(&[("b", 1), ("<eos>", 0)]))]);
        assert_eq!(from_pickle(only_map).unwrap().symbols(), ["<eos>", "b"]);
        let gap = dict(vec![("sym2idx", ids(&[("b", 2), ("<eos>", 0)]))]);
        assert!(from_pickle(gap).is_err());
        assert!(from_pickle(PickleValue::List(vec![])).is_err());
    }
}

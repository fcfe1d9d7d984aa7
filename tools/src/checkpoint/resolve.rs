//! From a weights file's keys to the canonical tensors of [`for_each_tensor`].
//!
//! Each canonical tensor is looked for under a list of keys: its own, then the copies that
//! the config ties to it. `save_pretrained(safe_serialization=True)` keeps one copy of each
//! tied group and `torch.save` keeps them all, so the first copy present is read and every
//! other one present must hold exactly the same elements (tied copies share one storage, so
//! any difference means the config does not describe these weights; it is an error).
//!
//! | canonical tensor | keys tried, in order |
//! |---|---|
//! | `word_emb.emb_layers.{i}.weight` | itself, then `crit.out_layers.{i}.weight` when `tie_weight` |
//! | `word_emb.emb_projs.{i}` | itself, then each `crit.out_projs.{c}` tied to it (`tie_projs[c]`; with `div_val == 1` all tie to projection 0) |
//! | `r_w_bias`, `r_r_bias` (`untie_r = false`) | itself, then `layers.{l}.dec_attn.r_w_bias` / `r_r_bias` for every layer |
//! | any other | itself |
//!
//! Key layout is detected from the file: Hugging Face's (`transformer.` + name, `crit.*` at
//! the top) or the original code's (no `transformer.` prefix). A further prefix around both
//! (`module.`, say) is accepted too. Keys the model does not use are returned, except that a
//! key which looks like a part of this model (`layers.*`, `word_emb.*`, `crit.*`, the shared
//! biases) but is not one is an error: the config and the weights disagree (a wrong
//! `n_layer`, `cutoffs`, `div_val` or `untie_r`), and converting would silently drop weights.

use std::collections::{BTreeSet, HashSet};

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use txl_core::tensors::{for_each_tensor, Shape, TensorName};
use txl_core::Config;

use super::source::TensorSource;

/// The key every Transformer-XL checkpoint holds, whatever its prefix.
const ANCHOR: &str = "word_emb.emb_layers.0.weight";

/// The canonical tensors read from a file, and what was left over.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// In canonical order.
    pub tensors: Vec<(TensorName, Vec<f32>)>,
    /// Prefix in front of the canonical names (`transformer.` for Hugging Face files).
    pub prefix: String,
    /// Keys that are neither a canonical tensor nor a tied copy of one, sorted.
    pub ignored_keys: Vec<String>,
    /// Tied copies found in the file and checked equal to the tensor read.
    pub tied_copies_checked: Vec<String>,
    /// Element types met among the tensors read (`f32`, `f16`, ...), sorted.
    pub source_dtypes: Vec<String>,
}

/// One canonical tensor and the keys that may hold it.
struct Planned {
    name: TensorName,
    shape: Shape,
    /// The tensor's own key first, then its tied copies.
    keys: Vec<String>,
    /// Which config field ties the copies (for error messages).
    tie_reason: &'static str,
}

/// Where the canonical names sit in the file's keys.
struct Prefixes {
    /// In front of `word_emb.*`, `layers.*`, `r_w_bias` (`transformer.` for Hugging Face).
    body: String,
    /// In front of `crit.*` (empty for Hugging Face).
    crit: String,
}

impl Prefixes {
    fn key(&self, name: TensorName) -> String {
        match name {
            TensorName::OutWeight(_)
            | TensorName::OutBias(_)
            | TensorName::OutProj(_)
            | TensorName::ClusterWeight
            | TensorName::ClusterBias => format!("{}{name}", self.crit),
            _ => format!("{}{name}", self.body),
        }
    }

    /// Whether an unused `key` looks like a part of a Transformer-XL model.
    fn is_model_part(&self, key: &str) -> bool {
        let body = |rest: &str| {
            key.strip_prefix(self.body.as_str())
                .is_some_and(|k| k.starts_with(rest))
        };
        body("word_emb.")
            || body("layers.")
            || body("r_w_bias")
            || body("r_r_bias")
            || key
                .strip_prefix(self.crit.as_str())
                .is_some_and(|k| k.starts_with("crit."))
    }
}

/// The prefixes in front of [`ANCHOR`] among `keys`: each empty or ending in `.`. This is the
/// one rule for where a checkpoint's model sits among its keys.
pub(crate) fn anchor_prefixes<'a>(keys: impl IntoIterator<Item = &'a str>) -> BTreeSet<&'a str> {
    keys.into_iter()
        .filter_map(|k| k.strip_suffix(ANCHOR))
        .filter(|prefix| prefix.is_empty() || prefix.ends_with('.'))
        .collect()
}

/// The prefix of a state_dict in the original code's layout (no `transformer.`) among `keys`:
/// none, or a further one such as `module.`, under which a model wrapped in `DataParallel`
/// saves every key. `None` when the keys hold no such model, or several.
pub(crate) fn original_layout_prefix<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let anchors: Vec<&str> = anchor_prefixes(keys)
        .into_iter()
        .filter(|prefix| !prefix.ends_with("transformer."))
        .collect();
    match anchors.as_slice() {
        _ if anchors.contains(&"") => Some(String::new()),
        [prefix] => Some(prefix.to_string()),
        _ => None,
    }
}

fn detect_prefixes(source: &dyn TensorSource, keys: &HashSet<String>) -> Result<Prefixes> {
    let anchors = anchor_prefixes(keys.iter().map(String::as_str));
    let body = if anchors.contains("transformer.") {
        "transformer."
    } else if anchors.contains("") {
        ""
    } else if anchors.len() == 1 {
        anchors.first().copied().unwrap_or("")
    } else if anchors.is_empty() {
        let mut sample: Vec<&String> = keys.iter().collect();
        sample.sort();
        sample.truncate(5);
        bail!(
            "{} holds no Transformer-XL weights: no key ends in `{ANCHOR}` ({} tensors, e.g. {sample:?})",
            source.path().display(),
            keys.len()
        );
    } else {
        bail!(
            "{} holds several Transformer-XL embeddings (under the prefixes {anchors:?}); cannot tell which to read",
            source.path().display()
        );
    };
    let crit = if body == "transformer." {
        ""
    } else {
        body.strip_suffix(".transformer.")
            .map_or(body, |outer| &body[..outer.len() + 1])
    };
    Ok(Prefixes {
        body: body.to_string(),
        crit: crit.to_string(),
    })
}

fn plan(config: &Config, prefixes: &Prefixes) -> Vec<Planned> {
    let mut planned = Vec::new();
    for_each_tensor(config, |name, shape| {
        let mut keys = vec![prefixes.key(name)];
        let mut tie_reason = "";
        match name {
            TensorName::EmbLayer(i) if config.tie_weight => {
                keys.push(prefixes.key(TensorName::OutWeight(i)));
                tie_reason = "tie_word_embeddings (tie_weight)";
            }
            TensorName::EmbProj(i) => {
                for cluster in 0..=config.n_clusters() {
                    if config.out_proj_tied(cluster) && config.emb_table_of_cluster(cluster) == i as usize {
                        keys.push(prefixes.key(TensorName::OutProj(cluster as u8)));
                    }
                }
                tie_reason = "tie_projs";
            }
            TensorName::SharedRWBias | TensorName::SharedRRBias => {
                let bias = if name == TensorName::SharedRWBias {
                    "r_w_bias"
                } else {
                    "r_r_bias"
                };
                for layer in 0..config.n_layer {
                    keys.push(format!("{}layers.{layer}.dec_attn.{bias}", prefixes.body));
                }
                tie_reason = "untie_r = false";
            }
            _ => {}
        }
        planned.push(Planned {
            name,
            shape,
            keys,
            tie_reason,
        });
    });
    planned
}

fn dims(shape: Shape) -> Vec<usize> {
    let (dims, n) = shape.dims();
    dims[..n].iter().map(|&d| d as usize).collect()
}

fn missing_error(
    source: &dyn TensorSource,
    keys: &HashSet<String>,
    planned: &Planned,
    crit: &str,
    described_by: &str,
) -> anyhow::Error {
    let path = source.path().display();
    let primary = &planned.keys[0];
    let copies = match &planned.keys[1..] {
        [] => String::new(),
        [one] => format!(" (nor its tied copy `{one}`)"),
        [first, .., last] => format!(
            " (nor any of its {} tied copies `{first}` ... `{last}`)",
            planned.keys.len() - 1
        ),
    };
    let mut hint = String::new();
    let is_crit = matches!(
        planned.name,
        TensorName::OutWeight(_)
            | TensorName::OutBias(_)
            | TensorName::OutProj(_)
            | TensorName::ClusterWeight
            | TensorName::ClusterBias
    );
    let crit_prefix = format!("{crit}crit.");
    if is_crit && !keys.iter().any(|k| k.starts_with(&crit_prefix)) {
        hint = " The file has no `crit.*` tensors: it looks like a TransfoXLModel saved without the language-model head (TransfoXLLMHeadModel)."
            .to_string();
    }
    anyhow::anyhow!("{path} has no tensor `{primary}`{copies}, which {described_by} requires.{hint}")
}

fn progress_bar(total_bytes: u64, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    // Drawn to stderr; indicatif hides it when stderr is not a terminal.
    let bar = ProgressBar::with_draw_target(Some(total_bytes), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} reading weights [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta}) {wide_msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Reads `config`'s canonical tensors from `source`, checking shapes and tied copies.
/// `described_by` names where the config came from, for error messages (`config.json`).
pub(crate) fn resolve(
    config: &Config,
    source: &mut dyn TensorSource,
    show_progress: bool,
    described_by: &str,
) -> Result<Resolved> {
    let keys: HashSet<String> = source.keys().into_iter().collect();
    let prefixes = detect_prefixes(source, &keys)?;
    let planned = plan(config, &prefixes);

    let wanted: HashSet<&str> = planned
        .iter()
        .flat_map(|p| p.keys.iter().map(String::as_str))
        .collect();
    let mut ignored_keys: Vec<String> = keys
        .iter()
        .filter(|k| !wanted.contains(k.as_str()))
        .cloned()
        .collect();
    ignored_keys.sort();
    let strays: Vec<&String> = ignored_keys
        .iter()
        .filter(|k| prefixes.is_model_part(k))
        .collect();
    if !strays.is_empty() {
        let shown: Vec<&&String> = strays.iter().take(6).collect();
        bail!(
            "{} holds {} tensor(s) that the model {described_by} describes has no place for, e.g. {shown:?}: \
             {described_by} and the weights disagree (check n_layer, cutoffs, div_val, d_embed, d_model, untie_r, tie_projs)",
            source.path().display(),
            strays.len()
        );
    }

    let mut total_bytes = 0u64;
    for entry in &planned {
        for key in &entry.keys {
            total_bytes += source.meta(key).map_or(0, |m| m.byte_len);
        }
    }
    let bar = progress_bar(total_bytes, show_progress);

    let mut tensors = Vec::with_capacity(planned.len());
    let mut tied_copies_checked = Vec::new();
    let mut source_dtypes = BTreeSet::new();
    for entry in &planned {
        let present: Vec<&String> = entry.keys.iter().filter(|k| keys.contains(k.as_str())).collect();
        let Some(&first) = present.first() else {
            return Err(missing_error(source, &keys, entry, &prefixes.crit, described_by));
        };
        let expected = dims(entry.shape);
        let mut values: Option<Vec<f32>> = None;
        for &key in &present {
            let Some(meta) = source.meta(key) else {
                continue;
            };
            if meta.shape != expected {
                bail!(
                    "tensor `{key}` in {} has shape {:?}; {described_by} implies {:?}",
                    source.path().display(),
                    meta.shape,
                    expected
                );
            }
            bar.set_message(key.clone());
            let read = source.read_f32(key)?;
            bar.inc(meta.byte_len);
            source_dtypes.insert(meta.dtype.name().to_string());
            match &values {
                None => values = Some(read),
                Some(kept) => {
                    let differing = kept
                        .iter()
                        .zip(&read)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    if differing > 0 {
                        let largest = kept
                            .iter()
                            .zip(&read)
                            .map(|(a, b)| (a - b).abs())
                            .fold(0f32, f32::max);
                        bail!(
                            "tensor `{key}` in {} differs from `{first}` ({differing} of {} elements, by up to {largest}), \
                             but {described_by} ties them ({}): the config does not describe these weights",
                            source.path().display(),
                            read.len(),
                            entry.tie_reason
                        );
                    }
                    tied_copies_checked.push(key.clone());
                }
            }
        }
        let Some(values) = values else {
            return Err(missing_error(source, &keys, entry, &prefixes.crit, described_by));
        };
        tensors.push((entry.name, values));
    }
    bar.finish_and_clear();

    Ok(Resolved {
        tensors,
        prefix: prefixes.body,
        ignored_keys,
        tied_copies_checked,
        source_dtypes: source_dtypes.into_iter().collect(),
    })
}

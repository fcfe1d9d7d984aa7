//! The original TensorFlow code's variable names (its `tf/model.py`) to txl's canonical
//! tensors, and the hyper-parameters their shapes give.
//!
//! | TensorFlow variable (under `transformer/`) | canonical tensor |
//! |---|---|
//! | `adaptive_embed/lookup_table` (div_val 1) or `adaptive_embed/cutoff_{i}/lookup_table` | `word_emb.emb_layers.{i}.weight` |
//! | `adaptive_embed/proj_W` or `adaptive_embed/cutoff_{i}/proj_W`, `[d_embed_i, d_model]` | `word_emb.emb_projs.{i}`, transposed (absent: the identity, `proj_same_dim = False`) |
//! | `r_w_bias`, `r_r_bias`: `[n_head, d_head]`, or `[n_layer, n_head, d_head]` with `untie_r` | `r_w_bias` / `r_r_bias`, or each layer's |
//! | `layer_{l}/rel_attn/{qkv,r,o}/kernel`, `[in, out]` | `layers.{l}.dec_attn.{qkv,r,o}_net.weight`, transposed (q, k, v stay in that order) |
//! | `layer_{l}/rel_attn/LayerNorm/{gamma,beta}` | `layers.{l}.dec_attn.layer_norm.{weight,bias}` |
//! | `layer_{l}/ff/layer_{1,2}/{kernel,bias}` | `layers.{l}.pos_ff.CoreNet.{0,3}.{weight (transposed),bias}` |
//! | `layer_{l}/ff/LayerNorm/{gamma,beta}` | `layers.{l}.pos_ff.layer_norm.{weight,bias}` |
//! | `adaptive_softmax/bias` (no cutoffs), or each `adaptive_softmax/cutoff_{i}/b` | `crit.out_layers.{i}.bias` (div_val 1: the clusters' `b` end to end) |
//! | `adaptive_softmax/cutoff_{i}/proj`, `[d_embed_i, d_model]` | `crit.out_projs.{i}`, transposed; absent: tied to the embedding's (`tie_projs`) |
//! | `adaptive_softmax/cutoff_0/{cluster_W,cluster_b}` | `crit.cluster_weight`, `crit.cluster_bias` (same order: cluster `i` is head column `cutoffs[0] + i - 1`) |
//!
//! The output weights are always the embedding tables (the TensorFlow code has no others:
//! `tie_weight`). Its attention, relative shift, position sinusoids (`sin` then `cos`),
//! embedding scale (`sqrt(d_model)`) and post-LayerNorm residuals are the PyTorch code's,
//! which txl implements. Names outside `transformer/` (`global_step`, `beta1_power`, ...) and
//! optimizer slots (`.../Adam`, `.../Adam_1`) are skipped; any other `transformer/` name that
//! has no place in the model is an error, as is a missing or misshapen tensor.

use std::collections::{BTreeSet, HashMap};

use anyhow::{anyhow, bail, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use txl_core::config::{Config, MAX_CUTOFFS};
use txl_core::tensors::{for_each_tensor, LayerTensor, Shape, TensorName};

use super::bundle::Bundle;
use super::{CorpusInfo, EvalSettings, TfOptions};
use crate::checkpoint::hf_config::f32_image_bytes;
use crate::checkpoint::source::TensorSource;

/// `tf.contrib.layers.layer_norm`'s variance epsilon, which the TensorFlow code uses.
pub const DEFAULT_LAYER_NORM_EPS: f64 = 1e-12;

const T: &str = "transformer/";

/// Layout facts the names and shapes give, beyond the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TfLayout {
    /// Embedding tables with no `proj_W` (the identity: `proj_same_dim = False` where a
    /// table is `d_model` wide).
    pub identity_emb_projs: Vec<usize>,
    /// The clusters whose output projection is the embedding's (`tie_projs`).
    pub tied_out_projs: Vec<usize>,
}

/// Whether `name` is an optimizer slot or bookkeeping rather than a model variable.
fn is_skipped(name: &str) -> bool {
    !name.starts_with(T)
        || name.ends_with("/Adam")
        || name.ends_with("/Adam_1")
        || name.contains("/Adam/")
        || name.contains("/Adam_1/")
        || name.ends_with("/Momentum")
        || name.ends_with("/ExponentialMovingAverage")
}

fn shape_of<'a>(bundle: &'a Bundle, name: &str, what: &str) -> Result<&'a [usize]> {
    bundle.shape(name).ok_or_else(|| {
        anyhow!(
            "{} has no tensor `{name}`, which {what} needs",
            bundle.path().display()
        )
    })
}

fn dim(bundle: &Bundle, name: &str, shape: &[usize], rank: usize, index: usize) -> Result<u32> {
    if shape.len() != rank {
        bail!(
            "tensor `{name}` in {} has shape {shape:?}, where the TensorFlow code makes {rank} dimensions",
            bundle.path().display()
        );
    }
    u32::try_from(shape[index]).map_err(|_| anyhow!("tensor `{name}` is too large"))
}

/// Numbers `i` for which `format(i)` is in the bundle, checked to run 0, 1, 2, ...
fn numbered(bundle: &Bundle, prefix: &str, suffix: &str, what: &str) -> Result<u32> {
    let mut found = BTreeSet::new();
    for name in bundle.names() {
        if let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_suffix(suffix)) {
            if let Ok(i) = rest.parse::<u32>() {
                found.insert(i);
            }
        }
    }
    if found.iter().enumerate().any(|(i, &n)| i as u32 != n) {
        bail!(
            "{}: the {what} are not numbered 0, 1, 2, ...: {found:?}",
            bundle.path().display()
        );
    }
    Ok(found.len() as u32)
}

fn cutoffs_from_sizes(sizes: &[u32], what: &str) -> Result<(u32, Vec<u32>)> {
    let mut ends = Vec::new();
    let mut running = 0u32;
    for &s in sizes {
        running = running
            .checked_add(s)
            .ok_or_else(|| anyhow!("the {what} hold more tokens than fit a u32"))?;
        ends.push(running);
    }
    let n_token = ends.pop().unwrap_or(0);
    Ok((n_token, ends))
}

/// The config the bundle's names and shapes describe, with `info` checked against them and
/// `options` (else `defaults`) for the rest; and the layout facts.
pub fn infer_config(
    bundle: &Bundle,
    info: Option<&CorpusInfo>,
    options: &TfOptions,
    defaults: EvalSettings,
) -> Result<(Config, TfLayout)> {
    let path = bundle.path().display().to_string();
    let n_layer = numbered(bundle, &format!("{T}layer_"), "/rel_attn/o/kernel", "layers")?;
    if n_layer == 0 {
        let sample: Vec<&str> = bundle.names().take(5).collect();
        bail!(
            "{path} holds no Transformer-XL of the original TensorFlow code: no `{T}layer_0/rel_attn/o/kernel` \
             ({} tensors, e.g. {sample:?})",
            bundle.names().count()
        );
    }
    let o = format!("{T}layer_0/rel_attn/o/kernel");
    let o_shape = shape_of(bundle, &o, "d_model")?;
    let d_model = dim(bundle, &o, o_shape, 2, 1)?;
    let ff = format!("{T}layer_0/ff/layer_1/kernel");
    let d_inner = dim(bundle, &ff, shape_of(bundle, &ff, "d_inner")?, 2, 1)?;
    let bias = format!("{T}r_w_bias");
    let bias_shape = shape_of(bundle, &bias, "n_head and d_head")?;
    let untie_r = bias_shape.len() == 3;
    let rank = if untie_r { 3 } else { 2 };
    let n_head = dim(bundle, &bias, bias_shape, rank, rank - 2)?;
    let d_head = dim(bundle, &bias, bias_shape, rank, rank - 1)?;
    if untie_r && bias_shape[0] != n_layer as usize {
        bail!(
            "tensor `{bias}` in {path} has shape {bias_shape:?}: {} layers' biases, but the checkpoint has {n_layer} layers",
            bias_shape[0]
        );
    }

    // The embedding: one table (div_val 1) or one per cluster.
    let single = format!("{T}adaptive_embed/lookup_table");
    let tables = numbered(
        bundle,
        &format!("{T}adaptive_embed/cutoff_"),
        "/lookup_table",
        "embedding tables",
    )?;
    let (n_token, d_embed, div_val, emb_cutoffs) = if let Some(shape) = bundle.shape(&single) {
        if tables > 0 {
            bail!("{path} holds both `{single}` and `{T}adaptive_embed/cutoff_0/lookup_table`");
        }
        (
            dim(bundle, &single, shape, 2, 0)?,
            dim(bundle, &single, shape, 2, 1)?,
            1,
            None,
        )
    } else if tables >= 2 {
        let mut rows = Vec::new();
        let mut widths = Vec::new();
        for i in 0..tables {
            let key = format!("{T}adaptive_embed/cutoff_{i}/lookup_table");
            let s = shape_of(bundle, &key, "an embedding table")?;
            rows.push(dim(bundle, &key, s, 2, 0)?);
            widths.push(dim(bundle, &key, s, 2, 1)?);
        }
        let div_val = widths[0].checked_div(widths[1]).unwrap_or(0);
        let (n_token, ends) = cutoffs_from_sizes(&rows, "embedding tables")?;
        (n_token, widths[0], div_val, Some(ends))
    } else if tables == 1 {
        bail!("{path} has one embedding table under `cutoff_0` and no others: an adaptive embedding needs cutoffs");
    } else {
        bail!("{path} has no embedding: neither `{single}` nor `{T}adaptive_embed/cutoff_0/lookup_table`");
    };

    // The softmax: `bias` alone, or one `b` per cluster.
    let full = format!("{T}adaptive_softmax/bias");
    let clusters = numbered(
        bundle,
        &format!("{T}adaptive_softmax/cutoff_"),
        "/b",
        "softmax clusters",
    )?;
    let cutoffs = if bundle.shape(&full).is_some() {
        if clusters > 0 {
            bail!("{path} holds both `{full}` and `{T}adaptive_softmax/cutoff_0/b`");
        }
        Vec::new()
    } else if clusters >= 1 {
        let mut sizes = Vec::new();
        for i in 0..clusters {
            let key = format!("{T}adaptive_softmax/cutoff_{i}/b");
            sizes.push(dim(
                bundle,
                &key,
                shape_of(bundle, &key, "a softmax cluster")?,
                1,
                0,
            )?);
        }
        let (total, ends) = cutoffs_from_sizes(&sizes, "softmax clusters")?;
        if total != n_token {
            bail!("{path}: the softmax clusters' biases cover {total} tokens, the embedding {n_token}");
        }
        ends
    } else {
        bail!("{path} has no output layer: neither `{full}` nor `{T}adaptive_softmax/cutoff_0/b`");
    };
    if let Some(ends) = emb_cutoffs.filter(|e| *e != cutoffs) {
        bail!("{path}: the embedding tables give cutoffs {ends:?}, the softmax clusters {cutoffs:?}");
    }
    if let Some(info) = info {
        if info.vocab_size != n_token {
            bail!(
                "{} says vocab_size {}, but the checkpoint's embedding has {n_token} tokens: it belongs to another model",
                info.path.display(),
                info.vocab_size
            );
        }
        if info.cutoffs != cutoffs {
            bail!(
                "{} gives cutoffs {:?}, but the checkpoint's shapes give {cutoffs:?}",
                info.path.display(),
                info.cutoffs
            );
        }
    }
    if let Some(given) = options.cutoffs.as_ref().filter(|&c| *c != cutoffs) {
        bail!("--cutoffs {given:?} is given, but the checkpoint's shapes give cutoffs {cutoffs:?}");
    }
    if cutoffs.len() > MAX_CUTOFFS {
        bail!(
            "{path} has {} cutoffs; at most {MAX_CUTOFFS} are supported",
            cutoffs.len()
        );
    }

    let mut config = Config {
        n_token,
        d_model,
        d_embed,
        n_head,
        d_head,
        d_inner,
        n_layer,
        cutoffs: [0; MAX_CUTOFFS],
        n_cutoffs: cutoffs.len() as u32,
        div_val,
        tie_weight: true,
        tie_projs: 0,
        pre_lnorm: options.pre_lnorm,
        untie_r,
        layer_norm_epsilon: options.layer_norm_eps.unwrap_or(DEFAULT_LAYER_NORM_EPS) as f32,
        tgt_len: options.tgt_len.unwrap_or(defaults.tgt_len),
        mem_len: options.mem_len.unwrap_or(defaults.mem_len),
        clamp_len: u32::try_from(options.clamp_len.unwrap_or(defaults.clamp_len).max(0))
            .map_err(|_| anyhow!("--clamp-len is out of range"))?,
        same_length: options.same_length.unwrap_or(defaults.same_length),
    };
    config.cutoffs[..cutoffs.len()].copy_from_slice(&cutoffs);

    let mut layout = TfLayout {
        identity_emb_projs: Vec::new(),
        tied_out_projs: Vec::new(),
    };
    if config.has_out_proj() {
        for cluster in 0..=config.n_clusters() {
            let own = format!("{T}adaptive_softmax/cutoff_{cluster}/proj");
            if config.n_clusters() == 0 || bundle.shape(&own).is_none() {
                config.tie_projs |= 1 << cluster;
                layout.tied_out_projs.push(cluster);
            }
        }
        for table in 0..config.n_emb_tables() {
            if bundle.shape(&emb_proj_name(&config, table)).is_none() && config.emb_dim(table) == d_model {
                layout.identity_emb_projs.push(table);
            }
        }
    }
    config
        .validate()
        .map_err(|e| anyhow!(e).context(format!("{path} describes a model that cannot be converted")))?;
    let (parameters, image_bytes) = f32_image_bytes(&config);
    if image_bytes > u64::from(u32::MAX) {
        bail!("{path} describes {parameters} parameters: {image_bytes} bytes as an f32 image, more than a model image holds");
    }
    Ok((config, layout))
}

fn emb_proj_name(config: &Config, table: usize) -> String {
    if config.div_val == 1 {
        format!("{T}adaptive_embed/proj_W")
    } else {
        format!("{T}adaptive_embed/cutoff_{table}/proj_W")
    }
}

/// Canonical tensors, in canonical order, as [`crate::checkpoint::Checkpoint`] holds them.
pub type Tensors = Vec<(TensorName, Vec<f32>)>;

/// How one canonical tensor is made from TensorFlow variables.
enum Source {
    /// The variable as stored (`[rows, cols]` or a vector).
    Same(String, Vec<usize>),
    /// The variable `[in, out]`, transposed to `[out, in]`.
    Transposed(String, Vec<usize>),
    /// Slice `index` of a `[n, rest...]` variable.
    Slice(String, Vec<usize>, usize),
    /// Vectors end to end.
    Concat(Vec<(String, usize)>),
    /// The `n x n` identity.
    Identity(usize),
}

fn source_of(config: &Config, layout: &TfLayout, name: TensorName, shape: Shape) -> Source {
    let (dims, n) = shape.dims();
    let dims: Vec<usize> = dims[..n].iter().map(|&d| d as usize).collect();
    let flipped = || dims.iter().rev().copied().collect::<Vec<usize>>();
    let bias_shape = vec![
        config.n_layer as usize,
        config.n_head as usize,
        config.d_head as usize,
    ];
    match name {
        TensorName::EmbLayer(i) => Source::Same(
            if config.div_val == 1 {
                format!("{T}adaptive_embed/lookup_table")
            } else {
                format!("{T}adaptive_embed/cutoff_{i}/lookup_table")
            },
            dims,
        ),
        TensorName::EmbProj(i) if layout.identity_emb_projs.contains(&(i as usize)) => {
            Source::Identity(dims[0])
        }
        TensorName::EmbProj(i) => Source::Transposed(emb_proj_name(config, i as usize), flipped()),
        TensorName::SharedRWBias => Source::Same(format!("{T}r_w_bias"), dims),
        TensorName::SharedRRBias => Source::Same(format!("{T}r_r_bias"), dims),
        TensorName::Layer(l, tensor) => {
            let p = format!("{T}layer_{l}/");
            match tensor {
                LayerTensor::RWBias => Source::Slice(format!("{T}r_w_bias"), bias_shape, l as usize),
                LayerTensor::RRBias => Source::Slice(format!("{T}r_r_bias"), bias_shape, l as usize),
                LayerTensor::QkvWeight => Source::Transposed(format!("{p}rel_attn/qkv/kernel"), flipped()),
                LayerTensor::RWeight => Source::Transposed(format!("{p}rel_attn/r/kernel"), flipped()),
                LayerTensor::OWeight => Source::Transposed(format!("{p}rel_attn/o/kernel"), flipped()),
                LayerTensor::AttnNormWeight => Source::Same(format!("{p}rel_attn/LayerNorm/gamma"), dims),
                LayerTensor::AttnNormBias => Source::Same(format!("{p}rel_attn/LayerNorm/beta"), dims),
                LayerTensor::Ff1Weight => Source::Transposed(format!("{p}ff/layer_1/kernel"), flipped()),
                LayerTensor::Ff1Bias => Source::Same(format!("{p}ff/layer_1/bias"), dims),
                LayerTensor::Ff2Weight => Source::Transposed(format!("{p}ff/layer_2/kernel"), flipped()),
                LayerTensor::Ff2Bias => Source::Same(format!("{p}ff/layer_2/bias"), dims),
                LayerTensor::FfNormWeight => Source::Same(format!("{p}ff/LayerNorm/gamma"), dims),
                LayerTensor::FfNormBias => Source::Same(format!("{p}ff/LayerNorm/beta"), dims),
            }
        }
        // Never planned: the TensorFlow code ties the output weights to the embedding.
        TensorName::OutWeight(i) => {
            Source::Same(format!("{T}adaptive_softmax/cutoff_{i}/lookup_table"), dims)
        }
        TensorName::OutBias(_) if config.n_clusters() == 0 => {
            Source::Same(format!("{T}adaptive_softmax/bias"), dims)
        }
        TensorName::OutBias(_) if config.div_val == 1 => Source::Concat(
            (0..=config.n_clusters())
                .map(|c| {
                    let (start, end) = config.cluster_range(c);
                    (
                        format!("{T}adaptive_softmax/cutoff_{c}/b"),
                        (end - start) as usize,
                    )
                })
                .collect(),
        ),
        TensorName::OutBias(i) => Source::Same(format!("{T}adaptive_softmax/cutoff_{i}/b"), dims),
        TensorName::OutProj(c) => {
            Source::Transposed(format!("{T}adaptive_softmax/cutoff_{c}/proj"), flipped())
        }
        TensorName::ClusterWeight => Source::Same(format!("{T}adaptive_softmax/cutoff_0/cluster_W"), dims),
        TensorName::ClusterBias => Source::Same(format!("{T}adaptive_softmax/cutoff_0/cluster_b"), dims),
    }
}

/// Reads `name` with the shape `expected`.
fn read_checked(bundle: &mut Bundle, name: &str, expected: &[usize], bar: &ProgressBar) -> Result<Vec<f32>> {
    let Some(meta) = bundle.meta(name) else {
        bail!(
            "{} has no tensor `{name}`, which the model its other tensors describe needs",
            bundle.path().display()
        );
    };
    if meta.shape != expected {
        bail!(
            "tensor `{name}` in {} has shape {:?}; the model its other tensors describe needs {expected:?}",
            bundle.path().display(),
            meta.shape
        );
    }
    bar.set_message(name.to_string());
    let values = bundle.read_f32(name)?;
    bar.inc(meta.byte_len);
    Ok(values)
}

fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

fn progress_bar(total_bytes: u64, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total_bytes), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} reading weights [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta}) {wide_msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The canonical tensors of `config` read from `bundle`, in canonical order, and the names
/// skipped (sorted). A `transformer/` name that is neither read nor an optimizer slot is an
/// error: the shapes and the names disagree.
pub fn read_tensors(
    config: &Config,
    layout: &TfLayout,
    bundle: &mut Bundle,
    show_progress: bool,
) -> Result<(Tensors, Vec<String>)> {
    let mut planned = Vec::new();
    for_each_tensor(config, |name, shape| {
        planned.push((name, source_of(config, layout, name, shape)))
    });
    let mut used = BTreeSet::new();
    for (_, source) in &planned {
        match source {
            Source::Same(n, _) | Source::Transposed(n, _) | Source::Slice(n, _, _) => {
                used.insert(n.clone());
            }
            Source::Concat(parts) => used.extend(parts.iter().map(|(n, _)| n.clone())),
            Source::Identity(_) => {}
        }
    }
    let mut skipped = Vec::new();
    let mut strays = Vec::new();
    for name in bundle.names() {
        if used.contains(name) {
            continue;
        }
        if is_skipped(name) {
            skipped.push(name.to_string());
        } else {
            strays.push(name.to_string());
        }
    }
    if !strays.is_empty() {
        let shown: Vec<&String> = strays.iter().take(6).collect();
        bail!(
            "{} holds {} tensor(s) that the model its shapes describe has no place for, e.g. {shown:?}",
            bundle.path().display(),
            strays.len()
        );
    }
    let total = used
        .iter()
        .filter_map(|n| bundle.meta(n))
        .fold(0u64, |sum, m| sum.saturating_add(m.byte_len));
    let bar = progress_bar(total, show_progress);
    let mut sliced: HashMap<String, Vec<f32>> = HashMap::new();
    let mut tensors = Vec::with_capacity(planned.len());
    for (name, source) in planned {
        let values = match source {
            Source::Same(n, shape) => read_checked(bundle, &n, &shape, &bar)?,
            Source::Transposed(n, shape) => {
                let v = read_checked(bundle, &n, &shape, &bar)?;
                transpose(&v, shape[0], shape[1])
            }
            Source::Slice(n, shape, index) => {
                if !sliced.contains_key(&n) {
                    let v = read_checked(bundle, &n, &shape, &bar)?;
                    sliced.insert(n.clone(), v);
                }
                let whole = &sliced[&n];
                let per: usize = shape[1..].iter().product();
                whole[index * per..(index + 1) * per].to_vec()
            }
            Source::Concat(parts) => {
                let mut out = Vec::new();
                for (n, len) in parts {
                    out.extend(read_checked(bundle, &n, &[len], &bar)?);
                }
                out
            }
            Source::Identity(n) => {
                let mut out = vec![0f32; n * n];
                for i in 0..n {
                    out[i * n + i] = 1.0;
                }
                out
            }
        };
        tensors.push((name, values));
    }
    bar.finish_and_clear();
    skipped.sort();
    Ok((tensors, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimizer_slots_and_bookkeeping_are_skipped() {
        assert!(is_skipped("global_step"));
        assert!(is_skipped("beta1_power"));
        assert!(is_skipped("transformer/layer_0/ff/layer_1/kernel/Adam"));
        assert!(is_skipped("transformer/r_w_bias/Adam_1"));
        assert!(!is_skipped("transformer/layer_0/ff/layer_1/kernel"));
    }

    #[test]
    fn transposes_in_to_out() {
        // [[1, 2, 3], [4, 5, 6]] -> [[1, 4], [2, 5], [3, 6]]
        assert_eq!(
            transpose(&[1., 2., 3., 4., 5., 6.], 2, 3),
            [1., 4., 2., 5., 3., 6.]
        );
    }
}

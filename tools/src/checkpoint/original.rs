//! Checkpoints of the original Transformer-XL training code (kimiyoung/transformer-xl,
//! `pytorch/`), which come without a `config.json`.
//!
//! Its `train.py` saves `torch.save(model, f)`: the whole `mem_transformer.MemTransformerLM`,
//! pickled by class name with each module's attributes. Such a file is read in two passes,
//! neither of which runs anything from it: [`super::pickle_tree`] walks the pickle as data,
//! refusing any class but the original code's own and the `torch.nn` modules it builds
//! ([`allowed_global`]), and the hyper-parameters are taken from the module attributes;
//! then the tensors are read by `pytorch-reader` as the module's `state_dict()` (from a ZIP
//! file) or from the walked tree (a legacy stream, see [`super::legacy_module_source`]).
//!
//! A `state_dict` saved by the same code (an `OrderedDict` of tensors under the original
//! names, no `transformer.` prefix; all under `module.` when the model was wrapped in
//! `DataParallel`, which is seen through) has no attributes: every size is inferred from the tensor
//! shapes and key layout, and what shapes cannot tell comes from [`OriginalOptions`] (the
//! `txl convert` flags, with the original `train.py`'s names and defaults).
//!
//! In both, the output weights and projections count as tied when they are the embedding's
//! bit for bit (the original ties them by assigning one `Parameter` under two names), and
//! the rows of `crit.cluster_weight` / `crit.cluster_bias` are reversed: the original
//! `ProjectedAdaptiveLogSoftmax` scores tail cluster `i` with head column `-i` (the last
//! row is cluster 1), where Hugging Face's, the TensorFlow code's and txl's use column
//! `cutoffs[0] + i - 1` (the first row is cluster 1).

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use txl_core::config::{Config, MAX_CUTOFFS};
use txl_core::tensors::TensorName;
use txl_core::ConfigError;

use super::hf_config::f32_image_bytes;
use super::legacy_module_source::LegacyModuleSource;
use super::pickle_tree::{self, Value, MAX_DEPTH};
use super::source::{TensorSource, Unprefixed};
use super::torch_source::TorchSource;
use super::{resolve, Checkpoint};

/// `train.py`'s defaults for what a state_dict's shapes cannot tell.
pub const DEFAULT_TGT_LEN: u32 = 70;
/// `--mem_len` default of the original `train.py`.
pub const DEFAULT_MEM_LEN: u32 = 0;
/// `--clamp_len` default of the original `train.py` (no clamping).
pub const DEFAULT_CLAMP_LEN: i64 = -1;
/// `torch.nn.LayerNorm`'s default epsilon, which the original code keeps.
pub const DEFAULT_LAYER_NORM_EPS: f64 = 1e-5;

/// What a checkpoint of the original code may not say for itself: the `train.py` flags of
/// the same names. For a whole-module checkpoint the lengths, `clamp_len` and `same_length`
/// are evaluation settings and override the saved ones (as the original `eval.py` does);
/// `pre_lnorm` and the epsilon are part of the model and must agree with it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OriginalOptions {
    /// `--tgt_len` (default 70).
    pub tgt_len: Option<u32>,
    /// `--mem_len` (default 0).
    pub mem_len: Option<u32>,
    /// `--clamp_len` (default -1: none; any value `<= 0` means none).
    pub clamp_len: Option<i64>,
    /// `--same_length`.
    pub same_length: bool,
    /// `--pre_lnorm`.
    pub pre_lnorm: bool,
    /// LayerNorm epsilon (default 1e-5).
    pub layer_norm_eps: Option<f64>,
    /// `--cutoffs` (needed by a state_dict with `div_val` 1 and tail clusters, whose shapes
    /// do not hold them).
    pub cutoffs: Option<Vec<u32>>,
}

impl OriginalOptions {
    /// The first flag given, for a message refusing them where they do not apply.
    pub fn given(&self) -> Option<&'static str> {
        [
            (self.tgt_len.is_some(), "--tgt-len"),
            (self.mem_len.is_some(), "--mem-len"),
            (self.clamp_len.is_some(), "--clamp-len"),
            (self.same_length, "--same-length"),
            (self.pre_lnorm, "--pre-lnorm"),
            (self.layer_norm_eps.is_some(), "--layer-norm-eps"),
            (self.cutoffs.is_some(), "--cutoffs"),
        ]
        .into_iter()
        .find(|(given, _)| *given)
        .map(|(_, flag)| flag)
    }
}

/// Which kind of original checkpoint a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginalKind {
    /// `torch.save(model)`: a pickled `MemTransformerLM`.
    WholeModule,
    /// `torch.save(model.state_dict())`.
    StateDict,
}

/// Whether `module.name` may appear in an original checkpoint: the original code's model
/// classes, the `torch.nn` modules they build, and what `torch.save` writes for tensors.
pub fn allowed_global(module: &str, name: &str) -> bool {
    match module {
        "mem_transformer" => matches!(
            name,
            "MemTransformerLM"
                | "RelPartialLearnableDecoderLayer"
                | "RelPartialLearnableMultiHeadAttn"
                | "PositionwiseFF"
                | "AdaptiveEmbedding"
                | "PositionalEmbedding"
                // The other attention types' classes: refused by attn_type, with its message.
                | "RelLearnableDecoderLayer"
                | "RelLearnableMultiHeadAttn"
                | "DecoderLayer"
                | "MultiHeadAttn"
        ),
        "proj_adaptive_softmax" | "utils.proj_adaptive_softmax" => name == "ProjectedAdaptiveLogSoftmax",
        "torch.nn.modules.linear" => name == "Linear",
        "torch.nn.modules.normalization" => name == "LayerNorm",
        "torch.nn.modules.dropout" => name == "Dropout",
        "torch.nn.modules.sparse" => name == "Embedding",
        "torch.nn.modules.activation" => name == "ReLU",
        "torch.nn.modules.container" => matches!(name, "ModuleList" | "ParameterList" | "Sequential"),
        "torch.nn.parameter" => name == "Parameter",
        // PyTorch before 1.0 pickles each module's `_backend` as a call of this function
        // (which is never made here).
        "torch.nn.backends.thnn" => name == "_get_thnn_function_backend",
        "torch._utils" => matches!(
            name,
            "_rebuild_tensor" | "_rebuild_tensor_v2" | "_rebuild_parameter" | "_rebuild_parameter_with_state"
        ),
        // A legacy save of CUDA tensors names `torch.cuda.FloatStorage`.
        "torch" | "torch.cuda" => {
            name.ends_with("Storage") && name.chars().all(|c| c.is_ascii_alphanumeric())
        }
        // The sampled softmax's sampler: refused by sample_softmax, with that setting's message.
        "log_uniform_sampler" => name == "LogUniformSampler",
        "collections" => name == "OrderedDict",
        "builtins" | "__builtin__" => matches!(name, "set" | "frozenset"),
        _ => false,
    }
}

/// Whether `path` is a ZIP archive (what `torch.save` writes since PyTorch 1.6).
fn is_zip(path: &Path) -> Result<bool> {
    let mut head = [0u8; 4];
    let mut file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let n = file.read(&mut head)?;
    Ok(n == 4 && &head == b"PK\x03\x04")
}

/// The saved object of a PyTorch file (ZIP or legacy), walked as data; `None` when the file
/// is neither.
fn saved_object(path: &Path) -> Result<Option<Value>> {
    let mut file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut head = [0u8; 4];
    let n = file.read(&mut head)?;
    let allowed = |module: &str, name: &str| allowed_global(module, name);
    if n == 4 && &head == b"PK\x03\x04" {
        let pickle = pickle_tree::zip_data_pkl(&mut file)?;
        let (value, _) = pickle_tree::read_pickle(&pickle, 0, &allowed)?;
        return Ok(Some(value));
    }
    Ok(pickle_tree::legacy_object(&mut file, &allowed)?.map(|(object, _)| object))
}

/// Which original checkpoint `path` holds, if it is one: a pickled `MemTransformerLM`, or a
/// dict of tensors whose keys use the original names (no `transformer.` prefix; perhaps all
/// under one further prefix, `module.`: [`resolve::original_layout_prefix`]). Refuses a
/// file whose pickle names a class that an original checkpoint cannot hold.
pub fn detect(path: &Path) -> Result<Option<OriginalKind>> {
    let object = saved_object(path).with_context(|| format!("in {}", path.display()))?;
    Ok(match &object {
        Some(Value::Object(object)) if object.borrow().class == "mem_transformer.MemTransformerLM" => {
            Some(OriginalKind::WholeModule)
        }
        Some(Value::Dict(items)) => {
            let items = items.borrow();
            let original = resolve::original_layout_prefix(items.iter().filter_map(|(key, _)| key.as_str()));
            original.map(|_| OriginalKind::StateDict)
        }
        Some(other) => bail!(
            "{} holds a pickled {}, not the original code's MemTransformerLM or a state_dict",
            path.display(),
            other.type_name()
        ),
        None => None,
    })
}

/// A module of the pickled tree: its class and `__dict__`.
struct Module {
    /// Where it sits (`crit`, `layers.0.dec_attn`), for messages.
    path: String,
    class: String,
    attrs: HashMap<String, Value>,
}

impl Module {
    fn of(value: &Value, path: &str) -> Result<Module> {
        let Value::Object(object) = value else {
            bail!("`{path}` is a {}, not a module", value.type_name());
        };
        let object = object.borrow();
        let Some(state) = object.state.as_ref().and_then(Value::dict_items) else {
            bail!("`{path}` ({}) has no attributes", object.class);
        };
        let attrs = state
            .into_iter()
            .filter_map(|(k, v)| k.as_str().map(|k| (k.to_string(), v)))
            .collect();
        Ok(Module {
            path: path.to_string(),
            class: object.class.clone(),
            attrs,
        })
    }

    fn name(&self) -> &str {
        if self.path.is_empty() {
            "the model"
        } else {
            &self.path
        }
    }

    fn attr(&self, name: &str) -> Result<&Value> {
        self.attrs
            .get(name)
            .ok_or_else(|| anyhow!("{} ({}) has no attribute `{name}`", self.name(), self.class))
    }

    fn int(&self, name: &str) -> Result<i64> {
        match self.attr(name)? {
            Value::Int(v) => Ok(*v),
            Value::Bool(b) => Ok(*b as i64),
            other => bail!("{}.{name} is a {}, not an int", self.name(), other.type_name()),
        }
    }

    fn int_or(&self, name: &str, default: i64) -> Result<i64> {
        match self.attrs.get(name) {
            None | Some(Value::None) => Ok(default),
            Some(_) => self.int(name),
        }
    }

    fn bool(&self, name: &str) -> Result<bool> {
        match self.attr(name)? {
            Value::Bool(b) => Ok(*b),
            Value::Int(v) => Ok(*v != 0),
            Value::None => Ok(false),
            other => bail!("{}.{name} is a {}, not a bool", self.name(), other.type_name()),
        }
    }

    fn float(&self, name: &str) -> Result<f64> {
        match self.attr(name)? {
            Value::Float(v) => Ok(*v),
            Value::Int(v) => Ok(*v as f64),
            other => bail!("{}.{name} is a {}, not a float", self.name(), other.type_name()),
        }
    }

    fn ints(&self, name: &str) -> Result<Vec<i64>> {
        let items = match self.attr(name)? {
            Value::List(l) => l.borrow().clone(),
            Value::Tuple(t) => t.as_ref().clone(),
            other => bail!("{}.{name} is a {}, not a list", self.name(), other.type_name()),
        };
        items
            .iter()
            .map(|v| match v {
                Value::Int(i) => Ok(*i),
                other => bail!("{}.{name} holds a {}, not an int", self.name(), other.type_name()),
            })
            .collect()
    }

    /// The child module `name` (from `_modules`).
    fn child(&self, name: &str) -> Result<Module> {
        let modules = self
            .attr("_modules")?
            .dict_items()
            .ok_or_else(|| anyhow!("{}._modules is not a dict", self.name()))?;
        let path = if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        };
        let Some((_, value)) = modules.iter().find(|(k, _)| k.as_str() == Some(name)) else {
            bail!("{} ({}) has no submodule `{name}`", self.name(), self.class);
        };
        if path.split('.').count() > MAX_DEPTH {
            bail!("the module tree is deeper than {MAX_DEPTH} levels");
        }
        Module::of(value, &path)
    }

    fn expect_class(self, classes: &[&str]) -> Result<Module> {
        if !classes.contains(&self.class.as_str()) {
            bail!(
                "{} is a {}, where the original code has {}",
                self.name(),
                self.class,
                classes.join(" or ")
            );
        }
        Ok(self)
    }
}

fn u32_of(name: &str, value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|_| anyhow!("{name} = {value} is out of range"))
}

/// The refusals txl makes for the original code's settings it does not implement.
fn refuse_unsupported(attn_type: i64, ext_len: i64, sample_softmax: i64) -> Result<()> {
    if attn_type != 0 {
        bail!(
            "only attn_type 0 (relative positional attention) is supported; the checkpoint has attn_type {attn_type}"
        );
    }
    if sample_softmax > 0 {
        bail!("sample_softmax = {sample_softmax}: the sampled softmax is not supported (it must be <= 0)");
    }
    if ext_len > 0 {
        bail!("ext_len = {ext_len}: extended context is not supported (it must be 0)");
    }
    Ok(())
}

/// Hyper-parameters from a pickled `MemTransformerLM`'s attributes. The ties (`tie_weight`,
/// `tie_projs`) and `untie_r` are settled from the tensors afterwards.
fn whole_module_config(root: &Value, options: &OriginalOptions) -> Result<Config> {
    let model = Module::of(root, "")?.expect_class(&["mem_transformer.MemTransformerLM"])?;
    let attn_type = model.int_or("attn_type", 0)?;
    refuse_unsupported(
        attn_type,
        model.int_or("ext_len", 0)?,
        model.int_or("sample_softmax", -1)?,
    )?;

    let n_token = model.int("n_token")?;
    let n_layer = model.int("n_layer")?;
    let word_emb = model
        .child("word_emb")?
        .expect_class(&["mem_transformer.AdaptiveEmbedding"])?;
    let crit = model.child("crit")?.expect_class(&[
        "proj_adaptive_softmax.ProjectedAdaptiveLogSoftmax",
        "utils.proj_adaptive_softmax.ProjectedAdaptiveLogSoftmax",
    ])?;
    model
        .child("pos_emb")?
        .expect_class(&["mem_transformer.PositionalEmbedding"])?;
    let mut crit_cutoffs = crit.ints("cutoffs")?;
    if crit_cutoffs.pop() != Some(n_token) {
        bail!("crit.cutoffs does not end with n_token = {n_token}");
    }
    let mut emb_cutoffs = word_emb.ints("cutoffs")?;
    emb_cutoffs.pop();
    if emb_cutoffs != crit_cutoffs || word_emb.int("div_val")? != crit.int("div_val")? {
        bail!("the embedding's cutoffs / div_val differ from the output layer's");
    }

    // Per layer: the same d_inner, pre_lnorm and LayerNorm epsilon everywhere.
    let layers = model.child("layers")?;
    let (mut d_inner, mut pre_lnorm, mut eps) = (None, None, None);
    for layer in 0..n_layer {
        let layer = layers
            .child(&layer.to_string())?
            .expect_class(&["mem_transformer.RelPartialLearnableDecoderLayer"])?;
        let attn = layer
            .child("dec_attn")?
            .expect_class(&["mem_transformer.RelPartialLearnableMultiHeadAttn"])?;
        let ff = layer
            .child("pos_ff")?
            .expect_class(&["mem_transformer.PositionwiseFF"])?;
        for (module, what) in [(&attn, "dec_attn"), (&ff, "pos_ff")] {
            let norm = module
                .child("layer_norm")?
                .expect_class(&["torch.nn.modules.normalization.LayerNorm"])?;
            let value = (module.bool("pre_lnorm")?, norm.float("eps")?);
            let first = *pre_lnorm.get_or_insert(value.0);
            let first_eps = *eps.get_or_insert(value.1);
            if (first, first_eps) != value {
                bail!(
                    "{}.{what}: pre_lnorm / LayerNorm eps differ between layers",
                    layer.path
                );
            }
        }
        let inner = ff.int("d_inner")?;
        if *d_inner.get_or_insert(inner) != inner {
            bail!("{}: d_inner differs between layers", layer.path);
        }
    }
    let (Some(d_inner), Some(pre_lnorm), Some(eps)) = (d_inner, pre_lnorm, eps) else {
        bail!("the model has no layers (n_layer = {n_layer})");
    };
    if options.pre_lnorm && !pre_lnorm {
        bail!("--pre-lnorm is given, but the checkpoint's layers have pre_lnorm = False");
    }
    if let Some(given) = options.layer_norm_eps.filter(|&given| given != eps) {
        bail!("--layer-norm-eps {given} is given, but the checkpoint's LayerNorms have eps {eps:e}");
    }
    if let Some(cutoffs) = &options.cutoffs {
        let saved: Vec<u32> = crit_cutoffs.iter().map(|&c| c as u32).collect();
        if *cutoffs != saved {
            bail!("--cutoffs {cutoffs:?} is given, but the checkpoint has cutoffs {saved:?}");
        }
    }

    let clamp_len = options
        .clamp_len
        .unwrap_or(model.int_or("clamp_len", DEFAULT_CLAMP_LEN)?);
    let tgt_len = match options.tgt_len {
        Some(v) => v,
        None => u32_of("tgt_len", model.int("tgt_len")?)?,
    };
    let mem_len = match options.mem_len {
        Some(v) => v,
        None => u32_of("mem_len", model.int("mem_len")?)?,
    };
    let cutoffs: Vec<u32> = crit_cutoffs
        .iter()
        .map(|&c| u32_of("cutoffs", c))
        .collect::<Result<_>>()?;
    let mut config = base_config(&cutoffs)?;
    config.n_token = u32_of("n_token", n_token)?;
    config.d_model = u32_of("d_model", model.int("d_model")?)?;
    config.d_embed = u32_of("d_embed", model.int("d_embed")?)?;
    config.n_head = u32_of("n_head", model.int("n_head")?)?;
    config.d_head = u32_of("d_head", model.int("d_head")?)?;
    config.d_inner = u32_of("d_inner", d_inner)?;
    config.n_layer = u32_of("n_layer", n_layer)?;
    config.div_val = u32_of("div_val", crit.int("div_val")?)?;
    config.pre_lnorm = pre_lnorm;
    config.layer_norm_epsilon = eps as f32;
    config.tgt_len = tgt_len;
    config.mem_len = mem_len;
    config.clamp_len = u32_of("clamp_len", clamp_len.max(0))?;
    config.same_length = options.same_length || model.bool("same_length")?;
    Ok(config)
}

/// A config with `cutoffs` and everything else zero, to be filled in.
fn base_config(cutoffs: &[u32]) -> Result<Config> {
    if cutoffs.len() > MAX_CUTOFFS {
        bail!(
            "the checkpoint has {} cutoffs; at most {MAX_CUTOFFS} are supported",
            cutoffs.len()
        );
    }
    let mut fixed = [0u32; MAX_CUTOFFS];
    fixed[..cutoffs.len()].copy_from_slice(cutoffs);
    Ok(Config {
        n_token: 0,
        d_model: 0,
        d_embed: 0,
        n_head: 0,
        d_head: 0,
        d_inner: 0,
        n_layer: 0,
        cutoffs: fixed,
        n_cutoffs: cutoffs.len() as u32,
        div_val: 1,
        tie_weight: false,
        tie_projs: 0,
        pre_lnorm: false,
        untie_r: false,
        layer_norm_epsilon: DEFAULT_LAYER_NORM_EPS as f32,
        tgt_len: DEFAULT_TGT_LEN,
        mem_len: DEFAULT_MEM_LEN,
        clamp_len: 0,
        same_length: false,
    })
}

/// The shape of `key`, or an error naming what it is needed for.
fn shape(source: &dyn TensorSource, key: &str, why: &str) -> Result<Vec<usize>> {
    source
        .meta(key)
        .map(|m| m.shape)
        .ok_or_else(|| anyhow!("{} has no tensor `{key}` ({why})", source.path().display()))
}

fn dim(shape: &[usize], axis: usize, key: &str, rank: usize) -> Result<u32> {
    if shape.len() != rank {
        bail!("tensor `{key}` has shape {shape:?}; expected {rank} dimensions");
    }
    u32::try_from(shape[axis]).map_err(|_| anyhow!("tensor `{key}` is too large"))
}

/// Hyper-parameters of a state_dict of the original code, from its tensor shapes and keys,
/// and `options` for the rest.
fn state_dict_config(source: &dyn TensorSource, options: &OriginalOptions) -> Result<Config> {
    let keys: BTreeSet<String> = source.keys().into_iter().collect();
    if keys
        .iter()
        .any(|k| k.starts_with("r_emb") || k.starts_with("r_bias"))
    {
        bail!("the state_dict holds r_emb / r_bias: only attn_type 0 (relative positional attention) is supported");
    }
    if keys.contains("out_layer.weight") || keys.contains("out_layer.bias") {
        bail!("the state_dict holds out_layer.*: the sampled softmax (sample_softmax > 0) is not supported");
    }
    let indexed = |prefix: &str| -> Vec<usize> {
        let mut found: BTreeSet<usize> = BTreeSet::new();
        for key in &keys {
            if let Some(rest) = key.strip_prefix(prefix) {
                if let Some(index) = rest.split('.').next().and_then(|i| i.parse().ok()) {
                    found.insert(index);
                }
            }
        }
        found.into_iter().collect()
    };
    let contiguous = |found: &[usize], what: &str| -> Result<u32> {
        if found.iter().enumerate().any(|(i, &n)| i != n) {
            bail!("the state_dict's {what} are not numbered 0, 1, 2, ...: {found:?}");
        }
        Ok(found.len() as u32)
    };
    let n_layer = contiguous(&indexed("layers."), "layers")?;
    let tables = contiguous(&indexed("word_emb.emb_layers."), "embedding tables")?;
    if n_layer == 0 {
        bail!("the state_dict has no layers.0.* tensors");
    }

    let emb0 = "word_emb.emb_layers.0.weight";
    let emb0_shape = shape(source, emb0, "the embedding")?;
    let d_embed = dim(&emb0_shape, 1, emb0, 2)?;
    let o_net = "layers.0.dec_attn.o_net.weight";
    let d_model = dim(&shape(source, o_net, "d_model")?, 0, o_net, 2)?;
    let untie_r = !keys.contains("r_w_bias");
    let bias_key = if untie_r {
        "layers.0.dec_attn.r_w_bias"
    } else {
        "r_w_bias"
    };
    let bias = shape(source, bias_key, "n_head and d_head")?;
    let (n_head, d_head) = (dim(&bias, 0, bias_key, 2)?, dim(&bias, 1, bias_key, 2)?);
    let ff = "layers.0.pos_ff.CoreNet.0.weight";
    let d_inner = dim(&shape(source, ff, "d_inner")?, 0, ff, 2)?;
    let n_clusters = match source.meta("crit.cluster_weight") {
        Some(meta) => dim(&meta.shape, 0, "crit.cluster_weight", 2)? as usize,
        None => 0,
    };

    let (n_token, div_val, cutoffs) = if tables > 1 {
        // One table per cluster: the cutoffs are the running sums of their rows, div_val
        // the ratio of the first two widths.
        let mut rows = Vec::new();
        let mut widths = Vec::new();
        for i in 0..tables {
            let key = format!("word_emb.emb_layers.{i}.weight");
            let s = shape(source, &key, "an embedding table")?;
            rows.push(dim(&s, 0, &key, 2)?);
            widths.push(dim(&s, 1, &key, 2)?);
        }
        let div_val = d_embed.checked_div(widths[1]).unwrap_or(0);
        let mut running = 0u32;
        let mut ends = Vec::new();
        for &r in &rows {
            running = running
                .checked_add(r)
                .ok_or_else(|| anyhow!("the embedding tables are too large"))?;
            ends.push(running);
        }
        let n_token = ends.pop().unwrap_or(0);
        if let Some(given) = options.cutoffs.as_ref().filter(|&given| *given != ends) {
            bail!("--cutoffs {given:?} is given, but the embedding tables' rows give cutoffs {ends:?}");
        }
        (n_token, div_val, ends)
    } else {
        let n_token = dim(&emb0_shape, 0, emb0, 2)?;
        let cutoffs = match (&options.cutoffs, n_clusters) {
            (Some(given), _) if given.len() != n_clusters => bail!(
                "--cutoffs {given:?} gives {} tail clusters, but crit.cluster_weight has {n_clusters} rows",
                given.len()
            ),
            (Some(given), _) => given.clone(),
            (None, 0) => Vec::new(),
            (None, n) => bail!(
                "the state_dict has an adaptive softmax with {n} tail cluster(s) and one embedding table \
                 (div_val 1), so its cutoffs are not in the tensor shapes: give them with --cutoffs \
                 (train.py sets them per dataset: --cutoffs 20000,40000,200000 for WikiText-103)"
            ),
        };
        (n_token, 1, cutoffs)
    };
    if cutoffs.len() != n_clusters {
        bail!(
            "the embedding has {} tail clusters, crit.cluster_weight {n_clusters}",
            cutoffs.len()
        );
    }

    let mut config = base_config(&cutoffs)?;
    config.n_token = n_token;
    config.d_model = d_model;
    config.d_embed = d_embed;
    config.n_head = n_head;
    config.d_head = d_head;
    config.d_inner = d_inner;
    config.n_layer = n_layer;
    config.div_val = div_val;
    config.untie_r = untie_r;
    config.pre_lnorm = options.pre_lnorm;
    config.layer_norm_epsilon = options.layer_norm_eps.unwrap_or(DEFAULT_LAYER_NORM_EPS) as f32;
    config.tgt_len = options.tgt_len.unwrap_or(DEFAULT_TGT_LEN);
    config.mem_len = options.mem_len.unwrap_or(DEFAULT_MEM_LEN);
    config.clamp_len = u32_of("clamp_len", options.clamp_len.unwrap_or(DEFAULT_CLAMP_LEN).max(0))?;
    config.same_length = options.same_length;
    Ok(config)
}

/// Settles `untie_r`, `tie_weight` and `tie_projs` from the tensors: a copy counts as tied
/// when it is absent or equal, bit for bit, to the embedding's.
fn settle_ties(config: &mut Config, source: &mut dyn TensorSource) -> Result<()> {
    config.untie_r = source.meta("r_w_bias").is_none();
    let same = |source: &mut dyn TensorSource, a: &str, b: &str| -> Result<bool> {
        match (source.meta(a), source.meta(b)) {
            (Some(_), None) => Ok(true),
            (Some(ma), Some(mb)) if ma.shape == mb.shape => {
                let x = source.read_f32(a)?;
                let y = source.read_f32(b)?;
                Ok(x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()))
            }
            _ => Ok(false),
        }
    };
    // The shapes are checked once the config is complete (by the resolver); here only which
    // copies are the same.
    let tables = config.n_emb_tables();
    let mut tie_weight = true;
    for i in 0..tables {
        tie_weight &= same(
            source,
            &format!("word_emb.emb_layers.{i}.weight"),
            &format!("crit.out_layers.{i}.weight"),
        )?;
    }
    config.tie_weight = tie_weight;
    let mut tie_projs = 0u32;
    if config.has_out_proj() {
        for cluster in 0..=config.n_clusters() {
            let table = config.emb_table_of_cluster(cluster);
            if same(
                source,
                &format!("word_emb.emb_projs.{table}"),
                &format!("crit.out_projs.{cluster}"),
            )? {
                tie_projs |= 1 << cluster;
            }
        }
    }
    config.tie_projs = tie_projs;
    Ok(())
}

/// Puts the original code's adaptive-softmax cluster rows in txl's order. The original
/// scores tail cluster `i` with the head's column `-i` (the last row of `cluster_weight` is
/// cluster 1); txl, like Hugging Face and the original TensorFlow code, with column
/// `cutoffs[0] + i - 1` (the first row is cluster 1). Reversing the rows makes one the other.
pub(crate) fn reverse_cluster_rows(config: &Config, tensors: &mut [(TensorName, Vec<f32>)]) {
    let d_embed = (config.d_embed as usize).max(1);
    for (name, data) in tensors {
        match name {
            TensorName::ClusterWeight => {
                let mut rows: Vec<&[f32]> = data.chunks(d_embed).collect();
                rows.reverse();
                *data = rows.concat();
            }
            TensorName::ClusterBias => data.reverse(),
            _ => {}
        }
    }
}

/// Validates a finished config as `parse_hf_config` does, naming the checkpoint.
fn validate(config: &Config, path: &Path) -> Result<()> {
    config.validate().map_err(|error| {
        let what = match error {
            ConfigError::TooLarge => " (too large)",
            _ => "",
        };
        anyhow!(error).context(format!(
            "{} describes a model that cannot be converted{what}",
            path.display()
        ))
    })?;
    let (parameters, image_bytes) = f32_image_bytes(config);
    if image_bytes > u64::from(u32::MAX) {
        bail!(
            "{} describes {parameters} parameters: {image_bytes} bytes as an f32 image, more than the {} a model image holds",
            path.display(),
            u32::MAX
        );
    }
    Ok(())
}

/// The state_dict at `path`, its keys seen without the further prefix they may sit under
/// (`module.`, from a model wrapped in `DataParallel`).
fn open_state_dict(path: &Path) -> Result<Unprefixed<TorchSource>> {
    let inner = TorchSource::open(path)?;
    let keys = inner.keys();
    let Some(prefix) = resolve::original_layout_prefix(keys.iter().map(String::as_str)) else {
        bail!(
            "{} holds no state_dict of the original code's layout (no key ends in `word_emb.emb_layers.0.weight` under one prefix)",
            path.display()
        );
    };
    Ok(Unprefixed { inner, prefix })
}

/// Reads an original-code checkpoint (`torch.save(model)` or its `state_dict`) at `path`:
/// the hyper-parameters from the pickled module's attributes, or from a state_dict's tensor
/// shapes and `options`; ties (`tie_weight`, `tie_projs`) where the copies are equal bit for
/// bit, `untie_r` where there is no shared `r_w_bias`; the cluster rows of the adaptive
/// softmax reversed into txl's (Hugging Face's) order. Refuses `attn_type` other than 0,
/// `ext_len > 0` and `sample_softmax > 0`, as [`super::parse_hf_config`] does.
pub fn load_original_checkpoint(
    path: &Path,
    kind: OriginalKind,
    options: &OriginalOptions,
    show_progress: bool,
) -> Result<Checkpoint> {
    let mut config = match kind {
        OriginalKind::WholeModule => {
            let Some(root) = saved_object(path)? else {
                bail!("{} is not a PyTorch file", path.display());
            };
            whole_module_config(&root, options).with_context(|| format!("in {}", path.display()))?
        }
        OriginalKind::StateDict => {
            let source = open_state_dict(path)?;
            state_dict_config(&source, options).with_context(|| format!("in {}", path.display()))?
        }
    };
    let mut source: Box<dyn TensorSource> = match kind {
        OriginalKind::WholeModule if !is_zip(path)? => {
            let allowed = |module: &str, name: &str| allowed_global(module, name);
            Box::new(LegacyModuleSource::open(path, &allowed)?)
        }
        OriginalKind::WholeModule => Box::new(TorchSource::open(path)?),
        OriginalKind::StateDict => Box::new(open_state_dict(path)?),
    };
    let source = source.as_mut();
    settle_ties(&mut config, source)?;
    validate(&config, path)?;
    let described_by = match kind {
        OriginalKind::WholeModule => "the pickled model",
        OriginalKind::StateDict => "the tensor shapes",
    };
    let mut resolved = resolve::resolve(&config, source, show_progress, described_by)?;
    reverse_cluster_rows(&config, &mut resolved.tensors);
    Ok(Checkpoint {
        config,
        tensors: resolved.tensors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_original_code_and_what_it_builds_is_allowed() {
        for (module, name) in [
            ("mem_transformer", "MemTransformerLM"),
            ("proj_adaptive_softmax", "ProjectedAdaptiveLogSoftmax"),
            ("torch.nn.modules.container", "ParameterList"),
            ("torch._utils", "_rebuild_tensor_v2"),
            ("torch", "HalfStorage"),
            ("torch.cuda", "FloatStorage"),
            ("torch.nn.backends.thnn", "_get_thnn_function_backend"),
            ("collections", "OrderedDict"),
        ] {
            assert!(allowed_global(module, name), "{module}.{name}");
        }
        for (module, name) in [
            ("os", "system"),
            ("builtins", "eval"),
            ("__main__", "MemTransformerLM"),
            ("mem_transformer", "os"),
            ("torch.nn.modules.activation", "GELU"),
            ("torch", "load"),
            ("torch", "Storage.__init__"),
        ] {
            assert!(!allowed_global(module, name), "{module}.{name}");
        }
    }

    #[test]
    fn a_pickle_naming_another_function_stops_at_its_name() {
        // PROTO 2, GLOBAL os.system, a string, TUPLE1, REDUCE, STOP: what a hostile file does.
        let pickle = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00lsq\x00\x85R.";
        let allowed = |module: &str, name: &str| allowed_global(module, name);
        let error = pickle_tree::read_pickle(pickle, 0, &allowed)
            .unwrap_err()
            .to_string();
        assert!(error.contains("`os.system`"), "{error}");
        // A truncated pickle and an unknown opcode are errors, not panics.
        assert!(pickle_tree::read_pickle(&pickle[..9], 0, &allowed).is_err());
        assert!(pickle_tree::read_pickle(b"\x80\x02\xff", 0, &allowed).is_err());
        assert!(pickle_tree::read_pickle(b"", 0, &allowed).is_err());
    }

    #[test]
    fn a_pickle_that_puts_a_container_inside_itself_is_refused() {
        let allowed = |module: &str, name: &str| allowed_global(module, name);
        // EMPTY_DICT, BINPUT 0, MARK, a key, BINGET 0, SETITEMS, STOP: `d = {}; d["k"] = d`.
        let dict = b"\x80\x02}q\x00(X\x01\x00\x00\x00kh\x00u.";
        // EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, STOP: `l = []; l.append(l)`.
        let list = b"\x80\x02]q\x00h\x00a.";
        for pickle in [&dict[..], &list[..]] {
            let error = pickle_tree::read_pickle(pickle, 0, &allowed)
                .unwrap_err()
                .to_string();
            assert!(error.contains("reference cycle"), "{error}");
        }
        // One list reached twice is shared, not a cycle: `l = []; [l, l]`.
        let shared = b"\x80\x02](]q\x00h\x00e.";
        let (value, _) = pickle_tree::read_pickle(shared, 0, &allowed).unwrap();
        assert_eq!(value.type_name(), "list");
    }

    #[test]
    fn a_deeply_nested_pickle_is_read_and_dropped_without_recursion() {
        // A million lists, each appended into the one below it, then STOP.
        let depth = 1_000_000;
        let mut pickle = b"\x80\x02".to_vec();
        pickle.extend(std::iter::repeat_n(b']', depth));
        pickle.extend(std::iter::repeat_n(b'a', depth - 1));
        pickle.push(b'.');
        let allowed = |module: &str, name: &str| allowed_global(module, name);
        let (value, end) = pickle_tree::read_pickle(&pickle, 0, &allowed).unwrap();
        assert_eq!(end, pickle.len());
        assert_eq!(value.type_name(), "list");
        drop(value);
    }
}

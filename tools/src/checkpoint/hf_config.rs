//! `config.json` of a Hugging Face TransfoXL checkpoint to a [`Config`]; the field names,
//! defaults and refusals are documented on [`parse_hf_config`].

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
use txl_core::config::{Config, MAX_CUTOFFS};
use txl_core::image::{CRC_BYTES, ENTRY_BYTES, HEADER_BYTES, PAYLOAD_ALIGN};
use txl_core::tensors::for_each_tensor;
use txl_core::ConfigError;

/// `TransfoXLConfig`'s defaults for the optional fields.
const DEFAULT_MEM_LEN: i64 = 1600;
const DEFAULT_CLAMP_LEN: i64 = 1000;
const DEFAULT_TGT_LEN: i64 = 128;
const DEFAULT_LAYER_NORM_EPSILON: f64 = 1e-5;

/// Parses the text of a TransfoXL `config.json` into a validated [`Config`].
///
/// Both generations of field names are read: the original ones (`n_token`, `tie_weight`,
/// `tie_projs`) that the converted checkpoints on the Hub carry, and those later versions of
/// `transformers` write (`vocab_size`, `tie_word_embeddings`; `hidden_size`,
/// `num_attention_heads` and `num_hidden_layers` are accepted as the aliases `transformers`
/// maps to `d_model`, `n_head` and `n_layer`). When two spellings of one field are both
/// present they must agree.
///
/// The model's sizes are required: `vocab_size` / `n_token`, `d_model`, `d_embed`, `n_head`,
/// `d_head`, `d_inner`, `n_layer`, `cutoffs` and `div_val`. A missing size is an error rather
/// than `transformers`' default (its defaults describe the 18-layer WT103 model, which a
/// config lacking the field is unlikely to be).
///
/// Everything else falls back to `TransfoXLConfig`'s defaults when missing (or `null`):
///
/// | field | default |
/// |---|---|
/// | `tie_word_embeddings` / `tie_weight` | `true` |
/// | `tie_projs` | from `proj_share_all_but_first` (default `true`): `[false, true, true, ...]`, else all `false` |
/// | `pre_lnorm` | `false` |
/// | `untie_r` | `true` |
/// | `same_length` | `true` |
/// | `mem_len` | 1600 |
/// | `clamp_len` | 1000 (any value `<= 0` means no clamping and is stored as 0) |
/// | `tgt_len` | 128 (not a `transformers` field; the original code's evaluation default) |
/// | `layer_norm_epsilon` | 1e-5 |
///
/// `tie_projs` shorter than `n_cutoffs + 1` is padded with `false` (as `transformers`, which
/// ties only the entries listed); extra entries must be `false` (`transformers` would fail
/// tying a projection that does not exist).
///
/// Refused: `attn_type` other than 0 (only relative positional attention is implemented),
/// `sample_softmax > 0`, `ext_len > 0`, a `model_type` other than `transfo-xl`, any config
/// [`Config::validate`] rejects, and one whose f32 image would be larger than a model image
/// can be (4 GiB): the sizes are checked before any weight is read, so a config that claims a
/// huge model next to a small weights file fails here, naming them.
pub fn parse_hf_config(json: &str) -> Result<Config> {
    let value: Value = serde_json::from_str(json).context("config.json is not valid JSON")?;
    let Some(object) = value.as_object() else {
        bail!("config.json must hold a JSON object");
    };
    let fields = Fields(object);

    if let Some((_, model_type)) = fields.get(&["model_type"])? {
        match model_type.as_str() {
            Some("transfo-xl") => {}
            Some(other) => bail!("config.json describes a `{other}` model, not `transfo-xl`"),
            None => bail!("`model_type` must be a string, found {model_type}"),
        }
    }
    let attn_type = fields.int_or(&["attn_type"], 0)?;
    if attn_type != 0 {
        bail!(
            "only attn_type 0 (relative positional attention) is supported; config.json has attn_type {attn_type}"
        );
    }
    let sample_softmax = fields.int_or(&["sample_softmax"], -1)?;
    if sample_softmax > 0 {
        bail!("sample_softmax = {sample_softmax}: the sampled softmax is not supported (it must be <= 0)");
    }
    let ext_len = fields.int_or(&["ext_len"], 0)?;
    if ext_len > 0 {
        bail!("ext_len = {ext_len}: extended context is not supported (it must be 0)");
    }

    let n_token = fields.required_u32(&["vocab_size", "n_token"])?;
    let d_model = fields.required_u32(&["d_model", "hidden_size"])?;
    let d_embed = fields.required_u32(&["d_embed"])?;
    let n_head = fields.required_u32(&["n_head", "num_attention_heads"])?;
    let d_head = fields.required_u32(&["d_head"])?;
    let d_inner = fields.required_u32(&["d_inner"])?;
    let n_layer = fields.required_u32(&["n_layer", "num_hidden_layers"])?;
    let div_val = fields.required_u32(&["div_val"])?;

    let Some((_, cutoff_list)) = fields.get(&["cutoffs"])? else {
        bail!("config.json has no `cutoffs` (use [] for a full softmax)");
    };
    let Some(cutoff_list) = cutoff_list.as_array() else {
        bail!("`cutoffs` must be a list of integers, found {cutoff_list}");
    };
    if cutoff_list.len() > MAX_CUTOFFS {
        bail!(
            "`cutoffs` has {} entries; at most {MAX_CUTOFFS} are supported",
            cutoff_list.len()
        );
    }
    let mut cutoffs = [0u32; MAX_CUTOFFS];
    for (slot, value) in cutoffs.iter_mut().zip(cutoff_list) {
        *slot = as_u32("cutoffs", value)?;
    }
    let n_cutoffs = cutoff_list.len() as u32;

    let tie_weight = fields.bool_or(&["tie_word_embeddings", "tie_weight"], true)?;
    let tie_projs = match fields.get(&["tie_projs"])? {
        Some((_, list)) => {
            let Some(list) = list.as_array() else {
                bail!("`tie_projs` must be a list of booleans, found {list}");
            };
            let mut bits = 0u32;
            for (i, entry) in list.iter().enumerate() {
                let Some(tied) = entry.as_bool() else {
                    bail!("`tie_projs` must be a list of booleans, found {entry} at index {i}");
                };
                if tied && i > n_cutoffs as usize {
                    bail!(
                        "`tie_projs[{i}]` is true but there are only {} output projections (one per cutoff plus one)",
                        n_cutoffs + 1
                    );
                }
                if tied {
                    bits |= 1 << i;
                }
            }
            bits
        }
        None => {
            if fields.bool_or(&["proj_share_all_but_first"], true)? {
                // [false, true, true, ...]: every projection but the head's is shared.
                ((1u32 << (n_cutoffs + 1)) - 1) & !1
            } else {
                0
            }
        }
    };

    let mem_len = fields.int_or(&["mem_len"], DEFAULT_MEM_LEN)?;
    let clamp_len = fields.int_or(&["clamp_len"], DEFAULT_CLAMP_LEN)?.max(0);
    let tgt_len = fields.int_or(&["tgt_len"], DEFAULT_TGT_LEN)?;
    let layer_norm_epsilon = fields.float_or(&["layer_norm_epsilon"], DEFAULT_LAYER_NORM_EPSILON)? as f32;

    let config = Config {
        n_token,
        d_model,
        d_embed,
        n_head,
        d_head,
        d_inner,
        n_layer,
        cutoffs,
        n_cutoffs,
        div_val,
        tie_weight,
        tie_projs,
        pre_lnorm: fields.bool_or(&["pre_lnorm"], false)?,
        untie_r: fields.bool_or(&["untie_r"], true)?,
        layer_norm_epsilon,
        tgt_len: int_to_u32("tgt_len", tgt_len)?,
        mem_len: int_to_u32("mem_len", mem_len)?,
        clamp_len: int_to_u32("clamp_len", clamp_len)?,
        same_length: fields.bool_or(&["same_length"], true)?,
    };
    config.validate().map_err(|error| {
        let sizes = match error {
            ConfigError::TooLarge => format!(" ({})", sizes(&config)),
            _ => String::new(),
        };
        anyhow!(error).context(format!(
            "config.json describes a model that cannot be converted{sizes}"
        ))
    })?;
    // Checked before any weight is read: converting keeps every tensor in f32 and writes an
    // f32 image, whose sizes are u32.
    let (parameters, image_bytes) = f32_image_bytes(&config);
    if image_bytes > u64::from(u32::MAX) {
        bail!(
            "config.json describes {parameters} parameters ({}): {image_bytes} bytes as an f32 image, \
             more than the {} a model image holds",
            sizes(&config),
            u32::MAX
        );
    }
    Ok(config)
}

/// The sizes that make a model large, for error messages.
fn sizes(config: &Config) -> String {
    format!(
        "n_token {}, d_embed {}, d_model {}, n_head {} x d_head {}, d_inner {}, n_layer {}",
        config.n_token,
        config.d_embed,
        config.d_model,
        config.n_head,
        config.d_head,
        config.d_inner,
        config.n_layer
    )
}

/// The parameters of a valid `config`, and the bytes of its image with f32 weights (header,
/// directory, each tensor 16-byte aligned, CRC; as `txl_core::image::write_image` lays it out).
pub(crate) fn f32_image_bytes(config: &Config) -> (u64, u64) {
    let align = |n: u64| n.div_ceil(PAYLOAD_ALIGN as u64) * PAYLOAD_ALIGN as u64;
    let (mut parameters, mut tensors, mut payload) = (0u64, 0u64, 0u64);
    for_each_tensor(config, |_, shape| {
        let elements = shape.len() as u64;
        parameters += elements;
        tensors += 1;
        payload += align(elements * 4);
    });
    let directory = align(HEADER_BYTES as u64 + tensors * ENTRY_BYTES as u64);
    (parameters, directory + payload + CRC_BYTES as u64)
}

/// The JSON object, with lookups that accept several spellings of one field.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    /// The value under the first of `names` present (a `null` counts as absent); every other
    /// spelling present must hold the same value.
    fn get(&self, names: &[&'static str]) -> Result<Option<(&'static str, &Value)>> {
        let mut found: Option<(&'static str, &Value)> = None;
        for &name in names {
            let Some(value) = self.0.get(name).filter(|v| !v.is_null()) else {
                continue;
            };
            match found {
                Some((first, first_value)) if first_value != value => bail!(
                    "config.json has both `{first}` = {first_value} and `{name}` = {value}; they must agree"
                ),
                Some(_) => {}
                None => found = Some((name, value)),
            }
        }
        Ok(found)
    }

    fn required_u32(&self, names: &[&'static str]) -> Result<u32> {
        match self.get(names)? {
            Some((name, value)) => as_u32(name, value),
            None => bail!("config.json has no `{}`", names.join("` or `")),
        }
    }

    fn int_or(&self, names: &[&'static str], default: i64) -> Result<i64> {
        match self.get(names)? {
            Some((name, value)) => value
                .as_i64()
                .ok_or_else(|| anyhow!("`{name}` must be an integer, found {value}")),
            None => Ok(default),
        }
    }

    fn bool_or(&self, names: &[&'static str], default: bool) -> Result<bool> {
        match self.get(names)? {
            Some((name, value)) => value
                .as_bool()
                .ok_or_else(|| anyhow!("`{name}` must be true or false, found {value}")),
            None => Ok(default),
        }
    }

    fn float_or(&self, names: &[&'static str], default: f64) -> Result<f64> {
        match self.get(names)? {
            Some((name, value)) => value
                .as_f64()
                .ok_or_else(|| anyhow!("`{name}` must be a number, found {value}")),
            None => Ok(default),
        }
    }
}

fn as_u32(name: &str, value: &Value) -> Result<u32> {
    let Some(int) = value.as_i64() else {
        bail!("`{name}` must be an integer, found {value}");
    };
    int_to_u32(name, int)
}

fn int_to_u32(name: &str, value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|_| anyhow!("`{name}` must be between 0 and {}, found {value}", u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The converted WT103 checkpoint's config.json (old field names), trimmed of fields the
    /// parser ignores.
    const WT103_OLD: &str = r#"{
        "adaptive": true, "attn_type": 0, "clamp_len": 1000,
        "cutoffs": [20000, 40000, 200000], "d_embed": 1024, "d_head": 64, "d_inner": 4096,
        "d_model": 1024, "div_val": 4, "dropatt": 0.0, "dropout": 0.1, "ext_len": 0,
        "init": "normal", "init_range": 0.01, "init_std": 0.02, "mem_len": 1600,
        "n_head": 16, "n_layer": 18, "n_token": 267735, "pre_lnorm": false,
        "proj_init_std": 0.01, "same_length": true, "sample_softmax": -1, "tgt_len": 128,
        "tie_projs": [false, true, true, true], "tie_weight": true, "untie_r": true
    }"#;

    fn tiny(extra: &str) -> String {
        format!(
            r#"{{"vocab_size": 20, "d_model": 8, "d_embed": 8, "n_head": 2, "d_head": 4,
                "d_inner": 16, "n_layer": 2, "cutoffs": [8], "div_val": 2{extra}}}"#
        )
    }

    fn error_of(json: &str) -> String {
        format!(
            "{:#}",
            parse_hf_config(json).expect_err("config should be refused")
        )
    }

    #[test]
    fn reads_the_old_field_names() {
        let config = parse_hf_config(WT103_OLD).unwrap();
        assert_eq!(config.n_token, 267_735);
        assert_eq!(
            (config.d_model, config.d_embed, config.n_head, config.d_head),
            (1024, 1024, 16, 64)
        );
        assert_eq!((config.d_inner, config.n_layer, config.div_val), (4096, 18, 4));
        assert_eq!(config.cutoffs(), &[20000, 40000, 200_000]);
        assert!(config.tie_weight);
        assert_eq!(config.tie_projs, 0b1110);
        assert!(!config.pre_lnorm && config.untie_r && config.same_length);
        assert_eq!(
            (config.tgt_len, config.mem_len, config.clamp_len),
            (128, 1600, 1000)
        );
        assert_eq!(config.layer_norm_epsilon, 1e-5);
    }

    #[test]
    fn reads_the_new_field_names() {
        let json = r#"{
            "model_type": "transfo-xl", "vocab_size": 100, "cutoffs": [10, 50],
            "hidden_size": 16, "d_embed": 32, "num_attention_heads": 2, "d_head": 8,
            "d_inner": 64, "div_val": 1, "num_hidden_layers": 3, "tie_word_embeddings": false,
            "proj_share_all_but_first": false, "untie_r": false, "pre_lnorm": true,
            "same_length": false, "clamp_len": -1, "mem_len": 0, "layer_norm_epsilon": 1e-6
        }"#;
        let config = parse_hf_config(json).unwrap();
        assert_eq!(
            (config.n_token, config.d_model, config.n_head, config.n_layer),
            (100, 16, 2, 3)
        );
        assert_eq!(config.cutoffs(), &[10, 50]);
        assert!(!config.tie_weight && !config.untie_r && config.pre_lnorm && !config.same_length);
        assert_eq!(config.tie_projs, 0);
        assert_eq!((config.clamp_len, config.mem_len, config.tgt_len), (0, 0, 128));
        assert_eq!(config.layer_norm_epsilon, 1e-6);
    }

    #[test]
    fn fills_transformers_defaults() {
        let config = parse_hf_config(&tiny("")).unwrap();
        assert!(config.tie_weight);
        assert_eq!(
            config.tie_projs, 0b10,
            "proj_share_all_but_first defaults to true"
        );
        assert!(!config.pre_lnorm && config.untie_r && config.same_length);
        assert_eq!(
            (config.tgt_len, config.mem_len, config.clamp_len),
            (128, 1600, 1000)
        );
        assert_eq!(config.layer_norm_epsilon, 1e-5);
        // null counts as absent
        let config = parse_hf_config(&tiny(r#", "untie_r": null, "tie_projs": null"#)).unwrap();
        assert!(config.untie_r);
        assert_eq!(config.tie_projs, 0b10);
    }

    #[test]
    fn tie_projs_is_padded_and_checked() {
        assert_eq!(
            parse_hf_config(&tiny(r#", "tie_projs": [false]"#))
                .unwrap()
                .tie_projs,
            0
        );
        assert_eq!(
            parse_hf_config(&tiny(r#", "tie_projs": [true, true]"#))
                .unwrap()
                .tie_projs,
            0b11
        );
        assert_eq!(
            parse_hf_config(&tiny(r#", "tie_projs": [false, true, false, false]"#))
                .unwrap()
                .tie_projs,
            0b10
        );
        assert!(error_of(&tiny(r#", "tie_projs": [false, true, true]"#)).contains("tie_projs[2]"));
        assert!(error_of(&tiny(r#", "tie_projs": [0, 1]"#)).contains("tie_projs"));
        let full_softmax = tiny("").replace("[8]", "[]");
        let config = parse_hf_config(&full_softmax).unwrap();
        assert_eq!((config.n_cutoffs, config.tie_projs), (0, 0));
    }

    #[test]
    fn explicit_tie_projs_wins_over_proj_share_all_but_first() {
        let json = tiny(r#", "proj_share_all_but_first": true, "tie_projs": [false, false]"#);
        assert_eq!(parse_hf_config(&json).unwrap().tie_projs, 0);
    }

    #[test]
    fn refuses_other_attention_and_softmax_variants() {
        let message = error_of(&tiny(r#", "attn_type": 2"#));
        assert!(
            message.contains("only attn_type 0 (relative positional attention) is supported"),
            "{message}"
        );
        assert!(error_of(&tiny(r#", "sample_softmax": 8192"#)).contains("sample_softmax"));
        assert!(error_of(&tiny(r#", "ext_len": 4"#)).contains("ext_len"));
        assert!(error_of(&tiny(r#", "model_type": "gpt2""#)).contains("gpt2"));
        parse_hf_config(&tiny(r#", "sample_softmax": -1, "ext_len": 0, "attn_type": 0"#)).unwrap();
    }

    #[test]
    fn names_each_missing_size() {
        for (field, message) in [
            ("\"vocab_size\": 20, ", "`vocab_size` or `n_token`"),
            ("\"d_model\": 8, ", "`d_model` or `hidden_size`"),
            ("\"d_embed\": 8, ", "`d_embed`"),
            ("\"n_head\": 2, ", "`n_head` or `num_attention_heads`"),
            ("\"d_head\": 4,", "`d_head`"),
            ("\"d_inner\": 16, ", "`d_inner`"),
            ("\"n_layer\": 2, ", "`n_layer` or `num_hidden_layers`"),
            ("\"cutoffs\": [8], ", "`cutoffs`"),
            (", \"div_val\": 2", "`div_val`"),
        ] {
            let json = tiny("");
            assert!(json.contains(field), "{field}");
            let error = error_of(&json.replacen(field, "", 1));
            assert!(error.contains(message), "{field}: {error}");
        }
    }

    #[test]
    fn refuses_wrong_types_naming_the_field() {
        for (extra, field) in [
            (r#", "untie_r": 1"#, "untie_r"),
            (r#", "same_length": "yes""#, "same_length"),
            (r#", "mem_len": 16.5"#, "mem_len"),
            (r#", "mem_len": -3"#, "mem_len"),
            (r#", "tgt_len": -1"#, "tgt_len"),
            (r#", "layer_norm_epsilon": "small""#, "layer_norm_epsilon"),
            (r#", "tie_projs": true"#, "tie_projs"),
            (r#", "attn_type": "0""#, "attn_type"),
        ] {
            let error = error_of(&tiny(extra));
            assert!(error.contains(field), "{extra}: {error}");
        }
        assert!(error_of(&tiny("").replace("\"d_head\": 4", "\"d_head\": 4.0")).contains("d_head"));
        assert!(error_of(&tiny("").replace("[8]", "[\"8\"]")).contains("cutoffs"));
        assert!(error_of(&tiny("").replace("[8]", "8")).contains("cutoffs"));
        assert!(error_of(&tiny("").replace("\"n_layer\": 2", "\"n_layer\": 5000000000")).contains("n_layer"));
        assert!(error_of("[1, 2]").contains("object"));
        assert!(error_of("{").contains("JSON"));
    }

    #[test]
    fn disagreeing_spellings_are_refused() {
        assert!(error_of(&tiny(r#", "n_token": 21"#)).contains("n_token"));
        parse_hf_config(&tiny(r#", "n_token": 20"#)).unwrap();
        let error = error_of(&tiny(r#", "tie_weight": false, "tie_word_embeddings": true"#));
        assert!(error.contains("tie_weight"), "{error}");
        assert!(
            !parse_hf_config(&tiny(r#", "tie_weight": false"#))
                .unwrap()
                .tie_weight
        );
    }

    #[test]
    fn invalid_models_are_refused_by_validate() {
        assert!(error_of(&tiny("").replace("[8]", "[30]")).contains("cutoffs"));
        assert!(error_of(&tiny("").replace("\"d_model\": 8", "\"d_model\": 7")).contains("d_model"));
        assert!(error_of(&tiny("").replace("\"d_embed\": 8", "\"d_embed\": 1")).contains("d_embed"));
        assert!(error_of(&tiny(r#", "tgt_len": 0"#)).contains("zero"));
        assert!(error_of(&tiny(r#", "layer_norm_epsilon": 0.0"#)).contains("epsilon"));
        assert!(error_of(&tiny("").replace("[8]", "[1,2,3,4,5,6,7,8,9]")).contains("at most 8"));
    }
}

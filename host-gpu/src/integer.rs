//! Integer-only Transformer-XL, plainly written: one stream, a segment at a time, layer by layer,
//! every product and sum in integers with the fixed-point operations of `txl_core::fixed_point`
//! and `txl_core::integer`. It defines the arithmetic of the integer mode and measures what it
//! costs in accuracy against the f64 reference ([`IntegerModel::score`]). Every parameter comes
//! from the image's own values by integer operations on their bits (`docs/INTEGER.md`); the one
//! number calibration adds is `frac`.
//!
//! ## Formats
//! One fixed-point format `Q(frac)` for every activation of the model (the residual stream,
//! LayerNorm outputs, projections, the feed-forward's hidden row, logits and log-probabilities):
//! `frac` comes from calibration ([`IntegerModel::frac_for`]), so that eight times the largest
//! `|x|` seen at any linear layer's input still fits an `i32`.
//!
//! | value | stored as | scale |
//! |---|---|---|
//! | weights | int8, or int4 with a multiplier per group of columns | a [`Multiplier`] per row (the image's f32 row scale, exactly; int4: the matrix's) |
//! | a linear layer's input | int8, per position: `round(x · 127 / max|x|)` | `max|x| / 127`, a [`Multiplier`] |
//! | its output | `acc` rescaled by row scale × step ([`Scale16::times`], [`txl_core::fixed_point::Rescale::apply`]) | `Q(frac)` |
//! | biases, `u`, `v` | `i32` | `Q(frac)` |
//! | LayerNorm gain | its magnitude to 16 bits and its sign | a [`Scale16`] |
//! | keys, values, position keys | int8 per position and head, `round(x / 2^e)` | `2^e` (`e ≥ 0`, `Q(frac)` units) |
//! | queries `q + u`, `q + v` | 16 bits per head, `round(x / 2^e)`, `|·| ≤ 2^31 / 127 / d_head` | `2^e` |
//! | scores | `i32` | `Q20` nats |
//! | probabilities | `u16` | `Q15`, at most `32767` |
//! | position embeddings | `sin`, `cos` of the phase `d · f` in turns (`u32`, wrapping) | `Q(frac)` |
//!
//! Powers of two for the cached keys and values make each key's scale a shift: the score of a
//! key is one dot product, one shift and one 32 × 32 → 64-bit product; each value's scale
//! folds into its 16-bit probability by a shift.

use txl_core::fixed_point::{
    cos_turns, fixed_of_f32, fixed_of_f32_wide, isqrt, multiplier_of_f32, position_frequency, round_shift,
    sin_turns, Multiplier, Scale16,
};
use txl_core::integer::{
    act_rescale, act_top, attention_score, layer_norm, log_softmax, pow2_exponent, rescale_wide,
    signed_scale, softmax_q15, Int8Steps, LayerNormParams, SignedScale, ACT_SHIFT,
};
use txl_core::weights::{
    int4_groups, int4_multiplier, int4_row_bytes, int4_value, Matrix, MatrixData, Vector,
};
use txl_core::{Config, MemInit, Model, SessionOptions};

use crate::cpu::attention::Window;
use crate::error::Error;
use crate::statistics::ChannelRanges;

pub use txl_core::integer::SCORE_FRAC;

/// Int8 weights, or int4 with a multiplier per group of columns.
#[derive(Clone, Debug)]
enum Values {
    Int8(Vec<i8>),
    Int4 {
        /// Packed rows of `int4_row_bytes(cols)` bytes.
        values: Vec<u8>,
        /// Each row's groups' multiplier codes.
        codes: Vec<u8>,
        /// Columns per group.
        group: usize,
    },
}

/// A matrix of int8 or int4 weights with a [`Multiplier`] per row (int4: the matrix's scale on
/// every row).
#[derive(Clone, Debug)]
struct Linear8 {
    rows: usize,
    cols: usize,
    values: Values,
    row_scales: Vec<Multiplier>,
    /// The row scales to 16 significant bits, as the rows' outputs are rescaled.
    row_scales16: Vec<Scale16>,
    /// Per input column, when the image migrated activation scales into the weights: as the
    /// inputs are scaled, and as multipliers (an embedding row's columns).
    act_scales: Option<Vec<Scale16>>,
    act_multipliers: Option<Vec<Multiplier>>,
}

/// The multiplier an f32 scale is (exactly, from its bits), or an error naming it.
fn multiplier(value: f32, what: &str) -> Result<Multiplier, Error> {
    multiplier_of_f32(value)
        .ok_or_else(|| Error::BadOptions(format!("{what}: {value} has no fixed-point multiplier")))
}

impl Linear8 {
    fn new(m: Matrix<'_>, what: &str) -> Result<Linear8, Error> {
        let (values, row_scales, act_scales) = match m.data {
            MatrixData::Int8 {
                values,
                row_scales,
                act_scales,
            } => {
                let row_scales = row_scales
                    .iter()
                    .map(|&s| multiplier(s, what))
                    .collect::<Result<_, _>>()?;
                let act_scales = match act_scales {
                    Some(scales) => Some(
                        scales
                            .iter()
                            .map(|&s| multiplier(s, what))
                            .collect::<Result<Vec<_>, _>>()?,
                    ),
                    None => None,
                };
                (
                    Values::Int8(values[..m.rows * m.cols].to_vec()),
                    row_scales,
                    act_scales,
                )
            }
            MatrixData::Int4 {
                values,
                scale,
                codes,
                group,
            } => {
                let scale = multiplier(scale, what)?;
                let values = Values::Int4 {
                    values: values.to_vec(),
                    codes: codes.to_vec(),
                    group,
                };
                (values, vec![scale; m.rows], None)
            }
            _ => {
                return Err(Error::BadOptions(format!(
                    "integer arithmetic needs int8 or int4 weights; {what} is neither"
                )))
            }
        };
        let row_scales16 = match m.data {
            MatrixData::Int8 { row_scales, .. } => row_scales.iter().map(|&s| Scale16::of_f32(s)).collect(),
            MatrixData::Int4 { scale, .. } => vec![Scale16::of_f32(scale); m.rows],
            _ => Vec::new(),
        };
        let act_scales16 = match m.data {
            MatrixData::Int8 {
                act_scales: Some(scales),
                ..
            } => Some(scales.iter().map(|&s| Scale16::of_f32(s)).collect()),
            _ => None,
        };
        Ok(Linear8 {
            rows: m.rows,
            cols: m.cols,
            values,
            row_scales,
            row_scales16,
            act_scales: act_scales16,
            act_multipliers: act_scales,
        })
    }

    /// Row `r` of int8 weights (`None` for int4).
    fn int8_row(&self, r: usize) -> Option<&[i8]> {
        match &self.values {
            Values::Int8(values) => Some(&values[r * self.cols..(r + 1) * self.cols]),
            Values::Int4 { .. } => None,
        }
    }

    /// `row r · q`: an i32 sum for int8 weights, for int4 each group's i32 sum times its
    /// multiplier, summed in i64.
    fn row_sum(&self, r: usize, q: &[i8]) -> i64 {
        match &self.values {
            Values::Int8(values) => {
                let row = &values[r * self.cols..(r + 1) * self.cols];
                row.iter().zip(q).map(|(&w, &x)| w as i32 * x as i32).sum::<i32>() as i64
            }
            Values::Int4 { values, codes, group } => {
                let row_bytes = int4_row_bytes(self.cols);
                let row = &values[r * row_bytes..(r + 1) * row_bytes];
                let groups = int4_groups(self.cols, *group);
                let codes = &codes[r * groups..(r + 1) * groups];
                codes
                    .iter()
                    .enumerate()
                    .map(|(g, &code)| {
                        let columns = g * group..((g + 1) * group).min(self.cols);
                        let sum: i32 = columns.map(|c| int4_value(row, c) as i32 * q[c] as i32).sum();
                        int4_multiplier(code) as i64 * sum as i64
                    })
                    .sum()
            }
        }
    }

    /// `y = W x` for `x` in `Q(frac)` (`cols` values), `y` in `Q(frac)` times `extra`: the input
    /// (times the activation scales, if any) quantized to int8 per call, the row sums exact,
    /// each rescaled by its row's scale times the input's step; an int4 row's i64 sum is first
    /// cut to 31 bits.
    fn matvec(&self, x: &[i32], extra: Scale16, y: &mut [i32]) {
        self.matvec_rows(0..self.rows, x, extra, y);
    }

    /// [`Linear8::matvec`] for the rows `rows` alone, into `y` (one value per row).
    fn matvec_rows(&self, rows: std::ops::Range<usize>, x: &[i32], extra: Scale16, y: &mut [i32]) {
        let x = &x[..self.cols];
        // each column times its activation scale, against the largest scale's power of two
        let (wide, times): (Vec<i64>, i32) = match &self.act_scales {
            Some(scales) => {
                let top = act_top(scales.iter().copied());
                let scaled = x
                    .iter()
                    .zip(scales)
                    .map(|(&v, &a)| act_rescale(a, top).apply(v) as i64);
                (scaled.collect(), top + ACT_SHIFT)
            }
            None => (x.iter().map(|&v| v as i64).collect(), 0),
        };
        let (q, step) = quantize_int8(&wide);
        let step = step.times_pow2(times).product(extra);
        for (r, y) in rows.zip(y.iter_mut()) {
            *y = rescale_wide(self.row_scales16[r].times(step), self.row_sum(r, &q));
        }
    }

    /// `y = xᵀ W` for `x` in `Q(frac)` (`rows` values), `y` in `Q(frac)` (`cols` values): each
    /// input times its row's scale (and `2^8`, for precision), quantized to int8, the sums
    /// in i32 down the columns.
    fn vecmat(&self, x: &[i32], y: &mut [i32]) {
        let wide: Vec<i64> = x
            .iter()
            .zip(&self.row_scales)
            .map(|(&v, s)| s.times_pow2(8).unwrap_or(SATURATED).apply_wide(v))
            .collect();
        let (q, step) = quantize_int8(&wide);
        let rescale = step.times_pow2(-8).rescale();
        for (c, y) in y.iter_mut().enumerate().take(self.cols) {
            let acc: i32 = (0..self.rows)
                .map(|r| self.int8_row(r).map_or(0, |row| row[c] as i32 * q[r] as i32))
                .sum();
            *y = rescale.apply(acc);
        }
    }
}

/// The largest multiplier: where a product of multipliers passes `2^31`, results saturate.
const SATURATED: Multiplier = Multiplier {
    mantissa: i32::MAX,
    shift: 0,
};

/// `a · b`, saturating.
fn product(a: Multiplier, b: Multiplier) -> Multiplier {
    a.times(b).unwrap_or(SATURATED)
}

/// `x` quantized to int8, `round(x · 127 / m)` with `m = max|x|` ([`Int8Steps`]), and what
/// one int8 step is worth in `x`'s units (`m / 127`).
fn quantize_int8(x: &[i64]) -> (Vec<i8>, Scale16) {
    let largest = x.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0);
    match Int8Steps::new(largest) {
        Some(steps) => (x.iter().map(|&v| steps.quantize(v)).collect(), steps.step),
        None => (vec![0; x.len()], Scale16::ZERO),
    }
}

/// `x` as `round(x / 2^e)` with the smallest `e ≥ 0` that keeps every value within `limit`.
fn quantize_pow2(x: &[i32], limit: i64) -> (Vec<i32>, i32) {
    let e = pow2_exponent(x, limit);
    (x.iter().map(|&v| round_shift(v as i64, e) as i32).collect(), e)
}

/// A vector in `Q(frac)`, each value rounded (halves away from zero) and saturated.
fn fixed_vector(v: Vector<'_>, frac: u32) -> Vec<i32> {
    v.iter().map(|x| fixed_of_f32(x, frac)).collect()
}

/// A LayerNorm's parameters in fixed point.
#[derive(Clone, Debug)]
struct Norm {
    gain: Vec<SignedScale>,
    bias: Vec<i32>,
    epsilon: u64,
}

impl Norm {
    fn new(gain: Vector<'_>, bias: Vector<'_>, eps: f32, frac: u32) -> Norm {
        Norm {
            gain: gain.iter().map(signed_scale).collect(),
            bias: fixed_vector(bias, frac),
            epsilon: fixed_of_f32_wide(eps, 2 * frac).max(0) as u64,
        }
    }

    fn apply(&self, x: &[i32], frac: u32, out: &mut [i32]) {
        let params = LayerNormParams {
            gain: &self.gain,
            bias: &self.bias,
            epsilon: self.epsilon,
        };
        layer_norm(x, &params, frac, out);
    }
}

#[derive(Clone, Debug)]
struct Layer {
    r_w_bias: Vec<i32>,
    r_r_bias: Vec<i32>,
    qkv: Linear8,
    r_net: Linear8,
    o_net: Linear8,
    attn_norm: Norm,
    ff1: Linear8,
    ff1_bias: Vec<i32>,
    ff2: Linear8,
    ff2_bias: Vec<i32>,
    ff_norm: Norm,
}

/// A model's weights with every fixed-point parameter the integer arithmetic needs.
#[derive(Clone, Debug)]
pub struct IntegerModel {
    config: Config,
    frac: u32,
    /// Per embedding table: its rows, with `row scale · 2^frac` (times `sqrt(d_model)` without
    /// projections) as each row's multiplier.
    emb_layers: Vec<Linear8>,
    emb_row_scales: Vec<Vec<Multiplier>>,
    emb_projs: Vec<Linear8>,
    /// `sqrt(d_model)`.
    emb_scale: Multiplier,
    layers: Vec<Layer>,
    out_weights: Vec<Linear8>,
    out_biases: Vec<Vec<i32>>,
    out_projs: Vec<Linear8>,
    cluster_weight: Option<Linear8>,
    cluster_bias: Vec<i32>,
    /// Turns per position of each frequency of the position embeddings.
    frequencies: Vec<u32>,
    /// `1 / sqrt(d_head)`, computed in integers.
    inv_sqrt_d_head: Multiplier,
}

/// What [`IntegerModel::score`] gives: `ln p` of each next token in `Q(frac)`.
#[derive(Clone, Debug)]
pub struct IntegerScores {
    /// The fraction bits of `log_probs`.
    pub frac: u32,
    /// `ln p(tokens[i + 1] | tokens[..=i])` for each `i`.
    pub log_probs: Vec<i32>,
}

impl IntegerScores {
    /// The log-probabilities as reals.
    pub fn ln_p(&self) -> impl Iterator<Item = f64> + '_ {
        let step = (0.5f64).powi(self.frac as i32);
        self.log_probs.iter().map(move |&v| v as f64 * step)
    }

    /// Bits per token: `-Σ ln p / (n ln 2)`.
    pub fn bits_per_token(&self) -> f64 {
        let n = self.log_probs.len().max(1) as f64;
        -self.ln_p().sum::<f64>() / (n * std::f64::consts::LN_2)
    }
}

/// A row of `n_head · d_head` int8 values (held in `i32`) and one power-of-two exponent per head.
type HeadRows = (Vec<i32>, Vec<i32>);

/// One layer's cached keys and values: per position, int8 rows of `n_head · d_head` and one
/// exponent per head.
#[derive(Clone, Debug, Default)]
struct Cache {
    keys: Vec<HeadRows>,
    values: Vec<HeadRows>,
}

impl IntegerModel {
    /// The fraction bits for activations whose largest `|x|` at any linear layer's input is
    /// what `ranges` saw: room for eight times that (residual sums, logits), and for at least
    /// 64 (log-probabilities).
    pub fn frac_for(ranges: &ChannelRanges) -> u32 {
        let room = (8.0 * Self::largest_input(ranges)).max(64.0);
        let bits = room.log2().ceil() as u32;
        30u32.saturating_sub(bits).min(30)
    }

    /// The largest `|x|` `ranges` saw at any linear layer's input (the embedding and output
    /// projections' and the cluster head's included).
    pub fn largest_input(ranges: &ChannelRanges) -> f64 {
        let all = ranges
            .layers
            .iter()
            .flatten()
            .chain(&ranges.out_tables)
            .chain(&ranges.emb_proj)
            .chain(std::iter::once(&ranges.cluster_head))
            .flatten();
        all.fold(0.0f64, |m, &v| m.max(v.abs() as f64))
    }

    /// The int8 `model` with activations in `Q(frac)`; int8 weights everywhere, or an error.
    pub fn new(model: &Model<'_>, frac: u32) -> Result<IntegerModel, Error> {
        let config = *model.config();
        let d_model = config.d_model as usize;
        // sqrt(d_model) = isqrt(d_model · 4^h) / 2^h, h as large as fits
        let d = d_model as u64;
        let half = (d.leading_zeros().max(1) - 1) / 2;
        let emb_scale = Multiplier::from_ratio(isqrt(d << (2 * half)) as u64, 1 << half)
            .ok_or_else(|| Error::BadOptions("d_model is too large".into()))?;
        let mut emb_layers = Vec::new();
        let mut emb_row_scales = Vec::new();
        let mut emb_projs = Vec::new();
        for table in 0..config.n_emb_tables() {
            let layer = Linear8::new(model.emb_layer(table), "an embedding table")?;
            if layer.int8_row(0).is_none() {
                return Err(Error::BadOptions(
                    "integer arithmetic needs int8 embedding tables".into(),
                ));
            }
            // each row's scale times 2^frac, and sqrt(d_model) where no projection follows
            let times = if config.has_emb_proj() {
                Multiplier::ONE
            } else {
                emb_scale
            };
            let scales = layer
                .row_scales
                .iter()
                .map(|&s| {
                    s.times(times)
                        .and_then(|m| m.times_pow2(frac as i32))
                        .ok_or_else(|| Error::BadOptions("an embedding row's scale is too large".into()))
                })
                .collect::<Result<_, _>>()?;
            emb_layers.push(layer);
            emb_row_scales.push(scales);
            if config.has_emb_proj() {
                emb_projs.push(Linear8::new(model.emb_proj(table), "an embedding projection")?);
            }
        }
        let eps = config.layer_norm_epsilon;
        let mut layers = Vec::new();
        for l in 0..config.n_layer as usize {
            let w = model.layer(l);
            layers.push(Layer {
                r_w_bias: fixed_vector(w.r_w_bias, frac),
                r_r_bias: fixed_vector(w.r_r_bias, frac),
                qkv: Linear8::new(w.qkv, "qkv")?,
                r_net: Linear8::new(w.r_net, "r_net")?,
                o_net: Linear8::new(w.o_net, "o_net")?,
                attn_norm: Norm::new(w.attn_norm_weight, w.attn_norm_bias, eps, frac),
                ff1: Linear8::new(w.ff1_weight, "ff1")?,
                ff1_bias: fixed_vector(w.ff1_bias, frac),
                ff2: Linear8::new(w.ff2_weight, "ff2")?,
                ff2_bias: fixed_vector(w.ff2_bias, frac),
                ff_norm: Norm::new(w.ff_norm_weight, w.ff_norm_bias, eps, frac),
            });
        }
        let mut out_weights = Vec::new();
        let mut out_biases = Vec::new();
        for table in 0..config.n_emb_tables() {
            out_weights.push(Linear8::new(model.out_weight(table), "an output table")?);
            out_biases.push(fixed_vector(model.out_bias(table), frac));
        }
        let mut out_projs = Vec::new();
        if config.has_out_proj() {
            for cluster in 0..=config.n_clusters() {
                let proj = Linear8::new(model.out_proj(cluster), "an output projection")?;
                if proj.act_scales.is_some() || proj.int8_row(0).is_none() {
                    return Err(Error::BadOptions(
                        "integer arithmetic needs int8 output projections without activation scales".into(),
                    ));
                }
                out_projs.push(proj);
            }
        }
        let (cluster_weight, cluster_bias) = if config.n_clusters() > 0 {
            (
                Some(Linear8::new(model.cluster_weight(), "the cluster head")?),
                fixed_vector(model.cluster_bias(), frac),
            )
        } else {
            (None, Vec::new())
        };
        let frequencies = (0..d_model / 2).map(|k| position_frequency(k, d_model)).collect();
        // 1 / sqrt(d_head) = 2^(k/2) / isqrt(d_head · 2^k), k even and as large as fits
        let d_head = config.d_head as u64;
        let half = (d_head.leading_zeros() - 1) / 2;
        let inv_sqrt_d_head = Multiplier::from_ratio(1 << half, isqrt(d_head << (2 * half)) as u64)
            .ok_or_else(|| Error::BadOptions("d_head is 0".into()))?;
        Ok(IntegerModel {
            config,
            frac,
            emb_layers,
            emb_row_scales,
            emb_projs,
            emb_scale,
            layers,
            out_weights,
            out_biases,
            out_projs,
            cluster_weight,
            cluster_bias,
            frequencies,
            inv_sqrt_d_head,
        })
    }

    /// The fraction bits of the activations.
    pub fn frac(&self) -> u32 {
        self.frac
    }

    /// `h = embedding(token) · sqrt(d_model)` in `Q(frac)`.
    fn embed(&self, token: u32, h: &mut [i32]) {
        let c = &self.config;
        let (table, index) = c.embedding_row(token);
        let layer = &self.emb_layers[table];
        let row = layer.int8_row(index).expect("embedding tables are int8");
        let scale = self.emb_row_scales[table][index];
        let x: Vec<i32> = match &layer.act_multipliers {
            // a table shared with a smoothed output layer keeps its columns' scales
            Some(act) => row
                .iter()
                .zip(act)
                .map(|(&q, &a)| product(scale, a).apply(q as i32))
                .collect(),
            None => row.iter().map(|&q| scale.apply(q as i32)).collect(),
        };
        if c.has_emb_proj() {
            self.emb_projs[table].matvec(&x, Scale16::of_multiplier(self.emb_scale), h);
        } else {
            h.copy_from_slice(&x);
        }
    }

    /// The position keys `R_d = W_r pos_emb(d)` of `layer` for `d < distances`, each quantized
    /// per head to int8 with a power of two.
    fn position_keys(&self, layer: &Layer, distances: usize) -> Vec<HeadRows> {
        let d_model = self.config.d_model as usize;
        let width = self.config.qkv_width() as usize;
        let shift = 30 - self.frac as i32;
        (0..distances)
            .map(|d| {
                let mut pos = vec![0i32; d_model];
                let half = d_model / 2;
                for (k, &f) in self.frequencies.iter().enumerate() {
                    let phase = f.wrapping_mul(d as u32);
                    pos[k] = round_shift(sin_turns(phase) as i64, shift) as i32;
                    pos[half + k] = round_shift(cos_turns(phase) as i64, shift) as i32;
                }
                let mut r = vec![0i32; width];
                layer.r_net.matvec(&pos, Scale16::ONE, &mut r);
                self.per_head_int8(&r)
            })
            .collect()
    }

    /// A row of `n_head · d_head` quantized to int8 per head with powers of two.
    fn per_head_int8(&self, row: &[i32]) -> HeadRows {
        let d_head = self.config.d_head as usize;
        let mut values = Vec::with_capacity(row.len());
        let mut exponents = Vec::new();
        for head in row.chunks_exact(d_head) {
            let (q, e) = quantize_pow2(head, 127);
            values.extend(q);
            exponents.push(e);
        }
        (values, exponents)
    }

    /// The key and value of layer `l` for the hidden state `h`, cached as int8.
    fn key_value(&self, l: usize, x: &[i32]) -> (Vec<i32>, HeadRows, HeadRows) {
        let width = self.config.qkv_width() as usize;
        let mut qkv = vec![0i32; 3 * width];
        self.layers[l].qkv.matvec(x, Scale16::ONE, &mut qkv);
        let query = qkv[..width].to_vec();
        let key = self.per_head_int8(&qkv[width..2 * width]);
        let value = self.per_head_int8(&qkv[2 * width..]);
        (query, key, value)
    }

    /// The attention input of layer `l` for the hidden state `h`.
    fn attention_input(&self, l: usize, h: &[i32]) -> Vec<i32> {
        if self.config.pre_lnorm {
            let mut x = vec![0i32; h.len()];
            self.layers[l].attn_norm.apply(h, self.frac, &mut x);
            x
        } else {
            h.to_vec()
        }
    }

    /// Scores `tokens` in segments of `options.tgt_len` with `options`' memory, as the core's
    /// scorer does: `ln p` of every token after the first.
    pub fn score(&self, tokens: &[u32], options: &SessionOptions) -> Result<IntegerScores, Error> {
        self.score_probed(tokens, options, |_, _, _| {})
    }

    /// [`IntegerModel::score`], showing `probe(layer, position, h)` each layer's output
    /// `h` (`Q(frac)`) at each position of the text.
    pub fn score_probed(
        &self,
        tokens: &[u32],
        options: &SessionOptions,
        mut probe: impl FnMut(usize, usize, &[i32]),
    ) -> Result<IntegerScores, Error> {
        let c = &self.config;
        if options.tgt_len == 0 {
            return Err(Error::BadOptions("tgt_len must be at least 1".into()));
        }
        if let Some((position, &token)) = tokens.iter().enumerate().find(|(_, &t)| t >= c.n_token) {
            return Err(Error::TokenOutOfRange {
                stream: 0,
                position,
                token,
                n_token: c.n_token,
            });
        }
        let (n_layer, d_model, width) = (c.n_layer as usize, c.d_model as usize, c.qkv_width() as usize);
        let (n_head, d_head) = (c.n_head as usize, c.d_head as usize);
        let (tgt_len, mem_len) = (options.tgt_len as usize, options.mem_len as usize);
        let max_distance = options.distances().max(1) - 1;
        let position_keys: Vec<_> = self
            .layers
            .iter()
            .map(|layer| self.position_keys(layer, max_distance + 1))
            .collect();
        let mut caches = vec![Cache::default(); n_layer];
        if options.mem_init == MemInit::Zeros {
            // mem_len all-zero hidden states: their keys and values, through each layer's input
            let zero = vec![0i32; d_model];
            for (l, cache) in caches.iter_mut().enumerate() {
                let (_, key, value) = self.key_value(l, &self.attention_input(l, &zero));
                cache.keys = vec![key; mem_len];
                cache.values = vec![value; mem_len];
            }
        }
        let top = (32767i64).min(i32::MAX as i64 / 127 / d_head.max(1) as i64);
        let mut log_probs = Vec::with_capacity(tokens.len().saturating_sub(1));
        let inputs = &tokens[..tokens.len().saturating_sub(1)];
        for (s, segment) in inputs.chunks(tgt_len).enumerate() {
            let qlen = segment.len();
            let mlen = caches[0].keys.len();
            let klen = mlen + qlen;
            let window = Window {
                qlen,
                mlen,
                mem_len,
                same_length: options.same_length,
            };
            let mut hidden: Vec<Vec<i32>> = segment
                .iter()
                .map(|&token| {
                    let mut h = vec![0i32; d_model];
                    self.embed(token, &mut h);
                    h
                })
                .collect();
            for (l, layer) in self.layers.iter().enumerate() {
                // every position's query, key and value, the keys and values after the memory
                let mut queries = Vec::with_capacity(qlen);
                for h in &hidden {
                    let (query, key, value) = self.key_value(l, &self.attention_input(l, h));
                    queries.push(query);
                    caches[l].keys.push(key);
                    caches[l].values.push(value);
                }
                let cache = &caches[l];
                for (i, (h, query)) in hidden.iter_mut().zip(&queries).enumerate() {
                    let mut attn_vec = vec![0i32; width];
                    for head in 0..n_head {
                        let cols = head * d_head..(head + 1) * d_head;
                        let with = |bias: &[i32]| -> Vec<i32> {
                            query[cols.clone()]
                                .iter()
                                .zip(&bias[cols.clone()])
                                .map(|(&q, &b)| q.saturating_add(b))
                                .collect()
                        };
                        let (content_q, content_e) = quantize_pow2(&with(&layer.r_w_bias), top);
                        let (position_q, position_e) = quantize_pow2(&with(&layer.r_r_bias), top);
                        let visible: Vec<usize> = (0..klen).filter(|&j| !window.masked(i, j)).collect();
                        let mut probs = vec![0u16; klen];
                        if visible.is_empty() {
                            // every key masked: uniform over all keys, as Hugging Face does
                            let p = ((32768 + klen as u32 / 2) / klen as u32).min(32767) as u16;
                            probs.fill(p);
                        } else {
                            let scores: Vec<i32> = visible
                                .iter()
                                .map(|&j| {
                                    let d = (mlen + i - j).min(max_distance);
                                    let (k, ke) = (&cache.keys[j].0[cols.clone()], cache.keys[j].1[head]);
                                    let (r, re) =
                                        (&position_keys[l][d].0[cols.clone()], position_keys[l][d].1[head]);
                                    let content: i32 = content_q.iter().zip(k).map(|(a, b)| a * b).sum();
                                    let position: i32 = position_q.iter().zip(r).map(|(a, b)| a * b).sum();
                                    attention_score(
                                        Scale16::of_multiplier(self.inv_sqrt_d_head).rescale(),
                                        self.frac,
                                        (content, content_e + ke),
                                        (position, position_e + re),
                                    )
                                })
                                .collect();
                            let mut visible_probs = vec![0u16; visible.len()];
                            softmax_q15(&scores, SCORE_FRAC, &mut visible_probs);
                            for (&j, &p) in visible.iter().zip(&visible_probs) {
                                probs[j] = p;
                            }
                        }
                        // Σ_j p_j v_j, each value's power of two folded into its probability
                        // against the largest among the keys with a probability
                        let e_max = (0..klen)
                            .filter(|&j| probs[j] > 0)
                            .map(|j| cache.values[j].1[head])
                            .max()
                            .unwrap_or(0);
                        let mut sums = vec![0i32; d_head];
                        for (j, &p) in probs.iter().enumerate().filter(|(_, &p)| p > 0) {
                            let (v, e) = (&cache.values[j].0[cols.clone()], cache.values[j].1[head]);
                            let w = round_shift(p as i64, e_max - e) as i32;
                            for (sum, &v) in sums.iter_mut().zip(v) {
                                *sum += w * v;
                            }
                        }
                        for (out, &sum) in attn_vec[cols.clone()].iter_mut().zip(&sums) {
                            *out = saturate(round_shift(sum as i64, 15 - e_max));
                        }
                    }
                    let mut o = vec![0i32; d_model];
                    layer.o_net.matvec(&attn_vec, Scale16::ONE, &mut o);
                    add(h, &o);
                    if !c.pre_lnorm {
                        let sum = h.clone();
                        layer.attn_norm.apply(&sum, self.frac, h);
                    }
                    // feed-forward
                    let x = if c.pre_lnorm {
                        let mut x = vec![0i32; d_model];
                        layer.ff_norm.apply(h, self.frac, &mut x);
                        x
                    } else {
                        h.clone()
                    };
                    let mut inner = vec![0i32; c.d_inner as usize];
                    layer.ff1.matvec(&x, Scale16::ONE, &mut inner);
                    add(&mut inner, &layer.ff1_bias);
                    inner.iter_mut().for_each(|v| *v = (*v).max(0));
                    let mut out = vec![0i32; d_model];
                    layer.ff2.matvec(&inner, Scale16::ONE, &mut out);
                    add(&mut out, &layer.ff2_bias);
                    add(h, &out);
                    if !c.pre_lnorm {
                        let sum = h.clone();
                        layer.ff_norm.apply(&sum, self.frac, h);
                    }
                    probe(l, s * tgt_len + i, h);
                }
            }
            for (i, h) in hidden.iter().enumerate() {
                log_probs.push(self.log_prob(h, tokens[s * tgt_len + i + 1]));
            }
            // the memory keeps the last mem_len positions
            for cache in &mut caches {
                let drop = cache.keys.len().saturating_sub(mem_len);
                cache.keys.drain(..drop);
                cache.values.drain(..drop);
            }
        }
        Ok(IntegerScores {
            frac: self.frac,
            log_probs,
        })
    }

    /// `ln p(target | h)` in `Q(frac)`: the full or adaptive log-softmax in integers.
    fn log_prob(&self, h: &[i32], target: u32) -> i32 {
        let c = &self.config;
        let project = |cluster: usize| -> Vec<i32> {
            if c.has_out_proj() {
                let proj = &self.out_projs[cluster];
                let mut y = vec![0i32; proj.cols];
                proj.vecmat(h, &mut y);
                y
            } else {
                h.to_vec()
            }
        };
        let logits = |cluster: usize, x: &[i32]| -> Vec<i32> {
            let (start, end) = c.cluster_range(cluster);
            let (start, end) = (start as usize, end as usize);
            let table = c.emb_table_of_cluster(cluster);
            let first = if c.div_val == 1 { start } else { 0 };
            let mut y = vec![0i32; end - start];
            // the cluster's rows of its table, read in place
            self.out_weights[table].matvec_rows(first..first + end - start, x, Scale16::ONE, &mut y);
            add(&mut y, &self.out_biases[table][first..first + end - start]);
            y
        };
        let head_input = project(0);
        let mut head = logits(0, &head_input);
        let shortlist = head.len();
        if let Some(cluster_weight) = &self.cluster_weight {
            let mut tails = vec![0i32; c.n_clusters()];
            cluster_weight.matvec(&head_input, Scale16::ONE, &mut tails);
            add(&mut tails, &self.cluster_bias);
            head.extend(tails);
        }
        log_softmax(&mut head, self.frac);
        let cluster = c.cluster_of(target);
        if cluster == 0 {
            return head[target as usize];
        }
        let mut tail = logits(cluster, &project(cluster));
        log_softmax(&mut tail, self.frac);
        let start = c.cluster_range(cluster).0;
        saturate(head[shortlist + cluster - 1] as i64 + tail[(target - start) as usize] as i64)
    }
}

fn saturate(v: i64) -> i32 {
    v.clamp(i32::MIN as i64, i32::MAX as i64) as i32
}

fn add(y: &mut [i32], x: &[i32]) {
    for (a, &b) in y.iter_mut().zip(x) {
        *a = a.saturating_add(b);
    }
}

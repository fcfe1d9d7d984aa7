//! The CPU backend: the Transformer-XL forward pass over a batch of streams, in `f64` (the
//! golden reference) or `f32`, every product a GEMM on the `gemm` crate.
//!
//! Read [`CpuEngine::step`] top to bottom: embed, then per layer `x = LN?(h)`,
//! `[q k v] = x W_qkv^T`, the relative attention per stream ([`attention::attend`]),
//! `h = LN?(h + attn W_o^T)`, `h = LN?(h + ReLU(LN?(h) W_1^T + b_1) W_2^T + b_2)`, then the
//! output layer. Each stream keeps the keys and values of its last `mem_len` positions per
//! layer, oldest first. [`CpuEngine::step_observed`] lets a [`ChannelStats`] see the input
//! rows of every linear layer on the way, for the quantizer's calibration.

pub(crate) mod attention;
pub(crate) mod matmul;
pub(crate) mod output;
pub(crate) mod statistics;

use txl_core::Linear;

use crate::engine::{collect_rows, Segment, Settings, StepOutput, Wanted};
use crate::error::{filled, with_room, Error};
use crate::real::Real;
use crate::weights::{position_embeddings, HostWeights};
use attention::Window;
use matmul::linear;
use statistics::ChannelStats;

/// Rows of log-probabilities computed at once: bounds the output buffer to 64 MiB in f64.
const OUTPUT_ELEMENTS: usize = 1 << 23;

/// One stream's memory: per layer, `(len, W)` keys and values, oldest first.
#[derive(Debug)]
struct StreamMemory<T> {
    len: usize,
    keys: Vec<Vec<T>>,
    values: Vec<Vec<T>>,
}

/// What one `score` call sets up: the settings, the position keys, the streams' memories.
#[derive(Debug)]
struct Run<T> {
    settings: Settings,
    /// Per layer `(max_distance + 1, W)`: `R_d = W_r pos_emb(d)`.
    position_keys: Vec<Vec<T>>,
    streams: Vec<StreamMemory<T>>,
}

/// The CPU forward pass in precision `T`.
#[derive(Debug)]
pub(crate) struct CpuEngine<T> {
    w: HostWeights<T>,
    run: Option<Run<T>>,
    attention: attention::Scratch<T>,
    output: output::Scratch<T>,
}

/// `LayerNorm` of each `width`-long row of `x` into `out`: biased variance, two passes.
fn layer_norm<T: Real>(x: &[T], gain: &[T], bias: &[T], eps: T, out: &mut [T]) {
    let width = gain.len();
    let n = T::from_f64(width as f64);
    for (row, o) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let mean = row.iter().fold(T::ZERO, |s, &v| s + v) / n;
        let var = row.iter().fold(T::ZERO, |s, &v| s + (v - mean) * (v - mean)) / n;
        let inv_std = T::ONE / (var + eps).sqrt();
        for (((o, &v), &g), &b) in o.iter_mut().zip(row).zip(gain).zip(bias) {
            *o = (v - mean) * inv_std * g + b;
        }
    }
}

/// `h += delta`, then `h = LayerNorm(h)` unless `pre_lnorm` (post-LN residual).
fn residual<T: Real>(h: &mut [T], delta: &[T], norm: Option<(&[T], &[T], T)>, scratch: &mut Vec<T>) {
    for (a, &b) in h.iter_mut().zip(delta) {
        *a += b;
    }
    if let Some((gain, bias, eps)) = norm {
        scratch.clear();
        scratch.extend_from_slice(h);
        layer_norm(scratch, gain, bias, eps, h);
    }
}

impl<T: Real> CpuEngine<T> {
    /// The engine for these weights.
    pub fn new(w: HostWeights<T>) -> Self {
        CpuEngine {
            w,
            run: None,
            attention: Default::default(),
            output: Default::default(),
        }
    }

    /// Forgets every stream and starts `n_streams` new ones under `settings`. The position
    /// keys and the memories are sized by the settings, so they are allocated fallibly.
    pub fn start(&mut self, n_streams: usize, settings: Settings) -> Result<(), Error> {
        self.run = None;
        let c = &self.w.config;
        let d_model = c.d_model as usize;
        let width = c.qkv_width() as usize;
        let distances = settings.max_distance + 1;
        // pos_emb (distances, d_model) @ W_r^T -> (distances, W), per layer
        let pos_emb_f64 = position_embeddings(distances, d_model)?;
        let mut pos_emb = with_room(pos_emb_f64.len(), "the position embeddings")?;
        pos_emb.extend(pos_emb_f64.into_iter().map(T::from_f64));
        let mut position_keys = with_room(self.w.layers.len(), "the position keys")?;
        for layer in &self.w.layers {
            let mut r = filled(distances.saturating_mul(width), T::ZERO, "the position keys")?;
            linear(&pos_emb, d_model, &layer.r_net, None, &mut r);
            position_keys.push(r);
        }
        drop(pos_emb);
        let memory_len = if settings.zero_memory { settings.mem_len } else { 0 };
        let repeat = |row: &[T]| -> Result<Vec<T>, Error> {
            let mut memory = with_room(memory_len.saturating_mul(row.len()), "the memory")?;
            for _ in 0..memory_len {
                memory.extend_from_slice(row);
            }
            Ok(memory)
        };
        let mut streams = with_room(n_streams, "the streams")?;
        for _ in 0..n_streams {
            streams.push(StreamMemory {
                len: memory_len,
                keys: self
                    .w
                    .layers
                    .iter()
                    .map(|l| repeat(&l.zero_key))
                    .collect::<Result<_, _>>()?,
                values: self
                    .w
                    .layers
                    .iter()
                    .map(|l| repeat(&l.zero_value))
                    .collect::<Result<_, _>>()?,
            });
        }
        self.run = Some(Run {
            settings,
            position_keys,
            streams,
        });
        Ok(())
    }

    /// Runs one segment of each stream in `segments` and collects what `wanted` asks for.
    pub fn step(&mut self, segments: &[Segment<'_>], wanted: &Wanted<'_>) -> Result<StepOutput, Error> {
        self.step_observed(segments, wanted, None)
    }

    /// [`CpuEngine::step`], with `stats` (if any) seeing the tokens embedded, the input rows of
    /// every layer's linear layers and the final hidden rows. When no row's output is wanted
    /// the output layer is skipped.
    pub fn step_observed(
        &mut self,
        segments: &[Segment<'_>],
        wanted: &Wanted<'_>,
        mut stats: Option<&mut ChannelStats>,
    ) -> Result<StepOutput, Error> {
        let tokens: Vec<u32> = segments.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        // hidden (rows, d_model): the embedded tokens, scaled by sqrt(d_model)
        let mut hidden = self.embed(&tokens);
        if let Some(stats) = stats.as_deref_mut() {
            stats.embedded(&self.w, &tokens);
        }
        let run = self
            .run
            .as_mut()
            .ok_or(Error::BadOptions("no run started".into()))?;
        let w = &self.w;
        let c = &w.config;
        let (d_model, d_inner) = (c.d_model as usize, c.d_inner as usize);
        let (n_head, d_head) = (c.n_head as usize, c.d_head as usize);
        let width = n_head * d_head;
        let eps = T::from_f64(w.layer_norm_epsilon());
        let pre_lnorm = c.pre_lnorm;
        let rows: usize = segments.iter().map(|s| s.tokens.len()).sum();

        // The step's rows are sized by the input and tgt_len: allocated fallibly.
        let zeros = |columns: usize| filled(rows.saturating_mul(columns), T::ZERO, "a step's activations");
        let mut normed = zeros(d_model)?; // (rows, d_model)
        let mut qkv = zeros(3 * width)?; // (rows, 3W)
        let mut content_q = zeros(width)?; // (rows, W): q + u
        let mut position_q = zeros(width)?; // (rows, W): q + v
        let mut attn = zeros(width)?; // (rows, W)
        let mut delta = zeros(d_model)?; // (rows, d_model)
        let mut inner = zeros(d_inner)?; // (rows, d_inner)
        let mut scratch = Vec::new();

        for (l, lw) in w.layers.iter().enumerate() {
            let attn_norm = (&lw.attn_norm_weight[..], &lw.attn_norm_bias[..], eps);
            let ff_norm = (&lw.ff_norm_weight[..], &lw.ff_norm_bias[..], eps);

            // [q k v] (rows, 3W) = LN?(h) @ W_qkv^T
            let x = if pre_lnorm {
                layer_norm(&hidden, attn_norm.0, attn_norm.1, eps, &mut normed);
                &normed
            } else {
                &hidden
            };
            if let Some(stats) = stats.as_deref_mut() {
                stats.linear_input(l, Linear::Qkv, x, d_model);
            }
            linear(x, d_model, &lw.qkv, None, &mut qkv);
            for (r, row) in qkv.chunks_exact(3 * width).enumerate() {
                let q = &row[..width];
                for k in 0..width {
                    content_q[r * width + k] = q[k] + lw.r_w_bias[k];
                    position_q[r * width + k] = q[k] + lw.r_r_bias[k];
                }
            }

            // Each stream attends over its memory plus its segment.
            let mut r0 = 0;
            for segment in segments {
                let memory = &mut run.streams[segment.stream];
                let qlen = segment.tokens.len();
                let rows_of = |v: &[T], from: usize| {
                    let range = r0 * 3 * width..(r0 + qlen) * 3 * width;
                    let seg = &v[range];
                    seg.chunks_exact(3 * width)
                        .flat_map(|row| row[from..from + width].to_vec())
                        .collect::<Vec<T>>()
                };
                memory.keys[l].extend(rows_of(&qkv, width));
                memory.values[l].extend(rows_of(&qkv, 2 * width));
                let window = Window {
                    qlen,
                    mlen: memory.len,
                    mem_len: run.settings.mem_len,
                    same_length: run.settings.same_length,
                };
                let span = r0 * width..(r0 + qlen) * width;
                attention::attend(
                    &window,
                    n_head,
                    d_head,
                    run.settings.max_distance,
                    &content_q[span.clone()],
                    &position_q[span.clone()],
                    &memory.keys[l],
                    &memory.values[l],
                    &run.position_keys[l],
                    &mut self.attention,
                    &mut attn[span],
                )?;
                r0 += qlen;
            }

            // h = LN?(h + attn @ W_o^T)
            if let Some(stats) = stats.as_deref_mut() {
                stats.linear_input(l, Linear::ONet, &attn, width);
            }
            linear(&attn, width, &lw.o_net, None, &mut delta);
            residual(
                &mut hidden,
                &delta,
                (!pre_lnorm).then_some(attn_norm),
                &mut scratch,
            );

            // h = LN?(h + ReLU(LN?(h) @ W_1^T + b_1) @ W_2^T + b_2)
            let x = if pre_lnorm {
                layer_norm(&hidden, ff_norm.0, ff_norm.1, eps, &mut normed);
                &normed
            } else {
                &hidden
            };
            if let Some(stats) = stats.as_deref_mut() {
                stats.linear_input(l, Linear::Ff1, x, d_model);
            }
            linear(x, d_model, &lw.ff1_weight, Some(&lw.ff1_bias), &mut inner);
            for v in inner.iter_mut() {
                if *v < T::ZERO {
                    *v = T::ZERO;
                }
            }
            if let Some(stats) = stats.as_deref_mut() {
                stats.linear_input(l, Linear::Ff2, &inner, d_inner);
            }
            linear(&inner, d_inner, &lw.ff2_weight, Some(&lw.ff2_bias), &mut delta);
            residual(&mut hidden, &delta, (!pre_lnorm).then_some(ff_norm), &mut scratch);
        }
        if let Some(stats) = stats {
            stats.final_hidden(w, &hidden);
        }

        // Keep the last mem_len positions of each stream.
        for segment in segments {
            let memory = &mut run.streams[segment.stream];
            let total = memory.len + segment.tokens.len();
            let keep = total.min(run.settings.mem_len);
            for v in memory.keys.iter_mut().chain(memory.values.iter_mut()) {
                v.drain(..(total - keep) * width);
            }
            memory.len = keep;
        }
        if wanted.full_rows.is_empty() && wanted.targets.iter().all(Option::is_none) {
            return Ok(StepOutput {
                target_logp: vec![f64::NAN; rows],
                full_rows: Vec::new(),
            });
        }

        // The output layer, a chunk of rows at a time.
        let n_token = c.n_token as usize;
        let chunk = (OUTPUT_ELEMENTS / n_token).max(1);
        let mut out = StepOutput::default();
        let mut log_probs = vec![T::ZERO; chunk.min(rows) * n_token];
        for (i, h) in hidden.chunks(chunk * d_model).enumerate() {
            let lp = &mut log_probs[..h.len() / d_model * n_token];
            output::log_probs(w, h, &mut self.output, lp);
            collect_rows(wanted, i * chunk, lp, n_token, T::to_f64, &mut out);
        }
        Ok(out)
    }

    /// `(tokens, d_model)`: each token's embedding row, projected to `d_model` when the model
    /// has projections, times `sqrt(d_model)`.
    fn embed(&self, tokens: &[u32]) -> Vec<T> {
        let c = &self.w.config;
        let d_model = c.d_model as usize;
        let scale = T::from_f64((d_model as f64).sqrt());
        let mut hidden = vec![T::ZERO; tokens.len() * d_model];
        for table in 0..c.n_emb_tables() {
            let width = c.emb_dim(table) as usize;
            // Tokens of this table and their rows in it.
            let first_token = if c.div_val == 1 {
                0
            } else {
                c.cluster_range(table).0
            };
            let picked: Vec<(usize, usize)> = tokens
                .iter()
                .enumerate()
                .filter(|&(_, &t)| c.div_val == 1 || c.cluster_of(t) == table)
                .map(|(i, &t)| (i, (t - first_token) as usize))
                .collect();
            if picked.is_empty() {
                continue;
            }
            let emb = &self.w.emb_layers[table];
            let gathered: Vec<T> = picked
                .iter()
                .flat_map(|&(_, row)| emb[row * width..(row + 1) * width].iter().copied())
                .collect();
            let projected = if c.has_emb_proj() {
                // (n, width) @ emb_projs[table]^T (width, d_model)
                let mut out = vec![T::ZERO; picked.len() * d_model];
                linear(&gathered, width, &self.w.emb_projs[table], None, &mut out);
                out
            } else {
                gathered
            };
            for (&(i, _), row) in picked.iter().zip(projected.chunks_exact(d_model)) {
                for (h, &v) in hidden[i * d_model..(i + 1) * d_model].iter_mut().zip(row) {
                    *h = v * scale;
                }
            }
        }
        hidden
    }
}

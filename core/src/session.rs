//! A running model: the forward pass over segments, with the recurrence memory carried
//! between them. Read [`Session::forward`] top to bottom next to the paper.

use crate::arena::{ArenaLayout, Carver};
use crate::attention::{self, AttentionShape};
use crate::embedding;
use crate::error::Error;
use crate::kernels;
use crate::memory::{int8_values_bytes, MemDtype, Memory, Store};
use crate::model::Model;
use crate::options::{MemInit, PositionKeys, SessionOptions};
use crate::output;

/// A linear layer of a decoder layer, as [`Probe`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linear {
    /// `qkv_net`: input is the (normalized) layer input.
    Qkv,
    /// `o_net`: input is the attention output.
    ONet,
    /// The first feed-forward layer: input is the (normalized) attention sub-layer output.
    Ff1,
    /// The second feed-forward layer: input is the ReLU output.
    Ff2,
}

/// Sees what the forward pass computes, for calibration and error reports. Every method has
/// an empty default; `()` implements it and observes nothing.
pub trait Probe {
    /// The input row `x` of `layer`'s linear layer `linear`, for one position.
    fn linear_input(&mut self, layer: usize, linear: Linear, x: &[f32]) {
        let _ = (layer, linear, x);
    }

    /// `layer`'s output hidden state at `position` of the segment.
    fn layer_output(&mut self, layer: usize, position: usize, hidden: &[f32]) {
        let _ = (layer, position, hidden);
    }
}

impl Probe for () {}

/// The arena's buffers, each exactly the size [`ArenaLayout`] says.
#[derive(Debug)]
struct Buffers<'a> {
    position_keys: &'a mut [f32],
    position_embeddings: &'a mut [f32],
    hidden: &'a mut [f32],
    normed: &'a mut [f32],
    queries: &'a mut [f32],
    attn_vec: &'a mut [f32],
    query_pos: &'a mut [f32],
    key_value: &'a mut [f32],
    scores: &'a mut [f32],
    ff_inner: &'a mut [f32],
    row: &'a mut [f32],
    embed_row: &'a mut [f32],
    log_probs: &'a mut [f32],
    quantized: &'a mut [i8],
}

/// Carves one cache (keys or values) of `bytes` bytes holding `elements` in `dtype`.
fn take_store<'a>(
    carver: &mut Carver<'a>,
    bytes: usize,
    dtype: MemDtype,
    elements: usize,
) -> Option<Store<'a>> {
    Some(match dtype {
        MemDtype::F32 => Store::F32(bytemuck::try_cast_slice_mut(carver.take_bytes(bytes)?).ok()?),
        MemDtype::F16 => Store::F16(bytemuck::try_cast_slice_mut(carver.take_bytes(bytes)?).ok()?),
        MemDtype::Int8 => {
            // the values (padded to 16 bytes), then one f32 scale per (position, head)
            let whole = carver.take_bytes(bytes)?;
            let (values, scales) = whole.split_at_mut(int8_values_bytes(elements)?);
            Store::Int8 {
                values: bytemuck::try_cast_slice_mut(values).ok()?,
                scales: bytemuck::try_cast_slice_mut(scales).ok()?,
            }
        }
    })
}

/// A model plus its arena: memory, activations and scratch.
#[derive(Debug)]
pub struct Session<'m, 'a> {
    model: Model<'m>,
    options: SessionOptions,
    memory: Memory<'a>,
    buffers: Buffers<'a>,
}

impl<'m, 'a> Session<'m, 'a> {
    /// Exact arena bytes a session of `model` under `options` needs.
    pub fn arena_bytes(model: &Model<'_>, options: &SessionOptions) -> Result<usize, Error> {
        Ok(ArenaLayout::new(model.config(), options)?.total_bytes())
    }

    /// Starts a session in `arena` (16-byte aligned, at least [`Session::arena_bytes`]).
    pub fn new(model: &Model<'m>, arena: &'a mut [u8], options: SessionOptions) -> Result<Self, Error> {
        let config = *model.config();
        let layout = ArenaLayout::new(&config, &options)?;
        let needed = layout.total_bytes();
        if arena.len() < needed {
            return Err(Error::ArenaTooSmall {
                needed,
                got: arena.len(),
            });
        }
        let mut carver = Carver::new(arena)?;
        let short = Error::ArenaTooSmall { needed, got: 0 };
        let capacity = options.mem_len as usize + options.tgt_len as usize;
        let width = config.qkv_width() as usize;
        let cache_elements = config.n_layer as usize * capacity * width;
        let mut cache =
            |bytes| take_store(&mut carver, bytes, options.mem_dtype, cache_elements).ok_or(short);
        let keys = cache(layout.keys)?;
        let values = cache(layout.values)?;
        let mut take = |len| carver.take::<f32>(len).ok_or(short);
        let position_keys = take(layout.position_keys)?;
        let position_embeddings = take(layout.position_embeddings)?;
        let hidden = take(layout.hidden)?;
        let normed = take(layout.normed)?;
        let queries = take(layout.queries)?;
        let attn_vec = take(layout.attn_vec)?;
        let query_pos = take(layout.query_pos)?;
        let key_value = take(layout.key_value)?;
        let scores = take(layout.scores)?;
        let ff_inner = take(layout.ff_inner)?;
        let row = take(layout.row)?;
        let embed_row = take(layout.embed_row)?;
        let log_probs = take(layout.log_probs)?;
        let quantized = carver.take::<i8>(layout.quantized).ok_or(short)?;
        let buffers = Buffers {
            position_keys,
            position_embeddings,
            hidden,
            normed,
            queries,
            attn_vec,
            query_pos,
            key_value,
            scores,
            ff_inner,
            row,
            embed_row,
            log_probs,
            quantized,
        };
        let memory = Memory::new(
            keys,
            values,
            (width, config.d_head as usize),
            capacity,
            options.mem_len as usize,
        );
        let mut session = Session {
            model: *model,
            options,
            memory,
            buffers,
        };
        session.compute_position_keys();
        session.reset();
        Ok(session)
    }

    /// The session's settings.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The model.
    pub fn model(&self) -> &Model<'m> {
        &self.model
    }

    /// Positions currently remembered.
    pub fn memory_len(&self) -> usize {
        self.memory.len()
    }

    /// Forgets the memory and starts again as `options.mem_init` says.
    pub fn reset(&mut self) {
        self.memory.clear();
        if self.options.mem_init == MemInit::Zeros && self.options.mem_len > 0 {
            self.fill_zero_memory();
        }
    }

    /// Runs one segment of `tokens` (1..=tgt_len ids) and calls `on_row(i, log_probs)` for each
    /// position `i`, where `log_probs[t] = ln p(token t follows tokens[..=i] | memory)`.
    /// Afterwards the memory holds the last `mem_len` positions.
    pub fn forward(&mut self, tokens: &[u32], on_row: impl FnMut(usize, &[f32])) -> Result<(), Error> {
        self.forward_from(tokens, 0, on_row, &mut ())
    }

    /// Like [`Session::forward`], and shows `probe` the inputs of every linear layer and every
    /// layer's output (for calibration and error reports; `()` observes nothing, at no cost).
    pub fn forward_probed(
        &mut self,
        tokens: &[u32],
        on_row: impl FnMut(usize, &[f32]),
        probe: &mut impl Probe,
    ) -> Result<(), Error> {
        self.forward_from(tokens, 0, on_row, probe)
    }

    /// Like [`Session::forward`], but computes the output row of the last position only (for
    /// generation).
    pub fn forward_last(&mut self, tokens: &[u32], on_row: impl FnMut(usize, &[f32])) -> Result<(), Error> {
        self.forward_from(tokens, tokens.len().saturating_sub(1), on_row, &mut ())
    }

    fn check_segment(&self, tokens: &[u32]) -> Result<(), Error> {
        let max = self.options.tgt_len as usize;
        if tokens.is_empty() || tokens.len() > max {
            return Err(Error::SegmentLength {
                len: tokens.len(),
                max,
            });
        }
        let n_token = self.model.config().n_token;
        match tokens.iter().find(|&&t| t >= n_token) {
            Some(&token) => Err(Error::TokenOutOfRange { token, n_token }),
            None => Ok(()),
        }
    }

    /// The forward pass; output rows from position `first_output` on.
    fn forward_from(
        &mut self,
        tokens: &[u32],
        first_output: usize,
        mut on_row: impl FnMut(usize, &[f32]),
        probe: &mut impl Probe,
    ) -> Result<(), Error> {
        self.check_segment(tokens)?;
        let config = *self.model.config();
        let eps = config.layer_norm_epsilon;
        let d_model = config.d_model as usize;
        let d_inner = config.d_inner as usize;
        let width = config.qkv_width() as usize; // n_head * d_head
        let qlen = tokens.len();
        let mlen = self.memory.len();
        let b = &mut self.buffers;

        // Word embedding, scaled by sqrt(d_model): hidden (qlen, d_model)
        for (token, h) in tokens.iter().zip(b.hidden.chunks_exact_mut(d_model)) {
            embedding::embed(&self.model, *token, b.embed_row, b.quantized, h);
        }

        let shape = AttentionShape {
            qlen,
            mlen,
            mem_len: self.options.mem_len as usize,
            same_length: self.options.same_length,
            max_distance: self.options.distances() - 1,
            n_head: config.n_head as usize,
            d_head: config.d_head as usize,
        };
        let distances = self.options.distances();

        for layer in 0..config.n_layer as usize {
            let w = self.model.layer(layer);

            // Attention input: LayerNorm first when pre_lnorm. normed (qlen, d_model)
            let hidden = &mut b.hidden[..qlen * d_model];
            let normed = &mut b.normed[..qlen * d_model];
            for (h, n) in hidden.chunks_exact(d_model).zip(normed.chunks_exact_mut(d_model)) {
                if config.pre_lnorm {
                    kernels::layer_norm(h, w.attn_norm_weight, w.attn_norm_bias, eps, n);
                } else {
                    n.copy_from_slice(h);
                }
            }

            // q, k, v = W_qkv (3 * width, d_model) @ x (d_model): q to queries (qlen, width), k and v
            // to the memory ring at positions mlen..mlen + qlen.
            let w_q = w.qkv.row_range(0, width);
            let w_kv = w.qkv.row_range(width, 3 * width);
            for (i, x) in normed.chunks_exact(d_model).enumerate() {
                probe.linear_input(layer, Linear::Qkv, x);
                kernels::matvec(&w_q, x, &mut b.queries[i * width..(i + 1) * width], b.quantized);
                kernels::matvec(&w_kv, x, b.key_value, b.quantized);
                let (key, value) = b.key_value.split_at(width);
                self.memory.write(layer, mlen + i, key, value);
            }

            // Relative attention per query: attn_vec (qlen, width)
            // Position keys R_d (distances, width): this layer's table, or recomputed now for the
            // distances this segment can see.
            let table = match self.options.position_keys {
                PositionKeys::PerSession => layer,
                PositionKeys::PerSegment => {
                    for d in 0..(mlen + qlen).min(distances) {
                        let pos_emb = &b.position_embeddings[d * d_model..(d + 1) * d_model];
                        let key = &mut b.position_keys[d * width..(d + 1) * width];
                        kernels::matvec(&w.r_net, pos_emb, key, b.quantized);
                    }
                    0
                }
            };
            let position_keys = &b.position_keys[table * distances * width..(table + 1) * distances * width];
            for i in 0..qlen {
                // content query q + u (in place), position query q + v
                let query = &mut b.queries[i * width..(i + 1) * width];
                b.query_pos.copy_from_slice(query);
                kernels::add_assign(b.query_pos, w.r_r_bias);
                kernels::add_assign(query, w.r_w_bias);
                let out = &mut b.attn_vec[i * width..(i + 1) * width];
                attention::attend_one(
                    &shape,
                    i,
                    query,
                    b.query_pos,
                    position_keys,
                    &self.memory,
                    layer,
                    b.scores,
                    out,
                );
            }

            // o_net (d_model, width) @ attn_vec (width), residual, LayerNorm (post-LN).
            for (h, a) in hidden
                .chunks_exact_mut(d_model)
                .zip(b.attn_vec.chunks_exact(width))
            {
                probe.linear_input(layer, Linear::ONet, a);
                kernels::matvec(&w.o_net, a, b.row, b.quantized);
                kernels::add_assign(h, b.row);
                if !config.pre_lnorm {
                    kernels::layer_norm_in_place(h, w.attn_norm_weight, w.attn_norm_bias, eps);
                }
            }

            // Position-wise feed-forward: ReLU(W1 x + b1), W2 . + b2, residual, LayerNorm.
            for h in hidden.chunks_exact_mut(d_model) {
                let x: &[f32] = if config.pre_lnorm {
                    kernels::layer_norm(h, w.ff_norm_weight, w.ff_norm_bias, eps, b.row);
                    b.row
                } else {
                    h
                };
                let inner = &mut b.ff_inner[..d_inner];
                probe.linear_input(layer, Linear::Ff1, x);
                kernels::matvec_bias(&w.ff1_weight, w.ff1_bias, x, inner, b.quantized);
                kernels::relu(inner);
                probe.linear_input(layer, Linear::Ff2, inner);
                let ff_out = &mut b.normed[..d_model];
                kernels::matvec_bias(&w.ff2_weight, w.ff2_bias, inner, ff_out, b.quantized);
                kernels::add_assign(h, ff_out);
                if !config.pre_lnorm {
                    kernels::layer_norm_in_place(h, w.ff_norm_weight, w.ff_norm_bias, eps);
                }
            }
            for (i, h) in hidden.chunks_exact(d_model).enumerate() {
                probe.layer_output(layer, i, h);
            }
        }

        // Output: one row of log-probabilities per position.
        for (i, h) in b
            .hidden
            .chunks_exact(d_model)
            .enumerate()
            .take(qlen)
            .skip(first_output)
        {
            output::log_probs(&self.model, h, b.embed_row, b.quantized, b.log_probs);
            on_row(i, b.log_probs);
        }

        self.memory.commit(qlen);
        Ok(())
    }

    /// Position keys `R_d = W_r (width, d_model) @ pos_emb(d)` for every layer and distance
    /// `d < distances`, computed once: they do not depend on the tokens. With
    /// [`PositionKeys::PerSegment`], only the table of `pos_emb(d)` is kept.
    ///
    /// `pos_emb(d) = [sin(d * f_k) | cos(d * f_k)]`, `f_k = 1 / 10000^(2k / d_model)`.
    fn compute_position_keys(&mut self) {
        let config = *self.model.config();
        let d_model = config.d_model as usize;
        let width = config.qkv_width() as usize;
        let distances = self.options.distances();
        let b = &mut self.buffers;
        let half = d_model / 2;
        for d in 0..distances {
            let (sin, cos) = b.row.split_at_mut(half);
            for k in 0..half {
                // inv_freq as PyTorch computes and stores it (f32); the angle and sinusoid in f64.
                let exponent = (2 * k) as f32 / d_model as f32;
                let inv_freq = 1.0 / (libm::pow(10000.0, exponent as f64) as f32);
                let angle = d as f64 * inv_freq as f64;
                sin[k] = libm::sin(angle) as f32;
                cos[k] = libm::cos(angle) as f32;
            }
            match self.options.position_keys {
                PositionKeys::PerSession => {
                    for layer in 0..config.n_layer as usize {
                        let at = (layer * distances + d) * width;
                        let r_net = self.model.layer(layer).r_net;
                        kernels::matvec(&r_net, b.row, &mut b.position_keys[at..at + width], b.quantized);
                    }
                }
                PositionKeys::PerSegment => {
                    b.position_embeddings[d * d_model..(d + 1) * d_model].copy_from_slice(b.row);
                }
            }
        }
    }

    /// Fills the memory with the keys and values of `mem_len` all-zero hidden states.
    fn fill_zero_memory(&mut self) {
        let config = *self.model.config();
        let d_model = config.d_model as usize;
        let width = config.qkv_width() as usize;
        let mem_len = self.options.mem_len as usize;
        let b = &mut self.buffers;
        for layer in 0..config.n_layer as usize {
            let w = self.model.layer(layer);
            let zero = &mut b.row[..d_model];
            zero.fill(0.0);
            let x = &mut b.normed[..d_model];
            if config.pre_lnorm {
                kernels::layer_norm(
                    zero,
                    w.attn_norm_weight,
                    w.attn_norm_bias,
                    config.layer_norm_epsilon,
                    x,
                );
            } else {
                x.fill(0.0);
            }
            kernels::matvec(&w.qkv.row_range(width, 3 * width), x, b.key_value, b.quantized);
            let (key, value) = b.key_value.split_at(width);
            for position in 0..mem_len {
                self.memory.write(layer, position, key, value);
            }
        }
        self.memory.set_len(mem_len);
    }
}

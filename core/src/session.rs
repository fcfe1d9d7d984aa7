//! A running model: the forward pass over segments, with the recurrence memory carried
//! between them. Read [`Session::forward`] top to bottom next to the paper.

use crate::arena::{ArenaLayout, Carver};
use crate::attention::{self, AttentionShape};
use crate::config::Config;
use crate::embedding;
use crate::error::Error;
use crate::kernels;
use crate::memory::Memory;
use crate::model::Model;
use crate::output;

/// How the recurrence memory starts (and restarts after [`Session::reset`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MemInit {
    /// No memory: the first segment sees only itself (the original PyTorch code).
    #[default]
    Empty,
    /// `mem_len` all-zero hidden states (Hugging Face and the original TensorFlow code).
    Zeros,
}

/// Evaluation settings; [`SessionOptions::from_config`] takes the model's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SessionOptions {
    /// Longest segment [`Session::forward`] accepts (sizes the activations).
    pub tgt_len: u32,
    /// Positions remembered between segments.
    pub mem_len: u32,
    /// Largest relative distance with its own position embedding; 0 means no clamping.
    pub clamp_len: u32,
    /// Every query attends to the same number of keys.
    pub same_length: bool,
    /// How the memory starts.
    pub mem_init: MemInit,
}

impl SessionOptions {
    /// The model's default evaluation settings, with an empty memory start.
    pub fn from_config(config: &Config) -> SessionOptions {
        SessionOptions {
            tgt_len: config.tgt_len,
            mem_len: config.mem_len,
            clamp_len: config.clamp_len,
            same_length: config.same_length,
            mem_init: MemInit::Empty,
        }
    }

    /// Number of distinct position keys: distances `0..mem_len + tgt_len`, clamped.
    pub fn distances(&self) -> usize {
        let longest = self.mem_len as usize + self.tgt_len as usize;
        if self.clamp_len > 0 {
            longest.min(self.clamp_len as usize + 1)
        } else {
            longest
        }
    }
}

/// The arena's buffers, each exactly the size [`ArenaLayout`] says.
#[derive(Debug)]
struct Buffers<'a> {
    position_keys: &'a mut [f32],
    hidden: &'a mut [f32],
    normed: &'a mut [f32],
    queries: &'a mut [f32],
    attn_vec: &'a mut [f32],
    query_pos: &'a mut [f32],
    scores: &'a mut [f32],
    ff_inner: &'a mut [f32],
    row: &'a mut [f32],
    out_proj: &'a mut [f32],
    log_probs: &'a mut [f32],
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
        let mut take = |len| carver.take(len).ok_or(Error::ArenaTooSmall { needed, got: 0 });
        let keys = take(layout.keys)?;
        let values = take(layout.values)?;
        let buffers = Buffers {
            position_keys: take(layout.position_keys)?,
            hidden: take(layout.hidden)?,
            normed: take(layout.normed)?,
            queries: take(layout.queries)?,
            attn_vec: take(layout.attn_vec)?,
            query_pos: take(layout.query_pos)?,
            scores: take(layout.scores)?,
            ff_inner: take(layout.ff_inner)?,
            row: take(layout.row)?,
            out_proj: take(layout.out_proj)?,
            log_probs: take(layout.log_probs)?,
        };
        let capacity = options.mem_len as usize + options.tgt_len as usize;
        let memory = Memory::new(
            keys,
            values,
            config.qkv_width() as usize,
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
        self.forward_from(tokens, 0, on_row)
    }

    /// Like [`Session::forward`], but computes the output row of the last position only (for
    /// generation).
    pub fn forward_last(&mut self, tokens: &[u32], on_row: impl FnMut(usize, &[f32])) -> Result<(), Error> {
        self.forward_from(tokens, tokens.len().saturating_sub(1), on_row)
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
            embedding::embed(&self.model, *token, h);
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

            // q, k, v = W_qkv (3 * width, d_model) @ x (d_model); k and v go to the memory ring
            // at positions mlen..mlen + qlen, q to queries (qlen, width).
            let (w_q, w_kv) = w.qkv.split_at(width * d_model);
            let (w_k, w_v) = w_kv.split_at(width * d_model);
            for (i, x) in normed.chunks_exact(d_model).enumerate() {
                kernels::matvec(w_q, x, &mut b.queries[i * width..(i + 1) * width]);
                let (k, v) = self.memory.slot_mut(layer, mlen + i);
                kernels::matvec(w_k, x, k);
                kernels::matvec(w_v, x, v);
            }

            // Relative attention per query: attn_vec (qlen, width)
            let position_keys = &b.position_keys[layer * distances * width..(layer + 1) * distances * width];
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
                kernels::matvec(w.o_net, a, b.row);
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
                kernels::matvec_bias(w.ff1_weight, w.ff1_bias, x, inner);
                kernels::relu(inner);
                let ff_out = &mut b.normed[..d_model];
                kernels::matvec_bias(w.ff2_weight, w.ff2_bias, inner, ff_out);
                kernels::add_assign(h, ff_out);
                if !config.pre_lnorm {
                    kernels::layer_norm_in_place(h, w.ff_norm_weight, w.ff_norm_bias, eps);
                }
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
            output::log_probs(&self.model, h, b.out_proj, b.log_probs);
            on_row(i, b.log_probs);
        }

        self.memory.commit(qlen);
        Ok(())
    }

    /// Position keys `R_d = W_r (width, d_model) @ pos_emb(d)` for every layer and distance
    /// `d < distances`, computed once: they do not depend on the tokens.
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
                // inv_freq as the reference stores it (f32), the angle and sinusoid in f64.
                let inv_freq = (1.0 / libm::pow(10000.0, (2 * k) as f64 / d_model as f64)) as f32;
                let angle = d as f64 * inv_freq as f64;
                sin[k] = libm::sin(angle) as f32;
                cos[k] = libm::cos(angle) as f32;
            }
            for layer in 0..config.n_layer as usize {
                let at = (layer * distances + d) * width;
                kernels::matvec(
                    self.model.layer(layer).r_net,
                    b.row,
                    &mut b.position_keys[at..at + width],
                );
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
            let (_, w_kv) = w.qkv.split_at(width * d_model);
            let (w_k, w_v) = w_kv.split_at(width * d_model);
            for position in 0..mem_len {
                let (k, v) = self.memory.slot_mut(layer, position);
                kernels::matvec(w_k, x, k);
                kernels::matvec(w_v, x, v);
            }
        }
        self.memory.set_len(mem_len);
    }
}

//! A running model: the forward pass over segments, with the recurrence memory carried
//! between them. The forward pass is in `forward.rs`: read `Session::forward_from` top to
//! bottom next to the paper, one function per sub-layer.

mod forward;
mod integer;
pub mod state;

use crate::arena::{ArenaLayout, Carver};
use crate::error::Error;
use crate::image::Arithmetic;
use crate::included;
use crate::memory::{Memory, Store};
use crate::model::Model;
use crate::options::{int8_values_bytes, MemDtype, MemInit, PositionKeys, SessionOptions};

/// A linear layer of a decoder layer, as [`Probe`] names it; `linear as usize` is its place
/// in the layer, in the order the forward pass runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linear {
    /// `qkv_net`: input is the (normalized) layer input.
    Qkv = 0,
    /// `o_net`: input is the attention output.
    ONet = 1,
    /// The first feed-forward layer: input is the (normalized) attention sub-layer output.
    Ff1 = 2,
    /// The second feed-forward layer: input is the ReLU output.
    Ff2 = 3,
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

/// Everything the forward pass works in besides the memory, carved from the arena once, each
/// buffer exactly the size [`ArenaLayout`] gives it. `distances` is
/// [`SessionOptions::distances`]; `max_emb_dim` the widest embedding table.
#[derive(Debug)]
struct RunState<'a> {
    /// Position keys `R_d = W_r pos_emb(d)`: a table per layer, one recomputed per segment, or
    /// none when `W_r` is folded into the queries.
    position_keys: &'a mut [f32], // (n_layer, 1 or 0 tables, distances, n_head * d_head)
    /// Sinusoids `pos_emb(d)`, kept when the position keys are recomputed per segment or folded
    /// into the queries.
    position_embeddings: &'a mut [f32], // (distances, d_model) or empty
    /// The residual stream `h`, one row per position.
    hidden: &'a mut [f32], // (tgt_len, d_model)
    /// The attention sub-layer's input: `LayerNorm(h)` (pre-LN) or `h`. Once spent, its first
    /// row holds one position's feed-forward output.
    attn_input: &'a mut [f32], // (tgt_len, d_model)
    /// Queries `q`, then the content queries `q + u` in place.
    queries: &'a mut [f32], // (tgt_len, n_head * d_head)
    /// Attention output `a`, the input of `o_net`.
    attn_vec: &'a mut [f32], // (tgt_len, n_head * d_head)
    /// Position queries `q + v`: one, or one per query the attention takes together.
    position_query: &'a mut [f32], // (query rows, n_head * d_head)
    /// One position's key and value, before the memory stores them.
    key_value: &'a mut [f32], // (pair, 2, n_head * d_head), pair = 2 if tgt_len >= 2 else 1
    /// A query's attention scores over the keys it sees, their position terms, and with int8
    /// memory one head's integer sums ([`crate::attention::scores_len`]); for each row of
    /// `position_query`.
    scores: &'a mut [f32],
    /// One position's feed-forward inner row `ReLU(W_1 x + b_1)`.
    ff_inner: &'a mut [f32], // (pair, d_inner)
    /// One row inside a residual branch: `o_net`'s output, or the feed-forward input
    /// `LayerNorm(h)` (pre-LN); in the attention, one head's folded position query
    /// `W_r,hᵀ (q + v)_h`; at the start, one `pos_emb(d)` or the zero hidden state.
    branch: &'a mut [f32], // (pair, d_model)
    /// One token's embedding before its projection, or the hidden state projected for one
    /// output cluster.
    embed_row: &'a mut [f32], // (output rows, max_emb_dim)
    /// One position's log-probabilities.
    log_probs: &'a mut [f32], // (output rows, n_token)
    /// Kernel scratch: one matvec input row quantized per token, for int8 weights.
    quantized_input: &'a mut [u32], // (pair * scratch_words(max(d_model, d_inner, n_head * d_head, d_embed)))
    /// In integer arithmetic, the layers' parameters made ready once (`integer.rs`).
    parameters: &'a mut [i32], // (integer_parameter_words) or empty
}

impl<'a> RunState<'a> {
    /// Carves the buffers from `carver`, in the arena's order (after the memory).
    fn carve(carver: &mut Carver<'a>, layout: &ArenaLayout) -> Option<RunState<'a>> {
        Some(RunState {
            position_keys: carver.take(layout.position_keys)?,
            position_embeddings: carver.take(layout.position_embeddings)?,
            hidden: carver.take(layout.hidden)?,
            attn_input: carver.take(layout.normed)?,
            queries: carver.take(layout.queries)?,
            attn_vec: carver.take(layout.attn_vec)?,
            position_query: carver.take(layout.query_pos)?,
            key_value: carver.take(layout.key_value)?,
            scores: carver.take(layout.scores)?,
            ff_inner: carver.take(layout.ff_inner)?,
            branch: carver.take(layout.row)?,
            embed_row: carver.take(layout.embed_row)?,
            log_probs: carver.take(layout.log_probs)?,
            quantized_input: carver.take(layout.quantized)?,
            parameters: carver.take(layout.parameters)?,
        })
    }
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
    state: RunState<'a>,
    /// Positions one pass of the linear layers takes (at most `tgt_len`).
    per_pass: usize,
}

impl<'m, 'a> Session<'m, 'a> {
    /// Exact arena bytes a session of `model` under `options` needs.
    pub fn arena_bytes(model: &Model<'_>, options: &SessionOptions) -> Result<usize, Error> {
        Ok(ArenaLayout::new(model.config(), model.image().arithmetic(), options)?.total_bytes())
    }

    /// Exact arena bytes of a session made by [`Session::with_positions_per_pass`].
    pub fn arena_bytes_for_positions_per_pass(
        model: &Model<'_>,
        options: &SessionOptions,
        positions: usize,
    ) -> Result<usize, Error> {
        Ok(ArenaLayout::with_positions_per_pass(
            model.config(),
            model.image().arithmetic(),
            options,
            positions,
        )?
        .total_bytes())
    }

    /// Starts a session in `arena` (16-byte aligned, at least [`Session::arena_bytes`]). Its
    /// linear layers take the positions of a segment in pairs
    /// ([`DEFAULT_POSITIONS_PER_PASS`](crate::arena::DEFAULT_POSITIONS_PER_PASS)).
    pub fn new(model: &Model<'m>, arena: &'a mut [u8], options: SessionOptions) -> Result<Self, Error> {
        Self::with_positions_per_pass(model, arena, options, crate::arena::DEFAULT_POSITIONS_PER_PASS)
    }

    /// [`Session::new`] with the linear layers taking up to `positions` positions of a segment
    /// per pass (1 to [`MAX_POSITIONS_PER_PASS`](crate::kernels::MAX_POSITIONS_PER_PASS)):
    /// each weight is read once per pass, so on a CPU whose caches do not hold the weights,
    /// long segments run faster with more positions, for a larger arena
    /// ([`Session::arena_bytes_for_positions_per_pass`]). With more than pairs the output
    /// layer takes the positions of a pass together too, for a row of log-probabilities per
    /// position, and the attention up to sixteen of them (with f32 memory and a table of
    /// position keys: each cached key and value is read once for all of them), for a row of
    /// scores per query. The results are the same bits whatever the number.
    pub fn with_positions_per_pass(
        model: &Model<'m>,
        arena: &'a mut [u8],
        options: SessionOptions,
        positions: usize,
    ) -> Result<Self, Error> {
        let config = *model.config();
        let (built, feature) = match options.mem_dtype {
            MemDtype::F32 => (included::MEMORY_F32, "memory-f32"),
            MemDtype::F16 => (included::MEMORY_F16, "memory-f16"),
            MemDtype::Int8 => (included::MEMORY_INT8, "memory-int8"),
        };
        if !built {
            return Err(Error::LeftOut(feature));
        }
        let integer = matches!(model.image().arithmetic(), Arithmetic::Integer { .. });
        if integer
            && (options.mem_dtype != MemDtype::Int8 || options.position_keys == PositionKeys::FoldedIntoQuery)
        {
            return Err(Error::IntegerOptions);
        }
        let layout =
            ArenaLayout::with_positions_per_pass(&config, model.image().arithmetic(), &options, positions)?;
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
        let state = RunState::carve(&mut carver, &layout).ok_or(short)?;
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
            state,
            per_pass: positions.min(options.tgt_len as usize),
        };
        session.prepare_integer_parameters();
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
        self.forward_from(tokens, 0, &[], on_row, &mut ())
    }

    /// Like [`Session::forward`], for scoring: where `targets[i]` is `Some(t)`, only
    /// `log_probs[t]` of position `i`'s row is asked for, and an adaptive softmax computes its
    /// head and `t`'s cluster only, not the other tail clusters (whose entries of the row are
    /// then unspecified). `log_probs[t]` has the bits it has in [`Session::forward`]'s full row.
    /// Positions with `None`, or past the end of `targets`, get full rows. A target that is not a
    /// token of the model is an error, before anything runs.
    pub fn forward_scoring(
        &mut self,
        tokens: &[u32],
        targets: &[Option<u32>],
        on_row: impl FnMut(usize, &[f32]),
    ) -> Result<(), Error> {
        self.forward_from(tokens, 0, targets, on_row, &mut ())
    }

    /// Like [`Session::forward`], and shows `probe` the inputs of every linear layer and every
    /// layer's output (for calibration and error reports; `()` observes nothing, at no cost).
    pub fn forward_probed(
        &mut self,
        tokens: &[u32],
        on_row: impl FnMut(usize, &[f32]),
        probe: &mut impl Probe,
    ) -> Result<(), Error> {
        self.forward_from(tokens, 0, &[], on_row, probe)
    }

    /// Like [`Session::forward`], but computes the output row of the last position only (for
    /// generation).
    pub fn forward_last(&mut self, tokens: &[u32], on_row: impl FnMut(usize, &[f32])) -> Result<(), Error> {
        self.forward_from(tokens, tokens.len().saturating_sub(1), &[], on_row, &mut ())
    }

    fn check_targets(&self, targets: &[Option<u32>]) -> Result<(), Error> {
        let n_token = self.model.config().n_token;
        match targets.iter().flatten().find(|&&t| t >= n_token) {
            Some(&token) => Err(Error::TokenOutOfRange { token, n_token }),
            None => Ok(()),
        }
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
}

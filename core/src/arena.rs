//! The session's arena: how many bytes each buffer takes, and carving them from one slice.
//!
//! Every buffer is a whole number of 16-byte blocks, so with a 16-byte-aligned arena each
//! buffer is aligned too and the total is exact: no padding depends on the arena's address.

use crate::config::Config;
use crate::error::Error;
use crate::image::Arithmetic;
use crate::options::{PositionKeys, SessionOptions};

/// Alignment of the arena and of every buffer in it.
pub const ARENA_ALIGN: usize = 16;

fn round_up(bytes: usize) -> Option<usize> {
    Some(bytes.checked_add(ARENA_ALIGN - 1)? / ARENA_ALIGN * ARENA_ALIGN)
}

/// Every buffer a session uses: the caches in bytes, the others in elements. Each buffer
/// takes a whole number of 16-byte blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaLayout {
    /// Bytes of the `(n_layer, mem_len + tgt_len, n_head * d_head)` cached keys, in the memory dtype.
    pub keys: usize,
    /// Bytes of the `(n_layer, mem_len + tgt_len, n_head * d_head)` cached values.
    pub values: usize,
    /// f32 `(n_layer, distances, n_head * d_head)` position keys `W_r · pos_emb(d)`, computed
    /// once; `(1, distances, n_head * d_head)` when recomputed per segment; none (0) when `W_r`
    /// is folded into the queries. In integer arithmetic a distance takes
    /// [`integer_key_row_bytes`] bytes of its table (int8 values and an exponent per head),
    /// counted here in 4-byte units.
    pub position_keys: usize,
    /// f32 `(distances, d_model)` sinusoid position embeddings, kept when the position keys are
    /// recomputed per segment or folded into the queries (else 0).
    pub position_embeddings: usize,
    /// f32 `(tgt_len, d_model)` the residual stream.
    pub hidden: usize,
    /// f32 `(tgt_len, d_model)` LayerNorm output (pre-LN) / sub-layer output.
    pub normed: usize,
    /// f32 `(tgt_len, n_head * d_head)` queries plus the content bias `u`.
    pub queries: usize,
    /// f32 `(tgt_len, n_head * d_head)` attention output before `o_net`.
    pub attn_vec: usize,
    /// f32 `(n_head * d_head)` rows of queries plus the position bias `v`: one, or, when a
    /// pass takes more than [`DEFAULT_POSITIONS_PER_PASS`] positions, one per position of a
    /// pass up to sixteen (the attention then takes that many queries together).
    pub query_pos: usize,
    /// f32 `(per_pass, 2, n_head * d_head)` the keys and values of the positions one pass of
    /// the linear layers takes, before they are stored (`per_pass`: see
    /// [`ArenaLayout::with_positions_per_pass`]).
    pub key_value: usize,
    /// f32 `(2, mem_len + tgt_len)` a query's attention scores and its position terms; with
    /// int8 memory, then `max(d_head, 2 ⌈d_head / 4⌉)` words of one head's integer sums. For
    /// each row of `query_pos`.
    pub scores: usize,
    /// f32 `(per_pass, d_inner)` feed-forward hidden rows.
    pub ff_inner: usize,
    /// f32 `(per_pass, d_model)` one sinusoid position embedding, one head's folded position
    /// query `W_r,hᵀ (q + v)_h`, or sub-layer output rows.
    pub row: usize,
    /// f32 `(d_embed)` embedding rows (the tokens of a pass, projected together), or the hidden
    /// state projected for one output cluster (a row for each position of the output's pass, as
    /// `log_probs`).
    pub embed_row: usize,
    /// f32 `(n_token)` rows of log-probabilities: one, or one per position of a pass, up to
    /// [`MAX_OUTPUT_ROWS`], when a pass takes more than [`DEFAULT_POSITIONS_PER_PASS`]
    /// positions.
    pub log_probs: usize,
    /// u32 words of kernel scratch for `per_pass` activation rows of the widest input,
    /// `max(d_model, d_inner, n_head * d_head, d_embed)` columns: see
    /// [`matrix::scratch_words`](crate::matrix::scratch_words).
    pub quantized: usize,
    /// In integer arithmetic, i32 words of the layers' parameters made ready once per session
    /// ([`integer_parameter_words`]); 0 in float arithmetic.
    pub parameters: usize,
}

/// Bytes of one distance of an integer session's position keys: `n_head · d_head` int8 values
/// and an exponent byte per head, padded to whole words (a table holds every distance's values,
/// then every distance's exponents, in `distances` times these bytes).
pub fn integer_key_row_bytes(config: &Config) -> Option<usize> {
    let width = config.qkv_width() as usize;
    width
        .checked_add(config.n_head as usize)?
        .checked_next_multiple_of(4)
}

/// The lengths in i32 words of one layer's parameters as an integer session keeps them, in
/// their order in the arena: the two LayerNorms' gains (their `f32` bits) and biases, the
/// feed-forward's two biases, the attention's two query biases (in `Q(frac)`), two words for
/// each of the four matrices with activation scales, and two for each LayerNorm's gains (the
/// smallest and largest exponent of their magnitudes).
pub(crate) fn integer_parameter_parts(config: &Config) -> [usize; 9] {
    let (d_model, d_inner) = (config.d_model as usize, config.d_inner as usize);
    let width = config.qkv_width() as usize;
    [
        d_model, d_model, d_model, d_model, d_inner, d_model, width, width, 12,
    ]
}

/// i32 words an integer session keeps for its layers' parameters, converted from the image's
/// values once (by integer operations on their bits) as the forward pass reads them every
/// token (`integer_parameter_parts` for each layer).
pub fn integer_parameter_words(config: &Config) -> Option<usize> {
    let per_layer = integer_parameter_parts(config)
        .iter()
        .try_fold(0usize, |sum, &n| sum.checked_add(n))?;
    per_layer.checked_mul(config.n_layer as usize)
}

/// Positions one pass of the linear layers takes in a session made by
/// [`Session::new`](crate::Session::new): pairs, which read each weight once for two positions.
pub const DEFAULT_POSITIONS_PER_PASS: usize = 2;

/// Rows of log-probabilities a session keeps at most: a pass of more positions goes through the
/// output layer this many at a time. A row is `n_token` floats, 1 MB at the published
/// WikiText-103 shape, so 128 rows would take 137 MB; the output layer is a seventh of that
/// model's work, and 64 positions at a time read its weights often enough.
pub const MAX_OUTPUT_ROWS: usize = 64;

impl ArenaLayout {
    /// The buffers a model of `config` computing in `arithmetic` (the image's) needs under
    /// `options`, with the linear layers on pairs of positions ([`DEFAULT_POSITIONS_PER_PASS`]).
    pub fn new(
        config: &Config,
        arithmetic: Arithmetic,
        options: &SessionOptions,
    ) -> Result<ArenaLayout, Error> {
        Self::with_positions_per_pass(config, arithmetic, options, DEFAULT_POSITIONS_PER_PASS)
    }

    /// The buffers `config` needs under `options` when the linear layers take up to
    /// `positions` positions of a segment per pass (1 to
    /// [`MAX_POSITIONS_PER_PASS`](crate::kernels::MAX_POSITIONS_PER_PASS), and no more than
    /// `tgt_len`): each weight is read once per pass, so more positions read the weights less
    /// often, at the cost of `positions` rows of the feed-forward and key/value buffers.
    pub fn with_positions_per_pass(
        config: &Config,
        arithmetic: Arithmetic,
        options: &SessionOptions,
        positions: usize,
    ) -> Result<ArenaLayout, Error> {
        if options.tgt_len == 0 || positions == 0 || positions > crate::kernels::MAX_POSITIONS_PER_PASS {
            return Err(Error::BadOptions);
        }
        let overflow = Error::SizeOverflow;
        let tgt = options.tgt_len as usize;
        let capacity = (options.mem_len as usize).checked_add(tgt).ok_or(overflow)?;
        let qkv = config.qkv_width() as usize;
        let d_model = config.d_model as usize;
        let layers = config.n_layer as usize;
        let floats = |rows: usize, width: usize| rows.checked_mul(width).ok_or(overflow);
        let cache = options
            .mem_dtype
            .bytes(
                layers.checked_mul(capacity).ok_or(overflow)?,
                qkv,
                config.d_head as usize,
            )
            .and_then(round_up)
            .ok_or(overflow)?;
        let key_tables = match options.position_keys {
            PositionKeys::PerSession => layers,
            PositionKeys::PerSegment => 1,
            PositionKeys::FoldedIntoQuery => 0,
        };
        let widest_input = [d_model, config.d_inner as usize, qkv, config.d_embed as usize];
        let per_pass = positions.min(tgt);
        // The output layer, the embedding and the attention take the positions of a pass
        // together only when a session asks for more than pairs: a row of log-probabilities is
        // `n_token` floats, the arena's largest buffer on a device with a word vocabulary, the
        // attention's scratch grows with the memory, and device sessions keep one row of each.
        let output_rows = if per_pass > DEFAULT_POSITIONS_PER_PASS {
            per_pass.min(MAX_OUTPUT_ROWS)
        } else {
            1
        };
        let query_rows = output_rows.min(crate::memory::QUERIES_TOGETHER);
        let integer = matches!(arithmetic, Arithmetic::Integer { .. });
        // a distance's row of position keys, in 4-byte units
        let key_row = if integer {
            integer_key_row_bytes(config).ok_or(overflow)? / 4
        } else {
            qkv
        };
        let layout = ArenaLayout {
            keys: cache,
            values: cache,
            position_keys: floats(
                key_tables.checked_mul(options.distances()).ok_or(overflow)?,
                key_row,
            )?,
            position_embeddings: match options.position_keys {
                PositionKeys::PerSession => 0,
                PositionKeys::PerSegment => floats(options.distances(), d_model)?,
                PositionKeys::FoldedIntoQuery => {
                    crate::position::split_table_floats(options.distances(), d_model).ok_or(overflow)?
                }
            },
            hidden: floats(tgt, d_model)?,
            normed: floats(tgt, d_model)?,
            queries: floats(tgt, qkv)?,
            attn_vec: floats(tgt, qkv)?,
            query_pos: floats(query_rows, qkv)?,
            key_value: floats(2 * per_pass, qkv)?,
            scores: crate::attention::scores_len(capacity, config.d_head as usize, options.mem_dtype)
                .and_then(|len| len.checked_mul(query_rows))
                .ok_or(overflow)?,
            ff_inner: floats(per_pass, config.d_inner as usize)?,
            row: floats(per_pass, d_model)?,
            embed_row: floats(output_rows, config.max_emb_dim() as usize)?,
            log_probs: floats(output_rows, config.n_token as usize)?,
            quantized: per_pass * crate::matrix::scratch_words(widest_input.into_iter().max().unwrap_or(0)),
            parameters: match integer {
                true => integer_parameter_words(config).ok_or(overflow)?,
                false => 0,
            },
        };
        layout.checked_total().ok_or(overflow)?;
        Ok(layout)
    }

    /// Bytes of each buffer, in arena order.
    fn sizes(&self) -> Option<[usize; 17]> {
        let f32s = |n: usize| n.checked_mul(4).and_then(round_up);
        Some([
            self.keys,
            self.values,
            f32s(self.position_keys)?,
            f32s(self.position_embeddings)?,
            f32s(self.hidden)?,
            f32s(self.normed)?,
            f32s(self.queries)?,
            f32s(self.attn_vec)?,
            f32s(self.query_pos)?,
            f32s(self.key_value)?,
            f32s(self.scores)?,
            f32s(self.ff_inner)?,
            f32s(self.row)?,
            f32s(self.embed_row)?,
            f32s(self.log_probs)?,
            f32s(self.quantized)?,  // u32 words, four bytes each as f32
            f32s(self.parameters)?, // i32 words
        ])
    }

    fn checked_total(&self) -> Option<usize> {
        self.sizes()?
            .iter()
            .try_fold(0usize, |acc, &n| acc.checked_add(n))
    }

    /// Exact arena bytes.
    pub fn total_bytes(&self) -> usize {
        self.checked_total().unwrap_or(usize::MAX)
    }

    /// Bytes of the recurrence memory (cached keys and values).
    pub fn memory_bytes(&self) -> usize {
        self.keys + self.values
    }

    /// Bytes of the position keys (and, when they are recomputed, the position embeddings).
    pub fn position_key_bytes(&self) -> usize {
        self.sizes().map_or(usize::MAX, |s| s[2] + s[3])
    }

    /// Bytes of the per-segment activations (`tgt_len` rows).
    pub fn activation_bytes(&self) -> usize {
        self.sizes().map_or(usize::MAX, |s| s[4..8].iter().sum())
    }

    /// Bytes of the parameters an integer session makes ready once (0 in float arithmetic).
    pub fn parameter_bytes(&self) -> usize {
        self.sizes().map_or(usize::MAX, |s| s[16])
    }

    /// Bytes of the one-row scratch buffers.
    pub fn scratch_bytes(&self) -> usize {
        self.total_bytes()
            - self.memory_bytes()
            - self.position_key_bytes()
            - self.activation_bytes()
            - self.parameter_bytes()
    }
}

/// Bytes [`zero`] looks at at a time: a page of the smallest size hosts have.
const ZEROED_AT_ONCE: usize = 4096;

/// Makes `bytes` zero, writing only the parts of [`ZEROED_AT_ONCE`] bytes that are not zero
/// already. A host's fresh arena comes zeroed from the system, and the pages of it that are
/// only read stay the one page of zeros (a large arena's log-probability rows, most of which a
/// scoring run never touches, are 68 MB at the WikiText-103 shape), where writing zeros would
/// give each of them a page of its own first. The same bytes either way.
fn zero(bytes: &mut [u8]) {
    for part in bytes.chunks_mut(ZEROED_AT_ONCE) {
        // a word at a time where the part is whole words (the arena's parts are)
        let any_set = match bytemuck::try_cast_slice::<u8, u32>(part) {
            Ok(words) => words.iter().fold(0, |any, &w| any | w) != 0,
            Err(_) => part.iter().fold(0, |any, &b| any | b) != 0,
        };
        if any_set {
            part.fill(0);
        }
    }
}

/// Hands out consecutive buffers from an aligned arena.
#[derive(Debug)]
pub(crate) struct Carver<'a> {
    rest: &'a mut [u8],
}

impl<'a> Carver<'a> {
    /// `arena` must be 16-byte aligned; its length is checked by the caller.
    pub(crate) fn new(arena: &'a mut [u8]) -> Result<Carver<'a>, Error> {
        if !(arena.as_ptr() as usize).is_multiple_of(ARENA_ALIGN) {
            return Err(Error::ArenaMisaligned);
        }
        Ok(Carver { rest: arena })
    }

    /// The next `bytes` bytes (a multiple of 16), zeroed, or `None` if the arena is exhausted.
    pub(crate) fn take_bytes(&mut self, bytes: usize) -> Option<&'a mut [u8]> {
        if bytes > self.rest.len() {
            return None;
        }
        let rest = core::mem::take(&mut self.rest);
        let (head, tail) = rest.split_at_mut(bytes);
        self.rest = tail;
        zero(head);
        Some(head)
    }

    /// The next `len` elements of `T`, zeroed, taking a whole number of 16-byte blocks.
    pub(crate) fn take<T: bytemuck::Pod>(&mut self, len: usize) -> Option<&'a mut [T]> {
        let bytes = round_up(len.checked_mul(core::mem::size_of::<T>())?)?;
        let block: &mut [T] = bytemuck::try_cast_slice_mut(self.take_bytes(bytes)?).ok()?;
        block.get_mut(..len)
    }
}

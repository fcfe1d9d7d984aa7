//! The session's arena: how many bytes each buffer takes, and carving them from one slice.
//!
//! Every buffer is a whole number of 16-byte blocks, so with a 16-byte-aligned arena each
//! buffer is aligned too and the total is exact: no padding depends on the arena's address.

use crate::config::Config;
use crate::error::Error;
use crate::session::SessionOptions;

/// Alignment of the arena and of every buffer in it.
pub const ARENA_ALIGN: usize = 16;

fn round_up(bytes: usize) -> usize {
    bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

/// Sizes in f32 elements of every buffer a session uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaLayout {
    /// `(n_layer, mem_len + tgt_len, n_head * d_head)` cached keys.
    pub keys: usize,
    /// `(n_layer, mem_len + tgt_len, n_head * d_head)` cached values.
    pub values: usize,
    /// `(n_layer, distances, n_head * d_head)` position keys `W_r · pos_emb(d)`, computed once.
    pub position_keys: usize,
    /// `(tgt_len, d_model)` the residual stream.
    pub hidden: usize,
    /// `(tgt_len, d_model)` LayerNorm output (pre-LN) / sub-layer output.
    pub normed: usize,
    /// `(tgt_len, n_head * d_head)` queries plus the content bias `u`.
    pub queries: usize,
    /// `(tgt_len, n_head * d_head)` attention output before `o_net`.
    pub attn_vec: usize,
    /// `(n_head * d_head)` one query plus the position bias `v`.
    pub query_pos: usize,
    /// `(mem_len + tgt_len)` one row of attention scores.
    pub scores: usize,
    /// `(d_inner)` one feed-forward hidden row.
    pub ff_inner: usize,
    /// `(d_model)` one sinusoid position embedding, or one sub-layer output row.
    pub row: usize,
    /// `(d_embed)` the hidden state projected for one output cluster.
    pub out_proj: usize,
    /// `(n_token)` one row of log-probabilities.
    pub log_probs: usize,
}

impl ArenaLayout {
    /// The buffers `config` needs under `options`.
    pub fn new(config: &Config, options: &SessionOptions) -> Result<ArenaLayout, Error> {
        if options.tgt_len == 0 {
            return Err(Error::BadOptions);
        }
        let overflow = Error::ArenaTooSmall {
            needed: usize::MAX,
            got: 0,
        };
        let tgt = options.tgt_len as usize;
        let capacity = (options.mem_len as usize).checked_add(tgt).ok_or(overflow)?;
        let qkv = config.qkv_width() as usize;
        let d_model = config.d_model as usize;
        let layers = config.n_layer as usize;
        let cache = layers
            .checked_mul(capacity)
            .and_then(|n| n.checked_mul(qkv))
            .ok_or(overflow)?;
        let position_keys = layers
            .checked_mul(options.distances())
            .and_then(|n| n.checked_mul(qkv))
            .ok_or(overflow)?;
        let rows = |width: usize| tgt.checked_mul(width).ok_or(overflow);
        let layout = ArenaLayout {
            keys: cache,
            values: cache,
            position_keys,
            hidden: rows(d_model)?,
            normed: rows(d_model)?,
            queries: rows(qkv)?,
            attn_vec: rows(qkv)?,
            query_pos: qkv,
            scores: capacity,
            ff_inner: config.d_inner as usize,
            row: d_model,
            out_proj: config.max_emb_dim() as usize,
            log_probs: config.n_token as usize,
        };
        // Reject sizes whose byte count would overflow.
        layout.checked_total().ok_or(overflow)?;
        Ok(layout)
    }

    fn sizes(&self) -> [usize; 13] {
        [
            self.keys,
            self.values,
            self.position_keys,
            self.hidden,
            self.normed,
            self.queries,
            self.attn_vec,
            self.query_pos,
            self.scores,
            self.ff_inner,
            self.row,
            self.out_proj,
            self.log_probs,
        ]
    }

    fn checked_total(&self) -> Option<usize> {
        self.sizes().iter().try_fold(0usize, |acc, &n| {
            let bytes = n.checked_mul(4)?.checked_add(ARENA_ALIGN)?;
            acc.checked_add(round_up(bytes - ARENA_ALIGN))
        })
    }

    /// Exact arena bytes.
    pub fn total_bytes(&self) -> usize {
        self.checked_total().unwrap_or(usize::MAX)
    }

    /// Bytes of the recurrence memory (cached keys and values).
    pub fn memory_bytes(&self) -> usize {
        round_up(self.keys * 4) + round_up(self.values * 4)
    }

    /// Bytes of the position keys computed once per session.
    pub fn position_key_bytes(&self) -> usize {
        round_up(self.position_keys * 4)
    }

    /// Bytes of the per-segment activations (`tgt_len` rows).
    pub fn activation_bytes(&self) -> usize {
        [self.hidden, self.normed, self.queries, self.attn_vec]
            .iter()
            .map(|&n| round_up(n * 4))
            .sum()
    }

    /// Bytes of the one-row scratch buffers.
    pub fn scratch_bytes(&self) -> usize {
        self.total_bytes() - self.memory_bytes() - self.position_key_bytes() - self.activation_bytes()
    }
}

/// Hands out consecutive f32 buffers from an aligned arena.
#[derive(Debug)]
pub(crate) struct Carver<'a> {
    rest: &'a mut [u8],
}

impl<'a> Carver<'a> {
    /// `arena` must be 16-byte aligned and at least the layout's total (checked by the caller).
    pub(crate) fn new(arena: &'a mut [u8]) -> Result<Carver<'a>, Error> {
        if arena.as_ptr() as usize % ARENA_ALIGN != 0 {
            return Err(Error::ArenaMisaligned);
        }
        Ok(Carver { rest: arena })
    }

    /// The next `len` floats (zeroed), or `None` if the arena is exhausted.
    pub(crate) fn take(&mut self, len: usize) -> Option<&'a mut [f32]> {
        let bytes = round_up(len * 4);
        if bytes > self.rest.len() {
            return None;
        }
        let rest = core::mem::take(&mut self.rest);
        let (head, tail) = rest.split_at_mut(bytes);
        self.rest = tail;
        let floats: &mut [f32] = bytemuck::try_cast_slice_mut(head).ok()?;
        let floats = &mut floats[..len];
        floats.fill(0.0);
        Some(floats)
    }
}

//! The forward pass of Transformer-XL (Dai et al., 2019), one function per sub-layer. For
//! layer `n`, with the memory `m` of the previous segment (the keys and values it left in the
//! ring) and the paper's notation:
//! ```text
//! q, k, v = h W_q, [m ∘ h] W_k, [m ∘ h] W_v             project_qkv
//! A_ij    = (q_i + u) · k_j + (q_i + v) · R_{i-j}        relative_attention
//! a       = Masked-Softmax(A / sqrt(d_head)) v
//! o       = LayerNorm(h + o_net(a))                      attention_output
//! h       = LayerNorm(o + FF(o))                         feed_forward
//! ```
//! `u` is `r_w_bias`, `v` is `r_r_bias`, `R_d = W_r pos_emb(d)` are the position keys (or, with
//! [`PositionKeys::FoldedIntoQuery`], `(q_i + v) · R_d = (W_rᵀ (q_i + v)) · pos_emb(d)`). With
//! `pre_lnorm` the LayerNorm moves to each sub-layer's input instead.

use super::{Linear, Probe, RunState, Session};
use crate::attention::{self, AttentionShape};
use crate::embedding;
use crate::error::Error;
use crate::image::Arithmetic;
use crate::kernels::{self, MAX_POSITIONS_PER_PASS};
use crate::matrix;
use crate::model::LayerWeights;
use crate::options::{split_distances, PositionKeys};
use crate::output;
use crate::position::{position_embedding, position_embeddings, PositionScores, SplitTable};
use crate::vector;
use crate::weights::Matrix;

impl Session<'_, '_> {
    /// The forward pass over one segment; output rows from position `first_output` on.
    pub(super) fn forward_from(
        &mut self,
        tokens: &[u32],
        first_output: usize,
        targets: &[Option<u32>],
        on_row: impl FnMut(usize, &[f32]),
        probe: &mut impl Probe,
    ) -> Result<(), Error> {
        self.check_segment(tokens)?;
        self.check_targets(targets)?;
        if let Arithmetic::Integer { frac } = self.model.image().arithmetic() {
            self.forward_integer(frac, tokens, first_output, targets, on_row);
            return Ok(());
        }
        let shape = self.attention_shape(tokens.len());
        let scale = attention::score_scale(shape.d_head);
        let d_model = self.model.config().d_model as usize;
        self.embed(tokens);
        for layer in 0..self.model.config().n_layer as usize {
            // the layer's weights, found in the image once for both sub-layers
            let w = self.model.layer(layer);
            self.attention((layer, &w), (&shape, scale), probe);
            self.feed_forward((layer, &w), shape.qlen, probe);
            // h is now the layer's output
            let hidden = &self.state.hidden[..shape.qlen * d_model];
            for (i, h) in hidden.chunks_exact(d_model).enumerate() {
                probe.layer_output(layer, i, h);
            }
        }
        self.output(shape.qlen, first_output, targets, on_row);
        self.memory.commit(shape.qlen);
        Ok(())
    }

    /// The shape of a segment of `qlen` positions after the `mlen` remembered ones.
    pub(super) fn attention_shape(&self, qlen: usize) -> AttentionShape {
        let config = self.model.config();
        AttentionShape {
            qlen,
            mlen: self.memory.len(),
            mem_len: self.options.mem_len as usize,
            same_length: self.options.same_length,
            max_distance: self.options.distances() - 1,
            n_head: config.n_head as usize,
            d_head: config.d_head as usize,
        }
    }

    /// Embedding: `h_i = embedding(token_i) * sqrt(d_model)` (adaptive input) into `hidden`.
    fn embed(&mut self, tokens: &[u32]) {
        let d_model = self.model.config().d_model as usize;
        let s = &mut self.state;
        let tokens = &tokens[..tokens.len().min(s.hidden.len() / d_model.max(1))];
        let hidden = &mut s.hidden[..tokens.len() * d_model];
        embedding::embed_each(&self.model, tokens, s.embed_row, s.quantized_input, hidden);
    }

    /// The attention sub-layer of `layer`: `h = LayerNorm(h + o_net(RelAttn(h, m)))`, or with
    /// pre-LN `h = h + o_net(RelAttn(LayerNorm(h), m))`. Its keys and values join the memory.
    fn attention(
        &mut self,
        (layer, w): (usize, &LayerWeights<'_>),
        (shape, scale): (&AttentionShape, f32),
        probe: &mut impl Probe,
    ) {
        self.attention_input(w, shape.qlen);
        self.project_qkv((layer, w), shape, probe);
        let table = self.layer_position_keys((layer, w), shape.mlen + shape.qlen);
        self.relative_attention((layer, w), (shape, scale), table);
        self.attention_output((layer, w), shape.qlen, probe);
    }

    /// The attention input `x = LayerNorm(h)` with pre-LN, into `attn_input`; otherwise `x = h`
    /// is read where it is ([`Session::project_qkv`]).
    fn attention_input(&mut self, w: &LayerWeights<'_>, qlen: usize) {
        let config = self.model.config();
        if !config.pre_lnorm {
            return;
        }
        let d_model = config.d_model as usize;
        let s = &mut self.state;
        let hidden = &s.hidden[..qlen * d_model];
        let attn_input = &mut s.attn_input[..qlen * d_model];
        for (h, x) in hidden
            .chunks_exact(d_model)
            .zip(attn_input.chunks_exact_mut(d_model))
        {
            let eps = config.layer_norm_epsilon;
            vector::layer_norm(h, w.attn_norm_weight, w.attn_norm_bias, eps, x);
        }
    }

    /// `q, k, v = W_qkv x` for each position `i` (`x` the attention input: `attn_input` with
    /// pre-LN, else `hidden`): `q` into `queries`, `k` and `v` into the memory ring at position
    /// `mlen + i`, after the remembered ones. The positions go `per_pass` at a time, which read
    /// the weights once.
    fn project_qkv(
        &mut self,
        (layer, w): (usize, &LayerWeights<'_>),
        shape: &AttentionShape,
        probe: &mut impl Probe,
    ) {
        let d_model = self.model.config().d_model as usize;
        let width = self.model.config().qkv_width() as usize; // n_head * d_head
        let pre_lnorm = self.model.config().pre_lnorm;
        let qkv = w.qkv;
        let s = &mut self.state;
        let mut i = 0;
        while i < shape.qlen {
            let count = self.per_pass.min(shape.qlen - i);
            let input = if pre_lnorm { &s.attn_input } else { &s.hidden };
            let inputs = &input[i * d_model..(i + count) * d_model];
            for x in inputs.chunks_exact(d_model) {
                probe.linear_input(layer, Linear::Qkv, x);
            }
            let queries = &mut s.queries[i * width..(i + count) * width];
            let key_values = &mut s.key_value[..count * 2 * width];
            // W_qkv (3 * n_head * d_head, d_model) @ x (d_model) -> [q | k | v] for each
            // position, q into `queries`, [k | v] (2 * n_head * d_head) into `key_value`
            let rests = Some((&mut key_values[..], 2 * width));
            product(
                &qkv,
                (inputs, d_model),
                (queries, width),
                rests,
                count,
                s.quantized_input,
            );
            for (k, kv) in key_values.chunks_exact(2 * width).enumerate() {
                let (key, value) = kv.split_at(width);
                self.memory.write(layer, shape.mlen + i + k, key, value);
            }
            i += count;
        }
    }

    /// The position keys `R_d = W_r pos_emb(d)` `layer` reads, as the index of their table in
    /// `position_keys`: its own, computed at the start, or the one table, computed now for the
    /// distances `d < klen` this segment can see. With the keys folded into the queries there
    /// is none (the index is not read).
    fn layer_position_keys(&mut self, (layer, w): (usize, &LayerWeights<'_>), klen: usize) -> usize {
        match self.options.position_keys {
            PositionKeys::PerSession => return layer,
            PositionKeys::FoldedIntoQuery => return 0,
            PositionKeys::PerSegment => {}
        }
        let d_model = self.model.config().d_model as usize;
        let width = self.model.config().qkv_width() as usize;
        let r_net = w.r_net;
        let s = &mut self.state;
        let distances = klen.min(self.options.distances());
        let mut d = 0;
        while d < distances {
            let count = self.per_pass.min(distances - d);
            let pos_emb = &s.position_embeddings[d * d_model..(d + count) * d_model];
            let keys = &mut s.position_keys[d * width..(d + count) * width];
            position_keys_of(&r_net, pos_emb, keys, s.quantized_input);
            d += count;
        }
        0
    }

    /// Relative attention for each query `i` over the keys `j` the mask lets it see:
    /// `a_i = sum_j softmax_j(((q_i + u) · k_j + (q_i + v) · R_{mlen+i-j}) / sqrt(d_head)) v_j`,
    /// per head, into `attn_vec`. The position keys are table `table` of `position_keys`, or
    /// (folded) each head's `W_r,hᵀ (q_i + v)_h` meets the table of `pos_emb`.
    fn relative_attention(
        &mut self,
        (layer, w): (usize, &LayerWeights<'_>),
        (shape, scale): (&AttentionShape, f32),
        table: usize,
    ) {
        let width = self.model.config().qkv_width() as usize;
        let distances = self.options.distances();
        let RunState {
            queries,
            position_query,
            attn_vec,
            scores,
            position_keys,
            position_embeddings,
            branch,
            quantized_input,
            ..
        } = &mut self.state;
        let mut positions = match self.options.position_keys {
            PositionKeys::FoldedIntoQuery => {
                let d_model = self.model.config().d_model as usize;
                let (block, coarse) = split_distances(distances);
                let coarse = if coarse == 1 { 0 } else { coarse }; // one block: no rotation
                let (coarse_rows, rest) = position_embeddings.split_at_mut(coarse * d_model);
                let (fine_rows, rotated) = rest.split_at_mut(block * d_model);
                PositionScores::Folded {
                    r_net: w.r_net,
                    table: SplitTable {
                        block,
                        coarse: coarse_rows,
                        fine: fine_rows,
                    },
                    folded: &mut branch[..d_model],
                    rotated: &mut rotated[..if coarse == 0 { 0 } else { d_model }],
                    rotated_block: None,
                    scratch: quantized_input,
                    d_head: shape.d_head,
                }
            }
            PositionKeys::PerSession | PositionKeys::PerSegment => PositionScores::Keys {
                keys: &position_keys[table * distances * width..(table + 1) * distances * width],
                width,
                d_head: shape.d_head,
            },
        };
        // the queries a block takes together (the rows of `position_query`)
        let block = (position_query.len() / width.max(1)).clamp(1, crate::memory::QUERIES_TOGETHER);
        let mut first = 0;
        while first < shape.qlen {
            let count = block.min(shape.qlen - first);
            let rows = first * width..(first + count) * width;
            // content queries q + u (in place), position queries q + v
            let (block_queries, block_queries_pos) =
                (&mut queries[rows.clone()], &mut position_query[..count * width]);
            for (query, query_pos) in block_queries
                .chunks_exact_mut(width)
                .zip(block_queries_pos.chunks_exact_mut(width))
            {
                vector::add_vector_into(query_pos, query, w.r_r_bias);
                vector::add_vector(query, w.r_w_bias);
            }
            let out = &mut attn_vec[rows];
            let together = match &positions {
                PositionScores::Keys { keys, .. } if count > 1 => attention::attend_block(
                    (shape, scale),
                    first,
                    block_queries,
                    block_queries_pos,
                    keys,
                    &self.memory,
                    layer,
                    scores,
                    out,
                ),
                _ => false,
            };
            if !together {
                for (b, ((query, query_pos), out)) in block_queries
                    .chunks_exact(width)
                    .zip(block_queries_pos.chunks_exact(width))
                    .zip(out.chunks_exact_mut(width))
                    .enumerate()
                {
                    attention::attend_one(
                        (shape, scale),
                        first + b,
                        query,
                        query_pos,
                        &mut positions,
                        &self.memory,
                        layer,
                        scores,
                        out,
                    );
                }
            }
            first += count;
        }
    }

    /// `h = h + o_net(a)` for each position, then `h = LayerNorm(h)` (post-LN). The positions
    /// go `per_pass` at a time, which read the weights once.
    fn attention_output(
        &mut self,
        (layer, w): (usize, &LayerWeights<'_>),
        qlen: usize,
        probe: &mut impl Probe,
    ) {
        let config = self.model.config();
        let d_model = config.d_model as usize;
        let width = config.qkv_width() as usize;
        let s = &mut self.state;
        let mut i = 0;
        while i < qlen {
            let count = self.per_pass.min(qlen - i);
            let a = &s.attn_vec[i * width..(i + count) * width];
            for a in a.chunks_exact(width) {
                probe.linear_input(layer, Linear::ONet, a);
            }
            let branch = &mut s.branch[..count * d_model];
            let hidden = &mut s.hidden[i * d_model..(i + count) * d_model];
            // o_net (d_model, n_head * d_head) @ a (n_head * d_head) -> branch (d_model), added
            // to h (a lone position's in the pass that scales the sums)
            if kernels::LONE_POSITION_PASSES && count == 1 {
                let a = (&a[..width], None);
                matrix::matvec_residual_known(&w.o_net, a, None, branch, hidden, s.quantized_input);
            } else {
                product(
                    &w.o_net,
                    (a, width),
                    (branch, d_model),
                    None,
                    count,
                    s.quantized_input,
                );
                for (h, out) in hidden.chunks_exact_mut(d_model).zip(branch.chunks_exact(d_model)) {
                    kernels::add_assign(h, out);
                }
            }
            if !config.pre_lnorm {
                let eps = config.layer_norm_epsilon;
                vector::layer_norm_rows_in_place(hidden, d_model, w.attn_norm_weight, w.attn_norm_bias, eps);
            }
            i += count;
        }
    }

    /// The position-wise feed-forward sub-layer of `layer`, for each position:
    /// `h = LayerNorm(h + W_2 ReLU(W_1 h + b_1) + b_2)`, or with pre-LN
    /// `h = h + W_2 ReLU(W_1 LayerNorm(h) + b_1) + b_2`. The positions go `per_pass` at a
    /// time, which read the weights once.
    fn feed_forward(&mut self, (layer, w): (usize, &LayerWeights<'_>), qlen: usize, probe: &mut impl Probe) {
        let config = self.model.config();
        let (d_model, d_inner) = (config.d_model as usize, config.d_inner as usize);
        let eps = config.layer_norm_epsilon;
        let s = &mut self.state;
        let mut i = 0;
        while i < qlen {
            let count = self.per_pass.min(qlen - i);
            let hidden = &mut s.hidden[i * d_model..(i + count) * d_model];
            let x: &[f32] = if config.pre_lnorm {
                let normed = &mut s.branch[..count * d_model];
                for (h, x) in hidden.chunks_exact(d_model).zip(normed.chunks_exact_mut(d_model)) {
                    vector::layer_norm(h, w.ff_norm_weight, w.ff_norm_bias, eps, x);
                }
                normed
            } else {
                hidden
            };
            for x in x.chunks_exact(d_model) {
                probe.linear_input(layer, Linear::Ff1, x);
            }
            let inner = &mut s.ff_inner[..count * d_inner];
            // W_1 (d_inner, d_model) @ x (d_model) + b_1 -> inner (d_inner), each position (a
            // lone one with the bias added in the pass that scales the sums)
            if kernels::LONE_POSITION_PASSES && count == 1 {
                let x = (&x[..d_model], None);
                matrix::matvec_bias_known(&w.ff1_weight, x, w.ff1_bias, inner, s.quantized_input);
            } else {
                product(
                    &w.ff1_weight,
                    (x, d_model),
                    (inner, d_inner),
                    None,
                    count,
                    s.quantized_input,
                );
                for inner in inner.chunks_exact_mut(d_inner) {
                    vector::add_vector(inner, w.ff1_bias);
                }
            }
            // the ReLU's largest output, where its kernel finds it, spares the quantization of
            // a lone position its scan
            let mut magnitude = None;
            for inner in inner.chunks_exact_mut(d_inner) {
                magnitude = kernels::relu_magnitude_bits(inner);
                probe.linear_input(layer, Linear::Ff2, inner);
            }
            // the attention input is spent: its first rows take the output
            let ff_out = &mut s.attn_input[..count * d_model];
            let hidden = &mut s.hidden[i * d_model..(i + count) * d_model];
            // W_2 (d_model, d_inner) @ inner (d_inner) + b_2 -> ff_out (d_model), each position,
            // added to h (a lone position's in the pass that scales the sums)
            if kernels::LONE_POSITION_PASSES && count == 1 {
                let (inner, out) = ((&inner[..d_inner], magnitude), &mut ff_out[..d_model]);
                let bias = Some(w.ff2_bias);
                matrix::matvec_residual_known(&w.ff2_weight, inner, bias, out, hidden, s.quantized_input);
            } else {
                let ff = (&mut ff_out[..], d_model);
                product(
                    &w.ff2_weight,
                    (inner, d_inner),
                    ff,
                    None,
                    count,
                    s.quantized_input,
                );
                for (h, out) in hidden
                    .chunks_exact_mut(d_model)
                    .zip(ff_out.chunks_exact_mut(d_model))
                {
                    vector::add_vector(out, w.ff2_bias);
                    kernels::add_assign(h, out);
                }
            }
            if !config.pre_lnorm {
                vector::layer_norm_rows_in_place(hidden, d_model, w.ff_norm_weight, w.ff_norm_bias, eps);
            }
            i += count;
        }
    }

    /// The output: `log_probs = ln softmax(W_out h_i + b_out)` (full or adaptive) for each
    /// position `i` from `first_output` on, handed to `on_row(i, log_probs)`; where `targets[i]`
    /// is `Some(t)`, only `log_probs[t]` is asked for ([`output::log_probs_of_positions`]). The positions go
    /// as many at a time as the arena has rows of log-probabilities for (one, unless the
    /// session takes more than pairs: [`ArenaLayout`](crate::arena::ArenaLayout)), each
    /// cluster's weights read once for them.
    fn output(
        &mut self,
        qlen: usize,
        first_output: usize,
        targets: &[Option<u32>],
        mut on_row: impl FnMut(usize, &[f32]),
    ) {
        let config = self.model.config();
        let (d_model, n_token) = (config.d_model as usize, config.n_token as usize);
        let s = &mut self.state;
        let at_once = (s.log_probs.len() / n_token.max(1)).clamp(1, MAX_POSITIONS_PER_PASS);
        let mut i = first_output;
        while i < qlen {
            let count = at_once.min(qlen - i);
            let hidden = &s.hidden[i * d_model..(i + count) * d_model];
            let log_probs = &mut s.log_probs[..count * n_token];
            output::log_probs_of_positions(
                &self.model,
                &rows(hidden, d_model)[..count],
                targets.get(i..).unwrap_or_default(),
                s.embed_row,
                s.quantized_input,
                log_probs,
            );
            for (k, row) in log_probs.chunks_exact(n_token).enumerate() {
                on_row(i + k, row);
            }
            i += count;
        }
    }

    /// Position keys `R_d = W_r pos_emb(d)` for every layer and distance `d < distances`,
    /// computed once, `per_pass` distances at a time: they do not depend on the tokens. With
    /// [`PositionKeys::PerSegment`], only the table of `pos_emb(d)` is kept; with
    /// [`PositionKeys::FoldedIntoQuery`], the two small tables of `pos_emb` it splits the
    /// distances into ([`SplitTable`]).
    pub(super) fn compute_position_keys(&mut self) {
        if let Arithmetic::Integer { frac } = self.model.image().arithmetic() {
            return self.compute_position_keys_integer(frac);
        }
        let config = *self.model.config();
        let d_model = config.d_model as usize;
        let width = config.qkv_width() as usize;
        let distances = self.options.distances();
        let s = &mut self.state;
        if self.options.position_keys == PositionKeys::FoldedIntoQuery {
            // pos_emb(a·block) for each block a, then pos_emb(b) for b < block
            let (block, coarse) = split_distances(distances);
            let coarse = if coarse == 1 { 0 } else { coarse }; // one block: no rotation
            let rows = s.position_embeddings[..(coarse + block) * d_model].chunks_exact_mut(d_model);
            for (i, row) in rows.enumerate() {
                let d = if i < coarse { i * block } else { i - coarse };
                position_embedding(d, row);
            }
            return;
        }
        if self.options.position_keys != PositionKeys::PerSession {
            position_embeddings(0, &mut s.position_embeddings[..distances * d_model], d_model);
            return;
        }
        // `per_pass` distances at a time, which read each layer's W_r once
        let mut d = 0;
        while d < distances {
            let count = self.per_pass.min(distances - d);
            let pos_emb = &mut s.branch[..count * d_model];
            position_embeddings(d, pos_emb, d_model);
            for layer in 0..config.n_layer as usize {
                let at = (layer * distances + d) * width;
                let r_net = self.model.layer(layer).r_net;
                let keys = &mut s.position_keys[at..at + count * width];
                position_keys_of(&r_net, pos_emb, keys, s.quantized_input);
            }
            d += count;
        }
    }

    /// Fills the memory with the keys and values of `mem_len` all-zero hidden states:
    /// `[k | v] = W_kv x` with `x = LayerNorm(0)` (pre-LN) or `x = 0`, for every layer.
    pub(super) fn fill_zero_memory(&mut self) {
        if let Arithmetic::Integer { frac } = self.model.image().arithmetic() {
            return self.fill_zero_memory_integer(frac);
        }
        let config = *self.model.config();
        let d_model = config.d_model as usize;
        let width = config.qkv_width() as usize;
        let mem_len = self.options.mem_len as usize;
        let s = &mut self.state;
        for layer in 0..config.n_layer as usize {
            let w = self.model.layer(layer);
            let zero = &mut s.branch[..d_model];
            zero.fill(0.0);
            let x = &mut s.attn_input[..d_model];
            if config.pre_lnorm {
                let eps = config.layer_norm_epsilon;
                vector::layer_norm(zero, w.attn_norm_weight, w.attn_norm_bias, eps, x);
            } else {
                x.fill(0.0);
            }
            let w_kv = w.qkv.row_range(width, 3 * width);
            // W_kv (2 * n_head * d_head, d_model) @ x (d_model) -> [k | v] (2 * n_head * d_head)
            let key_value = &mut s.key_value[..2 * width];
            matrix::matvec(&w_kv, x, key_value, s.quantized_input);
            let (key, value) = key_value.split_at(width);
            for position in 0..mem_len {
                self.memory.write(layer, position, key, value);
            }
        }
        self.memory.set_len(mem_len);
    }
}

/// `R_d = W_r pos_emb(d)` for each row of `pos_emb` (rows of `d_model`, at most
/// [`MAX_POSITIONS_PER_PASS`]) into the same row of `keys` (rows of `n_head * d_head`), the
/// weights read once for them all.
fn position_keys_of(r_net: &Matrix<'_>, pos_emb: &[f32], keys: &mut [f32], scratch: &mut [u32]) {
    let (d_model, width) = (r_net.cols, r_net.rows);
    let count = (pos_emb.len() / d_model.max(1)).min(MAX_POSITIONS_PER_PASS);
    // W_r (n_head * d_head, d_model) @ pos_emb(d) (d_model) -> R_d (n_head * d_head)
    matrix::matmul_split(
        r_net,
        &rows(pos_emb, d_model)[..count],
        &mut rows_mut(keys, width)[..count],
        &mut no_rest()[..count],
        scratch,
    );
}

/// [`matrix::matmul_split`] of the first `count` rows of `xs` (rows of `x_width`) into the rows
/// of `firsts` (of `first_width`) and, where given, of `rests`. One position's rows are passed
/// as they are, without the arrays of [`MAX_POSITIONS_PER_PASS`] rows (copied from a template
/// of empty slices each time) that several take.
fn product(
    weight: &Matrix<'_>,
    (xs, x_width): (&[f32], usize),
    (firsts, first_width): (&mut [f32], usize),
    rests: Option<(&mut [f32], usize)>,
    count: usize,
    scratch: &mut [u32],
) {
    if count == 1 {
        let rest: &mut [f32] = match rests {
            Some((rests, width)) => &mut rests[..width],
            None => &mut [],
        };
        let (x, first) = (&xs[..x_width], &mut firsts[..first_width]);
        return matrix::matmul_split(weight, &[x], &mut [first], &mut [rest], scratch);
    }
    let mut rests = match rests {
        Some((rests, width)) => rows_mut(rests, width),
        None => no_rest(),
    };
    matrix::matmul_split(
        weight,
        &rows(xs, x_width)[..count],
        &mut rows_mut(firsts, first_width)[..count],
        &mut rests[..count],
        scratch,
    );
}

/// `buffer`'s rows of `width` (the first [`MAX_POSITIONS_PER_PASS`] of them; empty slices
/// after the last), one per position of a pass.
fn rows(buffer: &[f32], width: usize) -> [&[f32]; MAX_POSITIONS_PER_PASS] {
    let mut rows: [&[f32]; MAX_POSITIONS_PER_PASS] = [&[]; MAX_POSITIONS_PER_PASS];
    for (slot, row) in rows.iter_mut().zip(buffer.chunks_exact(width)) {
        *slot = row;
    }
    rows
}

/// [`rows`] of a buffer the pass writes.
fn rows_mut(buffer: &mut [f32], width: usize) -> [&mut [f32]; MAX_POSITIONS_PER_PASS] {
    let mut rows: [&mut [f32]; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| Default::default());
    for (slot, row) in rows.iter_mut().zip(buffer.chunks_exact_mut(width)) {
        *slot = row;
    }
    rows
}

/// Empty second parts of the outputs, for a product whose outputs are not split.
fn no_rest<'y>() -> [&'y mut [f32]; MAX_POSITIONS_PER_PASS] {
    core::array::from_fn(|_| Default::default())
}

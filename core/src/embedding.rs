//! Adaptive input embedding (Baevski & Auli): the vocabulary is split into clusters at the
//! cutoffs; cluster `i` has a table of width `d_embed / div_val^i` projected up to `d_model`.
//! With `div_val = 1` there is one table (projected only when `d_embed != d_model`).
//! The result is scaled by `sqrt(d_model)`.

use crate::kernels::{self, MAX_POSITIONS_PER_PASS};
use crate::matrix;
use crate::model::Model;

/// `embedding(token) * sqrt(d_model) -> out (d_model)`. `token < n_token` (checked by the caller);
/// `row` (at least `d_embed`) and `scratch` (at least `scratch_words(d_embed)`) are scratch.
pub fn embed(model: &Model<'_>, token: u32, row: &mut [f32], scratch: &mut [u32], out: &mut [f32]) {
    let config = model.config();
    let (table, index) = config.embedding_row(token);
    let width = config.emb_dim(table) as usize;
    let row = &mut row[..width];
    model.emb_layer(table).row_to_f32(index, row);
    if config.has_emb_proj() {
        // emb_projs[i] (d_model, width) @ row (width) -> out (d_model)
        matrix::matvec(&model.emb_proj(table), row, out, scratch);
    } else {
        out.copy_from_slice(row);
    }
    kernels::scale(out, libm::sqrt(config.d_model as f64) as f32);
}

/// [`embed`] for each of `tokens`, into consecutive rows of `outs` (rows of `d_model`), with the
/// same bits: up to `rows.len() / max_emb_dim` tokens at a time (at most
/// [`MAX_POSITIONS_PER_PASS`]), the tokens of one table projected together, so that each
/// projection is read once for them rather than once per token. `scratch` holds
/// [`scratch_words`](matrix::scratch_words)`(d_embed)` words for each of two tokens (int8
/// weights take inputs in pairs); rows of `outs` past the tokens' are left as they are.
pub fn embed_each(
    model: &Model<'_>,
    tokens: &[u32],
    rows: &mut [f32],
    scratch: &mut [u32],
    outs: &mut [f32],
) {
    let config = model.config();
    let d_model = config.d_model as usize;
    let stride = config.max_emb_dim() as usize;
    let at_once = (rows.len() / stride.max(1)).min(MAX_POSITIONS_PER_PASS);
    if !config.has_emb_proj() || at_once < 2 {
        for (token, out) in tokens.iter().zip(outs.chunks_exact_mut(d_model)) {
            embed(model, *token, rows, scratch, out);
        }
        return;
    }
    for (tokens, outs) in tokens.chunks(at_once).zip(outs.chunks_mut(at_once * d_model)) {
        for table in 0..config.n_emb_tables() {
            let width = config.emb_dim(table) as usize;
            let mut xs: [&[f32]; MAX_POSITIONS_PER_PASS] = [&[]; MAX_POSITIONS_PER_PASS];
            let mut ys: [&mut [f32]; MAX_POSITIONS_PER_PASS] = core::array::from_fn(|_| Default::default());
            let mut count = 0;
            let pairs = tokens.iter().zip(outs.chunks_exact_mut(d_model));
            for ((token, out), row) in pairs.zip(rows.chunks_exact_mut(stride)) {
                let (token_table, index) = config.embedding_row(*token);
                if token_table == table {
                    let row = &mut row[..width];
                    model.emb_layer(table).row_to_f32(index, row);
                    xs[count] = row;
                    ys[count] = out;
                    count += 1;
                }
            }
            if count > 0 {
                // emb_projs[table] (d_model, width) @ row (width) -> out (d_model), per token
                matrix::matmul(&model.emb_proj(table), &xs[..count], &mut ys[..count], scratch);
            }
        }
        let scale = libm::sqrt(config.d_model as f64) as f32;
        for out in outs.chunks_exact_mut(d_model).take(tokens.len()) {
            kernels::scale(out, scale);
        }
    }
}

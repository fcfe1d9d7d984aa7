//! Adaptive input embedding (Baevski & Auli): the vocabulary is split into clusters at the
//! cutoffs; cluster `i` has a table of width `d_embed / div_val^i` projected up to `d_model`.
//! With `div_val = 1` there is one table (projected only when `d_embed != d_model`).
//! The result is scaled by `sqrt(d_model)`.

use crate::kernels;
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
        kernels::matvec(&model.emb_proj(table), row, out, scratch);
    } else {
        out.copy_from_slice(row);
    }
    kernels::scale(out, libm::sqrt(config.d_model as f64) as f32);
}

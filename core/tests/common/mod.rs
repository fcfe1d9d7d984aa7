//! Tiny models built in the test, so the core's own tests (and Miri) run whole sessions
//! without fixtures or other crates.

#![allow(dead_code)]

pub use txl_core::random_model::{tiny_config, MatrixDtype, VectorDtype};
use txl_core::random_model::{Init, RandomModel};
use txl_core::{AlignedBytes, Config, Model, Session, SessionOptions};

/// An image of `config` with random weights from `seed` ([`Init::Plain`]), matrices stored as
/// `weights` says.
pub fn tiny_image(config: &Config, weights: MatrixDtype, seed: u64) -> AlignedBytes {
    tiny_image_with_vectors(config, weights, VectorDtype::F32, seed)
}

/// [`tiny_image`] with the vectors stored as `vectors` says.
pub fn tiny_image_with_vectors(
    config: &Config,
    weights: MatrixDtype,
    vectors: VectorDtype,
    seed: u64,
) -> AlignedBytes {
    RandomModel::new(config, seed)
        .init(Init::Plain)
        .matrices(weights)
        .vectors(vectors)
        .aligned()
        .expect("a valid tiny model")
}

/// A 16-byte-aligned arena of `bytes`.
pub fn arena(bytes: usize) -> Vec<u128> {
    vec![0u128; bytes.div_ceil(16)]
}

/// Every log-probability of `tokens` in segments of `options.tgt_len`, the linear layers on
/// `positions` positions a pass.
pub fn log_prob_bits(
    model: &Model<'_>,
    options: SessionOptions,
    positions: usize,
    tokens: &[u32],
) -> Vec<u32> {
    let bytes = Session::arena_bytes_for_positions_per_pass(model, &options, positions).unwrap();
    let mut memory = arena(bytes);
    let arena = bytemuck::cast_slice_mut(&mut memory);
    let mut session = Session::with_positions_per_pass(model, arena, options, positions).unwrap();
    let mut bits = Vec::new();
    for segment in tokens.chunks(options.tgt_len as usize) {
        session
            .forward(segment, |_, row| bits.extend(row.iter().map(|v| v.to_bits())))
            .unwrap();
    }
    bits
}

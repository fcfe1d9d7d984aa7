//! `Model::set_fast_f32`: the f32 weight products in the fused order. Its rows differ from the
//! exact ones (the switch is not ignored) by a few ulps a sum, and its bits do not depend on
//! how many positions a pass takes (each kernel's grouping of inputs gives the portable bits).

mod common;

use common::{arena, has_avx2_fma, tiny_config, tiny_image, unless_x86_64_reached, MatrixDtype};
use txl_core::kernels::MAX_POSITIONS_PER_PASS;
use txl_core::{Config, Model, Session, SessionOptions};

/// The tiny config, wide enough that a row's sum fills the sixteen lanes and has a tail.
fn wide_config() -> Config {
    Config {
        d_model: 40,
        d_embed: 40,
        n_head: 2,
        d_head: 20,
        d_inner: 72,
        ..tiny_config()
    }
}

/// Every row `model` gives for `tokens` in segments of `tgt_len`, `positions` a pass.
fn rows(model: &Model<'_>, tokens: &[u32], tgt_len: u32, positions: usize) -> Vec<Vec<f32>> {
    let options = SessionOptions {
        tgt_len,
        ..SessionOptions::from_config(model.config())
    };
    let bytes = Session::arena_bytes_for_positions_per_pass(model, &options, positions).unwrap();
    let mut memory = arena(bytes);
    let arena = bytemuck::cast_slice_mut(&mut memory);
    let mut session = Session::with_positions_per_pass(model, arena, options, positions).unwrap();
    let mut rows = Vec::new();
    for segment in tokens.chunks(tgt_len as usize) {
        session
            .forward(segment, |_, row| rows.push(row.to_vec()))
            .unwrap();
    }
    rows
}

#[test]
fn fast_f32_rows_are_close_to_the_exact_ones_and_not_the_same() {
    let config = wide_config();
    let image = tiny_image(&config, MatrixDtype::F32, 21);
    let exact_model = Model::parse(image.bytes()).unwrap();
    let mut fast_model = exact_model;
    fast_model.set_fast_f32(true);
    assert!(fast_model.fast_f32() && !exact_model.fast_f32());
    let tokens: Vec<u32> = (0..if cfg!(miri) { 4 } else { 23 })
        .map(|t| (t * 7 + 2) % config.n_token)
        .collect();
    let exact = rows(&exact_model, &tokens, 3, 2);
    let fast = rows(&fast_model, &tokens, 3, 2);
    let mut differing = 0;
    for (i, (exact, fast)) in exact.iter().zip(&fast).enumerate() {
        for (e, f) in exact.iter().zip(fast) {
            differing += usize::from(e.to_bits() != f.to_bits());
            assert!(
                (e - f).abs() <= 1e-4 * (1.0 + e.abs()),
                "position {i}: exact {e}, fast {f}"
            );
        }
    }
    assert!(
        differing > 0,
        "fast f32 gave the exact bits: the switch did nothing"
    );
}

#[test]
fn fast_f32_bits_do_not_depend_on_positions_per_pass() {
    // (aarch64 always has its NEON kernel)
    unless_x86_64_reached(
        has_avx2_fma(),
        "the fused order's AVX2 kernel (matmul_fma_f32)",
        "AVX2 and FMA",
    );
    let config = wide_config();
    let image = tiny_image(&config, MatrixDtype::F32, 8);
    let mut model = Model::parse(image.bytes()).unwrap();
    model.set_fast_f32(true);
    let tokens: Vec<u32> = (0..if cfg!(miri) { 5 } else { 26 })
        .map(|t| (t * 5 + 1) % config.n_token)
        .collect();
    let bits = |rows: Vec<Vec<f32>>| -> Vec<u32> { rows.iter().flatten().map(|v| v.to_bits()).collect() };
    let one = bits(rows(&model, &tokens, 13, 1));
    for positions in [2, 3, 7, MAX_POSITIONS_PER_PASS] {
        assert_eq!(
            bits(rows(&model, &tokens, 13, positions)),
            one,
            "{positions} positions a pass"
        );
    }
}

//! Vectors (biases, LayerNorm gains and biases, `u` and `v`) may be stored in f16: an image
//! with f16 vectors is smaller by half their bytes and gives the same bits as the image that
//! stores the same numbers in f32, in every weight dtype, memory dtype and session shape.

mod common;

use common::{log_prob_bits, tiny_config, tiny_image_with_vectors, MatrixDtype, VectorDtype};
use txl_core::{MemDtype, Model, SessionOptions};

/// [`log_prob_bits`] of the image in `bytes`, two positions a pass (the default).
fn bits_of(bytes: &[u8], options: SessionOptions, tokens: &[u32]) -> Vec<u32> {
    log_prob_bits(&Model::parse(bytes).unwrap(), options, 2, tokens)
}

#[test]
fn f16_vectors_give_the_bits_of_the_same_numbers_in_f32() {
    let config = tiny_config();
    let miri = cfg!(miri);
    let tokens: Vec<u32> = (0..if miri { 4 } else { 17 })
        .map(|t| (t * 5 + 2) % config.n_token)
        .collect();
    let every_weights = [
        MatrixDtype::F32,
        MatrixDtype::F16,
        MatrixDtype::Int8,
        MatrixDtype::Int8Smoothed,
    ];
    let weights_kinds: &[MatrixDtype] = if miri {
        &[MatrixDtype::Int8]
    } else {
        &every_weights
    };
    let tgt_lens: &[u32] = if miri { &[2] } else { &[1, 3, 5] };
    for &weights in weights_kinds {
        let wide = tiny_image_with_vectors(&config, weights, VectorDtype::F32OfF16, 7);
        let narrow = tiny_image_with_vectors(&config, weights, VectorDtype::F16, 7);
        // the vectors are d_model, d_inner, n_head × d_head and n_token long, each padded to 16
        assert!(
            narrow.len() < wide.len(),
            "{weights:?}: {} vs {}",
            narrow.len(),
            wide.len()
        );
        for &tgt_len in tgt_lens {
            for mem_dtype in [MemDtype::F32, MemDtype::Int8] {
                let options = SessionOptions {
                    tgt_len,
                    mem_dtype,
                    ..SessionOptions::from_config(&config)
                };
                let expected = bits_of(wide.bytes(), options, &tokens);
                let got = bits_of(narrow.bytes(), options, &tokens);
                assert!(
                    got == expected,
                    "{weights:?}, tgt_len {tgt_len}, {mem_dtype:?} memory"
                );
            }
        }
    }
}

#[test]
fn f16_vectors_are_not_f32_vectors() {
    // The widened values are what the session computes with: rounding them changes the output
    // (the test above would pass if the f16 payload were ignored and something else read).
    let config = tiny_config();
    let options = SessionOptions::from_config(&config);
    let tokens = [1, 4, 9];
    let exact = tiny_image_with_vectors(&config, MatrixDtype::F32, VectorDtype::F32, 7);
    let rounded = tiny_image_with_vectors(&config, MatrixDtype::F32, VectorDtype::F16, 7);
    assert_ne!(
        bits_of(exact.bytes(), options, &tokens),
        bits_of(rounded.bytes(), options, &tokens)
    );
}

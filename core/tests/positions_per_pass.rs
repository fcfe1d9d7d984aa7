//! The linear layers take a segment's positions one, two (the default) or more at a time: the
//! log-probabilities are the same bits whatever the number, in every weight dtype, and the
//! arena grows with it. With more than two, the attention takes up to sixteen queries together
//! too, over f32, f16 and int8 memory: the same bits as one at a time, under every mask.

mod common;

use common::{
    arena, has_avx512bw, log_prob_bits, tiny_config, tiny_image, unless_x86_64_reached, MatrixDtype,
};
use txl_core::kernels::{self, MAX_POSITIONS_PER_PASS};
use txl_core::{Config, Error, MemDtype, MemInit, Model, PositionKeys, Session, SessionOptions};

#[test]
fn every_number_of_positions_per_pass_gives_the_same_bits() {
    let config = tiny_config();
    // the interpreter is about 10^4 times slower: one segment of int8 weights (the code that
    // reads rows in blocks), three positions a pass against pairs
    let miri = cfg!(miri);
    let tokens: Vec<u32> = (0..if miri { 5 } else { 23 })
        .map(|t| (t * 7 + 3) % config.n_token)
        .collect();
    let tgt_lens: &[u32] = if miri { &[5] } else { &[1, 5, 7] };
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
    let mem_dtypes: &[MemDtype] = if miri {
        &[MemDtype::F32]
    } else {
        &[MemDtype::F32, MemDtype::F16, MemDtype::Int8]
    };
    let positions_tried: &[usize] = if miri {
        &[3]
    } else {
        &[1, 3, 4, MAX_POSITIONS_PER_PASS]
    };
    for &weights in weights_kinds {
        let image = tiny_image(&config, weights, 11);
        let model = Model::parse(image.bytes()).unwrap();
        for &tgt_len in tgt_lens {
            for &mem_dtype in mem_dtypes {
                let options = SessionOptions {
                    tgt_len,
                    mem_dtype,
                    ..SessionOptions::from_config(&config)
                };
                let pairs = log_prob_bits(&model, options, 2, &tokens);
                let default_bytes = Session::arena_bytes(&model, &options).unwrap();
                assert_eq!(
                    Session::arena_bytes_for_positions_per_pass(&model, &options, 2).unwrap(),
                    default_bytes
                );
                for &positions in positions_tried {
                    let bits = log_prob_bits(&model, options, positions, &tokens);
                    assert!(
                        bits == pairs,
                        "{weights:?}, tgt_len {tgt_len}, {mem_dtype:?} memory: {positions} positions a pass"
                    );
                    let bytes =
                        Session::arena_bytes_for_positions_per_pass(&model, &options, positions).unwrap();
                    let wider = positions.min(tgt_len as usize) > 2.min(tgt_len as usize);
                    assert_eq!(
                        bytes > default_bytes,
                        wider,
                        "{positions} positions, tgt_len {tgt_len}"
                    );
                }
            }
        }
    }
}

#[test]
fn queries_taken_together_give_the_bits_of_one_query_at_a_time() {
    // without them the int8 memory's sums of several queries are one query's sums each time
    unless_x86_64_reached(
        has_avx512bw(),
        "the attention's AVX-512BW kernels of several queries (key_sums_each_i8, value_sums_each_i8, \
         magnitudes_each_f32)",
        "AVX-512 F, BW and VL",
    );
    // heads of 19: the products' columns past the register widths; 3 * 19 != d_model
    let config = Config {
        d_model: 12,
        d_embed: 12,
        n_head: 3,
        d_head: 19,
        ..tiny_config()
    };
    let image = tiny_image(&config, MatrixDtype::F32, 5);
    let model = Model::parse(image.bytes()).unwrap();
    let miri = cfg!(miri);
    let tokens: Vec<u32> = (0..if miri { 6 } else { 90 })
        .map(|t| (t * 5 + 1) % config.n_token)
        .collect();
    // (tgt_len, mem_len): no memory, a memory shorter and longer than a block of queries,
    // segments of several blocks with a last one short; the ring wraps in the later segments
    let shapes: &[(u32, u32)] = if miri {
        &[(3, 2)]
    } else {
        &[(7, 0), (20, 5), (40, 20), (17, 33)]
    };
    // f16 and int8 memory: the widened keys, and the integer key and value sums, of several
    // queries at once (safe code but for the x86-64 kernels, which the interpreter does not
    // run: f32 alone under Miri)
    let mem_dtypes: &[MemDtype] = if miri {
        &[MemDtype::F32]
    } else {
        &[MemDtype::F32, MemDtype::F16, MemDtype::Int8]
    };
    for (&(tgt_len, mem_len), &mem_dtype) in
        shapes.iter().flat_map(|s| mem_dtypes.iter().map(move |m| (s, m)))
    {
        // clamp_len 3: the farther distances share R_3 (under Miri two of the eight masks, each
        // value of each option once)
        let every_mask = [false, true]
            .into_iter()
            .flat_map(|same| [0, 3].into_iter().map(move |clamp| (same, clamp)))
            .flat_map(|(same, clamp)| [MemInit::Empty, MemInit::Zeros].map(|init| (same, clamp, init)));
        let masks: Vec<(bool, u32, MemInit)> = if miri {
            vec![(false, 0, MemInit::Empty), (true, 3, MemInit::Zeros)]
        } else {
            every_mask.collect()
        };
        for (same_length, clamp_len, mem_init) in masks {
            let options = SessionOptions {
                tgt_len,
                mem_len,
                clamp_len,
                same_length,
                mem_init,
                mem_dtype,
                ..SessionOptions::from_config(&config)
            };
            let one_at_a_time = log_prob_bits(&model, options, 2, &tokens);
            let positions_tried: &[usize] = if miri {
                &[3]
            } else {
                &[3, 16, MAX_POSITIONS_PER_PASS]
            };
            for &positions in positions_tried {
                assert!(
                    log_prob_bits(&model, options, positions, &tokens) == one_at_a_time,
                    "tgt_len {tgt_len}, mem_len {mem_len}, {mem_dtype:?} memory, same_length \
                     {same_length}, clamp_len {clamp_len}, {mem_init:?}: {positions} positions a pass"
                );
            }
        }
    }
    // the keys recomputed per segment are a table too; folded keys take one query at a time
    // (under Miri the recomputed table alone: folded keys take one query a pass in any case)
    let modes: &[PositionKeys] = if miri {
        &[PositionKeys::PerSegment]
    } else {
        &[PositionKeys::PerSegment, PositionKeys::FoldedIntoQuery]
    };
    for &position_keys in modes {
        let options = SessionOptions {
            tgt_len: 20,
            mem_len: 5,
            position_keys,
            ..SessionOptions::from_config(&config)
        };
        let positions = if miri { 3 } else { MAX_POSITIONS_PER_PASS };
        assert!(
            log_prob_bits(&model, options, positions, &tokens) == log_prob_bits(&model, options, 2, &tokens)
        );
    }
}

#[test]
fn a_number_of_positions_out_of_range_is_refused() {
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::F32, 3);
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions::from_config(&config);
    for positions in [0, MAX_POSITIONS_PER_PASS + 1] {
        assert!(matches!(
            Session::arena_bytes_for_positions_per_pass(&model, &options, positions),
            Err(Error::BadOptions)
        ));
        let mut memory = arena(4096);
        let arena = bytemuck::cast_slice_mut(&mut memory);
        assert!(matches!(
            Session::with_positions_per_pass(&model, arena, options, positions),
            Err(Error::BadOptions)
        ));
    }
}

#[test]
#[cfg_attr(miri, ignore = "segments of 70 positions: minutes in the interpreter")]
fn a_pass_wider_than_the_output_rows_gives_the_same_bits() {
    use txl_core::arena::{ArenaLayout, MAX_OUTPUT_ROWS};
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::F32, 13);
    let model = Model::parse(image.bytes()).unwrap();
    // segments of 70: on a host the linear layers take them at once, the output layer in two
    // parts (64 and 6); the second segment meets a memory
    let options = SessionOptions {
        tgt_len: 70,
        mem_len: 9,
        ..SessionOptions::from_config(&config)
    };
    let tokens: Vec<u32> = (0..140).map(|t| (t * 11 + 2) % config.n_token).collect();
    let positions = MAX_POSITIONS_PER_PASS;
    let layout =
        ArenaLayout::with_positions_per_pass(&config, model.image().arithmetic(), &options, positions)
            .unwrap();
    let rows = positions.min(70).min(MAX_OUTPUT_ROWS);
    assert_eq!(layout.log_probs, rows * config.n_token as usize);
    let bits = log_prob_bits(&model, options, positions, &tokens);
    assert_eq!(bits.len(), tokens.len() * config.n_token as usize);
    assert!(bits == log_prob_bits(&model, options, 2, &tokens));
}

#[test]
#[cfg_attr(miri, ignore = "a model of 64 columns: minutes in the interpreter")]
fn int8_rows_of_wide_layers_in_wide_passes_give_the_bits_of_pairs() {
    // rows and columns enough for every part of the kernels that take many inputs at once:
    // whole tiles of rows, single registers and rows after them (192, 64 and 102 rows),
    // columns past the last whole four and sixteen (102); segments of 20 inputs: two groups of
    // eight and four left to pairs
    let config = Config {
        d_model: 64,
        d_embed: 64,
        n_head: 4,
        d_head: 16,
        d_inner: 102,
        ..tiny_config()
    };
    // the kernels this test was written for; where one is missing its rows go to the kernel of
    // pairs, and the pairs are compared with themselves
    unless_x86_64_reached(
        kernels::has_row_sums_tiles_i8(),
        "the AMX tile kernel (row_sums_tiles_i8)",
        "AMX int8 (granted by the system)",
    );
    unless_x86_64_reached(
        kernels::has_row_sums_groups_i8(),
        "the grouped AVX-512 VNNI kernel (row_sums_groups_i8)",
        "512-bit AVX-512 VNNI",
    );
    let tokens: Vec<u32> = (0..40).map(|t| (t * 13 + 5) % config.n_token).collect();
    let options = SessionOptions {
        tgt_len: 20,
        mem_len: 9,
        ..SessionOptions::from_config(&config)
    };
    for weights in [MatrixDtype::Int8, MatrixDtype::Int8Smoothed] {
        let image = tiny_image(&config, weights, 17);
        let model = Model::parse(image.bytes()).unwrap();
        let pairs = log_prob_bits(&model, options, 2, &tokens);
        let wide = log_prob_bits(&model, options, MAX_POSITIONS_PER_PASS, &tokens);
        assert!(wide == pairs, "{weights:?}");
    }
}

//! Sessions whose linear layers take more positions a pass (`scoring::start`, every host
//! command) give the bits of the device's pairs (`Session::new`) in every weight dtype, for
//! matrices long enough that the integer kernels read them in several blocks of rows, with the
//! output rows of `qkv_net` split between the queries and the memory, and the position keys
//! computed several distances a pass.

use txl_core::kernels::MAX_POSITIONS_PER_PASS;
use txl_core::{AlignedBytes, Config, MemDtype, Model, PositionKeys, Session, SessionOptions};
use txl_host_gpu::quantize::Target;
use txl_tests::{quantized_image, random_model, reference_config, skipped, tokens};

/// The bits of every log-probability of `tokens`, `positions` positions a pass.
fn bits(model: &Model<'_>, options: SessionOptions, positions: usize, tokens: &[u32]) -> Vec<u32> {
    let bytes = Session::arena_bytes_for_positions_per_pass(model, &options, positions).unwrap();
    let mut arena = AlignedBytes::zeroed(bytes).unwrap();
    let mut session = Session::with_positions_per_pass(model, arena.bytes_mut(), options, positions).unwrap();
    let mut bits = Vec::new();
    for segment in tokens.chunks(options.tgt_len as usize) {
        session
            .forward(segment, |_, row| bits.extend(row.iter().map(|v| v.to_bits())))
            .unwrap();
    }
    bits
}

#[test]
fn every_number_of_positions_per_pass_gives_the_bits_of_pairs() {
    // int8 rows of 520 columns come 24 to a block of rows, int4 rows (264 bytes) 56: the
    // 1,040-row qkv_net and feed-forward matrices take several blocks, and a block ends at
    // the split between the queries and the keys and values.
    let config = Config {
        d_model: 520,
        d_embed: 520,
        n_head: 4,
        d_head: 130,
        d_inner: 1040,
        n_layer: 2,
        tgt_len: 11,
        mem_len: 6,
        ..reference_config()
    };
    // the int8 kernels of many inputs at once, which take the wider passes' rows where the CPU
    // has them (elsewhere the kernel of pairs takes them, and the pairs meet themselves)
    if !txl_core::kernels::has_row_sums_tiles_i8() {
        skipped("the AMX tile kernel (row_sums_tiles_i8) not reached: no AMX int8 here");
    }
    if !txl_core::kernels::has_row_sums_groups_i8() {
        skipped(
            "the grouped AVX-512 VNNI kernel (row_sums_groups_i8) not reached: no 512-bit AVX-512 VNNI here",
        );
    }
    let text = tokens(40, config.n_token, 3);
    let f32_image = random_model(&config, 7);
    let images = [
        ("f32", f32_image),
        (
            "f16",
            AlignedBytes::copy_from(&quantized_image(&config, 7, Target::F16)).unwrap(),
        ),
        (
            "int8",
            AlignedBytes::copy_from(&quantized_image(&config, 7, Target::Int8)).unwrap(),
        ),
        (
            "int4",
            AlignedBytes::copy_from(&quantized_image(&config, 7, Target::Int4All)).unwrap(),
        ),
    ];
    for (name, image) in &images {
        let model = Model::parse(image.bytes()).unwrap();
        // the position keys kept for the session (computed at its start), or recomputed for
        // each segment: both go several distances a pass
        #[rustfmt::skip]
        let settings = [(MemDtype::F32, PositionKeys::PerSession), (MemDtype::Int8, PositionKeys::PerSession),
            (MemDtype::F32, PositionKeys::PerSegment)];
        for (mem_dtype, position_keys) in settings {
            let options = SessionOptions {
                mem_dtype,
                position_keys,
                ..SessionOptions::from_config(&config)
            };
            let pairs = bits(&model, options, 2, &text);
            for positions in [1, 3, 8, MAX_POSITIONS_PER_PASS] {
                assert!(
                    bits(&model, options, positions, &text) == pairs,
                    "{name} weights, {mem_dtype:?} memory, {position_keys:?} keys: {positions} positions a pass"
                );
            }
        }
    }
}

//! The core's integer forward pass (`Session` on an image whose arithmetic is integer) against
//! the reference crate's plainly written integer Transformer-XL (`IntegerModel`): the same
//! `ln p`, bit for bit, on random models of three shapes (int8 and int4 weights) under every
//! session setting the core's checks cover, on the two trained models, and token by token in
//! streaming. The core runs its kernels (AVX-512, AVX2 or portable on the host; the firmware
//! tests run the device kernels on the same images), so this also checks that every kernel's
//! integer sums are the reference's.

use txl_core::fixed_point::to_f32;
use txl_core::image::Arithmetic;
use txl_core::integer::pow2_act_top;
use txl_core::weights::MatrixData;
use txl_core::{AlignedBytes, Error, MemDtype, Model, PositionKeys, Session, SessionOptions};
use txl_host_gpu::integer::IntegerModel;
use txl_host_gpu::quantize::{quantize_weights, Method, Target};
use txl_tests::{
    accuracy_configs, core_session_variants, random_model, tokens, trained_text, with_integer_arithmetic,
};

/// `image` (int8 or int4) as an integer image with the format calibrated on `calibration`, and
/// the reference's integer model of it.
fn integer_image(image: &[u8], calibration: &[u32]) -> (AlignedBytes, IntegerModel) {
    let integer = AlignedBytes::copy_from(&with_integer_arithmetic(image, calibration)).unwrap();
    let model = Model::parse(integer.bytes()).unwrap();
    let reference = IntegerModel::new(&model, model_frac(&model)).unwrap();
    (integer, reference)
}

/// The integer session's options: `options` with int8 memory.
fn int8_memory(options: SessionOptions) -> SessionOptions {
    SessionOptions {
        mem_dtype: MemDtype::Int8,
        ..options
    }
}

/// How many of `text`'s `ln p` differ in their bits between the core and the reference.
fn mismatches(model: &Model<'_>, reference: &IntegerModel, text: &[u32], options: SessionOptions) -> usize {
    let ours = txl_core::scoring::score(model, text, options, 0, |_| {}).unwrap();
    let theirs = reference.score(text, &options).unwrap();
    assert_eq!(ours.logp.len(), theirs.log_probs.len());
    ours.logp
        .iter()
        .zip(&theirs.log_probs)
        .filter(|(a, &b)| a.to_bits() != to_f32(b, reference.frac()).to_bits())
        .count()
}

#[test]
fn random_models_match_the_reference_bit_for_bit() {
    let mut runs = 0;
    for (name, config) in accuracy_configs() {
        for (target, seed) in [(Target::Int8, 1), (Target::Int4, 2)] {
            let f32_image = random_model(&config, 180 + seed);
            let f32_model = Model::parse(f32_image.bytes()).unwrap();
            let quantized = quantize_weights(&f32_model, target).unwrap();
            let (image, reference) = integer_image(&quantized, &tokens(256, config.n_token, 190 + seed));
            let model = Model::parse(image.bytes()).unwrap();
            let text = tokens(48, config.n_token, 170 + seed);
            for options in core_session_variants(SessionOptions::from_config(&config)) {
                let options = int8_memory(options);
                if options.position_keys == PositionKeys::FoldedIntoQuery {
                    let arena = &mut AlignedBytes::zeroed(1 << 20).unwrap();
                    let refused = Session::new(&model, arena.bytes_mut(), options).err();
                    assert_eq!(refused, Some(Error::IntegerOptions));
                    continue;
                }
                let wrong = mismatches(&model, &reference, &text, options);
                assert_eq!(
                    wrong,
                    0,
                    "{name} {target:?} {options:?}: {wrong} of {} differ",
                    text.len() - 1
                );
                runs += 1;
            }
        }
    }
    assert!(runs >= 24, "{runs}");
}

#[test]
fn the_trained_models_match_the_reference_bit_for_bit() {
    for (name, targets) in [
        ("demo", &[Target::Int8, Target::Int4][..]),
        ("second", &[Target::Int8][..]),
    ] {
        let text = trained_text(name, 300, 2048);
        // smoothing in any scale and in powers of two (`txl quantize --integer`: a shift per
        // value instead of a rescale)
        let variants = targets.iter().flat_map(|&t| [(t, false), (t, true)]);
        for (target, power_of_two) in variants {
            let quantized = text
                .quantized_with(target, Method::Compensated, power_of_two)
                .image;
            let (image, reference) = integer_image(&quantized, &text.calibration);
            let model = Model::parse(image.bytes()).unwrap();
            if power_of_two && target == Target::Int8 {
                // the shifts run: the smoothed inputs' scales are all powers of two
                let smoothed: Vec<&[f32]> = (0..model.config().n_layer as usize)
                    .flat_map(|l| {
                        let w = model.layer(l);
                        [w.qkv, w.o_net, w.ff1_weight, w.ff2_weight]
                    })
                    .filter_map(|m| match m.data {
                        MatrixData::Int8 { act_scales, .. } => act_scales,
                        _ => None,
                    })
                    .collect();
                assert!(!smoothed.is_empty(), "{name}: nothing smoothed");
                assert!(smoothed.iter().all(|a| pow2_act_top(a).is_some()), "{name}");
            }
            let base = int8_memory(SessionOptions::from_config(model.config()));
            for options in [
                base,
                SessionOptions { tgt_len: 1, ..base },
                SessionOptions {
                    position_keys: PositionKeys::PerSegment,
                    ..base
                },
            ] {
                let wrong = mismatches(&model, &reference, &text.heldout, options);
                assert_eq!(wrong, 0, "{name} {target:?} {power_of_two} {options:?}");
            }
        }
    }
}

#[test]
fn integer_images_need_int8_memory() {
    let config = accuracy_configs()[0].1;
    let f32_image = random_model(&config, 7);
    let quantized = quantize_weights(&Model::parse(f32_image.bytes()).unwrap(), Target::Int8).unwrap();
    let (image, _) = integer_image(&quantized, &tokens(64, config.n_token, 8));
    let model = Model::parse(image.bytes()).unwrap();
    assert_eq!(
        model.image().arithmetic(),
        Arithmetic::Integer {
            frac: model_frac(&model)
        }
    );
    let arena = &mut AlignedBytes::zeroed(1 << 20).unwrap();
    let options = SessionOptions::from_config(&config); // f32 memory
    assert_eq!(
        Session::new(&model, arena.bytes_mut(), options).err(),
        Some(Error::IntegerOptions)
    );
}

fn model_frac(model: &Model<'_>) -> u32 {
    match model.image().arithmetic() {
        Arithmetic::Integer { frac } => frac,
        Arithmetic::Float => panic!("a float image"),
    }
}

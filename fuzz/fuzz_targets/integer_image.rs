//! `Model::parse` on integer images edited by the input: header bytes and words (the
//! arithmetic flag, `frac`), the weights' scales, and any byte. The image must be refused with
//! an error or accepted with integer arithmetic that holds: `frac ≤ MAX_FRAC`, every weight
//! matrix int8 or int4 (the embedding tables and output projections int8, the projections
//! without activation scales), and every scale a fixed-point multiplier (an embedding row's
//! scale times `sqrt(d_model)`, without projections, and `2^frac` too), and a session of it
//! runs two segments with finite log-probabilities. Nothing may panic.
//!
//! The input's first byte picks the image the edits start from, a valid integer image of
//! `txl_fuzz::tiny_config` ([`BASES`]): int8 or int4 weights. The rest is a list of edits of
//! [`EDIT_BYTES`] each ([`edit`]); the CRC-32 is rewritten after them, so they reach the
//! checks behind the checksum. When every edit only rewrote scales, a refusal must be
//! `BadArithmetic(Scale(_))` and an acceptance keep the image's arithmetic.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use txl_core::fixed_point::{multiplier_of_f32, sqrt_multiplier, Multiplier};
use txl_core::image::{set_arithmetic, Arithmetic, HEADER_BYTES, MAX_FRAC};
use txl_core::random_model::{Init, RandomInit, RandomModel};
use txl_core::tensors::{for_each_tensor, TensorName};
use txl_core::weights::MatrixData;
use txl_core::{AlignedBytes, ArithmeticError, Error, MemDtype, MemInit, Model, Session, SessionOptions};
use txl_host_gpu::quantize::{quantize_weights_grouped, Target};

/// The base images: int8 and int4 (int4 decoder layers in groups of 8, the tiny model's rows
/// being short) weights, in `Q(FRAC)`.
const BASES: usize = 2;
const FRAC: u32 = 20;
/// Bytes of one edit: `[kind, a, b, v0, v1, v2, v3]`.
const EDIT_BYTES: usize = 7;
/// Edits applied at most; the rest of a longer input is ignored.
const MAX_EDITS: usize = 32;

/// A base image and where its matrices' scales are: `(name, offset, count)` per scale region.
struct Base {
    image: Vec<u8>,
    scales: Vec<(TensorName, usize, usize)>,
}

fn bases() -> &'static [Base; BASES] {
    static BASES_: OnceLock<[Base; BASES]> = OnceLock::new();
    BASES_.get_or_init(|| {
        let config = txl_fuzz::tiny_config();
        let float = RandomModel::new(&config, 1)
            .init(Init::Scaled(RandomInit::for_config(&config)))
            .aligned()
            .expect("the tiny config is valid");
        let model = Model::parse(float.bytes()).expect("the random image parses");
        [Target::Int8, Target::Int4].map(|target| {
            let quantized = quantize_weights_grouped(&model, target, 8).expect("the tiny model quantizes");
            let image =
                set_arithmetic(&quantized, Arithmetic::Integer { frac: FRAC }).expect("frac is in range");
            let aligned = AlignedBytes::copy_from(&image).expect("a small image");
            let parsed = Model::parse(aligned.bytes()).expect("the base image is a valid integer image");
            assert_eq!(parsed.image().arithmetic(), Arithmetic::Integer { frac: FRAC });
            Base {
                scales: scale_regions(&parsed),
                image,
            }
        })
    })
}

/// Each matrix's scale regions: int8 row scales and activation scales, int4's one scale.
fn scale_regions(model: &Model<'_>) -> Vec<(TensorName, usize, usize)> {
    let image = model.image();
    let mut regions = Vec::new();
    let mut index = 0;
    for_each_tensor(model.config(), |name, _| {
        if name.is_matrix() {
            let entry = image.entry(index);
            match image.matrix(index).data {
                MatrixData::Int8 {
                    row_scales,
                    act_scales,
                    ..
                } => {
                    regions.push((name, entry.row_scales_offset, row_scales.len()));
                    if let Some(act) = act_scales {
                        regions.push((name, entry.act_scales_offset, act.len()));
                    }
                }
                MatrixData::Int4 { .. } => regions.push((name, entry.row_scales_offset, 1)),
                _ => unreachable!("an integer image has int8 and int4 matrices"),
            }
        }
        index += 1;
    });
    regions
}

/// Applies one edit to `image`; returns whether it only rewrote a scale.
///
/// - kind 0: header byte `a % 128` set to `b`;
/// - kind 1: the flags word (`a` even) or `frac` (`a` odd) set to `v`;
/// - kind 2: scale `b` of scale region `a` set to the f32 with bits `v`;
/// - kind 3: byte `v % len` of the image set to `a`.
fn edit(image: &mut [u8], scales: &[(TensorName, usize, usize)], chunk: &[u8]) -> bool {
    let [kind, a, b, v @ ..] = chunk else {
        return false;
    };
    let v: [u8; 4] = v.try_into().expect("EDIT_BYTES");
    let word = u32::from_le_bytes(v) as usize;
    match kind % 4 {
        0 => image[*a as usize % HEADER_BYTES] = *b,
        1 => {
            let at = if a % 2 == 0 { 92 } else { txl_core::image::FRAC_AT };
            image[at..at + 4].copy_from_slice(&v);
        }
        2 => {
            let (_, offset, count) = scales[*a as usize % scales.len()];
            let at = offset + 4 * (*b as usize % count);
            image[at..at + 4].copy_from_slice(&v);
            return true;
        }
        _ => {
            let len = image.len();
            image[word % len] = *a;
        }
    }
    false
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, edits)) = data.split_first() else {
        return;
    };
    let base = &bases()[which as usize % BASES];
    let Ok(mut image) = AlignedBytes::copy_from(&base.image) else {
        return;
    };
    let bytes = image.bytes_mut();
    let mut scales_only = true;
    for chunk in edits.chunks_exact(EDIT_BYTES).take(MAX_EDITS) {
        scales_only &= edit(bytes, &base.scales, chunk);
    }
    let crc_at = bytes.len() - 4;
    let crc = txl_core::crc32(&bytes[..crc_at]);
    bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
    match Model::parse(image.bytes()) {
        Err(error) => {
            if scales_only {
                assert!(
                    matches!(error, Error::BadArithmetic(ArithmeticError::Scale(_))),
                    "a scale edit refused as {error:?}"
                );
            }
        }
        Ok(model) => {
            let arithmetic = model.image().arithmetic();
            if scales_only {
                assert_eq!(arithmetic, Arithmetic::Integer { frac: FRAC });
            }
            if let Arithmetic::Integer { frac } = arithmetic {
                check_integer(&model, frac);
                run_session(&model, edits);
            }
        }
    }
});

/// An accepted integer image runs: two segments of tokens from the input through a session
/// with int8 memory, every `ln p` finite (an `f32` built from fixed-point bits).
fn run_session(model: &Model<'_>, edits: &[u8]) {
    let config = *model.config();
    let options = SessionOptions {
        tgt_len: 3,
        mem_len: 4,
        mem_dtype: MemDtype::Int8,
        mem_init: if edits.len().is_multiple_of(2) {
            MemInit::Zeros
        } else {
            MemInit::Empty
        },
        ..SessionOptions::from_config(&config)
    };
    let Ok(bytes) = Session::arena_bytes(model, &options) else {
        return;
    };
    if bytes > 1 << 22 {
        return; // a config edited far larger than the tiny model's
    }
    let mut arena = AlignedBytes::zeroed(bytes).expect("a small arena");
    let mut session = Session::new(model, arena.bytes_mut(), options).expect("an integer session starts");
    let tokens: Vec<u32> = edits
        .iter()
        .take(6)
        .map(|&b| u32::from(b) % config.n_token)
        .collect();
    for segment in tokens.chunks(3) {
        session
            .forward(segment, |_, row| {
                assert!(
                    row.iter().all(|v| v.is_finite()),
                    "a log-probability that is not finite"
                );
            })
            .expect("valid tokens run");
    }
}

/// What an accepted integer image must hold.
fn check_integer(model: &Model<'_>, frac: u32) {
    assert!(frac <= MAX_FRAC, "Q{frac} accepted");
    let config = *model.config();
    let image = model.image();
    let multiplier = |s: f32| multiplier_of_f32(s).unwrap_or_else(|| panic!("scale {s} accepted"));
    let embedding_times = if config.has_emb_proj() {
        Multiplier::ONE
    } else {
        sqrt_multiplier(config.d_model).expect("a d_model the image checks")
    };
    let mut index = 0;
    for_each_tensor(&config, |name, _| {
        let at = index;
        index += 1;
        if !name.is_matrix() {
            return;
        }
        let needs_int8 = matches!(name, TensorName::EmbLayer(_) | TensorName::OutProj(_));
        match image.matrix(at).data {
            MatrixData::Int8 {
                row_scales,
                act_scales,
                ..
            } => {
                for &s in row_scales {
                    let m = multiplier(s);
                    if let TensorName::EmbLayer(_) = name {
                        m.times(embedding_times)
                            .and_then(|m| m.times_pow2(frac as i32))
                            .unwrap_or_else(|| panic!("{name}: row scale {s} in Q{frac} accepted"));
                    }
                }
                if let Some(act) = act_scales {
                    assert!(
                        !matches!(name, TensorName::OutProj(_)),
                        "{name}: activation scales accepted"
                    );
                    for &s in act {
                        let _ = multiplier(s);
                    }
                }
            }
            MatrixData::Int4 { scale, .. } => {
                assert!(!needs_int8, "{name}: int4 accepted");
                let _ = multiplier(scale);
            }
            _ => panic!("{name}: float weights accepted in an integer image"),
        }
    });
}

//! Bad input gets a typed error, never a panic: corrupt images, short arenas, bad tokens.

use txl_core::image::{write_image, Payload, CRC_BYTES, ENTRY_BYTES, HEADER_BYTES, NAME_BYTES};
use txl_core::tensors::{for_each_tensor, LayerTensor, Shape, TensorLayout, TensorName};
use txl_core::AlignedBytes;
use txl_core::MemDtype;
use txl_core::{Config, ConfigError, Error, Model, OptionWord, PositionKeys, Session, SessionOptions};
use txl_host_gpu::quantize::Target;
use txl_tests::{quantized_image, random_image, small_config};

fn options() -> SessionOptions {
    SessionOptions::from_config(&small_config())
}

#[test]
fn a_fresh_image_parses_and_runs() {
    let image = AlignedBytes::copy_from(&random_image(&small_config(), 1)).unwrap();
    let model = Model::parse(image.bytes()).expect("parses");
    let mut arena = AlignedBytes::zeroed(Session::arena_bytes(&model, &options()).unwrap()).unwrap();
    let mut session = Session::new(&model, arena.bytes_mut(), options()).unwrap();
    let mut rows = 0;
    session
        .forward(&[0, 15, 39], |_, row| {
            let total: f64 = row.iter().map(|&v| (v as f64).exp()).sum();
            assert!((total - 1.0).abs() < 1e-4, "probabilities sum to {total}");
            rows += 1;
        })
        .unwrap();
    assert_eq!(rows, 3);
}

#[test]
fn every_truncation_is_an_error() {
    let image = random_image(&small_config(), 2);
    for len in 0..image.len() {
        let truncated = AlignedBytes::copy_from(&image[..len]).unwrap();
        assert!(
            Model::parse(truncated.bytes()).is_err(),
            "truncated to {len} bytes parsed"
        );
    }
}

#[test]
fn every_single_byte_flip_is_an_error() {
    let image = random_image(&small_config(), 3);
    let mut corrupt = image.clone();
    for at in 0..image.len() {
        for flip in [0x01u8, 0x80, 0xFF] {
            corrupt[at] ^= flip;
            let bytes = AlignedBytes::copy_from(&corrupt).unwrap();
            assert!(
                Model::parse(bytes.bytes()).is_err(),
                "flip {flip:#x} at byte {at} parsed"
            );
            corrupt[at] ^= flip;
        }
    }
}

/// Rewrites the CRC after a change, so only the structural checks can catch it.
fn reseal(bytes: &mut [u8]) {
    let end = bytes.len() - CRC_BYTES;
    let crc = txl_core::crc32(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_le_bytes());
}

/// What `Model::parse` says of `image` after `damage` and a fresh CRC.
fn parse_resealed(image: &[u8], damage: impl FnOnce(&mut Vec<u8>)) -> Result<(), Error> {
    let mut damaged = image.to_vec();
    damage(&mut damaged);
    reseal(&mut damaged);
    let bytes = AlignedBytes::copy_from(&damaged).unwrap();
    Model::parse(bytes.bytes()).map(|_| ())
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

/// The tensors `config` stores, in directory order.
fn directory(config: &txl_core::Config) -> Vec<(TensorName, Shape)> {
    let mut names = Vec::new();
    for_each_tensor(config, |name, shape| names.push((name, shape)));
    names
}

/// The three images the damage tests use: f32, f16 and int8 (the int8 one mixes all three).
fn images_of_every_dtype(seed: u64) -> [(&'static str, Vec<u8>); 4] {
    [
        ("f32", random_image(&small_config(), seed)),
        ("f16", quantized_image(&small_config(), seed + 1, Target::F16)),
        ("int8", quantized_image(&small_config(), seed + 2, Target::Int8)),
        (
            "int4",
            quantized_image(&small_config(), seed + 3, Target::Int4All),
        ),
    ]
}

#[test]
fn header_damage_behind_a_valid_checksum_gets_its_error() {
    let config = small_config();
    let image = random_image(&config, 4);
    let len = image.len();
    let with = |at: usize, value: u32| parse_resealed(&image, |b| put_u32(b, at, value));
    assert_eq!(with(100, 1e-5f32.to_bits()), Ok(()), "the undamaged image parses");

    for at in 0..8 {
        assert_eq!(
            parse_resealed(&image, |b| b[at] ^= 0x20),
            Err(Error::BadMagic),
            "magic byte {at}"
        );
    }
    for version in [0, 2, 0x100, u32::MAX] {
        assert_eq!(with(8, version), Err(Error::UnsupportedVersion(version)));
    }
    // image_bytes: longer than the slice is a truncation, any other disagreement a bad header.
    for declared in [len + 1, len + 16, u32::MAX as usize] {
        assert_eq!(
            with(12, declared as u32),
            Err(Error::Truncated {
                needed: declared,
                got: len
            }),
            "image_bytes {declared}"
        );
    }
    for declared in [0, 4, 131, 132, len - 16, len - 1] {
        assert_eq!(
            with(12, declared as u32),
            Err(Error::BadHeader),
            "image_bytes {declared}"
        );
    }
    let expected = TensorLayout::new(&config).count();
    for found in [0, 1, expected - 1, expected + 1, u32::MAX as usize] {
        assert_eq!(
            with(16, found as u32),
            Err(Error::TensorCount { expected, found }),
            "tensor_count {found}"
        );
    }
    for directory_offset in [0, 112, 129, 144, 208] {
        assert_eq!(
            with(20, directory_offset),
            Err(Error::BadHeader),
            "directory_offset {directory_offset}"
        );
    }
    for at in 116..128 {
        assert_eq!(
            parse_resealed(&image, |b| b[at] = 1),
            Err(Error::BadHeader),
            "reserved byte {at}"
        );
    }
    let flags = read_u32(&image, 92);
    for bit in [5, 16, 31] {
        assert_eq!(
            with(92, flags | 1 << bit),
            Err(Error::BadHeader),
            "flag bit {bit}"
        );
    }
    // bit 4 asks for integer arithmetic, which f32 weights cannot have
    assert!(
        matches!(
            with(92, flags | 1 << 4),
            Err(Error::BadArithmetic(txl_core::ArithmeticError::FloatWeights(_)))
        ),
        "flag bit 4 on f32 weights"
    );
    // The config in the header is validated as a whole.
    let bad_config = [
        (28, 0, ConfigError::ZeroDimension),       // d_model
        (48, 0, ConfigError::ZeroDimension),       // n_layer
        (104, 0, ConfigError::ZeroDimension),      // tgt_len
        (28, 15, ConfigError::OddModelWidth),      // d_model
        (56, 9, ConfigError::TooManyCutoffs),      // n_cutoffs
        (64, 10, ConfigError::BadCutoffs),         // cutoffs[1] == cutoffs[0]
        (64, 40, ConfigError::BadCutoffs),         // cutoffs[1] == n_token
        (68, 30, ConfigError::BadCutoffs),         // cutoffs[2] set, n_cutoffs 2
        (96, 0b1000, ConfigError::BadTieProjs),    // a fourth cluster
        (52, 32, ConfigError::EmbeddingTooNarrow), // div_val: 16 / 32^1 = 0
        (100, 0, ConfigError::BadLayerNormEpsilon),
        (100, (-1e-5f32).to_bits(), ConfigError::BadLayerNormEpsilon),
        (100, f32::NAN.to_bits(), ConfigError::BadLayerNormEpsilon),
        (100, f32::INFINITY.to_bits(), ConfigError::BadLayerNormEpsilon),
    ];
    for (at, value, error) in bad_config {
        assert_eq!(
            with(at, value),
            Err(Error::BadConfig(error)),
            "header field {at} = {value:#x}"
        );
    }
    // A valid config that is not the stored model's: the directory disagrees with it.
    let one_layer = Config { n_layer: 1, ..config };
    assert_eq!(
        with(48, 1),
        Err(Error::TensorCount {
            expected: TensorLayout::new(&one_layer).count(),
            found: expected
        })
    );
    assert_eq!(
        with(44, config.d_inner + 1),
        Err(Error::TensorShape(TensorName::Layer(0, LayerTensor::Ff1Weight)))
    );
    assert_eq!(
        with(24, config.n_token + 1),
        Err(Error::TensorShape(TensorName::EmbLayer(2)))
    );
}

#[test]
fn every_field_of_every_directory_entry_is_checked() {
    // Each field of each entry set to a value that is wrong for that entry alone, the CRC
    // rewritten: parse names the entry and the kind of damage, before looking at later entries.
    let names = directory(&small_config());
    for (kind, image) in images_of_every_dtype(16) {
        assert_eq!(parse_resealed(&image, |_| {}), Ok(()), "{kind}");
        let mut dtypes_seen = [false; 4];
        for (index, &(name, shape)) in names.iter().enumerate() {
            let at = HEADER_BYTES + index * ENTRY_BYTES;
            let entry = image[at..at + ENTRY_BYTES].to_vec();
            let check = |what: &str, damage: &dyn Fn(&mut [u8]), expected: Error| {
                let got = parse_resealed(&image, |b| damage(&mut b[at..at + ENTRY_BYTES]));
                assert_eq!(got, Err(expected), "{kind} entry {index} ({name}): {what}");
            };
            let field = |e: &[u8], at: usize| read_u32(e, at);
            let set = |at: usize, value: u32| move |e: &mut [u8]| put_u32(e, at, value);

            // name (48 bytes: the text, then zeros)
            let wrong_name = Error::TensorName {
                index,
                expected: name,
            };
            let text = name.to_string().into_bytes();
            assert_eq!(&entry[..text.len()], &text[..]);
            check("first letter", &|e| e[0] ^= 0x20, wrong_name);
            check("last letter", &|e| e[text.len() - 1] ^= 0x01, wrong_name);
            check("name cut short", &|e| e[text.len() - 1] = 0, wrong_name);
            check("a letter after the name", &|e| e[text.len()] = b'x', wrong_name);
            check("last byte of the field", &|e| e[NAME_BYTES - 1] = 1, wrong_name);
            let other = names[(index + 1) % names.len()].0.to_string();
            check(
                "the next entry's name",
                &|e| {
                    e[..NAME_BYTES].fill(0);
                    e[..other.len()].copy_from_slice(other.as_bytes());
                },
                wrong_name,
            );

            // dtype (byte 48): unknown codes; for vectors and r_w_bias/r_r_bias, int8 or int4;
            // otherwise another known dtype no longer matches the payload length.
            let dtype = entry[48];
            dtypes_seen[dtype as usize] = true;
            for code in [4u8, 0x80, 0xFF] {
                check(
                    &format!("dtype {code}"),
                    &|e| e[48] = code,
                    Error::TensorDtype(name),
                );
            }
            for code in (0..4u8).filter(|&c| c != dtype) {
                // int4 entries have a group size where the others have zeros
                let expected = match (name.is_matrix(), dtype == 3 || code == 3) {
                    (false, _) if code >= 2 => Error::TensorDtype(name),
                    (false, _) => Error::TensorBounds(name),
                    (true, true) => Error::TensorShape(name),
                    (true, false) => Error::TensorBounds(name),
                };
                check(&format!("dtype {dtype} -> {code}"), &|e| e[48] = code, expected);
            }

            // shape: ndim (byte 49), dim0 (52), dim1 (56), reserved bytes 50..52 and 76..80
            let bad_shape = Error::TensorShape(name);
            let (dims, ndim) = shape.dims();
            assert_eq!(
                (entry[49] as usize, field(&entry, 52), field(&entry, 56)),
                (ndim, dims[0], dims[1])
            );
            for n in [0u8, 3 - ndim as u8, 3, 0xFF] {
                check(&format!("ndim {n}"), &|e| e[49] = n, bad_shape);
            }
            for (at, dim) in [(52, dims[0]), (56, dims[1])] {
                for value in [dim + 1, dim.wrapping_sub(1), dim * 2 + 1, u32::MAX] {
                    check(&format!("dim at {at} = {value}"), &set(at, value), bad_shape);
                }
            }
            let reserved: &[usize] = if dtype == 3 {
                // int4: bytes 50..52 are the group size, a multiple of 8 from 8
                for group in [0u16, 4, 12, 33] {
                    check(
                        &format!("group {group}"),
                        &|e| e[50..52].copy_from_slice(&group.to_le_bytes()),
                        bad_shape,
                    );
                }
                &[76, 77, 78, 79]
            } else {
                &[50, 51, 76, 77, 78, 79]
            };
            for &reserved in reserved {
                check(
                    &format!("reserved byte {reserved}"),
                    &|e| e[reserved] = 1,
                    bad_shape,
                );
            }

            // values: offset (60) and length (64)
            let out_of_bounds = Error::TensorBounds(name);
            let offset = field(&entry, 60);
            let length = field(&entry, 64);
            for value in [
                offset + 4,                     // misaligned
                offset + 8,                     // misaligned
                offset - 16,                    // overlaps the previous region (or the directory)
                0,                              // over the header
                (image.len() as u32 - 4) & !15, // runs past the CRC
                !15u32,                         // far outside
            ] {
                check(&format!("offset {value}"), &set(60, value), out_of_bounds);
            }
            for value in [0, length - 1, length + 1, length * 2, u32::MAX] {
                check(&format!("length {value}"), &set(64, value), out_of_bounds);
            }

            // scales: int8 row scales (68) and activation scales (72), 0 for other dtypes
            let row_scales = field(&entry, 68);
            let act_scales = field(&entry, 72);
            if dtype == 2 {
                for value in [row_scales + 4, offset, 0, !15u32] {
                    check(&format!("row scales at {value}"), &set(68, value), out_of_bounds);
                }
                let after_row_scales = (row_scales + 4 * dims[0]).next_multiple_of(16);
                let mut act_values = vec![row_scales, after_row_scales + 4, !15u32];
                if act_scales != 0 {
                    act_values.push(act_scales + 4);
                }
                for value in act_values {
                    check(
                        &format!("activation scales at {value}"),
                        &set(72, value),
                        out_of_bounds,
                    );
                }
            } else if dtype == 3 {
                // int4: the one f32 scale (68), then the multiplier codes (72)
                for value in [row_scales + 4, offset, 0, !15u32] {
                    check(&format!("scale at {value}"), &set(68, value), out_of_bounds);
                }
                for value in [0, row_scales, row_scales + 20, !15u32] {
                    check(&format!("codes at {value}"), &set(72, value), out_of_bounds);
                }
            } else {
                assert_eq!((row_scales, act_scales), (0, 0));
                for (at, value) in [(68, 16), (68, offset), (72, 16), (72, offset)] {
                    check(&format!("scale field {at} = {value}"), &set(at, value), bad_shape);
                }
            }
        }
        let expected_dtypes = match kind {
            "f32" => [true, false, false, false],
            "f16" => [true, true, false, false],
            "int8" => [true, true, true, false],
            // int4 images store their vectors in f16 by default
            _ => [false, true, false, true],
        };
        assert_eq!(dtypes_seen, expected_dtypes, "{kind}: dtypes in the image");
    }
}

#[test]
fn every_header_and_directory_byte_behind_a_valid_checksum_is_caught() {
    // Every byte after the magic, up to the end of the directory, changed in turn. Directory
    // damage must be reported at that entry or a later one (a moved payload can push the next
    // entry out of place); header damage must be rejected unless it is in the layer-norm
    // epsilon or the session defaults, and an image that still parses must run.
    let names = directory(&small_config());
    let position = |name: TensorName| names.iter().position(|&(n, _)| n == name).unwrap();
    for (kind, image) in images_of_every_dtype(40) {
        let directory_end = HEADER_BYTES + names.len() * ENTRY_BYTES;
        assert_eq!(read_u32(&image, 16) as usize, names.len());
        for at in 8..directory_end {
            let result = parse_resealed(&image, |b| b[at] = b[at].wrapping_add(0x41));
            if at >= HEADER_BYTES {
                let entry = (at - HEADER_BYTES) / ENTRY_BYTES;
                let reported = match result {
                    Err(Error::TensorName { index, .. }) => Some(index),
                    Err(Error::TensorDtype(name) | Error::TensorShape(name) | Error::TensorBounds(name)) => {
                        Some(position(name))
                    }
                    _ => None,
                };
                assert!(
                    reported.is_some_and(|index| index >= entry),
                    "{kind}: byte {at} (entry {entry}) gave {result:?}"
                );
                continue;
            }
            let expected_kind = match at {
                8..12 => matches!(result, Err(Error::UnsupportedVersion(_))),
                // a carry can make the declared length larger (truncated) or smaller
                12..16 => matches!(result, Err(Error::Truncated { .. } | Error::BadHeader)),
                16..20 => matches!(result, Err(Error::TensorCount { .. })),
                20..24 | 116..128 => matches!(result, Err(Error::BadHeader)),
                100..116 => true,
                _ => result.is_err(),
            };
            assert!(expected_kind, "{kind}: header byte {at} gave {result:?}");
            if result.is_ok() {
                let mut damaged = image.clone();
                damaged[at] = damaged[at].wrapping_add(0x41);
                reseal(&mut damaged);
                let bytes = AlignedBytes::copy_from(&damaged).unwrap();
                let model = Model::parse(bytes.bytes()).unwrap();
                let options = SessionOptions::from_config(model.config());
                if let Ok(needed) = Session::arena_bytes(&model, &options) {
                    if needed < 1 << 24 {
                        let mut arena = AlignedBytes::zeroed(needed).unwrap();
                        let mut session = Session::new(&model, arena.bytes_mut(), options).unwrap();
                        session.forward(&[1], |_, _| {}).unwrap();
                    }
                }
            }
        }
    }
}

#[test]
fn the_arena_size_is_exact() {
    let image = AlignedBytes::copy_from(&random_image(&small_config(), 5)).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    let sizes = [0, 1, 6, 13]
        .into_iter()
        .flat_map(|mem_len| [1, 3, 4].map(|tgt_len| (mem_len, tgt_len)));
    for (mem_len, tgt_len) in sizes {
        for &position_keys in PositionKeys::ALL {
            let options = SessionOptions {
                mem_len,
                tgt_len,
                position_keys,
                ..options()
            };
            let needed = Session::arena_bytes(&model, &options).unwrap();
            let mut arena = AlignedBytes::zeroed(needed).unwrap();
            let bytes = arena.bytes_mut();
            match Session::new(&model, &mut bytes[..needed - 1], options) {
                Err(Error::ArenaTooSmall { needed: n, got }) => {
                    assert_eq!((n, got), (needed, needed - 1));
                }
                other => panic!("expected ArenaTooSmall, got {other:?}"),
            }
            let mut session = Session::new(&model, bytes, options).expect("exact size works");
            session.forward(&vec![3; tgt_len as usize], |_, _| {}).unwrap();
        }
    }
}

#[test]
fn a_misaligned_arena_is_refused() {
    let image = AlignedBytes::copy_from(&random_image(&small_config(), 6)).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    let needed = Session::arena_bytes(&model, &options()).unwrap();
    let mut arena = AlignedBytes::zeroed(needed + 16).unwrap();
    let err = Session::new(&model, &mut arena.bytes_mut()[4..], options()).unwrap_err();
    assert_eq!(err, Error::ArenaMisaligned);
}

#[test]
fn bad_tokens_and_segments_are_errors() {
    let image = AlignedBytes::copy_from(&random_image(&small_config(), 7)).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    let mut arena = AlignedBytes::zeroed(Session::arena_bytes(&model, &options()).unwrap()).unwrap();
    let mut session = Session::new(&model, arena.bytes_mut(), options()).unwrap();
    assert_eq!(
        session.forward(&[1, 40], |_, _| {}),
        Err(Error::TokenOutOfRange {
            token: 40,
            n_token: 40
        })
    );
    assert_eq!(
        session.forward(&[], |_, _| {}),
        Err(Error::SegmentLength { len: 0, max: 4 })
    );
    assert_eq!(
        session.forward(&[1; 5], |_, _| {}),
        Err(Error::SegmentLength { len: 5, max: 4 })
    );
    // Nothing was remembered from the refused calls.
    assert_eq!(session.memory_len(), 0);
    assert_eq!(
        Session::arena_bytes(
            &model,
            &SessionOptions {
                tgt_len: 0,
                ..options()
            }
        ),
        Err(Error::BadOptions)
    );
}

#[test]
fn a_misaligned_image_is_refused() {
    let image = random_image(&small_config(), 8);
    let mut shifted = vec![0u8; 4];
    shifted.extend_from_slice(&image);
    let aligned = AlignedBytes::copy_from(&shifted).unwrap();
    assert_eq!(
        Model::parse(&aligned.bytes()[4..]).unwrap_err(),
        Error::ImageMisaligned
    );
}

#[test]
fn every_truncation_and_flip_of_quantized_images_is_an_error() {
    for target in [Target::F16, Target::Int8] {
        let image = quantized_image(&small_config(), 9, target);
        assert!(Model::parse(AlignedBytes::copy_from(&image).unwrap().bytes()).is_ok());
        for len in 0..image.len() {
            let truncated = AlignedBytes::copy_from(&image[..len]).unwrap();
            assert!(
                Model::parse(truncated.bytes()).is_err(),
                "{target:?} truncated to {len} parsed"
            );
        }
        let mut corrupt = image.clone();
        for at in 0..image.len() {
            corrupt[at] ^= 0x10;
            assert!(
                Model::parse(AlignedBytes::copy_from(&corrupt).unwrap().bytes()).is_err(),
                "{target:?} flip at {at}"
            );
            corrupt[at] ^= 0x10;
        }
    }
}

#[test]
fn quantized_models_run_with_every_memory_dtype() {
    for target in [Target::F16, Target::Int8] {
        let image = AlignedBytes::copy_from(&quantized_image(&small_config(), 10, target)).unwrap();
        let model = Model::parse(image.bytes()).unwrap();
        for mem_dtype in [MemDtype::F32, MemDtype::F16, MemDtype::Int8] {
            let options = SessionOptions {
                mem_dtype,
                ..options()
            };
            let needed = Session::arena_bytes(&model, &options).unwrap();
            let mut arena = AlignedBytes::zeroed(needed).unwrap();
            assert!(matches!(
                Session::new(&model, &mut arena.bytes_mut()[..needed - 1], options),
                Err(Error::ArenaTooSmall { .. })
            ));
            let mut session = Session::new(&model, arena.bytes_mut(), options).unwrap();
            for segment in [[1u32, 12, 25, 39], [0, 5, 22, 38], [7, 7, 7, 7]] {
                session
                    .forward(&segment, |_, row| {
                        let total: f64 = row.iter().map(|&v| (v as f64).exp()).sum();
                        assert!(
                            (total - 1.0).abs() < 1e-4,
                            "{target:?}/{mem_dtype:?}: sums to {total}"
                        );
                    })
                    .unwrap();
            }
        }
    }
}

#[test]
fn vectors_may_be_f16_but_not_quantized() {
    let config = small_config();
    let mut tensors: Vec<(TensorName, Vec<f32>)> = Vec::new();
    for_each_tensor(&config, |name, shape| {
        tensors.push((name, vec![0.5; shape.len()]))
    });
    let halves: Vec<Vec<half::f16>> = tensors
        .iter()
        .map(|(_, d)| d.iter().map(|&v| half::f16::from_f32(v)).collect())
        .collect();
    let payloads: Vec<(TensorName, Payload<'_>)> = tensors
        .iter()
        .zip(&halves)
        .map(|((name, data), h)| {
            (
                *name,
                if name.is_matrix() {
                    Payload::F16(h)
                } else {
                    Payload::F32(data)
                },
            )
        })
        .collect();
    assert!(write_image(&config, &payloads).is_ok());
    let bias = payloads.iter().position(|(n, _)| !n.is_matrix()).unwrap();
    let mut narrow = payloads.clone();
    narrow[bias].1 = Payload::F16(&halves[bias]);
    let image = write_image(&config, &narrow).unwrap();
    let aligned = AlignedBytes::copy_from(&image).unwrap();
    assert!(Model::parse(aligned.bytes()).is_ok());
    // int8 and int4 are for weight matrices: the writer refuses them for a vector (and the
    // parser an image that says so: `every_field_of_every_directory_entry_is_checked`)
    let int8 = vec![1i8; halves[bias].len()];
    let mut bad = payloads.clone();
    bad[bias].1 = Payload::Int8 {
        values: &int8,
        row_scales: &[1.0],
        act_scales: None,
    };
    assert_eq!(write_image(&config, &bad), Err(Error::TensorDtype(bad[bias].0)));
}

#[test]
fn sizes_that_are_not_multiples_of_four_give_exact_rows() {
    // Buffers are padded to 16 bytes in the arena; what the caller sees must not be.
    let mut config = small_config();
    config.n_token = 37;
    config.cutoffs[..2].copy_from_slice(&[9, 21]);
    config.d_model = 6;
    config.d_embed = 10;
    config.d_inner = 7;
    config.n_head = 3;
    config.d_head = 3;
    let image = AlignedBytes::copy_from(&random_image(&config, 11)).unwrap();
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions::from_config(&config);
    let mut arena = AlignedBytes::zeroed(Session::arena_bytes(&model, &options).unwrap()).unwrap();
    let mut session = Session::new(&model, arena.bytes_mut(), options).unwrap();
    let mut rows = 0;
    session
        .forward(&[0, 20, 36], |_, row| {
            assert_eq!(row.len(), 37);
            let total: f64 = row.iter().map(|&v| (v as f64).exp()).sum();
            assert!((total - 1.0).abs() < 1e-4, "sums to {total}");
            rows += 1;
        })
        .unwrap();
    assert_eq!(rows, 3);
}

#[test]
fn random_damage_behind_a_valid_checksum_never_panics() {
    // Several random bytes changed anywhere, the CRC rewritten so the structural checks and the
    // forward pass see the damage: every outcome must be a value (Ok or Err), never a panic.
    use txl_core::rng::Rng;
    let images = [
        random_image(&small_config(), 12),
        quantized_image(&small_config(), 13, Target::Int8),
        quantized_image(&small_config(), 14, Target::F16),
    ];
    let mut rng = Rng::new(15);
    let mut parsed = 0;
    for trial in 0..3000 {
        let mut damaged = images[trial % images.len()].clone();
        let end = damaged.len() - 4;
        for _ in 0..1 + rng.below(4) {
            let at = rng.index(end);
            damaged[at] = rng.next_u64() as u8;
        }
        let crc = txl_core::crc32(&damaged[..end]);
        damaged[end..].copy_from_slice(&crc.to_le_bytes());
        let bytes = AlignedBytes::copy_from(&damaged).unwrap();
        let Ok(model) = Model::parse(bytes.bytes()) else {
            continue;
        };
        parsed += 1;
        let options = SessionOptions::from_config(model.config());
        let Ok(needed) = Session::arena_bytes(&model, &options) else {
            continue;
        };
        if needed > 1 << 24 {
            continue;
        }
        let mut arena = AlignedBytes::zeroed(needed).unwrap();
        let mut session = Session::new(&model, arena.bytes_mut(), options).unwrap();
        let n_token = model.config().n_token;
        let tokens: Vec<u32> = (0..options.tgt_len.min(4)).map(|i| i * 7 % n_token).collect();
        session.forward(&tokens, |_, _| {}).unwrap();
    }
    // Most damage lands in weights, which still parse: the forward pass ran on those.
    assert!(parsed > 1000, "only {parsed} damaged images parsed");
}

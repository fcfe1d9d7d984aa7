//! The vocabulary section: an image with one reads its symbols and runs as the image without
//! it does; a damaged section is an error, never a panic.

mod common;

use common::{arena, tiny_config, tiny_image, MatrixDtype};
use txl_core::image::{set_vocabulary, CRC_BYTES, VOCAB_OFFSET_AT};
use txl_core::vocab::encode_section;
use txl_core::{AlignedBytes, Error, Model, Session, SessionOptions, VocabError};

fn symbols(n: u32) -> Vec<String> {
    let mut symbols: Vec<String> = (0..n).map(|i| format!("w{i}")).collect();
    symbols[0] = "<eos>".into();
    symbols[1] = "<unk>".into();
    symbols
}

fn logp_bits(bytes: &[u8]) -> Vec<u32> {
    let model = Model::parse(bytes).unwrap();
    let options = SessionOptions::from_config(model.config());
    let mut memory = arena(Session::arena_bytes(&model, &options).unwrap());
    let mut session = Session::new(&model, bytemuck::cast_slice_mut(&mut memory), options).unwrap();
    let mut bits = Vec::new();
    for segment in [&[2u32, 5, 9][..], &[19, 0, 3]] {
        session
            .forward(segment, |_, row| bits.extend(row.iter().map(|v| v.to_bits())))
            .unwrap();
    }
    bits
}

#[test]
fn an_image_with_a_vocabulary_reads_its_symbols_and_runs_alike() {
    let config = tiny_config();
    let plain = tiny_image(&config, MatrixDtype::F32, 3);
    assert!(Model::parse(plain.bytes())
        .unwrap()
        .image()
        .vocabulary()
        .is_none());
    let section = encode_section(&symbols(config.n_token), true).unwrap();
    let with = set_vocabulary(plain.bytes(), Some(&section)).unwrap();
    let with = AlignedBytes::copy_from(&with).unwrap();
    let model = Model::parse(with.bytes()).unwrap();
    let vocabulary = model.image().vocabulary().expect("a vocabulary");
    assert_eq!(vocabulary.len(), 20);
    assert!(vocabulary.lower_case());
    assert_eq!(vocabulary.symbol(7), Some("w7"));
    assert_eq!(vocabulary.find("w19"), Some(19));
    assert_eq!(vocabulary.eos(), Some(0));
    assert_eq!(logp_bits(with.bytes()), logp_bits(plain.bytes()));

    // Replacing and removing the section gives back the same bytes.
    let again = set_vocabulary(with.bytes(), Some(&section)).unwrap();
    assert_eq!(again, with.bytes());
    let removed = set_vocabulary(with.bytes(), None).unwrap();
    assert_eq!(removed, plain.bytes());
}

#[test]
fn a_vocabulary_of_another_size_is_refused() {
    let config = tiny_config();
    let plain = tiny_image(&config, MatrixDtype::Int8, 3);
    let section = encode_section(&symbols(config.n_token + 1), false).unwrap();
    assert_eq!(
        set_vocabulary(plain.bytes(), Some(&section)).unwrap_err(),
        Error::BadVocabulary(VocabError::SymbolCount {
            expected: 20,
            found: 21
        })
    );
}

/// Rewrites the CRC so the parser reaches the checks behind it.
fn with_crc(mut bytes: Vec<u8>) -> AlignedBytes {
    let at = bytes.len() - CRC_BYTES;
    let crc = txl_core::crc32(&bytes[..at]);
    bytes[at..].copy_from_slice(&crc.to_le_bytes());
    AlignedBytes::copy_from(&bytes).unwrap()
}

#[test]
fn every_damaged_vocabulary_byte_is_an_error_or_a_readable_vocabulary() {
    let config = tiny_config();
    let plain = tiny_image(&config, MatrixDtype::F16, 5);
    let section = encode_section(&symbols(config.n_token), false).unwrap();
    let with = set_vocabulary(plain.bytes(), Some(&section)).unwrap();
    let offset = u32::from_le_bytes(with[VOCAB_OFFSET_AT..VOCAB_OFFSET_AT + 4].try_into().unwrap()) as usize;
    // Under Miri (slow): every 23rd byte, one flip.
    let (stride, flips): (usize, &[u8]) = if cfg!(miri) {
        (23, &[0x10])
    } else {
        (1, &[0x01, 0x10, 0x80])
    };
    let bytes = (offset..with.len() - CRC_BYTES)
        .step_by(stride)
        .chain(VOCAB_OFFSET_AT..VOCAB_OFFSET_AT + 4);
    for at in bytes {
        for &flip in flips {
            let mut damaged = with.clone();
            damaged[at] ^= flip;
            let damaged = with_crc(damaged);
            match Model::parse(damaged.bytes()) {
                Ok(model) => {
                    if let Some(v) = model.image().vocabulary() {
                        assert!(v.symbols().all(|s| !s.is_empty()));
                    }
                }
                Err(Error::BadVocabulary(_) | Error::TensorBounds(_) | Error::BadHeader) => {}
                Err(other) => panic!("byte {at} ^ {flip:#x}: unexpected {other:?}"),
            }
        }
    }
    // An offset into the tensors is refused.
    let mut inside = with.clone();
    inside[VOCAB_OFFSET_AT..VOCAB_OFFSET_AT + 4].copy_from_slice(&256u32.to_le_bytes());
    assert!(Model::parse(with_crc(inside).bytes()).is_err());
}

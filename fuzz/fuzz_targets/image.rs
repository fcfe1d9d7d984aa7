//! `Model::parse` on arbitrary bytes; when they parse, a session under small options and a
//! forward pass. Nothing may panic, and bad segments must come back as errors.
//!
//! The input is an image whose last four bytes are replaced by the CRC-32 of the rest before
//! parsing, so the fuzzer reaches the checks behind the checksum (a mutated image would
//! otherwise almost always stop at `BadChecksum`, which the core's unit tests cover). Those four
//! bytes choose the session instead ([`options`]): `tgt_len` 1 to 4, `mem_len` 0 to 7,
//! `clamp_len` 0 to 7, `same_length`, the memory start, the cache dtype, the position-key mode,
//! and the tokens. An image with a vocabulary section reads every symbol back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use txl_core::{
    AlignedBytes, Error, MemDtype, MemInit, Model, PositionKeys, Session, SessionOptions, Vocabulary,
};

/// Largest arena tried; a bigger one is skipped.
const MAX_ARENA_BYTES: usize = 4 << 20;

fuzz_target!(|data: &[u8]| {
    let Some(crc_at) = data.len().checked_sub(4) else {
        let _ = Model::parse(data);
        return;
    };
    let choice: [u8; 4] = data[crc_at..].try_into().unwrap();
    let Ok(mut image) = AlignedBytes::copy_from(data) else {
        return;
    };
    let bytes = image.bytes_mut();
    let crc = txl_core::crc32(&bytes[..crc_at]);
    bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
    let Ok(model) = Model::parse(image.bytes()) else {
        return;
    };
    if let Some(vocabulary) = model.image().vocabulary() {
        read_vocabulary(&vocabulary, model.config().n_token);
    }
    run(&model, options(choice), choice[2]);
});

/// Every symbol of a parsed vocabulary reads back, and ids past the end are `None`.
fn read_vocabulary(vocabulary: &Vocabulary<'_>, n_token: u32) {
    assert_eq!(vocabulary.len(), n_token as usize);
    for id in 0..n_token {
        let symbol = vocabulary.symbol(id).expect("a parsed symbol reads back");
        assert!(!symbol.is_empty());
    }
    assert_eq!(vocabulary.symbol(n_token), None);
    let mut text = String::new();
    vocabulary
        .write_text(&[0, n_token - 1, n_token], &mut text)
        .expect("a String takes any text");
    let _ = vocabulary.find("<eos>");
}

/// The session options the four bytes `choice` pick.
fn options([a, b, ..]: [u8; 4]) -> SessionOptions {
    SessionOptions {
        tgt_len: 1 + u32::from(a & 3),
        mem_len: u32::from((a >> 2) & 7),
        clamp_len: u32::from(a >> 5),
        same_length: b & 1 != 0,
        mem_init: if b & 2 != 0 {
            MemInit::Zeros
        } else {
            MemInit::Empty
        },
        mem_dtype: match (b >> 2) & 3 {
            1 => MemDtype::F16,
            2 => MemDtype::Int8,
            _ => MemDtype::F32,
        },
        position_keys: match (b >> 4) & 3 {
            1 => PositionKeys::PerSegment,
            2 => PositionKeys::FoldedIntoQuery,
            _ => PositionKeys::PerSession,
        },
    }
}

fn run(model: &Model<'_>, options: SessionOptions, token_seed: u8) {
    let Ok(bytes) = Session::arena_bytes(model, &options) else {
        return;
    };
    if bytes > MAX_ARENA_BYTES {
        return;
    }
    let mut arena = AlignedBytes::zeroed(bytes).expect("a few MB");
    let mut session = Session::new(model, arena.bytes_mut(), options).expect("the arena is the size asked");
    let n_token = model.config().n_token;
    let tgt_len = options.tgt_len as usize;
    // 0, the last token, and a spread between
    let tokens = [0, n_token - 1, u32::from(token_seed) % n_token, n_token / 2];
    let segment = &tokens[..tgt_len];
    let mut rows = 0;
    // Three segments, so the later ones attend to the memory and it wraps around its ring.
    for _ in 0..3 {
        session
            .forward(segment, |_, log_probs| {
                assert_eq!(log_probs.len(), n_token as usize);
                rows += 1;
            })
            .expect("a segment of in-range tokens runs");
    }
    assert_eq!(rows, 3 * tgt_len);
    assert!(session.memory_len() <= options.mem_len as usize);
    assert!(matches!(
        session.forward(&[n_token], |_, _| {}),
        Err(Error::TokenOutOfRange { .. })
    ));
    assert!(matches!(
        session.forward(&[], |_, _| {}),
        Err(Error::SegmentLength { .. })
    ));
    let too_long = [0; 5];
    assert!(matches!(
        session.forward(&too_long[..tgt_len + 1], |_, _| {}),
        Err(Error::SegmentLength { .. })
    ));
    session
        .forward_last(segment, |_, _| {})
        .expect("a segment of in-range tokens runs after errors");
    session.reset();
    session.forward(segment, |_, _| {}).expect("a reset session runs");
}

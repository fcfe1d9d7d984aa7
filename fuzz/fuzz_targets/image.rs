//! `Model::parse` on arbitrary bytes; when they parse, sessions under small options and a
//! forward pass. Nothing may panic, and bad segments must come back as errors.
//!
//! The input is an image whose last four bytes are replaced by the CRC-32 of the rest before
//! parsing, so the fuzzer reaches the checks behind the checksum (a mutated image would
//! otherwise almost always stop at `BadChecksum`, which the core's unit tests cover).

#![no_main]

use libfuzzer_sys::fuzz_target;
use txl_core::{AlignedBytes, Error, MemDtype, MemInit, Model, PositionKeys, Session, SessionOptions};

/// Largest arena tried; a bigger one is skipped.
const MAX_ARENA_BYTES: usize = 4 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(mut image) = AlignedBytes::copy_from(data) else {
        return;
    };
    let bytes = image.bytes_mut();
    if let Some(crc_at) = bytes.len().checked_sub(4) {
        let crc = txl_core::crc32(&bytes[..crc_at]);
        bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(model) = Model::parse(image.bytes()) else {
        return;
    };
    let config = *model.config();
    let small = SessionOptions {
        tgt_len: config.tgt_len.clamp(1, 3),
        mem_len: config.mem_len.min(4),
        ..SessionOptions::from_config(&config)
    };
    // Every cache dtype and position-key mode, both memory starts.
    let variants = [
        (MemDtype::F32, PositionKeys::PerSession, MemInit::Empty),
        (MemDtype::F16, PositionKeys::PerSegment, MemInit::Zeros),
        (MemDtype::Int8, PositionKeys::PerSession, MemInit::Zeros),
    ];
    for (mem_dtype, position_keys, mem_init) in variants {
        run(
            &model,
            SessionOptions {
                mem_dtype,
                position_keys,
                mem_init,
                ..small
            },
        );
    }
});

fn run(model: &Model<'_>, options: SessionOptions) {
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
    let tokens = [0, n_token - 1, n_token / 2];
    let segment = &tokens[..tgt_len.min(tokens.len())];
    let mut rows = 0;
    let row_width = n_token as usize;
    // Two segments, so the second one attends to the memory of the first.
    for _ in 0..2 {
        session
            .forward(segment, |_, log_probs| {
                assert_eq!(log_probs.len(), row_width);
                rows += 1;
            })
            .expect("a segment of in-range tokens runs");
    }
    assert_eq!(rows, 2 * segment.len());
    assert!(matches!(
        session.forward(&[n_token], |_, _| {}),
        Err(Error::TokenOutOfRange { .. })
    ));
    assert!(matches!(
        session.forward(&[], |_, _| {}),
        Err(Error::SegmentLength { .. })
    ));
    let too_long = [0; 4];
    assert!(matches!(
        session.forward(&too_long[..tgt_len + 1], |_, _| {}),
        Err(Error::SegmentLength { .. })
    ));
    session
        .forward_last(segment, |_, _| {})
        .expect("a segment of in-range tokens runs after errors");
}

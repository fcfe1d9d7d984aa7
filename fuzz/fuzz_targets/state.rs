//! `Session::restore_state` on arbitrary bytes, into sessions of a fixed tiny model
//! (`txl_fuzz::with_state_session`: f32, f16 and int8 caches, each position-key mode). A refused state must leave the
//! session exactly as it was (its saved state byte for byte); an accepted one must save back
//! to the same bytes and let a forward pass run.
//!
//! Before restoring, the CRC-32 the input's header places (after `48 + 2 × n_layer × len ×
//! row_bytes` bytes, `core/FORMAT.md`) is set to that of the bytes before it, when the input
//! is long enough, so the fuzzer reaches the checks behind the checksum.

#![no_main]

use libfuzzer_sys::fuzz_target;
use txl_fuzz::{saved_state, with_state_session, STATE_SESSIONS};

/// Bytes of the state header.
const HEADER_BYTES: usize = 48;

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    fix_crc(&mut bytes);
    for which in 0..STATE_SESSIONS {
        with_state_session(which, |session| {
            let before = saved_state(session);
            let memory_before = session.memory_len();
            match session.restore_state(&bytes) {
                Err(_) => {
                    assert_eq!(
                        saved_state(session),
                        before,
                        "a refused state changed the session"
                    );
                    assert_eq!(session.memory_len(), memory_before);
                }
                Ok(len) => {
                    let after = saved_state(session);
                    assert_eq!(after, bytes[..len], "a restored state saves differently");
                    session
                        .forward(&[0, 11], |_, _| {})
                        .expect("a restored session runs");
                }
            }
        });
    }
});

/// Writes the CRC-32 where the header says the state ends, if `bytes` reach that far.
fn fix_crc(bytes: &mut [u8]) {
    if bytes.len() < HEADER_BYTES {
        return;
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let n_layer = txl_fuzz::tiny_config().n_layer as usize;
    let (len, row_bytes) = (u32_at(40), u32_at(44));
    let end = n_layer
        .checked_mul(len)
        .and_then(|rows| rows.checked_mul(2))
        .and_then(|rows| rows.checked_mul(row_bytes))
        .and_then(|rows| rows.checked_add(HEADER_BYTES + 4));
    if let Some(end) = end.filter(|&end| end <= bytes.len()) {
        let crc = txl_core::crc32(&bytes[..end - 4]);
        bytes[end - 4..end].copy_from_slice(&crc.to_le_bytes());
    }
}

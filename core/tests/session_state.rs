//! Session state: saved, restored, and the session continues bit for bit; every damaged,
//! foreign or truncated state is refused and leaves the session as it was.

mod common;

use common::{arena, run, saved, tiny_config, tiny_image, MatrixDtype};
use txl_core::{
    Config, Error, MemDtype, MemInit, Model, OptionWord, PositionKeys, Session, SessionOptions, StateError,
};

const BEFORE: [&[u32]; 3] = [&[1, 7, 13], &[19, 2], &[5, 5, 0]];
const AFTER: [&[u32]; 2] = [&[3, 11, 17], &[8]];

/// Every combination of the options that change how the memory is kept; under Miri (slow),
/// each memory dtype once, with the other options varied among them.
fn every_options(config: &Config) -> Vec<SessionOptions> {
    if cfg!(miri) {
        let base = SessionOptions::from_config(config);
        return vec![
            SessionOptions {
                mem_dtype: MemDtype::F32,
                ..base
            },
            SessionOptions {
                mem_dtype: MemDtype::F16,
                mem_init: MemInit::Zeros,
                ..base
            },
            SessionOptions {
                mem_dtype: MemDtype::Int8,
                position_keys: PositionKeys::PerSegment,
                ..base
            },
        ];
    }
    let mut all = Vec::new();
    for &mem_dtype in MemDtype::ALL {
        for &mem_init in MemInit::ALL {
            for &position_keys in PositionKeys::ALL {
                all.push(SessionOptions {
                    mem_dtype,
                    mem_init,
                    position_keys,
                    ..SessionOptions::from_config(config)
                });
            }
        }
    }
    all
}

#[test]
fn a_restored_session_continues_bit_for_bit() {
    let config = tiny_config();
    let weights_kinds: &[MatrixDtype] = if cfg!(miri) {
        &[MatrixDtype::Int8]
    } else {
        &[MatrixDtype::F32, MatrixDtype::F16, MatrixDtype::Int8]
    };
    for &weights in weights_kinds {
        let image = tiny_image(&config, weights, 7);
        let model = Model::parse(image.bytes()).unwrap();
        for options in every_options(&config) {
            let bytes = Session::arena_bytes(&model, &options).unwrap();
            let mut first_arena = arena(bytes);
            let mut first =
                Session::new(&model, bytemuck::cast_slice_mut(&mut first_arena), options).unwrap();
            run(&mut first, &BEFORE);
            let state = saved(&first);
            assert_eq!(state.len(), first.state_bytes(), "a full memory fills the state");
            assert_eq!(
                Session::state_bytes_for(&model, &options),
                Ok(first.state_bytes())
            );
            let uninterrupted = run(&mut first, &AFTER);

            // A new session that has seen other text, then the state.
            let mut second_arena = arena(bytes);
            let mut second =
                Session::new(&model, bytemuck::cast_slice_mut(&mut second_arena), options).unwrap();
            run(&mut second, &[&[4, 4, 4], &[9]]);
            assert_eq!(second.restore_state(&state), Ok(state.len()));
            assert_eq!(second.memory_len(), options.mem_len as usize);
            assert_eq!(saved(&second), state, "restore then save gives the same bytes");
            let resumed = run(&mut second, &AFTER);
            assert_eq!(
                resumed, uninterrupted,
                "{weights:?} weights, {options:?}: the restored session differs"
            );
        }
    }
}

#[test]
fn a_partly_filled_memory_is_saved_and_restored() {
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::F32, 3);
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions::from_config(&config);
    let bytes = Session::arena_bytes(&model, &options).unwrap();
    let mut first_arena = arena(bytes);
    let mut first = Session::new(&model, bytemuck::cast_slice_mut(&mut first_arena), options).unwrap();

    let empty = saved(&first);
    run(&mut first, &[&[2, 3]]);
    assert_eq!(first.memory_len(), 2);
    let state = saved(&first);
    assert!(empty.len() < state.len() && state.len() < first.state_bytes());
    let uninterrupted = run(&mut first, &AFTER);

    let mut second_arena = arena(bytes);
    let mut second = Session::new(&model, bytemuck::cast_slice_mut(&mut second_arena), options).unwrap();
    run(&mut second, &BEFORE);
    second.restore_state(&state).unwrap();
    assert_eq!(second.memory_len(), 2);
    assert_eq!(run(&mut second, &AFTER), uninterrupted);

    // The empty state empties the memory.
    second.restore_state(&empty).unwrap();
    assert_eq!(second.memory_len(), 0);
}

/// Sets up a session that has run `BEFORE`, and checks `restore` refuses `bytes` with
/// `expected` and leaves the session as it was.
fn assert_refused(
    session: &mut Session<'_, '_>,
    bytes: &[u8],
    expected: impl Fn(&StateError) -> bool,
    what: &str,
) {
    let before = saved(session);
    match session.restore_state(bytes) {
        Err(Error::BadState(error)) => assert!(expected(&error), "{what}: unexpected {error:?}"),
        other => panic!("{what}: expected a refused state, got {other:?}"),
    }
    assert_eq!(
        saved(session),
        before,
        "{what}: the refused state changed the session"
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the restored sessions' kernels again; the refusal is safe code"
)]
fn damaged_states_are_refused_and_change_nothing() {
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::F32, 11);
    let model = Model::parse(image.bytes()).unwrap();
    for &mem_dtype in MemDtype::ALL {
        let options = SessionOptions {
            mem_dtype,
            ..SessionOptions::from_config(&config)
        };
        let mut memory = arena(Session::arena_bytes(&model, &options).unwrap());
        let mut session = Session::new(&model, bytemuck::cast_slice_mut(&mut memory), options).unwrap();
        run(&mut session, &BEFORE);
        let state = saved(&session);
        run(&mut session, &[&[1]]);

        // Every byte flipped: magic, version, header, rows or CRC.
        for at in 0..state.len() {
            let mut damaged = state.clone();
            damaged[at] ^= 0x20;
            assert_refused(&mut session, &damaged, |_| true, &format!("byte {at} flipped"));
        }
        // Cut short anywhere.
        for len in (0..state.len()).step_by(7) {
            assert_refused(
                &mut session,
                &state[..len],
                |e| matches!(e, StateError::Truncated { .. }),
                &format!("cut to {len} bytes"),
            );
        }
        assert_refused(
            &mut session,
            b"TXLMODEL",
            |e| matches!(e, StateError::Truncated { .. }),
            "short",
        );
        let mut wrong_magic = state.clone();
        wrong_magic[..8].copy_from_slice(b"TXLMODEL");
        assert_refused(
            &mut session,
            &wrong_magic,
            |e| *e == StateError::BadMagic,
            "magic",
        );

        // Longer buffers are fine: the state says how long it is.
        let mut padded = state.clone();
        padded.extend_from_slice(&[0xAA; 40]);
        assert_eq!(session.restore_state(&padded), Ok(state.len()));
        assert_eq!(saved(&session), state);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the restored sessions' kernels again; the refusal is safe code"
)]
fn a_state_from_another_model_or_other_options_is_refused() {
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::F32, 11);
    let other_image = tiny_image(&config, MatrixDtype::F32, 12);
    let model = Model::parse(image.bytes()).unwrap();
    let other_model = Model::parse(other_image.bytes()).unwrap();
    let options = SessionOptions::from_config(&config);

    let mut memory = arena(Session::arena_bytes(&model, &options).unwrap());
    let mut session = Session::new(&model, bytemuck::cast_slice_mut(&mut memory), options).unwrap();
    run(&mut session, &BEFORE);

    let mut other_memory = arena(Session::arena_bytes(&other_model, &options).unwrap());
    let mut other = Session::new(&other_model, bytemuck::cast_slice_mut(&mut other_memory), options).unwrap();
    run(&mut other, &BEFORE);
    let foreign = saved(&other);
    assert_refused(
        &mut session,
        &foreign,
        |e| matches!(e, StateError::OtherModel { .. }),
        "another model",
    );

    let changes: [fn(&mut SessionOptions); 8] = [
        |o| o.tgt_len += 1,
        |o| o.mem_len += 1,
        |o| o.clamp_len = 2,
        |o| o.same_length = !o.same_length,
        |o| o.mem_init = MemInit::Zeros,
        |o| o.mem_dtype = MemDtype::F16,
        |o| o.position_keys = PositionKeys::PerSegment,
        |o| o.position_keys = PositionKeys::FoldedIntoQuery,
    ];
    for change in changes {
        let mut other_options = options;
        change(&mut other_options);
        let mut memory = arena(Session::arena_bytes(&model, &other_options).unwrap());
        let mut differently =
            Session::new(&model, bytemuck::cast_slice_mut(&mut memory), other_options).unwrap();
        run(&mut differently, &[&[1]]);
        let state = saved(&differently);
        assert_refused(
            &mut session,
            &state,
            |e| *e == StateError::OtherOptions { saved: other_options },
            &format!("{other_options:?}"),
        );
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the restored sessions' kernels again; the refusal is safe code"
)]
fn a_short_buffer_is_an_error_not_a_partial_state() {
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::Int8, 5);
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions::from_config(&config);
    let mut memory = arena(Session::arena_bytes(&model, &options).unwrap());
    let mut session = Session::new(&model, bytemuck::cast_slice_mut(&mut memory), options).unwrap();
    run(&mut session, &BEFORE);
    let needed = session.state_bytes();
    let mut out = vec![0x55u8; needed - 1];
    assert_eq!(
        session.save_state(&mut out),
        Err(Error::BadState(StateError::BufferTooSmall {
            needed,
            got: needed - 1
        }))
    );
    assert!(out.iter().all(|&b| b == 0x55), "nothing is written");
}

/// Byte 39 of the header is the position-key mode's place in `PositionKeys::ALL`: `session` 0
/// and `segment` 1 as in every state written before `folded` (2) existed, so those still read;
/// a byte naming no mode is refused.
#[test]
#[cfg_attr(
    miri,
    ignore = "the restored sessions' kernels again; the refusal is safe code"
)]
fn the_position_key_byte_keeps_its_values_and_refuses_others() {
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::F32, 13);
    let model = Model::parse(image.bytes()).unwrap();
    let reseal = |state: &mut Vec<u8>| {
        let crc_at = state.len() - 4;
        let crc = txl_core::crc32(&state[..crc_at]);
        state[crc_at..].copy_from_slice(&crc.to_le_bytes());
    };
    let modes = [
        (PositionKeys::PerSession, 0u8),
        (PositionKeys::PerSegment, 1),
        (PositionKeys::FoldedIntoQuery, 2),
    ];
    assert_eq!(PositionKeys::ALL.len(), modes.len());
    for (position_keys, byte) in modes {
        let options = SessionOptions {
            position_keys,
            ..SessionOptions::from_config(&config)
        };
        let mut memory = arena(Session::arena_bytes(&model, &options).unwrap());
        let mut session = Session::new(&model, bytemuck::cast_slice_mut(&mut memory), options).unwrap();
        run(&mut session, &BEFORE);
        let state = saved(&session);
        assert_eq!(state[39], byte, "{position_keys:?}");
        assert_eq!(session.restore_state(&state), Ok(state.len()));
        let mut unknown = state.clone();
        unknown[39] = modes.len() as u8;
        reseal(&mut unknown);
        assert_refused(
            &mut session,
            &unknown,
            |e| *e == StateError::BadHeader,
            "position-key byte 3",
        );
    }
}

/// `reset` is a fresh start: after any text, a reset session saves the state of a new one and
/// continues with its bits, for each memory start, dtype and position-key mode.
#[test]
fn a_reset_session_is_a_fresh_one() {
    let config = tiny_config();
    let weights_kinds: &[MatrixDtype] = if cfg!(miri) {
        &[MatrixDtype::Int8]
    } else {
        &[MatrixDtype::F32, MatrixDtype::Int8]
    };
    for &weights in weights_kinds {
        let image = tiny_image(&config, weights, 17);
        let model = Model::parse(image.bytes()).unwrap();
        // Under Miri one set of options (int8 memory, keys per segment): the restored
        // sessions above run the kernels of the others.
        let all_options = every_options(&config);
        let options_tried = if cfg!(miri) {
            &all_options[2..]
        } else {
            &all_options[..]
        };
        for &options in options_tried {
            let what = format!("{weights:?} weights, {options:?}");
            let bytes = Session::arena_bytes(&model, &options).unwrap();
            let mut fresh_arena = arena(bytes);
            let mut fresh =
                Session::new(&model, bytemuck::cast_slice_mut(&mut fresh_arena), options).unwrap();
            let fresh_state = saved(&fresh);
            let fresh_len = fresh.memory_len();
            let expected_len = match options.mem_init {
                MemInit::Empty => 0,
                MemInit::Zeros => options.mem_len as usize,
            };
            assert_eq!(fresh_len, expected_len, "{what}");
            let fresh_bits = run(&mut fresh, &AFTER);

            let mut used_arena = arena(bytes);
            let mut used = Session::new(&model, bytemuck::cast_slice_mut(&mut used_arena), options).unwrap();
            // Once with a full memory, once with part of one (under Miri, part of one).
            let befores: [&[&[u32]]; 2] = [&BEFORE[..], &[&[2, 3][..]]];
            for before in &befores[usize::from(cfg!(miri))..] {
                run(&mut used, before);
                assert!(saved(&used) != fresh_state, "{what}: the text changed nothing");
                used.reset();
                assert_eq!(used.memory_len(), fresh_len, "{what}");
                assert!(
                    saved(&used) == fresh_state,
                    "{what}: reset memory is not a fresh one"
                );
                assert_eq!(
                    run(&mut used, &AFTER),
                    fresh_bits,
                    "{what}: reset differs from fresh"
                );
                used.reset();
            }
        }
    }
}

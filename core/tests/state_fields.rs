//! The saved state's structure, field by field (`core/FORMAT.md`, "Session state"): each field
//! of the header, the memory rows of each dtype and the CRC is damaged with the CRC rewritten,
//! so that only that field is wrong, and `restore_state` must give the error the format
//! promises for it and leave the session as it was: its next forward pass gives the bits of a
//! session that was never given the state. Damage no check can see (a value that is still
//! valid) is named as such, with what it does.

mod common;

use common::{arena, run, saved, tiny_config, tiny_image, MatrixDtype};
use txl_core::{
    crc32, Error, MemDtype, MemInit, Model, OptionWord, PositionKeys, Session, SessionOptions, StateError,
};

// The layout of `core/FORMAT.md`, written out here rather than taken from the crate.
const MAGIC: usize = 0;
const VERSION: usize = 8;
const IMAGE_CRC: usize = 12;
const IMAGE_BYTES: usize = 16;
const TGT_LEN: usize = 24;
const MEM_LEN: usize = 28;
const CLAMP_LEN: usize = 32;
const SAME_LENGTH: usize = 36;
const MEM_INIT: usize = 37;
const MEM_DTYPE: usize = 38;
const POSITION_KEYS: usize = 39;
const LEN: usize = 40;
const ROW_BYTES: usize = 44;
const ROWS: usize = 48;
const CRC_BYTES: usize = 4;

/// The text a session has seen before its state is saved: enough to fill the tiny model's
/// memory (`mem_len` 4), or two positions of it.
static FULL: [&[u32]; 3] = [&[1, 7, 13], &[19, 2], &[5, 5, 0]];
static PARTLY: [&[u32]; 1] = [&[2, 3]];
/// Nothing: an empty memory (with `MemInit::Empty`).
static NOTHING: [&[u32]; 0] = [];
/// The three, for the tests that take each.
static EACH: [&[&[u32]]; 3] = [&FULL, &PARTLY, &NOTHING];
/// The text after it, whose log-probabilities show what the session holds.
const AFTER: [&[u32]; 2] = [&[3, 11, 17], &[8]];

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Rewrites the CRC in the last four bytes, as the image tests do.
fn reseal(bytes: &mut [u8]) {
    let crc_at = bytes.len() - CRC_BYTES;
    let crc = crc32(&bytes[..crc_at]);
    put_u32(bytes, crc_at, crc);
}

/// The bytes of one key (or value) row of the tiny model, as the format gives them.
fn row_bytes(options: &SessionOptions) -> usize {
    let config = tiny_config();
    let width = (config.n_head * config.d_head) as usize;
    match options.mem_dtype {
        MemDtype::F32 => 4 * width,
        MemDtype::F16 => 2 * width,
        MemDtype::Int8 => width + 4 * config.n_head as usize,
    }
}

/// `48 + 2 × n_layer × len × row_bytes + 4`, or `None` past `usize`.
fn declared_len(n_layer: usize, len: u32, row_bytes: u32) -> Option<usize> {
    (2 * n_layer)
        .checked_mul(len as usize)?
        .checked_mul(row_bytes as usize)?
        .checked_add(ROWS + CRC_BYTES)
}

/// A saved state and what a session that saved it does next.
struct Saved<'m> {
    model: Model<'m>,
    options: SessionOptions,
    /// The text the session saw before saving.
    before: &'static [&'static [u32]],
    state: Vec<u8>,
    memory_len: usize,
    /// The bits of `AFTER` in a session that saw `before` and nothing else.
    after: Vec<u32>,
}

/// A new session of `model` under `options` that has seen `before`, given to `f`.
fn with_session<R>(
    model: &Model<'_>,
    options: SessionOptions,
    before: &[&[u32]],
    f: impl FnOnce(&mut Session<'_, '_>) -> R,
) -> R {
    let mut memory = arena(Session::arena_bytes(model, &options).unwrap());
    let mut session = Session::new(model, bytemuck::cast_slice_mut(&mut memory), options).unwrap();
    run(&mut session, before);
    f(&mut session)
}

impl<'m> Saved<'m> {
    fn new(model: &Model<'m>, options: SessionOptions, before: &'static [&'static [u32]]) -> Saved<'m> {
        let (state, memory_len, after) = with_session(model, options, before, |session| {
            let state = saved(session);
            (state, session.memory_len(), run(session, &AFTER))
        });
        Saved {
            model: *model,
            options,
            before,
            state,
            memory_len,
            after,
        }
    }

    /// A copy of the state changed by `damage`, the CRC rewritten.
    fn damaged(&self, damage: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut bytes = self.state.clone();
        damage(&mut bytes);
        reseal(&mut bytes);
        bytes
    }

    /// The CRC error the state `bytes` gets when its header puts the CRC at `crc_at`.
    fn checksum_error(bytes: &[u8], crc_at: usize) -> StateError {
        StateError::BadChecksum {
            stored: get_u32(bytes, crc_at),
            computed: crc32(&bytes[..crc_at]),
        }
    }

    /// `restore_state(bytes)` must give exactly `expected`, and the session must be as it was:
    /// the same memory, the same saved state, and the next segments give the bits of a
    /// session that never saw `bytes`.
    fn refused(&self, bytes: &[u8], expected: StateError, what: &str) {
        let what = format!("{:?} memory, {what}", self.options.mem_dtype);
        with_session(&self.model, self.options, self.before, |session| {
            assert_eq!(
                session.restore_state(bytes),
                Err(Error::BadState(expected)),
                "{what}"
            );
            assert_eq!(
                session.memory_len(),
                self.memory_len,
                "{what}: memory length changed"
            );
            assert_eq!(saved(session), self.state, "{what}: the memory changed");
            assert_eq!(
                run(session, &AFTER),
                self.after,
                "{what}: the next segments changed"
            );
        });
    }

    /// `restore_state(bytes)` must take all of `bytes`: the session then holds what they say
    /// (saving gives them back) and remembers `memory_len` positions. Returns the bits of the
    /// next segments.
    fn accepted(&self, bytes: &[u8], memory_len: usize, what: &str) -> Vec<u32> {
        let what = format!("{:?} memory, {what}", self.options.mem_dtype);
        with_session(&self.model, self.options, self.before, |session| {
            assert_eq!(session.restore_state(bytes), Ok(bytes.len()), "{what}");
            assert_eq!(session.memory_len(), memory_len, "{what}");
            assert_eq!(
                saved(session),
                bytes,
                "{what}: saving does not give the state back"
            );
            run(session, &AFTER)
        })
    }
}

/// The tiny model's image (f32 matrices) and the memory dtypes.
fn image() -> txl_core::AlignedBytes {
    tiny_image(&tiny_config(), MatrixDtype::F32, 21)
}

fn options_with(mem_dtype: MemDtype) -> SessionOptions {
    SessionOptions {
        mem_dtype,
        ..SessionOptions::from_config(&tiny_config())
    }
}

/// Every field holds what the format says, and the state is exactly as long as it says.
#[test]
fn every_field_holds_what_the_format_says() {
    let image = image();
    let model = Model::parse(image.bytes()).unwrap();
    let n_layer = tiny_config().n_layer as usize;
    for &mem_dtype in MemDtype::ALL {
        for options in [
            options_with(mem_dtype),
            SessionOptions {
                tgt_len: 4,
                mem_len: 5,
                clamp_len: 3,
                same_length: true,
                mem_init: MemInit::Zeros,
                mem_dtype,
                position_keys: PositionKeys::FoldedIntoQuery,
            },
        ] {
            for before in EACH {
                let s = Saved::new(&model, options, before);
                let state = &s.state;
                let what = format!("{options:?}, {} positions", s.memory_len);
                assert_eq!(&state[MAGIC..MAGIC + 8], b"TXLSTATE", "{what}");
                assert_eq!(get_u32(state, VERSION), 1, "{what}");
                let image = image.bytes();
                assert_eq!(
                    get_u32(state, IMAGE_CRC),
                    get_u32(image, image.len() - 4),
                    "{what}"
                );
                assert_eq!(get_u64(state, IMAGE_BYTES), image.len() as u64, "{what}");
                assert_eq!(get_u32(state, TGT_LEN), options.tgt_len, "{what}");
                assert_eq!(get_u32(state, MEM_LEN), options.mem_len, "{what}");
                assert_eq!(get_u32(state, CLAMP_LEN), options.clamp_len, "{what}");
                assert_eq!(state[SAME_LENGTH], options.same_length as u8, "{what}");
                let index = |all: &[&str], name: &str| all.iter().position(|&n| n == name).unwrap() as u8;
                assert_eq!(
                    state[MEM_INIT],
                    index(&["empty", "zeros"], options.mem_init.word()),
                    "{what}"
                );
                assert_eq!(
                    state[MEM_DTYPE],
                    index(&["f32", "f16", "int8"], options.mem_dtype.word()),
                    "{what}"
                );
                assert_eq!(
                    state[POSITION_KEYS],
                    index(&["session", "segment", "folded"], options.position_keys.word()),
                    "{what}"
                );
                assert_eq!(get_u32(state, LEN) as usize, s.memory_len, "{what}");
                assert!(s.memory_len <= options.mem_len as usize, "{what}");
                assert_eq!(get_u32(state, ROW_BYTES) as usize, row_bytes(&options), "{what}");
                let rows = 2 * n_layer * s.memory_len * row_bytes(&options);
                assert_eq!(state.len(), ROWS + rows + CRC_BYTES, "{what}");
                let crc_at = state.len() - CRC_BYTES;
                assert_eq!(get_u32(state, crc_at), crc32(&state[..crc_at]), "{what}");
            }
        }
    }
}

/// The fixed fields: magic, version, the image's fingerprint, the options.
#[test]
fn each_header_field_damaged_gets_its_own_error() {
    let image = image();
    let model = Model::parse(image.bytes()).unwrap();
    for &mem_dtype in MemDtype::ALL {
        let s = Saved::new(&model, options_with(mem_dtype), &FULL);
        let options = s.options;
        assert_eq!(s.memory_len, options.mem_len as usize, "the memory is full");

        // magic: any byte of it.
        for at in MAGIC..MAGIC + 8 {
            for value in [0u8, b'X', 0xff] {
                if s.state[at] == value {
                    continue;
                }
                let bytes = s.damaged(|b| b[at] = value);
                s.refused(
                    &bytes,
                    StateError::BadMagic,
                    &format!("magic byte {at} = {value:#x}"),
                );
            }
        }
        let bytes = s.damaged(|b| b[MAGIC..MAGIC + 8].copy_from_slice(b"TXLMODEL"));
        s.refused(&bytes, StateError::BadMagic, "the image's magic");

        // state_version: anything but 1, any byte of it.
        for version in [0u32, 2, 0x100, 0x0100_0001, u32::MAX] {
            let bytes = s.damaged(|b| put_u32(b, VERSION, version));
            s.refused(
                &bytes,
                StateError::UnsupportedVersion(version),
                &format!("version {version:#x}"),
            );
        }

        // image_crc: the error names the CRC the state claims.
        let image_crc = get_u32(&s.state, IMAGE_CRC);
        for wrong in [image_crc ^ 1, image_crc ^ 0x8000_0000, 0, !image_crc] {
            let bytes = s.damaged(|b| put_u32(b, IMAGE_CRC, wrong));
            s.refused(
                &bytes,
                StateError::OtherModel { image_crc: wrong },
                &format!("image_crc {wrong:#x}"),
            );
        }

        // image_bytes: the same CRC, another length, is another image.
        let image_bytes = get_u64(&s.state, IMAGE_BYTES);
        for wrong in [image_bytes + 1, image_bytes - 1, image_bytes | 1 << 63, 0] {
            let bytes = s.damaged(|b| b[IMAGE_BYTES..IMAGE_BYTES + 8].copy_from_slice(&wrong.to_le_bytes()));
            s.refused(
                &bytes,
                StateError::OtherModel { image_crc },
                &format!("image_bytes {wrong}"),
            );
        }

        // The u32 options: any other value is other options, named in the error. The header
        // does not check them against anything but this session's options, so a value no
        // session could have (tgt_len 0, a clamp_len beyond every distance) is refused the same
        // way, as other options, not as a malformed header.
        type Set = fn(&mut SessionOptions, u32);
        let fields: [(&str, usize, u32, Set); 3] = [
            ("tgt_len", TGT_LEN, options.tgt_len, |o, v| o.tgt_len = v),
            ("mem_len", MEM_LEN, options.mem_len, |o, v| o.mem_len = v),
            ("clamp_len", CLAMP_LEN, options.clamp_len, |o, v| o.clamp_len = v),
        ];
        for (name, at, value, set) in fields {
            for wrong in [value + 1, value ^ 0x100, u32::MAX, 0] {
                if wrong == value {
                    continue;
                }
                if name == "mem_len" && wrong < s.memory_len as u32 {
                    continue; // fewer than the positions the state holds: below
                }
                let mut saved = options;
                set(&mut saved, wrong);
                let bytes = s.damaged(|b| put_u32(b, at, wrong));
                s.refused(
                    &bytes,
                    StateError::OtherOptions { saved },
                    &format!("{name} {wrong}"),
                );
            }
        }
        // mem_len below the positions the state holds is a malformed header, checked before
        // the CRC and the options.
        for wrong in [0, options.mem_len - 1] {
            let bytes = s.damaged(|b| put_u32(b, MEM_LEN, wrong));
            s.refused(&bytes, StateError::BadHeader, &format!("mem_len {wrong} < len"));
        }

        // The one-byte options: each other value that names an option is other options; a
        // byte that names none is a malformed header.
        type SetByte = fn(&mut SessionOptions, u8) -> bool;
        let bytes_fields: [(&str, usize, SetByte); 4] = [
            ("same_length", SAME_LENGTH, |o, v| match v {
                0 | 1 => {
                    o.same_length = v == 1;
                    true
                }
                _ => false,
            }),
            ("mem_init", MEM_INIT, |o, v| set_word(&mut o.mem_init, v)),
            ("mem_dtype", MEM_DTYPE, |o, v| set_word(&mut o.mem_dtype, v)),
            ("position_keys", POSITION_KEYS, |o, v| {
                set_word(&mut o.position_keys, v)
            }),
        ];
        for (name, at, set) in bytes_fields {
            let value = s.state[at];
            let mut names_an_option = 0;
            for wrong in (0..=8u8).chain([0x80, 0xff]) {
                if wrong == value {
                    continue;
                }
                let mut saved = options;
                let bytes = s.damaged(|b| b[at] = wrong);
                if set(&mut saved, wrong) {
                    // With mem_dtype this is also a row size of another dtype: the options
                    // are checked first.
                    names_an_option += 1;
                    s.refused(
                        &bytes,
                        StateError::OtherOptions { saved },
                        &format!("{name} {wrong}"),
                    );
                } else {
                    s.refused(&bytes, StateError::BadHeader, &format!("{name} {wrong}"));
                }
            }
            let expected = match name {
                "same_length" => 1,
                "mem_init" => MemInit::ALL.len() - 1,
                "mem_dtype" => MemDtype::ALL.len() - 1,
                _ => PositionKeys::ALL.len() - 1,
            };
            assert_eq!(names_an_option, expected, "{name}: every other value tried");
        }
    }
}

/// Sets `word` to the `index`th of its kind; false if there is none.
fn set_word<T: OptionWord>(word: &mut T, index: u8) -> bool {
    match T::ALL.get(index as usize) {
        Some(&value) => {
            *word = value;
            true
        }
        None => false,
    }
}

/// `len` and `row_bytes` say where the rows end and the CRC is. With the CRC rewritten where
/// it was (the end of the bytes given) the state's own CRC check reads it from elsewhere; with
/// the bytes cut or padded to the declared length and the CRC rewritten there, only the checks
/// of the fields themselves are left.
#[test]
fn the_length_fields_damaged() {
    let image = image();
    let model = Model::parse(image.bytes()).unwrap();
    let n_layer = tiny_config().n_layer as usize;
    for &mem_dtype in MemDtype::ALL {
        let options = options_with(mem_dtype);
        let full = Saved::new(&model, options, &FULL);
        let partly = Saved::new(&model, options, &PARTLY);
        assert_eq!(partly.memory_len, 2);
        let row = row_bytes(&options) as u32;
        let mem_len = options.mem_len;

        // len above mem_len: a malformed header, before anything else is read.
        for s in [&full, &partly] {
            for wrong in [mem_len + 1, 1 << 16, u32::MAX] {
                let bytes = s.damaged(|b| put_u32(b, LEN, wrong));
                s.refused(&bytes, StateError::BadHeader, &format!("len {wrong}"));
            }
        }
        // More positions than the bytes hold (still within mem_len): truncated.
        for wrong in 3..=mem_len {
            let bytes = partly.damaged(|b| put_u32(b, LEN, wrong));
            let needed = declared_len(n_layer, wrong, row).unwrap();
            assert!(needed > bytes.len());
            partly.refused(
                &bytes,
                StateError::Truncated {
                    needed,
                    got: bytes.len(),
                },
                &format!("len {wrong} of 2"),
            );
        }
        // Fewer: the CRC is read from inside the rows.
        for wrong in 0..mem_len {
            let bytes = full.damaged(|b| put_u32(b, LEN, wrong));
            let crc_at = declared_len(n_layer, wrong, row).unwrap() - CRC_BYTES;
            full.refused(
                &bytes,
                Saved::checksum_error(&bytes, crc_at),
                &format!("len {wrong} of {mem_len}"),
            );
        }
        // Not detectable: fewer positions with the CRC rewritten where they end is a whole
        // state of its own, the first rows (each layer's keys, then values, of the positions
        // now counted) taken for that memory. It is restored as written.
        for wrong in 0..mem_len {
            let mut bytes = full.state.clone();
            put_u32(&mut bytes, LEN, wrong);
            bytes.truncate(declared_len(n_layer, wrong, row).unwrap());
            reseal(&mut bytes);
            full.accepted(&bytes, wrong as usize, &format!("len {wrong}, cut and resealed"));
        }

        // row_bytes: larger runs past the bytes (or past usize); smaller reads the CRC from
        // inside the rows.
        for s in [&full, &partly] {
            let len = s.memory_len as u32;
            for wrong in [row + 1, row * 2, 1 << 20, u32::MAX] {
                let bytes = s.damaged(|b| put_u32(b, ROW_BYTES, wrong));
                let expected = match declared_len(n_layer, len, wrong) {
                    Some(needed) => StateError::Truncated {
                        needed,
                        got: bytes.len(),
                    },
                    None => StateError::BadHeader,
                };
                s.refused(&bytes, expected, &format!("row_bytes {wrong}, {len} positions"));
            }
            for wrong in [0, 1, row - 4, row - 1] {
                let bytes = s.damaged(|b| put_u32(b, ROW_BYTES, wrong));
                let crc_at = declared_len(n_layer, len, wrong).unwrap() - CRC_BYTES;
                s.refused(
                    &bytes,
                    Saved::checksum_error(&bytes, crc_at),
                    &format!("row_bytes {wrong}, {len} positions"),
                );
            }
            // Cut or padded to the declared length and resealed there: past the CRC, the
            // image and the options, the row size of another dtype is a malformed header.
            for wrong in [0, 1, row - 4, row - 1, row + 1, row + 4, row * 2] {
                let mut bytes = s.state.clone();
                put_u32(&mut bytes, ROW_BYTES, wrong);
                bytes.resize(declared_len(n_layer, len, wrong).unwrap(), 0);
                reseal(&mut bytes);
                s.refused(
                    &bytes,
                    StateError::BadHeader,
                    &format!("row_bytes {wrong}, resealed, {len} positions"),
                );
            }
        }
        // An empty state's row_bytes is still checked, though it declares no rows.
        let empty = Saved::new(&model, options, &NOTHING);
        assert_eq!(empty.state.len(), ROWS + CRC_BYTES);
        for wrong in [0, row - 1, row + 1, u32::MAX] {
            let bytes = empty.damaged(|b| put_u32(b, ROW_BYTES, wrong));
            empty.refused(
                &bytes,
                StateError::BadHeader,
                &format!("empty state, row_bytes {wrong}"),
            );
        }
    }
}

/// The rows hold numbers, and every bit pattern is one: damage to them with the CRC rewritten
/// is not detectable. Each damaged row is restored as written (saving gives the damaged bytes
/// back, so it lands where it was saved from), and the next segments change.
#[test]
fn damaged_rows_are_taken_as_written() {
    let image = image();
    let model = Model::parse(image.bytes()).unwrap();
    let config = tiny_config();
    let n_layer = config.n_layer as usize;
    let n_head = config.n_head as usize;
    let width = (config.n_head * config.d_head) as usize;
    for &mem_dtype in MemDtype::ALL {
        let options = options_with(mem_dtype);
        let s = Saved::new(&model, options, &FULL);
        let row = row_bytes(&options);
        let rows = 2 * n_layer * s.memory_len;
        assert_eq!(s.state.len(), ROWS + rows * row + CRC_BYTES);
        // In each row, the first element and the last set to a NaN, an infinity or an
        // extreme value; an int8 row's first and last values, and its first and last scales
        // (NaN, a huge negative number). (offset in the row, bytes)
        let changes: Vec<(usize, Vec<u8>)> = match mem_dtype {
            MemDtype::F32 => vec![
                (0, f32::NAN.to_le_bytes().to_vec()),
                (row - 4, f32::INFINITY.to_le_bytes().to_vec()),
            ],
            MemDtype::F16 => vec![(0, vec![0x00, 0x7e]), (row - 2, vec![0x00, 0x7c])], // NaN, +inf
            MemDtype::Int8 => vec![
                (0, vec![0x80]),
                (width - 1, vec![0x7f]),
                (width, f32::NAN.to_le_bytes().to_vec()),
                (width + 4 * (n_head - 1), (-1.0e30f32).to_le_bytes().to_vec()),
            ],
        };
        for index in 0..rows {
            let (kind, layer, position) = (
                if index < rows / 2 { "key" } else { "value" },
                index % (rows / 2) / s.memory_len,
                index % s.memory_len,
            );
            for (offset, value) in &changes {
                let at = ROWS + index * row + offset;
                if s.state[at..at + value.len()] == value[..] {
                    continue;
                }
                let bytes = s.damaged(|b| b[at..at + value.len()].copy_from_slice(value));
                let what =
                    format!("{kind} row of layer {layer}, position {position}, byte {offset} = {value:02x?}");
                let after = s.accepted(&bytes, s.memory_len, &what);
                assert_ne!(
                    after, s.after,
                    "{mem_dtype:?} memory, {what}: the next segments did not change"
                );
            }
        }
    }
}

/// The CRC itself, bytes after the state, and the state cut at each field's boundary.
#[test]
fn the_crc_trailing_bytes_and_every_boundary() {
    let image = image();
    let model = Model::parse(image.bytes()).unwrap();
    for &mem_dtype in MemDtype::ALL {
        let options = options_with(mem_dtype);
        for before in EACH {
            let s = Saved::new(&model, options, before);
            let total = s.state.len();
            let crc_at = total - CRC_BYTES;

            // The CRC: any other value.
            let crc = get_u32(&s.state, crc_at);
            for wrong in [crc ^ 1, crc ^ 0x8000_0000, 0, !crc] {
                let mut bytes = s.state.clone();
                put_u32(&mut bytes, crc_at, wrong);
                s.refused(
                    &bytes,
                    StateError::BadChecksum {
                        stored: wrong,
                        computed: crc,
                    },
                    &format!("CRC {wrong:#x}"),
                );
            }

            // Bytes after the state are not read.
            for trailing in [&[0u8][..], &[0xff; 3], &s.state[..], b"TXLSTATE"] {
                let mut bytes = s.state.clone();
                bytes.extend_from_slice(trailing);
                with_session(&model, options, &[&[9, 9]], |session| {
                    assert_eq!(session.restore_state(&bytes), Ok(total));
                    assert_eq!(saved(session), s.state);
                    assert_eq!(run(session, &AFTER), s.after, "{mem_dtype:?}: trailing bytes");
                });
            }

            // Cut at each field's start, at each row's start, and one byte short of the end.
            let row = row_bytes(&options);
            let mut cuts = vec![
                0,
                MAGIC + 1,
                VERSION,
                IMAGE_CRC,
                IMAGE_BYTES,
                TGT_LEN,
                MEM_LEN,
                CLAMP_LEN,
                SAME_LENGTH,
                MEM_INIT,
                MEM_DTYPE,
                POSITION_KEYS,
                LEN,
                ROW_BYTES,
                ROWS,
                ROWS + 1,
                ROWS + CRC_BYTES - 1,
            ];
            cuts.extend((ROWS..crc_at).step_by(row));
            if mem_dtype == MemDtype::Int8 {
                // the scales of each row
                let width = (tiny_config().n_head * tiny_config().d_head) as usize;
                cuts.extend((ROWS + width..crc_at).step_by(row));
            }
            cuts.extend([crc_at, total - 1]);
            for cut in cuts.into_iter().filter(|&cut| cut < total) {
                let needed = if cut < ROWS + CRC_BYTES {
                    ROWS + CRC_BYTES
                } else {
                    total
                };
                s.refused(
                    &s.state[..cut],
                    StateError::Truncated { needed, got: cut },
                    &format!("cut to {cut} of {total} bytes"),
                );
            }
        }
    }
}

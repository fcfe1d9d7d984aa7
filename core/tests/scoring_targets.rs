//! Scoring asks each position for its next token's log-probability only
//! (`Session::forward_scoring`): an adaptive softmax then skips the tail clusters that token is
//! not in. The asked-for log-probabilities are the bits of the full rows, in every weight dtype
//! and for every number of positions a pass; a position without a target gets its full row; a
//! target that is not a token is refused before anything runs.

mod common;

use common::{arena, tiny_config, tiny_image, MatrixDtype};
use txl_core::kernels::MAX_POSITIONS_PER_PASS;
use txl_core::{scoring, Error, Model, Session, SessionOptions};

/// A session of `model` taking `positions` positions a pass, in `memory`.
fn session<'m, 'a>(
    model: &'m Model<'m>,
    options: SessionOptions,
    positions: usize,
    memory: &'a mut [u128],
) -> Session<'m, 'a> {
    let arena = bytemuck::cast_slice_mut(memory);
    Session::with_positions_per_pass(model, arena, options, positions).unwrap()
}

#[test]
fn a_target_s_log_probability_has_the_bits_of_the_full_row() {
    let config = tiny_config();
    let tokens: Vec<u32> = (0..if cfg!(miri) { 7 } else { 29 })
        .map(|t| (t * 7 + 3) % config.n_token)
        .collect();
    let weights_kinds: &[MatrixDtype] = if cfg!(miri) {
        &[MatrixDtype::Int8]
    } else {
        &[MatrixDtype::F32, MatrixDtype::F16, MatrixDtype::Int8]
    };
    for &weights in weights_kinds {
        let image = tiny_image(&config, weights, 5);
        let model = Model::parse(image.bytes()).unwrap();
        for tgt_len in [1u32, 6] {
            let options = SessionOptions {
                tgt_len,
                ..SessionOptions::from_config(&config)
            };
            for positions in [1, 2, 3, MAX_POSITIONS_PER_PASS] {
                let bytes = Session::arena_bytes_for_positions_per_pass(&model, &options, positions).unwrap();
                let (mut full_memory, mut scoring_memory) = (arena(bytes), arena(bytes));
                let mut full = session(&model, options, positions, &mut full_memory);
                let mut scored = session(&model, options, positions, &mut scoring_memory);
                let mut start = 0;
                for segment in tokens.chunks(tgt_len as usize) {
                    // every third position without a target: its full row
                    let targets: Vec<Option<u32>> = (start..start + segment.len())
                        .map(|p| tokens.get(p + 1).copied().filter(|_| p % 3 != 1))
                        .collect();
                    let mut rows: Vec<Vec<f32>> = Vec::new();
                    full.forward(segment, |_, row| rows.push(row.to_vec())).unwrap();
                    let mut seen = 0;
                    scored
                        .forward_scoring(segment, &targets, |i, row| {
                            seen += 1;
                            let what = format!(
                                "{weights:?}, tgt_len {tgt_len}, {positions} a pass, position {}",
                                start + i
                            );
                            match targets[i] {
                                Some(t) => assert_eq!(
                                    row[t as usize].to_bits(),
                                    rows[i][t as usize].to_bits(),
                                    "{what}: target {t}"
                                ),
                                None => {
                                    let bits = |r: &[f32]| r.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                                    assert_eq!(bits(row), bits(&rows[i]), "{what}: full row");
                                }
                            }
                        })
                        .unwrap();
                    assert_eq!(seen, segment.len());
                    start += segment.len();
                }
            }
        }
    }
}

#[test]
fn scoring_gives_the_log_probabilities_of_full_rows() {
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::F32, 9);
    let model = Model::parse(image.bytes()).unwrap();
    let tokens: Vec<u32> = (0..19).map(|t| (t * 11 + 5) % config.n_token).collect();
    let options = SessionOptions {
        tgt_len: 4,
        ..SessionOptions::from_config(&config)
    };
    // the full rows, through Session::forward
    let mut memory = arena(Session::arena_bytes(&model, &options).unwrap());
    let mut full = session(&model, options, 2, &mut memory);
    let mut want = Vec::new();
    let mut start = 0;
    for segment in tokens.chunks(4) {
        full.forward(segment, |i, row| {
            if let Some(&next) = tokens.get(start + i + 1) {
                want.push(row[next as usize].to_bits());
            }
        })
        .unwrap();
        start += segment.len();
    }
    for keep_rows in [0, 5] {
        let scores = scoring::score(&model, &tokens, options, keep_rows, |_| {}).unwrap();
        let got: Vec<u32> = scores.logp.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want, "keeping {keep_rows} rows");
        assert_eq!(scores.rows.len(), keep_rows * config.n_token as usize);
    }
}

#[test]
fn a_target_out_of_range_is_refused_before_anything_runs() {
    let config = tiny_config();
    let image = tiny_image(&config, MatrixDtype::F32, 3);
    let model = Model::parse(image.bytes()).unwrap();
    let options = SessionOptions::from_config(&config);
    let mut memory = arena(Session::arena_bytes(&model, &options).unwrap());
    let mut session = session(&model, options, 2, &mut memory);
    let result = session.forward_scoring(&[1, 2], &[Some(3), Some(config.n_token)], |_, _| {
        panic!("no row for a refused segment")
    });
    assert_eq!(
        result,
        Err(Error::TokenOutOfRange {
            token: config.n_token,
            n_token: config.n_token
        })
    );
    assert_eq!(session.memory_len(), 0, "the memory is as it was");
}

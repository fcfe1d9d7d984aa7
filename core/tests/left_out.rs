//! A build that leaves out a weight precision or memory dtype (`default-features = false` and
//! some of `weights-*`, `memory-*`) refuses the images and options that need it with
//! `Error::LeftOut`, naming the feature, and runs the rest. With the default features every
//! image and memory dtype runs. CI runs this file both ways (scripts/test.sh).

mod common;

use common::{tiny_config, tiny_image, MatrixDtype};
use txl_core::included;
use txl_core::{Error, MemDtype, Model, Session, SessionOptions};

#[test]
fn images_of_a_left_out_precision_are_refused_and_the_rest_run() {
    let config = tiny_config();
    let cases = [
        (MatrixDtype::F32, included::WEIGHTS_F32, "weights-f32"),
        (MatrixDtype::F16, included::WEIGHTS_F16, "weights-f16"),
        (MatrixDtype::Int8, included::WEIGHTS_INT8, "weights-int8"),
    ];
    for (dtype, built, feature) in cases {
        let image = tiny_image(&config, dtype, 7);
        match Model::parse(image.bytes()) {
            Ok(model) => {
                assert!(built, "{dtype:?}: parsed without feature `{feature}`");
                let options = SessionOptions::from_config(model.config());
                let mut arena = vec![0u128; Session::arena_bytes(&model, &options).unwrap() / 16];
                let memory = options.mem_dtype;
                match Session::new(&model, bytemuck::cast_slice_mut(&mut arena), options) {
                    Ok(mut session) => {
                        let mut rows = 0;
                        session
                            .forward(&[1, 2, 3], |_, row| {
                                rows += row.iter().all(|p| p.is_finite()) as usize
                            })
                            .unwrap();
                        assert_eq!(rows, 3, "{dtype:?}: finite log-probabilities for each position");
                    }
                    Err(error) => assert_eq!(
                        error,
                        Error::LeftOut("memory-f32"),
                        "{dtype:?}: a session with {memory:?} memory"
                    ),
                }
            }
            Err(error) => {
                assert!(!built, "{dtype:?}: refused although built: {error}");
                assert_eq!(error, Error::LeftOut(feature), "{dtype:?}");
            }
        }
    }
}

#[test]
fn sessions_with_a_left_out_memory_dtype_are_refused() {
    let config = tiny_config();
    let weights = [
        (MatrixDtype::F32, included::WEIGHTS_F32),
        (MatrixDtype::F16, included::WEIGHTS_F16),
        (MatrixDtype::Int8, included::WEIGHTS_INT8),
    ];
    let Some(&(dtype, _)) = weights.iter().find(|(_, built)| *built) else {
        unreachable!("a build has at least one of these precisions' images or fails to compile");
    };
    let image = tiny_image(&config, dtype, 3);
    let model = Model::parse(image.bytes()).unwrap();
    let cases = [
        (MemDtype::F32, included::MEMORY_F32, "memory-f32"),
        (MemDtype::F16, included::MEMORY_F16, "memory-f16"),
        (MemDtype::Int8, included::MEMORY_INT8, "memory-int8"),
    ];
    for (memory, built, feature) in cases {
        let options = SessionOptions {
            mem_dtype: memory,
            ..SessionOptions::from_config(model.config())
        };
        let mut arena = vec![0u128; Session::arena_bytes(&model, &options).unwrap() / 16];
        match Session::new(&model, bytemuck::cast_slice_mut(&mut arena), options) {
            Ok(mut session) => {
                assert!(built, "{memory:?}: a session without feature `{feature}`");
                session.forward(&[1, 2], |_, _| {}).unwrap();
            }
            Err(error) => {
                assert!(!built, "{memory:?}: refused although built: {error}");
                assert_eq!(error, Error::LeftOut(feature));
            }
        }
    }
}

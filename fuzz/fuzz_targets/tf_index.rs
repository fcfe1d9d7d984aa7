//! The TensorFlow checkpoint reader on an arbitrary `.index` file: the LevelDB table (footer,
//! block handles, CRC32C trailers, Snappy blocks, prefix-compressed entries, restart arrays),
//! the `BundleHeaderProto` and each `BundleEntryProto`, then the original code's names and
//! shapes to a config. Errors are fine, panics are not; an index that gives a config gives a
//! valid one, and reading its tensors (there is no data shard) is an error, not a panic.
//!
//! Every block trailer ends in a masked CRC32C, which most mutations would break: the target
//! reseals the blocks first (`table::reseal`), so edits reach the decoders behind the
//! checksums (the refusal of a wrong CRC is tested by `table`'s unit tests and
//! `tools/tests/tf_checkpoints.rs`). Seeds: the fixtures' indexes (`fuzz/corpus/tf_index/`).

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use txl_tools::checkpoint::tf::{names, table, Bundle, EvalSettings, TfOptions};

fuzz_target!(|data: &[u8]| {
    let mut index = data.to_vec();
    table::reseal(&mut index);
    let prefix = Path::new("/nonexistent-txl-fuzz/model.ckpt-0");
    let Ok(mut bundle) = Bundle::from_index(prefix, &index) else {
        return;
    };
    let defaults = EvalSettings::for_dataset(None);
    let Ok((config, layout)) = names::infer_config(&bundle, None, &TfOptions::default(), defaults) else {
        return;
    };
    assert!(
        config.validate().is_ok(),
        "an accepted index gave an invalid config"
    );
    assert!(names::read_tensors(&config, &layout, &mut bundle, false).is_err());
});

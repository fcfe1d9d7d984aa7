//! The TensorFlow checkpoint reader on an arbitrary `.index` file: the LevelDB table (footer,
//! block handles, CRC32C trailers, Snappy blocks, prefix-compressed entries, restart arrays),
//! the `BundleHeaderProto` and each `BundleEntryProto`, then the original code's names and
//! shapes to a config. Errors are fine, panics are not; an index that gives a config gives a
//! valid one, and reading its tensors (there is no data shard) is an error, not a panic.
//!
//! The last 4 bytes of every block trailer are a masked CRC32C, so most mutations stop there;
//! the seeds (the fixtures' indexes, `fuzz/corpus/tf_index/`) reach the decoders behind it.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use txl_tools::checkpoint::tf::{names, Bundle, EvalSettings, TfOptions};

fuzz_target!(|data: &[u8]| {
    let prefix = Path::new("/nonexistent-txl-fuzz/model.ckpt-0");
    let Ok(mut bundle) = Bundle::from_index(prefix, data) else {
        return;
    };
    let defaults = EvalSettings::for_dataset(None);
    let Ok((config, layout)) = names::infer_config(&bundle, None, &TfOptions::default(), defaults) else {
        return;
    };
    assert!(config.validate().is_ok(), "an accepted index gave an invalid config");
    assert!(names::read_tensors(&config, &layout, &mut bundle, false).is_err());
});

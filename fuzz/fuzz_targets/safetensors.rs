//! The checkpoint reader on an arbitrary `model.safetensors` next to a fixed, valid
//! `config.json` (`txl_fuzz::CHECKPOINT_CONFIG`): errors are fine, panics are not, and a
//! checkpoint that loads must make a valid image.

#![no_main]

use libfuzzer_sys::fuzz_target;
use txl_tools::checkpoint::{CheckpointFormat, SAFETENSORS_FILE};

fuzz_target!(|data: &[u8]| {
    txl_fuzz::load_checkpoint(
        "safetensors",
        SAFETENSORS_FILE,
        CheckpointFormat::Safetensors,
        data,
    );
});

//! The checkpoint reader on an arbitrary `pytorch_model.bin` (a ZIP archive holding a pickle,
//! or a legacy pickle stream) next to a fixed, valid `config.json`
//! (`txl_fuzz::CHECKPOINT_CONFIG`): errors are fine, panics are not, and a checkpoint that
//! loads must make a valid image.

#![no_main]

use libfuzzer_sys::fuzz_target;
use txl_tools::checkpoint::{CheckpointFormat, PYTORCH_BIN_FILE};

fuzz_target!(|data: &[u8]| {
    txl_fuzz::load_checkpoint("torch", PYTORCH_BIN_FILE, CheckpointFormat::PytorchBin, data);
});

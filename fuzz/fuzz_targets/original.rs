//! The reader of the original training code's checkpoints on an arbitrary `model.pt` with no
//! `config.json` beside it (a whole pickled `MemTransformerLM`, in a ZIP archive or a legacy
//! stream, or a `state_dict`): the pickle is walked as data against an allow-list of classes.
//! Errors are fine, panics are not, and a checkpoint that loads must make a valid image.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    txl_fuzz::load_original_checkpoint(data);
});

//! `parse_hf_config` on arbitrary text. A config it accepts must be one the core accepts too,
//! and sizing a session for it must not panic (it may fail: the sizes can be huge).

#![no_main]

use libfuzzer_sys::fuzz_target;
use txl_core::arena::ArenaLayout;
use txl_core::image::Arithmetic;
use txl_core::SessionOptions;
use txl_tools::checkpoint::parse_hf_config;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(config) = parse_hf_config(&text) else {
        return;
    };
    assert_eq!(config.validate(), Ok(()));
    let options = SessionOptions::from_config(&config);
    for arithmetic in [Arithmetic::Float, Arithmetic::Integer { frac: 16 }] {
        if let Ok(layout) = ArenaLayout::new(&config, arithmetic, &options) {
            let _ = layout.total_bytes();
        }
    }
});

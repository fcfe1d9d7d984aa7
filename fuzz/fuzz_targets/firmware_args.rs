//! The firmware's command-line grammar (`firmware/src/cmdline.rs`, compiled here on the host)
//! on arbitrary arguments: the input is the words separated by NUL bytes, each word UTF-8 or
//! not. Errors are fine, panics are not; a command line it accepts keeps the documented
//! bounds (a prompt of at most `MAX_PROMPT` bytes, a finite temperature `>= 0`).

#![no_main]

#[allow(dead_code)]
#[path = "../../firmware/src/cmdline.rs"]
mod cmdline;

use libfuzzer_sys::fuzz_target;
use txl_core::SessionOptions;

fuzz_target!(|data: &[u8]| {
    let defaults = SessionOptions::from_config(&txl_fuzz::tiny_config());
    let words = data.split(|&b| b == 0).map(core::str::from_utf8);
    let Ok(cli) = cmdline::parse(words, defaults) else {
        return;
    };
    assert!(cli.demo.prompt.len() <= cmdline::MAX_PROMPT);
    assert!(cli.demo.temperature.is_finite() && cli.demo.temperature >= 0.0);
    let options = cli.options();
    assert_eq!(options.mem_dtype, defaults.mem_dtype);
    assert_eq!(options.position_keys, defaults.position_keys);
});

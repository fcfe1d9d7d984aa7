//! The command line, read through semihosting and parsed by [`cmdline`] (which documents the
//! words).
//!
//! The session options default to the build-time ones (`TXL_TGT_LEN`, ...). The static arena is
//! sized for those; other options need `--arena heap` unless their arena is no larger.

// The grammar lives in its own file, free of the board, so the host can compile it alone (the
// fuzz target `firmware_args` does).
#[path = "cmdline.rs"]
mod cmdline;

pub use cmdline::{ArenaSource, Cli, DemoArgs, Mode, MAX_PROMPT};

use crate::{build, Failure};

/// Bytes of the semihosting command line the firmware reads.
const CMDLINE_BYTES: usize = 1024;

/// Reads the semihosting command line (argument 0 is the program name). No command line (a
/// debugger that gives none) means the defaults.
pub fn parse() -> Result<Cli, Failure> {
    let Ok(args) = semihosting::experimental::env::args::<CMDLINE_BYTES>() else {
        return Ok(Cli::new(build::OPTIONS));
    };
    cmdline::parse((&args).skip(1), build::OPTIONS).map_err(Failure::Args)
}

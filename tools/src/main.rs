//! `txl`: convert Transformer-XL checkpoints to txl model images, and run them.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use txl_tools::cli::{is_broken_pipe, Cli};

fn main() -> ExitCode {
    let mut out = std::io::stdout().lock();
    let result = Cli::parse().run(&mut out).and_then(|()| Ok(out.flush()?));
    match result {
        Err(error) if !is_broken_pipe(&error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

//! Host-side tools for txl: checkpoint conversion, comparison, generation, token files, and
//! (feature `cli`, the default) the `txl` command itself, in [`cli`].
//!
//! The `txl` binary is a thin face over [`cli::Cli`]: it parses the arguments, runs the
//! subcommand with stdout as its output, and turns an error into `error: ...` and exit status 1.
//! Without `cli`, the crate is the checkpoint reader and the file formats, with no argument
//! parser and no reference (what the firmware's build script needs).

#[cfg(feature = "cli")]
pub mod cli;

pub mod checkpoint;
pub mod compare;
pub mod generate;
pub mod image_file;
pub mod npy;
pub mod tokens;
pub mod vocab;

//! Host-side tools for txl: checkpoint conversion, comparison, generation, token files.
//! The `txl` binary is a thin command-line face over these modules.

pub mod checkpoint;
pub mod compare;
pub mod generate;
pub mod image_file;
pub mod npy;
pub mod tokens;

//! Host-side tools for txl: checkpoint conversion, scoring, generation, inspection.
//! The `txl` binary is a thin command-line face over these modules.

pub mod checkpoint;
pub mod compare;
pub mod generate;
pub mod model_file;
pub mod npy;
pub mod quantize;
pub mod scoring;

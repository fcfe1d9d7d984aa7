//! Numeric kernels. `scalar` is the reference every faster kernel must match.
//!
//! Each kernel states its shapes: `W (rows, cols) @ x (cols) -> y (rows)`. Slices are taken
//! at the lengths the shapes say; callers pass buffers of exactly those lengths.

pub mod scalar;

pub use scalar::*;

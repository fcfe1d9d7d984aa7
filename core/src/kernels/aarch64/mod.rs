//! aarch64 kernels: NEON in every build, `SDOT` where [`features`](super::features) finds it
//! (feature `std`). Each gives the portable kernels' bits.

pub mod neon;

//! RISC-V kernels, chosen at compile time (`target_arch = "riscv32"`, no cargo feature: every
//! RV32 core with the `M` extension runs them). Each gives the portable kernels' bits. The
//! host's unit tests compile them too and compare them with the portable kernels.
//!
//! - `rv32.rs`: RV32IM, no SIMD: int8 rows several at a time, each loaded input byte shared by
//!   all of them (`LB`, `MUL`, `ADD`); the int8 attention's query · key and probability ·
//!   value sums the same way; int4 rows two products a `MUL`.

pub mod rv32;
